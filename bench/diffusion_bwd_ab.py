"""Issue 15: A/B of the diffusion layer's backward ``grad_times`` kernel (the output reducing k, one
value per channel): the heuristic's schedule against the same schedule with that output's kernel as
it was before session 6 (64-wide channel tiles looping over k in steps of 32), for the derived
backward (``dt.differentiable``, the layer's "auto" backend: the forward saves its spectral output,
which the gradient of the times reads) and the hand-written one; and the derived backward with the
projection saved instead (as before session 11: the gradient of the times recomputes
``exp(-evals t) * projection``).

    PYTHONPATH=src python3 bench/diffusion_bwd_ab.py [--V 2000 20000] [--dry-run] [--out DIR]

Each row: GPU busy time of a training step (forward, loss ``sum(out * w)``, backward into x and
times; the sum of its kernels' times from torch.profiler), the step's wall time on the GPU (a CUDA graph
of 5 steps replayed: kernels that overlap under programmatic dependent launch count once; rows "no
dependent launch" plan every kernel without it) and the backward's per-kernel times,
after checking both gradients against float64 eager autograd. ``--out``: also writes
``<out>/diffusion_bwd_ab.json`` and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import diffusion as bench  # noqa: E402  (inputs, _step, profile_kernels, rel)
import run as suite  # noqa: E402

import dtriton as dt  # noqa: E402
from dtriton.examples.diffusionnet import layer as L  # noqa: E402
from dtriton.integrations import differentiable  # noqa: E402
from dtriton.library import spatial_diffusion  # noqa: E402
from dtriton.plan import dependent_launch as DL  # noqa: E402

PDL_ARCH = DL.MIN_ARCH


def old_out1(alg: dt.Algorithm, args: tuple) -> dt.Schedule:
    """The heuristic's complete schedule of backward ``alg`` for ``args`` with the output ``out1``'s
    kernel as before: its own grid over the channels, the schedule's tiles (64 channels, k in 32s)."""
    sched = dt.compile(alg).schedule_for(*args)
    return sched.replace(stages={**dict(sched.stages), "out1": dt.StageSchedule(grid=("c",))})


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes")
    ap.add_argument("--out", default=None, help="write diffusion_bwd_ab.json here")
    suite.add_pdl_options(ap)
    ap.add_argument("--impls", default="", help="comma-separated substrings: only rows whose name has one")
    a = ap.parse_args(argv)
    suite.apply_pdl_options(a)
    rows = []
    dev, K, C, Vs = "cuda", 128, 128, a.V
    if a.dry_run:
        suite.DRY, dev, K, C, Vs = True, "cpu", 16, 16, [37]
    for V in Vs:
        args = bench.inputs(V, K, C, dev)
        w = torch.randn(args[0].shape, generator=torch.Generator().manual_seed(1)).to(dev)
        gref = bench._step(L.torch_spatial_diffusion, tuple(x.double() for x in args), w.double())
        x, basis, mass, evals, times = args
        bargs = (*args, torch.empty(V, C, device=dev), torch.empty(K, C, device=dev), torch.empty(K, C, device=dev))
        mbargs = (torch.empty(V, C, device=dev), basis, mass, evals, times, torch.empty(K, C, device=dev))
        fwd = dt.compile(spatial_diffusion)
        impls = {
            "derived (default)": lambda: differentiable(dt.compile(spatial_diffusion), save=[L.spectral_stage()]),
            "derived (no dependent launch)": lambda: differentiable(dt.compile(spatial_diffusion),
                                                                    save=[L.spectral_stage()]),
            "derived (out1 as before)": lambda: differentiable(fwd, save=[L.spectral_stage()],
                                                               backward_schedules=lambda alg: old_out1(alg, bargs)),
            "derived (saves projection)": lambda: differentiable(fwd, save=[L.projection_stage()]),
            "manual (default)": lambda: L.DiffusionKernels(None),
            "manual (no dependent launch)": lambda: L.DiffusionKernels(None),
            "manual (out1 as before)": lambda: L.DiffusionKernels(
                {"backward": old_out1(L.spatial_diffusion_backward, mbargs), "forward": None, "backward_times": None}),
        }
        for name, make in impls.items():
            if a.impls and not any(s in name for s in a.impls.split(",")):
                continue
            # (the plan reads the threshold when a kernel first plans: this impl's kernels are all new)
            DL.MIN_ARCH = 10**6 if "no dependent launch" in name else PDL_ARCH
            impl = make()
            if isinstance(impl, L.DiffusionKernels):
                def f(*xs, _k=impl):
                    return L.spatial_diffusion_fn(*xs, backend="dtriton-manual", kernels=_k)
            else:
                def f(*xs, _d=impl):
                    return _d(*xs)[0]
            g = bench._step(f, args, w)
            err = max(bench.rel(p, r) for p, r in zip(g, gref))
            _, step_per, busy = bench.profile_kernels(lambda: bench._step(f, args, w), reps=5)

            def fwd_only(_f=f):
                xx, tt = x.detach().requires_grad_(), times.detach().requires_grad_()
                return (_f(xx, basis, mass, evals, tt) * w).sum(), xx, tt
            _, per, _ = bench.profile_kernels(lambda st: st[0].backward(), before=fwd_only, reps=5)
            try:   # the step's wall time on the GPU: one CUDA graph of 5 steps, replayed (kernels overlapping
                # by dependent launch count once, where the sum of kernel times counts their waits too)
                graph = round(suite.graph_time_us(lambda _f=f: bench._step(_f, args, w), reps=5), 2)
            except Exception as e:  # noqa: BLE001  (reported, the other rows go on)
                graph = f"failed: {type(e).__name__}: {str(e)[:120]}"
            print(f"V={V:<6d} {name:30s} step graph {graph} us  GPU busy {busy if busy is None else round(busy, 2)} us  "
                  f"err {err:.1e}  backward per kernel us: {per}; step per kernel us: {step_per}", flush=True)
            rows.append(dict(V=V, impl=name, step_graph_us=graph, step_busy_us=busy if busy is None else round(busy, 2),
                             rel_err=err, backward_per_kernel_us=per, step_per_kernel_us=step_per))
            assert err < 1e-5, (name, err)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "diffusion_bwd_ab.json"), "w") as f:
            json.dump(dict(date=time.strftime("%Y-%m-%dT%H:%M:%S"), rows=rows), f, indent=1)
    print("\n| V | impl | step graph us | step GPU busy us | rel err | backward per kernel us |\n|---:|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['V']} | {r['impl']} | {r['step_graph_us']} | {r['step_busy_us']} | {r['rel_err']:.1e} | "
              f"{r['backward_per_kernel_us']} |")


if __name__ == "__main__":
    main()
