"""The heuristic's rules for GEMM chains (on the GPU, for schedules that set no layout): a GEMM followed by
row statistics of its output (:func:`gemm_then_rows`), the first GEMMs of an MLP (:func:`gemm_then_gemm`) and
each GEMM kernel of a chain as a wide persistent GEMM, two GEMMs combined element-wise apart
(:func:`gemms_apart`), row statistics between two GEMMs (:func:`rows_between_gemms`) and column statistics
(:func:`gemm_then_columns`). They run after :func:`~.dot_rules.contraction_tiles` and read its tiles;
:mod:`.heuristics` applies them in its rule order."""

from __future__ import annotations

from ..ir import contains, reduction_stages
from .dot_rules import epilogue_tiles, persistent_allowed, second_gemm, wide_axis, wide_stages
from .draft import Draft, next_pow2, programs, split_for
from .schedule import StageSchedule

__all__ = ["gemm_then_columns", "gemm_then_gemm", "gemm_then_rows", "gemms_apart", "rows_between_gemms"]


def gemm_then_rows(d: Draft) -> None:
    """A GEMM followed by row reductions over its output (softmax, layer or RMS norm, logsumexp of
    a Linear): the GEMM runs as a kernel of its own (its tiles, grouped order and launch options,
    its output materialised), then one row kernel computes every row statistic and the output
    with the whole row in one block (1 row per program, 2 up to 4096 columns), as a hand-written
    PyTorch model runs them. Without it the output kernel takes the GEMM's 128-row tiles and each
    statistic a kernel of its own over the materialised buffer (bench/results/
    chains_cpu_findings.md: 4 kernels for softmax, 32 programs each at M=4096). Applies on the
    GPU to schedules that set no layout (:attr:`Draft.layout_given`; a user's launch options
    apply to both kernels), one contraction whose output axis
    ``n`` is the only axis the reductions of its output reduce (other reductions, free of the GEMM,
    may reduce others over rows ``m``), and rows of at most 32768 elements."""
    if not d.gpu or d.layout_given or len(d.cons) != 1 or len(d.alg.outputs) != 1:
        return
    (name, (m, n, r)), = d.cons.items()
    others = [s for s in reduction_stages(d.alg) if s.name != name]
    main = d.alg.outputs[0]
    gemm = d.alg.stages[name].node
    # row statistics over n of the GEMM's output; reductions that do not read it (cross entropy's
    # gathered target logit, a sum over k of X[i, k] * W[labels[i], k]) are per row too when
    # their free axes are m's only, and are computed in the same row kernel
    rows = [s for s in others if contains(s.node, gemm)]
    apart = [s for s in others if not contains(s.node, gemm)]
    if (not rows or any(tuple(s.node.over) != (n,) for s in rows) or any(set(s.node.axes) - {m} for s in apart)
            or m not in main.layout
            or not set(main.layout) <= {m, n}
            or next_pow2(d.sizes[n]) > 32768 or d.split.get(r, 1) > 1 or tuple(d.grid or ()) != tuple(main.layout)):
        return
    tile, stages = {a: d.tile[a] for a in (m, n, r)}, d.num_stages
    inner = wide_axis(d, name, m, n, r, (m, n))   # (None where the contraction rules made it wide already)
    if inner is not None:
        # the output is over the rows only (row_mean, logsumexp: [i]), so the contraction rules saw a grid
        # without n and kept 128 x 128: the GEMM's own kernel over (m, n) is a wide GEMM like any other
        # (H200, s6 final call: row_mean's GEMM stage at 128x128x64 222.3 us, softmax's at 128x256x64
        # persistent 202.2 with the same row kernel)
        tile[inner] = d.cap(inner, 256)
        stages = d.user.num_stages or wide_stages(d, name)
    # a wide 16-bit GEMM kernel runs persistent (its epilogue stores the buffer; see _persistent_wide), at 3
    # stages where its epilogue adds another tile (residual_layer_norm: 262 KB of shared memory at 4, sm_90)
    wide = d.half and tile[m] * tile[n] >= 128 * 256 and persistent_allowed(d)
    stages = 3 if wide and stages == 4 and d.user.num_stages is None and epilogue_tiles(d, m, n) else stages
    d.stages[name] = StageSchedule(place="materialize", grid=(m, n), group=dict(d.group) or {m: 8},
                                   tile=tile, num_warps=d.num_warps,
                                   num_stages=stages, persistent=1 if wide else None)
    for s in others:
        d.stages[s.name] = StageSchedule(place="fuse")
    d.grid, d.group = tuple(a for a in main.layout if a == m), {}
    d.tile[m] = 2 if d.sizes[n] <= 4096 else 1
    d.strategy[n] = "whole"
    d.dot_axes.discard(n)
    if apart and r not in d.user.tile:
        d.tile[r] = d.cap(r, 1024)   # the row kernel's own loop over r (a row of X per step, no dot)
    d.num_warps, d.num_stages = d.user.num_warps or 8, d.user.num_stages or 2


