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
import importlib.util
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from chain_catalogue import CHAINS, make_inputs, shape_of  # noqa: E402
from dtriton.plan.callspec import call_spec  # noqa: E402
from dtriton.plan.decide import plan_program  # noqa: E402
from dtriton.backends import default_backend  # noqa: E402
from dtriton.schedule import fits_smem, shrink  # noqa: E402
from sm90_compile import TL, resources  # noqa: E402

#: shared memory one program may use (the backend's limit; an H200's when no GPU is visible)
SMEM_BYTES = default_backend().limits.smem_bytes


def compile_chain(chain, dtype: torch.dtype, extra: dict, out: str) -> list[str]:
    """Plan, print and compile the kernels of one chain; returns one line per kernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    _, args = make_inputs(chain, *shape_of(chain, None), dtype, "cpu", empty=True)
    alg = chain.alg
    b = alg.bind(args)
    b.device = torch.device("cuda")
    sched = dt.compile(alg).complete(b).replace(access="pointer")
    if extra:
        sched = dt.Schedule.from_json(json.dumps(dict(json.loads(sched.to_json()), **extra)))
    # the runtime's shared-memory fit (Kernel._fitted): a default schedule is shrunk before its first launch
    while not extra and not fits_smem(alg, sched, dtype.itemsize, SMEM_BYTES):
        smaller = shrink(sched, b.axis_sizes)
        if smaller is None:
            break
        sched = smaller
    prog = plan_program(alg, sched, b, call_spec(alg, b, args, False))
    src, metas = default_backend().render(prog)
    path = os.path.join(out, f"{chain.name}_{TL[dtype]}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"sm90_{chain.name}_{TL[dtype]}", path)
    mod = importlib.util.module_from_spec(spec)
    mod._jit = triton.jit
    spec.loader.exec_module(mod)
    # pointer types: the inputs' dtype; a buffer's as planned (plan/buffers.py: a 16-bit chain's GEMM buffers
    # are 16-bit, statistics fp32)
    ptr = {p.name: TL[dtype] for p in alg.tensor_params} | {o.name: TL[dtype] for o in alg.outputs} | {
        n: TL[bs.torch_dtype] for n, bs in prog.buffers.items() if bs.torch_dtype in TL}
    lines = [f"{chain.name} {TL[dtype]}: {sched.to_json()}"]
    for m in metas:
        fn = getattr(mod, m.name)
        sig, consts = {}, {}
        unit = {f"{t}_s{n - 1}" for t, n in m.tensor_ndim.items() if n}
        for a in fn.arg_names:
            if a in m.consts or a in unit:
                sig[a], consts[a] = "constexpr", m.consts.get(a, 1)
            elif a.endswith("_ptr"):
                sig[a] = "*" + ptr.get(a[:-4], "fp32")
            else:
                sig[a] = "i32"
        attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if sig[a] != "constexpr"}
        ck = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": m.ir.num_warps, "num_stages": m.ir.num_stages})
        ptx = ck.asm["ptx"]
        lines.append(f"  {m.name}: {resources(ck.asm['cubin'])}, smem {ck.metadata.shared} B, {m.ir.num_warps} warps, "
                     f"wgmma {ptx.count('wgmma.mma_async')}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="", help="comma-separated substrings of chain names (default: all)")
    ap.add_argument("--dtypes", default="float16,float32")
    ap.add_argument("--schedule", default="", help="JSON fields merged into each chain's heuristic schedule")
    ap.add_argument("--out", default="", help="keep the sources here (default: a temporary folder)")
    a = ap.parse_args(argv)
    out = a.out or tempfile.mkdtemp(prefix="chains_sm90_")
    os.makedirs(out, exist_ok=True)
    extra = json.loads(a.schedule) if a.schedule else {}
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
