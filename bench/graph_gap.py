"""Where a norm's CUDA-graph time goes beyond its kernels (issue 16; s6 call 3, batch norm fp16: graph replay
1701 us a call, its two kernels 1034 + 485 = 1519 us under the profiler, plain calls 1537 us).

    PYTHONPATH=src python3 bench/graph_gap.py [--case batchnorm[,frobenius,...]] [--dtype float16] [--no-compile]
                                              [--out DIR] [--dry-run]

Per case, for dtriton's default schedule (also with a preallocated ``out=``) and torch.compile: plain-call time,
CUDA-graph replay time with 1 and 5 calls a graph, the device time of each kernel over 5 plain calls
(torch.profiler), and one replay of the 5-call graph under torch.profiler: every kernel's start, duration and
the gap before it (device timestamps), so the replay's span splits into kernels and gaps; after 0.2 s idle, 20
replays of the 1-call graph and 8 of the 5-call graph timed one by one (clocks ramping up?). Every implementation
is checked against fp32 torch before it is timed. ``--out``: ``graph_gap.json`` there (all numbers, the
timelines). ``--dry-run``: the interpreter, a tiny shape (checks the script; no profile).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R  # noqa: E402  (the suite's timing)
import dtriton as dt  # noqa: E402
from reductions import NORMS, kernel_times  # noqa: E402


def timeline(g: torch.cuda.CUDAGraph) -> dict:
    """One replay of ``g`` under torch.profiler: per kernel its name, start (from the first kernel's),
    duration and the gap before it (us), and the span, kernel and gap totals."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        g.replay()
        torch.cuda.synchronize()
    ks = sorted((e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                key=lambda e: e.time_range.start)
    if not ks:
        return {"kernels": [], "span_us": float("nan"), "busy_us": float("nan"), "gaps_us": float("nan")}
    t0, prev, rows = ks[0].time_range.start, ks[0].time_range.start, []
    for e in ks:
        rows.append({"name": e.name[:60], "at_us": e.time_range.start - t0,
                     "us": e.time_range.end - e.time_range.start, "gap_us": e.time_range.start - prev})
        prev = e.time_range.end
    span = ks[-1].time_range.end - t0
    busy = sum(r["us"] for r in rows)
    return {"kernels": rows, "span_us": span, "busy_us": busy, "gaps_us": span - busy}


def series(g: torch.cuda.CUDAGraph, n: int, reps: int) -> list[float]:
    """``n`` back-to-back replays of ``g`` (``reps`` calls each), each timed alone by CUDA events (us a
    call): whether the first replays after an idle moment run slower (clocks ramping up) or every
    replay pays the same."""
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in evs:
        a.record()
        g.replay()
        b.record()
    torch.cuda.synchronize()
    return [round(a.elapsed_time(b) * 1e3 / reps, 1) for a, b in evs]


def show(t: dict) -> str:
    lines = [f"    {k['name'][:48]:48s} at {k['at_us']:9.1f} us  {k['us']:8.1f} us  gap {k['gap_us']:7.1f}"
             for k in t["kernels"]]
    return "\n".join(lines + [f"    span {t['span_us']:.1f} us, kernels {t['busy_us']:.1f} us, gaps {t['gaps_us']:.1f} us "
                              f"({len(t['kernels'])} kernels)"])


def run_case(case: str, dtype: str, dry: bool, use_compile: bool) -> list[dict]:
    """The rows of one case (see the module docstring)."""
    alg, shape, _, dshape, eager, make, _ = NORMS[case]
    x = torch.randn(dshape if dry else shape, device=R.DEV, dtype=getattr(torch, dtype))
    args = make(x)
    eargs = (x,) + tuple(args[1:])
    ref = eager(*[a.float() for a in eargs])
    k = dt.compile(alg)
    out = k(*args)
    impls = [("dtriton", lambda: k(*args)), ("dtriton out=", lambda: k(*args, out=out))]
    if use_compile and not dry:
        c = torch.compile(eager)
        impls.append(("torch.compile", lambda: c(*eargs)))
    rows = []
    print(f"== {case} {dtype} {'x'.join(map(str, x.shape))}", flush=True)
    for name, fn in impls:
        err = R.relerr(fn().reshape(ref.shape), ref)
        if not err <= 2e-2:
            print(f"{name:14s} WRONG (rel err {err:.1e}): not timed", flush=True)
            rows.append({"case": case, "dtype": dtype, "impl": name, "err": err, "note": "WRONG: not timed"})
            continue
        call = R.call_time_us(fn, n=5)
        row = {"case": case, "dtype": dtype, "impl": name, "err": err, "call_us": call}
        if dry:
            print(f"{name:14s} call {call:9.1f} us (dry run), rel err {err:.1e}", flush=True)
            rows.append(row)
            continue
        g1, g5 = R.captured_graph(fn, 1), R.captured_graph(fn, 5)
        row.update(graph1_us=R.graph_time_us(fn, reps=1, iters=5), graph5_us=R.graph_time_us(fn, reps=5, iters=5),
                   plain_kernels=kernel_times(fn), timeline1=timeline(g1), timeline5=timeline(g5))
        torch.cuda.synchronize()
        time.sleep(0.2)   # an idle moment, as between a compile and the first timed replay
        row["series1_us"], row["series5_us"] = series(g1, 20, 1), series(g5, 8, 5)
        print(f"{name:14s} call {call:9.1f} us  graph x1 {row['graph1_us']:9.1f} us  graph x5 {row['graph5_us']:9.1f} us "
              f"a call; rel err {err:.1e}\n  plain calls, kernels (us): {row['plain_kernels']}", flush=True)
        print(f"  after 0.2 s idle, 20 replays of the 1-call graph (us each): {row['series1_us']}\n"
              f"  then 8 replays of the 5-call graph (us a call): {row['series5_us']}", flush=True)
        print(f"  one replay of the 1-call graph:\n{show(row['timeline1'])}", flush=True)
        print(f"  one replay of the 5-call graph:\n{show(row['timeline5'])}", flush=True)
        rows.append(row)
        del g1, g5
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="batchnorm", help=f"comma-separated, of {', '.join(sorted(NORMS))}")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--out", default="", help="directory for graph_gap.json (none: print only)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    cases = [c for c in a.case.split(",") if c]
    bad = [c for c in cases if c not in NORMS]
    if bad:
        ap.error(f"--case: unknown {', '.join(bad)}; expected a comma-separated list of {', '.join(sorted(NORMS))}")
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
    torch.manual_seed(0)
    rows = []
    for case in cases:
        rows += run_case(case, a.dtype, a.dry_run, not a.no_compile)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        meta = {"gpu": "cpu (dry run)" if a.dry_run else torch.cuda.get_device_name(), "torch": torch.__version__,
                "script": "bench/graph_gap.py", "argv": sys.argv[1:] if argv is None else list(argv)}
        with open(os.path.join(a.out, "graph_gap.json"), "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1, default=str)
    print("\ncase           dtype    impl           call us  graph x1 us  graph x5 us  kernels (replay of 5) us  gaps us")
    for r in rows:
        t = r.get("timeline5", {})
        print(f"{r['case']:14s} {r['dtype']:8s} {r['impl']:14s} {r.get('call_us', float('nan')):8.1f} "
              f"{r.get('graph1_us', float('nan')):12.1f} {r.get('graph5_us', float('nan')):12.1f} "
              f"{t.get('busy_us', float('nan')) / 5:24.1f} {t.get('gaps_us', float('nan')) / 5:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