def gemm_then_gemm(d: Draft) -> None:
    """The first GEMMs of an MLP (``act(X @ W.T) @ W2.T``; SwiGLU's two, which share a kernel): each
    materialised with output tiles of its own, 128 x 128 (64 x 64 on FMA), grouped order. Without
    it the first GEMM took the second's tiles, whose tile of the shared axis is the second's
    reduction tile (64): swiglu_mlp's first kernel ran 128 x 64 tiles (0.67x torch.compile on the
    H200, bench/results/issue14/s3/chains_fp16_h200_rest.md). Applies on the GPU to schedules
    that set no layout, one output, and first GEMMs over two free axes, one of which the second
    reduces; a stage another rule set is left alone."""
    if not d.gpu or d.layout_given or len(d.cons) < 2 or len(d.alg.outputs) != 1:
        return
    second = second_gemm(d)
    if second is None:
        return
    red = d.alg.stages[second].node.over
    big = 128 if d.half or d.tc_fp32 else 64
    for name, (m, n, r) in d.cons.items():
        st = d.alg.stages[name].node
        if name == second or name in d.stages or len(st.axes) != 2 or not contains(d.alg.stages[second].node, st):
            continue
        if n not in red:
            m, n = n, m
        if n not in red:
            continue
        d.stages[name] = StageSchedule(
            place="materialize", grid=(m, n), group={m: 8},
            tile={m: max(16, d.cap(m, big)), n: max(16, d.cap(n, big)), r: d.tile[r]},
            num_warps=d.user.num_warps or (8 if big == 128 else 4), num_stages=d.user.num_stages or d.num_stages)
    if _wide_kernels(d, second):
        return
    m2, n2, r2 = d.cons[second]
    t = {a: d.tile.get(a, 1) for a in (m2, n2, r2)}
    if (any(n in d.stages for n in d.cons if n != second) and d.half and d.num_stages == 4 and d.user.num_stages is None
            and 4 * (t[m2] + t[n2]) * t[r2] * 2 > 192 * 1024):
        # the second GEMM reduces the first's output axis in its tiles of 128: 4 stages of 128x128x128 operand
        # tiles asked 262,176 B of shared memory (sm_90, bench/gemm_sm90.py --chains mlp_relu; the H200 runtime
        # then fell back to 3 stages with a warning); 3 stages: 196,632 B
        d.num_stages = 3


