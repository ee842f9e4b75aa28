"""The heuristic's rules for contractions (``tl.dot``): tiles, split-K, grouped order and launch
options per contraction (:func:`contraction_tiles`, with the tensor-core fp32 tiles, the wide
16-bit tiles, matrix-vector streaming and grouped weights), and the facts the GEMM-chain rules of
:mod:`.chain_rules` ask (:func:`wide_axis`, :func:`wide_stages`, :func:`persistent_allowed`,
:func:`epilogue_tiles`, :func:`second_gemm`). :mod:`.heuristics` applies them in its rule order."""

from __future__ import annotations

import math

import torch

from ..ir import Axis, Binary, Load, Reduce, Unary, contains, mul_factors, reduction_stages, tensor_core_sides, walk
from .draft import Draft, next_pow2, programs, split_for
from .knobs import TENSOR_CORE_FP32
from .schedule import StageSchedule

__all__ = ["contraction_tiles", "epilogue_tiles", "persistent_allowed", "second_gemm", "wide_axis", "wide_stages"]


def contraction_tiles(d: Draft) -> None:
    """Dot tiles, split-K, grouped order and launch options of each contraction, the main
    output's own first: its free axes are the grid, so their tiles are set for the output (an
    axis reduced in an earlier stage, v of the diffusion layer, would otherwise take that stage's
    short reduction tile as its grid tile)."""
    main = d.alg.outputs[0]
    long = [name for name, (m, n, r) in sorted(d.cons.items(), key=lambda kv: kv[0] != getattr(main.expr, "name", None))
            if _contraction(d, name, m, n, r)]
    for name in long:
        _short_consumer(d, name)
        _small_outputs(d, name)


