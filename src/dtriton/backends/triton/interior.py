"""Printing a pooling pass twice: unmasked reads for the programs inside the image (``KernelPlan.interior``).

The plan (:func:`dtriton.plan.taps.plan_interior`) lists the masked reads of a pass whose indices are affine
in the program's grid axes and its unrolled window taps. The printer tests, once per program, each such
index at every corner of the box those axes span in the program (a grid axis from its tile's first to its
last index, a tap from 0 to its count minus one); an affine index takes its extremes at corners, so when
every corner lies inside the dim, every lane and tap of the program does. The pass is then printed under
``if inside:`` with those reads unmasked (``Scope.inside_reads``) and under ``if inside == 0:`` as before;
both update the same accumulators.
"""

from __future__ import annotations

import itertools

from ...ir import Axis, Binary, Const, Expr, Load, Reduce, ScalarParam, Unary, walk
from .scope import Scope

__all__ = ["InteriorPrinter"]

_OPS = {"add": "+", "sub": "-", "mul": "*"}


class InteriorPrinter:
    """Mixin of :class:`~dtriton.backends.triton.kernel.KernelPrinter`: interior programs of pooling passes."""

    def interior_test(self, rs: list[Reduce], reads: tuple[tuple[int, int], ...], scope: Scope) -> str:
        """Emit into ``scope`` (the program's) the test that every index of ``reads`` (``(load id, dim)``)
        lies inside its dim at every corner of the program's box; returns the flag's name."""
        loads = {n.uid: n for r in rs for n in walk([r.x]) if isinstance(n, Load)}
        terms = []
        for uid, d in reads:
            n = loads[uid]
            e, size = n.index[d], self.dim_size(n.tensor.dims[d])
            ends = {a: self.axis_ends(a, scope) for a in sorted(set(e.axes))}
            for corner in itertools.product(*ends.values()):
                v = self.fresh("corner")
                scope.emit(f"{v} = {self.affine_text(e, dict(zip(ends, corner)), scope)}  # index {d} of "
                           f"{n.tensor.name} at a corner of the program's box")
                terms.append(f"({v} >= 0) & ({v} < {size})")
        flag = self.fresh("inside")
        scope.emit(f"{flag} = " + " & ".join(terms) + "  # every read of the pool's window inside the image")
        return flag

    def axis_ends(self, a: str, scope: Scope) -> tuple[str, str]:
        """The first and last index of axis ``a`` in this program: an unrolled tap's 0 and count - 1,
        a grid axis's tile (past the axis's end on a last tile: a border program then)."""
        if a in self.k.static_loops:
            return "0", str(self.k.static_loops[a] - 1)
        b, _ = scope.find_bind(a)
        if b.scalar:
            return b.offs, b.offs
        return f"({b.start})", f"({b.start} + {b.block} - 1)"

    def affine_text(self, e: Expr, at: dict[str, str], scope: Scope) -> str:
        """Affine index ``e`` (:func:`dtriton.plan.taps.affine_index`) with each axis at ``at[axis]``."""
        if isinstance(e, Axis):
            return f"({at[e.name]})"
        if isinstance(e, Const):
            return str(int(e.value))
        if isinstance(e, ScalarParam):
            return self.val(e, scope, ())
        if isinstance(e, Unary) and e.op == "neg":
            return f"(-{self.affine_text(e.x, at, scope)})"
        if isinstance(e, Binary) and e.op in _OPS:
            return f"({self.affine_text(e.a, at, scope)} {_OPS[e.op]} {self.affine_text(e.b, at, scope)})"
        raise AssertionError(f"kernel {self.k.name}: index {e} is not affine (plan and printer disagree)")
