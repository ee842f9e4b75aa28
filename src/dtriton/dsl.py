"""The user-facing builders of the algorithm language: index notation over named axes.

An *algorithm* says what each output element is, nothing about how it is computed::

    @dt.algorithm
    def matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
        i, j, k = dt.axes("i j k")
        return dt.sum(A[i, k] * B[k, j], over=k)[i, j]

The decorated function is run once, on symbolic inputs, to build an expression graph (the IR,
:mod:`dtriton.ir`). Expressions broadcast by axis *name*: ``A[i, k] * B[k, j]`` has the free axes
``{i, j, k}``; ``dt.sum(..., over=k)`` removes ``k``. Indexing an expression by axes (``C[i, j]``)
fixes an output's layout. Every reduction and every output is a *stage* that a schedule can
address by name.

Several builders (``sum``, ``max``, ``min``, ``abs``) shadow Python builtins: they live only
here, and no compiler module imports this one.
"""

from __future__ import annotations

import os
import types
from typing import Callable

import torch

from .errors import AlgorithmError
from .ir import (Algorithm, Axis, Binary, Cast, Combiner, Expr, InputTensor, Reduce, TensorAnnotation, Unary, Where,
                 as_expr, attach_requires, get_combiner)

__all__ = [
    "Axis", "axes", "Tensor", "Expr", "algorithm", "Algorithm", "requires",
    "sum", "max", "min", "mean", "prod", "argmax", "argmin", "where", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid",
    "abs", "maximum", "minimum", "cast", "reduce", "pad",
]


def axes(names: str) -> "Axis | tuple[Axis, ...]":
    """``i, j, k = dt.axes("i j k")``: make named axes. Names are separated by spaces or commas;
    several names give a tuple of axes, one name the axis itself (``i = dt.axes("i")``, then
    ``X.pad(0.0)[i + 1]``), which also unpacks as a 1-tuple, so ``i, = dt.axes("i")`` gives the
    same axis (``dt.axes("i")[0]`` and ``len(...)`` too). An axis takes the size of the
    dims it indexes; ``"d:N"`` gives it the size symbol ``N`` explicitly, for an axis used only
    inside index expressions (``X[i, d + half]``); the symbol is a dim of an input or an ``int``
    argument of the algorithm. Raises :class:`AlgorithmError` for a name that is not an identifier,
    a name given twice, an empty size (``"i:"``) and for a number as the size (``"r:3"``: the message
    says how to pass it as an int argument)."""
    if not isinstance(names, str):
        raise AlgorithmError(f"dt.axes takes one string of axis names, e.g. dt.axes('i j k'), got "
                             f"{type(names).__name__} {names!r}")
    parts = [p for p in names.replace(",", " ").split() if p]
    if not parts:
        raise AlgorithmError("dt.axes() needs at least one name, e.g. dt.axes('i j k')")
    seen = [p.partition(":")[0] for p in parts]
    twice = [n for k, n in enumerate(seen) if n in seen[:k]]
    if twice:
        raise AlgorithmError(f"dt.axes({names!r}) names axis {twice[0]!r} twice; each name makes one axis, so give "
                             f"each a name of its own (e.g. dt.axes('{twice[0]} {twice[0]}2')), or reuse the one "
                             f"axis where both places should range together")
    out = []
    for p in parts:
        name, colon, size = p.partition(":")
        if colon and not name:
            raise AlgorithmError(f"dt.axes({names!r}): {p!r} has no axis name before the ':'; write the name and its "
                                 f"size together, dt.axes('i{p}') (no space around the ':')")
        if colon and not size:
            raise AlgorithmError(
                f"dt.axes({names!r}): axis {name!r} is followed by ':' but no size name; write "
                f"dt.axes('{name}:N') with N a dim of an input or an int argument of the algorithm, or "
                f"dt.axes('{name}') to take the size of the dims it indexes")
        if size.lstrip("+-").isdigit():
            raise AlgorithmError(
                f"dt.axes({names!r}): axis {name!r} has the size {size}, a number; a size is a name: a dim of an "
                f"input or an int argument of the algorithm. For a fixed size add an argument 'R: int' to the "
                f"function, write dt.axes('{name}:R') and pass R={size} in the call (each value is compiled as "
                f"its own specialisation, as a shape is)")
        out.append(Axis(name, size or None))
    return out[0] if len(out) == 1 else tuple(out)


def pad(x, value: float):
    """``dt.pad(X, value)[i, j + 1]``: tensor ``X`` read with ``value`` wherever an index falls
    outside its dims (the same as ``X.pad(value)``). Raises :class:`AlgorithmError` when ``X`` is
    not a tensor argument or ``value`` not a Python number."""
    if not isinstance(x, InputTensor):
        raise AlgorithmError(f"dt.pad pads a tensor argument of the algorithm, got {type(x).__name__}; pad the "
                             f"tensor before indexing it: dt.pad(X, 0.0)[i, j + 1]")
    return x.pad(value)


