"""Lowering: (algorithm, complete schedule, call sizes) -> a Program of kernels (placement and partition).

This layer decides *where* each stage is computed and partitions the algorithm into kernels:

- every output is a root; outputs with the same axes and the same kernel schedule share a kernel;
  with the schedule's ``fuse_outputs`` (default on), materialised reductions of the same shape and
  schedule share a kernel too, and an output joins another output's kernel when each of its
  programs computes it once (:mod:`dtriton.plan.partition`);
- a reduction stage is *fused* into its consumer's kernel (computed once per program when its free
  axes are all in the program's tile, or recomputed inside the consumer's loops), or
  *materialised*: a kernel of its own writes it to an fp32 buffer that consumers read;
- a reduction that is split across programs (split-K) is always materialised; its kernel adds
  its partial sums with fp32 atomics into a zeroed buffer, or writes per-split partials that the
  consumer combines (``split_mode="partials"``, deterministic; always for max, min and prod); an
  online group (a max and the sums using it as ``exp(x - max)``) split over its online axis is ONE
  kernel storing every member's per-split partials, merged rescaled by the reader
  (:mod:`dtriton.plan.online_split`);
- a sum placed "atomic" is materialised by another kernel: the output kernel that loops over its
  kept axes with some of its reduced axes on the grid adds its partial sums with fp32 atomics
  inside that loop (:mod:`dtriton.plan.loop_stores`: the attention backward's dQ in the dK/dV
  kernel);
- "auto" placement materialises a reduction when fusing it would recompute it once per program
  of the consumer's grid (it reduces over a grid axis, or needs an axis the consumer loops over).

How each kernel computes its values (dots, passes, access) is decided by :mod:`dtriton.plan.decide`;
nothing here emits source. Shapes are used only for specialisation facts (which axes divide their
tile, the block of "whole" axes), never baked into kernels, so a new shape with the same facts
reuses the compiled kernel.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..errors import ScheduleError, article
from ..ir import Algorithm, Expr, Output, Reduce, can_split, is_sum, reduces_in, reduction_stages, stage_grid, walk
from ..schedule import Schedule
from .kernel import AxisPlan, BufferSpec, KernelPlan, Program, StoreSpec, next_pow2
from .loop_stores import host_group
from .online_split import exp_of, online_split_groups
from .partition import merge_output_groups, reduction_groups

__all__ = ["lower", "FINISH_BLOCK"]

#: Elements of the innermost kept axis a program of a finishing kernel (``split_mode="finish"``)
#: combines the split partials of (batch norm's 64 channels: one program).
FINISH_BLOCK = 1024


def _kernel_axes(root_exprs: Sequence[Expr], stop: set[int], tops: Sequence[Reduce] = ()) -> list[str]:
    """Every axis a kernel touches: free axes and the reduction axes of fused reductions (``tops``:
    the materialised reductions the kernel computes itself)."""
    own = {t.uid for t in tops}

    def materialised(n: Expr) -> bool:
        return n.uid in stop and n.uid not in own
    ax: list[str] = []
    for n in walk(root_exprs, stop=materialised):
        ax.extend(n.axes)
        if isinstance(n, Reduce) and not materialised(n):
            ax.extend(n.over)
    return list(dict.fromkeys(ax))


def lower(alg: Algorithm, sched: Schedule, sizes: dict[str, int],
          out_dtypes: dict[str, str] | None = None, f64: bool = False) -> Program:
    """Partition ``alg`` under the complete schedule ``sched`` into kernels.

    ``sizes`` maps axis names to extents (used for specialisation only). ``out_dtypes`` (output
    -> dtype name) allows split-K straight into an fp32 output; ``f64``: buffers in float64.
    Raises :class:`ScheduleError` when a forced fusion is impossible."""
    reduces = {s.node.uid: s.node for s in reduction_stages(alg)}
    mat = _placement(alg, sched, reduces)
    lw = _Kernels(alg, sched, sizes, reduces, mat, f64)
    groups = _root_groups(alg, sched)
    if sched.fuse_outputs:
        groups = merge_output_groups(
            groups, lambda s: _grid_for(alg, sched, s), lambda s, ex: _top_axes(alg, sched, s, ex, mat),
            lambda ex: _kernel_axes(ex, mat), mat)
    for rid in lw.riders:
        r = reduces[rid]
        n = host_group(r, groups, lambda s: _grid_for(alg, sched, s), lambda s, ex: _top_axes(alg, sched, s, ex, mat),
                       lambda ex, tops: _kernel_axes(ex, mat, tops), mat)
        lw.host[rid] = groups[n]
        lw.hosted.setdefault(id(groups[n]), []).append(rid)
    for grp in groups:
        if not lw.direct_split(grp, out_dtypes):
            lw.output_kernel(grp)
    labels = {s.node.uid: s.name for s in reduction_stages(alg)}
    return Program(lw.kernels, lw.buffers, lw.output_direct, name=alg.name, schedule_json=sched.to_json(),
                   stage_labels=labels)


def _root_groups(alg: Algorithm, sched: Schedule) -> list[list[Output]]:
    """Outputs that share a kernel: the same axes and the same kernel schedule."""
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


def _placement(alg: Algorithm, sched: Schedule, reduces: dict[int, Reduce]) -> set[int]:
    """The ids of the reductions that are materialised (written to a buffer by a kernel of their
    own): split ones, those the schedule materialises, and "auto" ones that cannot live in their
    consumer's kernel (iterated until nothing changes)."""
    mat: set[int] = set()
    for rid, r in reduces.items():
        place = sched.stage(r.name).place
        split_axes = [a for a in r.over if sched.split.get(a, 1) > 1]
        if split_axes:
            if not can_split(r):
                raise ScheduleError(
                    f"stage {r.name!r} is {article(r.combiner.name)} {r.combiner.name} over {split_axes}; "
                    "an arg-reduction's (value, index) pairs cannot be split across programs. Remove the split")
            if sched.split_mode == "atomic" and not is_sum(r):
                raise ScheduleError(
                    f"stage {r.name!r} is {article(r.combiner.name)} {r.combiner.name} split over {split_axes} "
                    "with split_mode='atomic'; atomics add partial sums only. Use split_mode='partials', 'finish' or 'last' (or leave it None)")
            if place == "fuse":
                raise ScheduleError(
                    f"stage {r.name!r} is split over {split_axes} and must be materialised; it cannot be fused. Drop "
                    f"stages[{r.name!r}].place='fuse' (or give 'materialize'), or drop the split")
            mat.add(rid)
        elif place == "atomic":
            if not is_sum(r):
                raise ScheduleError(
                    f"stage {r.name!r} is {article(r.combiner.name)} {r.combiner.name}; place='atomic' adds "
                    "partial sums with atomics, so it "
                    "applies to sums only. Use place='materialize' (or 'auto')")
            mat.add(rid)
        elif place == "materialize":
            mat.add(rid)
    while _place_round(alg, sched, reduces, mat):
        pass
    return mat


