"""Per-call times of a few small kernels on the CPU (Triton's interpreter).

    PYTHONPATH=src python3 bench/cpu_speed.py [--repeat N] [--only NAME,...] [--explore SECONDS]

Each case is compiled with the heuristic schedule, called once (plan, render, load), then timed
over ``--repeat`` calls; the median per-call wall time and CPU time of this process (the steadier
number on a shared machine) are printed with the result's largest error against the algorithm's
float64 reference. The cases are the ones issue 20 names: softmax on
64x1000 fp32 (the README's exploration example), layer norm, a 64x64 float64 matmul, GELU, a
256x256 row sum, and attention.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("DTRITON_BACKEND", "interpreter")

import torch  # noqa: E402

import dtriton as dt  # noqa: E402
from dtriton.library import attention, layer_norm, matmul, softmax  # noqa: E402


@dt.algorithm
def row_sum(X: dt.Tensor["M", "N"]):
    """Sum of each row."""
    i, j = dt.axes("i j")
    return dt.sum(X[i, j], over=j)[i]


@dt.algorithm
def gelu(X: dt.Tensor["M", "N"]):
    """GELU, tanh approximation (elementwise)."""
    i, j = dt.axes("i j")
    x = X[i, j]
    return (0.5 * x * (1.0 + dt.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))))[i, j]


def cases() -> dict[str, tuple]:
    """name -> (algorithm, inputs) on fresh random data."""
    g = torch.Generator().manual_seed(0)

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, dtype=dtype)
    return {
        "softmax 64x1000 fp32": (softmax, (rnd(64, 1000),)),
        "layer_norm 64x1000 fp32": (layer_norm, (rnd(64, 1000), rnd(1000), rnd(1000))),
        "matmul 64x64 fp64": (matmul, (rnd(64, 64, dtype=torch.float64), rnd(64, 64, dtype=torch.float64))),
        "matmul 64x64 fp32": (matmul, (rnd(64, 64), rnd(64, 64))),
        "gelu 256x256 fp32": (gelu, (rnd(256, 256),)),
        "row_sum 256x256 fp32": (row_sum, (rnd(256, 256),)),
        "attention 1x2x200x32 fp32": (attention, (rnd(1, 2, 200, 32), rnd(1, 2, 200, 32), rnd(1, 2, 200, 32), 0.125)),
    }


def time_case(alg, args, repeat: int) -> tuple[float, float, float, float]:
    """(first call s, median per-call wall s, median per-call CPU s of this process, max abs error
    vs the float64 reference). The CPU time is the steadier number on a shared machine."""
    k = dt.compile(alg)
    t0 = time.perf_counter()
    out = k(*args)
    first = time.perf_counter() - t0
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = k(*args)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    ref = alg.reference(*[a.double() if isinstance(a, torch.Tensor) else a for a in args])
    err = (out.double() - ref.double()).abs().max().item()
    return first, statistics.median(wall), statistics.median(cpu), err


def explore_count(budget: float) -> None:
    """Explore softmax on 64x1000 fp32 for ``budget`` seconds with no trial cap and print how
    many candidates finished, by status (the issue's measure of a usable CPU exploration)."""
    x = cases()["softmax 64x1000 fp32"][1]
    res = dt.explore(softmax, x, budget=budget, max_trials=10**6, store=False, progress=False)
    by: dict[str, int] = {}
    for row in res.table:
        by[row["status"]] = by.get(row["status"], 0) + 1
    print(f"explore softmax 64x1000 for {budget:g}s: {len(res.table)} candidates {by}, stop: {res.stop_reason}, "
          f"elapsed {res.elapsed_s:.1f}s")


def main() -> None:
    """Parse the options and print one line per case."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="timed calls per case (median printed)")
    ap.add_argument("--only", default="", help="comma-separated substrings of case names to run")
    ap.add_argument("--explore", type=float, default=0.0, metavar="SECONDS",
                    help="also explore softmax 64x1000 for this budget and count the candidates measured")
    opts = ap.parse_args()
    only = [s for s in opts.only.split(",") if s]
    print(f"{'case':27s} {'first call':>11s} {'per call':>10s} {'CPU/call':>10s} {'max err':>9s}")
    for name, (alg, args) in cases().items():
        if only and not any(s in name for s in only):
            continue
        first, per, cpu, err = time_case(alg, args, opts.repeat)
        print(f"{name:27s} {first:10.3f}s {per * 1e3:8.1f}ms {cpu * 1e3:8.1f}ms {err:9.1e}", flush=True)
    if opts.explore > 0:
        explore_count(opts.explore)


if __name__ == "__main__":
    main()
