"""Loading and launching Triton kernels: the module loader (GPU or Triton's interpreter), host TMA
descriptors, the slow launch path, launch-hook detection and the interpreter's warning filters (the
fast launcher for a call signature seen before is :mod:`.fast`).

Triton itself is imported on first use (not when dtriton is imported: ``import triton`` costs
about a second, and tracing, lowering and printing do not need it)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch

from .counters import reset_counters
from .npcompat import install as install_numpy_shim

__all__ = ["descriptor", "ensure_allocator", "hooks_off", "launch", "load_module", "quiet_interpreter"]

_lock = threading.Lock()
_interpreter_lock = threading.RLock()
_module_cache: dict[tuple[str, bool], Any] = {}
_QUIET: list[bool] = []


def load_module(source: str, interpret: bool, directory: Path):
    """Load a generated module (written as ``directory/dt_<hash>.py``); cached per source and backend."""
    key = (hashlib.sha256(source.encode()).hexdigest()[:20], interpret)
    with _lock:
        mod = _module_cache.get(key)
        if mod is not None:
            return mod
        path = directory / f"dt_{key[0]}.py"
        if not path.exists() or path.read_text() != source:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(source)
            os.replace(tmp, path)
        name = f"dtriton_gen_{key[0]}_{'i' if interpret else 'g'}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        if interpret:
            from triton.runtime.interpreter import InterpretedFunction
            mod._jit = InterpretedFunction  # type: ignore[attr-defined]
        else:
            import triton
            mod._jit = triton.jit  # type: ignore[attr-defined]
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _module_cache[key] = mod
        return mod


def quiet_interpreter() -> None:
    """Hide, once per process, the numpy warnings Triton 3.6's interpreter raises from its own
    module on every launch: "Conversion of an array with ndim > 0 to a scalar", and invalid-value
    or divide warnings from lanes that masks discard (0/0 in a padded row). Neither says anything
    about the user's kernel. The filters name the interpreter module only, and are installed once
    (``warnings.catch_warnings`` per launch would race between threads)."""
    if _QUIET:
        return
    warnings.filterwarnings("ignore", message="Conversion of an array with ndim > 0", category=DeprecationWarning,
                            module=r"triton\.runtime\.interpreter")
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
    _QUIET.append(True)


_TensorDescriptor = None


def descriptor(t: torch.Tensor, box: tuple[int, ...], perm: tuple[int, ...] | None = None):
    """Host-side TMA descriptor of ``t`` (shape and strides in elements, ``box`` the tile read or
    written per load/store; out-of-range elements read as zero and are clipped on store), passed
    to the kernel as an argument; with ``perm``, of the view ``t.permute(perm)`` (a transposed
    operand read with its unit-stride dim last). Triton's launcher encodes it (``cuTensorMapEncodeTiled``) at
    each launch; the interpreter emulates it.

    Built without ``TensorDescriptor.__post_init__``: its checks (16-byte aligned base and rows,
    last stride 1, power-of-two box) are the ones :func:`~dtriton.plan.tma_addressable` and the plan's box rules already
    made for this specialisation, and they cost 4 us of the 5.4 us per descriptor (CPU, measured)
    on every call."""
    global _TensorDescriptor
    if _TensorDescriptor is None:
        from triton.tools.tensor_descriptor import TensorDescriptor
        _TensorDescriptor = TensorDescriptor
    if perm:
        t = t.permute(perm)
    d = _TensorDescriptor.__new__(_TensorDescriptor)
    d.__dict__.update(base=t, shape=list(t.shape), strides=list(t.stride()), block_shape=list(box), padding="zero")
    return d


_ALLOCATOR: list[bool] = []


def ensure_allocator() -> None:
    """Give Triton, once per process, the global-memory allocator that kernels building TMA
    descriptors in the kernel (``tl.make_tensor_descriptor``) need for their scratch (128 bytes
    per program, allocated per launch): torch's caching allocator on the launch's device, so
    CUDA-graph capture keeps working."""
    if _ALLOCATOR:
        return
    import triton

    def alloc(size: int, alignment: int, stream):
        return torch.empty(size, dtype=torch.int8, device="cuda")

    triton.set_allocator(alloc)
    _ALLOCATOR.append(True)


_knobs = None


def hooks_off() -> bool:
    """True when no Triton launch hook (profilers such as proton) is installed."""
    global _knobs
    if _knobs is None:
        from triton import knobs
        _knobs = knobs.runtime
    e, x = _knobs.launch_enter_hook, _knobs.launch_exit_hook
    return (e is None or not getattr(e, "calls", True)) and (x is None or not getattr(x, "calls", True))


def launch(fn, programs: int | tuple[int, ...], args: Sequence[Any], consts: dict, num_warps: int, num_stages: int,
           interpret: bool, maxnreg: int = 0, pdl: bool = False):
    """Launch JIT kernel ``fn`` on the grid ``programs`` (a count of programs, or one per launch-grid
    dimension, x first: :meth:`~dtriton.plan.kernel.KernelPlan.launch_counts`) (the slow path: Triton
    binds the arguments); returns the compiled kernel. ``maxnreg``: ptxas's register cap (0: none);
    ``pdl``: launched with programmatic dependent launch (the compiled kernel keeps it: the fast
    launcher's later launches carry it too; :mod:`dtriton.plan.dependent_launch`)."""
    if interpret:
        quiet_interpreter()
        install_numpy_shim()
    opts = {"maxnreg": maxnreg} if maxnreg and not interpret else {}
    if pdl and not interpret:
        opts["launch_pdl"] = True
    grid = tuple(programs) if isinstance(programs, tuple) else (programs,)
    if interpret:   # lanes that masks discard compute 0/0 or -inf - -inf in numpy: no warning for those
        import numpy as np   # (errstate is context-local in numpy 2: other threads keep their own)
        try:   # (one interpreted launch at a time: Triton's interpreter patches module state while it runs)
            with _interpreter_lock, np.errstate(all="ignore"):
                return fn[grid](*args, **consts, num_warps=num_warps, num_stages=num_stages, **opts)
        except BaseException:   # stopped partway (an error, Ctrl-C): arrival counters may be left counting
            reset_counters("cpu")
            raise
    return fn[grid](*args, **consts, num_warps=num_warps, num_stages=num_stages, **opts)
