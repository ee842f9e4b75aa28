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

__all__ = ["Combiner", "COMBINERS", "get", "register", "SUM", "MEAN", "MAX", "MIN", "PROD", "ARGMAX", "ARGMIN", "VAR"]


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
        finalize: None, or ``"count"``: divide the combined value by the reduced extent;
            ``"variance"``: the value is the state's M2 divided by its count.
        base: the kind whose accumulation this one performs before ``finalize`` (``"sum"`` for
            ``mean``); equal to ``name`` when left empty.
        state: the names of the values each lane carries while folding, when more than one
            (the variance's ``("n", "k", "m", "q")``: count, shift, mean minus the shift, M2).
            Then ``combine`` is the body of the helper merging two states (arguments the names
            suffixed ``_a`` and ``_b``; returns the merged state) and ``step`` the body of the
            helper adding one value ``x`` to a state where ``v`` is 1.0 (0.0: a masked lane):
            ``(*state, x, v) -> state``.
        lane: the names of the values a lane carries through a reduction loop when they differ
            from ``state`` (the variance's running sums ``("n", "k", "s", "s2")``: count, shift,
            sum and sum of squares of ``x - k``, two adds and a multiply-add per value instead
            of Welford's division). ``step`` then updates these, and ``close`` is the body of the
            helper turning one lane's values into its ``state`` (``(*lane) -> state``), run once
            per lane after the loop, before the lanes merge.
        close: see ``lane``.
        lane_start: the values (Triton literals) a lane's loop values start from, when not all
            ``0.0`` (the variance's shift starts as NaN: unset).
        empty: what a reduction over an empty extent gives: ``"identity"`` (torch's value: a sum 0,
            a product 1, a mean or variance NaN through its finishing step) or ``"error"`` (torch
            raises: the maximum, minimum and arg-reductions of no elements; binding a call then
            raises :class:`~dtriton.errors.ShapeError` naming the stage and the axis).
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
    state: tuple[str, ...] = ()
    step: str = ""
    lane: tuple[str, ...] = ()
    close: str = ""
    lane_start: tuple[str, ...] = ()
    empty: str = "identity"

    def __post_init__(self):
        if not self.base:
            object.__setattr__(self, "base", self.name)

    @property
    def helper(self) -> str:
        """Name of the ``@_jit`` combine helper the backend prints for this kind (``_sum_combine``)."""
        return f"_{self.base}_combine"

    @property
    def step_helper(self) -> str:
        """Name of the ``@_jit`` helper adding one value to a state (kinds with a ``state``)."""
        return f"_{self.base}_step"

    @property
    def close_helper(self) -> str:
        """Name of the ``@_jit`` helper turning a lane's loop values into its state (kinds with ``lane``)."""
        return f"_{self.base}_close"

    @property
    def loop_state(self) -> tuple[str, ...]:
        """The names of the values a lane carries through a reduction loop: ``lane`` or ``state``."""
        return self.lane or self.state

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
    """``torch.amax`` over ``dims`` (NaN propagates); the identity where an extent is empty (a
    call binding such a user stage raises first: ``empty="error"``)."""
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
               online="running_max", grad="extremum", empty="error")
MIN = Combiner("min", _min_identity, f"tl.minimum(a, b, {_NAN_ALL})", _min_reference, splittable=True,
               online=None, grad="extremum", empty="error")

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


def _no_index(x: torch.Tensor, d: int) -> torch.Tensor:
    """The index result of an arg-reduction over the empty dim ``d`` of ``x``: zeros, never read (a
    call whose outputs use it raises first; one whose outputs are empty has no element to show)."""
    return torch.zeros([s for k, s in enumerate(x.shape) if k != d], dtype=torch.int64, device=x.device)


def _argmax_reference(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """``torch.argmax`` along the one reduced dim: the first index of the largest value, NaN
    counting as the largest."""
    (d,) = dims
    return _no_index(x, d) if x.shape[d] == 0 else torch.argmax(x, dim=d)


def _ties_first(wins: str) -> str:
    """The condition under which ``(b, ib)`` replaces ``(a, ia)``: ``b`` wins strictly, ``b`` is
    NaN where ``a`` is not (NaN wins, as in torch), or the two tie (NaN ties NaN) and ``b`` comes
    first."""
    return f"({wins}) | ((b != b) & (a == a)) | (((b == a) | ((b != b) & (a != a))) & (ib < ia))"


ARGMAX = Combiner("argmax", _max_identity, _ties_first("b > a"), _argmax_reference, splittable=False, online=None,
                  grad="index", results=2, empty="error")


def _argmin_reference(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """``torch.argmin`` along the one reduced dim: the first index of the smallest value; NaN
    counts as the smallest (torch.argmin returns the first NaN's index too)."""
    (d,) = dims
    return _no_index(x, d) if x.shape[d] == 0 else torch.argmin(x, dim=d)


ARGMIN = Combiner("argmin", _min_identity, _ties_first("b < a"), _argmin_reference, splittable=False, online=None,
                  grad="index", results=2, empty="error")


def _var_reference(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """The biased variance (``torch.var(..., correction=0)``) over ``dims``; NaN where an extent is empty."""
    return torch.var(x, dim=dims, correction=0)


#: Chan, Golub & LeVeque (1979): two states merged. A lane's values are kept relative to a shift
#: ``k`` (its first value), so the arithmetic is on deviations of the data's own scale: Welford's
#: update on raw values ~1e4 with a spread of 1 loses ~1e-3 of the variance in fp32, the shifted
#: one does not. ``w`` is the second state's share of the count (no 0/0: counts are whole
#: numbers); an empty first state takes the second's shift.
#: A state holding an infinity has a mean of +-inf (``m``) and a NaN M2: ``d`` is then not finite, and the
#: merged mean is taken as the two means weighted (``m_a + d * w`` would be ``inf - inf``), so a mean over
#: values with an infinity is that infinity, as torch's, under every split (s16 trial).
_CHAN = ("n = n_a + n_b\n"
         "    w = n_b / tl.maximum(n, 1.0)\n"
         "    d = (k_b - k_a) + (m_b - m_a)\n"
         "    keep = n_a > 0\n"
         "    m = tl.where(d - d == 0.0, m_a + d * w, m_a * (1.0 - w) + (m_b + (k_b - k_a)) * w)\n"
         "    return n, tl.where(keep, k_a, k_b), tl.where(keep, m, m_b), q_a + q_b + d * d * n_a * w")
#: One value added to a lane's running sums of ``y = x - k`` (the lane's first value sets ``k``,
#: which starts as NaN: unset; ``v`` is 0.0 on a masked lane, which adds nothing): a compare, a
#: select, a subtraction, two adds and a multiply-add per value. Welford's update (a division per
#: value) kept the fp16 statistics of batch norm compute-bound on the H200 (13 instructions and a
#: reciprocal per value). The shift is tested on ``k`` itself, not on the count: a count that no
#: value feeds keeps Triton's default layout, and a test on it converted layouts through shared
#: memory at every step (sm_90). A first value that is not finite (inf, NaN) sets the shift 0: ``x - inf``
#: would turn the lane's finite values into -inf and its infinities into NaN (s16 trial: a mean over a row
#: with an inf came out NaN under split partials); its own ``y`` still carries the inf or NaN into the sums.
_SHIFTED_SUMS = ("k1 = tl.where((k != k) & (v > 0), tl.where(x - x == 0.0, x, 0.0), k)\n"
                 "    y = tl.where(v > 0, x - k1, 0.0)\n"
                 "    return n + v, k1, s + y, s2 + y * y")
#: A lane's sums as its (count, shift, mean - shift, M2) state: ``s2 - s * s / n`` loses about
#: ``1 + (mean - k)**2 / var`` ulps of the lane's M2, where mean and var are the lane's own; ``k``
#: being one of the lane's values, that is at most ``n`` ulps (Samuelson's bound) and about 2 for
#: ordinary data, whatever the offset of the data or the differences between lanes (which Chan's
#: merge of the closed states handles). A rounded negative M2 becomes 0 (NaN stays NaN); a lane
#: without values gets the shift 0, as Chan's merge expects of an empty state.
_CLOSE = ("m = s / tl.maximum(n, 1.0)\n"
          "    q = s2 - s * m\n"
          "    return n, tl.where(n > 0, k, 0.0), m, tl.where(q < 0.0, 0.0, q)")

#: the biased variance in one pass (shifted sums per lane, Chan's merge across lanes); no
#: ``dt`` builder: the plan's single-pass rewrite (:mod:`dtriton.ir.rewrite`) puts it in place of
#: ``mean((x - mean(x))**2)``. Split across programs, each split's whole state is a partial that
#: the reader merges (Chan), in split order: deterministic.
VAR = Combiner("var", _sum_identity, _CHAN, _var_reference, splittable=True, online=None, grad="variance",
               finalize="variance", state=("n", "k", "m", "q"), step=_SHIFTED_SUMS, lane=("n", "k", "s", "s2"),
               close=_CLOSE, lane_start=("0.0", "float('nan')", "0.0", "0.0"))


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


for _c in (SUM, MEAN, MAX, MIN, PROD, ARGMAX, ARGMIN, VAR):
    register(_c)
del _c
