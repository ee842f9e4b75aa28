"""Probe: the Triton IR of the hand-written TMA matmul (bench/probe_nt.py) for NN and NT fp16 at
4096^3, 128x256x64, 3 stages: counts of the shared-memory and dot operations in the TTGIR, the shared
memory used, and the TTGIR lines around the dot, to see whether the K-major B tile of NT takes a
register round trip (local_load + local_alloc) before the wgmma. GPU only.

    PYTHONPATH=src python3 bench/probe_nt_ir.py [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_nt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    from triton.tools.tensor_descriptor import TensorDescriptor
    mm = probe_nt.hand_kernel()
    n, (bm, bn, bk) = 4096, (128, 256, 64)
    for lay in ("NN", "NT"):
        A = torch.randn(n, n, device="cuda", dtype=torch.float16)
        B = torch.randn(n, n, device="cuda", dtype=torch.float16)
        y = B if lay == "NN" else B.T
        c = torch.empty(n, n, device="cuda", dtype=torch.float16)
        b_t = y.stride(0) == 1
        ad = TensorDescriptor.from_tensor(A, [bm, bk])
        bd = TensorDescriptor.from_tensor(y.T if b_t else y, [bn, bk] if b_t else [bk, bn])
        cd = TensorDescriptor.from_tensor(c, [bm, bn])
        k = mm[(n // bm * n // bn,)](ad, bd, cd, n, n, n, BM=bm, BN=bn, BK=bk, A_T=False, B_T=b_t,
                                     num_warps=8, num_stages=3)
        ir = k.asm["ttgir"]
        ops = {op: len(re.findall(op, ir)) for op in ("ttg.local_alloc", "ttg.local_load", "ttg.memdesc_trans",
                                                       "tt.trans", "ttng.warp_group_dot ", "ttng.async_tma_copy",
                                                       "ttg.convert_layout", "ttng.warp_group_dot_wait")}
        print(f"{lay}: shared {k.metadata.shared} B, {ops}", flush=True)
        lines = ir.splitlines()
        for i, line in enumerate(lines):
            if "warp_group_dot " in line or "memdesc_trans" in line or "tt.trans" in line:
                print("   ", line.strip()[:230])
        sm = k.asm.get("ptx", "")
        print(f"    ptx: wgmma {sm.count('wgmma.mma_async')}, ldmatrix {sm.count('ldmatrix')}, "
              f"stmatrix {sm.count('stmatrix')}, cp.async.bulk.tensor {sm.count('cp.async.bulk.tensor')}")
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, f"hand_{lay}.ttgir"), "w") as f:
                f.write(ir)


if __name__ == "__main__":
    main()
