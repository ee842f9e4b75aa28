"""Fresh names for the derivation: parameters, axes and stages that collide with none in use."""

from __future__ import annotations

from itertools import count
from typing import Iterable

from ..ir import Algorithm

__all__ = ["first_free", "unique_param_name", "grad_param_names"]


def first_free(candidates: Iterable[str], taken: set[str]) -> str:
    """The first of ``candidates`` (an endless sequence, or one that reaches a free name) not in
    ``taken``; it is added to ``taken``."""
    nm = next(c for c in candidates if c not in taken)
    taken.add(nm)
    return nm


def unique_param_name(base: str, taken: set[str]) -> str:
    """``base``, prefixed with ``_`` until it is not in ``taken``; the name is added to ``taken``."""
    return first_free(("_" * k + base for k in count()), taken)


def grad_param_names(alg: Algorithm) -> list[str]:
    """The names of the upstream-gradient parameters of ``alg``'s backward algorithms, one per
    output: ``grad_<output name>``, prefixed with ``_`` where that is a parameter name already."""
    taken = {p.name for p in alg.params}
    return [unique_param_name(f"grad_{o.name}", taken) for o in alg.outputs]