def _wide_kernels(d: Draft, second: str) -> bool:
    """With every other contraction materialised in a kernel of its own (:func:`gemm_then_gemm`,
    :func:`rows_between_gemms`), each GEMM kernel of a chain with one contraction is a GEMM like any other:
    a large 16-bit one takes the wide tiles (:func:`wide_axis`) and runs persistent, flattened
    (:func:`_persistent_wide`), the main kernel (the second GEMM ``second``, tiles of 64 along its reduced
    axis) and each first GEMM alone in its stage's kernel (first GEMMs with the same stage schedule share a
    kernel: SwiGLU's two keep 128 x 128). Before, the rule saw the algorithm's several contractions and kept
    every kernel at 128 x 128 on the plain grid (H200, s6 final call: mlp_relu 842.0 us = 0.87x
    torch.compile, softmax_linear 513.0 = 0.77x). Returns whether the main kernel became wide."""
    firsts = [c for c in d.cons if c != second]
    if not all(c in d.stages and d.stages[c].place == "materialize" for c in firsts):
        return False
    if not persistent_allowed(d) or d.user.num_stages is not None:
        return False
    # two first GEMMs sharing a kernel (SwiGLU's X @ W.T and X @ W3.T: the same stage schedule) go apart, each a
    # wide GEMM of its own, the later one combining the earlier's buffer in its epilogue (see gemms_apart)
    pair = len(firsts) == 2 and d.stages[firsts[0]] == d.stages[firsts[1]]
    for c in firsts:
        ss, (m, n, r) = d.stages[c], d.cons[c]
        grid = tuple(ss.grid or ())
        inner = wide_axis(d, c, m, n, r, grid, dict(ss.tile), alone=True) if len(grid) == 2 else None
        if inner is not None and (pair or not any(d.stages[o] == ss for o in firsts if o != c)):
            # (the later of a pair reads the earlier's buffer tile in its epilogue, through pointers: 3 stages)
            d.stages[c] = ss.replace(tile={**dict(ss.tile), inner: d.cap(inner, 256)}, persistent=1,
                                     num_stages=3 if pair and c == firsts[1] else wide_stages(d, c))
    m2, n2, r2 = d.cons[second]
    inner = wide_axis(d, second, m2, n2, r2, tuple(d.grid or ()), alone=True)
    if inner is None:
        return False
    d.tile[inner], d.tile[r2] = d.cap(inner, 256), d.cap(r2, 64)
    d.persistent = 1
    # (a tile the epilogue reads, X + ... @ W2.T's X: read through pointers in the flattened kernel, whose layout
    # conversion takes a buffer beside the pipeline's: 262,176 B at 4 stages on sm_90, 213,016 at 3)
    d.num_stages = 3 if epilogue_tiles(d, m2, n2) else wide_stages(d, second)
    for o in d.stages:
        if d.stages[o].place == "materialize" and d.stages[o].persistent is None:
            # (the main kernel's persistent is the default of stages without their own: row kernels keep a program
            # per row, first GEMMs sharing a kernel their grid)
            d.stages[o] = d.stages[o].replace(persistent=0)
    return True


def gemms_apart(d: Draft) -> None:
    """Two GEMMs over the same axes combined element-wise in the main kernel (SwiGLU, ``silu(X @ W.T) *
    (X @ W3.T)``): the first materialised in a wide persistent kernel of its own (its element-wise part moves
    into its buffer), the second a wide persistent GEMM whose epilogue reads that buffer's tile (through
    pointers, 3 stages, as a residual). Without it one kernel kept two 128 x 128 accumulators (two 128 x 256
    ones spill): H200, s7 call 1, swiglu 471.4 us (461.1 persistent) against torch.compile's 385.7 (s6), while
    one wide persistent GEMM runs at 182 us at 4096^3 and one reading a residual tile at 191.1. Applies on the
    GPU to 16-bit calls whose schedule sets no layout and leaves ``persistent`` open, one output over the two
    GEMMs' free axes and no other reduction, where each GEMM alone would be wide (:func:`wide_axis`)."""
    if not d.gpu or not d.half or d.layout_given or len(d.alg.outputs) != 1 or not persistent_allowed(d):
        return
    stages = reduction_stages(d.alg)
    if len(stages) != 2 or any(s.name not in d.cons or s.name in d.stages for s in stages):
        return
    (a, (m, n, r)), (b, abc) = [(s.name, d.cons[s.name]) for s in stages]
    if set(abc) != {m, n, r} or abc[2] != r or set(d.alg.outputs[0].layout) != {m, n}:
        return
    grid = tuple(d.grid or ())
    inner = wide_axis(d, a, m, n, r, grid, alone=True)
    if inner is None or wide_axis(d, b, *abc, grid, alone=True) != inner:
        return
    d.tile[inner] = d.cap(inner, 256)
    d.stages[a] = StageSchedule(place="materialize", grid=grid, group=dict(d.group) or {grid[0]: 8},
                                tile={x: d.tile[x] for x in (m, n, r)}, num_warps=d.num_warps,
                                num_stages=wide_stages(d, a), persistent=1)
    d.persistent, d.num_stages = 1, 3


