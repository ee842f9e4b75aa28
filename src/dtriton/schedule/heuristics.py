"""Default schedules: fill whatever a schedule leaves open from the shapes and dtypes.

Rules (documented so users can predict them):

- Contractions (a sum over one axis of a product of an (m, r) and an (r, n) operand) run on
  ``tl.dot``: output tiles of 128x128 for 16-bit inputs and 64x64 for fp32 on the GPU (capped at
  the padded axis, never below 16), 32 or 64 along the reduction axis, grouped launch order 8
  (when the two output axes are the last two grid axes: the swizzled pair),
  ``num_warps`` 8 for 128x128 tiles else 4, ``num_stages`` 3 (4 for fp16/bf16). Skinny outputs
  with a long reduction (fewer output tiles than half the GPU's 132 SMs) are split along it
  (split-K). An fp32 contraction that is materialised for a later stage and reduces a long axis
  (>= 1024, >= 8x its output axes) into a few tiles (the diffusion layer's ``basis^T (x mass)``)
  gets 64x64 tiles of its own, split so about two waves of programs run, and an
  "auto" precision becomes "tf32x3" (tensor cores where both operands read the reduced axis as
  rows, which "auto" would run as FMA dots).
- GEMM chains (:mod:`.chain_rules`, on the GPU, for schedules that set no layout): a GEMM followed by
  row statistics of its output runs as the GEMM plus one row kernel (``gemm_then_rows``; per-row
  reductions free of the GEMM, cross entropy's gathered target, join it); row statistics between
  two GEMMs get row kernels of their own (``rows_between_gemms``); column statistics of a GEMM
  get kernels of 32 columns (``gemm_then_columns``); the first GEMMs of an MLP get 128 x 128
  tiles of their own (``gemm_then_gemm``), and each kernel holding one large 16-bit GEMM is a wide
  persistent GEMM; two GEMMs combined element-wise (SwiGLU) run apart, the second reading the first's
  buffer in its epilogue (``gemms_apart``); a GEMM with a weight viewed as groups (pooling, group
  norm over output columns) runs its own kernel in grouped order, or, under a max pooling over
  the groups' columns, fused into the pooling kernel, one column at a time.
- Row-wise stages (axes both reduced and kept in the output, as in softmax, layer norm, or batch
  norm's (n, h, w)) keep those axes off the grid. The axes a program covers are taken innermost
  first (the axis indexing an input's last dim first): all "whole" (one block covers them, the
  fused-softmax layout of the Triton tutorial) while the product of their padded sizes is at
  most :data:`ROW_BLOCK` (32768 on the GPU: a 32768-wide fp32 row is 64 registers per thread over
  16 warps; 4096 on the interpreter); else "whole" for the innermost that fit
  :data:`STEP_BLOCK` (2048) elements, a loop ("online" where a max reduces the axis: one pass
  with rescaling) over the next in the rest of that step, loops of tile 1 over the others.
  One row per program, ``num_warps`` growing with the block (4 up to 1024, 8 up to 4096, 16 above).
  An axis the schedule gives a tile (and no strategy) is stepped over in that tile instead
  ("online" where a max reduces it, else "loop").
- Reductions too large for one program on fewer programs than the GPU has SMs (batch norm's
  64 channels of 16M elements, a Frobenius norm's single sum) are split across programs: the
  output's grid takes all its axes, each statistics stage gets a kernel of its own over its free
  axes (one program each, reduced axes in steps of 2048) with one reduced axis split so about
  two waves of programs run (the outermost that reaches them, so the inner loops keep their
  steps, which the plan unrolls: ``unroll``; the other looped axes then take larger tiles where
  the split left steps of fewer than 2048 elements; a sum or max without a variance beside it
  steps over up to 16384 elements, 16 warps above 4096, until its programs load
  :data:`INFLIGHT_BYTES` an SM; 4096 beyond two waves). Where one axis's split leaves fewer than
  two waves (a Frobenius norm's h: 256 programs), the axes outermost in memory are split instead,
  up to 512 programs, so each program sums contiguous slabs (``split={"n": 16, "c": 32}``); where
  they cannot reach that many, the best axis and then further ones. The partial results go to per-split buffers
  (``split_mode="partials"``: deterministic) that the readers combine, or, when the output's
  programs would fold :data:`FINISH_FOLDS` partial values or more in all (batch norm's 262144
  programs), that a finishing kernel combines once (``split_mode="finish"``). A whole-tensor statistic
  that fits one program runs in one kernel on a single program. Statistics over rows that loop
  (not online) get a kernel of their own even with many programs (instance norm over 256x256
  images), so the output runs as a grid kernel instead of a second loop in each program.
- Column reductions (the reduced axis strided, a grid axis contiguous) loop in steps of 32 rows
  (more when the rows are short: :data:`COLUMN_STEP` elements a step), split across programs when few.
- Every default is checked against Triton's 2**20-element block before it is returned
  (:func:`within_limits`).
- Other axes on the grid get tiles so a program holds about 1024 elements (the innermost axis
  first; 4096 when the output reads split or materialised statistics, except an fp32 output that
  folds no split partials: :data:`OUTPUT_BYTES` a program, fewer rows); axes of size 1 get tile 1. An output axis that the schedule gives a strategy
  (whole/loop/online) and no stage reduces stays off the grid, covered inside each program.
- On the interpreter (CPU tensors) a program costs its number of operations whatever its block
  size, so the grid axes, rows included, get tiles that give each program about 65536 elements
  (counting the blocks of the axes covered inside it), innermost first: a 64x1000 softmax is one
  program instead of 64; attention takes 128x128 query and key tiles.
- No tile is filled in for an axis that ends up "whole" off every grid (it would be ignored).

User-given fields are never changed, and a partial schedule is completed around them: knobs it leaves
open (``num_warps`` and ``num_stages`` included) follow the rules for the tiles it ends up with, so
``Schedule(precision="tf32")`` runs the heuristic's tiles, warps, stages and grouped order. Only a
schedule that sets the layout (tiles, grid, group, split, strategy or stage overrides) turns off
the rules that re-plan a layout (attention's online loop, grouped order, GEMM then rows).

The heuristic decides the knobs in :data:`DECIDED`; every
other knob of the registry (:mod:`.knobs`) passes through from the user's schedule unchanged.
:func:`complete_schedule` applies the rules of :data:`RULES` in order to a :class:`Draft`.
"""