def _contraction(d: Draft, name: str, m: str, n: str, r: str) -> bool:
    """The rules of one contraction; returns whether it is a long reduction (:func:`_long_reduction`)."""
    tile, grid, sizes = d.tile, d.grid, d.sizes
    m, n = _dot_axes_of_many(d, name, m, n, r)
    if _skinny(d, m, n, r):
        return False
    if _long_reduction(d, name, m, n, r):
        return True
    # fp32 tensor-core tiles for one contraction (a GEMM with its prologue/epilogue); algorithms
    # with several (the diffusion layer) keep the tiles their H200 sweeps chose, which leave the
    # axis one contraction reduces short enough for another to split it
    tc = d.gpu and (d.half or (len(d.cons) == 1 and _fp32_tensor_cores(d, name)))
    big = 128 if tc else 64
    for a in (m, n):
        if a not in tile:
            tile[a] = max(16, d.cap(a, big))
        d.dot_axes.add(a)
    if (d.gpu and big == 128 and m in grid and n in grid and not (set(d.user.tile) & {m, n})
            and tile[m] == 128 and tile[n] == 128):
        progs = programs(grid, sizes, tile)   # batch axes not tiled yet get tile 1 below
        first = m if grid.index(m) < grid.index(n) else n
        if progs < d.sms and sizes[first] > 64:
            # fewer 128x128 output tiles than SMs (1024^3 has 64): 64x128 tiles fill the GPU
            # without split-K's zeroing and atomics (H200 probe, fp16 1024^3: 64x128x64,
            # 4 warps, 6.3 us; 128x128 with split 2, 12.9 us)
            tile[first] = 64
            if d.num_warps is None:
                d.num_warps = 4
    # 8-bit dots keep 128x128 tiles, 128 along the reduction, 4 warps, 4 stages (fp8: 3, below) (H200, s4 final call,
    # bench/narrow.py --variants at 4096^3: fp8 e4m3 with per-row scales 112.96 us = 0.944x torch._scaled_mm,
    # against 116.2-118.7 at 128x256x128 with 3 stages and 8 warps; int8 -> int32 137.4 against 161.4 with
    # 8 warps; sm_90 compile, bench/narrow_sm90.py: 131 KB of shared memory for fp8, 192 KB for int8)
    inner = wide_axis(d, name, m, n, r, grid)
    # a heavy epilogue: 128 x 128 tiles, two programs an SM (see _heavy_epilogue)
    heavy = inner is not None and _persistent_wide(d, name) and not epilogue_tiles(d, m, n) and _heavy_epilogue(d)
    wide = inner is not None and not heavy
    if wide:
        tile[inner] = d.cap(inner, 256)
    if heavy:
        d.persistent, d.num_stages = 2, d.num_stages or 3
    inner_tf32 = _wide_tf32(d, name, m, n, r) if inner is None else None
    wide_tf32 = inner_tf32 is not None
    if wide_tf32:
        tile[inner_tf32] = d.cap(inner_tf32, 256)
    if r not in tile:
        # 8-bit operands: 128 along the reduction (the bytes of a 16-bit tile of 64; Triton needs >= 32)
        tile[r] = max(16, d.cap(r, 128 if d.eight_bit and d.gpu else 64 if d.half or not d.gpu else 32))
    if tc and not d.half:
        d.tc_fp32 = True
    d.dot_axes.add(r)
    if d.split_ok(r):
        # programs of the grid: the dot's output tiles times the batch axes' tiles
        free = d.alg.stages[name].free_axes if name in d.alg.stages else (m, n)
        ntiles = programs(dict.fromkeys((m, n) + tuple(a for a in grid if a in free)), sizes, tile)
        # about two waves of programs over the 132 SMs, each still looping over >= 8 tiles of
        # the reduction (the H200 sweep of the diffusion layer: best split 4 at V=1.4k, 8 at
        # 5k, 64 at 28k-85k)
        split_for(d.split, r, ntiles, sizes[r], tile[r], d.sms)
    if len(grid) >= 2 and set(grid[-2:]) == {m, n} and not d.group and not d.layout_given:
        # grouped launch order swizzles the second-to-last grid axis (codegen)
        d.group[grid[-2]] = 8
    if d.num_warps is None:
        # tf32 on 128x128 tiles: 4 warps (H200 probe, X @ W.T 1024x8192x8192: 379 us against 541
        # with 8, 0.96x cuBLAS with TF32)
        # (8-bit dots: 4, but block-scaled ones keep 8: their second accumulator spills 632 bytes at 4, sm_90)
        few = (d.user.precision == "tf32" and not wide_tf32) or (d.eight_bit and not _block_scaled(d, name, r))
        d.num_warps = 8 if tile[m] * tile[n] >= 128 * 128 and not few else 4
    if (wide or wide_tf32) and _persistent_wide(d, name):
        d.persistent = 1
    if d.num_stages is None and wide_tf32:
        # 128x256x32 fp32 tiles: 48 KB a stage; 4 stages and the output's store buffer need 262 KB (sm_90)
        d.num_stages = 3
    if d.num_stages is None and wide:
        # an epilogue reading another tile (a residual R[i, j]): the flattened kernel reads it through pointers
        # (plan.persistent.plan_epilogue_reads), whose conversion to the accumulator's layout takes a buffer
        # beside the pipeline's: 3 stages (sm_90: 213,016 B; 262,176 at 4, beyond an H200 block)
        d.num_stages = 3 if d.persistent and epilogue_tiles(d, m, n) else wide_stages(d, name)
    if d.num_stages is None and d.gpu and d.eight_bit and not _byte_operands(d, name):
        # fp8 dots: 3 stages (H200, s5 call 3, fp8 e4m3 4096^3 with per-row scales at 128x128x128, 4 warps:
        # 104.5 us = 1.017x torch._scaled_mm against 117.3 with 4 stages); int8 keeps 4 (150.7 against 157.0)
        d.num_stages = 3
    if d.num_stages is None:
        # fp32 on tensor cores: 4 stages of 128x128x32 fp32 tiles (H200 probe, X @ W.T
        # 1024x8192x8192 at tf32x3 with TMA: 1685 us against 1733 with 3 stages)
        d.num_stages = (4 if d.half or tc else 3) if d.gpu else 2
    return False


