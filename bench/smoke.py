"""GPU smoke run: every algorithm correct on CUDA, plus the first key timings.

python bench/smoke.py  (on the H200; prints a table last)
"""
import sys, time, json, os
import torch, triton, triton.language as tl
from triton.testing import do_bench
sys.path.insert(0, os.path.dirname(__file__))
import dtriton as dt
from algorithms import matmul, softmax, layer_norm, rms_norm, spatial_diffusion, attention, add_one

dev = "cuda"
rows = []
def relerr(o, r):
    return ((o.double() - r.double()).norm() / r.double().norm().clamp_min(1e-30)).item()

def check(name, alg, args, sched=None, tol=1e-2):
    k = dt.compile(alg, sched)
    try:
        out = k(*args)
    except Exception as e:
        print(f"FAIL {name}: {type(e).__name__}: {str(e)[:300]}"); return None
    ref = alg.reference(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    e = max(relerr(o, r) for o, r in zip(outs, refs))
    print(f"{'ok  ' if e < tol else 'BAD '} {name}: rel err {e:.2e}  kernels={len(k._last.launches)}  sched={k._last.schedule.to_json()}", flush=True)
    return k

torch.manual_seed(0)
# correctness sweep
for dtp in (torch.float32, torch.float16, torch.bfloat16):
    A, B = torch.randn(300, 170, device=dev, dtype=dtp), torch.randn(170, 200, device=dev, dtype=dtp)
    check(f"matmul {dtp}", matmul, (A, B))
    check(f"matmul tf32 {dtp}", matmul, (A, B), dt.Schedule(precision="tf32"))
    check(f"matmul splitK {dtp}", matmul, (A, B), dt.Schedule(tile={"i": 64, "j": 64, "k": 32}, grid=("i", "j"), split={"k": 3}))
    X = torch.randn(37, 1000, device=dev, dtype=dtp)
    check(f"softmax {dtp}", softmax, (X,))
    check(f"softmax online {dtp}", softmax, (X,), dt.Schedule(grid=("i",), tile={"i": 1, "j": 256}, strategy={"j": "online"}, num_warps=4))
    check(f"softmax loop {dtp}", softmax, (X,), dt.Schedule(grid=("i",), tile={"i": 2, "j": 128}, strategy={"j": "loop"}))
    w, b = torch.randn(1000, device=dev, dtype=dtp), torch.randn(1000, device=dev, dtype=dtp)
    check(f"layer_norm {dtp}", layer_norm, (X, w, b))
    check(f"rms_norm {dtp}", rms_norm, (X, w))
V, K, C = 7000, 128, 128
args = (torch.randn(V, C, device=dev), torch.randn(V, K, device=dev) / 30, torch.rand(V, device=dev), torch.rand(K, device=dev), torch.rand(C, device=dev))
check("diffusion default", spatial_diffusion, args, tol=1e-4)
check("diffusion split8", spatial_diffusion, args, dt.Schedule(split={"v": 8}), tol=1e-4)
Q, Kt, Vt = (torch.randn(2, 4, 300, 64, device=dev, dtype=torch.float16) for _ in range(3))
check("attention unfused", attention, (Q, Kt, Vt, 0.125))
fused = dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": 128, "j": 64}, strategy={"j": "online", "d": "whole", "e": "whole"},
                    stages={"sum0": {"place": "fuse"}}, num_warps=8, num_stages=2)
check("attention fused", attention, (Q, Kt, Vt, 0.125), fused)

