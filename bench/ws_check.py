"""Where a warp-specialised attention kernel stops on the GPU: compile, first launch, or result.

    timeout 25 env PYTHONPATH=src python3 bench/ws_check.py [--shape 1x2x1024x64] [--dry-run]

The fused attention forward under ``access="tma", warp_specialize=True, num_warps=4`` (descriptors
built in the kernel: Triton 3.6 then specialises the loop on sm_90, 12 warps) at a small shape
``BxHxSxD`` (fp16). Prints, flushed, one line per step with its wall time: planned and printed,
compiled (Triton's compile, without a launch), launched and synchronised, then the error against
fp32 SDPA. A line that never comes says where it stops (bench/probe_attention.py's
warp-specialised rows printed nothing within 90 s on the H200). ``--dry-run``: the interpreter
(which ignores warp specialisation: checks the script).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as R  # noqa: E402
from dtriton.library import attention  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="1x2x1024x64")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    B, H, S, D = (int(v) for v in (a.shape if not a.dry_run else "1x2x40x16").split("x"))
    Q, K, V = (torch.randn(B, H, S, D, device=dev, dtype=torch.float16) for _ in range(3))
    t0 = time.perf_counter()

    def say(what: str) -> None:
        print(f"{time.perf_counter() - t0:7.2f} s  {what}", flush=True)

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
