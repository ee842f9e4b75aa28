"""Diagnostic: every candidate of one short exploration of a Hopper convolution, with its status, warm
time and reason, and which kernel (Gluon or Triton) the heuristic and the best run.

    PYTHONPATH=src python3 bench/explore_rows.py [--case depthwise|conv2d] [--budget 8] [--dry-run]

Written after s12 call 1, where ``conv.py``'s explored depthwise row (60.0 us, a Triton schedule) was slower
than the default (32.8 us, the Gluon kernel) and the heuristic's row was not among the printed candidates."""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton import library as L  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="depthwise", choices=("depthwise", "conv2d"))
    ap.add_argument("--budget", type=float, default=8.0)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    N, C, H = (32, 256, 56) if not a.dry_run else (1, 8, 5)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, H, H, C, generator=g).half().to(dev)
    if a.case == "depthwise":
        alg, args = L.depthwise_conv2d_nhwc, (x, torch.randn(3, 3, C, generator=g).half().to(dev), 1, 1, H, H)
    else:
        alg, args = L.conv2d_nhwc, (x, torch.randn(C, 3, 3, C, generator=g).half().to(dev), 1, 1, 1, H, H)
    k = dt.compile(alg)
    k(*args)
    print("default:", "Gluon" if "gluon_" in k.source_for(*args) else "Triton", flush=True)
    if not a.dry_run:   # the default timed here as exploration times a candidate (warm), and its host time
        import time
        from dtriton.tune.measure import warm_gpu_time
        print("default warm_gpu_time (ms):", warm_gpu_time(lambda: k(*args)), flush=True)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(20):
            k(*args)
        print(f"default host per call: {(time.perf_counter() - t) / 20 * 1e6:.1f} us", flush=True)
    res = dt.explore(alg, args, budget=a.budget, progress=False, top_k=2, timing="warm", store=False,
                     max_trials=12 if a.dry_run else None)
    for r in res.table:
        print(f"#{r['id']:<3d} {r['origin']:9s} {r['status']:9s} {r.get('median_us')!s:>10.10s} "
              f"{(r.get('reason') or '')[:120]} | {r['schedule_json'][:160] if r.get('schedule_json') else ''}",
              flush=True)
    b = res.best_row
    print("best:", None if b is None else (b["id"], b["origin"], b["median_us"]))
    if res.best is not None:
        kb = dt.compile(alg, res.best)
        kb(*args)
        print("best runs:", "Gluon" if "gluon_" in kb.source_for(*args) else "Triton")


if __name__ == "__main__":
    main()
