"""Flat axes over contiguous tensors (the schedule knob ``flat_axes``): several innermost axes of a kernel
covered as one flat index whose tiles are runs of contiguous memory.

Two cases, decided per kernel by :func:`plan_flat` (nothing else changes; the default ``flat_axes=0``
plans no flat axis):

- **Element-wise kernels** (stores over the grid axes, no reduction computed inside: batch norm's output
  pass ``out[n, c, h, w] = (X[n, c, h, w] - mean[c]) * rstd[c] * w[c] + b[c]`` reading materialised
  statistics). The innermost ``m`` grid axes (``2 <= m <= flat_axes``, as many as qualify) become one
  flat grid axis, its block the product of the members' tiles (8 x 512 of (h, w): runs of 4096
  elements). A tile is then a run of the flat index instead of a box of the members.
- **Sums over contiguous axes** (a kernel computing one reduction group of plain sums: the Frobenius
  norm's sum of squares over all of X). The innermost ``m`` reduced axes (in the order of the loads'
  dims) become one flat loop axis, its block the product of the members' blocks (tile of a looped
  member, padded size of a whole one), its split the product of the members' splits: each program sums
  one contiguous run of X (a whole number of blocks) instead of a slab of strided rows.

**Addressing.** A tensor (load or output store) indexed by every member qualifies when the call's
tensor is dense (:attr:`~dtriton.plan.callspec.CallSpec.dense`: contiguous, aligned; the runtime's own
outputs are) and its last dims are the members in order, each a plain axis: its address is then the
flat index itself, past the offsets of its other dims (``KernelPlan.flat_direct``; for a contiguous
tensor the members' offsets add up to exactly the flat index, whatever the strides of its size-1
dims). Tensors indexed by some members only (broadcast operands: ``w[c]``) read at the members' indices
decomposed from the flat one (``(flat // (H * W)) % C``, the printer's decomposition of flat axes).
Where some tensor indexed by every member does not qualify (not contiguous, the members in another
order, a computed index), a smaller ``m`` is tried, and with none the kernel keeps its tiles: never a
wrong address, at worst the ordinary plan. Kernels with dots, persistent loops, TMA access, online or
variance passes are left alone. The flat index is int32 where the members' size buckets multiply to at
most :data:`FLAT_I32_EXTENT` (the int32 arithmetic of tile starts, split chunks and masks cannot
overflow), and int64 in kernels with 64-bit offsets (the flat extent, the tile starts and the members'
decomposition in 64 bits); between the two the kernel keeps its tiles.
"""

from __future__ import annotations

import math
from typing import Mapping

from ..ir import Axis, Const, Load, Reduce, walk
from .graph import fused_reduces
from .implicit_gemm import flat_name
from .kernel import AxisPlan, KernelPlan

__all__ = ["plan_flat", "flat_candidates", "FLAT_I32_EXTENT"]

#: The largest flat extent (product of the members' size buckets) planned: its index arithmetic in int32
#: (tile starts, the split's rounded chunks, the masks) stays below 2**31 with room for a block.
FLAT_I32_EXTENT = 1 << 30


def _loads(k: KernelPlan) -> list[Load]:
    """The kernel's loads (up to the reductions it reads materialised)."""
    return [n for n in walk([st.expr for st in k.stores], stop=lambda n: n.uid in k.materialized)
            if isinstance(n, Load)]


def _plain(n: Load) -> bool:
    return all(isinstance(e, (Axis, Const)) for e in n.index)


def flat_candidates(k: KernelPlan) -> str:
    """Which case of the module's docstring kernel ``k`` is: "grid", "loop" or "" (neither)."""
    if k.gluon is not None or k.flat or k.dots or k.persistent:
        return ""
    if any(st.atomic or st.state or st.in_loop for st in k.stores):
        return ""
    reds = fused_reduces([st.expr for st in k.stores], k.materialized)
    if not reds:
        out = [st for st in k.stores if st.target in k.out_dtypes]
        if out and all(not st.partial_axis and set(k.grid) <= set(st.layout) for st in k.stores) \
                and all(p.role == "grid" for p in k.axes.values()):
            return "grid"
        return ""
    over = set(reds[0].over)
    if any(over & set(st.layout) for st in k.stores):
        return ""   # (a reduced axis also stored over: batch norm fused in one kernel over whole rows)
    ok = all(r.combiner.base == "sum" and r.combiner.results == 1 and not r.combiner.state and set(r.over) == over
             for r in reds)
    return "loop" if ok and all(k.axes[a].role in ("loop", "whole") for a in over) else ""


