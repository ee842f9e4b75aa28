"""Reductions as data: one :class:`Combiner` record per reduction kind.

A reduction folds the values along its axes with an associative *combine* starting from an
*identity*. Everything the compiler needs to know about a kind of reduction lives in its record:
the identity per dtype, the Triton combine (as text: the IR never imports ``triton``), the torch
reference used by the evaluator, whether partial results from several programs may be combined
(split), its part in online (one-pass) groups, the rule its gradient follows, the number of
results, and a finishing step (``mean`` is the sum combiner followed by a division by the count).

A new reduction kind is one record passed to :func:`register` plus a builder in ``dsl.py``.
This module is the bottom of the IR package: it imports only torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

__all__ = ["Combiner", "COMBINERS", "get", "register", "SUM", "MEAN", "MAX", "MIN", "PROD", "ARGMAX", "ARGMIN"]


@dataclass(frozen=True)
class Combiner:
    """One kind of reduction.

    Attributes:
        name: the kind's name (``"sum"``, ``"mean"``, ``"max"``, ``"min"``); auto stage names are
            ``<name><k>`` (``sum0``, ``mean0``, ``max0``).
        identity: the neutral element for a torch dtype (a Python number or bool), e.g. ``-inf``
            for a float max, the dtype's minimum for an integer max, ``0`` for a sum.
        combine: the Triton combine of two partial values ``a`` and ``b`` as text, the body of
            the ``@_jit`` helper :attr:`helper` the backend prints (e.g. ``"a + b"``). For an
            arg-reduction (``results == 2``): the condition, over values ``a``, ``b`` and their
            indices ``ia``, ``ib``, under which ``(b, ib)`` wins over ``(a, ia)``; the helper returns
            the winning pair.
        reference: the torch reduction ``(tensor, dims) -> tensor`` the evaluator uses; it
            handles empty extents (the result is the identity there).
        splittable: partial results of several programs may be combined by the same combine
            (split-K: per-split partial buffers that the reader combines; a sum may also add its
            partials with fp32 atomics). True for sum, mean, max, min and prod; an arg-reduction's
            (value, index) pairs are not split.
        online: the part the kind plays in a one-pass online group: ``"running_max"`` (a running
            maximum whose changes rescale the group's sums of ``exp(x - max)``), ``"rescaled"``
            (a linear accumulation that can be rescaled by a factor), or None (no part).
        grad: the name of the gradient rule the gradient module dispatches on (``"sum"``:
            the adjoint broadcasts back; ``"extremum"``: it flows to the arg-extremal elements;
            ``"prod"``: the product of the other elements, torch's rule at zeros; ``"index"``: the
            value is an index, no gradient flows through it); any other name
            makes ``dt.grad`` raise for a stage of this kind.
        results: the number of values the reduction produces (1; 2 for an arg-reduction, which
            reduces (value, index along its one reduced axis) pairs; the node's value is the
            index, and the reference returns indices).
        finalize: None, or ``"count"``: divide the combined value by the reduced extent.
        base: the kind whose accumulation this one performs before ``finalize`` (``"sum"`` for
            ``mean``); equal to ``name`` when left empty.
    """
    name: str
    identity: Callable[[torch.dtype], float | int | bool]
    combine: str
    reference: Callable[[torch.Tensor, list[int]], torch.Tensor]
    splittable: bool
    online: str | None
    grad: str
    results: int = 1
    finalize: str | None = None
    base: str = field(default="")

    def __post_init__(self):
        if not self.base:
            object.__setattr__(self, "base", self.name)

    @property
    def helper(self) -> str:
        """Name of the ``@_jit`` combine helper the backend prints for this kind (``_sum_combine``)."""
        return f"_{self.base}_combine"

    def __repr__(self):
        return f"Combiner({self.name})"


def _sum_identity(dtype: torch.dtype):
    if dtype == torch.bool:
        return False
    return 0.0 if dtype.is_floating_point else 0


def _max_identity(dtype: torch.dtype):
    if dtype == torch.bool:
        return False
    return -math.inf if dtype.is_floating_point else torch.iinfo(dtype).min


def _min_identity(dtype: torch.dtype):
    if dtype == torch.bool:
        return True
    return math.inf if dtype.is_floating_point else torch.iinfo(dtype).max


def _sum_reference(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    return x.sum(dim=dims)


def _max_reference(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """``torch.amax`` over ``dims`` (NaN propagates); the identity where an extent is empty."""
    if any(x.shape[d] == 0 for d in dims):
        shape = [s for k, s in enumerate(x.shape) if k not in dims]
        return torch.full(shape, _max_identity(x.dtype), dtype=x.dtype, device=x.device)
    return torch.amax(x, dim=dims)


def _min_reference(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """The minimum as the negated maximum of ``-x`` (+inf where an extent is empty)."""
    return -_max_reference(-x, dims)


_NAN_ALL = "propagate_nan=tl.PropagateNan.ALL"

SUM = Combiner("sum", _sum_identity, "a + b", _sum_reference, splittable=True, online="rescaled", grad="sum")
MEAN = replace(SUM, name="mean", finalize="count", base="sum")
MAX = Combiner("max", _max_identity, f"tl.maximum(a, b, {_NAN_ALL})", _max_reference, splittable=True,
               online="running_max", grad="extremum")
MIN = Combiner("min", _min_identity, f"tl.minimum(a, b, {_NAN_ALL})", _min_reference, splittable=True,
               online=None, grad="extremum")

def _prod_identity(dtype: torch.dtype):
    if dtype == torch.bool:
        return True
    return 1.0 if dtype.is_floating_point else 1


def _prod_reference(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """``torch.prod`` over each of ``dims`` (1 where an extent is empty)."""
    for d in sorted(dims, reverse=True):
        x = torch.prod(x, dim=d)
    return x


PROD = Combiner("prod", _prod_identity, "a * b", _prod_reference, splittable=True, online=None, grad="prod")


def _argmax_reference(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """``torch.argmax`` along the one reduced dim: the first index of the largest value, NaN
    counting as the largest."""
    (d,) = dims
    return torch.argmax(x, dim=d)


def _ties_first(wins: str) -> str:
    """The condition under which ``(b, ib)`` replaces ``(a, ia)``: ``b`` wins strictly, ``b`` is
    NaN where ``a`` is not (NaN wins, as in torch), or the two tie (NaN ties NaN) and ``b`` comes
    first."""
    return f"({wins}) | ((b != b) & (a == a)) | (((b == a) | ((b != b) & (a != a))) & (ib < ia))"


ARGMAX = Combiner("argmax", _max_identity, _ties_first("b > a"), _argmax_reference, splittable=False, online=None,
                  grad="index", results=2)


def _argmin_reference(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """``torch.argmin`` along the one reduced dim: the first index of the smallest value; NaN
    counts as the smallest (torch.argmin returns the first NaN's index too)."""
    (d,) = dims
    return torch.argmin(x, dim=d)


ARGMIN = Combiner("argmin", _min_identity, _ties_first("b < a"), _argmin_reference, splittable=False, online=None,
                  grad="index", results=2)


#: every known reduction kind, by name
COMBINERS: dict[str, Combiner] = {}


def register(c: Combiner) -> Combiner:
    """Add ``c`` to :data:`COMBINERS` (a name may be registered once) and return it."""
    if c.name in COMBINERS and COMBINERS[c.name] is not c:
        raise ValueError(f"a combiner named {c.name!r} is already registered")
    COMBINERS[c.name] = c
    return c


def get(name: str) -> Combiner:
    """The combiner named ``name``; a KeyError lists the known names."""
    try:
        return COMBINERS[name]
    except KeyError:
        raise KeyError(f"unknown reduction kind {name!r}; known: {sorted(COMBINERS)}") from None


for _c in (SUM, MEAN, MAX, MIN, PROD, ARGMAX, ARGMIN):
    register(_c)
del _c
