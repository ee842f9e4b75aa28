"""A targeted shim for Triton 3.6's interpreter under numpy >= 2.4.

The interpreter holds a scalar as a one-element array of shape ``(1,)`` and converts it to a
Python int with ``int(array)`` (``tensor.__index__``, used by ``range()`` over a runtime bound).
numpy 2.4 turned that long-deprecated conversion of an array with ``ndim > 0`` into a
``TypeError``, so every kernel with a loop failed on the interpreter. The shim re-patches that
one attribute with ``int(array.item())`` (the same value, for any numpy) each time the
interpreter patches ``triton.language.tensor`` for a launch; nothing else changes. Installed once,
before the first interpreted launch, by :func:`install` (under every numpy: older ones warned).
"""

from __future__ import annotations

__all__ = ["install", "needed"]

_DONE: list[bool] = []


def needed() -> bool:
    """Whether this numpy refuses ``int()`` of a one-element array with ``ndim > 0``."""
    import numpy as np
    try:
        int(np.ones(1, dtype=np.int32))
    except TypeError:
        return True
    return False


def _index(self) -> int:
    return int(self.handle.data.item())


def install() -> None:
    """Wrap the interpreter's patch of ``triton.language.tensor`` so ``__index__`` converts with
    ``.item()``; idempotent. Installed whatever the numpy: under numpy < 2.4 the same conversion
    warned (a ``DeprecationWarning`` per loop, an error under ``-W error``)."""
    if _DONE:
        return
    _DONE.append(True)
    from triton.runtime import interpreter
    original = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", _index)

    interpreter._patch_lang_tensor = patch_lang_tensor
