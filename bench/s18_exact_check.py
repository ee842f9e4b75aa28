"""Rows whose label logit dominates (every other exponential underflows): cross-entropy must be >= 0 (torch gives
0) and log-softmax's row max <= 0, on the GPU's compiled code (FMA contraction included), plain kernels and the
saving forward of compile_autograd, fp16/bf16/fp32, short and long rows.

    PYTHONPATH=src python3 bench/s18_exact_check.py [--dry-run]
"""
from __future__ import annotations

import argparse
import sys

import torch

import dtriton as dt
from dtriton import library as L


def rows(M, N, dtype, dev):
    X = torch.full((M, N), -12.0, device=dev)
    tops = torch.tensor([11.5, 12.0, 13.25, 7.3, 100.7, 1000.3, 3.14159, 57.77, 0.1, 255.9], device=dev)
    lab = torch.arange(M, device=dev) * 7 % N
    X[torch.arange(M, device=dev), lab] = tops[torch.arange(M, device=dev) % len(tops)] + \
        torch.arange(M, device=dev) * 0.013
    return X.to(dtype), lab


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    bad = 0
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for M, N in ((6, 37), (64, 4096)) + (() if a.dry_run else ((256, 32768),)):
            X, lab = rows(M, N, dtype, dev)
            plain = dt.compile(L.cross_entropy)(X, lab)
            dk = dt.compile_autograd(L.cross_entropy)
            for _ in range(3):
                x = X.clone().requires_grad_()
                saving = dk(x, lab)
            ls = dt.compile(L.log_softmax)(X)
            ls_max = ls.float().amax(1)
            got = dict(plain=float(plain.float().min()), saving=float(saving.detach().float().min()),
                       log_softmax_max=float(ls_max.max()))
            ok = got["plain"] >= 0 and got["saving"] >= 0 and got["log_softmax_max"] <= 0
            bad += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {dtype} {M}x{N}: min loss plain {got['plain']:.3e}, saving "
                  f"{got['saving']:.3e}; max log-softmax {got['log_softmax_max']:.3e}", flush=True)
    print(f"s18_exact_check: {'all ok' if not bad else f'{bad} failed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