def _dot_axes_of_many(d: Draft, name: str, m: str, n: str, r: str) -> tuple[str, str]:
    """A contraction with more than two free axes (``X[i, k] * W[g, c, k]``: a weight viewed as
    groups): tl.dot takes the longest axis of each side, and the stage's own kernel (where the
    stage is materialised) covers the other free axes one index per program (tile 1), and a
    kernel that fuses it and reduces such an axis loops over it one index at a time, so its
    values stay 2-d tiles (with every axis a block, ``i x g x c x k`` exceeded Triton's block
    limit in the group-norm chains of bench/chain_catalogue.py)."""
    st = d.alg.stages.get(name)
    if st is None or len(st.node.axes) <= 2:
        return m, n
    sides: dict[str, set] = {m: set(), n: set()}
    for f in mul_factors(st.node.x):
        ax = set(f.axes) - {r}
        for key in (m, n):
            if r in f.axes and key in ax:
                sides[key] |= ax
    m2, n2 = (max((a for a in st.node.axes if a in sides[key]), key=lambda a: d.sizes[a]) for key in (m, n))
    if m2 == n2:
        return m, n
    ss = d.stages.get(name, StageSchedule())
    ones = {a: 1 for a in st.node.axes if a not in (m2, n2)}
    d.stages[name] = ss.replace(tile={**ones, **dict(ss.tile)})
    if d.gpu and not d.layout_given and ss.grid is None:
        # its own kernel (where materialised): a grouped GEMM of m2 against the axis of n2's side with
        # the most programs (n2 in 128-wide tiles, or an index axis: group norm's groups), the others
        # outermost, so a wave of programs shares the weight's rows as a plain GEMM does (with
        # (m2, n2, extra) every program row of m2 streamed the whole weight: max pooling at 0.33x
        # torch.compile on the H200, bench/results/issue14/chains_fp16_h200.md)
        nside = [a for a in st.node.axes if a in sides[n] and a != m2]
        last = max(nside, key=lambda a: -(-d.sizes[a] // (128 if a == n2 else 1)))
        outer = tuple(a for a in st.node.axes if a not in (m2, last))
        d.stages[name] = d.stages[name].replace(grid=outer + (m2, last), group={m2: 8})
    for a in ones:
        # an extra axis that a later stage reduces (max over c of the product's columns: pooling)
        # is looped one index at a time where the product is fused into that stage's kernel
        if a in d.reduced and a not in d.user.tile and a not in d.user.strategy:
            d.tile[a], d.strategy[a] = 1, "loop"
            _pool_fused(d, name, a, m2, n2)
    if not any(a in d.reduced for a in ones):
        _group_rows_whole(d, name, m2, n2)
    return m2, n2


def _group_rows_whole(d: Draft, name: str, m2: str, n2: str) -> None:
    """Statistics over each group's columns of a grouped GEMM (group norm of a Linear: means over c of
    ``X[i, k] * W[g, c, k]``): the GEMM stays a kernel of its own with 128 x 128 tiles, and the kernel
    of the statistics and the output reads each group's C <= 256 columns once, whole (128 rows a
    program, 64 where C > 128), computing both means in registers. Without it that kernel looped over c
    in tiles of 128 once per statistic and once more for the output, reading the buffer three times.
    (Fusing the GEMM into that kernel instead, the statistics in its epilogue, was slower on the H200:
    group_norm 302.6 us against 260.9, bench/results/issue14/s4/README.md.)"""
    if (not d.gpu or d.layout_given or n2 in d.user.tile or n2 in d.user.strategy or len(d.cons) != 1
            or n2 not in d.alg.outputs[0].layout):
        return
    gemm = d.alg.stages[name].node
    stats = [s.node for s in d.alg.stages.values() if s.name != name and not s.is_output and contains(s.node, gemm)]
    width = next_pow2(d.sizes[n2])
    if not stats or width > 256 or any(tuple(r.over) != (n2,) or m2 not in r.axes for r in stats):
        return
    ss = d.stages[name]
    # 16-bit: the GEMM's kernel persistent, its tile loop flattened with the K loop (sm_90: 117 registers, 135 KB;
    # H200, s7 call 1: group_norm 220.3 us against 228.6 on the plain grid); groups of 256 columns or more in a
    # GEMM of >= 2^35 multiply-adds take the wide GEMM's 256 columns (group_norm_hardtanh, C = 256: 212
    # registers, 200,736 B at 4 stages)
    persistent = d.half and not d.eight_bit and persistent_allowed(d)
    wide = persistent and width >= 256 and math.prod(d.sizes[a] for a in gemm.axes + gemm.over) >= 1 << 35
    d.stages[name] = ss.replace(place="materialize", persistent=1 if persistent else None,
                                num_stages=wide_stages(d, name, (m2, n2)) if wide else ss.num_stages,
                                tile={**dict(ss.tile), m2: d.cap(m2, 128), n2: d.cap(n2, 256 if wide else 128)})
    d.strategy[n2], d.tile[n2] = "whole", width
    d.tile.setdefault(m2, 64 if width > 128 else 128)


def _pool_fused(d: Draft, name: str, a: str, m2: str, n2: str) -> None:
    """Pooling over the extra axis ``a`` of contraction ``name`` (``max over c`` of ``X[i, k] *
    W[g, c, k]``): the one stage reducing ``a`` over the product, and only ``a``, computes the
    product fused, one index of ``a`` at a time (a scalar loop around a 2-d dot of (m2, n2) tiles,
    folded into the pooled tile as it goes), in a kernel of its own over (m2, n2) with grouped
    order when it is not the main output (max pooling then summed over the groups). Without it
    the product was materialised with ``a`` innermost (a store every C elements, pointer loads) and
    read back by a pooling kernel: 0.35x and 0.30x torch.compile on the H200 (bench/results/
    issue14/s3/chains_fp16_h200_rest.md)."""
    if not d.gpu or d.layout_given:
        return
    gemm = d.alg.stages[name].node
    reds = [s.node for s in d.alg.stages.values() if s.name != name and not s.is_output and contains(s.node, gemm)]
    pool = [r for r in reds if a in r.over]
    # max or min pooling only: a sum over the extra axis (a GQA backward's dK over the heads sharing K)
    # is a reduction the split rules may split, which a fused product cannot be
    if (len(pool) != 1 or tuple(pool[0].over) != (a,) or pool[0].combiner.base not in ("max", "min")
            or any(r is not pool[0] and a in r.axes for r in reds)):
        return
    pname = pool[0].name
    d.stages[name] = StageSchedule(place="fuse")
    if not d.half and n2 not in d.user.tile:
        # fp32 (3xTF32): the GEMM's and the pooled 128x128 accumulators with the split operands spilled
        # (sm_90 compile on the CPU: 255 registers and 304 bytes of stack; 214 and none with 64 columns
        # at 8 warps, 328 bytes of stack at 4)
        d.tile[n2] = d.cap(n2, 64)
        d.num_warps = d.num_warps or 8
    if pool[0] is d.alg.outputs[0].expr or pname in d.user.stages:
        return
    d.stages[pname] = StageSchedule(place="materialize", grid=(m2, n2), group={m2: 8}, tile={a: 1},
                                    strategy={a: "loop"})


def _block_scaled(d: Draft, name: str, r: str) -> bool:
    """Whether contraction ``name`` has block scales (a factor reading its reduced axis ``r`` as
    ``r // c``, e.g. ``sa[i, k // 128]``): each tile's dot is scaled before it is added
    (:mod:`dtriton.plan.dots`), a second accumulator-sized value, so 128x256 tiles spill (sm_90
    compile, bench/narrow_sm90.py: 255 registers and 256 bytes of stack at 128x256x128 fp8, 154
    registers and none at 128x128x128)."""
    st = d.alg.stages.get(name)
    return st is not None and any(isinstance(e, Binary) and e.op == "floordiv" and isinstance(e.a, Axis)
                                  and e.a.name == r for e in walk([st.node.x]))


def _byte_operands(d: Draft, name: str) -> bool:
    """Whether contraction ``name`` reads int8 or uint8 tensors: an int8 dot (:mod:`dtriton.plan.dots`)
    or weights unpacked from bytes in its prologue (int4). Either keeps 128x128 tiles (sm_90 compile of
    bench/narrow_sm90.py at 4096^3): an int8 dot's 128x256 tiles need 320 KB of shared memory with TMA at 4
    stages, 272 KB at 3, against the H200's 227 KB (its int32 epilogue does not reuse the pipeline's
    buffers; 128x128x128 at 4 stages takes 192 KB), and an int4 unpack at 128x256 spills (255 registers and
    368 bytes of stack; 212 registers and none at 128x128)."""
    st = d.alg.stages.get(name)
    return st is not None and any(isinstance(e, Load) and d.b.dtypes.get(e.tensor.name) in (torch.int8, torch.uint8)
                                  for e in walk([st.node.x]))


def wide_axis(d: Draft, name: str, m: str, n: str, r: str, grid, tile: dict | None = None,
               alone: bool | None = None) -> str | None:
    """Large 16-bit GEMMs (both output axes >= 1024, >= 2^35 multiply-adds: the TMA range) take
    128x256 output tiles, 256 along the inner axis of ``grid`` (the grid of the GEMM's kernel), with 3
    stages (H200 probe at 4096^3, bench/results/probe_fp32.json: fp16 NN 188 us, TN 188, bf16 NN 179, TN
    179 with TMA, against 205-225 us with 128x128x64 and 4 stages; s7 call 1, gelu_mlp_residual at 1024 rows,
    1024x8192x4096 then 1024x4096x8192: 195.6 us wide and persistent against 225.3 at 128x128, 226.2 at 128x128
    persistent). Returns that inner axis, or None where
    the rule does not apply: the contraction's tiles of ``m`` and ``n`` (in ``tile``: its kernel's, by
    default the draft's) are not the 128 x 128 of the contraction rules, the user set one, the contraction
    is not ``alone`` in its kernel (by default: the algorithm's only one), or its operands are 8-bit, bytes
    or block-scaled (see :func:`_block_scaled`, :func:`_byte_operands`). The caller sets the tile."""
    inner = _wide_shape(d, m, n, r, grid, tile, alone) if d.half else None
    if inner is None or d.eight_bit or _block_scaled(d, name, r) or _byte_operands(d, name):
        return None
    return inner


def _wide_shape(d: Draft, m: str, n: str, r: str, grid, tile: dict | None = None,
                alone: bool | None = None) -> str | None:
    """The shape test of the wide GEMM rules (:func:`wide_axis`, :func:`_wide_tf32`): on the GPU, the
    contraction ``alone`` in its kernel (by default: the algorithm's only one), ``m`` and ``n`` on the grid
    with the 128 x 128 tiles of the contraction rules (in ``tile``, by default the draft's) that the user did not
    set, both >= 1024 and >= 2^35 multiply-adds. Returns the inner one of ``m`` and ``n`` on ``grid``, or None."""
    sizes, tile = d.sizes, d.tile if tile is None else tile
    # one contraction in the kernel: two 128x256 accumulators (SwiGLU's two GEMMs sharing X) spilled, 0.15x
    # torch.compile on the H200 (bench/results/issue14/chains_fp16_h200.md)
    alone = len(d.cons) == 1 if alone is None else alone
    if not (d.gpu and alone and m in grid and n in grid and not (set(d.user.tile) & {m, n})
            and tile.get(m) == 128 and tile.get(n) == 128 and min(sizes[m], sizes[n]) >= 1024
            and sizes[m] * sizes[n] * sizes[r] >= 1 << 35):
        return None
    return n if list(grid).index(n) > list(grid).index(m) else m


def wide_stages(d: Draft, name: str, pair: tuple[str, str] | None = None) -> int:
    """Pipeline stages of a wide GEMM (:func:`wide_axis`): 4 with both operands K-major (X @ W.T, the
    nn.Linear layout; H200, 4096^3 with TMA: fp16 211.7 us against 221.6 with 3, bf16 208.4 against 222.3;
    bench/results/issue14/probe_nt_call2.json); other layouts keep 3. A side computed from a materialised
    contraction (an MLP's hidden activations, stored over (rows, reduced axis): the reduced axis last) counts
    as K-major. ``pair``: the dot's two free axes, where the contraction has more (a weight viewed as groups)."""
    node = d.alg.stages[name].node
    firsts = [d.alg.stages[c].node for c in d.cons if c != name and d.stages.get(c) is not None
              and d.stages[c].place == "materialize"]
    buffered = {a for f in mul_factors(node.x) if any(contains(f, x) for x in firsts)
                for a in f.axes if a not in node.over}
    sides = set(tensor_core_sides(node, d.b.unit_dims)) | buffered
    return 4 if (set(pair) <= sides if pair else len(sides) == 2) else 3


def _wide_tf32(d: Draft, name: str, m: str, n: str, r: str) -> str | None:
    """A large single-pass TF32 GEMM (the user's ``precision="tf32"``, >= 2^35 multiply-adds, both operands
    K-major as tf32 wgmma reads them: ``X @ W.T``; no epilogue tile such as a residual, whose fp32 tile would
    not fit beside the pipeline) takes 128x256x32 tiles, 256 along the inner grid axis, 8 warps
    and 3 stages, persistent (:func:`_persistent_wide`) with its fp32 output tile stored in two pieces (the
    plan's ``store_pieces``). H200, session 7 call 2 (bench/probe_fp32.py --only tf32, X @ W.T
    1024x8192x8192): 335.9 us = 1.03x cuBLAS with TF32 allowed (347.6 us), against 399.9 us (0.87x) for the
    128x128x32 tiles at 4 warps and 4 stages the rule gave before, 380.3 persistent at 5 stages, 385.2 for
    256x128x32 and 418.9 for 128x256x32 on the plain grid. Returns the inner axis (the caller sets its tile), or
    None where the rule does not apply."""
    if d.half or d.user.precision != "tf32" or r in d.user.tile:
        return None
    inner = _wide_shape(d, m, n, r, d.grid)
    if inner is None or epilogue_tiles(d, m, n) or len(tensor_core_sides(d.alg.stages[name].node, d.b.unit_dims)) != 2:
        return None
    return inner


def _persistent_wide(d: Draft, name: str) -> bool:
    """A wide 16-bit GEMM (:func:`wide_axis`) runs persistent, one program per SM, when it is the
    algorithm's only reduction (its kernel is the GEMM with its element-wise epilogue) and the user's
    schedule leaves ``persistent`` at 0, ``access`` open or "tma" and warp specialisation off: the plan then
    flattens the tile loop with the K loop (:mod:`dtriton.plan.persistent`), so the next tile's loads
    overlap this tile's epilogue. (A user's explicit tiles keep the plain grid: the wide rule does not
    apply to them.) H200, session 6 (bench/probe_nt.py --set persistent, fp16 4096^3): NT 179.5 us at 4
    stages against 214.8 with the plain grid and cuBLAS NT 180.0; NN 180.4 at 3 stages against 183.7 and
    cuBLAS 178.7; fp16 chains (bench/chains.py --schedule '{"persistent": 1}'): bias 218.8 -> 181.9 us,
    hardswish 218.8 -> 183.9, sigmoid_scale_residual 226.6 -> 187.5, swish_div_clamp_tanh 238.4 -> 229.5."""
    return persistent_allowed(d) and [st.name for st in reduction_stages(d.alg)] == [name]


def persistent_allowed(d: Draft) -> bool:
    """The user's schedule leaves the choice of a persistent kernel open: ``persistent`` 0, ``access``
    open or "tma", no warp specialisation."""
    u = d.user
    return u.persistent == 0 and u.access in (None, "tma") and not u.warp_specialize


#: epilogue weight (:func:`_heavy_epilogue`) from which a wide GEMM runs as 128 x 128 tiles, two programs an SM
HEAVY_EPILOGUE = 4

#: weight of an element-wise function in an epilogue: tanh and sigmoid are an exponential and a division
_FUNCTION_WEIGHT = {"exp": 1, "exp2": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 2, "sigmoid": 2}


def _heavy_epilogue(d: Draft) -> bool:
    """Whether the element-wise epilogue after the GEMM (the outputs outside their reductions) weighs
    :data:`HEAVY_EPILOGUE` or more: each transcendental function its :data:`_FUNCTION_WEIGHT`, each division by a
    value that is not a literal 1. Such an epilogue is instruction-bound (sm_90 SASS of mish, exp + log + tanh,
    at 128x256: about 80 instructions an element, 255 registers and 88 bytes of stack), and in a flattened
    kernel of one program an SM nothing else runs meanwhile (H200, s7 call 1: mish 275.3 us at 128x256, 266.8 at
    128x128, against 182 for a bias epilogue). With 128 x 128 tiles at 3 stages two programs fit an SM (mish:
    128 registers, 114,712 B of shared memory), so one's epilogue overlaps the other's main loop: H200, s7
    call 2, mish 226.6 us (274.3 as before; plain 128x128 grid 234.3), swish_div_clamp_tanh 214.3 (232.3). Not
    for lighter epilogues: bias 195.2 (182 at 128x256), gelu, one tanh (weight 2), 573.1 (419). An epilogue
    reading a tile (a residual) keeps 128x256: its layout conversion's buffer leaves no room for two programs."""
    roots = [o.expr for o in d.alg.outputs]
    weight = 0
    for x in walk(roots, stop=lambda x: isinstance(x, Reduce)):
        if isinstance(x, Unary):
            weight += _FUNCTION_WEIGHT.get(x.op, 0)
        elif isinstance(x, Binary) and x.op == "div" and any(isinstance(e, (Load, Reduce, Axis)) for e in walk([x.b])):
            weight += 1
    return weight >= HEAVY_EPILOGUE


def epilogue_tiles(d: Draft, m: str, n: str) -> bool:
    """Some output reads a tile of an input over both output axes ``m`` and ``n`` outside its
    reductions (a residual ``R[i, j]`` added after the GEMM)."""
    roots = [o.expr for o in d.alg.outputs]
    return any(isinstance(x, Load) and {m, n} <= set(x.axes) for x in walk(roots, stop=lambda x: isinstance(x, Reduce)))


def _skinny(d: Draft, m: str, n: str, r: str) -> bool:
    """A matrix-vector-like contraction (an output axis shorter than 16, the least tl.dot block)
    on the GPU streams its matrix instead: a few rows per program, the reduced axis looped in
    tiles of 1024 (H200 probe, fp32 8192x65536 @ 65536x1: 8 rows, 8 warps, 3 stages, 509 us, 1.03x
    torch and 4.2 TB/s; as a padded 128x16 dot 688 us), split across programs when they are few.
    Returns False (not applied) when the schedule sets any of the three axes' tiles or the
    algorithm has other contractions."""
    small = min((m, n), key=lambda a: d.sizes[a])
    big = n if small == m else m
    if (not d.gpu or d.sizes[small] >= 16 or len(d.cons) != 1 or set(d.user.tile) & {m, n, r}
            or d.user.strategy.get(r)):
        return False
    d.tile[small] = d.cap(small, 16)
    d.tile[big] = d.cap(big, max(1, 8 // d.tile[small]))
    d.tile[r] = d.cap(r, 1024)
    d.strategy[r] = "loop"
    d.dot_axes |= {m, n, r}
    if d.split_ok(r):
        split_for(d.split, r, programs(tuple(a for a in d.grid if a in (m, n)), d.sizes, d.tile), d.sizes[r],
                   d.tile[r], d.sms)
    if d.num_warps is None:
        d.num_warps = 8
    if d.num_stages is None:
        d.num_stages = 3
    return True


#: A materialised contraction reducing an axis at least this long into an output of fewer tiles
#: than half the SMs is a long reduction (:func:`_long_reduction`).
LONG_REDUCTION = 1024

#: A long reduction whose programs each sum at least this many tiles of the reduced axis takes
#: 128-row tiles at 8 warps (:func:`_long_reduction`)
LONG_SLICE = 8


def _long_reduction(d: Draft, name: str, m: str, n: str, r: str) -> bool:
    """A materialised fp32 contraction that reduces a long axis into a small output (the diffusion
    layer's projection ``basis^T (x mass)``, 128 x 128 summed over V = 2000 to 10^5 vertices, and
    its backward's ``basis^T G``): 64 x 64 output tiles of its own (a stage override; the
    consumers keep theirs), 4 warps, 3 stages, reduced in tiles of 32, split so about four waves of
    programs run, each looping over about two tiles of the reduction or more (128 x 64 tiles at 8
    warps, the same split, where each program sums :data:`LONG_SLICE` tiles or more) (H200, s5 call 5 and
    s6 call 1, bf16x6: the projection at V=100000 64.6 us split 128 against 74.9 split 64, V=20000
    16.1 against 18.0, V=2000 5.2 split 32 against 6.9 split 16; V=6000 keeps 64, 8.1 against 8.7
    split 128).
    Both operands of such a product usually read the reduced axis as their rows (A^T B of two
    row-major tensors), which precision "auto" runs as FMA dots ("ieee"); under an "auto" schedule
    the stage's own precision becomes "bf16x6" (fp32 accuracy on tensor cores from six bf16 passes:
    16-bit wgmma reads MN-major operands from shared memory, where tf32 needs them K-major and Triton
    moves them through registers), and the other contractions keep "auto": the output GEMM
    (``basis @ coefficients``, basis read K-major) then runs at tf32x3. H200, s5 calls 4 and 5, per
    kernel: the projection at V=100000 74.2 us bf16x6 against 110.5 tf32x3, V=20000 18.4 against
    24.5; the output GEMM 69.4 us tf32x3 against 83.8 bf16x6 at V=100000, 16.2 against 19.2 at
    V=20000, 5.7 against 7.4 at V=2000 (bench/results/issue15/s5/).
    H200 probes of the layer's forward (bench/results/issue15/diffusion_h200_call4.md, K = C =
    128): with 64 x 64 tiles split 16 at V=2000 18.2 us, split 64 at V=6000 23.8 us, against 32.0
    and 31.1 us for the former 32 x 64 FMA tiles split 2 and 8; 128 x 128 tiles over a wave were
    slower at every V (47.9, 41.9, 46.9, 180 us); split 256 (1024 programs) slower than 256
    programs at V >= 20000. Applies on the GPU, fp32, to a contraction that is not the main
    output, whose split, tiles, reduced axis' strategy and stage the user left open."""
    st = d.alg.stages.get(name)
    main = getattr(d.alg.outputs[0].expr, "name", None)
    if (not d.gpu or d.half or st is None or st.is_output or name == main or not d.split_ok(r)
            or d.user.strategy.get(r) or set(d.user.tile) & {m, n, r} or name in d.user.stages
            or any(t == torch.float64 for t in d.b.dtypes.values()) or d.user.acc_dtype == "float64"):
        return False
    sizes = d.sizes
    # a tl.dot needs blocks of >= 16 (else "bf16x6" would be a precision without a dot)
    if (min(sizes[m], sizes[n]) < 16 or sizes[r] < max(LONG_REDUCTION, 8 * max(sizes[m], sizes[n]))
            or programs((m, n), sizes, {m: 64, n: 64}) * 2 >= d.sms):
        return False
    rt = 32
    tm, tn = d.cap(m, 64), d.cap(n, 64)
    most = -(-sizes[r] // (2 * rt))       # splits leaving each program about 2 tiles of r or more
    want = max(1, 4 * d.sms // programs((m, n), sizes, {m: tm, n: tn}))
    split = 1 << (min(want, most).bit_length() - 1)
    if split < 2:
        return False
    warps = 4
    if sizes[r] // split >= LONG_SLICE * rt and sizes[m] >= 128:
        # each program sums a long slice: 128 rows of the left side's free axis at 8 warps, the two warp groups
        # sharing each tile of the right operand (loaded and split into its bf16 parts once, not once per
        # 64-row tile); H200, s7 call 1, the projection at V=100000 (781 rows a program): 61.3 us against 64.8;
        # at V=20000 (156 rows) 16.3 against 16.4, so only for long slices
        tm, warps = d.cap(m, 128), 8
    ss = d.stages.get(name, StageSchedule())
    # its own precision (a stage override): the other contractions keep "auto", which runs the output GEMM
    # (basis (V, K) @ coefficients, basis read K-major) at tf32x3, faster there than bf16x6
    prec = "bf16x6" if d.precision == "auto" and not _fp32_tensor_cores(d, name) else ss.precision
    d.stages[name] = ss.replace(tile={**dict(ss.tile), m: tm, n: tn, r: rt}, num_stages=3, num_warps=warps,
                                precision=prec)
    d.split[r] = split
    d.dot_axes |= {m, n, r}
    return True


def _short_consumer(d: Draft, name: str) -> None:
    """The contraction of the main output that reads the long reduction ``name`` (the layer's
    ``basis @ coefficients``), when its 64-row tiles make fewer than two waves of programs (small
    meshes), takes 32-row tiles (tiles of its outermost grid axis): twice the programs for a GEMM
    of four k-steps. H200, s6 call 2b, tf32x3: V=2000 4.5 us against 5.7, V=6000 7.3 against 7.7;
    at V=20000 (626 programs) 19.9 against 16.2, so only below two waves. Applies where the user set
    no layout and no tile of that axis."""
    main = second_gemm(d)
    if main is None or main == name or d.layout_given or not d.grid:
        return
    first = d.grid[0]
    if (first in d.user.tile or d.tile.get(first) != 64 or not contains(d.alg.stages[main].node, d.alg.stages[name].node)
            or programs(d.grid, d.sizes, d.tile) >= 2 * d.sms):
        return
    d.tile[first] = 32


#: A further output's own reduction over an axis this short is one block (:func:`_small_outputs`).
SHORT_AXIS = 256


def _small_outputs(d: Draft, name: str) -> None:
    """Further outputs that read the long reduction ``name`` and reduce only short axes themselves
    (the diffusion backward's ``grad_times[c] = sum over k of ...`` of K x C values): a kernel of
    their own over 16-wide tiles of their axes with the short axes whole, one block each (the
    loads of one step issued together), instead of the output defaults' 64-wide tiles looping
    over k in steps of 32 (2 programs of 4 dependent steps: 4.3 us for the derived backward's,
    whose two K x C operands are stored in opposite orders, 2.3 for the hand-written one's; H200
    s6 call 3). Applies where the user set no layout; an output the user or a rule scheduled is
    left alone."""
    if d.layout_given or d.user.grid is not None:
        return
    node = d.alg.stages[name].node
    for o in d.alg.outputs[1:]:
        if o.name in d.stages or not contains(o.expr, node) or not o.layout:
            continue
        over = {a for r in walk([o.expr]) if isinstance(r, Reduce) and r is not node and not contains(node, r)
                for a in r.over}
        if not over or any(d.sizes[a] > SHORT_AXIS for a in over) or over & set(o.layout):
            continue
        d.stages[o.name] = StageSchedule(grid=tuple(o.layout), tile={**{a: d.cap(a, 16) for a in o.layout},
                                                                     **{a: next_pow2(d.sizes[a]) for a in over}},
                                         strategy=dict.fromkeys(over, "whole"), num_warps=4)


def _fp32_tensor_cores(d: Draft, name: str) -> bool:
    """The fp32 contraction stage ``name`` runs on tensor cores: the schedule's precision is a
    tensor-core one, or "auto" and one side of the product reads the reduced axis at unit stride on
    this call (the plan's rule in :mod:`dtriton.plan.dots`, from :func:`~dtriton.ir.tensor_core_sides`)."""
    if any(t == torch.float64 for t in d.b.dtypes.values()) or d.user.acc_dtype == "float64":
        return False
    if d.user.precision in TENSOR_CORE_FP32:
        return True
    return d.user.precision == "auto" and bool(tensor_core_sides(d.alg.stages[name].node, d.b.unit_dims))


def second_gemm(d: Draft) -> str | None:
    """The contraction the main output is (or applies an epilogue to: the outermost one it contains,
    ``X + gelu(X @ W.T) @ W2.T``'s second), None when there is none."""
    main = d.alg.outputs[0]
    second = getattr(main.expr, "name", None)
    if second in d.cons:
        return second
    inside = [c for c in d.cons if contains(main.expr, d.alg.stages[c].node)]
    return max(inside, key=lambda c: sum(contains(d.alg.stages[c].node, d.alg.stages[o].node) for o in inside),
               default=None)
