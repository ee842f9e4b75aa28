"""Where batch norm's CUDA-graph time goes beyond its kernels (issue 16; s6 call 3: graph replay 1701 us a call,
its two kernels 1034 + 485 = 1519 us under the profiler, plain calls 1537 us).

    PYTHONPATH=src python3 bench/graph_gap.py [--case batchnorm] [--dtype float16] [--no-compile] [--dry-run]

For dtriton's default schedule (also with a preallocated ``out=``) and torch.compile: plain-call time, CUDA-graph
replay time with 1 and 5 calls a graph, and one replay of the 5-call graph under torch.profiler: every kernel's
start, duration and the gap before it (device timestamps), so the replay's span splits into kernels and gaps.
``--dry-run``: the interpreter, a tiny shape (checks the script; no profile).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R  # noqa: E402  (the suite's timing)
import dtriton as dt  # noqa: E402
from reductions import NORMS  # noqa: E402


def timeline(g: torch.cuda.CUDAGraph) -> str:
    """One replay of ``g`` under torch.profiler: ``name start+duration (gap)`` per kernel, and the totals."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        g.replay()
        torch.cuda.synchronize()
    ks = sorted((e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                key=lambda e: e.time_range.start)
    if not ks:
        return "no device events"
    t0, prev, busy, lines = ks[0].time_range.start, ks[0].time_range.start, 0.0, []
    for e in ks:
        d = e.time_range.end - e.time_range.start
        lines.append(f"    {e.name[:48]:48s} at {e.time_range.start - t0:9.1f} us  {d:8.1f} us  gap {e.time_range.start - prev:7.1f}")
        prev, busy = e.time_range.end, busy + d
    span = ks[-1].time_range.end - t0
    return "\n".join(lines + [f"    span {span:.1f} us, kernels {busy:.1f} us, gaps {span - busy:.1f} us ({len(ks)} kernels)"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="batchnorm", choices=sorted(NORMS))
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
    alg, shape, _, dshape, eager, make, _ = NORMS[a.case]
    x = torch.randn(dshape if a.dry_run else shape, device=R.DEV, dtype=getattr(torch, a.dtype))
    args = make(x)
    k = dt.compile(alg)
    out = k(*args)
    impls = [("dtriton", lambda: k(*args)), ("dtriton out=", lambda: k(*args, out=out))]
    if not a.no_compile and not a.dry_run:
        c = torch.compile(eager)
        eargs = (x,) + tuple(args[1:])
        impls.append(("torch.compile", lambda: c(*eargs)))
    for name, fn in impls:
        fn()
        call = R.call_time_us(fn, n=5)
        if a.dry_run:
            print(f"{name:14s} call {call:9.1f} us (dry run)", flush=True)
            continue
        g1, g5 = R.captured_graph(fn, 1), R.captured_graph(fn, 5)
        t1 = R.graph_time_us(fn, reps=1, iters=5)
        t5 = R.graph_time_us(fn, reps=5, iters=5)
        print(f"{name:14s} call {call:9.1f} us  graph x1 {t1:9.1f} us  graph x5 {t5:9.1f} us a call", flush=True)
        print(f"  one replay of the 1-call graph:\n{timeline(g1)}", flush=True)
        print(f"  one replay of the 5-call graph:\n{timeline(g5)}", flush=True)
        del g1, g5
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
