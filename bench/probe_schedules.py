"""Probe: time hand-listed candidate schedules side by side, to learn which schedule knobs matter
before they go into the derived exploration spaces. Not the benchmark suite (``run.py`` takes every
row's schedule from ``dt.explore``); this script answers questions such as "does ``access="tma"``
help matmul 8192^3?" or "which tiles does the diffusion's V-reduction want?".

    PYTHONPATH=src python3 bench/probe_schedules.py [--only matmul,diffusion,softmax] [--out DIR] [--dry-run]

Every candidate is checked against a float64 (matmul: torch fp32-accumulated) reference before it
is timed (CUDA-graph replay, µs per call); a candidate that fails to compile or is wrong is listed
with its reason. Prints one table per case and writes ``<out>/probe.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as R  # noqa: E402
from algorithms import matmul, softmax, spatial_diffusion  # noqa: E402

RESULTS: list[dict] = []


def probe(case: str, alg, args, ref, tol: float, cands: list[tuple[str, dt.Schedule | None]], baselines=()):
    """Check and time each candidate (and the baselines: ``(name, fn)``) on ``args``."""
    print(f"== {case}", flush=True)
    rows = []
    for name, fn in baselines:
        try:
            us = R.graph_time_us(fn)
            rows.append(dict(case=case, cand=name, us=us, err=None, status="ok", schedule=None))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(case=case, cand=name, us=None, err=None, status=f"failed: {str(e)[:120]}", schedule=None))
    for name, sched in cands:
        row = dict(case=case, cand=name, us=None, err=None, status="ok", schedule=sched.to_json() if sched else None)
        try:
            k = dt.compile(alg, sched)
            t0 = time.time()
            outs = k(*args)
            outs = outs if isinstance(outs, tuple) else (outs,)
            row["compile_s"] = round(time.time() - t0, 2)
            err = max(R.relerr(o, r) for o, r in zip(outs, ref))
            row["err"] = err
            if not (err <= tol):
                row["status"] = "wrong"
            else:
                row["us"] = R.graph_time_us(lambda: k(*args))
        except Exception as e:  # noqa: BLE001
            row["status"] = "failed: " + " ".join(str(e).split())[-160:]
        rows.append(row)
    best = min((r["us"] for r in rows if r["us"] and r["schedule"] is None), default=None)
    for r in rows:
        ratio = f"{best / r['us']:.2f}x" if best and r["us"] else ""
        us = f"{r['us']:9.2f}" if r["us"] else " " * 9
        err = f"{r['err']:.1e}" if r["err"] is not None else ""
        print(f"  {r['cand'][:44]:44s} {us} µs {ratio:>6s} {err:>8s} {'' if r['status'] == 'ok' else r['status'][:150]}", flush=True)
    RESULTS.extend(rows)


def summary():
    """One line per case: the fastest correct candidate against the baselines."""
    print("\n== summary (µs, CUDA-graph replay)")
    cases = list(dict.fromkeys(r["case"] for r in RESULTS))
    for c in cases:
        rows = [r for r in RESULTS if r["case"] == c]
        base = " ".join(f"{r['cand']}={r['us']:.1f}" for r in rows if r["schedule"] is None and r["us"])
        good = [r for r in rows if r["schedule"] is not None and r["us"]]
        bad = sum(r["status"] != "ok" for r in rows)
        best = min(good, key=lambda r: r["us"]) if good else None
        print(f"{c[:40]:40s} best {best['cand'][:34] if best else '-':34s} {best['us'] if best else float('nan'):8.1f}  {base}"
              + (f"  [{bad} failed/wrong]" if bad else ""), flush=True)


def matmul_cases(dry: bool):
    shapes = [(1024, 1024, 1024), (2048, 2048, 2048), (8192, 8192, 8192), (4096, 11008, 4096), (4096, 4096, 4096)]
    if dry:
        shapes = [(40, 48, 40)]
    for (M, K, N) in shapes:
        for dtype in ([torch.float16, torch.bfloat16] if (M, K, N) == (4096, 11008, 4096) else [torch.float16]):
            A = torch.randn(M, K, device=R.DEV, dtype=dtype)
            B = torch.randn(K, N, device=R.DEV, dtype=dtype)
            ref = (A.float() @ B.float(),) if not dry else (A.double() @ B.double(),)
            cands = []
            if M <= 2048:
                for (ti, tj) in ((64, 128), (128, 64), (64, 64), (128, 128)):
                    for st in (3, 4):
                        for acc in ("pointer", "tma"):
                            cands.append((f"{ti}x{tj}x64 w4 s{st} {acc}",
                                          dt.Schedule(tile={"i": ti, "j": tj, "k": 64}, grid=("i", "j"), group={"i": 8},
                                                      num_warps=4, num_stages=st, access=acc, split={"k": 1})))
                cands.append(("128x128x64 w8 s4 tma ws", dt.Schedule(tile={"i": 128, "j": 128, "k": 64}, grid=("i", "j"),
                                                                      group={"i": 8}, num_warps=8, num_stages=4, access="tma",
                                                                      warp_specialize=True, split={"k": 1})))
            if M > 2048:
                base = dict(tile={"i": 128, "j": 256, "k": 64}, grid=("i", "j"), group={"i": 8}, num_warps=8, split={"k": 1})
                for st, acc, ws, pers in ((4, "pointer", False, 0), (3, "pointer", False, 0), (4, "block_ptr", False, 0),
                                          (4, "tma", False, 0), (3, "tma", False, 0), (4, "tma", True, 0),
                                          (3, "tma", True, 0), (3, "tma", False, 1), (3, "tma", True, 1), (4, "pointer", False, 1)):
                    cands.append((f"128x256x64 w8 s{st} {acc}{' ws' if ws else ''}{' pers' if pers else ''}",
                                  dt.Schedule(**base, num_stages=st, access=acc, warp_specialize=ws, persistent=pers)))
                cands.append(("128x128x64 w4 s4 tma ws", dt.Schedule(tile={"i": 128, "j": 128, "k": 64}, grid=("i", "j"),
                                                                      group={"i": 8}, num_warps=4, num_stages=4, access="tma",
                                                                      warp_specialize=True, split={"k": 1})))
            probe(f"matmul {str(dtype)[6:]} {M}x{K}x{N}", matmul, (A, B), ref, 2e-2, cands,
                  baselines=[("torch.matmul", lambda: A @ B)])


def diffusion_cases(dry: bool):
    """The two kernels separately: the V-reduction (stage sum0, its own tiles and split) with the
    output kernel fixed, then the output kernel's tiles with the reduction fixed."""
    K = 128 if not dry else 16
    sms = 132 if not dry else 4
    for V, C in ((100000, 128), (20000, 128), (6000, 64)) if not dry else ((300, 16),):
        x = torch.randn(V, C, device=R.DEV)
        basis = torch.randn(V, K, device=R.DEV) / math.sqrt(V)
        mass = torch.rand(V, device=R.DEV) + 0.5
        evals = torch.rand(K, device=R.DEV) * 10
        times = torch.rand(C, device=R.DEV)
        args = (x, basis, mass, evals, times)
        ref = R.diffusion_eager(*(a.double() for a in args))

        def sched(prec, s_tile, s_warps, split, o_tile, o_warps):
            return dt.Schedule(tile=o_tile, grid=("v", "c"), num_warps=o_warps, num_stages=3, precision=prec,
                               split={"v": split}, stages={"out1": {"grid": ["k", "c"]},
                                                           "sum0": {"tile": s_tile, "num_warps": s_warps}})

        def split_for(st, progs):
            tiles = -(-K // min(st["k"], K)) * -(-C // min(st["c"], C))
            return max(1, min(progs // tiles, V // st["v"]))
        o_fix = {"v": 64, "c": min(C, 128), "k": 32}
        s_fix = {"k": K, "c": min(C, 64), "v": 32}
        cands = []
        for prec in ("tf32x3", "ieee"):
            for st in ({"k": K, "c": min(C, 64), "v": 32}, {"k": K, "c": min(C, 128), "v": 32},
                       {"k": min(K, 64), "c": min(C, 128), "v": 32}, {"k": K, "c": min(C, 64), "v": 64}):
                for progs in (sms, 2 * sms):
                    for w in ((4, 8) if prec == "tf32x3" else (4,)):
                        spl = split_for(st, progs)
                        cands.append((f"{prec} sum0 k{st['k']} c{st['c']} v{st['v']} S{spl} w{w}",
                                      sched(prec, st, w, spl, o_fix, 4)))
            for ot in ({"v": 128, "c": min(C, 128), "k": 32}, {"v": 64, "c": min(C, 128), "k": 32},
                       {"v": 128, "c": min(C, 64), "k": 32}, {"v": 64, "c": min(C, 64), "k": 64}):
                for w in ((4, 8) if prec == "tf32x3" else (4,)):
                    cands.append((f"{prec} out0 v{ot['v']} c{ot['c']} k{ot['k']} w{w}",
                                  sched(prec, s_fix, 4, split_for(s_fix, 2 * sms), ot, w)))
        eager = lambda: R.diffusion_eager(*args)  # noqa: E731
        base = [("torch eager", eager)]
        if not dry:
            comp = torch.compile(R.diffusion_eager)
            comp(*args)
            base.append(("torch.compile", lambda: comp(*args)))
        probe(f"diffusion fp32 V={V} C={C}", spatial_diffusion, args, ref, 1e-4, cands, baselines=base)


def _norm_inputs(dry: bool, widths):
    """(M, N, algorithm, args, float64 reference) for layer norm and RMSNorm, fp16, 4096 rows."""
    from algorithms import layer_norm, rms_norm
    for N in widths if not dry else (64,):
        M = 4096 if not dry else 8
        X = torch.randn(M, N, device=R.DEV, dtype=torch.float16)
        w = torch.randn(N, device=R.DEV, dtype=torch.float16)
        b = torch.randn(N, device=R.DEV, dtype=torch.float16)
        yield M, N, layer_norm, (X, w, b), torch.nn.functional.layer_norm(X.double(), (N,), w.double(), b.double(), 1e-5)
        yield M, N, rms_norm, (X, w), torch.nn.functional.rms_norm(X.double(), (N,), w.double(), 1e-6)


def norm_cases(dry: bool):
    for M, N, alg, args, ref in _norm_inputs(dry, (8192, 4096)):
        cands = []
        for ti in (1, 2, 4):
            for wp in (4, 8, 16):
                cands.append((f"i{ti} whole w{wp}", dt.Schedule(tile={"i": ti}, grid=("i",), strategy={"j": "whole"}, num_warps=wp)))
        cands.append(("i1 whole w8 evict_first", dt.Schedule(tile={"i": 1}, grid=("i",), strategy={"j": "whole"}, num_warps=8,
                                                             eviction={"X": "evict_first"})))
        cands.append(("i1 whole w8 persistent", dt.Schedule(tile={"i": 1}, grid=("i",), strategy={"j": "whole"}, num_warps=8,
                                                            persistent=4)))
        probe(f"{alg.name} fp16 {M}x{N}", alg, args, (ref,), 1e-2, cands)


def matmul_small(dry: bool):
    for n in (1024, 2048) if not dry else (40,):
        A = torch.randn(n, n, device=R.DEV, dtype=torch.float16)
        B = torch.randn(n, n, device=R.DEV, dtype=torch.float16)
        ref = (A.float() @ B.float(),) if not dry else (A.double() @ B.double(),)
        cands = []
        for (ti, tj, tk, w) in ((64, 128, 64, 4), (64, 128, 32, 4), (64, 128, 128, 4), (64, 128, 64, 8), (128, 128, 64, 8),
                                (128, 256, 64, 8), (64, 256, 64, 8), (128, 128, 32, 4)):
            for st in (3, 4, 5):
                for acc in (("pointer", "tma") if n == 2048 and ti * tj >= 128 * 128 else ("pointer",)):
                    for pers in ((0, 1) if n == 2048 and acc == "tma" else (0,)):
                        cands.append((f"{ti}x{tj}x{tk} w{w} s{st} {acc}{' pers' if pers else ''}",
                                      dt.Schedule(tile={"i": ti, "j": tj, "k": tk}, grid=("i", "j"), group={"i": 8},
                                                  num_warps=w, num_stages=st, access=acc, persistent=pers, split={"k": 1})))
        probe(f"matmul float16 {n}^3", matmul, (A, B), ref, 2e-2, cands, baselines=[("torch.matmul", lambda: A @ B)])


def softmax_cases(dry: bool):
    for M, N in ((4096, 32768), (4096, 16384), (32768, 1000)) if not dry else ((8, 64),):
        X = torch.randn(M, N, device=R.DEV, dtype=torch.float16)
        ref = (torch.softmax(X.double(), -1),)
        cands = []
        for w in (4, 8, 16, 32):
            cands.append((f"whole w{w}", dt.Schedule(tile={"i": 1}, grid=("i",), strategy={"j": "whole"}, num_warps=w)))
            cands.append((f"whole w{w} evict_first", dt.Schedule(tile={"i": 1}, grid=("i",), strategy={"j": "whole"}, num_warps=w,
                                                                 eviction={"X": "evict_first"})))
        for tj in (2048, 4096, 8192):
            for w in (8, 16):
                cands.append((f"online j{tj} w{w}", dt.Schedule(tile={"i": 1, "j": tj}, grid=("i",), strategy={"j": "online"}, num_warps=w)))
        probe(f"softmax fp16 {M}x{N}", softmax, (X,), ref, 1e-2, cands,
              baselines=[("torch.softmax", lambda: torch.softmax(X, -1))])


def tma_small(dry: bool):
    """Host-side TMA descriptors (session 4) against pointers on the small and mid matmuls, plus odd
    shapes (rows that TMA cannot address fall back to pointers) checked for correctness."""
    shapes = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 11008), (1000, 1000, 1000)]
    if dry:
        shapes = [(40, 48, 40)]
    for (M, K, N) in shapes:
        for dtype in (torch.float16, torch.bfloat16) if M in (1024, 2048) else (torch.float16,):
            A = torch.randn(M, K, device=R.DEV, dtype=dtype)
            B = torch.randn(K, N, device=R.DEV, dtype=dtype)
            ref = (A.float() @ B.float(),) if not dry else (A.double() @ B.double(),)
            cands = []
            tiles = [(128, 128, 64, 8), (128, 256, 64, 8)] if M == 4096 else [(64, 128, 64, 4), (128, 128, 64, 8), (128, 256, 64, 8)] if M != 1024 else [(64, 128, 64, 4), (128, 64, 64, 4), (128, 128, 64, 8)]
            if M < 1024 or dry:
                tiles = [(64, 128, 64, 4)]
            for (ti, tj, tk, w) in tiles:
                for st in (3, 4):
                    for acc, pers in (("pointer", 0), ("tma", 0), ("tma", 1)):
                        if pers and M < 2048 and not dry:
                            continue
                        cands.append((f"{ti}x{tj}x{tk} w{w} s{st} {acc}{' pers' if pers else ''}",
                                      dt.Schedule(tile={"i": ti, "j": tj, "k": tk}, grid=("i", "j"), group={"i": 8},
                                                  num_warps=w, num_stages=st, access=acc, persistent=pers, split={"k": 1})))
            probe(f"matmul {str(dtype)[6:]} {M}x{K}x{N}", matmul, (A, B), ref, 2e-2, cands,
                  baselines=[("torch.matmul", lambda: A @ B)])


def softmax_rows(dry: bool):
    """Softmax with long rows (online strategy, persistent programs so a row's second read hits L2)
    and short rows (several rows per program)."""
    cases = ((4096, 32768, torch.float16), (4096, 16384, torch.float16), (32768, 1000, torch.float16),
             (32768, 1000, torch.float32), (4096, 256, torch.float32)) if not dry else ((8, 64, torch.float32),)
    for M, N, dtype in cases:
        X = torch.randn(M, N, device=R.DEV, dtype=dtype)
        ref = (torch.softmax(X.double(), -1),)
        cands = []
        if N >= 16384 or dry:
            for tj in (4096, 8192):
                for w in (8, 16):
                    for pers in (0, 1, 2):
                        cands.append((f"online j{tj} w{w} pers{pers}", dt.Schedule(tile={"i": 1, "j": tj}, grid=("i",),
                                      strategy={"j": "online"}, num_warps=w, persistent=pers)))
            for w in (16, 32):
                for pers in (0, 1):
                    cands.append((f"whole w{w} pers{pers}", dt.Schedule(tile={"i": 1}, grid=("i",), strategy={"j": "whole"},
                                                                         num_warps=w, persistent=pers)))
        if N < 16384 or dry:
            for ti in (1, 2, 4, 8):
                for w in (4, 8):
                    for pers in ((0, 4) if w == 4 else (0,)):
                        cands.append((f"whole i{ti} w{w} pers{pers}", dt.Schedule(tile={"i": ti}, grid=("i",), strategy={"j": "whole"},
                                                                                   num_warps=w, persistent=pers)))
        base = [("torch.softmax", lambda: torch.softmax(X, -1))]
        if not dry:
            comp = torch.compile(lambda x: torch.softmax(x, -1))
            comp(X)
            base.append(("torch.compile", lambda: comp(X)))
        probe(f"softmax {str(dtype)[6:]} {M}x{N}", softmax, (X,), ref, 1e-2, cands, baselines=base)


def norm_pers(dry: bool):
    for M, N, alg, args, ref in _norm_inputs(dry, (4096, 8192)):
        cands = []
        for ti in (1,):
            for wp in (4, 8, 16):
                for pers in (0, 2):
                    for ev in ("evict_normal", "evict_first"):
                        cands.append((f"i{ti} w{wp} pers{pers} {ev}", dt.Schedule(tile={"i": ti}, grid=("i",), strategy={"j": "whole"},
                                      num_warps=wp, persistent=pers, eviction={"X": ev})))
        probe(f"{alg.name} fp16 {M}x{N}", alg, args, (ref,), 1e-2, cands)


def diffusion_tma(dry: bool):
    """The fp32 diffusion layer with TMA candidates (the schedules that faulted in session 3 had
    in-kernel descriptors; descriptors are host-side now). Run in a process of its own: a fault
    ends the CUDA context. Each candidate's name is printed before it runs."""
    K = 128 if not dry else 16
    for V, C in ((2000, 256), (6000, 64), (100000, 128)) if not dry else ((300, 16),):
        x = torch.randn(V, C, device=R.DEV)
        basis = torch.randn(V, K, device=R.DEV) / math.sqrt(V)
        mass = torch.rand(V, device=R.DEV) + 0.5
        args = (x, basis, mass, torch.rand(K, device=R.DEV) * 10, torch.rand(C, device=R.DEV))
        ref = R.diffusion_eager(*(a.double() for a in args))
        cands = []
        for prec in ("tf32x3", "ieee"):
            for acc in ("pointer", "tma"):
                for ws in ((False, True) if acc == "tma" else (False,)):
                    sc = dt.Schedule(precision=prec, access=acc, warp_specialize=ws)
                    cands.append((f"{prec} heuristic {acc}{' ws' if ws else ''}", sc))
        for name, sc in cands:
            print(f"  running {name}", flush=True)
            probe(f"diffusion fp32 V={V} C={C} [{name}]", spatial_diffusion, args, ref, 1e-4, [(name, sc)])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="matmul,diffusion,softmax")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes (checks the script)")
    a = ap.parse_args(argv)
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
    torch.manual_seed(0)
    t0 = time.time()
    for g in a.only.split(","):
        try:
            {"matmul": matmul_cases, "diffusion": diffusion_cases, "softmax": softmax_cases, "norm": norm_cases,
             "matmul_small": matmul_small, "tma_small": tma_small, "softmax_rows": softmax_rows,
             "norm_pers": norm_pers, "diffusion_tma": diffusion_tma}[g](a.dry_run)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        print(f"-- {g} done at {time.time() - t0:.0f}s", flush=True)
        os.makedirs(a.out, exist_ok=True)
        meta = dict(gpu=torch.cuda.get_device_name() if not a.dry_run else "cpu (dry run)", torch=torch.__version__,
                    triton=__import__("triton").__version__, date=time.strftime("%Y-%m-%dT%H:%M:%S"))
        with open(os.path.join(a.out, "probe.json"), "w") as f:
            json.dump(dict(meta=meta, rows=RESULTS), f, indent=1)
    summary()


if __name__ == "__main__":
    main()
