"""Host time of forward+backward steps (issue 15): how much of grad_bench's fwd+bwd time is the host.

    PYTHONPATH=src python3 bench/host_overhead.py [--out DIR] [--dry-run | --host-only] [--enqueue | --profile]

One step is grad_bench's: forward, the weighted-sum loss, backward. For softmax and layer norm (fp16)
and cross-entropy (fp32), at a tiny shape (the GPU work is negligible: the step's time is the host's)
and at grad_bench's shape, it times one step three ways for dtriton, eager PyTorch and torch.compile:
wall time per step with a synchronisation after each (host + GPU, serial), do_bench's time (what
grad_bench reports), and the GPU time of the step's kernels from torch.profiler (the largest kernels
are listed by name). For softmax at grad_bench's shape, two probe rows run the backward with 1 and 4
rows per program instead of the heuristic's 16 whole rows. For dtriton it also gives the host time inside dtriton per step: the
differentiable call (``autograd.Function`` + forward launch) and the backward (the steady state's
``StepFunction.backward``, or the general ``run_backward`` where it runs), medians over the wall loop.

``--host-only`` (CPU, no GPU needed): runs the GPU code path (plans, fast launchers) on CPU tensors
with every kernel launch replaced by a no-op, and prints the host µs of dtriton's forward (no grad),
of its differentiable call and of its backward, and of a whole step (the loss's CPU ops included).
``--dry-run``: one step of each implementation on the CPU interpreter at tiny shapes.
``--enqueue``: whether a step waits for the GPU (see :func:`enqueue_steps`; with ``--dry-run`` on the CPU).
``--profile``: cProfile over steady-state steps of dtriton and eager at the tiny shapes (on the GPU, or
with ``--host-only`` on the CPU with no-op launches): µs per step by function, largest own time first.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from algorithms import cross_entropy, layer_norm, softmax  # noqa: E402
from dtriton.integrations.autograd import DifferentiableKernel  # noqa: E402
from dtriton.integrations.steps import StepFunction  # noqa: E402


def cases(dev, dry):
    """(label, algorithm, input maker, eager function, indices of the inputs with gradients)."""
    h = torch.float16
    big = (64, 64) if dry else (4096, 4096)
    ln_big = (64, 64) if dry else (4096, 8192)
    ce_big = (64, 64) if dry else (4096, 32768)
    ln = (lambda X, w, b: torch.nn.functional.layer_norm(X, (X.shape[-1],), w, b, 1e-5))
    ce = (lambda X, labels: torch.nn.functional.cross_entropy(X, labels, reduction="none"))

    def ln_in(m, n):
        return lambda: (torch.randn(m, n, device=dev, dtype=h), torch.randn(n, device=dev, dtype=h),
                        torch.randn(n, device=dev, dtype=h))

    def ce_in(m, n):
        return lambda: (torch.randn(m, n, device=dev), torch.randint(0, n, (m,), device=dev))
    for m, n in ((8, 64), big):
        yield f"softmax fp16 {m}x{n}", softmax, lambda m=m, n=n: (torch.randn(m, n, device=dev, dtype=h),), \
            (lambda X: torch.softmax(X, -1)), (0,)
    for m, n in ((8, 64), ln_big):
        yield f"layer_norm fp16 {m}x{n}", layer_norm, ln_in(m, n), ln, (0, 1, 2)
    for m, n in ((8, 64), ce_big):
        yield f"cross_entropy fp32 {m}x{n}", cross_entropy, ce_in(m, n), ce, (0,)


class HostTimer:
    """Times dtriton's host code per call, in µs: the differentiable call (``DifferentiableKernel.__call__``:
    ``autograd.Function`` and the forward's launch), the general backward (``run_backward``: the first
    step of a signature, or every step where no fast launcher exists) and the steady-state backward
    node (``StepFunction.backward``, which the node's ``apply`` is: saved tensors, the backward step's lookup and launches), by
    wrapping them (restored by :meth:`close`)."""

    WRAPPED = ((DifferentiableKernel, "__call__", "dtriton call (fwd)"),
               (DifferentiableKernel, "run_backward", "dtriton run_backward"),
               (StepFunction._backward_cls, "apply", "dtriton backward (steady)"))   # the node's entry

    def __init__(self):
        self.times = defaultdict(list)
        self.saved = []
        for cls, name, label in self.WRAPPED:
            orig = cls.__dict__[name]
            self.saved.append((cls, name, orig))
            if isinstance(orig, staticmethod):
                setattr(cls, name, staticmethod(self._timed(orig.__func__, label)))
            else:
                setattr(cls, name, self._timed(orig, label))

    def _timed(self, orig, label):
        def timed(*a, **k):
            t0 = time.perf_counter_ns()
            r = orig(*a, **k)
            self.times[label].append((time.perf_counter_ns() - t0) / 1e3)
            return r
        return timed

    def medians(self) -> dict[str, float]:
        return {k: statistics.median(v) for k, v in self.times.items()}

    def close(self):
        for cls, name, orig in self.saved:
            setattr(cls, name, orig)


def null_launches():
    """Make CPU calls take the GPU code path (planning, fast launchers) without running anything:
    the backend choice says "gpu", launches return a compiled-kernel stand-in whose launcher (``run``,
    with the C ``launch`` the fast launchers call) does nothing, and Triton's driver reports stream 0."""
    import dtriton.runtime.kernel as runtime_kernel
    from triton.runtime import driver

    class Launcher:   # Triton 3.6's CudaLauncher: the fast launchers call its C ``launch`` directly
        global_scratch_size = profile_scratch_size = 0
        launch_cooperative_grid = launch_pdl = False

        def launch(self, *args):
            return None

    class Compiled:
        function = packed_metadata = None
        run = Launcher()

    class Driver:
        def get_current_stream(self, index):
            return 0
    driver.set_active(Driver())
    runtime_kernel.backend_for = lambda device: "gpu"
    dt.backends.default_backend().launch = lambda fn, programs, args, meta, interpret: Compiled()
    torch.cuda.current_device = lambda: 0


