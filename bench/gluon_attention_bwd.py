"""Probe: does a hand-written Gluon (Triton 3.6) FlashAttention backward reach cuDNN's rate on the H200?

    PYTHONPATH=src python3 bench/gluon_attention_bwd.py [--cases d128,c128,d64,c64] [--only NAME,...]
                                                        [--out DIR] [--dry-run]

The Triton FA2 backward (bench/probe_attn_bwd.py) and dtriton's derived one take 7.27-7.36 ms for fp16 B4 H32
S4096 D128 against cuDNN's 5.47 (causal 4.2 against 2.80). The kernels here (bench/gluon_attention_bwd_kernels.py)
are Gluon, explicitly pipelined with TMA, mbarriers and async wgmma: ``delta = rowsum(dO O)`` (Triton), a
dK/dV kernel per key tile looping over the query tiles, and dQ by a second kernel (``2k``) or from the dK/dV
kernel through dS in shared memory, added into an fp32 buffer by per-thread atomics (``atomic``) or by one TMA
bulk reduce-add a tile (``tma-red``), then cast.

Cases: ``d128`` B4 H32 S4096 D128, ``c128`` the same causal, ``d64`` B4 H16 S2048 D64, ``c64`` its causal.
On the GPU each variant is checked first against fp32 autograd of plain softmax attention (dQ, dK, dV: max
abs error and max abs error / max |ref|; over 2e-2 relative marks the row WRONG, untimed, and the run goes on),
then timed by triton's do_bench (warmup 10, rep 50 ms, as probe_attn_bwd.py) beside SDPA's backward (its
default backend) and, non-causal, probe_attn_bwd.py's best Triton variant. A table is printed last and
``gluon_attention_bwd.json`` / ``.md`` are written under ``--out``.
``--dry-run`` (no GPU): compiles every variant's Gluon kernels for sm_90 (Triton's toolchain, ptxas included)
and prints registers, spill stack and shared memory per kernel; exits 1 if one fails to compile.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gluon_attention_bwd_kernels import backward, compile_sm90, kv_cfg, q_cfg  # noqa: E402

CASES = {"d128": (4, 32, 4096, 128, False), "c128": (4, 32, 4096, 128, True),
         "d64": (4, 16, 2048, 64, False), "c64": (4, 16, 2048, 64, True)}

#: (name, head dims, variant): ``kv`` the dK/dV kernel (BN keys, BM-query steps, Q/dO ring stages, warps, dQ mode
#: 0 separate kernel (``2k``) / 1 atomics / 2 TMA reduce-add, the overlapped schedule unless ``serial``, ``qs``: the
#: dQ GEMM in that many column chunks, ``lse-tma``: the steps' LSE / delta by TMA into the ring, ``key-major``: the
#: grid key tile by key tile across heads (causal: heaviest first)), ``q`` the dQ kernel (BM queries, BN-key steps,
#: stages, warps). 8 warps each.
VARIANTS = [
    # the simple schedule (each step's GEMMs finished before the next step) as a baseline
    ("2k serial kv128x64 s2 / q128x64 s2", (64, 128),
     dict(kv=kv_cfg(128, 64, 2, 8, 0, overlap=False), q=q_cfg(128, 64, 2, 8))),
    ("2k kv128x64 s3 / q128x64 s3", (64, 128), dict(kv=kv_cfg(128, 64, 3, 8, 0), q=q_cfg(128, 64, 3, 8))),
    ("2k kv128x128 s2 / q128x128 s2", (64,), dict(kv=kv_cfg(128, 128, 2, 8, 0), q=q_cfg(128, 128, 2, 8))),
    ("atomic kv128x64 s3 qs2", (64, 128), dict(kv=kv_cfg(128, 64, 3, 8, 1, qsplit=2))),
    ("tma-red serial kv128x64 s2", (64, 128), dict(kv=kv_cfg(128, 64, 2, 8, 2, overlap=False))),
    ("tma-red kv128x64 s2 qs2", (64, 128), dict(kv=kv_cfg(128, 64, 2, 8, 2, qsplit=2))),
    ("tma-red kv128x64 s3 qs1", (64, 128), dict(kv=kv_cfg(128, 64, 3, 8, 2, qsplit=1))),
    ("tma-red kv128x64 s3 qs2", (64, 128), dict(kv=kv_cfg(128, 64, 3, 8, 2, qsplit=2))),
    ("tma-red kv128x64 s3 qs2 lse-tma", (64, 128), dict(kv=kv_cfg(128, 64, 3, 8, 2, qsplit=2, lse_tma=True))),
    ("tma-red kv128x64 s3 qs2 key-major", (64, 128), dict(kv=kv_cfg(128, 64, 3, 8, 2, qsplit=2, key_major=True))),
    ("tma-red kv128x128 s2 qs2", (64,), dict(kv=kv_cfg(128, 128, 2, 8, 2, qsplit=2))),
    ("tma-red kv128x128 s2 qs1 lse-tma", (64,), dict(kv=kv_cfg(128, 128, 2, 8, 2, lse_tma=True))),
]
TRITON_BEST = "kv128x64 w8 s3 tma-reduce dQ"   # probe_attn_bwd.py's best D128 variant (s9: 7271.9 us)
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def kernels_of(variant) -> list[tuple[str, dict]]:
    """The Gluon kernels a variant launches: [("dkdv", cfg), ("dq", cfg)?]."""
    return [("dkdv", variant["kv"])] + ([("dq", variant["q"])] if variant["kv"]["DQ"] == 0 else [])


# ---------------------------------------------------------------- dry run: sm_90 compile, no GPU

def resources(ck) -> dict:
    """Registers and spill stack per thread (cuobjdump of the cubin), shared memory, warps, wgmma count."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(ck.asm["cubin"])
    try:
        txt = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", txt)
    return dict(regs=int(m.group(1)) if m else None, stack=int(m.group(2)) if m else None, smem=ck.metadata.shared,
                warps=ck.metadata.num_warps, wgmma=len(re.findall(r"wgmma\.mma_async", ck.asm["ptx"])))


