"""Compile 16-bit GEMM kernels (NN and NT, plain and persistent-flattened) for sm_90 on a machine without a GPU.

    PYTHONPATH=src python3 bench/gemm_sm90.py [--layouts NN,NT] [--dtypes float16] [--n 4096]
                                             [--schedule JSON] [--only 0,2] [--out DIR]
    PYTHONPATH=src python3 bench/gemm_sm90.py --chains bias,mish [--schedule JSON] [--dtypes float16]

Each schedule of :data:`SCHEDULES` (or the one ``--schedule`` gives, merged into the first) is planned for a
CUDA call of ``library.matmul`` at n^3 with TMA-addressable tensors (host descriptors, as the runtime builds
them), printed, and compiled by Triton for sm_90 without launching anything. Per kernel: registers and stack
per thread (a stack means spills), shared memory, the ``scf.for`` loops left in the TTGIR (a flattened
persistent kernel keeps one), the wgmma and TMA store instructions of the PTX. This is the CPU check of
issue 14's persistent flattened GEMM (:mod:`dtriton.plan.persistent`) before it runs on the H200.

``--chains`` (names of bench/chain_catalogue.py, or ``all``) compiles the kernels of those fused chains instead,
under the heuristic's H200 schedule (``--schedule`` fields merged in) with every input, output and buffer
TMA-addressable (bench/chains_sm90.py prints them with pointer loads): one line per kernel, whether the plan
flattened it, its registers, spills and shared memory (an H200 block takes at most 232,448 bytes).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import dtriton.library  # noqa: E402,F401
from sm90 import (TL, add_options, compile_sm90, dump_asm, load_kernels, options, plan_for_cuda, ptr_types,  # noqa: E402
                  render, resources, signature)

#: the schedules compiled (the persistent ones: one program per SM, each looping over grouped tiles)
SCHEDULES = [
    {"tile": {"i": 128, "j": 256, "k": 64}, "num_stages": 4, "num_warps": 8},
    {"tile": {"i": 128, "j": 256, "k": 64}, "num_stages": 3, "num_warps": 8, "persistent": 1},
    {"tile": {"i": 128, "j": 256, "k": 64}, "num_stages": 4, "num_warps": 8, "persistent": 1},
    {"tile": {"i": 128, "j": 256, "k": 64}, "num_stages": 3, "num_warps": 8, "persistent": 1, "store_pieces": 1},
    {"tile": {"i": 128, "j": 128, "k": 64}, "num_stages": 4, "num_warps": 8, "persistent": 1},
    {"tile": {"i": 256, "j": 128, "k": 64}, "num_stages": 3, "num_warps": 8, "persistent": 1},
    {"tile": {"i": 256, "j": 128, "k": 64}, "num_stages": 4, "num_warps": 8, "persistent": 1},
]


def compile_one(layout: str, dtype: torch.dtype, n: int, fields: dict, out: str) -> str:
    """Plan, print and compile the matmul of ``layout`` under ``fields`` (plus TMA access and grouped order);
    one line of resources."""
    a = torch.empty(n, n, dtype=dtype, device="meta")
    w = torch.empty(n, n, dtype=dtype, device="meta")
    x = a if layout[0] == "N" else a.T
    y = w if layout[1] == "N" else w.T
    sched = dt.Schedule.from_json(json.dumps({"access": "tma", "group": {"i": 8}, **fields}))
    alg = dt.library.matmul
    b, sched, prog = plan_for_cuda(alg, (x, y), sched, tma=frozenset({"A", "B", "out"}))
    src, metas = render(prog)
    name = f"mm_{layout}_{TL[dtype]}_{abs(hash(sched.to_json())) % 10**6}"
    mod = load_kernels(src, out, name)
    m = metas[0]
    fn = getattr(mod, m.name)
    ck = compile_sm90(fn, m, *signature(alg, fn, m, ptr_types(alg, b, prog)))
    dump_asm(ck, out, name)
    ttgir, ptx = ck.asm["ttgir"], ck.asm["ptx"]
    k = prog.kernels[0]
    return (f"{layout} {TL[dtype]} {json.dumps(fields, sort_keys=True)}: {resources(ck.asm['cubin'])}, "
            f"smem {ck.metadata.shared} B, scf.for {ttgir.count('scf.for ')}, flatten {k.flatten}, "
            f"wgmma {ptx.count('wgmma.mma_async')}, tma stores {ptx.count('cp.async.bulk.tensor')}")


def compile_chains(names: str, dtype: torch.dtype, extra: dict, out: str) -> None:
    """Print one line per kernel of the chains ``names`` (comma-separated, or "all") planned for the H200."""
    from chain_catalogue import CHAINS, make_inputs, shape_of
    from sm90 import cuda_schedule, merge_fields
    for c in CHAINS:
        if names != "all" and c.name not in names.split(","):
            continue
        _, args = make_inputs(c, *shape_of(c, None), dtype, "cpu", empty=True)
        b, sched = cuda_schedule(c.alg, args)
        b, sched, prog = plan_for_cuda(c.alg, args, merge_fields(sched, extra),
                                       tma=frozenset([p.name for p in c.alg.tensor_params] + [o.name for o in c.alg.outputs]))
        src, metas = render(prog)
        mod = load_kernels(src, out, f"{c.name}_{TL[dtype]}")
        for m in metas:
            fn = getattr(mod, m.name)
            try:
                ck = compile_sm90(fn, m, *signature(c.alg, fn, m, ptr_types(c.alg, b, prog)))
                line = f"{resources(ck.asm['cubin'])}, smem {ck.metadata.shared} B"
            except Exception as e:  # noqa: BLE001 - a kernel over a limit is a line, not the end
                line = f"failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}"
            print(f"{c.name} {TL[dtype]} {m.name}: persistent {m.ir.persistent}, flatten {m.ir.flatten}, {line}; "
                  f"{sched.to_json()}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layouts", default="NN,NT")
    ap.add_argument("--dtypes", default="float16")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--only", default="", help="indices of SCHEDULES, comma-separated")
    ap.add_argument("--chains", default="", help="chain names of bench/chain_catalogue.py (or 'all') instead")
    add_options(ap)
    a = ap.parse_args()
    out, extra = options(a, "gemm_sm90_")
    if a.chains:
        for dtype in [getattr(torch, d) for d in a.dtypes.split(",")]:
            compile_chains(a.chains, dtype, extra, out)
        return 0
    scheds = [dict(SCHEDULES[0], **extra)] if extra else SCHEDULES
    if a.only:
        scheds = [s for i, s in enumerate(scheds) if str(i) in a.only.split(",")]
    for dtype in [getattr(torch, d) for d in a.dtypes.split(",")]:
        for lay in a.layouts.split(","):
            for s in scheds:
                try:
                    print(compile_one(lay, dtype, a.n, s, out), flush=True)
                except Exception as e:  # noqa: BLE001 - a schedule over a limit is a line, not the end
                    print(f"{lay} {TL[dtype]} {json.dumps(s, sort_keys=True)}: failed: {type(e).__name__}: "
                          f"{' '.join(str(e).split())[:300]}", flush=True)
    print(f"sources, TTGIR and PTX in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
