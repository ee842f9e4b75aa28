"""Compile the GPU kernels of bench/conv.py's conv2d, depthwise and conv_transpose2d (phases, channels-last)
rows for sm_90 on a machine without a GPU.

    PYTHONPATH=src python3 bench/conv_sm90.py [--cases conv2d,conv2d_wn,depthwise,transpose] [--schedule JSON] [--out DIR]

(``conv2d_wn``: the weight stored (R, Q, C, O), its output channels contiguous: the GEMM's B operand N-major.)

Each case is planned as a CUDA call at its bench shape would be (the binding is told it is on the GPU;
tensors live on the meta device and count as TMA-addressable, as the bench's contiguous fp16 tensors
are), printed, and every kernel compiled by Triton for sm_90 with its own ptxas, host TMA descriptors
typed by their boxes. Integer arguments are specialised as Triton specialises a real call's: 1 as a
constant, multiples of 16 as such (the values of the bench call). Per kernel: registers and stack per
thread (a stack means spills), shared memory, warps, ``wgmma`` instructions with their operand types,
TMA loads (``cp.async.bulk.tensor``) and pointer loads (``cp.async`` of 16-byte chunks, ``ld.global``).
``--schedule`` merges JSON fields into each case's heuristic schedule (dict fields key by key,
as bench/conv.py's ``--variants``).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conv import conv_transpose2d_phases_nhwc  # noqa: E402
from dtriton import library as L  # noqa: E402
from sm90 import (add_options, arg_values, compile_or_report, cuda_schedule, load_kernels, merge_fields,  # noqa: E402
                  options, plan_for_cuda, ptr_types, render, signature)


def cases():
    """(name, algorithm, args) at bench/conv.py's shapes (fp16, channels-last, on the meta device)."""
    m = dict(device="meta", dtype=torch.float16)
    x = torch.empty(32, 56, 56, 256, **m)
    return [("conv2d", L.conv2d_nhwc, (x, torch.empty(256, 3, 3, 256, **m), 1, 1, 1, 56, 56)),
            ("depthwise", L.depthwise_conv2d_nhwc, (x, torch.empty(3, 3, 256, **m), 1, 1, 56, 56)),
            ("conv2d_wn", L.conv2d_nhwc, (x, torch.empty(3, 3, 256, 256, **m).permute(3, 0, 1, 2), 1, 1, 1, 56, 56)),
            ("transpose", conv_transpose2d_phases_nhwc, (torch.empty(32, 28, 28, 128, **m),
                                                         torch.empty(128, 3, 3, 128, **m), 2, 1, 28, 28, 2))]


def compile_case(name, alg, args, extra: dict, out: str) -> None:
    """Plan, print and compile one case; prints one line per kernel."""
    _, sched = cuda_schedule(alg, args)
    sched = merge_fields(sched, extra, per_key=True)
    tma = frozenset(t.name for t in alg.tensor_params) | frozenset(o.name for o in alg.outputs)
    b, sched, prog = plan_for_cuda(alg, args, sched, tma if sched.access == "tma" else frozenset())
    src, metas = render(prog)
    mod = load_kernels(src, out, name)
    print(f"{name}: {sched.to_json()}", flush=True)
    vals = arg_values(alg, b, args)
    ptr = ptr_types(alg, b)
    for meta in metas:
        fn = getattr(mod, meta.name)
        compile_or_report(fn, meta, signature(alg, fn, meta, ptr, unit=set(), values=vals), out,
                          ("TMA loads", "cp.async", "ld.global", "st.shared", "ld.shared"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="conv2d,depthwise", help="comma-separated case names")
    add_options(ap)
    a = ap.parse_args(argv)
    out, extra = options(a, "conv_sm90_")
    for name, alg, args in cases():
        if name in a.cases.split(","):
            compile_case(name, alg, args, extra, out)
    print(f"sources and PTX in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