def dry_run(cases, only) -> list[dict]:
    rows = []
    for c in cases:
        B, H, S, D, causal = CASES[c]
        print(f"== {c}: sm_90 compile (D{D}, {'causal' if causal else 'non-causal'})", flush=True)
        for name, dims, var in VARIANTS:
            if D not in dims or (only and name not in only):
                continue
            for kern, cfg in kernels_of(var):
                row = dict(case=c, variant=name, kernel=kern, cfg=cfg)
                t0 = time.time()
                try:
                    row |= resources(compile_sm90(kern, cfg, D, causal))
                    row["compile_s"] = round(time.time() - t0, 1)
                    print(f"  {name:38s} {kern:5s} regs {row['regs']:>3} stack {row['stack']:>4} "
                          f"smem {row['smem']:>6} B warps {row['warps']} wgmma {row['wgmma']:>2} "
                          f"({row['compile_s']} s)", flush=True)
                except Exception as e:   # noqa: BLE001 - a kernel that does not compile is a result
                    row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:1500]}"
                    print(f"  {name:38s} {kern:5s} FAILED: {row['error'][:800]}", flush=True)
                rows.append(row)
    print("\n| case | variant | kernel | regs | spill stack B | smem B |\n|---|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['variant']} | {r['kernel']} | {r.get('regs', '-')} | {r.get('stack', '-')} | "
              f"{r.get('smem', '-')} |" + (" FAILED" if "error" in r else ""))
    return rows


# ---------------------------------------------------------------- GPU: check and time

