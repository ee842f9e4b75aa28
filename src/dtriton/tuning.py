"""TEMPORARY shim, to delete with ``runtime.compile`` (see the tune helper's report): that function
still imports :class:`TunedKernel` from here. Use :mod:`dtriton.tune`; ``dt.compile`` is
:func:`dtriton.api.compile`."""

from .tune.tuned import TunedKernel

__all__ = ["TunedKernel"]
