"""Strided pooling windows at bandwidth: taps read as contiguous runs, literal strides, 16-bit max/min folds.

A pooling window of stride ``s`` (``dt.max(X.pad(-inf)[n, h * s + r - p, w * s + q - p], over=(r, q))``,
its taps unrolled by :func:`dtriton.plan.taps.plan_static_loops`) reads, per tap, a block of every
``s``-th column: a gather whose lanes are not contiguous, one 2- or 4-byte load a lane, each tap with its
own index arithmetic and bounds tests. Three decisions make it a streaming kernel:

- **Taps as contiguous runs** (:func:`plan_pair_taps`, the schedule's ``window_loads="pairs"``). Tap ``q``
  reads column ``s * w + q - p``; write ``q - p = s * a + b`` (``0 <= b < s``): the taps sharing ``a``
  read the columns ``s * (w + a) + b`` of the same run of ``s * BW`` contiguous columns (``BW``: the
  program's tile of ``w``). That run is loaded once (vector loads; masked to ``0 <= column < W``
  only), reshaped to (..., BW, s) and split in registers (``tl.split``, repeated for s = 4 and 8) into
  its parts ``b``. A 3 x 3 / stride 2 / padding 1 window reads, per input row of an output row, one run
  for the taps ``2w`` and ``2w + 1`` and one strided load for ``2w - 1`` (a lone tap: its run would
  start two columns before the program's aligned start, so it could not use 16-byte loads either, and
  it would move ``s`` times the elements it uses through registers). H200, session 8, 16x64x512x512
  fp16, a hand-written kernel (bench/probe_pool.py): 213.7 us against 248.6 per tap (with the 16-bit
  fold below); fp32 337.0 against 354.8. Strides that are not a power of two up to 8 keep the taps.
- **Literal strides** (:func:`plan_literal_scalars`): the integer arguments of a pooling window's
  index (stride, padding) that the call pins (:attr:`CallSpec.index_values
  <dtriton.plan.callspec.CallSpec>`) are printed as literals, so the index arithmetic folds and the
  runs can be planned at all (sm_90, the 3 x 3 / s2 fp16 program per tap: 374 SASS instructions
  with runtime ``s`` and ``p``, the hand-written kernel's 316).
- **16-bit max/min folds** (:func:`plan_native_folds`, the schedule's ``narrow_minmax``): a window's
  max or min of one fp16/bf16 load folds in that dtype (exact: a max or min rounds nothing; NaN
  propagates as in torch's ``max_pool2d``, ``propagate_nan``), two lanes an instruction, with no
  conversion of the loaded values. Sums keep the compute dtype.
"""

from __future__ import annotations

from typing import Mapping

import torch

from ..ir import Axis, Binary, Const, Expr, Load, Reduce, ScalarParam, Unary, walk
from .access import tile_key
from .graph import fused_reduces
from .kernel import KernelPlan, PairTaps, TileAccess

__all__ = ["PAIR_STRIDES", "WINDOW_LOADS", "plan_literal_scalars", "plan_native_folds", "plan_pair_taps",
           "window_loads"]

#: the strides whose taps may be read as runs (a run's parts come out of repeated ``tl.split``)
PAIR_STRIDES = (2, 4, 8)
#: the values of the schedule's ``window_loads``
WINDOW_LOADS = ("pairs", "taps")


def window_loads(r: Reduce, axes) -> list[Load]:
    """The loads of pooling window ``r`` over its unrolled ``axes``: ``r`` reduces one load (no nested
    reduction), which reads each of ``axes`` through a computed index; empty otherwise."""
    nodes = list(walk([r.x]))
    loads = [n for n in nodes if isinstance(n, Load)]
    if len(loads) != 1 or any(isinstance(n, Reduce) for n in nodes):
        return []
    if not all(any(a in e.axes and not isinstance(e, Axis) for e in loads[0].index) for a in axes):
        return []
    return loads


def _window_passes(k: KernelPlan):
    """``(pass, its one reduction, its load)`` for the program-scope passes of ``k`` that pool one
    load over unrolled window loops (:attr:`KernelPlan.static_loops`)."""
    byid = {r.uid: r for r in fused_reduces([st.expr for st in k.stores], k.materialized)}
    for p in k.passes:
        if (len(p.reductions) != 1 or p.online or p.warp_specialize or not p.loop_axes
                or any(a not in k.static_loops for a in p.loop_axes) or p.reductions[0] in k.dots):
            continue
        r = byid.get(p.reductions[0])
        loads = window_loads(r, p.loop_axes) if r is not None else []
        if loads and r.combiner.results == 1 and not r.combiner.state:
            yield p, r, loads[0]


def plan_literal_scalars(k: KernelPlan, values: Mapping[str, int]) -> dict[str, int]:
    """``{int scalar argument: its value}`` for the arguments of kernel ``k``'s pooling windows'
    indices (stride, padding) whose values the call pins (``values``: :attr:`CallSpec.index_values
    <dtriton.plan.callspec.CallSpec>`); the printer writes them as literals. Empty where ``k`` has
    no unrolled pooling window."""
    out: dict[str, int] = {}
    for _, _, n in _window_passes(k):
        for e in n.index:
            for s in walk([e]):
                if isinstance(s, ScalarParam) and s.name in values:
                    out[s.name] = values[s.name]
    return out


