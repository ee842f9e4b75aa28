"""Native steps: a differentiable call signature seen before, run as a C++ autograd node (issue 15).

A Python ``torch.autograd.Function`` costs the host about as much as a whole eager step of a
small operation: autograd's engine runs a CUDA node's backward on its device thread, which then
takes the GIL and runs Python frames. A native step moves the steady state of a
:class:`~dtriton.integrations.steps.ForwardStep` into C++ (``native_step.cpp``, built on first use
with ``torch.utils.cpp_extension``): its forward allocates the outputs, launches the compiled
Triton kernels through the CUDA driver and records a C++ node; the node's backward launches the
derived backward kernels with no Python frame and no GIL.

Every decision stays here, in Python: :func:`launcher_plan` turns a
:class:`~dtriton.backends.triton.fast.FastLauncher` (a call signature's allocations, grids and
arguments, fixed) into a plan of plain values (each kernel's parameter bytes packed as Triton's
launcher packs them, the pointer parameters named by address slot), which the C++ side carries
out. A backward whose incoming gradients' layout (strides, 16-byte alignment, which outputs got
one), inputs needing a gradient or stream differs from every registered variant calls back into
Python (the general path, which then registers a variant for it); so does a backward with
``create_graph=True``, which is refused there.

Native steps are on by default (``DTRITON_NATIVE_STEPS=0`` or :func:`set_enabled` turn them off;
``compile_autograd(native=...)`` decides per kernel). The first native step builds the extension
(about 30 s, once: torch caches it under ``TORCH_EXTENSIONS_DIR``, by default
``~/.cache/torch_extensions``), which needs a C++ compiler and ninja; where the build fails, one
warning says why and every step keeps the Python node. Results are the Python node's, bit for bit
(the same kernels on the same addresses' layouts); only the host's work per step differs.
"""

from __future__ import annotations

import functools
import os
import struct
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from .counters import counter_address
from .fast import C_ENTRY_MIDDLE, FastLauncher

__all__ = ["enabled", "set_enabled", "module", "launcher_plan", "register", "add_backward", "forward", "caller"]

#: ``struct`` formats of Triton's scalar parameter types (floats are packed from Python floats)
_SCALAR = {"i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "u1": "B", "u8": "B", "u16": "H", "u32": "I",
           "u64": "Q", "fp16": "e", "fp32": "f", "f32": "f", "fp64": "d"}

_state: dict[str, Any] = {"enabled": os.environ.get("DTRITON_NATIVE_STEPS", "1") != "0", "module": None,
                          "failed": None}


def enabled() -> bool:
    """Whether differentiable kernels that leave it open run their steady-state steps natively
    (:func:`set_enabled`)."""
    return _state["enabled"]


def set_enabled(flag: bool = True) -> None:
    """Turn native steps on or off for the differentiable kernels that leave it open (process-wide;
    ``DTRITON_NATIVE_STEPS=0`` turns them off at import). Steps already native stay so."""
    _state["enabled"] = bool(flag)


def module():
    """The built extension (building it on first call), or None when the build failed (warned
    once; no step becomes native from then on)."""
    if _state["module"] is None and _state["failed"] is None:
        try:
            from torch.utils.cpp_extension import load
            import triton
            inc = Path(triton.__file__).parent / "backends" / "nvidia" / "include"
            src = Path(__file__).with_name("native_step.cpp")
            _state["module"] = load(name="dtriton_native_step", sources=[str(src)], extra_include_paths=[str(inc)],
                                    extra_cflags=["-O2"], extra_ldflags=["-ldl"], verbose=False)
        except Exception as e:   # a compiler, ninja or header missing: keep the Python node
            _state["failed"] = f"{type(e).__name__}: {e}"
            warnings.warn(f"dtriton: native steps are off, their C++ extension did not build; differentiable "
                          f"kernels keep the Python autograd node (set DTRITON_NATIVE_STEPS=0 to skip the "
                          f"build): {_state['failed'][:400]}", RuntimeWarning, stacklevel=2)
    return _state["module"]


