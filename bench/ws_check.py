"""Where a warp-specialised attention kernel stops on the GPU: compile, first launch, or result.

    timeout 25 env PYTHONPATH=src python3 bench/ws_check.py [--shape 1x2x1024x64] [--raw] [--dry-run]

The fused attention forward under ``access="tma", warp_specialize=True, num_warps=4`` (descriptors
built in the kernel: Triton 3.6 then specialises the loop on sm_90, 12 warps) at a small shape
``BxHxSxD`` (fp16). Prints, flushed, one line per step with its wall time: planned and printed,
compiled (Triton's compile, without a launch), launched and synchronised, then the error against
fp32 SDPA. A line that never comes says where it stops (bench/probe_attention.py's
warp-specialised rows printed nothing within 90 s on the H200). ``--raw``: the control, a small
hand-written Triton kernel of the same loop with 2-d in-kernel descriptors over the (b, h, s) rows
(the form Triton's own Hopper attention uses), so a hang of dtriton's 4-d form can be told from
one of Triton's warp specialisation. ``--dry-run``: the interpreter (which ignores warp
specialisation: checks the script).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

if "--dry-run" in sys.argv:   # (before Triton is imported: its decorator then makes interpreted kernels)
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as R  # noqa: E402
from dtriton.library import attention  # noqa: E402


@triton.jit
def raw_attention(Q, K, V, O, scale, S, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, WS: tl.constexpr):
    """Online-softmax attention over contiguous [B*H*S, D] rows: one program per BM query rows of
    one head (program axis 1), K and V streamed BN rows at a time through 2-d descriptors."""
    row0 = tl.program_id(1) * S
    dq = tl.make_tensor_descriptor(Q, [tl.num_programs(1) * S, D], [D, 1], [BM, D])
    dk = tl.make_tensor_descriptor(K, [tl.num_programs(1) * S, D], [D, 1], [BN, D])
    dv = tl.make_tensor_descriptor(V, [tl.num_programs(1) * S, D], [D, 1], [BN, D])
    q = dq.load([row0 + tl.program_id(0) * BM, 0])
    c = scale * 1.4426950408889634
    m = tl.full([BM], -float("inf"), tl.float32)
    den = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for j in tl.range(0, S, BN, warp_specialize=WS):
        x = tl.dot(q, dk.load([row0 + j, 0]).T) * c
        m2 = tl.maximum(m, tl.max(x, 1))
        p = tl.exp2(x - m2[:, None])
        a = tl.exp2(m - m2)
        acc = tl.dot(p.to(tl.float16), dv.load([row0 + j, 0]), acc * a[:, None])
        den = den * a + tl.sum(p, 1)
        m = m2
    rows = row0 + tl.program_id(0) * BM + tl.arange(0, BM)
    tl.store(O + rows[:, None] * D + tl.arange(0, D)[None, :], (acc / den[:, None]).to(tl.float16))


def run_raw(Q, K, V, scale, dry: bool, ws: bool = True):
    """The control kernel on ``Q``, ``K``, ``V`` ([B, H, S, D] contiguous fp16)."""
    B, H, S, D = Q.shape
    out = torch.empty_like(Q)
    bm = 128 if not dry else 16
    if not dry:
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    raw_attention[(S // bm, B * H)](Q, K, V, out, scale, S, BM=bm, BN=min(64, bm), D=D, WS=ws and not dry,
                                    num_warps=4, num_stages=3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="1x2x1024x64")
    ap.add_argument("--raw", action="store_true", help="the hand-written 2-d descriptor control kernel")
    ap.add_argument("--no-ws", action="store_true", help="with --raw: the same kernel without warp specialisation "
                    "(the control of the control)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    B, H, S, D = (int(v) for v in (a.shape if not a.dry_run else "1x2x48x16").split("x"))
    Q, K, V = (torch.randn(B, H, S, D, device=dev, dtype=torch.float16) for _ in range(3))
    t0 = time.perf_counter()

    def say(what: str) -> None:
        print(f"{time.perf_counter() - t0:7.2f} s  {what}", flush=True)

    if a.raw:
        out = run_raw(Q, K, V, D ** -0.5, a.dry_run, not a.no_ws)
        say("raw 2-d descriptor kernel compiled and launched")
        if not a.dry_run:
            torch.cuda.synchronize()
        say("finished (synchronised)")
        ref = F.scaled_dot_product_attention(Q.float(), K.float(), V.float(), scale=D ** -0.5)
        say(f"relative error against fp32 SDPA: {R.relerr(out, ref):.2e}")
        return 0
    tile = 128 if not a.dry_run else 16
    sched = dt.Schedule(grid=["b", "h", "i"], strategy={"j": "online", "d": "whole", "e": "whole"},
                        stages={"sum0": {"place": "fuse"}}, tile={"i": tile, "j": min(64, tile)}, access="tma",
                        warp_specialize=True, num_warps=4, num_stages=3)
    k = dt.compile(attention, sched)
    src = k.source_for(Q, K, V, D ** -0.5)
    say(f"planned and printed ({src.count('tl.make_tensor_descriptor')} in-kernel descriptors, "
        f"{'warp-specialised loop' if 'warp_specialize=True)' in src else 'NO warp-specialised loop'})")
    out = k(Q, K, V, D ** -0.5)
    say("compiled and launched")
    if not a.dry_run:
        torch.cuda.synchronize()
    say("finished (synchronised)")
    ref = F.scaled_dot_product_attention(Q.float(), K.float(), V.float(), scale=D ** -0.5)
    say(f"relative error against fp32 SDPA: {R.relerr(out, ref):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
