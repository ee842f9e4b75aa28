"""Which fused reductions of a kernel become ``tl.dot``, and how their operands are stored.

A contraction is a sum over one axis ``r`` of a product whose factors split into an ``(m, r)``
side and an ``(r, n)`` side (factors free of ``r`` are hoisted out of the sum; factors over ``r`` alone, a per-row scale such as the
reciprocal of a saved softmax sum, join the side computed in registers when the other side is one plain
load, so that load still feeds the dot as loaded and the scale does not decide the dot's dtype). A side's factors are
multiplied in a fixed order: those computed in registers first, then the tiles read from memory
(:func:`reads_last`), whatever order the algorithm (or the chain rule) wrote them in. It becomes a dot
with an fp32 accumulator when ``m``, ``n`` and ``r`` all have blocks of at least 16 and the kernel
computes in fp32 (on the interpreter also in fp64, with an fp64 accumulator). Operands are cast to the 16-bit storage dtype when either side reads only 16-bit
tensors (as FlashAttention casts P before P·V); otherwise the dot is an fp32 dot, where the
schedule's ``precision`` applies (on the GPU).

fp32 dots on tensor cores (Hopper's wgmma) take the right operand from shared memory only when
it is K-major (the reduced axis at unit stride); the matmul probe on the H200 (bench/results/
probe_fp32.json, 4096^3 at tf32x3) ran 1,675 us with a K-major right operand and 3,879 us
without. So for such a dot the side that reads the reduced axis at unit stride goes on the right
(the accumulator is then (n, m) and is laid out back once, after the loop), and the default
precision "auto" resolves to "tf32x3" where one side does and to "ieee" (FMA) where none does.

Narrow operands (:data:`NARROW_OPERANDS`): a contraction whose two sides are each one plain load
of the same fp8 dtype (or a saturating cast to it: activations quantised in the prologue) becomes a
dot of the fp8 operands with an fp32 accumulator; of
int8 tensors, a dot with an int32 accumulator (torch's ``_int_mm``), exact while the reduced axis
is at most :data:`INT8_K_MAX` long (the sum is then widened to int64, its dtype by torch's rules).
Factors free of the reduced axis (per-tensor or per-row scales) are hoisted out as for any dot;
block scales of fp8 operands (``sa[i, k // 128] * sb[k // 128, j // 128]``, constant over each tile
of the reduced axis when the tile divides the scale's block) multiply each tile's dot before it is
added to the accumulator (DotPlan's ``tile_scale``).
Hopper's 8-bit wgmma, as its fp32 one, takes K-major operands from shared memory, so these dots
take the fp32 dots' operand order; Triton needs a reduced block of at least 32 for them on the
GPU. On the interpreter, whose fp8 conversions misread NaN and infinities, fp8 operands are
decoded to fp32 (exact: every fp8 value is an fp32 value) and the dot is an fp32 dot.
"""

from __future__ import annotations

from typing import Mapping

import torch

from ..ir import Axis, Binary, Cast, Const, Expr, Load, Reduce, mul_factors, reads_unit_stride, walk
from ..schedule import AUTO_TENSOR_CORE
from .graph import contains, fused_reduces
from .kernel import DotPlan, KernelPlan

__all__ = ["INT8_K_MAX", "NARROW_OPERANDS", "dot_axis", "dot_dtype", "dot_only_axes", "dot_split", "layout_rank", "plan_dots",
           "reads_last", "transposed_operands"]

#: torch dtype of both operands -> (the dot's operand dtype, its accumulator's dtype)
NARROW_OPERANDS = {torch.float8_e4m3fn: ("float8e4nv", "float32"), torch.float8_e5m2: ("float8e5", "float32"),
                   torch.int8: ("int8", "int32")}
#: the longest reduced axis of an int8 dot, a power of two as the call's size buckets
#: (``KernelPlan.size_buckets``): a sum of at most this many products of int8 values (each at most
#: 128 * 128 = 2**14 in magnitude) stays below 2**31, so the int32 accumulator is exact
INT8_K_MAX = 2 ** 16