# timings
def tflops(ms, flops): return flops / ms / 1e9
res = []
for dtp in (torch.float16,):
    n = 4096
    A, B = torch.randn(n, n, device=dev, dtype=dtp), torch.randn(n, n, device=dev, dtype=dtp)
    for sch in [None, dt.Schedule(tile={"i": 128, "j": 256, "k": 64}, grid=("i", "j"), group={"i": 8}, num_warps=8, num_stages=3),
                dt.Schedule(tile={"i": 128, "j": 128, "k": 64}, grid=("i", "j"), group={"i": 8}, num_warps=8, num_stages=4),
                dt.Schedule(tile={"i": 128, "j": 128, "k": 64}, grid=("i", "j"), group={"i": 8}, num_warps=4, num_stages=4)]:
        k = check("mm4096", matmul, (A, B), sch)
        t = do_bench(lambda: k(A, B), warmup=50, rep=300)
        res.append(("matmul fp16 4096^3 dtriton " + (sch.to_json() if sch else "default"), t * 1e3, tflops(t, 2 * n**3)))
    t = do_bench(lambda: A @ B, warmup=50, rep=300)
    res.append(("matmul fp16 4096^3 torch", t * 1e3, tflops(t, 2 * n**3)))
X = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
k = check("softmax4096", softmax, (X,))
t = do_bench(lambda: k(X), warmup=50, rep=300); res.append(("softmax fp16 4096^2 dtriton GB/s", t * 1e3, 2 * X.numel() * 2 / t / 1e6))
t = do_bench(lambda: torch.softmax(X, -1), warmup=50, rep=300); res.append(("softmax fp16 4096^2 torch GB/s", t * 1e3, 2 * X.numel() * 2 / t / 1e6))
X = torch.randn(4096, 8192, device=dev, dtype=torch.float16); w = torch.randn(8192, device=dev, dtype=torch.float16); b = torch.randn(8192, device=dev, dtype=torch.float16)
k = check("ln", layer_norm, (X, w, b))
t = do_bench(lambda: k(X, w, b), warmup=50, rep=300); res.append(("layernorm fp16 4096x8192 dtriton GB/s", t * 1e3, 2 * X.numel() * 2 / t / 1e6))
t = do_bench(lambda: torch.nn.functional.layer_norm(X, (8192,), w, b), warmup=50, rep=300); res.append(("layernorm fp16 torch GB/s", t * 1e3, 2 * X.numel() * 2 / t / 1e6))
Q, Kt, Vt = (torch.randn(4, 32, 4096, 128, device=dev, dtype=torch.float16) for _ in range(3))
fl = 4 * 4 * 32 * 4096 * 4096 * 128
for sch in [fused, fused.replace(tile={"b": 1, "h": 1, "i": 128, "j": 128}), fused.replace(num_warps=4, tile={"b": 1, "h": 1, "i": 64, "j": 64})]:
    k = check("attn big", attention, (Q, Kt, Vt, 0.088), sch)
    if k:
        t = do_bench(lambda: k(Q, Kt, Vt, 0.088), warmup=20, rep=200); res.append(("attention fused dtriton TFLOP/s " + json.dumps(dict(sch.tile)), t * 1e3, tflops(t, fl)))
t = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(Q, Kt, Vt, scale=0.088), warmup=20, rep=200); res.append(("attention sdpa TFLOP/s", t * 1e3, tflops(t, fl)))

# host overhead
@triton.jit
def raw_add_one(X, Y, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(Y + offs, tl.load(X + offs, mask=m) + 1.0, mask=m)
x = torch.randn(1000, device=dev)
k = dt.compile(add_one, dt.Schedule(tile={"i": 1024}, grid=("i",)))
y = k(x); assert torch.equal(y, x + 1)
def raw():
    y = torch.empty_like(x); raw_add_one[(1,)](x, y, 1000, BLOCK=1024); return y
for f in (raw, lambda: k(x)):
    for _ in range(100): f()
torch.cuda.synchronize()
def per_call(f, n=5000):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(n): f()
    torch.cuda.synchronize(); return (time.perf_counter() - t0) / n * 1e6
tr = min(per_call(raw) for _ in range(3)); td = min(per_call(lambda: k(x)) for _ in range(3))
res.append(("host overhead raw triton launch us/call", tr, 1.0)); res.append(("host overhead dtriton us/call (ratio)", td, td / tr))
print(f"\n{'case':80s} {'us':>10s} {'rate':>10s}")
for r in res:
    print(f"{r[0][:80]:80s} {r[1]:10.1f} {r[2]:10.2f}")
