"""Loading and launching Triton kernels: the module loader (GPU or Triton's interpreter), host TMA
descriptors, the slow launch path, the fast launcher for a call signature seen before, launch-hook
detection and the interpreter's warning filters.

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

from ...ir import InputTensor
from .npcompat import install as install_numpy_shim

__all__ = ["FastLauncher", "descriptor", "ensure_allocator", "hooks_off", "launch", "load_module", "quiet_interpreter"]

_lock = threading.Lock()
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


def launch(fn, programs: int, args: Sequence[Any], consts: dict, num_warps: int, num_stages: int, interpret: bool):
    """Launch ``programs`` programs of JIT kernel ``fn`` (the slow path: Triton binds the
    arguments); returns the compiled kernel."""
    if interpret:
        quiet_interpreter()
        install_numpy_shim()
    return fn[(programs,)](*args, **consts, num_warps=num_warps, num_stages=num_stages)


class FastLauncher:
    """Re-launch a call signature seen before without re-binding or re-specialising.

    Shapes, strides and dtypes are part of the call key, so every integer argument of every
    kernel is a constant here; only tensor pointers change. Outputs and buffers are allocated
    from cached shapes and the compiled Triton kernels are launched directly
    (``CompiledKernel.run``), which keeps host overhead at or below a bare Triton launch."""

    def __init__(self, alg, plan, b, compiled: list, args: Sequence[Any]):
        """``plan``: the runtime's plan of the call (its program and launches); ``compiled``: the
        kernels the slow path compiled, in launch order."""
        sizes = b.axis_sizes
        self.device = b.device
        from triton.runtime import driver
        self.get_stream = driver.active.get_current_stream
        self.dev_index = b.device.index if b.device.index is not None else torch.cuda.current_device()
        zero = set(plan.program.output_direct)
        # slots: ("arg", position) input tensor; ("new", k) freshly allocated output/buffer k
        self.allocs = []   # (shape, dtype, zero)
        slot_of: dict[str, tuple] = {}
        strides: dict[str, tuple] = {}
        for pos, p in enumerate(alg.params):
            if isinstance(p, InputTensor):
                slot_of[p.name] = ("arg", pos)
                strides[p.name] = tuple(args[pos].stride())
        for o, dt in zip(alg.outputs, b.out_dtypes):
            shape = [sizes[a] for a in o.layout]
            slot_of[o.name] = ("new", len(self.allocs))
            self.allocs.append((shape, dt, o.name in zero))
            strides[o.name] = tuple(torch.empty(shape, device="meta").stride())
        self.n_out = len(alg.outputs)
        for name, bs in plan.program.buffers.items():
            shape = bs.lead + [sizes[a] for a in bs.axes]
            slot_of[name] = ("new", len(self.allocs))
            self.allocs.append((shape, bs.torch_dtype, bs.zero))
            strides[name] = tuple(torch.empty(shape, device="meta").stride())
        # per allocation: (torch.zeros or torch.empty, shape as a tuple, dtype)
        self.allocs = [(torch.zeros if z else torch.empty, tuple(shape), dt) for shape, dt, z in self.allocs]
        scal = {f"s_{p.name}": pos for pos, p in enumerate(alg.params) if not isinstance(p, InputTensor)}
        self.scal_types = {pos: p.pytype for pos, p in enumerate(alg.params) if not isinstance(p, InputTensor)}
        self.launches = []
        for L, ck in zip(plan.launches, compiled):
            m = L.meta
            nprog = L.programs(sizes)
            if nprog == 0:
                continue   # nothing to do on this signature
            call, from_args, from_new, others = [], [], [], []
            for t in m.tensors:
                kind, k = slot_of[t]
                (from_args if kind == "arg" else from_new).append((len(call), k))
                call.append(None)
            for t in m.tensors:
                call.extend(strides[t][: m.tensor_ndim[t]])
            call.extend(b.sizes[x[4:]] if x.startswith("dim_") else sizes[x[5:]] for x in m.sizes)
            for x in m.scalars:
                others.append((len(call), ("scalar", scal[x])))
                call.append(None)
            for _, t, box, perm in m.descs:   # rebuilt per call: the tensor's address changes
                others.append((len(call), ("desc", (slot_of[t], box, perm))))
                call.append(None)
            call.extend(m.consts[c] for c in sorted(m.consts))
            self.launches.append((ck, nprog, call, tuple(from_args), tuple(from_new), tuple(others)))

    def _fill(self, call: list, others, args, new) -> None:
        """Scalars (converted as the slow path does) and TMA descriptors into ``call``."""
        for idx, (kind, k) in others:
            if kind == "desc":
                (src, pos), box, perm = k
                call[idx] = descriptor(args[pos] if src == "arg" else new[pos], box, perm)
            else:
                call[idx] = float(args[k]) if self.scal_types[k] is float else int(args[k])

    def __call__(self, args):
        """Launch every kernel on ``args`` (the call's arguments, positional); returns the outputs
        (one tensor for a single output, else a tuple)."""
        dev = self.device
        new = [alloc(shape, dtype=dt, device=dev) for alloc, shape, dt in self.allocs]
        stream = self.get_stream(self.dev_index)
        for ck, nprog, call, from_args, from_new, others in self.launches:
            call = call.copy()
            for idx, k in from_args:
                call[idx] = args[k]
            for idx, k in from_new:
                call[idx] = new[k]
            if others:
                self._fill(call, others, args, new)
            ck.run(nprog, 1, 1, stream, ck.function, ck.packed_metadata, None, None, None, *call)
        return new[0] if self.n_out == 1 else tuple(new[: self.n_out])
