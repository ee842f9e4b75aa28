"""Compile the GPU kernels of the issue-16 reductions for sm_90 on a machine without a GPU.

    PYTHONPATH=src python3 bench/sm90_compile.py [--cases in,bn,gn,ln,fro,ap,mp,mp3,ap3,sm,sl,xm] [--dtypes float16,float32]
                                                 [--schedule JSON] [--out DIR]

Each case (the library's instance/batch/group/layer(C,H,W) norms, Frobenius normalisation, the 2x2
average/max pools, the 3x3/s2 max and average pools and the one-dim sums and max at the shapes of bench/reductions.py) is planned as a CUDA call would be (the binding is told it is on the
GPU; nothing is allocated), printed, and every kernel is compiled by Triton for sm_90 (Triton's own
ptxas), without launching anything. Per kernel it prints the registers and stack per thread (from
``cuobjdump``), shared memory, warps, and counts of PTX instructions that matter for bandwidth:
128-bit global loads, barriers and shared-memory stores. ``--schedule`` merges JSON fields into
each case's heuristic schedule (e.g. ``'{"num_stages": 3}'``). ``--out`` keeps the sources and PTX.

This is how the per-step cross-warp folds of the fp16 norms were found (shared-memory stores and
two barriers per loop step). Integer arguments are compiled as "multiple of 16" and last strides
as 1 (contiguous tensors), as Triton specialises a real call's; the sizes and strides of a real
call may specialise further.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton.library import (avg_pool2d, avg_pool2d_window, batch_norm, frobenius_normalize, group_norm,  # noqa: E402
                             instance_norm, layer_norm_chw, max_pool2d, max_pool2d_window)
from reductions import max_mid, sum_last, sum_mid  # noqa: E402  (the one-dim cases, defined once there)
from sm90 import (TL, add_options, arg_values, compile_sm90, cuda_schedule, load_kernels, merge_fields,  # noqa: E402
                  options, plan_for_cuda, ptr_types, render, resources, sass_count, signature)


#: the one-dim reductions of bench/reductions.py (a mean is the sum divided)
DIMS = {"sm": sum_mid, "sl": sum_last, "xm": max_mid}


def case(name: str, dtype: torch.dtype):
    """(algorithm, args on the meta device) of a case at the bench shape."""
    e = dict(dtype=dtype, device="meta")
    if name == "bn":
        return batch_norm, (torch.empty(64, 64, 512, 512, **e), torch.empty(64, **e), torch.empty(64, **e))
    if name == "gn":
        return group_norm, (torch.empty(16, 8, 8, 256, 256, **e),)
    if name in ("ap", "mp"):   # 2x2 pools of 16x64x512x512 over its block view
        return avg_pool2d if name == "ap" else max_pool2d, (torch.empty(16, 64, 256, 2, 256, 2, **e),)
    if name in ("mp3", "ap3"):   # 3x3 windows, stride 2, padding 1, of 16x64x512x512 as 1024 images
        return max_pool2d_window if name == "mp3" else avg_pool2d_window, (torch.empty(1024, 512, 512, **e), 3, 2, 1,
                                                                            256, 256)
    if name in DIMS:   # one-dim reductions of 4096x4096x16 (bench/reductions.py --only dims)
        return DIMS[name], (torch.empty(4096, 4096, 16, **e),)
    algs = {"in": instance_norm, "ln": layer_norm_chw, "fro": frobenius_normalize}
    if name not in algs:
        raise SystemExit(f"unknown case {name!r}; use in, bn, gn, ln, fro, ap, mp, mp3, ap3, sm, sl, xm")
    return algs[name], (torch.empty(16, 64, 256, 256, **e),)


def compile_case(name: str, dtype: torch.dtype, extra: dict, out: str) -> None:
    alg, args = case(name, dtype)
    _, sched = cuda_schedule(alg, args)
    b, sched, prog = plan_for_cuda(alg, args, merge_fields(sched, extra), arch=90)   # (as on the H200)
    src, metas = render(prog)
    mod = load_kernels(src, out, f"{name}_{TL[dtype]}")
    print(f"{name} {TL[dtype]}: {sched.to_json()}")
    ptr = ptr_types(alg, b, prog)   # (buffers as planned: fp32, int32 arrival counters)
    for m in metas:
        fn = getattr(mod, m.name)
        # every tensor here is contiguous: its last stride is 1, which Triton specialises on
        ck = compile_sm90(fn, m, *signature(alg, fn, m, ptr, values=arg_values(alg, b, args)))
        ptx = ck.asm["ptx"]
        with open(os.path.join(out, f"{m.name}_{TL[dtype]}.ptx"), "w") as f:
            f.write(ptx)
        with open(os.path.join(out, f"{m.name}_{TL[dtype]}.cubin"), "wb") as f:
            f.write(ck.asm["cubin"])
        print(f"  {m.name}: {resources(ck.asm['cubin'])}, SASS {sass_count(ck.asm['cubin'])}, smem {ck.metadata.shared} B, {m.ir.num_warps} warps, "
              f"ld.global.v4 {ptx.count('ld.global.v4')}, ld.global other {ptx.count('ld.global') - ptx.count('ld.global.v4')}, "
              f"cp.async {ptx.count('cp.async.')}, "
              f"bar.sync {ptx.count('bar.sync')}, st.shared {ptx.count('st.shared')}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="in,bn,gn,ln,fro")
    ap.add_argument("--dtypes", default="float16,float32")
    add_options(ap)
    a = ap.parse_args(argv)
    out, extra = options(a, "sm90_")
    for name in a.cases.split(","):
        for d in a.dtypes.split(","):
            compile_case(name, getattr(torch, d), extra, out)
    print(f"sources and PTX in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
