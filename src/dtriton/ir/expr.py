"""The expression nodes of the IR and their readable text.

Expressions broadcast by axis *name*: ``A[i, k] * B[k, j]`` has the free axes ``{i, j, k}``; a
:class:`Reduce` removes its ``over`` axes. Every node has ``children()`` and ``rebuild(children)``
(a new node of the same kind and attributes over new children) and ``signature()`` (its own
attributes, children excluded), so passes such as CSE, gradients or renaming rebuild graphs
generically. Nodes hash by identity; ``==`` on expressions builds a comparison node.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterable, Sequence

import torch

from ..errors import AlgorithmError
from .combiners import Combiner, get as get_combiner
from .misuse import check_int_literal, method_error, no_operator, no_xor, reduced_output_axis

__all__ = ["Expr", "Const", "Axis", "ScalarParam", "Load", "Unary", "Binary", "Where", "Cast", "Reduce",
           "Output", "InputTensor", "PaddedTensor", "as_expr", "fmt", "UNARY_OPS", "BINARY_OPS", "COMPARE_OPS", "INT_OPS",
           "FP8_DTYPES", "SATURATING_DTYPES"]

UNARY_OPS = ("neg", "exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "not")
BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "mod", "maximum", "minimum", "pow",
              "lt", "le", "gt", "ge", "eq", "ne", "and", "or")
#: integer operations with Python's (and torch's) rounding: ``a // b`` rounds toward -inf, ``a % b``
#: takes the sign of ``b``; defined on integer values only (axes, integer literals and arguments)
INT_OPS = ("floordiv", "mod")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne", "and", "or")
#: the 8-bit floating storage dtypes: loaded and stored as such, computed with in float32
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
#: the dtypes a saturating cast (``dt.cast(x, dtype, saturate=True)``) targets
SATURATING_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.float16, torch.bfloat16) + FP8_DTYPES


class Expr:
    """A node of the expression graph. Free axes are exposed as ``expr.axes`` (a tuple of names,
    in first-appearance order). Operators build new nodes; comparisons return boolean nodes.
    ``expr.uid`` is a process-unique integer naming the node: passes key their tables by it
    (``==`` on expressions builds a comparison node, so nodes are compared by identity)."""

    __slots__ = ("axes", "uid", "__weakref__")
    _counter = itertools.count()

    def __init__(self, axes: Iterable[str]):
        self.axes = tuple(dict.fromkeys(axes))
        self.uid = next(Expr._counter)

    # identity-based hashing so nodes can be dict keys; == builds a comparison node
    def __hash__(self):
        return self.uid

    def children(self) -> tuple["Expr", ...]:
        """The operand nodes, in a fixed order (the order ``rebuild`` takes them in)."""
        return ()

    def rebuild(self, children: Sequence["Expr"]) -> "Expr":
        """A new node of this kind and attributes over ``children`` (as many as ``children()``)."""
        raise NotImplementedError(type(self).__name__)

    def signature(self) -> tuple:
        """This node's own attributes as a hashable tuple, children excluded: two nodes of one
        kind with equal signatures over the same children compute the same values."""
        return ()

    # arithmetic ------------------------------------------------------------------------------
    def __add__(self, o): return Binary("add", self, as_expr(o))
    def __radd__(self, o): return Binary("add", as_expr(o), self)
    def __sub__(self, o): return Binary("sub", self, as_expr(o))
    def __rsub__(self, o): return Binary("sub", as_expr(o), self)
    def __mul__(self, o): return Binary("mul", self, as_expr(o))
    def __rmul__(self, o): return Binary("mul", as_expr(o), self)
    def __truediv__(self, o): return Binary("div", self, as_expr(o))
    def __rtruediv__(self, o): return Binary("div", as_expr(o), self)
    def __pow__(self, o):
        """``x ** n`` with torch's values and dtypes: a literal whole number ``0 < |n| <= 64`` by repeated
        squaring (negative ``x`` allowed, exact as products), 0.5 as ``sqrt``; any other exponent (0, a
        float literal, an ``int``/``float`` argument, an expression) is the ``pow`` node (:func:`pow_general`:
        C's pow with torch's special cases; ``x ** 0`` is 1, NaN too, in torch's dtype: ``x``'s for a
        float ``x``, an integer ``x`` to the literal ``0`` stays integer). The literal's kind sets the
        dtype, as in torch: an ``int`` literal keeps an integer ``x`` integer (a bool ``x`` gives int64),
        a ``float`` literal
        (``2.0``, ``-1.0``) makes an integer or bool ``x`` floating (float32), its products computed
        in floats (``uint8 200 ** 2.0`` is 40000.0)."""
        if isinstance(o, (int, float)) and not isinstance(o, bool) and float(o).is_integer() and 0 < abs(o) <= 64:
            lift = "float" if isinstance(o, float) else "int"
            n = int(o)
            if n == 1:   # x * 1 (or 1.0): torch's result dtype of x ** 1 (a bool x's is int64, an integer x ** 1.0 float32)
                return Binary("mul", self, Const(1.0, integer=lift == "int"))
            if n > 0:
                return pow_int(self, n, lift)
            # a negative power as a power of 1 / x: its gradient -n x^(-n-1) stays finite wherever torch's does
            # (1 / x^n's chain rule divides by x^n twice: -inf below |x| ~ 1e-8 at n = 3 in fp32). The reciprocal
            # of an int literal carries the power: an integer base is refused at the call (torch raises); of a
            # float literal it is the float 1 / x, as torch's x ** -1.0 is of an integer x
            recip = Binary("div", Const(1.0), self, power=n if lift == "int" else None)
            return recip if n == -1 else pow_int(recip, -n)
        if isinstance(o, (int, float)) and float(o) == 0.5:
            return Unary("sqrt", self)
        return pow_general(self, as_expr(o))
    def __rpow__(self, o):
        """``c ** x`` for a Python number ``c``: the ``pow`` node (:func:`pow_general`), torch's
        ``torch.pow(c, x)``: C's pow for a float result (zero and negative bases included: NaN for a
        negative base and a non-integer exponent, 1 for ``c == 1`` whatever ``x``), an exact integer
        in torch's promoted dtype for an integer ``c`` and an integer ``x``. A non-numeric base raises
        :class:`AlgorithmError`."""
        if isinstance(o, bool) or not isinstance(o, (int, float)):
            raise AlgorithmError(f"{o!r} ** expression: the base must be a Python int or float (or an expression)")
        return pow_general(as_expr(o), self)
    def __neg__(self): return Unary("neg", self)
    def __pos__(self): return self
    def __abs__(self): return Unary("abs", self)
    def __lt__(self, o): return Binary("lt", self, as_expr(o))
    def __le__(self, o): return Binary("le", self, as_expr(o))
    def __gt__(self, o): return Binary("gt", self, as_expr(o))
    def __ge__(self, o): return Binary("ge", self, as_expr(o))
    def __eq__(self, o): return Binary("eq", self, as_expr(o))  # type: ignore[override]
    def __ne__(self, o): return Binary("ne", self, as_expr(o))  # type: ignore[override]
    def __and__(self, o): return Binary("and", self, as_expr(o))
    def __or__(self, o): return Binary("or", self, as_expr(o))
    def __invert__(self): return Unary("not", self)
    def __xor__(self, o): return no_xor(self, o)
    def __rxor__(self, o): return no_xor(o, self)

    def __floordiv__(self, o): return int_op("floordiv", self, as_expr(o))
    def __rfloordiv__(self, o): return int_op("floordiv", as_expr(o), self)
    def __mod__(self, o): return int_op("mod", self, as_expr(o))
    def __rmod__(self, o): return int_op("mod", as_expr(o), self)

    def __float__(self):
        raise AlgorithmError("a dtriton expression is not a Python number: use dt.exp, dt.log, dt.sqrt, dt.tanh, "
                             "... instead of math.* functions inside an algorithm")

    def __int__(self):
        raise AlgorithmError("a dtriton expression is not a Python number (int() of it while the algorithm is "
                             "traced): for an integer value write dt.cast(x, torch.int64)")

    def __matmul__(self, o): return no_operator("@", "write the contraction over its shared axis: "
                                                 "dt.sum(A[i, k] * B[k, j], over=k)")
    def __rmatmul__(self, o): return self.__matmul__(o)
    def __lshift__(self, o): return no_operator("<<", "multiply by a power of two (x * 2 ** n)")
    def __rlshift__(self, o): return self.__lshift__(o)
    def __rshift__(self, o): return no_operator(">>", "floor-divide by a power of two (x // 2 ** n)")
    def __rrshift__(self, o): return self.__rshift__(o)

    def __getattr__(self, name):
        """torch's method style (``X[i].exp()``, ``.sum()``, ``.float()``): an :class:`AlgorithmError`
        saying which ``dt`` function to call; any other missing attribute an ``AttributeError``."""
        err = method_error(name)
        if err is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise err

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        raise AlgorithmError(
            f"torch.{name} cannot take a dtriton expression; inside an algorithm use the dt.* functions "
            f"(dt.exp, dt.log, dt.sqrt, dt.rsqrt, dt.tanh, dt.sigmoid, dt.abs, dt.maximum, dt.minimum, dt.where, "
            f"dt.sum/max/min/mean)")

    def __repr__(self):
        return f"<dt expression {fmt(self)} over axes ({', '.join(self.axes)})>"

    def __bool__(self):
        raise AlgorithmError(
            "an expression has no truth value while the algorithm is traced; use dt.where(cond, a, b) "
            "instead of `if`/`and`/`or` on expressions, `(a < b) & (b < c)` for a chained comparison "
            "`a < b < c`, and dt.maximum(a, b) / dt.minimum(a, b) instead of Python's max(a, b) / min(a, b)")

    def __round__(self, ndigits=None):
        raise AlgorithmError("round() cannot take a dtriton expression; round with a cast: dt.cast(x, torch.int32, "
                             "saturate=True) rounds to nearest (ties to even, clamped to int32), dt.cast(x, "
                             "torch.int64) rounds toward zero as .to(torch.int64)")

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
            reduced_output_axis(self, names)
            raise AlgorithmError(
                f"output [{', '.join(names)}] leaves axis {missing} free; reduce it (dt.sum(..., over=...)) "
                "or add it to the output's index")
        return Output(self, tuple(names))

    @property
    def kind(self) -> str:
        """The node's kind: its class name (``"Load"``, ``"Reduce"``, ...)."""
        return type(self).__name__


