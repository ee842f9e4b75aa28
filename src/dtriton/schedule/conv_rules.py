"""The heuristic's rules for convolutions: tiles of an implicit GEMM (:func:`conv_tiles`).

A convolution is a sum over several axes whose product has an input side (the output rows:
n, h, w) and a weight side (o) (:func:`dtriton.ir.convolutions`). The plan runs it as one GEMM
(:mod:`dtriton.plan.implicit_gemm`): M flat over the rows' grid axes, block the product of
their tiles; K flat over the reduced axes, block the product of their loop tiles. So the rule
spreads a block of M rows over the row axes (innermost first, each at most its padded size),
gives o the N tile, and spreads a K block over the reduced axes in the order the plan flattens
them (the unit-stride axis, c of channels-last tensors, first).

On the GPU, 16-bit: 256 x 128 x 64 tiles with 4 stages where there are two waves of 256-row
tiles, else 128 x 256 x 64 (o up to 256) with 3 stages; TMA tiles, 8 warps, 8 row tiles per sweep
of o (grouped order: the weight's tiles stay in L2). The M block goes to the row axes as the
largest powers of two dividing their sizes where they reach it (4 x 8 x 8 of a 32 x 56 x 56
output): boxes that tile the image exactly, whose input the plan reads as one TMA box per tap
(:mod:`dtriton.plan.implicit_gemm`); else each axis takes what is left of it, at most its padded
size (the rows then run as one flat index, the input gathered through pointers). fp32:
64 x 64 x 32, 4 warps. On the interpreter: 32 x 16 x 32.

A depthwise convolution (groups = channels: the weight's free axes are all read by the input too)
is no GEMM: :func:`depthwise_tiles` gives it, on the GPU, programs of 4 output rows x 8 columns x
64 channels that loop over the window's taps one at a time (every lane useful: a 3x3 window held
"whole" pads to 4x4 lanes, 7 of 16 masked).
"""

from __future__ import annotations

import math

import torch

from ..ir import Axis, Load, Reduce, convolutions, is_sum, mul_factors, reduced_order, reduction_stages, walk
from .draft import Draft, next_pow2

__all__ = ["conv_gemm", "conv_space_tiles", "conv_tiles", "depthwise_tiles"]


