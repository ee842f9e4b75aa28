"""Per-kernel GPU times (torch.profiler) of dtriton's kernels for one call: where does the time go?

    PYTHONPATH=src python3 bench/profile_kernels.py
Cases: spatial diffusion fp32 (V=100000, K=128, C=128) forward at the heuristic schedule, at
precision tf32x3, and layer norm fp16 4096x8192 forward+backward.
"""
import math
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton.library import layer_norm, spatial_diffusion  # noqa: E402


def prof(name, fn, n=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    print(f"== {name} (per call, µs)")
    for e in sorted(p.key_averages(), key=lambda e: -e.device_time_total)[:8]:
        print(f"   {e.device_time_total / n:9.1f}  x{e.count // n:<3d} {e.key[:90]}")


V, K, C = 100000, 128, 128
args = (torch.randn(V, C, device="cuda"), torch.randn(V, K, device="cuda") / math.sqrt(V),
        torch.rand(V, device="cuda") + 0.5, torch.rand(K, device="cuda") * 10, torch.rand(C, device="cuda"))
k = dt.compile(spatial_diffusion)
prof("diffusion heuristic " + k.schedule_for(*args).to_json(), lambda: k(*args))
k3 = dt.compile(spatial_diffusion, dt.Schedule(precision="tf32x3"))
prof("diffusion tf32x3", lambda: k3(*args))
print("tf32x3 schedule", k3.schedule_for(*args).to_json())


def eager(x, basis, mass, evals, times):
    spectral = torch.exp(-evals[:, None] * times[None, :]) * (basis.t() @ (x * mass[:, None]))
    return basis @ spectral, spectral
prof("diffusion eager", lambda: eager(*args))
X = torch.randn(4096, 8192, device="cuda", dtype=torch.float16, requires_grad=True)
w = torch.randn(8192, device="cuda", dtype=torch.float16, requires_grad=True)
b = torch.randn(8192, device="cuda", dtype=torch.float16, requires_grad=True)
kl = dt.compile(layer_norm)
gy = torch.randn(4096, 8192, device="cuda", dtype=torch.float16)


def ln_step():
    X.grad = w.grad = b.grad = None
    kl(X, w, b).backward(gy)
prof("layer_norm fwd+bwd", ln_step)
