"""Hints for tensors given in another layout than an algorithm reads (a torch conv weight (O, C, R, Q)
given to a channels-last algorithm reading (O, R, Q, C), an NCHW input given for NHWC).

A call whose sizes disagree, or that breaks one of the algorithm's constraints (``dt.requires``: a
conv's output size computed from a kernel size read off the wrong dim), gets the layouts the
algorithm reads its tensors in and the shapes given; where permuting the dims of one tensor argument
(or of two) makes every size and constraint of the call agree, the permute (:func:`layout_hint`).
Only the error path runs this.
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

from .expr import InputTensor

__all__ = ["layout_hint"]

#: tensors of more dims are not permuted (7! orders)
_MAX_DIMS = 6
#: the most argument combinations a pair search tries (two 5-dim tensors: 14400)
_MAX_PAIRS = 20000


class _Shaped:
    """A stand-in argument with only a shape (what a size check and a constraint check read)."""
    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = tuple(shape)


def _tensor_args(alg, args: Sequence[Any]) -> list[tuple[int, Any]]:
    """(position, parameter) of each tensor parameter whose argument has a shape of its rank."""
    out = []
    for k, p in enumerate(alg.params):
        if isinstance(p, InputTensor) and k < len(args):
            shape = getattr(args[k], "shape", None)
            if shape is not None and len(tuple(shape)) == len(p.dims):
                out.append((k, p))
    return out


def _fits(alg, args: Sequence[Any]) -> bool:
    """Whether the tensor shapes of ``args`` bind every size symbol to one value and the call meets
    the algorithm's constraints."""
    sizes: dict[str, int] = {}
    for k, p in enumerate(alg.params):
        if isinstance(p, InputTensor):
            shape = tuple(getattr(args[k], "shape", ()))
            if len(shape) != len(p.dims):
                return False
            for d, n in zip(p.dims, shape):
                if sizes.setdefault(d, int(n)) != int(n):
                    return False
    check = getattr(alg, "requires_check", None)
    try:
        return check is None or check(args) < 0
    except Exception:   # noqa: BLE001 - a scalar the constraints cannot compare: not a fit
        return False


def _inversions(perm: Sequence[int]) -> int:
    return sum(1 for a, b in itertools.combinations(perm, 2) if a > b)


def _orders(shape: tuple) -> list[tuple[tuple[int, ...], tuple]]:
    """The permutations of ``shape``'s dims that give another shape, one per shape (the one that
    moves the fewest pairs of dims), fewest moved first: (perm, permuted shape)."""
    if len(shape) > _MAX_DIMS:
        return []
    best: dict[tuple, tuple[int, ...]] = {}
    for perm in sorted(itertools.permutations(range(len(shape))), key=_inversions):
        new = tuple(shape[j] for j in perm)
        if new != shape and new not in best:
            best[new] = perm
    return [(perm, new) for new, perm in best.items()]


def _fitting(alg, args: Sequence[Any]) -> list[list[tuple[Any, tuple[int, ...]]]]:
    """The ways of permuting one tensor argument (each tensor's simplest), else two together (the
    simplest pair), that make every size and constraint of the call agree: lists of (parameter, perm)."""
    tensors = _tensor_args(alg, args)
    orders = {k: _orders(tuple(int(n) for n in args[k].shape)) for k, _ in tensors}
    found = []
    for k, p in tensors:
        for perm, new in orders[k]:
            trial = list(args)
            trial[k] = _Shaped(new)
            if _fits(alg, trial):
                found.append([(p, perm)])
                break
    if found:
        return found
    tried, best = 0, None
    for (k1, p1), (k2, p2) in itertools.combinations(tensors, 2):
        for (perm1, new1), (perm2, new2) in itertools.product(orders[k1], orders[k2]):
            tried += 1
            if tried > _MAX_PAIRS:
                break
            trial = list(args)
            trial[k1], trial[k2] = _Shaped(new1), _Shaped(new2)
            cost = _inversions(perm1) + _inversions(perm2)
            if (best is None or cost < best[0]) and _fits(alg, trial):
                best = (cost, [(p1, perm1), (p2, perm2)])
    return [best[1]] if best else []


def _looks_like(p, perm: Sequence[int]) -> str:
    """The dims of ``p`` in the order the given tensor holds them, when ``tensor.permute(perm)`` lays
    them out as ``p`` reads them."""
    return f"({', '.join(p.dims[list(perm).index(j)] for j in range(len(perm)))})"


def layout_hint(alg, args: Sequence[Any], names: Sequence[str], scalar: str | None = None) -> str:
    """The tail of the message of a call of ``alg`` whose sizes or constraints fail: the layouts ``alg``
    reads the tensor parameters ``names`` in and the shapes given (``"; conv2d reads X as (N, C, H, W),
    got shape (2, 4, 9, 9), and Wt as (O, C, R, Q), got shape (8, 3, 3, 4)"``), and, where permuting the
    dims of one tensor argument (or of two together) makes every size and constraint of the call agree,
    the permute, what the tensor's sizes look like, and that a matching size alone does not prove the
    dims mean what ``alg`` expects. ``scalar``: the int argument whose constraint failed, if one did
    (an output size): the permute is then offered as the other explanation, after that argument's own
    fix. "" where ``names`` is empty and no permute fits."""
    ways = _fitting(alg, args)
    named = set(names) | {p.name for way in ways for p, _ in way}
    parts = [f"{p.name} as ({', '.join(p.dims)}), got shape {tuple(int(n) for n in args[k].shape)}"
             for k, p in _tensor_args(alg, args) if p.name in named]
    note = ""
    if parts:
        note = f"; {alg.name} reads " + (", and ".join(parts) if len(parts) < 3 else
                                         ", ".join(parts[:-1]) + ", and " + parts[-1])
    if not ways:
        return note
    said = []
    for way in ways:
        fix = " with ".join(f"{p.name}.permute({', '.join(map(str, perm))})" for p, perm in way)
        looks = ", ".join(f"{p.name}'s sizes fit {_looks_like(p, perm)}" for p, perm in way)
        said.append(f"{fix} ({looks})")
    if scalar is not None:
        return (f"{note}; or, if {scalar!r} is the size you want and a tensor is in another layout, "
                f"{', or '.join(said)} would make every size and constraint of the call agree (check that the "
                f"dims mean what {alg.name} expects: a matching size alone does not say so)")
    return (f"{note}; {', or '.join(said)} makes every size and constraint of the call agree (check that the "
            f"dims mean what {alg.name} expects: a matching size alone does not say so)")
