"""Issue 19: convolutions written in index notation against torch (cuDNN) and torch.compile.

    PYTHONPATH=src python3 bench/conv.py [--budget SECONDS] [--no-compile] [--cases conv2d,depthwise,...]
    PYTHONPATH=src python3 bench/conv.py --dry-run     # here: interpreter, tiny shapes, no timing

Cases (fp16; shapes of the issue's marks):

- ``conv2d``: 3x3, pad 1, channels-last, N32 C256 H56 W56 K256 (the implicit GEMM:
  ``dtriton.library.conv2d_nhwc``); 118.4 GFLOP (59.2 G multiply-adds), 169 us at 700 TFLOP/s
  (H200, 01:05 UTC: cuDNN 159.9 us, 740 TFLOP/s). On Hopper the default row runs the Gluon conv2d
  (``dtriton.plan.gluon_conv``; its note says "Gluon conv2d"), the ``ws=False`` row the Triton kernel.
- ``depthwise``: 3x3, pad 1, C = groups = 256, same image (``depthwise_conv2d_nhwc``: not a
  GEMM; its floor is the bytes: 51 MB in, 51 MB out). On Hopper the default row runs the Gluon depthwise
  kernel (``dtriton.plan.gluon_depthwise``; its note says "Gluon depthwise"), ``ws=True`` asks for it,
  the ``ws=False`` row runs the Triton kernel.
- ``conv1d``: kernel 3, stride 2, dilation 2, pad 2, N32 C256 L4096 K256, as torch's NCL layout
  (``conv1d``) and channels-last (NLC, defined here).
- ``gemm of conv2d (im2col)``: the conv2d's implicit GEMM (M = N*H*W, N = K, K = 9*C) on its input
  materialised as rows (not a convolution: a reference for what Triton reaches on the same GEMM with a
  plain row-major A, against cuBLAS).
- ``conv_transpose2d``: 3x3, stride 2, pad 1, output_padding 1, N32 C128 28x28 -> K128 56x56, in
  the gather form (``conv_transpose2d``, NCHW; and channels-last, defined here), which multiplies
  the stride's zeros too (4x the FLOPs at stride 2), and by output phases
  (``conv_transpose2d_phases``: one implicit GEMM per phase pair over its own taps, 1.8x the
  FLOPs for a 3x3 kernel at stride 2, none wasted for 4x4).

Every row is first checked against torch in float64 on the same inputs; a row off by more than
2e-2 (relative norm) is not timed. Kernel time: CUDA-graph replay (``bench/run.py``'s
``graph_time_us``); call time: plain calls. ``--budget S`` adds a row with ``dt.explore``'s
schedule (S seconds per case); ``--variants`` a row per schedule variant of :data:`VARIANTS`. Prints a table last; writes ``conv.json`` under ``--out`` or
``$OUT`` when set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import dtriton as dt  # noqa: E402
from dtriton import library as L  # noqa: E402
import run as R  # noqa: E402  (timing, checking and tuning helpers of the suite)

ROWS: list[dict] = []
COMPILE_CAP_S = 60.0   # a torch.compile row (compile, check, timing) slower than this: the later cases skip theirs
SLOW_COMPILE: list[str] = []
PICK: list[str] = []   # --variants NAME,...: the variants to run ("all": every one)
OUT: list[str] = []   # the --out folder, once known: conv.json is rewritten after every row (a run cut short keeps its rows)


@dt.algorithm
def conv1d_nlc(X: dt.Tensor["N", "L", "C"], Wt: dt.Tensor["O", "R", "C"], stride: int, padding: int, dilation: int,
               Lo: int):
    """conv1d channels-last: X (N, L, C), Wt (O, R, C) -> (N, Lo, O)."""
    n, o, c, t, r = dt.axes("n o c t:Lo r")
    return dt.sum(X.pad(0.0)[n, t * stride + r * dilation - padding, c] * Wt[o, r, c], over=(c, r))[n, t, o]


@dt.algorithm
def conv_transpose2d_nhwc(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["O", "R", "Q", "C"], stride: int,
                          padding: int, Ho: int, Wo: int):
    """conv_transpose2d channels-last in gather form: X (N, H, W, C), Wt (O, R, Q, C) (torch's
    (C, O, R, Q) weight permuted) -> (N, Ho, Wo, O)."""
    n, o, c, h, w, r, q = dt.axes("n o c h:Ho w:Wo r q")
    y, x = h + padding - r, w + padding - q
    hit = (y % stride == 0) & (x % stride == 0)
    return dt.sum(dt.where(hit, X.pad(0.0)[n, y // stride, x // stride, c], 0.0) * Wt[o, r, q, c],
                  over=(c, r, q))[n, h, w, o]


@dt.algorithm
def conv_transpose2d_phases_nhwc(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["O", "R", "Q", "C"], stride: int,
                                 padding: int, Hh: int, Wh: int, J: int):
    """``dtriton.library.conv_transpose2d_phases`` channels-last: X (N, H, W, C), Wt (O, R, Q, C) ->
    (N, Hh, stride, Wh, stride, O), viewed as (N, Ho, Wo, O)."""
    n, o, c, a, b, j, i = dt.axes("n o c a:Hh b:Wh j:J i:J")
    ph, pw = dt.axes("ph:stride pw:stride")
    x = X.pad(0.0)[n, a + (ph + padding) // stride - j, b + (pw + padding) // stride - i, c]
    wt = Wt.pad(0.0)[o, (ph + padding) % stride + j * stride, (pw + padding) % stride + i * stride, c]
    return dt.sum(x * wt, over=(c, j, i))[n, a, ph, b, pw, o]


def osize(n: int, k: int, s: int, p: int, d: int = 1) -> int:
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def cases(dev: str, dry: bool):
    """(case, [(impl name, algorithm, args, output -> torch layout)], torch fn, torch args, GFLOP, MB moved)."""
    dt16 = torch.float16 if not dry else torch.float32
    g = torch.Generator().manual_seed(0)

    def rnd(*shape):
        return (torch.randn(*shape, generator=g) * 0.5).to(dt16).to(dev)
    N, C, H, K = (32, 256, 56, 256) if not dry else (2, 16, 7, 16)
    x, w = rnd(N, H, H, C), rnd(K, 3, 3, C)
    xc, wc = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)           # NCHW views of channels-last memory
    to_nchw = lambda o: o.permute(0, 3, 1, 2)  # noqa: E731
    gf = 2 * N * H * H * K * C * 9 / 1e9
    mb = (x.numel() + w.numel() + N * H * H * K) * x.element_size() / 1e6
    # the weight stored (R, Q, C, O): its output channels contiguous, the GEMM's B operand N-major (the "NN"
    # layout; torch's channels-last weight is (O, R, Q, C), K-major: "NT", slower in Triton 3.6's GEMMs)
    w_rqco = w.permute(1, 2, 3, 0).contiguous().permute(3, 0, 1, 2)
    # the default: the Gluon conv2d on Hopper where it applies (plan.gluon_conv); warp_specialize=False: the
    # Triton kernel on the same tensors; the (R, Q, C, O) weight is not contiguous: the Triton kernel too
    triton_only = (L.conv2d_nhwc, dt.Schedule(warp_specialize=False))
    gluon = (L.conv2d_nhwc, dt.Schedule(warp_specialize=True))   # (the Gluon conv2d asked for: plan.gluon_conv)
    yield ("conv2d 3x3 NHWC", [("dtriton", L.conv2d_nhwc, [x, w, 1, 1, 1, H, H], to_nchw),
                               ("dtriton ws=True", gluon, [x, w, 1, 1, 1, H, H], to_nchw),
                               ("dtriton ws=False", triton_only, [x, w, 1, 1, 1, H, H], to_nchw),
                               ("dtriton W (R,Q,C,O)", L.conv2d_nhwc, [x, w_rqco, 1, 1, 1, H, H], to_nchw)],
           lambda a, b: F.conv2d(a, b, padding=1), [xc, wc], gf, mb)
    wd = rnd(3, 3, C)
    wdt = wd.permute(2, 0, 1)[:, None]                                 # (C, 1, 3, 3)
    # the default loops over the taps (schedule.conv_rules.depthwise_tiles); the generic reduction
    # rules held the 3x3 window whole (4x4 padded lanes) for one pixel x all channels per program
    whole = dt.Schedule(tile={"n": 1, "h": 1, "w": 1, "c": C}, grid=("n", "h", "w", "c"),
                        strategy={"r": "whole", "q": "whole"}, num_warps=4)
    # the default: the Gluon depthwise kernel on Hopper where it applies (plan.gluon_depthwise); ws=True asks
    # for it; ws=False: the Triton kernel (schedule.conv_rules.depthwise_tiles) on the same tensors
    dw_args = [x, wd, 1, 1, H, H]
    yield ("depthwise 3x3 NHWC", [("dtriton", L.depthwise_conv2d_nhwc, dw_args, to_nchw),
                                  ("dtriton ws=True", (L.depthwise_conv2d_nhwc, dt.Schedule(warp_specialize=True)),
                                   dw_args, to_nchw),
                                  ("dtriton ws=False", (L.depthwise_conv2d_nhwc, dt.Schedule(warp_specialize=False)),
                                   dw_args, to_nchw),
                                  ("dtriton taps whole", (L.depthwise_conv2d_nhwc, whole), dw_args, to_nchw)],
           lambda a, b: F.conv2d(a, b, padding=1, groups=C), [xc, wdt], 2 * N * H * H * C * 9 / 1e9,
           2 * x.numel() * x.element_size() / 1e6)
    Lx = 4096 if not dry else 23
    s, p, d = 2, 2, 2
    lo = osize(Lx, 3, s, p, d)
    x1, w1 = rnd(N, C, Lx), rnd(K, C, 3)
    x1l, w1l = x1.transpose(1, 2).contiguous(), w1.permute(0, 2, 1).contiguous()
    yield (f"conv1d k3 s{s} d{d}", [("dtriton NCL", L.conv1d, [x1, w1, s, p, d, lo], lambda o: o),
                                    ("dtriton NLC", conv1d_nlc, [x1l, w1l, s, p, d, lo], lambda o: o.transpose(1, 2))],
           lambda a, b: F.conv1d(a, b, stride=s, padding=p, dilation=d), [x1, w1], 2 * N * lo * K * C * 3 / 1e9,
           (x1.numel() + w1.numel() + N * K * lo) * x1.element_size() / 1e6)
    Ct, Ht = (128, 28) if not dry else (8, 5)
    ho = (Ht - 1) * 2 - 2 + 2 + 1 + 1                                   # output_padding 1
    xt, wt = rnd(N, Ct, Ht, Ht), rnd(Ct, Ct, 3, 3)
    xtl, wtl = xt.permute(0, 2, 3, 1).contiguous(), wt.permute(1, 2, 3, 0).contiguous()
    hh = ho // 2
    yield ("conv_transpose2d 3x3 s2", [("dtriton NCHW", L.conv_transpose2d, [xt, wt, 2, 1, 1, ho, ho], lambda o: o),
                                       ("dtriton NHWC", conv_transpose2d_nhwc, [xtl, wtl, 2, 1, ho, ho], to_nchw),
                                       ("dtriton phases NCHW", L.conv_transpose2d_phases, [xt, wt, 2, 1, hh, hh, 2],
                                        lambda o: o.reshape(N, Ct, ho, ho)),
                                       ("dtriton phases NHWC", conv_transpose2d_phases_nhwc, [xtl, wtl, 2, 1, hh, hh, 2],
                                        lambda o: to_nchw(o.reshape(N, ho, ho, Ct)))],
           lambda a, b: F.conv_transpose2d(a, b, stride=2, padding=1, output_padding=1), [xt, wt],
           2 * N * Ht * Ht * Ct * Ct * 9 / 1e9, (xt.numel() + wt.numel() + N * Ct * ho * ho) * xt.element_size() / 1e6)
    # the conv2d's implicit GEMM with its input materialised (im2col, rows (n, h, w), K (r, q, c)): the same
    # FLOPs as a plain GEMM whose A tile is a shared-memory view (the boxed conv's A goes through registers)
    xp = F.pad(x, (0, 0, 1, 1, 1, 1))
    cols = torch.stack([xp[:, r:r + H, q:q + H, :] for r in range(3) for q in range(3)], dim=3).reshape(N * H * H, 9 * C)
    wm = w.reshape(K, 9 * C)
    yield ("gemm of conv2d (im2col)", [("dtriton NT", L.matmul, [cols, wm.t()], lambda o: o),
                                       ("dtriton NN", L.matmul, [cols, wm.t().contiguous()], lambda o: o)],
           lambda a, b: a @ b.t(), [cols, wm], gf, (cols.numel() + wm.numel() + N * H * H * K) * 2 / 1e6)


def row(case, impl, us, call_us, gf, mb, err, sched, note=""):
    r = dict(case=case, impl=impl, kernel_us=round(us, 2), call_us=round(call_us, 2),
             tflops=round(gf * 1e3 / us, 1) if us == us and us > 0 else None,
             tbs=round(mb / us, 3) if us == us and us > 0 else None, err=err, schedule=sched, note=note)
    ROWS.append(r)
    if OUT:
        write(OUT[0], R.DRY)
    print(f"  {case:26s} {impl:22s} kernel {us:9.1f} us  call {call_us:9.1f} us  err {err if err is None else f'{err:.1e}'}"
          f"  {note}", flush=True)


def timed(case, impl, fn, ref, gf, mb, sched, note=""):
    """Check ``fn()`` against ``ref`` (float64), then time it (not when wrong)."""
    try:
        err = R.relerr(fn(), ref)
        if not err <= 2e-2:
            row(case, impl, float("nan"), float("nan"), gf, mb, err, sched, "WRONG: not timed")
            return
        row(case, impl, R.graph_time_us(fn), R.call_time_us(fn, n=10), gf, mb, err, sched, note)
    except Exception as e:  # noqa: BLE001 - recorded, the other rows go on
        row(case, impl, float("nan"), float("nan"), gf, mb, None, sched,
            f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")


#: ``--variants``: schedule fields merged into the default schedule of the first dtriton row of a case
#: (tiles merged axis by axis), a row each: which tile shape and pipeline depth the H200 prefers.
VARIANTS = {
    # the default (session 5, after call 3): 256 x 128 x 64 tiles, M a 4 x 8 x 8 box of (n, h, w) whose input
    # tile is one TMA box per tap, 4 stages, 8 warps (call 3: 202.4 us); "rows ..." are the s4 forms (M a run
    # of the flat row index, the input gathered through pointers: 295.6 / 258.6 us in call 3)
    "conv2d": {
        "box 128x256x64 s3 (call 3 default)": {"tile": {"n": 2, "o": 256}, "num_stages": 3},
        "box 256x128 8x4x8": {"tile": {"n": 8, "h": 4}},
        "box 256x128 16x2x8": {"tile": {"n": 16, "h": 2}},
        "box 256x128 s4 group 4": {"group": {"w": 4}},
        "box 256x128 s4 group 16": {"group": {"w": 16}},
        "box 256x128 s4 device descriptors": {"descriptors": "device"},
        "box 256x64x64 s4 w4": {"tile": {"o": 64}, "num_warps": 4},
        "box 256x128x32 s6": {"tile": {"c": 32}, "num_stages": 6},
        "rows 128x256x64 s3 (s4 best)": {"tile": {"n": 1, "h": 2, "w": 64, "o": 256}, "num_stages": 3},
        # session 6: persistent programs, the tile loop flattened with the K loop (plan.persistent: the next
        # tile's loads in flight during the epilogue), each box of output rows stored by TMA (in two halves of
        # o unless store_pieces 1); sm_90 shared memory per program in brackets
        "persistent 1 s4": {"persistent": 1},                                               # (197 KB)
        "persistent 1 s4 store whole": {"persistent": 1, "store_pieces": 1},                # (229 KB)
        "persistent 1 s3": {"persistent": 1, "num_stages": 3},                              # (148 KB)
        "persistent 1 128x256 s4": {"tile": {"n": 2, "o": 256}, "persistent": 1},           # (213 KB)
        "persistent 1 128x256 s3": {"tile": {"n": 2, "o": 256}, "num_stages": 3, "persistent": 1},
        "persistent 2 128x128 w4 s3": {"tile": {"n": 2}, "num_warps": 4, "num_stages": 3, "persistent": 2},  # (98 KB)
        # two 128 x 128 programs (one warp group each) per SM: one's epilogue beside the other's loop
        "box 128x128 w4 s3": {"tile": {"n": 2}, "num_warps": 4, "num_stages": 3},           # (82 KB)
        "box 128x128 w4 s4": {"tile": {"n": 2}, "num_warps": 4, "num_stages": 4},           # (115 KB)
        # K steps of 128 channels: half the steps (and CTA barriers) of the A-in-registers loop
        "box 256x128x128 s2": {"tile": {"c": 128}, "num_stages": 2},                        # (131 KB)
        "box 256x128x128 s3": {"tile": {"c": 128}, "num_stages": 3},                        # (229 KB)
    },
    # the default (session 5, after call 4): 4 x 8 x 64 (h, w, c) per program, the 3x3 taps unrolled (call 4:
    # 58.6 us; the s4 default 1 x 8 x 128 90.4); taller tiles share the rows of their taps in L1
    # the conv2d's GEMM on a materialised A (default 128x128x64 s4 w8): the conv's own tile, and persistent
    "gemm": {"256x128 s4": {"tile": {"i": 256}}, "persistent 1": {"persistent": 1},
             "256x128 persistent 1": {"tile": {"i": 256}, "persistent": 1}},
    "depthwise": {
        "taps looped (unroll 1)": {"unroll": 1},
        "1x8x128 (s4 default)": {"tile": {"h": 1, "c": 128}},
        "1x8x64": {"tile": {"h": 1}},
        "2x8x64": {"tile": {"h": 2}},
        "4x4x64": {"tile": {"w": 4}},
        "2x16x64": {"tile": {"h": 2, "w": 16}},
        "4x8x32": {"tile": {"c": 32}},
        "8x8x32": {"tile": {"h": 8, "c": 32}},
        "4x8x64 w2": {"num_warps": 2},
        "4x8x64 w8": {"num_warps": 8},
        "2x8x32 w2": {"tile": {"h": 2, "c": 32}, "num_warps": 2},
        # session 6: persistent programs whose tile loop is pipelined (plan.taps.plan_tile_stages: the next
        # tiles' nine tap loads in flight through cp.async while this tile sums; 38 KB of shared memory a stage)
        "persistent 2 s3": {"persistent": 2, "num_stages": 3},
        "persistent 3 s2": {"persistent": 3, "num_stages": 2},
        "persistent 4 s2": {"persistent": 4, "num_stages": 2},
        "persistent 1 s4": {"persistent": 1, "num_stages": 4},
        "persistent 4 s2 w8": {"persistent": 4, "num_stages": 2, "num_warps": 8},
        "persistent 2 s3 2x8x64": {"persistent": 2, "num_stages": 3, "tile": {"h": 2}},
        # session 6: taller tiles and 8 warps (under the taps' register cap, maxnreg 64 at 8 warps, the w8 rows
        # spill; without the cap, call 3: 8x8x64 w4 61.0, w8 68.6, and the 4x8x64 default 61.7 against 58.7)
        "8x8x64 w8": {"tile": {"h": 8}, "num_warps": 8},          # (115 regs, 44 instructions an output)
        "8x8x64 w4": {"tile": {"h": 8}},                          # (196 regs, 35)
        "4x16x64 w8": {"tile": {"w": 16}, "num_warps": 8},
        "persistent 2 s2 8x8x64 w8": {"persistent": 2, "num_stages": 2, "tile": {"h": 8}, "num_warps": 8},
        # session 6: each tap's input one TMA box (plan.taps.plan_tap_shifts: zeros outside the image are the
        # padding; no per-element addresses or masks; sm_90: 52-58 registers), output stored by TMA
        "tma": {"access": "tma"},
        "tma persistent 4 s2": {"access": "tma", "persistent": 4, "num_stages": 2},      # (42 KB shared)
        "tma persistent 2 s3": {"access": "tma", "persistent": 2, "num_stages": 3},      # (80 KB)
        "tma persistent 5 s2": {"access": "tma", "persistent": 5, "num_stages": 2},
        "tma persistent 2 s2 w8 8x8x64": {"access": "tma", "persistent": 2, "num_stages": 2, "tile": {"h": 8},
                                          "num_warps": 8},                                  # (83 KB)
        # session 6: rolling rows (plan.taps.plan_rolling): a program walks its h tile's input rows once, each
        # loaded at the three column shifts and added into three rolling accumulators (3 loads and conversions
        # an element instead of 9; sm_90: 64 registers); tiles of h rows x w columns x c channels
        "rolling 4x8x64": {"rolling": True},
        "rolling 8x8x64": {"rolling": True, "tile": {"h": 8}},
        "rolling 16x8x64": {"rolling": True, "tile": {"h": 16}},
        "rolling 32x8x64": {"rolling": True, "tile": {"h": 32}},
        "rolling 64x8x64": {"rolling": True, "tile": {"h": 64}},
        "rolling 16x16x64": {"rolling": True, "tile": {"h": 16, "w": 16}},
        "rolling 16x8x64 s3": {"rolling": True, "tile": {"h": 16}, "num_stages": 3},
        "rolling 16x8x128 w8": {"rolling": True, "tile": {"h": 16, "c": 128}, "num_warps": 8},
        "rolling 16x16x64 w8": {"rolling": True, "tile": {"h": 16, "w": 16}, "num_warps": 8},
    },
}


def merged(sched: dt.Schedule, fields: dict) -> dt.Schedule:
    """``sched`` with ``fields`` replaced (dict fields merged key by key)."""
    base = json.loads(sched.to_json())
    for k, v in fields.items():
        base[k] = dict(base.get(k) or {}, **v) if isinstance(v, dict) else v
    return dt.Schedule.from_json(json.dumps(base))


def run_variants(case, impl, alg, args, back, ref, gf, mb):
    """A row per :data:`VARIANTS` entry of ``case`` (schedules of the Triton kernel: ``warp_specialize``
    False unless the variant sets it, else the default's None would run the Gluon conv2d or depthwise
    kernel on Hopper whatever the tiles)."""
    variants = next((v for key, v in VARIANTS.items() if case.startswith(key)), {})
    if PICK and PICK != ["all"]:
        variants = {k: v for k, v in variants.items() if k in PICK}
    base = dt.compile(alg).schedule_for(*args).replace(warp_specialize=False)
    for vname, fields in variants.items():
        try:
            kv = dt.compile(alg, merged(base, fields))
            js = kv.schedule_for(*args).to_json()
        except Exception as e:  # noqa: BLE001
            row(case, f"{impl} {vname}", float("nan"), float("nan"), gf, mb, None, None,
                f"failed: {type(e).__name__}: {str(e)[:200]}")
            continue
        timed(case, f"{impl} {vname}", lambda kv=kv: back(kv(*args)), ref, gf, mb, js, json.dumps(fields))


def kind(src: str) -> str:
    """What a printed module runs: "Gluon conv2d" or "Gluon depthwise" (the plan chose a hand-written Gluon
    kernel, ``dtriton.plan.gluon_conv`` / ``dtriton.plan.gluon_depthwise``), else "tl.dot" or "no dot" (a
    Triton kernel)."""
    if "gluon_conv_kernels import" in src:
        return "Gluon conv2d"
    if "gluon_depthwise_kernels import" in src:
        return "Gluon depthwise"
    return "tl.dot" if "tl.dot" in src else "no dot"


def run_case(case, impls, tfn, targs, gf, mb, budget, use_compile, variants=False):
    """torch's rows first (a run cut short keeps them), then each dtriton row (and its explored
    one), then the variants."""
    ref = tfn(*[a.double() for a in targs])
    timed(case, "torch", lambda: tfn(*targs), ref, gf, mb, None, "cuDNN" if not R.DRY else "eager")
    c = R.maybe_compile(tfn, use_compile and not SLOW_COMPILE)   # (mode default: no autotuning)
    if c is not None:
        t0 = time.perf_counter()
        timed(case, "torch.compile", lambda: c(*targs), ref, gf, mb, None)
        if time.perf_counter() - t0 > COMPILE_CAP_S:   # the later cases skip their compile rows
            SLOW_COMPILE.append(case)
            print(f"  (torch.compile took over {COMPILE_CAP_S} s here: no compile rows for the later cases)")
    for name, alg, args, back in impls:
        alg, sched = alg if isinstance(alg, tuple) else (alg, None)
        try:
            k = dt.compile(alg, sched)
            js = k.schedule_for(*args).to_json()
            src = k.source_for(*args)
            dots = "tl.dot" in src
        except Exception as e:  # noqa: BLE001
            row(case, name, float("nan"), float("nan"), gf, mb, None, None, f"failed: {type(e).__name__}: {str(e)[:200]}")
            continue
        timed(case, name, lambda k=k, args=args, back=back: back(k(*args)), ref, gf, mb, js,
              kind(src) + ("" if sched is None else ", schedule given here"))
        if budget > 0 and sched is None:
            ke, note = R.tuned_kernel(alg, args, budget)
            timed(case, f"{name} explored", lambda ke=ke, args=args, back=back: back(ke(*args)), ref, gf, mb,
                  ke.schedule_for(*args).to_json(), f"{kind(ke.source_for(*args))}; {note}")
    if variants:
        name, alg, args, back = impls[0]
        run_variants(case, name, alg, args, back, ref, gf, mb)


def write(out: str, dry: bool) -> None:
    """``out``/conv.json: the device and every row so far."""
    os.makedirs(out, exist_ok=True)
    dev_name = torch.cuda.get_device_name() if torch.cuda.is_available() and not dry else "cpu (interpreter)"
    with open(os.path.join(out, "conv.json"), "w") as f:
        json.dump(dict(device=dev_name, dry_run=dry, rows=ROWS), f, indent=1)


def table() -> None:
    """The table printed last: kernel time, TFLOP/s, TB/s, and the ratio to torch of each row."""
    print(f"\n{'case':26s} {'impl':22s} {'kernel us':>10s} {'TFLOP/s':>8s} {'TB/s':>6s} {'vs torch':>8s} {'vs compile':>10s}")
    base = {(r["case"], r["impl"]): r["kernel_us"] for r in ROWS}
    for r in ROWS:
        t, c = base.get((r["case"], "torch")), base.get((r["case"], "torch.compile"))
        us = r["kernel_us"]
        ratio = lambda b: f"{b / us:.2f}x" if b and us and us == us and b == b else "-"  # noqa: E731
        print(f"{r['case'][:26]:26s} {r['impl'][:22]:22s} {us:10.1f} {r['tflops'] or float('nan'):8.1f} "
              f"{r['tbs'] or float('nan'):6.2f} {ratio(t):>8s} {ratio(c):>10s}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes (checks the script)")
    ap.add_argument("--budget", type=float, default=0.0, help="dt.explore seconds per dtriton row (0: none)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--variants", nargs="?", const="all", default="",
                    help="also time the schedule variants of VARIANTS (all, or a comma-separated list of their names)")
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names to run")
    ap.add_argument("--out", default=os.environ.get("OUT", ""), help="write conv.json here")
    a = ap.parse_args(argv)
    R.DRY = a.dry_run
    dev = "cpu" if a.dry_run else "cuda"
    want = [c for c in a.cases.split(",") if c]
    if a.out:
        OUT.append(a.out)
    PICK.extend(x for x in a.variants.split(",") if x)
    for case, impls, tfn, targs, gf, mb in cases(dev, a.dry_run):
        if want and not any(c in case for c in want):
            continue
        print(f"{case}:", flush=True)
        run_case(case, impls, tfn, targs, gf, mb, a.budget, not a.no_compile, bool(a.variants))
    if a.out:
        write(a.out, a.dry_run)
    table()
    bad = [r for r in ROWS if r["impl"].startswith("dtriton") and (r["err"] is None or not r["err"] <= 2e-2)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
