"""Checks on candidate schedules: resource rules against device limits, and correctness of outputs.

:func:`check_resources` prunes a complete schedule before compiling (shared memory of dot tiles,
elements per program, accumulator registers per thread, "whole" blocks); :func:`check_outputs`
compares a candidate's outputs with the reference by relative norm error, within
:func:`default_tolerance` for the call's dtypes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from ..schedule import Schedule, next_pow2
from ..ir import Algorithm, Binding, contractions, expr_axes, stage_grid
from ..runtime import backend_for

__all__ = ["Limits", "check_resources", "default_tolerance", "check_outputs", "stage_warps", "CHECK_CHUNK"]


# ----------------------------------------------------------------------------------------------
# device limits and resource rules
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    """Resource limits used to prune candidates before compiling.

    Attributes:
        smem_bytes: shared memory one program may use (bytes); 227 KB on H100/H200.
        sm_count: streaming multiprocessors (used to decide when output tiles are "few").
        max_block_elems: elements one program may hold in registers (about 64K).
        whole_max: largest padded extent of an axis covered by one block ("whole").
        max_acc_per_thread: fp32 dot-accumulator elements per thread (``BM*BN / (32*num_warps)``);
            above it the kernel spills registers and Triton can take minutes to compile it.
        max_elems_per_thread: block elements per thread for any stage.
        tma: the device has the tensor-memory accelerator (compute capability 9.0 or newer), so
            derived spaces of contractions include ``access="tma"`` and warp specialisation.
    """
    smem_bytes: int = 227 * 1024
    sm_count: int = 132
    max_block_elems: int = 65536
    whole_max: int = 32768
    max_acc_per_thread: int = 256
    max_elems_per_thread: int = 2048
    tma: bool = True

    @staticmethod
    def for_device(device: torch.device) -> "Limits":
        """Limits of the GPU holding ``device`` tensors; H100-like defaults (with whole blocks up
        to 4096, as the heuristic uses) for the interpreter."""
        if backend_for(device) == "interpreter" or not torch.cuda.is_available():
            return Limits(whole_max=4096)
        try:
            props = torch.cuda.get_device_properties(device)
            smem = int(getattr(props, "shared_memory_per_block_optin", 0) or 0)
            if smem <= 0:
                smem = {9: 227, 8: 163 if props.minor == 0 else 99}.get(props.major, 96) * 1024
            return Limits(smem_bytes=smem, sm_count=int(props.multi_processor_count), tma=props.major >= 9)
        except Exception:  # pragma: no cover - odd driver
            return Limits()


def stage_warps(sched: Schedule, stage: str) -> int:
    """Warps of the kernel computing ``stage``: its own ``num_warps``, else the schedule's, else 4."""
    ss = sched.stages.get(stage)
    return int((ss.num_warps if ss is not None and ss.num_warps else None) or sched.num_warps or 4)


def _fp32_tma_smem(bm: int, bn: int, bk: int, stages: int) -> int:
    """Shared memory of an fp32 dot loop fed by TMA loads (Triton 3.6, sm_90): ``stages - 1`` operand
    buffers and, beside them, the fp32 output tile staged for its TMA store. Compiled for sm_90 here
    (NT ``X @ W.T``, any precision): 128x128x32 at 4 stages 163,896 B (98,304 + 65,536 + barriers),
    256x128x32 at 3 stages 229,408, at 4 278,584 (Triton's OutOfResources on the H200, explore of
    session 6), 128x64x32 at 4 106,552; 16-bit loops reuse their pipeline's buffers for the store."""
    return (bm * bk + bk * bn) * 4 * (stages - 1) + bm * bn * 4


