"""Issue 15 experiment: fp32-accurate tensor-core dots as ONE dot over a concatenated reduction axis, against
Triton 3.6's own tf32x3, on the diffusion layer's output GEMM (C (M, 128) = A (M, 128) @ B (128, 128), fp32).

    PYTHONPATH=src python3 bench/split_dot_probe.py [--M 20000 100000] [--out DIR] [--dry-run] [--sm90]

Triton's tf32x3 (``input_precision="tf32x3"``) splits both operands into big and small tf32 parts in registers at
every k-step, stores the right operand's parts to shared memory and runs three wgmma groups, waiting for each
(``warp_group_dot_wait {pendings = 0}``, bench/diffusion_sm90.py --dump). The hand-written kernels here split
the same way but feed the three products to the tensor cores as one plain tf32 dot of a reduction axis four
times as long: the parts interleaved along k (``tl.join`` then ``tl.reshape``), the fourth pair zero:
A' = [a_hi, a_lo, a_hi, 0], B' = [b_hi, b_hi, b_lo, 0], so A' @ B' = a_hi b_hi + a_lo b_hi + a_hi b_lo (one
wait per k-step). Rows (each checked against float64 first, relative norm error):

- ``dtriton tf32x3``: the library matmul at out0's tiles (64 x 64 x 32, 4 warps, 3 stages), as planned;
- ``triton tf32x3``: the hand-written kernel with ``input_precision="tf32x3"`` (the same loop);
- ``concat x4``: the hand-written kernel, one tf32 dot of 4 x 32 per k-step;
- ``two dots``: a_hi b_hi + a_lo b_hi as one dot of 2 x 32, then a_hi b_lo (two waits);
- ``tf32``: one plain tf32 dot (1e-3 error: what the MMAs and loads alone cost).

Each in 64 x 64 tiles at 4 warps and 128 x 64 at 8 warps. Kernel time = CUDA-graph replay (bench/run.py's).
``--sm90`` compiles the hand-written kernels for sm_90 on this machine and prints registers and the TTGIR's
waits and shared-memory stores per k-step instead (no GPU needed). Writes ``<out>/split_dot_probe.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "--dry-run" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"   # before triton.jit wraps the kernels below

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as suite  # noqa: E402

import dtriton as dt  # noqa: E402
from dtriton.library import matmul  # noqa: E402

MODES = {"triton tf32x3": 0, "concat x4": 1, "two dots": 2, "tf32": 3}


@triton.jit
def _tf32_big(x):
    """x rounded to its nearest tf32 value (10 mantissa bits), ties away from zero, by integer ops
    (the interpreter runs it too): an exact tf32 number."""
    bits = x.to(tl.uint32, bitcast=True)
    return ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def _interleave4(p0, p1, p2, p3, BM: tl.constexpr, BK: tl.constexpr):
    """[BM, BK] x 4 -> [BM, 4 BK], column 4 k + i holding p_i[:, k]."""
    return tl.reshape(tl.join(tl.join(p0, p1), tl.join(p2, p3)), (BM, 4 * BK))


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, MODE: tl.constexpr):
    """C = A @ B in fp32 (see the module's text for MODE); grid (cdiv(M, BM) * cdiv(N, BN),)."""
    pid = tl.program_id(0)
    npn = tl.cdiv(N, BN)
    pm, pn = pid // npn, pid % npn
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if MODE == 0:
            acc = tl.dot(a, b, acc, input_precision="tf32x3")
        elif MODE == 3:
            acc = tl.dot(a, b, acc, input_precision="tf32")
        else:
            a_hi = _tf32_big(a)
            a_lo = a - a_hi
            b_hi = _tf32_big(b)
            b_lo = b - b_hi
            if MODE == 1:
                za = tl.zeros((BM, BK), dtype=tl.float32)
                zb = tl.zeros((BN, BK), dtype=tl.float32)
                a4 = _interleave4(a_hi, a_lo, a_hi, za, BM, BK)
                b4 = tl.trans(_interleave4(tl.trans(b_hi), tl.trans(b_hi), tl.trans(b_lo), zb, BN, BK))
                acc = tl.dot(a4, b4, acc, input_precision="tf32")
            else:
                a2 = tl.reshape(tl.join(a_hi, a_lo), (BM, 2 * BK))
                b2 = tl.trans(tl.reshape(tl.join(tl.trans(b_hi), tl.trans(b_hi)), (BN, 2 * BK)))
                acc = tl.dot(a2, b2, acc, input_precision="tf32")
                acc = tl.dot(a_hi, b_lo, acc, input_precision="tf32")
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def hand(a: torch.Tensor, b: torch.Tensor, mode: str, bm: int, warps: int, out: torch.Tensor | None = None):
    """C = a @ b by :func:`gemm_kernel` in ``mode`` (:data:`MODES`), BM x 64 x 32 tiles, 3 stages."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=torch.float32) if out is None else out
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, 64),)
    gemm_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                      BM=bm, BN=64, BK=32, MODE=MODES[mode], num_warps=warps, num_stages=3)
    return c


def sm90_report() -> list[str]:
    """Compile each hand-written variant for sm_90 (no GPU): registers, spills and per-loop counts."""
    import re   # noqa: PLC0415
    from triton.backends.compiler import GPUTarget   # noqa: PLC0415
    from triton.compiler import ASTSource   # noqa: PLC0415
    from sm90 import resources   # noqa: PLC0415
    lines = []
    for mode in MODES:
        for bm, warps in ((64, 4), (128, 8)):
            sig = {n: "i32" for n in ("M", "N", "K", "sam", "sak", "sbk", "sbn", "scm", "scn")}
            sig.update(a_ptr="*fp32", b_ptr="*fp32", c_ptr="*fp32", BM="constexpr", BN="constexpr", BK="constexpr",
                       MODE="constexpr")
            consts = dict(BM=bm, BN=64, BK=32, MODE=MODES[mode], sak=1, sbn=1, scn=1)
            for s in ("sak", "sbn", "scn"):
                sig[s] = "constexpr"
            attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(gemm_kernel.arg_names)
                     if n in ("a_ptr", "b_ptr", "c_ptr", "N", "K", "sam", "sbk", "scm")}
            src = ASTSource(gemm_kernel, sig, consts, attrs)
            k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=3))
            ir = k.asm["ttgir"]
            loop = ir[ir.find("scf.for"):]
            lines.append(f"{mode:14s} {bm}x64 {warps} warps: {resources(k.asm['cubin'])} smem {k.metadata.shared} "
                         f"loop: wgmma {loop.count('ttng.warp_group_dot ')} waits {loop.count('warp_group_dot_wait')} "
                         f"local_alloc {len(re.findall('ttg.local_alloc %', loop))} "
                         f"convert_layout {loop.count('ttg.convert_layout')}")
            print(lines[-1], flush=True)
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--M", type=int, nargs="+", default=[20000, 100000])
    ap.add_argument("--out", default=None)
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, M = 200 (checks the script)")
    ap.add_argument("--sm90", action="store_true", help="compile for sm_90 here and report (no GPU)")
    a = ap.parse_args(argv)
    if a.sm90:
        sm90_report()
        return 0
    dev = "cuda"
    Ms = a.M
    if a.dry_run:
        suite.DRY, dev, Ms = True, "cpu", [200]
    rows = []
    for M in Ms:
        g = torch.Generator().manual_seed(M)
        A = (torch.randn(M, 128, generator=g) / M ** 0.5).to(dev)
        B = torch.randn(128, 128, generator=g).to(dev)
        ref = A.double() @ B.double()
        sched = dt.Schedule(tile={"i": 64, "j": 64, "k": 32}, grid=("i", "j"), group={"i": 8}, num_warps=4,
                            num_stages=3, precision="tf32x3", access="pointer")
        impls = {"dtriton tf32x3 64x64": (lambda k=dt.compile(matmul, sched): k(A, B))}
        for mode in MODES:
            for bm, warps in ((64, 4), (128, 8)):
                impls[f"{mode} {bm}x64 {warps} warps"] = (lambda m=mode, bm=bm, w=warps: hand(A, B, m, bm, w))
        for name, fn in impls.items():
            try:
                out = fn()
                err = suite.relerr(out.cpu(), ref.cpu())
                us = suite.graph_time_us(fn)
                rows.append(dict(M=M, impl=name, kernel_us=round(us, 2), rel_err=err))
            except Exception as e:  # noqa: BLE001 - one failing row must not hide the others
                rows.append(dict(M=M, impl=name, kernel_us=None, rel_err=None, note=f"{type(e).__name__}: {str(e)[:200]}"))
            print(rows[-1], flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "split_dot_probe.json"), "w") as f:
            json.dump(dict(date=time.strftime("%Y-%m-%dT%H:%M:%S"), device="cpu" if a.dry_run else torch.cuda.get_device_name(),
                           rows=rows), f, indent=1)
    print("\n| M | impl | kernel us | rel err |\n|---:|---|---:|---:|")
    for r in rows:
        err = "failed" if r["rel_err"] is None else f"{r['rel_err']:.1e}"
        print(f"| {r['M']} | {r['impl']} | {r['kernel_us']} | {err} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