from __future__ import annotations

import math

import torch

from ..ir import (Algorithm, Axis, Binding, Load, Reduce, contains, expr_axes, is_sum, online_candidate, reduces_in,
                  reduction_stages)
from .attention_rules import decode_split
from .conv_rules import conv_gemm, conv_tiles, depthwise_tiles
from .chain_rules import gemm_then_columns, gemm_then_gemm, gemm_then_rows, gemms_apart, rows_between_gemms
from .dot_rules import contraction_tiles
from .grad_rules import flash_backward
from .draft import (EIGHT_BIT, ROW_BLOCK, STEP_BLOCK, Draft, axis_depths, next_pow2, programs, sm_count,
                    split_for)
from .split_rules import busy_split_slices, finish_splits, split_rows
from .schedule import Schedule, StageSchedule

__all__ = ["complete_schedule", "sm_count", "next_pow2", "Draft", "RULES", "DECIDED"]

#: Elements per program the interpreter's grid tiles aim at (its cost is per operation, not per element).
INTERPRETER_ELEMENTS = 65536

#: The knobs the heuristic fills in; all others are the user's (or their defaults).
DECIDED = ("tile", "grid", "group", "split", "strategy", "num_warps", "num_stages", "stages", "access", "split_mode",
           "split_order", "precision", "persistent", "rolling")

#: Elements a column reduction's step covers when its rows are short (GPU): the H200's sum over the
#: middle of 4096x4096x16 fp32 took 279 us in 128x16 steps (0.98x torch), 241 us in 256x16 (1.14x).
COLUMN_STEP = 4096
#: In-program blocks of at most this many values over two or more "whole" axes (a pooling window)
#: take grid tiles of 2048 values a program over every grid axis (:func:`grid_tiles`), not only the
#: innermost.
SMALL_WINDOW = 64
#: Outputs a program of a padded pooling window (3x3, looped one index a step) holds on the GPU: 256,
#: one output row of 256 (H200 s14 call 3, 3x3/s2 pools of 16x64x512x512, exploration's best, 256 / 512
#: outputs a program, us: max fp32 312.0 / 327.7, fp16 177.7 / 182.7; average fp32 311.7 / 328.4, fp16
#: 177.8 / 205.7; 512 was the better of 512 and 1024 in s6, before the 3-D launch grid).
WINDOW_OUTPUTS = 256
#: Triton's largest block (``tl.arange``, ``tl.full``): 2**20 elements, as the backend checks.
MAX_BLOCK = 1 << 20
#: Bytes of output a program holds when it reads materialised statistics without folding split
#: partials (finished, or never split): batch, instance, layer (C, H, W) and Frobenius normalisation
#: (:func:`output_tiles`): 1024 fp16 or 512 fp32 elements. Since the tile indices come from the 3-D
#: launch grid (no division a program, :mod:`dtriton.plan.launch_grid`) small tiles pay. H200 s13,
#: whole calls with the statistics finished by the last programs (graph replay, us; call 3 for the
#: 16-bit tiles, call 4 for fp32): batch norm 64x64x512x512 fp16 1024 elements 1478.5 (2048: 1488.7,
#: 4096: 1518.1; torch.compile 1479.3), fp32 512 elements 2957.4 (1024: 2975.7; torch.compile
#: 2971.1); Frobenius 16x64x256x256 fp32 192.0 (1024: 193.0), instance norm fp32 195.9 (195.9),
#: layer norm over (C, H, W) fp32 202.0 (1024: 200.6, the one case that prefers more: exploration
#: seeds 512 to 4096). Outputs folding split partials in every program keep theirs (layer norm over
#: (C, H, W) fp16 folding 32 splits: 1024 elements 124.4 us against 68.6 at 4096, call 3).
OUTPUT_BYTES = 2048


