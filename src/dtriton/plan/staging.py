"""Operand staging: an input copied into another memory layout before the kernels run, decided per call.

An fp32 dot on Hopper's tensor cores (wgmma, at tf32 / tf32x3 / bf16x3 / bf16x6) takes its right operand
from shared memory K-major only (the reduced axis at unit stride); :mod:`dtriton.plan.dots` puts a side
that reads the reduced axis at unit stride on the right, and when neither does (``A.T @ B`` with both
operands stored MN-major, "TN") the default precision falls back to FMA (``ieee``): 2,890 us at 4096^3
on the H200 against about 1,700 us for the other layouts at tf32x3 (bench/results/probe_fp32.json).

The decision here: for such a call (one fp32 contraction, large enough that a copy is cheap beside it:
at least 2**30 multiply-adds, on the GPU, a tensor-core or the default precision), copy the smaller
operand so that it reads the reduced axis at unit stride (``t.movedim(d, -1).contiguous().movedim(-1, d)``:
same shape and values, other strides). A 4096x4096 fp32 copy moves 128 MB (about 40 us on the H200),
against the ~1,200 us the tensor-core path saves. The runtime makes the copies before it binds the call,
so every later decision (tiles, operand order, precision, TMA) sees the copied layout.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch

from ..ir import Algorithm, Axis, Binding, Load, contractions, mul_factors, tensor_core_sides
from ..schedule import AUTO_TENSOR_CORE

__all__ = ["MIN_STAGED_WORK", "kmajor_copies", "stage_inputs", "call_precision"]

#: multiply-adds from which a contraction's operand is worth copying (4096 x 4096 x 64)
MIN_STAGED_WORK = 1 << 30


def _side_load(r, n: str) -> Load | None:
    """The one tensor load of the side of contraction ``r`` that uses free axis ``n`` (None when the side
    is not a single load of an input)."""
    ra = r.over[0]
    side = [f for f in mul_factors(r.x) if ra in f.axes and n in f.axes]
    if len(side) != 1 or not isinstance(side[0], Load):
        return None
    return side[0]


def kmajor_copies(alg: Algorithm, b: Binding, precision: str, gpu: bool) -> dict[str, int]:
    """Input tensors to copy before the call, name -> the dim to make unit-stride (empty: none).

    ``b``: the call's binding (sizes, dtypes, unit-stride dims); ``precision``: the schedule's dot
    precision (``"auto"`` when none is given); ``gpu``: the call runs on a CUDA device (the interpreter
    has no wgmma: never). Applies to an algorithm with one fp32 contraction of at least
    :data:`MIN_STAGED_WORK` multiply-adds where neither side reads the reduced axis at unit stride and
    each side is one plain load of a floating input; the copy is the smaller of the two tensors."""
    if not gpu or precision == "ieee":
        return {}
    cons = contractions(alg)
    if len(cons) != 1:
        return {}
    (name, (m, n, ra)), = cons.items()
    r = alg.stages[name].node
    if tensor_core_sides(r, b.unit_dims):
        return {}
    sizes = b.axis_sizes
    if sizes[m] * sizes[n] * sizes[ra] < MIN_STAGED_WORK:
        return {}
    best = None
    for ax in (m, n):
        ld = _side_load(r, ax)
        if ld is None or b.dtypes.get(ld.tensor.name) != torch.float32:
            return {}
        dims = [d for d, e in enumerate(ld.index) if isinstance(e, Axis) and e.name == ra]
        if len(dims) != 1:
            return {}
        numel = math.prod(b.sizes[s] for s in ld.tensor.dims)
        if best is None or numel < best[2]:
            best = (ld.tensor.name, dims[0], numel)
    return {best[0]: best[1]} if best is not None else {}


def stage_inputs(alg: Algorithm, args: Sequence[Any], copies: Mapping[str, int]) -> tuple:
    """``args`` with the inputs named in ``copies`` (from :func:`kmajor_copies`) copied so that the
    given dim has stride 1 (same shape and values)."""
    names = [p.name for p in alg.params]
    out = list(args)
    for t, d in copies.items():
        a = out[names.index(t)]
        out[names.index(t)] = a.movedim(d, -1).contiguous().movedim(-1, d)
    return tuple(out)


def call_precision(alg: Algorithm, b: Binding, precision: str, gpu: bool) -> str:
    """The precision the fp32 contractions of a call (binding ``b``, before staging) run at on the GPU
    under the schedule's ``precision``: a given one as it is; ``"auto"`` resolved as the plan resolves
    it, :data:`~dtriton.schedule.AUTO_TENSOR_CORE` (``"tf32x3"``) when some contraction has a side that reads its reduced axis at unit stride
    (:func:`~dtriton.ir.tensor_core_sides`: :mod:`dtriton.plan.dots` puts that side on the right of a
    tensor-core dot) or when :func:`kmajor_copies` copies an operand so, else ``"ieee"`` (FMA).

    Exploration reads it to decide whether a call's fp32 dots feed tensor cores (and so whether TMA
    tile loads and the tensor-core precisions are worth searching). A schedule rule that picks another
    tensor-core precision for "auto" (the long reductions' ``"bf16x6"``,
    :mod:`dtriton.schedule.dot_rules`) writes it into the complete schedule, which is passed here."""
    if precision != "auto":
        return precision
    if any(tensor_core_sides(alg.stages[name].node, b.unit_dims) for name in contractions(alg)):
        return AUTO_TENSOR_CORE
    return AUTO_TENSOR_CORE if kmajor_copies(alg, b, precision, gpu) else "ieee"
