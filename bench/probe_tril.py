"""Probe: which schedule knobs make the mask-bounded ``tril(A) @ B`` wrong on the GPU (bisection).

    PYTHONPATH=src python3 bench/probe_tril.py [--n 4096] [--dry-run]

Runs the algorithm of bench/attention_bounds.py under variants of its heuristic schedule and prints
the relative error of each against ``torch.tril(A) @ B`` in float64 (``--dry-run``: interpreter,
small n). A correct kernel has an error of about 1e-4 in fp16 (1e-7 in fp32).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from attention_bounds import tril_matmul  # noqa: E402

VARIANTS = [
    ("default", {}),
    ("no bounds", dict(mask_bounds=False)),
    ("pointer", dict(access="pointer")),
    ("stages 1", dict(num_stages=1)),
    ("stages 2", dict(num_stages=2)),
    ("k 128", dict(tile={"i": 128, "j": 256, "k": 128})),
    ("i 64", dict(tile={"i": 64, "j": 256, "k": 64})),
    ("j 128", dict(tile={"i": 128, "j": 128, "k": 64})),
    ("warps 4", dict(num_warps=4)),
    ("no group", dict(group={})),
    ("pointer stages 1", dict(access="pointer", num_stages=1)),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    dev = "cpu" if a.dry_run or not torch.cuda.is_available() else "cuda"
    n = 256 if a.dry_run else a.n
    dtype = torch.float32 if dev == "cpu" else torch.float16
    torch.manual_seed(0)
    A, B = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
    ref = torch.tril(A.double()) @ B.double()
    base = dt.compile(tril_matmul).complete(tril_matmul.bind((A, B)))
    print("heuristic:", base.to_json())
    for label, kw in VARIANTS:
        try:
            s = base.replace(**kw)
            out = dt.compile(tril_matmul, s)(A, B)
            err = ((out.double() - ref).norm() / ref.norm()).item()
            bad = (out.double() - ref).abs() > 1e-2 * ref.abs().max()
            rows = bad.any(1).nonzero().flatten()
            cols = bad.any(0).nonzero().flatten()
            where = (f"bad rows {rows.min().item()}..{rows.max().item()} ({len(rows)}), cols {cols.min().item()}.."
                     f"{cols.max().item()} ({len(cols)})") if len(rows) else ""
            print(f"{label:20s} err {err:.2e} {where}")
        except Exception as e:  # noqa: BLE001 - a probe reports every variant
            print(f"{label:20s} FAILED {type(e).__name__}: {str(e)[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
