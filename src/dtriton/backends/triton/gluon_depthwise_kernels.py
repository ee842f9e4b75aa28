"""The hand-written Gluon depthwise 3x3 kernel (Triton 3.6's ``triton.experimental.gluon``, Hopper sm_90).

Device code, and its sm_90 compile; :mod:`.gluon_depthwise` prints and launches it as
:class:`~dtriton.plan.gluon_depthwise.GluonDepthwise` decides (moved from bench/probe_depthwise2.py's
``gl_rows``, issue 19's probe: 35.8 us against cuDNN's 51.1 and torch.compile's 62.4 at fp16 N32 H56 W56
C256 3x3 pad 1 on the H200). Depthwise convolution of a contiguous NHWC 16-bit input X (N, H, W, C) with
a contiguous weight (3, 3, C), stride 1, output Y (N, Ho, Wo, C) in X's dtype, fp32 accumulation:
``Y[n, h, w, c] = sum over (r, q) of X[n, h + r + OFF_H, w + q + OFF_W, c] * Wt[r, q, c]``, X read as
zero outside its bounds (``OFF = -padding``: any padding; Ho and Wo any sizes). C a multiple of 8 (16-byte
TMA row strides); the channel blocks past C are masked.

A *strip* is (n, BH output rows, TW output columns): its BH + 2 input rows are walked once. Each input
row is two TMA boxes ``[1, 1, TW, BC]`` of a 4-D descriptor over X, A at column ``w0 + OFF_W`` and B
``G = 4`` columns further (TMA's zero fill is the padding, also for rows above and below the image), into
a ``STAGES``-deep shared-memory ring issued ``STAGES - 1`` rows ahead. Gluon 3.6 slices shared memory
only at multiples of the slice length, so a window shifted by one column cannot be sliced; instead the
output columns are split into G residue classes (columns ``G a + b``) and the row is read as G + 2
stride-G pieces P(m) (aligned 1-slices of the ``[TW/G, G, BC]`` views of A and B: each input element
loaded and converted (G + 2) / G = 1.5 times, not 9); class b takes taps P(b), P(b + 1), P(b + 2). Each
class rolls into two fp32 accumulators (output rows i and i + 1) and completes row i - 1, stored by
plain coalesced stores. A program keeps one channel block (its 9 weights loaded once) and walks its
strips (``j0, j0 + jstep, ...``) in one flattened row loop, the ring running ahead across strip
boundaries; a grid of fewer programs than strips x channel blocks makes it persistent.
"""
from __future__ import annotations

from typing import Any, Mapping

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

__all__ = ["G", "box_layout", "compile_sm90", "dw3x3_rows"]

G = 4   # residue classes of output columns (box B starts G columns after box A)
_G = gl.constexpr(G)


def box_layout():
    """The unswizzled NVMMA shared layout of the row boxes (rank 4; the windows start at any column:
    no swizzle phase to keep). The host descriptor is built with it."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=4)


@gluon.jit
def _strip(j, HB, WB):
    """(n, row chunk, column tile) of strip ``j`` (strips numbered over (n, row chunk, column tile), the
    column tile fastest)."""
    wb = j % WB
    t = j // WB
    return t // HB, t % HB, wb


@gluon.jit
def _issue(x_desc, ring, bars, k, n, hb, wb, r, cb, OFF_H, OFF_W, BH: gl.constexpr, TW: gl.constexpr,
           BC: gl.constexpr, STAGES: gl.constexpr):
    """TMA loads of the program's ``k``-th input row, row ``r`` of strip (n, row chunk hb, column tile wb),
    into ring slot ``k % STAGES``: boxes A ``[1, 1, TW, BC]`` at (n, hb * BH + OFF_H + r, wb * TW + OFF_W,
    cb * BC) and B, the same G columns further (ring entries 2 slot and 2 slot + 1), completing on the
    slot's barrier."""
    slot = k % STAGES
    bar = bars.index(slot)
    mbarrier.expect(bar, 2 * x_desc.block_type.nbytes)
    h = hb * BH + OFF_H + r
    w = wb * TW + OFF_W
    tma.async_copy_global_to_shared(x_desc, [n, h, w, cb * BC], bar, ring.index(2 * slot))
    tma.async_copy_global_to_shared(x_desc, [n, h, w + _G, cb * BC], bar, ring.index(2 * slot + 1))


