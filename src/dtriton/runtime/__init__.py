"""The runtime: :class:`Kernel` (bind -> complete -> CallSpec -> plan -> backend -> launch) in
:mod:`dtriton.runtime.kernel`, argument checks (named arguments, ``out=``, in-place calls, gather
indices, call keys) in :mod:`dtriton.runtime.args`."""

from .args import call_key, merge_named
from .kernel import Kernel, backend_for, cache_dir

__all__ = ["Kernel", "backend_for", "cache_dir", "call_key", "merge_named"]