def _place_round(alg: Algorithm, sched: Schedule, reduces: dict[int, Reduce], mat: set[int]) -> bool:
    """One round of :func:`_placement`: materialise the first auto reduction that cannot be fused
    where it is used (outer reductions come first, so one nested in a reduction that becomes a
    kernel of its own is then judged in that kernel); True when something changed."""
    kernels_roots = []  # (root exprs, stage schedule name)
    for grp in _root_groups(alg, sched):
        kernels_roots.append(([o.expr for o in grp], grp[0].name))
    for rid in mat:
        r = reduces[rid]
        if sched.stage(r.name).place != "atomic":   # (an atomic one is computed in its host's kernel)
            kernels_roots.append(([r], r.name))
    for exprs, sname in kernels_roots:
        grid = _grid_for(alg, sched, sname)
        top_axes = _top_axes(alg, sched, sname, exprs, mat)
        for r in reduces_in(exprs, mat):
            if r.uid in mat:
                continue
            place = sched.stage(r.name).place
            bad_grid = [a for a in r.over if a in grid]
            if bad_grid:
                if place == "fuse":
                    raise ScheduleError(
                        f"stage {r.name!r} reduces over {bad_grid}, which the grid of the kernel for "
                        f"{sname!r} splits across programs; it cannot be fused there. Materialise it "
                        f"(stages={{{r.name!r}: {{'place': 'materialize'}}}}) or take {bad_grid} off the grid")
                mat.add(r.uid)
                return True
            if place == "auto" and not set(r.axes) <= top_axes:
                mat.add(r.uid)
                return True
            if place == "fuse":
                _check_fused_in_loop(r, exprs, sname, top_axes)
    return False