@gluon.jit
def _piece(ring, slot, m: gl.constexpr, TW: gl.constexpr, BC: gl.constexpr, L3: gl.constexpr):
    """P(m) ``[TW/G, 1, BC]`` fp32: input columns ``w0 + OFF_W + G a + m`` (a < TW/G) of the slot's row:
    box A's columns ``G a + m`` (m < G) or box B's ``G a + m - G``, a stride-G window read as an aligned
    1-slice of the ``[TW/G, G, BC]`` view."""
    if m < _G:
        box = ring.index(2 * slot)
        mm: gl.constexpr = m
    else:
        box = ring.index(2 * slot + 1)
        mm: gl.constexpr = m - _G
    v = box.reshape([TW // _G, _G, BC]).slice(mm, 1, dim=1)
    return v.load(L3).to(gl.float32)


@gluon.jit
def _roll(p0, p1, p2, a_i, a_p, w0, w1, w2, w3, w4, w5, w6, w7, w8):
    """One residue class of output columns: row i - 1 completes (``done``), rows i and i + 1 roll."""
    done = a_p + p0 * w6 + p1 * w7 + p2 * w8
    a_p = a_i + p0 * w3 + p1 * w4 + p2 * w5
    a_i = p0 * w0 + p1 * w1 + p2 * w2
    return done, a_i, a_p


@gluon.jit
def _store(Out, done, n, o, Ho, Wo, C, w_cols, oc, mrow, mc):
    """Output row ``o`` of image ``n`` at columns ``w_cols`` and channels ``oc`` (clipped to Ho, Wo, C)."""
    ptr = Out + (n.to(gl.int64) * Ho + o) * Wo * C + w_cols * C + oc
    gl.store(ptr, done.to(Out.dtype.element_ty), mask=mrow & (w_cols < Wo) & mc)


@gluon.jit
def _weight(Wt, r: gl.constexpr, q: gl.constexpr, SW_R, SW_Q, SW_C, oc, mc):
    """Tap (r, q) of the weight (strides SW_R, SW_Q, SW_C) at channels ``oc``, fp32, ``[1, 1, BC]``."""
    return gl.load(Wt + r * SW_R + q * SW_Q + oc * SW_C, mask=mc, other=0.0).to(gl.float32)[None, None, :]


@gluon.jit
def dw3x3_rows(x_desc, Wt, Out, n_strips, Ho, Wo, C, OFF_H, OFF_W, HB, WB, CB, SW_R, SW_Q, SW_C, BH: gl.constexpr,
               TW: gl.constexpr, BC: gl.constexpr, V: gl.constexpr, NW: gl.constexpr, STAGES: gl.constexpr):
    """Depthwise 3x3 by rolling rows from a TMA ring (the module docstring). ``n_strips`` = N * HB * WB
    strips of BH output rows (HB a column) x TW output columns (WB a row); CB channel blocks of BC; the
    weight (3, 3, C) of strides SW_R, SW_Q, SW_C (any: 9 loads a program), X and Y contiguous.
    Program p owns channel block ``p % CB`` and the strips ``p // CB, p // CB + nprog // CB, ...``;
    the grid (nprog) must be a multiple of CB, at most n_strips * CB. Launch with num_warps = NW; V
    channels a thread."""
    R: gl.constexpr = BH + 2
    gl.static_assert(STAGES - 1 <= R, "the ring runs at most one strip ahead")
    L3: gl.constexpr = gl.BlockedLayout([1, 1, V], [32 * V // BC, 1, BC // V], [NW, 1, 1], [2, 1, 0])
    LC: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(1, L3))
    LA: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, L3))
    pid = gl.program_id(0)
    cb = pid % CB
    j0 = pid // CB
    jstep = gl.num_programs(0) // CB
    mine = (n_strips - j0 + jstep - 1) // jstep     # strips of this program
    K = mine * R                                     # input rows of this program
    ring = gl.allocate_shared_memory(x_desc.dtype, [2 * STAGES, 1, 1, TW, BC], x_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    fence_async_shared()
    n, hb, wb = _strip(j0, HB, WB)
    for s in gl.static_range(STAGES - 1):   # (rows of the first strip: STAGES - 1 <= R)
        if s < K:
            _issue(x_desc, ring, bars, s, n, hb, wb, s, cb, OFF_H, OFF_W, BH, TW, BC, STAGES)
    oc1 = cb * BC + gl.arange(0, BC, layout=LC)
    mc1 = oc1 < C
    w0 = _weight(Wt, 0, 0, SW_R, SW_Q, SW_C, oc1, mc1)
    w1 = _weight(Wt, 0, 1, SW_R, SW_Q, SW_C, oc1, mc1)
    w2 = _weight(Wt, 0, 2, SW_R, SW_Q, SW_C, oc1, mc1)
    w3 = _weight(Wt, 1, 0, SW_R, SW_Q, SW_C, oc1, mc1)
    w4 = _weight(Wt, 1, 1, SW_R, SW_Q, SW_C, oc1, mc1)
    w5 = _weight(Wt, 1, 2, SW_R, SW_Q, SW_C, oc1, mc1)
    w6 = _weight(Wt, 2, 0, SW_R, SW_Q, SW_C, oc1, mc1)
    w7 = _weight(Wt, 2, 1, SW_R, SW_Q, SW_C, oc1, mc1)
    w8 = _weight(Wt, 2, 2, SW_R, SW_Q, SW_C, oc1, mc1)
    oc = oc1[None, None, :]
    mc = mc1[None, None, :]
    ga = (gl.arange(0, TW // _G, layout=LA) * _G)[:, None, None]
    z = gl.zeros([TW // _G, 1, BC], gl.float32, L3)
    i0, i1, i2, i3 = z, z, z, z      # class b: output row i (taps r = 0)
    q0, q1, q2, q3 = z, z, z, z      # class b: output row i - 1 (taps r = 0, 1)
    for i in range(mine):
        n, hb, wb = _strip(j0 + i * jstep, HB, WB)
        n_, hb_, wb_ = _strip(j0 + (i + 1) * jstep, HB, WB)   # the next strip (the ring runs into it)
        wc = wb * TW + ga
        for r in range(R):
            k = i * R + r
            gl.thread_barrier()     # every warp has read slot (k - 1) % STAGES: refill it
            if k + STAGES - 1 < K:
                if r + STAGES - 1 < R:
                    _issue(x_desc, ring, bars, k + STAGES - 1, n, hb, wb, r + STAGES - 1, cb, OFF_H, OFF_W, BH, TW,
                           BC, STAGES)
                else:
                    _issue(x_desc, ring, bars, k + STAGES - 1, n_, hb_, wb_, r + STAGES - 1 - R, cb, OFF_H, OFF_W,
                           BH, TW, BC, STAGES)
            slot = k % STAGES
            mbarrier.wait(bars.index(slot), (k // STAGES) & 1)
            p0 = _piece(ring, slot, 0, TW, BC, L3)
            p1 = _piece(ring, slot, 1, TW, BC, L3)
            p2 = _piece(ring, slot, 2, TW, BC, L3)
            p3 = _piece(ring, slot, 3, TW, BC, L3)
            p4 = _piece(ring, slot, 4, TW, BC, L3)
            p5 = _piece(ring, slot, 5, TW, BC, L3)
            d0, i0, q0 = _roll(p0, p1, p2, i0, q0, w0, w1, w2, w3, w4, w5, w6, w7, w8)
            d1, i1, q1 = _roll(p1, p2, p3, i1, q1, w0, w1, w2, w3, w4, w5, w6, w7, w8)
            d2, i2, q2 = _roll(p2, p3, p4, i2, q2, w0, w1, w2, w3, w4, w5, w6, w7, w8)
            d3, i3, q3 = _roll(p3, p4, p5, i3, q3, w0, w1, w2, w3, w4, w5, w6, w7, w8)
            o = hb * BH + r - 2              # the output row input row r completes (rows r - 2 .. r feed it)
            mrow = (r >= 2) & (o < Ho)
            _store(Out, d0, n, o, Ho, Wo, C, wc + 0, oc, mrow, mc)
            _store(Out, d1, n, o, Ho, Wo, C, wc + 1, oc, mrow, mc)
            _store(Out, d2, n, o, Ho, Wo, C, wc + 2, oc, mrow, mc)
            _store(Out, d3, n, o, Ho, Wo, C, wc + 3, oc, mrow, mc)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(s))


def compile_sm90(consts: Mapping[str, Any], dtype: str = "float16"):
    """:func:`dw3x3_rows` with the compile-time arguments ``consts`` (BH, TW, BC, V, NW, STAGES) for 16-bit
    ``dtype`` ("float16" or "bfloat16") compiled for sm_90 by Triton's own toolchain (no GPU needed,
    nothing launched): Triton's compiled kernel (``.asm["ptx"]``, ``.metadata``). Specialised as a launch
    at C 256 with a contiguous weight is: the weight and output pointers 16-byte aligned, C and the weight's
    strides multiples of 16, its channel stride 1."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    ty = {"float16": "fp16", "bfloat16": "bf16"}[dtype]
    box = [1, 1, consts["TW"], consts["BC"]]
    names = dw3x3_rows.arg_names
    types = {"x_desc": f"tensordesc<{ty}[{','.join(map(str, box))}],{box_layout()!r}>", "Wt": f"*{ty}",
             "Out": f"*{ty}"}
    meta = dict(consts, SW_C=1)
    sig = {n: "constexpr" if n in meta else types.get(n, "i32") for n in names}
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in ("Wt", "Out", "C", "SW_R", "SW_Q")}
    return triton.compile(GluonASTSource(dw3x3_rows, sig, meta, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": consts["NW"]})
