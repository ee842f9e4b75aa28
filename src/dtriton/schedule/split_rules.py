"""Statistics too large for one program, on too few programs: the heuristic's split rules
(:func:`split_rows`: statistics split across programs, each stage in a kernel of its own;
:func:`finish_splits`: split partials finished once by a kernel of their own). Applied by
:func:`~dtriton.schedule.heuristics.complete_schedule` among its rules."""

from __future__ import annotations

import math

from ..ir import Algorithm, contains, naive_variance_of, reduction_stages, splittable, topo_order, variance_of
from .draft import STEP_BLOCK, Draft, axis_depths, next_pow2, programs
from .schedule import StageSchedule

__all__ = ["split_rows", "finish_splits", "busy_split_slices", "slices_with_work", "INFLIGHT_BYTES", "FINISH_FOLDS", "FINISHED_MODE", "SPLIT_ORDER_SCALAR"]

#: Bytes the steps of a split statistics kernel without a state (a sum, a max) should load per SM at
#: once: its programs on the SM times one step each. A Frobenius norm's 256 programs (two an SM)
#: stepping over 2048 fp16 elements kept 8 KB in flight per SM; at 32 KB (8192-element steps) its
#: statistics ran at 2.7 TB/s fp16 (H200, s4), as latency-bound as the layer-norm statistics at 16 KB
#: (1.69 TB/s, s5 ncu); 64 KB: 16384-element fp16 steps over 16 warps (64 registers, sm_90).
INFLIGHT_BYTES = 64 * 1024
#: Partial values the main output's programs may fold in all (programs times the split partials of the
#: statistics each reads, four values a variance state) before the heuristic finishes the split
#: statistics once (:data:`FINISHED_MODE`, :func:`finish_splits`): batch norm 64x64x512x512 folds
#: 262144 x 40, a Frobenius norm split 512 ways 16384 x 512, layer norm over (C, H, W) 16384 x 160
#: (finished: H200 s13 call 4, fp32 200.9 us finished by the last programs with 1024-element output
#: tiles against 205.0 folded by the readers, torch.compile 200.7); group norm 16384 x 20 stays folded
#: by its readers (one launch less, no tail in the statistics kernel).
FINISH_FOLDS = 1 << 21
#: How :func:`finish_splits` finishes split statistics: "last" (the fold by the last program of each
#: tile of the split kernel, :mod:`dtriton.plan.last_finish`) rather than "finish" (a finishing kernel
#: of its own): one launch less; H200 s13 call 4, whole calls (us) last / finish: batch norm
#: 64x64x512x512 fp16 (1024-element output tiles) 1478.5 / 1480.3, fp32 2961.4 / 2963.5, Frobenius
#: 16x64x256x256 fp16 100.3 / 101.4, fp32 192.7 / 193.2.
FINISHED_MODE = "last"
#: How :func:`split_rows` orders the slices of a split whole-tensor statistic (a Frobenius norm's sum of
#: squares) of a 16-bit tensor that an output pass then reads: "interleaved", so the split programs' last
#: steps read the end of the tensor, where the output's programs (reverse launch order) start and find it
#: in L2. Hand-written (H200 s14 call 1, ``bench/probe_l2_order.py``, 16x64x256x256, flat runs): fp16
#: 100.4 us interleaved against 104.2 blocked, fp32 192.4 against 198.2. dtriton's own split (n in 2, h
#: in 256: blocked runs already end on a few planes the output reads first) gains less (s14 call 3, whole
#: call, interleaved / blocked): fp16 102.4 / 103.8 (output kernel 59.6 / 61.0, statistics 37.9 / 37.2),
#: fp32 195.7 / 193.4 (statistics 69.4 / 67.8): fp32 keeps "blocked". Statistics with free axes (one per
#: row or channel) keep "blocked": their programs' last steps are spread over the tensor.
SPLIT_ORDER_SCALAR = "interleaved"