def _spread(d: Draft, axes, budget: int) -> None:
    """Tiles of ``axes`` (innermost first) whose product is ``budget`` where the sizes allow:
    each takes what is left, at most its padded size; the rest take 1."""
    for a in axes:
        t = max(1, min(budget, next_pow2(d.sizes[a])))
        d.tile[a] = t
        budget = max(1, budget // t)


def _box_spread(d: Draft, axes, budget: int) -> bool:
    """Tiles of ``axes`` (innermost first) whose product is ``budget``, each the largest power of
    two that divides its axis's size and fits what is left: boxes of output rows that tile the image
    exactly (2 x 8 x 8 of a 32 x 56 x 56 output), which the plan reads through TMA
    (:mod:`dtriton.plan.implicit_gemm`). False (nothing set) where the divisors fall short of ``budget``."""
    tiles, left = {}, budget
    for a in axes:
        n, t = d.sizes[a], 1
        while t * 2 <= left and n % (t * 2) == 0:
            t *= 2
        tiles[a], left = t, left // t
    if left != 1:
        return False
    d.tile.update(tiles)
    return True


def conv_gemm(d: Draft) -> bool:
    """The draft's tiles are those :func:`conv_tiles` gave an implicit GEMM: its blocks never form
    their product (the M, N and K tiles meet in ``tl.dot``), so no block limit applies to it."""
    convs = convolutions(d.alg)
    if len(convs) != 1:
        return False
    name, (mside, nside) = next(iter(convs.items()))
    return set(d.alg.stages[name].node.over) | set(mside) | set(nside) <= d.dot_axes


def _tma_capable(device) -> bool:
    """A CUDA device with TMA (compute capability 9.0 or newer); True where no GPU is visible (a GPU
    schedule derived on a CPU machine assumes an H200)."""
    if not torch.cuda.is_available():
        return True
    return torch.cuda.get_device_capability(device)[0] >= 9


def conv_tiles(d: Draft) -> None:
    """Tiles, strategies, grid order and launch options of the one convolution of an algorithm
    whose main output it computes (with any element-wise epilogue: bias, activation), when the
    user's schedule leaves the layout open and the algorithm has no single-axis contraction."""
    convs = convolutions(d.alg)
    main = d.alg.outputs[0]
    if len(convs) != 1 or d.layout_given or d.cons or d.grid is None:
        return
    name, (mside, nside) = next(iter(convs.items()))
    r = d.alg.stages[name].node
    if len(nside) != 1 or not set(r.axes) <= set(main.layout) or not set(mside + nside) <= set(d.grid):
        return
    order = {a: i for i, a in enumerate(main.layout)}
    mside = sorted(mside, key=order.__getitem__)
    batch = [a for a in d.grid if a not in mside and a not in nside]
    d.grid = tuple(batch + mside + nside)
    fp16 = d.gpu and d.half
    bm, bn, bk = (128, 128, 64) if fp16 else ((64, 64, 32) if d.gpu else (32, 16, 32))
    for a in batch:
        d.tile[a] = 1
    tma = fp16 and _tma_capable(d.b.device)
    # 16-bit on a TMA device, two waves of 256-row tiles or more: 256 x 128 tiles of 256-row boxes, 4 stages
    # (H200, s5 call 3, the bench conv2d with its input in TMA boxes: 202.4 us against 231.2 at 128 x 256 x 64
    # with 3 stages, 212.3 at 256 x 128 with 3, 225.6 at 128 x 128 with 4)
    tall = tma and math.prod(d.sizes[a] for a in mside) // 256 >= 2 * d.sms and _box_spread(d, reversed(mside), 256)
    if not tall and not _box_spread(d, reversed(mside), bm):
        _spread(d, reversed(mside), bm)
    # else the whole of N up to 256 in one tile and the weight's tile through TMA (H200, s4 02:25 call, the
    # bench conv2d with its input gathered: 258.0 us against 299.2 with 128x128 pointer tiles, 297.0 with TMA
    # at 128x128, 307.2 at 128x256 with pointers)
    d.tile[nside[0]] = max(16, d.cap(nside[0], 128 if tall else (256 if tma else bn)))
    if tma and d.access is None:
        d.access = "tma"
    total_k = 1
    for a in r.over:
        total_k *= d.sizes[a]
    _spread(d, reversed(reduced_order(r, d.b.unit_dims)), max(16, min(bk, next_pow2(total_k))))
    for a in r.over:
        d.strategy[a] = "loop"
    d.dot_axes |= set(r.over) | set(mside) | set(nside)
    if d.gpu:
        d.group[mside[-1]] = 8
    if d.num_warps is None:
        d.num_warps = 8 if fp16 else 4
    if d.num_stages is None:
        d.num_stages = (4 if tall else 3) if d.gpu else 2


def _window(r) -> bool:
    """Some load of ``r``'s body slides a window: one of its indices is computed from a reduced
    axis and a free one (``h * s + r - p``)."""
    for n in walk([r.x], stop=lambda x: isinstance(x, Reduce) and x is not r.x):
        if isinstance(n, Load):
            for e in n.index:
                if not isinstance(e, Axis) and set(e.axes) & set(r.over) and set(e.axes) - set(r.over):
                    return True
    return False


def _depthwise(d: Draft):
    """The one depthwise stage of the main output: a sum over two or more axes of a sliding
    window (:func:`_window`) whose factors reading them all read every free axis the weight reads
    (the channel), the weight fewer than the input (a square, as a variance's ``mean(xc * xc)``,
    is not a convolution); None otherwise."""
    main = d.alg.outputs[0]
    found = []
    for st in reduction_stages(d.alg):
        r = st.node
        if not is_sum(r) or r.combiner.base != "sum" or len(r.over) < 2 or not set(r.axes) <= set(main.layout):
            continue
        reads = [set(f.axes) - set(r.over) for f in mul_factors(r.x) if set(r.over) & set(f.axes)]
        least = min(reads, key=len) if reads else set()
        if (len(reads) >= 2 and least and all(least <= x for x in reads) and any(least < x for x in reads)
                and _window(r)):
            found.append(r)
    return found[0] if len(found) == 1 else None


def depthwise_tiles(d: Draft) -> None:
    """Tiles and strategies of a depthwise convolution computing the main output, on the GPU,
    when the user's schedule leaves the layout open: the output's innermost axis (the channel of
    a channels-last output) in tiles of 64, the next one in tiles of 8, the one before in tiles of 4
    (4 x 8 x 64 of (h, w, c): the taps of 4 output rows share 6 input rows, in L1), the others 1; the
    window's axes looped one tap at a time (unrolled where their sizes are small: ``plan.taps``); 4
    warps. H200, s5 call 4, 3x3 at N32 C256 56x56 fp16: 58.6 us against 90.4 at 1 x 8 x 128, 62.5 at
    8 x 8 x 32, 68.8 at 4 x 16 x 64, 82.8 at 8 x 8 x 64, 92.8 at 4 x 8 x 128. On the interpreter only
    where the user asks for ``rolling`` (it needs the taps unrolled one a step and a row tile of 2 or
    more; the interpreter's own choice, "whole" windows, never rolls)."""
    r = _depthwise(d)
    # (on the interpreter "whole" windows, unless the user asks for rolling rows: plan.taps.plan_rolling)
    if r is None or not (d.gpu or d.user.rolling) or d.layout_given or d.cons or convolutions(d.alg) or d.grid is None:
        return
    rows = [a for a in d.alg.outputs[0].layout if a in d.grid]
    if len(rows) < 2:
        return
    for a in rows:
        d.tile.setdefault(a, 1)
    d.tile[rows[-1]] = d.cap(rows[-1], 64)
    d.tile[rows[-2]] = d.cap(rows[-2], 8)
    if len(rows) >= 3:
        d.tile[rows[-3]] = d.cap(rows[-3], 4)
    for a in r.over:
        d.strategy[a], d.tile[a] = "loop", 1
    d.dot_axes |= set(r.over)   # (covered here: no other rule re-covers them)
    if d.num_warps is None:
        d.num_warps = 4


def conv_space_tiles(alg, sizes, base) -> dict[str, list[int]] | None:
    """Tile values for exploring the one convolution of ``alg`` (sizes ``sizes``) on the GPU
    around the heuristic's complete schedule ``base``: the innermost row axis 8..128, the next
    1..8, the third 1..4 (boxes of an image's rows, 2 x 8 x 8, as well as runs of them), other row
    and batch axes 1 (M blocks of 8 to 4096, products of these), o 64..256, the
    unit-stride reduced axis 32..128 and the other reduced axes 1 (K one tap per tile); each list
    holds the heuristic's tile. None when ``alg`` has no single convolution or ``base`` does not
    loop over its reduced axes (a schedule of the user's)."""
    convs = convolutions(alg)
    if len(convs) != 1:
        return None
    name, (mside, nside) = next(iter(convs.items()))
    r = alg.stages[name].node
    if len(nside) != 1 or any(base.strategy.get(a) != "loop" for a in r.over):
        return None
    order = {a: i for i, a in enumerate(alg.outputs[0].layout)}
    mside = sorted(mside, key=lambda a: order.get(a, len(order)))
    inner_k = reduced_order(r, {})[-1]
    vals: dict[str, list[int]] = {a: [1] for a in r.axes if a not in mside and a not in nside}
    for i, a in enumerate(reversed(mside)):
        vals[a] = [8, 16, 32, 64, 128] if i == 0 else ([1, 2, 4, 8] if i == 1 else ([1, 2, 4] if i == 2 else [1]))
    vals[nside[0]] = [64, 128, 256]
    for a in r.over:
        vals[a] = [32, 64, 128] if a == inner_k else [1]
    out = {}
    for a, vs in vals.items():
        cap = max(1, next_pow2(sizes[a]))
        vs = sorted({min(v, cap) for v in vs} | ({base.tile[a]} if a in base.tile else set()))
        if len(vs) > 1:
            out[a] = vs
    return out