class _TensorFactory:
    """``dt.Tensor["M", "K"]``: the annotation of a tensor argument, dims named by size symbols."""

    def __getitem__(self, dims) -> TensorAnnotation:
        dims = dims if isinstance(dims, tuple) else (dims,)
        return TensorAnnotation(tuple(dims))


Tensor = _TensorFactory()


def algorithm(fn: Callable) -> Algorithm:
    """Decorator: trace ``fn`` into an :class:`Algorithm`.

    Arguments are annotated ``dt.Tensor["M", "K"]`` (dims named by size symbols; one name means
    one size, checked at call time) or ``float``/``int`` (scalars). The body indexes tensors with
    axes from :func:`axes` and returns outputs with a layout (``C[i, j]``) or a tuple of them.

    Raises :class:`AlgorithmError` for malformed programs (an axis indexing two differently named
    dims, an output with a free axis missing from its layout, a reduction over an unused axis). Its
    traceback keeps the user's frames only (the decorated line and the line of ``fn`` at fault);
    ``DTRITON_FULL_TRACEBACKS=1`` keeps dtriton's own frames too."""
    try:
        return Algorithm(fn)
    except AlgorithmError as e:
        if os.environ.get("DTRITON_FULL_TRACEBACKS") == "1":
            raise
        raise e.with_traceback(_user_frames(e.__traceback__)) from e.__cause__


def requires(*conds: "str | tuple[str, str]") -> Callable[[Algorithm], Algorithm]:
    """Decorator over ``@dt.algorithm``: constraints its arguments must meet, checked at each call
    before anything is planned or run::

        @dt.requires("stride >= 1", "padding >= 0",
                     ("Ho == (H + 2 * padding - R) // stride + 1", "torch's output size"))
        @dt.algorithm
        def conv(X: dt.Tensor["N", "H"], Wt: dt.Tensor["R"], stride: int, padding: int, Ho: int): ...

    Each constraint is a Python comparison (a string) over the scalar arguments, the size symbols of
    the tensor dims and ``max``/``min``/``abs``, or a ``(comparison, hint)`` pair whose hint the
    error adds. They are checked in order (a later one may divide by an argument an earlier one
    proved positive); a call that breaks one raises :class:`~dtriton.errors.ShapeError` naming the
    argument, its value and what was expected (``"conv: argument 'stride' must be >= 1, got 0"``).
    Raises :class:`AlgorithmError` at decoration for a constraint that is not a comparison or names
    anything else."""
    def deco(alg: Algorithm) -> Algorithm:
        if not isinstance(alg, Algorithm):
            raise AlgorithmError(f"dt.requires decorates an algorithm: put it above @dt.algorithm, got "
                                 f"{type(alg).__name__}")
        attach_requires(alg, conds)
        return alg
    return deco