def as_expr(v) -> Expr:
    """``v`` as an expression: expressions and indexed stages as they are, numbers as constants;
    an :class:`AlgorithmError` for an int outside int64 (``X[i] + 2**70``) or not exact in a float64
    (``2**63 - 1``: literals are held as doubles; an int argument is exact) and for anything else
    (a tensor used without indices, a tuple of axes)."""
    if isinstance(v, Expr):
        return v
    if isinstance(v, Output):
        return v.expr
    if isinstance(v, bool):   # a bool literal: torch's lowest category (B[i] + True stays bool)
        return Const(float(v), integer=True, boolean=True)
    if isinstance(v, int):
        check_int_literal(v)
        return Const(float(v), integer=True)
    if isinstance(v, float):
        return Const(v)
    if isinstance(v, InputTensor):
        raise AlgorithmError(
            f"input tensor {v.name!r} is used without indices; write {v.name}[{', '.join('ijklmnpq'[:len(v.dims)])}] "
            f"with one axis per dim ({len(v.dims)}: {list(v.dims)})")
    if isinstance(v, tuple) and v and all(isinstance(a, Axis) for a in v):
        raise AlgorithmError(f"cannot use the tuple {v!r} in an expression: dt.axes with several names returns a "
                             f"tuple of axes, so unpack it, `i, j = dt.axes('i j')` (one name gives the axis itself: "
                             f"`i = dt.axes('i')`)")
    raise AlgorithmError(f"cannot use {type(v).__name__} {v!r} in an algorithm expression")


