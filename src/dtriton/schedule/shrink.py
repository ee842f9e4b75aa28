"""Smaller schedules after a resource failure: what a default schedule falls back to.

A default schedule must always compile and run. The heuristic's tiles can still exceed a
backend limit on some shapes (shared memory for a backward pass with several dots in one loop,
or a block over 2**20 elements where a gather keeps an axis whole), so the runtime asks
:func:`shrink` for the next smaller schedule and retries, with a warning. Before a default is first
used the runtime shrinks it until :func:`fits_smem` (this rough lower bound, from the schedule
alone) and then the estimate of every planned kernel (:func:`dtriton.plan.smem.program_fits`: each
pipelined loop's rings of loaded tiles, every dot's operand copies, TMA store staging) fit.
"""

from __future__ import annotations

from typing import Mapping

import torch

from ..ir import Algorithm, contraction_operands, contractions
from .schedule import Schedule

__all__ = ["shrink", "fits_smem", "operand_itemsize", "smem_estimate"]

#: no tile is shrunk below this (the smallest dot tile Triton accepts)
MIN_TILE = 16


def _pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def shrink(sched: Schedule, sizes: dict[str, int]) -> Schedule | None:
    """The next smaller schedule than the complete ``sched`` (``sizes``: axis -> extent), or None
    when nothing is left to shrink. In order: ``num_stages`` above 2 down by one (the software
    pipeline's buffers are the first use of shared memory); else the largest block halved: a
    tile above :data:`MIN_TILE` (of the schedule or of a stage), or an axis covered "whole" by one
    block above 64 elements, which then loops over it in tiles of half its padded size."""
    if (sched.num_stages or 0) > 2:
        return sched.replace(num_stages=sched.num_stages - 1)
    cands = [(t, 0, a, None) for a, t in sched.tile.items() if t > MIN_TILE]
    cands += [(t, 0, a, s) for s, ss in sched.stages.items() for a, t in ss.tile.items() if t > MIN_TILE]
    cands += [(_pow2(sizes[a]), 1, a, None) for a, v in sched.strategy.items()
              if v == "whole" and a in sizes and _pow2(sizes[a]) > 64 and a not in (sched.grid or ())]
    if not cands:
        return None
    block, whole, a, stage = max(cands, key=lambda c: (c[0], c[1]))
    if whole:
        return sched.replace(strategy=dict(sched.strategy, **{a: "loop"}), tile=dict(sched.tile, **{a: block // 2}))
    if stage is None:
        return sched.replace(tile=dict(sched.tile, **{a: block // 2}))
    ss = sched.stages[stage]
    return sched.replace(stages=dict(sched.stages, **{stage: ss.replace(tile=dict(ss.tile, **{a: block // 2}))}))


def smem_estimate(alg: Algorithm, sched: Schedule, itemsize: int) -> int:
    """Bytes of shared memory the largest contraction of ``alg`` stages under ``sched``: its two
    operand tiles, ``(m x r + r x n) * itemsize``, once per pipeline stage (``num_stages``). A
    lower bound, from the schedule alone: a kernel with several dots in one loop, or loads feeding
    a dot through arithmetic (fp32 buffers), holds more; the runtime checks the planned kernels with
    :func:`dtriton.plan.smem.kernel_smem`."""
    stages = max(1, sched.num_stages or 1)
    most = 0
    for name, (m, n, r) in contractions(alg).items():
        ss = sched.stages.get(name)
        t = {a: (ss.tile.get(a) if ss is not None else None) or sched.tile.get(a, 1) for a in (m, n, r)}
        most = max(most, (t[m] * t[r] + t[r] * t[n]) * itemsize * stages)
    return most


def operand_itemsize(alg: Algorithm, dtypes: Mapping[str, torch.dtype]) -> int:
    """Bytes per element of the operand tiles :func:`smem_estimate` counts: the largest of the
    floating or int8 tensors the contractions of ``alg`` stream (``dtypes``: input -> dtype; an fp8
    GEMM's operands are 1 byte, its fp32 per-row scales are no operands: counted at 4 bytes they
    shrank its default 128 x 128 x 128 tiles to 64 x 128 x 128 at 2 stages, 149.8 us against 113 on
    the H200), of every such input where ``alg`` has no contraction; 4 where there is none."""
    ops = contraction_operands(alg)
    sizes = [d.itemsize for t, d in dtypes.items() if (not ops or t in ops) and (d.is_floating_point or d == torch.int8)]
    return max(sizes, default=4)


def fits_smem(alg: Algorithm, sched: Schedule, itemsize: int, limit: int) -> bool:
    """Whether :func:`smem_estimate` of ``sched`` stays within ``limit`` bytes."""
    return smem_estimate(alg, sched, itemsize) <= limit
