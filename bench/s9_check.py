"""GPU correctness of what session 9 changed, against float64 (issues 15, 16 and the reliability fixes).

    PYTHONPATH=src python3 bench/s9_check.py [--dry-run]

Rows (heuristic GPU schedules, outputs poisoned with NaN, compared with ``alg.reference`` in float64):
- split statistics (batch, instance, group, layer (C,H,W) norm, Frobenius) at shapes large enough for the GPU
  heuristic to split them (finished or per-split partials, the fp32 output tiles), fp16 and fp32;
- split-KV decoding attention (one query row, long odd key lengths: the merge of empty splits);
- column-reduction splits of 16-bit outputs (layer norm's and RMSNorm's dw/db backward: per-split partials);
- functions of literals folded in double (a float64 kernel computing log(3) * X, exp(0.5) + X, sqrt(2) / X);
- ``x ** 0`` in torch's dtypes.
Prints one line per row and a final count; exits 1 if any row fails. ``--dry-run``: tiny shapes on the CPU.
"""
from __future__ import annotations

import argparse
import math
import sys

import torch

import dtriton as dt
from dtriton.grad import augmented_forward
from dtriton.library import (attention, batch_norm, frobenius_normalize, group_norm, instance_norm, layer_norm,
                             layer_norm_chw, rms_norm)

ROWS: list[tuple[str, bool, str]] = []


def rel(got, ref) -> float:
    got, ref = got.double().cpu(), ref.double().cpu()
    if not torch.isfinite(got).all():
        return float("inf")
    return ((got - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def check(name, alg, args, tol, out_dtypes=None):
    try:
        got = dt.compile(alg)(*args)
        got = got if isinstance(got, tuple) else (got,)
        ref = alg.reference(*[a.double().cpu() if torch.is_tensor(a) and a.is_floating_point() else
                              (a.cpu() if torch.is_tensor(a) else a) for a in args])
        ref = ref if isinstance(ref, tuple) else (ref,)
        err = max(rel(g, r) for g, r in zip(got, ref))
        ok = err <= tol
        if out_dtypes is not None:
            ok = ok and [g.dtype for g in got] == out_dtypes
        ROWS.append((name, ok, f"rel err {err:.2e} (tol {tol:.0e}) dtypes {[str(g.dtype) for g in got]}"))
    except Exception as e:  # noqa: BLE001
        ROWS.append((name, False, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))
    print(f"{'ok  ' if ROWS[-1][1] else 'FAIL'} {name}: {ROWS[-1][2]}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    g = torch.Generator().manual_seed(9)

    def rnd(*shape, dtype=torch.float32, shift=0.0):
        return (torch.randn(*shape, generator=g) + shift).to(dtype).to(dev)
    big = (lambda *s: s) if not a.dry_run else (lambda *s: tuple(min(x, 5) for x in s))
    for dtype, tol in ((torch.float16, 2e-3), (torch.float32, 1e-5)):
        tag = str(dtype).split(".")[-1]
        xb = rnd(*big(8, 64, 131, 129), dtype=dtype, shift=0.5)
        check(f"batch_norm {tag} 8x64x131x129", batch_norm,
              (xb, rnd(xb.shape[1], dtype=dtype), rnd(xb.shape[1], dtype=dtype)), tol)
        check(f"instance_norm {tag} 3x64x257x129", instance_norm, (rnd(*big(3, 64, 257, 129), dtype=dtype, shift=1.0),), tol)
        check(f"group_norm {tag} 3x8x8x129x65", group_norm, (rnd(*big(3, 8, 8, 129, 65), dtype=dtype),), tol)
        check(f"layer_norm_chw {tag} 3x64x129x131", layer_norm_chw, (rnd(*big(3, 64, 129, 131), dtype=dtype),), tol)
        check(f"frobenius {tag} 5x64x131x257", frobenius_normalize, (rnd(*big(5, 64, 131, 257), dtype=dtype),), tol)
    for T in (8191, 8192, 33000) if not a.dry_run else (37,):
        for dtype in (torch.float16, torch.bfloat16):
            D = 128 if not a.dry_run else 16
            q, k, v = (rnd(1, 4, 1, D, dtype=dtype), rnd(1, 4, T, D, dtype=dtype), rnd(1, 4, T, D, dtype=dtype))
            check(f"decode attention {str(dtype).split('.')[-1]} B1 H4 T{T}", attention, (q, k, v, D ** -0.5),
                  1e-2 if dtype == torch.bfloat16 else 2e-3)
    for dtype in (torch.float16, torch.bfloat16):
        M, N = (4096, 4099) if not a.dry_run else (8, 11)
        for alg, n_in in ((layer_norm, 3), (rms_norm, 2)):
            gr = dt.grad(alg, save="all").algorithms[0]
            X, dy = rnd(M, N, dtype=dtype), rnd(M, N, dtype=dtype)
            ws = [rnd(N, dtype=dtype) for _ in range(n_in - 1)]
            fwd, _ = augmented_forward(alg, save="all")
            outs = dt.compile(fwd)(X, *ws)
            saved = list(outs[1:]) if isinstance(outs, tuple) else []
            check(f"{alg.name} backward {str(dtype).split('.')[-1]} {M}x{N} (dw split partials)", gr,
                  (X, *ws, dy, *saved), 2e-2 if dtype == torch.bfloat16 else 4e-3)

    @dt.algorithm
    def literal_fns(X: dt.Tensor["N"]):
        i = dt.axes("i")
        return (dt.log(3.0) * X[i] + dt.exp(0.5) - dt.sqrt(2.0) / (X[i] * X[i] + 1.0))[i]
    check("literal functions float64", literal_fns, (rnd(1000 if not a.dry_run else 10, dtype=torch.float64),), 1e-14)

    @dt.algorithm
    def pow0(X: dt.Tensor["N"]):
        i = dt.axes("i")
        return (X[i] ** 0)[i]
    for dtype in (torch.float16, torch.float64, torch.int32):
        x = rnd(257, dtype=torch.float32).to(dtype) if dtype.is_floating_point else torch.arange(257, dtype=dtype).to(dev)
        check(f"x ** 0 {dtype}", pow0, (x,), 0.0, out_dtypes=[(x ** 0).dtype])
    bad = [r for r in ROWS if not r[1]]
    print(f"{len(ROWS) - len(bad)}/{len(ROWS)} ok", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
