"""Host time of forward+backward steps (issue 15): how much of grad_bench's fwd+bwd time is the host.

    PYTHONPATH=src python3 bench/host_overhead.py [--out DIR] [--dry-run]

For softmax (fp16) and layer norm (fp16), at a tiny shape (the GPU work is negligible: the step's time
is the host's) and at grad_bench's shape, times one step (forward, the weighted-sum loss, backward)
three ways for dtriton, eager PyTorch and torch.compile: wall time per step with a synchronisation
after each (host + GPU, serial), do_bench's time (what grad_bench reports), and the GPU time of the
step's kernels from torch.profiler. Prints one table (µs per step).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from algorithms import layer_norm, softmax  # noqa: E402


def cases(dev, dry):
    h = torch.float16
    big = (64, 64) if dry else (4096, 4096)
    yield "softmax fp16 8x64", softmax, lambda: (torch.randn(8, 64, device=dev, dtype=h),), \
        lambda X: torch.softmax(X, -1), (0,)
    yield f"softmax fp16 {big[0]}x{big[1]}", softmax, lambda: (torch.randn(*big, device=dev, dtype=h),), \
        lambda X: torch.softmax(X, -1), (0,)
    ln = (lambda X, w, b: torch.nn.functional.layer_norm(X, (X.shape[-1],), w, b, 1e-5))
    yield "layer_norm fp16 8x64", layer_norm, lambda: (torch.randn(8, 64, device=dev, dtype=h),
                                                       torch.randn(64, device=dev, dtype=h),
                                                       torch.randn(64, device=dev, dtype=h)), ln, (0, 1, 2)


def step_fn(f, inputs, grad_idx, weights):
    ins = [t.detach().clone().requires_grad_(k in grad_idx) for k, t in enumerate(inputs)]

    def step():
        for k in grad_idx:
            ins[k].grad = None
        o = f(*ins)
        oo = o if isinstance(o, tuple) else (o,)
        sum((x.float() * w).sum() for x, w in zip(oo, weights)).backward()
    return step


def wall_us(step, dev, n):
    for _ in range(3):
        step()
    if dev == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
        if dev == "cuda":
            torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def gpu_us(step):
    from torch.profiler import ProfilerActivity, profile
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    tot = sum(e.device_time_total for e in prof.key_averages() if e.device_time_total)
    return tot / 5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    dev = "cpu" if a.dry_run else "cuda"
    rows = []
    for name, alg, make, eager, gidx in cases(dev, a.dry_run):
        inputs = make()
        dk = dt.compile(alg)
        outs = eager(*inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        weights = [torch.randn(o.shape, device=dev) for o in outs]
        impls = [("dtriton", dk), ("eager", eager)]
        if not a.dry_run:
            impls.append(("torch.compile", torch.compile(eager)))
        for impl, f in impls:
            step = step_fn(f, inputs, gidx, weights)
            row = dict(case=name, impl=impl, wall_us=wall_us(step, dev, 1 if a.dry_run else 50))
            if not a.dry_run:
                from triton.testing import do_bench
                row["do_bench_us"] = do_bench(step, warmup=10, rep=50) * 1e3
                row["gpu_us"] = gpu_us(step)
            rows.append(row)
            print(f"{name:26s} {impl:14s} wall/step {row['wall_us']:9.1f} us  do_bench {row.get('do_bench_us', float('nan')):9.1f} us"
                  f"  GPU kernels {row.get('gpu_us', float('nan')):9.1f} us", flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "host_overhead.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
