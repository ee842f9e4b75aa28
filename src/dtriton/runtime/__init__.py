"""The runtime: :class:`Kernel` (bind -> complete -> CallSpec -> plan -> backend -> launch) in
:mod:`dtriton.runtime.kernel`, argument checks in :mod:`dtriton.runtime.args`.

This package's namespace is also a temporary shim for the module ``dtriton/runtime.py`` it
replaced: it re-exports the names other modules, tests and scripts import from ``dtriton.runtime``
(including ``_call_key`` and ``_merge_named``), until they import from the modules above.
"""

from .args import call_key as _call_key
from .args import check_gather_indices as _check_gather_indices
from .args import check_out_memory as _check_out_memory
from .args import inplace_problem as _inplace_problem
from .args import merge_named as _merge_named
from .args import normalise_out as _normalise_out
from .args import overlap as _overlap
from .kernel import Kernel, backend_for, cache_dir, compile, knob_warnings

__all__ = ["compile", "Kernel", "cache_dir", "backend_for", "knob_warnings"]
