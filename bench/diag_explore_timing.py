"""Diagnostic: does exploration's timing rank candidates as the suite's CUDA-graph replay does?

    PYTHONPATH=src python3 bench/diag_explore_timing.py [--budget 5] [--dry-run]

Explores fp16 and bf16 1024^3 matmuls (the suite's worst matmul rows) with ``timing="warm"``,
then re-times every correct candidate with a CUDA-graph replay of 20 calls (the suite's kernel
column) and prints both columns side by side, sorted by the graph time."""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as R  # noqa: E402
from dtriton.library import matmul  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=5.0)
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
    n = 1024 if not a.dry_run else 32
    out = []
    for dtype in (torch.float16, torch.bfloat16):
        A = torch.randn(n, n, device=R.DEV, dtype=dtype)
        B = torch.randn(n, n, device=R.DEV, dtype=dtype)
        res = dt.explore(matmul, (A, B), budget=a.budget, progress=False, timing="warm", store=False)
        rows = []
        for r in res.table:
            if r.get("status") != "ok" or not r.get("median_us"):
                continue
            k = dt.compile(matmul, dt.Schedule.from_json(r["schedule_json"]))
            rows.append(dict(origin=r.get("origin"), warm_us=r["median_us"], graph_us=R.graph_time_us(lambda: k(A, B)),
                             schedule=r["schedule_json"]))
        base = R.graph_time_us(lambda: A @ B)
        print(f"== {str(dtype)[6:]} {n}^3: torch.matmul {base:.2f} us (graph); {len(res.table)} candidates", flush=True)
        for r in sorted(rows, key=lambda r: r["graph_us"]):
            s = json.loads(r["schedule"])
            t = s.get("tile", {})
            print(f"  graph {r['graph_us']:7.2f}  warm {r['warm_us']:7.2f}  {str(r['origin'])[:10]:10s} "
                  f"{t.get('i')}x{t.get('j')}x{t.get('k')} w{s.get('num_warps', '-')} s{s.get('num_stages', '-')} "
                  f"{s.get('access', 'pointer')}{' pers' + str(s['persistent']) if s.get('persistent') else ''}", flush=True)
        out.append(dict(dtype=str(dtype), torch_us=base, rows=rows))
    if a.out:
        path = os.path.join(a.out, "diag_explore_timing.json") if os.path.isdir(a.out) or not a.out.endswith(".json") else a.out
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