def _top_axes(alg: Algorithm, sched: Schedule, sname: str, exprs: Sequence[Expr], mat: set[int]) -> set[str]:
    """The axes the program of the kernel for ``sname`` computing ``exprs`` binds: its grid axes and
    its "whole" axes (a materialised reduction at the head of ``exprs`` is computed there)."""
    tops = [exprs[0]] if isinstance(exprs[0], Reduce) else []
    return set(_grid_for(alg, sched, sname)) | {a for a in _kernel_axes(exprs, mat, tops)
                                                if _strategy(sched, sname, a) == "whole"}


def _check_fused_in_loop(r: Reduce, exprs: Sequence[Expr], sname: str, top_axes: set[str]) -> None:
    """A fused reduction with a free axis the consumer loops over is computed inside that loop;
    when the consumer also loops over one of its reduced axes around it, each computation would
    see only the current tile of that axis. Raises :class:`ScheduleError` naming the stage, the
    axes and the fixes."""
    outer = {a for e in exprs for a in e.axes}
    if isinstance(exprs[0], Reduce):
        outer.update(exprs[0].over)
    looped = [a for a in r.over if a in outer and a not in top_axes]
    inner = [a for a in r.axes if a not in top_axes]
    if looped and inner:
        raise ScheduleError(
            f"stage {r.name!r} (place='fuse') reduces over {looped}, which the kernel for {sname!r} loops over in "
            f"tiles, and depends on {inner}, also looped there: fused inside those loops it would see one tile of "
            f"{looped} only. Materialise it (stages={{{r.name!r}: {{'place': 'materialize'}}}}, or 'auto'), cover "
            f"{looped} whole (strategy={{{looped[0]!r}: 'whole'}}), or put {inner} on the grid")