def step_fn(f, inputs, grad_idx, weights):
    ins = [t.detach().clone().requires_grad_(k in grad_idx) for k, t in enumerate(inputs)]

    def step():
        for k in grad_idx:
            ins[k].grad = None
        o = f(*ins)
        oo = o if isinstance(o, tuple) else (o,)
        sum((x.float() * w).sum() for x, w in zip(oo, weights)).backward()

    def forward():
        with torch.no_grad():
            f(*ins)
    return step, forward


def per_call_us(fn, dev, n, repeats=1):
    """Best of ``repeats`` mean µs per call over ``n`` calls (a synchronisation after each on CUDA)."""
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(repeats):
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
            if dev == "cuda":
                torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def gpu_us(step):
    """GPU µs per step from torch.profiler, and the five largest kernels (name, µs per step)."""
    from torch.profiler import ProfilerActivity, profile
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    ev = [(e.key, e.device_time_total / 5) for e in prof.key_averages() if e.device_time_total]
    ev.sort(key=lambda x: -x[1])
    return sum(t for _, t in ev), [(k[:40], round(t, 1)) for k, t in ev[:5]]


def host_only(rows):
    """The ``--host-only`` table: dtriton's host µs per call with launches that do nothing."""
    null_launches()
    for name, alg, make, eager, gidx in cases("cpu", True):
        if " 8x64" not in name:
            continue
        inputs = make()
        dk = dt.compile_autograd(alg)
        outs = eager(*inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        step, forward = step_fn(dk, inputs, gidx, [torch.randn(o.shape) for o in outs])
        for _ in range(2):   # the general path plans, compiles, then builds the cached steps; the steady state is timed
            step()
        timer = HostTimer()
        try:
            t_step = per_call_us(step, "cpu", 200, repeats=5)
            med = timer.medians()
        finally:
            timer.close()
        row = dict(case=name, impl="dtriton (launches off)", forward_nograd_us=per_call_us(forward, "cpu", 200, 5),
                   step_us=t_step, **{k + " us": v for k, v in med.items()})
        rows.append(row)
        print(f"{name:26s} forward (no grad) {row['forward_nograd_us']:7.1f} us   step {t_step:7.1f} us   "
              + "   ".join(f"{k} {v:6.1f} us" for k, v in med.items()), flush=True)


def measured(dry, rows):
    """The wall / do_bench / GPU-kernel table (the GPU, or the interpreter with ``dry``)."""
    dev = "cpu" if dry else "cuda"
    for name, alg, make, eager, gidx in cases(dev, dry):
        inputs = make()
        outs = eager(*inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        weights = [torch.randn(o.shape, device=dev) for o in outs]
        impls = [("dtriton", dt.compile_autograd(alg)), ("eager", eager)]
        if alg is softmax and " 8x64" not in name:
            # probes: the default backward keeps a 16-row tile of whole 4096-wide rows (two fp32 values
            # live per element across the row sum: spills?); fewer rows per program
            for rows_per in (1, 4):
                sched = dt.Schedule.from_dict({"grid": ["i"], "tile": {"i": rows_per}, "strategy": {"j": "whole"},
                                               "num_warps": 8})
                impls.append((f"dtriton bwd i={rows_per}", dt.compile_autograd(alg, backward_schedules={"X": sched})))
        if not dry:
            impls.append(("torch.compile", torch.compile(eager)))
        for impl, f in impls:
            step, _ = step_fn(f, inputs, gidx, weights)
            timer = HostTimer() if impl.startswith("dtriton") else None
            try:
                row = dict(case=name, impl=impl, wall_us=per_call_us(step, dev, 1 if dry else 50))
                if timer is not None:
                    row.update({k + " us": v for k, v in timer.medians().items()})
            finally:
                if timer is not None:
                    timer.close()
            if not dry:
                from triton.testing import do_bench
                row["do_bench_us"] = do_bench(step, warmup=10, rep=50) * 1e3
                row["gpu_us"], row["kernels"] = gpu_us(step)
            rows.append(row)
            host = "".join(f"  {label} {row[label + ' us']:6.1f} us" for _, _, label in HostTimer.WRAPPED
                           if label + " us" in row)
            print(f"{name:28s} {impl:14s} wall/step {row['wall_us']:9.1f} us  do_bench {row.get('do_bench_us', float('nan')):9.1f} us"
                  f"  GPU kernels {row.get('gpu_us', float('nan')):9.1f} us{host}  {row.get('kernels', '')}", flush=True)


class SoftmaxNode(torch.autograd.Function):
    """Eager softmax's own ops in a Python autograd node (see :func:`python_node`)."""

    @staticmethod
    def forward(ctx, X):
        Y = torch._softmax(X, -1, False)
        ctx.to_save = (Y,)
        return Y

    @staticmethod
    def backward(ctx, g):
        (Y,) = ctx.saved_tensors
        return torch._softmax_backward_data(g, Y, -1, Y.dtype)


class LayerNormNode(torch.autograd.Function):
    """Eager layer norm's own ops in a Python autograd node (see :func:`python_node`)."""

    @staticmethod
    def forward(ctx, X, w, b):
        out, mean, rstd = torch.native_layer_norm(X, (X.shape[-1],), w, b, 1e-5)
        ctx.to_save = (X, w, b, mean, rstd)
        return out

    @staticmethod
    def backward(ctx, g):
        X, w, b, mean, rstd = ctx.saved_tensors
        return torch.ops.aten.native_layer_norm_backward.default(g, X, (X.shape[-1],), mean, rstd, w, b, [True, True, True])


def python_node(cls):
    """``cls``'s forward as a callable entered and left the way dtriton's steps are (the C
    ``_FunctionBase.apply``; the node's ``apply`` is ``cls.backward``): eager torch's kernels and
    allocations behind one Python autograd node, the floor of any Python-level autograd op."""
    cls._backward_cls.apply = cls.backward
    return torch._C._FunctionBase.__dict__["apply"].__get__(None, cls)


def enqueue_steps(dry, rows, n=100):
    """``--enqueue``: whether a step waits for the GPU. For softmax and layer norm at the tiny and
    grad_bench's shapes, eager first, then dtriton, then eager's own ops behind one Python autograd
    node (:func:`python_node`: what a Python node costs), then eager again (drift): per step, the host's
    time to enqueue ``n`` steps without synchronising (``host_us``), the time until they have all
    run (``total_us``), and the time with a synchronisation after each step (``synced_us``), for the
    whole step, for the forward and loss without backward (``fwd+loss``), and for the loss alone on
    a leaf tensor (``loss only``: the ops every implementation shares). With torch.profiler's CPU
    activity it counts, per step, the CUDA API calls that can block the host (names with
    Synchronize, Memcpy, Malloc or Free, and stream/event waits) and the kernel launches.
    ``host_us`` near ``total_us`` with no blocking calls means host-bound; a step that blocks
    shows the call."""
    dev = "cpu" if dry else "cuda"
    sync = torch.cuda.synchronize if not dry else (lambda: None)
    n = 2 if dry else n
    for name, alg, make, eager, gidx in cases(dev, dry):
        if name.startswith("cross_entropy"):
            continue
        inputs = make()
        outs = eager(*inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        weights = [torch.randn(o.shape, device=dev) for o in outs]
        leaf = [o.detach().clone().requires_grad_() for o in outs]
        dk = dt.compile_autograd(alg)
        node = python_node(SoftmaxNode if alg is softmax else LayerNormNode)
        for impl, f in (("eager", eager), ("dtriton", dk), ("eager in a Python node", node), ("eager again", eager)):
            step, _ = step_fn(f, inputs, gidx, weights)
            ins = [t.detach().clone().requires_grad_(k in gidx) for k, t in enumerate(inputs)]

            def fwd_loss(f=f, ins=ins):
                o = f(*ins)
                oo = o if isinstance(o, tuple) else (o,)
                return sum((x.float() * w).sum() for x, w in zip(oo, weights))

            def loss_only():
                sum((x.float() * w).sum() for x, w in zip(leaf, weights)).backward()
            row = dict(case=name, impl=impl)
            for what, fn in (("step", step), ("fwd+loss", fwd_loss), ("loss only", loss_only)):
                for _ in range(3):
                    fn()
                sync()
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                t1 = time.perf_counter()
                sync()
                t2 = time.perf_counter()
                row[f"{what} host_us"] = (t1 - t0) / n * 1e6
                row[f"{what} total_us"] = (t2 - t0) / n * 1e6
                row[f"{what} synced_us"] = per_call_us(fn, dev, n)
            if not dry:
                row.update(blocking_calls(step))
            rows.append(row)
            print(f"{name:26s} {impl:22s} " + "  ".join(
                f"{w}: host {row[w + ' host_us']:6.1f} total {row[w + ' total_us']:6.1f} synced {row[w + ' synced_us']:6.1f}"
                for w in ("step", "fwd+loss", "loss only")) + f"  {row.get('calls', '')}", flush=True)


def blocking_calls(step, n=5):
    """Per step: CUDA API calls that can block the host, and kernel launches (torch.profiler, CPU activity)."""
    from torch.profiler import ProfilerActivity, profile
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    calls = defaultdict(float)
    for e in prof.key_averages():
        k = e.key
        if any(w in k for w in ("Synchronize", "Memcpy", "Malloc", "Free", "WaitEvent", "Launch", "cuLaunch")):
            calls[k] += e.count / n
    return dict(calls={k: round(v, 1) for k, v in sorted(calls.items())})


def profile_steps(dev, rows, n=300):
    """``--profile``: cProfile over ``n`` steady-state steps of dtriton and eager at the tiny shapes
    (the host's time per step by function, in µs per step: the 14 largest by own time printed, 60 in the JSON)."""
    import cProfile
    import pstats
    for name, alg, make, eager, gidx in cases(dev, True):
        if " 8x64" not in name:
            continue
        inputs = make()
        outs = eager(*inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        weights = [torch.randn(o.shape, device=dev) for o in outs]
        for impl, f in (("dtriton", dt.compile_autograd(alg)), ("eager", eager)):
            step, _ = step_fn(f, inputs, gidx, weights)
            for _ in range(5):
                step()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(n):
                step()
            prof.disable()
            st = pstats.Stats(prof)
            top = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:60]   # 14 printed, 60 in the JSON
            total = sum(v[2] for v in st.stats.values()) / n * 1e6
            print(f"\n{name} {impl}: {total:.1f} us of profiled host time per step; largest own times (us/step, cumulative):")
            fns = []
            for k, ((file, line, fn), (cc, nc, tt, ct, _)) in enumerate(top):
                where = f"{os.path.basename(file)}:{line}({fn})"
                fns.append(dict(fn=where, calls_per_step=nc / n, own_us=tt / n * 1e6, cum_us=ct / n * 1e6))
                if k < 14:
                    print(f"  {tt / n * 1e6:7.2f} {ct / n * 1e6:8.2f}  x{nc / n:<4.0f} {where}")
            rows.append(dict(case=name, impl=impl, profiled_us_per_step=total, functions=fns))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true", help="the CPU interpreter, tiny shapes, one step each")
    ap.add_argument("--host-only", action="store_true", help="CPU, kernel launches replaced by no-ops: host µs")
    ap.add_argument("--enqueue", action="store_true", help="whether a step waits for the GPU: enqueue time "
                                                           "against run time, and blocking CUDA calls")
    ap.add_argument("--profile", action="store_true", help="cProfile of steady-state steps at the tiny shapes "
                                                           "(the GPU; with --host-only, the CPU with no-op launches)")
    a = ap.parse_args()
    rows = []
    if a.enqueue:
        enqueue_steps(a.dry_run, rows)
    elif a.profile:
        if a.host_only:
            null_launches()
        profile_steps("cpu" if a.host_only else "cuda", rows)
    elif a.host_only:
        host_only(rows)
    else:
        measured(a.dry_run, rows)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "host_overhead.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
