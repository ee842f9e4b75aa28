"""Probe: can a hand-written Gluon attention forward in Triton 3.6 reach cuDNN's rate on the H200 (issue 18)?

    PYTHONPATH=src python3 bench/probe_gluon_attention.py [--cases n4096x128,n1024x64,c4096x128,n4096x128g8]
                                                          [--only NAME,...] [--out DIR] [--compile-only]

The kernels and their configurations (``VARIANTS``) are in bench/gluon_attention.py (self-contained:
Triton 3.6's Gluon and torch only). A case is ``<n|c><S>x<D>[g<G>]`` at B4 H32 (``--batch``, ``--heads``):
``n`` non-causal, ``c`` causal; ``g<G>``: grouped-query attention, K and V of G heads (G dividing H),
query head h reading K/V head h // (H / G), against SDPA ``enable_gqa=True``.

On the GPU each variant is checked against torch SDPA in fp32 math (max abs error of O and of LSE
against ``logsumexp``), then timed by ``triton.testing.do_bench`` beside torch SDPA (default backend;
the backend it picks is recorded). Prints a table (variant, us, TFLOP/s, vs SDPA, err) and writes
``probe_gluon_attention.json`` under ``--out``. ``--compile-only`` (no GPU needed) compiles every
variant of every case for sm_90 and prints registers / spill stack per thread, shared memory and the
partition register split (setmaxnreg) per kernel.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gluon_attention import VARIANTS, compile_sm90, gluon_attention  # noqa: E402


# ---------------------------------------------------------------- compile only (no GPU)

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def resources(ck) -> dict:
    """Registers and spill stack per thread (cuobjdump; a warp-specialised kernel's figure is its launch
    cap, its partitions re-size by setmaxnreg), shared memory, warps, the wgmma instructions, and for a
    warp-specialised kernel the registers its worker partitions ask for and the setmaxnreg values."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(ck.asm["cubin"])
    try:
        txt = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", txt)
    ptx = ck.asm["ptx"]
    return dict(regs=int(m.group(1)) if m else None, stack=int(m.group(2)) if m else None, smem=ck.metadata.shared,
                warps=ck.metadata.num_warps,
                setmaxnreg=sorted({int(v) for v in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)}),
                worker_regs=[int(v) for v in re.findall(r"requestedRegisters = array<i32: ([\d, ]+)>", ck.asm["ttgir"])
                             [0].split(",")] if "requestedRegisters" in ck.asm["ttgir"] else [],
                wgmma=len(re.findall(r"wgmma\.mma_async", ptx)))


def compile_only(cases, only, out) -> list[dict]:
    rows = []
    for spec in cases:
        kind, S, D = parse_case(spec)
        print(f"== {spec}: sm_90 compile ({'causal' if kind == 'c' else 'non-causal'}, D{D})", flush=True)
        for name, dims, cfg in VARIANTS:
            if D not in dims or (only and name not in only):
                continue
            row = dict(case=spec, variant=name, cfg=cfg)
            try:
                ck = compile_sm90(cfg, D, kind == "c")
                row |= resources(ck)
                if out:
                    base = os.path.join(out, re.sub(r"\W+", "_", f"{spec}_{name}"))
                    for ext in ("ttgir", "ptx"):
                        with open(f"{base}.{ext}", "w") as f:
                            f.write(ck.asm[ext])
                ws = (f" workers ask {row['worker_regs']} (setmaxnreg values {row['setmaxnreg']})"
                      if row["worker_regs"] else "")
                print(f"  {name:40s} regs {row['regs']:>3} stack {row['stack']:>3} smem {row['smem']:>6} B "
                      f"warps {row['warps']:>2} wgmma {row['wgmma']:>3}"
                      f"{ws}", flush=True)
            except Exception as e:  # noqa: BLE001 - a kernel that does not compile is a result
                row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:1500]}"
                print(f"  {name:40s} FAILED: {row['error'][:600]}", flush=True)
            rows.append(row)
    return rows


# ---------------------------------------------------------------- GPU: check and time

