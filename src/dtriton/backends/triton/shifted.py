"""Printing a variance whose lanes share one shift per program (``PassPlan.shifted``).

Before the pass's loops, the program evaluates the variance's body on its first tile (each loop
axis bound at the start of its range, in a ``if True:`` block so nothing it binds leaks) and takes
the mean of the valid lanes as the shift ``k``: a value of the program's own data scale (any
finite shift gives the same variance; one near the mean keeps ``s2 - s * s / n`` exact to a few
ulps). Each step then adds ``y = x - k`` to ``s`` and ``y * y`` to ``s2`` per lane, and counts the
values: one scalar add per step when no lane is ever masked, else a count per lane. After the
loop the lanes fold by plain sums (one shift: no Chan merge across lanes) and close into the
``(count, shift, mean - shift, M2)`` state the split partials and their readers use.
"""

from __future__ import annotations

from ...ir import Reduce, get_combiner
from .prelude import variance_text
from .scope import Scope

__all__ = ["ShiftedPrinter"]

SUM = get_combiner("sum")


class ShiftedPrinter:
    """Mixin of :class:`~dtriton.backends.triton.kernel.KernelPrinter`: program-shifted variances."""

    def shifted_accumulator(self, r: Reduce, info: dict, inner: Scope, scope: Scope, loop_axes, lanes_masked: bool):
        """Before the loops (in ``scope``, while ``inner``, the innermost loop, is open): the shift
        from the program's first tile and the zeroed sums; ``lanes_masked``: some step of the pass
        masks lanes (their count is kept per lane)."""
        cdt = self.cdt
        shape = self.shape(inner.layout, self.present(r.x, inner) | self.present_of_axes(r.over, inner))
        k = self.fresh(f"shift_{r.name}")
        scope.emit(f"{k} = tl.full((1,), 0.0, dtype={cdt})  # the shift of {r.name}: the mean of the first tile")
        peel = scope.open(f"if True:  # the program's first tile of {', '.join(loop_axes)}",
                          tuple(a for a in loop_axes if not self.k.scalar_axis(a)),
                          tuple(a for a in inner.layout if a not in loop_axes))
        for a in loop_axes:
            lo = f"{a}_lo" if a in self.k.split_axes else "0"
            self.bind_axis(peel, a, lo, f"  # first tile of axis {a}", masked=True)
        lin = peel.layout
        x, m = self.float_body(r, peel, lin), self.mask_for(r.over, peel, lin)
        xv = self.fresh(f"first_{r.name}")
        peel.emit(f"{xv} = {x}")
        # counted in the value's own shape (a mask may have fewer dims than the value)
        valid = f"tl.where({m}, {xv} * 0.0 + 1.0, 0.0)" if m is not None else f"{xv} * 0.0 + 1.0"
        body = f"tl.where({m}, {xv}, 0.0)" if m is not None else xv
        total, count = (f"tl.reshape({self.reduce_code(v, SUM, lin, lin, peel)}, (1,))" for v in (body, valid))
        peel.emit(f"{k} = {total} / tl.maximum({count}, 1.0)")
        # (an inf or NaN in the first tile: shift by 0, or every x - k would be -inf or NaN;
        # ir.combiners' _SHIFTED_SUMS)
        peel.emit(f"{k} = tl.where({k} - {k} == 0.0, {k}, 0.0)  # a shift that is not finite: 0")
        scope.close(peel)
        s, s2, n = self.fresh(f"s_{r.name}"), self.fresh(f"s2_{r.name}"), self.fresh(f"n_{r.name}")
        nshape = shape if lanes_masked else "(1,)"
        scope.emit(f"{s}, {s2} = tl.full({shape}, 0.0, dtype={cdt}), tl.full({shape}, 0.0, dtype={cdt})  # sums of x - shift, "
                   "(x - shift)**2, folded after the loop")
        scope.emit(f"{n} = tl.full({nshape}, 0.0, dtype={cdt})  # values counted" + (" per lane" if lanes_masked else ""))
        info.update(acc=(s, s2, n), shift=k, lane_count=lanes_masked, layout=inner.layout, block=True)

    def shifted_step(self, r: Reduce, info: dict, inner: Scope, lin) -> None:
        """One step: ``y = x - k`` (0 on masked lanes) into the sums, the step's values counted."""
        s, s2, n = info["acc"]
        x, m = self.float_body(r, inner, lin), self.mask_for(r.over, inner, lin)
        y = self.fresh(f"y_{r.name}")
        dev = f"{x} - {info['shift']}"
        inner.emit(f"{y} = " + (f"tl.where({m}, {dev}, 0.0)" if m is not None else dev))
        inner.emit(f"{s}, {s2} = {s} + {y}, {s2} + {y} * {y}")
        if info["lane_count"]:
            inner.emit(f"{n} = {n} + " + (f"tl.where({m}, 1.0, 0.0)" if m is not None else "1.0"))
        else:
            numel = " * ".join(self.block(a) for a in lin if a in self.present(r.x, inner) | self.present_of_axes(r.over, inner))
            inner.emit(f"{n} = {n} + {numel or '1'}")

    def shifted_fold(self, r: Reduce, info: dict, scope: Scope) -> str:
        """After the loop: the lanes' sums folded over the reduced dims, closed into the variance's
        ``(n, k, m, q)`` state (recorded for split partials and state means); returns M2 over the
        count in ``scope``'s layout."""
        c, lay = r.combiner, info["layout"]
        s, s2, n = info["acc"]
        fold = [self.fresh(v) for v in ("S", "S2", "N")]
        scope.emit(f"{fold[0]} = {self.reduce_code(s, SUM, r.over, lay, scope)}")
        scope.emit(f"{fold[1]} = {self.reduce_code(s2, SUM, r.over, lay, scope)}")
        cnt = self.reduce_code(n, SUM, r.over, lay, scope) if info["lane_count"] else n
        scope.emit(f"{fold[2]} = tl.full({fold[0]}.shape, 0.0, dtype={self.cdt}) + {cnt}")
        st = {v: self.fresh(v) for v in c.state}
        scope.emit(f"{st['n']} = {fold[2]}")
        scope.emit(f"{st['m']} = {fold[0]} / tl.maximum({fold[2]}, 1.0)")
        scope.emit(f"{st['k']} = tl.where({fold[2]} > 0, {fold[2]} * 0.0 + {info['shift']}, 0.0)")
        q = f"{fold[1]} - {fold[0]} * {st['m']}"
        scope.emit(f"{st['q']} = tl.where({q} < 0.0, 0.0, {q})  # M2 (a rounded negative: 0)")
        pres = self.present(r, scope)
        names = [st[v] for v in c.state]
        self.state_values[r.uid] = [self.squeeze(v, lay, scope.layout, scope, pres) for v in names]
        return self.squeeze(variance_text(st['q'], st['n']), lay, scope.layout, scope, pres)
