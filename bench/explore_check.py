"""Issue 4 check (H200): does ``dt.explore(..., budget=60)`` find a schedule within 5% of the best of
an exhaustive run over the same space? Matmul fp16 4096^3 and softmax fp16 4096x4096.

    PYTHONPATH=src python3 bench/explore_check.py [--out bench/results] [--budget 60]

Both runs search the same explicit space; the exhaustive run goes second with a fresh database, so
it cannot reuse the first run's timings. The winners of both runs are then timed again side by
side (median of do_bench), which is the comparison reported. Writes explore_<case>.json/.png and
explore.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from algorithms import matmul, softmax  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--only", default="matmul,softmax")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes and spaces on the CPU interpreter (checks the script)")
    a = ap.parse_args(argv)
    dev, n = ("cpu", 40) if a.dry_run else ("cuda", 4096)
    if a.dry_run:
        a.budget = min(a.budget, 5.0)
    os.makedirs(a.out, exist_ok=True)
    cases = {
        "matmul": (matmul, lambda: (torch.randn(n, n, device=dev, dtype=torch.float16),
                                    torch.randn(n, n, device=dev, dtype=torch.float16)),
                   dt.Space(tile={"i": [64, 128, 256], "j": [64, 128, 256], "k": [32, 64]}, num_warps=[4, 8],
                            num_stages=[3, 4], group=[8]) if not a.dry_run else dt.Space(tile={"i": [16, 32]})),
        "softmax": (softmax, lambda: (torch.randn(n, n, device=dev, dtype=torch.float16),),
                    dt.Space(tile={"i": [1, 2, 4], "j": [512, 1024, 2048]}, strategy={"j": ["whole", "loop", "online"]},
                             num_warps=[4, 8, 16], num_stages=[1, 2]) if not a.dry_run
                    else dt.Space(strategy={"j": ["whole", "online"]})),
    }
    lines = ["# Exploration: budget run vs exhaustive run of the same space (H200)", "",
             f"{torch.cuda.get_device_name() if not a.dry_run else 'cpu (dry run)'}, torch {torch.__version__}, "
             f"{time.strftime('%Y-%m-%d')}", "",
             "| case | space size | run | wall s | candidates | best µs (own timing) | re-timed µs | within 5% |",
             "|---|---:|---|---:|---:|---:|---:|---|"]
    for name in a.only.split(","):
        alg, make, space = cases[name]
        args = make()
        res = {}
        for run, kw in (("budget", dict(budget=a.budget, strategy="auto")),
                        ("exhaustive", dict(budget=3600, strategy="exhaustive", patience=None))):
            # the budget run stores into the default database (later bench rows reuse it; a dry run's
            # interpreter timings go to a temporary one); the exhaustive run gets a fresh one so it
            # cannot reuse the budget run's timings
            db = None if run == "budget" and not a.dry_run else os.path.join(tempfile.mkdtemp(), "tuning.sqlite")
            t0 = time.time()
            r = dt.explore(alg, args, space=space, db=db, progress=False, **kw)
            wall = time.time() - t0
            res[run] = (r, wall)
            r.plot(os.path.join(a.out, f"explore_{name}_{run}.png"))
            with open(os.path.join(a.out, f"explore_{name}_{run}.json"), "w") as f:
                f.write(r.to_json())
            print(r.summary(top=5), flush=True)
        # re-time both winners side by side
        kb = dt.compile(alg, res["budget"][0].best)
        ke = dt.compile(alg, res["exhaustive"][0].best)
        def timed(f):
            if a.dry_run:
                t0 = time.perf_counter()
                f()
                return (time.perf_counter() - t0) * 1e3
            return do_bench(f, warmup=25, rep=100)
        tb = min(timed(lambda: kb(*args)) for _ in range(3)) * 1e3
        te = min(timed(lambda: ke(*args)) for _ in range(3)) * 1e3
        for run, t in (("budget", tb), ("exhaustive", te)):
            r, wall = res[run]
            ok = [x for x in r.table if x["status"] == "ok"]
            best_own = min((x["median_us"] for x in ok), default=float("nan"))
            lines.append(f"| {name} | {space.size} | {run} ({r.strategy}, stop: {r.stop_reason}) | {wall:.1f} | {len(r.table)} | "
                         f"{best_own:.1f} | {t:.1f} | {'yes' if tb <= te * 1.05 else 'NO'} |")
        lines.append(f"| {name} | | winners | | | | budget {res['budget'][0].best.to_json()} / exhaustive "
                     f"{res['exhaustive'][0].best.to_json()} | |")
        print("\n".join(lines[-3:]), flush=True)
    with open(os.path.join(a.out, "explore.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