def parse_case(spec: str) -> tuple[str, int, int]:
    """``n4096x128`` -> ("n", 4096, 128): kind n (non-causal) or c (causal), S, D (see :func:`kv_heads`)."""
    m = re.fullmatch(r"([nc])(\d+)x(\d+)(?:g\d+)?", spec)
    if not m:
        raise ValueError(f"--cases: {spec!r} is not <n|c><S>x<D>[g<G>] (e.g. n4096x128, n4096x128g8)")
    return m.group(1), int(m.group(2)), int(m.group(3))


def kv_heads(spec: str, H: int) -> int:
    """The K/V heads of case ``spec``: G of a ``g<G>`` suffix (grouped-query attention), else H."""
    m = re.search(r"g(\d+)$", spec)
    return int(m.group(1)) if m else H


def reference(q, k, v, causal: bool):
    """(O, LSE) in fp32 math, one batch at a time (scores materialised; TF32 off); K/V of fewer heads
    (grouped-query) are repeated, query head h reading K/V head h // (H / G)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    B, H, S, D = q.shape
    if k.shape[1] != H:
        k, v = (t.repeat_interleave(H // k.shape[1], dim=1) for t in (k, v))
    os_, ls = [], []
    mask = torch.ones(S, S, device=q.device, dtype=torch.bool).tril() if causal else None
    for b in range(B):
        s = torch.matmul(q[b].float(), k[b].float().transpose(-1, -2)) * D ** -0.5
        if causal:
            s = s.masked_fill(~mask, -float("inf"))
        ls.append(torch.logsumexp(s, dim=-1))
        os_.append(torch.matmul(torch.softmax(s, dim=-1), v[b].float()))
        del s
    return torch.stack(os_), torch.stack(ls)


def sdpa_backend(fn) -> str:
    """Which SDPA kernel ``fn`` runs (from the profiled CUDA kernel names)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.key for e in prof.key_averages()]
    for tag, words in (("cudnn", ("cudnn",)), ("flash", ("flash",)), ("efficient", ("efficient", "mem_eff", "fmha")),
                       ("math", ("softmax",))):
        if any(w in n.lower() for n in names for w in words):
            return f"{tag} ({', '.join(n[:60] for n in names[:3])})"
    return "unknown (" + ", ".join(n[:60] for n in names[:3]) + ")"


def wait_or_die(what: str, seconds: float = 20.0) -> None:
    """Synchronise, but give up (exit the process: a hung kernel cannot be recovered) after ``seconds``."""
    import time
    ev = torch.cuda.Event()
    ev.record()
    t0 = time.time()
    while not ev.query():
        if time.time() - t0 > seconds:
            print(f"  {what}: HUNG (no completion after {seconds:.0f} s); exiting", flush=True)
            os._exit(3)
        time.sleep(0.01)


