"""Does ``dt.explore`` keep its budget? Budget against wall time for matmul, softmax and attention.

    PYTHONPATH=src python3 bench/explore_budget.py [--budget 15] [--only matmul,softmax,attention]
                                                   [--out DIR] [--dry-run]

For each algorithm, one exploration with ``store=False``; prints the budget, the wall time of the
``dt.explore`` call, the time of the final re-measurement of the best (``result.remeasure_s``,
zero on the interpreter), the ratio ``(wall - remeasure) / budget`` (issue 17 asks for <= 1.1)
and the candidates per status. ``--dry-run`` runs on the CPU interpreter with tiny shapes.
Writes ``explore_budget.json`` under ``--out`` when given.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import torch

import dtriton as dt
from dtriton.library import attention, matmul, softmax


def cases(dev: str, dry: bool, cpu: bool) -> dict:
    """``{name: (algorithm, args)}``: the H200 shapes, moderate ones for the interpreter (``cpu``)
    or tiny ones (``dry``)."""
    if cpu:
        f = torch.float32
        return {"matmul": (matmul, (torch.randn(128, 128, dtype=f), torch.randn(128, 128, dtype=f))),
                "softmax": (softmax, (torch.randn(64, 1000, dtype=f),)),
                "attention": (attention, (torch.randn(1, 2, 64, 32, dtype=f), torch.randn(1, 2, 64, 32, dtype=f),
                                          torch.randn(1, 2, 64, 32, dtype=f), 0.125))}
    if dry:
        f = torch.float32
        return {"matmul": (matmul, (torch.randn(40, 32, dtype=f), torch.randn(32, 24, dtype=f))),
                "softmax": (softmax, (torch.randn(8, 100, dtype=f),)),
                "attention": (attention, (torch.randn(1, 1, 16, 16, dtype=f), torch.randn(1, 1, 16, 16, dtype=f),
                                          torch.randn(1, 1, 16, 16, dtype=f), 0.25))}
    h = torch.float16
    mk = lambda *s: torch.randn(*s, device=dev, dtype=h)  # noqa: E731
    return {"matmul": (matmul, (mk(4096, 4096), mk(4096, 4096))),
            "softmax": (softmax, (mk(8192, 4096),)),
            "attention": (attention, (mk(4, 16, 2048, 64), mk(4, 16, 2048, 64), mk(4, 16, 2048, 64), 0.125))}


def run_one(name: str, alg, args, budget: float, max_trials: int | None, isolate: bool | None = None) -> dict:
    """One exploration; its budget, wall time, re-measurement time and statuses."""
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dt.explore(alg, args, budget=budget, store=False, progress=False, max_trials=max_trials,
                         isolate=isolate)
    wall = time.perf_counter() - t
    rem = float(getattr(res, "remeasure_s", 0.0) or 0.0)
    return dict(case=name, budget_s=budget, wall_s=round(wall, 2), remeasure_s=round(rem, 2),
                ratio=round((wall - rem) / budget, 3) if budget else None, stop=res.stop_reason,
                counts=res.counts(), best_us=res.best_row["median_us"] if res.best_row else None,
                isolated=res.isolated, isolation=res.isolation)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=15.0)
    ap.add_argument("--only", default="matmul,softmax,attention")
    ap.add_argument("--out", default="")
    ap.add_argument("--max-trials", type=int, default=100000, help="high, so that the budget stops the search")
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes")
    ap.add_argument("--no-isolate", action="store_true", help="candidates in-process (isolate=False: no hard budget)")
    ap.add_argument("--cpu", action="store_true", help="CPU interpreter, moderate shapes (softmax 64x1000)")
    a = ap.parse_args(argv)
    a.dry_run = a.dry_run or a.cpu
    dev = "cpu" if a.dry_run else "cuda"
    rows = []
    print(f"{'case':<10} {'budget s':>9} {'wall s':>8} {'remeasure s':>12} {'ratio':>6}  stop       statuses")
    for name, (alg, args) in cases(dev, a.dry_run and not a.cpu, a.cpu).items():
        if name not in a.only.split(","):
            continue
        r = run_one(name, alg, args, a.budget, a.max_trials, False if a.no_isolate else None)
        rows.append(r)
        st = ", ".join(f"{k} {v}" for k, v in r["counts"].items())
        print(f"{name:<10} {r['budget_s']:>9.1f} {r['wall_s']:>8.2f} {r['remeasure_s']:>12.2f} "
              f"{r['ratio']:>6.2f}  {r['stop']:<10} {st}\n           candidates ran in {r['isolation']}", flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "explore_budget.json"), "w") as f:
            json.dump(dict(device=dev if a.dry_run else torch.cuda.get_device_name(), rows=rows), f, indent=1)
    kept = all(r["ratio"] is None or r["ratio"] <= 1.1 for r in rows)
    print("BUDGET-CHECK " + ("PASS" if kept else "FAIL") + ": (wall - remeasure) <= 1.1 x budget for every case")
    return 0


if __name__ == "__main__":
    sys.exit(main())
