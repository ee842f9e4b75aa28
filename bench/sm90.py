"""Compile dtriton's GPU kernels for sm_90 (H100/H200) on a machine without a GPU, launching nothing.

The shared helper of bench/sm90_compile.py, chains_sm90.py, narrow_sm90.py, attention_sm90.py,
diffusion_sm90.py and the ``sm90`` mode of attention_bwd.py:

- :func:`plan_for_cuda`: the plan a CUDA call with these arguments would run (the binding is told it is
  on the GPU; the tensors may live on the meta device, nothing is allocated);
- :func:`load_kernels`: the printed module, written to a folder and imported;
- :func:`signature`: Triton's signature, constants and divisibility hints of one kernel as a launch
  specialises them (unit strides constant 1, pointers and integers multiples of 16, scalars typed);
- :func:`compile_sm90`: one kernel compiled for sm_90 by Triton's own ptxas;
- :func:`resources`: registers and spill stack per thread of a cubin (``cuobjdump`` ships with Triton);
- :func:`compile_or_report`: one kernel compiled, its PTX kept and one report line printed (a failure
  printed and skipped), with the PTX counts of :data:`PTX_COUNTS` a script asks for.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import tempfile
from typing import Any, Callable, Mapping

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import dtriton as dt
from dtriton.backends import default_backend
from dtriton.plan.callspec import call_spec
from dtriton.plan.decide import plan_program

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")

#: torch dtype -> Triton's name of a pointer's element type
TL = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64",
      torch.float8_e4m3fn: "fp8e4nv", torch.float8_e5m2: "fp8e5", torch.int8: "i8", torch.uint8: "u8",
      torch.int32: "i32", torch.int64: "i64"}


def merge_fields(sched: dt.Schedule, extra: Mapping[str, Any], per_key: bool = False) -> dt.Schedule:
    """``sched`` with the JSON fields ``extra`` put in (``per_key``: a dict field such as ``tile`` is
    merged key by key instead of replaced)."""
    base = json.loads(sched.to_json())
    for k, v in extra.items():
        base[k] = dict(base.get(k) or {}, **v) if per_key and isinstance(v, dict) else v
    return dt.Schedule.from_json(json.dumps(base))


def cuda_binding(alg, args):
    """The binding of ``alg(*args)``, told it is on the GPU."""
    b = alg.bind(args)
    b.device = torch.device("cuda")
    return b


def cuda_schedule(alg, args) -> tuple[Any, dt.Schedule]:
    """``(binding, the heuristic's complete schedule)`` of ``alg(*args)`` as a CUDA call."""
    b = cuda_binding(alg, args)
    return b, dt.compile(alg).complete(b)


def plan_for_cuda(alg, args, sched: dt.Schedule | None = None, tma: frozenset = frozenset(), arch: int = 0):
    """``(binding, complete schedule, Program)`` of ``alg(*args)`` as a CUDA call plans it, under
    ``sched`` (None: the heuristic's). ``tma``: the tensors the call spec counts as
    TMA-addressable (meta tensors have no address to check). ``arch``: the compute capability the
    call spec records (10 * major + minor; 0, the default, as a call without a GPU: no Gluon kernel,
    no dependent launch; 90 as on the H200)."""
    b, sched = cuda_schedule(alg, args) if sched is None else (cuda_binding(alg, args), sched)
    spec = dataclasses.replace(call_spec(alg, b, args, False, tma_ok=tma), arch=arch)
    return b, sched, plan_program(alg, sched, b, spec)


def load_kernels(src: str, out: str, name: str):
    """The printed module ``src``, written to ``<out>/<name>.py`` and imported (``_jit`` is
    ``triton.jit``, as the backend's loader sets it)."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{name}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(re.sub(r"\W", "_", f"sm90_{name}"), path)
    mod = importlib.util.module_from_spec(spec)
    mod._jit = triton.jit
    spec.loader.exec_module(mod)
    return mod


def signature(alg, fn, meta, ptr_type: Callable[[str], str], unit: set[str] | None = None,
              values: Mapping[str, int] | None = None) -> tuple[dict, dict, dict]:
    """Triton's ``(signature, constants, attributes)`` for kernel ``fn`` (printed for ``meta``).

    ``ptr_type(tensor or buffer name)`` gives a pointer's element type (``"fp16"``); host TMA
    descriptors are typed by their tensor and box. Stride arguments in ``unit`` are the constant 1
    (default: each tensor's last stride, as for contiguous tensors). Scalar arguments (``s_<name>``)
    are fp32, or i32 for ``int`` parameters of ``alg``. Pointers and integers are marked multiples of
    16. ``values`` (argument name -> the call's value, e.g. :func:`arg_values`) specialises as
    Triton does a real call: an integer equal to 1 is a constant, and one is marked a multiple of
    16 only when its value is (arguments without a value stay marked)."""
    unit = unit if unit is not None else {f"{t}_s{n - 1}" for t, n in meta.tensor_ndim.items() if n}
    values = values or {}
    descs = {d[0]: (d[1], d[2]) for d in meta.descs}
    floats = {f"s_{p.name}" for p in alg.params if getattr(p, "pytype", None) is float}
    sig, consts, attrs = {}, {}, {}
    for i, a in enumerate(fn.arg_names):
        if a in meta.consts or a in unit or (a not in floats and values.get(a) == 1):
            sig[a], consts[a] = "constexpr", meta.consts.get(a, 1)
            continue
        if a in descs:
            t, box = descs[a]
            sig[a] = f"tensordesc<{ptr_type(t)}[{','.join(map(str, box))}]>"
            continue
        sig[a] = "*" + ptr_type(a[:-4]) if a.endswith("_ptr") else "fp32" if a in floats else "i32"
        if sig[a] != "fp32" and values.get(a, 16) % 16 == 0:
            attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, consts, attrs


def arg_values(alg, b, args) -> dict[str, int]:
    """The value of each integer kernel argument of the call ``alg(*args)`` bound to ``b``: axis
    sizes (``size_<axis>``), size symbols (``dim_<S>``), int scalars (``s_<name>``) and the strides
    of the inputs and of contiguous outputs (``<tensor>_s<d>``)."""
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


def ptr_types(alg, b, prog=None, default: str = "fp32") -> Callable[[str], str]:
    """``ptr_type`` for :func:`signature`: the call's input and output dtypes, and (with ``prog``)
    each buffer's planned dtype; anything else ``default``."""
    dtypes = dict(b.dtypes) | {o.name: d for o, d in zip(alg.outputs, b.out_dtypes)}
    if prog is not None:
        dtypes |= {n: bs.torch_dtype for n, bs in prog.buffers.items()}
    return lambda name: TL.get(dtypes.get(name), default)


def compile_sm90(fn, meta, sig: dict, consts: dict, attrs: dict):
    """Kernel ``fn`` compiled for sm_90 with ``meta``'s warps, stages and register cap (Triton's
    CompiledKernel: ``asm["ptx"]``, ``asm["cubin"]``, ``asm["ttgir"]``, ``metadata.shared``)."""
    cap = {"maxnreg": meta.ir.max_registers} if meta.ir.max_registers else {}
    return triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": meta.ir.num_warps, "num_stages": meta.ir.num_stages, **cap})


def cuobjdump(cubin: bytes, *flags: str) -> str:
    """cuobjdump's text for a cubin (written to a temporary file) with ``flags``."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        return subprocess.run([CUOBJDUMP, *flags, f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)


def resources(cubin: bytes) -> str:
    """``"regs N stack N"`` of a cubin (cuobjdump's resource usage; a stack above 0 means spills)."""
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", cuobjdump(cubin, "--dump-resource-usage"))
    return f"regs {m.group(1)} stack {m.group(2)}" if m else "regs ?"


def sass_count(cubin: bytes) -> int:
    """The SASS instructions of a cubin (``cuobjdump -sass``; NOPs not counted)."""
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", cuobjdump(cubin, "-sass"))
    return sum(1 for op in ops if op != "NOP")


#: what :func:`compile_or_report` can count in a kernel's PTX: label -> the instruction prefixes counted
PTX_COUNTS = {"TMA loads": ("cp.async.bulk.tensor",), "cp.async": ("cp.async.cg", "cp.async.ca"),
              "ld.global": ("ld.global",), "st.shared": ("st.shared",), "ld.shared": ("ld.shared",),
              "mma.sync": ("mma.sync",), "fma": ("fma.rn",)}


def wgmma_kinds(ptx: str) -> list[tuple[str, ...]]:
    """The distinct ``wgmma`` instructions of a PTX as (shape, accumulator type, A type, B type)."""
    return sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(\w+)\.(\w+)\.(\w+)\.(\w+)", ptx)))


def compile_or_report(fn, meta, sig: tuple[dict, dict, dict], out: str, counts: tuple[str, ...] = (),
                      err_chars: int = 600):
    """Compile kernel ``fn`` (printed for ``meta``) for sm_90 with ``sig`` (:func:`signature`'s triple);
    write its PTX to ``<out>/<kernel>.ptx`` and print one line: registers and stack, shared memory, warps,
    the ``wgmma`` kinds and the :data:`PTX_COUNTS` named in ``counts``. A compile error is printed (its
    first ``err_chars`` characters) and None returned, so a script goes on with its next kernel; else
    Triton's CompiledKernel."""
    try:
        ck = compile_sm90(fn, meta, *sig)
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"  {meta.name}: FAILED to compile: {type(e).__name__}: {str(e)[:err_chars]}", flush=True)
        return None
    ptx = ck.asm["ptx"]
    with open(os.path.join(out, f"{meta.name}.ptx"), "w") as f:
        f.write(ptx)
    extra = "".join(f", {c} {sum(ptx.count(p) for p in PTX_COUNTS[c])}" for c in counts)
    print(f"  {meta.name}: {resources(ck.asm['cubin'])}, smem {ck.metadata.shared} B, {meta.ir.num_warps} warps, "
          f"wgmma {wgmma_kinds(ptx) or 'none'}{extra}", flush=True)
    return ck


def add_options(ap, schedule: bool = True) -> None:
    """The options every sm_90 script takes: ``--schedule JSON`` (fields merged into each case's
    heuristic schedule) and ``--out DIR`` (keep the sources and PTX)."""
    if schedule:
        ap.add_argument("--schedule", default="", help="JSON fields merged into each case's heuristic schedule")
    ap.add_argument("--out", default="", help="keep the sources and PTX here (default: a temporary folder)")


def options(a, prefix: str) -> tuple[str, dict]:
    """``(output folder, schedule fields)`` of parsed :func:`add_options` (a new temporary folder
    named ``prefix...`` when ``--out`` is not given)."""
    out = a.out or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(out, exist_ok=True)
    return out, json.loads(a.schedule) if getattr(a, "schedule", "") else {}


def dump_asm(kernel, folder: str, name: str, exts=("ttgir", "ptx")) -> None:
    """Write a compiled kernel's TTGIR and PTX as ``<folder>/<name>.<ext>``."""
    os.makedirs(folder, exist_ok=True)
    for ext in exts:
        with open(os.path.join(folder, f"{name}.{ext}"), "w") as f:
            f.write(kernel.asm[ext])


def render(prog):
    """``(source, kernel metas)`` of a planned program, printed by the default backend."""
    return default_backend().render(prog)
