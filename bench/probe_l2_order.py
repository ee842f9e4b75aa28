"""Does the order of a statistics pass and its normalising pass let the second read from L2 what the
first read last? Hand-written Frobenius normalisation (``y = x / ||x||``) of a 16x64x256x256 tensor,
timed with the statistics split in two orders and the output in two orders (issue 16).

    PYTHONPATH=src python3 bench/probe_l2_order.py [--dtypes float16,float32] [--shape 16,64,256,256]
                                                   [--out DIR] [--dry-run]

Statistics: P programs (8 warps), each summing the squares of K chunks of C contiguous elements (fp32
accumulator) into ``partials[p]``; ``blocked``: program p takes chunks p*K .. p*K+K-1 (one contiguous
run each, as dtriton's split slices), ``strided``: chunks p, p+P, p+2P, ... (at any moment all
programs read one contiguous region, and the last iterations cover the end of the tensor). The
partials are summed by ``torch.sum``. Output: programs of B elements (4 warps), ``fwd`` in launch
order, ``rev`` the last block first (what reaches L2 last in the strided statistics is read first).
Each row: the whole sequence (statistics, sum, output) as a CUDA-graph replay of 5 sequences (median
of 9 replays after 40 ms warm), and the output kernel's share (its time alone in the same sequence
found by difference: the sequence without the output kernel). Every row is checked against float64
first (output poisoned with NaN). ``--dry-run``: the interpreter on a tiny shape, nothing timed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

if "--dry-run" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R  # noqa: E402


@triton.jit
def sumsq(x_ptr, part_ptr, P, K: tl.constexpr, C: tl.constexpr, STRIDED: tl.constexpr):
    p = tl.program_id(0)
    acc = tl.zeros((C,), tl.float32)
    offs = tl.arange(0, C)
    for k in tl.range(0, K, loop_unroll_factor=2):
        chunk = (k * P + p) if STRIDED else (p * K + k)
        v = tl.load(x_ptr + chunk.to(tl.int64) * C + offs).to(tl.float32)
        acc += v * v
    tl.store(part_ptr + p, tl.sum(acc, 0))


@triton.jit
def scale(x_ptr, y_ptr, tot_ptr, nblocks, B: tl.constexpr, REV: tl.constexpr):
    b = tl.program_id(0)
    if REV:
        b = nblocks - 1 - b
    offs = b.to(tl.int64) * B + tl.arange(0, B)
    r = 1.0 / tl.sqrt_rn(tl.load(tot_ptr))
    tl.store(y_ptr + offs, (tl.load(x_ptr + offs).to(tl.float32) * r).to(y_ptr.dtype.element_ty))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="float16,float32")
    ap.add_argument("--shape", default="16,64,256,256")
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    R.DRY = a.dry_run
    R.WARM_MS[0] = 40.0
    shape = (2, 4, 16, 32) if a.dry_run else tuple(int(s) for s in a.shape.split(","))
    rows = []
    for dname in a.dtypes.split(","):
        dtype = getattr(torch, dname)
        x = torch.randn(shape, dtype=torch.float32).to(dtype).to(dev)
        ref = (x.double() / torch.linalg.vector_norm(x.double())).float()
        n = x.numel()
        C = 256 if a.dry_run else (4096 if dtype == torch.float16 else 2048)
        P = 4 if a.dry_run else 512
        B = 64 if a.dry_run else 1024
        assert n % (C * P) == 0 and n % B == 0, "shape must be whole chunks"
        K = n // (C * P)
        part = torch.empty(P, dtype=torch.float32, device=dev)
        y = torch.empty_like(x)
        for sorder in ("blocked", "strided"):
            for oorder in ("fwd", "rev", "none"):
                def seq(sorder=sorder, oorder=oorder):
                    sumsq[(P,)](x, part, P, K=K, C=C, STRIDED=sorder == "strided", num_warps=8)
                    tot = part.sum()
                    if oorder != "none":
                        scale[(n // B,)](x, y, tot, n // B, B=B, REV=oorder == "rev", num_warps=4)
                if oorder != "none":
                    y.fill_(float("nan"))
                    seq()
                    err = R.relerr(y.float().cpu(), ref.cpu())
                    ok = err < (2e-3 if dtype == torch.float16 else 2e-5)
                else:
                    err, ok = 0.0, True
                us = R.graph_time_us(seq, reps=5, iters=9) if ok else float("nan")
                rows.append(dict(dtype=dname, stats=sorder, out=oorder, us=round(us, 2), err=err, ok=ok))
                print(f"{dname:8s} stats {sorder:8s} out {oorder:5s} {us:9.2f} us  err {err:.1e} {'ok' if ok else 'FAIL'}",
                      flush=True)
    print("\n| dtype | statistics | output | sequence us | output share us |\n|---|---|---|---:|---:|")
    for r in rows:
        if r["out"] == "none":
            continue
        base = next(q["us"] for q in rows if q["dtype"] == r["dtype"] and q["stats"] == r["stats"] and q["out"] == "none")
        print(f"| {r['dtype']} | {r['stats']} | {r['out']} | {r['us']} | {r['us'] - base:.2f} |")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "probe_l2_order.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
