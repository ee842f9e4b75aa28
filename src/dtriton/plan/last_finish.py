"""``split_mode="last"``: the finishing pass of split statistics run by the last program of each tile.

Under ``split_mode="finish"`` a split statistics kernel stores per-split partials and a small
finishing kernel (:meth:`dtriton.plan.lower._Kernels.finish_kernel`) folds them once into
``buf_<stage>_final``. Its launch costs about 3-4 us on the H200 (the kernel and the gap between
launches: Frobenius fp16 16x64x256x256, 3.8 of 103.2 us). Under ``"last"`` lowering plans the same
finishing kernels, then :func:`absorb_finishes` folds each into the split kernel it finishes (the
classic "last block finishes" pattern, deterministic): every program stores its partials, passes a
CTA barrier, and adds 1 to an int32 arrival counter of its grid tile (acq_rel, gpu scope); the
program that sees all the other splits arrived folds the tile's partials in split order with the
finishing kernel's own combines (:class:`~dtriton.plan.kernel.LastFinish`), stores the final values
and resets the counter to 0, so the runtime's zeroed counter memory stays zero for the next launch.

An output kernel that only reads the final values (an output that is a split column sum, or a
function of such sums alone: layer norm's dw and db cast to their 16-bit dtype) is absorbed too
(:func:`absorb_outputs`): the last program stores the outputs right after its fold, and the
``buf_<stage>_final`` buffers no other kernel reads are neither allocated nor stored. A split
column reduction then runs as one kernel (was: the split kernel, then the output kernel).

A finishing kernel stays a kernel of its own where its split kernel cannot absorb it: a persistent
split kernel (a program covers several tiles), a flat grid axis, kept axes the split kernel neither puts
on its grid nor covers whole (or folds into a flat axis), or a stage the finishing kernel folds as one block of
partials (its axes scalar there) that the split kernel's tile does not hold as scalars.

"last" folds as the finishing kernel does: the partials of a tile in split order by a loop, bit for
bit the finishing kernel's values; more than :data:`BLOCK_FOLD_PARTIALS` partials of a scalar (a
whole-tensor statistic such as the Frobenius norm's 512) as one block reduced by ``tl.reduce``, whose
tree on the GPU follows the kernel's warps (the split kernel's 8 against the finishing kernel's 4):
deterministic, within a few ulps of the finishing kernel's value, not always its bits (the
interpreter's fold is one numpy sum either way).

Which reads fold as one block is a plan fact of every kernel reading split partials, the rule
:func:`block_fold` applied once per kernel by :func:`plan_block_folds`
(:attr:`~dtriton.plan.kernel.KernelPlan.block_folds`); the split kernel's last program takes the
finishing kernel's (:attr:`~dtriton.plan.kernel.LastFinish.block_folds`).

The partials' loads in the last program use ``cache_modifier=".cg"`` (cached in L2 only): other SMs
wrote them, and an L1 line of an earlier launch on this SM (the caching allocator hands out the same
addresses again) must not answer; the acq_rel atomic orders them after the other programs' release,
and .cg makes that independent of how the hardware implements the acquire for L1. The PTX of the
sm_90 compile: ``bar.sync 0`` (the barrier), then one thread's ``atom.global.gpu.acq_rel.add.u32``,
its result broadcast through shared memory, then ``ld.global.cg`` of the partials.
"""

from __future__ import annotations

import dataclasses

from ..ir import Load, Reduce, walk
from .kernel import BufferSpec, KernelPlan, LastFinish, Program

__all__ = ["absorb_finishes", "absorb_outputs", "absorb_problem", "block_fold", "output_problem", "plan_block_folds",
           "BLOCK_FOLD_PARTIALS"]

#: More split partials than this, read where every axis of the buffer is scalar, are loaded as one
#: block and folded by a tree (the printer's ``fold_partials``), else in split order by a loop.
BLOCK_FOLD_PARTIALS = 16


def block_fold(k: KernelPlan, b: BufferSpec) -> bool:
    """Whether kernel ``k`` reads buffer ``b``'s split partials as one block folded by a tree: more
    than :data:`BLOCK_FOLD_PARTIALS` of them, every axis of ``b`` a scalar index in ``k``
    (:meth:`~dtriton.plan.kernel.KernelPlan.scalar_axis`); else in split order by a loop."""
    return b.partials > BLOCK_FOLD_PARTIALS and all(k.scalar_axis(a) for a in b.axes)


def plan_block_folds(k: KernelPlan) -> frozenset:
    """The materialised reductions (ids) whose split partials kernel ``k`` reads as one block
    (:func:`block_fold`; :attr:`~dtriton.plan.kernel.KernelPlan.block_folds`). Call once its axes'
    tiles and flat axes are decided."""
    return frozenset(uid for uid, b in k.materialized.items() if block_fold(k, b))


def absorb_problem(split: KernelPlan, fin: KernelPlan) -> str:
    """Why split kernel ``split`` cannot run finishing kernel ``fin`` in its last program per tile
    ("" when it can)."""
    if split.gluon is not None or split.persistent:
        return "the split kernel is persistent (a program covers several tiles)"
    if any(a in split.flat for a in split.grid):
        return "the split kernel's grid has a flat axis"
    for st in fin.stores:
        for a in st.layout:
            p = split.axes.get(a)
            if p is None or p.role not in ("grid", "whole") or split.flat_of(a) != a:
                return f"the kept axis {a!r} of {st.target} is not on the split kernel's grid nor whole there (or is flat)"
        if st.expr.uid in fin.block_folds and not block_fold(split, fin.materialized[st.expr.uid]):
            return f"{st.target}: the finishing kernel folds its partials as one block, the split kernel's tile is wider"
    return ""


