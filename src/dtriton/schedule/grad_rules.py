"""Heuristic rules for derived backward algorithms.

:func:`flash_backward`: the backward of attention derived by :func:`dtriton.grad` with the forward's
row statistics saved (``dt.compile_autograd`` saves them by default) computes dQ, dK and dV as sums
over the key or the query axis of expressions of the score stages (``s[b, h, i, j] = sum over d of
Q K``, ``dP[b, h, i, j] = sum over e of dO V``). Materialised, those stages are S x T buffers; the
rule schedules the FlashAttention-2 backward (Dao 2023) instead: every score stage fused (recomputed
per tile), the head dims whole, one kernel over (b, h, key tiles) looping over the queries with the
dK and dV accumulators (the plan's multi-output kernels put both outputs there), one kernel over
(b, h, query tiles) looping over the keys for dQ, and the per-query term ``sum over e of dO * O``
computed once per query row by a kernel of its own.

dQ may instead be placed "atomic" (:mod:`dtriton.plan.loop_stores`): the dK/dV kernel adds each
step's ``dS K`` over its key tile into a zeroed fp32 buffer with atomics, and a small kernel writes
``scale * dQ`` in the output's dtype (5 products of S x T x D per backward instead of 7, as
FlashAttention-2's CUDA backward). Measured on the H200 it is not faster, so the rule keeps the
second kernel; the place is a schedule choice (a user schedule that sets only the dQ stage's place,
``stages={"d_Q": {"place": "atomic"}}``, keeps the rule's layout around it) and exploration searches
it (:func:`flash_backward_places`). Session 5, call 4, backward ms (SDPA: 0.424 at B4 H16 S2048 D64,
0.297 causal, 5.29 at B4 H32 S4096 D128): D64 two kernels 128 x 32 tiles 0.677, 64 x 64 0.719;
atomic 64 x 64 0.734, key tiles of 128 at 8 warps 0.711; causal two kernels 64 x 64 0.499, atomic
0.498 (0.529-0.574 at other tiles); D128 two kernels 8.99 (64-wide key tiles, 4 warps), 8.60
(128-wide, 8 warps), atomic 9.00 and 9.07. Not yet split by a profile: the dK/dV kernel's fifth
product (its score tile through shared memory for the MMA), its partial sums converted through
shared memory for the atomics, and the atomics (1.07 GB of fp32 at D64 with key tiles of 64, 17 GB
at D128) together cost as much as the second kernel's three products. With atomic dQ the rule
takes 64 x 64 tiles at head dims up to 64 (128 x 32 spills 136 bytes at 4 warps for sm_90).

The plan then gives the kernels FlashAttention-2's shape without attention special cases: the
16-bit dots take the program layout's order of their free axes (scores as [key, query] tiles in
the dK/dV kernel, :func:`dtriton.plan.dots.layout_rank`), a loop's values keep only the axes they
use (2-D score tiles), a tile read in both orientations is loaded once (``tl.trans``), per-row
divisors become reciprocals and the exponentials base 2 (:mod:`dtriton.ir.rewrite`).
:func:`flash_backward_space` is what ``dt.explore`` searches on such a backward.
"""

from __future__ import annotations

from ..ir import Algorithm, axis_bounds, is_sum, reduces_in, reduction_guard, reduction_stages
from .draft import Draft, next_pow2
from .schedule import StageSchedule

__all__ = ["dq_stage", "flash_backward", "flash_backward_pattern", "flash_backward_places", "flash_backward_space",
           "mask_bounded"]

#: Head dims up to which the key/query tile of the accumulating kernels is 128 (else 64).
WIDE_HEAD = 64


