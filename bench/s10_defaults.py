"""The default schedules of session 10's attention changes, timed beside SDPA (H200 check after merging).

    PYTHONPATH=src python3 bench/s10_defaults.py [--out DIR] [--dry-run]

Rows (fp16, D128): non-causal B4 H32 S4096 (the Gluon forward after the grouped-query merge), decoding B16 H32
T8192 (the 128-key TMA decode rule), causal B2 H32 S8192 (the causal kernel at the sliding-window case's
shape: the window should be faster). Each row checked against fp32 SDPA first, then timed by CUDA-graph replay.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as R  # noqa: E402
from probe_attention import inputs  # noqa: E402

CASES = (("n", 4096, 128, 4, 32), ("d", 8192, 128, 16, 32), ("c", 8192, 128, 2, 32))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
    rows = []
    for kind, S, D, B, H in CASES:
        if a.dry_run:
            S, D, B, H = 40, 16, 1, 2
        alg, args, sdpa, ref, flops = inputs(kind, S, D, B, H)
        k = dt.compile(alg)
        err = R.relerr(k(*args), ref)
        row = dict(case=f"{kind}{S}x{D} B{B} H{H}", err=err, gluon="the Gluon attention forward" in k.source_for(*args),
                   sdpa_us=R.graph_time_us(sdpa))
        if err < 1e-2:
            row["default_us"] = R.graph_time_us(lambda: k(*args))
        rows.append(row)
        print(f"{row['case']}: default {row.get('default_us', float('nan')):.1f} us, SDPA {row['sdpa_us']:.1f} "
              f"({row['sdpa_us'] / row.get('default_us', float('nan')):.2f}x), err {err:.1e}, Gluon {row['gluon']}",
              flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "s10_defaults.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
