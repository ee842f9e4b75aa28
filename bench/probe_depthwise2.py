"""Issue 19 probe: hand-written depthwise 3x3 kernels (fp16 NHWC, pad 1, stride 1) against cuDNN and
torch.compile on the H200 (self-contained: torch, Triton 3.6 and its Gluon).

    PYTHONPATH=src python3 bench/probe_depthwise2.py --out DIR        # H200: check, time, table, JSON
    PYTHONPATH=src python3 bench/probe_depthwise2.py --compile-only    # any machine: sm_90 registers etc.
    PYTHONPATH=src python3 bench/probe_depthwise2.py --dry-run         # + interpreter / replay checks on CPU

Bench case N32 H56 W56 C256 (102.8 MB in + out). dtriton's default (9 loads and conversions an input
element, 124 registers, 25% occupancy) is latency-bound: too few bytes in flight per SM. The kernels:

- ``gl_rows`` (Gluon, the candidate): a program owns a strip (n, BH output rows, TW output columns,
  BC channels); each of its BH + 2 input rows is two TMA boxes ``[1, 1, TW, BC]`` (A at column w0 - 1,
  B at w0 - 1 + G, G = 4; TMA's zero fill is the padding, also for rows -1 and H) into a STAGES-deep
  shared-memory ring issued STAGES - 1 rows ahead (bytes in flight without warps waiting on them).
  Gluon 3.6 slices shared memory only at multiples of the slice length, so a window shifted by one
  column cannot be sliced; instead the output columns are split in G residue classes (columns G a + b)
  and the row is read as G + 2 stride-G pieces P(m) (aligned 1-slices of the [TW/G, G, BC] views of A
  and B; each input element read and converted (G+2)/G = 1.5 times, not 9); class b takes taps P(b),
  P(b+1), P(b+2). Each class rolls into two fp32 accumulators (output rows i and i + 1) and completes row
  i - 1, stored by plain coalesced stores. ``PERSIST``: fewer programs than strips, each keeps one
  channel block (weights loaded once) and walks its strips in one flattened row loop, the ring running
  ahead across strip boundaries (the next strip's rows load during the current strip's math).
- ``tri_rows`` (plain Triton): the same rolling rows from global memory (3 shifted loads a row, L1
  serves the overlap), the next row's loads issued before the current row's math (``PF``), small
  tiles and a register cap for occupancy.
- ``tri_taps`` (plain Triton): the direct form (9 independent loads an output) on small tiles under a
  register cap (dtriton's default shape of computation, more warps).

Every variant is first checked (output poisoned with NaN) against torch's conv2d in fp32 on the bench
case and on an odd case (N3 H13 W37 C40: partial row chunks, column tiles and channel blocks), then
timed with ``triton.testing.do_bench`` (median) beside cuDNN (F.conv2d channels_last, groups = C) and
torch.compile of it. The table is printed last; ``probe_depthwise2.json`` goes under ``--out``.
``--compile-only`` compiles every variant for sm_90 (no GPU) and prints registers / spill stack
(cuobjdump), shared memory and SASS instruction count; ``--dry-run`` adds a TRITON_INTERPRET run of the
plain Triton kernels and a fp64 CPU replay of ``gl_rows``' tiling (TMA boxes, ring order, windows,
rolling accumulators, clipped stores), both on a tiny odd case against float64 torch.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

INTERP = os.environ.get("TRITON_INTERPRET") == "1"
if not INTERP:   # Gluon is compiled only (no interpreter); not imported in the interpreter child
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
BENCH = dict(N=32, H=56, W=56, C=256)
ODD = dict(N=3, H=13, W=37, C=40)
TINY = dict(N=2, H=7, W=11, C=24)   # the interpreter / replay case (CPU)


# ---------------------------------------------------------------- plain Triton kernels

@triton.jit
def tri_rows(X, Wt, Out, H: tl.constexpr, W: tl.constexpr, C: tl.constexpr, HB: tl.constexpr,
             WB: tl.constexpr, CB: tl.constexpr, BH: tl.constexpr, BW: tl.constexpr, BC: tl.constexpr,
             PF: tl.constexpr):
    """Rolling rows: program (n, BH output rows, BW columns, BC channels), grid cdiv(H, BH) * cdiv(W, BW)
    * cdiv(C, BC) * N (channel block fastest). Walks its BH + 2 input rows once: 3 shifted loads a row,
    two fp32 accumulators (rows i, i + 1); row i - 1 completes and is stored. PF: row i + 1's loads are
    issued before row i's math."""
    pid = tl.program_id(0)
    cb = pid % CB
    t = pid // CB
    wb = t % WB
    t = t // WB
    hb = t % HB
    n = t // HB
    ow = wb * BW + tl.arange(0, BW)
    oc = cb * BC + tl.arange(0, BC)
    mc = oc < C
    w0 = tl.load(Wt + 0 * C + oc, mask=mc, other=0.0).to(tl.float32)[None, :]
    w1 = tl.load(Wt + 1 * C + oc, mask=mc, other=0.0).to(tl.float32)[None, :]
    w2 = tl.load(Wt + 2 * C + oc, mask=mc, other=0.0).to(tl.float32)[None, :]
    w3 = tl.load(Wt + 3 * C + oc, mask=mc, other=0.0).to(tl.float32)[None, :]
    w4 = tl.load(Wt + 4 * C + oc, mask=mc, other=0.0).to(tl.float32)[None, :]
    w5 = tl.load(Wt + 5 * C + oc, mask=mc, other=0.0).to(tl.float32)[None, :]
    w6 = tl.load(Wt + 6 * C + oc, mask=mc, other=0.0).to(tl.float32)[None, :]
    w7 = tl.load(Wt + 7 * C + oc, mask=mc, other=0.0).to(tl.float32)[None, :]
    w8 = tl.load(Wt + 8 * C + oc, mask=mc, other=0.0).to(tl.float32)[None, :]
    m0 = ((ow >= 1) & (ow - 1 < W))[:, None] & mc[None, :]
    m1 = (ow < W)[:, None] & mc[None, :]
    m2 = (ow + 1 < W)[:, None] & mc[None, :]
    h0 = hb * BH
    img = n.to(tl.int64) * H * W * C
    base = X + img + ow[:, None] * C + oc[None, :]
    obase = Out + img + ow[:, None] * C + oc[None, :]
    ok = h0 >= 1
    p = base + (h0 - 1) * W * C
    x0 = tl.load(p - C, mask=ok & m0, other=0.0)
    x1 = tl.load(p, mask=ok & m1, other=0.0)
    x2 = tl.load(p + C, mask=ok & m2, other=0.0)
    a_i = tl.zeros((BW, BC), tl.float32)    # output row i (taps r = 0 so far)
    a_p = tl.zeros((BW, BC), tl.float32)    # output row i - 1 (taps r = 0, 1)
    for k in tl.range(0, BH + 2, num_stages=1):
        i = h0 - 1 + k                       # the input row of this step
        if PF:
            okn = (i + 1 < H) & (k + 1 < BH + 2)
            pn = base + (i + 1) * W * C
            y0 = tl.load(pn - C, mask=okn & m0, other=0.0)
            y1 = tl.load(pn, mask=okn & m1, other=0.0)
            y2 = tl.load(pn + C, mask=okn & m2, other=0.0)
        else:
            oki = (i >= 0) & (i < H)
            pi = base + i * W * C
            x0 = tl.load(pi - C, mask=oki & m0, other=0.0)
            x1 = tl.load(pi, mask=oki & m1, other=0.0)
            x2 = tl.load(pi + C, mask=oki & m2, other=0.0)
        f0 = x0.to(tl.float32)
        f1 = x1.to(tl.float32)
        f2 = x2.to(tl.float32)
        done = a_p + f0 * w6 + f1 * w7 + f2 * w8     # row i - 1 complete
        a_p = a_i + f0 * w3 + f1 * w4 + f2 * w5
        a_i = f0 * w0 + f1 * w1 + f2 * w2
        o = i - 1
        tl.store(obase + o * W * C, done.to(Out.dtype.element_ty), mask=(k >= 2) & (o < H) & m1)
        if PF:
            x0, x1, x2 = y0, y1, y2