def _no_children(node: Expr, children: Sequence[Expr]) -> None:
    if len(children):
        raise ValueError(f"{type(node).__name__} has no children, got {len(children)}")


def pow_int(x: Expr, n: int, lift: str | None = None) -> Expr:
    """``x ** n`` for an integer ``n >= 1`` as products (square and multiply): exact signs for a
    negative ``x``, and gradients that are finite at 0. ``lift``: the kind of the literal exponent
    (``"int"`` or ``"float"``, see :class:`Binary`), kept by every product; None for plain products."""
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else Binary("mul", result, base, lift=lift)
        n >>= 1
        if n:
            base = Binary("mul", base, base, lift=lift)
    return result


def pow_general(x: Expr, p: Expr) -> Expr:
    """``x ** p`` for an exponent known only at run time (or a non-integer literal): the ``pow`` node,
    with the values of ``torch.pow(x, p)`` for a Python number ``p``: C's ``pow`` (signed zeros and
    infinities for an odd integer ``p``, NaN for a finite negative ``x`` and a non-integer ``p``, 1
    for ``p == 0`` and for ``x == 1``, NaN included), except ``p == 0.5`` and ``p == -0.5``, which
    torch computes as ``sqrt(x)`` and ``1 / sqrt(x)`` (NaN at ``x = -inf``; ``-inf`` at ``x = -0.0``
    for ``-0.5``); a tensor exponent (one with axes) is C's pow alone, as torch's tensor pow. The
    result is floating, but integer ``x`` and ``p`` give an exact integer (torch's promoted dtype;
    an integer ``x`` to a negative literal or ``int`` argument is refused at the call, as torch raises). Its gradients are
    torch's (``grad/derive.py``): ``p * x ** (p - 1)`` in ``x`` (0 where ``p == 0``), and
    ``x ** p * log(x)`` in ``p`` (0 where ``x == 0`` and ``p >= 0``)."""
    return Binary("pow", x, p)