def _column_reduction(a: str, grid, contig: set[str], sizes) -> bool:
    """``a`` is reduced across rows: it is never a contiguous axis, while a grid axis is."""
    return a not in contig and any(g in contig for g in grid) and sizes[a] > 64




# ----------------------------------------------------------------------------------------------
# the rules, in the order complete_schedule applies them
# ----------------------------------------------------------------------------------------------
def flash_attention(d: Draft) -> None:
    """Attention-like algorithms without a schedule: the score stage fused into an online loop
    (FlashAttention's schedule, Dao et al. 2022): no S x T intermediate; small output axes (the
    head dim) whole; one query tile per program. With fewer than half a wave of programs on a GPU
    (decoding: one query row per head), the key axis is split across programs (split-KV,
    :func:`~.attention_rules.decode_split`: one wave of long slices): each runs the online pass
    over its slice, the reader merges them. Decoding in 16 bits on a TMA GPU (at most 16 query
    rows) streams the keys in 128-key TMA tiles."""
    flash = _flash_pattern(d.alg, d.sizes) if not d.layout_given else None
    if flash is None:
        return
    score, loop_axis, whole_axes = flash
    if all(a in whole_axes for a in d.alg.outputs[0].layout):
        return  # no query axis to put on the grid (single-query attention): the general rules apply
    d.stages[score.name] = StageSchedule(place="fuse")
    d.strategy[loop_axis] = "online"
    for a in whole_axes + score.over:
        d.strategy.setdefault(a, "whole")
    d.grid = tuple(a for a in d.alg.outputs[0].layout if a not in whole_axes)
    for a in d.grid[:-1]:
        d.tile.setdefault(a, 1)
    # the interpreter's cost is per operation: 128x128 tiles (1x2x200x32: 0.07 s per call, 2.2 s in 16x16)
    d.tile.setdefault(d.grid[-1], max(16, d.cap(d.grid[-1], 128)))
    decode = d.gpu and d.half and d.sizes[d.grid[-1]] <= 16 and _tma_device(d.b.device) and not d.user.eviction
    if decode and d.access is None:
        # decoding (a query tile of at most 16 rows streams the keys): 128-key TMA tiles. H200, B16 H32
        # T8192 D128 fp16 (s10 call 1, explored): 473.5 us against 560.3 with 64-key pointer tiles; SDPA 476.0
        d.access = "tma"
        d.tile.setdefault(loop_axis, max(16, d.cap(loop_axis, 128)))
    d.tile.setdefault(loop_axis, max(16, d.cap(loop_axis, 64 if d.gpu else 128)))
    d.num_warps = d.num_warps or (8 if d.gpu and d.tile[d.grid[-1]] >= 128 else 4)
    # 16-bit on the GPU: K/V tiles three steps ahead (H200, B4 H32 S4096 D128 fp16, 128x64 tiles, 8
    # warps: 2389 us against 2719 with two, bench/results/s4_call3); fp32 tiles would not fit three deep
    d.num_stages = d.num_stages or (3 if d.gpu and d.half else 2)
    if d.gpu and not d.user.split:   # few query tiles (decoding): split-KV, the online pass over slices of the keys
        n = decode_split(programs(d.grid, d.sizes, d.tile), d.sizes[loop_axis], d.tile[loop_axis], d.sms)
        if n > 1:
            d.split[loop_axis] = n


