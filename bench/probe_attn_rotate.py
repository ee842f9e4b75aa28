"""Probe (issue 18): does rotating the online-softmax loop overlap the next key tile's Q K^T with this tile's softmax?

    PYTHONPATH=src python3 bench/probe_attn_rotate.py [--shapes 4x32x4096x128,4x32x1024x64] [--dry-run]

Two hand-written Triton forward kernels in the shape dtriton prints for non-causal attention (pointer loads,
128-row query tile, key tiles of ``BJ``, base-2 exponentials, running max and row sum as vectors):

- ``plain``: per key tile, S = Q K^T, then the online-softmax update and acc += P V.
- ``rotated``: S for tile j+1 is issued before tile j's softmax and P V (the loop carries S), so the tensor
  cores can run Q K^T(j+1) while the warps compute exp2 of tile j (FlashAttention-3's intra-warpgroup
  overlap, here left to Triton's wgmma wait placement); the last tile is peeled.

Timed by CUDA-graph replay against torch SDPA (default backend) and dtriton's default schedule; each kernel is
checked against fp32 SDPA first. With ``--dry-run`` the kernels run on Triton's interpreter at a tiny shape (no
timing). If ``rotated`` is clearly faster, the online pass's loop is worth rotating in the planner.

Found on this CPU by compiling both for sm_90 (Triton 3.6, 8 warps): Triton makes the rotated loop's Q K^T(j+1)
an async wgmma but waits for it (``warp_group_dot_wait {pendings = 0}``) right after issuing it, before the
softmax, also when its only use is the loop's yield: a dot result carried to the next iteration is waited for at
once unless it is that dot's own accumulator. So the rotation alone gives no overlap in Triton 3.6.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

if "--dry-run" in sys.argv:  # the interpreter must be chosen before triton is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@triton.jit
def softmax_step(s, c, m, l, acc, v):
    s = s * c
    m_new = tl.maximum(m, tl.max(s, 1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(s - m_new[:, None])
    l = l * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return m_new, l, acc

@triton.jit
def fwd(Q, K, V, O, T, scale, BI: tl.constexpr, BJ: tl.constexpr, D: tl.constexpr, ROTATE: tl.constexpr):
    pid_i = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh.to(tl.int64) * T * D
    offs_i = pid_i * BI + tl.arange(0, BI)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + base + offs_i[:, None] * D + offs_d[None, :])
    c = scale * 1.4426950408889634
    m = tl.full((BI,), -float("inf"), tl.float32)
    l = tl.zeros((BI,), tl.float32)
    acc = tl.zeros((BI, D), tl.float32)
    offs_j = tl.arange(0, BJ)
    if ROTATE:
        k = tl.load(K + base + offs_j[None, :] * D + offs_d[:, None])
        s = tl.dot(q, k)
        for j0 in range(0, T - BJ, BJ):
            k_next = tl.load(K + base + (j0 + BJ + offs_j)[None, :] * D + offs_d[:, None])
            s_next = tl.dot(q, k_next)
            v = tl.load(V + base + (j0 + offs_j)[:, None] * D + offs_d[None, :])
            m, l, acc = softmax_step(s, c, m, l, acc, v)
            s = s_next
        v = tl.load(V + base + (T - BJ + offs_j)[:, None] * D + offs_d[None, :])
        m, l, acc = softmax_step(s, c, m, l, acc, v)
    else:
        for j0 in range(0, T, BJ):
            k = tl.load(K + base + (j0 + offs_j)[None, :] * D + offs_d[:, None])
            s = tl.dot(q, k)
            v = tl.load(V + base + (j0 + offs_j)[:, None] * D + offs_d[None, :])
            m, l, acc = softmax_step(s, c, m, l, acc, v)
    tl.store(O + base + offs_i[:, None] * D + offs_d[None, :], (acc / l[:, None]).to(O.dtype.element_ty))


def run_kernel(q, k, v, bi, bj, warps, stages, rotate):
    B, H, S, D = q.shape
    o = torch.empty_like(q)

    def go():
        fwd[(S // bi, B * H)](q, k, v, o, S, D ** -0.5, BI=bi, BJ=bj, D=D, ROTATE=rotate, num_warps=warps,
                              num_stages=stages)
        return o
    return go


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4x32x4096x128,4x32x1024x64")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    dev = "cpu" if a.dry_run else "cuda"
    shapes = ["1x2x64x16"] if a.dry_run else a.shapes.split(",")
    configs = [(16, 16, 4, 1)] if a.dry_run else [(128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 8, 2), (128, 128, 8, 3)]
    rows = []
    for shp in shapes:
        B, H, S, D = (int(x) for x in shp.split("x"))
        q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=torch.float16) for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
        flops = 4 * B * H * S * S * D
        cands = []
        if not a.dry_run:
            import dtriton as dt
            import dtriton.library as L
            att = dt.compile(L.attention)
            cands += [("sdpa", lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)),
                      ("dtriton default", lambda: att(q, k, v, D ** -0.5))]
        for bi, bj, w, st in configs:
            for rot in (False, True):
                cands.append((f"{'rotated' if rot else 'plain'} {bi}x{bj} w{w} s{st}",
                              run_kernel(q, k, v, bi, bj, w, st, rot)))
        for name, fn in cands:
            try:
                out = fn()
                err = ((out.float() - ref).norm() / ref.norm()).item()
                if a.dry_run:
                    us = float("nan")
                else:
                    us = triton.testing.do_bench_cudagraph(fn, rep=100) * 1000
            except Exception as e:  # noqa: BLE001 - a kernel over a resource limit is a row
                print(f"{shp:18s} {name:28s} failed: {' '.join(str(e).split())[:150]}", flush=True)
                continue
            rows.append((shp, name, us, err))
            print(f"{shp:18s} {name:28s} {us:9.1f} us {flops / us / 1e6:7.1f} TFLOP/s  err {err:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
