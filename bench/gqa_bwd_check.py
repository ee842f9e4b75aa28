"""Issue 15: the GQA backward at gpu_check's shape (B3 H6 G2 S256 D128 fp16, 6 query heads over 2 K/V heads,
rep 3) through ``dt.compile_autograd`` with default schedules: no ScheduleWarning (its defaults fit shared
memory before their first launch: :mod:`dtriton.plan.smem`), gradients against float64 autograd of the
reference, and the fwd+bwd step time (mean of 20 synchronised steps).

    PYTHONPATH=src python3 bench/gqa_bwd_check.py      (on the CPU: tiny shapes through the interpreter)

Exits 1 on a ScheduleWarning or a gradient off by more than 2e-2 (relative norm).
"""
import sys, warnings, time, torch, dtriton as dt
from dtriton.library import gqa_attention
dev = "cuda" if torch.cuda.is_available() else "cpu"
B, H, G, S, D = (3, 6, 2, 256, 128) if dev == "cuda" else (1, 3, 1, 32, 16)
rep = -(-H // G)
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(B, n, S, D, generator=g).half().to(dev).requires_grad_() for n in (H, G, G))
w = torch.randn(B, H, S, D, generator=g).half().to(dev)
kern = dt.compile_autograd(gqa_attention)
with warnings.catch_warnings(record=True) as got:
    warnings.simplefilter("always")
    out = kern(q, k, v, D ** -0.5, rep)
    (out.float() * w.float()).sum().backward()
bad = [str(x.message)[:300] for x in got if issubclass(x.category, dt.ScheduleWarning)]
qr, kr, vr = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
ref = gqa_attention.reference(qr, kr, vr, D ** -0.5, rep)
(ref * w.double().cpu()).sum().backward()
err = max(((a.grad.double().cpu() - b.grad).norm() / b.grad.norm()).item() for a, b in ((q, qr), (k, kr), (v, vr)))
def step():
    for t in (q, k, v): t.grad = None
    (kern(q, k, v, D ** -0.5, rep).float() * w.float()).sum().backward()
for _ in range(3): step()
if dev == "cuda": torch.cuda.synchronize()
t0 = time.perf_counter(); n = 20 if dev == "cuda" else 1
for _ in range(n): step()
if dev == "cuda": torch.cuda.synchronize()
print(f"GQA B{B} H{H} G{G} S{S} D{D} fwd+bwd {1e3*(time.perf_counter()-t0)/n:.3f} ms  grad rel err {err:.1e}  "
      f"launches {kern.launch_counts()}  ScheduleWarnings {len(bad)}")
for m in bad: print("  WARN", m)
sys.exit(1 if bad or err > 2e-2 else 0)
