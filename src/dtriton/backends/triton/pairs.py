"""Printing a strided window whose taps are read as contiguous runs (``KernelPlan.pair_taps``:
:func:`dtriton.plan.pairs.plan_pair_taps`).

The plan decided the runs: per run, its first column (``stride * (tile start + a)``), its taps and
their parts, and whether its columns can fall below 0. This prints, in the scope of the window's other
loops, the taps in order: a run's load (``stride * BLOCK`` contiguous columns, masked to the dim),
reshaped to (..., BLOCK, stride) and split into its parts where its first tap comes, then each tap's
step of the reduction in a header-less scope binding the tap to its value, the load read as its part;
a lone tap's step reads its own strided load there as before.
"""

from __future__ import annotations

from ...ir import Load, walk
from ...plan.kernel import PairTaps
from .scope import Scope

__all__ = ["PairPrinter"]


class PairPrinter:
    """Mixin of the kernel printer: :meth:`pair_steps`."""

    def pair_steps(self, rs, pt: PairTaps, loop_axes, inner: Scope, scope: Scope, pp, accs) -> None:
        """The steps of the window reduction ``rs[0]`` over the taps of ``pt.tap`` in ``inner`` (the
        scope of the other window loops), its runs loaded and split where their first tap comes."""
        n = next(x for x in walk([rs[0].x]) if isinstance(x, Load) and x.uid == pt.load)
        run_of = {q: (a, parts) for a, parts in pt.groups for q, _ in parts}
        values: dict[int, str] = {}
        lay = inner.layout
        for q in range(pt.taps):
            if q in run_of and q not in values:
                a, parts = run_of[q]
                split = self.run_parts(n, pt, a, inner, lay)
                values.update({t: split[b] for t, b in parts})
            tap = self.inline(inner, lay, {pt.tap: q})
            if q in values:
                tap.overrides[n.uid] = (values[q], lay)
            self.pass_body(rs, loop_axes, tap, scope, pp, accs)
            inner.close(tap)

    def run_parts(self, n: Load, pt: PairTaps, a: int, scope: Scope, layout) -> list[str]:
        """Load the run ``a`` of ``pt`` (``stride * BLOCK`` contiguous columns from ``stride * (tile
        start + a)``) in ``layout`` (``pt.grid``'s dim that many wide) and split it: its parts ``b``
        (variables in ``layout``), the columns ``stride * (grid + a) + b``."""
        s, w = pt.stride, pt.grid
        b, _ = scope.find_bind(w)
        name = self.tensor_arg(n.tensor.name, len(n.index))
        dt = self.dtypes[n.tensor.name]
        terms, mask_axes, inside, _ = self.pointer_index(n, scope, layout, skip=pt.dim)
        col = self.fresh("col")
        scope.emit(f"{col} = ({b.start} + {a}) * {s} + tl.arange(0, {s} * {b.block})  # columns of {n.tensor.name} "
                   f"dim {pt.dim} of the taps {', '.join(str(q) for q, _ in dict(pt.groups)[a])} of {pt.tap}")
        terms[pt.dim] = self.expand1d(col, w, layout)
        ce = terms[pt.dim]
        edge = f"({ce} < {self.dim_size(n.tensor.dims[pt.dim])})"
        if a < 0:
            edge = f"({ce} >= 0) & {edge}"
        mask = " & ".join(filter(None, [self.mask_for([x for x in mask_axes if x not in (w, pt.tap)], scope, layout)]
                                 + inside + [edge]))
        ev = self.eviction(n.tensor.name)
        code = (f"tl.load({self.addr(name, terms)}, mask={mask}, other={self.pad_text(n, dt)}"
                + (f", eviction_policy=\"{ev}\"" if ev else "") + ")")
        run = self.fresh("run")
        scope.emit(f"{run} = {self._widen(code, dt, n.uid in self.k.raw_loads)}  # {s} contiguous columns of "
                   f"{n.tensor.name} an output column")
        pres = self.present(n, scope) | {w}
        dims = [d for x in layout for d in ((self.block(x), str(s)) if x == w else
                                             (self.block(x) if x in pres else "1",))]
        at = layout.index(w) + 1   # the stride's dim, right after the grid axis's
        x = self.fresh("run")
        scope.emit(f"{x} = tl.reshape({run}, ({', '.join(dims)}))")
        if at != len(dims) - 1:   # the stride's dim last, for tl.split
            order = [i for i in range(len(dims)) if i != at] + [at]
            y = self.fresh("run")
            scope.emit(f"{y} = tl.permute({x}, {tuple(order)})")
            x = y
            dims = [dims[i] for i in order]
        return self.split_parts(x, dims[:-1], s, scope)

    def split_parts(self, x: str, prefix: list[str], s: int, scope: Scope) -> list[str]:
        """The ``s`` parts (a power of two) of ``x``, shaped ``prefix + [s]``, along its last dim, in
        order: ``tl.split`` halves it into the even and odd parts, each split again."""
        if s == 1:
            return [x]
        if s > 2:
            y = self.fresh("run")
            scope.emit(f"{y} = tl.reshape({x}, ({', '.join(prefix + [str(s // 2), '2'])}))")
            x = y
        even, odd = self.fresh("part"), self.fresh("part")
        scope.emit(f"{even}, {odd} = tl.split({x})")
        ev = self.split_parts(even, prefix, s // 2, scope)
        od = self.split_parts(odd, prefix, s // 2, scope)
        return [(ev if b % 2 == 0 else od)[b // 2] for b in range(s)]
