"""Compile the H200 plans of the derived training kernels ahead of time for sm_90, on a machine
without a GPU: shared memory, registers and spills of every kernel (Triton 3.6's ``triton.compile``
for ``GPUTarget("cuda", 90, 32)`` and its bundled ``ptxas -v``). A kernel that fails here would
fail on the H200 too; one that spills is a candidate for more warps or smaller tiles.

    PYTHONPATH=src python3 bench/aot_check.py [--only attention_d64 layer_norm ...]

Cases: the saving forward and the backward (saved statistics, the heuristic's GPU schedule) of
layer norm and RMSNorm (fp16 4096x8192), softmax (fp16 4096x4096), cross-entropy (fp32
4096x32768) and attention, full and causal (fp16 B4 H16 S2048, head dims 64 and 128).
"""
import argparse
import dataclasses
import importlib.util
import os
import subprocess
import sys
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import dtriton as dt
from dtriton.backends.triton.kernel import render
from dtriton.grad import augmented_forward, saved_statistics
from dtriton.library import attention, causal_attention, cross_entropy, layer_norm, rms_norm, softmax
from dtriton.plan.decide import decide
from dtriton.plan.lower import lower
from dtriton.schedule.heuristics import complete_schedule

POINTER = {torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float32: "*fp32", torch.int64: "*i64",
           torch.int32: "*i32"}


def _module(src: str):
    """Load the printed module with ``_jit`` bound to ``triton.jit``."""
    path = os.path.join(tempfile.mkdtemp(), "aot_kernels.py")
    with open(path, "w") as f:
        f.write(src.replace("import triton.language as tl", "import triton.language as tl\n_jit = triton.jit", 1))
    spec = importlib.util.spec_from_file_location("aot_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ptxas(ptx: str) -> str:
    """``ptxas -v`` for sm_90a: the registers and spill line."""
    exe = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    r = subprocess.run([exe, "-v", "--gpu-name=sm_90a", f.name, "-o", os.devnull], capture_output=True, text=True)
    lines = [ln.split(":", 1)[-1].strip() for ln in r.stderr.splitlines() if "registers" in ln or "spill" in ln]
    return "; ".join(lines) or r.stderr.strip()[-200:]


def check(alg, args) -> list[str]:
    """One line per kernel of ``alg``'s GPU plan for ``args``: shared bytes, warps, registers, spills."""
    b = dataclasses.replace(alg.bind(args), device=torch.device("cuda"))
    sched = complete_schedule(alg, None, b)
    out_dtypes = {o.name: d for o, d in zip(alg.outputs, b.out_dtypes)}
    prog = lower(alg, sched, b.axis_sizes, {k: str(v).replace("torch.", "") for k, v in out_dtypes.items()})
    decide(prog, sched, b.dtypes, out_dtypes, False, False)
    src, metas = render(prog)
    mod = _module(src)
    lines = []
    for meta in metas:
        sig = {}
        for t in meta.tensors:
            dtype = b.dtypes.get(t) or out_dtypes.get(t) or prog.buffers[t].torch_dtype
            sig[f"{t}_ptr"] = POINTER[dtype]
        for t in meta.tensors:
            sig.update({f"{t}_s{d}": "i32" for d in range(meta.tensor_ndim[t])})
        sig.update({x: "i32" for x in meta.sizes})
        sig.update({x: "fp32" for x in meta.scalars})
        sig.update({c: "constexpr" for c in meta.consts})
        k = meta.ir
        try:
            c = triton.compile(ASTSource(getattr(mod, meta.name), sig, dict(meta.consts)),
                               target=GPUTarget("cuda", 90, 32), options=dict(num_warps=k.num_warps, num_stages=k.num_stages))
            lines.append(f"  {meta.name}: shared {c.metadata.shared} B, {k.num_warps} warps, {k.num_stages} stages; "
                         f"{_ptxas(c.asm['ptx'])}")
        except Exception as e:  # noqa: BLE001 - reported, the next kernel is checked too
            lines.append(f"  {meta.name}: FAILED {type(e).__name__}: {str(e)[:300]}")
    return lines


def _cases():
    """name -> (algorithm, forward arguments, shape and dtype of the upstream gradient)."""
    h = torch.float16
    cases = {
        "layer_norm": (layer_norm, [torch.empty(4096, 8192, dtype=h), torch.empty(8192, dtype=h),
                                    torch.empty(8192, dtype=h)], ((4096, 8192), h)),
        "rms_norm": (rms_norm, [torch.empty(4096, 8192, dtype=h), torch.empty(8192, dtype=h)], ((4096, 8192), h)),
        "softmax": (softmax, [torch.empty(4096, 4096, dtype=h)], ((4096, 4096), h)),
        "cross_entropy": (cross_entropy, [torch.empty(4096, 32768), torch.zeros(4096, dtype=torch.int64)],
                          ((4096,), torch.float32)),
    }
    for D in (64, 128):
        Q = torch.empty(4, 16, 2048, D, dtype=h)
        cases[f"attention_d{D}"] = (attention, [Q, Q, Q, D ** -0.5], (tuple(Q.shape), h))
        cases[f"attention_causal_d{D}"] = (causal_attention, [Q, Q, Q, D ** -0.5], (tuple(Q.shape), h))
    return cases


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help=f"cases (default: all): {' '.join(_cases())}")
    a = ap.parse_args(argv)
    cases = _cases()
    for name in a.only or list(cases):
        alg, args, (gshape, gdtype) = cases[name]
        names = saved_statistics(alg)
        aug, _ = augmented_forward(alg, names)
        print(f"{name}: forward saving {list(names)}", flush=True)
        print("\n".join(check(aug, args)), flush=True)
        sizes = alg.bind(args).axis_sizes
        stats = [torch.empty(tuple(sizes[ax] for ax in alg.stages[s].node.axes)) for s in names]
        for bwd in dt.grad(alg, save=names).algorithms:
            print(f"{name}: backward {bwd.name}", flush=True)
            print("\n".join(check(bwd, list(args) + [torch.empty(gshape, dtype=gdtype)] + stats)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