def int_op(op: str, a: "Expr", b: "Expr") -> "Binary":
    """``a // b`` (``op="floordiv"``) or ``a % b`` (``"mod"``). Raises :class:`AlgorithmError` for a
    literal divisor 0 (torch raises ZeroDivisionError for an integer division by zero); a divisor
    that is 0 only for some data or arguments is checked when a call is (``check_reads``)."""
    n = Binary(op, a, b)
    if isinstance(b, Const) and b.value == 0:
        raise AlgorithmError(f"{fmt(n)}: an integer {'//' if op == 'floordiv' else '%'} by the literal 0 has no value "
                             f"(torch raises ZeroDivisionError); divide by a nonzero integer")
    return n


class Const(Expr):
    """A numeric literal (float, including ``float('inf')``). ``integer``: written as a Python int
    (or bool), which matters for result dtypes only (``X_int + 1`` stays an integer, as in torch,
    ``X_int + 1.0`` is float32). ``boolean``: written as a Python bool (``True``, ``False``; value 1 or
    0, ``integer`` too), the lowest category of torch's promotion: ``B[i] + True`` stays bool (a
    logical or), ``X_int8[i] + True`` int8, ``X[i] * True`` keeps X's float dtype."""
    __slots__ = ("value", "integer", "boolean")

    def __init__(self, value: float, integer: bool = False, boolean: bool = False):
        super().__init__(())
        self.value = float(value)
        self.boolean = bool(boolean)
        if self.boolean and self.value not in (0.0, 1.0):
            raise ValueError(f"a bool literal has the value 0 or 1, got {value!r}")
        self.integer = bool(integer) or self.boolean

    def rebuild(self, children=()):
        _no_children(self, children)
        return Const(self.value, self.integer, self.boolean)

    def signature(self):
        # repr keeps -0.0 apart from 0.0 (CSE must not merge them) and makes every NaN one key
        return (repr(self.value), self.integer, self.boolean)