def flash_backward_pattern(alg: Algorithm, sizes) -> tuple[list[str], set[str], tuple[str, str]] | None:
    """``(score stage names, head axes, (query axis, key axis))`` of an attention backward, or None.

    Score stages: reduction stages over small axes (each <= 256) whose free axes hold two long
    axes (> 256 elements) that no output has together; every output has exactly one of the two
    and no max stage reduces either (the statistics come saved from the forward)."""
    stages = [st.node for st in reduction_stages(alg)]
    outs = [set(o.layout) for o in alg.outputs]
    scores, heads, pair = [], set(), None
    for r in stages:
        if not is_sum(r):   # scores are sums (Q.K, dO.V); a max over pooled columns is not (chains)
            continue
        longs = [a for a in r.axes if sizes[a] > 256]
        if len(longs) != 2 or any(sizes[a] > 256 for a in r.over) or any(set(longs) <= o for o in outs):
            continue
        if pair is not None and set(pair) != set(longs):
            return None
        pair = pair or tuple(longs)
        scores.append(r.name)
        heads.update(r.over)
    if pair is None or any(len(o & set(pair)) != 1 for o in outs):
        return None
    if any(r.combiner.online == "running_max" and set(r.over) & set(pair) for r in stages):
        return None
    return scores, heads, pair


def dq_stage(alg: Algorithm, sizes) -> str | None:
    """The name of an attention backward's dQ stage (:func:`flash_backward_pattern`): the sum over
    the key axis whose free axes are those of the output over the query axis; None when ``alg``
    is no attention backward."""
    pat = flash_backward_pattern(alg, sizes)
    if pat is None:
        return None
    qa, ka = pat[2]
    for o in alg.outputs:
        if qa not in o.layout:
            continue
        for st in reduction_stages(alg):
            r = st.node
            if is_sum(r) and set(r.over) == {ka} and set(r.axes) == set(o.layout):
                return st.name
    return None


def _place_only(d: Draft, dq: str | None) -> str | None:
    """The user's place of the dQ stage when the user's schedule lays out nothing else (the
    layout the rule plans around it), else None."""
    u = d.user
    if not d.given or dq is None or set(u.stages) != {dq} or u.tile or u.grid is not None or u.group or u.split \
            or u.strategy or set(u.stages[dq].to_dict()) != {"place"}:
        return None
    return u.stages[dq].place


def flash_backward(d: Draft) -> None:
    """The FlashAttention-2 backward schedule (module docstring) for an attention backward whose
    layout the user's schedule leaves open (launch options given, e.g. ``num_warps``, are kept):
    per output, its long axis on the grid and the other long axis looped, in tiles of 64 x 64 at
    head dims up to :data:`WIDE_HEAD` (4 warps, 3 stages); above it 128 x 64 at 8 warps and 2 stages
    (64 x 32 at 4 warps and 3 stages where a mask bounds the loop); batch axes one per program;
    pointer access; no split; dQ in a second kernel (module docstring), or where the user's
    schedule places it.

    Session 8: hand-written FlashAttention-2 kernels in Triton 3.6 on the H200 (bench/probe_attn_bwd.py,
    B4 H16 S2048 D64): 64 x 64 at 4 x 3 0.492 ms, 128 x 32 at 4 x 3 0.524, 128 x 64 at 8 x 2 0.659; D128
    (B4 H32 S4096): 128 x 64 at 8 x 2 7.60, 64 x 64 at 4 x 3 8.17, 128 x 32 at 4 x 3 14.1. The derived
    dK/dV kernel with the 16-bit terms (fp32 saved statistics): sm_90 234 registers at D64 64 x 64, 255
    and an 8-byte spill at 128 x 32; 254 without spill at D128 128 x 64, 8 warps.

    H200, backward alone, ms (bench/attention_bwd.py, session 4): B4 H16 S2048 D64 8 warps x 2
    stages 1.013, 4 x 3 0.638 (SDPA's 0.425); causal 0.722, 4 x 3 at 128 x 32 0.562, at 64 x 64
    0.483 (SDPA 0.298); B4 H32 S4096 D128 21.25 at 8 warps, 10.94 at 4 x 3 (SDPA 4.90); causal
    15.00, 8.09 (SDPA 2.99); session 5 (call 4): D128 128 x 32 at 8 warps 8.60 against 64 x 32 at
    4 warps 8.99. sm_90: up to 254 registers, no spill (a 64-wide loop tile spills at D128)."""
    dq = dq_stage(d.alg, d.sizes)
    user_place = _place_only(d, dq)
    if (d.layout_given and user_place is None) or d.grid is not None:
        return
    pat = flash_backward_pattern(d.alg, d.sizes)
    if pat is None:
        return
    scores, heads, (qa, ka) = pat
    narrow, masked = max(d.sizes[a] for a in heads) <= WIDE_HEAD, mask_bounded(d.alg)
    big, small = (128 if not masked else 64), (64 if not masked else 32)
    if narrow:
        big, small = 64, 64
    for name in scores:
        d.stages[name] = StageSchedule(place="fuse")
    for a in heads:
        d.strategy[a] = "whole"
    for a in d.alg.axis_names:
        if a not in heads and a not in (qa, ka):
            d.tile[a] = 1
    # the kernels of the per-query statistics read like the forward: query tiles on the grid
    d.tile.update({qa: max(16, d.cap(qa, big)), ka: max(16, d.cap(ka, 64))})
    d.strategy[ka] = "loop"
    for o in d.alg.outputs:
        own = qa if qa in o.layout else ka
        other = ka if own == qa else qa
        grid = tuple(a for a in o.layout if a not in heads)
        d.stages[o.name] = StageSchedule(grid=grid, tile={own: max(16, d.cap(own, big)),
                                                          other: max(16, d.cap(other, small))},
                                         strategy={other: "loop"})
    if dq is not None and user_place is not None:
        d.stages[dq] = StageSchedule(place=user_place)
    d.grid = d.stages[d.alg.outputs[0].name].grid
    wide = not narrow and not masked
    d.num_warps = d.num_warps or (8 if wide else 4)
    d.num_stages = d.num_stages or (2 if wide else 3)
    d.access = d.access or "pointer"


