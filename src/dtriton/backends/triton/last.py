"""Printing a split kernel's finishing pass run by the last program of each tile
(``KernelPlan.last_finish``, ``split_mode="last"``: :mod:`dtriton.plan.last_finish`)."""

from __future__ import annotations

from ...plan.kernel import StoreSpec
from .scope import Scope

__all__ = ["LastFinishPrinter"]


class LastFinishPrinter:
    """Mixin of :class:`~dtriton.backends.triton.kernel.KernelPrinter`: the arrival count and the
    last program's fold."""

    def emit_last_finish(self, top: Scope) -> None:
        """After the program's partial stores (in ``top``, the program scope): a CTA barrier (every
        thread's stores issued), one acq_rel atomic increment at gpu scope of the tile's arrival
        counter, and in the program that sees the other ``split_factor - 1`` splits arrived, the
        finishing kernel's stores (each stage's partials folded in split order by
        :meth:`load_buffer` with the finishing kernel's choices, loaded past L1; a final buffer the plan
        left unstored only folded), the absorbed output kernels' stores (``LastFinish.outputs``), then
        the counter reset to 0 for the next launch."""
        k, lf = self.k, self.k.last_finish
        cb = self.prog.buffers[lf.counter]
        name = self.tensor_arg(lf.counter, len(cb.axes))
        terms = []
        for a in cb.axes:   # the kernel's grid axes: the tile's program ids
            if a not in k.grid:
                raise AssertionError(f"kernel {k.name}: counter axis {a!r} is not a grid axis (plan and printer disagree)")
            terms.append(f"pid_{a}")
        ptr = self.addr(name, terms)
        n = k.split_factor
        top.emit(f"# split_mode='last': the last of the {n} split programs of this tile to arrive folds their "
                 f"partials ({', '.join(lf.finish)} in this kernel)")
        top.emit("tl.debug_barrier()  # every thread's partial stores issued before the arrival")
        ticket = self.fresh("arrived")
        top.emit(f"{ticket} = tl.atomic_add({ptr}, 1, sem=\"acq_rel\", scope=\"gpu\")  # splits arrived before this one")
        last = Scope(top, f"if {ticket} == {n - 1}:", top.layout)
        for st in lf.stores:
            r = st.expr
            code, comment = self.load_buffer(r, last, last.layout, lf.reads[r.uid], r.uid in lf.block_folds, ".cg")
            v = self.fresh(f"final_{r.name}")
            last.emit(f"{v} = {code}  # {comment}: every split's partials, in split order")
            last.overrides[r.uid] = (v, last.layout)
            if st.target not in lf.unstored:
                self.store(StoreSpec(st.target, r, st.layout, dtype=st.dtype), last)
        for st in lf.outputs:   # outputs of the final values alone (output kernels absorbed by the plan)
            self.store(st, last)
        last.emit(f"tl.store({ptr}, 0)  # the counter back to 0: zero for the next launch")
        top.emit(last)  # type: ignore[arg-type]