def check_resources(alg: Algorithm, sched: Schedule, b: Binding, limits: Limits) -> str | None:
    """Check a *complete* schedule against resource rules for the shapes in ``b``.

    Rules: a "whole" axis pads to at most ``limits.whole_max``; each contraction's dot tiles fit
    shared memory, ``(BM*BK + BK*BN) * bytes * num_stages <= limits.smem_bytes`` (bytes: the
    widest floating input dtype; fp32 with TMA loads: :func:`_fp32_tma_smem` when larger); each dot operand and accumulator, and each stage's block of
    elements per program (grid tiles times the blocks of in-program axes, dot reduction axes
    excepted), holds at most ``limits.max_block_elems`` elements; a dot accumulator spread over
    the program's threads holds at most ``limits.max_acc_per_thread`` per thread, any block at
    most ``limits.max_elems_per_thread``.

    The shared-memory rule is a lower bound from the schedule alone; exploration and the tuned
    kernel's revalidation then check the planned kernels (:func:`dtriton.plan.smem.program_fits`:
    every pipelined loop's rings, the dots' operand copies, TMA store staging).

    Returns ``None`` when every rule holds, else a sentence naming the rule that failed."""
    sizes = b.axis_sizes
    grid = tuple(sched.grid or ())

    def strat(a):
        return sched.strategy.get(a, "auto")

    def blk(a, stage=None):
        if strat(a) == "whole":
            return next_pow2(sizes[a])
        own = sched.stage(stage).tile.get(a) if stage else None
        return int(own or sched.tile.get(a) or next_pow2(sizes[a]))

    for a in alg.axis_names:
        if strat(a) == "whole" and a not in grid and next_pow2(sizes[a]) > limits.whole_max:
            return f"axis {a!r} is 'whole' with a block of {next_pow2(sizes[a])} > {limits.whole_max}"
    cons = contractions(alg)
    dot_r = {r for (_, _, r) in cons.values()}
    fl = [d.itemsize for d in b.dtypes.values() if d.is_floating_point or d == torch.int8]
    nbytes = max(fl) if fl else 4
    for name, (m, n, r) in cons.items():
        bm, bn, bk = blk(m, name), blk(n, name), blk(r, name)
        stages = 1 if strat(r) == "whole" else max(1, int(sched.num_stages))
        smem = (bm * bk + bk * bn) * nbytes * stages
        if sched.access == "tma" and nbytes == 4 and stages > 1:
            smem = max(smem, _fp32_tma_smem(bm, bn, bk, stages))
        if smem > limits.smem_bytes:
            return (f"stage {name!r}: dot tiles {bm}x{bk} and {bk}x{bn} of {nbytes}-byte elements x {stages} "
                    f"stages need {smem // 1024} KB of shared memory > {limits.smem_bytes // 1024} KB")
        for what, e in (("accumulator", bm * bn), ("left operand", bm * bk), ("right operand", bk * bn)):
            if e > limits.max_block_elems:
                return f"stage {name!r}: dot {what} of {e} elements > {limits.max_block_elems}"
        warps = stage_warps(sched, name)
        per_thread = bm * bn // (32 * warps)
        if per_thread > limits.max_acc_per_thread:
            return (f"stage {name!r}: a {bm}x{bn} dot accumulator over {warps} warps is {per_thread} fp32 registers "
                    f"per thread > {limits.max_acc_per_thread} (spills; compiles slowly)")
    for st in alg.stages.values():
        g = list(stage_grid(alg, st.name, grid, sched.stage(st.name).grid))
        elems = 1
        for a in g:
            elems *= int(sched.tile.get(a) or 1)
        for a in expr_axes(st.expr):
            if a not in g and a not in dot_r:
                elems *= blk(a)
        per_thread = elems // (32 * stage_warps(sched, st.name))
        if per_thread > limits.max_elems_per_thread:
            return (f"stage {st.name!r}: {elems} elements per program over {stage_warps(sched, st.name)} warps is "
                    f"{per_thread} per thread > {limits.max_elems_per_thread}")
        if elems > limits.max_block_elems:
            return (f"stage {st.name!r}: {elems} elements per program (grid tiles {dict((a, sched.tile.get(a, 1)) for a in g)}"
                    f" times in-program blocks) > {limits.max_block_elems}")
    return None


# ----------------------------------------------------------------------------------------------
# correctness
# ----------------------------------------------------------------------------------------------
def default_tolerance(b: Binding, sched: Schedule | None = None) -> float:
    """Relative norm error allowed for a call bound to ``b`` under ``sched``: 1e-2 when any
    input or output is fp16/bf16 or fp8 (Hopper's fp8 dots accumulate at reduced precision),
    3e-3 for fp32 with ``precision="tf32"``, 1e-4 for fp32, 1e-5 for fp64 (1e-9 with
    ``acc_dtype="float64"``)."""
    dts = [d for d in b.dtypes.values() if d.is_floating_point] + list(b.out_dtypes)
    if any(d in (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2) for d in dts):
        return 1e-2
    if any(d == torch.float32 for d in dts):
        return 3e-3 if sched is not None and sched.precision == "tf32" else 1e-4
    if any(d == torch.float64 for d in dts):
        return 1e-9 if sched is not None and sched.acc_dtype == "float64" else 1e-5
    return 1e-4


