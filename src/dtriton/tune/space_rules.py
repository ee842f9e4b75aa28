"""The derivation of a default :class:`~dtriton.tune.space.Space`: which values each schedule field
is searched over for an algorithm and a call (:func:`derive_fields`).

Per field: power-of-two tiles per axis (no larger than the padded axis; 16..256 for the axes of a
``tl.dot``), permutations of the grid, grouped launch order, split factors for the reduction axes of
sum stages whose outputs have few tiles, the strategy (whole/loop/online) of every axis that some
kernel covers in-program, the placement of every reduction stage, tiles of a split stage that runs in
a kernel of its own, L2 hints of streaming kernels' largest inputs. Flat knobs: the :data:`RULES` of
the built-in ones (launch options, persistent loops, TMA access, warp specialisation, tile order,
unrolling, the fp32 dot precision); every other flat knob of the registry gets its registry search
values (:func:`registry_values`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Mapping

import torch

from ..ir import Algorithm, Binding, contractions, grid_candidates, online_candidate, reduction_stages, split_blockers
from ..plan import match_attention, match_attention_bwd, match_conv2d
from ..plan.gluon_conv import BY_DEFAULT
from ..plan.gluon_depthwise import BY_DEFAULT as DEPTHWISE_BY_DEFAULT, match_depthwise
from ..plan.staging import call_precision
from ..schedule import (PLACES, TENSOR_CORE_FP32, Knob, Schedule, conv_space_tiles, flash_backward_places, flash_backward_space,
                        flash_forward_space, flat_knobs, mask_bounded, next_pow2)
from .check import Limits

__all__ = ["HEAD_FIELDS", "TAIL_FIELDS", "field_names", "flat_names", "derive_fields", "derive_flat",
           "registry_values", "gluon_conv_space", "gluon_depthwise_space", "Derivation", "RULES"]

#: Space fields before the flat knobs (per axis, per stage, or the grid's own values) ...
HEAD_FIELDS = ("tile", "grid", "group", "split", "strategy", "place")
#: ... and after them; the flat knobs (:func:`flat_names`) come from the registry.
TAIL_FIELDS = ("stage_tile", "eviction")


def flat_names() -> tuple[str, ...]:
    """The single-valued knobs a :class:`Space` can search: every registered flat knob
    (:func:`dtriton.schedule.flat_knobs`), in registry order."""
    return tuple(k.name for k in flat_knobs())


def _pow2s(lo: int, hi: int) -> list[int]:
    out, t = [], 1
    while t <= hi:
        if t >= lo:
            out.append(t)
        t *= 2
    return out


def field_names() -> tuple[str, ...]:
    """Every field of a :class:`~dtriton.tune.space.Space`, in order: tile, grid, group, split,
    strategy, place, the registry's flat knobs (:func:`flat_names`), stage_tile, eviction."""
    return HEAD_FIELDS + flat_names() + TAIL_FIELDS


def _with_base(vals: list, bv) -> list:
    """``vals`` with the heuristic's value ``bv`` added (sorted; appended when the values do not
    sort) when it is missing."""
    if bv is not None and bv not in vals:
        try:
            vals = sorted(set(vals) | {bv})
        except TypeError:
            vals = list(vals) + [bv]
    return vals


def _derive_tiles(alg: Algorithm, sizes: Mapping[str, int], base: Schedule, cons: Mapping) -> dict[str, list[int]]:
    """Power-of-two tiles per axis: 16..256 for a dot's m/n axes, 16..128 for its reduction axis,
    up to 1024 for axes some kernel maps to programs, else from 16 up to 4096 (never above the
    padded axis), always with the heuristic's tile."""
    dot_mn = {a for (m, n, _) in cons.values() for a in (m, n)}
    dot_r = {r for (_, _, r) in cons.values()}
    ongrid = grid_candidates(alg, base.grid, [ss.grid for ss in base.stages.values()])
    tile: dict[str, list[int]] = {}
    for a in alg.axis_names:
        p = next_pow2(sizes[a])
        if a in dot_mn:
            vals = [t for t in (16, 32, 64, 128, 256) if t <= max(16, p)]
        elif a in dot_r:
            vals = [t for t in (16, 32, 64, 128) if t <= max(16, p)]
        elif a in ongrid:
            vals = _pow2s(1, min(p, 1024))
        else:
            vals = _pow2s(min(p, 16), min(p, 4096))
        vals = _with_base(vals, base.tile.get(a))
        if len(vals) > 1:
            tile[a] = vals
    return tile


