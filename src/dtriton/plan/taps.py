"""A depthwise convolution's (or a pooling's) window loops unrolled: every tap's loads issue together.

A depthwise convolution (``dt.sum(X.pad(0)[n, h + r - 1, w + q - 1, c] * Wt[r, q, c], over=(r, q))``)
is no GEMM: the schedule loops over its window's taps one index at a time (tile 1), each step
reading a block of the input shifted by the tap. As ``range`` loops over runtime sizes, one tap's
loads are issued, waited for and used before the next tap's (the accumulator depends on them), so
each program keeps one block in flight. Where the window's sizes are known on the call (small:
exact from the call's size facts, :attr:`CallSpec.small_sizes <dtriton.plan.callspec.CallSpec>`),
the plan makes those loops ``tl.static_range`` over the exact count: the nine taps of a 3 x 3
window are nine straight-line steps whose loads the compiler issues back to back.

The decision (:func:`plan_static_loops`), per program-scope pass of kernel ``k``: a pass without
dots, not warp-specialised, whose reductions are all sums of products with two or more loads
reading each loop axis, one of them through a computed index (a window: ``h + r - 1``), loops over
axes of tile 1 whose sizes are known and whose product is at most :data:`MAX_TAPS`. A pooling
window (one load reading each loop axis through a computed index: ``X.pad(-inf)[n, h * s + r - p,
w * s + q - p]``) unrolls the same way: looped, the max pool 3x3/s2 of 16x64x512x512 fp16 waited for
each tap's loads in turn (s5 H200: 394 us, ~10 instructions an element-tap, rolled). Everything else
keeps its loops.

**The tile loop pipelined.** With the taps unrolled, a persistent kernel's program scope (the
schedule's ``persistent``: a fixed grid of programs, each looping over output tiles) has no runtime
loop left but the tile loop itself. :func:`plan_tile_stages` has it printed as ``tl.range(...,
num_stages=S)`` (the schedule's ``num_stages``): Triton's pipeliner then issues the next tiles'
loads (``cp.async`` into shared memory) while this tile's taps are summed and stored, instead of a
program waiting for its loads once per tile.

**Taps in TMA boxes.** Under TMA access (the schedule's ``access="tma"``), a window sum's input whose
every index is a grid axis, or a grid axis shifted by the taps (``h + r - 1`` at stride 1:
:func:`~dtriton.ir.shift_of`), is read one TMA box per tap (:func:`plan_tap_boxes`): the box of the
program's tile at ``(n, h0 + r - 1, w0 + q - 1, c0)``, whose coordinates outside the tensor (negative
ones too) read zeros, which is the padding: no address arithmetic, masks or zero-fill selects per
element, and the loads are asynchronous (pipelined across the tiles of a persistent kernel).
Under pointer access such a load's address is printed as the tile's address block, the same for every
tap (computed once), plus the tap's scalar shift times the strides (:func:`plan_tap_shifts`).

**Rolling rows** (the schedule's ``rolling``, :func:`plan_rolling`). Unrolled taps still load and convert
every input element once per tap: nine times for a 3 x 3 window, and the kernel is bound by the
instructions it issues. Where the window slides along an output row axis (``h + r - 1``), a program may
instead walk its tile's input rows once, in a loop: each input row is loaded once per value of the other
window axes (three column shifts) and added, with each tap's weight, into the accumulators of the ``R``
output rows it feeds; after each input row the oldest accumulator is complete, stored, and the
accumulators rotate. Loads and conversions drop from ``R * Q`` to ``Q`` an element.
"""

from __future__ import annotations

from typing import Mapping

import torch

from ..ir import Axis, Load, is_sum, mul_factors, shift_of, walk
from .graph import fused_reduces
from .kernel import KernelPlan, RollingWindow

__all__ = ["MAX_TAPS", "plan_rolling", "plan_static_loops", "plan_tap_shifts", "plan_tile_stages"]

#: the most unrolled steps (the product of a pass's static loop counts)
MAX_TAPS = 32


def plan_static_loops(k: KernelPlan, small: Mapping[str, int], unroll: int = 0) -> dict[str, int]:
    """``{loop axis: its exact size}`` for the window loops of kernel ``k`` emitted as
    ``tl.static_range`` (see the module's docstring); ``small``: axis -> size, for the sizes the
    call pins exactly; ``unroll``: the schedule's knob (1: loops are not unrolled, none is static).
    Empty where none applies."""
    if unroll == 1:
        return {}
    byid = {r.uid: r for r in fused_reduces([st.expr for st in k.stores], k.materialized)}
    out: dict[str, int] = {}
    for p in k.passes:
        axes = p.loop_axes
        if not axes or p.warp_specialize or any(u in k.dots for u in p.reductions):
            continue
        if any(k.axes[a].role != "loop" or k.axes[a].block != 1 or a not in small
               or a in k.split_axes for a in axes):
            continue
        count = 1
        for a in axes:
            count *= small[a]
        if count <= MAX_TAPS and all(_window_sum(byid[u], axes) or _window_pool(byid[u], axes) for u in p.reductions):
            out.update({a: small[a] for a in axes})
    return out


