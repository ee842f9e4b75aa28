"""The runtime: :class:`Kernel` (bind -> complete -> CallSpec -> plan -> backend -> launch) in
:mod:`dtriton.runtime.kernel`, argument checks in :mod:`dtriton.runtime.args`.

This package's namespace is also a temporary shim for the module ``dtriton/runtime.py`` it
replaced: it re-exports the names other modules, tests and scripts import from ``dtriton.runtime``
(``_call_key`` and ``_merge_named`` included), until they import from the modules above.
"""

from .args import call_key as _call_key
from .args import merge_named as _merge_named
from .kernel import Kernel, backend_for, cache_dir, compile

__all__ = ["compile", "Kernel", "cache_dir", "backend_for"]