class Axis(Expr):
    """A named index axis. Used to index tensors (``A[i, k]``), as the ``over=`` of reductions,
    to fix output layouts, and as a number (its index value, an integer, e.g. ``dt.where(j <= i, s,
    -inf)`` or ``X[i, j + 1]``). ``size``: the size symbol it ranges over when given explicitly
    (``dt.axes("i d:N")``), for an axis used only inside index expressions; else it takes the size
    of the dims it indexes."""
    __slots__ = ("name", "size")

    def __init__(self, name: str, size: str | None = None):
        if not name.isidentifier():
            raise AlgorithmError(f"axis name {name!r} is not a Python identifier")
        if size is not None and not size.isidentifier():
            raise AlgorithmError(f"axis {name!r}: its size {size!r} is not a size name such as 'N'")
        super().__init__((name,))
        self.name = name
        self.size = size

    def rebuild(self, children=()):
        _no_children(self, children)
        return Axis(self.name, self.size)

    def signature(self):
        return (self.name,)

    def __repr__(self):
        return f"Axis({self.name})"

    # an axis is also the 1-tuple of itself, so that ``i = dt.axes("i")`` and ``i, = dt.axes("i")`` both
    # give the axis (and ``dt.axes("i")[0]``, ``len(dt.axes("i"))`` read as for several names)
    def __iter__(self):
        return iter((self,))

    def __len__(self):
        return 1

    def __getitem__(self, idx):
        """``i[0]`` (or ``i[-1]``): the axis itself, as the 1-tuple of itself (``dt.axes("i")[0]``);
        ``i[j, ...]`` with axes fixes an output's layout, as for any expression."""
        if isinstance(idx, int) and not isinstance(idx, bool):
            if idx in (0, -1):
                return self
            raise IndexError(f"axis {self.name!r} is a sequence of one axis (itself): index 0 or -1, got {idx}")
        return super().__getitem__(idx)


class ScalarParam(Expr):
    """A Python scalar argument of the algorithm (annotated ``float`` or ``int``)."""
    __slots__ = ("name", "pytype")

    def __init__(self, name: str, pytype: type):
        super().__init__(())
        self.name = name
        self.pytype = pytype

    def rebuild(self, children=()):
        _no_children(self, children)
        return ScalarParam(self.name, self.pytype)

    def signature(self):
        return (self.name,)


class Load(Expr):
    """Element access ``T[idx0, idx1, ...]`` of an input tensor (or of a materialised stage).
    Each index is an :class:`Axis` or an integer-valued expression: arithmetic of axes and integer
    scalars (``X[i, j + 1]``, ``X[h * s + r - p]``, ``X[h // G]``) or a gather (``X[i, labels[i]]``).

    ``pad``: None, or the value read where an index falls outside its dim (``X.pad(0.0)[i, j + 1]``;
    a float, or an int kept exact; the call refuses one the tensor's dtype cannot hold:
    :func:`~dtriton.ir.dtypes.check_pad_values`); without it, reading outside is an error (:class:`~dtriton.errors.IndexRangeError`)."""
    __slots__ = ("tensor", "index", "pad")

    def __init__(self, tensor: "InputTensor", index: tuple[Expr, ...], pad: float | int | None = None):
        ax: list[str] = []
        for e in index:
            ax.extend(e.axes)
        super().__init__(ax)
        self.tensor = tensor
        self.index = index
        self.pad = pad

    def children(self):
        return self.index

    def rebuild(self, children):
        if len(children) != len(self.index):
            raise ValueError(f"a load of {self.tensor.name} takes {len(self.index)} indices, got {len(children)}")
        return Load(self.tensor, tuple(children), self.pad)

    def signature(self):
        p = self.pad   # (an int padding a float holds is the same read: X.pad(0) and X.pad(0.0))
        return (id(self.tensor),) if p is None else (id(self.tensor), repr(float(p) if float(p) == p else p))

    def is_plain(self) -> bool:
        """True when every index is a bare axis, each distinct (no gather, no diagonal)."""
        names = [e.name for e in self.index if isinstance(e, Axis)]
        return len(names) == len(self.index) and len(set(names)) == len(names)


class Unary(Expr):
    """An elementwise function of one operand (``op`` in :data:`UNARY_OPS`)."""
    __slots__ = ("op", "x")

    def __init__(self, op: str, x: Expr):
        assert op in UNARY_OPS, op
        super().__init__(x.axes)
        self.op, self.x = op, x

    def children(self):
        return (self.x,)

    def rebuild(self, children):
        (x,) = children
        return Unary(self.op, x)

    def signature(self):
        return (self.op,)


