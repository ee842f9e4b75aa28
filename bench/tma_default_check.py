"""Check the heuristic's default access style on the GPU: correctness of large 16-bit matmuls
whose default schedule uses TMA (odd sizes, a transposed operand), and kernel and call time of
the default against the same schedule with pointer loads.

    PYTHONPATH=src python3 bench/tma_default_check.py [--dry-run]

Kernel time = CUDA-graph replay (µs per call), call time = plain Python calls (host overhead
included). Every case is compared with torch's fp32-accumulated matmul first."""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as R  # noqa: E402
from dtriton.library import matmul  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--out", default="", help="directory for tma_default_check.json")
    a = ap.parse_args(argv)
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
    cases = [((2048, 2048, 2048), torch.float16, False), ((4096, 4096, 11008), torch.bfloat16, False),
             ((2049, 2047, 2056), torch.float16, False), ((2048, 2048, 2048), torch.float16, True),
             ((1024, 1024, 1024), torch.float16, False)]
    if a.dry_run:
        cases = [((40, 48, 24), torch.float16, False), ((40, 48, 24), torch.float16, True)]
    print(f"{'case':34s} {'access':8s} {'kernel us':>10s} {'call us':>9s} {'rel err':>9s}")
    rows = []
    for (M, K, N), dtype, trans in cases:
        A = torch.randn(M, K, device=R.DEV, dtype=dtype)
        B = torch.randn(N, K, device=R.DEV, dtype=dtype).t() if trans else torch.randn(K, N, device=R.DEV, dtype=dtype)
        ref = A.float() @ B.float() if not a.dry_run else A.double() @ B.double()
        k = dt.compile(matmul)
        default = k.schedule_for(A, B)
        for name, kern in (("default", k), ("pointer", dt.compile(matmul, default.replace(access="pointer")))):
            out = torch.full((M, N), float("nan"), device=R.DEV, dtype=dtype)
            kern(A, B, out=out)
            err = R.relerr(out, ref)
            ok = err < 2e-2
            kt = R.graph_time_us(lambda: kern(A, B)) if ok else float("nan")
            ct = R.call_time_us(lambda: kern(A, B)) if ok else float("nan")
            acc = default.access if name == "default" else "pointer"
            case = f"{str(dtype)[6:]} {M}x{K}x{N}" + (" B^T" if trans else "")
            print(f"{case:34s} {name[:3]}:{acc:5s} {kt:10.2f} {ct:9.2f} {err:9.1e} {'' if ok else 'WRONG'}", flush=True)
            rows.append(dict(case=case, impl=name, access=acc, kernel_us=kt, call_us=ct, err=err, ok=ok))
    if a.out:
        import json
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "tma_default_check.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