def _window_sum(r, axes) -> bool:
    """``r`` is a sum of products in which two or more loads read each of ``axes``, one of them
    through a computed index (a depthwise convolution's input and its weight)."""
    if not is_sum(r) or r.combiner.base != "sum":
        return False
    loads = [f for f in mul_factors(r.x) if isinstance(f, Load)]
    for a in axes:
        readers = [n for n in loads if a in n.axes]
        if len(readers) < 2 or not any(a in e.axes and not isinstance(e, Axis) for n in readers for e in n.index):
            return False
    return True


def _window_pool(r, axes) -> bool:
    """``r`` pools one load over ``axes``, each read through a computed index (a max pooling's
    ``X.pad(-inf)[n, h * s + r - p, w * s + q - p]``): its taps' loads issue together too."""
    loads = [n for n in walk([r.x]) if isinstance(n, Load)]
    return len(loads) == 1 and all(any(a in e.axes and not isinstance(e, Axis) for e in loads[0].index) for a in axes)


def plan_tile_stages(k: KernelPlan) -> int:
    """The stages of kernel ``k``'s pipelined persistent tile loop (see the module's docstring):
    ``k.num_stages`` where ``k`` is persistent, its num_stages is 2 or more, it has unrolled window
    loops (``k.static_loops``, decided first) and every loop of its program scope is one of them;
    0 (a plain ``range``) otherwise."""
    if not k.persistent or k.num_stages < 2 or not k.static_loops:
        return 0
    passes = list(k.passes) + list(k.single.values())
    if any(a not in k.static_loops for p in passes for a in p.loop_axes):
        return 0
    return k.num_stages


def plan_tap_shifts(k: KernelPlan, style: str | None, tma_ok: frozenset, ones: frozenset) -> dict:
    """``{load id: {dim: (grid axis, index at its tile start)}}`` for the inputs of kernel ``k``'s
    window sums whose index is the tile's shifted by the tap (the form of
    :attr:`KernelPlan.shifted_reads`; see the module's docstring); empty where none is.
    ``style``: the schedule's access; ``tma_ok``: the tensors TMA can address on this call;
    ``ones``: the integer scalars equal to 1 on it.

    A load qualifies when it is a factor of a sum over loop axes of tile 1 (the taps) and indexes one
    of them, and every dim is a grid axis or one plus an expression of the taps and tile-1 axes with
    coefficient 1 on the call. Under TMA access it is read one box per tap, where TMA can address it:
    padding 0 (or none), its last dim its unit-stride dim indexed by a grid axis whose tile holds 16
    bytes or more, at most 5 dims (else, and under pointer access, its address is the tile's, the
    same for every tap, plus the tap's shift times the strides). Needs ``k.i64``, ``k.unit_dims``
    and ``k.dtypes``; not for kernels with flat axes (a conv's implicit GEMM reads its boxes itself:
    :mod:`dtriton.plan.implicit_gemm`), nor under block pointers."""
    if style == "block_ptr" or k.i64 or k.flat:
        return {}
    out = {}
    for r in fused_reduces([st.expr for st in k.stores], k.materialized):
        taps = set(r.over)
        if not is_sum(r) or any(k.axes[a].role != "loop" or k.axes[a].block != 1 for a in taps):
            continue
        fixed = taps | {a for a in k.axes if k.scalar_axis(a)}
        for n in mul_factors(r.x):
            if isinstance(n, Load) and taps & set(n.axes):
                shifts = _tap_shifts(k, n, fixed, ones)
                if shifts and (style != "tma" or _boxable(k, n, tma_ok)):
                    out[n.uid] = shifts
    return out


def _boxable(k: KernelPlan, n: Load, tma_ok: frozenset) -> bool:
    """TMA can read load ``n``'s tile as a box (:func:`plan_tap_shifts`)."""
    name, ndim = n.tensor.name, len(n.index)
    last = n.index[-1]
    return (name in tma_ok and ndim <= 5 and n.pad in (None, 0.0) and k.unit_dims.get(name, ndim - 1) == ndim - 1
            and isinstance(last, Axis) and k.axes[last.name].role == "grid"
            and k.dtypes[name].itemsize * k.axes[last.name].block >= 16)


