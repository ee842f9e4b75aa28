"""Attention explored within its budget against SDPA (issue 18's marks: explored within a 60 s budget,
the exploration finishing within 1.1x of it).

    PYTHONPATH=src python3 bench/explore_attention.py [--cases n4096x128,c4096x128,g4096x128]
                                                      [--budget 60] [--out DIR] [--dry-run]

Cases as in bench/probe_attention.py (``n`` non-causal, ``c`` causal, ``g`` grouped heads 32/8;
fp16 B4 H32 S=T, ``<kind><S>x<D>``; ``d`` decoding B16 H32, one query row over ``<S>`` keys; a ``bf``
suffix: bf16, e.g. ``n4096x128bf``). Per case: ``dt.explore(budget=...)`` (candidates isolated in
workers, ``store=False``), its wall time and ``(wall - remeasure) / budget``; then the best
schedule and the heuristic's, each checked against fp32 SDPA and timed by CUDA-graph replay beside
SDPA. Prints one line per case; writes ``explore_attention.json`` under ``--out``. ``--dry-run``:
the interpreter, tiny shapes, a 4 s budget (checks the script).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as R  # noqa: E402
from probe_attention import inputs  # noqa: E402


def run_case(spec: str, budget: float, dry: bool, timing: str = "warm") -> dict:
    """Explore one case, then time its best and default schedules beside SDPA."""
    bf16 = spec.endswith("bf")
    kind, (S, D) = spec[0], (int(v) for v in spec[1:].removesuffix("bf").split("x"))
    B, H = ((16, 32) if kind == "d" else (4, 32)) if not dry else (1, 4)
    if dry:
        S, D = 40, 16
    alg, args, sdpa, ref, flops = inputs(kind, S, D, B, H, torch.bfloat16 if bf16 else torch.float16)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dt.explore(alg, args, budget=budget, store=False, progress=False, max_trials=100000, timing=timing)
    wall = time.perf_counter() - t
    rem = float(getattr(res, "remeasure_s", 0.0) or 0.0)
    row = dict(case=spec, timing=timing, budget_s=budget, wall_s=round(wall, 2), ratio=round((wall - rem) / budget, 3),
               counts=res.counts(), best=res.best.to_json() if res.best else None)
    row["sdpa_us"] = R.graph_time_us(sdpa)
    for label, sched in (("best", res.best), ("default", None)):
        k = dt.compile(alg, sched)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            err = R.relerr(k(*args), ref)
        row[f"{label}_gluon"] = "the Gluon attention forward" in k.source_for(*args)
        row[f"{label}_err"] = err
        if err < 1e-2:
            row[f"{label}_us"] = R.graph_time_us(lambda k=k: k(*args))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="n4096x128,c4096x128")
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--timing", choices=("warm", "cold"), default="warm",
                    help="dt.explore's timing: warm (L2 warm, no launch gaps: what the CUDA-graph replay of the "
                         "kernel column measures) or cold (its default: L2 flushed before each call)")
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
        a.budget = min(a.budget, 4.0)
    rows = []
    for spec in a.cases.split(","):
        r = run_case(spec, a.budget, a.dry_run, a.timing if not a.dry_run else "cold")
        rows.append(r)
        best, dflt, sd = r.get("best_us"), r.get("default_us"), r["sdpa_us"]
        print(f"{spec}: explored {r['wall_s']:.1f} s of {r['budget_s']:.0f} (ratio {r['ratio']:.2f}) {r['counts']}\n"
              f"  best {best or float('nan'):.1f} us ({sd / best if best else float('nan'):.2f}x SDPA {sd:.1f}), "
              f"default {dflt or float('nan'):.1f} us (Gluon: best {r.get('best_gluon')}, default "
              f"{r.get('default_gluon')}); best schedule {r['best']}", flush=True)
        if a.out:   # after each case (a run cut short keeps what it measured)
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, "explore_attention.json"), "w") as f:
                json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