def _derive_strategies(alg: Algorithm, sizes: Mapping[str, int], base: Schedule, cons: Mapping,
                       limits: Limits) -> dict[str, list[str]]:
    """whole (when the padded axis fits ``limits.whole_max``), loop and, for axes a max reduces,
    online, for every axis that is reduced or not on the grid nor a dot's m/n axis."""
    dot_mn = {a for (m, n, _) in cons.values() for a in (m, n)}
    grid = tuple(base.grid or ())
    reduced = set(alg.reduction_axes)
    strategy: dict[str, list[str]] = {}
    for a in alg.axis_names:
        if (a in grid or a in dot_mn) and a not in reduced:
            continue
        vals = []
        if next_pow2(sizes[a]) <= limits.whole_max:
            vals.append("whole")
        vals.append("loop")
        if online_candidate(alg, a):
            vals.append("online")
        if len(vals) > 1:
            strategy[a] = vals
    return strategy


def _derive_splits(alg: Algorithm, sizes: Mapping[str, int], base: Schedule, limits: Limits) -> dict[str, list[int]]:
    """Split factors for axes reduced only by sums whose outputs have fewer tiles than SMs: 1..16
    and the heuristic's split with its neighbours, each leaving at least two tiles per part."""
    grid = tuple(base.grid or ())
    split: dict[str, list[int]] = {}
    for r in sorted(set(alg.reduction_axes)):
        reds = [s.node for s in reduction_stages(alg, r)]
        if not reds or split_blockers(alg, r):
            continue
        ntiles = None
        for n in reds:
            t = 1
            for f in n.axes:
                if base.strategy.get(f) == "whole" and f not in grid:
                    continue
                t *= -(-sizes[f] // max(1, int(base.tile.get(f) or 1)))
            ntiles = t if ntiles is None else min(ntiles, t)
        if ntiles is None or ntiles >= limits.sm_count:
            continue
        # the tile r is stepped in: its split stages' own (statistics split across programs), else the schedule's
        tr = min([int(base.stage(s.name).tile[r]) for s in reduction_stages(alg, r) if r in base.stage(s.name).tile]
                 or [int(base.tile.get(r) or 16)])
        bs = base.split.get(r, 1)   # the heuristic's split and its neighbours (64 for the diffusion's V)
        cand = sorted({1, 2, 4, 8, 16} | ({bs // 2, bs, bs * 2} if bs > 1 else set()))
        vals = [s for s in cand if s in (1, bs) or s * tr * 2 <= sizes[r]]
        if len(vals) > 1:
            split[r] = vals
    return split


def _derive_stage_tiles(alg: Algorithm, base: Schedule, tile: Mapping[str, list[int]]) -> dict[str, list[int]]:
    """A split reduction stage that is not itself an output runs in a kernel of its own (the
    diffusion layer's V-reduction): its tiles are dimensions of their own."""
    stage_tile: dict[str, list[int]] = {}
    outs = {id(o.expr) for o in alg.outputs}
    for st in alg.stages.values():
        n = st.node
        if st.is_output or id(n) in outs or not (set(base.split) & set(n.over)):
            continue
        for a in dict.fromkeys(tuple(n.axes) + tuple(n.over)):
            vals = tile.get(a)
            if vals and len(vals) > 1:
                stage_tile[f"{st.name}.{a}"] = vals
    return stage_tile


def _derive_evictions(alg: Algorithm, b: Binding) -> dict[str, list[str]]:
    """Streaming (memory-bound, no contraction) kernels on the GPU: L2 hints for the largest
    inputs (the H200 probe: evict_first on X sped layer norm 4096x4096 fp16 up from 19.8 to
    18.4 us and slowed 4096x8192 from 35.7 to 37.1 us, so it is searched, not set)."""
    eviction: dict[str, list[str]] = {}
    elems = {p.name: math.prod(b.sizes[s] for s in p.dims) for p in alg.tensor_params}
    top = max(elems.values(), default=0)
    for name, n in elems.items():
        if top and n * 2 >= top and n >= 1 << 16:
            eviction[name] = ["evict_normal", "evict_first"]
    return eviction


@dataclasses.dataclass(frozen=True)
class Derivation:
    """What a flat knob's derivation rule sees: the algorithm, its binding ``b``, the heuristic's
    complete schedule ``base``, the target (``gpu``), the resource ``limits`` and the algorithm's
    contractions (``cons``, :func:`~dtriton.schedule.contractions`)."""
    alg: Algorithm
    b: Binding
    base: Schedule
    gpu: bool
    limits: Limits
    cons: Mapping


def registry_values(k: Knob, d: Derivation) -> list | None:
    """The values a flat knob without a rule gets: its registry search values with the
    heuristic's value added; launch options only on the GPU (the interpreter ignores them).
    None (not searched) for a knob without search values, or with fewer than two."""
    if not k.search or (k.launch and not d.gpu):
        return None
    vals = _with_base(list(k.search), getattr(d.base, k.name))
    return vals if len(vals) > 1 else None


def _rule_num_warps(k: Knob, d: Derivation) -> list | None:
    """GPU only: 2, 4, 8 warps (16 when an in-program axis pads to 2048 or more)."""
    if not d.gpu:
        return None
    grid = tuple(d.base.grid or ())
    widest = max([next_pow2(d.b.axis_sizes[a]) for a in d.alg.axis_names if a not in grid] or [1])
    return _with_base([2, 4, 8] + ([16] if widest >= 2048 else []), d.base.num_warps)


def _rule_num_stages(k: Knob, d: Derivation) -> list | None:
    """GPU only: 2..5 pipeline stages for contractions, else 1..4."""
    return _with_base([2, 3, 4, 5] if d.cons else [1, 2, 3, 4], d.base.num_stages) if d.gpu else None


def _rule_persistent(k: Knob, d: Derivation) -> list | None:
    """Persistent tile loops (1 or 2 programs per SM) for GPU contractions, where tiles are many."""
    return _with_base([0, 1, 2], d.base.persistent) if d.gpu and d.cons else None


def _fp32_dots(d: Derivation) -> bool:
    """A GPU contraction whose dots may take fp32 operands (floating inputs fp32 or 16-bit, at least
    one fp32; fp32 accumulation), where the schedule's ``precision`` applies."""
    floats = [t for t in d.b.dtypes.values() if t.is_floating_point]
    return (d.gpu and bool(d.cons) and torch.float32 in floats and all(t.itemsize in (2, 4) for t in floats)
            and d.base.acc_dtype != "float64")


def _tensor_core_tma(d: Derivation) -> bool:
    """A GPU contraction on a TMA device (Hopper, sm90+) whose operands feed tensor cores: 16-bit, or
    fp32 at a tensor-core precision, the heuristic's "auto" resolved as the plan resolves it
    (:func:`~dtriton.plan.staging.call_precision`: "tf32x3" where an operand reads the reduced axis
    at unit stride, else "ieee"). "ieee" fp32 dots run on FMA units, where the H200 probe saw no gain
    from TMA."""
    if not (d.gpu and d.cons and d.limits.tma):
        return False
    floats = [t for t in d.b.dtypes.values() if t.is_floating_point]
    if floats and all(t.itemsize == 2 for t in floats):
        return True
    return _fp32_dots(d) and call_precision(d.alg, d.b, d.base.precision, d.gpu) in TENSOR_CORE_FP32


def _rule_access(k: Knob, d: Derivation) -> list | None:
    """TMA tile loads (pointer or tma) of a tensor-core contraction on a TMA device
    (:func:`_tensor_core_tma`; an fp32 one whose heuristic precision, "auto" too, resolves to a
    tensor-core precision)."""
    return _with_base(["pointer", "tma"], d.base.access) if _tensor_core_tma(d) else None


#: The fp32 dot precisions exploration searches: those that keep fp32 accuracy (FMA, three tf32
#: passes, six bf16 passes: relative errors of about 1e-6 on the issue-14 probes); "tf32" (~1e-3) and
#: "bf16x3" (~1e-5) change results and are only searched when a user's Space names them.
FP32_ACCURATE = ("ieee", "tf32x3", "bf16x6")


def _rule_precision(k: Knob, d: Derivation) -> list | None:
    """GPU contractions of fp32 operands (:func:`_fp32_dots`): the precisions that keep fp32 accuracy
    (:data:`FP32_ACCURATE`) beside the heuristic's ("auto" or a rule's pick). Which one is fastest
    depends on the operand layout: tf32x3 where an operand reads the reduced axis at unit stride,
    bf16x6 where neither does (16-bit wgmma reads MN-major operands), ieee for small or skinny
    products."""
    return _with_base(list(FP32_ACCURATE), d.base.precision) if _fp32_dots(d) else None


def _rule_warp_specialize(k: Knob, d: Derivation) -> list | None:
    """Warp specialisation stays out of derived spaces unless the heuristic set it (a user Space
    may add it): on the H200 it gained nothing on the matmul probe, and a candidate of the
    diffusion layer with it faulted ("misaligned address"), which ends the CUDA context and so the
    whole exploration. Session 3's "misaligned address" fault exploring the fp32 diffusion layer
    came with in-kernel descriptors; with host-side descriptors its TMA schedules ran clean
    (session 4 probe). Fused attention neither: its warp-specialised kernel (descriptors built in
    the kernel, 4 warps: Triton 3.6 specialises it on sm_90) printed no result within 90 s on the
    H200 (session 4, calls 4 and 5), which would end an exploration's budget. Since session 9 a
    16-bit attention forward on a TMA (Hopper) GPU gets None (the heuristic's value: the compiler
    picks, the warp-specialised Gluon kernel where it applies, :mod:`~dtriton.plan.gluon_attention`;
    H200 s9 call 8: 1819 us against the Triton kernel's 2397 and SDPA's 1908 at B4 H32 S4096 D128)
    and False (the Triton kernel, whose tiles the rest of the space searches). Not True: where the
    Gluon kernel does not apply, True would warp-specialise the Triton loop (the s4 hang). Likewise, since
    session 11, a 16-bit channels-last 2-d convolution on a TMA GPU (:func:`gluon_conv_space`: the Gluon
    conv2d, :mod:`~dtriton.plan.gluon_conv`; H200 s11 call 2: 165.8 us against the Triton kernel's ~204
    and cuDNN's 163.6 at N32 C256 H56 W56 O256 3x3), and since session 12 a 16-bit channels-last depthwise
    convolution (:func:`gluon_depthwise_space`, :mod:`~dtriton.plan.gluon_depthwise`; H200 s11 call 3
    probe: 35.8 us against cuDNN's 51.1 at N32 C256 H56 W56 3x3)."""
    if _gluon_attention(d):
        return [None, False]
    if gluon_conv_space(d.alg, d.b, d.gpu and d.limits.tma):
        # True where the default (None) does not pick it yet (plan.gluon_conv.BY_DEFAULT); every
        # candidate is checked against the reference before it is timed
        return [None, False] if BY_DEFAULT else [True, False]
    if gluon_depthwise_space(d.alg, d.b, d.gpu and d.limits.tma):
        # (likewise a depthwise one: plan.gluon_depthwise.BY_DEFAULT)
        return [None, False] if DEPTHWISE_BY_DEFAULT else [True, False]
    return [False, True] if d.base.warp_specialize and _tensor_core_tma(d) else None


def _gluon_attention(d: Derivation) -> bool:
    """A 16-bit softmax attention forward on a TMA GPU, fused into one online pass by the heuristic and
    not split over the keys (decoding: the Gluon kernel's tiles are 128 query rows), or a derived attention
    backward of 16-bit Q on one (:mod:`~dtriton.plan.gluon_attention_bwd`; its saved LSE is fp32): the calls
    whose ``warp_specialize`` None may run as a Gluon kernel (the plan decides the rest), False keeping
    the Triton kernels the rest of the space searches."""
    if not (d.gpu and d.limits.tma):
        return False
    bwd = match_attention_bwd(d.alg)[0]
    if bwd is not None:
        return d.b.dtypes[bwd.fwd.q].itemsize == 2
    floats = [t for t in d.b.dtypes.values() if t.is_floating_point]
    return (bool(floats) and all(t.itemsize == 2 for t in floats)
            and "online" in d.base.strategy.values() and not d.base.split and match_attention(d.alg) is not None)


def gluon_conv_space(alg: Algorithm, b: Binding, tma: bool) -> bool:
    """A channels-last 2-d convolution (:func:`~dtriton.plan.match_conv2d`) of 16-bit inputs on a TMA
    GPU (``tma``): the calls whose ``warp_specialize`` None may run as the Gluon conv2d (the plan decides
    the rest: stride 1, C a multiple of 64, O of 128, ...), False keeping the Triton kernel whose tiles
    the rest of the space searches."""
    if not tma or match_conv2d(alg)[0] is None:
        return False
    floats = [t for t in b.dtypes.values() if t.is_floating_point]
    return bool(floats) and all(t.itemsize == 2 for t in floats)


def gluon_depthwise_space(alg: Algorithm, b: Binding, tma: bool) -> bool:
    """A channels-last depthwise convolution (:func:`~dtriton.plan.gluon_depthwise.match_depthwise`) of
    16-bit inputs on a TMA GPU (``tma``): the calls whose ``warp_specialize`` None may run as the Gluon
    depthwise kernel (the plan decides the rest: 3x3, stride 1, C a multiple of 8, ...), False keeping the
    Triton kernel whose tiles the rest of the space searches."""
    if not tma or match_depthwise(alg)[0] is None:
        return False
    floats = [t for t in b.dtypes.values() if t.is_floating_point]
    return bool(floats) and all(t.itemsize == 2 for t in floats)


def _rule_tile_order(k: Knob, d: Derivation) -> list | None:
    """GPU: both launch orders where some reduction's loop is bounded by a mask (causal attention:
    with the query axis outermost on the grid, "reverse" starts the longest rows first)."""
    return ["forward", "reverse"] if d.gpu and mask_bounded(d.alg) else None


def _rule_unroll(k: Knob, d: Derivation) -> list | None:
    """GPU reductions without contractions that loop over a reduced axis: the plan's pick (0), one
    step, 2 and 4 steps per loop iteration (loads issued together)."""
    loops = any(d.base.strategy.get(a) == "loop" or any(s.strategy.get(a) == "loop" for s in d.base.stages.values())
                for a in d.alg.reduction_axes)
    return _with_base([0, 1, 2, 4], d.base.unroll) if d.gpu and not d.cons and loops else None


def _rule_split_mode(k: Knob, d: Derivation) -> list | None:
    """A heuristic schedule that splits a reduction into per-split partials: both deterministic ways of
    combining them, folded by each reader ("partials"), once by a finishing kernel ("finish"), or once by
    the last program of each tile of the split kernel ("last": the finishing kernel's fold, one launch
    less); the same values every way, so only the speed differs. Atomics (not deterministic) are not
    searched."""
    if d.base.split_mode in ("partials", "finish", "last") and any(f > 1 for f in d.base.split.values()):
        return ["partials", "finish", "last"]
    return None


def _rule_flat_axes(k: Knob, d: Derivation) -> list | None:
    """GPU algorithms without contractions with an output or a reduction over two axes or more: off, the
    two innermost axes, and every axis that qualifies (:mod:`dtriton.plan.flat`)."""
    wide = any(len(o.layout) >= 2 for o in d.alg.outputs) or any(len(st.node.over) >= 2 for st in d.alg.stages.values()
                                                                if not st.is_output)
    return _with_base([0, 2, 8], d.base.flat_axes) if d.gpu and not d.cons and wide else None


#: The derivation rules of built-in flat knobs: knob name -> ``rule(knob, Derivation)`` giving the
#: values to search (None: not searched). Every other flat knob (``acc_dtype`` and registered ones)
#: gets :func:`registry_values`.
RULES = {"num_warps": _rule_num_warps, "num_stages": _rule_num_stages, "persistent": _rule_persistent,
         "access": _rule_access, "precision": _rule_precision, "warp_specialize": _rule_warp_specialize,
         "tile_order": _rule_tile_order, "unroll": _rule_unroll, "split_mode": _rule_split_mode,
         "flat_axes": _rule_flat_axes}


def derive_flat(d: Derivation) -> dict[str, list | None]:
    """The values of every registered flat knob (:data:`RULES`, else :func:`registry_values`)."""
    return {k.name: RULES.get(k.name, registry_values)(k, d) for k in flat_knobs()}


def derive_fields(alg: Algorithm, b: Binding, base: Schedule, gpu: bool, limits: Limits) -> dict:
    """The fields of the default :class:`Space` (keyword arguments of its constructor) for ``alg``
    bound to ``b`` around the heuristic's complete schedule ``base``: on the GPU (``gpu``) also
    launch options, persistent loops, L2 hints and TMA access; ``limits`` bound "whole" blocks,
    decide when output tiles are few (split-K) and whether the device has TMA. Every flat knob of
    the registry has a field (:func:`derive_flat`)."""
    sizes = b.axis_sizes
    fb = flash_backward_space(alg, sizes, base) if gpu else None
    if fb is not None:   # the FlashAttention-2 backward's own knobs; nothing else applies to it
        return dict({f: None for f in field_names()}, stage_tile=fb, place=flash_backward_places(alg, sizes),
                    num_warps=_with_base([4, 8], base.num_warps),
                    num_stages=_with_base([1, 2, 3, 4], base.num_stages),
                    access=_with_base(["pointer", "tma"], base.access) if limits.tma else None)
    cons = contractions(alg)
    ff = flash_forward_space(alg, sizes, base, mask_bounded(alg)) if gpu else None
    if ff is not None:   # a fused attention forward: its layout kept, the knobs that matter searched
        flat = derive_flat(Derivation(alg, b, base, gpu, limits, cons))
        flat.update(num_warps=_with_base([4, 8], base.num_warps), num_stages=_with_base([2, 3, 4], base.num_stages),
                    persistent=None)
        return dict({f: None for f in field_names()}, **flat, **ff)
    grid = tuple(base.grid or ())
    tile = _derive_tiles(alg, sizes, base, cons)
    if gpu and any(t in (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8) for t in b.dtypes.values()):
        # 8-bit dots need a reduction tile of at least 32 on the GPU (below it: an fp32 dot, plan.dots)
        dot_r = {r for (_, _, r) in cons.values()}
        tile = {a: [t for t in v if a not in dot_r or t >= 32] or v for a, v in tile.items()}
    strategy = _derive_strategies(alg, sizes, base, cons, limits)
    conv = conv_space_tiles(alg, sizes, base) if gpu and not cons else None
    if conv is not None:   # a convolution's implicit GEMM: its M, N and K tiles only, reductions looped
        tile, strategy = conv, {a: v for a, v in strategy.items() if base.strategy.get(a) != "loop"}
    group = None
    if len(grid) >= 2:
        group = _with_base([1, 4, 8, 16] if gpu else [1, 8], max(base.group.values(), default=1))
    grids = None
    if 2 <= len(grid) <= 3:
        grids = [grid] + [p for p in itertools.permutations(grid) if p != grid]
    split = _derive_splits(alg, sizes, base, limits)
    place = {s.name: list(PLACES) for s in alg.stages.values() if not s.is_output}
    stage_tile = _derive_stage_tiles(alg, base, tile)
    eviction = _derive_evictions(alg, b) if gpu and not cons else {}
    flat = derive_flat(Derivation(alg, b, base, gpu, limits, cons))
    return dict(tile=tile or None, grid=grids, group=group, split=split or None, strategy=strategy or None,
                place=place or None, **flat, stage_tile=stage_tile or None, eviction=eviction or None)
