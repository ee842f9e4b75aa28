"""Python operators and torch idioms that dtriton algorithms do not have: each raises an
:class:`~dtriton.errors.AlgorithmError` at definition saying what to write instead (``@``, ``<<``,
``>>``, ``^``, and torch's tensor methods such as ``X[i].exp()``)."""

from __future__ import annotations

from ..errors import AlgorithmError, MethodError

__all__ = ["METHOD_FIXES", "method_error", "no_operator", "no_xor"]

#: torch tensor methods a user may call on an expression -> what to write in an algorithm
METHOD_FIXES = {**{f: "dt.{name}(x)" for f in ("exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs")},
              **{f: "dt.{name}(x, over=axis)" for f in ("sum", "mean", "max", "min", "prod", "argmax", "argmin")},
              "amax": "dt.max(x, over=axis)", "amin": "dt.min(x, over=axis)",
              **{f: "dt.cast(x, torch.<dtype>) (torch.float32, torch.int64, ...)"
                 for f in ("float", "half", "double", "bfloat16", "int", "long", "bool", "to", "type")},
              "clamp": "dt.maximum(dt.minimum(x, hi), lo)", "clip": "dt.maximum(dt.minimum(x, hi), lo)",
              "relu": "dt.maximum(x, 0.0) (or dt.where(x <= 0, 0.0, x), torch's gradient at 0)",
              "pow": "x ** p", "square": "x * x", "neg": "-x",
              **{f: "no .{name}: an expression has no values, shape or dtype while the algorithm is traced (sizes "
                    "are the dims' symbols; an int argument gives a number)"
                 for f in ("item", "tolist", "numpy", "shape", "size", "dim", "ndim", "dtype")}}


def no_operator(sym: str, fix: str):
    """An operator the language does not have (``@``, ``<<``, ``>>``): the error says what to write."""
    raise AlgorithmError(f"'{sym}' is not an operation of dtriton algorithms; {fix}")


def method_error(name: str) -> MethodError | None:
    """The error for torch's tensor method ``name`` called on an expression (``X[i].exp()``), or
    None when ``name`` is no such method."""
    fix = METHOD_FIXES.get(name)
    if fix is None:
        return None
    if fix.startswith("no ."):
        return MethodError(f"x.{name}: {fix.split(': ', 1)[1]}")
    return MethodError(f"x.{name}(...) is torch's tensor method; a dtriton expression has no methods: write "
                       f"{fix.format(name=name)}")


def no_xor(a, b):
    """``a ^ b`` in an algorithm: not an operation of the language; the error says what to write."""
    raise AlgorithmError(f"{a!r} ^ {b!r}: '^' (exclusive or) is not supported in dtriton algorithms; for bool "
                      "values write (a != b), which is torch's a ^ b on bools; integer bitwise xor has no "
                      "dtriton operation")
