"""Issue 15: why the derived diffusion backward's times-gradient kernel (``grad_x_times_out1``) takes
longer inside a training step than the hand-written one's (``backward_out1``) at V >= 20000, although
both kernels compile to the same code with the same launch geometry (H200 s13: 2.7-2.9 vs 2.0-2.1 us).

    PYTHONPATH=src python3 bench/ncu_out1.py --impl derived|manual [--V 20000] [--steps 3] [--order]
                                             [--dry-run]

Runs ``--steps`` training steps of the layer (forward, loss ``sum(out * w)``, backward into x and
times) after one warm-up step, with the derived backward (``dt.differentiable``, the layer's "auto"
backend) or the hand-written one. Meant to run under Nsight Compute, filtered on the out1 kernels:

    ncu --clock-control none --cache-control all -k regex:out1 python3 bench/ncu_out1.py --impl derived

``--order``: instead, print each step kernel in launch order with its device time (torch.profiler),
and for each out1 kernel the kernels that ran before it in the step, so a reader can see which of
its inputs were written shortly before (and may still sit in L2) in each implementation.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import diffusion as bench  # noqa: E402  (inputs, _step)
import run as suite  # noqa: E402

import dtriton as dt  # noqa: E402
from dtriton.examples.diffusionnet import layer as L  # noqa: E402
from dtriton.integrations import differentiable  # noqa: E402
from dtriton.library import spatial_diffusion  # noqa: E402


def step_fn(impl: str):
    """The layer's forward for ``impl`` ("derived" or "manual"), as a function of its 5 inputs."""
    if impl == "manual":
        kernels = L.DiffusionKernels(None)
        return lambda *xs: L.spatial_diffusion_fn(*xs, backend="dtriton-manual", kernels=kernels)
    d = differentiable(dt.compile(spatial_diffusion), save=[L.spectral_stage()])
    return lambda *xs: d(*xs)[0]


def launch_order(f, args, w) -> list[tuple[str, float]]:
    """(kernel name, device us) of one step, in start order (CUDA kernels only)."""
    from torch.profiler import ProfilerActivity, profile   # noqa: PLC0415
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        bench._step(f, args, w)
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type.name == "CUDA" and "Memcpy" not in e.name]
    ev.sort(key=lambda e: e.time_range.start)
    return [(e.name.replace("spatial_diffusion_", "")[:48], e.time_range.elapsed_us()) for e in ev]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", choices=("derived", "manual"), required=True)
    ap.add_argument("--V", type=int, default=20000)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--order", action="store_true", help="print the step's kernels in launch order")
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes")
    a = ap.parse_args(argv)
    dev, K, C, V = "cuda", 128, 128, a.V
    if a.dry_run:
        suite.DRY, dev, K, C, V = True, "cpu", 16, 16, 37
    args = bench.inputs(V, K, C, dev)
    w = torch.randn(args[0].shape, generator=torch.Generator().manual_seed(1)).to(dev)
    f = step_fn(a.impl)
    gref = bench._step(L.torch_spatial_diffusion, tuple(x.double() for x in args), w.double())
    g = bench._step(f, args, w)                       # warm-up: compiles every kernel
    err = max(bench.rel(p, r) for p, r in zip(g, gref))
    print(f"{a.impl} V={V}: gradients vs float64 rel err {err:.1e}", flush=True)
    assert err < 1e-5, err
    if a.order and not a.dry_run:
        for _ in range(3):
            bench._step(f, args, w)
        order = launch_order(f, args, w)
        for i, (name, us) in enumerate(order):
            print(f"  {i:2d} {name:48s} {us:7.2f} us", flush=True)
        return
    for _ in range(a.steps):
        bench._step(f, args, w)
    if dev == "cuda":
        torch.cuda.synchronize()
    print(f"{a.impl}: {a.steps} steps done", flush=True)


if __name__ == "__main__":
    main()
