"""Compile attention forward kernels for sm_90 on a machine without a GPU: which schedules compile,
their registers, spills and shared memory (issue 18).

    PYTHONPATH=src python3 bench/attention_sm90.py [--cases n4096x128,c4096x128,g4096x128]
                                                   [--variants default,tma-ws-128] [--out DIR] [--list]

A case is ``n`` (non-causal), ``c`` (causal) or ``g`` (grouped heads, H32 over 8 K/V heads) at
B4 H32 S=T, fp16, written ``<kind><S>x<D>``. Each is planned as a CUDA call (the binding is told it
is on the GPU; tensors live on the meta device, nothing is allocated), with the heuristic schedule
merged with a variant's fields (``VARIANTS``), printed, and each kernel compiled by Triton for
sm_90 with Triton's own ptxas. One line per kernel: registers and stack per thread (from
``cuobjdump``; a stack above 0 means spills), shared memory, warps, stages and the count of
``wgmma``, TMA (``cp.async.bulk.tensor``), ``ex2.approx``, ``mul.f32`` and ``fma.rn.f32``
instructions in the PTX, or the compiler's error. ``--saving``: the saving forward of the derived
backward (``augmented_forward(alg, saved_statistics(alg))``: the output, the row log-sum-exp in fp32
and the normalised sum1) instead of the plain forward.
Integer arguments are compiled as multiples of 16, last strides as 1 (contiguous tensors).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dtriton.grad import augmented_forward, saved_statistics  # noqa: E402
from dtriton.library import attention, causal_attention, gqa_attention  # noqa: E402
from dtriton.plan.callspec import tma_addressable  # noqa: E402
from sm90 import (add_options, compile_sm90, cuda_schedule, load_kernels, merge_fields, options, plan_for_cuda,  # noqa: E402
                  ptr_types, render, resources, signature)

#: name -> schedule fields merged into the heuristic's schedule
VARIANTS = {
    "default": {},
    "i128j64w8s3": dict(tile={"i": 128, "j": 64}, num_warps=8, num_stages=3),
    "i128j128w8s2": dict(tile={"i": 128, "j": 128}, num_warps=8, num_stages=2),
    "i128j128w8s3": dict(tile={"i": 128, "j": 128}, num_warps=8, num_stages=3),
    "i128j64w4s3": dict(tile={"i": 128, "j": 64}, num_warps=4, num_stages=3),
    "tma-128x64-w8s3": dict(tile={"i": 128, "j": 64}, num_warps=8, num_stages=3, access="tma"),
    "tma-128x128-w8s3": dict(tile={"i": 128, "j": 128}, num_warps=8, num_stages=3, access="tma"),
    "tma-ws-128x64-w4s3": dict(tile={"i": 128, "j": 64}, num_warps=4, num_stages=3, access="tma",
                               warp_specialize=True),
    "tma-ws-128x128-w4s2": dict(tile={"i": 128, "j": 128}, num_warps=4, num_stages=2, access="tma",
                                warp_specialize=True),
    "tma-ws-128x128-w8s3": dict(tile={"i": 128, "j": 128}, num_warps=8, num_stages=3, access="tma",
                                warp_specialize=True),
    "tma-ws-128x128-w8s2": dict(tile={"i": 128, "j": 128}, num_warps=8, num_stages=2, access="tma",
                                warp_specialize=True),
}


def case(spec: str, saving: bool = False):
    """(algorithm, args on the meta device) of a case ``<kind><S>x<D>`` (``saving``: the saving
    forward of its derived backward)."""
    kind, shape = spec[0], spec[1:]
    S, D = (int(v) for v in shape.split("x"))
    e = dict(dtype=torch.float16, device="meta")
    hk = 8 if kind == "g" else 32
    q = torch.empty(4, 32, S, D, **e)
    kv = (torch.empty(4, hk, S, D, **e), torch.empty(4, hk, S, D, **e))
    alg = {"n": attention, "c": causal_attention, "g": gqa_attention}[kind]
    if saving:
        alg = augmented_forward(alg, saved_statistics(alg))[0]
    return alg, (q, *kv, D ** -0.5) + ((4,) if kind == "g" else ())


def plan(alg, args, extra: dict):
    """The binding, planned program and schedule of ``alg`` on ``args`` as a CUDA call, with ``extra``
    schedule fields merged into the heuristic's schedule (per-axis maps merged key by key)."""
    b, sched = cuda_schedule(alg, args)
    sched = merge_fields(sched, extra, per_key=True)
    tma = tma_addressable(alg, b, args) if sched.access == "tma" else frozenset()
    return b, plan_for_cuda(alg, args, sched, tma)[2], sched


def compile_variant(spec: str, vname: str, out: str, saving: bool = False) -> None:
    alg, args = case(spec, saving)
    try:
        b, prog, sched = plan(alg, args, VARIANTS[vname])
        src, metas = render(prog)
    except Exception as e:  # noqa: BLE001 - a refused schedule is a result
        print(f"{spec} {vname}: refused: {' '.join(str(e).split())[:200]}", flush=True)
        return
    mod = load_kernels(src, out, f"{spec}_{vname}")
    for m in metas:
        fn = getattr(mod, m.name)
        sig, consts, attrs = signature(alg, fn, m, ptr_types(alg, b, prog))
        try:
            ck = compile_sm90(fn, m, sig, consts, attrs)
        except Exception as e:  # noqa: BLE001
            print(f"{spec} {vname} {m.name}: compile error: {' '.join(str(e).split())[-300:]}", flush=True)
            continue
        ptx = ck.asm["ptx"]
        with open(os.path.join(out, f"{spec}_{vname}_{m.name}.ptx"), "w") as f:
            f.write(ptx)
        print(f"{spec} {vname} {m.name}: {resources(ck.asm['cubin'])}, smem {ck.metadata.shared} B, "
              f"{m.ir.num_warps} warps, {m.ir.num_stages} stages, wgmma {ptx.count('wgmma.mma_async')}, "
              f"tma {ptx.count('cp.async.bulk.tensor')}, setmaxnreg {ptx.count('setmaxnreg')}, "
              f"ex2 {ptx.count('ex2.approx')}, mul.f32 {ptx.count('mul.f32')}, fma.rn.f32 {ptx.count('fma.rn.f32')}",
              flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="n4096x128,n1024x64")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--saving", action="store_true", help="the saving forward (output and row statistics)")
    add_options(ap, schedule=False)
    a = ap.parse_args(argv)
    out, _ = options(a, "attn_sm90_")
    for spec in a.cases.split(","):
        for v in a.variants.split(","):
            compile_variant(spec, v, out, a.saving)
    print(f"sources and PTX in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
