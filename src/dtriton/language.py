"""The algorithm language: index notation over named axes.

An *algorithm* says what each output element is, nothing about how it is computed::

    @dt.algorithm
    def matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
        i, j, k = dt.axes("i j k")
        return dt.sum(A[i, k] * B[k, j], over=k)[i, j]

The decorated function is run once, on symbolic inputs, to build an expression graph (the IR).
Expressions broadcast by axis *name*: ``A[i, k] * B[k, j]`` has the free axes ``{i, j, k}``;
``dt.sum(..., over=k)`` removes ``k``. Indexing an expression by axes (``C[i, j]``) fixes an
output's layout. Every reduction and every output is a *stage* that a schedule can address by name.

This module is the bottom layer: it imports nothing else from dtriton except errors, and holds the
reference evaluator (:meth:`Algorithm.reference`), the eager-torch oracle for every test.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch

from .errors import AlgorithmError, ShapeError

__all__ = [
    "Axis", "axes", "Tensor", "Expr", "algorithm", "Algorithm",
    "sum", "max", "min", "mean", "where", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid",
    "abs", "maximum", "minimum", "cast",
]

_py_sum, _py_max, _py_min, _py_abs = sum, max, min, abs

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INDEX_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


# ----------------------------------------------------------------------------------------------
# expression nodes
# ----------------------------------------------------------------------------------------------
class Expr:
    """A node of the expression graph. Free axes are exposed as ``expr.axes`` (a tuple of names,
    in first-appearance order). Operators build new nodes; comparisons return boolean nodes."""

    __slots__ = ("axes", "_id", "__weakref__")
    _counter = itertools.count()

    def __init__(self, axes: Iterable[str]):
        self.axes = tuple(dict.fromkeys(axes))
        self._id = next(Expr._counter)

    # identity-based hashing so nodes can be dict keys; == builds a comparison node
    def __hash__(self):
        return self._id

    def children(self) -> tuple["Expr", ...]:
        return ()

    # arithmetic ------------------------------------------------------------------------------
    def __add__(self, o): return Binary("add", self, _wrap(o))
    def __radd__(self, o): return Binary("add", _wrap(o), self)
    def __sub__(self, o): return Binary("sub", self, _wrap(o))
    def __rsub__(self, o): return Binary("sub", _wrap(o), self)
    def __mul__(self, o): return Binary("mul", self, _wrap(o))
    def __rmul__(self, o): return Binary("mul", _wrap(o), self)
    def __truediv__(self, o): return Binary("div", self, _wrap(o))
    def __rtruediv__(self, o): return Binary("div", _wrap(o), self)
    def __pow__(self, o):
        """``x ** n``: repeated products for small integer n (negative x allowed, as torch),
        ``sqrt`` for 0.5, else ``exp(n * log(x))`` (x > 0)."""
        if isinstance(o, (int, float)) and float(o).is_integer() and 0 < _py_abs(o) <= 8:
            n = int(_py_abs(o))
            r = self
            for _ in range(n - 1):
                r = Binary("mul", r, self)
            return r if o > 0 else Binary("div", Const(1.0), r)
        if isinstance(o, (int, float)) and float(o) == 0.0:
            return Where(Binary("eq", self, self), Const(1.0), Const(1.0))  # 1 everywhere, NaN too
        if isinstance(o, (int, float)) and float(o) == 0.5:
            return Unary("sqrt", self)
        return Unary("exp", Binary("mul", _wrap(o), Unary("log", self)))
    def __neg__(self): return Unary("neg", self)
    def __pos__(self): return self
    def __abs__(self): return Unary("abs", self)
    def __lt__(self, o): return Binary("lt", self, _wrap(o))
    def __le__(self, o): return Binary("le", self, _wrap(o))
    def __gt__(self, o): return Binary("gt", self, _wrap(o))
    def __ge__(self, o): return Binary("ge", self, _wrap(o))
    def __eq__(self, o): return Binary("eq", self, _wrap(o))  # type: ignore[override]
    def __ne__(self, o): return Binary("ne", self, _wrap(o))  # type: ignore[override]
    def __and__(self, o): return Binary("and", self, _wrap(o))
    def __or__(self, o): return Binary("or", self, _wrap(o))
    def __invert__(self): return Unary("not", self)

    def __floordiv__(self, o):
        raise AlgorithmError("integer division (//) is not supported on expressions; use / and dt.cast, "
                             "or compute the index outside the algorithm")

    __rfloordiv__ = __floordiv__

    def __float__(self):
        raise AlgorithmError("a dtriton expression is not a Python number: use dt.exp, dt.log, dt.sqrt, dt.tanh, "
                             "... instead of math.* functions inside an algorithm")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        raise AlgorithmError(
            f"torch.{name} cannot take a dtriton expression; inside an algorithm use the dt.* functions "
            f"(dt.exp, dt.log, dt.sqrt, dt.rsqrt, dt.tanh, dt.sigmoid, dt.abs, dt.maximum, dt.minimum, dt.where, "
            f"dt.sum/max/min/mean)")

    def __repr__(self):
        return f"<dt expression {_fmt_expr(self)} over axes ({', '.join(self.axes)})>"

    def __bool__(self):
        raise AlgorithmError(
            "an expression has no truth value while the algorithm is traced; use dt.where(cond, a, b) "
            "instead of `if`/`and`/`or` on expressions")

    def __getitem__(self, idx) -> "Output":
        """``expr[i, j]``: fix the layout of an output. Every free axis must appear exactly once."""
        idx = idx if isinstance(idx, tuple) else (idx,)
        names = []
        for a in idx:
            if not isinstance(a, Axis):
                raise AlgorithmError(
                    f"an output layout is indexed by axes only, got {a!r}; write expr[i, j] with axes "
                    "from dt.axes(...)")
            names.append(a.name)
        if len(set(names)) != len(names):
            raise AlgorithmError(f"output layout {names} repeats an axis")
        missing = [a for a in self.axes if a not in names]
        if missing:
            raise AlgorithmError(
                f"output [{', '.join(names)}] leaves axis {missing} free; reduce it (dt.sum(..., over=...)) "
                "or add it to the output's index")
        return Output(self, tuple(names))

    @property
    def kind(self) -> str:
        return type(self).__name__


_SYM = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
        "eq": "==", "ne": "!=", "and": "&", "or": "|"}


def _fmt_expr(n: "Expr", depth: int = 0, names: dict | None = None) -> str:
    """Readable infix text for an expression (stages print by name when ``names`` maps them)."""
    if names and n._id in names and depth > 0:
        return names[n._id]
    if depth > 6:
        return "…"
    d = depth + 1
    if isinstance(n, Const):
        v = n.value
        return repr(int(v)) if v == v and _py_abs(v) != float("inf") and v.is_integer() and _py_abs(v) < 1e15 else repr(v)
    if isinstance(n, (Axis,)):
        return n.name
    if isinstance(n, ScalarParam):
        return n.name
    if isinstance(n, Load):
        return f"{n.tensor.name}[{', '.join(_fmt_expr(e, d, names) for e in n.index)}]"
    if isinstance(n, Unary):
        return f"-{_fmt_expr(n.x, d, names)}" if n.op == "neg" else f"{n.op}({_fmt_expr(n.x, d, names)})"
    if isinstance(n, Binary):
        if n.op in _SYM:
            return f"({_fmt_expr(n.a, d, names)} {_SYM[n.op]} {_fmt_expr(n.b, d, names)})"
        return f"{n.op}({_fmt_expr(n.a, d, names)}, {_fmt_expr(n.b, d, names)})"
    if isinstance(n, Where):
        return f"where({_fmt_expr(n.cond, d, names)}, {_fmt_expr(n.a, d, names)}, {_fmt_expr(n.b, d, names)})"
    if isinstance(n, Cast):
        return f"cast({_fmt_expr(n.x, d, names)}, {n.dtype})"
    if isinstance(n, Reduce):
        op = "mean" if n.mean else n.op
        return f"{op} over {','.join(n.over)} of {_fmt_expr(n.x, d, names)}"
    return type(n).__name__


def _wrap(v) -> Expr:
    if isinstance(v, Expr):
        return v
    if isinstance(v, Output):
        return v.expr
    if isinstance(v, bool):
        return Const(float(v))
    if isinstance(v, (int, float)):
        return Const(float(v))
    if isinstance(v, InputTensor):
        raise AlgorithmError(
            f"input tensor {v.name!r} is used without indices; write {v.name}[{', '.join('i' * 0)}...] "
            "with one axis per dim")
    if isinstance(v, tuple) and v and all(isinstance(a, Axis) for a in v):
        raise AlgorithmError(f"cannot use the tuple {v!r} in an expression: dt.axes returns a tuple, so write "
                             f"`i, = dt.axes('i')` (note the comma) or `i, j = dt.axes('i j')`")
    raise AlgorithmError(f"cannot use {type(v).__name__} {v!r} in an algorithm expression")


class Const(Expr):
    """A numeric literal (float, including ``float('inf')``)."""
    __slots__ = ("value",)

    def __init__(self, value: float):
        super().__init__(())
        self.value = float(value)


class Axis(Expr):
    """A named index axis. Used to index tensors (``A[i, k]``), as the ``over=`` of reductions,
    to fix output layouts, and as a number (its index value, e.g. ``dt.where(j <= i, s, -inf)``)."""
    __slots__ = ("name",)

    def __init__(self, name: str):
        if not name.isidentifier():
            raise AlgorithmError(f"axis name {name!r} is not a Python identifier")
        super().__init__((name,))
        self.name = name

    def __repr__(self):
        return f"Axis({self.name})"


def axes(names: str) -> tuple[Axis, ...]:
    """``i, j, k = dt.axes("i j k")``: make named axes. Names are separated by spaces or commas."""
    parts = [p for p in names.replace(",", " ").split() if p]
    if not parts:
        raise AlgorithmError("dt.axes() needs at least one name, e.g. dt.axes('i j k')")
    out = tuple(Axis(p) for p in parts)
    return out if len(out) > 1 else out  # always a tuple, so `i, = dt.axes("i")` works


class ScalarParam(Expr):
    """A Python scalar argument of the algorithm (annotated ``float`` or ``int``)."""
    __slots__ = ("name", "pytype")

    def __init__(self, name: str, pytype: type):
        super().__init__(())
        self.name = name
        self.pytype = pytype


class Load(Expr):
    """Element access ``T[idx0, idx1, ...]`` of an input tensor (or of a materialised stage).
    Each index is an :class:`Axis` or an integer-valued expression (a gather, e.g. ``X[i, labels[i]]``)."""
    __slots__ = ("tensor", "index")

    def __init__(self, tensor: "InputTensor", index: tuple[Expr, ...]):
        ax: list[str] = []
        for e in index:
            ax.extend(e.axes)
        super().__init__(ax)
        self.tensor = tensor
        self.index = index

    def children(self):
        return self.index

    def is_plain(self) -> bool:
        """True when every index is a bare axis, each distinct (no gather, no diagonal)."""
        names = [e.name for e in self.index if isinstance(e, Axis)]
        return len(names) == len(self.index) and len(set(names)) == len(names)


UNARY_OPS = ("neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "not")
BINARY_OPS = ("add", "sub", "mul", "div", "maximum", "minimum",
              "lt", "le", "gt", "ge", "eq", "ne", "and", "or")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne", "and", "or")


class Unary(Expr):
    __slots__ = ("op", "x")

    def __init__(self, op: str, x: Expr):
        assert op in UNARY_OPS, op
        super().__init__(x.axes)
        self.op, self.x = op, x

    def children(self):
        return (self.x,)


class Binary(Expr):
    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: Expr, b: Expr):
        assert op in BINARY_OPS, op
        super().__init__(a.axes + b.axes)
        self.op, self.a, self.b = op, a, b

    def children(self):
        return (self.a, self.b)


class Where(Expr):
    __slots__ = ("cond", "a", "b")

    def __init__(self, cond: Expr, a: Expr, b: Expr):
        super().__init__(cond.axes + a.axes + b.axes)
        self.cond, self.a, self.b = cond, a, b

    def children(self):
        return (self.cond, self.a, self.b)


class Cast(Expr):
    __slots__ = ("x", "dtype")

    def __init__(self, x: Expr, dtype: torch.dtype):
        super().__init__(x.axes)
        self.x, self.dtype = x, dtype

    def children(self):
        return (self.x,)


REDUCE_OPS = ("sum", "max", "min")


class Reduce(Expr):
    """A reduction stage: ``op`` in sum/max/min over ``over`` (axis names). ``dt.mean`` is a sum
    followed by a division by the reduced extent (``scale_by_count``)."""
    __slots__ = ("op", "x", "over", "name", "mean")

    def __init__(self, op: str, x: Expr, over: tuple[str, ...], name: str | None, mean: bool = False):
        for a in over:
            if a not in x.axes:
                raise AlgorithmError(
                    f"reduction {name or op!r} is over axis {a!r}, which its operand does not use "
                    f"(operand axes: {list(x.axes)})")
        super().__init__([a for a in x.axes if a not in over])
        self.op, self.x, self.over, self.name, self.mean = op, x, tuple(over), name, mean

    def children(self):
        return (self.x,)


class Output:
    """An expression with a fixed layout (``expr[i, j]``): a stage that writes an output tensor.

    Used inside an algorithm, it stands for its expression: ``n[i] + 1e-6``, ``-n[i]`` and
    ``dt.sqrt(n[i])`` compute with ``n`` (axes broadcast by name as for any expression), so a
    stage result indexed by its axes can be used like the stage itself."""
    __slots__ = ("expr", "layout", "name")

    def __init__(self, expr: Expr, layout: tuple[str, ...], name: str | None = None):
        self.expr, self.layout, self.name = expr, layout, name

    def __repr__(self):
        return f"Output({self.name}[{', '.join(self.layout)}])"


def _through_expr(name: str):
    def op(self, *args):
        return getattr(self.expr, name)(*args)
    op.__name__ = name
    op.__doc__ = f"``{name}`` of the indexed expression (an :class:`Expr`)."
    return op


# arithmetic, comparisons and the guards of Expr (truth value, float(), //) on an indexed stage
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__pow__", "__neg__", "__pos__", "__abs__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__",
              "__and__", "__or__", "__invert__", "__floordiv__", "__rfloordiv__", "__float__", "__bool__"):
    setattr(Output, _name, _through_expr(_name))
Output.__hash__ = object.__hash__   # identity, as before (== builds a comparison node)
Output.__torch_function__ = Expr.__dict__["__torch_function__"]
del _name


# ----------------------------------------------------------------------------------------------
# public builders
# ----------------------------------------------------------------------------------------------
def _over(over) -> tuple[str, ...]:
    if isinstance(over, Axis):
        return (over.name,)
    if isinstance(over, str):
        return tuple(over.replace(",", " ").split())
    if isinstance(over, (tuple, list)) and over and all(isinstance(a, Axis) for a in over):
        return tuple(a.name for a in over)
    raise AlgorithmError(f"over= takes an axis or a tuple of axes, got {over!r}")


def sum(x, over, name: str | None = None) -> Expr:  # noqa: A001 - the DSL's sum
    """Sum of ``x`` over the axes ``over`` (an axis or tuple of axes). A reduction stage."""
    return Reduce("sum", _wrap(x), _over(over), name)


def max(x, over, name: str | None = None) -> Expr:  # noqa: A001
    """Maximum over ``over``; NaN propagates as in ``torch.amax``. A reduction stage."""
    return Reduce("max", _wrap(x), _over(over), name)


def min(x, over, name: str | None = None) -> Expr:  # noqa: A001
    """Minimum over ``over``; NaN propagates as in ``torch.amin``. A reduction stage."""
    return Reduce("min", _wrap(x), _over(over), name)


def mean(x, over, name: str | None = None) -> Expr:
    """Mean over ``over``: the sum divided by the true extent (padding never counts)."""
    return Reduce("sum", _wrap(x), _over(over), name, mean=True)


def where(cond, a, b) -> Expr:
    """Elementwise select: ``a`` where ``cond`` is true, else ``b`` (like ``torch.where``)."""
    return Where(_wrap(cond), _wrap(a), _wrap(b))


def _unary(op):
    def f(x):
        return Unary(op, _wrap(x))
    f.__name__ = op
    f.__doc__ = f"Elementwise ``{op}`` (as torch.{op})."
    return f


exp, log, sqrt, rsqrt, tanh, sigmoid = (_unary(o) for o in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid"))
abs = _unary("abs")  # noqa: A001


def maximum(a, b) -> Expr:
    """Elementwise maximum (NaN propagates, as torch.maximum)."""
    return Binary("maximum", _wrap(a), _wrap(b))


def minimum(a, b) -> Expr:
    """Elementwise minimum (NaN propagates, as torch.minimum)."""
    return Binary("minimum", _wrap(a), _wrap(b))


def cast(x, dtype: torch.dtype) -> Expr:
    """Cast to ``dtype`` (a torch dtype), rounding as torch's ``.to(dtype)`` does."""
    if not isinstance(dtype, torch.dtype):
        raise AlgorithmError(f"dt.cast needs a torch dtype such as torch.float16, got {dtype!r}")
    return Cast(_wrap(x), dtype)