#: Elements :func:`check_outputs` compares at once: float64 copies of 2**24 elements (128 MB each), so
#: checking a batch norm of 64x64x512x512 (2**30 elements) needs no 8 GB float64 copies of its output and
#: reference (H200 s8: exploring it, candidates checked in several worker processes at once ran out of the
#: GPU's memory, and none was timed).
CHECK_CHUNK = 1 << 24


def check_outputs(got: Sequence[torch.Tensor], ref: Sequence[torch.Tensor], tol: float) -> tuple[bool, float, str]:
    """Compare kernel outputs with reference outputs.

    NaN and ±inf must appear exactly where the reference has them; over the finite elements the
    relative norm error ``||got - ref|| / ||ref||`` (absolute when ``ref`` is all zero) must be
    at most ``tol``. Compared in float64, :data:`CHECK_CHUNK` elements at a time (the memory a
    check takes stays bounded whatever the outputs' size). Returns ``(ok, worst relative error,
    reason)``; reason is "" when ok."""
    if len(got) != len(ref):
        return False, math.inf, f"{len(got)} outputs, the reference has {len(ref)}"
    worst = 0.0
    for k, (g, r) in enumerate(zip(got, ref)):
        name = f"output {k}"
        if not isinstance(g, torch.Tensor):
            return False, math.inf, f"{name} is a {type(g).__name__}, not a tensor"
        if tuple(g.shape) != tuple(r.shape):
            return False, math.inf, f"{name} has shape {tuple(g.shape)}, the reference {tuple(r.shape)}"
        if g.numel() == 0:
            continue
        counts, nums, dens = _compare(g.detach().reshape(-1), r.detach().reshape(-1))
        nan_here, nan_missing, inf_differ = counts
        if nan_here:
            return False, math.inf, f"{name}: {nan_here} NaN where the reference is finite (elements left unwritten?)"
        if nan_missing:
            return False, math.inf, f"{name}: {nan_missing} values where the reference is NaN"
        if inf_differ:
            return False, math.inf, f"{name}: {inf_differ} infinities that differ from the reference"
        num = float(torch.linalg.vector_norm(torch.tensor(nums, dtype=torch.float64)))
        den = float(torch.linalg.vector_norm(torch.tensor(dens, dtype=torch.float64)))
        err = num / den if den > 0 else num
        worst = max(worst, err)
        if not err <= tol:
            return False, err, f"{name}: relative error {err:.3g} > {tol:g}"
    return True, worst, ""


def _compare(g: torch.Tensor, r: torch.Tensor) -> tuple[list[int], list[float], list[float]]:
    """Flat ``g`` against flat ``r`` in float64, :data:`CHECK_CHUNK` elements at a time: the counts of
    (NaN where ``r`` is not, values where ``r`` is NaN, infinities that differ) and, per chunk, the
    norms of the finite elements' differences and of the reference's finite elements."""
    counts, nums, dens = [0, 0, 0], [], []
    for lo in range(0, r.numel(), CHECK_CHUNK):
        g64 = g[lo:lo + CHECK_CHUNK].to(device=r.device, dtype=torch.float64)
        r64 = r[lo:lo + CHECK_CHUNK].to(torch.float64)
        gn, rn = torch.isnan(g64), torch.isnan(r64)
        ri, gi = torch.isinf(r64), torch.isinf(g64)
        counts[0] += int((gn & ~rn).sum())
        counts[1] += int((rn & ~gn).sum())
        counts[2] += int((ri & (g64 != r64)).sum()) + int((gi & ~ri).sum())
        fin = ~(rn | ri)
        nums.append(float(torch.linalg.vector_norm(torch.where(fin, g64 - r64, 0.0))))
        dens.append(float(torch.linalg.vector_norm(torch.where(fin, r64, 0.0))))
    return counts, nums, dens
