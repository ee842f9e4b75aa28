"""Why batch norm's output kernel trails torch.compile's by ~3.5% on the H200 (issue 16): hand-written variants.

    PYTHONPATH=src python3 bench/probe_bn_out.py [--dtypes float16,float32] [--out DIR] [--dry-run]

Batch norm 64x64x512x512 (s8 call 4): dtriton 1525 us fp16 (statistics 484.7, a 2.4 us finishing kernel, output
1032) against torch.compile 1489 (its output kernel ~996-1003). The output pass reads X once and writes Y once
(4.3 GB fp16) with a per-channel scale and shift. dtriton's kernel (``library.batch_norm``'s ``out`` stage) takes
programs of 8 x 512 elements of one (n, c) plane, 4 warps, tiles in reverse launch order, and computes
``rsqrt(var + eps)`` per program. The variants here, each checked against torch first:

- ``tile BHxBQ wW [rev]``: dtriton's shape (2-D tile of one plane; ``rev``: reverse launch order);
- ``flat B wW``: programs of B contiguous elements of one plane (1-D);
- ``gather B wW``: programs of B contiguous elements of the flat tensor, the channel of every element computed
  and its scale / shift gathered (as inductor's pointwise kernels do);
- ``torch.compile``: the same output expression compiled, given the statistics.
``--dry-run``: the interpreter, a tiny tensor.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

if "--dry-run" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R  # noqa: E402
from dtriton.backends.triton.npcompat import install as install_numpy_shim  # noqa: E402


@triton.jit
def _tile(x, y, mean, var, w, b, C, H, Q, BH: tl.constexpr, BQ: tl.constexpr, REV: tl.constexpr):
    nh = H // BH
    nq = Q // BQ
    total = tl.num_programs(0)
    pid = tl.program_id(0)
    if REV:
        pid = total - 1 - pid
    plane = pid // (nh * nq)
    rem = pid % (nh * nq)
    c = plane % C
    h = (rem // nq) * BH + tl.arange(0, BH)[:, None]
    q = (rem % nq) * BQ + tl.arange(0, BQ)[None, :]
    off = plane.to(tl.int64) * H * Q + h * Q + q
    v = tl.load(x + off).to(tl.float32)
    s = (1.0 / tl.sqrt_rn(tl.load(var + c) + 1e-5)) * tl.load(w + c).to(tl.float32)
    t = tl.load(b + c).to(tl.float32) - tl.load(mean + c) * s
    tl.store(y + off, (v * s + t).to(y.dtype.element_ty))


@triton.jit
def _flat(x, y, mean, var, w, b, C, HQ, B: tl.constexpr):
    pid = tl.program_id(0)
    per = HQ // B
    plane = pid // per
    c = plane % C
    off = plane.to(tl.int64) * HQ + (pid % per) * B + tl.arange(0, B)
    v = tl.load(x + off).to(tl.float32)
    s = (1.0 / tl.sqrt_rn(tl.load(var + c) + 1e-5)) * tl.load(w + c).to(tl.float32)
    t = tl.load(b + c).to(tl.float32) - tl.load(mean + c) * s
    tl.store(y + off, (v * s + t).to(y.dtype.element_ty))


@triton.jit
def _gather(x, y, mean, var, w, b, C, HQ, B: tl.constexpr):
    off = tl.program_id(0).to(tl.int64) * B + tl.arange(0, B)
    c = (off // HQ) % C
    v = tl.load(x + off).to(tl.float32)
    s = (1.0 / tl.sqrt_rn(tl.load(var + c) + 1e-5)) * tl.load(w + c).to(tl.float32)
    t = tl.load(b + c).to(tl.float32) - tl.load(mean + c) * s
    tl.store(y + off, (v * s + t).to(y.dtype.element_ty))


def variants(n, c, h, q, dry):
    """name -> launcher(x, y, mean, var, w, b)."""
    hq = h * q
    out = {}
    tiles = [(2, 8, 4, False)] if dry else [(8, 512, 4, True), (8, 512, 4, False), (4, 512, 4, True),
                                            (16, 512, 8, True), (2, 512, 4, True), (8, 256, 4, True)]
    for bh, bq, w_, rev in tiles:
        out[f"tile {bh}x{bq} w{w_}{' rev' if rev else ''}"] = (
            lambda *a, bh=bh, bq=bq, w_=w_, rev=rev: _tile[(n * c * (h // bh) * (q // bq),)](
                *a, c, h, q, BH=bh, BQ=bq, REV=rev, num_warps=w_))
    for blk, w_ in ([(16, 4)] if dry else [(1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8)]):
        out[f"flat {blk} w{w_}"] = (lambda *a, blk=blk, w_=w_: _flat[(n * c * hq // blk,)](*a, c, hq, B=blk,
                                                                                           num_warps=w_))
        out[f"gather {blk} w{w_}"] = (lambda *a, blk=blk, w_=w_: _gather[(n * c * hq // blk,)](*a, c, hq, B=blk,
                                                                                               num_warps=w_))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="float16,float32")
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
        install_numpy_shim()
    n, c, h, q = (2, 3, 4, 16) if a.dry_run else (64, 64, 512, 512)
    rows = []
    for d in a.dtypes.split(","):
        dt_ = getattr(torch, d)
        x = torch.randn(n, c, h, q, device=R.DEV, dtype=dt_)
        mean = x.float().mean((0, 2, 3))
        var = x.float().var((0, 2, 3), unbiased=False)
        w = torch.randn(c, device=R.DEV, dtype=dt_)
        b = torch.randn(c, device=R.DEV, dtype=dt_)
        view = (1, c, 1, 1)

        def eager(x=x):
            return ((x.float() - mean.view(view)) * torch.rsqrt(var.view(view) + 1e-5) * w.float().view(view)
                    + b.float().view(view)).to(x.dtype)
        ref = eager()
        cands = dict(variants(n, c, h, q, a.dry_run))
        if not a.dry_run:
            comp = torch.compile(eager)
            cands["torch.compile"] = None
        for name, launch in cands.items():
            y = torch.full_like(x, float("nan"))
            if launch is None:
                fn = comp
            else:
                def fn(launch=launch, y=y):
                    launch(x, y, mean, var, w, b)
                    return y
            got = fn()
            err = float((got.float() - ref.float()).abs().max())
            ok = err <= (1e-2 if d == "float16" else 1e-4) * float(ref.float().abs().max())
            us = R.graph_time_us(fn, reps=5, iters=5) if ok else float("nan")
            rows.append({"dtype": d, "impl": name, "us": us, "ok": ok, "err": err,
                         "tbs": 2 * x.numel() * x.element_size() / us / 1e6})
            print(f"{d:8s} {name:22s} {us:9.1f} us {rows[-1]['tbs']:6.3f} TB/s  err {err:.1e} "
                  f"{'ok' if ok else 'WRONG: not timed'}", flush=True)
            del y
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "probe_bn_out.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
