"""Lowering: (algorithm, complete schedule, call sizes) -> a Program of kernels.

This layer decides *where* each stage is computed and partitions the algorithm into kernels:

- every output is a root; outputs with the same axes and the same kernel schedule share a kernel;
- a reduction stage is *fused* into its consumer's kernel (computed once per program when its free
  axes are all in the program's tile, or recomputed inside the consumer's loops), or
  *materialised*: a kernel of its own writes it to an fp32 buffer that consumers read;
- a reduction that is split across programs (split-K) is always materialised; its kernel adds
  its partial sums with fp32 atomics into a zeroed buffer, or writes per-split partials that the
  consumer sums (``split_mode="partials"``, deterministic);
- "auto" placement materialises a reduction when fusing it would recompute it once per program
  of the consumer's grid (it reduces over a grid axis, or needs an axis the consumer loops over).

Nothing here emits Triton text; :mod:`dtriton.codegen` does. Shapes are used only for
specialisation facts (which axes divide their tile, the block of "whole" axes, int64 offsets),
never baked into kernels, so a new shape with the same facts reuses the compiled kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .errors import ScheduleError
from .language import Algorithm, Expr, Load, Output, Reduce, topo_order
from .schedule import Schedule

__all__ = ["AxisPlan", "BufferSpec", "KernelIR", "Program", "StoreSpec", "lower", "next_pow2"]


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


@dataclass(frozen=True)
class AxisPlan:
    """How one axis is covered inside one kernel.

    role: "grid" (program id; ``block`` elements per program, a scalar when block == 1),
    "whole" (one block covers it: block = next_pow2(size)), "loop" (tiles in a loop) or
    "online" (a loop whose reductions run in one pass with rescaling).
    ``divisible``: size % block == 0, so no mask is needed.
    """
    name: str
    role: str
    block: int
    divisible: bool
    group: int = 1


@dataclass
class BufferSpec:
    """An intermediate tensor written by one kernel and read by later ones (fp32 by default)."""
    name: str
    axes: tuple[str, ...]
    dtype: str = "float32"
    zero: bool = False
    partials: int = 0         # >0: a leading dim of this many split partials
    scale_count: tuple[str, ...] = ()   # divide by the product of these axis sizes when read (mean)


@dataclass
class StoreSpec:
    """One store of a kernel: ``target[layout] = expr`` (atomic add for split reductions)."""
    target: str               # output name ("out", "out0", ...) or buffer name
    expr: Expr
    layout: tuple[str, ...]
    atomic: bool = False
    partial_axis: bool = False  # store into the split-partials dim of a buffer


@dataclass
class KernelIR:
    """One kernel: what it stores, its grid, and how each axis is covered."""
    name: str
    stores: list[StoreSpec]
    grid: list[str]                                   # grid axes, outermost first
    axes: dict[str, AxisPlan]
    split: tuple[str, int] | None = None              # (reduction axis, factor)
    materialized: dict[int, BufferSpec] = field(default_factory=dict)  # Reduce node id -> buffer
    num_warps: int = 4
    num_stages: int = 2
    stage_names: list[str] = field(default_factory=list)
    fused: list[str] = field(default_factory=list)    # reduction stages computed inside
    persistent: bool = False                          # a fixed grid of programs looping over tiles


@dataclass
class Program:
    """The kernels of one (algorithm, schedule, specialisation), in launch order."""
    kernels: list[KernelIR]
    buffers: dict[str, BufferSpec]
    output_direct: dict[str, str] = field(default_factory=dict)  # output name -> "zero": split-K atomics into it


def _reduce_nodes(root: Expr, stop: set[int]) -> list[Reduce]:
    """Reduce nodes reachable from root without crossing materialised ones (stop)."""
    out, seen, stack = [], set(), [root]
    while stack:
        n = stack.pop()
        if n._id in seen:
            continue
        seen.add(n._id)
        if isinstance(n, Reduce):
            out.append(n)
            if n._id in stop and n is not root:
                continue  # materialised elsewhere; the root itself is computed here
        stack.extend(n.children())
    return out


def _kernel_axes(root_exprs: Sequence[Expr], stop: set[int], top: Reduce | None = None) -> list[str]:
    """Every axis a kernel touches: free axes and the reduction axes of fused reductions."""
    ax: list[str] = []
    seen, stack = set(), list(root_exprs)
    while stack:
        n = stack.pop()
        if n._id in seen:
            continue
        seen.add(n._id)
        ax.extend(n.axes)
        if isinstance(n, Reduce):
            if n._id in stop and n is not top:
                continue
            ax.extend(n.over)
        stack.extend(n.children())
    return list(dict.fromkeys(ax))


def lower(alg: Algorithm, sched: Schedule, sizes: dict[str, int], interpret: bool = False,
          out_dtypes: dict[str, str] | None = None, f64: bool = False) -> Program:
    """Partition ``alg`` under the complete schedule ``sched`` into kernels.

    ``sizes`` maps axis names to extents (used for specialisation only).
    Raises :class:`ScheduleError` when a forced fusion is impossible."""
    stages = alg.stages
    reduces = {s.node._id: s.node for s in stages.values() if not s.is_output}
    # -- placement --------------------------------------------------------------------------
    mat: set[int] = set()
    for rid, r in reduces.items():
        place = sched.stage(r.name).place
        split_axes = [a for a in r.over if sched.split.get(a, 1) > 1]
        if split_axes:
            if r.op != "sum":
                raise ScheduleError(
                    f"stage {r.name!r} is a {r.op} over {split_axes}; only sum/mean stages can be split "
                    "across programs. Remove the split or materialise a sum instead")
            if place == "fuse":
                raise ScheduleError(
                    f"stage {r.name!r} is split over {split_axes} and must be materialised; it cannot be fused")
            mat.add(rid)
        elif place == "materialize":
            mat.add(rid)

    def root_groups():
        groups: list[list] = []
        for o in alg.outputs:
            key = (frozenset(o.layout), sched.stage(o.name))
            for g in groups:
                if g[0] == key and g[1][0].expr is not None and isinstance(g[1][0], Output):
                    g[1].append(o)
                    break
            else:
                groups.append([key, [o]])
        return [g[1] for g in groups]

    # iterate: auto reductions that cannot live in their consumer's kernel get materialised
    while True:
        changed = False
        kernels_roots = []  # (root exprs, free axes, stage schedule name)
        for grp in root_groups():
            kernels_roots.append(([o.expr for o in grp], grp[0].layout, grp[0].name))
        for rid in mat:
            r = reduces[rid]
            kernels_roots.append(([r], r.axes, r.name))
        for exprs, free, sname in kernels_roots:
            grid = _grid_for(alg, sched, sname, free)
            top_axes = set(grid) | {a for a in _kernel_axes(exprs, mat, exprs[0] if isinstance(exprs[0], Reduce) else None)
                                    if _strategy(sched, sname, a) == "whole"}
            for r in _reduce_nodes_roots(exprs, mat):
                if r._id in mat:
                    continue
                place = sched.stage(r.name).place
                bad_grid = [a for a in r.over if a in grid]
                if bad_grid:
                    if place == "fuse":
                        raise ScheduleError(
                            f"stage {r.name!r} reduces over {bad_grid}, which the grid of the kernel for "
                            f"{sname!r} splits across programs; it cannot be fused there. Materialise it "
                            f"(stages={{{r.name!r}: {{'place': 'materialize'}}}}) or take {bad_grid} off the grid")
                    mat.add(r._id)
                    changed = True
                    continue
                if place == "auto" and not set(r.axes) <= top_axes:
                    mat.add(r._id)
                    changed = True
        if not changed:
            break

    # -- buffers ---------------------------------------------------------------------------
    buffers: dict[str, BufferSpec] = {}
    bufmap: dict[int, BufferSpec] = {}
    output_direct: dict[str, str] = {}
    for rid in sorted(mat, key=lambda i: [n._id for n in alg.nodes].index(i)):
        r = reduces[rid]
        split = [(a, sched.split[a]) for a in r.over if sched.split.get(a, 1) > 1]
        partials = split[0][1] if split and sched.split_mode == "partials" else 0
        # the kernel computing r applies the mean's division itself (partial sums are divided
        # too, so atomics and partials add up to the mean), so readers never divide again
        b = BufferSpec(f"buf_{r.name}", r.axes, "float64" if f64 else sched.acc_dtype, zero=bool(split) and not partials,
                       partials=partials)
        buffers[b.name] = b
        bufmap[rid] = b

    # -- kernels in dependency order ----------------------------------------------------------
    kernels: list[KernelIR] = []
    done: set[int] = set()

    def make_kernel(name, exprs, stores, free, sname, top: Reduce | None):
        grid = _grid_for(alg, sched, sname, free)
        ss = sched.stage(sname)
        split = None
        if top is not None:
            sp = [(a, sched.split[a]) for a in top.over if sched.split.get(a, 1) > 1]
            if len(sp) > 1:
                raise ScheduleError(f"stage {top.name!r}: split more than one axis {sp} is not supported; split one")
            split = sp[0] if sp else None
        used = _kernel_axes(exprs, mat, top)
        axes: dict[str, AxisPlan] = {}
        for a in used:
            n = sizes[a]
            tile = ss.tile.get(a, sched.tile.get(a))
            if a in grid:
                role = "grid"
                block = tile or 1
            else:
                role = _strategy(sched, sname, a)
                if split is not None and a == split[0]:
                    role = "loop"  # each program loops over its slice of the split axis
                if role == "whole":
                    block = next_pow2(n)
                else:
                    if tile is None:
                        raise ScheduleError(f"axis {a!r} of the kernel for {sname!r} has no tile; give tile={{{a!r}: ...}}")
                    block = tile
            group = ss.group.get(a, sched.group.get(a, 1)) if role == "grid" else 1
            axes[a] = AxisPlan(a, role, block, n % block == 0 and n > 0, group)
        fused = [r.name for r in _reduce_nodes_roots(exprs, mat) if r._id not in mat or r is top]
        return KernelIR(name, stores, grid, axes, split,
                        {k: v for k, v in bufmap.items() if top is None or k != top._id},
                        ss.num_warps or sched.num_warps, ss.num_stages or sched.num_stages, [sname], fused,
                        persistent=bool(sched.persistent) and bool(grid))

    def deps_of(exprs, top=None) -> list[int]:
        return [r._id for r in _reduce_nodes_roots(exprs, mat) if r._id in mat and r is not top]

    def emit_reduce_kernel(rid):
        if rid in done:
            return
        r = reduces[rid]
        for d in deps_of([r], r):
            emit_reduce_kernel(d)
        b = bufmap[rid]
        st = StoreSpec(b.name, r, r.axes, atomic=b.zero, partial_axis=b.partials > 0)
        kernels.append(make_kernel(f"{alg.name}_{r.name}", [r], [st], r.axes, r.name, r))
        done.add(rid)

    # direct split-K into an fp32 output: out[...] = sum(...) with nothing after it, atomics
    # straight into the (zeroed) output instead of a buffer plus a copy kernel
    for grp in root_groups():
        exprs = [o.expr for o in grp]
        o = grp[0]
        r = o.expr
        if (len(grp) == 1 and isinstance(r, Reduce) and r._id in bufmap and bufmap[r._id].zero and not r.mean
                and out_dtypes is not None and out_dtypes.get(o.name) == "float32" and tuple(o.layout) == tuple(r.axes)
                and r._id not in done and not any(r._id in deps_of([x.expr]) for x in alg.outputs if x is not o)
                and not any(r._id in deps_of([q], q) for q in (reduces[i] for i in mat) if q is not r)):
            for d in deps_of([r], r):
                emit_reduce_kernel(d)
            b = bufmap.pop(r._id)
            del buffers[b.name]
            st = StoreSpec(o.name, r, r.axes, atomic=True)
            kernels.append(make_kernel(f"{alg.name}_{o.name}", [r], [st], r.axes, r.name, r))
            output_direct[o.name] = "zero"
            done.add(r._id)
            continue
        for d in deps_of(exprs):
            emit_reduce_kernel(d)
        stores = [StoreSpec(o.name, o.expr, o.layout) for o in grp]
        kernels.append(make_kernel(f"{alg.name}_{grp[0].name}", exprs, stores, grp[0].layout, grp[0].name, None))
    return Program(kernels, buffers, output_direct)


def _reduce_nodes_roots(exprs, stop):
    out, seen = [], set()
    for e in exprs:
        for r in _reduce_nodes(e, stop):
            if r._id not in seen:
                seen.add(r._id)
                out.append(r)
    return out


def _strategy(sched: Schedule, sname: str, axis: str) -> str:
    s = sched.stage(sname).strategy.get(axis, sched.strategy.get(axis, "auto"))
    return "loop" if s == "auto" else s


def _grid_for(alg: Algorithm, sched: Schedule, sname: str, free: Sequence[str]) -> list[str]:
    """Grid axes of the kernel whose free axes are ``free``: the stage's grid, else the global grid
    restricted to ``free``, plus free axes that are neither whole nor looped."""
    ss = sched.stage(sname)
    if ss.grid is not None:
        bad = [a for a in ss.grid if a not in free]
        if bad:
            raise ScheduleError(f"stages[{sname!r}].grid names {bad}, which are not free axes of stage {sname!r} "
                                f"(its free axes: {list(free)})")
        return list(ss.grid)
    is_output = alg.stages[sname].is_output
    if not is_output:
        return list(free)  # a materialised reduction: all its free axes on the grid, in its order
    g = [a for a in (sched.grid or ()) if a in free]
    for a in free:
        if a in g:
            continue
        if ss.strategy.get(a) in ("whole", "loop", "online"):
            continue  # the stage asks for this axis to be covered in-program
        if is_output and sched.grid is not None:
            continue  # an output axis left off the grid: looped or whole (validated)
        g.append(a)
    return g