def reference(q, k, v, do, causal: bool):
    """(O fp16, LSE fp32 natural log, (dQ, dK, dV) fp32) by fp32 autograd of plain softmax attention, one batch
    element at a time (scores materialised; TF32 off)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    B, H, S, D = q.shape
    sm = D ** -0.5
    mask = torch.ones(S, S, device=q.device, dtype=torch.bool).tril() if causal else None
    outs, lses, grads = [], [], []
    for b in range(B):
        qf, kf, vf = (t[b].float().requires_grad_() for t in (q, k, v))
        s = qf @ kf.transpose(-1, -2) * sm
        if causal:
            s = s.masked_fill(~mask, -float("inf"))
        o = torch.softmax(s, dim=-1) @ vf
        grads.append(torch.autograd.grad(o, (qf, kf, vf), do[b].float()))
        outs.append(o.detach().to(q.dtype))
        lses.append(torch.logsumexp(s.detach(), dim=-1))
        del s, o
    return torch.stack(outs), torch.stack(lses), tuple(torch.stack([g[i] for g in grads]) for i in range(3))


def wait_or_die(what: str, seconds: float = 30.0) -> None:
    """Synchronise, but exit the process (a hung kernel cannot be recovered) after ``seconds``."""
    ev = torch.cuda.Event()
    ev.record()
    t0 = time.time()
    while not ev.query():
        if time.time() - t0 > seconds:
            print(f"  {what}: HUNG (no completion after {seconds:.0f} s); exiting", flush=True)
            os._exit(3)
        time.sleep(0.01)


def time_us(fn) -> float:
    """Mean us of ``fn`` by triton's do_bench (warmup 10, rep 50 ms), as probe_attn_bwd.py times."""
    from triton.testing import do_bench
    return 1e3 * do_bench(fn, warmup=10, rep=50)


def errors(got, ref) -> dict:
    """Max abs error and max abs error / max |ref| of dQ, dK, dV; ``rel_err`` the worst relative one."""
    out = {}
    for n, a, b in zip(("dq", "dk", "dv"), got, ref):
        e = (a.float() - b).abs().max().item()
        out[f"abs_{n}"] = e
        out[f"rel_{n}"] = e / max(b.abs().max().item(), 1e-30)
    out["rel_err"] = max(out["rel_dq"], out["rel_dk"], out["rel_dv"])
    return out


def run_case(c, only, rows, save) -> None:
    B, H, S, D, causal = CASES[c]
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v, do = (torch.randn(B, H, S, D, generator=g).to("cuda", torch.float16) for _ in range(4))
    o, lse, ref = reference(q, k, v, do, causal)
    flops = 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    print(f"== {c}: attention backward fp16 B{B} H{H} S{S} D{D} {'causal' if causal else 'non-causal'} "
          f"({flops / 1e12:.2f} TFLOP at 2.5x the forward's)", flush=True)
    base = dict(case=c, B=B, H=H, S=S, D=D, causal=causal)

    def emit(row):
        if row.get("us"):
            row["tflops"] = flops / row["us"] / 1e6
        rows.append(row)
        save()
        err = (f"rel {row['rel_err']:.1e} (dq {row['abs_dq']:.1e} dk {row['abs_dk']:.1e} dv {row['abs_dv']:.1e})"
               if "rel_err" in row else "")
        us = f"{row['us']:9.1f} us {row['tflops']:6.1f} TFLOP/s" if row.get("us") else " " * 25
        print(f"  {row['impl']:40s} {us} {err} {row.get('note', '')} {row.get('error', '')[:300]}", flush=True)

    qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
    sd = lambda: torch.autograd.grad(out, (qs, ks, vs), do, retain_graph=True)   # noqa: E731
    row = dict(base, impl="SDPA backward", note=sdpa_backend(sd))
    row |= errors(sd(), ref)
    row["us"] = time_us(sd)
    emit(row)
    del out
    if not causal:
        row = dict(base, impl=f"triton FA2 ({TRITON_BEST})")
        try:
            import probe_attn_bwd as P
            cfg = P.VARIANTS[TRITON_BEST]
            lse2 = (lse * P.LOG2E).contiguous()
            fn = lambda: P.backward(q, k, v, o, do, lse2, cfg)   # noqa: E731
            row |= errors(fn(), ref)
            row["us"] = time_us(fn) if row["rel_err"] < 2e-2 else None
        except Exception as e:   # noqa: BLE001 - a failing comparison is a result
            row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        emit(row)
    for name, dims, var in VARIANTS:
        if D not in dims or (only and name not in only):
            continue
        row = dict(base, impl=name, variant=var)
        try:
            got = backward(q, k, v, o, do, lse, var, causal)
            wait_or_die(name)
            row |= errors(got, ref)
            if row["rel_err"] < 2e-2 and all(torch.isfinite(t).all() for t in got):
                row["us"] = time_us(lambda var=var: backward(q, k, v, o, do, lse, var, causal))
            else:
                row["note"] = "WRONG: not timed"
        except Exception as e:   # noqa: BLE001 - a failing variant is a result
            row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        emit(row)