def dot_axis(r: Reduce, k: KernelPlan) -> str | None:
    """The axis a dot of ``r`` loops over: its one reduced axis, or the flat axis whose members are
    exactly its reduced axes (an implicit GEMM, :mod:`dtriton.plan.implicit_gemm`); None otherwise."""
    flats = {k.flat_of(a) for a in r.over}
    if len(flats) != 1:
        return None
    f = flats.pop()
    if f in k.flat:
        return f if set(k.flat[f]) == set(r.over) else None
    return f if len(r.over) == 1 else None


def dot_split(r: Reduce, k: KernelPlan, compute_dtype: str, swap: bool = False):
    """Match ``sum over r of (left(m, r) * right(r, n)) * rest`` for tl.dot. Returns
    (left factors, right factors, hoisted factors, m, n) or None. A float64 kernel has dots on
    the interpreter only (one numpy matmul there; the GPU keeps the fp64 multiply-and-sum);
    ``compute_dtype`` "int32" matches an integer dot in any kernel. ``swap``: try the free axes in the other order first (the other side on the right). Members
    of a flat axis (``k.flat``) count as that axis: a conv's (c, r, q) as its flat K, (n, h, w) as
    its flat M."""
    if r.combiner.base != "sum" or r.combiner.results != 1:
        return None
    if compute_dtype == "float64" and not k.interpret:
        return None   # (an integer dot passes "int32")
    ra = dot_axis(r, k)
    if ra is None:
        return None
    over = set(r.over)
    rp = k.axes[ra]
    free = list(dict.fromkeys(k.flat_of(a) for a in r.axes if not k.scalar_axis(a)))
    if len(free) != 2 or rp.block < 16:
        return None
    if any(k.axes[a].block < 16 for a in free):
        return None
    fs = mul_factors(r.x)
    hoist = [f for f in fs if not over & set(f.axes)]
    rest = [f for f in fs if over & set(f.axes)]
    for m, n in ((free[::-1], free) if swap else (free, free[::-1])):
        left, right, loose, ok = [], [], [], True
        for f in rest:
            blk = {k.flat_of(a) for a in set(f.axes) - over if not k.scalar_axis(a)}
            if not blk:
                loose.append(f)
            elif blk <= {m}:
                left.append(f)
            elif blk <= {n}:
                right.append(f)
            else:
                ok = False
                break
        if ok and any(m in _flat_axes(f, k) for f in left) and any(n in _flat_axes(f, k) for f in right):
            if any(contains(f, r, k.materialized) for f in hoist):
                return None
            if loose and _plain_load(left) and not _plain_load(right):
                left, right = left, right + loose
            else:
                left = left + loose
            return reads_last(left, k), reads_last(right, k), hoist, m, n
    return None


def reads_last(fs: list[Expr], k: KernelPlan) -> list[Expr]:
    """The factors ``fs`` of one side of a dot in the order its kernel computes them: the factors
    computed in registers first (``exp(-evals[k] t[c])``), then the tiles read from memory (a
    tensor's load, a materialised stage's buffer), each group in the algorithm's order. So a
    derived product takes the order a hand-written one has whichever order the chain rule
    multiplied it in, and each tile is read just before the multiply that uses it: the derived
    diffusion backward's ``d_x`` side ``d_mul * exp(-evals t)`` is computed as
    ``exp(-evals t) * d_mul``, as the hand-written ``exp(-evals t) * gs`` (sm_90: 118 registers,
    not 122, at V <= 20000, K = C = 128 fp32; bench/diffusion_bwd_regs.py)."""
    def read(f: Expr) -> bool:
        return isinstance(f, Load) or (isinstance(f, Reduce) and f.uid in k.materialized)
    return [f for f in fs if not read(f)] + [f for f in fs if read(f)]


def _plain_load(fs: list[Expr]) -> bool:
    """A dot side that is one plain load (fed to the dot as loaded when in the operand dtype)."""
    return len(fs) == 1 and isinstance(fs[0], Load)


def _flat_axes(f: Expr, k: KernelPlan) -> set[str]:
    """The axes of ``f``, members of a flat axis counted as that axis."""
    return {k.flat_of(a) for a in f.axes}