@triton.jit
def tri_taps(X, Wt, Out, H: tl.constexpr, W: tl.constexpr, C: tl.constexpr, HB: tl.constexpr,
             WB: tl.constexpr, CB: tl.constexpr, BH: tl.constexpr, BW: tl.constexpr, BC: tl.constexpr):
    """Direct form: program (n, BH x BW output pixels, BC channels), 9 independent masked loads."""
    pid = tl.program_id(0)
    cb = pid % CB
    t = pid // CB
    wb = t % WB
    t = t // WB
    hb = t % HB
    n = t // HB
    p = tl.arange(0, BH * BW)
    oh = hb * BH + p // BW
    ow = wb * BW + p % BW
    oc = cb * BC + tl.arange(0, BC)
    mc = oc < C
    img = n.to(tl.int64) * H * W * C
    acc = tl.zeros((BH * BW, BC), tl.float32)
    for r in tl.static_range(3):
        for q in tl.static_range(3):
            ih = oh + (r - 1)
            iw = ow + (q - 1)
            m = ((ih >= 0) & (ih < H) & (iw >= 0) & (iw < W))[:, None] & mc[None, :]
            x = tl.load(X + img + (ih * W + iw)[:, None] * C + oc[None, :], mask=m, other=0.0)
            wv = tl.load(Wt + (r * 3 + q) * C + oc, mask=mc, other=0.0)
            acc += x.to(tl.float32) * wv.to(tl.float32)[None, :]
    mo = ((oh < H) & (ow < W))[:, None] & mc[None, :]
    tl.store(Out + img + (oh * W + ow)[:, None] * C + oc[None, :], acc.to(Out.dtype.element_ty), mask=mo)


# ---------------------------------------------------------------- Gluon kernel