def sdpa_backend(fn) -> str:
    """The SDPA backward kernel ``fn`` runs (from the profiled CUDA kernel names)."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = [e.key for e in prof.key_averages()]
    except Exception as e:   # noqa: BLE001 - the profiler is a side show
        return f"backend unknown ({type(e).__name__})"
    for tag in ("cudnn", "flash", "efficient", "fmha"):
        if any(tag in n.lower() for n in names):
            return tag
    return "unknown: " + ", ".join(n[:40] for n in names[:3])


def table(rows) -> str:
    sdpa = {r["case"]: r["us"] for r in rows if r["impl"] == "SDPA backward" and r.get("us")}
    lines = ["| case | impl | us | TFLOP/s | SDPA / this | rel err |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        us = r.get("us")
        ratio = f"{sdpa[r['case']] / us:.3f}" if us and r["case"] in sdpa else "-"
        lines.append(f"| {r['case']} | {r['impl']} | {us:.1f} | {r['tflops']:.0f} | {ratio} | "
                     f"{r.get('rel_err', float('nan')):.1e} |" if us else
                     f"| {r['case']} | {r['impl']} | - | - | - | {r.get('rel_err', float('nan')):.1e} "
                     f"{r.get('note', '')} {r.get('error', '')[:120]} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="d128,c128,d64", help=f"comma-separated, of {sorted(CASES)}")
    ap.add_argument("--only", default="", help="variant names to keep, comma-separated")
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true", help="compile every variant for sm_90 only (no GPU)")
    a = ap.parse_args(argv)
    cases = [c for c in a.cases.split(",") if c]
    if any(c not in CASES for c in cases):
        ap.error(f"--cases: unknown {[c for c in cases if c not in CASES]}; cases: {sorted(CASES)}")
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    if only - {n for n, _, _ in VARIANTS}:
        ap.error(f"--only: no variant named {sorted(only - {n for n, _, _ in VARIANTS})}")
    info = dict(triton=triton.__version__, torch=torch.__version__)
    path = os.path.join(a.out, "gluon_attention_bwd") if a.out else ""
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    if a.dry_run:
        rows = dry_run(cases, only)
        if path:
            with open(path + ".json", "w") as f:
                json.dump(dict(info, mode="dry-run", rows=rows), f, indent=1)
        return 1 if any("error" in r for r in rows) else 0
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: use --dry-run")
    info["device"] = torch.cuda.get_device_name()
    print(f"{info['device']}: torch {torch.__version__}, triton {triton.__version__}", flush=True)
    rows: list[dict] = []

    def save():
        if path:
            with open(path + ".json", "w") as f:
                json.dump(dict(info, mode="gpu", rows=rows), f, indent=1, default=str)

    for c in cases:
        run_case(c, only, rows, save)
        torch.cuda.empty_cache()
    md = table(rows)
    print("\n" + md)
    if path:
        with open(path + ".md", "w") as f:
            f.write(f"{info['device']}, torch {info['torch']}, triton {info['triton']}\n\n{md}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
