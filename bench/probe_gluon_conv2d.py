"""Probe: can a hand-written Gluon implicit-GEMM conv2d in Triton 3.6 reach cuDNN on the H200 (issue 19)?

    PYTHONPATH=src python3 bench/probe_gluon_conv2d.py [--out DIR] [--only NAME,...] [--compile-only | --dry-run]

The kernels and their configurations (``VARIANTS``) are in bench/gluon_conv2d.py (Triton 3.6's Gluon and
torch only). The bench case is conv2d 3x3, padding 1, stride 1, fp16 NHWC, N32 C256 H56 W56 O256
(118.4 GFLOP); every variant is first checked against torch's conv2d in fp32 math (max abs error) on the
bench case and on an odd case (N3 C64 H13 W24 O256: partial patches at the H border, a partial last
tile), outputs poisoned with NaN before the run; a variant that errors or mismatches is reported, not
timed. Then ``triton.testing.do_bench`` times each beside torch (cuDNN, channels_last) and
``torch.compile`` of the same conv. Prints a table last and writes ``probe_gluon_conv2d.json`` under
``--out``. ``--compile-only`` (no GPU needed) compiles every variant for sm_90 and prints registers /
spill stack per thread (cuobjdump), shared memory, warps and the wgmma instructions (and whether any
takes A from registers); ``--dry-run`` is ``--compile-only`` plus a CPU replay of the kernels' tiling
(patches, TMA boxes with zero fill, clipped stores) against torch on the odd case.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gluon_conv2d import VARIANTS, check_shapes, compile_sm90, gluon_conv2d  # noqa: E402

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
BENCH = dict(N=32, C=256, H=56, W=56, O=256)
ODD = dict(N=3, C=64, H=13, W=24, O=256)


# ---------------------------------------------------------------- compile only (no GPU)

def resources(ck) -> dict:
    """Registers and spill stack per thread (cuobjdump; a warp-specialised kernel's figure is its launch
    cap, its partitions re-size by setmaxnreg), shared memory, warps, wgmma instructions (those with A in
    registers separately), the setmaxnreg values and whether A ever goes through registers (local_load)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(ck.asm["cubin"])
    try:
        txt = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", txt)
    ptx = ck.asm["ptx"]
    wg = re.findall(r"wgmma\.mma_async[^;]*;", ptx)
    return dict(regs=int(m.group(1)) if m else None, stack=int(m.group(2)) if m else None, smem=ck.metadata.shared,
                warps=ck.metadata.num_warps, wgmma=len(wg),
                wgmma_reg_a=sum(1 for w in wg if re.search(r"\},\s*\{", w)),
                local_loads=ck.asm["ttgir"].count("ttg.local_load"),
                setmaxnreg=sorted({int(v) for v in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)}))


def compile_only(only, out) -> list[dict]:
    rows = []
    print("== sm_90 compile (3x3, pad 1)", flush=True)
    for name, cfg in VARIANTS:
        if only and name not in only:
            continue
        row = dict(variant=name, cfg=cfg)
        t0 = time.time()
        try:
            ck = compile_sm90(cfg)
            row |= resources(ck)
            if out:
                base = os.path.join(out, re.sub(r"\W+", "_", name))
                for ext in ("ttgir", "ptx"):
                    with open(f"{base}.{ext}", "w") as f:
                        f.write(ck.asm[ext])
            print(f"  {name:32s} regs {row['regs']:>3} stack {row['stack']:>3} smem {row['smem']:>6} B "
                  f"warps {row['warps']:>2} wgmma {row['wgmma']:>3} (A in regs {row['wgmma_reg_a']}) "
                  f"local_load {row['local_loads']} setmaxnreg {row['setmaxnreg']}  [{time.time() - t0:.1f} s]",
                  flush=True)
        except Exception as e:  # noqa: BLE001 - a kernel that does not compile is a result
            row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:1500]}"
            print(f"  {name:32s} FAILED: {row['error'][:600]}", flush=True)
        rows.append(row)
    return rows


def box(x, n, h, w, c, BH, BW, bk):
    """What a TMA box [1, BH, BW, bk] of x at (n, h, w, c) reads: zeros outside x."""
    N, H, W, C = x.shape
    out = torch.zeros(BH, BW, bk, dtype=x.dtype)
    if not 0 <= n < N:
        return out
    h1, h2, w1, w2 = max(h, 0), min(h + BH, H), max(w, 0), min(w + BW, W)
    if h1 < h2 and w1 < w2:
        out[h1 - h:h2 - h, w1 - w:w2 - w] = x[n, h1:h2, w1:w2, c:c + bk]
    return out