if not INTERP:
    @gluon.jit
    def _gl_issue(x_desc, ring, bars, k, j0, jstep, HB: gl.constexpr, WB: gl.constexpr, cb, BH: gl.constexpr, TW: gl.constexpr,
                  BC: gl.constexpr, G: gl.constexpr, STAGES: gl.constexpr):
        """TMA loads of the program's k-th input row (strip j0 + (k // (BH+2)) * jstep, row k % (BH+2))
        into ring slot k % STAGES: boxes A [1, 1, TW, BC] at (n, h0 - 1 + r, w0 - 1, cb * BC) and B, the
        same G columns further (ring entries 2 slot and 2 slot + 1)."""
        R: gl.constexpr = BH + 2
        j = j0 + (k // R) * jstep
        r = k % R
        wb = j % WB
        hb = (j // WB) % HB
        n = j // (WB * HB)
        slot = k % STAGES
        bar = bars.index(slot)
        mbarrier.expect(bar, 2 * x_desc.block_type.nbytes)
        h = hb * BH - 1 + r
        tma.async_copy_global_to_shared(x_desc, [n, h, wb * TW - 1, cb * BC], bar, ring.index(2 * slot))
        tma.async_copy_global_to_shared(x_desc, [n, h, wb * TW - 1 + G, cb * BC], bar, ring.index(2 * slot + 1))

    @gluon.jit
    def _gl_piece(ring, slot, m: gl.constexpr, TW: gl.constexpr, BC: gl.constexpr, G: gl.constexpr, L3: gl.constexpr):
        """P(m) [TW/G, 1, BC] fp32: input columns w0 - 1 + G a + m (a < TW/G) of the slot's row: box A's
        columns G a + m (m < G) or box B's G a + m - G, a stride-G window read as an aligned 1-slice of
        the [TW/G, G, BC] view (Gluon slices only at multiples of their length)."""
        if m < G:
            box = ring.index(2 * slot)
            mm: gl.constexpr = m
        else:
            box = ring.index(2 * slot + 1)
            mm: gl.constexpr = m - G
        v = box.reshape([TW // G, G, BC]).slice(mm, 1, dim=1)
        return v.load(L3).to(gl.float32)

    @gluon.jit
    def _gl_class(p0, p1, p2, a_i, a_p, w0, w1, w2, w3, w4, w5, w6, w7, w8):
        """One residue class of output columns: row i - 1 completes, rows i and i + 1 roll."""
        done = a_p + p0 * w6 + p1 * w7 + p2 * w8
        a_p = a_i + p0 * w3 + p1 * w4 + p2 * w5
        a_i = p0 * w0 + p1 * w1 + p2 * w2
        return done, a_i, a_p

    @gluon.jit
    def _gl_store(Out, done, n, o, H: gl.constexpr, W: gl.constexpr, C: gl.constexpr, w_cols, oc, mrow, mc):
        ptr = Out + (n.to(gl.int64) * H + o) * W * C + w_cols * C + oc
        gl.store(ptr, done.to(gl.float16), mask=mrow & (w_cols < W) & mc)

    @gluon.jit
    def gl_rows(x_desc, Wt, Out, n_strips, H: gl.constexpr, W: gl.constexpr, C: gl.constexpr, HB: gl.constexpr,
                WB: gl.constexpr, CB: gl.constexpr, BH: gl.constexpr, TW: gl.constexpr,
                BC: gl.constexpr, V: gl.constexpr, NW: gl.constexpr, STAGES: gl.constexpr):
        """Rolling rows from a TMA ring (see the module docstring), output columns in G = 4 residue classes
        (class b: columns G a + b, taps P(b), P(b+1), P(b+2): each input element read and converted
        (G+2)/G = 1.5 times). Program p owns channel block p % CB and the strips j = p // CB,
        + nprog // CB, ... of the n_strips = N * HB * WB (n, row chunk, TW columns) strips, w fastest;
        nprog must be a multiple of CB."""
        G: gl.constexpr = 4
        R: gl.constexpr = BH + 2
        L3: gl.constexpr = gl.BlockedLayout([1, 1, V], [32 * V // BC, 1, BC // V], [NW, 1, 1], [2, 1, 0])
        LC: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(1, L3))
        LA: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, L3))
        pid = gl.program_id(0)
        cb = pid % CB
        j0 = pid // CB
        jstep = gl.num_programs(0) // CB
        K = ((n_strips - j0 + jstep - 1) // jstep) * R
        ring = gl.allocate_shared_memory(gl.float16, [2 * STAGES, 1, 1, TW, BC], x_desc.layout)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(bars.index(s), count=1)
        fence_async_shared()
        for s in gl.static_range(STAGES - 1):
            if s < K:
                _gl_issue(x_desc, ring, bars, s, j0, jstep, HB, WB, cb, BH, TW, BC, G, STAGES)
        oc1 = cb * BC + gl.arange(0, BC, layout=LC)
        mc1 = oc1 < C
        w0 = gl.load(Wt + 0 * C + oc1, mask=mc1, other=0.0).to(gl.float32)[None, None, :]
        w1 = gl.load(Wt + 1 * C + oc1, mask=mc1, other=0.0).to(gl.float32)[None, None, :]
        w2 = gl.load(Wt + 2 * C + oc1, mask=mc1, other=0.0).to(gl.float32)[None, None, :]
        w3 = gl.load(Wt + 3 * C + oc1, mask=mc1, other=0.0).to(gl.float32)[None, None, :]
        w4 = gl.load(Wt + 4 * C + oc1, mask=mc1, other=0.0).to(gl.float32)[None, None, :]
        w5 = gl.load(Wt + 5 * C + oc1, mask=mc1, other=0.0).to(gl.float32)[None, None, :]
        w6 = gl.load(Wt + 6 * C + oc1, mask=mc1, other=0.0).to(gl.float32)[None, None, :]
        w7 = gl.load(Wt + 7 * C + oc1, mask=mc1, other=0.0).to(gl.float32)[None, None, :]
        w8 = gl.load(Wt + 8 * C + oc1, mask=mc1, other=0.0).to(gl.float32)[None, None, :]
        oc = oc1[None, None, :]
        mc = mc1[None, None, :]
        ga = (gl.arange(0, TW // G, layout=LA) * G)[:, None, None]
        z = gl.zeros([TW // G, 1, BC], gl.float32, L3)
        i0, i1, i2, i3 = z, z, z, z      # class b: output row i (taps r = 0)
        q0, q1, q2, q3 = z, z, z, z      # class b: output row i - 1 (taps r = 0, 1)
        for k in range(K):
            gl.thread_barrier()     # every warp has read slot (k - 1) % STAGES: refill it
            kn = k + STAGES - 1
            if kn < K:
                _gl_issue(x_desc, ring, bars, kn, j0, jstep, HB, WB, cb, BH, TW, BC, G, STAGES)
            slot = k % STAGES
            mbarrier.wait(bars.index(slot), (k // STAGES) & 1)
            p0 = _gl_piece(ring, slot, 0, TW, BC, G, L3)
            p1 = _gl_piece(ring, slot, 1, TW, BC, G, L3)
            p2 = _gl_piece(ring, slot, 2, TW, BC, G, L3)
            p3 = _gl_piece(ring, slot, 3, TW, BC, G, L3)
            p4 = _gl_piece(ring, slot, 4, TW, BC, G, L3)
            p5 = _gl_piece(ring, slot, 5, TW, BC, G, L3)
            d0, i0, q0 = _gl_class(p0, p1, p2, i0, q0, w0, w1, w2, w3, w4, w5, w6, w7, w8)
            d1, i1, q1 = _gl_class(p1, p2, p3, i1, q1, w0, w1, w2, w3, w4, w5, w6, w7, w8)
            d2, i2, q2 = _gl_class(p2, p3, p4, i2, q2, w0, w1, w2, w3, w4, w5, w6, w7, w8)
            d3, i3, q3 = _gl_class(p3, p4, p5, i3, q3, w0, w1, w2, w3, w4, w5, w6, w7, w8)
            j = j0 + (k // R) * jstep
            r = k % R
            wb = j % WB
            hb = (j // WB) % HB
            n = j // (WB * HB)
            o = hb * BH + r - 2
            mrow = (r >= 2) & (o < H)
            wc = wb * TW + ga
            _gl_store(Out, d0, n, o, H, W, C, wc + 0, oc, mrow, mc)
            _gl_store(Out, d1, n, o, H, W, C, wc + 1, oc, mrow, mc)
            _gl_store(Out, d2, n, o, H, W, C, wc + 2, oc, mrow, mc)
            _gl_store(Out, d3, n, o, H, W, C, wc + 3, oc, mrow, mc)
        for s in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(s))


# ---------------------------------------------------------------- variants and launchers

def _gl(bh, tw, bc, v, nw, stages, persist=0):
    return dict(kernel="gl_rows", BH=bh, TW=tw, BC=bc, V=v, NW=nw, STAGES=stages, PERSIST=persist)


def _rows(bh, bw, bc, nw, cap=None, pf=1):
    return dict(kernel="tri_rows", BH=bh, BW=bw, BC=bc, NW=nw, MAXNREG=cap, PF=pf)


def _taps(bh, bw, bc, nw, cap=None):
    return dict(kernel="tri_taps", BH=bh, BW=bw, BC=bc, NW=nw, MAXNREG=cap)


#: (name, configuration), the most promising first. gl: TW-2 output columns a strip (56 fits TW 64),
#: PERSIST k: k programs an SM (0: a program a strip).
VARIANTS = [
    ("gl rows TW64 BC64 V2 w8 s4 BH14 p2", _gl(14, 64, 64, 2, 8, 4, 2)),
    ("gl rows TW64 BC32 V2 w4 s4 BH14 p4", _gl(14, 64, 32, 2, 4, 4, 4)),
    ("gl rows TW64 BC64 V4 w8 s3 BH8", _gl(8, 64, 64, 4, 8, 3, 0)),
    ("gl rows TW64 BC32 V2 w8 s6 BH28 p2", _gl(28, 64, 32, 2, 8, 6, 2)),
    ("gl rows TW32 BC64 V2 w4 s4 BH14", _gl(14, 32, 64, 2, 4, 4, 0)),
    ("tri rows pf BW8 BC64 w4 BH14 cap80", _rows(14, 8, 64, 4, 80)),
    ("tri rows pf BW16 BC32 w4 BH14 cap72", _rows(14, 16, 32, 4, 72)),
    ("tri rows BW8 BC64 w2 BH28", _rows(28, 8, 64, 2, None, 0)),
    ("tri taps 2x8x64 w4 cap64", _taps(2, 8, 64, 4, 64)),
    ("tri taps 4x8x64 w8 cap80", _taps(4, 8, 64, 8, 80)),
]


def gl_meta(cfg) -> dict:
    tw = cfg["TW"]
    return dict(BH=cfg["BH"], TW=tw, BC=cfg["BC"], V=cfg["V"], NW=cfg["NW"], STAGES=cfg["STAGES"])


def gl_box_layout(cfg):
    """Unswizzled NVMMA layout of the row box (windows start at any column: no swizzle phase to keep)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=4)


def grid_dims(cfg, N, H, W, C):
    """(HB, WB, CB) of a configuration: row chunks, column tiles, channel blocks."""
    bw = cfg["TW"] if cfg["kernel"] == "gl_rows" else cfg["BW"]
    return triton.cdiv(H, cfg["BH"]), triton.cdiv(W, bw), triton.cdiv(C, cfg["BC"])


def check_input(x, wt):
    if x.dim() != 4 or wt.shape != (3, 3, x.shape[3]) or x.dtype != wt.dtype or not x.is_contiguous():
        raise ValueError(f"depthwise: x must be contiguous (N, H, W, C) and wt (3, 3, C) of one dtype; got "
                         f"{tuple(x.shape)} {x.dtype}, {tuple(wt.shape)} {wt.dtype}")
    if x.shape[3] % 8:
        raise ValueError(f"depthwise: C ({x.shape[3]}) must be a multiple of 8 (TMA: 16-byte row strides)")


def launcher(cfg, x, wt):
    """``(launch, out)``: ``launch()`` writes depthwise3x3(x, wt) (pad 1) into ``out`` (N, H, W, C)."""
    check_input(x, wt)
    N, H, W, C = x.shape
    out = torch.empty_like(x)
    HB, WB, CB = grid_dims(cfg, N, H, W, C)
    wt = wt.contiguous()
    if cfg["kernel"] == "gl_rows":
        meta = gl_meta(cfg)
        desc = TensorDescriptor.from_tensor(x, [1, 1, cfg["TW"], cfg["BC"]], gl_box_layout(cfg))
        n_strips = N * HB * WB
        nprog = n_strips * CB
        if cfg["PERSIST"]:
            n_sm = torch.cuda.get_device_properties(x.device).multi_processor_count
            nprog = min(nprog, max(CB, n_sm * cfg["PERSIST"] // CB * CB))

        def launch():
            gl_rows[(nprog, )](desc, wt, out, n_strips, H=H, W=W, C=C, HB=HB, WB=WB, CB=CB, **meta,
                               num_warps=cfg["NW"])
        return launch, out
    kern = tri_rows if cfg["kernel"] == "tri_rows" else tri_taps
    meta = dict(BH=cfg["BH"], BW=cfg["BW"], BC=cfg["BC"]) | ({"PF": cfg["PF"]} if kern is tri_rows else {})
    opts = dict(num_warps=cfg["NW"]) | ({"maxnreg": cfg["MAXNREG"]} if cfg["MAXNREG"] and not INTERP else {})
    grid = (N * HB * WB * CB, )

    def launch():
        kern[grid](x, wt, out, H=H, W=W, C=C, HB=HB, WB=WB, CB=CB, **meta, **opts)
    return launch, out


# ---------------------------------------------------------------- compile only (no GPU)

def compile_sm90(cfg):
    """The variant's kernel compiled for sm_90 by Triton's toolchain for the bench case (shapes are
    constexpr arguments; pointers 16-byte aligned, as the runtime specialises them), launching nothing."""
    div = [["tt.divisibility", 16]]
    N, H, W, C = BENCH["N"], BENCH["H"], BENCH["W"], BENCH["C"]
    HB, WB, CB = grid_dims(cfg, N, H, W, C)
    shape = dict(H=H, W=W, C=C, HB=HB, WB=WB, CB=CB)
    if cfg["kernel"] == "gl_rows":
        meta = gl_meta(cfg) | shape
        lay = gl_box_layout(cfg)
        sig = {"x_desc": f"tensordesc<fp16[1,1,{cfg['TW']},{cfg['BC']}],{lay!r}>", "Wt": "*fp16", "Out": "*fp16",
               "n_strips": "i32", **{k: "constexpr" for k in meta}}
        names = gl_rows.arg_names
        attrs = {(names.index(a), ): div for a in ("Wt", "Out")}
        src = GluonASTSource(gl_rows, sig, meta, attrs)
        return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": cfg["NW"]})
    kern = tri_rows if cfg["kernel"] == "tri_rows" else tri_taps
    meta = dict(BH=cfg["BH"], BW=cfg["BW"], BC=cfg["BC"]) | ({"PF": cfg["PF"]} if kern is tri_rows else {}) | shape
    sig = {"X": "*fp16", "Wt": "*fp16", "Out": "*fp16", **{k: "constexpr" for k in meta}}
    attrs = {(kern.arg_names.index(a), ): div for a in ("X", "Wt", "Out")}
    src = triton.compiler.ASTSource(kern, sig, meta, attrs)
    opts = {"num_warps": cfg["NW"]} | ({"maxnreg": cfg["MAXNREG"]} if cfg["MAXNREG"] else {})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def resources(ck) -> dict:
    """Registers and spill stack per thread (cuobjdump), shared memory, SASS instruction count."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(ck.asm["cubin"])
    try:
        txt = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([CUOBJDUMP, "-sass", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", txt)
    n_sass = len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+\S", sass, re.M))
    regs = int(m.group(1)) if m else None
    return dict(regs=regs, stack=int(m.group(2)) if m else None, smem=ck.metadata.shared,
                warps=ck.metadata.num_warps, sass=n_sass,
                lds=len(re.findall(r"\bLDS(?:M)?(?:\.\S+)?\s", sass)), ldg=len(re.findall(r"\bLDG(?:\.\S+)?\s", sass)),
                ffma=len(re.findall(r"\bFFMA\s", sass)))


def occupancy(row) -> str:
    """Warps an SM by registers (64K a SM) and shared memory (227 KB a SM), of 64."""
    if not row.get("regs"):
        return "?"
    nw = row["warps"]
    by_reg = 65536 // (max(row["regs"], 24) * 32 * nw)
    by_smem = (232448 // (row["smem"] + 1024)) if row["smem"] else 32
    blocks = min(by_reg, by_smem, 32, 64 // nw)
    return f"{blocks * nw}/64"


def compile_only(only, out) -> list[dict]:
    rows = []
    print("== sm_90 compile (depthwise 3x3, pad 1)", flush=True)
    for name, cfg in VARIANTS:
        if only and name not in only:
            continue
        row = dict(variant=name, cfg=cfg)
        t0 = time.time()
        try:
            ck = compile_sm90(cfg)
            row |= resources(ck)
            row["occupancy"] = occupancy(row)
            if out:
                base = os.path.join(out, re.sub(r"\W+", "_", name))
                for ext in ("ttgir", "ptx"):
                    with open(f"{base}.{ext}", "w") as f:
                        f.write(ck.asm[ext])
            print(f"  {name:38s} regs {row['regs']:>3} stack {row['stack']:>3} smem {row['smem']:>6} B "
                  f"warps {row['warps']:>2} occ {row['occupancy']:>5} SASS {row['sass']:>5} (LDG {row['ldg']:>3} "
                  f"LDS {row['lds']:>3} FFMA {row['ffma']:>4})  [{time.time() - t0:.1f} s]", flush=True)
        except Exception as e:  # noqa: BLE001 - a kernel that does not compile is a result
            row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:1500]}"
            print(f"  {name:38s} FAILED: {row['error'][:900]}", flush=True)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- CPU checks (dry run)

def reference(x, wt):
    """float64 torch depthwise conv2d, NHWC in and out; wt (3, 3, C)."""
    C = x.shape[3]
    return F.conv2d(x.double().permute(0, 3, 1, 2), wt.double().permute(2, 0, 1)[:, None], padding=1,
                    groups=C).permute(0, 2, 3, 1)


def replay_gl_rows(cfg, x, wt, nprog_cap=None):
    """fp64 CPU replay of gl_rows' program structure: per program its strips in order; the k-th row as
    boxes A (TW columns at w0 - 1) and B (the same, G = 4 further) with zeros outside x; pieces P(m)
    (stride-G windows of A or B); residue classes b with taps P(b), P(b+1), P(b+2); the two rolling
    accumulators; clipped stores."""
    N, H, W, C = x.shape
    BH, TW, BC, G = cfg["BH"], cfg["TW"], cfg["BC"], 4
    R = BH + 2
    HB, WB, CB = grid_dims(cfg, N, H, W, C)
    n_strips = N * HB * WB
    nprog = n_strips * CB if nprog_cap is None else min(n_strips * CB, nprog_cap // CB * CB)
    xd, wd = x.double(), wt.double()
    y = torch.full(x.shape, float("nan"), dtype=torch.float64)

    def box(n, h, w, c0):
        out = torch.zeros(TW, BC, dtype=torch.float64)
        lo, hi = max(w, 0), min(w + TW, W)
        if 0 <= h < H and lo < hi and c0 < C:
            out[lo - w:hi - w, :min(BC, C - c0)] = xd[n, h, lo:hi, c0:c0 + BC]
        return out

    for pid in range(nprog):
        cb, j0, jstep = pid % CB, pid // CB, nprog // CB
        K = (n_strips - j0 + jstep - 1) // jstep * R
        c0 = cb * BC
        wv = torch.zeros(3, 3, BC, dtype=torch.float64)
        wv[:, :, :max(0, min(BC, C - c0))] = wd[:, :, c0:c0 + BC]
        acc_i = [torch.zeros(TW // G, BC, dtype=torch.float64) for _ in range(G)]
        acc_p = [torch.zeros(TW // G, BC, dtype=torch.float64) for _ in range(G)]
        for k in range(K):
            j, r = j0 + (k // R) * jstep, k % R
            wb, hb, n = j % WB, (j // WB) % HB, j // (WB * HB)
            h = hb * BH - 1 + r
            A, B = box(n, h, wb * TW - 1, c0), box(n, h, wb * TW - 1 + G, c0)
            P = [A.view(TW // G, G, BC)[:, m] if m < G else B.view(TW // G, G, BC)[:, m - G] for m in range(G + 2)]
            o = hb * BH + r - 2
            for b in range(G):
                f = P[b:b + 3]
                done = acc_p[b] + sum(f[q] * wv[2, q] for q in range(3))
                acc_p[b] = acc_i[b] + sum(f[q] * wv[1, q] for q in range(3))
                acc_i[b] = sum(f[q] * wv[0, q] for q in range(3))
                if r >= 2 and o < H:
                    for a in range(TW // G):
                        wcol = wb * TW + G * a + b
                        if wcol < W:
                            y[n, o, wcol, c0:c0 + BC] = done[a, :min(BC, C - c0)]
    return y


def dry_run_checks(only) -> bool:
    """gl_rows' replay here; the plain Triton kernels under TRITON_INTERPRET in a child process."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(TINY["N"], TINY["H"], TINY["W"], TINY["C"], generator=g, dtype=torch.float64)
    wt = torch.randn(3, 3, TINY["C"], generator=g, dtype=torch.float64)
    ref = reference(x, wt)
    ok = True
    print(f"== CPU checks on {TINY} against float64 torch", flush=True)
    for name, cfg in VARIANTS:
        if cfg["kernel"] != "gl_rows" or (only and name not in only):
            continue
        small = dict(cfg, TW=min(cfg["TW"], 8), BC=min(cfg["BC"], 16), BH=min(cfg["BH"], 3))
        for cap in (None, 5):
            err = (replay_gl_rows(small, x, wt, cap) - ref).abs().max().item()
            ok &= err < 1e-9
            print(f"  {name:38s} replay (TW{small['TW']} BC{small['BC']} BH{small['BH']}, programs cap {cap}) "
                  f"max abs err {err:.2e}", flush=True)
    env = dict(os.environ, TRITON_INTERPRET="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--interp-check"] + (["--only", ",".join(only)] if only else [])
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    print(res.stdout + res.stderr[-3000:], end="", flush=True)
    return ok and res.returncode == 0


def interp_check(only) -> int:
    """(child, TRITON_INTERPRET=1) plain Triton variants on fp16 CPU tensors, output poisoned, against
    float64 torch on the tiny odd case, at the variant's tile sizes and at reduced ones."""
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(TINY["N"], TINY["H"], TINY["W"], TINY["C"], generator=g) * 0.5).half()
    wt = (torch.randn(3, 3, TINY["C"], generator=g) * 0.5).half()
    ref = reference(x, wt)
    bad = 0
    for name, cfg in VARIANTS:
        if cfg["kernel"] == "gl_rows" or (only and name not in only):
            continue
        for c in (cfg, dict(cfg, BH=3 if cfg["kernel"] == "tri_rows" else 2, BW=4, BC=16)):
            launch, out = launcher(c, x, wt)
            out.fill_(float("nan"))
            launch()
            err = (out.double() - ref).abs().max().item()
            bad += not err < 1e-2
            print(f"  {name:38s} interpreter (BH{c['BH']} BW{c['BW']} BC{c['BC']}) max abs err {err:.2e}", flush=True)
    return 1 if bad else 0


# ---------------------------------------------------------------- GPU: check and time

def wait_or_die(what: str, seconds: float = 20.0) -> None:
    """Synchronise, but exit the process (a hung kernel cannot be recovered) after ``seconds``."""
    ev = torch.cuda.Event()
    ev.record()
    t0 = time.time()
    while not ev.query():
        if time.time() - t0 > seconds:
            print(f"  {what}: HUNG (no completion after {seconds:.0f} s); exiting", flush=True)
            os._exit(3)
        time.sleep(0.01)


def make_case(case, seed=0):
    """(x NHWC fp16 contiguous, wt (3, 3, C) fp16, x as NCHW channels_last view, torch weight (C, 1, 3, 3),
    fp32 reference NHWC)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(case["N"], case["H"], case["W"], case["C"], device="cuda", dtype=torch.float16, generator=g)
    wt = (torch.randn(3, 3, case["C"], device="cuda", dtype=torch.float16, generator=g) / 3).half()
    xc, wc = x.permute(0, 3, 1, 2), wt.permute(2, 0, 1)[:, None].contiguous()
    ref = F.conv2d(xc.float(), wc.float(), padding=1, groups=case["C"]).permute(0, 2, 3, 1)
    return x, wt, xc, wc, ref


def check(name, cfg, case, seed) -> float:
    """Max abs error against fp32 torch on ``case``, output poisoned with NaN first (NaN if any left)."""
    x, wt, _, _, ref = make_case(case, seed)
    launch, out = launcher(cfg, x, wt)
    out.fill_(float("nan"))
    launch()
    wait_or_die(name)
    return (out.float() - ref).abs().max().item()


def run(only, rows, save, deadline) -> None:
    case = BENCH
    mb = 2 * case["N"] * case["H"] * case["W"] * case["C"] * 2 / 1e6
    x, wt, xc, wc, ref = make_case(case)
    print(f"== depthwise 3x3 pad 1 fp16 NHWC N{case['N']} H{case['H']} W{case['W']} C{case['C']} ({mb:.1f} MB)",
          flush=True)

    def emit(row):
        if row.get("us"):
            row["tbps"] = mb / row["us"] / 1e6
        rows.append(row)
        save()
        us = f"{row['us']:.1f} us" if row.get("us") else "-"
        print(f"  {row['variant']:38s} {us:>10} err {row.get('err', '-')!s:>10} err odd {row.get('err_odd', '-')!s:>10}"
              f"  {row.get('note', '') or row.get('error', '')[:300]}", flush=True)

    torch_fn = lambda: F.conv2d(xc, wc, padding=1, groups=case["C"])  # noqa: E731
    assert torch_fn().is_contiguous(memory_format=torch.channels_last)
    row = dict(variant="torch (cuDNN, channels_last)")
    row["err"] = (torch_fn().float().permute(0, 2, 3, 1) - ref).abs().max().item()
    row["us"] = triton.testing.do_bench(torch_fn, return_mode="median") * 1e3
    emit(row)
    for name, cfg in VARIANTS:
        if only and name not in only:
            continue
        if time.time() > deadline:
            emit(dict(variant=name, cfg=cfg, note="skipped: time budget"))
            continue
        row = dict(variant=name, cfg=cfg)
        t0 = time.time()
        try:
            row["err_odd"] = check(name, cfg, ODD, seed=1)
            launch, out = launcher(cfg, x, wt)
            out.fill_(float("nan"))
            launch()
            wait_or_die(name)
            row["err"] = (out.float() - ref).abs().max().item()
            if not (row["err"] < 1e-2 and row["err_odd"] < 1e-2):
                row["note"] = "WRONG: not timed"
            else:
                row["us"] = triton.testing.do_bench(launch, return_mode="median") * 1e3
        except Exception as e:  # noqa: BLE001 - a failing variant is a result
            row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        row["wall_s"] = time.time() - t0
        emit(row)
    row = dict(variant="torch.compile")
    try:
        if time.time() > deadline:
            raise TimeoutError("time budget spent before torch.compile")
        comp = torch.compile(lambda a, b: F.conv2d(a, b, padding=1, groups=case["C"]))
        comp_fn = lambda: comp(xc, wc)  # noqa: E731
        row["err"] = (comp_fn().float().permute(0, 2, 3, 1) - ref).abs().max().item()
        row["us"] = triton.testing.do_bench(comp_fn, return_mode="median") * 1e3
    except Exception as e:  # noqa: BLE001 - a failing baseline is a result
        row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    emit(row)
    row = dict(variant="torch (cuDNN) again")
    row["us"] = triton.testing.do_bench(torch_fn, return_mode="median") * 1e3
    emit(row)
    cud = min((r["us"] for r in rows if r["variant"].startswith("torch (cuDNN") and r.get("us")), default=None)
    tc = next((r["us"] for r in rows if r["variant"] == "torch.compile" and r.get("us")), None)
    print(f"\n{'variant':38s} {'us':>8} {'TB/s':>6} {'vs cuDNN':>9} {'vs compile':>10} {'err':>9} {'err odd':>9}")
    for r in rows:
        us = r.get("us")
        print(f"{r['variant']:38s} {us or float('nan'):8.1f} {r.get('tbps', float('nan')):6.2f} "
              f"{(cud / us if us and cud else float('nan')):8.2f}x {(tc / us if us and tc else float('nan')):9.2f}x "
              f"{r.get('err', float('nan')):9.2e} {r.get('err_odd', float('nan')):9.2e}"
              f"  {r.get('note', '') or r.get('error', '')[:120]}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="variant names to keep, comma-separated")
    ap.add_argument("--out", default="", help="write probe_depthwise2.json (with --compile-only also TTGIR/PTX) here")
    ap.add_argument("--compile-only", action="store_true", help="compile every variant for sm_90; no GPU needed")
    ap.add_argument("--dry-run", action="store_true", help="--compile-only plus CPU checks (interpreter, replay)")
    ap.add_argument("--budget-s", type=float, default=130.0, help="stop timing new variants after this many s")
    ap.add_argument("--interp-check", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    unknown = only - {name for name, _ in VARIANTS}
    if unknown:
        ap.error(f"--only: no variant named {sorted(unknown)}; variants: {[name for name, _ in VARIANTS]}")
    if a.interp_check:
        sys.exit(interp_check(only))
    t_start = time.time()
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "probe_depthwise2.json") if a.out else ""
    info = dict(triton=triton.__version__, torch=torch.__version__, case=BENCH, odd_case=ODD)
    if a.compile_only or a.dry_run:
        rows = compile_only(only, a.out)
        ok = dry_run_checks(only) if a.dry_run else True
        if path:
            with open(path, "w") as f:
                json.dump(dict(info, mode="compile-only", rows=rows), f, indent=1)
        if not ok or any("error" in r for r in rows):
            sys.exit(1)
        return
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: use --compile-only or --dry-run")
    info["device"] = torch.cuda.get_device_name()
    print(f"{info['device']}: torch {torch.__version__}, triton {triton.__version__}", flush=True)
    rows: list[dict] = []

    def save():
        if path:
            with open(path, "w") as f:
                json.dump(dict(info, mode="gpu", rows=rows), f, indent=1)

    run(only, rows, save, t_start + a.budget_s)
    print(f"total {time.time() - t_start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