def main_grid(d: Draft) -> None:
    """The main output's grid: its axes except row axes (unless a contraction's output axis) and
    output axes the user asked to cover in-program (strategy whole/loop/online for an axis no
    stage reduces: on a grid, the strategy would be ignored). An output whose every axis is
    reduced (a whole-tensor statistic, then a scale) runs in one program when it fits
    :data:`ROW_BLOCK` (one read, one write)."""
    main = d.alg.outputs[0]
    if d.grid is None:
        d.grid = _output_grid(d, main, d.user.stage(main.name), d.strategy)
        if (not d.cons and main.layout and all(a in d.row_axes for a in main.layout)
                and math.prod(next_pow2(d.sizes[a]) for a in d.alg.axis_names) <= ROW_BLOCK[d.gpu]):
            d.grid = ()


def _user_fused_axes(d: Draft, o) -> set[str]:
    """Axes reduced by the stages the user placed "fuse" inside output ``o``: a fused reduction
    sees only its program's tiles, so these axes stay off that output's grid."""
    out: set[str] = set()
    for n in reduces_in([o.expr], frozenset()):
        if d.user.stage(n.name).place == "fuse":
            out.update(n.over)
    return out


def _output_grid(d: Draft, o, ss: StageSchedule, strategy) -> tuple[str, ...]:
    """The grid of output ``o`` (stage overrides ``ss``, schedule strategies ``strategy``): its axes
    except row axes (unless a contraction's output axis) and those covered in-program (a strategy
    other than "auto" for an axis no stage reduces); else its first axis, unless covered so."""
    own = {a for a in o.layout if a not in d.reduced and ss.strategy.get(a, strategy.get(a, "auto")) != "auto"}
    own |= _user_fused_axes(d, o)
    return tuple(a for a in o.layout if (a not in d.row_axes or _is_contraction_free(a, d.cons)) and a not in own) \
        or tuple(a for a in o.layout[:1] if a not in own)


