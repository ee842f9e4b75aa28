"""Backends: printing, loading and launching a complete plan (:mod:`dtriton.backends.base` is the
seam; :mod:`dtriton.backends.triton` the one implementation)."""

from .base import Backend, KernelMeta, Limits

__all__ = ["Backend", "KernelMeta", "Limits"]