def split_rows(d: Draft) -> None:
    """Reductions too large for one program, on too few programs to fill the GPU (fewer than its
    SMs; a quarter of them for online rows), are split across programs (no contraction, no user grid or split): partial results per
    split (``split_mode="partials"``, deterministic, unless the user chose a mode) that their
    readers combine. A stage whose reduced axes are kept in the output (statistics then
    normalise: batch, group, layer norm over several axes) is materialised: the output's grid
    takes all its axes, and each statistics stage gets a kernel of its own over its free axes
    that loops over its reduced axes (see :func:`_cover_stage`). So is one over rows that loop
    (not online) whatever the number of programs (instance norm over 256x256 images)."""
    if d.cons or not d.gpu or d.user.split or d.user.grid is not None:
        return
    looped = [a for a in d.alg.reduction_axes if a not in d.grid and a not in d.col_axes
              and d.strategy.get(a) in ("loop", "online") and a not in d.user.strategy]
    # an online row (softmax's max and sums in one pass) reads the row twice in all: kept per
    # program unless the rows fill less than a quarter of the SMs
    few = d.sms // 4 if any(d.strategy[a] == "online" for a in looped) else d.sms
    main = d.alg.outputs[0]
    rows = [a for a in looped if a in main.layout]
    # statistics then normalise over rows that loop (no online pass): a program reads its row twice
    # anyway, one step in flight at a time in its normalising loop; materialised, the statistics
    # still read it once and the output runs as a grid kernel at the copy rate (H200, s5: instance
    # norm fp16 16x64x256x256 took 168.5 us as one kernel, 1024 programs in 1.94 waves)
    looped_rows = bool(rows) and all(d.strategy[a] == "loop" for a in looped)
    if not looped or (programs(d.grid, d.sizes, {}) >= few and not looped_rows):
        return
    if not rows:
        # the output is the reduction (a sum to a scalar, a sum over the last axes of few rows)
        _split_one(d, [a for a in looped if splittable(d.alg, a)], d.tile, programs(d.grid, d.sizes, {}))
    else:
        d.grid = tuple(main.layout)
        for a in d.grid:   # on the grid now: no strategy, and a grid tile from grid_tiles
            if a not in d.user.strategy:
                d.strategy.pop(a, None)
            if a not in d.user.tile:
                d.tile.pop(a, None)
        d.widest, d.stats_kernels = 1, True
        for st in reduction_stages(d.alg):
            if set(st.node.over) & set(rows) and st.name not in d.user.stages:
                _cover_stage(d, st)
    if d.split and d.user.split_mode is None:
        d.split_mode = "partials"
    if d.split and d.half and d.user.split_order is None and rows and any(
            not st.node.axes and set(st.node.over) & set(d.split) for st in reduction_stages(d.alg)):
        d.split_order = SPLIT_ORDER_SCALAR


