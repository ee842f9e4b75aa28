"""What a 3x3 / stride 2 / padding 1 max pool can reach on the H200 (issue 16): hand-written Triton kernels, no dtriton.

    PYTHONPATH=src python3 bench/probe_pool.py [--dtypes float16,float32] [--out DIR] [--dry-run]

dtriton's default kernel (``library.max_pool2d_window``, s6: 276.6 us fp16, 340.5 fp32 on 16x64x512x512, against
torch.compile's 255.1 / 335.9) is issue-bound: ~98 sm_90 instructions an output (per tap: the index computed
again, four compares for the padding mask, a 64-bit address, the -inf fill). Each kernel here computes the same
pool of (N, H, W) images (N = 16*64) in programs of ``BH`` x ``BW`` outputs, 4 warps, the nine taps unrolled:

- ``per-tap``: as dtriton prints it (index and mask recomputed per tap), the reference point;
- ``shifted``: the pointer block of the window's first tap computed once, each tap adding ``r * W + q``
  (a constant-offset load), masks from per-row and per-column tests;
- ``interior``: ``shifted``, and programs whose windows all lie inside the image (all but the border ones)
  load without masks (a branch per program), the border programs as ``shifted``;
- ``pairs``: each of the three input rows of an output row is read as one contiguous load of ``2 * BW`` columns
  split in registers into the taps ``2w`` and ``2w + 1`` (``tl.split``), plus one strided load for ``2w - 1``
  (6 vector-friendly loads an output row instead of 9 gathers).

``max`` folds in fp32 (as dtriton) or, with ``native``, in the input dtype (exact for a max). Every kernel is
checked against ``torch.nn.functional.max_pool2d`` (bitwise: a max is exact) before it is timed (CUDA-graph
replay, bench/run.py). ``--out``: ``probe_pool.json`` there. ``--dry-run``: the interpreter, a tiny tensor.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

import torch

if "--dry-run" in sys.argv:   # the interpreter must be chosen before the kernels are decorated
    os.environ["TRITON_INTERPRET"] = "1"
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R  # noqa: E402  (the suite's timing)
from dtriton.backends.triton.npcompat import install as install_numpy_shim  # noqa: E402  (interpreter, numpy >= 2.4)


@triton.jit
def _tap_masked(acc, base, ih0, iw0, H, W, r: tl.constexpr, q: tl.constexpr, NATIVE: tl.constexpr):
    ok = (ih0 + r >= 0) & (ih0 + r < H) & (iw0 + q >= 0) & (iw0 + q < W)
    v = tl.load(base + (r * W + q), mask=ok, other=-float("inf"))
    if not NATIVE:
        v = v.to(tl.float32)
    return tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def pool3(x_ptr, out_ptr, H, W, Ho, Wo, BH: tl.constexpr, BW: tl.constexpr, MODE: tl.constexpr,
          NATIVE: tl.constexpr):
    """MODE 0: per-tap, 1: shifted, 2: interior, 3: pairs (see the module docstring)."""
    pid = tl.program_id(0)
    nh = tl.cdiv(Ho, BH)
    nw = tl.cdiv(Wo, BW)
    img = pid // (nh * nw)
    rem = pid % (nh * nw)
    ph = rem // nw
    pw = rem % nw
    oh = ph * BH + tl.arange(0, BH)[:, None]
    ow = pw * BW + tl.arange(0, BW)[None, :]
    xi = x_ptr + img.to(tl.int64) * H * W
    dt = x_ptr.dtype.element_ty if NATIVE else tl.float32
    acc = tl.full((BH, BW), -float("inf"), dtype=dt)
    if MODE == 0:
        for r in tl.static_range(3):
            for q in tl.static_range(3):
                ih = oh * 2 + r - 1
                iw = ow * 2 + q - 1
                ok = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                v = tl.load(xi + ih * W + iw, mask=ok, other=-float("inf"))
                if not NATIVE:
                    v = v.to(tl.float32)
                acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
    elif MODE == 3:
        # pairs: input columns (2w, 2w+1) of each output column w come from one contiguous row load of
        # 2*BW elements split in registers; the tap 2w-1 is one strided load; rows 2h-1, 2h, 2h+1 per output row
        cw = pw * BW * 2 + tl.arange(0, 2 * BW)[None, :]
        iw_l = ow * 2 - 1
        for r in tl.static_range(3):
            ih = oh * 2 + r - 1
            rok = (ih >= 0) & (ih < H)
            row = xi + ih * W
            v2 = tl.load(row + cw, mask=rok & (cw < W), other=-float("inf"))
            a, b = tl.split(tl.reshape(v2, (BH, BW, 2)))
            v1 = tl.load(row + iw_l, mask=rok & (iw_l >= 0) & (iw_l < W), other=-float("inf"))
            if not NATIVE:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
                v1 = v1.to(tl.float32)
            acc = tl.maximum(acc, tl.maximum(tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL), v1,
                                             propagate_nan=tl.PropagateNan.ALL), propagate_nan=tl.PropagateNan.ALL)
    else:
        ih0 = oh * 2 - 1
        iw0 = ow * 2 - 1
        base = xi + ih0 * W + iw0
        inside = False
        if MODE == 2:
            inside = (ph * BH * 2 - 1 >= 0) & ((ph * BH + BH - 1) * 2 + 1 < H) & (pw * BW * 2 - 1 >= 0) \
                & ((pw * BW + BW - 1) * 2 + 1 < W) & (ph * BH + BH <= Ho) & (pw * BW + BW <= Wo)
        if inside:
            for r in tl.static_range(3):
                for q in tl.static_range(3):
                    v = tl.load(base + (r * W + q))
                    if not NATIVE:
                        v = v.to(tl.float32)
                    acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
        else:
            for r in tl.static_range(3):
                for q in tl.static_range(3):
                    acc = _tap_masked(acc, base, ih0, iw0, H, W, r, q, NATIVE)
    tl.store(out_ptr + img.to(tl.int64) * Ho * Wo + oh * Wo + ow, acc.to(out_ptr.dtype.element_ty),
             mask=(oh < Ho) & (ow < Wo))


MODES = {0: "per-tap", 1: "shifted", 2: "interior", 3: "pairs"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="float16,float32")
    ap.add_argument("--out", default="", help="directory for probe_pool.json (none: print only)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
        install_numpy_shim()
    n, h, w = (3, 13, 41) if a.dry_run else (16 * 64, 512, 512)
    ho, wo = (h + 2 - 3) // 2 + 1, (w + 2 - 3) // 2 + 1
    shapes = ((2, 8),) if a.dry_run else ((2, 256), (4, 128), (8, 64))
    table = []
    for d in a.dtypes.split(","):
        x = torch.randn(n, h, w, device=R.DEV, dtype=getattr(torch, d))
        ref = torch.nn.functional.max_pool2d(x.unsqueeze(1), 3, 2, 1).squeeze(1)
        rows = []
        for (bh, bw), mode, native in itertools.product(shapes, MODES, (False, True)):
            out = torch.full((n, ho, wo), float("nan"), device=R.DEV, dtype=x.dtype)   # poisoned

            def fn(bh=bh, bw=bw, mode=mode, native=native, out=out):
                grid = (n * triton.cdiv(ho, bh) * triton.cdiv(wo, bw),)
                pool3[grid](x, out, h, w, ho, wo, BH=bh, BW=bw, MODE=mode, NATIVE=native, num_warps=4)
            fn()
            ok = bool(torch.equal(out, ref))
            us = R.graph_time_us(fn, reps=5, iters=5) if ok else float("nan")
            rows.append({"dtype": d, "outputs": f"{bh}x{bw}", "mode": MODES[mode], "native": native, "us": us,
                         "exact": ok, "tbs": (x.numel() + out.numel()) * x.element_size() / us / 1e6})
        table += rows
        for r in sorted(rows, key=lambda r: -r["us"] if r["us"] == r["us"] else 0):
            print(f"{d:8s} {r['outputs']:6s} {r['mode']:9s} {'native' if r['native'] else 'fp32  '}: "
                  f"{r['us']:8.1f} us {r['tbs']:6.3f} TB/s  {'exact' if r['exact'] else 'WRONG: not timed'}",
                  flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "probe_pool.json"), "w") as f:
            json.dump({"shape": [n, h, w], "rows": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