def rows_between_gemms(d: Draft) -> None:
    """Row statistics between two GEMMs (``softmax(X @ W.T + b) @ W2.T``: the second GEMM reduces
    the first's output axis ``n`` and reads statistics over ``n`` of it): the first GEMM runs as a
    kernel of its own (128-wide tiles over its output, grouped order), each statistic as a row
    kernel (the whole row in one block, 1-2 rows per program), and the second GEMM keeps its
    tiles. Without it the statistics are fused into the second GEMM's kernel, which recomputes
    them over the whole row in every one of its output tiles (0.39x torch.compile on the H200,
    bench/results/issue14/chains_fp16_h200.md). Applies on the GPU to schedules that set no layout,
    one output, two contractions and rows of at most 32768 elements."""
    if not d.gpu or d.layout_given or len(d.cons) != 2 or len(d.alg.outputs) != 1:
        return
    second = second_gemm(d)
    if second is None:
        return
    first = next(c for c in d.cons if c != second)
    m, n, r = d.cons[first]
    gemm = d.alg.stages[first].node
    if n not in d.alg.stages[second].node.over or not contains(d.alg.stages[second].node, gemm):
        return
    rows = [s for s in reduction_stages(d.alg) if s.name not in d.cons]
    if (not rows or any(tuple(s.node.over) != (n,) or set(s.node.axes) - {m} or not contains(s.node, gemm)
                        for s in rows) or next_pow2(d.sizes[n]) > 32768 or d.split.get(r, 1) > 1):
        return
    big = 128 if d.half or d.tc_fp32 else 64
    tile = {m: max(16, d.cap(m, big)), n: max(16, d.cap(n, big)), r: d.tile[r]}
    d.stages[first] = StageSchedule(place="materialize", grid=(m, n), group={m: 8}, tile=tile,
                                    num_warps=d.user.num_warps or (8 if tile[m] * tile[n] >= 128 * 128 else 4),
                                    num_stages=d.user.num_stages or (4 if d.half or d.tc_fp32 else 3))
    for s in rows:
        d.stages[s.name] = StageSchedule(place="materialize", grid=(m,), tile={m: 2 if d.sizes[n] <= 4096 else 1},
                                         strategy={n: "whole"}, num_warps=d.user.num_warps or 8,
                                         num_stages=d.user.num_stages or 2)


def gemm_then_columns(d: Draft) -> None:
    """Column statistics of a GEMM's output (batch norm of a Linear: means over the rows ``m`` per
    output column ``n``): each statistic's kernel takes 32 columns per program and 64 rows a step
    (4096 columns: 128 programs), the rows split across programs (per-split partials,
    deterministic) when the programs are fewer than half a wave (:func:`~.draft.split_for`); the rows
    are looped explicitly, so a variance becomes one Welford pass beside its mean (one statistics
    kernel reading the GEMM's output once, :func:`~dtriton.plan.decide.one_pass_statistics`). Without it the statistics kernels take the GEMM's tiles as their own: 16 programs of 256
    columns, each looping over every row (batch norm at 0.41x torch.compile on the H200,
    bench/results/issue14/chains_fp16_h200.md). Applies on the GPU to schedules that set no layout,
    one contraction, one output over (m, n), statistics that reduce m only and keep n only."""
    if not d.gpu or d.layout_given or len(d.cons) != 1 or len(d.alg.outputs) != 1:
        return
    (name, (m, n, r)), = d.cons.items()
    main = d.alg.outputs[0]
    gemm = d.alg.stages[name].node
    cols = [s for s in reduction_stages(d.alg) if s.name != name]
    if (not cols or set(main.layout) != {m, n} or d.split.get(r, 1) > 1
            or any(tuple(s.node.over) != (m,) or tuple(s.node.axes) != (n,) or not contains(s.node, gemm)
                   for s in cols)):
        return
    tile = {m: d.cap(m, 64), n: d.cap(n, 32)}
    if d.split_ok(m):
        split_for(d.split, m, programs((n,), d.sizes, tile), d.sizes[m], tile[m], d.sms)
    for s in cols:
        d.stages[s.name] = StageSchedule(grid=(n,), tile=tile, strategy={m: "loop"}, num_warps=4)
    if d.half and d.tile.get(m, 1) * d.tile.get(n, 1) >= 128 * 256 and persistent_allowed(d):
        # the wide GEMM's own kernel persistent (flattened), not the statistics and output kernels
        d.stages[name] = d.stages.get(name, StageSchedule()).replace(persistent=1)
