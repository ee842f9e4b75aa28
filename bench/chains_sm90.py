"""Compile the H200 plan of each fused GEMM chain (bench/chain_catalogue.py) for sm_90 on a machine without a GPU.

    PYTHONPATH=src python3 bench/chains_sm90.py [--cases max_pool,group_norm] [--dtypes float16,float32]
                                                [--schedule JSON] [--out DIR]

Each chain is planned at its benchmark shape as a CUDA call would be (the binding is told it is on the GPU;
the tensors are uninitialised CPU tensors), printed with pointer loads (TMA descriptors need a device to be
built; the tiles, accumulators and epilogues are the same), and every kernel is compiled by Triton for sm_90
without launching anything. Per kernel: registers and stack per thread (from ``cuobjdump``: a stack means
spilled registers), shared memory, warps and wgmma instructions. This is how the fused max-pooling and
group-norm kernels of fp32 chains were found to spill with 128-column tiles (issue 14). ``--schedule`` merges
JSON fields into each chain's heuristic schedule. Exits 1 when a kernel spills.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chain_catalogue import CHAINS, make_inputs, shape_of  # noqa: E402
import dtriton as dt  # noqa: E402
from dtriton.backends import default_backend  # noqa: E402
from dtriton.plan.smem import program_fits  # noqa: E402
from dtriton.schedule import fits_smem, shrink  # noqa: E402
from sm90 import (TL, add_options, compile_sm90, cuda_schedule, load_kernels, merge_fields, options, plan_for_cuda,  # noqa: E402
                  ptr_types, render, resources, signature)

#: shared memory one program may use (the backend's limit; an H200's when no GPU is visible)
SMEM_BYTES = default_backend().limits.smem_bytes


def _plan_fits(alg, args, sched) -> bool:
    """Whether every kernel ``sched`` plans for ``alg(*args)`` on the GPU fits :data:`SMEM_BYTES`
    (:func:`dtriton.plan.smem.program_fits`; a schedule that does not plan: False)."""
    try:
        return program_fits(plan_for_cuda(alg, args, sched)[2], SMEM_BYTES) is None
    except dt.DTritonError:
        return False


def compile_chain(chain, dtype: torch.dtype, extra: dict, out: str) -> list[str]:
    """Plan, print and compile the kernels of one chain; returns one line per kernel."""
    _, args = make_inputs(chain, *shape_of(chain, None), dtype, "cpu", empty=True)
    alg = chain.alg
    b, sched = cuda_schedule(alg, args)
    sched = merge_fields(sched.replace(access="pointer"), extra)
    # the runtime's shared-memory fit (Kernel._fitted): a default schedule is shrunk before its first launch
    # until the rough bound and the estimate of every planned kernel fit
    while not extra and not (fits_smem(alg, sched, dtype.itemsize, SMEM_BYTES) and _plan_fits(alg, args, sched)):
        smaller = shrink(sched, b.axis_sizes)
        if smaller is None:
            break
        sched = smaller
    b, sched, prog = plan_for_cuda(alg, args, sched)
    src, metas = render(prog)
    mod = load_kernels(src, out, f"{chain.name}_{TL[dtype]}")
    # pointer types: the call's dtypes; a buffer's as planned (plan/buffers.py: a 16-bit chain's GEMM buffers
    # are 16-bit, statistics fp32)
    ptr = ptr_types(alg, b, prog)
    lines = [f"{chain.name} {TL[dtype]}: {sched.to_json()}"]
    for m in metas:
        fn = getattr(mod, m.name)
        ck = compile_sm90(fn, m, *signature(alg, fn, m, ptr))
        ptx = ck.asm["ptx"]
        lines.append(f"  {m.name}: {resources(ck.asm['cubin'])}, smem {ck.metadata.shared} B, {m.ir.num_warps} warps, "
                     f"wgmma {ptx.count('wgmma.mma_async')}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="", help="comma-separated substrings of chain names (default: all)")
    ap.add_argument("--dtypes", default="float16,float32")
    add_options(ap)
    a = ap.parse_args(argv)
    out, extra = options(a, "chains_sm90_")
    cases = [c for c in a.cases.split(",") if c]
    spills = []
    for d in a.dtypes.split(","):
        for c in [c for c in CHAINS if not cases or any(s in c.name for s in cases)]:
            lines = compile_chain(c, getattr(torch, d), extra, out)
            print("\n".join(lines), flush=True)
            spills += [ln for ln in lines[1:] if "stack 0," not in ln]
    print(f"sources in {out}; {len(spills)} kernel(s) with a stack (spilled registers)")
    return 1 if spills else 0


if __name__ == "__main__":
    sys.exit(main())