def simulate(cfg, x, w, pad: int):
    """The kernels' tiling replayed in torch on CPU (fp64): tile -> patches, K step -> (tap, channels),
    the TMA boxes of X (zeros outside) and of the 2-D weight, the clipped patch stores. Checks the index
    math of bench/gluon_conv2d.py (not the Gluon code generation)."""
    N, H, W, C, O, R, Q, OH, OW = check_shapes(cfg, x, w, pad)
    BH, BW, MB, BN, bk = cfg["BH"], cfg["BW"], cfg["MB"], cfg["BN"], 64
    P = BH * BW
    PH, PW = -(-OH // BH), -(-OW // BW)
    w2 = w.reshape(O, R * Q * C)
    y = torch.full((N, OH, OW, O), float("nan"), dtype=x.dtype)
    n_tiles_o = O // BN
    patch = lambda p: (p // PW // PH, (p // PW) % PH * BH, p % PW * BW)  # noqa: E731
    for t in range(-(-N * PH * PW // MB) * n_tiles_o):
        m_tile, o0 = t // n_tiles_o, t % n_tiles_o * BN
        acc = torch.zeros(MB * P, BN, dtype=x.dtype)
        for k in range(R * Q * C // bk):
            tap, c0 = k // (C // bk), k % (C // bk) * bk
            a = torch.cat([box(x, n, h0 + tap // Q - pad, w0 + tap % Q - pad, c0, BH, BW, bk).reshape(P, bk)
                           for n, h0, w0 in map(patch, range(m_tile * MB, m_tile * MB + MB))])
            acc += a @ w2[o0:o0 + BN, tap * C + c0:tap * C + c0 + bk].T
        for j in range(MB):
            n, h0, w0 = patch(m_tile * MB + j)
            if n < N:
                hh, ww = min(BH, OH - h0), min(BW, OW - w0)
                y[n, h0:h0 + hh, w0:w0 + ww, o0:o0 + BN] = acc[j * P:(j + 1) * P].reshape(BH, BW, BN)[:hh, :ww]
    return y


def dry_run_shapes(only) -> bool:
    """The host-side shape checks and the tiling replay (:func:`simulate`) of every variant on CPU
    against torch's conv2d (fp64) on the odd case; True when all match."""
    import torch.nn.functional as F
    torch.manual_seed(0)
    x = torch.randn(ODD["N"], ODD["H"], ODD["W"], ODD["C"], dtype=torch.float64)
    w = torch.randn(ODD["O"], 3, 3, ODD["C"], dtype=torch.float64)
    ref = F.conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), padding=1).permute(0, 2, 3, 1)
    ok = True
    print("== tiling replay on CPU (odd case N3 C64 H13 W24 O256, fp64) against torch conv2d", flush=True)
    for name, cfg in VARIANTS:
        if not only or name in only:
            err = (simulate(cfg, x, w, 1) - ref).abs().max().item()
            ok &= err < 1e-9
            print(f"  {name:32s} max abs err {err:.2e}", flush=True)
    return ok


# ---------------------------------------------------------------- GPU: check and time

def wait_or_die(what: str, seconds: float = 20.0) -> None:
    """Synchronise, but give up (exit the process: a hung kernel cannot be recovered) after ``seconds``."""
    ev = torch.cuda.Event()
    ev.record()
    t0 = time.time()
    while not ev.query():
        if time.time() - t0 > seconds:
            print(f"  {what}: HUNG (no completion after {seconds:.0f} s); exiting", flush=True)
            os._exit(3)
        time.sleep(0.01)


def make_case(case, seed=0):
    """(x NCHW channels_last fp16, weight (O, C, 3, 3) fp16, x as NHWC contiguous, weight (O, R, Q, C)
    contiguous, fp32-math reference (N, H, W, O))."""
    import torch.nn.functional as F
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(case["N"], case["C"], case["H"], case["W"], device="cuda", dtype=torch.float16,
                    generator=g).to(memory_format=torch.channels_last)
    w = (torch.randn(case["O"], case["C"], 3, 3, device="cuda", dtype=torch.float16, generator=g)
         / (9 * case["C"]) ** 0.5).to(torch.float16)
    torch.backends.cudnn.allow_tf32 = False
    ref = F.conv2d(x.float(), w.float(), padding=1).permute(0, 2, 3, 1)
    return x, w, x.permute(0, 2, 3, 1), w.permute(0, 2, 3, 1).contiguous(), ref


def check(name, cfg, case) -> float:
    """Max abs error of variant ``cfg`` against the fp32 reference on ``case`` (output poisoned first)."""
    _, _, xh, wh, ref = make_case(case, seed=1)
    fn, y = gluon_conv2d(xh, wh, cfg)
    y.fill_(float("nan"))
    fn()
    wait_or_die(name)
    return (y.float() - ref).abs().max().item()


def run(only, rows, save) -> None:
    import torch.nn.functional as F
    case = BENCH
    flops = 2 * case["N"] * case["H"] * case["W"] * case["O"] * case["C"] * 9
    x, w, xh, wh, ref = make_case(case)
    print(f"== conv2d 3x3 pad 1 fp16 NHWC N{case['N']} C{case['C']} H{case['H']} W{case['W']} O{case['O']} "
          f"({flops / 1e9:.1f} GFLOP)", flush=True)

    def emit(row):
        if row.get("us"):
            row["tflops"] = flops / row["us"] / 1e6
        rows.append(row)
        save()
        us = f"{row['us']:.1f} us" if row.get("us") else "-"
        print(f"  {row['variant']:32s} {us:>10} err {row.get('err', '-')!s:>10} err odd {row.get('err_odd', '-')!s:>10}"
              f"  {row.get('note', '') or row.get('error', '')[:300]}", flush=True)

    torch_fn = lambda: F.conv2d(x, w, padding=1)  # noqa: E731
    row = dict(variant="torch (cuDNN, channels_last)")
    row["err"] = (torch_fn().float().permute(0, 2, 3, 1) - ref).abs().max().item()
    row["us"] = triton.testing.do_bench(torch_fn, return_mode="median") * 1e3
    emit(row)
    row = dict(variant="torch.compile")
    try:
        comp = torch.compile(lambda a, b: F.conv2d(a, b, padding=1))
        comp_fn = lambda: comp(x, w)  # noqa: E731
        row["err"] = (comp_fn().float().permute(0, 2, 3, 1) - ref).abs().max().item()
        row["us"] = triton.testing.do_bench(comp_fn, return_mode="median") * 1e3
    except Exception as e:  # noqa: BLE001 - a failing baseline is a result
        row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    emit(row)
    for name, cfg in VARIANTS:
        if only and name not in only:
            continue
        row = dict(variant=name, cfg=cfg)
        t0 = time.time()
        try:
            row["err_odd"] = check(name, cfg, ODD)
            fn, y = gluon_conv2d(xh, wh, cfg)
            y.fill_(float("nan"))
            fn()
            wait_or_die(name)
            row["err"] = (y.float() - ref).abs().max().item()
            if not (row["err"] < 1e-2 and row["err_odd"] < 1e-2):
                row["note"] = "WRONG: not timed"
            else:
                row["us"] = triton.testing.do_bench(fn, return_mode="median") * 1e3
        except Exception as e:  # noqa: BLE001 - a failing variant is a result
            row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        row["wall_s"] = time.time() - t0
        emit(row)
    cud = next((r["us"] for r in rows if r["variant"].startswith("torch (") and r.get("us")), None)
    tc = next((r["us"] for r in rows if r["variant"] == "torch.compile" and r.get("us")), None)
    print(f"\n{'variant':32s} {'us':>8} {'TFLOP/s':>8} {'vs cuDNN':>9} {'vs compile':>10} {'err':>9} {'err odd':>9}")
    for r in rows:
        us = r.get("us")
        print(f"{r['variant']:32s} {us or float('nan'):8.1f} {r.get('tflops', float('nan')):8.1f} "
              f"{(cud / us if us and cud else float('nan')):8.2f}x {(tc / us if us and tc else float('nan')):9.2f}x "
              f"{r.get('err', float('nan')):9.2e} {r.get('err_odd', float('nan')):9.2e}"
              f"  {r.get('note', '') or r.get('error', '')[:120]}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="variant names to keep, comma-separated")
    ap.add_argument("--out", default="", help="write probe_gluon_conv2d.json (and with --compile-only the "
                                              "TTGIR/PTX) here")
    ap.add_argument("--compile-only", action="store_true", help="compile every variant for sm_90; no GPU needed")
    ap.add_argument("--dry-run", action="store_true", help="--compile-only plus the host shape checks on CPU")
    a = ap.parse_args(argv)
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    unknown = only - {name for name, _ in VARIANTS}
    if unknown:
        ap.error(f"--only: no variant named {sorted(unknown)}; variants: {[name for name, _ in VARIANTS]}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "probe_gluon_conv2d.json") if a.out else ""
    info = dict(triton=triton.__version__, torch=torch.__version__, case=BENCH, odd_case=ODD)
    if a.compile_only or a.dry_run:
        rows = compile_only(only, a.out)
        if a.dry_run and not dry_run_shapes(only):
            sys.exit(1)
        if path:
            with open(path, "w") as f:
                json.dump(dict(info, mode="compile-only", rows=rows), f, indent=1)
        if any("error" in r for r in rows):
            sys.exit(1)
        return
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: use --compile-only or --dry-run")
    info["device"] = torch.cuda.get_device_name()
    print(f"{info['device']}: torch {torch.__version__}, triton {triton.__version__}", flush=True)
    rows: list[dict] = []

    def save():
        if path:
            with open(path, "w") as f:
                json.dump(dict(info, mode="gpu", rows=rows), f, indent=1)

    run(only, rows, save)


if __name__ == "__main__":
    main()
