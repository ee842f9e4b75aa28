"""Compile the GPU kernels of bench/narrow.py for sm_90 on a machine without a GPU (no launch).

    PYTHONPATH=src python3 bench/narrow_sm90.py [--schedule JSON] [--out DIR]

Each row of bench/narrow.py (fp8 rowwise and tensorwise, int8 -> int32, fp8 per-token quantisation) and
the saturating int8 quantisation is planned as a CUDA call at its bench shape (the binding is told it
is on the GPU; tensors live on the meta device), printed with pointer access (host TMA descriptors
need a device), and every kernel compiled by Triton for sm_90 with its own ptxas. Per kernel: registers,
shared memory, warps, and the tensor-core instructions in the PTX (``wgmma`` with its operand types),
so an 8-bit dot that fell back to fp32 or to FMA shows. ``--schedule`` merges JSON fields into each
case's heuristic schedule (``'{"access": "tma"}'`` compiles the TMA form the heuristic picks at these sizes).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from narrow import E4, fp8_blockwise, fp8_rowwise, fp8_tensorwise, int4_linear, int8_mm, quantise_fp8  # noqa: E402
from sm90 import (add_options, compile_or_report, cuda_schedule, load_kernels, merge_fields, options,  # noqa: E402
                  plan_for_cuda, ptr_types, render, signature)


@dt.algorithm
def quantise_int8(X: dt.Tensor["M", "K"]):
    """Per-token int8 quantisation (the saturating integer cast's helper)."""
    i, k = dt.axes("i k")
    scale = dt.maximum(dt.cast(dt.max(dt.abs(X[i, k]), over=k), torch.float32), 1e-12) / 127.0
    return dt.cast(X[i, k] / scale, torch.int8, saturate=True)[i, k], scale[i]


@dt.algorithm
def quantised_linear(X: dt.Tensor["M", "K"], W: dt.Tensor["N", "K"], sx: dt.Tensor["M"], sw: dt.Tensor["One"]):
    """bf16 activations quantised to e4m3 in the dot's prologue (a saturating cast), fp8 weights."""
    i, j, k = dt.axes("i j k")
    q = dt.cast(X[i, k] / sx[i], E4, saturate=True)
    return dt.cast(sx[i] * sw[0] * dt.sum(q * W[j, k], over=k), torch.bfloat16)[i, j]


def cases():
    """(name, algorithm, args on the meta device) at bench/narrow.py's shapes."""
    m = dict(device="meta")
    a = torch.empty(4096, 4096, dtype=E4, **m)
    bt = torch.empty(4096, 4096, dtype=E4, **m).t()
    ai = torch.empty(4096, 4096, dtype=torch.int8, **m)
    v = torch.empty(4096, **m)
    x = torch.empty(8192, 4096, dtype=torch.bfloat16, **m)
    return [("fp8_rowwise", fp8_rowwise, (a, bt, v, v)), ("fp8_tensorwise", fp8_tensorwise, (a, bt, v[:1])),
            ("fp8_blockwise", fp8_blockwise, (a, bt, torch.empty(4096, 32, **m), torch.empty(32, 32, **m))),
            ("quantised_linear", quantised_linear, (x[:4096], a, v, v[:1])),
            ("int8_mm", int8_mm, (ai, torch.empty(4096, 4096, dtype=torch.int8, **m).t())),
            ("int4_linear", int4_linear, (torch.empty(4096, 4096, dtype=torch.float16, **m),
                                          torch.empty(4096, 2048, dtype=torch.uint8, **m), v)), ("quantise_fp8", quantise_fp8, (x,)), ("quantise_int8", quantise_int8, (x,))]


def compile_case(name, alg, args, extra: dict, out: str) -> None:
    _, sched = cuda_schedule(alg, args)
    sched = merge_fields(sched, {"access": "pointer", **extra})
    # (meta tensors have no data pointer: every input and output counts as TMA-addressable)
    tma = frozenset(t.name for t in alg.tensor_params) | frozenset(o.name for o in alg.outputs)
    b, sched, prog = plan_for_cuda(alg, args, sched, tma if sched.access == "tma" else frozenset())
    src, metas = render(prog)
    mod = load_kernels(src, out, name)
    print(f"{name}: {sched.to_json()}", flush=True)
    ptr = ptr_types(alg, b, prog)
    # each tensor's unit-stride dim (a transposed view's is not its last): Triton specialises a stride of 1
    unit = {f"{t}_s{d}" for t, d in b.unit_dims.items() if d >= 0}
    for meta in metas:
        fn = getattr(mod, meta.name)
        unit |= {f"{t}_s{n - 1}" for t, n in meta.tensor_ndim.items() if n and t not in b.unit_dims}
        compile_or_report(fn, meta, signature(alg, fn, meta, ptr, unit), out, ("mma.sync", "fma"), err_chars=400)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated case names")
    add_options(ap)
    a = ap.parse_args(argv)
    out, extra = options(a, "narrow_sm90_")
    for name, alg, args in cases():
        if not a.only or name in a.only.split(","):
            compile_case(name, alg, args, extra, out)
    print(f"sources and PTX in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