def _tap_shifts(k: KernelPlan, n: Load, fixed: set, ones: frozenset) -> dict | None:
    """The shifted dims of load ``n`` (:func:`plan_tap_shifts`), or None."""
    used, shifts = [], {}
    for d, e in enumerate(n.index):
        if isinstance(e, Axis):
            hit, at0 = e.name, None
        else:
            grid = [a for a in e.axes if k.axes[a].role == "grid" and not k.scalar_axis(a)]
            hit = grid[0] if len(grid) == 1 and set(e.axes) - {grid[0]} <= fixed else None
            at0 = shift_of(e, hit, ones) if hit else None
            if at0 is None:
                return None
            shifts[d] = (hit, at0)
        if k.axes[hit].role != "grid" or hit in used or k.axes[hit].block > 256:
            return None
        used.append(hit)
    return shifts or None


def plan_rolling(k: KernelPlan, want: bool, ones: frozenset) -> tuple[RollingWindow | None, str]:
    """The rolling-rows plan of kernel ``k`` (see the module's docstring) where the schedule asks for it
    (``want``) and it applies, with ``""``; else None and why it does not apply (``""`` where not
    asked): the condition not met and, where there is one, the schedule change that meets it.
    ``ones``: the integer scalars equal to 1 on the call.
    Needs every other decision made (static loops, accesses, read masks). It applies to a kernel (not
    persistent, not split, no flat axes, no TMA or block-pointer tiles) that stores one output, in
    float16 or float32, exactly a sum over window axes all unrolled (``k.static_loops``) of the product
    of two loads: the input, one of whose dims is a grid axis of tile 2 or more plus a window axis plus
    scalars (coefficients 1 on the call), masked to its dim, and a weight that does not read that
    grid axis, indexed by plain axes."""
    if not want:
        return None, ""
    if k.persistent or k.split or k.flat:
        what, fix = (("persistent", "persistent=0") if k.persistent else ("split", "no split") if k.split
                     else ("flat", "no flat_axes"))
        return None, f"the kernel is {what} (give {fix})"
    if any(acc.kind != "pointer" for acc in k.access.values()):
        return None, "its tiles are not read through pointers (give access='pointer')"
    if len(k.stores) != 1:
        return None, f"the kernel stores {len(k.stores)} outputs, not one window sum"
    st = k.stores[0]
    reds = fused_reduces([st.expr], k.materialized)
    if len(reds) != 1 or reds[0] is not st.expr or k.out_dtypes.get(st.target) not in (torch.float16, torch.float32):
        return None, f"its output {st.target} is not one window sum stored in float16 or float32"
    r = reds[0]
    factors = mul_factors(r.x)
    if (not is_sum(r) or r.combiner.base != "sum" or len(factors) != 2 or not all(isinstance(f, Load) for f in factors)
            or any(k.axes[a].role != "grid" for a in st.layout)):
        return None, f"its output {st.target} is not a sum of the product of two loads (input and weight) over the grid"
    loose = [a for a in r.over if a not in k.static_loops]
    if loose:
        how = ", ".join(f"{a!r} is {k.axes[a].role!r} in blocks of {k.axes[a].block}" for a in loose)
        return None, (f"its window axes are not unrolled one tap a step ({how}): give strategy={ {a: 'loop' for a in r.over} } and "
                      f"tile={ {a: 1 for a in r.over} } (at most {MAX_TAPS} taps in all)")
    for x, wt in (factors, factors[::-1]):
        found = _rolled_dim(k, x, r.over, ones)
        if found is None or found[0] in wt.axes or not all(isinstance(e, Axis) for e in wt.index):
            continue
        row, tap, base, dim = found
        others = tuple((a, k.static_loops[a]) for a in r.over if a != tap)
        return RollingWindow(r.uid, row, tap, k.static_loops[tap], base, x.uid, dim, wt.uid, others), ""
    short = [a for a in st.layout if k.axes[a].block < 2
             and any(a in e.axes and not isinstance(e, Axis) for f in factors for e in f.index)]
    return None, ("no input dim is indexed by an output row axis of tile 2 or more plus one window axis at "
                  "stride 1 (h + r - padding)" + (f": give {short[0]!r} a tile of 2 or more" if short else
                                                   ": a stride other than 1 keeps the unrolled taps"))


def _rolled_dim(k: KernelPlan, x: Load, over, ones: frozenset):
    """``(row axis, tap axis, index at both 0, dim)`` of load ``x``'s dim indexed by a grid axis of tile
    2 or more plus a window axis of ``over`` plus scalars, masked to its dim; None where there is none."""
    for d, e in enumerate(x.index):
        if isinstance(e, Axis) or d not in k.read_masks.get(x.uid, ()):
            continue
        rows = [a for a in e.axes if a not in over and k.axes[a].role == "grid" and k.axes[a].block >= 2]
        taps = [a for a in e.axes if a in over]
        if len(rows) != 1 or len(taps) != 1 or len(e.axes) != 2:
            continue
        at_row = shift_of(e, rows[0], ones)
        base = shift_of(at_row, taps[0], ones) if at_row is not None else None
        if base is not None and not base.axes:
            return rows[0], taps[0], base, d
    return None
