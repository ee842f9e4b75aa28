"""The rate a whole-tensor sum of squares can reach on the H200: the floor of Frobenius's statistics kernel.

    PYTHONPATH=src python3 bench/probe_sum.py [--dtypes float16,float32] [--out DIR] [--dry-run]

A hand-written Triton kernel (no dtriton) sums the squares of a flat 16x64x256x256 tensor: each of
``P`` programs loops over one contiguous chunk in steps of ``BLOCK`` elements (``tl.range``'s
``loop_unroll_factor`` ``U``; a program's chunk is whole steps, the last program's masked), writing one partial sum; the partials are not folded (a few hundred
floats). Rows ``var``: the shifted sum and sum of squares of a variance (``shifted_sums``: dtriton's
statistics loop, its shift the mean of the chunk's first step or its first value) at 264 and 528 programs. Prints kernel us (CUDA-graph replay) and TB/s per (P, BLOCK, warps, U), best last: the number
dtriton's ``frobenius_normalize_sum0`` (s5: 41-46.5 us fp16, 256 programs over rows of h) is held to.
``--out``: ``probe_sum.json`` there (every row). ``--dry-run``: the interpreter, a tiny tensor (checks the script).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

import torch

if "--dry-run" in sys.argv:   # the interpreter must be chosen before the kernel is decorated
    os.environ["TRITON_INTERPRET"] = "1"
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from dtriton.backends.triton.npcompat import install as install_numpy_shim  # noqa: E402  (interpreter, numpy >= 2.4)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R  # noqa: E402  (the suite's timing)


@triton.jit
def sum_squares(x_ptr, part_ptr, numel, per_prog, BLOCK: tl.constexpr, U: tl.constexpr):
    pid = tl.program_id(0)
    lo = pid.to(tl.int64) * per_prog
    acc = tl.zeros([BLOCK], tl.float32)
    for i in tl.range(0, per_prog, BLOCK, loop_unroll_factor=U):
        o = lo + i + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + o, mask=o < numel, other=0.0).to(tl.float32)
        acc += v * v
    tl.store(part_ptr + pid, tl.sum(acc, 0))


@triton.jit
def shifted_sums(x_ptr, part_ptr, numel, per_prog, BLOCK: tl.constexpr, U: tl.constexpr, FIRST: tl.constexpr):
    """Per program: the sums of ``x - shift`` and its squares over its chunk, ``shift`` the mean of
    the chunk's first step (``FIRST``: computed before the loop, as dtriton's statistics kernels
    do; else the chunk's first value, one scalar load)."""
    pid = tl.program_id(0)
    lo = pid.to(tl.int64) * per_prog
    if FIRST:
        o0 = lo + tl.arange(0, BLOCK)
        shift = tl.sum(tl.load(x_ptr + o0, mask=o0 < numel, other=0.0).to(tl.float32), 0) / BLOCK
    else:
        shift = tl.load(x_ptr + lo, mask=lo < numel, other=0.0).to(tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    s2 = tl.zeros([BLOCK], tl.float32)
    for i in tl.range(0, per_prog, BLOCK, loop_unroll_factor=U):
        o = lo + i + tl.arange(0, BLOCK)
        y = tl.where(o < numel, tl.load(x_ptr + o, mask=o < numel, other=0.0).to(tl.float32) - shift, 0.0)
        s += y
        s2 += y * y
    tl.store(part_ptr + 3 * pid, tl.sum(s, 0))
    tl.store(part_ptr + 3 * pid + 1, tl.sum(s2, 0))
    tl.store(part_ptr + 3 * pid + 2, tl.sum(tl.zeros([1], tl.float32) + shift, 0))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="float16,float32")
    ap.add_argument("--out", default="", help="directory for probe_sum.json (none: print only)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    table = []
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
        install_numpy_shim()
    numel = 4 * 4096 if a.dry_run else 16 * 64 * 256 * 256
    progs = (2, 3) if a.dry_run else (256, 264, 512, 528, 1056, 2112)
    blocks = (1024,) if a.dry_run else (4096, 8192)
    for d in a.dtypes.split(","):
        x = torch.randn(numel, device=R.DEV, dtype=getattr(torch, d))
        ref = (x.double() ** 2).sum().item()
        xsum = x.double().sum().item()
        rows = []
        for p, blk, w, u in itertools.product(progs, blocks, (8,), (1, 2)):
            part = torch.empty(p, device=R.DEV, dtype=torch.float32)

            def fn(p=p, blk=blk, w=w, u=u, part=part):
                per = -(-numel // (p * blk)) * blk   # whole steps a program (the last one masked)
                sum_squares[(p,)](x, part, numel, per, BLOCK=blk, U=u, num_warps=w)
            fn()
            err = abs(part.double().sum().item() - ref) / ref
            us = R.graph_time_us(fn, reps=10, iters=5)
            rows.append((us, p, blk, w, u, err))
        for p, blk, u, first in itertools.product(progs[1:4:2] if not a.dry_run else progs, (2048, 4096) if not
                                                  a.dry_run else (1024,), (1, 2), (True, False)):
            part = torch.empty(3 * p, device=R.DEV, dtype=torch.float32)
            per = -(-numel // (p * blk)) * blk

            def fn(p=p, blk=blk, u=u, first=first, part=part, per=per):
                shifted_sums[(p,)](x, part, numel, per, BLOCK=blk, U=u, FIRST=first, num_warps=8)
            fn()
            # the sum of x from the partials: sum(x - shift) + count * shift per program, against float64
            parts = part.double().view(p, 3)
            counts = (numel - torch.arange(p, device=R.DEV, dtype=torch.float64) * per).clamp(0, per)
            err = abs((parts[:, 0] + counts * parts[:, 2]).sum().item() - xsum) / abs(x.double()).sum().item()
            us = R.graph_time_us(fn, reps=10, iters=5)
            rows.append((us, p, blk, 8, f"{u} var shift={'first step' if first else 'first value'}", err))
        rows.sort(key=lambda r: -r[0])
        table += [{"dtype": d, "programs": p, "block": blk, "warps": w, "unroll": u, "us": us,
                   "tbs": numel * x.element_size() / us / 1e6, "err": err} for us, p, blk, w, u, err in rows]
        for us, p, blk, w, u, err in rows:
            print(f"{d:8s} P {p:5d} BLOCK {blk:5d} warps {w} U {u}: {us:8.1f} us "
                  f"{numel * x.element_size() / us / 1e6:6.3f} TB/s  err {err:.1e}", flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "probe_sum.json"), "w") as f:
            json.dump({"numel": numel, "rows": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
