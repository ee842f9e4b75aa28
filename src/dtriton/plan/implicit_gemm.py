"""Convolutions as implicit GEMMs: flat axes for a contraction over several axes.

A convolution written in index notation,
``dt.sum(X.pad(0)[n, h*s + r*d - p, w*s + q*d - p, c] * W[o, r, q, c], over=(c, r, q))[n, h, w, o]``,
is a contraction whose reduced axes (c, r, q) and whose output rows (n, h, w) are each several
axes. ``tl.dot`` takes one K and one M, so the plan gives each side a *flat axis*: one index
``k`` over C*R*Q values and one ``m`` over N*Ho*Wo, tiled as one axis (``k`` in a loop, ``m`` on
the grid). The members' indices are decomposed from the flat one by ``//`` and ``%`` (the printer
prints that decomposition and nothing else), so every load and store keeps its index expressions
and its masks: padding and the flat axis's tail mask the gathered loads of X.

The decision, per kernel (:func:`plan_implicit_gemm`): the kernel's one fused reduction is a sum
over two or more axes, each looped or whole and none split; its factors fall into two sides (the
input's and the weight's) once the reduced axes count as one; then

- K: the reduced axes, ordered so that the axis read at the smallest stride is innermost (c for
  channels-last tensors, ``X[n, h, w, c]`` and ``W[o, r, q, c]``: every K tile reads runs of
  contiguous channels; q for ``X[n, c, h, w]``). Its block is the product of the looped members'
  tiles (whole members count 1), at least 16; with no looped member, the product of the whole
  blocks up to 64.
- M: where the side with several free axes has them all on the grid (tile 1 counts), those axes
  in the output's order (n, h, w of ``out[n, h, w, o]``), block the product of their tiles. With
  flat M a 56x56 image is 3136 rows in 128-row tiles (24.5 tiles, not 56 rows of 64-wide tiles
  of 56 columns).

**Boxes.** Where the kernel reads the input through TMA (access "tma", the input addressable), K
steps one tap at a time, and each index of the input is an output row axis, such an axis plus
scalars of the tap (a shift: ``h + r - 1`` when the call's stride is 1, :func:`~dtriton.ir.shift_of`)
or the channel, each M tile is a *box* of the row axes (``KernelPlan.flat_box``: its tiles, e.g. 2 x
8 x 8 of (n, h, w)) rather than a run of the flat index, and the input's tile of each tap is one TMA
box ``[BN, BH, BW, BC]`` at ``(n0, h0 + r - 1, w0 + q - 1, c0)``: TMA fills the coordinates outside
the tensor (negative ones too) with zeros, which is the padding. ``KernelPlan.shifted_reads`` holds
each shifted dim's member and its index at that member 0 (the box's offset past the tile start).
Boxes are taken where they waste few rows: each member's tile divides its size, or its size is at
least :data:`BOX_WASTE` times the tile. Other strides, a padding value other than 0, channels that are
not the innermost dim keep the gathered pointer loads.

The flat axes are kept only where the contraction then is a dot (:func:`dtriton.plan.dots.dot_split`);
both are masked (their extent is a product of sizes). The members keep their
:class:`~dtriton.plan.kernel.AxisPlan` with role "flat".
"""

from __future__ import annotations

from ..ir import Axis, Load, Reduce, contraction_sides, mul_factors, reduced_order, shift_of
from .dots import dot_split
from .graph import fused_reduces
from .kernel import AxisPlan, KernelPlan

__all__ = ["flat_name", "plan_implicit_gemm"]

#: the largest flat K block taken from whole members alone
WHOLE_K_CAP = 64
#: a box's member whose tile does not divide its size needs a size bucket this many times the tile
BOX_WASTE = 16


def flat_name(members: tuple[str, ...], taken) -> str:
    """The name of the flat axis of ``members`` (their names joined, outermost first), not one of
    ``taken``."""
    name = "".join(members)
    while name in taken:
        name += "_"
    return name