class Binary(Expr):
    """An elementwise operation of two operands (``op`` in :data:`BINARY_OPS`), broadcast by axis name.

    ``power``: None, or for the ``1.0 / x`` node of ``x ** -n`` (a negative integer literal power,
    traced as a power of the reciprocal) the power ``-n``. The base's dtype is known at the call
    only, where an integer base is refused (torch raises "Integers to negative integer powers are
    not allowed"; the reciprocal alone would make it float).

    ``lift``: None, or for the products of ``x ** n`` (a literal power ``n >= 2``) the kind of the
    literal, which sets the dtype as torch's ``pow`` does and the plain product would not: ``"int"``
    (a bool ``x`` gives int64, not bool) or ``"float"`` (an integer or bool ``x`` gives a float, the
    products computed in floats); a no-op for a float ``x``, which keeps its dtype. ``rebuild`` keeps both and both are part of the signature, so a rewrite or CSE never
    drops them nor merges the node with a written ``1.0 / x`` or ``x * x``."""
    __slots__ = ("op", "a", "b", "power", "lift")

    def __init__(self, op: str, a: Expr, b: Expr, power: int | None = None, lift: str | None = None):
        assert op in BINARY_OPS, op
        assert power is None or (op == "div" and power < 0), (op, power)
        assert lift is None or (op == "mul" and lift in ("int", "float")), (op, lift)
        super().__init__(a.axes + b.axes)
        self.op, self.a, self.b, self.power, self.lift = op, a, b, power, lift

    def children(self):
        return (self.a, self.b)

    def rebuild(self, children):
        a, b = children
        return Binary(self.op, a, b, self.power, self.lift)

    def signature(self):
        return (self.op,) + ((self.power,) if self.power is not None else ()) + ((self.lift,) if self.lift else ())


class Where(Expr):
    """Elementwise select: ``a`` where ``cond`` holds, else ``b``."""
    __slots__ = ("cond", "a", "b")

    def __init__(self, cond: Expr, a: Expr, b: Expr):
        super().__init__(cond.axes + a.axes + b.axes)
        self.cond, self.a, self.b = cond, a, b

    def children(self):
        return (self.cond, self.a, self.b)

    def rebuild(self, children):
        cond, a, b = children
        return Where(cond, a, b)


class Cast(Expr):
    """A cast to a torch dtype, rounding as torch's ``.to(dtype)``. ``saturate``: round to nearest
    (ties to even) and clamp to the dtype's finite range first (infinities too); NaN stays NaN for a
    float dtype and becomes 0 for an integer one (see :data:`SATURATING_DTYPES`)."""
    __slots__ = ("x", "dtype", "saturate")

    def __init__(self, x: Expr, dtype: torch.dtype, saturate: bool = False):
        if saturate and dtype not in SATURATING_DTYPES:
            names = ", ".join(str(d).replace("torch.", "") for d in SATURATING_DTYPES)
            raise AlgorithmError(f"a saturating cast needs one of the dtypes {names}, got {dtype}; "
                                 f"use saturate=False for other dtypes")
        super().__init__(x.axes)
        self.x, self.dtype, self.saturate = x, dtype, bool(saturate)

    def children(self):
        return (self.x,)

    def rebuild(self, children):
        (x,) = children
        return Cast(x, self.dtype, self.saturate)

    def signature(self):
        return (str(self.dtype), self.saturate)


class Reduce(Expr):
    """A reduction stage of ``x`` over ``over`` (axis names) with a :class:`Combiner`.

    ``Reduce(op, x, over, name, mean=False)``: ``op`` is a combiner or its name; ``mean=True``
    with ``"sum"`` gives the mean combiner (the sum followed by a division by the reduced extent).
    What kind of reduction it is, is read from ``combiner`` (never from a name)."""
    __slots__ = ("combiner", "x", "over", "name")

    def __init__(self, op: "str | Combiner", x: Expr, over: tuple[str, ...], name: str | None,
                 mean: bool = False):
        c = op if isinstance(op, Combiner) else get_combiner(op)
        if mean:
            if c.name != "sum":
                raise ValueError(f"mean=True needs the sum combiner, got {c.name!r}")
            c = get_combiner("mean")
        for a in over:
            if a not in x.axes:
                raise AlgorithmError(
                    f"reduction {name or c.base!r} is over axis {a!r}, which its operand does not use "
                    f"(operand axes: {list(x.axes)})")
        super().__init__([a for a in x.axes if a not in over])
        self.combiner, self.x, self.over, self.name = c, x, tuple(over), name

    def children(self):
        return (self.x,)

    def rebuild(self, children):
        (x,) = children
        return Reduce(self.combiner, x, self.over, self.name)

    def signature(self):
        return (self.combiner.name, self.over, self.name)


