"""Where one forward + backward step of bench/grad_bench.py spends its time: the step of each
implementation under ``torch.profiler``, the kernels sorted by device time (dtriton's kernels,
the loss's and autograd's own, the dtype conversions of the gradients).

    PYTHONPATH=src python3 bench/grad_profile.py --only layer_norm softmax [--impl dtriton eager] [--dry-run]

``--dry-run``: the case's tiny shapes on the CPU interpreter, profiling CPU time (checks the script).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import grad_bench as gb  # noqa: E402


def profile_case(name: str, impls, steps: int = 5, rows: int = 15) -> None:
    """Print the top ``rows`` kernels by device time over ``steps`` steps of case ``name``."""
    label, alg, eager, make, grad_idx = gb._cases(gb.DEV == "cpu")[name]
    fns = {"dtriton": dt.compile_autograd(alg), "eager": eager}
    base = make()
    for impl in impls:
        f = fns[impl]
        ins = [t.detach().clone().requires_grad_(k in grad_idx) if gb._floating(t) else t for k, t in enumerate(base)]
        outs = f(*ins)
        outs = outs if isinstance(outs, tuple) else (outs,)
        weights = [torch.randn(o.shape, device=gb.DEV) for o in outs]

        def step():
            for k in grad_idx:
                ins[k].grad = None
            o = f(*ins)
            oo = o if isinstance(o, tuple) else (o,)
            sum((x.float() * w).sum() for x, w in zip(oo, weights)).backward()
        step()   # compile outside the profile
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if gb.DEV == "cuda" else [])
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(steps):
                step()
            if gb.DEV == "cuda":
                torch.cuda.synchronize()
        key = "self_cuda_time_total" if gb.DEV == "cuda" else "self_cpu_time_total"
        counts = f.launch_counts() if hasattr(f, "launch_counts") else ""
        print(f"== {label} | {impl} {counts} | {steps} steps", flush=True)
        print(prof.key_averages().table(sort_by=key, row_limit=rows), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=["layer_norm", "softmax"], help="grad_bench case names")
    ap.add_argument("--impl", nargs="*", default=["dtriton", "eager"], choices=["dtriton", "eager"])
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU interpreter")
    a = ap.parse_args(argv)
    if a.dry_run:
        gb.DEV = "cpu"
    torch.manual_seed(0)
    for name in a.only:
        profile_case(name, a.impl, steps=1 if a.dry_run else 5)


if __name__ == "__main__":
    main()