def absorb_finishes(prog: Program) -> dict[str, str]:
    """Fold every finishing kernel of ``prog`` (``KernelPlan.finishes``: a ``split_mode="last"``
    program's) into the split kernel it finishes, where :func:`absorb_problem` finds nothing (in
    place: the split kernel's :attr:`~dtriton.plan.kernel.KernelPlan.last_finish`, an int32
    counter buffer ``cnt_<split kernel>`` over its grid axes, the finishing kernel removed).
    Returns finishing kernel name -> why it stays a kernel, for those that do."""
    by_name = {k.name: k for k in prog.kernels}
    kept: dict[str, str] = {}
    absorbed: set[str] = set()
    for fin in prog.kernels:
        if not fin.finishes:
            continue
        split = by_name[fin.finishes]
        why = absorb_problem(split, fin)
        if why:
            kept[fin.name] = why
            continue
        reads = {st.expr.uid: fin.materialized[st.expr.uid] for st in fin.stores}
        blocks = frozenset(uid for uid in reads if uid in fin.block_folds)
        lf = split.last_finish
        if lf is None:   # (an online group's second set of kept axes joins the first's pass)
            cnt = BufferSpec(f"cnt_{split.name}", tuple(split.grid), "int32", counter=True,
                             reason="arrival counters of the split programs of each tile (split_mode='last')")
            prog.buffers[cnt.name] = cnt
            split.last_finish = LastFinish((fin.name,), cnt.name, tuple(fin.stores), reads, blocks)
        else:
            split.last_finish = LastFinish(lf.finish + (fin.name,), lf.counter, lf.stores + tuple(fin.stores),
                                           {**lf.reads, **reads}, lf.block_folds | blocks)
        absorbed.add(fin.name)
    prog.kernels[:] = [k for k in prog.kernels if k.name not in absorbed]
    return kept


def output_problem(split: KernelPlan, o: KernelPlan, finals: set[str], buffers) -> str:
    """Why the last program of split kernel ``split`` (with a :class:`LastFinish` storing the
    ``finals`` buffers) cannot also store output kernel ``o``'s outputs ("" when it can): ``o`` must
    be a plain kernel (no split, fold, loop, flat or persistent grid, Gluon), store outputs only, each
    over every grid axis of ``split`` and only axes the split kernel binds per program (grid or whole),
    and read nothing but those final values (no input load, no other stage)."""
    if o.split or o.split_more or o.last_finish or o.finishes or o.persistent or o.gluon is not None or o.flat:
        return f"kernel {o.name} splits, folds or loops over tiles"
    for st in o.stores:
        if st.target in buffers or st.atomic or st.partial_axis or st.state or st.in_loop:
            return f"kernel {o.name} stores {st.target}, not a plain output"
        if not set(split.grid) <= set(st.layout):
            return f"{st.target} lacks a grid axis of {split.name}"
        for a in st.layout:
            p = split.axes.get(a)
            if p is None or p.role not in ("grid", "whole") or split.flat_of(a) != a:
                return f"axis {a!r} of {st.target} is not bound by a program of {split.name}"
        for n in walk([st.expr], stop=lambda n: n.uid in o.materialized):
            if isinstance(n, Load):
                return f"{st.target} reads input {n.tensor.name}"
            if isinstance(n, Reduce) and (n.uid not in o.materialized or o.materialized[n.uid].name not in finals):
                return f"{st.target} reads stage {n.name}, not a final value of {split.name}"
    return ""


def absorb_outputs(prog: Program) -> dict[str, str]:
    """Store, in the last program of each split kernel with a :class:`LastFinish`, the outputs of
    every later kernel that :func:`output_problem` allows (in place: ``LastFinish.outputs`` and
    ``absorbed``, the output kernel removed; the final buffers no remaining kernel reads become
    ``LastFinish.unstored`` and leave ``prog.buffers``). Returns output kernel name -> why it stays,
    for kernels reading a final value that stay."""
    kept: dict[str, str] = {}
    absorbed: set[str] = set()
    for i, s in enumerate(prog.kernels):
        lf = s.last_finish
        if lf is None:
            continue
        finals = {st.target for st in lf.stores}
        for o in prog.kernels[i + 1:]:
            if o.name in absorbed or not any(b.name in finals for b in o.materialized.values()):
                continue
            why = output_problem(s, o, finals, prog.buffers)
            if why:
                kept[o.name] = why
                continue
            lf = dataclasses.replace(lf, outputs=lf.outputs + tuple(o.stores), absorbed=lf.absorbed + (o.name,))
            absorbed.add(o.name)
        s.last_finish = lf
    prog.kernels[:] = [k for k in prog.kernels if k.name not in absorbed]
    read = {b.name for k in prog.kernels for b in k.materialized.values()}
    for s in prog.kernels:
        if s.last_finish is not None and s.last_finish.absorbed:
            unstored = frozenset(st.target for st in s.last_finish.stores if st.target not in read)
            s.last_finish = dataclasses.replace(s.last_finish, unstored=unstored)
            for t in unstored:
                prog.buffers.pop(t, None)
    return kept