def dot_dtype(fs: list[Expr], dtypes: Mapping[str, torch.dtype]) -> str | None:
    """Storage dtype of a dot operand: the promoted dtype of the tensors it reads ("float16",
    "bfloat16"), None when it is not a 16-bit type."""
    dts = set()
    for x in walk(fs, stop=lambda x: isinstance(x, (Load, Reduce))):
        if isinstance(x, Load):
            dts.add(dtypes[x.tensor.name])
        elif isinstance(x, Reduce):
            dts.add(torch.float32)
    if dts and dts <= {torch.float16}:
        return "float16"
    if dts and dts <= {torch.bfloat16}:
        return "bfloat16"
    return None


def _raw(fs: list[Expr], dd: str | None, dtypes: Mapping[str, torch.dtype], interpret: bool) -> bool:
    """A side that is one plain load already in the operand dtype feeds the dot as loaded."""
    return (len(fs) == 1 and isinstance(fs[0], Load) and dd is not None and not interpret
            and str(dtypes[fs[0].tensor.name]).replace("torch.", "") == dd)


def _common_dtype(left, right, k: KernelPlan) -> str | None:
    da, db = dot_dtype(left, k.dtypes), dot_dtype(right, k.dtypes)
    return da or db if (da is None) != (db is None) else (da if da == db else None)


def _k_major(r: Reduce, k: KernelPlan, split: tuple, swap_ok: bool):
    """The order of ``split`` (:func:`dot_split`'s, in the algorithm's order, or swapped when
    ``swap_ok``) whose right side reads the reduced axis at unit stride on this call
    (``k.unit_dims``), None when neither does."""
    ra = dot_axis(r, k)
    for cand in (split, dot_split(r, k, k.compute_dtype, swap=True) if swap_ok else None):
        if cand is not None and reads_unit_stride(cand[1], ra, k.unit_dims):
            return cand
    return None


def _fp32_order(r: Reduce, k: KernelPlan, split: tuple, precision: str, swap_ok: bool):
    """The split (``split``: :func:`dot_split`'s, in the algorithm's order) of an fp32 dot and its
    precision on the GPU: with a tensor-core precision (or "auto"), the order whose right side
    reads the reduced axis at unit stride on this call (``k.unit_dims``) when there is one; "auto"
    becomes "tf32x3" then, else "ieee". ``swap_ok`` False keeps the algorithm's order (a
    warp-specialised loop: Triton 3.6 failed to compile a swapped dot's (n, m) accumulator there,
    "tensor descriptor block and tensor types must match", H200 gpu_check)."""
    if precision == "ieee":
        return split, precision
    cand = _k_major(r, k, split, swap_ok)
    if cand is not None:
        return cand, (AUTO_TENSOR_CORE if precision == "auto" else precision)
    return split, ("ieee" if precision == "auto" else precision)


def _tile_constant(f: Expr, ra: str, block: int) -> bool:
    """Whether factor ``f`` is constant along ``ra`` over each tile of ``block`` (tiles start at
    multiples of the block, split-K slices too): ``ra`` appears in it only as ``ra // c`` with ``c``
    a multiple of the block, as in a block scale ``sa[i, k // 128]``."""
    if isinstance(f, Binary) and f.op == "floordiv" and isinstance(f.a, Axis) and f.a.name == ra:
        return isinstance(f.b, Const) and f.b.integer and f.b.value > 0 and f.b.value % block == 0
    if isinstance(f, Axis):
        return f.name != ra
    if isinstance(f, Reduce):
        return False
    return all(_tile_constant(c, ra, block) for c in f.children())


def _narrow_side(fs, ra: str, k: KernelPlan):
    """``(dtype, load, scales)`` of one side of a dot whose operand is one plain load of a narrow
    dtype (:data:`NARROW_OPERANDS`) and whose other factors are block scales (constant over each
    tile of ``ra``, :func:`_tile_constant`); None otherwise."""
    loads = [f for f in fs if ra in f.axes and _narrow_dtype(f, k) is not None]
    if len(loads) != 1:
        return None
    rest = [f for f in fs if f is not loads[0]]
    if not all(_tile_constant(f, ra, k.axes[ra].block) for f in rest):
        return None
    return _narrow_dtype(loads[0], k), loads[0], rest


