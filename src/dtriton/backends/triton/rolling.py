"""Printing of a window sum computed by rolling rows (``KernelPlan.rolling``: :func:`dtriton.plan.taps.plan_rolling`).

The plan decided everything: the output row axis the program walks, the window axis paired with it, the
input row of both at 0, the other window axes and their sizes. This prints the weights of every tap
before the loop over the tile's input rows, then per input row one load per value of the other window
axes, each added into the rolling accumulators with its taps' weights, the store of the completed
output row and the rotation of the accumulators.
"""

from __future__ import annotations

import itertools

from ...ir import Load, mul_factors
from .scope import Bind, Scope

__all__ = ["RollingPrinter"]


class RollingPrinter:
    """Mixin of the kernel printer: :meth:`emit_rolling`."""

    def emit_rolling(self, top: Scope) -> None:
        """Print kernel ``k``'s one window sum by rolling rows and its store into the program scope ``top``."""
        k, rw = self.k, self.k.rolling
        st = k.stores[0]
        loads = {n.uid: n for n in mul_factors(self.reduce_by_id[rw.reduce].x) if isinstance(n, Load)}
        x, wt = loads[rw.load], loads[rw.weight]
        lay = tuple(a for a in top.layout if a != rw.row)
        row = top.find_bind(rw.row)[0]
        names = [a for a, _ in rw.others]
        combos = list(itertools.product(*[range(n) for _, n in rw.others]))
        top.emit(f"# rolling rows of {rw.row}: each input row read once per ({', '.join(names) or '-'}), added into "
                 f"the {rw.taps} accumulators of the output rows it feeds (taps of {rw.tap})")
        weights = {}
        for t in range(rw.taps):   # every tap's weight, before the row loop
            for c in combos:
                sc = self.inline(top, lay, {rw.tap: t, **dict(zip(names, c))})
                weights[(t, c)] = self.val(wt, sc, lay)
                top.close(sc)
        shape = self.shape(lay, set(lay))
        acc = [self.fresh("roll") for _ in range(rw.taps)]
        for t, a in enumerate(acc):
            top.emit(f"{a} = tl.full({shape}, 0, {self.cdt})  # output row i - {t} - base: tap {t} of input row i")
        base = self.val(rw.base, top, ())
        i = self.fresh("i_row")
        loop = top.open(f"for {i} in tl.range({row.start} + {base}, {row.start} + {self.block(rw.row)} + "
                        f"{rw.taps - 1} + {base}, num_stages={k.num_stages}):  # the tile's input rows", (), keep=lay)
        first = self.fresh("o_row")
        loop.emit(f"{first} = {i} - {base}  # the output row tap 0 of this input row feeds")
        for c in combos:
            sc = self.inline(loop, lay, {rw.tap: 0, **dict(zip(names, c))})
            sc.bound[rw.row] = Bind(rw.row, first, None, "1", True, first)
            xv = self.val(x, sc, lay)
            for t in range(rw.taps):
                sc.emit(f"{acc[t]} = {acc[t]} + {xv} * {weights[(t, c)]}")
            loop.close(sc)
        done = self.fresh("o_row")
        loop.emit(f"{done} = {first} - {rw.taps - 1}  # complete: every tap of it added")
        self.store_row(st, loop, lay, done, acc[-1], row.start)
        loop.emit(f"{', '.join(reversed(acc))} = {', '.join(reversed(acc[:-1]))}, tl.full({shape}, 0, {self.cdt})")
        top.close(loop)

    def inline(self, parent: Scope, lay, literals: dict) -> Scope:
        """A header-less child scope of ``parent`` (printed at its indentation) binding each axis of
        ``literals`` to its integer value."""
        sc = parent.open(None, (), keep=lay)
        for a, v in literals.items():
            sc.bound[a] = Bind(a, str(v), None, "1", True, str(v))
        return sc

    def store_row(self, st, scope: Scope, lay, orow: str, v: str, start: str) -> None:
        """Print the store of output row ``orow`` (value ``v``, in layout ``lay``) of ``st``, masked to the
        program's rows (from ``start``) and the output's."""
        rw = self.k.rolling
        name = self.tensor_arg(st.target, len(st.layout))
        terms = []
        for a in st.layout:
            if a == rw.row:
                terms.append(orow)
                continue
            b, _ = scope.find_bind(a)
            terms.append(b.offs if b.scalar else self.expand1d(b.offs, a, lay))
        rows = f"({orow} >= {start}) & ({orow} < {start} + {self.block(rw.row)}) & ({orow} < {self.size(rw.row)})"
        mask = " & ".join(filter(None, [rows, self.mask_for([a for a in st.layout if a != rw.row], scope, lay)]))
        scope.emit(f"tl.store({self.addr(name, terms)}, ({v}).to({name}_ptr.dtype.element_ty), mask={mask})")