def _kernel_plan(call, types) -> dict | None:
    """One kernel's plan from a fast launcher's call ``(entry, grid, middle, sources, tail,
    extras)`` and its parameters' Triton types; None where it cannot be carried out natively (a
    per-call scalar or descriptor, a launch needing scratch memory, a pointer among constants)."""
    fn, grid, mid, srcs, tail, extras = call
    if types is None or extras or len(mid) != C_ENTRY_MIDDLE or len(srcs) + len(tail) != len(types):
        return None
    function, cooperative, pdl, _, _, meta = mid[:6]
    num_warps, num_ctas, shared = meta
    arena, offsets, ptrs = bytearray(), [], []
    for j, ty in enumerate(types):
        if ty == "constexpr":
            continue
        if not isinstance(ty, str):
            return None   # (a tuple parameter)
        arena += bytes(-len(arena) % 8)
        offsets.append(len(arena))
        if ty.startswith("*"):
            if j >= len(srcs):
                return None
            ptrs.append((len(offsets) - 1, srcs[j][0], srcs[j][1]))
            arena += bytes(8)
        elif j < len(srcs):
            return None
        elif ty == "bf16":
            arena += struct.pack("<I", struct.unpack("<I", struct.pack("<f", float(tail[j - len(srcs)])))[0])[2:]
        elif ty in _SCALAR:
            v = tail[j - len(srcs)]
            arena += struct.pack("<" + _SCALAR[ty], float(v) if ty.startswith("f") else int(v))
        else:
            return None
    for _ in range(2):   # global and profile scratch: none (a launch needing either is not native)
        arena += bytes(-len(arena) % 8)
        offsets.append(len(arena))
        arena += bytes(8)
    return {"function": int(function), "grid": list(grid), "block": 32 * int(num_warps), "ctas": int(num_ctas),
            "shared": int(shared), "cooperative": bool(cooperative), "pdl": bool(pdl), "arena": bytes(arena),
            "offsets": offsets, "ptrs": ptrs}


def launcher_plan(fl) -> dict | None:
    """The native plan of fast launcher ``fl`` (see the module), or None where a kernel of it
    cannot run natively or it allocates other than ``torch.empty``/``torch.zeros``."""
    if not isinstance(fl, FastLauncher) or fl.desc_slots or len(fl.param_types) != len(fl.calls):
        return None
    kernels = [_kernel_plan(c, t) for c, t in zip(fl.calls, fl.param_types)]
    if any(k is None for k in kernels) or any(a not in (torch.empty, torch.zeros) for a, _, _ in fl.separate):
        return None
    stream = address = 0
    if fl.counter_numel:   # the arrival counters of the stream current now (another stream: the Python path)
        stream = fl.get_stream(fl.dev_index)
        address = counter_address(fl.device, fl.counter_numel, stream)
    allocs = [(list(shape), torch.empty(0, dtype=dt, device=fl.device), a is torch.zeros)
              for a, shape, dt in fl.separate]
    return {"device": fl.dev_index, "arg_reads": list(fl.arg_reads), "allocs": allocs, "kernels": kernels,
            "returns": list(fl.returns), "counter_stream": int(stream), "counter_address": int(address)}


def register(name: str, fl, n_out: int, save: list[int], fallback: Callable) -> int | None:
    """Register a forward step: its launcher ``fl`` (returning the outputs, then what the backward
    reads), the ``n_out`` outputs returned, the indices of the launcher's returns ``save``d for
    the backward (after the inputs), and ``fallback(inputs, saved, grads, needs)`` computing the
    gradients on the Python path. Returns the step's id, or None (no plan, no extension)."""
    plan = launcher_plan(fl)
    mod = module() if plan is not None else None
    if mod is None:
        return None
    return mod.register_step(name, plan, n_out, save, fallback)


def add_backward(step_id: int, needs: list[bool], grads: list, fl, pick: list[int],
                 zeros: dict[int, torch.Tensor] | None = None) -> bool:
    """Add a backward variant to step ``step_id``: for inputs needing gradients ``needs`` and
    incoming gradients laid out as ``grads`` (per output ``(strides, 16-byte aligned)``, or None:
    it receives none), run launcher ``fl`` on ``(*inputs, *gradients, *saved)`` and return its
    ``pick[i]``-th result as input ``i``'s gradient (-1: none). ``zeros``: output index -> the
    read-only zero tensor the launcher reads as that output's absent gradient. False when ``fl``
    cannot run natively."""
    plan = launcher_plan(fl)
    if plan is None:
        return False
    subs = [(int(k), t) for k, t in (zeros or {}).items()]
    module().add_backward(step_id, needs, grads, plan, pick, subs)
    return True


def forward(step_id: int, args) -> Any:
    """Run a registered step's forward on ``args`` (tensors): its outputs, or None when it cannot
    run on the current stream (the caller takes the Python node)."""
    return _state["module"].forward(step_id, args)


def caller(step_id: int) -> Callable:
    """``call(args)``: :func:`forward` of step ``step_id`` with no Python frame in between."""
    return functools.partial(_state["module"].forward, step_id)
