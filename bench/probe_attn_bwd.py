"""What Triton 3.6 itself reaches for the attention backward on the H200 (issue 15): hand-written kernels, no dtriton.

    PYTHONPATH=src python3 bench/probe_attn_bwd.py [--cases d64,d128] [--out DIR] [--dry-run]

The derived backward (bench/attention_bwd.py) runs at 0.671 ms for B4 H16 S2048 D64 against SDPA's (cuDNN) 0.428 ms
(s5); the issue's 0.8x fwd+bwd mark needs about 0.52 ms. This probe answers whether a FlashAttention-2 style
backward written by hand in Triton 3.6 gets there, so a miss can be told apart from Triton's floor:

- ``pre``: ``delta = rowsum(dO * O)`` (fp32), one kernel;
- ``dkdv``: a program per (batch*head, key tile of BN rows) loops over the query tiles (BM rows): the scores
  transposed ``S^T = K Q^T``, ``P^T = exp2(S^T * scale * log2 e - lse2)`` from the forward's base-2 log-sum-exp,
  ``dV += P^T dO``, ``dP^T = V dO^T``, ``dS^T = P^T (dP^T - delta)``, ``dK += dS^T Q``; with ``ATOMIC`` it also adds
  ``dS K`` (a query tile's share of dQ) into an fp32 dQ buffer with atomics (5 units of S*T*D work instead of 7);
  the "tma-reduce" variants add that tile with one TMA bulk reduce-add (``desc.atomic_add``) instead;
- ``dq`` (without ``ATOMIC``): a program per query tile loops over the key tiles: ``S``, ``P``, ``dP``, ``dS``,
  ``dQ += dS K``.

Inputs are contiguous (B, H, S, D) fp16, S a multiple of every tile (no masks). Each variant is checked against fp32
autograd of the plain softmax attention first, then timed with triton's do_bench beside SDPA's
backward (``torch.autograd.grad`` of its output, its default backend). ``--dry-run``: the interpreter, tiny shapes.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch

if "--dry-run" in sys.argv:   # the interpreter must be chosen before the kernels are decorated
    os.environ["TRITON_INTERPRET"] = "1"
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R  # noqa: E402  (the suite's timing)
from dtriton.backends.triton.npcompat import install as install_numpy_shim  # noqa: E402

LOG2E = 1.4426950408889634


@triton.jit
def _pre(o_ptr, do_ptr, delta_ptr, D: tl.constexpr, BM: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    offs = rows[:, None] * D + tl.arange(0, D)[None, :]
    o = tl.load(o_ptr + offs).to(tl.float32)
    do = tl.load(do_ptr + offs).to(tl.float32)
    tl.store(delta_ptr + rows, tl.sum(o * do, axis=1))


@triton.jit
def _dkdv(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr, dq_desc, S, qk_scale, sm_scale,
          D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, ATOMIC: tl.constexpr, TMA: tl.constexpr):
    bh = tl.program_id(1).to(tl.int64)
    base = bh * S * D
    kr = tl.program_id(0) * BN + tl.arange(0, BN)
    d = tl.arange(0, D)
    k = tl.load(k_ptr + base + kr[:, None] * D + d[None, :])
    v = tl.load(v_ptr + base + kr[:, None] * D + d[None, :])
    dk = tl.zeros((BN, D), tl.float32)
    dv = tl.zeros((BN, D), tl.float32)
    for start in range(0, S, BM):
        qr = start + tl.arange(0, BM)
        q = tl.load(q_ptr + base + qr[:, None] * D + d[None, :])
        do = tl.load(do_ptr + base + qr[:, None] * D + d[None, :])
        lse = tl.load(lse_ptr + bh * S + qr)
        dlt = tl.load(delta_ptr + bh * S + qr)
        st = tl.dot(k, tl.trans(q))                                   # [BN, BM]
        pt = tl.math.exp2(st * qk_scale - lse[None, :])
        dv += tl.dot(pt.to(tl.float16), do)
        dpt = tl.dot(v, tl.trans(do))
        dst = pt * (dpt - dlt[None, :])
        dst16 = dst.to(tl.float16)
        dk += tl.dot(dst16, q)
        if ATOMIC:
            dqp = tl.dot(tl.trans(dst16), k) * sm_scale               # [BM, D]
            if TMA:   # one bulk reduce-add of the tile by the TMA unit (cp.reduce.async.bulk.tensor)
                dq_desc.atomic_add([(bh * S + start).to(tl.int32), 0], dqp)
            else:
                tl.atomic_add(dq_ptr + base + qr[:, None] * D + d[None, :], dqp, sem="relaxed")
    tl.store(dk_ptr + base + kr[:, None] * D + d[None, :], (dk * sm_scale).to(tl.float16))
    tl.store(dv_ptr + base + kr[:, None] * D + d[None, :], dv.to(tl.float16))


@triton.jit
def _dq(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, S, qk_scale, sm_scale,
        D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    bh = tl.program_id(1).to(tl.int64)
    base = bh * S * D
    qr = tl.program_id(0) * BM + tl.arange(0, BM)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + base + qr[:, None] * D + d[None, :])
    do = tl.load(do_ptr + base + qr[:, None] * D + d[None, :])
    lse = tl.load(lse_ptr + bh * S + qr)
    dlt = tl.load(delta_ptr + bh * S + qr)
    dq = tl.zeros((BM, D), tl.float32)
    for start in range(0, S, BN):
        kr = start + tl.arange(0, BN)
        k = tl.load(k_ptr + base + kr[:, None] * D + d[None, :])
        v = tl.load(v_ptr + base + kr[:, None] * D + d[None, :])
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])
        dp = tl.dot(do, tl.trans(v))
        ds = (p * (dp - dlt[:, None])).to(tl.float16)
        dq += tl.dot(ds, k)
    tl.store(dq_ptr + base + qr[:, None] * D + d[None, :], (dq * sm_scale).to(tl.float16))


@triton.jit
def _cast(src, dst, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + o, tl.load(src + o).to(tl.float16))


def backward(q, k, v, o, do, lse2, cfg):
    """dQ, dK, dV of softmax(Q K^T / sqrt(D)) V for contiguous (B, H, S, D) fp16 tensors; ``lse2`` (B, H, S) fp32
    is the forward's log-sum-exp of the scaled scores in base 2. ``cfg``: (BN, BM, warps, stages) of the dK/dV
    kernel, (BMq, BNq, warps, stages) of the dQ kernel or None for atomic dQ."""
    B, H, S, D = q.shape
    sm = 1.0 / math.sqrt(D)
    delta = torch.empty(B, H, S, device=q.device, dtype=torch.float32)
    _pre[(B * H * S // 64,)](o, do, delta, D=D, BM=64)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    (bn, bm, w, st), qcfg = cfg[:2]
    tma = len(cfg) > 2 and cfg[2] == "tma"
    atomic = qcfg is None
    dq32 = torch.zeros(q.shape, device=q.device, dtype=torch.float32) if atomic else None
    dq = torch.empty_like(q)
    desc = None
    if tma:
        from triton.tools.tensor_descriptor import TensorDescriptor
        desc = TensorDescriptor.from_tensor(dq32.view(B * H * S, D), block_shape=[bm, D])
    _dkdv[(S // bn, B * H)](q, k, v, do, lse2, delta, dk, dv, dq32 if atomic else dq, desc, S, sm * LOG2E, sm,
                            D=D, BM=bm, BN=bn, ATOMIC=atomic, TMA=tma, num_warps=w, num_stages=st)
    if atomic:
        _cast[(q.numel() // 1024,)](dq32, dq, BLOCK=1024)
    else:
        qm, qn, qw, qs = qcfg
        _dq[(S // qm, B * H)](q, k, v, do, lse2, delta, dq, S, sm * LOG2E, sm, D=D, BM=qm, BN=qn,
                              num_warps=qw, num_stages=qs)
    return dq, dk, dv


VARIANTS = {   # name: ((BN, BM, warps, stages) of dK/dV, (BM, BN, warps, stages) of dQ or None: atomic dQ)
    "kv128x64 w8 s2 / q128x64 w8 s2": ((128, 64, 8, 2), (128, 64, 8, 2)),
    "kv128x32 w4 s3 / q128x32 w4 s3": ((128, 32, 4, 3), (128, 32, 4, 3)),
    "kv128x64 w4 s2 / q64x128 w4 s2": ((128, 64, 4, 2), (64, 128, 4, 2)),
    "kv64x64 w4 s3 / q64x64 w4 s3": ((64, 64, 4, 3), (64, 64, 4, 3)),
    "kv128x64 w8 s2 / q64x64 w4 s3": ((128, 64, 8, 2), (64, 64, 4, 3)),
    "kv128x64 w8 s2 atomic dQ": ((128, 64, 8, 2), None),
    "kv128x32 w4 s3 atomic dQ": ((128, 32, 4, 3), None),
    "kv128x64 w8 s2 tma-reduce dQ": ((128, 64, 8, 2), None, "tma"),
    "kv128x32 w4 s3 tma-reduce dQ": ((128, 32, 4, 3), None, "tma"),
    "kv128x64 w8 s3 tma-reduce dQ": ((128, 64, 8, 3), None, "tma"),
    "kv64x64 w4 s3 tma-reduce dQ": ((64, 64, 4, 3), None, "tma"),
}
CASES = {"d64": (4, 16, 2048, 64), "d128": (4, 32, 4096, 128)}


def _time_us(fn) -> float:
    """Median us of ``fn`` (triton's do_bench, as bench/attention_bwd.py times SDPA); one call on the interpreter."""
    if R.DRY:
        return R.call_time_us(fn, n=1)
    from triton.testing import do_bench
    return 1e3 * do_bench(fn, warmup=10, rep=50)


def _backend(q, k, v) -> str:
    """The first SDPA backend (torch's priority order) that accepts these inputs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for b in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        try:
            with sdpa_kernel(b):
                torch.nn.functional.scaled_dot_product_attention(q[:, :, :128], k[:, :, :128], v[:, :, :128])
            return b.name
        except RuntimeError:
            continue
    return "?"


def run_case(name, shape, dry):
    B, H, S, D = shape
    dev = R.DEV
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, generator=g).to(dev, torch.float16) for _ in range(3))
    do = torch.randn(B, H, S, D, generator=g).to(dev, torch.float16)
    sm = 1.0 / math.sqrt(D)
    with torch.no_grad():
        s = (q.float() @ k.float().transpose(-1, -2)) * sm
        lse = torch.logsumexp(s, dim=-1)
        o = (torch.softmax(s, dim=-1) @ v.float()).to(torch.float16)
        lse2 = (lse * LOG2E).contiguous()
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    ref = torch.autograd.grad(torch.softmax(qf @ kf.transpose(-1, -2) * sm, -1) @ vf, (qf, kf, vf), do.float())
    del s
    rows = []
    if not dry:
        qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs)
        fn = lambda: torch.autograd.grad(out, (qs, ks, vs), do, retain_graph=True)   # noqa: E731
        rows.append({"case": name, "impl": "SDPA backward", "us": _time_us(fn), "backend": _backend(qs, ks, vs)})
    for vname, cfg in VARIANTS.items():
        if dry and cfg[0][0] > S:
            continue
        try:
            got = backward(q, k, v, o, do, lse2, cfg)
            err = max(float(((a.float() - b).abs().max() / b.abs().max())) for a, b in zip(got, ref))
            ok = err < 2e-2
            us = _time_us(lambda cfg=cfg: backward(q, k, v, o, do, lse2, cfg)) \
                if ok else float("nan")
            rows.append({"case": name, "impl": vname, "us": us, "rel_err": err, "ok": ok})
        except Exception as e:   # noqa: BLE001  (a variant that does not compile is a result too)
            rows.append({"case": name, "impl": vname, "us": float("nan"), "error": f"{type(e).__name__}: {e}"[:200]})
        print(rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="d64,d128")
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
        install_numpy_shim()
    table = []
    for c in a.cases.split(","):
        shape = (1, 2, 128, 16) if a.dry_run else CASES[c]
        table += run_case(c, shape, a.dry_run)
    sdpa = {r["case"]: r["us"] for r in table if r["impl"] == "SDPA backward"}
    print("\n| case | impl | backward us | SDPA / this | rel err |\n|---|---|---:|---:|---:|")
    for r in table:
        ratio = sdpa.get(r["case"], float("nan")) / r["us"] if r["us"] == r["us"] else float("nan")
        print(f"| {r['case']} | {r['impl']} | {r['us']:.1f} | {ratio:.3f} | {r.get('rel_err', 0):.1e} "
              f"{r.get('error', '')}|")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "probe_attn_bwd.json"), "w") as f:
            json.dump(table, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