def plan_implicit_gemm(k: KernelPlan, style: str | None = None, tma_ok: frozenset = frozenset(),
                       ones: frozenset = frozenset()) -> None:
    """Give kernel ``k`` flat K and M axes where its one fused reduction is a contraction over
    several axes that then lowers to ``tl.dot`` (see the module's docstring). Sets ``k.flat``,
    the flat axes' plans, the members' role "flat" and the grid, and where the input is read in
    TMA boxes ``k.flat_box`` and ``k.shifted_reads``; leaves ``k`` unchanged otherwise. ``style``:
    the schedule's access; ``tma_ok``: the tensors TMA can address on this call; ``ones``: the
    integer scalars equal to 1 on it. Needs ``k.compute_dtype``, ``k.interpret``, ``k.i64``,
    ``k.size_buckets`` and ``k.unit_dims`` decided."""
    reds = fused_reduces([st.expr for st in k.stores], k.materialized)
    if len(reds) != 1:
        return
    r = reds[0]
    if (r.combiner.base != "sum" or r.combiner.results != 1 or len(r.over) < 2 or r.uid in k.int_acc):   # (integer sums fold in int64, not on tensor cores)
        return
    if any(a in r.over for a in k.split_axes) or any(k.axes[a].role not in ("loop", "whole") for a in r.over):
        return
    sides = contraction_sides(r, k.scalar_axis)
    if sides is None:
        return
    order = {a: i for i, a in enumerate(k.stores[0].layout)}
    sides = [sorted(s, key=lambda a: order.get(a, len(order))) for s in sides]
    saved = (dict(k.axes), list(k.grid), dict(k.flat), k.flat_scalar_outer, dict(k.flat_box), dict(k.shifted_reads))
    korder = reduced_order(r, k.unit_dims)
    kname = flat_name(korder, k.axes)
    k.flat[kname] = korder
    blk, inner = _k_block(r, k), k.axes[korder[-1]]
    # channels-last steps: the innermost member's tile is the whole K block and divides its size,
    # so each K tile reads one (r, q) tap and contiguous channels; the outer members are one
    # index per tile (scalars: the gathered rows' indices and masks are 1-d), no tail mask
    steps = inner.role == "loop" and inner.divisible and inner.block == blk
    k.axes[kname] = AxisPlan(kname, "loop", blk, steps)
    if steps:
        k.flat_scalar_outer = k.flat_scalar_outer | {kname}
    m_side = [s for s in sides if len(s) >= 2]
    if len(m_side) == 1 and all(k.axes[a].role == "grid" for a in m_side[0]):
        shifts = _box_reads(r, k, m_side[0], korder, style, tma_ok, ones) if steps else None
        box = tuple(k.axes[a].block for a in m_side[0]) if shifts is not None else None
        _flatten_rows(k, m_side[0], box)
        k.shifted_reads = {**k.shifted_reads, **(shifts or {})}
    for a in k.flat[kname]:
        k.axes[a] = _member(k.axes[a])
    if dot_split(r, k, k.compute_dtype) is None:
        k.axes, k.grid, k.flat, k.flat_scalar_outer, k.flat_box, k.shifted_reads = saved


def _member(p: AxisPlan) -> AxisPlan:
    return AxisPlan(p.name, "flat", p.block, False)


def _k_block(r: Reduce, k: KernelPlan) -> int:
    """The flat K block: the product of the looped members' tiles (whole members count 1), at
    least 16; with no looped member, the whole blocks' product, 16 to :data:`WHOLE_K_CAP`."""
    looped = [k.axes[a].block for a in r.over if k.axes[a].role == "loop"]
    blk = 1
    for b in looped or [k.axes[a].block for a in r.over]:
        blk *= b
    return max(16, blk if looped else min(blk, WHOLE_K_CAP))


def _box_reads(r: Reduce, k: KernelPlan, members: list[str], korder: tuple[str, ...], style, tma_ok,
               ones) -> dict | None:
    """``{load id: {dim: (member, index at member 0)}}`` for the input of conv ``r`` read in TMA
    boxes over the output rows ``members`` (grid axes, outermost first) and the innermost reduced
    axis ``korder[-1]`` (see the module's docstring); None where that does not hold."""
    loads = [f for f in mul_factors(r.x) if isinstance(f, Load) and set(members) & set(f.axes)]
    if style != "tma" or k.i64 or len(loads) != 1:
        return None
    n, inner = loads[0], korder[-1]
    name, ndim = n.tensor.name, len(n.index)
    if (name not in tma_ok or ndim > 5 or n.pad not in (None, 0.0) or k.unit_dims.get(name, ndim - 1) != ndim - 1
            or k.dtypes[name].itemsize * k.axes[inner].block < 16):
        return None
    fixed = set(korder[:-1]) | {a for a in k.axes if k.scalar_axis(a)}   # one index per K tile or program
    order, shifts = [], {}
    for d, e in enumerate(n.index):
        if isinstance(e, Axis):
            order.append(e.name)
            continue
        hit = [m for m in members if m in e.axes]
        at0 = shift_of(e, hit[0], ones) if len(hit) == 1 and set(e.axes) - {hit[0]} <= fixed else None
        if at0 is None:
            return None
        order.append(hit[0])
        shifts[d] = (hit[0], at0)
    if order != list(members) + [inner] or max(k.axes[a].block for a in order) > 256:
        return None
    for m in members:   # few wasted rows: tiles divide their sizes, or the sizes are long
        p = k.axes[m]
        if not p.divisible and k.size_buckets.get(m, 0) < BOX_WASTE * p.block:
            return None
    return {n.uid: shifts}


def _flatten_rows(k: KernelPlan, members: list[str], box: tuple[int, ...] | None = None) -> None:
    """Replace the grid axes ``members`` (the output rows of a conv) by one flat grid axis at the
    first one's place; its block is the product of their tiles. ``box``: their tiles, when each
    tile of the flat axis is a box of them (``k.flat_box``; masked unless every tile divides)."""
    blk, group = 1, 1
    for a in members:
        blk *= k.axes[a].block
        group = max(group, k.axes[a].group)
    name = flat_name(tuple(members), k.axes)
    k.flat[name] = tuple(members)
    exact = box is not None and all(k.axes[a].divisible for a in members)
    k.axes[name] = AxisPlan(name, "grid", blk, exact, group)
    if box is not None:
        k.flat_box[name] = box
    at = min(k.grid.index(a) for a in members)
    grid = [a for a in k.grid if a not in members]
    grid.insert(sum(1 for a in k.grid[:at] if a not in members), name)
    k.grid = grid
    for a in members:
        k.axes[a] = _member(k.axes[a])
