"""Where the host time of a fwd+bwd step goes (issue 15), with the output gradients given (no loss ops).

    PYTHONPATH=src python3 bench/probe_host_step.py [--cases layer_norm softmax ...] [--dry-run]

For each case (grad_bench's shapes on the GPU, tiny ones with --dry-run on the CPU interpreter) it
times the step three ways for dtriton and eager: enqueue time per step (a loop of N steps without
synchronising, divided by N: the host's time when the GPU keeps up) and wall time per step with a
synchronisation after the loop, for dtriton, eager and a "null node" (a Python autograd.Function that
allocates the output and one gradient per input and launches nothing: the host floor of any Python
node) and the same node launching as many kernels as dtriton's step (``null+F+B``: F in the forward, B
in the backward, each ATen's cheapest launch, a one-element ``fill_``); then cProfile over N steady steps of dtriton, the largest own times first (µs per step).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from algorithms import layer_norm, log_softmax, rms_norm, softmax  # noqa: E402


def cases(dev, dry):
    M, N = (4096, 8192) if not dry else (8, 40)
    S = 4096 if not dry else 24
    h = torch.float16

    def rnd(*shape):
        return torch.randn(*shape, device=dev, dtype=h)
    return {
        "layer_norm": (layer_norm, lambda X, w, b: torch.nn.functional.layer_norm(X, (X.shape[-1],), w, b),
                       lambda: (rnd(M, N), rnd(N), rnd(N))),
        "rms_norm": (rms_norm, lambda X, w: torch.nn.functional.rms_norm(X, (X.shape[-1],), w, eps=1e-6),
                     lambda: (rnd(M, N), rnd(N))),
        "softmax": (softmax, lambda X: torch.softmax(X, -1), lambda: (rnd(S, S),)),
        "log_softmax": (log_softmax, lambda X: torch.log_softmax(X, -1), lambda: (rnd(S, S),)),
    }


class Null(torch.autograd.Function):
    """The host floor of any Python autograd node with these inputs: the forward allocates the output,
    the backward one gradient per input, and neither launches a kernel."""

    @staticmethod
    def forward(ctx, *ins):
        ctx.save_for_backward(*ins)
        return torch.empty_like(ins[0])

    @staticmethod
    def backward(ctx, g):
        return tuple(torch.empty_like(t) for t in ctx.saved_tensors)


def null(*ins):
    return Null.apply(*ins)


#: kernels dtriton launches per step of each case (forward, backward), for the "null + launches" row
LAUNCHES = {"layer_norm": (1, 2), "rms_norm": (1, 2), "softmax": (1, 1), "log_softmax": (1, 1)}   # (s16: dw/db stored
                                                                                       # by the split's last program)


def null_launching(fwd: int, bwd: int, dev: str):
    """A null node that also launches ``fwd`` kernels in its forward and ``bwd`` in its backward, each
    the cheapest launch Python can make (``fill_`` of a one-element tensor: ATen's C++ path, no
    Triton launcher): the host floor of a Python node launching that many kernels."""
    tiny = torch.zeros(1, device=dev)

    class NullLaunching(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *ins):
            ctx.save_for_backward(*ins)
            for _ in range(fwd):
                tiny.fill_(1.0)
            return torch.empty_like(ins[0])

        @staticmethod
        def backward(ctx, g):
            for _ in range(bwd):
                tiny.fill_(1.0)
            return tuple(torch.empty_like(t) for t in ctx.saved_tensors)
    return NullLaunching.apply


def make_step(f, ins, grad):
    def step():
        for t in ins:
            t.grad = None
        y = f(*ins)
        torch.autograd.backward((y,), (grad,))
    return step


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def timings(step, dev, n):
    for _ in range(5):
        step()
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    t1 = time.perf_counter()
    sync(dev)
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6


def breakdown(f, ins, grad, dev, n):
    """Host time of the step's parts, enqueue us each: the forward alone (its outputs dropped), and
    for a dtriton kernel its call key and, where the step is native, the C++ forward alone."""
    parts = {"forward": lambda: f(*ins)}
    if hasattr(f, "_printed_key"):
        parts["call key"] = lambda: f._printed_key(ins)
        key = f._printed_key(ins)[0]
        step = next((s for k, s in f._steps.items() if k[:len(key)] == key and s), None)
        if step is not None and step.native >= 0:
            from dtriton.backends.triton import native
            parts["C++ forward"] = lambda: native.forward(step.native, ins)
    parts["backward of one forward"] = None
    y = None
    for label, fn in parts.items():
        if fn is None:
            ys = [f(*ins) for _ in range(n)]
            sync(dev)
            t0 = time.perf_counter()
            for y in ys:
                torch.autograd.backward((y,), (grad,))
            t1 = time.perf_counter()
            sync(dev)
            print(f"    {label:26s} {(t1 - t0) / n * 1e6:8.1f} us", flush=True)
            continue
        for _ in range(5):
            fn()
        sync(dev)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        sync(dev)
        print(f"    {label:26s} {(t1 - t0) / n * 1e6:8.1f} us", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="*", default=["layer_norm", "softmax"])
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--top", type=int, default=22)
    ap.add_argument("--profile", action="store_true", help="cProfile the dtriton rows")
    ap.add_argument("--breakdown", action="store_true", help="host time of the step's parts")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    if dev == "cuda":   # load the native-step extension now (a process otherwise loads it in the background)
        from dtriton.backends.triton import native
        native.module()
    n = 3 if a.dry_run else a.n
    for name in a.cases:
        alg, eager, make = cases(dev, a.dry_run)[name]
        base = make()
        nf, nb = LAUNCHES[name]
        for impl, f in (("dtriton", dt.compile_autograd(alg, native=False)),
                        ("dt native", dt.compile_autograd(alg, native=True)), ("eager", eager), ("null node", null),
                        (f"null+{nf}+{nb}", null_launching(nf, nb, dev))):
            ins = [t.clone().requires_grad_(True) for t in base]
            grad = torch.randn_like(base[0])
            step = make_step(f, ins, grad)
            enq, wall = timings(step, dev, n)
            print(f"{name:12s} {impl:8s} enqueue {enq:8.1f} us/step   wall {wall:8.1f} us/step", flush=True)
            if a.breakdown:
                breakdown(f, ins, grad, dev, n)
            if impl in ("dtriton", "dt native") and a.profile:
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(n):
                    step()
                prof.disable()
                sync(dev)
                st = pstats.Stats(prof)
                rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:a.top]
                print(f"  cProfile, us per step (own / cumulative), {n} steps:")
                for (file, line, fn), (cc, nc, tt, ct, _) in rows:
                    print(f"  {tt / n * 1e6:8.1f} {ct / n * 1e6:8.1f}  {nc / n:5.1f}x  {os.path.basename(file)}:{line} {fn}")


if __name__ == "__main__":
    main()
