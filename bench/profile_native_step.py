"""Where a training step's host time goes, native step against eager (issue 15): torch.profiler (CPU activity:
ATen ops, autograd nodes, CUDA runtime/driver calls) over N steady log-softmax steps with a given output gradient,
each implementation's table of self CPU time per step (us), largest first.

    PYTHONPATH=src python3 bench/profile_native_step.py [--n 200] [--rows 22] [--dry-run]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from algorithms import log_softmax  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rows", type=int, default=22)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    S = 24 if a.dry_run else 4096
    if dev == "cuda":
        from dtriton.backends.triton import native
        native.module()
    X = torch.randn(S, S, device=dev, dtype=torch.float16)
    g = torch.randn(S, S, device=dev, dtype=torch.float16)
    impls = {"dtriton native": dt.compile_autograd(log_softmax, native=True), "eager": lambda t: torch.log_softmax(t, -1)}
    for name, f in impls.items():
        x = X.clone().requires_grad_()

        def step():
            x.grad = None
            torch.autograd.backward((f(x),), (g,))
        for _ in range(20):
            step()
        if dev == "cuda":
            torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(a.n):
                step()
            if dev == "cuda":
                torch.cuda.synchronize()
        rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:a.rows]
        print(f"== {name}: self CPU us per step (calls per step), {a.n} steps")
        for e in rows:
            print(f"  {e.self_cpu_time_total / a.n:8.2f} {e.count / a.n:5.1f}x  {e.key[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
