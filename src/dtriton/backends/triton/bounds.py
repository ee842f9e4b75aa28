"""Printing a pass's loop bounds from a mask (the plan's :class:`~dtriton.plan.kernel.LoopBounds`):
the first and last tile of the loop axis each program visits, and where the tiles whose every
lane is visible start and end."""

from __future__ import annotations

from ...ir import Expr
from ...plan.kernel import LoopBounds
from .scope import Scope

__all__ = ["BoundsPrinter"]


class BoundsPrinter:
    """Mixin of :class:`~dtriton.backends.triton.kernel.KernelPrinter`: loop bounds (it decides
    nothing: the plan's bounds, printed)."""

    def bound_segments(self, lb: LoopBounds, scope: Scope) -> list[tuple[tuple[str, str], bool]]:
        """Print, in ``scope`` (before the pass's loop), the range of ``lb.axis`` this program
        visits; returns the loop segments in order, each ``((start, end), unmasked)``: masked tiles
        before the fully visible ones, the fully visible ones (``unmasked``, when the plan says so),
        masked tiles after them."""
        a = lb.axis
        blk = self.block(a)
        split = a in self.k.split_axes
        base_lo, base_hi = (f"{a}_lo", f"{a}_hi") if split else ("0", self.size(a))
        scope.emit(f"# loop bounds of {a} from the mask: tiles with no visible lane are skipped"
                   + (", tiles with every lane visible run unmasked" if lb.unmasked else ""))
        lows = [(self.tile_extreme(t, scope, "min"), self.tile_extreme(t, scope, "max")) for t in lb.lower]
        ups = [(self.tile_extreme(t, scope, "min"), self.tile_extreme(t, scope, "max")) for t in lb.upper]
        start, end = self.fresh(f"{a}_start"), self.fresh(f"{a}_end")
        scope.emit(f"{start} = {_fold('maximum', [base_lo] + [lo for lo, _ in lows])} // {blk} * {blk}  "
                   f"# the first tile with a visible lane")
        scope.emit(f"{end} = tl.maximum({_fold('minimum', [base_hi] + [hi for _, hi in ups])}, {start})  "
                   f"# past the last visible lane")
        if not lb.unmasked:
            return [((start, end), False)]
        mid_lo, mid_hi = self.fresh(f"{a}_full_start"), self.fresh(f"{a}_full_end")
        full_lo = _fold("maximum", [start] + [hi for _, hi in lows])
        scope.emit(f"{mid_lo} = tl.minimum(({full_lo} + {blk} - 1) // {blk} * {blk}, ({end} + {blk} - 1) // {blk} * {blk})"
                   "  # the first tile with every lane visible")
        full_hi = _fold("minimum", [f"{base_hi} // {blk} * {blk}"] + [lo for lo, _ in ups])
        scope.emit(f"{mid_hi} = tl.maximum(tl.maximum({full_hi}, 0) // {blk} * {blk}, {mid_lo})  "
                   "# past the last tile with every lane visible")
        segs = [((start, mid_lo), False)] if lb.lower else []
        segs.append(((mid_lo, mid_hi), True))
        if lb.upper or split or not self.plan(a).divisible:
            segs.append(((mid_hi, end), False))
        return segs

    def tile_extreme(self, t: Expr, scope: Scope, how: str) -> str:
        """The least (``how="min"``) or largest (``"max"``) value of the integer-valued ``t`` over
        the valid lanes of the program's tile, as an integer scalar expression."""
        idt = "tl.int64" if self.i64 else "tl.int32"
        big = 2 ** 62 if self.i64 else 2 ** 30
        v = self.val(t, scope, scope.layout)
        pres = self.present(t, scope)
        if pres:
            m = self.mask_for([x for x in t.axes if x in pres], scope, scope.layout)
            if m is not None:
                v = f"tl.where({m}, {v}, {big if how == 'min' else -big})"
            numel = " * ".join(self.block(x) for x in scope.layout if x in pres)
            v = f"tl.reshape(tl.reduce(tl.reshape({v}, ({numel},)), 0, tl.standard._elementwise_{how}, keep_dims=True), ())"
        return f"({v} + tl.full((), 0, {idt})).to({idt})"


def _fold(fn: str, xs: list[str]) -> str:
    """``tl.maximum``/``tl.minimum`` of one or more scalar expressions."""
    out = xs[0]
    for x in xs[1:]:
        out = f"tl.{fn}({out}, {x})"
    return out
