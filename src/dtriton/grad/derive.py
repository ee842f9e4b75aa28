"""Reverse-mode derivation: the adjoint of every node, from the outputs down to the tensor loads.

:class:`Deriver` clones the forward graph into a :class:`~dtriton.grad.graph.Graph`, finds the nodes
through which the requested inputs act arithmetically, and propagates adjoints in reverse
topological order (a node's adjoint is the sum of its parents' contributions, summed over the axes
it was broadcast along). Load adjoints then become the gradients of whole tensors
(:meth:`Deriver.tensor_grads`): a bare axis index is renamed to the output axis (:class:`Renamer`,
capture-avoiding), any other index becomes a one-hot comparison summed over the load's other axes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from itertools import chain, count
from typing import Any, Sequence

from ..errors import AlgorithmError
from ..ir import (Algorithm, Axis, Binary, Cast, Const, Expr, InputTensor, Load, Reduce, ScalarParam, Unary, Where, topo_order)
from .graph import Graph
from .naming import first_free, grad_param_names
from .shift import shift_class

__all__ = ["Deriver", "Renamer", "active_nodes", "layout_pairs", "orientation", "shift_invariant_extrema"]

#: binary ops through which an adjoint flows (comparisons and logic do not carry one)
ARITH_OPS = ("add", "sub", "mul", "div", "maximum", "minimum", "pow")


# ----------------------------------------------------------------------------------------------
# capture-avoiding axis renaming
# ----------------------------------------------------------------------------------------------
class Renamer:
    """Renames free axes of graph nodes (``ren(node, {old: new})``), renaming a reduction's bound
    axis when it would capture a renamed free axis. Results are memoised per (node, mapping)."""

    def __init__(self, g: Graph, taken: set[str]):
        self.g = g
        self.taken = taken
        self.memo: dict[tuple, Expr] = {}

    def fresh(self, base: str, size: str) -> str:
        """A new axis name ``<base><k>`` of size ``size``, not in use."""
        nm = first_free((f"{base}{k}" for k in count(1)), self.taken)
        self.g.size[nm] = size
        return nm

    def __call__(self, n: Expr, mapping: dict[str, str]) -> Expr:
        mapping = {a: b for a, b in mapping.items() if a != b and a in n.axes}
        if not mapping:
            return n
        key = (n.uid, tuple(sorted(mapping.items())))
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        g = self.g
        if isinstance(n, Axis):
            r = g.axis(mapping[n.name])
        elif isinstance(n, Reduce):
            inner = {a: b for a, b in mapping.items() if a not in n.over}
            targets = set(inner.values())
            over = list(n.over)
            for k, a in enumerate(over):
                if a in targets:  # the bound axis would capture a renamed free axis
                    nb = self.fresh(a, g.size[a])
                    inner[a] = nb
                    over[k] = nb
            x = self(n.x, inner)
            hint = n.name if n.name is not None else g.hint.get(n.uid)
            r = g.reduce(n.combiner, x, over, hint=hint)
        elif isinstance(n, (Load, Unary, Binary, Where, Cast)):
            r = g.remake(n, [self(c, mapping) for c in n.children()])
        else:
            r = n
        self.memo[key] = r
        return r


# ----------------------------------------------------------------------------------------------
# the derivation
# ----------------------------------------------------------------------------------------------
def active_nodes(order: Sequence[Expr], wrt: set[str]) -> set[int]:
    """Ids of the nodes of ``order`` (children first) through which a tensor in ``wrt`` influences
    the value arithmetically (not only as a condition, comparison or integer index)."""
    active: set[int] = set()
    for n in order:
        if isinstance(n, Load):
            if n.tensor.name in wrt:
                active.add(n.uid)
        elif isinstance(n, Binary) and n.op not in ARITH_OPS:
            continue
        elif isinstance(n, Unary) and n.op == "not":
            continue
        elif isinstance(n, Reduce) and n.combiner.grad == "index":
            continue  # an index (argmax) has no gradient; a gather by it still differentiates
        elif isinstance(n, Where):
            if n.a.uid in active or n.b.uid in active:
                active.add(n.uid)
        elif isinstance(n, Cast):
            if n.dtype.is_floating_point and n.x.uid in active:
                active.add(n.uid)
        elif any(c.uid in active for c in n.children()):
            active.add(n.uid)
    return active


def shift_invariant_extrema(order: list[Expr], active: set[int], roots: Sequence[Expr]) -> set[int]:
    """Ids of the active max/min stages that no root changes under shifting (zero adjoint)."""
    blocked: set[int] = set()
    for n in order:
        if isinstance(n, Reduce) and n.combiner.grad == "extremum" and n.uid in active:
            cls = shift_class(n, order)
            if all(e.uid not in cls or (cls[e.uid] is not None and cls[e.uid][1] == 0) for e in roots):
                blocked.add(n.uid)
    return blocked


def layout_pairs(order: Sequence[Expr], layouts: Sequence[Sequence[str]]) -> tuple[frozenset, frozenset]:
    """The axis orders the forward lays out, as two sets of pairs ``(a, b)``, ``a`` before ``b``:
    those of its tensors (the bare-axis index of a load in ``order``, an output layout of
    ``layouts``) and those of its reduction stages in ``order`` (a stage's free axes, the layout a
    buffer of it has). A pair seen the other way round too in the same set is left out (a tensor
    read transposed leaves its two axes unordered)."""
    def pairs(seqs) -> frozenset:
        seen = {(a, b) for names in seqs for k, a in enumerate(names) for b in names[k + 1:] if a != b}
        return frozenset(p for p in seen if (p[1], p[0]) not in seen)
    loads = [[e.name for e in n.index if isinstance(e, Axis)] for n in order if isinstance(n, Load)]
    return (pairs(loads + [list(lay) for lay in layouts]),
            pairs([list(n.axes) for n in order if isinstance(n, Reduce)]))


def orientation(axes: Sequence[str], levels: Sequence[frozenset]) -> tuple[str, ...]:
    """``axes`` in the order the forward lays them out (:func:`layout_pairs`' sets, ``levels``, the
    first deciding first), the rest in their own order: each step keeps the axes that no remaining
    axis precedes in the first set, of those the ones none precedes in the next (where any is
    left), and takes the first. The orientation of a derived sum over the adjoint of a node with
    these axes (:meth:`Deriver.collect`): the node's own where the forward says nothing else. The
    causal attention's row statistics come out ``(i, b, h)`` and its probabilities ``(j, i, b, h)``
    (the condition ``j <= i`` names its axes first); their adjoints are laid out ``(b, h, i)`` as
    the queries are (else the dK/dV kernel would read one along ``i`` at a stride of B*H) and
    ``(b, h, i, j)`` as the scores."""
    left, out = list(axes), []
    while left:
        cands = left
        for pairs in levels:
            kept = [a for a in cands if not any((b, a) in pairs for b in left)]
            cands = kept or cands
        out.append(cands[0])
        left.remove(cands[0])
    return tuple(out)


class Deriver:
    """The reverse-mode derivation of one forward algorithm, built in one :class:`Graph`.

    Use: ``d = Deriver(alg); grads = d.run(wrt)``; ``grads`` maps an input name to ``(gradient
    expression, output axes)``. ``clone_forward`` alone gives the forward graph (for saving stages)."""

    def __init__(self, alg: Algorithm):
        self.alg = alg
        self.g = Graph(alg.axis_size)
        self.clone: dict[int, Expr] = {}
        self.gnames: list[str] = []
        self.order: list[Expr] = []
        self.active: set[int] = set()
        self.blocked: set[int] = set()
        self.load_adj: list[tuple[Load, Expr]] = []
        self.pairs: tuple[frozenset, ...] = ()

    # -- clone the forward graph into the factory ------------------------------------------------
    def clone_forward(self) -> list[tuple[Expr, tuple[str, ...]]]:
        """Copy the forward algorithm into the graph (recorded in :attr:`clone`, by forward node id);
        returns ``(expression, layout)`` per output."""
        g = self.g
        for p in self.alg.params:
            if isinstance(p, InputTensor):
                g.tensor(p.name, p.dims)
            else:
                g.scalar(p)
        cl = self.clone
        for n in self.alg.nodes:
            if isinstance(n, Const):
                r = g.const(n.value, n.integer, n.boolean)
            elif isinstance(n, Axis):
                r = g.axis(n.name)
            elif isinstance(n, ScalarParam):
                r = g.scalar(n)
            elif isinstance(n, Reduce):
                r = g.reduce(n.combiner, cl[n.x.uid], n.over, name=n.name)
            elif isinstance(n, (Load, Unary, Binary, Where, Cast)):
                r = g.remake(n, [cl[c.uid] for c in n.children()])
            else:  # pragma: no cover - new node kinds
                raise AlgorithmError(f"dt.grad does not know how to differentiate {type(n).__name__} nodes")
            g.fwd.add(r.uid)
            cl[n.uid] = r
        return [(cl[o.expr.uid], o.layout) for o in self.alg.outputs]

    # -- adjoint propagation ---------------------------------------------------------------------
    def run(self, wrt: Sequence[str], seeded: Sequence[int] | None = None) -> dict[str, tuple[Expr, tuple[str, ...]]]:
        """Derive the gradients of the inputs ``wrt``: input name -> (expression, output axes), for
        the inputs whose gradient is not structurally zero. ``seeded``: the indices of the outputs
        whose upstream gradient may be nonzero (None: every output); the others contribute nothing
        (their gradient parameters exist but are not read)."""
        g = self.g
        outs = self.clone_forward()
        self.order = order = topo_order([e for e, _ in outs])
        self.pairs = layout_pairs(order, [lay for _, lay in outs])
        self.active = active = active_nodes(order, set(wrt))
        self.blocked = shift_invariant_extrema(order, active, [e for e, _ in outs])
        self.gnames = grad_param_names(self.alg)
        contribs: dict[int, list[Expr]] = defaultdict(list)
        for k, ((e, layout), gn) in enumerate(zip(outs, self.gnames)):
            gt = g.tensor(gn, tuple(self.alg.axis_size[a] for a in layout))
            if e.uid in active and (seeded is None or k in seeded):
                contribs[e.uid].append(g.load(gt, [g.axis(a) for a in layout]))
        self.load_adj = []
        for n in reversed(order):
            cs = contribs.pop(n.uid, None)
            if not cs:
                continue
            bar = self.collect(n, cs)
            if bar is None:
                continue
            if isinstance(n, Load):
                self.load_adj.append((n, bar))
                continue
            if n.uid in self.blocked:
                continue
            self.push(n, bar, contribs)
        return self.tensor_grads(wrt)

    @staticmethod
    def _hint(n: Expr) -> str:
        if isinstance(n, Reduce) and n.name:
            return f"d_{n.name}"
        if isinstance(n, Load):
            return f"d_{n.tensor.name}"
        if isinstance(n, (Unary, Binary)):
            return f"d_{n.op}"
        return "d_" + type(n).__name__.lower()

    def collect(self, n: Expr, cs: list[Expr]):
        """Sum the contributions to ``n``'s adjoint; those with axes ``n`` lacks (``n`` was
        broadcast along them) are summed over them, one reduction per set of such axes, each
        oriented as ``n`` (:func:`orientation`: its free axes in the order the forward's tensors
        and stages lay them out, else in ``n``'s), so a buffer that stores it has the forward's layout."""
        g = self.g
        groups: dict[tuple[str, ...], Any] = {}
        for c in cs:
            if c is None:
                continue
            extra = tuple(sorted(a for a in c.axes if a not in n.axes))
            groups[extra] = g.add(groups.get(extra), c)
        bar = None
        for extra, s in groups.items():
            bar = g.add(bar, g.rsum(s, extra, self._hint(n), orient=orientation(n.axes, self.pairs)) if extra else s)
        return bar

    def push(self, n: Expr, bar: Expr, contribs: dict[int, list[Expr]]):
        """Add the contributions of ``n``'s adjoint ``bar`` to its active children's lists."""
        g = self.g

        def to(child, v):
            if v is not None and child.uid in self.active:
                contribs[child.uid].append(self.broadcast_back(n, child, v))

        if isinstance(n, Unary):
            to(n.x, self.unary_adjoint(n, bar))
        elif isinstance(n, Binary):
            a, b, op = n.a, n.b, n.op
            if op == "add":
                to(a, bar)
                to(b, bar)
            elif op == "sub":
                to(a, bar)
                to(b, g.neg(bar))
            elif op == "mul":
                if a is b:
                    to(a, g.mul(g.const(2.0), g.mul(bar, a)))
                else:
                    to(a, g.mul(bar, b))
                    to(b, g.mul(bar, a))
            elif op == "div":
                to(a, g.div(bar, b))
                to(b, g.neg(g.div(g.mul(bar, n), b)))  # -bar * (a/b) / b, as torch
            elif op in ("maximum", "minimum"):
                # torch.maximum: the larger side gets the gradient, ties split it in halves, and
                # both sides get all of it where a NaN makes them unordered (only the losing side,
                # by a true comparison, gets none)
                lose = "lt" if op == "maximum" else "gt"
                half = g.mul(g.const(0.5), bar)
                tie = g.cmp("eq", a, b)
                to(a, g.where(g.cmp(lose, a, b), None, g.where(tie, half, bar)))
                to(b, g.where(g.cmp(lose, b, a), None, g.where(tie, half, bar)))
            elif op == "pow":
                da, db = self.pow_adjoints(n, bar)
                to(a, da)
                to(b, db)
        elif isinstance(n, Where):
            to(n.a, g.where(n.cond, bar, None))
            to(n.b, g.where(n.cond, None, bar))
        elif isinstance(n, Cast):
            to(n.x, bar)
        elif isinstance(n, Reduce):
            self.reduce_adjoint(n, bar, to)

    def pow_adjoints(self, n: Binary, bar: Expr) -> tuple[Expr | None, Expr | None]:
        """The contributions of ``n = x ** p``'s adjoint ``bar`` to ``x``'s and ``p``'s, as torch's
        ``pow_backward``: ``bar * (p * x ** (p - 1))`` in ``x``, 0 where ``p == 0`` (``x ** (p - 1)``
        is the ``pow`` node again: for a number ``p`` with the sqrt cases at ``p - 1 == +-0.5``, as
        torch's scalar pow; for a tensor ``p`` C's pow alone, as torch's tensor pow);
        ``bar * (x ** p * log(x))`` in ``p``, 0 where ``x == 0`` and ``p >= 0`` (NaN for a negative
        ``x``, as torch's)."""
        g, x, p = self.g, n.a, n.b
        zero = g.const(0.0)
        cp = g.cval(p)
        dx = None
        if cp != 0.0:
            dx = g.mul(bar, g.mul(p, g.raw_binary("pow", x, g.sub(p, g.const(1.0)))))
            if cp is None:
                dx = g.where(g.cmp("eq", p, zero), None, dx)
        if cp is not None:
            return dx, None
        at0 = g.cmp("and", g.cmp("eq", x, zero), g.cmp("ge", p, zero))
        # (a number base, c ** X: log(c) is folded in double by the plan, dtriton.ir.folded_literals)
        return dx, g.mul(bar, g.where(at0, None, g.mul(n, g.raw_unary("log", x))))

    def broadcast_back(self, n: Expr, child: Expr, v: Expr) -> Expr:
        """The contribution ``v`` of ``n``'s adjoint to ``child``'s, times the extent of the axes of
        ``n`` that neither ``child`` nor ``v`` has. ``n``'s adjoint lives on all of ``n``'s axes but
        may be constant along some (the adjoint of a sum's operand is the sum's, free of the summed
        axes): :meth:`collect` sums a contribution over the axes it has, and a ``child`` broadcast
        along one it lacks receives the sum of as many equal terms (``sum over j of (X[i, j] +
        b[i])``: ``db = N * bar``, not ``bar``)."""
        missing = [a for a in n.axes if a not in child.axes and a not in v.axes]
        if not missing:
            return v
        return self.g.mul(v, self.g.count(missing, child.axes))

    def reduce_adjoint(self, n: Reduce, bar: Expr, to) -> None:
        """Pass reduction ``n``'s adjoint ``bar`` to its operand by its combiner's gradient rule;
        an :class:`AlgorithmError` names the stage of a kind without a known rule."""
        g, rule = self.g, n.combiner.grad
        if rule == "sum":
            to(n.x, g.div_count(bar, n.over, n.axes) if n.combiner.finalize == "count" else bar)
        elif rule == "extremum":  # max/min: split evenly among the elements equal to the extremum (torch.amax)
            tie = g.cmp("eq", n.x, n)
            cnt = g.reduce("sum", g.where(tie, g.const(1.0), None), n.over, hint=f"ties_{n.name}")
            # no element equals the extremum: the slice holds a NaN (the extremum is NaN). torch.amax's backward
            # divides its masked gradient by that count of 0: NaN for the whole slice, which passes the NaN on
            nan_slice = None if bar is None else g.where(g.cmp("eq", cnt, g.const(0.0)), g.const(float("nan")), None)
            to(n.x, g.where(tie, g.div(bar, cnt), nan_slice))
        elif rule == "prod":
            to(n.x, g.mul(bar, self.prod_partial(n)))
        elif rule != "index":
            raise AlgorithmError(f"dt.grad cannot differentiate stage {n.name!r}: a {n.combiner.name} reduction "
                                 f"(gradient rule {rule!r}) has no known gradient")

    def prod_partial(self, n: Reduce) -> Expr:
        """d prod / d x_k: the product of the other elements of the slice, exactly (torch's value
        on a tensor with a zero, where it multiplies exclusive prefix and suffix products).

        A regular element (finite, non-zero) gets ``prod / x_k``: the zeros, infinities and NaNs
        of the others are in ``prod`` already. A special one (0, +-inf, NaN) gets the product of
        the regular elements (signed by the other infinities) times what the other specials make
        of it: 0 for another zero, inf for another infinity (0 * inf: NaN), NaN for another NaN.
        ``prod / x_k`` alone is NaN at an infinite factor (inf / inf) and 0/0 at a zero; torch's
        no-zero path divides too, so on a tensor without any zero torch gives NaN at an infinite
        factor where this gives the product of the others."""
        g, x = self.g, n.x
        one, zero, inf = g.const(1.0), g.const(0.0), g.const(math.inf)
        ax = g.raw_unary("abs", x)
        is_zero, is_inf, is_nan = g.cmp("eq", x, zero), g.cmp("eq", ax, inf), g.cmp("ne", x, x)
        regular = g.cmp("and", g.cmp("lt", ax, inf), g.cmp("ne", x, zero))
        neg = g.cmp("lt", x, zero)
        sign = g.where(neg, g.const(-1.0), one)      # -1 at a negative special (-inf), else 1
        signed = g.reduce("prod", g.where(regular, x, sign), n.over, hint=f"regular_{n.name}")

        def others(mark: Expr, what: str) -> Expr:   # are there specials of this kind besides x_k?
            cnt = g.reduce("sum", g.where(mark, one, None), n.over, hint=f"{what}_{n.name}")
            return g.cmp("gt", g.sub(cnt, g.where(mark, one, None)), zero)

        o_zero, o_inf, o_nan = others(is_zero, "zeros"), others(is_inf, "infs"), others(is_nan, "nans")
        # spelled as selections: Graph.mul folds x * where(c, 0, 1) to where(c, 0, x), losing 0 * inf = NaN
        undefined = g.cmp("or", o_nan, g.cmp("and", o_zero, o_inf))
        special = g.where(undefined, g.const(math.nan), g.where(o_zero, zero, g.where(o_inf, inf, one)))
        at_special = g.mul(g.mul(signed, sign), special)
        return g.where(regular, g.div(n, x), at_special)

    def unary_adjoint(self, n: Unary, bar: Expr):
        """The contribution of ``n = op(x)``'s adjoint ``bar`` to ``x``'s (``None``: none)."""
        g, x, op = self.g, n.x, n.op
        if op == "neg":
            return g.neg(bar)
        if op == "exp":
            return g.mul(bar, n)
        if op == "exp2":  # d/dx 2^x = ln(2) 2^x
            return g.mul(g.const(math.log(2.0)), g.mul(bar, n))
        if op == "log":
            return g.div(bar, x)
        if op == "sqrt":
            return g.div(g.mul(g.const(0.5), bar), n)
        if op == "rsqrt":  # d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 rsqrt(x)^3
            return g.mul(g.const(-0.5), g.mul(bar, g.mul(n, g.mul(n, n))))
        if op == "tanh":
            return g.mul(bar, g.sub(g.const(1.0), g.mul(n, n)))
        if op == "sigmoid":
            return g.mul(bar, g.mul(n, g.sub(g.const(1.0), n)))
        if op == "abs":  # torch: bar * sgn(x), sgn 0 at 0 and at NaN; a product, as torch's, so
            # that an infinite or NaN bar at x == 0 (sqrt(abs(x))) gives NaN there, not 0
            z = g.const(0.0)
            sgn = g.where(g.cmp("gt", x, z), g.const(1.0), g.where(g.cmp("lt", x, z), g.const(-1.0), z))
            return g.mul(bar, sgn)
        return None

    # -- from load adjoints to tensor gradients ------------------------------------------------
    def tensor_grads(self, wrt: Sequence[str]) -> dict[str, tuple[Expr, tuple[str, ...]]]:
        """Turn the load adjoints into whole-tensor gradients: input name -> (expression, axes)."""
        g = self.g
        taken = set(self.alg.axis_names) | set(g.size)
        ren = Renamer(g, taken)
        by_tensor: dict[str, list[tuple[Load, Expr]]] = defaultdict(list)
        for L, bar in self.load_adj:
            by_tensor[L.tensor.name].append((L, bar))
        result = {}
        for name in wrt:
            items = by_tensor.get(name)
            if not items:
                continue
            plain = [L for L, _ in items if L.is_plain()]
            if plain:
                out_axes = tuple(e.name for e in plain[0].index)
            else:
                out_axes = tuple(self._fresh_axis(d, taken) for d in g.tensors[name].dims)
            total = None
            for L, bar in items:
                total = g.add(total, self._scatter(ren, name, L, bar, out_axes))
            if total is not None:
                result[name] = (total, out_axes)
        return result

    def _scatter(self, ren: Renamer, name: str, L: Load, bar: Expr, out_axes: tuple[str, ...]):
        """The adjoint ``bar`` of the load ``L`` of tensor ``name`` laid out along ``out_axes``: bare
        axis indices renamed to the output axes, other indices compared with them (one-hot), the
        remaining axes of ``L`` summed (that sum oriented as the tensor, along ``out_axes``)."""
        g = self.g
        mapping: dict[str, str] = {}
        conds: list[tuple[Expr, str]] = []
        for e, o in zip(L.index, out_axes):
            if isinstance(e, Axis) and e.name not in mapping:
                mapping[e.name] = o
            else:
                conds.append((e, o))
        rest = [a for a in L.axes if a not in mapping]
        for a in rest:
            if a in out_axes:  # a summed axis that would collide with an output axis
                mapping[a] = ren.fresh(a, g.size[a])
        full = {a: mapping.get(a, a) for a in L.axes}
        v = ren(bar, full)
        for e, o in conds:
            v = g.where(g.cmp("eq", ren(e, full), g.axis(o)), v, None)
        return g.rsum(v, [full[a] for a in rest], f"d_{name}", orient=out_axes)

    def _fresh_axis(self, dim: str, taken: set[str]) -> str:
        base = dim.lower()
        nm = first_free(chain([base], (f"{base}{k}" for k in count(1))), taken)
        self.g.size[nm] = dim
        return nm