def _cover_stage(d: Draft, st) -> None:
    """The kernel of a materialised statistics stage ``st``: one program per element of its free
    axes (tile 1), its reduced axes covered innermost first in steps of :data:`STEP_BLOCK`, and
    one of them split (:func:`_split_one`) when its free axes give too few programs."""
    r = st.node
    depth = axis_depths(d.alg)
    tile = {a: 1 for a in r.axes}
    strategy, inner = {}, 1
    for a in sorted(r.over, key=lambda a: depth.get(a, len(d.alg.axis_names))):
        p = next_pow2(d.sizes[a])
        if inner * p <= STEP_BLOCK[d.gpu]:
            strategy[a] = "whole"
            inner *= p
        else:
            strategy[a] = "loop"
            tile[a] = d.cap(a, max(1, STEP_BLOCK[d.gpu] // inner))
            inner *= tile[a]
    loops = [a for a in r.over if strategy[a] == "loop" and splittable(d.alg, a)]
    done = [a for a in r.over if a in d.split]
    if not done:
        _split_one(d, loops, tile, programs(r.axes, d.sizes, {}))
    for a in done:   # split by an earlier stage: the same tile, so each slice is whole tiles
        tile[a] = min(tile.get(a, 1), max(1, 1 << ((d.sizes[a] // d.split[a]).bit_length() - 1)))
    _refill_step(d, r, strategy, tile, depth, _stage_step(d, r, programs(r.axes, d.sizes, {}) * math.prod(
        d.split[a] for a in r.over if a in d.split)))
    step = math.prod(next_pow2(d.sizes[a]) if strategy[a] == "whole" else tile.get(a, 1) for a in r.over)
    # 16 warps over steps above 4096 elements: 16 values a thread in fp32, 32 in fp16 (64 registers)
    d.stages[st.name] = StageSchedule(tile=tile, strategy=strategy,
                                      num_warps=4 if step <= 1024 else (8 if step <= 4096 else 16))


def _stage_step(d: Draft, r, progs: int) -> int:
    """Elements a step of statistics stage ``r`` (``progs`` programs) covers: :data:`STEP_BLOCK`;
    on the GPU, unless ``r`` is computed beside a variance, grown (up to eight times, powers of
    two) until the programs' steps load :data:`INFLIGHT_BYTES` per SM. A variance's state (four
    values per element) keeps 2048: larger steps would cost programs per SM (the plan unrolls its
    loop instead, :func:`dtriton.plan.passes.unrolled`)."""
    base = STEP_BLOCK[d.gpu]
    if not d.gpu or _beside_a_variance(d.alg, r):
        return base
    want = INFLIGHT_BYTES * d.sms // max(progs, 1) // (2 if d.half else 4)
    # beyond two waves (a sum split over two axes: four programs an SM) steps of 4096: the plan
    # unrolls their loop to 16 KB an iteration (H200 s7, bench/probe_sum.py, 512 programs: fp16
    # 34.8 us in steps of 4096 unrolled twice, 38.4 in steps of 8192)
    most = 2 * base if progs > 2 * d.sms else 8 * base
    return max(base, min(most, 1 << max(0, want.bit_length() - 1)))


def _beside_a_variance(alg: Algorithm, r) -> bool:
    """Stage ``r`` shares its kernel with a variance over the same axes (which the plan computes in
    one pass with a state of four values per element): a two-pass variance stage, its mean, or the
    parts of a textbook ``mean(X*X) - mean(X)**2``."""
    same = [st.node for st in reduction_stages(alg) if set(st.node.over) == set(r.over)]
    return (any(variance_of(n) is not None for n in same)
            or any(naive_variance_of(n) is not None for n in topo_order([o.expr for o in alg.outputs])))


def _refill_step(d: Draft, r, strategy: dict, tile: dict, depth: dict, want: int) -> None:
    """After a split shrank the split axis's tile, grow the tiles of the other looped axes of
    stage ``r`` (innermost first) until a step covers ``want`` elements (:func:`_stage_step`): a
    Frobenius norm's h split 256 ways leaves steps of one 256-wide row (1 KB, one element per
    thread) unless the channel axis takes 8 rows a step (32 in fp16)."""
    def step() -> int:
        return math.prod(next_pow2(d.sizes[a]) if strategy[a] == "whole" else tile.get(a, 1) for a in r.over)

    for a in sorted(r.over, key=lambda a: depth.get(a, len(d.alg.axis_names))):
        if strategy[a] != "loop" or a in d.split or step() >= want:
            continue
        tile[a] = d.cap(a, max(1, tile.get(a, 1) * (want // step())))


def _split_one(d: Draft, axes: list[str], tile: dict, programs: int) -> None:
    """Split one of the looped ``axes`` (tiles ``tile``, adjusted) so ``programs`` programs become
    about two waves over the SMs: the axis and tile that reach the most programs (up to two
    waves), then the outermost axis (the inner loops keep their trips, which the plan unrolls so
    a program's loads issue several steps at once: layer norm (C, H, W) split over h left one
    step of h per channel), then the largest tile. When that one axis leaves fewer than two
    waves (a whole-tensor statistic: a Frobenius norm's h gives 256 programs on 132 SMs), the
    next axes are split too, outermost first at their tiles, until the programs reach the
    power of two at or above two waves (512: :func:`_split_more`)."""
    want = next_pow2(-(-2 * d.sms // max(programs, 1)))
    best = None
    for k, a in enumerate(axes):
        t = tile.get(a, 1)
        while t >= 1:
            s = min(want, 1024, 1 << max(0, (d.sizes[a] // t).bit_length() - 1))
            key = (min(s * programs, 2 * d.sms), -k, t)
            if s >= 2 and (best is None or key > best[0]):
                best = (key, a, t, s)
            t //= 2
    if best is not None:
        _, a, t, s = best
        offline = [b for b in axes if d.strategy.get(b) != "online"]
        tile[a] = t
        d.split[a] = s
        if d.strategy.get(a) != "online":   # (an online pass merges the partials of one split axis only)
            _split_more(d, [b for b in offline if b != a], tile, programs * s, want * programs)


def _split_more(d: Draft, axes: list[str], tile: dict, programs: int, want: int) -> None:
    """Split the looped ``axes`` (outermost first, at their tiles ``tile``) across programs too
    while ``programs`` (the grid times the splits so far) stay below two waves, up to ``want``
    programs: a reduction over several large axes with few outputs (a whole-tensor sum) split
    over two of them. H200, s7 (``bench/probe_sum.py``, a flat sum of 2**26 values in steps of
    4096): 512 programs 34.8 us fp16 / 62.2 fp32, 256 programs 41.2 / 67.9."""
    for b in axes:
        if programs >= 2 * d.sms or programs >= want:
            return
        s = min(want // programs, 1024, 1 << max(0, (d.sizes[b] // tile.get(b, 1)).bit_length() - 1))
        if s >= 2:
            d.split[b] = s
            programs *= s


def finish_splits(d: Draft) -> None:
    """Split statistics read by many programs are finished once: where the heuristic chose
    per-split partials (:func:`split_rows`) and the main output's programs would fold at least
    :data:`FINISH_FOLDS` partial values in all (each program folds every split of each statistic
    it reads; a variance's split state is four values), ``split_mode="finish"``: a small kernel
    folds them once, in split order, and the output reads one value per statistic. Batch norm
    64x64x512x512: 262144 output programs each folding 8 means and 8 variance states (H200 s7:
    its output kernel 1030-1046 us against torch.compile's 996-1003 reading a finished mean and
    rstd). Fewer folds keep the partials in the readers (one launch less: group norm's 16384
    programs fold 4 splits)."""
    if not d.gpu or d.split_mode != "partials" or d.user.split_mode is not None or not d.split:
        return
    main = d.alg.outputs[0]
    per_program = 0
    for st in reduction_stages(d.alg):
        r = st.node
        n = math.prod(d.split[a] for a in r.over if a in d.split)
        if n > 1 and r is not main.expr and contains(main.expr, r):
            per_program += n * (4 if variance_of(r) is not None else 1)
    if per_program * programs(d.grid, d.sizes, d.tile) >= FINISH_FOLDS:
        d.split_mode = FINISHED_MODE


def slices_with_work(n: int, f: int, t: int, interleaved: bool = False) -> int:
    """Of the ``f`` slices of an axis of ``n`` elements split across programs, those that get at least
    one tile of ``t`` elements (blocked slices are runs of whole tiles; interleaved ones every f-th tile);
    none of an empty axis."""
    if n <= 0:
        return 0
    tiles = -(-n // t)
    if interleaved:
        return min(f, tiles)
    chunk = -(-(-(-n // f)) // t) * t
    return -(-n // chunk)


def busy_split_slices(d: Draft) -> None:
    """Every program of a split the user gave gets work: the split axis's tile that the heuristic chose
    (the schedule's where the axis is off the grid, and each stage's; not one the user gave) halves
    until each slice holds a tile, and a split axis covered whole (one block) loops instead. A user's
    ``split={"c": 4}`` over 3000 elements in the heuristic's 1024-wide tiles left the fourth program
    idle and the others a run of 1024 (tile 256: four runs of 768). The heuristic's own splits keep
    their tiles (fewer, longer steps; an idle program there costs nothing, the longest run is the same)."""
    inter = d.split_order == "interleaved"
    for a, f in d.user.split.items():
        n = d.sizes.get(a)
        if n is None or f <= 1:
            continue
        want = min(f, n)

        def fit(t: int) -> int:
            while t > 1 and slices_with_work(n, f, t, inter) < want:
                t //= 2
            return t
        if d.strategy.get(a) == "whole" and a not in d.user.strategy:
            d.strategy[a] = "loop"
            d.tile[a] = fit(next_pow2(n))
        elif a in d.tile and a not in d.user.tile and a not in d.grid:
            d.tile[a] = fit(d.tile[a])
        for name, ss in list(d.stages.items()):
            user = d.user.stages.get(name)
            if a in ss.tile and not (user is not None and a in user.tile):
                t = fit(ss.tile[a])
                if t != ss.tile[a]:
                    d.stages[name] = ss.replace(tile={**dict(ss.tile), a: t})
