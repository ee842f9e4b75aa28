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
``wgmma`` and TMA (``cp.async.bulk.tensor``) instructions in the PTX, or the compiler's error.
Integer arguments are compiled as multiples of 16, last strides as 1 (contiguous tensors).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton.backends import default_backend  # noqa: E402
from dtriton.library import attention, causal_attention, gqa_attention  # noqa: E402
from dtriton.plan.callspec import call_spec, tma_addressable  # noqa: E402
from dtriton.plan.decide import plan_program  # noqa: E402
from sm90_compile import resources  # noqa: E402

TL = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}

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


def case(spec: str):
    """(algorithm, args on the meta device) of a case ``<kind><S>x<D>``."""
    kind, shape = spec[0], spec[1:]
    S, D = (int(v) for v in shape.split("x"))
    e = dict(dtype=torch.float16, device="meta")
    hk = 8 if kind == "g" else 32
    q = torch.empty(4, 32, S, D, **e)
    kv = (torch.empty(4, hk, S, D, **e), torch.empty(4, hk, S, D, **e))
    alg = {"n": attention, "c": causal_attention, "g": gqa_attention}[kind]
    return alg, (q, *kv, D ** -0.5) + ((4,) if kind == "g" else ())


def plan(alg, args, extra: dict):
    """The planned program and schedule of ``alg`` on ``args`` as a CUDA call, with ``extra``
    schedule fields merged into the heuristic's schedule (per-axis maps merged key by key)."""
    b = alg.bind(args)
    b.device = torch.device("cuda")
    sched = dt.compile(alg).complete(b)
    if extra:
        base = json.loads(sched.to_json())
        for k, v in extra.items():
            base[k] = dict(base.get(k) or {}, **v) if isinstance(v, dict) else v
        sched = dt.Schedule.from_json(json.dumps(base))
    tma = tma_addressable(alg, b, args) if sched.access == "tma" else frozenset()
    return plan_program(alg, sched, b, call_spec(alg, b, args, False, None, tma)), sched


def signature(fn, meta, dtype_of, int_scalars=frozenset()) -> tuple[dict, dict, dict]:
    """Triton's (signature, constants, attributes) for kernel ``fn`` of ``meta``: pointers typed by
    tensor, host descriptors by their box, scalar arguments fp32 unless in ``int_scalars``
    (``s_<name>``), integers as multiples of 16, last strides 1."""
    sig, consts = {}, {}
    unit = {f"{t}_s{n - 1}" for t, n in meta.tensor_ndim.items() if n}
    descs = {d: (t, box) for d, t, box, _perm in meta.descs}
    for a in fn.arg_names:
        if a in meta.consts or a in unit:
            sig[a], consts[a] = "constexpr", meta.consts.get(a, 1)
        elif a in descs:
            t, box = descs[a]
            sig[a] = f"tensordesc<{dtype_of(t)}[{','.join(map(str, box))}]>"
        elif a.endswith("_ptr"):
            sig[a] = "*" + dtype_of(a[:-4])
        else:
            sig[a] = "fp32" if a.startswith("s_") and a not in int_scalars else "i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
             if sig[a] == "i32" or sig[a].startswith("*")}
    return sig, consts, attrs


def compile_variant(spec: str, vname: str, out: str) -> None:
    alg, args = case(spec)
    try:
        prog, sched = plan(alg, args, VARIANTS[vname])
        src, metas = default_backend().render(prog)
    except Exception as e:  # noqa: BLE001 - a refused schedule is a result
        print(f"{spec} {vname}: refused: {' '.join(str(e).split())[:200]}", flush=True)
        return
    path = os.path.join(out, f"{spec}_{vname}.py")
    with open(path, "w") as f:
        f.write(src)
    spec_ = importlib.util.spec_from_file_location(f"attn_sm90_{spec}_{vname}".replace("-", "_"), path)
    mod = importlib.util.module_from_spec(spec_)
    mod._jit = triton.jit
    spec_.loader.exec_module(mod)
    for m in metas:
        fn = getattr(mod, m.name)
        ints = {f"s_{p.name}" for p in alg.params if getattr(p, "pytype", None) is int}
        sig, consts, attrs = signature(fn, m, lambda t: "fp16" if not t.startswith("buf_") else "fp32", ints)
        try:
            ck = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                                options={"num_warps": m.ir.num_warps, "num_stages": m.ir.num_stages})
        except Exception as e:  # noqa: BLE001
            print(f"{spec} {vname} {m.name}: compile error: {' '.join(str(e).split())[-300:]}", flush=True)
            continue
        ptx = ck.asm["ptx"]
        with open(os.path.join(out, f"{spec}_{vname}_{m.name}.ptx"), "w") as f:
            f.write(ptx)
        print(f"{spec} {vname} {m.name}: {resources(ck.asm['cubin'])}, smem {ck.metadata.shared} B, "
              f"{m.ir.num_warps} warps, {m.ir.num_stages} stages, wgmma {ptx.count('wgmma.mma_async')}, "
              f"tma {ptx.count('cp.async.bulk.tensor')}, setmaxnreg {ptx.count('setmaxnreg')}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="n4096x128,n1024x64")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default="", help="keep the sources and PTX here (default: a temporary folder)")
    a = ap.parse_args(argv)
    out = a.out or tempfile.mkdtemp(prefix="attn_sm90_")
    os.makedirs(out, exist_ok=True)
    for spec in a.cases.split(","):
        for v in a.variants.split(","):
            compile_variant(spec, v, out)
    print(f"sources and PTX in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
