"""Named algebraic rewrites of an algorithm (IR to IR), applied by the plan before lowering.

:func:`single_pass_variance` recognises the two-pass variance of a statistics-then-normalise
algorithm, ``mean((X - mean(X))**2)`` over the same axes (``**2`` traces to ``d * d``), and puts
a one-pass variance stage (the ``var`` combiner: Welford's update per lane, Chan's merge across
lanes) in its place. The variance then no longer waits for the mean: both statistics are ready
together and share one loop over X, so the statistics read X once instead of twice. The stage
keeps its name, so schedules given for it still apply. Numerically the one-pass variance is as
good as the two-pass one (Chan, Golub & LeVeque 1983); the naive ``E[x^2] - E[x]^2`` is not used.
"""

from __future__ import annotations

from typing import Callable

from .algorithm import Algorithm
from .combiners import VAR
from .expr import Binary, Expr, Output, Reduce
from .walk import topo_order

__all__ = ["single_pass_variance", "variance_of"]


def variance_of(r: Reduce) -> Expr | None:
    """``X`` when ``r`` is ``mean((X - m) * (X - m))`` (or ``(m - X)`` squared) over the axes
    ``m = mean(X)`` reduces, else None."""
    if r.combiner.name != "mean":
        return None
    sq = r.x
    if not (isinstance(sq, Binary) and sq.op == "mul" and sq.a is sq.b):
        return None
    d = sq.a
    if not (isinstance(d, Binary) and d.op == "sub"):
        return None
    for x, m in ((d.a, d.b), (d.b, d.a)):
        if (isinstance(m, Reduce) and m.combiner.name == "mean" and m.x is x
                and set(m.over) == set(r.over) and len(m.over) == len(r.over)):
            return x
    return None


def single_pass_variance(alg: Algorithm, want: Callable[[Reduce], bool]) -> Algorithm:
    """``alg`` with each two-pass variance stage ``r`` for which ``want(r)`` holds replaced by a
    one-pass ``var`` stage of the same name over the same axes (``alg`` itself when there is
    none). The replacement computes the same value (the biased variance); the mean stage stays
    for the other uses of the mean."""
    swap: dict[int, Expr] = {}
    for n in alg.nodes:
        if isinstance(n, Reduce) and want(n):
            x = variance_of(n)
            if x is not None:
                swap[n.uid] = Reduce(VAR, x, n.over, n.name)
    if not swap:
        return alg
    new: dict[int, Expr] = {}
    for n in topo_order([o.expr for o in alg.outputs]):
        if n.uid in swap:
            new[n.uid] = swap[n.uid]
            continue
        kids = n.children()
        moved = [new.get(c.uid, c) for c in kids]
        new[n.uid] = n if all(a is b for a, b in zip(moved, kids)) else n.rebuild(moved)
    outs = [Output(new[o.expr.uid], o.layout) for o in alg.outputs]
    return Algorithm.build(alg.name, alg.params, outs, alg.__doc__)