class Output:
    """An expression with a fixed layout (``expr[i, j]``): a stage that writes an output tensor.

    Used inside an algorithm, it stands for its expression: ``n[i] + 1e-6``, ``-n[i]`` and
    ``dt.sqrt(n[i])`` compute with ``n`` (axes broadcast by name as for any expression), so a
    stage result indexed by its axes can be used like the stage itself.

    ``floor``: a float dtype the output is stored in at least (its result dtype promoted with it):
    the statistics a forward saves for its backward keep float32 for 16-bit inputs, as torch's do."""
    __slots__ = ("expr", "layout", "name", "floor")

    def __init__(self, expr: Expr, layout: tuple[str, ...], name: str | None = None,
                 floor: torch.dtype | None = None):
        self.expr, self.layout, self.name, self.floor = expr, layout, name, floor

    def children(self) -> tuple[Expr]:
        """The indexed expression."""
        return (self.expr,)

    def rebuild(self, children: Sequence[Expr]) -> "Output":
        """A new output of this layout and name over the expression ``children[0]``."""
        (expr,) = children
        return Output(expr, self.layout, self.name, self.floor)

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
              "__pow__", "__rpow__", "__neg__", "__pos__", "__abs__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__",
              "__and__", "__or__", "__invert__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__float__",
              "__bool__"):
    setattr(Output, _name, _through_expr(_name))
Output.__hash__ = object.__hash__   # identity, as before (== builds a comparison node)
Output.__torch_function__ = Expr.__dict__["__torch_function__"]
del _name


class InputTensor:
    """A tensor argument (or an intermediate buffer) while tracing: index it with axes.

    ``weak``: its values take part in result dtypes as a Python scalar does (a float32 statistic
    saved by a 16-bit forward leaves its backward's gradients 16-bit, as in torch)."""

    def __init__(self, name: str, dims: tuple[str, ...], position: int | None, weak: bool = False):
        self.name, self.dims, self.position, self.weak = name, dims, position, weak

    def __getitem__(self, idx) -> Load:
        return self.load(idx, None)

    def _unindexed(self, *_):
        as_expr(self)   # raises: an input tensor is used in arithmetic without indices

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _unindexed
    __pow__ = __rpow__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __matmul__ = __rmatmul__ = _unindexed
    __neg__ = __abs__ = __invert__ = __and__ = __or__ = __lt__ = __le__ = __gt__ = __ge__ = _unindexed

    @property
    def shape(self):
        """Not known while tracing: an :class:`AlgorithmError` naming the dims' symbols."""
        raise AlgorithmError(f"{self.name}.shape: an input's sizes are not known while the algorithm is traced; its "
                             f"dims are the symbols {list(self.dims)} (an axis indexing a dim ranges over it; an int "
                             f"argument gives a number)")

    def load(self, idx, pad: float | None) -> Load:
        """The :class:`Load` ``self[idx]`` (``pad``: the value read outside the dims, or None)."""
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != len(self.dims):
            raise AlgorithmError(
                f"{self.name} has {len(self.dims)} dims {list(self.dims)} but is indexed with {len(idx)}")
        index = []
        for d, e in zip(self.dims, idx):
            if isinstance(e, InputTensor):
                raise AlgorithmError(f"index {e.name} of {self.name} needs its own indices, e.g. {e.name}[i]")
            if isinstance(e, float) or (isinstance(e, Const) and not e.integer):
                raise AlgorithmError(f"index {e!r} of dim {d!r} of {self.name} is a float; indices are integers "
                                     f"(axes, integer literals and arguments, and their + - * // %)")
            index.append(as_expr(e) if not isinstance(e, Axis) else e)
        return Load(self, tuple(index), pad)

    def pad(self, value: float) -> "PaddedTensor":
        """``X.pad(value)[i, j + 1]``: a view of this tensor that reads ``value`` wherever an index
        falls outside its dim (a zero-padded convolution, a shifted difference). ``value`` is a
        Python number (``0.0``, ``float('-inf')`` for max pooling) that the tensor's dtype holds
        exactly: an integer tensor takes an integer in its range (``X_int.pad(1.5)`` and
        ``X_int.pad(float('-inf'))`` raise an :class:`AlgorithmError` at the call), a bool tensor
        0, 1, False or True."""
        return PaddedTensor(self, value)

    def __repr__(self):
        return f"{self.name}[{', '.join(self.dims)}]"


