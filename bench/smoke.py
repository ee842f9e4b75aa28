"""GPU smoke run: every algorithm correct on CUDA, plus the first key timings.

python bench/smoke.py SECTION   (SECTION in check, mm, rows, attn, overhead, all)
"""
import sys, time, json, os
import torch, triton, triton.language as tl
from triton.testing import do_bench
sys.path.insert(0, os.path.dirname(__file__))
import dtriton as dt
from algorithms import matmul, softmax, layer_norm, rms_norm, spatial_diffusion, attention, add_one

dev = "cuda"
res = []


def relerr(o, r):
    return ((o.double() - r.double()).norm() / r.double().norm().clamp_min(1e-30)).item()


def check(name, alg, args, sched=None, tol=1e-2, ref=None):
    k = dt.compile(alg, sched)
    t0 = time.time()
    try:
        out = k(*args)
        torch.cuda.synchronize()
    except Exception as e:
        print(f"FAIL {name}: {type(e).__name__}: {str(e)[-1500:]}", flush=True)
        return None
    tc = time.time() - t0
    if ref is None:
        ref = alg.reference(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    e = max(relerr(o, r) for o, r in zip(outs, refs))
    print(f"{'ok  ' if e < tol else 'BAD '} {name}: rel err {e:.2e} first call {tc:.1f}s kernels={len(k._last.launches)} "
          f"sched={k._last.schedule.to_json()}", flush=True)
    return k


def tflops(ms, flops):
    return flops / ms / 1e9


def sec_check():
    for dtp in (torch.float32, torch.float16, torch.bfloat16):
        A, B = torch.randn(300, 170, device=dev, dtype=dtp), torch.randn(170, 200, device=dev, dtype=dtp)
        check(f"matmul {dtp}", matmul, (A, B))
        check(f"matmul splitK {dtp}", matmul, (A, B), dt.Schedule(tile={"i": 64, "j": 64, "k": 32}, grid=("i", "j"), split={"k": 3}))
        X = torch.randn(37, 1000, device=dev, dtype=dtp)
        check(f"softmax online {dtp}", softmax, (X,), dt.Schedule(grid=("i",), tile={"i": 1, "j": 256}, strategy={"j": "online"}))
        w, b = torch.randn(1000, device=dev, dtype=dtp), torch.randn(1000, device=dev, dtype=dtp)
        check(f"layer_norm {dtp}", layer_norm, (X, w, b))
    Q, Kt, Vt = (torch.randn(2, 4, 300, 64, device=dev, dtype=torch.float16) for _ in range(3))
    check("attention unfused", attention, (Q, Kt, Vt, 0.125))
    check("attention fused", attention, (Q, Kt, Vt, 0.125), FUSED)


FUSED = dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": 128, "j": 64}, strategy={"j": "online", "d": "whole", "e": "whole"},
                    stages={"sum0": {"place": "fuse"}}, num_warps=8, num_stages=2)


def sec_mm():
    n = 4096
    A, B = torch.randn(n, n, device=dev, dtype=torch.float16), torch.randn(n, n, device=dev, dtype=torch.float16)
    ref = (A.float() @ B.float())
    for sch in [None, dt.Schedule(tile={"i": 128, "j": 256, "k": 64}, grid=("i", "j"), group={"i": 8}, num_warps=8, num_stages=3),
                dt.Schedule(tile={"i": 128, "j": 128, "k": 64}, grid=("i", "j"), group={"i": 8}, num_warps=4, num_stages=4)]:
        k = check("mm4096", matmul, (A, B), sch, ref=ref)
        if k:
            t = do_bench(lambda: k(A, B), warmup=25, rep=100)
            res.append(("matmul fp16 4096^3 dtriton TFLOP/s " + (json.dumps(dict(sch.tile)) if sch else "default"), t * 1e3, tflops(t, 2 * n**3)))
    t = do_bench(lambda: A @ B, warmup=25, rep=100)
    res.append(("matmul fp16 4096^3 torch TFLOP/s", t * 1e3, tflops(t, 2 * n**3)))


