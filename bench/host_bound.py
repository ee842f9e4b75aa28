"""Is a training step host-bound under ``triton.testing.do_bench``? (issue 15)

    PYTHONPATH=src python3 bench/host_bound.py [--rounds 5] [--n 100] [--dry-run]

``grad_bench --given-grad`` times a step (the forward, then ``torch.autograd.backward`` with given
output gradients) the way ``do_bench`` does: before each step the L2 cache is flushed (a 256 MB
``zero_``), the step is bracketed by two CUDA events, and nothing synchronises between steps. The
call time is then the step's GPU time only while the host enqueues a step (flush and events
included) faster than the GPU runs it; otherwise the GPU waits for the host inside the step, and
the call time follows the host. This script repeats that loop by hand and reports per step: the
mean call time (ms, the events, as ``do_bench`` reports it), the host's time per step (us: the
enqueue loop's wall time over the steps, no synchronisation inside), the GPU's span per step (us:
first start event to last end event, over the steps), and, once, the GPU time of the flush alone
and of the step alone (a CUDA graph replay). A row is host-bound when its host time per step
reaches its GPU span (the GPU waited).

Rows, log-softmax fp16 4096x4096 (grad_bench's case): eager, dtriton native (the default), and two
floors timed alike: ``scale native`` (a dtriton native step of ``Y = 2 X``: the same kind of C++
node with one forward and one backward kernel and the same allocations, on half the bytes) and
grad_bench's ``floor`` (a view forward, a backward that clones the gradient: one kernel, no node of
ours).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton import Tensor  # noqa: E402
from algorithms import log_softmax  # noqa: E402


@dt.algorithm
def scale2(X: Tensor["M", "N"]):
    """2 X: a native step's host floor (one forward and one backward kernel, no reduction)."""
    i, j = dt.axes("i j")
    return (X[i, j] * 2.0)[i, j]


def steps(dev, S):
    """name -> (the step, the tensors the step's gradient lands on)."""
    X = torch.randn(S, S, device=dev, dtype=torch.float16)
    g = torch.randn(S, S, device=dev, dtype=torch.float16)
    impls = {"eager": lambda t: torch.log_softmax(t, -1), "dtriton native": dt.compile_autograd(log_softmax),
             "scale native": dt.compile_autograd(scale2), "floor (view, grad clone)": lambda t: t.view_as(t)}
    out = {}
    for name, f in impls.items():
        x = X.clone().requires_grad_()

        def step(f=f, x=x):
            x.grad = None
            torch.autograd.backward((f(x),), (g,))
        out[name] = step
    return out


def measure(step, cache, n, dev):
    """(mean call ms, host us per step, GPU span us per step) of ``n`` do_bench-style steps."""
    for _ in range(10):
        cache.zero_()
        step()
    if dev == "cpu":
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        return None, (time.perf_counter() - t0) / n * 1e6, None
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    t0 = time.perf_counter()
    for i in range(n):
        cache.zero_()
        starts[i].record()
        step()
        ends[i].record()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    call = statistics.fmean(s.elapsed_time(e) for s, e in zip(starts, ends))
    return call, (t1 - t0) / n * 1e6, starts[0].elapsed_time(ends[-1]) / n * 1e3


def gpu_alone(step, cache, dev):
    """(GPU us of the flush alone, GPU us of the step alone: a CUDA graph replay), or Nones on the CPU."""
    if dev == "cpu":
        return None, None
    from triton.testing import do_bench
    from run import captured_graph
    flush = do_bench(cache.zero_, warmup=5, rep=30) * 1e3
    g = captured_graph(step, 1)
    return flush, do_bench(g.replay, warmup=5, rep=50) * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=100, help="steps per measurement (each enqueues about 5 launches)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    S = 24 if a.dry_run else 4096
    n = 3 if a.dry_run else a.n
    if dev == "cuda":
        from dtriton.backends.triton import native
        native.module()
    cache = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device=dev)   # (do_bench's flush buffer)
    impls = steps(dev, S)
    for step in impls.values():   # (a native step's second call learns its backward; the third is native)
        for _ in range(3):
            step()
    rows = {name: [] for name in impls}
    for r in range(a.rounds):
        for name, step in impls.items():
            rows[name].append(measure(step, cache, n, dev))
            call, host, span = rows[name][-1]
            print(f"round {r + 1} {name:26s} call {call if call is None else round(call, 4)} ms  host "
                  f"{host:7.1f} us/step  GPU span {span if span is None else round(span, 1)} us/step", flush=True)
    print("| step (log-softmax fp16 4096x4096) | call ms (median of rounds) | host us/step | GPU span us/step | "
          "flush alone us | step alone us (graph) | host-bound rounds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, step in impls.items():
        flush, alone = gpu_alone(step, cache, dev)
        med = [statistics.median(v) if None not in v else None for v in zip(*rows[name])]
        bound = sum(1 for c, h, s in rows[name] if s is not None and h >= 0.97 * s)
        print(f"| {name} | {med[0] if med[0] is None else round(med[0], 4)} | {med[1]:.1f} | "
              f"{med[2] if med[2] is None else round(med[2], 1)} | {flush if flush is None else round(flush, 1)} | "
              f"{alone if alone is None else round(alone, 1)} | {bound}/{a.rounds} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