def plan_flat(k: KernelPlan, want: int | None, dense: frozenset, divisors: Mapping[str, int]) -> None:
    """Give kernel ``k`` one flat axis of up to ``want`` members where the module's docstring allows
    (``want`` 0 or None: none). ``dense``: the call's dense tensors; ``divisors``: axis -> the largest power
    of two up to 256 dividing its size on this call (whether the flat extent divides the block). Sets
    ``k.flat``, the flat axis's plan and the members' role "flat", the grid (or the splits), and
    ``k.flat_direct``; leaves ``k`` unchanged where no run qualifies. Call before the passes are planned."""
    if not want or want < 2:
        return
    case = flat_candidates(k)
    if case == "grid":
        runs = [tuple(k.grid[-m:]) for m in range(min(want, len(k.grid)), 1, -1)]
    elif case == "loop":
        runs = _loop_runs(k, want)
    else:
        return
    for run in runs:
        # 32-bit index arithmetic: the flat extent (bounded by the members' size buckets) plus a block or
        # a split's rounding stays below 2**31 (with 64-bit offsets the flat index is 64-bit)
        if not k.i64 and math.prod(k.size_buckets.get(a, 1 << 31) for a in run) > FLAT_I32_EXTENT:
            continue
        direct = _direct(k, run, dense)
        if direct is not None:
            _flatten(k, run, case, divisors)
            k.flat_direct = {key: k.flat_of(run[0]) for key in direct}
            return


def _loop_runs(k: KernelPlan, want: int) -> list[tuple[str, ...]]:
    """Candidate runs of reduced axes, longest first: the innermost dims of the first load reading every
    reduced axis, while they are reduced axes."""
    over = set(fused_reduces([st.expr for st in k.stores], k.materialized)[0].over)
    for n in _loads(k):
        names = [e.name for e in n.index if isinstance(e, Axis)]
        if _plain(n) and over <= set(names):
            tail: list[str] = []
            for e in reversed(n.index):
                if not isinstance(e, Axis) or e.name not in over or e.name in tail:
                    break
                tail.insert(0, e.name)
            return [tuple(tail[-m:]) for m in range(min(want, len(tail)), 1, -1)]
    return []


def _direct(k: KernelPlan, run: tuple[str, ...], dense: frozenset) -> list | None:
    """The keys of ``k.flat_direct`` for ``run`` (load ids and output names addressed by the flat index),
    or None when some tensor indexed by every member cannot be (see the module's docstring)."""
    m = len(run)
    members = set(run)
    keys: list = []
    for n in _loads(k):
        used = {a for e in n.index for a in e.axes} & members
        if not used:
            continue
        if not _plain(n):
            return None   # (a computed index of a member: left to the ordinary plan)
        if used != members:
            continue      # a broadcast operand: the members' indices decomposed from the flat one
        names = tuple(e.name if isinstance(e, Axis) else None for e in n.index)
        if n.tensor.name not in dense or names[-m:] != run or members & set(names[:-m]):
            return None
        keys.append(n.uid)
    for st in k.stores:
        used = set(st.layout) & members
        if not used:
            continue
        if st.target not in k.out_dtypes:
            if used == members:
                return None   # (a buffer over the members: not in the planned cases)
            continue
        if st.target not in dense or tuple(st.layout[-m:]) != run or members & set(st.layout[:-m]):
            return None
        keys.append(st.target)
    return keys


def _flatten(k: KernelPlan, run: tuple[str, ...], case: str, divisors: Mapping[str, int]) -> None:
    """Replace the members ``run`` by one flat axis (a grid axis at their place, or a loop axis taking
    their splits)."""
    blk, group = 1, 1
    for a in run:
        blk *= k.axes[a].block
        group = max(group, k.axes[a].group)
    name = flat_name(run, k.axes)
    k.flat = {**k.flat, name: run}
    twos = sum(int(math.log2(min(divisors.get(a, 1), 256))) for a in run)
    exact = twos >= int(math.log2(blk))
    if case == "grid":
        k.axes[name] = AxisPlan(name, "grid", blk, exact, group)
        k.grid = [a for a in k.grid if a not in run] + [name]
    else:
        k.axes[name] = AxisPlan(name, "loop", blk, exact)
        splits = list(k.splits)
        factor = math.prod(f for a, f in splits if a in run)
        if factor > 1:
            at = min(i for i, (a, _) in enumerate(splits) if a in run)
            rest = [s for s in splits if s[0] not in run]
            rest.insert(at, (name, factor))
            k.split, k.split_more = rest[0], tuple(rest[1:])
    for a in run:
        p = k.axes[a]
        k.axes[a] = AxisPlan(p.name, "flat", p.block, False)
