"""Session 18's fixes on the GPU: saved statistics in float32 beside row outputs (cross-entropy of fp16/bf16
logits at an offset, softmax beside an argmax, layer norm returning its mean: gradients against float64 torch),
torch.compile around a kernel call (a graph break), batched gradients refused on the native node's path.

    PYTHONPATH=src python3 bench/s18_check.py [--dry-run]

Prints one line per check and ``s18_check: N ok, M failed`` last (``--dry-run``: CPU interpreter, small).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import dtriton as dt  # noqa: E402
from dtriton import library as L  # noqa: E402
from test_saved_statistics_precision import layer_norm_and_mean, softmax_and_argmax  # noqa: E402

RES = {"ok": 0, "failed": 0}


def report(name, ok, detail=""):
    RES["ok" if ok else "failed"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}", flush=True)


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


def steps(dk, make, n=3):
    """n steps (the first plans, the second learns the backward, the rest run the steady step, native
    where it can): the last step's (outputs, input)."""
    for _ in range(n):
        x = make().requires_grad_()
        ys = dk(x)
    return ys, x


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    if dev == "cuda":
        from dtriton.backends.triton import native
        native.module()
    M, N = (5, 37) if a.dry_run else (4096, 32768)
    for dtype, bar in ((torch.float16, 2e-3), (torch.bfloat16, 1e-2)):
        for off in (0.0, 1000.0, 20000.0):
            g = torch.Generator(dev).manual_seed(int(off) + 1)
            X = (off + 3 * torch.randn(M, N, generator=g, device=dev)).to(dtype)
            lab = torch.randint(0, N, (M,), generator=g, device=dev)
            x64 = X.double().requires_grad_()
            F.cross_entropy(x64, lab, reduction="sum").backward()
            dk = dt.compile_autograd(L.cross_entropy)
            for _ in range(3):
                x = X.clone().requires_grad_()
                y = dk(x, lab)
                y.sum().backward()
            node = type(y.grad_fn).__name__ if hasattr(type(y.grad_fn), "apply") else y.grad_fn.name()
            report(f"cross_entropy {dtype} {M}x{N} offset {off}: dX vs float64", rel(x.grad, x64.grad) < bar,
                   f"({rel(x.grad, x64.grad):.1e}, loss min {float(y.min()):.2e}, node {node})")
    Mx, Nx = (4, 8) if a.dry_run else (1024, 4096)
    g = torch.Generator(dev).manual_seed(3)
    X = (1000 + 3 * torch.randn(Mx, Nx, generator=g, device=dev)).half()
    gy = torch.randn(Mx, Nx, generator=g, device=dev)
    x64 = X.double().requires_grad_()
    torch.softmax(x64, -1).backward(gy.double())
    dk = dt.compile_autograd(softmax_and_argmax)
    for _ in range(3):
        x = X.clone().requires_grad_()
        y, am = dk(x)
        y.backward(gy.half())
    report("softmax beside argmax fp16 at 1000: dX", rel(x.grad, x64.grad) < 2e-3, f"({rel(x.grad, x64.grad):.1e})")
    x64 = X.double().requires_grad_()
    F.layer_norm(x64, (Nx,), eps=1e-5).backward(gy.double())
    dk = dt.compile_autograd(layer_norm_and_mean)
    for _ in range(3):
        x = X.clone().requires_grad_()
        y, mu = dk(x)
        y.backward(gy.half())
    report("layer norm returning its mean fp16 at 1000: dX", rel(x.grad, x64.grad) < 2e-3,
           f"({rel(x.grad, x64.grad):.1e})")
    # torch.compile around a call: a graph break, the kernel as eagerly
    k = dt.compile_autograd(L.softmax)
    f = lambda t: k(torch.tanh(t)).pow(2).sum()  # noqa: E731
    xs = torch.randn(64, 100, device=dev, requires_grad=True)
    ref = f(xs)
    ref.backward()
    g0, xs.grad = xs.grad.clone(), None
    for backend in ("aot_eager", "inductor") if dev == "cuda" else ("aot_eager",):
        torch._dynamo.reset()
        try:
            y = torch.compile(f, backend=backend)(xs)
            y.backward()
            report(f"torch.compile({backend}) around a kernel call", torch.allclose(y, ref) and torch.allclose(xs.grad, g0),
                   f"(grad diff {(xs.grad - g0).abs().max().item():.1e})")
        except Exception as e:  # noqa: BLE001
            report(f"torch.compile({backend}) around a kernel call", False, f"({type(e).__name__}: {str(e)[:200]})")
        xs.grad = None
    # batched gradients: refused by name, on the steady (native where it can) step too
    for it in range(3):
        try:
            torch.autograd.functional.jacobian(k, torch.randn(3, 5, device=dev), vectorize=True)
            report(f"batched gradients refused, call {it}", False, "(no error)")
        except NotImplementedError as e:
            report(f"batched gradients refused, call {it}", "batched gradients" in str(e))
        except Exception as e:  # noqa: BLE001
            report(f"batched gradients refused, call {it}", False, f"({type(e).__name__}: {str(e)[:200]})")
    print(f"s18_check: {RES['ok']} ok, {RES['failed']} failed")
    return 1 if RES["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
