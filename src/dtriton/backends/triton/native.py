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

A differentiable kernel whose arguments are all tensors also enters each native step in a C++ call
cache (:func:`call_cache`): the call key (the tensors' shapes, strides, dtypes, devices and 16-byte
alignment) is computed in C++, and a hit runs the step's forward with no Python frame after the
first lines of ``DifferentiableKernel.__call__``; a miss (a new signature, grad mode off, a
``torch.func`` transform, no tensor requiring grad) returns None and the Python path takes the call.
The forward records its autograd node before it launches the kernels, and allocates straight from
the caching allocator the plan's example tensor came from: on a host-bound step, the host's work
after the last launch is what the GPU waits for.

Native steps are on by default (``DTRITON_NATIVE_STEPS=0`` or :func:`set_enabled` turn them off;
``compile_autograd(native=...)`` decides per kernel). The first step that could be native starts
building the extension on a background thread (about 30 s, once per machine and torch version:
torch caches it under ``TORCH_EXTENSIONS_DIR``, by default ``~/.cache/torch_extensions``); steps
keep the Python node until it is loaded, then become native at their next backward. It needs a C++
compiler and ninja; where the build fails, one warning says why and every step keeps the Python
node. Results are the Python node's, bit for bit (the same kernels on the same addresses' layouts);
only the host's work per step differs. Forward-mode AD inputs and compiled autograd keep the Python
node; a native step keeps its kernels (and the registered plans) for the life of the process.
"""

from __future__ import annotations

import functools
import operator
import os
import re
import struct
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import torch

from .counters import counter_memory
from .fast import C_ENTRY_MIDDLE, FastLauncher

__all__ = ["enabled", "set_enabled", "ready", "module", "extension_name", "launcher_plan", "refusal", "register", "add_backward",
           "forward", "call_cache", "caller"]

#: ``struct`` formats of Triton's scalar parameter types (floats are packed from Python floats)
_SCALAR = {"i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "u1": "B", "u8": "B", "u16": "H", "u32": "I",
           "u64": "Q", "fp16": "e", "fp32": "f", "f32": "f", "fp64": "d"}

def _env_flag() -> bool:
    """``DTRITON_NATIVE_STEPS``: unset or anything else on; ``0``, ``false``, ``off``, ``no`` off."""
    return os.environ.get("DTRITON_NATIVE_STEPS", "1").strip().lower() not in ("0", "false", "off", "no")


_state: dict[str, Any] = {"enabled": _env_flag(), "module": None, "failed": None, "building": None}
_lock = threading.Lock()


def enabled() -> bool:
    """Whether differentiable kernels that leave it open run their steady-state steps natively
    (:func:`set_enabled`)."""
    return _state["enabled"]


def set_enabled(flag: bool = True) -> None:
    """Turn native steps on or off for the differentiable kernels that leave it open (process-wide;
    ``DTRITON_NATIVE_STEPS=0`` turns them off at import). Their later calls follow it, steps already
    native included."""
    _state["enabled"] = bool(flag)


def extension_name() -> str:
    """The extension's name: one per torch version (torch's cache keys a build by name and source,
    not by the torch it was built against)."""
    return "dtriton_native_step_" + re.sub(r"[^0-9A-Za-z]+", "_", torch.__version__).strip("_")


def _build() -> None:
    """Build (or load the cached build of) the extension; on failure, warn once (the compiler's last
    lines) and leave :func:`ready` False for the process."""
    try:
        from torch.utils.cpp_extension import load
        import triton
        inc = Path(triton.__file__).parent / "backends" / "nvidia" / "include"
        src = Path(__file__).with_name("native_step.cpp")
        _state["module"] = load(name=extension_name(), sources=[str(src)], extra_include_paths=[str(inc)],
                                extra_cflags=["-O2"], extra_ldflags=["-ldl"], verbose=False)
    except Exception as e:   # a compiler, ninja or header missing: keep the Python node
        text = f"{type(e).__name__}: {e}"
        _state["failed"] = text
        tail = "\n".join(text.strip().splitlines()[-6:])
        warnings.warn(f"dtriton: native steps are off, their C++ extension did not build; differentiable kernels "
                      f"keep the Python autograd node (DTRITON_NATIVE_STEPS=0 skips the build). Last lines:\n{tail}",
                      RuntimeWarning, stacklevel=2)


def ready(wait: bool = False) -> bool:
    """Whether the extension is loaded. The first call starts building it on a background thread
    (about 30 s, once per machine and torch version; later processes load torch's cached build), so
    a training step never waits for the compiler: steps keep the Python node until it is ready.
    ``wait``: build (or wait for the build) on this thread instead."""
    if _state["module"] is not None:
        return True
    if _state["failed"] is not None:
        return False
    with _lock:
        t = _state["building"]
        if t is None:
            t = _state["building"] = threading.Thread(target=_build, name="dtriton-native-build", daemon=True)
            t.start()
    if wait:
        t.join()
    return _state["module"] is not None


def module():
    """The built extension (building it, and waiting for it, on first call), or None when the build
    failed (warned once; no step becomes native from then on)."""
    ready(wait=True)
    return _state["module"]


def _kernel_plan(call, types, constants: Mapping[int, Any] | None = None) -> dict | str:
    """One kernel's plan from a fast launcher's call ``(entry, grid, middle, sources, tail,
    extras)`` and its parameters' Triton types; where it cannot be carried out natively, why (a
    string: a per-call scalar or descriptor, a launch needing scratch memory, a pointer among
    constants). ``constants``: argument position -> value of the scalars that are the step's
    constants (part of its call key), already converted as the launcher converts them: they fill
    their per-call slots."""
    fn, grid, mid, srcs, tail, extras = call
    if types is None:
        return "its Triton signature is unknown"
    if extras:
        tail = list(tail)
        for idx, (kind, k) in extras:
            if kind != "scalar":
                return "a kernel takes TMA descriptors made per call"
            if constants is None or k not in constants:
                return f"a kernel takes the scalar argument at position {k}, passed per call"
            tail[idx - len(srcs)] = constants[k]
    if len(mid) != C_ENTRY_MIDDLE or len(srcs) + len(tail) != len(types):
        return "a kernel's launch arguments do not match its signature"
    function, cooperative, pdl, _, _, meta = mid[:6]
    num_warps, num_ctas, shared = meta
    arena, offsets, ptrs = bytearray(), [], []
    for j, ty in enumerate(types):
        if ty == "constexpr":
            continue
        if not isinstance(ty, str):
            return f"a kernel takes a tuple parameter ({ty})"
        arena += bytes(-len(arena) % 8)
        offsets.append(len(arena))
        if ty.startswith("*"):
            if j >= len(srcs):
                return "a kernel takes a pointer among its constants"
            ptrs.append((len(offsets) - 1, srcs[j][0], srcs[j][1]))
            arena += bytes(8)
        elif j < len(srcs):
            return f"a kernel takes a {ty} computed per call"
        elif ty == "bf16":
            arena += struct.pack("<I", struct.unpack("<I", struct.pack("<f", float(tail[j - len(srcs)])))[0])[2:]
        elif ty in _SCALAR:
            v = tail[j - len(srcs)]
            arena += struct.pack("<" + _SCALAR[ty], float(v) if ty.startswith("f") else int(v))
        else:
            return f"a kernel takes a parameter of type {ty}"
    for _ in range(2):   # global and profile scratch: none (a launch needing either is not native)
        arena += bytes(-len(arena) % 8)
        offsets.append(len(arena))
        arena += bytes(8)
    return {"function": int(function), "grid": list(grid), "block": 32 * int(num_warps), "ctas": int(num_ctas),
            "shared": int(shared), "cooperative": bool(cooperative), "pdl": bool(pdl), "arena": bytes(arena),
            "offsets": offsets, "ptrs": ptrs}


def launcher_plan(fl, arg_index: Callable[[int], int | None] | None = None,
                  constants: Mapping[int, Any] | None = None) -> dict | None:
    """The native plan of fast launcher ``fl`` (see the module), or None where a kernel of it
    cannot run natively or it allocates other than ``torch.empty``/``torch.zeros`` (why:
    :func:`refusal`). ``arg_index``: the position among the native call's tensors of the
    launcher's argument at a position (None: not a tensor there, no plan); default: the same
    position. ``constants``: argument position -> value of the non-tensor arguments that are the
    step's constants (part of its call key); a kernel taking another scalar has no plan."""
    plan = _plan_or_reason(fl, arg_index, constants)
    return plan if isinstance(plan, dict) else None