def mask_bounded(alg: Algorithm) -> bool:
    """Some reduction's operand is its identity outside a condition that bounds one of its
    reduced axes (a causal mask: :func:`~dtriton.ir.reduction_guard`, :func:`~dtriton.ir.axis_bounds`)."""
    for r in reduces_in([o.expr for o in alg.outputs], frozenset()):
        cond = reduction_guard(r)
        if cond is not None and any(not axis_bounds(cond, a).empty for a in r.over):
            return True
    return False


def flash_backward_places(alg: Algorithm, sizes) -> dict[str, list[str]] | None:
    """The places an exploration of a FlashAttention-2 backward searches (the ``place`` field of a
    ``dt.Space``): its dQ stage added with atomics inside the dK/dV kernel ("atomic") or in a
    second kernel ("auto"); None when ``alg`` is no attention backward."""
    dq = dq_stage(alg, sizes)
    return {dq: ["atomic", "auto"]} if dq is not None else None


def flash_backward_space(alg: Algorithm, sizes, base) -> dict[str, list[int]] | None:
    """The tiles an exploration of a FlashAttention-2 backward searches (the ``stage_tile``
    field of a ``dt.Space``), or None when ``alg`` is not one or ``base`` (the heuristic's
    complete schedule) did not take :func:`flash_backward`'s form. Per accumulating kernel, the
    tile of its grid axis (64, 128) and of its looped axis (16, 32, 64); the outputs of one
    kernel (dK and dV) are joined by ``+`` so they take one tile and keep sharing it."""
    pat = flash_backward_pattern(alg, sizes)
    if pat is None:
        return None
    _, _, (qa, ka) = pat
    kernels: dict[str, list[str]] = {}
    for o in alg.outputs:
        st = base.stages.get(o.name)
        if st is None or not st.tile or not st.grid:
            return None
        own = qa if qa in o.layout else ka
        kernels.setdefault(own, []).append(o.name)
    out: dict[str, list[int]] = {}
    for own, names in kernels.items():
        other = ka if own == qa else qa
        key = "+".join(names)
        for a, vals in ((own, (64, 128)), (other, (16, 32, 64))):
            cur = base.stages[names[0]].tile.get(a)
            cand = sorted({min(v, max(16, next_pow2(sizes[a]))) for v in vals} | ({cur} if cur else set()))
            if len(cand) > 1:
                out[f"{key}.{a}"] = cand
    return out or None
