"""Session 19's GPU checks: the C++ call cache under changing layouts, and poisoned reads.

    PYTHONPATH=src python3 bench/s19_check.py [--dry-run]

1. The C++ call cache (a differentiable kernel's native steps keyed by the tensors' layouts in
   C++): log-softmax and layer norm called in turn on inputs of several layouts (contiguous,
   transposed, row-offset, misaligned by one element, another dtype, a non-leaf expanded view),
   each several times (the third call of a signature runs the cached native step), every output
   and gradient checked against float64 torch, launch_counts checked after each step, and the
   number of cache entries reported.
2. Poisoned reads: without check_indices, an out-of-range gather index reads NaN (not other
   memory): cross-entropy with labels -100 and N on some rows (fp32, fp16, bf16, 4096x32768: those
   rows NaN, the others within tolerance of float64 torch), an embedding gather past the table, and
   a gathered contraction operand with K not a multiple of its tile (good rows exact: tile padding
   not poisoned).
One line per check (ok / FAIL); exit status 1 when one fails.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton.library import cross_entropy, layer_norm, log_softmax  # noqa: E402

FAILS = []


def report(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}", flush=True)
    if not ok:
        FAILS.append(name)


def layouts(M, N, dev):
    """name -> a (M, N) fp16 leaf-or-view maker of that layout."""
    def contiguous():
        return torch.randn(M, N, device=dev, dtype=torch.float16)

    def transposed():
        return torch.randn(N, M, device=dev, dtype=torch.float16).t()

    def row_offset():
        return torch.randn(M + 1, N, device=dev, dtype=torch.float16)[1:]

    def misaligned():
        return torch.randn(M * N + 1, device=dev, dtype=torch.float16)[1:].view(M, N)

    def float32():
        return torch.randn(M, N, device=dev)
    return {"contiguous": contiguous, "transposed": transposed, "row offset": row_offset,
            "misaligned": misaligned, "float32": float32}


def check_cache(dev, dry):
    M, N = (5, 24) if dry else (512, 1000)
    g = torch.Generator(dev).manual_seed(0)
    for name, alg, ref, extra in (
            ("log_softmax", log_softmax, lambda X: torch.log_softmax(X, -1), lambda X: ()),
            ("layer_norm", layer_norm, lambda X, w, b: torch.nn.functional.layer_norm(X, (X.shape[-1],), w, b),
             lambda X: (torch.randn(N, device=dev, dtype=X.dtype), torch.randn(N, device=dev, dtype=X.dtype)))):
        dk = dt.compile_autograd(alg)
        worst = 0.0
        for rnd in range(2):
            for lname, make in layouts(M, N, dev).items():
                for it in range(3):
                    X = make()
                    others = extra(X)
                    leaves = [X.detach().requires_grad_()] + [t.detach().requires_grad_() for t in others]
                    x_in = leaves[0]
                    if lname == "float32" and it == 2:   # a non-leaf expanded operand (grad flows to its base)
                        base = torch.randn(1, N, device=dev, requires_grad=True)
                        x_in = base.expand(M, N)
                        leaves[0] = base
                    gy = torch.randn(M, N, device=dev, dtype=X.dtype, generator=g)
                    y = dk(x_in, *leaves[1:])
                    y.backward(gy)
                    refs = [t.detach().double().requires_grad_() for t in leaves]
                    x_ref = refs[0].expand(M, N) if x_in is not leaves[0] else refs[0]
                    yr = ref(x_ref, *refs[1:])
                    yr.backward(gy.double())
                    errs = [((y.double() - yr).abs().max() / yr.abs().max().clamp_min(1e-6)).item()]
                    for t, r in zip(leaves, refs):
                        errs.append(((t.grad.double() - r.grad).norm() / r.grad.norm().clamp_min(1e-12)).item())
                    worst = max(worst, *errs)
                    tol = 1e-4 if X.dtype == torch.float32 else 2e-2
                    counts = dk.launch_counts()
                    if max(errs) > tol or counts["forward"] < 1 or counts["backward"] < 1:
                        report(f"cache {name} {lname} round {rnd} call {it}", False, f"errs {errs} counts {counts}")
        report(f"cache {name}: 5 layouts x 3 calls x 2 rounds", True,
               f"worst rel err {worst:.1e}; native forward entries {len(dk.native_fwd) - 1}")


@dt.algorithm
def embed(E: dt.Tensor["V", "D"], ids: dt.Tensor["T"]):
    t, d = dt.axes("t d")
    return (E[ids[t], d] * 2.0)[t, d]


@dt.algorithm
def embed_matmul(E: dt.Tensor["V", "K"], ids: dt.Tensor["T"], W: dt.Tensor["K", "N"]):
    t, k, n = dt.axes("t k n")
    return dt.sum(E[ids[t], k] * W[k, n], over=k)[t, n]


def check_poison(dev, dry):
    if dry:   # (the interpreter checks indices on the host first: turn that off, as on the GPU)
        from dtriton.runtime import kernel as runtime_kernel
        runtime_kernel.check_reads = lambda *a, **k: None
    M, N = (9, 50) if dry else (4096, 32768)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        X = torch.randn(M, N, device=dev).to(dtype)
        labels = torch.randint(0, N, (M,), device=dev)
        bad = torch.arange(0, M, 7, device=dev)
        labels[bad] = -100
        labels[bad[1::2]] = N
        loss = dt.compile(cross_entropy)(X, labels)
        good = torch.ones(M, dtype=torch.bool, device=dev)
        good[bad] = False
        want = torch.nn.functional.cross_entropy(X[good].double(), labels[good], reduction="none")
        err = ((loss[good].double() - want).abs().max() / want.abs().max()).item()
        tol = 1e-5 if dtype == torch.float32 else 1e-2
        report(f"poison cross_entropy {dtype} {M}x{N}", bool(torch.isnan(loss[bad]).all()) and err < tol
               and not torch.isnan(loss[good]).any(), f"bad rows NaN: {bool(torch.isnan(loss[bad]).all())}, "
               f"good rows rel err {err:.1e}")
    V, D, T = (11, 9, 6) if dry else (50000, 512, 8192)
    E = torch.randn(V, D, device=dev, dtype=torch.float16)
    ids = torch.randint(0, V, (T,), device=dev)
    ids[3], ids[T - 1] = V, -1
    y = dt.compile(embed)(E, ids)
    ok_rows = torch.ones(T, dtype=torch.bool, device=dev)
    ok_rows[[3, T - 1]] = False
    report("poison embedding gather", bool(torch.isnan(y[[3, T - 1]]).all()) and
           torch.equal(y[ok_rows], E[ids[ok_rows]] * 2), "")
    K, Nn = (13, 5) if dry else (200, 256)
    E2, W = torch.randn(V, K, device=dev, dtype=torch.float16), torch.randn(K, Nn, device=dev, dtype=torch.float16)
    ids2 = torch.randint(0, V, (T,), device=dev)
    ids2[1] = V + 5
    y2 = dt.compile(embed_matmul)(E2, ids2, W)
    keep = torch.ones(T, dtype=torch.bool, device=dev)
    keep[1] = False
    want2 = E2.double()[ids2[keep]] @ W.double()
    err2 = ((y2[keep].double() - want2).abs().max() / want2.abs().max()).item()
    report("poison gathered contraction (K not a tile multiple)", bool(torch.isnan(y2[1]).all()) and err2 < 1e-2,
           f"good rows rel err {err2:.1e}")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    if dev == "cuda":
        from dtriton.backends.triton import native
        native.module()
    check_cache(dev, a.dry_run)
    check_poison(dev, a.dry_run)
    print(f"s19_check: {len(FAILS)} failed", flush=True)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
