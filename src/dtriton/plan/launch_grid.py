"""Which CUDA launch-grid dimension gives each grid axis of a kernel its tile index.

A kernel launched on a one-dimensional grid turns its linear ``tl.program_id(0)`` into one tile
index per grid axis with an integer division and a modulo per axis: on the H200 the element-wise
output kernels of normalisations (a few KB a program, a million programs) are bound by issuing
those instructions. Launched on CUDA's three grid dimensions instead, a program reads each tile
index from ``tl.program_id(d)`` with no division: :func:`plan_launch_dims` decides the mapping
(:attr:`~dtriton.plan.kernel.KernelPlan.launch_dims`), the printer prints it, the runtime launches
the tuple grid (:meth:`~dtriton.plan.kernel.KernelPlan.launch_counts`).

CUDA runs blocks x-fastest, so with the innermost axes on dimension 0 (x) and the outer ones on 1
(y) and 2 (z) programs start in the linear form's order (and a reverse launch order, each index
reversed within its dimension, is the linear form's reversed order exactly). Dimensions 1 and 2
hold at most 65535 programs: an axis goes there only where the call specialisation's size buckets
(:attr:`~dtriton.plan.kernel.KernelPlan.size_buckets`: every size this compiled kernel serves is at
most its bucket) bound its programs by that on every call; else the kernel keeps the linear form.
"""

from __future__ import annotations

from .kernel import KernelPlan

__all__ = ["MAX_GRID_X", "MAX_GRID_YZ", "plan_launch_dims", "program_bound"]

MAX_GRID_X = 2**31 - 1   # programs on launch-grid dimension 0 (x)
MAX_GRID_YZ = 65535      # programs on dimensions 1 and 2 (y, z)


def program_bound(k: KernelPlan, a: str) -> int | None:
    """The most programs grid axis ``a`` of ``k`` can have on a call this kernel serves (its
    tiles over the size buckets of its axes, of every member of a flat axis); None when an axis
    has no bucket (no bound is known)."""
    return k.tile_programs(k.grid_tiles(a), k.size_buckets)


def plan_launch_dims(k: KernelPlan) -> tuple[tuple[str, ...], ...] | None:
    """The grid axes of kernel ``k`` per launch-grid dimension, dimension 0 first, each group's
    axes outermost first (:attr:`~dtriton.plan.kernel.KernelPlan.launch_dims`); None: the linear
    form (one dimension, tile indices decomposed from ``tl.program_id(0)``).

    None for a persistent kernel (its programs loop over the linear tile index), a grouped launch
    order (a swizzle of the linear index), a split (its slice index rides the linear index), a
    Gluon kernel, a kernel without grid axes, and where no mapping keeps dimensions 1 and 2 within
    65535 programs on every call of the specialisation. Axes that one program covers on every such
    call (bucket at most the tile) take no dimension (their index is 0). Of the other axes (outermost
    first), the innermost go on dimension 0 and the next on 1 and 2, each alone where that fits;
    more than three share: the outermost ones share dimension 2 (one division there), and where an
    axis on 1 or 2 could pass 65535 the axes are grouped so that fewer divisions remain, or the
    linear form is kept when every grouping leaves all of them on dimension 0."""
    if (not k.grid or k.persistent or k.split or k.grouped or k.gluon is not None):
        return None
    bounds = {a: program_bound(k, a) for a in k.grid}
    many = [a for a in k.grid if bounds[a] is None or bounds[a] > 1]
    if not many:
        return ()
    best = None
    for cuts in _groupings(len(many)):
        groups = [tuple(many[i:j]) for i, j in zip(cuts, cuts[1:])][::-1]   # innermost group first
        if not all(_fits(groups[d], bounds) for d in range(1, len(groups))):
            continue
        cost = (len(many) - len(groups), [len(g) for g in groups])   # divisions, then the inner groups smallest
        if best is None or cost < best[0]:
            best = (cost, tuple(groups))
    if best is None or len(best[1]) == 1 and len(many) > 1:
        return None   # (every axis on dimension 0: the linear form)
    return best[1]


def _fits(group: tuple[str, ...], bounds: dict[str, int | None]) -> bool:
    """Whether the axes ``group`` sharing dimension 1 or 2 have at most 65535 programs on every call."""
    n = 1
    for a in group:
        if bounds[a] is None:
            return False
        n *= bounds[a]
    return n <= MAX_GRID_YZ


def _groupings(m: int) -> list[tuple[int, ...]]:
    """The ways to cut ``m`` axes (outermost first) into 1 to 3 runs: the cut positions, 0 and ``m`` included."""
    out = [(0, m)]
    out += [(0, i, m) for i in range(1, m)]
    out += [(0, i, j, m) for i in range(1, m) for j in range(i + 1, m)]
    return out
