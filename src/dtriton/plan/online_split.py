"""Online groups split across programs (split-KV, flash-decoding): which materialised reductions
one kernel computes together, and how their partial results merge.

A running max ``m`` over an axis the schedule splits (``split={"j": 8}``) and runs online
(``strategy={"j": "online"}``), with the sums that use it as a factor ``exp(x - m)`` (the
softmax denominator and attention's ``P V``), is computed by ONE kernel: each program runs the
online pass over its slice of the axis and stores the slice's partial ``(m_p, s_p)`` into
per-split buffers. A reader merges the partials deterministically, in split order: ``m =
max_p m_p`` and ``s = sum_p s_p * exp(m_p - m)`` (a slice whose max is still -inf contributes 0),
which is what one pass over the whole axis would have computed (Milakov & Gimelshein 2018; the
flash-decoding split).
"""

from __future__ import annotations

from typing import Mapping

from ..ir import Reduce, contains, mul_factors, shift_exponential
from ..schedule import Schedule
from .graph import fused_reduces
from .kernel import KernelPlan

__all__ = ["online_split_groups", "exp_of", "plan_row_vectors"]


def exp_of(s: Reduce, m: Reduce) -> str | None:
    """The exponential ("exp", or "exp2" for base-2 maxima) that rescales sum ``s``'s partials when
    max ``m`` moves, where the body of ``s`` uses ``m`` exactly once, as a factor ``exp(a - m)``
    (:func:`~dtriton.ir.shift_exponential`) with ``a`` free of ``m`` (so each split's partial sum
    rescales by ``exp(m_p - m)``); None when it does not."""
    hits = [f for f in mul_factors(s.x) if contains(f, m)]
    got = shift_exponential(hits[0], m) if len(hits) == 1 else None
    return got[1] if got is not None and not contains(got[0], m) else None


def online_split_groups(sched: Schedule, reduces: Mapping[int, Reduce], mat: set[int]) -> dict[int, tuple[int, ...]]:
    """For each materialised reduction that belongs to an online group split across programs: the
    group's reduction ids, the max first (then the sums in ``reduces``' order; each uses the max
    through :func:`exp_of`). Reductions outside such groups are absent."""
    out: dict[int, tuple[int, ...]] = {}
    for mid, m in reduces.items():
        if mid not in mat or m.combiner.online != "running_max":
            continue
        split = [a for a in m.over if sched.split.get(a, 1) > 1]
        if len(split) != 1:
            continue
        a = split[0]
        if sched.stage(m.name).strategy.get(a, sched.strategy.get(a)) != "online":
            continue
        sums = [sid for sid, s in reduces.items() if sid in mat and sid not in out and s.combiner.online == "rescaled"
                and s.over == m.over and exp_of(s, m) is not None]
        if sums:
            group = (mid, *sums)
            for x in group:
                out[x] = group
    return out


def plan_row_vectors(k: KernelPlan) -> frozenset:
    """The reductions of kernel ``k``'s online passes whose accumulators are held as vectors of
    their kept axes (attention's running max and row sum: ``[BLOCK_I]``) rather than in the
    program's layout with size-1 dims (``[BLOCK_I, 1]``): their per-step updates (the max, the
    shift, the rescaling ``exp2`` and the sum) then run once per row a thread holds. A
    ``[BLOCK_I, 1]`` block derived from a tensor-core tile keeps that tile's layout, one copy per
    column a thread holds: compiled for sm_90, the 128x64 attention step ran 64 ``ex2`` per thread
    (32 for the rescaling) against 34 with vectors. Only plain one-result reductions computed
    without a dot or a block accumulator, in online passes that hold a dot (attention: the
    softmax's online passes keep the program's layout)."""
    by_id = {r.uid: r for r in fused_reduces([st.expr for st in k.stores], k.materialized)}
    out = set()
    for p in k.all_passes():
        if not (p.online and p.loop_axes and any(uid in k.dots for uid in p.reductions)):
            continue   # (passes with a dot: the layouts of tensor-core tiles replicate [BLOCK_I, 1] blocks)
        for uid in p.reductions:
            r = by_id.get(uid)
            if (r is None or uid in k.dots or uid in p.block_acc or uid in k.int_acc or r.combiner.results != 1
                    or r.combiner.state):
                continue
            out.add(uid)
    return frozenset(out)