def _affine(e: Expr, values: Mapping[str, int]) -> dict | None:
    """``{axis: coefficient, None: constant}`` of integer index ``e`` where it is affine in its axes
    with coefficients and constant known on the call (literals, scalars of ``values``); None otherwise."""
    if isinstance(e, Axis):
        return {e.name: 1}
    if isinstance(e, Const) and e.integer and e.value.is_integer():
        return {None: int(e.value)}
    if isinstance(e, ScalarParam):
        return {None: values[e.name]} if e.name in values else None
    if isinstance(e, Unary) and e.op == "neg":
        x = _affine(e.x, values)
        return None if x is None else {a: -c for a, c in x.items()}
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
        x, y = _affine(e.a, values), _affine(e.b, values)
        if x is None or y is None:
            return None
        if e.op == "mul":
            if set(x) <= {None}:
                x, y = y, x
            if not set(y) <= {None}:
                return None   # a product of two axes
            f = y.get(None, 0)
            return {a: c * f for a, c in x.items()}
        sign = 1 if e.op == "add" else -1
        out = dict(x)
        for a, c in y.items():
            out[a] = out.get(a, 0) + sign * c
        return out
    return None


def plan_pair_taps(k: KernelPlan, values: Mapping[str, int], mode: str = "pairs") -> dict[int, PairTaps]:
    """``{reduction id: PairTaps}`` for kernel ``k``'s pooling windows whose taps are read as
    contiguous runs (see the module's docstring); empty with ``mode`` "taps" (the schedule's
    ``window_loads``) or where none applies. Needs the static loops, accesses, bounds and read masks
    decided. ``values``: the int scalars the call pins.

    A window qualifies when its pass pools one load (pointer access, no shifted reads) over unrolled
    loops, the innermost of which (the tap ``q``) the load reads in one dim only, its unit-stride dim
    on this call (``k.unit_dims``), as ``w * s + q + c``: ``w`` a grid axis of block 2 or more (not
    flat) that no other dim of the load reads, ``s`` in :data:`PAIR_STRIDES`, ``c`` known; and two
    taps or more share a run. The pass has no loop bounds; the kernel is not rolling."""
    if mode == "taps" or not k.static_loops or k.rolling is not None or k.flat:
        return {}
    out = {}
    for p, r, n in _window_passes(k):
        tap = p.loop_axes[-1]
        dims = [d for d, e in enumerate(n.index) if tap in e.axes]
        key = tile_key(k, n)
        if (len(dims) != 1 or k.shifted_reads.get(n.uid) or k.bounds.get(p.reductions) is not None
                or (key is not None and k.access.get((n.tensor.name, key), TileAccess("pointer")).kind != "pointer")):
            continue
        d = dims[0]
        form = _affine(n.index[d], values)
        if form is None or k.unit_dims.get(n.tensor.name) != d or form.get(tap) != 1:
            continue
        grid = [a for a in form if a not in (None, tap) and form[a] != 0]
        if len(grid) != 1:
            continue
        w, s, c = grid[0], form[grid[0]], form.get(None, 0)
        ax = k.axes.get(w)
        if (s not in PAIR_STRIDES or ax is None or ax.role != "grid" or k.scalar_axis(w) or ax.block < 2
                or any(w in e.axes for j, e in enumerate(n.index) if j != d)):
            continue
        runs: dict[int, list[tuple[int, int]]] = {}
        for q in range(k.static_loops[tap]):
            a, b = divmod(q + c, s)
            runs.setdefault(a, []).append((q, b))
        groups = tuple((a, tuple(parts)) for a, parts in sorted(runs.items()) if len(parts) >= 2)
        if not groups:
            continue
        lone = tuple(q for a, parts in sorted(runs.items()) if len(parts) < 2 for q, _ in parts)
        out[r.uid] = PairTaps(n.uid, d, w, tap, k.static_loops[tap], s, groups, lone)
    return out


def plan_native_folds(k: KernelPlan, want: bool = True) -> tuple[frozenset, frozenset]:
    """``(reduction ids, load ids)``: kernel ``k``'s pooling windows that are a max or min of one
    float16/bfloat16 load, folded in that dtype (exact; see the module's docstring), and those loads,
    printed without conversion. A load qualifies only where the kernel uses it nowhere else (its
    unconverted values feed that fold only). Empty with ``want`` False (the schedule's
    ``narrow_minmax``) or on the interpreter for bfloat16 (numpy has no such dtype)."""
    if not want:
        return frozenset(), frozenset()
    folds, loads = set(), set()
    uses: dict[int, int] = {}
    for x in walk([st.expr for st in k.stores], stop=lambda x: isinstance(x, Reduce) and x.uid in k.materialized):
        for ch in x.children():
            uses[ch.uid] = uses.get(ch.uid, 0) + 1
    for _, r, n in _window_passes(k):
        dt = k.dtypes.get(n.tensor.name)
        if (r.combiner.base in ("max", "min") and r.x is n and uses.get(n.uid) == 1
                and (dt == torch.float16 or (dt == torch.bfloat16 and not k.interpret))):
            folds.add(r.uid)
            loads.add(n.uid)
    return frozenset(folds), frozenset(loads)
