"""Issue 14 (H200): an fp32 ``X @ W.T`` (nn.Linear's layout) explored with the derived space, which now
searches the dot precision (ieee, tf32x3, bf16x6 beside "auto": the choices keeping fp32 accuracy) and
TMA tilings for "auto" (tf32x3 here: W reads the reduced axis at unit stride).

    PYTHONPATH=src python3 bench/explore_fp32.py [--budget 40] [--M 1024 --N 8192 --K 8192] [--layout NT|NN|TN]
    PYTHONPATH=src python3 bench/explore_fp32.py --dry-run      # tiny, on the CPU interpreter

Prints the derived space's precision and access values, the heuristic's and the winner's kernel time
(CUDA-graph replay, ``dt.benchmark``-free: ``triton.testing.do_bench_cudagraph``), each one's relative
error against float64, cuBLAS fp32 (TF32 off) beside them, and how many candidates ran per precision.
Stores nothing (``store=False``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time

import torch

import dtriton as dt


@dt.algorithm
def linear(X: dt.Tensor["M", "K"], W: dt.Tensor["N", "K"]):
    i, j, k = dt.axes("i j k")
    return dt.sum(X[i, k] * W[j, k], over=k)[i, j]


def operands(layout: str, M: int, N: int, K: int, dev: str):
    """``(X, W)`` of ``linear`` (X: M x K, W: N x K) stored for ``layout`` of the product ``X @ W.T``
    as a GEMM ``A @ B`` (A = X, B = W.T): "NT" (nn.Linear: both read K at unit stride), "NN" (W
    stored K x N, so B reads N at unit stride), "TN" (X stored K x M and W K x N: neither operand
    reads K at unit stride; "auto" stages a K-major copy of one)."""
    X = torch.randn(M, K, device=dev) if layout[0] == "N" else torch.randn(K, M, device=dev).t()
    W = torch.randn(N, K, device=dev) if layout == "NT" else torch.randn(K, N, device=dev).t()
    return X, W


def kernel_us(fn, gpu: bool) -> float:
    """Kernel time in us: CUDA-graph replay on the GPU, one wall-clock call on the CPU."""
    if not gpu:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    from triton.testing import do_bench_cudagraph
    return do_bench_cudagraph(fn, rep=100) * 1e3


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=40.0)
    ap.add_argument("--M", type=int, default=1024)
    ap.add_argument("--N", type=int, default=8192)
    ap.add_argument("--K", type=int, default=8192)
    ap.add_argument("--layout", default="NT", choices=("NT", "NN", "TN"), help="operand storage (see operands())")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU interpreter")
    ap.add_argument("--out", default="", help="also write the exploration's result (JSON) into this folder")
    a = ap.parse_args(argv)
    gpu = not a.dry_run
    dev = "cuda" if gpu else "cpu"
    M, N, K = (37, 29, 50) if a.dry_run else (a.M, a.N, a.K)
    torch.manual_seed(0)
    X, W = operands(a.layout, M, N, K, dev)
    print(f"{a.layout}: X {tuple(X.shape)} strides {X.stride()}, W {tuple(W.shape)} strides {W.stride()}", flush=True)
    ref = X.double() @ W.double().T
    sp = dt.Space.derive(linear, (X, W), target="gpu")
    dims = dict(sp.dimensions())
    print(f"space: {sp.size} points; precision {dims.get('precision')}; access {dims.get('access')}", flush=True)
    if not gpu:   # the interpreter's space has no precision dimension: search the GPU one's values
        sp = dt.Space(tile={"i": [16, 32]}, precision=list(dims["precision"]))
    res = dt.explore(linear, (X, W), budget=a.budget if gpu else 20.0, space=sp if not gpu else None,
                     store=False, progress=False, max_trials=None if gpu else 4)
    print(res.summary(top=8), flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, f"explore_fp32_{a.layout}.json"), "w") as f:
            f.write(res.to_json())
    rows = {}
    heur = dt.compile(linear)
    for name, k in (("heuristic", heur), ("explored", dt.compile(linear, res.best) if res.best else None)):
        if k is None:
            continue
        out = k(X, W)
        sched = k.schedule_for(X, W)
        rows[name] = dict(us=kernel_us(lambda: k(X, W), gpu), rel_err=rel_err(out, ref),
                          precision=sched.precision, access=sched.access)
    torch.backends.cuda.matmul.allow_tf32 = False
    rows["cublas_fp32"] = dict(us=kernel_us(lambda: X @ W.T, gpu), rel_err=rel_err(X @ W.T, ref))
    tried = collections.Counter((json.loads(r["schedule_json"]).get("precision", "auto") if r.get("schedule_json")
                                 else "?", r["status"]) for r in res.table)
    print(f"candidates by (precision, status): {dict(tried)}")
    flops = 2 * M * N * K
    for name, r in rows.items():
        print(f"{name:12s} {r['us']:10.1f} us  {flops / r['us'] / 1e6:8.1f} TFLOP/s  rel err {r['rel_err']:.1e}  "
              + (f"precision {r['precision']} access {r['access']}" if "precision" in r else ""), flush=True)
    ok = all(r["rel_err"] <= 1e-5 for r in rows.values())
    print("accuracy: ok (every row within 1e-5 of float64)" if ok else "accuracy: FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