class _Kernels:
    """Builds the kernels of one program in dependency order (a materialised reduction's kernel
    before every kernel that reads its buffer)."""

    def __init__(self, alg: Algorithm, sched: Schedule, sizes: dict[str, int], reduces: dict[int, Reduce],
                 mat: set[int], f64: bool):
        self.alg, self.sched, self.sizes, self.reduces, self.mat = alg, sched, sizes, reduces, mat
        self.kernels: list[KernelPlan] = []
        self.done: set[int] = set()
        self.buffers: dict[str, BufferSpec] = {}
        self.bufmap: dict[int, BufferSpec] = {}
        self.output_direct: dict[str, str] = {}
        # sums placed "atomic": rider id -> the output group hosting it, and the riders per host
        self.riders = [rid for rid in mat if sched.stage(reduces[rid].name).place == "atomic"]
        self.host: dict[int, list[Output]] = {}
        self.hosted: dict[int, list[int]] = {}
        self.emitted: set[int] = set()
        order = [n.uid for n in alg.nodes]
        # online groups split across programs: one kernel each, per-split partials merged by the reader
        online = online_split_groups(sched, reduces, mat)
        for rid in sorted(mat, key=order.index):
            r = reduces[rid]
            split = _splits(sched, r)
            # per-split partials (deterministic) when asked, and for kinds atomics cannot add: one
            # per program of the split (the product of the factors of a split over several axes)
            deterministic = sched.split_mode in ("partials", "finish", "last") or not is_sum(r) or rid in online
            partials = math.prod(f for _, f in split) if split and deterministic else 0
            # the kernel computing r applies the mean's division itself (partial sums are divided
            # too, so atomics and partials add up to the mean), so readers never divide again
            dtype = "int64" if r.combiner.results == 2 else "float64" if f64 else sched.acc_dtype
            m = reduces[online[rid][0]] if rid in online and online[rid][0] != rid else None
            rescale = f"buf_{m.name}" if m is not None else ""
            # split partials of a state (the variance's count, shift, mean, M2) keep every value
            state = len(r.combiner.state) if partials else 0
            zero = (bool(split) and not partials) or rid in self.riders
            b = BufferSpec(f"buf_{r.name}", r.axes, dtype, zero=zero, partials=partials,
                           rescale=rescale, rescale_exp=(exp_of(r, m) or "exp") if m is not None else "exp",
                           state=state)
            self.buffers[b.name] = b
            self.bufmap[rid] = b
        ordered = [reduces[rid] for rid in sorted(mat, key=order.index) if rid not in online and rid not in self.riders]
        if sched.fuse_outputs:
            direct = {r.uid: self.deps_of([r], r) for r in ordered}
            self.groups = reduction_groups(ordered, self._group_key, direct)
        else:
            self.groups = {r.uid: [r.uid] for r in ordered}
        self.groups.update({rid: list(g) for rid, g in online.items()})

    def _group_key(self, r: Reduce) -> tuple:
        """What the materialised reductions one kernel computes share: kept and reduced axes, the
        kernel's grid and stage schedule, the buffer's dtype and kind (atomic, partials)."""
        b = self.bufmap[r.uid]
        return (frozenset(r.axes), frozenset(r.over), tuple(_grid_for(self.alg, self.sched, r.name)),
                self.sched.stage(r.name), b.dtype, b.zero, b.partials)

    def make_kernel(self, name, exprs, stores, sname, tops: Sequence[Reduce] = ()) -> KernelPlan:
        """The kernel computing ``exprs`` (the stage ``sname``'s schedule; ``tops``: the
        materialised reductions it writes, which share their reduced axes and split)."""
        alg, sched, mat = self.alg, self.sched, self.mat
        grid = _grid_for(alg, sched, sname)
        ss = sched.stage(sname)
        sp = _splits(sched, tops[0]) if tops else []
        if len(sp) > 1:
            online = [a for a, _ in sp if _strategy(sched, sname, a) == "online"]
            if online:
                raise ScheduleError(
                    f"stage {tops[0].name!r} is split over several axes {dict(sp)}, and {online} is 'online' (your "
                    "strategy, or the heuristic's for a max or min of a split): an "
                    "online pass merges its per-split partials over one split axis only. Split one axis, or "
                    f"give {online} strategy 'loop'")
        own = {t.uid for t in tops}
        axes: dict[str, AxisPlan] = {}
        for a in _kernel_axes(exprs, mat, tops):
            axes[a] = self._axis(a, grid, ss, sname, dict(sp))
        fused = [r.name for r in reduces_in(exprs, mat) if r.uid not in mat or r.uid in own]
        return KernelPlan(name, stores, grid, axes, sp[0] if sp else None,
                          {k: v for k, v in self.bufmap.items() if k not in own},
                          ss.num_warps or sched.num_warps, ss.num_stages or sched.num_stages,
                          [sname] + [t.name for t in tops[1:]], fused,
                          persistent=_persistent(sched, ss) if grid else 0, split_more=tuple(sp[1:]),
                          split_interleaved=bool(sp) and sched.split_order == "interleaved")

    def _axis(self, a: str, grid: list[str], ss, sname: str, split: dict[str, int]) -> AxisPlan:
        """How axis ``a`` is covered in a kernel with this grid and split (split axis -> factor)."""
        n = self.sizes[a]
        tile = ss.tile.get(a, self.sched.tile.get(a))
        if a in grid:
            role = "grid"
            block = tile or 1
        else:
            role = _strategy(self.sched, sname, a)
            if a in split and role != "online":
                role = "loop"  # each program loops over its slice of the split axis
            if role == "whole":
                block = next_pow2(n)
            else:
                if tile is None:
                    raise ScheduleError(f"axis {a!r} of the kernel for {sname!r} has no tile; give tile={{{a!r}: ...}}")
                block = tile
        group = ss.group.get(a, self.sched.group.get(a, 1)) if role == "grid" else 1
        return AxisPlan(a, role, block, n % block == 0 and n > 0, group)

    def deps_of(self, exprs, top=None) -> list[int]:
        """Materialised reductions ``exprs`` read (other than ``top``)."""
        return [r.uid for r in reduces_in(exprs, self.mat) if r.uid in self.mat and r is not top]

    def reduce_kernel(self, rid: int) -> None:
        """Emit the kernel of materialised reduction ``rid`` and the others of its group (after
        those they read)."""
        if rid in self.done:
            return
        if rid in self.host:   # added by its host's kernel
            self.done.add(rid)
            self.output_kernel(self.host[rid])
            return
        members = [self.reduces[m] for m in self.groups[rid]]
        self.done.update(self.groups[rid])
        for r in members:
            for d in self.deps_of([r], r):
                self.reduce_kernel(d)
        stores = []
        for r in members:
            b = self.bufmap[r.uid]
            stores.append(StoreSpec(b.name, r, r.axes, atomic=b.zero, partial_axis=b.partials > 0, state=b.state))
        name = "_".join([self.alg.name] + [r.name for r in members])
        self.kernels.append(self.make_kernel(name, members, stores, members[0].name, members))
        if self.sched.split_mode in ("finish", "last"):
            self.finish_kernel(members, name)

    def finish_kernel(self, members: list[Reduce], split_kernel: str) -> None:
        """``split_mode="finish"`` (and ``"last"``, whose split kernel ``split_kernel`` then absorbs
        it where it can: :func:`dtriton.plan.last_finish.absorb_finishes`): a small kernel combining the per-split partials of ``members``
        (one reduction kernel's stages) once, in split order with each kind's combine (a state's
        values merged and closed: the variance's M2 over its count), into a buffer of the final
        values (``buf_<stage>_final``) that every later kernel reads instead of the partials: one
        value per element instead of a fold of every split in each reading program. Its grid is
        the stages' kept axes, :data:`FINISH_BLOCK` elements of the innermost a program (a
        whole-tensor statistic: one program); one such kernel per set of kept axes."""
        by_axes: dict[frozenset, list[Reduce]] = {}
        for r in members:
            if self.bufmap[r.uid].partials:   # (an online group's sums keep axes of their own: attention's output)
                by_axes.setdefault(frozenset(r.axes), []).append(r)
        final: dict[int, BufferSpec] = {}
        for parts in by_axes.values():
            axes = tuple(parts[0].axes)
            plans = {a: AxisPlan(a, "grid", b, self.sizes[a] % b == 0 and self.sizes[a] > 0) for a, b in
                     ((a, min(FINISH_BLOCK, next_pow2(self.sizes[a])) if a == axes[-1] else 1) for a in axes)}
            stores = []
            for r in parts:
                pb = self.bufmap[r.uid]
                b = BufferSpec(f"{pb.name}_final", r.axes, pb.dtype)
                self.buffers[b.name] = final[r.uid] = b
                stores.append(StoreSpec(b.name, r, r.axes))
            # (each reads the partials: an online sum's are rescaled by its max's partials, read by name)
            self.kernels.append(KernelPlan(
                "_".join([self.alg.name, "finish"] + [r.name for r in parts]), stores, list(axes), plans, None,
                dict(self.bufmap), 4, self.sched.num_stages or 2, [r.name for r in parts], [], finishes=split_kernel))
        self.bufmap.update(final)   # the kernels after these read the final values

    def direct_split(self, grp: list[Output], out_dtypes: dict[str, str] | None) -> bool:
        """Direct split-K into fp32 outputs: ``out[...] = sum(...)`` with nothing after it, atomics
        straight into the (zeroed) output instead of a buffer plus a copy kernel; the outputs of
        ``grp`` whose sums form one reduction group (layer norm's dw and db) share the kernel. True
        when ``grp`` was emitted so."""
        rs = [o.expr for o in grp]
        if not (isinstance(rs[0], Reduce) and rs[0].uid in self.bufmap
                and sorted(self.groups.get(rs[0].uid, ())) == sorted(r.uid for r in rs)
                and all(self._direct_ok(o, out_dtypes) for o in grp)):
            return False
        for r in rs:
            for d in self.deps_of([r], r):
                self.reduce_kernel(d)
        stores = []
        for o, r in zip(grp, rs):
            b = self.bufmap.pop(r.uid)
            del self.buffers[b.name]
            stores.append(StoreSpec(o.name, r, r.axes, atomic=True))
            self.output_direct[o.name] = "zero"
            self.done.add(r.uid)
        self.kernels.append(self.make_kernel(f"{self.alg.name}_{grp[0].name}", rs, stores, rs[0].name, rs))
        return True

    def _direct_ok(self, o: Output, out_dtypes: dict[str, str] | None) -> bool:
        """Output ``o`` is a bare split sum into an fp32 output that no other stage reads."""
        r = o.expr
        return (isinstance(r, Reduce) and r.uid in self.bufmap and self.bufmap[r.uid].zero
                and r.combiner.finalize is None and out_dtypes is not None and out_dtypes.get(o.name) == "float32"
                and tuple(o.layout) == tuple(r.axes) and r.uid not in self.done
                and not any(r.uid in self.deps_of([x.expr]) for x in self.alg.outputs if x is not o)
                and not any(r.uid in self.deps_of([q], q) for q in (self.reduces[i] for i in self.mat) if q is not r))

    def output_kernel(self, grp: list[Output]) -> None:
        """Emit the kernel storing the outputs ``grp`` (after the kernels of what they read)."""
        if id(grp) in self.emitted:
            return
        self.emitted.add(id(grp))
        exprs = [o.expr for o in grp]
        riders = [self.reduces[rid] for rid in self.hosted.get(id(grp), [])]
        for d in self.deps_of(exprs) + [d for r in riders for d in self.deps_of([r], r)]:
            self.reduce_kernel(d)
        stores = [StoreSpec(o.name, o.expr, o.layout) for o in grp]
        stores += [StoreSpec(self.bufmap[r.uid].name, r, r.axes, atomic=True, in_loop=True) for r in riders]
        self.kernels.append(self.make_kernel(f"{self.alg.name}_{grp[0].name}", exprs + riders, stores, grp[0].name,
                                             riders))


