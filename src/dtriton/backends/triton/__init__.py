"""The Triton backend: prints a :class:`~dtriton.plan.kernel.Program` as one Triton module, loads it
(on the GPU or Triton's interpreter) and launches its kernels. The only code that imports
``triton``.

Modules: ``prelude`` (the module header and combine helpers), ``scope`` (nested scopes and axis
bindings), ``values`` (expressions, layouts, hoisting), ``memory`` (loads, addresses, access
styles), ``reduce`` (passes and dots), ``kernel`` (program ids, grid, signature, stores),
``last`` (a split kernel's finishing pass in its last program per tile), ``launch`` (module loading,
descriptors, the slow launch path), ``fast`` (the fast launcher of a call signature seen before),
``counters`` (the per-stream zero memory of arrival counters), ``limits``, ``gluon`` and ``gluon_kernels`` (a fused attention forward the plan
chose to run as the hand-written Gluon kernel on Hopper: its printing, launch and kernels; ``gluon_bwd``
and ``gluon_bwd_kernels`` the backward's, ``gluon_conv`` and ``gluon_conv_kernels`` a channels-last
conv2d's, ``gluon_depthwise`` and ``gluon_depthwise_kernels`` a channels-last depthwise conv2d's;
``gluon_kind`` what they share, ``gluon_table`` the decision class -> kind table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ...plan.kernel import Program
from ..base import KernelMeta, Limits
from .kernel import KernelPrinter, KernelSource, render
from .counters import counter_memory
from .fast import FastLauncher
from .gluon_kind import GluonCallLauncher
from .gluon_table import gluon_kind
from .launch import descriptor, ensure_allocator, hooks_off, launch, load_module
from .limits import MAX_BLOCK_NUMEL, SMEM_BYTES_DEFAULT

__all__ = ["KernelPrinter", "KernelSource", "TritonBackend", "render"]


class TritonBackend:
    """The :class:`~dtriton.backends.base.Backend` printing and running Triton kernels."""

    name = "triton"
    limits = Limits(MAX_BLOCK_NUMEL, SMEM_BYTES_DEFAULT)

    def render(self, program: Program) -> tuple[str, list[KernelMeta]]:
        """The module source of every kernel of ``program`` and each kernel's argument order."""
        return render(program)

    def load(self, source: str, interpret: bool, directory: Path) -> Any:
        """Load a rendered module (written under ``directory``); kernels are its attributes."""
        return load_module(source, interpret, directory)

    def launch(self, fn: Any, programs: tuple[int, ...], args: Sequence[Any], meta: KernelMeta,
               interpret: bool) -> Any:
        """Launch kernel ``fn`` on the grid ``programs`` (programs per launch-grid dimension, x first);
        returns the compiled kernel (a kernel building its TMA descriptors in the kernel gets Triton's
        scratch allocator first)."""
        kind = gluon_kind(meta.ir.gluon)   # (a Gluon kernel: never planned for the interpreter)
        if kind is not None:
            return kind.launch(fn, args, meta)
        if meta.ir.device_descs and not interpret:
            ensure_allocator()
        return launch(fn, programs, args, meta.consts, meta.ir.num_warps, meta.ir.num_stages, interpret,
                      meta.ir.max_registers, meta.ir.dependent_launch)

    def descriptor(self, tensor: Any, box: tuple[int, ...], perm: tuple[int, ...] | None = None) -> Any:
        """A host-side TMA descriptor of ``tensor`` (of ``tensor.permute(perm)`` with ``perm``) in
        boxes of ``box`` elements."""
        return descriptor(tensor, box, perm)

    def is_resource_error(self, exc: BaseException) -> bool:
        """Whether ``exc`` (raised by :meth:`launch`) is a resource limit of the kernel: Triton's
        ``OutOfResources`` (shared memory, registers) or the driver's "too many resources
        requested for launch"."""
        from triton.runtime.errors import OutOfResources
        text = str(exc).lower()
        return isinstance(exc, OutOfResources) or "out of resource" in text or "too many resources" in text

    #: No Triton launch hook is installed (profilers need the slow path). The plain function, so the
    #: fast path's check costs one call, as before the backend seam.
    fast_path_ok = staticmethod(hooks_off)

    def fast_launcher(self, alg: Any, plan: Any, b: Any, compiled: list, args: Sequence[Any]) -> Any:
        """A :class:`~dtriton.backends.triton.fast.FastLauncher` for ``plan``'s kernels; a
        :class:`~dtriton.backends.triton.gluon_kind.GluonCallLauncher` where the plan is one Gluon launch."""
        for L in plan.launches:
            kind = gluon_kind(L.meta.ir.gluon)
            if kind is not None:   # (a Gluon plan is that one launch, no buffers)
                return GluonCallLauncher(alg, plan, b, kind)
        return FastLauncher(alg, plan, b, compiled, args)

    def counters(self, device: Any, numel: int) -> Any:
        """At least ``numel`` int32 zeros on ``device`` kept zero between launches on the current stream
        (:func:`~dtriton.backends.triton.counters.counter_memory`)."""
        return counter_memory(device, numel)

    def version(self) -> str:
        """The installed Triton's version ("none" when it cannot be imported)."""
        try:
            import triton
            return str(triton.__version__)
        except Exception:  # pragma: no cover
            return "none"

    def bench(self, fn: Any, warmup_ms: float, rep_ms: float) -> tuple[float, float, float]:
        """(median, p20, p80) in ms of ``fn()``: ``triton.testing.do_bench``."""
        import triton.testing
        med, p20, p80 = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
        return med, p20, p80