def refusal(fl, tensor_pos: tuple[int, ...] | None = None, n_params: int = 0,
            constants: Mapping[int, Any] | None = None) -> str | None:
    """Why :func:`register` (or :func:`add_backward`, given ``n_params``) gives fast launcher ``fl``
    no plan (a sentence), or None when it has one (the other arguments as there)."""
    plan = _plan_or_reason(fl, _tensor_index(tensor_pos, n_params), constants)
    return plan if isinstance(plan, str) else None


def _plan_or_reason(fl, arg_index: Callable[[int], int | None] | None,
                    constants: Mapping[int, Any] | None = None) -> dict | str:
    """:func:`launcher_plan`'s plan, or why there is none."""
    if not isinstance(fl, FastLauncher):
        return f"its launcher ({type(fl).__name__}) is not a fast launcher"
    if fl.desc_slots:
        return "a kernel takes TMA descriptors made per call"
    if len(fl.param_types) != len(fl.calls):
        return "a kernel's Triton signature is unknown"
    reads = [p if arg_index is None else arg_index(p) for p in fl.arg_reads]
    if any(r is None for r in reads):
        return "a kernel reads a tensor that is not among the call's tensor arguments"
    if constants:   # (converted as the launcher converts a per-call scalar)
        constants = {k: float(v) if fl.scal_types.get(k) is float else int(v) for k, v in constants.items()}
    kernels = [_kernel_plan(c, t, constants) for c, t in zip(fl.calls, fl.param_types)]
    why = next((k for k in kernels if isinstance(k, str)), None)
    if why is not None:
        return why
    if any(a not in (torch.empty, torch.zeros) for a, _, _ in fl.separate):
        return "it allocates other than with torch.empty or torch.zeros"
    stream, counters = 0, None
    if fl.counter_numel:   # the arrival counters of the stream current now (another stream: the Python path);
        stream = fl.get_stream(fl.dev_index)   # the plan holds the tensor (the pool may later replace it)
        counters = counter_memory(fl.device, fl.counter_numel, stream)
    allocs = [(list(shape), torch.empty(0, dtype=dt, device=fl.device), a is torch.zeros)
              for a, shape, dt in fl.separate]
    return {"device": fl.dev_index, "arg_reads": reads, "allocs": allocs, "kernels": kernels,
            "returns": list(fl.returns), "counter_stream": int(stream), "counters": counters}