def sec_rows():
    X = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    k = check("softmax4096", softmax, (X,), ref=torch.softmax(X.float(), -1))
    if k:
        t = do_bench(lambda: k(X), warmup=25, rep=100); res.append(("softmax fp16 4096^2 dtriton GB/s", t * 1e3, 2 * X.numel() * 2 / t / 1e6))
    t = do_bench(lambda: torch.softmax(X, -1), warmup=25, rep=100); res.append(("softmax fp16 4096^2 torch GB/s", t * 1e3, 2 * X.numel() * 2 / t / 1e6))
    X = torch.randn(4096, 8192, device=dev, dtype=torch.float16); w = torch.randn(8192, device=dev, dtype=torch.float16); b = torch.randn(8192, device=dev, dtype=torch.float16)
    k = check("ln", layer_norm, (X, w, b), ref=torch.nn.functional.layer_norm(X.float(), (8192,), w.float(), b.float()))
    if k:
        t = do_bench(lambda: k(X, w, b), warmup=25, rep=100); res.append(("layernorm fp16 4096x8192 dtriton GB/s", t * 1e3, 2 * X.numel() * 2 / t / 1e6))
    t = do_bench(lambda: torch.nn.functional.layer_norm(X, (8192,), w, b), warmup=25, rep=100); res.append(("layernorm fp16 torch GB/s", t * 1e3, 2 * X.numel() * 2 / t / 1e6))


def sec_attn():
    Q, Kt, Vt = (torch.randn(4, 32, 4096, 128, device=dev, dtype=torch.float16) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(Q.float(), Kt.float(), Vt.float(), scale=0.088)
    fl = 4 * 4 * 32 * 4096 * 4096 * 128
    for sch in [FUSED, FUSED.replace(num_warps=4, tile={"b": 1, "h": 1, "i": 64, "j": 64})]:
        k = check("attn big", attention, (Q, Kt, Vt, 0.088), sch, ref=ref)
        if k:
            t = do_bench(lambda: k(Q, Kt, Vt, 0.088), warmup=10, rep=50); res.append(("attention fused dtriton TFLOP/s " + json.dumps(dict(sch.tile)), t * 1e3, tflops(t, fl)))
    t = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(Q, Kt, Vt, scale=0.088), warmup=10, rep=50); res.append(("attention sdpa TFLOP/s", t * 1e3, tflops(t, fl)))


@triton.jit
def raw_add_one(X, Y, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(Y + offs, tl.load(X + offs, mask=m) + 1.0, mask=m)


def sec_overhead():
    x = torch.randn(1000, device=dev)
    k = dt.compile(add_one, dt.Schedule(tile={"i": 1024}, grid=("i",)))
    y = k(x); torch.cuda.synchronize()
    y = k(x); torch.cuda.synchronize()
    assert torch.equal(y, x + 1), "fast path wrong"
    print("fast path ok", flush=True)
    def raw():
        y = torch.empty_like(x); raw_add_one[(1,)](x, y, 1000, BLOCK=1024); return y
    for f in (raw, lambda: k(x)):
        for _ in range(100): f()
    torch.cuda.synchronize()
    def per_call(f, n=3000):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(n): f()
        torch.cuda.synchronize(); return (time.perf_counter() - t0) / n * 1e6
    tr = min(per_call(raw) for _ in range(3)); td = min(per_call(lambda: k(x)) for _ in range(3))
    res.append(("host overhead raw triton launch us/call", tr, 1.0)); res.append(("host overhead dtriton us/call (ratio)", td, td / tr))


if __name__ == "__main__":
    for s in sys.argv[1:] or ["check", "mm", "rows", "attn", "overhead"]:
        print(f"== {s}", flush=True)
        globals()["sec_" + s]()
    print(f"\n{'case':80s} {'us':>10s} {'rate':>10s}")
    for r in res:
        print(f"{r[0][:80]:80s} {r[1]:10.1f} {r[2]:10.2f}")