def run_case(spec, only, B, H, out_rows, save) -> None:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kind, S, D = parse_case(spec)
    causal = kind == "c"
    G = kv_heads(spec, H)
    torch.manual_seed(0)
    q = torch.randn(B, H, S, D, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(B, G, S, D, device="cuda", dtype=torch.float16) for _ in range(2))
    o_ref, lse_ref = reference(q, k, v, causal)
    flops = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    print(f"== {spec}: attention fp16 B{B} H{H}{f' G{G}' if G != H else ''} S{S} D{D} "
          f"{'causal' if causal else 'non-causal'} "
          f"({flops / 1e12:.2f} TFLOP visible)", flush=True)
    print(f"  {'variant':40s} {'us':>9} {'TFLOP/s':>8} {'vs SDPA':>8} {'err O':>9} {'err LSE':>9}", flush=True)
    sd_us = None

    def emit(row):
        nonlocal sd_us
        if row["variant"] == "sdpa (default)" and row.get("us"):
            sd_us = row["us"]
        if row.get("us"):
            row["tflops"] = flops / row["us"] / 1e6
            row["vs_sdpa"] = sd_us / row["us"] if sd_us else None
        out_rows.append(row)
        save()
        if "error" in row:
            print(f"  {row['variant']:40s} {row['error'][:200]}", flush=True)
            return
        us = f"{row['us']:9.1f}" if row.get("us") else f"{'-':>9}"
        tf = f"{row['tflops']:8.1f}" if row.get("us") else f"{'-':>8}"
        vs = f"{row['vs_sdpa']:7.2f}x" if row.get("vs_sdpa") else f"{'-':>8}"
        eo = f"{row['err_o']:9.2e}" if row.get("err_o") is not None else f"{'-':>9}"
        el = f"{row['err_lse']:9.2e}" if row.get("err_lse") is not None else f"{'-':>9}"
        print(f"  {row['variant']:40s} {us} {tf} {vs} {eo} {el}" + (f"  {row['note']}" if row.get("note") else ""),
              flush=True)

    base = dict(case=spec, B=B, H=H, G=G, S=S, D=D, causal=causal)
    sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=G != H)  # noqa: E731
    try:
        backend = sdpa_backend(sdpa)
    except Exception as e:  # noqa: BLE001 - the profiler is a side show
        backend = f"unknown (profiler: {type(e).__name__})"
    row = dict(base, variant="sdpa (default)", backend=backend)
    row["err_o"] = (sdpa().float() - o_ref).abs().max().item()
    row["us"] = triton.testing.do_bench(sdpa, return_mode="median") * 1e3
    row["note"] = row["backend"][:70]
    emit(row)
    for label, backend in (("sdpa cudnn", "CUDNN_ATTENTION"), ("sdpa flash", "FLASH_ATTENTION")):
        row = dict(base, variant=label)
        try:
            with sdpa_kernel(getattr(SDPBackend, backend)):
                row["err_o"] = (sdpa().float() - o_ref).abs().max().item()
                row["us"] = triton.testing.do_bench(sdpa, return_mode="median") * 1e3
        except Exception as e:  # noqa: BLE001 - a backend that is not available is a result
            row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
        emit(row)
    for name, dims, cfg in VARIANTS:
        if D not in dims or (only and name not in only):
            continue
        row = dict(base, variant=name, cfg=cfg)
        try:
            fn, o, lse = gluon_attention(q, k, v, cfg, causal)
            o.fill_(float("nan"))
            lse.fill_(float("nan"))
            fn()
            wait_or_die(name)
            row["err_o"] = (o.float() - o_ref).abs().max().item()
            row["err_lse"] = (lse - lse_ref).abs().max().item()
            if not (row["err_o"] < 2e-2 and row["err_lse"] < 1e-2):
                row["note"] = "WRONG: not timed"
            else:
                row["us"] = triton.testing.do_bench(fn, return_mode="median") * 1e3
        except Exception as e:  # noqa: BLE001 - a failing variant is a result
            row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        emit(row)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="n4096x128,n1024x64,c4096x128", help="<n|c><S>x<D>, comma-separated")
    ap.add_argument("--only", default="", help="variant names to keep, comma-separated")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--out", default="", help="write probe_gluon_attention.json (and with --compile-only the "
                                              "TTGIR/PTX) here")
    ap.add_argument("--compile-only", action="store_true", help="compile every variant for sm_90; no GPU needed")
    a = ap.parse_args(argv)
    cases = [c for c in a.cases.split(",") if c]
    try:
        for c in cases:
            parse_case(c)
            if a.heads % kv_heads(c, a.heads):
                raise ValueError(f"--cases: {c!r}: {kv_heads(c, a.heads)} K/V heads do not divide {a.heads} heads")
    except ValueError as e:
        ap.error(str(e))
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    unknown = only - {name for name, _, _ in VARIANTS}
    if unknown:
        ap.error(f"--only: no variant named {sorted(unknown)}; variants: {[name for name, _, _ in VARIANTS]}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "probe_gluon_attention.json") if a.out else ""
    info = dict(triton=triton.__version__, torch=torch.__version__)
    if a.compile_only:
        rows = compile_only(cases, only, a.out)
        if path:
            with open(path, "w") as f:
                json.dump(dict(info, mode="compile-only", rows=rows), f, indent=1)
        return
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: use --compile-only")
    info["device"] = torch.cuda.get_device_name()
    print(f"{info['device']}: torch {torch.__version__}, triton {triton.__version__}", flush=True)
    rows: list[dict] = []

    def save():
        if path:
            with open(path, "w") as f:
                json.dump(dict(info, mode="gpu", rows=rows), f, indent=1)

    for spec in cases:
        run_case(spec, only, a.batch, a.heads, rows, save)


if __name__ == "__main__":
    main()
