"""Default schedules: fill whatever a schedule leaves open from the shapes and dtypes.

Rules (documented so users can predict them):

- Contractions (a sum over one axis of a product of an (m, r) and an (r, n) operand) run on
  ``tl.dot``: output tiles of 128x128 for 16-bit inputs and 64x64 for fp32 on the GPU (capped at
  the padded axis, never below 16), 32 or 64 along the reduction axis, grouped launch order 8
  (when the two output axes are the last two grid axes: the swizzled pair),
  ``num_warps`` 8 for 128x128 tiles else 4, ``num_stages`` 3 (4 for fp16/bf16). Skinny outputs
  with a long reduction (fewer output tiles than half the GPU's 132 SMs) are split along it
  (split-K).
- Row-wise stages (an axis that is both reduced and kept in the output, as in softmax and layer
  norm) keep that axis off the grid: "whole" (one block covers it, the fused-softmax layout of
  the Triton tutorial) while its padded size is at most 32768 on the GPU (a 32768-wide fp32 row
  is 64 registers per thread over 16 warps; 4096 on the interpreter), else "online" when the algebra allows (one pass with rescaling), else "loop".
  One row per program, ``num_warps`` growing with the row (4 up to 1024, 8 up to 4096, 16 above).
  An axis the schedule gives a tile (and no strategy) is stepped over in that tile instead
  ("online" where a max reduces it, else "loop").
- Other axes on the grid get tiles so a program holds about 1024 elements (the innermost axis
  first); axes of size 1 get tile 1. An output axis that the schedule gives a strategy
  (whole/loop/online) and no stage reduces stays off the grid, covered inside each program.
- No tile is filled in for an axis that ends up "whole" off every grid (it would be ignored).

User-given fields are never changed.
"""

from __future__ import annotations

import math

from .language import Algorithm, Axis, Binding, Binary, Load, Reduce, expr_axes, topo_order
from .lowering import next_pow2
from .schedule import Schedule

__all__ = ["complete_schedule", "contractions"]


def _factors(n):
    if isinstance(n, Binary) and n.op == "mul":
        return _factors(n.a) + _factors(n.b)
    return [n]


def contractions(alg: Algorithm) -> dict[str, tuple[str, str, str]]:
    """Reduce stages that look like a matrix product: name -> (m axis, n axis, r axis)."""
    out = {}
    for s in alg.stages.values():
        r = s.node
        if s.is_output or r.op != "sum" or len(r.over) != 1:
            continue
        ra = r.over[0]
        fs = [f for f in _factors(r.x) if ra in f.axes]
        sides: list[set[str]] = []
        for f in fs:
            ax = set(f.axes) - {ra}
            if ax:
                sides.append(ax)
        free = set(r.axes)
        for m in free:
            for n in free:
                if m == n:
                    continue
                if all(sd <= (free - {n}) or sd <= (free - {m}) for sd in sides) and \
                        any(m in sd for sd in sides) and any(n in sd for sd in sides) and \
                        not any(m in sd and n in sd for sd in sides):
                    out[r.name] = (m, n, ra)
                    break
            if r.name in out:
                break
    return out


def _contiguous_axes(alg: Algorithm) -> set[str]:
    """Axes that index the last dimension of some input (contiguous in a row-major tensor)."""
    out = set()
    for n in topo_order([o.expr for o in alg.outputs]):
        if isinstance(n, Load) and n.index and isinstance(n.index[-1], Axis):
            out.add(n.index[-1].name)
    return out


