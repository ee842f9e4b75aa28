"""Narrow-type matmuls of issue 19 against torch's own (H200, one device call, about 3 minutes).

    PYTHONPATH=src python3 bench/narrow.py [--budget 30] [--out DIR]
    PYTHONPATH=src python3 bench/narrow.py --dry-run      # CPU interpreter, tiny shapes: checks the script

Rows (each checked against float64 / exact integers first, then kernel time by CUDA-graph replay,
``bench/run.py``'s timer):

- ``fp8 rowwise``: e4m3 ``A (M x K) @ B (K x N)`` with per-row scales ``sa[i] * sb[j]``, bf16 output
  (B column-major, as ``torch._scaled_mm`` requires), M = N = K = 4096: dtriton's algorithm against
  ``torch._scaled_mm(A, B, sa[M, 1], sb[1, N], out_dtype=bfloat16)``, with and without its
  ``use_fast_accum`` (Triton's fp8 dots on Hopper accumulate the fast way). Mark: >= 0.9x.
- ``fp8 tensorwise``: the same product with one scale per tensor and an fp32 output.
- ``fp8 block``: the same product with DeepSeek-V3's block scales (``sa[i, k // 128]``, ``sb[k // 128, j // 128]``,
  fp32, bf16 output): each K tile's dot scaled; against ``torch._scaled_mm`` with the same scales where this
  build takes them (blockwise 1x128 / 128x128), else against the rowwise row. No mark.
- ``int8``: int8 ``A @ B`` -> int32 against ``torch._int_mm`` (exact equality). Mark: >= 0.9x.
- ``int4``: fp16 ``X (4096 x 4096)`` times int4 weights packed two per byte (``Wp (4096 x 2048)`` uint8),
  unpacked with ``//`` and ``%`` in the dot's prologue, a scale per output column, fp32 output; against torch's
  fp16 ``X @ W.T`` of the unpacked weights (cuBLAS: the weights read as fp16, 4x the bytes). No mark.
- ``quant``: per-token quantisation of a bf16 ``X (8192 x 4096)`` to e4m3 with its row scales (absmax / 448,
  saturating cast) against torch eager; checked bit for bit (a share of elements may differ by one fp8 step:
  dtriton multiplies by the reciprocal of the row's scale, torch divides); TB/s of the bytes read and written.

dtriton's schedule comes from an exploration of ``--budget`` seconds per row (0: the tuning DB or
the heuristic). Writes ``<out>/narrow.json`` (``--out``, else ``$OUT``, else bench/results/issue19) and
prints a table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as timing  # noqa: E402  (bench/run.py: graph_time_us, relerr, tuned_kernel, DRY/DEV switches)

E4 = torch.float8_e4m3fn


@dt.algorithm
def fp8_rowwise(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"], sa: dt.Tensor["M"], sb: dt.Tensor["N"]):
    """bf16(sa[i] * sb[j] * sum_k A[i, k] B[k, j]): fp8 operands, per-row scales."""
    i, j, k = dt.axes("i j k")
    return dt.cast(sa[i] * sb[j] * dt.sum(A[i, k] * B[k, j], over=k), torch.bfloat16)[i, j]


@dt.algorithm
def fp8_tensorwise(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"], s: dt.Tensor["One"]):
    """s[0] * sum_k A[i, k] B[k, j] in fp32: fp8 operands, one scale (a one-element tensor)."""
    i, j, k = dt.axes("i j k")
    return (s[0] * dt.sum(A[i, k] * B[k, j], over=k))[i, j]


@dt.algorithm
def fp8_blockwise(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"], sa: dt.Tensor["M", "KB"], sb: dt.Tensor["KB", "NB"]):
    """bf16(sum_k A[i, k] sa[i, k // 128] B[k, j] sb[k // 128, j // 128]): fp8 operands, block scales."""
    i, j, k = dt.axes("i j k")
    return dt.cast(dt.sum(A[i, k] * sa[i, k // 128] * B[k, j] * sb[k // 128, j // 128], over=k), torch.bfloat16)[i, j]


@dt.algorithm
def int8_mm(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    """int32(sum_k A[i, k] B[k, j]) of int8 operands (exact: an int32 accumulator)."""
    i, j, k = dt.axes("i j k")
    return dt.cast(dt.sum(A[i, k] * B[k, j], over=k), torch.int32)[i, j]


ROWS: list[dict] = []
OUT_DIR: list[str] = []   # the output folder once main() has it


def size(n: int) -> int:
    """A benchmark size: as given on the GPU, 48 in a dry run (two 32-wide K tiles, odd tails elsewhere)."""
    return n if not timing.DRY else 48


def row(case: str, impl: str, us: float, flops: float, err: float | None, ok: bool, note: str = "") -> dict:
    r = dict(case=case, impl=impl, kernel_us=round(us, 2), tflops=round(flops / us / 1e6, 1) if us else None,
             err=err, ok=ok, note=note)
    ROWS.append(r)
    if OUT_DIR:   # rewritten after every row: a run cut short keeps what it measured
        with open(os.path.join(OUT_DIR[0], "narrow.json"), "w") as f:
            json.dump(dict(rows=ROWS), f, indent=1)
    print(f"  {case:16s} {impl:34s} {us:9.1f} us  err {err if err is None else f'{err:.2e}'}  {'ok' if ok else 'WRONG'}"
          f"  {note}", flush=True)
    return r


def fp8_operands(m: int, k: int, n: int):
    g = torch.Generator(device="cpu").manual_seed(0)
    a = (torch.randn(m, k, generator=g) * 2).to(E4).to(timing.DEV)
    b = (torch.randn(n, k, generator=g) * 2).to(E4).to(timing.DEV).t()   # column-major (K-major), as _scaled_mm wants
    return a, b


def run_fp8(budget: float) -> None:
    m = n = k = size(4096)
    a, b = fp8_operands(m, k, n)
    sa = (torch.rand(m, device=timing.DEV) + 0.5)
    sb = (torch.rand(n, device=timing.DEV) + 0.5)
    prod = a.double() @ b.double()
    flops = 2.0 * m * n * k
    ref = sa.double()[:, None] * sb.double()[None, :] * prod
    kern, note = timing.tuned_kernel(fp8_rowwise, (a, b, sa, sb), budget)
    y = kern(a, b, sa, sb)
    err = timing.relerr(y, ref)
    row("fp8 rowwise", "dtriton", timing.graph_time_us(lambda: kern(a, b, sa, sb)), flops, err, err < 1e-2, note)
    sa2, sb2 = sa[:, None].contiguous(), sb[None, :].contiguous()
    for fast in (False, True):
        def f(fast=fast):
            return torch._scaled_mm(a, b, sa2, sb2, out_dtype=torch.bfloat16, use_fast_accum=fast)
        try:
            err = timing.relerr(f(), ref)
            row("fp8 rowwise", f"torch._scaled_mm fast_accum={fast}", timing.graph_time_us(f), flops, err, err < 1e-2)
        except RuntimeError as e:   # a build without row-wise scaling
            row("fp8 rowwise", f"torch._scaled_mm fast_accum={fast}", float("nan"), flops, None, False, str(e)[:80])
    s = torch.tensor([0.75], device=timing.DEV)
    ref = 0.75 * prod
    kern, note = timing.tuned_kernel(fp8_tensorwise, (a, b, s), budget)
    err = timing.relerr(kern(a, b, s), ref)
    row("fp8 tensorwise", "dtriton", timing.graph_time_us(lambda: kern(a, b, s)), flops, err, err < 1e-2, note)
    one = torch.tensor(1.0, device=timing.DEV)
    for fast in (False, True):
        def g(fast=fast):
            return torch._scaled_mm(a, b, s[0], one, out_dtype=torch.float32, use_fast_accum=fast)
        err = timing.relerr(g(), ref)
        row("fp8 tensorwise", f"torch._scaled_mm fast_accum={fast}", timing.graph_time_us(g), flops, err, err < 1e-2)


def run_blockwise(budget: float) -> None:
    m = n = k = size(4096)
    a, b = fp8_operands(m, k, n)
    kb, nb = -(-k // 128), -(-n // 128)
    sa = torch.rand(m, kb, device=timing.DEV) + 0.5
    sb = torch.rand(kb, nb, device=timing.DEV) + 0.5
    af = a.double() * sa.double().repeat_interleave(128, 1)[:, :k]
    bf = b.double() * sb.double().repeat_interleave(128, 0)[:k].repeat_interleave(128, 1)[:, :n]
    ref = af @ bf
    flops = 2.0 * m * n * k
    kern, note = timing.tuned_kernel(fp8_blockwise, (a, b, sa, sb), budget)
    err = timing.relerr(kern(a, b, sa, sb), ref)
    row("fp8 block", "dtriton", timing.graph_time_us(lambda: kern(a, b, sa, sb)), flops, err, err < 1e-2, note)
    # torch's blockwise recipe wants the A scales K-block-major (an (M, K/128) view of a (K/128, M) tensor)
    sat = sa.t().contiguous().t()

    def f():
        return torch._scaled_mm(a, b, sat, sb, out_dtype=torch.bfloat16)
    try:
        err = timing.relerr(f(), ref)
        row("fp8 block", "torch._scaled_mm blockwise", timing.graph_time_us(f), flops, err, err < 1e-2)
    except (RuntimeError, ValueError) as e:   # a build without blockwise scaling
        row("fp8 block", "torch._scaled_mm blockwise", float("nan"), flops, None, False, str(e)[:80])


def int8_operands(m: int, k: int, n: int):
    """int8 ``a`` (m x k) and ``b`` (k x n) stored column-major (k contiguous): the layout of
    cuBLAS's int8 tensor-core GEMM (``torch._int_mm`` with a row-major ``b`` ran 1091 us at 4096^3 on
    the H200, 126 TOPS), and the K-major operand Hopper's 8-bit wgmma takes."""
    g = torch.Generator(device="cpu").manual_seed(1)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8).to(timing.DEV)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8).to(timing.DEV).t()
    return a, b


def run_int8(budget: float) -> None:
    m = n = k = size(4096)
    a, b = int8_operands(m, k, n)
    exact = (a.double() @ b.double()).round().long()   # exact: |sum| < 2**53
    flops = 2.0 * m * n * k
    kern, note = timing.tuned_kernel(int8_mm, (a, b), budget)
    y = kern(a, b)
    ok = y.dtype == torch.int32 and torch.equal(y.long(), exact)
    row("int8", "dtriton", timing.graph_time_us(lambda: kern(a, b)), flops, 0.0 if ok else 1.0, ok, note)
    for name, bb in (("torch._int_mm", b), ("torch._int_mm (b row-major)", b.contiguous())):
        ok = torch.equal(torch._int_mm(a, bb).long(), exact)
        row("int8", name, timing.graph_time_us(lambda bb=bb: torch._int_mm(a, bb)), flops, 0.0 if ok else 1.0, ok)


#: explicit schedules timed by --variants, per case (TMA: the heuristic's access at 4096^3), each within the
#: H200's 227 KB of shared memory in the sm_90 compile of bench/narrow_sm90.py. The heuristic (session 5):
#: 128x128x128, 4 warps; fp8 3 stages (s5 call 3: 104.5 us, 1.017x torch._scaled_mm), int8 4 (150.7 us,
#: 1.10x torch._int_mm); fp8 dots are never warp-specialised, see plan.passes.fp8_dots
VARIANTS = {
    "fp8 rowwise": {
        "128x128x128 s4 w4": dict(tile={"i": 128, "j": 128, "k": 128}, num_stages=4, num_warps=4),
        "128x128x128 s2 w4": dict(tile={"i": 128, "j": 128, "k": 128}, num_stages=2, num_warps=4),
        "128x256x128 s3 w8": dict(tile={"i": 128, "j": 256, "k": 128}, num_stages=3, num_warps=8)},
    "int8": {
        "128x128x128 s3 w4": dict(tile={"i": 128, "j": 128, "k": 128}, num_stages=3, num_warps=4),
        "128x128x128 s4 w8 (s4 default)": dict(tile={"i": 128, "j": 128, "k": 128}, num_stages=4, num_warps=8)},
}


def run_variants() -> None:
    """fp8 rowwise and int8 at 4096^3 under the heuristic and each of :data:`VARIANTS` (no
    exploration), beside torch: which schedule the heuristic should take."""
    m = n = k = size(4096)
    flops = 2.0 * m * n * k
    a, b = fp8_operands(m, k, n)
    sa, sb = torch.rand(m, device=timing.DEV) + 0.5, torch.rand(n, device=timing.DEV) + 0.5
    ref = sa.double()[:, None] * sb.double()[None, :] * (a.double() @ b.double())
    ai, bi = int8_operands(m, k, n)
    exact = (ai.double() @ bi.double()).round().long()
    cases = [("fp8 rowwise", fp8_rowwise, (a, b, sa, sb), lambda y: timing.relerr(y, ref)),
             ("int8", int8_mm, (ai, bi), lambda y: 0.0 if torch.equal(y.long(), exact) else 1.0)]
    for case, alg, args, err_of in cases:
        for name, fields in [("heuristic", None)] + list(VARIANTS[case].items()):
            try:
                sched = None if fields is None else dt.Schedule(access="tma" if not timing.DRY else None, **fields)
                kern = dt.compile(alg, sched)
                err = err_of(kern(*args))
                row(case, f"dtriton {name}", timing.graph_time_us(lambda: kern(*args)), flops, err, err < 1e-2)
            except Exception as e:  # noqa: BLE001 - a variant that fails to compile: recorded, the others go on
                row(case, f"dtriton {name}", float("nan"), flops, None, False, f"{type(e).__name__}: {str(e)[:80]}")
    sa2, sb2 = sa[:, None].contiguous(), sb[None, :].contiguous()
    for fast in (False, True):
        row("fp8 rowwise", f"torch._scaled_mm fast_accum={fast}", timing.graph_time_us(
            lambda fast=fast: torch._scaled_mm(a, b, sa2, sb2, out_dtype=torch.bfloat16, use_fast_accum=fast)), flops,
            0.0, True)
    row("int8", "torch._int_mm", timing.graph_time_us(lambda: torch._int_mm(ai, bi)), flops, 0.0, True)


@dt.algorithm
def int4_linear(X: dt.Tensor["M", "K"], Wp: dt.Tensor["N", "Kh"], s: dt.Tensor["N"]):
    """s[j] * sum_k X[i, k] w[j, k] with int4 w packed two per byte of Wp (low nibble first)."""
    i, j, k = dt.axes("i j k")
    byte = Wp[j, k // 2]
    nib = dt.where(k % 2 == 0, byte % 16, byte // 16)
    return (s[j] * dt.sum(X[i, k] * dt.where(nib >= 8, nib - 16, nib), over=k))[i, j]


def run_int4(budget: float) -> None:
    m = n = k = size(4096)
    g = torch.Generator(device="cpu").manual_seed(2)
    w = torch.randint(-8, 8, (n, k), generator=g)
    wp = ((w[:, 0::2] & 15) | ((w[:, 1::2] & 15) << 4)).to(torch.uint8).to(timing.DEV)
    x = torch.randn(m, k, generator=g).to(torch.float16).to(timing.DEV)
    s = torch.rand(n, generator=g).to(timing.DEV)
    w16 = w.to(torch.float16).to(timing.DEV)
    ref = s.double() * (x.double() @ w16.double().T)
    flops = 2.0 * m * n * k
    kern, note = timing.tuned_kernel(int4_linear, (x, wp, s), budget)
    err = timing.relerr(kern(x, wp, s), ref)
    row("int4", "dtriton", timing.graph_time_us(lambda: kern(x, wp, s)), flops, err, err < 1e-3, note)
    err = timing.relerr(x @ w16.T, ref / s.double())
    row("int4", "torch fp16 X @ W.T (unpacked)", timing.graph_time_us(lambda: x @ w16.T), flops, err, err < 1e-2)


@dt.algorithm
def quantise_fp8(X: dt.Tensor["M", "K"]):
    """Per-token e4m3 quantisation: the row scale absmax / 448 (in fp32: of bf16 values it would be
    bf16 by torch's rules) and the saturated quotients."""
    i, k = dt.axes("i k")
    scale = dt.maximum(dt.cast(dt.max(dt.abs(X[i, k]), over=k), torch.float32), 1e-12) / 448.0
    return dt.cast(X[i, k] / scale, E4, saturate=True)[i, k], scale[i]


def quantise_eager(x: torch.Tensor):
    s = x.float().abs().amax(1).clamp(min=1e-12) / 448.0
    return (x.float() / s[:, None]).clamp(-448, 448).to(E4), s


def run_quant(budget: float) -> None:
    m, k = size(8192), size(4096)
    x = torch.randn(m, k, device=timing.DEV).to(torch.bfloat16)
    rq, rs = quantise_eager(x)
    kern, note = timing.tuned_kernel(quantise_fp8, (x,), budget)
    q, s = kern(x)
    steps = (q.view(torch.uint8).int() - rq.view(torch.uint8).int()).abs()
    differ = float((steps != 0).float().mean())
    ok = bool(steps.max() <= 1) and differ < 1e-2 and timing.relerr(s, rs) < 1e-6
    mb = (x.numel() * 2 + q.numel() + m * 4) / 1e6
    us = timing.graph_time_us(lambda: kern(x))
    r = row("quant fp8", "dtriton", us, 0.0, differ, ok, f"{note}; {differ:.2e} of elements one fp8 step off")
    r["tbps"] = round(mb / us, 3)
    us = timing.graph_time_us(lambda: quantise_eager(x))
    r = row("quant fp8", "torch eager", us, 0.0, 0.0, True)
    r["tbps"] = round(mb / us, 3)


def ratios() -> list[str]:
    """dtriton's time (its fastest row of the case) against each torch row of its case (torch time /
    dtriton time: >= 0.9 is the mark)."""
    out = []
    for case in dict.fromkeys(r["case"] for r in ROWS):
        mine = sorted((r for r in ROWS if r["case"] == case and r["impl"].startswith("dtriton") and r["ok"]),
                      key=lambda r: r["kernel_us"])
        for r in ROWS:
            if r["case"] == case and not r["impl"].startswith("dtriton") and mine and r["kernel_us"] == r["kernel_us"]:
                x = r["kernel_us"] / mine[0]["kernel_us"]
                mark = f" ({'PASS' if x >= 0.9 else 'MISS'} of 0.9x)" if case in ("fp8 rowwise", "fp8 tensorwise", "int8") else ""
                out.append(f"{case}: {mine[0]['impl']} is {x:.3f}x {r['impl']}{mark}")
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes (checks the script)")
    p.add_argument("--budget", type=float, default=30.0, help="exploration seconds per dtriton row (0: DB/heuristic)")
    p.add_argument("--out", default=None, help="directory of narrow.json (default $OUT, else bench/results/issue19)")
    p.add_argument("--only", default="fp8,int8,int4,quant", help="comma-separated groups: fp8, int8, int4, quant")
    p.add_argument("--variants", action="store_true",
                   help="only fp8 rowwise and int8 under the heuristic and VARIANTS' schedules, and the "
                        "quantisation row (no exploration)")
    a = p.parse_args(argv)
    if a.dry_run:
        timing.DEV, timing.DRY = "cpu", True
        a.budget = 0.0
    out = a.out or os.environ.get("OUT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "issue19")
    os.makedirs(out, exist_ok=True)
    OUT_DIR.append(out)
    only = set() if a.variants else set(a.only.split(","))
    if a.variants:
        run_variants()
        run_quant(0.0)
    print(f"== narrow types ({'dry run' if timing.DRY else torch.cuda.get_device_name()}), budget {a.budget:g} s", flush=True)
    if "fp8" in only:
        run_fp8(a.budget)
    if "fp8" in only:
        run_blockwise(min(a.budget, 20.0))
    if "int8" in only:
        run_int8(a.budget)
    if "int4" in only:
        run_int4(min(a.budget, 10.0))
    if "quant" in only:
        run_quant(min(a.budget, 10.0))
    meta = dict(when=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                device="cpu (dry run)" if timing.DRY else torch.cuda.get_device_name(), budget=a.budget,
                torch=torch.__version__)
    with open(os.path.join(out, "narrow.json"), "w") as f:
        json.dump(dict(meta=meta, rows=ROWS, ratios=ratios()), f, indent=1)
    print("\n| case | impl | kernel us | TFLOP/s (TB/s) | rel. err | ok | note |\n|---|---|---|---|---|---|---|")
    for r in ROWS:
        rate = r.get("tbps", r["tflops"])
        print(f"| {r['case']} | {r['impl']} | {r['kernel_us']} | {rate} | {r['err']} | {r['ok']} | {r['note']} |")
    for line in ratios():
        print(line)


if __name__ == "__main__":
    main()