def _tensor_index(tensor_pos: tuple[int, ...] | None, n_params: int = 0) -> Callable[[int], int | None] | None:
    """Argument position -> position among the tensors the native node takes, for a call whose
    tensors are at ``tensor_pos`` (None: every argument is one); positions from ``n_params`` on (a
    backward launcher's gradients and saved values, after the forward's arguments) shift down by
    the non-tensor parameters."""
    if tensor_pos is None:
        return None
    index = {p: i for i, p in enumerate(tensor_pos)}
    shift = n_params - len(tensor_pos)
    return lambda p: index.get(p) if p < n_params or not n_params else p - shift


def register(name: str, fl, n_out: int, save: list[int], fallback: Callable,
             tensor_pos: tuple[int, ...] | None = None, constants: Mapping[int, Any] | None = None) -> int | None:
    """Register a forward step: its launcher ``fl`` (returning the outputs, then what the backward
    reads), the ``n_out`` outputs returned, the indices of the launcher's returns ``save``d for
    the backward (after the inputs), and ``fallback(inputs, saved, grads, needs)`` computing the
    gradients on the Python path. ``tensor_pos``: the positions of the tensor arguments, which are
    all the native call takes (None: every argument is a tensor); ``constants``: the other
    arguments by position (each part of the step's call key: the plan holds their values). Returns
    the step's id, or None (no plan, no extension: :func:`refusal` says why)."""
    plan = launcher_plan(fl, _tensor_index(tensor_pos), constants)
    if plan is None or not ready():
        return None
    return _state["module"].register_step(name, plan, n_out, save, fallback)