_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _user_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The entries of traceback ``tb`` outside the dtriton package, in order."""
    kept = []
    while tb is not None:
        if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


# ----------------------------------------------------------------------------------------------
# reductions
# ----------------------------------------------------------------------------------------------
def _over(over) -> tuple[str, ...]:
    if isinstance(over, Axis):
        return (over.name,)
    if isinstance(over, str):
        return tuple(over.replace(",", " ").split())
    if isinstance(over, (tuple, list)) and over and all(isinstance(a, Axis) for a in over):
        return tuple(a.name for a in over)
    raise AlgorithmError(f"over= takes an axis or a tuple of axes, got {over!r}")


def reduce(x, over, combiner: "str | Combiner", name: str | None = None) -> Expr:
    """Reduction of ``x`` over ``over`` (an axis or tuple of axes) with a combiner (a
    :class:`~dtriton.ir.Combiner` or a registered name such as ``"sum"``). A reduction stage.
    Raises :class:`AlgorithmError` for an axis named twice in ``over``."""
    c = combiner if isinstance(combiner, Combiner) else get_combiner(combiner)
    axes_ = _over(over)
    twice = [a for k, a in enumerate(axes_) if a in axes_[:k]]
    if twice:
        raise AlgorithmError(f"dt.{c.name}(..., over={axes_}) names axis {twice[0]!r} twice; a reduction covers each "
                             f"axis once: over={tuple(dict.fromkeys(axes_))}")
    if c.results == 2 and len(axes_) != 1:
        raise AlgorithmError(f"dt.{c.name} reduces over exactly one axis (its result is an index along it), "
                             f"got over={axes_}")
    return Reduce(c, as_expr(x), axes_, name)


def sum(x, over, name: str | None = None) -> Expr:  # noqa: A001 - the DSL's sum
    """Sum of ``x`` over the axes ``over`` (an axis or tuple of axes). A reduction stage; of
    integers or bools it is int64 (as ``torch.sum``), folded exactly in int64; 0 over an empty axis."""
    return reduce(x, over, "sum", name)


def max(x, over, name: str | None = None) -> Expr:  # noqa: A001
    """Maximum over ``over``; NaN propagates as in ``torch.amax``, and so does the gradient: split
    evenly among tied maxima (``torch.max(x, dim)`` and ``max_pool2d`` give it all to one), NaN for the
    whole slice where the slice holds a NaN (torch.amax's 0 / 0). A
    reduction stage, of the operand's dtype (integers exact). Over an axis of size 0 a call raises
    :class:`~dtriton.errors.ShapeError` naming the stage and the axis, as ``torch.amax`` raises."""
    return reduce(x, over, "max", name)


def min(x, over, name: str | None = None) -> Expr:  # noqa: A001
    """Minimum over ``over``; NaN propagates as in ``torch.amin``. A reduction stage, of the
    operand's dtype (integers exact). Over an axis of size 0 a call raises
    :class:`~dtriton.errors.ShapeError`, as ``torch.amin`` raises."""
    return reduce(x, over, "min", name)


def mean(x, over, name: str | None = None) -> Expr:
    """Mean over ``over``: the sum divided by the true extent (padding never counts; NaN over an
    empty axis, as ``torch.mean``). Of
    integers it is float32 (``torch.mean`` refuses them), summed in the compute dtype: float64
    with a float64 input or ``acc_dtype="float64"``, else float32."""
    return reduce(x, over, "mean", name)


def prod(x, over, name: str | None = None) -> Expr:
    """Product over ``over`` (as ``torch.prod``; 1 over an empty extent; of integers int64, exact,
    wrapping on overflow as torch's). A reduction stage; split
    across programs, its partial products are combined from per-split buffers."""
    return reduce(x, over, "prod", name)


def argmax(x, over, name: str | None = None) -> Expr:
    """The index along the one axis ``over`` of the largest value (as ``torch.argmax``: ties go to
    the first index, NaN counts as the largest; an empty axis raises ShapeError). An output of it is ``torch.int64``; used in an
    expression it is an integer (e.g. a gather index, ``X[i, dt.argmax(S[i, j], over=j)]``)."""
    return reduce(x, over, "argmax", name)


def argmin(x, over, name: str | None = None) -> Expr:
    """The index along the one axis ``over`` of the smallest value (as ``torch.argmin``: ties go
    to the first index, NaN counts as the smallest). An output of it is ``torch.int64``."""
    return reduce(x, over, "argmin", name)


# ----------------------------------------------------------------------------------------------
# elementwise
# ----------------------------------------------------------------------------------------------
def where(cond, a, b) -> Expr:
    """Elementwise select: ``a`` where ``cond`` is true, else ``b`` (like ``torch.where``)."""
    return Where(as_expr(cond), as_expr(a), as_expr(b))


def _unary(op):
    def f(x):
        return Unary(op, as_expr(x))
    f.__name__ = op
    f.__doc__ = f"Elementwise ``{op}`` (as torch.{op})."
    return f


exp, log, sqrt, rsqrt, tanh, sigmoid = (_unary(o) for o in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid"))
abs = _unary("abs")  # noqa: A001


def maximum(a, b) -> Expr:
    """Elementwise maximum, as ``torch.maximum``: NaN propagates, and at a tie ``dt.grad`` gives each
    side half the gradient (``dt.maximum(x, 0.0)`` at ``x == 0``: 0.5; ``F.relu`` gives 0 there and
    ``torch.clamp(x, min=0)`` 1), with a NaN on either side both get all of it. ``dt.where(x <= 0,
    0.0, x)`` is ``F.relu``, gradient and NaN included."""
    return Binary("maximum", as_expr(a), as_expr(b))


def minimum(a, b) -> Expr:
    """Elementwise minimum, as ``torch.minimum``: NaN propagates; a tie splits the gradient in halves,
    a NaN gives both sides all of it."""
    return Binary("minimum", as_expr(a), as_expr(b))


def cast(x, dtype: torch.dtype, saturate: bool = False) -> Expr:
    """Cast to ``dtype`` (a torch dtype), rounding as torch's ``.to(dtype)`` does. fp8 dtypes
    (``torch.float8_e4m3fn``, ``torch.float8_e5m2``) are storage types: an fp8 output keeps them,
    arithmetic on them is float32.

    ``saturate=True`` (for int8, uint8, int16, int32, float16, bfloat16 and the fp8 dtypes): round
    to nearest, ties to even, and clamp to the dtype's finite range, e.g. ``dt.cast(x / s,
    torch.int8, saturate=True)`` is ``(x / s).round().clamp(-128, 127)``. NaN stays NaN for a
    float dtype and becomes 0 for an integer one; infinities clamp to the largest values. Raises
    :class:`AlgorithmError` for a non-torch dtype or a saturating cast to another dtype."""
    if not isinstance(dtype, torch.dtype):
        raise AlgorithmError(f"dt.cast needs a torch dtype such as torch.float16, got {dtype!r}")
    return Cast(as_expr(x), dtype, saturate)