def _programs(axes, sizes, tiles) -> int:
    """Programs a grid over ``axes`` launches with ``tiles`` (an axis without a tile: one each)."""
    return math.prod(-(-sizes[a] // tiles.get(a, 1)) for a in axes)


def _reduces_in(root) -> list[Reduce]:
    return [n for n in topo_order([root]) if isinstance(n, Reduce)]


def _column_reduction(a: str, grid, contig: set[str], sizes) -> bool:
    """``a`` is reduced across rows: it is never a contiguous axis, while a grid axis is."""
    return a not in contig and any(g in contig for g in grid) and sizes[a] > 64


_SMS: dict[str, int] = {}


def sm_count(device) -> int:
    """Streaming multiprocessors of the CUDA device ``device`` (132 on an H200; also the answer
    when no GPU is visible, e.g. a GPU schedule derived on a CPU machine)."""
    key = str(device)
    if key not in _SMS:
        n = 132
        try:
            import torch
            if torch.cuda.is_available() and getattr(device, "type", "cuda") == "cuda":
                n = int(torch.cuda.get_device_properties(device).multi_processor_count)
        except Exception:  # noqa: BLE001 - an odd device string: keep the H200's count
            pass
        _SMS[key] = n
    return _SMS[key]


def _split_for(split: dict, r: str, programs: int, size: int, tile: int, sms: int = 132):
    """Split-K rule: with fewer than half a wave of programs (66 on 132 SMs), split ``r`` so about
    two waves run, each program still looping over at least 8 tiles of ``r`` (the H200 sweep of
    the diffusion layer: best split 4 at V=1.4k, 8 at 5k, 64 at 28k-85k)."""
    want = next_pow2(-(-2 * sms // max(programs, 1)))
    most = size // (tile * 8)
    if programs < sms // 2 and most >= 2:
        split[r] = max(2, min(64, want, 1 << (most.bit_length() - 1)))


def _splittable(alg: Algorithm, r: str, strategy: dict) -> bool:
    """Whether split-K over ``r`` is legal: not an online axis, and every stage reducing ``r`` is a
    sum or mean (partial maxima could be merged, but the lowering splits sums only)."""
    if strategy.get(r) == "online":
        return False
    return all(st.node.op == "sum" for st in alg.stages.values() if not st.is_output and r in st.node.over)


def complete_schedule(alg: Algorithm, sched: Schedule | None, b: Binding) -> Schedule:
    """Return ``sched`` with every open field filled for the shapes and dtypes of ``b``."""
    user = sched or Schedule()
    gpu = b.device.type == "cuda"
    sms = sm_count(b.device) if gpu else 132
    sizes = b.axis_sizes
    half = any(d in (__import__("torch").float16, __import__("torch").bfloat16) for d in b.dtypes.values())
    tile = dict(user.tile)
    strategy = dict(user.strategy)
    group = dict(user.group)
    split = dict(user.split)
    num_warps = user.num_warps if sched is not None else None
    num_stages = user.num_stages if sched is not None else None
    cons = contractions(alg)
    main = alg.outputs[0]

    # axes reduced somewhere and kept in some output: row axes
    reduced = set(alg.reduction_axes)
    row_axes = [a for o in alg.outputs for a in o.layout if a in reduced]
    row_axes = list(dict.fromkeys(row_axes))

    stages_over: dict = {}
    flash = _flash_pattern(alg, sizes) if sched is None else None
    grid = user.grid
    if flash is not None:
        # score stage fused into an online loop (FlashAttention's schedule, Dao et al. 2022): no
        # S x T intermediate; small output axes (the head dim) whole; one query tile per program
        score, loop_axis, whole_axes = flash
        from .schedule import StageSchedule
        stages_over[score.name] = StageSchedule(place="fuse")
        strategy[loop_axis] = "online"
        for a in whole_axes + score.over:
            strategy.setdefault(a, "whole")
        grid = tuple(a for a in main.layout if a not in whole_axes)
        for a in grid[:-1]:
            tile.setdefault(a, 1)
        tile.setdefault(grid[-1], max(16, cap_(sizes, grid[-1], 128 if gpu else 16)))
        tile.setdefault(loop_axis, max(16, cap_(sizes, loop_axis, 64 if gpu else 16)))
        num_warps = num_warps or (8 if gpu and tile[grid[-1]] >= 128 else 4)
        num_stages = num_stages or 2
    # output axes the user asked to cover in-program (strategy whole/loop/online for an axis no
    # stage reduces) stay off the grids chosen here: on a grid, the strategy would be ignored
    main_ss = user.stage(main.name)
    in_program = {a for a in main.layout if a not in reduced
                  and main_ss.strategy.get(a, strategy.get(a, "auto")) != "auto"}
    if grid is None:
        grid = tuple(a for a in main.layout if (a not in row_axes or _is_contraction_free(a, cons))
                     and a not in in_program)
        if not grid and main.layout:
            grid = tuple(a for a in main.layout[:1] if a not in in_program)

    def cap(a, t):
        return max(1, min(t, next_pow2(sizes[a])))

    dot_axes = set()
    # the main output's own contraction first: its free axes are the grid, so their tiles are set
    # for the output (an axis reduced in an earlier stage, v of the diffusion layer, would otherwise
    # take that stage's short reduction tile as its grid tile)
    main_first = sorted(cons.items(), key=lambda kv: kv[0] != getattr(main.expr, "name", None))
    for name, (m, n, r) in main_first:
        big = 128 if (gpu and half) else 64
        for a in (m, n):
            if a not in tile:
                tile[a] = max(16, cap(a, big))
            dot_axes.add(a)
        if (gpu and big == 128 and m in grid and n in grid and not (set(user.tile) & {m, n})
                and tile[m] == 128 and tile[n] == 128):
            progs = _programs(grid, sizes, tile)   # batch axes not tiled yet get tile 1 below
            first = m if grid.index(m) < grid.index(n) else n
            if progs < sms and sizes[first] > 64:
                # fewer 128x128 output tiles than SMs (1024^3 has 64): 64x128 tiles fill the GPU
                # without split-K's zeroing and atomics (H200 probe, fp16 1024^3: 64x128x64,
                # 4 warps, 6.3 us; 128x128 with split 2, 12.9 us)
                tile[first] = 64
                if num_warps is None:
                    num_warps = 4
        if r not in tile:
            tile[r] = max(16, cap(r, 64 if half or not gpu else 32))
        dot_axes.add(r)
        if gpu and r not in split and not user.split and _splittable(alg, r, strategy):
            # programs of the grid: the dot's output tiles times the batch axes' tiles
            free = alg.stages[name].free_axes if name in alg.stages else (m, n)
            ntiles = _programs(dict.fromkeys((m, n) + tuple(a for a in grid if a in free)), sizes, tile)
            # about two waves of programs over the 132 SMs, each still looping over >= 8 tiles of
            # the reduction (the H200 sweep of the diffusion layer: best split 4 at V=1.4k, 8 at
            # 5k, 64 at 28k-85k)
            _split_for(split, r, ntiles, sizes[r], tile[r], sms)
        if len(grid) >= 2 and set(grid[-2:]) == {m, n} and not group and sched is None:
            # grouped launch order swizzles the second-to-last grid axis (codegen)
            group[grid[-2]] = 8
        if num_warps is None:
            num_warps = 8 if tile[m] * tile[n] >= 128 * 128 else 4
        if num_stages is None:
            num_stages = (4 if half else 3) if gpu else 2
    limit = 32768 if gpu else 4096
    widest = 1
    contig = _contiguous_axes(alg)
    col_axes = []
    for a in alg.axis_names:
        if a in dot_axes or a in grid:
            continue
        if a not in strategy or strategy[a] == "auto":
            if _column_reduction(a, grid, contig, sizes) and a not in tile:
                # a column reduction (the reduced axis is strided, a grid axis is contiguous):
                # loop over it in short tiles so each program reads wide, coalesced rows
                strategy[a] = "loop"
                tile[a] = cap(a, 32 if gpu else 16)
                widest = max(widest, tile[a])
                col_axes.append(a)
            elif a in user.tile:
                # the user's tile of an off-grid axis: step over it in that tile ("whole" would
                # ignore the tile)
                strategy[a] = "online" if _online_candidate(alg, a) else "loop"
            elif next_pow2(sizes[a]) <= limit:
                strategy[a] = "whole"
            else:
                strategy[a] = "online" if _online_candidate(alg, a) else "loop"
        if strategy[a] == "whole":
            widest = max(widest, next_pow2(sizes[a]))
        elif a not in tile:
            tile[a] = cap(a, 2048 if gpu else 1024)
            widest = max(widest, tile[a])
    if dot_axes:
        for a in grid:  # batch axes of a contraction: one per program
            tile.setdefault(a, 1)
    # remaining grid axes: about 1024 elements per program, innermost first
    budget = max(1, (4096 if gpu else 1024) // widest) if widest > 1 else (1024 if gpu else 1024)
    for a in reversed(grid):
        if a in tile:
            continue
        if row_axes or widest > 1:
            t = 1 if widest >= 1024 or a != grid[-1] else cap(a, budget)
        else:
            t = cap(a, budget)
        tile[a] = t
        budget = max(1, budget // t)
    for a in alg.axis_names:
        tile.setdefault(a, cap(a, 64))
    for a in col_axes:
        if gpu and not user.split and a not in split and _splittable(alg, a, strategy):
            _split_for(split, a, _programs(grid, sizes, tile), sizes[a], tile[a], sms)
    if num_warps is None:
        num_warps = 4 if widest <= 1024 else (8 if widest <= 4096 else 16)
    if num_stages is None:
        num_stages = 2
    stages = dict(stages_over, **dict(user.stages))
    if user.grid is None:
        from .schedule import StageSchedule
        for o in alg.outputs[1:]:
            ss = stages.get(o.name, StageSchedule())
            if ss.grid is None:
                own = {a for a in o.layout if a not in reduced
                       and ss.strategy.get(a, user.strategy.get(a, "auto")) != "auto"}
                og = tuple(a for a in o.layout if (a not in row_axes or _is_contraction_free(a, cons)) and a not in own) \
                    or tuple(a for a in o.layout[:1] if a not in own)
                st_tile, st_strat = dict(ss.tile), dict(ss.strategy)
                for a in expr_axes(o.expr):
                    if a not in og and a not in dot_axes and a not in st_strat and _column_reduction(a, og, contig, sizes):
                        # the output's own kernel reduces a strided axis (dw, db of layer norm)
                        st_strat[a] = "loop"
                        st_tile[a] = cap(a, 32 if gpu else 16)
                        for g in og:
                            if g in contig:
                                st_tile.setdefault(g, cap(g, 128 if gpu else 32))
                        if gpu and not user.split and a not in split and _splittable(alg, a, strategy):
                            _split_for(split, a, _programs(og, sizes, dict(tile, **st_tile)), sizes[a], st_tile[a], sms)
                stages[o.name] = StageSchedule(place=ss.place, tile=st_tile, grid=og, group=ss.group,
                                               strategy=st_strat, num_stages=ss.num_stages,
                                               num_warps=ss.num_warps or (4 if st_strat != dict(ss.strategy) and gpu else None))
                if st_strat != dict(ss.strategy):
                    # reductions of the column axis inside this output (a split one runs as a kernel
                    # of its own) take the same tiles
                    for n in _reduces_in(o.expr):
                        if any(a in st_strat for a in n.over) and n.name not in stages:
                            stages[n.name] = StageSchedule(tile={a: t for a, t in st_tile.items() if a in n.axes or a in n.over},
                                                           strategy={a: v for a, v in st_strat.items() if a in n.over},
                                                           num_warps=4 if gpu else None)
    access = user.access
    if access is None:
        access = "pointer"
        floats = [d for d in b.dtypes.values() if d.is_floating_point]
        # not when the user gave an L2 eviction hint for a tile input: TMA loads take none, so the
        # hint would be dropped without a word (vectors keep pointer loads, and their hints)
        tiles = {p.name for p in alg.tensor_params if sum(b.sizes[s] > 1 for s in p.dims) >= 2}
        hinted = any(v != "evict_normal" and t in tiles for t, v in user.eviction.items())
        if (gpu and cons and _flash_pattern(alg, sizes) is None and floats and all(d.itemsize == 2 for d in floats)
                and math.prod(sizes[a] for a in set(alg.axis_names)) >= 1 << 35 and not hinted
                and _tma_device(b.device)):
            # TMA tile loads (host-side descriptors) for kernels long enough to hide their host
            # cost. H200, session 4 (bench/results/tma_default_check.txt): bf16 4096.4096.11008
            # kernel 552-583 us against 636-664 us with pointers; 2048^3 fp16 26.2 against 29.8 us,
            # but a plain call then takes 37-46 us against 31 us (the launcher encodes three
            # descriptors per call), so below 2^35 multiply-adds (4096x4096x2048) pointers stay
            access = "tma"
    full = Schedule(tile=tile, grid=tuple(grid), group=group, split=split, strategy=strategy,
                    num_warps=num_warps, num_stages=num_stages, acc_dtype=user.acc_dtype,
                    precision=user.precision, split_mode=user.split_mode, stages=stages,
                    eviction=user.eviction, persistent=user.persistent, access=access,
                    warp_specialize=user.warp_specialize)
    # tiles filled above for axes that end up "whole" off every grid would be ignored: drop them
    # (a user's own such tile stays, and validation reports it)
    return full.without_unused_tiles(alg, keep=user)


def _tma_device(device) -> bool:
    """The CUDA device has the tensor-memory accelerator (compute capability 9.0 or newer); True
    when no GPU is visible (schedules derived on a CPU machine for the GPU assume an H200, as
    :func:`sm_count` does)."""
    import torch
    if device.type != "cuda":
        return False
    if not torch.cuda.is_available():
        return True
    return torch.cuda.get_device_capability(device)[0] >= 9


def cap_(sizes, a, t):
    return max(1, min(t, next_pow2(sizes[a])))


def _flash_pattern(alg: Algorithm, sizes):
    """Detect attention-like algorithms: a single-output algorithm whose sum stage ``s`` (over
    small axes, each <= 256) has a free axis ``j`` that later stages reduce with a max and with
    sums of ``exp(. - max)``. Returns (s, j, axes to keep whole) or None."""
    if len(alg.outputs) != 1:
        return None
    main = alg.outputs[0]
    reds = [st.node for st in alg.stages.values() if not st.is_output]
    for s in reds:
        if s.op != "sum" or any(sizes[a] > 256 for a in s.over):
            continue
        for j in s.axes:
            if j in main.layout:
                continue
            maxes = [m for m in reds if m.op == "max" and j in m.over and _uses(m.x, s)]
            sums = [r for r in reds if r.op == "sum" and j in r.over and r is not s and _uses(r.x, s)]
            if maxes and sums:
                whole = tuple(a for a in main.layout if a not in s.axes and sizes[a] <= 256)
                return s, j, whole
    return None


def _uses(root, target) -> bool:
    seen, stack = set(), [root]
    while stack:
        n = stack.pop()
        if n is target:
            return True
        if n._id in seen:
            continue
        seen.add(n._id)
        stack.extend(n.children())
    return False


def _is_contraction_free(a, cons) -> bool:
    return any(a in (m, n) for m, n, _ in cons.values())


def _online_candidate(alg: Algorithm, a: str) -> bool:
    """True when axis ``a`` is reduced by a max whose result is used by a sum over ``a``."""
    maxes = [s.node for s in alg.stages.values() if not s.is_output and s.node.op == "max" and a in s.node.over]
    return bool(maxes)
