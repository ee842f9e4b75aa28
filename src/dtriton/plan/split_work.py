"""Split programs left without work: a split axis whose tile is too large for its slices (or that one
block covers whole) leaves some of the ``split`` programs of each tile idle. Found per call from the
call's sizes, reported as a ScheduleWarning naming the tile that would give every slice work."""

from __future__ import annotations

from typing import Collection, Mapping

from ..schedule.split_rules import slices_with_work
from .kernel import Program

__all__ = ["idle_split_slices"]


def idle_split_slices(prog: Program, sizes: Mapping[str, int], asked: Collection[str]) -> list[str]:
    """One note per axis of ``asked`` (the axes the user's schedule splits) that a kernel of ``prog``
    splits with a tile leaving split programs idle at the axis sizes ``sizes`` (axis -> elements), with
    the largest tile that gives each of them work."""
    notes = []
    for k in prog.kernels:
        for a, f in k.splits:
            ap, n = k.axes.get(a), sizes.get(a)
            if ap is None or not n or a not in asked:
                continue   # (an empty axis: nothing to do, whatever the split)
            busy = slices_with_work(n, f, ap.block, k.split_interleaved)
            if busy >= f:
                continue
            best = slices_with_work(n, f, 1, k.split_interleaved)   # the most any tile gives work
            if busy >= best:   # no tile helps: the slices are too many for the axis
                notes.append(f"split={{{a!r}: {f}}}: kernel {k.name} splits {_elements(n)} of axis {a!r} {f} ways "
                             f"(slices of {-(-n // f)}), so only {best} of its {f} split programs can get work "
                             f"whatever the tile; " + (f"split {a!r} at most {best} ways" if best > 1
                                                       else f"drop the split of {a!r}"))
                continue
            fit = ap.block
            while fit > 1 and slices_with_work(n, f, fit, k.split_interleaved) < best:
                fit //= 2
            how = (f"covers axis {a!r} whole (one block of {ap.block})" if ap.role == "whole"
                   else f"steps over axis {a!r} in tiles of {ap.block}")
            fix = (f"give strategy {{{a!r}: 'loop'}} and a tile of at most {fit} for {a!r}" if ap.role == "whole"
                   else f"give a tile of at most {fit} for {a!r}")
            more = "" if best >= f else f" ({best} of them: no tile feeds all {f})"
            notes.append(f"split={{{a!r}: {f}}}: kernel {k.name} {how} of {_elements(n)}, so only {busy} of its {f} "
                         f"split programs get work; {fix} (the schedule's or the stage's tile){more}, or "
                         + (f"drop the split of {a!r}" if busy == 1 else f"split {a!r} at most {busy} ways"))
    return notes


def _elements(n: int) -> str:
    """``"its 1 element"`` / ``"its 7 elements"``."""
    return f"its {n} element" + ("" if n == 1 else "s")