class PaddedTensor:
    """A tensor read with a padding value outside its dims (``X.pad(0.0)``); index it like the
    tensor. Raises :class:`AlgorithmError` for a padding value that is not a Python number."""

    def __init__(self, tensor: InputTensor, value):
        if not isinstance(value, (int, float)):
            raise AlgorithmError(f"{tensor.name}.pad(value): the padding value must be a Python number such as "
                                 f"0.0 or float('-inf'), got {value!r}")
        # an int stays an int (exact for every int64 value; float() would round past 2**53); a bool is 0 or 1
        self.tensor, self.value = tensor, int(value) if isinstance(value, int) and abs(value) < 2 ** 63 else float(value)

    def __getitem__(self, idx) -> Load:
        return self.tensor.load(idx, self.value)

    def __repr__(self):
        return f"{self.tensor.name}.pad({self.value!r})"


# ----------------------------------------------------------------------------------------------
# readable text
# ----------------------------------------------------------------------------------------------
_SYM = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
        "eq": "==", "ne": "!=", "and": "&", "or": "|"}


def _fmt_const(v: float | int, integer: bool = False) -> str:
    """A literal as written: an int (or a float of an integer literal, ``integer``) as ``2``, a float
    as ``2.0``, ``1.5``, ``inf``."""
    if isinstance(v, int):
        return repr(v)
    return repr(int(v)) if integer and v == v and abs(v) != math.inf else repr(v)


def fmt(n: Expr, depth: int = 0, names: dict | None = None, limit: int | None = 6) -> str:
    """Readable infix text for an expression (stages print by name when ``names`` maps node ids
    to stage names; the text is cut with ``…`` below depth ``limit``, never when it is None)."""
    if names and n.uid in names and depth > 0:
        return names[n.uid]
    if limit is not None and depth > limit:
        return "…"
    d = depth + 1
    if isinstance(n, Const):
        return repr(bool(n.value)) if n.boolean else _fmt_const(n.value, n.integer)
    if isinstance(n, (Axis, ScalarParam)):
        return n.name
    if isinstance(n, Load):
        pad = "" if n.pad is None else f".pad({_fmt_const(n.pad)})"
        return f"{n.tensor.name}{pad}[{', '.join(fmt(e, d, names, limit) for e in n.index)}]"
    if isinstance(n, Unary):
        return f"-{fmt(n.x, d, names, limit)}" if n.op == "neg" else f"{n.op}({fmt(n.x, d, names, limit)})"
    if isinstance(n, Binary):
        if n.op in _SYM:
            return f"({fmt(n.a, d, names, limit)} {_SYM[n.op]} {fmt(n.b, d, names, limit)})"
        return f"{n.op}({fmt(n.a, d, names, limit)}, {fmt(n.b, d, names, limit)})"
    if isinstance(n, Where):
        return f"where({fmt(n.cond, d, names, limit)}, {fmt(n.a, d, names, limit)}, {fmt(n.b, d, names, limit)})"
    if isinstance(n, Cast):
        sat = ", saturate=True" if n.saturate else ""
        return f"cast({fmt(n.x, d, names, limit)}, {n.dtype}{sat})"
    if isinstance(n, Reduce):
        return f"{n.combiner.name} over {','.join(n.over)} of {fmt(n.x, d, names, limit)}"
    return type(n).__name__