def add_backward(step_id: int, needs: list[bool], grads: list, launchers: list, pick: list[tuple[int, int]],
                 zeros: dict[int, torch.Tensor] | None = None, tensor_pos: tuple[int, ...] | None = None,
                 n_params: int = 0, constants: Mapping[int, Any] | None = None,
                 record: tuple[int, int] = (0, 0)) -> bool:
    """Add a backward variant to step ``step_id``: for inputs needing gradients ``needs`` and
    incoming gradients laid out as ``grads`` (per output ``(strides, 16-byte aligned)``, or None:
    it receives none), run ``launchers`` in order, each on ``(*inputs, *gradients, *saved)``, and
    return result ``pick[i] = (launcher, index)`` as input ``i``'s gradient (``(-1, -1)``: none).
    ``zeros``: output index -> the read-only zero tensor the launchers read as that output's absent
    gradient. ``needs`` and ``pick`` are per tensor argument; ``tensor_pos`` and ``n_params`` (the
    forward's parameters) place the launchers' arguments among the node's tensors (see
    :func:`register`), as do ``constants``. ``record``: ``(address, tag)``: each run of the variant
    stores ``tag`` in the int64 at ``address`` (it must outlive the step; 0: none), which is how
    ``DifferentiableKernel.launch_counts`` learns which variant ran last. False when a launcher
    cannot run natively."""
    index = _tensor_index(tensor_pos, n_params)
    plans = [launcher_plan(fl, index, constants) for fl in launchers]
    if any(p is None for p in plans):
        return False
    subs = [(int(k), t) for k, t in (zeros or {}).items()]
    _state["module"].add_backward(step_id, needs, grads, plans, [list(p) for p in pick], subs, int(record[0]),
                                  int(record[1]))
    return True


def forward(step_id: int, args) -> Any:
    """Run a registered step's forward on ``args`` (tensors): its outputs, or None when it cannot
    run on the current stream (the caller takes the Python node)."""
    return _state["module"].forward(step_id, args)


def call_cache(log: int = 0):
    """A new C++ call cache (None while the extension is not loaded): ``cache(args)`` runs the
    native step entered for the call signature of ``args`` (a tuple of tensors: their shapes,
    strides, dtypes, devices and 16-byte alignment) and returns its outputs, or None when no entry
    fits, grad mode is off, no tensor requires grad, a ``torch.func`` transform is active or the
    step cannot run on this stream (the caller's Python path takes those calls);
    ``cache.add(args, step_id, tag)`` enters step ``step_id`` for the signature of ``args``. Each
    hit stores its entry's ``tag`` in the int64 at address ``log`` (0: nowhere)."""
    if _state["module"] is None:
        return None
    return _state["module"].CallCache(int(log))


def caller(step_id: int, tensor_pos: tuple[int, ...] | None = None) -> Callable:
    """``call(args)``: :func:`forward` of step ``step_id`` on the call's arguments (its tensors, at
    ``tensor_pos``, when some are not; else with no Python frame in between)."""
    run = functools.partial(_state["module"].forward, step_id)
    if tensor_pos is None:
        return run
    pick = operator.itemgetter(*tensor_pos)
    if len(tensor_pos) == 1:
        return lambda args: run((pick(args),))
    return lambda args: run(pick(args))