def _narrow_dtype(f: Expr, k: KernelPlan):
    """The narrow dtype of an operand factor: a plain load of an fp8 or int8 tensor, or a cast to
    fp8 whose values are all finite or NaN (saturating, or e4m3fn, which has no infinity), so the
    GPU's conversion of the computed value to the fp8 dtype is exact; None otherwise."""
    if isinstance(f, Load) and f.is_plain():
        dt = k.dtypes.get(f.tensor.name)
        return dt if dt in NARROW_OPERANDS else None
    if isinstance(f, Cast) and f.dtype in NARROW_OPERANDS and f.dtype.is_floating_point:
        return f.dtype if f.saturate or f.dtype == torch.float8_e4m3fn else None
    return None


def _narrow_dot(r: Reduce, k: KernelPlan, split: tuple, swap_ok: bool) -> DotPlan | None:
    """The :class:`DotPlan` of a contraction of two narrow operands (see the module's text), None
    when ``split`` is not one: sides of other or different dtypes, an int8 sum over more than
    :data:`INT8_K_MAX` or with block scales, a reduced block below 32 on the GPU. Block scales of
    the sides become the dot's ``tile_scale``; the operand order is the one whose right side reads
    the reduced axis at unit stride when there is one (and ``swap_ok``). An int8 dot's sum need not
    be an integer one: float factors free of the reduced axis (W8A8's scales) are hoisted."""
    ra = dot_axis(r, k)
    sl, sr = _narrow_side(split[0], ra, k), _narrow_side(split[1], ra, k)
    if sl is None or sr is None or sl[0] != sr[0]:
        return None
    dt, scales = sl[0], tuple(sl[2]) + tuple(sr[2])
    integer = not dt.is_floating_point
    if integer and (scales or k.size_buckets.get(ra, 2 * INT8_K_MAX) > INT8_K_MAX):
        return None
    if not k.interpret and k.axes[ra].block < 32:
        return None
    left, right, m, n = (sl[1],), (sr[1],), split[3], split[4]
    if swap_ok and not reads_unit_stride(right, ra, k.unit_dims) and reads_unit_stride(left, ra, k.unit_dims):
        left, right, m, n = right, left, n, m
    op, acc = NARROW_OPERANDS[dt]
    upcast = k.interpret and not integer   # the interpreter's fp8 dots: decoded fp32 operands
    raw = [not upcast and isinstance(x[0], Load) for x in (left, right)]   # (a cast is computed, then converted)
    return DotPlan(left, right, tuple(split[2]), m, n, op, k.compute_dtype if upcast else op,
                   raw[0], raw[1], None, acc, ra, scales)


def layout_rank(k: KernelPlan) -> dict[str, int]:
    """Axis -> position in the program's block layout: the tiled grid axes in grid order, then the
    whole axes, then the looped ones (each loop's scope appends its axis), as the printer lays
    values out."""
    order = [a for a in k.grid if not k.scalar_axis(a)]
    order += [a for a, p in k.axes.items() if p.role == "whole" and a not in order]
    order += [a for a, p in k.axes.items() if a not in order]
    return {a: i for i, a in enumerate(order)}


def _layout_order(r: Reduce, k: KernelPlan, split: tuple) -> tuple:
    """The split of a 16-bit dot whose free axes ``(m, n)`` follow the program's layout order
    (:func:`layout_rank`): the result, and an operand computed in the program's layout, need no
    transpose. In a derived attention backward's dK/dV kernel (key tiles on the grid, queries
    looped) the scores come out as ``[key, query]`` tiles with the key tile as the MMA's M side
    (wgmma on Hopper), not as ``[query, key]`` tiles transposed at every step; dV accumulates
    ``[key, e]`` from the probabilities in the same layout, so they are computed once."""
    rank = layout_rank(k)
    m, n = split[3], split[4]
    if rank.get(m, 0) <= rank.get(n, 0):
        return split
    other = dot_split(r, k, k.compute_dtype, swap=True)
    return other if other is not None and other[3] == n else split


