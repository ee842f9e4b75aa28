"""Backends: printing, loading and launching a complete plan (:mod:`dtriton.backends.base` is the
seam; :mod:`dtriton.backends.triton` the one implementation)."""

from .base import Backend, KernelMeta, Limits
from .triton import TritonBackend

__all__ = ["Backend", "KernelMeta", "Limits", "TritonBackend", "default_backend"]

_DEFAULT = TritonBackend()


def default_backend() -> Backend:
    """The backend kernels are printed, loaded and launched with (Triton, the one implementation)."""
    return _DEFAULT