def off_grid_axes(d: Draft) -> None:
    """Strategies and tiles of the axes covered inside each program (neither dot axes nor on the
    grid): column reductions loop in short tiles, an axis with a user tile steps in it, the others
    are covered by :func:`_cover_rows` (whole while the row fits one program, else loops)."""
    strategy, tile = d.strategy, d.tile
    rest = []
    for a in d.alg.axis_names:
        if a in d.dot_axes or a in d.grid:
            continue
        if a not in strategy or strategy[a] == "auto":
            if _column_reduction(a, d.grid, d.contig, d.sizes) and a not in tile:
                # a column reduction (the reduced axis is strided, a grid axis is contiguous):
                # loop over it in short tiles so each program reads wide, coalesced rows; longer
                # steps when the rows are short (16 floats of 4096x4096x16 summed over the middle:
                # COLUMN_STEP)
                strategy[a] = "loop"
                row = math.prod(next_pow2(d.sizes[g]) for g in d.grid if g in d.contig)
                tile[a] = d.cap(a, max(32, COLUMN_STEP // row) if d.gpu else 16)
                d.col_axes.append(a)
            elif a in d.user.tile:
                # the user's tile of an off-grid axis: step over it in that tile ("whole" would
                # ignore the tile)
                strategy[a] = "online" if online_candidate(d.alg, a) else "loop"
            else:
                rest.append(a)
                continue
        elif strategy[a] != "whole" and a not in tile:
            tile[a] = d.cap(a, STEP_BLOCK[d.gpu])
        _take(d, next_pow2(d.sizes[a]) if strategy[a] == "whole" else tile[a])
    _cover_rows(d, rest)


def _take(d: Draft, block: int) -> None:
    """Count an off-grid axis's block in ``d.widest``: the product of the blocks (the largest one
    in a contraction's kernel, whose dots never form the product of their axes)."""
    d.widest = max(d.widest, block) if d.cons else d.widest * block


def _cover_rows(d: Draft, axes: list[str]) -> None:
    """Cover the open off-grid ``axes`` of the main kernel, innermost first (the axis indexing an
    input's last dim first, so loads stay contiguous): all "whole" while the product of their
    padded sizes (times the blocks already taken) is at most :data:`ROW_BLOCK`; otherwise "whole"
    for those that fit in :data:`STEP_BLOCK`, then a loop ("online" where a max reduces the axis)
    over the next in the rest of that block and loops of tile 1 over the others. A contraction's
    kernel keeps one rule per axis (whole up to ROW_BLOCK)."""
    depth = axis_depths(d.alg)
    order = sorted(axes, key=lambda a: depth.get(a, len(d.alg.axis_names)))
    inner = d.widest
    if d.cons:
        fits = {a: next_pow2(d.sizes[a]) <= ROW_BLOCK[d.gpu] for a in order}
    else:
        whole_all = inner * math.prod(next_pow2(d.sizes[a]) for a in order) <= ROW_BLOCK[d.gpu]
        fits, budget = {}, ROW_BLOCK[d.gpu] if whole_all else STEP_BLOCK[d.gpu]
        for a in order:
            fits[a] = inner * next_pow2(d.sizes[a]) <= budget
            inner *= next_pow2(d.sizes[a]) if fits[a] else d.cap(a, max(1, budget // inner))
    for a in order:
        if fits[a]:
            d.strategy[a] = "whole"
            _take(d, next_pow2(d.sizes[a]))
        else:
            d.strategy[a] = "online" if online_candidate(d.alg, a) else "loop"
            d.tile.setdefault(a, d.cap(a, max(1, STEP_BLOCK[d.gpu] // (1 if d.cons else d.widest))))
            _take(d, d.tile[a])


def grid_tiles(d: Draft) -> None:
    """Tiles of the grid axes: 1 for a contraction's batch axes; else about 1024 elements per
    program (4096 on the GPU with wide rows or when the output reads split statistics;
    :data:`INTERPRETER_ELEMENTS` on the interpreter), innermost first; 64 (capped) for any axis
    left."""
    tile = d.tile
    if d.dot_axes:
        for a in d.grid:  # batch axes of a contraction: one per program
            tile.setdefault(a, 1)
    budget = max(1, (4096 if d.gpu else 1024) // d.widest) if d.widest > 1 else 1024
    inside = [a for a in d.alg.axis_names if a not in d.grid]
    window = (d.gpu and 1 < d.widest <= SMALL_WINDOW and not d.cons and len(inside) >= 2
              and all(d.strategy.get(a) == "whole" for a in inside))
    if window and any(next_pow2(d.sizes[a]) != d.sizes[a] for a in inside if a not in d.user.strategy):
        # a window whose block pads (3x3 in 4x4: 7 of 16 lanes masked): its axes loop one index a
        # step (unrolled by the plan: plan.taps) and the program holds 512 outputs (H200, max pool
        # 3x3/s2 of 16x64x512x512: s5 753 us in 128-output programs of masked 4x4 blocks, 396 us
        # rolled in 1024-output ones; s6 call 3, taps unrolled, fp16 / fp32: 335.6 / 390.6 us at
        # 1024 outputs, 284.5 / 369.3 at 512)
        for a in inside:
            if a not in d.user.strategy:
                d.strategy[a], tile[a] = "loop", 1
        window, d.widest, budget = False, 1, WINDOW_OUTPUTS
    if window:
        # a pooling window (2x2: 4 values) in each program: 2048 values a program, spread over the
        # grid axes innermost first (H200, s3: the fp16 2x2 pools of 512x512 images ran 222-250 us
        # at 1024 values and 4 warps, 168-171 us explored at 16 values a thread)
        budget = max(1, 2048 // d.widest)
    if d.gpu and (d.split or d.stats_kernels) and d.widest == 1:
        # every program of an output reading split statistics first folds their partials (a
        # Frobenius norm's 256, batch norm's 8 means and 8 variance states): 4096-element tiles
        # spread that over four times the elements (and load 64 B a thread at once: layer norm's
        # output kernel ran at 3.8-3.9 TB/s in them, H200 s5 call 1)
        budget = 4096
    if not d.gpu:
        inside = math.prod(next_pow2(d.sizes[a]) if d.strategy.get(a) == "whole" else tile.get(a, 1)
                           for a in d.alg.axis_names if a not in d.grid)
        budget = max(1, INTERPRETER_ELEMENTS // inside)
    for a in reversed(d.grid):
        if a in tile:
            continue
        if d.gpu and d.widest > 1 and not window:
            t = 1 if d.widest >= 1024 or a != d.grid[-1] else d.cap(a, budget)
        else:
            t = d.cap(a, budget)
        tile[a] = t
        budget = max(1, budget // t)
    for a in d.alg.axis_names:
        tile.setdefault(a, d.cap(a, 64))


def column_splits(d: Draft) -> None:
    """Split-K of the main kernel's column reductions when its programs are few. Where no output is
    fp32 or fp64 (atomics could not add into the outputs themselves: they would need a zeroed fp32
    buffer and a kernel casting it), the splits write per-split partials that the last program of
    each column tile folds in split order and stores cast into the outputs (``split_mode="last"``,
    :func:`dtriton.plan.last_finish.absorb_outputs`): one kernel for the column reductions, no zero
    fill, deterministic (layer norm's dw/db: was "partials", a split kernel and a casting kernel
    folding them, and before that atomics into a zeroed buffer, one more allocation and fill)."""
    for a in d.col_axes:
        if d.split_ok(a):
            split_for(d.split, a, programs(d.grid, d.sizes, d.tile), d.sizes[a], d.tile[a], d.sms)
            d.col_splits.add(a)


def column_partials(d: Draft) -> None:
    """The mode of column-reduction splits (:func:`column_splits`, and the further outputs' own in
    :func:`output_stages`): see :func:`column_splits`."""
    wide = (torch.float32, torch.float64)
    if (d.user.split_mode is None and d.split_mode is None and d.b.out_dtypes and d.split
            and set(d.split) <= d.col_splits and not any(t in wide for t in d.b.out_dtypes)):
        d.split_mode = "last"


def within_limits(d: Draft) -> None:
    """Check the main kernel's block (the product of its axes' blocks: grid tiles, padded "whole"
    extents, loop tiles) against Triton's :data:`MAX_BLOCK` elements before the schedule is
    returned, and shrink what the rules chose until it fits: the largest grid tile first, then a
    "whole" axis (the outermost) becomes a loop of tile 1. A contraction's kernel is left alone
    (its dots never form the product of their axes), a convolution's implicit GEMM too; the user's own
    fields are never changed."""
    if d.cons or conv_gemm(d):
        return

    def block(a: str) -> int:
        if a not in d.grid and d.strategy.get(a) == "whole":
            return next_pow2(d.sizes[a])
        return d.tile.get(a, 1)

    depth = axis_depths(d.alg)
    while math.prod(block(a) for a in d.alg.axis_names) > MAX_BLOCK:
        grid = [a for a in d.grid if a not in d.user.tile and d.tile.get(a, 1) > 1]
        wholes = sorted((a for a in d.alg.axis_names if a not in d.grid and d.strategy.get(a) == "whole"
                         and a not in d.user.strategy), key=lambda a: -depth.get(a, 0))
        if grid:
            a = max(grid, key=lambda x: d.tile[x])
            d.tile[a] //= 2
        elif wholes:
            d.strategy[wholes[0]] = "online" if online_candidate(d.alg, wholes[0]) else "loop"
            d.tile[wholes[0]] = 1
        else:
            return   # the user's tiles and strategies: validation reports them


def output_tiles(d: Draft) -> None:
    """An output reading materialised statistics (kernels of their own, :func:`split_rows`) that
    folds no split partials (none split, or finished: ``split_mode`` "finish" or "last") holds
    :data:`OUTPUT_BYTES` of its widest float dtype a program: the outermost grid tile above 1
    halves until it does (rows of the reduced layout first, the contiguous width only once they
    are down to one). Tiles the user gave are kept."""
    floats = [t for t in d.b.dtypes.values() if t.is_floating_point]
    if (not d.gpu or d.cons or d.widest != 1 or not (d.split or d.stats_kernels) or not floats
            or (d.split and d.split_mode not in ("finish", "last"))):
        return
    rows = [a for a in d.grid if a not in d.user.tile]
    elements = max(1, OUTPUT_BYTES // max(t.itemsize for t in floats))
    while math.prod(d.tile.get(a, 1) for a in d.grid) > elements:
        a = next((a for a in rows if d.tile.get(a, 1) > 1), None)
        if a is None:
            return
        d.tile[a] //= 2


def launch_defaults(d: Draft) -> None:
    """``num_warps`` growing with the widest in-program block; ``num_stages`` 2."""
    if d.num_warps is None:
        d.num_warps = 4 if d.widest <= 1024 else (8 if d.widest <= 4096 else 16)
    if d.num_stages is None:
        d.num_stages = 2


#: ``num_stages`` of a further outputs' own column-reduction kernel when it computes two column sums or more
#: (layer norm's dw and db: rows in steps of 32, 128 columns a program, split over the rows): the row loop
#: pipelined three deep. H200 s16 (``bench/probe_ln_bwd.py``, fp16 4096x8192, us): layer norm's dw/db kernel
#: 49.2 at 2 stages (2.73 TB/s of its 128 MB), 38.7-39.3 at 3 (3.41-3.47 TB/s; the backward 111.1 -> 101.3,
#: dt.explore's best of 40, call 7); RMSNorm's dw alone 39.2 at 2 stages and 45.1 at 3 (call 11): one sum keeps 2.
COLUMN_STAGES = 3


def output_stages(d: Draft) -> None:
    """The user's stage overrides (over the rules'), and, when the user leaves the grid open, a
    grid of its own for each further output (with its own column reductions)."""
    d.stages = dict(d.stages, **dict(d.user.stages))
    if d.user.grid is not None:
        return
    open_ = [(o, d.stages.get(o.name, StageSchedule())) for o in d.alg.outputs[1:]]
    open_ = [(o, ss, _column_axes(d, o, ss)) for o, ss in open_ if ss.grid is None]
    stages = COLUMN_STAGES if sum(bool(cols) for _, _, cols in open_) >= 2 and d.gpu else None
    for o, ss, cols in open_:
        _output_stage(d, o, ss, cols, stages)


def _column_axes(d: Draft, o, ss: StageSchedule) -> list[str]:
    """The axes further output ``o`` (stage overrides ``ss``) reduces as columns in a kernel of its own."""
    og = _output_grid(d, o, ss, d.user.strategy)
    return [a for a in expr_axes(o.expr) if a not in og and a not in d.dot_axes and a not in ss.strategy
            and _column_reduction(a, og, d.contig, d.sizes)]


def _output_stage(d: Draft, o, ss: StageSchedule, cols: list[str], stages: int | None) -> None:
    """Output ``o``'s own grid, and the tiles, strategy, split and (``stages``, when the heuristic
    pipelines them: :data:`COLUMN_STAGES`) ``num_stages`` of its column reductions ``cols``
    (:func:`_column_axes`)."""
    og = _output_grid(d, o, ss, d.user.strategy)
    st_tile, st_strat = dict(ss.tile), dict(ss.strategy)
    for a in cols:   # the output's own kernel reduces a strided axis (dw, db of layer norm)
        st_strat[a] = "loop"
        st_tile[a] = d.cap(a, 32 if d.gpu else 16)
        for g in og:
            if g in d.contig:
                st_tile.setdefault(g, d.cap(g, 128 if d.gpu else 32))
        if d.split_ok(a):
            split_for(d.split, a, programs(og, d.sizes, dict(d.tile, **st_tile)), d.sizes[a], st_tile[a], d.sms)
            d.col_splits.add(a)
    # replace() keeps every other field of the user's overrides (place, group, num_stages, ...)
    d.stages[o.name] = ss.replace(tile=st_tile, grid=og, strategy=st_strat,
                                  num_warps=ss.num_warps or (4 if cols and d.gpu else None),
                                  num_stages=ss.num_stages or (stages if cols else None))
    if cols:
        # reductions of the column axis inside this output (a split one runs as a kernel
        # of its own) take the same tiles
        for n in reduces_in([o.expr], frozenset()):
            if any(a in st_strat for a in n.over) and n.name not in d.stages:
                d.stages[n.name] = StageSchedule(tile={a: t for a, t in st_tile.items() if a in n.axes or a in n.over},
                                                 strategy={a: v for a, v in st_strat.items() if a in n.over},
                                                 num_warps=4 if d.gpu else None,
                                                 num_stages=stages)


def access_style(d: Draft) -> None:
    """``access`` left open: "tma" for long tensor-core contractions (16-bit, or fp32 at a
    tensor-core precision) on a TMA device, else "pointer"."""
    if d.access is not None:
        return
    b, sizes, alg = d.b, d.sizes, d.alg
    d.access = "pointer"
    floats = [t for t in b.dtypes.values() if t.is_floating_point]
    # not when the user gave an L2 eviction hint for a tile input: TMA loads take none, so the
    # hint would be dropped without a word (vectors keep pointer loads, and their hints)
    tiles = {p.name for p in alg.tensor_params if sum(b.sizes[s] > 1 for s in p.dims) >= 2}
    if d.eight_bit:   # 8-bit dots: their operands decide, not their scales (fp32 vectors)
        floats = [b.dtypes[t] for t in tiles if b.dtypes[t] in EIGHT_BIT] or floats
    hinted = any(v != "evict_normal" and t in tiles for t, v in d.user.eviction.items())
    if (d.gpu and d.cons and _flash_pattern(alg, sizes) is None and floats
            and (all(t.itemsize <= 2 for t in floats) or d.tc_fp32)
            and math.prod(sizes[a] for a in set(alg.axis_names)) >= 1 << 35 and not hinted
            and _tma_device(b.device)):
        # TMA tile loads (host-side descriptors) for kernels long enough to hide their host
        # cost. H200, session 4 (bench/results/tma_default_check.txt): bf16 4096.4096.11008
        # kernel 552-583 us against 636-664 us with pointers; 2048^3 fp16 26.2 against 29.8 us,
        # but a plain call then takes 37-46 us against 31 us (the launcher encodes three
        # descriptors per call), so below 2^35 multiply-adds (4096x4096x2048) pointers stay
        d.access = "tma"


#: The rules :func:`complete_schedule` applies, in order.
RULES = (flash_attention, flash_backward, main_grid, contraction_tiles, conv_tiles, depthwise_tiles, gemm_then_rows, rows_between_gemms,
         gemm_then_gemm, gemms_apart, gemm_then_columns, off_grid_axes, split_rows, grid_tiles,
         column_splits, within_limits, finish_splits, output_tiles, launch_defaults, output_stages,
         column_partials, busy_split_slices, access_style)


def complete_schedule(alg: Algorithm, sched: Schedule | None, b: Binding) -> Schedule:
    """Return ``sched`` with every open field filled for the shapes and dtypes of ``b``: the
    :data:`RULES` fill in the knobs of :data:`DECIDED`; every other knob is the user's."""
    d = Draft.start(alg, sched, b)
    for rule in RULES:
        rule(d)
    full = d.user.replace(tile=d.tile, grid=tuple(d.grid), group=d.group, split=d.split, strategy=d.strategy,
                          num_warps=d.num_warps, num_stages=d.num_stages, stages=d.stages, access=d.access,
                          split_mode=d.split_mode, split_order=d.split_order, precision=d.precision, persistent=d.persistent,
                          rolling=d.rolling)
    # tiles filled above for axes that end up "whole" off every grid would be ignored: drop them
    # (a user's own such tile stays, and validation reports it)
    return full.without_unused_tiles(alg, keep=d.user)


def _tma_device(device) -> bool:
    """The CUDA device has the tensor-memory accelerator (compute capability 9.0 or newer); True
    when no GPU is visible (schedules derived on a CPU machine for the GPU assume an H200, as
    :func:`sm_count` does)."""
    if device.type != "cuda":
        return False
    if not torch.cuda.is_available():
        return True
    return torch.cuda.get_device_capability(device)[0] >= 9


def _flash_pattern(alg: Algorithm, sizes):
    """Detect attention-like algorithms: an algorithm whose sum stage ``s`` (over small axes,
    each <= 256) has a free axis ``j`` that later stages reduce with a max and with sums of
    ``exp(. - max)``; a first output, and further ones only over its axes or fewer (the row
    statistics and the unnormalised output a forward saves for its backward), and every reduction
    reading ``s`` directly reduces over ``j``. Returns (s, j, axes to keep whole) or None."""
    if any(not set(o.layout) <= set(alg.outputs[0].layout) for o in alg.outputs[1:]):
        return None
    main = alg.outputs[0]
    reds = [st.node for st in reduction_stages(alg)]
    for s in reds:
        if not is_sum(s) or any(sizes[a] > 256 for a in s.over):
            continue
        for j in s.axes:
            if j in main.layout:
                continue
            maxes = [m for m in reds if m.combiner.online == "running_max" and j in m.over and contains(m.x, s)]
            sums = [r for r in reds if is_sum(r) and j in r.over and r is not s and contains(r.x, s)]
            # every reduction reading the score directly folds it along j, in the online loop; one that
            # reduces it over other axes (a backward's sum over the query axis, fuzz_grad seed 9998) is a
            # kernel whose grid may split the score's own reduced axes, where it cannot be fused
            direct = [r for r in reds if r is not s and contains(r.x, s, stop=lambda x: isinstance(x, Reduce))]
            if maxes and sums and all(j in r.over for r in direct):
                whole = [a for a in main.layout if a not in s.axes and sizes[a] <= 256]
                # a grid of batch axes only (every tensor indexed by them): the longest of those axes
                # goes on the grid instead (the GQA backward's dK, summed over the heads of a group into
                # (g, b, t, d): at T <= 256 the keys were whole and the batch axis alone on the grid, in
                # tiles of 16 that multiplied every block, 2**25-element values at S 256 D128)
                batch = _batch_axes(alg)
                if whole and all(a in batch for a in main.layout if a not in whole):
                    whole.remove(max(whole, key=lambda a: sizes[a]))
                return s, j, tuple(whole)
    return None


def _batch_axes(alg: Algorithm) -> set[str]:
    """The axes every tensor ``alg`` loads is indexed by directly (batch axes)."""
    seen: dict[str, set[str]] = {}
    for n in alg.nodes:
        if isinstance(n, Load):
            seen.setdefault(n.tensor.name, set()).update(e.name for e in n.index if isinstance(e, Axis))
    return set.intersection(*seen.values()) if seen else set()


def _is_contraction_free(a, cons) -> bool:
    return any(a in (m, n) for m, n, _ in cons.values())
