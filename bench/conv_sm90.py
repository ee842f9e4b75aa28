"""Compile the GPU kernels of bench/conv.py's conv2d and depthwise rows for sm_90 on a machine without a GPU.

    PYTHONPATH=src python3 bench/conv_sm90.py [--cases conv2d,depthwise] [--schedule JSON] [--out DIR]

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
import importlib.util
import json
import os
import re
import sys
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton import library as L  # noqa: E402
from dtriton.backends import default_backend  # noqa: E402
from dtriton.plan.callspec import call_spec  # noqa: E402
from dtriton.plan.decide import plan_program  # noqa: E402
from narrow_sm90 import PTR, registers  # noqa: E402


def cases():
    """(name, algorithm, args) at bench/conv.py's shapes (fp16, channels-last, on the meta device)."""
    m = dict(device="meta", dtype=torch.float16)
    x = torch.empty(32, 56, 56, 256, **m)
    return [("conv2d", L.conv2d_nhwc, (x, torch.empty(256, 3, 3, 256, **m), 1, 1, 1, 56, 56)),
            ("depthwise", L.depthwise_conv2d_nhwc, (x, torch.empty(3, 3, 256, **m), 1, 1, 56, 56))]


def merged(sched: dt.Schedule, fields: dict) -> dt.Schedule:
    """``sched`` with ``fields`` replaced (dict fields merged key by key)."""
    base = json.loads(sched.to_json())
    for k, v in fields.items():
        base[k] = dict(base.get(k) or {}, **v) if isinstance(v, dict) else v
    return dt.Schedule.from_json(json.dumps(base))


def arg_values(alg, b, args, prog) -> dict[str, int]:
    """The value of each integer kernel argument of this call: sizes, strides, dim sizes, scalars."""
    vals = {f"size_{a}": n for a, n in b.axis_sizes.items()}
    vals |= {f"dim_{s}": n for s, n in b.sizes.items()}
    vals |= {f"s_{p.name}": int(a) for p, a in zip(alg.params, args) if isinstance(a, int)}
    for p, a in zip(alg.params, args):
        if isinstance(a, torch.Tensor):
            vals |= {f"{p.name}_s{d}": st for d, st in enumerate(a.stride())}
    for o in alg.outputs:
        st = torch.empty([b.axis_sizes[a] for a in o.layout], device="meta").stride()
        vals |= {f"{o.name}_s{d}": s for d, s in enumerate(st)}
    return vals


def compile_case(name, alg, args, extra: dict, out: str) -> None:
    """Plan, print and compile one case; prints one line per kernel."""
    b = alg.bind(args)
    b.device = torch.device("cuda")
    sched = dt.compile(alg).complete(b)
    sched = merged(sched, extra) if extra else sched
    tma = frozenset(t.name for t in alg.tensor_params) | frozenset(o.name for o in alg.outputs)
    prog = plan_program(alg, sched, b, call_spec(alg, b, args, False, tma_ok=tma if sched.access == "tma" else frozenset()))
    src, metas = default_backend().render(prog)
    path = os.path.join(out, f"{name}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"conv_sm90_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    mod._jit = triton.jit
    spec.loader.exec_module(mod)
    print(f"{name}: {sched.to_json()}", flush=True)
    vals = arg_values(alg, b, args, prog)
    dtypes = dict(b.dtypes) | {o.name: d for o, d in zip(alg.outputs, b.out_dtypes)}
    for meta in metas:
        fn = getattr(mod, meta.name)
        descs = {d[0]: (d[1], d[2]) for d in meta.descs}
        sig, consts = {}, {}
        for arg in fn.arg_names:
            if arg in meta.consts or vals.get(arg) == 1:
                sig[arg], consts[arg] = "constexpr", meta.consts.get(arg, 1)
            elif arg in descs:
                tensor, box = descs[arg]
                sig[arg] = f"tensordesc<{PTR[dtypes[tensor]]}[{', '.join(str(x) for x in box)}]>"
            elif arg.endswith("_ptr"):
                sig[arg] = "*" + PTR[dtypes.get(arg[:-4], torch.float32)]
            else:
                sig[arg] = "i32"
        attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
                 if sig[a] != "constexpr" and (a.endswith("_ptr") or vals.get(a, 1) % 16 == 0)}
        try:
            ck = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                                options={"num_warps": meta.ir.num_warps, "num_stages": meta.ir.num_stages})
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"  {meta.name}: FAILED to compile: {type(e).__name__}: {str(e)[:600]}", flush=True)
            continue
        ptx = ck.asm["ptx"]
        with open(os.path.join(out, f"{meta.name}.ptx"), "w") as f:
            f.write(ptx)
        mma = sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(\w+)\.\w+\.(\w+)\.(\w+)", ptx)))
        print(f"  {meta.name}: {registers(ck.asm['cubin'])}, smem {ck.metadata.shared} B, {meta.ir.num_warps} warps, "
              f"wgmma {mma or 'none'}, TMA loads {ptx.count('cp.async.bulk.tensor')}, "
              f"cp.async {ptx.count('cp.async.cg') + ptx.count('cp.async.ca')}, ld.global {ptx.count('ld.global')}, "
              f"st.shared {ptx.count('st.shared')}, ld.shared {ptx.count('ld.shared')}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="conv2d,depthwise", help="comma-separated case names")
    ap.add_argument("--schedule", default="", help="JSON fields merged into each case's heuristic schedule")
    ap.add_argument("--out", default="", help="keep the sources and PTX here (default: a temporary folder)")
    a = ap.parse_args(argv)
    out = a.out or tempfile.mkdtemp(prefix="conv_sm90_")
    os.makedirs(out, exist_ok=True)
    extra = json.loads(a.schedule) if a.schedule else {}
    for name, alg, args in cases():
        if name in a.cases.split(","):
            compile_case(name, alg, args, extra, out)
    print(f"sources and PTX in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