# ----------------------------------------------------------------------------------------------
# inputs and the algorithm
# ----------------------------------------------------------------------------------------------
class _TensorAnnotation:
    """``dt.Tensor["M", "K"]``: a tensor argument whose dims carry symbolic size names."""

    def __init__(self, dims: tuple[str, ...]):
        self.dims = dims

    def __repr__(self):
        return f"dt.Tensor[{', '.join(map(repr, self.dims))}]"


class _TensorFactory:
    def __getitem__(self, dims) -> _TensorAnnotation:
        dims = dims if isinstance(dims, tuple) else (dims,)
        for d in dims:
            if not (isinstance(d, str) and d.isidentifier()):
                raise AlgorithmError(f"dt.Tensor dims are size names such as 'M', got {d!r}")
        return _TensorAnnotation(tuple(dims))


Tensor = _TensorFactory()


class InputTensor:
    """A tensor argument (or an intermediate buffer) while tracing: index it with axes."""

    def __init__(self, name: str, dims: tuple[str, ...], position: int | None):
        self.name, self.dims, self.position = name, dims, position

    def __getitem__(self, idx) -> Load:
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != len(self.dims):
            raise AlgorithmError(
                f"{self.name} has {len(self.dims)} dims {list(self.dims)} but is indexed with {len(idx)}")
        index = []
        for d, e in zip(self.dims, idx):
            if isinstance(e, InputTensor):
                raise AlgorithmError(f"index {e.name} of {self.name} needs its own indices, e.g. {e.name}[i]")
            index.append(_wrap(e) if not isinstance(e, Axis) else e)
        return Load(self, tuple(index))

    def __repr__(self):
        return f"{self.name}[{', '.join(self.dims)}]"


