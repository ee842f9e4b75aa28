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


def check_int_literal(v: int) -> None:
    """Refuse an int literal outside int64 (``X[i] + 2**70``: torch raises "int too big to convert")
    or not exact in a float64 (``2**63 - 1``: dtriton holds literals as doubles), with an
    :class:`AlgorithmError` naming it and the fix."""
    if not -2 ** 63 <= v < 2 ** 63:
        raise AlgorithmError(f"the integer literal {v} is outside int64 (-2**63 to 2**63 - 1), where kernels and "
                             f"the reference compute integers, and torch raises \"int too big to convert\" for it "
                             f"too; write it as a float ({float(v)!r}) or use a smaller value")
    if int(float(v)) != v:   # (past 2**53 only some integers are exact in a double)
        raise AlgorithmError(f"the integer literal {v} is past 2**53 and not exact in a float64, in which dtriton "
                             f"holds literals (it would be {int(float(v))}); pass it as an int argument of the "
                             f"algorithm (exact in int64), or use a value a float64 holds")


def reduced_output_axis(expr, names: list[str]) -> None:
    """Where an output layout ``names`` of ``expr`` (which leaves some axis free) names an axis that a
    reduction inside ``expr`` reduces over (``dt.sum(X[i, j], over=i)[i]``), an
    :class:`AlgorithmError` saying so and naming the free axes to index by; else nothing."""
    want = [a for a in names if a not in expr.axes]
    seen: set[int] = set()
    stack = [expr]
    while stack and want:
        n = stack.pop()
        if n.uid in seen:
            continue
        seen.add(n.uid)
        hit = [a for a in want if a in (getattr(n, "over", None) or ())]
        if hit:
            a, free = hit[0], list(expr.axes)
            raise AlgorithmError(
                f"output [{', '.join(names)}]: axis {a} is reduced by dt.{n.combiner.name}(..., over={a}) inside the "
                f"expression, so it cannot index the output (its value does not depend on {a}); the expression's "
                f"free axes are {free}: index it [{', '.join(free)}], or reduce over another axis")
        stack.extend(n.children())
