"""The backend seam: what the runtime needs from a code generator and its launcher.

A backend prints a complete :class:`~dtriton.plan.kernel.Program` (it decides nothing), loads the
printed module, and launches its kernels: a slow path that binds arguments by name on every call,
and a fast path for a call signature seen before. Triton is the one implementation
(:mod:`dtriton.backends.triton`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

from ..plan.kernel import KernelPlan, Program

__all__ = ["Backend", "KernelMeta", "Limits"]


@dataclass
class KernelMeta:
    """A printed kernel: its name and the argument order the runtime must follow (pointers, then
    the strides of each tensor, sizes, scalars, host descriptors, compile-time constants)."""
    name: str
    tensors: list[str]
    tensor_ndim: dict[str, int]
    sizes: list[str]
    scalars: list[str]
    consts: dict[str, int]
    ir: KernelPlan
    descs: tuple = ()          # (argument, tensor, box): host-side TMA descriptors the runtime builds per call


@dataclass(frozen=True)
class Limits:
    """Resource limits of a backend's kernels."""
    max_block_numel: int        # elements of the largest block a kernel may form
    smem_bytes: int             # shared memory one program may use (bytes)


class Backend(Protocol):
    """What the runtime calls. ``interpret``: the kernels run on the backend's CPU interpreter."""

    name: str
    limits: Limits

    def render(self, program: Program) -> tuple[str, list[KernelMeta]]:
        """The module source of every kernel of ``program`` and each kernel's argument order."""

    def load(self, source: str, interpret: bool, directory: Path) -> Any:
        """Load a rendered module (written under ``directory``); kernels are its attributes."""

    def launch(self, fn: Any, programs: tuple[int, ...], args: Sequence[Any], meta: KernelMeta,
               interpret: bool) -> Any:
        """Launch kernel ``fn`` on the grid ``programs`` (programs per launch-grid dimension, x first;
        the slow path); returns the compiled kernel handle a fast launcher re-launches."""

    def descriptor(self, tensor: Any, box: tuple[int, ...], perm: tuple[int, ...] | None = None) -> Any:
        """A host-side TMA descriptor of ``tensor`` (of ``tensor.permute(perm)`` with ``perm``) in
        boxes of ``box`` elements."""

    def is_resource_error(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by :meth:`launch`, is a resource limit of the kernel (shared
        memory, registers): a default schedule then shrinks and retries."""

    def fast_path_ok(self) -> bool:
        """Whether the fast launch path may be used now (no launch hooks installed)."""

    def fast_launcher(self, alg: Any, plan: Any, b: Any, compiled: list, args: Sequence[Any]) -> Any:
        """A callable ``f(args) -> outputs`` re-launching ``plan``'s kernels (``compiled``: the
        handles :meth:`launch` returned) for calls with the signature of ``args``. Its
        ``packed(keep, remap=None, buffers=True)`` gives a variant keeping what only dtriton reads
        (outputs after the first ``keep``, buffers) in one buffer, or None (see
        :meth:`dtriton.backends.triton.fast.FastLauncher.packed`)."""

    def counters(self, device: Any, numel: int) -> Any:
        """At least ``numel`` int32 zeros on ``device`` that stay zero between launches on the current
        stream (the kernels using them reset them: ``BufferSpec.counter``); the same memory every call."""

    def version(self) -> str:
        """The code generator's version (part of tuning records: a new compiler may change the
        best schedule); "none" when it cannot be imported."""

    def bench(self, fn: Any, warmup_ms: float, rep_ms: float) -> tuple[float, float, float]:
        """(median, 20th, 80th percentile) in milliseconds of ``fn()`` on the GPU, timed by the
        backend's own benchmarking loop."""
