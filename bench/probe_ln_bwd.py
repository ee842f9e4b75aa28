"""Where layer norm's (or RMSNorm's) derived backward spends its GPU time, and what an exploration of its
schedule finds (issue 15: fp16 4096x8192, the step's GPU time 153-157 us against a floor of about 104 us).

    PYTHONPATH=src python3 bench/probe_ln_bwd.py [--case layer_norm|rms_norm] [--budget SECONDS] [--dtype float16]
                                                 [--dry-run]

The backward algorithm (``dt.grad(layer_norm, save=...)``: dX, dw, db from X, w, b, the output's gradient and
the saved row statistics; RMSNorm's: dX, dw) is compiled with the heuristic's schedule and each of its kernels
timed alone (the launch recorded on a first call, replayed in a CUDA graph), with the bytes it must move and the
rate; the whole call too, under the variants ``partials`` (dw/db partials folded by a casting kernel), ``2
stages`` (the column stages' row loop not pipelined, ``num_stages=2``) and both (the s15 default), beside the
default (``last``, 3 stages). Then ``dt.explore`` (``--budget`` seconds, warm timing) searches the backward's schedule; the best
is timed alike. Every row is checked against float64 first. Prints a table last; ``--dry-run``: the CPU
interpreter, a tiny shape, nothing timed.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R  # noqa: E402
import dtriton as dt  # noqa: E402
from dtriton.grad import saved_statistics  # noqa: E402
from dtriton.library import layer_norm, rms_norm  # noqa: E402

ROWS: list[tuple] = []


def rel(o, r) -> float:
    return ((o.double() - r.double()).norm() / r.double().norm()).item()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=90.0)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--case", default="layer_norm", choices=["layer_norm", "rms_norm"])
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
    dev = R.DEV
    M, N = (13, 40) if a.dry_run else (4096, 8192)
    dtype = getattr(torch, a.dtype)
    alg = layer_norm if a.case == "layer_norm" else rms_norm
    g = dt.grad(alg, save=saved_statistics(alg)).algorithms[0]
    torch.manual_seed(0)
    X = torch.randn(M, N, device=dev).to(dtype)
    w, b = torch.randn(N, device=dev).to(dtype), torch.randn(N, device=dev).to(dtype)
    gy = torch.randn(M, N, device=dev).to(dtype)
    if alg is layer_norm:
        args = (X, w, b, gy, X.float().mean(1), X.float().var(1, unbiased=False))
    else:   # (RMSNorm saves its mean square)
        args = (X, w, gy, (X.float() ** 2).mean(1))
    params = [t for t in args[:len(args) - 1 - (alg is layer_norm)] if t is not gy]
    ref = g.reference(*[t.double() for t in args])
    ref = [t.double() for t in (ref if isinstance(ref, tuple) else (ref,))]
    esize = X.element_size()
    moved = {"out0": 3 * M * N * esize, "_d_w": 2 * M * N * esize}   # dX: X, dY in, dX out; dw/db: X, dY in
    base = dt.compile(g).schedule_for(*args)
    two = {n: st.replace(num_stages=2) for n, st in base.stages.items() if st.num_stages}
    variants = [("default", None), ("partials", {"split_mode": "partials"}), ("2 stages", {"stages": two}),
                ("partials 2 stages", {"split_mode": "partials", "stages": two})]
    if not a.dry_run and a.budget > 0:
        res = dt.explore(g, args, budget=a.budget, progress=False, top_k=2, timing="warm", store=False)
        print(f"explore {g.name}: {res.counts()}", flush=True)
        R.print_candidates(res)
        if res.best is not None:
            variants.append(("explored", res.best.to_dict()))
    for label, fields in variants:
        sched = None if fields is None else (dt.Schedule.from_dict(fields) if label == "explored"
                                              else base.replace(**fields))
        k = dt.compile(g, sched)
        outs = [torch.full_like(r, float("nan"), dtype=t.dtype) for r, t in zip(ref, params)]
        rec, orig = R.recorded_launches(k, args, tuple(outs))
        err = max(rel(o, r) for o, r in zip(outs, ref))
        ok = err < (3e-3 if dtype != torch.float32 else 1e-5)
        us = R.graph_time_us(lambda: k(*args, out=tuple(outs)), reps=10, iters=7) if ok else float("nan")
        ROWS.append((label, "call", us, "", err, k.schedule_for(*args).to_json()))
        for f, p, c, m, i in rec:
            t = R.graph_time_us(lambda f=f, p=p, c=c, m=m, i=i: orig(f, p, c, m, i), reps=10, iters=7) if ok else float("nan")
            by = next((v for key, v in moved.items() if key in m.name), 0)
            ROWS.append((label, m.name, t, f"{by / t / 1e6:.2f} TB/s" if by and t == t and t > 0 else "", err, ""))
    print(f"\n{'variant':9s} {'kernel':40s} {'us':>9s} {'rate':>11s} {'rel err':>9s}")
    for label, name, us, rate, err, js in ROWS:
        print(f"{label:9s} {name:40s} {us:9.2f} {rate:>11s} {err:9.1e} {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
