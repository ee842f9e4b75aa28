"""The node builder of the derivation: hash-consing, with trivial algebra folded as nodes are made.

Every node of a derived graph is made by one :class:`Graph`, which returns an existing
structurally identical node when there is one (so equal sub-expressions are one node and merge
into one stage) and simplifies as it builds: constant folding, ``x*1``, ``x*0``, ``--x``,
``x * where(c, 1, 0) -> where(c, x, 0)``, signs kept outside products and conditionals, factors
free of a summed axis hoisted out of the sum. ``None`` stands for a structurally zero value
(no adjoint) throughout.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

from ..ir import (Axis, Binary, Cast, Combiner, Const, Expr, InputTensor, Load, Reduce, ScalarParam, Unary, Where,
                  get_combiner, topo_order)

__all__ = ["Graph", "is_neg"]


def is_neg(x) -> bool:
    """True when ``x`` is a negation node ``-y``."""
    return isinstance(x, Unary) and x.op == "neg"


class Graph:
    """Builds IR nodes, returning an existing structurally identical node when there is one, and
    folding trivial algebra. ``None`` stands for a structurally zero value (no adjoint).

    Attributes:
        hint: new (unnamed) Reduce id -> stage-name hint, used when the node becomes a stage.
        fwd: ids of the nodes cloned from the forward algorithm.
        size: axis name -> size symbol (grows as fresh axes are made).
        tensors, scalars: the parameters by name.
    """

    def __init__(self, axis_size: dict[str, str]):
        self.table: dict[tuple, Expr] = {}
        self.hint: dict[int, str] = {}
        self.fwd: set[int] = set()
        self.size = dict(axis_size)
        self.tensors: dict[str, InputTensor] = {}
        self.scalars: dict[str, ScalarParam] = {}

    # -- raw interning -------------------------------------------------------------------------
    def _get(self, key: tuple, make: Callable[[], Expr]) -> Expr:
        n = self.table.get(key)
        if n is None:
            n = make()
            self.table[key] = n
        return n

    def const(self, v: float, integer: bool = False, boolean: bool = False) -> Expr:
        """The constant ``v`` (NaN constants are one node too); ``integer``: a literal written as
        a Python int (kept from the forward: ``q % 2`` of an int64 ``q`` stays integer arithmetic);
        ``boolean``: written as a Python bool (kept from the forward: ``B[i] + True`` stays bool)."""
        v = float(v)
        return self._get(("C", repr(float(v)), bool(integer) or bool(boolean), bool(boolean)),
                         lambda: Const(v, integer, boolean))

    def axis(self, name: str) -> Axis:
        """The axis ``name``, declared with its size symbol where the graph knows it: an axis that
        only appears inside index expressions (a pooling window's ``r`` in ``X[n, h * s + r]``) has no
        plain access to size it in a backward algorithm."""
        return self._get(("A", name), lambda: Axis(name, self.size.get(name)))  # type: ignore[return-value]

    def scalar(self, p: ScalarParam) -> Expr:
        """This graph's scalar parameter of ``p``'s name (made on first use)."""
        if p.name not in self.scalars:
            self.scalars[p.name] = ScalarParam(p.name, p.pytype)
        return self.scalars[p.name]

    def tensor(self, name: str, dims: tuple[str, ...]) -> InputTensor:
        """This graph's tensor parameter ``name`` (made on first use, at the next position)."""
        if name not in self.tensors:
            self.tensors[name] = InputTensor(name, tuple(dims), len(self.tensors))
        return self.tensors[name]

    def load(self, t: InputTensor, index: Sequence[Expr], pad: float | None = None) -> Expr:
        """``t[index]`` (``t.pad(pad)[index]`` with a padding value)."""
        index = tuple(index)
        return self._get(("L", t.name, tuple(e.uid for e in index), pad), lambda: Load(t, index, pad))

    def raw_unary(self, op: str, x: Expr) -> Expr:
        """``op(x)``, not simplified."""
        return self._get(("U", op, x.uid), lambda: Unary(op, x))

    def raw_binary(self, op: str, a: Expr, b: Expr) -> Expr:
        """``op(a, b)``, not simplified."""
        return self._get(("B", op, a.uid, b.uid), lambda: Binary(op, a, b))

    def raw_where(self, c: Expr, a: Expr, b: Expr) -> Expr:
        """``where(c, a, b)``, not simplified."""
        return self._get(("W", c.uid, a.uid, b.uid), lambda: Where(c, a, b))

    def cast(self, x: Expr, dtype, saturate: bool = False) -> Expr:
        """``cast(x, dtype)`` (``saturate``: the saturating cast)."""
        return self._get(("K", str(dtype), saturate, x.uid), lambda: Cast(x, dtype, saturate))

    def reduce(self, op: "str | Combiner", x: Expr, over: Iterable[str], mean: bool = False,
               name: str | None = None, hint: str | None = None) -> Expr:
        """``op over `over` of x`` (``op``: a combiner or its name; ``mean=True`` with ``"sum"``: the
        mean); an unnamed reduction records ``hint`` (default ``d_<base kind>``) as the name its
        stage will get."""
        over = tuple(over)
        c = op if isinstance(op, Combiner) else get_combiner(op)
        if mean:
            c = get_combiner("mean") if c.name == "sum" else c
        key = ("R", c.name, over, x.uid, name)
        n = self.table.get(key)
        if n is None:
            n = Reduce(c, x, over, name)
            self.table[key] = n
            if name is None:
                self.hint[n.uid] = hint or f"d_{c.base}"
        return n

    def remake(self, n: Expr, kids: Sequence[Expr]) -> Expr:
        """A :class:`Load`, :class:`Unary`, :class:`Binary`, :class:`Where` or :class:`Cast` like ``n``
        over the children ``kids`` (this graph's nodes), not simplified. A load reads this graph's
        tensor of the same name."""
        if isinstance(n, Load):
            return self.load(self.tensors[n.tensor.name], kids, n.pad)
        if isinstance(n, Unary):
            return self.raw_unary(n.op, kids[0])
        if isinstance(n, Binary) and (n.power is not None or n.lift is not None):
            # the reciprocal of x ** -n keeps its power, a product of x ** n the kind of n
            return self._get(("B", n.op, kids[0].uid, kids[1].uid, n.power, n.lift), lambda: n.rebuild(kids))
        if isinstance(n, Binary):
            return self.raw_binary(n.op, kids[0], kids[1])
        if isinstance(n, Where):
            return self.raw_where(kids[0], kids[1], kids[2])
        if isinstance(n, Cast):
            return self.cast(kids[0], n.dtype, n.saturate)
        raise TypeError(f"Graph.remake does not handle {type(n).__name__} nodes")

    def substitute(self, roots: Sequence[Expr], repl: dict[int, Expr]) -> dict[int, Expr]:
        """The nodes reachable from ``roots`` with each node whose id is in ``repl`` replaced by its value
        there, every node above a replaced one rebuilt through the simplifying constructors (so a
        replacement by the constant 1 folds ``x / 1``, ``x * 1``, ``log(1)``); by old node id. A node
        nothing below changes is kept as it is; a rebuilt reduction keeps its name or stage-name hint."""
        new: dict[int, Expr] = {}
        for n in topo_order(list(roots)):
            if n.uid in repl:
                new[n.uid] = repl[n.uid]
                continue
            kids = n.children()
            moved = [new.get(c.uid, c) for c in kids]
            if all(a is b for a, b in zip(moved, kids)):
                new[n.uid] = n
                continue
            r = self._rebuilt(n, moved)
            new[n.uid] = self.const(0.0) if r is None else r
        return new

    def _rebuilt(self, n: Expr, kids: list[Expr]):
        """``n`` over ``kids`` through the simplifying constructors (``None``: zero)."""
        if isinstance(n, Binary) and n.op in ("add", "sub", "mul", "div") and n.lift is None:
            return getattr(self, n.op)(kids[0], kids[1])
        if isinstance(n, Unary):
            x = kids[0]
            if n.op == "neg":
                return self.neg(x)
            if isinstance(x, Const) and n.op in ("exp", "log") and (n.op == "exp" or x.value > 0):
                return self.const(getattr(math, n.op)(x.value))
            return self.raw_unary(n.op, x)
        if isinstance(n, Where):
            return self.where(*kids)
        if isinstance(n, Reduce):
            return self.reduce(n.combiner, kids[0], n.over, name=n.name, hint=self.hint.get(n.uid))
        return self.remake(n, kids)

    # -- queries -------------------------------------------------------------------------------
    @staticmethod
    def cval(n) -> float | None:
        """The value of a constant node, else ``None``."""
        return n.value if isinstance(n, Const) else None

    def is_zero(self, n) -> bool:
        """True for ``None`` (structural zero) and the constant 0."""
        return n is None or (isinstance(n, Const) and n.value == 0.0)

    # -- simplifying constructors --------------------------------------------------------------
    def neg(self, x):
        """``-x``."""
        if x is None:
            return None
        if isinstance(x, Const):
            return self.const(-x.value)
        if is_neg(x):
            return x.x
        return self.raw_unary("neg", x)

    def add(self, a, b):
        """``a + b``."""
        if self.is_zero(a):
            return b
        if self.is_zero(b):
            return a
        if isinstance(a, Const) and isinstance(b, Const):
            return self.const(a.value + b.value)
        if is_neg(b):
            return self.sub(a, b.x)
        if is_neg(a):
            return self.sub(b, a.x)
        return self.raw_binary("add", a, b)

    def sub(self, a, b):
        """``a - b``."""
        if self.is_zero(b):
            return a
        if self.is_zero(a):
            return self.neg(b)
        if isinstance(a, Const) and isinstance(b, Const):
            return self.const(a.value - b.value)
        if is_neg(b):
            return self.add(a, b.x)
        return self.raw_binary("sub", a, b)

    def mul(self, a, b):
        """``a * b``."""
        if a is None or b is None:
            return None
        ca, cb = self.cval(a), self.cval(b)
        if ca is not None and cb is not None:
            return self.const(ca * cb)
        if ca == 0.0 or cb == 0.0:
            return None
        if ca == 1.0:
            return b
        if cb == 1.0:
            return a
        if ca == -1.0:
            return self.neg(b)
        if cb == -1.0:
            return self.neg(a)
        if is_neg(a):
            return self.neg(self.mul(a.x, b))
        if is_neg(b):
            return self.neg(self.mul(a, b.x))
        for x, y in ((a, b), (b, a)):  # x * where(c, 1, 0) -> where(c, x, 0)
            if isinstance(y, Where) and isinstance(y.a, Const) and isinstance(y.b, Const):
                if y.a.value == 1.0 and y.b.value == 0.0:
                    return self.where(y.cond, x, None)
                if y.a.value == 0.0 and y.b.value == 1.0:
                    return self.where(y.cond, None, x)
        if cb is not None and ca is None:  # constants first: 2 * x
            a, b, ca, cb = b, a, cb, ca
        if ca is not None and isinstance(b, Binary) and b.op == "mul" and isinstance(b.a, Const):
            return self.mul(self.const(ca * b.a.value), b.b)  # 2 * (-0.5 * x) -> -1 * x
        return self.raw_binary("mul", a, b)

    def div(self, a, b):
        """``a / b``."""
        if a is None:
            return None
        ca, cb = self.cval(a), self.cval(b)
        if ca is not None and cb is not None and cb != 0.0:
            return self.const(ca / cb)
        if ca == 0.0:
            return None
        if cb == 1.0:
            return a
        if cb == -1.0:
            return self.neg(a)
        if is_neg(a):
            return self.neg(self.div(a.x, b))
        if is_neg(b):
            return self.neg(self.div(a, b.x))
        return self.raw_binary("div", a, b)

    def where(self, c, a, b):
        """``where(c, a, b)``; ``None`` branches are zero."""
        if self.is_zero(a) and self.is_zero(b):
            return None
        if isinstance(c, Const):
            return a if c.value != 0.0 else b
        a = a if a is not None else self.const(0.0)
        b = b if b is not None else self.const(0.0)
        if a is b:
            return a
        # where(c, -x, 0) -> -where(c, x, 0): keeps signs outside, where they merge
        za, zb = self.is_zero(a), self.is_zero(b)
        if za and is_neg(b):
            return self.neg(self.where(c, None, b.x))
        if zb and is_neg(a):
            return self.neg(self.where(c, a.x, None))
        return self.raw_where(c, a, b)

    def cmp(self, op: str, a: Expr, b: Expr) -> Expr:
        """The comparison ``op(a, b)`` (``eq``, ``gt``, ...)."""
        return self.raw_binary(op, a, b)

    # -- products and sums as lists --------------------------------------------------------------
    def factors(self, x) -> tuple[int, list[Expr], list[Expr]]:
        """``x = sign * prod(num) / prod(den)`` through mul/div/neg chains."""
        if is_neg(x):
            s, n, d = self.factors(x.x)
            return -s, n, d
        if isinstance(x, Binary) and x.op == "mul":
            s1, n1, d1 = self.factors(x.a)
            s2, n2, d2 = self.factors(x.b)
            return s1 * s2, n1 + n2, d1 + d2
        if isinstance(x, Binary) and x.op == "div":
            s1, n1, d1 = self.factors(x.a)
            s2, n2, d2 = self.factors(x.b)
            return s1 * s2, n1 + d2, d1 + n2
        return 1, [x], []

    def product(self, sign: int, num: Sequence[Expr], den: Sequence[Expr]):
        """``sign * prod(num) / prod(den)``, built left to right."""
        r = self.const(1.0)
        for f in num:
            r = self.mul(r, f)
        d = None
        for f in den:
            d = f if d is None else self.mul(d, f)
        if d is not None:
            r = self.div(r, d)
        return self.neg(r) if sign < 0 else r

    def divide_early(self, num: Sequence[Expr], den: Sequence[Expr]) -> tuple[list[Expr], list[Expr]]:
        """Each divisor moved onto the numerator factor with the fewest axes that holds all of its
        axes (a computed factor before a load): ``(dO[i, e] * p[i, j]) / l[i]`` becomes
        ``dO * (p / l)``, a product of two operands a contraction can take (the division would
        otherwise follow the product), with dO still a plain load. Returns the new
        (numerator, leftover denominator) lists."""
        num, rest = list(num), []
        for f in den:
            fits = [k for k, g in enumerate(num) if set(f.axes) <= set(g.axes)]
            if not fits:
                rest.append(f)
                continue
            # on a tie, a computed factor rather than a load: a plain 16-bit load stays a raw operand
            k = min(fits, key=lambda k: (len(num[k].axes), isinstance(num[k], Load)))
            num[k] = self.div(num[k], f)
        return num, rest

    def terms(self, x) -> list[tuple[int, Expr]]:
        """``x = sum(sign * term)`` through top-level add/sub/neg."""
        if isinstance(x, Binary) and x.op in ("add", "sub"):
            s = 1 if x.op == "add" else -1
            return self.terms(x.a) + [(s * sg, t) for sg, t in self.terms(x.b)]
        if is_neg(x):
            return [(-s, t) for s, t in self.terms(x.x)]
        return [(1, x)]

    # -- reductions ----------------------------------------------------------------------------
    def rsum(self, x, over: Iterable[str], hint: str, orient: Sequence[str] = ()):
        """``sum over `over` of x`` with factors free of ``over`` hoisted out of the sum.

        ``orient``: the axis order the sum's free axes should come out in (the derivation passes
        the orientation of the node whose adjoint this sum is, :func:`dtriton.grad.derive.orientation`;
        :meth:`oriented`); empty: the product's own."""
        if x is None:
            return None
        over = tuple(dict.fromkeys(over))
        assert all(a in x.axes for a in over), (over, x.axes)  # a sum of a broadcast needs an extent
        if not over:
            return x
        sign, num, den = self.factors(x)
        ov = set(over)
        inner_n = [f for f in num if ov & set(f.axes)]
        inner_d = [f for f in den if ov & set(f.axes)]
        outer_n = [f for f in num if not ov & set(f.axes)]
        outer_d = [f for f in den if not ov & set(f.axes)]
        inner_n, inner_d = self.divide_early(inner_n, inner_d)
        inner = self.product(1, self.oriented(inner_n, inner_d, ov, orient), inner_d)
        r = self.reduce("sum", inner, over, hint=hint)
        return self.product(sign, outer_n + [r], outer_d)

    @staticmethod
    def oriented(num: Sequence[Expr], den: Sequence[Expr], over: set[str], orient: Sequence[str]) -> list[Expr]:
        """The numerator factors ``num`` of a summed product reordered so that the sum's free axes
        (first appearance over ``num`` then ``den``, ``over`` left out: :class:`Reduce`'s axes) come
        out in the order of ``orient``, the orientation of the node whose adjoint the sum is. An adjoint
        then has its node's orientation, and a buffer that stores it the forward's layout (the
        diffusion layer's ``d_mul = sum over v of dout[v, c] * basis[v, k]`` is stored ``(k, c)`` as
        the forward's projection, not ``(c, k)``: its consumer's tf32x3 dot then reads the
        computed operand without spilling, bench/results/issue15/s9_axisorder). Factors are sorted stably by the
        positions in ``orient`` of their free axes, in their own order (those with none first);
        where that does not give the order (one factor holds the free axes the other way round)
        ``num`` is returned unchanged, as it is where its order is already right."""
        def free(fs):
            return tuple(dict.fromkeys(a for f in fs for a in f.axes if a not in over))
        have = free(list(num) + list(den))
        pos = {a: i for i, a in enumerate(a for a in orient if a in have)}
        if len(pos) < 2 or have == tuple(pos):
            return list(num)

        def key(f):
            return tuple(pos.get(a, len(pos)) for a in f.axes if a not in over) or (-1,)
        cand = sorted(num, key=key)
        return cand if free(cand + list(den)) == tuple(pos) else list(num)

    def count(self, over: Sequence[str], free: Sequence[str] = ()) -> Expr:
        """The number of elements of the axes ``over`` as a cheap reduction stage, ``sum over R of 1``
        (axis extents are not expressions in the IR). It is computed along the axes ``free`` too (one
        count per row, always equal), so that it lives next to the row reduction it divides and is
        never a 0-d stage (0-d materialised stages do not compile today)."""
        cond = None
        for a in tuple(free) + tuple(over):
            c = self.cmp("ge", self.axis(a), self.const(0.0))
            cond = c if cond is None else self.raw_binary("and", cond, c)
        one = self.raw_where(cond, self.const(1.0), self.const(0.0))
        return self.reduce("sum", one, tuple(over), hint="count_" + "_".join(over))

    def div_count(self, bar, over: Sequence[str], free: Sequence[str]):
        """``bar / N`` with ``N`` the extent of ``over`` (``free``: the axes of the mean node). Each
        term that is a product with a sum over axes of the same sizes becomes a mean of that sum (no
        extent needed); any other term is divided by a count stage (:meth:`count`)."""
        if bar is None:
            return None
        syms = sorted(self.size[a] for a in over)
        out = None
        for sg, t in self.terms(bar):
            s, num, den = self.factors(t)
            for k, f in enumerate(num):
                if isinstance(f, Reduce) and f.combiner.name == "sum" and \
                        sorted(self.size[a] for a in f.over) == syms:
                    hint = self.hint.get(f.uid, f.name or "d_sum")
                    num[k] = self.reduce("sum", f.x, f.over, mean=True, hint=hint)
                    break
            else:
                den = den + [self.count(over, free)]
            out = self.add(out, self.product(s * sg, num, den))
        return out