def _splits(sched: Schedule, r: Reduce) -> list[tuple[str, int]]:
    """The axes of ``r`` that ``sched`` splits across programs, with their factors, in ``r``'s order
    (the first is the outermost split: its slices are the coarsest)."""
    return [(a, sched.split[a]) for a in r.over if sched.split.get(a, 1) > 1]


def _persistent(sched: Schedule, ss) -> int:
    """Programs per SM of a kernel whose main stage has the overrides ``ss``: the stage's
    ``persistent`` where it sets one (a GEMM stage of its own in a chain), else the schedule's."""
    return ss.persistent if ss.persistent is not None else sched.persistent


def _strategy(sched: Schedule, sname: str, axis: str) -> str:
    s = sched.stage(sname).strategy.get(axis, sched.strategy.get(axis, "auto"))
    return "loop" if s == "auto" else s


def _grid_for(alg: Algorithm, sched: Schedule, sname: str) -> list[str]:
    """Grid axes of the kernel of stage ``sname`` (:func:`dtriton.ir.stage_grid`); under a schedule
    whose grid is not chosen yet, the stage's free axes that are neither whole nor looped."""
    ss = sched.stage(sname)
    g = stage_grid(alg, sname, sched.grid, ss.grid, strict=True)
    if g is None:
        return [a for a in alg.stages[sname].free_axes if ss.strategy.get(a) not in ("whole", "loop", "online")]
    return list(g)