def plan_dot(r: Reduce, k: KernelPlan, precision: str, swap_ok: bool = True) -> DotPlan | None:
    """The :class:`DotPlan` of fused reduction ``r`` of kernel ``k`` (None: not a dot).
    ``precision``: the schedule's (:data:`~dtriton.schedule.PRECISIONS`); the order and precision
    of an fp32 dot follow the call's unit-stride dims (``k.unit_dims``), the order of other dots
    the program's layout (:func:`layout_rank`; unless ``swap_ok`` is False). Integer sums fold
    exactly in int64, not on tensor cores, unless they are int8 dots (:data:`NARROW_OPERANDS`)."""
    integer = r.uid in k.int_acc
    split = dot_split(r, k, "int32" if integer else k.compute_dtype)
    if split is None:
        return None
    narrow = _narrow_dot(r, k, split, swap_ok)
    if narrow is not None or integer:
        return narrow
    interpret = k.interpret
    common = _common_dtype(split[0], split[1], k)
    if common is None and k.compute_dtype == "float32":
        # the interpreter takes the same operand order (so its tests cover it), no precision
        split, precision = _fp32_order(r, k, split, precision, swap_ok)
    elif swap_ok:
        split = _layout_order(r, k, split)
    left, right, hoist, m, n = split
    return DotPlan(tuple(left), tuple(right), tuple(hoist), m, n, common,
                   k.compute_dtype if interpret else common,
                   _raw(left, common, k.dtypes, interpret), _raw(right, common, k.dtypes, interpret),
                   precision if common is None and not interpret else None,
                   "float64" if k.compute_dtype == "float64" else "float32", dot_axis(r, k) or "")


def plan_dots(k: KernelPlan, precision: str, swap_ok: bool = True) -> dict[int, DotPlan]:
    """The dots of every fused reduction of kernel ``k`` (see :func:`plan_dot`)."""
    out = {}
    for r in fused_reduces([st.expr for st in k.stores], k.materialized):
        d = plan_dot(r, k, precision, swap_ok)
        if d is not None:
            out[r.uid] = d
    return out


def transposed_operands(k: KernelPlan) -> frozenset:
    """Loads that dots of kernel ``k`` take as plain 16-bit operands in both orientations (an
    attention backward's dK/dV kernel reads dO as ``[e, i]`` for dP and as ``[i, e]`` for dV, and Q
    as ``[d, i]`` and ``[i, d]``): each is loaded once and the other orientation is a ``tl.trans``
    of the tile (as FlashAttention-2's Triton kernels do), not a second strided load and a
    second shared-memory copy per pipeline stage. Not on the interpreter (its 16-bit dots take
    fp32 operands)."""
    seen: dict[int, set[tuple[str, str]]] = {}
    for red in fused_reduces([st.expr for st in k.stores], k.materialized):
        d = k.dots.get(red.uid)
        if d is None:
            continue
        r = d.k or red.over[0]   # the axis the dot reduces, as the printer lays its operands out
        for raw, side, lay in ((d.raw_left, d.left, (d.m, r)), (d.raw_right, d.right, (r, d.n))):
            if raw:
                seen.setdefault(side[0].uid, set()).add(lay)
    return frozenset(u for u, lays in seen.items() if any((b, a) in lays for a, b in lays))


def dot_only_axes(k: KernelPlan) -> frozenset:
    """Whole axes that appear only inside tl.dot operands (reduced by contractions and kept in
    no output): they need offsets but no dim in the program's layout, which keeps every other
    value of the kernel lower-rank."""
    out = set()
    store_axes = {a for st in k.stores for a in st.layout}
    reds = fused_reduces([st.expr for st in k.stores], k.materialized)
    for a, p in k.axes.items():
        if p.role != "whole" or a in store_axes:
            continue
        over = [r for r in reds if a in r.over]
        users = [r for r in reds if a in r.x.axes and a not in r.over]
        if over and not users and all(r.uid in k.dots for r in over) and _only_inside(a, over, k):
            out.add(a)
    return frozenset(out)


def _only_inside(a: str, over: list[Reduce], k: KernelPlan) -> bool:
    """No node of the kernel's stores outside the reductions ``over`` uses axis ``a``."""
    inside = {n.uid for n in walk([r.x for r in over])}

    def is_over(n: Expr) -> bool:
        return isinstance(n, Reduce) and any(n is r for r in over)
    for n in walk([st.expr for st in k.stores], stop=lambda n: n.uid in inside or is_over(n)):
        if n.uid not in inside and a in n.axes and not is_over(n):
            return False
    return True