@dataclass
class Stage:
    """A named stage: a reduction or an output. ``node`` is the Reduce node, or the Output."""
    name: str
    node: Any
    is_output: bool

    @property
    def expr(self) -> Expr:
        return self.node.expr if self.is_output else self.node

    @property
    def free_axes(self) -> tuple[str, ...]:
        return self.node.layout if self.is_output else self.node.axes


def topo_order(roots: Sequence[Expr]) -> list[Expr]:
    """All nodes reachable from ``roots``, children before parents."""
    seen: set[int] = set()
    order: list[Expr] = []
    stack: list[tuple[Expr, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if n._id in seen:
            continue
        seen.add(n._id)
        stack.append((n, True))
        for c in reversed(n.children()):
            if c._id not in seen:
                stack.append((c, False))
    return order


def expr_axes(root: Expr) -> list[str]:
    """Every axis an expression touches, reduced axes included, in first-seen order."""
    ax: list[str] = []
    for n in topo_order([root]):
        ax.extend(n.axes)
        if isinstance(n, Reduce):
            ax.extend(n.over)
    return list(dict.fromkeys(ax))


class Algorithm:
    """A traced algorithm: inputs, outputs, stages, axis-to-size map, and the reference evaluator.

    Build one with the :func:`algorithm` decorator. Calling it is the same as :meth:`reference`.
    """

    @classmethod
    def build(cls, name: str, params: Sequence["InputTensor | ScalarParam"], outputs: Sequence["Output"],
              doc: str | None = None) -> "Algorithm":
        """Make an algorithm from already-built IR (used by transformations such as ``dt.grad``).

        ``params`` are :class:`InputTensor` (``InputTensor(name, dims, position)``) and
        :class:`ScalarParam` objects; ``outputs`` are ``expr[i, j]`` layouts built over them."""
        self = cls.__new__(cls)
        self.fn = None
        self.name = name
        self.__doc__ = doc
        self.params = list(params)
        outs = list(outputs)
        for n, o in enumerate(outs):
            o.name = "out" if len(outs) == 1 else f"out{n}"
        self.outputs = outs
        self._analyse()
        return self

    def __init__(self, fn: Callable):
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__
        sig = inspect.signature(fn)
        self.params: list[InputTensor | ScalarParam] = []
        args = []
        for pos, (pname, p) in enumerate(sig.parameters.items()):
            ann = p.annotation
            if isinstance(ann, str):  # `from __future__ import annotations`
                ann = eval(ann, fn.__globals__)  # noqa: S307 - the user's own annotation
            if isinstance(ann, _TensorAnnotation):
                t = InputTensor(pname, ann.dims, pos)
            elif ann in (float, int):
                t = ScalarParam(pname, ann)
            else:
                raise AlgorithmError(
                    f"argument {pname!r} of {self.name} needs an annotation dt.Tensor['M', ...] or float/int, "
                    f"got {ann!r}")
            self.params.append(t)
            args.append(t)
        ret = fn(*args)
        rets = ret if isinstance(ret, tuple) else (ret,)
        outs: list[Output] = []
        for r in rets:
            if isinstance(r, Output):
                outs.append(r)
            elif isinstance(r, Expr) and not r.axes:
                outs.append(Output(r, ()))
            else:
                raise AlgorithmError(
                    f"{self.name} must return outputs with a layout, e.g. `return C[i, j]`; got {r!r}")
        for n, o in enumerate(outs):
            o.name = "out" if len(outs) == 1 else f"out{n}"
        self.outputs = outs
        self._analyse()

    # ------------------------------------------------------------------------------------------
    def _cse(self):
        """Merge structurally identical nodes (``X[i, j]`` written twice is one load)."""
        canon: dict[tuple, Expr] = {}
        remap: dict[int, Expr] = {}
        for n in topo_order([o.expr for o in self.outputs]):
            def m(c):
                return remap.get(c._id, c)
            if isinstance(n, Load):
                n.index = tuple(m(c) for c in n.index)
                key = ("Load", id(n.tensor), tuple(c._id for c in n.index))
            elif isinstance(n, Unary):
                n.x = m(n.x)
                key = ("Unary", n.op, n.x._id)
            elif isinstance(n, Binary):
                n.a, n.b = m(n.a), m(n.b)
                key = ("Binary", n.op, n.a._id, n.b._id)
            elif isinstance(n, Where):
                n.cond, n.a, n.b = m(n.cond), m(n.a), m(n.b)
                key = ("Where", n.cond._id, n.a._id, n.b._id)
            elif isinstance(n, Cast):
                n.x = m(n.x)
                key = ("Cast", str(n.dtype), n.x._id)
            elif isinstance(n, Reduce):
                n.x = m(n.x)
                key = ("Reduce", n.op, n.over, n.mean, n.name, n.x._id) if n.name else ("Reduce", n.op, n.over, n.mean, n.x._id)
            elif isinstance(n, Const):
                key = ("Const", n.value if n.value == n.value else "nan")
            elif isinstance(n, Axis):
                key = ("Axis", n.name)
            elif isinstance(n, ScalarParam):
                key = ("Scalar", n.name)
            else:
                key = ("id", n._id)
            if key in canon:
                remap[n._id] = canon[key]
            else:
                canon[key] = n
        for o in self.outputs:
            o.expr = remap.get(o.expr._id, o.expr)

    def _analyse(self):
        self._cse()
        outs = {o.name for o in self.outputs}
        for p in self.params:
            if p.name in outs:
                raise AlgorithmError(f"parameter {p.name!r} of {self.name} has the name of its output {p.name!r} "
                                     f"(outputs are named {sorted(outs)}); rename the parameter")
        nodes = topo_order([o.expr for o in self.outputs])
        self.nodes = nodes
        # axis -> size symbol, from every plain access A[.., i, ..]
        axis_size: dict[str, str] = {}
        origin: dict[str, str] = {}
        for n in nodes:
            if isinstance(n, Load):
                for d, e in zip(n.tensor.dims, n.index):
                    if isinstance(e, Axis):
                        if e.name in axis_size and axis_size[e.name] != d:
                            raise AlgorithmError(
                                f"axis {e.name!r} indexes dim {d!r} of {n.tensor.name} but dim "
                                f"{axis_size[e.name]!r} of {origin[e.name]}; use two axes, or give both dims one size name")
                        axis_size.setdefault(e.name, d)
                        origin.setdefault(e.name, n.tensor.name)
        all_axes: list[str] = []
        for n in nodes:
            all_axes.extend(n.axes)
            if isinstance(n, Reduce):
                all_axes.extend(n.over)
        for o in self.outputs:
            all_axes.extend(o.layout)
        self.axis_names = tuple(dict.fromkeys(all_axes))
        for a in self.axis_names:
            if a not in axis_size:
                inside = [n for n in nodes if isinstance(n, Load) and any(not isinstance(e, Axis) and a in e.axes
                                                                           for e in n.index)]
                if inside:
                    raise AlgorithmError(
                        f"axis {a!r} appears only inside an index expression ({_fmt_expr(inside[0])}), so its size is "
                        "unknown; shifted or computed indices such as X[i, j + 1] are not supported, index a dim "
                        "with the bare axis (gathers through an integer tensor, X[i, labels[i]], are)")
                raise AlgorithmError(
                    f"axis {a!r} never indexes an input dim, so its size is unknown; use it to index a tensor")
        self.axis_size = axis_size
        # stages: reductions (named or auto) then outputs
        stages: dict[str, Stage] = {}
        counts: dict[str, int] = {}
        for n in nodes:
            if isinstance(n, Reduce):
                nm = n.name
                if nm is None:
                    base = "mean" if n.mean else n.op
                    k = counts.get(base, 0)
                    counts[base] = k + 1
                    nm = f"{base}{k}"
                    while nm in stages:
                        k += 1
                        counts[base] = k + 1
                        nm = f"{base}{k}"
                    n.name = nm
                if nm in stages:
                    raise AlgorithmError(f"two stages are named {nm!r}; stage names must be unique")
                stages[nm] = Stage(nm, n, False)
        for o in self.outputs:
            if o.name in stages:
                raise AlgorithmError(f"stage name {o.name!r} is used by both a reduction and an output")
            stages[o.name] = Stage(o.name, o, True)
        self.stages = stages
        self.reduction_axes = tuple(dict.fromkeys(a for n in nodes if isinstance(n, Reduce) for a in n.over))
        self.tensor_params = [p for p in self.params if isinstance(p, InputTensor)]
        # gathers whose index is an integer tensor read directly, e.g. X[i, labels[i]]:
        # (index tensor name, gathered tensor name, dim position, size symbol of that dim)
        self.gathers = []
        for n in nodes:
            if isinstance(n, Load):
                for d, e in enumerate(n.index):
                    if isinstance(e, Load) and e.is_plain():
                        self.gathers.append((e.tensor.name, n.tensor.name, d, n.tensor.dims[d]))
        self.fingerprint = self._fingerprint()

    def _fingerprint(self) -> str:
        """A stable hash of the expression graph (not of Python identities)."""
        ids = {n._id: k for k, n in enumerate(self.nodes)}
        parts = [self.name]
        for p in self.params:
            parts.append(repr(p) if isinstance(p, InputTensor) else f"{p.name}:{p.pytype.__name__}")
        for n in self.nodes:
            d = [type(n).__name__, ",".join(n.axes)]
            for attr in ("op", "value", "name", "over", "mean", "dtype"):
                if attr in getattr(type(n), "__slots__", ()):
                    d.append(f"{attr}={getattr(n, attr)}")
            if isinstance(n, Load):
                d.append(n.tensor.name)
            d.append(",".join(str(ids[c._id]) for c in n.children()))
            parts.append("|".join(d))
        for o in self.outputs:
            parts.append(f"{o.name}:{ids[o.expr._id]}:{','.join(o.layout)}")
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    # ------------------------------------------------------------------------------------------
    def bind(self, args: Sequence[Any]) -> "Binding":
        """Check call arguments against the signature; return sizes and dtypes.

        Raises :class:`ShapeError` naming the argument and size symbol on any mismatch."""
        return Binding.make(self, args)

    def reference(self, *args):
        """Evaluate the algorithm eagerly in torch: the oracle for every test and explored schedule.

        fp16/bf16 inputs are computed in fp32 and rounded to the output dtype at the end (as a
        fused kernel does); float64 inputs stay float64. Returns one tensor, or a tuple for several
        outputs, each laid out as the algorithm's ``expr[i, j]`` says."""
        b = self.bind(args)
        outs = evaluate(self, b, args)
        return outs[0] if len(outs) == 1 else tuple(outs)

    __call__ = reference

    def __repr__(self):
        ins = ", ".join(repr(p) if isinstance(p, InputTensor) else f"{p.name}: {p.pytype.__name__}"
                        for p in self.params)
        return f"<dt.algorithm {self.name}({ins}) stages={list(self.stages)}>"


def algorithm(fn: Callable) -> Algorithm:
    """Decorator: trace ``fn`` into an :class:`Algorithm`.

    Arguments are annotated ``dt.Tensor["M", "K"]`` (dims named by size symbols; one name means
    one size, checked at call time) or ``float``/``int`` (scalars). The body indexes tensors with
    axes from :func:`axes` and returns outputs with a layout (``C[i, j]``) or a tuple of them.

    Raises :class:`AlgorithmError` for malformed programs (an axis indexing two differently named
    dims, an output with a free axis missing from its layout, a reduction over an unused axis)."""
    return Algorithm(fn)


# ----------------------------------------------------------------------------------------------
# binding and the reference evaluator
# ----------------------------------------------------------------------------------------------
def result_dtype(dtypes: Iterable[torch.dtype]) -> torch.dtype:
    """Torch's promotion over the floating inputs; float64 when the values are integers only (sums
    and products of int32/int64 values are exact in float64 up to 2**53, in float32 only up to
    2**24); float32 when there are no tensor values at all."""
    out, ints = None, False
    for d in dtypes:
        if d.is_floating_point:
            out = d if out is None else torch.promote_types(out, d)
        elif d != torch.bool:
            ints = True
    return out or (torch.float64 if ints else torch.float32)


def kernel_f64(dtypes: Iterable[torch.dtype], out_dtypes: Iterable[torch.dtype]) -> bool:
    """Whether generated kernels compute (and keep intermediate buffers) in float64: a float64
    input, or integer-only values (their outputs are float64 by :func:`result_dtype`). An
    algorithm that also has 16/32-bit floating inputs keeps their float32 compute."""
    dtypes = list(dtypes)
    if any(d == torch.float64 for d in dtypes):
        return True
    return not any(d.is_floating_point for d in dtypes) and torch.float64 in list(out_dtypes)


def compute_dtype(dt: torch.dtype) -> torch.dtype:
    """Accumulation/compute dtype: fp32 for 16-bit floats and fp32, fp64 for fp64."""
    return torch.float64 if dt == torch.float64 else torch.float32


@dataclass
class Binding:
    """Call-time facts: the size of each size symbol and each axis, input dtypes, output dtypes."""
    sizes: dict[str, int]            # size symbol -> int
    axis_sizes: dict[str, int]       # axis name -> int
    dtypes: dict[str, torch.dtype]   # tensor param name -> dtype
    out_dtypes: list[torch.dtype]
    device: torch.device

    @staticmethod
    def make(alg: Algorithm, args: Sequence[Any]) -> "Binding":
        if len(args) != len(alg.params):
            names = [p.name for p in alg.params]
            raise ShapeError(f"{alg.name} takes {len(names)} arguments {names}, got {len(args)}")
        sizes: dict[str, int] = {}
        src: dict[str, str] = {}
        dtypes: dict[str, torch.dtype] = {}
        device = None
        for p, a in zip(alg.params, args):
            if isinstance(p, ScalarParam):
                if isinstance(a, torch.Tensor) or not isinstance(a, (int, float)):
                    raise ShapeError(f"argument {p.name!r} of {alg.name} is a scalar ({p.pytype.__name__}); "
                                     f"got {type(a).__name__}")
                if p.pytype is int and not float(a).is_integer():
                    raise ShapeError(f"argument {p.name!r} of {alg.name} is declared int but got {a!r}; pass an "
                                     "integer or declare it `float`")
                continue
            if not isinstance(a, torch.Tensor):
                raise ShapeError(f"argument {p.name!r} of {alg.name} must be a torch.Tensor with dims "
                                 f"{list(p.dims)}, got {type(a).__name__}")
            if a.dim() != len(p.dims):
                raise ShapeError(f"argument {p.name!r} of {alg.name} must have {len(p.dims)} dims {list(p.dims)}, "
                                 f"got {a.dim()} (shape {tuple(a.shape)})")
            if a.dtype not in FLOAT_DTYPES + INDEX_DTYPES:
                raise ShapeError(f"argument {p.name!r} of {alg.name} has unsupported dtype {a.dtype}; use "
                                 "float16, bfloat16, float32, float64 or an integer dtype for indices")
            if device is None:
                device = a.device
            elif a.device != device:
                raise ShapeError(f"argument {p.name!r} is on {a.device} but earlier arguments are on {device}")
            for k, (d, n) in enumerate(zip(p.dims, a.shape)):
                if d in sizes and sizes[d] != n:
                    raise ShapeError(f"{d} is {sizes[d]} from {src[d]} but {n} from {p.name}.shape[{k}]")
                sizes.setdefault(d, int(n))
                src.setdefault(d, f"{p.name}.shape[{k}]")
            dtypes[p.name] = a.dtype
        for idx_name, tname, d, _ in alg.gathers:
            if dtypes[idx_name].is_floating_point:
                raise ShapeError(f"argument {idx_name!r} indexes dim {d} of {tname} (a gather) and must be an integer "
                                 f"tensor, got {dtypes[idx_name]}; convert it with .long()")
        axis_sizes = {ax: sizes[sym] for ax, sym in alg.axis_size.items()}
        out_dtypes = [result_dtype(dtypes[t] for t in _float_inputs(o.expr)) for o in alg.outputs]
        return Binding(sizes, axis_sizes, dtypes, out_dtypes, device or torch.device("cpu"))


def _float_inputs(root: Expr) -> list[str]:
    """Tensors whose values flow into ``root`` arithmetically (gather indices do not)."""
    names: list[str] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if n._id in seen:
            continue
        seen.add(n._id)
        if isinstance(n, Load):
            names.append(n.tensor.name)
            continue  # indices do not set the dtype
        if isinstance(n, Cast):
            continue
        stack.extend(n.children())
    return names


class _Val:
    """Reference-evaluator value: a tensor whose dims are named by ``axes``."""
    __slots__ = ("t", "axes")

    def __init__(self, t: torch.Tensor, axes: tuple[str, ...]):
        self.t, self.axes = t, axes


def _align(v: _Val, axes: tuple[str, ...]) -> torch.Tensor:
    """View ``v`` with dims ordered as ``axes`` (size-1 dims for absent axes)."""
    perm = [v.axes.index(a) for a in axes if a in v.axes]
    t = v.t.permute(perm) if perm != list(range(len(perm))) else v.t
    shape = [t.shape[[a for a in axes if a in v.axes].index(a)] if a in v.axes else 1 for a in axes]
    return t.reshape(shape)


def evaluate(alg: Algorithm, b: Binding, args: Sequence[Any], overrides: dict[int, Any] | None = None) -> list[torch.Tensor]:
    """Evaluate every output of ``alg`` on ``args`` in eager torch (see :meth:`Algorithm.reference`)."""
    argmap = {p.name: a for p, a in zip(alg.params, args)}
    # the oracle computes in float64 on the CPU (every test and example there); on a GPU in
    # float32 unless an input is float64, so exploring large shapes stays affordable
    any64 = (any(d == torch.float64 for d in list(b.dtypes.values()) + list(b.out_dtypes))
             or b.device.type == "cpu")
    cdt = torch.float64 if any64 else torch.float32
    dev = b.device
    memo: dict[int, _Val] = {}

    def ev(n: Expr) -> _Val:
        if n._id in memo:
            return memo[n._id]
        r = _ev(n)
        memo[n._id] = r
        return r

    def _ev(n: Expr) -> _Val:
        if isinstance(n, Const):
            return _Val(torch.tensor(n.value, dtype=cdt, device=dev), ())
        if isinstance(n, ScalarParam):
            return _Val(torch.tensor(float(argmap[n.name]), dtype=cdt, device=dev), ())
        if isinstance(n, Axis):
            return _Val(torch.arange(b.axis_sizes[n.name], device=dev, dtype=cdt), (n.name,))
        if isinstance(n, Load):
            t = argmap[n.tensor.name]
            if t.dtype.is_floating_point:
                t = t.to(cdt)
            if n.is_plain():
                return _Val(t, tuple(e.name for e in n.index))
            idx_vals = [ev(e) if not isinstance(e, Axis) else _Val(torch.arange(b.axis_sizes[e.name], device=dev), (e.name,))
                        for e in n.index]
            ax = tuple(dict.fromkeys(a for v in idx_vals for a in v.axes))
            idx = [_align(v, ax).long() if v.t.dtype.is_floating_point else _align(v, ax).long() for v in idx_vals]
            idx = torch.broadcast_tensors(*idx) if idx else idx
            return _Val(t[tuple(idx)], ax)
        if isinstance(n, Unary):
            v = ev(n.x)
            x = v.t
            if n.op == "not":
                return _Val(~x.bool(), v.axes)
            if not x.dtype.is_floating_point:
                x = x.to(cdt)
            f = {"neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
                 "tanh": torch.tanh, "sigmoid": torch.sigmoid, "abs": torch.abs}[n.op]
            return _Val(f(x), v.axes)
        if isinstance(n, Binary):
            va, vb = ev(n.a), ev(n.b)
            ax = tuple(dict.fromkeys(va.axes + vb.axes))
            x, y = _align(va, ax), _align(vb, ax)
            if n.op in ("and", "or"):
                f2 = torch.logical_and if n.op == "and" else torch.logical_or
                return _Val(f2(x.bool(), y.bool()), ax)
            if n.op not in COMPARE_OPS:
                x = x.to(cdt) if not x.dtype.is_floating_point else x
                y = y.to(cdt) if not y.dtype.is_floating_point else y
            else:
                if x.dtype != y.dtype:
                    x, y = x.to(cdt), y.to(cdt)
            f = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                 "maximum": torch.maximum, "minimum": torch.minimum, "lt": torch.lt, "le": torch.le,
                 "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}[n.op]
            return _Val(f(x, y), ax)
        if isinstance(n, Where):
            vc, va, vb = ev(n.cond), ev(n.a), ev(n.b)
            ax = tuple(dict.fromkeys(vc.axes + va.axes + vb.axes))
            x, y = _align(va, ax), _align(vb, ax)
            x = x.to(cdt) if not x.dtype.is_floating_point else x
            y = y.to(cdt) if not y.dtype.is_floating_point else y
            return _Val(torch.where(_align(vc, ax).bool(), x, y), ax)
        if isinstance(n, Cast):
            v = ev(n.x)
            t = v.t.to(n.dtype)
            if n.dtype.is_floating_point:
                t = t.to(cdt)  # round through the dtype, keep computing in cdt
            return _Val(t, v.axes)
        if isinstance(n, Reduce) and n.op == "sum" and isinstance(n.x, Binary) and n.x.op == "mul":
            # a sum of products: one einsum, never the broadcast product (4096^3 would not fit)
            fs = _mul_factors(n.x)
            vals = [ev(f) for f in fs]
            letters = {}
            for v in vals:
                for a in v.axes:
                    letters.setdefault(a, chr(ord("a") + len(letters)) if len(letters) < 26 else chr(ord("A") + len(letters) - 26))
            rest = tuple(a for a in n.x.axes if a not in n.over)
            ops = []
            for v in vals:
                t = v.t if v.t.dtype.is_floating_point else v.t.to(cdt)
                ops.append(t)
            eq = ",".join("".join(letters[a] for a in v.axes) for v in vals) + "->" + "".join(letters[a] for a in rest)
            r = torch.einsum(eq, *ops)
            if n.mean:
                r = r / math.prod(b.axis_sizes[a] for a in n.over)
            return _Val(r, rest)
        if isinstance(n, Reduce):
            v = ev(n.x)
            x = v.t if v.t.dtype.is_floating_point else v.t.to(cdt)
            dims = [v.axes.index(a) for a in n.over]
            rest = tuple(a for a in v.axes if a not in n.over)
            if n.op == "sum":
                r = x.sum(dim=dims) if x.numel() or True else x
                if n.mean:
                    cnt = math.prod(b.axis_sizes[a] for a in n.over)
                    r = r / cnt
            elif n.op == "max":
                r = _amax(x, dims, -math.inf)
            else:
                r = -_amax(-x, dims, -math.inf)
            return _Val(r, rest)
        raise AssertionError(f"unknown node {n!r}")

    outs = []
    for o, odt in zip(alg.outputs, b.out_dtypes):
        v = ev(o.expr)
        x = _align(v, o.layout) if o.layout else v.t.reshape(())
        shape = [b.axis_sizes[a] for a in o.layout]
        x = x.expand(shape)
        outs.append(x.to(odt).contiguous())
    return outs


def _mul_factors(n: Expr) -> list[Expr]:
    if isinstance(n, Binary) and n.op == "mul":
        return _mul_factors(n.a) + _mul_factors(n.b)
    return [n]


def _amax(x: torch.Tensor, dims: list[int], empty: float) -> torch.Tensor:
    if any(x.shape[d] == 0 for d in dims):
        shape = [s for k, s in enumerate(x.shape) if k not in dims]
        return torch.full(shape, empty, dtype=x.dtype, device=x.device)
    return torch.amax(x, dim=dims)
