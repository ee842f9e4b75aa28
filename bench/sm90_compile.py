"""Compile the GPU kernels of the issue-16 reductions for sm_90 on a machine without a GPU.

    PYTHONPATH=src python3 bench/sm90_compile.py [--cases in,bn,gn,ln,fro,ap,mp] [--dtypes float16,float32]
                                                 [--schedule JSON] [--out DIR]

Each case (the library's instance/batch/group/layer(C,H,W) norms, Frobenius normalisation and the 2x2
average/max pools at the shapes of bench/reductions.py) is planned as a CUDA call would be (the binding is told it is on the
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
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import dtriton as dt
from dtriton.backends import default_backend
from dtriton.library import (avg_pool2d, batch_norm, frobenius_normalize, group_norm, instance_norm, layer_norm_chw,
                             max_pool2d)
from dtriton.plan.callspec import call_spec
from dtriton.plan.decide import plan_program

TL = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def case(name: str, dtype: torch.dtype):
    """(algorithm, args on the meta device) of a case at the bench shape."""
    e = dict(dtype=dtype, device="meta")
    if name == "bn":
        return batch_norm, (torch.empty(64, 64, 512, 512, **e), torch.empty(64, **e), torch.empty(64, **e))
    if name == "gn":
        return group_norm, (torch.empty(16, 8, 8, 256, 256, **e),)
    if name in ("ap", "mp"):   # 2x2 pools of 16x64x512x512 over its block view
        return avg_pool2d if name == "ap" else max_pool2d, (torch.empty(16, 64, 256, 2, 256, 2, **e),)
    algs = {"in": instance_norm, "ln": layer_norm_chw, "fro": frobenius_normalize}
    if name not in algs:
        raise SystemExit(f"unknown case {name!r}; use in, bn, gn, ln, fro, ap, mp")
    return algs[name], (torch.empty(16, 64, 256, 256, **e),)


def resources(cubin: bytes) -> str:
    """``REG:n STACK:n`` of a cubin, from cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    out = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    os.unlink(f.name)
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", out)
    return f"regs {m.group(1)} stack {m.group(2)}" if m else "regs ?"


def compile_case(name: str, dtype: torch.dtype, extra: dict, out: str) -> None:
    alg, args = case(name, dtype)
    b = alg.bind(args)
    b.device = torch.device("cuda")
    sched = dt.compile(alg).complete(b)
    if extra:
        sched = dt.Schedule.from_json(json.dumps(dict(json.loads(sched.to_json()), **extra)))
    prog = plan_program(alg, sched, b, call_spec(alg, b, args, False))
    src, metas = default_backend().render(prog)
    path = os.path.join(out, f"{name}_{TL[dtype]}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"sm90_{name}_{TL[dtype]}", path)
    mod = importlib.util.module_from_spec(spec)
    mod._jit = triton.jit
    spec.loader.exec_module(mod)
    print(f"{name} {TL[dtype]}: {sched.to_json()}")
    ptrs = {p.name: TL[dtype] for p in alg.tensor_params} | {o.name: TL[dtype] for o in alg.outputs}
    for m in metas:
        fn = getattr(mod, m.name)
        sig, consts = {}, {}
        # every tensor here is contiguous: its last stride is 1, which Triton specialises on
        unit = {f"{t}_s{n - 1}" for t, n in m.tensor_ndim.items() if n}
        for a in fn.arg_names:
            if a in m.consts or a in unit:
                sig[a], consts[a] = "constexpr", m.consts.get(a, 1)
            else:
                sig[a] = "*" + ptrs.get(a[:-4], "fp32") if a.endswith("_ptr") else "i32"
        attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if sig[a] != "constexpr"}
        ck = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": m.ir.num_warps, "num_stages": m.ir.num_stages})
        ptx = ck.asm["ptx"]
        with open(os.path.join(out, f"{m.name}_{TL[dtype]}.ptx"), "w") as f:
            f.write(ptx)
        with open(os.path.join(out, f"{m.name}_{TL[dtype]}.cubin"), "wb") as f:
            f.write(ck.asm["cubin"])
        print(f"  {m.name}: {resources(ck.asm['cubin'])}, smem {ck.metadata.shared} B, {m.ir.num_warps} warps, "
              f"ld.global.v4 {ptx.count('ld.global.v4')}, ld.global other {ptx.count('ld.global') - ptx.count('ld.global.v4')}, "
              f"cp.async {ptx.count('cp.async.')}, "
              f"bar.sync {ptx.count('bar.sync')}, st.shared {ptx.count('st.shared')}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="in,bn,gn,ln,fro")
    ap.add_argument("--dtypes", default="float16,float32")
    ap.add_argument("--schedule", default="", help="JSON fields merged into each case's heuristic schedule")
    ap.add_argument("--out", default="", help="keep the sources and PTX here (default: a temporary folder)")
    a = ap.parse_args(argv)
    out = a.out or tempfile.mkdtemp(prefix="sm90_")
    os.makedirs(out, exist_ok=True)
    extra = json.loads(a.schedule) if a.schedule else {}
    for name in a.cases.split(","):
        for d in a.dtypes.split(","):
            compile_case(name, getattr(torch, d), extra, out)
    print(f"sources and PTX in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
