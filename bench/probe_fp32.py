"""Probe: fp32 contractions on tensor cores. Times hand-listed schedules of fp32 ``X @ W.T``
(the nn.Linear layout) and the other operand layouts at each dot precision, beside cuBLAS at
torch's default fp32 precision and with TF32 allowed; relative errors against float64.

    PYTHONPATH=src python3 bench/probe_fp32.py [--only nt,layouts,matvec] [--out DIR] [--dry-run]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import probe_schedules as P  # noqa: E402
import run as R  # noqa: E402


@dt.algorithm
def linear(X: dt.Tensor["M", "K"], W: dt.Tensor["N", "K"]):
    """X (M, K) @ W.T, W (N, K): the nn.Linear layout."""
    i, j, k = dt.axes("i j k")
    return dt.sum(X[i, k] * W[j, k], over=k)[i, j]


def f64_ref(a, b):
    return (a.double() @ b.double())


def torch_fns(a, b):
    def fp32():
        return a @ b

    def tf32():
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return a @ b
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
    return fp32, tf32


def scheds(dry, precisions, tiles, stages=(3,), warps=(8,), access=("pointer", "tma")):
    out = [("heuristic", None)]
    if dry:
        tiles = [(16, 16, 16)]
        access = ("pointer",)
    for p, (bm, bn, bk), ns, nw, ac in itertools.product(precisions, tiles, stages, warps, access):
        out.append((f"{p} {bm}x{bn}x{bk} s{ns} w{nw} {ac}",
                    dt.Schedule(tile={"i": bm, "j": bn, "k": bk}, num_stages=ns, num_warps=nw, access=ac,
                                precision=p, group={"i": 8})))
    return out


def linear_case(dry):
    """The issue's X (1024x8192) and W (8192x8192, nn.Linear layout), the float64 reference of
    X @ W.T and cuBLAS at fp32 and at TF32: (M, N, K, X, W, ref, fp32, tf32)."""
    M, N, K = (64, 48, 80) if dry else (1024, 8192, 8192)
    X = torch.randn(M, K, device=R.DEV)
    W = torch.randn(N, K, device=R.DEV)
    return (M, N, K, X, W, [f64_ref(X, W.T).float()]) + torch_fns(X, W.T)


def run_nt(dry):
    M, N, K, X, W, ref, fp32, tf32 = linear_case(dry)
    errs = {"cublas_fp32": R.relerr(fp32(), ref[0]), "cublas_tf32": R.relerr(tf32(), ref[0])}
    print("torch errors", errs, flush=True)
    cands = scheds(dry, ("tf32x3",), [(128, 128, 32), (128, 64, 32)], stages=(4,), warps=(4, 8), access=("tma",))
    cands += scheds(dry, ("tf32x3",), [(128, 256, 32)], stages=(3,), warps=(4, 8), access=("tma",))[1:]
    cands += scheds(dry, ("bf16x6",), [(128, 128, 32)], stages=(4,), warps=(4,), access=("tma",))[1:]
    P.probe(f"fp32 X@W.T {M}x{N}x{K}", linear, (X, W), ref, 1e-2, cands,
            baselines=[("cublas_fp32", fp32), ("cublas_tf32", tf32)])


def run_layouts(dry, dtypes=("float16", "bfloat16", "float32"), layouts=("NN", "NT", "TN", "TT")):
    n = 48 if dry else 4096
    for dtype in [getattr(torch, d) for d in dtypes]:
        for lay in layouts:
            A = torch.randn(n, n, device=R.DEV, dtype=dtype)
            B = torch.randn(n, n, device=R.DEV, dtype=dtype)
            a = A if lay[0] == "N" else A.T
            b = B if lay[1] == "N" else B.T
            ref = [f64_ref(a, b).to(dtype)]
            cands = [("heuristic", None)]
            if dtype == torch.float32:
                cands += scheds(dry, ("tf32x3",), [(128, 128, 32)], access=("pointer", "tma"))[1:]
                # bf16x6 (fp32 accuracy from six bf16 passes): 16-bit wgmma operands may be MN-major, so TN/TT
                # need neither the staging copy nor a transposition through registers
                cands += scheds(dry, ("bf16x6",), [(128, 128, 32), (128, 128, 64)], stages=(3,), warps=(8,),
                                access=("pointer", "tma"))[1:]
            P.probe(f"{str(dtype)[6:]} {lay} {n}^3", dt.library.matmul, (a, b), ref, 1e-2, cands,
                    baselines=[("torch", lambda a=a, b=b: a @ b)])


def run_tf32(dry):
    """TF32 tile sweep for X @ W.T against cuBLAS with TF32 allowed."""
    M, N, K, X, W, ref, _, tf32 = linear_case(dry)
    cands = []
    # session 7: persistent kernels whose tile loop is flattened with the K loop and whose fp32 output tile is
    # stored in pieces (the s6 knobs), beside the plain-grid tilings of earlier sweeps
    for (bm, bn, bk), ns, nw, ac, extra in [((128, 128, 32), 4, 4, "tma", {}), ((128, 128, 32), 5, 4, "tma", {}),
                                            ((128, 128, 32), 4, 4, "tma", {"persistent": 1}),
                                            ((128, 128, 32), 5, 4, "tma", {"persistent": 1}),
                                            ((128, 128, 32), 4, 8, "tma", {"persistent": 1}), ((128, 128, 32), 6, 4, "tma", {}),
                                            ((128, 256, 32), 3, 8, "tma", {"persistent": 1, "store_pieces": 2}),
                                            ((256, 128, 32), 3, 8, "tma", {"persistent": 1, "store_pieces": 2}),
                                            ((128, 256, 32), 3, 8, "tma", {"store_pieces": 2}),
                                            ((128, 128, 64), 3, 8, "tma", {"persistent": 1, "store_pieces": 2})]:
        if dry:
            bm, bn, bk, ac = 16, 16, 16, "pointer"
        cands.append((f"tf32 {bm}x{bn}x{bk} s{ns} w{nw} {ac} {extra}",
                      dt.Schedule(tile={"i": bm, "j": bn, "k": bk}, num_stages=ns, num_warps=nw, access=ac,
                                  precision="tf32", group={"i": 8}, **extra)))
    P.probe(f"tf32 X@W.T {M}x{N}x{K}", linear, (X, W), ref, 1e-2, cands, baselines=[("cublas_tf32", tf32)])


def run_half(dry):
    """16-bit layouts at 4096^3: a few schedules per layout."""
    n = 48 if dry else 4096
    for dtype in (torch.float16, torch.bfloat16):
        for lay in ("NN", "NT", "TN"):
            A = torch.randn(n, n, device=R.DEV, dtype=dtype)
            B = torch.randn(n, n, device=R.DEV, dtype=dtype)
            a = A if lay[0] == "N" else A.T
            b = B if lay[1] == "N" else B.T
            ref = [f64_ref(a, b).to(dtype)]
            cands = [("heuristic", None)]
            for (bm, bn, bk), ns, nw, ac in [((128, 256, 64), 3, 8, "tma"), ((128, 128, 64), 4, 8, "tma"),
                                             ((128, 128, 64), 4, 8, "pointer"), ((256, 128, 64), 3, 8, "tma")]:
                if dry:
                    bm, bn, bk, ac = 16, 16, 16, "pointer"
                cands.append((f"{bm}x{bn}x{bk} s{ns} w{nw} {ac}",
                              dt.Schedule(tile={"i": bm, "j": bn, "k": bk}, num_stages=ns, num_warps=nw, access=ac,
                                          group={"i": 8})))
            P.probe(f"{str(dtype)[6:]} {lay} {n}^3 sweep", dt.library.matmul, (a, b), ref, 1e-2, cands,
                    baselines=[("torch", lambda a=a, b=b: a @ b)])


def run_matvec(dry):
    M, K = (40, 300) if dry else (8192, 65536)
    A = torch.randn(M, K, device=R.DEV)
    x = torch.randn(K, 1, device=R.DEV)
    ref = [f64_ref(A, x).float()]
    copy = torch.empty_like(A)
    cands = [("heuristic", None)]
    for bi, bk, nw, ns in [(8, 512, 4, 3), (16, 512, 8, 3), (32, 256, 8, 3), (4, 1024, 4, 3), (16, 1024, 8, 2),
                           (64, 128, 8, 4), (8, 1024, 8, 3)]:
        if dry:
            bi, bk = min(bi, 8), 64
        cands.append((f"rows i{bi} k{bk} w{nw} s{ns}",
                      dt.Schedule(tile={"i": bi, "j": 1, "k": bk}, strategy={"k": "loop"}, num_warps=nw, num_stages=ns)))
    P.probe(f"fp32 matvec {M}x{K}", dt.library.matmul, (A, x), ref, 1e-3, cands,
            baselines=[("torch", lambda: A @ x), ("copy", lambda: copy.copy_(A))])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="nt,layouts,matvec", help="nt, layouts, matvec, tf32, half")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--layout-dtypes", default="float16,bfloat16,float32", help="dtypes of --only layouts")
    ap.add_argument("--layouts", default="NN,NT,TN,TT", help="layouts of --only layouts")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
    for name in a.only.split(","):
        if name == "layouts":
            run_layouts(a.dry_run, a.layout_dtypes.split(","), a.layouts.split(","))
            continue
        {"nt": run_nt, "matvec": run_matvec, "tf32": run_tf32, "half": run_half}[name](a.dry_run)
    P.summary()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "probe_fp32.json"), "w") as f:
        json.dump(P.RESULTS, f, indent=1)


if __name__ == "__main__":
    main()
