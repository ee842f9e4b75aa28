"""GPU check of bool arithmetic and literals (session 10's language fixes): kernels against torch.

    PYTHONPATH=src python3 bench/s10_bool_check.py [--dry-run]

Bool + bool is a logical or, bool * bool a logical and (torch); Triton's own bool ``+`` wraps on the GPU,
so the kernel prints an explicit or/and. Each row compares the dtriton kernel's output (dtype and
values) with torch's on random bool/int8/float inputs of odd length; prints ok/WRONG per row and a count.
"""
from __future__ import annotations

import sys

import torch

import dtriton as dt
from dtriton import Tensor


def main() -> int:
    dev = "cpu" if "--dry-run" in sys.argv else "cuda"
    g = torch.Generator().manual_seed(0)
    n = 1001
    B = (torch.rand(n, generator=g) > 0.5).to(dev)
    C = (torch.rand(n, generator=g) > 0.3).to(dev)
    I8 = torch.randint(-100, 100, (n,), generator=g, dtype=torch.int8).to(dev)
    X = torch.randn(n, generator=g).to(dev)
    cases = {
        "B + C": (lambda b, c, x, i8: b + c),
        "B * C": (lambda b, c, x, i8: b * c),
        "B*B + B*B + B*1": (lambda b, c, x, i8: b * b + b * b + b * 1),
        "B + True": (lambda b, c, x, i8: b + True),
        "I8 + True": (lambda b, c, x, i8: i8 + True),
        "X * True": (lambda b, c, x, i8: x * True),
        "max(B, C)": (lambda b, c, x, i8: torch.maximum(b, c)),
        "B + C + C": (lambda b, c, x, i8: b + c + c),
    }
    dmax = {"max(B, C)": lambda b, c, x, i8: dt.maximum(b, c)}
    bad = 0
    for name, f in cases.items():
        dtf = dmax.get(name, f)

        @dt.algorithm
        def alg(Bt: Tensor["N"], Ct: Tensor["N"], Xt: Tensor["N"], It: Tensor["N"]):
            i, = dt.axes("i")
            return dtf(Bt[i], Ct[i], Xt[i], It[i])[i]

        got = dt.compile(alg)(B, C, X, I8)
        want = f(B, C, X, I8)
        ok = got.dtype == want.dtype and torch.equal(got.cpu(), want.cpu())
        bad += not ok
        print(f"{'ok   ' if ok else 'WRONG'} {name:18s} dtriton {got.dtype} torch {want.dtype}", flush=True)
    print(f"{len(cases)} cases, {bad} not ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
