"""Native steps on the GPU (issue 15): correctness of the C++ autograd node against the Python node
and float64, and its fallbacks.

    PYTHONPATH=src python3 bench/native_check.py [--dry-run]

For each case (odd and issue-sized shapes) the same algorithm runs as a Python-node kernel
(``compile_autograd(native=False)``) and a native one (``native=True``) on the same inputs, four
steps each (the first plans, the second learns the backward and registers the native step, the
rest run natively); checked: the native step's node is the C++ one, its outputs and gradients
equal the Python node's bit for bit and are close to float64 torch. Then, on layer norm: a
transposed (non-contiguous) incoming gradient, inputs of which only some need a gradient,
``retain_graph`` twice, a second backward without it, ``create_graph=True``, an input changed in
place before the backward, and a call on a side stream (whose arrival counters the plan lacks).
Prints one line per check and ``native_check: N ok, M failed`` last. ``--dry-run``: the CPU
interpreter, which has no fast launchers (every step keeps the Python node; the script's logic runs).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from algorithms import cross_entropy, layer_norm, log_softmax, rms_norm, softmax, spatial_diffusion  # noqa: E402
from dtriton.library import avg_pool2d_window, conv1d  # noqa: E402

RESULTS = {"ok": 0, "failed": 0}


def report(name: str, ok: bool, detail: str = "") -> None:
    RESULTS["ok" if ok else "failed"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}", flush=True)


def cases(dev, dry):
    h = torch.float16

    def rnd(*s, dtype=h):
        return torch.randn(*s, device=dev, dtype=dtype)
    sizes = [(7, 33), (129, 1000)] if dry else [(7, 33), (129, 1000), (4096, 8192)]
    out = []
    for M, N in sizes:
        out.append((f"layer_norm {M}x{N}", layer_norm,
                    lambda X, w, b: torch.nn.functional.layer_norm(X, (X.shape[-1],), w, b),
                    lambda M=M, N=N: (rnd(M, N), rnd(N), rnd(N)), [0, 1, 2]))
        out.append((f"rms_norm {M}x{N}", rms_norm,
                    lambda X, w: torch.nn.functional.rms_norm(X, (X.shape[-1],), w, eps=1e-6),
                    lambda M=M, N=N: (rnd(M, N), rnd(N)), [0, 1]))
        out.append((f"softmax {M}x{N}", softmax, lambda X: torch.softmax(X, -1), lambda M=M, N=N: (rnd(M, N),), [0]))
        out.append((f"log_softmax {M}x{N}", log_softmax, lambda X: torch.log_softmax(X, -1),
                    lambda M=M, N=N: (rnd(M, N),), [0]))
        out.append((f"cross_entropy fp32 {M}x{N}", cross_entropy,
                    lambda X, lab: torch.nn.functional.cross_entropy(X, lab, reduction="none"),
                    lambda M=M, N=N: (rnd(M, N, dtype=torch.float32), torch.randint(0, N, (M,), device=dev)), [0]))
    V, K, C = (50, 8, 6) if dry else (20000, 128, 128)
    f32 = torch.float32
    def diffusion_inputs():
        return (rnd(V, C, dtype=f32), rnd(V, K, dtype=f32) / V ** 0.5, torch.rand(V, device=dev) + 0.5,
                torch.rand(K, device=dev) * 10, torch.rand(C, device=dev))
    out.append((f"spatial_diffusion fp32 V={V} K={K} C={C}", spatial_diffusion, diffusion_reference, diffusion_inputs,
                [0, 4]))
    # ints in the call key (a step's constants; the node takes the tensors), two backward launchers
    for (N, C, L, O, R, st, pd, dl) in ((2, 3, 13, 4, 3, 2, 1, 1),) + (() if dry else ((8, 64, 509, 64, 5, 1, 2, 2),)):
        Lo = (L + 2 * pd - dl * (R - 1) - 1) // st + 1
        out.append((f"conv1d fp32 N{N} C{C} L{L} O{O} R{R} s{st} p{pd} d{dl}", conv1d,
                    lambda X, Wt, s_, p_, d_, lo: torch.nn.functional.conv1d(X, Wt, stride=s_, padding=p_, dilation=d_),
                    lambda N=N, C=C, L=L, O=O, R=R, st=st, pd=pd, dl=dl, Lo=Lo: (
                        rnd(N, C, L, dtype=f32), rnd(O, C, R, dtype=f32), st, pd, dl, Lo), [0, 1]))
    # a mean's derived gradient (divided by its window count: written in the input's dtype since s18)
    for (N, H, W, K, st, pd), dtp in (((3, 11, 13, 3, 2, 1), f32), ((3, 11, 13, 3, 2, 1), h)) + (
            () if dry else (((64, 127, 129, 3, 2, 1), f32),)):
        Ho, Wo = (H + 2 * pd - K) // st + 1, (W + 2 * pd - K) // st + 1
        out.append((f"avg_pool2d_window {dtp} N{N} H{H} W{W} K{K} s{st} p{pd}", avg_pool2d_window,
                    lambda X, K_, s_, p_, ho, wo: torch.nn.functional.avg_pool2d(X, K_, s_, p_),
                    lambda N=N, H=H, W=W, K=K, st=st, pd=pd, Ho=Ho, Wo=Wo, dtp=dtp: (
                        rnd(N, H, W, dtype=dtp), K, st, pd, Ho, Wo), [0]))
    # the DiffusionNet layer's use: a loss on the first output only (the second's gradient is a zero)
    out.append((f"spatial_diffusion fp32 V={V} K={K} C={C}, loss on out 0", spatial_diffusion, diffusion_reference,
                diffusion_inputs, [0, 4], (0,)))
    return out


def diffusion_reference(x, basis, mass, evals, times):
    spec = torch.exp(-evals[:, None] * times[None, :]) * (basis.transpose(0, 1) @ (x * mass[:, None]))
    return basis @ spec, spec


def _tuple(y):
    return y if isinstance(y, tuple) else (y,)


def _leaves(base, grad_idx):
    return [t.clone().requires_grad_(k in grad_idx) if isinstance(t, torch.Tensor) else t for k, t in enumerate(base)]


def step(f, base, grad_idx, gs):
    ins = _leaves(base, grad_idx)
    ys = _tuple(f(*ins))
    used = [k for k, g in enumerate(gs) if g is not None]
    torch.autograd.backward([ys[k] for k in used], [gs[k] for k in used])
    return ys, [ins[k].grad for k in grad_idx]


def check_case(name, alg, ref, make, grad_idx, dev, used=None):
    torch.manual_seed(0)
    py, nat = dt.compile_autograd(alg, native=False), dt.compile_autograd(alg, native=True)
    for it in range(4):
        base = make()
        gs = [torch.randn(y.shape, device=dev, dtype=y.dtype) if used is None or k in used else None
              for k, y in enumerate(_tuple(ref(*base)))]
        yp, gp = step(py, base, grad_idx, gs)
        yn, gn = step(nat, base, grad_idx, gs)
    yq, gq = step(py, base, grad_idx, gs)   # the Python node again: are its kernels deterministic (no atomics)?
    ins = _leaves(base, grad_idx)
    node = _tuple(nat(*ins))[0].grad_fn
    label = None if node is None else (type(node).__name__ if hasattr(type(node), "apply") else node.name())
    native = label == "DtritonStepBackward"
    steps = [s for s in getattr(nat, "_steps", {}).values() if s]
    why = ""
    if not native:   # why not: the step's state, and what its backward steps could hand the native node
        made = getattr(nat, "_steps", {})
        why = (f", {len(made)} call keys, {sum(1 for v in made.values() if not v)} without a step, step.native "
               f"{[s.native for s in steps]}, native keys {[len(s.native_keys) for s in steps]}, why "
               f"{[s.native_why for s in steps]}")
        for s in steps:
            for k, b in ((k, b) for k, b in s.backward_steps.items() if b is not None):
                why += (f"; backward {k!r:.80}: picks {b.native_picks()}, zero params {b.zero_params}, out dtypes "
                        f"{[getattr(l, 'out_dtypes', None) for l, _, _ in b.launches]}, "
                        f"grad dtypes {[[d for _, _, d in p] for _, _, p in b.launches]}")
    report(f"{name}: native node", native or dev == "cpu", f"(grad_fn {label}{why})")
    # launch_counts after a native backward: the variant that ran (written by the C++ node), as the Python node's
    step(nat, base, grad_idx, gs)
    step(py, base, grad_idx, gs)
    report(f"{name}: launch_counts native == python node", nat.launch_counts() == py.launch_counts(),
           f"({nat.launch_counts()} vs {py.launch_counts()})")
    def equal(a, b):
        return all(torch.equal(x, y) for x, y in zip(a, b))

    def gap(a, b):
        return max(((x.double() - y.double()).norm() / y.double().norm().clamp_min(1e-30)).item() for x, y in zip(a, b))
    if equal(yp, yq) and equal(gp, gq):
        report(f"{name}: native == python node, bit for bit", equal(yp, yn) and equal(gp, gn))
    else:   # atomics (a split reduction): two Python-node runs differ too; the native one may differ as much
        within = max(gap(yp, yq), gap(gp, gq))
        got = max(gap(yn, yp), gap(gn, gp))
        report(f"{name}: native ~ python node (its runs differ by {within:.1e}: atomics)", got <= 4 * within + 1e-7,
               f"(native vs python {got:.1e})")
    ins64 = [(t.double() if t.is_floating_point() else t).requires_grad_(k in grad_idx) if isinstance(t, torch.Tensor)
             else t for k, t in enumerate(base)]
    y64 = _tuple(ref(*ins64))
    torch.autograd.backward([y for y, g in zip(y64, gs) if g is not None], [g.double() for g in gs if g is not None])
    errs = [((a.double() - b.grad).norm() / b.grad.norm().clamp_min(1e-30)).item()
            for a, b in zip(gn, [ins64[k] for k in grad_idx])]
    yerr = max(((a.double() - b).norm() / b.norm()).item() for a, b in zip(yn, y64))
    tol = 2e-2 if base[0].dtype in (torch.float16, torch.bfloat16) else 1e-3
    report(f"{name}: vs float64", max(errs + [yerr]) < tol,
           f"(output {yerr:.1e}, grads {', '.join(f'{e:.1e}' for e in errs)})")


def check_fallbacks(dev):
    torch.manual_seed(1)
    M, N = (129, 1000) if dev == "cuda" else (9, 40)
    X, w, b = (torch.randn(M, N, device=dev, dtype=torch.float16), torch.randn(N, device=dev, dtype=torch.float16),
               torch.randn(N, device=dev, dtype=torch.float16))
    ref = dt.compile_autograd(layer_norm, native=False)
    nat = dt.compile_autograd(layer_norm, native=True)

    def grads(f, gy, need=(0, 1, 2), **kw):
        ins = [t.clone().requires_grad_(k in need) for k, t in enumerate((X, w, b))]
        y = f(*ins)
        y.backward(gy, **kw)
        return [ins[k].grad for k in need]
    gy = torch.randn(M, N, device=dev, dtype=torch.float16)
    for _ in range(3):
        grads(nat, gy)
        grads(ref, gy)
    gt = torch.randn(N, M, device=dev, dtype=torch.float16).t()   # transposed: a new gradient layout
    for it in range(3):
        a, r = grads(nat, gt), grads(ref, gt)
        report(f"transposed gradient, step {it}", all(torch.equal(x, y) for x, y in zip(a, r)))
    for need in ((0,), (1, 2), (2,)):
        for it in range(2):
            a, r = grads(nat, gy, need), grads(ref, gy, need)
            report(f"only inputs {need} need a gradient, step {it}", all(torch.equal(x, y) for x, y in zip(a, r)))
    ins = [t.clone().requires_grad_(True) for t in (X, w, b)]
    y = nat(*ins)
    y.backward(gy, retain_graph=True)
    first = ins[0].grad.clone()
    y.backward(gy)
    report("retain_graph: a second backward adds the same gradient", torch.allclose(ins[0].grad, 2 * first, rtol=1e-3))
    try:
        y.backward(gy)
        report("a third backward after the graph was freed raises", False)
    except RuntimeError as e:
        report("a third backward after the graph was freed raises", "second time" in str(e) or "freed" in str(e),
               f"({str(e)[:90]})")
    ins = [t.clone().requires_grad_(True) for t in (X, w, b)]
    y = nat(*ins)
    try:
        torch.autograd.grad(y, ins, gy, create_graph=True)
        report("create_graph=True is refused", False)
    except (NotImplementedError, RuntimeError) as e:
        report("create_graph=True is refused", "double backward" in str(e), f"({type(e).__name__})")
    ins = [t.clone().requires_grad_(True) for t in (X, w, b)]
    xin = ins[0] * 1   # a non-leaf input, changed in place after the forward
    y = nat(xin, ins[1], ins[2])
    xin.mul_(2)
    try:
        y.backward(gy)
        report("an input changed in place before the backward raises", False)
    except RuntimeError as e:
        report("an input changed in place before the backward raises", "inplace" in str(e), f"({str(e)[:60]})")
    if dev == "cuda":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            a = grads(nat, gy)
            r = grads(ref, gy)
        torch.cuda.synchronize()
        report("a side stream", all(torch.equal(x, y) for x, y in zip(a, r)))
    a, r = grads(nat, gy), grads(ref, gy)
    report("the default stream again", all(torch.equal(x, y) for x, y in zip(a, r)))
    # a larger call on the same stream grows the arrival-counter pool (the old counters are replaced):
    # the registered step keeps the counters it was planned with
    big = [torch.randn(4 * M, 4 * N, device=dev, dtype=torch.float16), torch.randn(4 * N, device=dev, dtype=torch.float16),
           torch.randn(4 * N, device=dev, dtype=torch.float16)]
    gbig = torch.randn(4 * M, 4 * N, device=dev, dtype=torch.float16)
    other = dt.compile_autograd(layer_norm, native=True)
    for _ in range(3):
        ins = [t.clone().requires_grad_(True) for t in big]
        other(*ins).backward(gbig)
    for it in range(3):
        a, r = grads(nat, gy), grads(ref, gy)
        report(f"after the counter pool grew, step {it}", all(torch.equal(x, y) for x, y in zip(a, r)))
    # a thread that has not used CUDA yet (no current context until one is made current)
    import threading
    got = {}

    def worker():
        try:
            got["a"] = grads(nat, gy)
        except Exception as e:  # noqa: BLE001
            got["error"] = f"{type(e).__name__}: {e}"
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    r = grads(ref, gy)
    report("a fresh thread", "a" in got and all(torch.equal(x, y) for x, y in zip(got["a"], r)), got.get("error", ""))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    if dev == "cuda":   # load the native-step extension now (a process otherwise loads it in the background)
        from dtriton.backends.triton import native
        native.module()
    for c in cases(dev, a.dry_run):
        check_case(*c[:5], dev, *c[5:])
    check_fallbacks(dev)
    print(f"native_check: {RESULTS['ok']} ok, {RESULTS['failed']} failed")
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
