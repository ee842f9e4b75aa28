"""Probe: can a hand-written Gluon attention forward in Triton 3.6 reach cuDNN's rate on the H200 (issue 18)?

    PYTHONPATH=src python3 bench/probe_gluon_attention.py [--cases n4096x128,n1024x64,c4096x128]
                                                          [--only NAME,...] [--out DIR] [--compile-only]

Self-contained (no dtriton imports). Attention forward of contiguous (B, H, S, D) fp16 Q, K, V
(S = T, D 64 or 128, scale 1/sqrt(D), S a multiple of the tiles): O fp16 (B, H, S, D) and the row
log-sum-exp LSE fp32 (B, H, S) (natural log, of the scaled scores), online softmax in base 2.
Q, K, V and O are addressed as (B*H*S, D) by host TMA descriptors.

Kernels (``VARIANTS`` picks configurations of them):

- :func:`attn_fwd_pipe` (step 1, no warp specialisation): one program per BM query rows of one
  head, ``NW`` warps (4: one warpgroup, BM 64; 8: two warpgroups stacked along the rows, BM 128).
  K and V tiles in a ``STAGES`` ring, each with its own mbarrier, loaded by TMA from the same warps
  ahead of use; S = Q K^T by async wgmma from shared memory, P kept in registers as the A operand of
  O += P V (register-A wgmma). ``OVERLAP``: FA3's intra-warpgroup overlap (QK of tile j and PV of
  tile j-1 issued together; softmax of tile j runs while PV j-1 is on the tensor cores).
- :func:`attn_fwd_ws` (step 2, explicit warp specialisation by ``gl.warp_specialize``): a 1-warp
  load partition (Q once, then K/V into a ``STAGES`` ring with ready/empty mbarrier pairs) and
  ``NC`` consumer partitions (MMA + softmax), each owning BMC query rows of the program's
  NC * BMC rows and sharing every K/V tile (the empty barriers count NC arrivals). Consumer 0 is
  the default partition (``NW`` warps: 4 = one warpgroup, 8 = two stacked); further consumers are
  4-warp worker partitions. ``OVERLAP`` as above; ``PINGPONG``: FA3's inter-warpgroup schedule, two
  consumers taking turns (an mbarrier pair) to issue their GEMMs, so one's softmax runs while the
  other's GEMMs do. A 1-D grid over all query tiles, head by head; ``persist`` variants launch one
  program per SM that loops over them (the next tile's Q loads during the epilogue, O staged in its
  own buffer). FA3's D128 forward splits its 128-row tile over two 64-row consumer warpgroups, which
  is ``ws 2x(m64 w4)``; 128 rows per consumer warpgroup is ``ws 2x(m128 w4)``.

``CAUSAL`` (flag of both kernels): the program visits K/V tiles up to its diagonal, masks only the
tiles that cross it, and programs run heaviest first.

On the GPU each variant is checked against torch SDPA in fp32 math (max abs error of O and of LSE
against ``logsumexp``), then timed by ``triton.testing.do_bench`` beside torch SDPA (default backend;
the backend it picks is recorded). Prints a table (variant, us, TFLOP/s, vs SDPA, err) and writes
``probe_gluon_attention.json`` under ``--out``. ``--compile-only`` (no GPU needed) compiles every
variant of every case for sm_90 and prints registers / spill stack per thread, shared memory and the
partition register split (setmaxnreg) per kernel.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


# ----------------------------------------------------------------------------------------------------------------
# shared device helpers
# ----------------------------------------------------------------------------------------------------------------

@gluon.constexpr_function
def mma_layout(nw, n):
    """wgmma accumulator layout of ``nw`` warps stacked along M, instruction N = ``n`` (fp16: K 16)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[nw, 1], instr_shape=[16, n, 16])


@gluon.jit
def _softmax_tile(s, m_i, l_i, qk_scale, row0, col0, CAUSAL: gl.constexpr):
    """One online-softmax step on the fp32 score tile ``s`` (raw Q K^T, wgmma layout), base 2.

    Returns (P (fp32, unnormalised), alpha = exp2(m_old - m_new), m_new, l_new); m is kept in the
    scaled log2 domain (``qk_scale`` = scale * log2 e). ``CAUSAL``: when the tile crosses the diagonal
    (a run-time test), the causal mask of rows ``row0 + r`` against columns ``col0 + c`` (key index <=
    query index kept)."""
    if CAUSAL:
        if col0 + s.shape[1] > row0 + 1:
            rows = row0 + gl.arange(0, s.shape[0], layout=gl.SliceLayout(1, s.type.layout))
            cols = col0 + gl.arange(0, s.shape[1], layout=gl.SliceLayout(0, s.type.layout))
            s = gl.where(gl.expand_dims(rows, 1) >= gl.expand_dims(cols, 0), s, -float("inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    l_new = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_new


@gluon.jit
def _epilogue(acc, m_i, l_i, o_desc, o_smem, lse_ptr, row0, BM: gl.constexpr, o_layout: gl.constexpr):
    """O = acc / l to fp16 through ``o_smem`` and one TMA store at row ``row0``; LSE (natural log)
    to ``lse_ptr + row0 + r``."""
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    l_o = gl.convert_layout(l_i, row_o)
    out = acc * gl.expand_dims(1.0 / l_o, 1)
    o_smem.store(out.to(o_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [row0, 0], o_smem)
    lse = (gl.convert_layout(m_i, row_o) + gl.log2(l_o)) * 0.6931471805599453
    gl.store(lse_ptr + row0 + gl.arange(0, BM, layout=row_o), lse)
    tma.store_wait(pendings=0)


# ----------------------------------------------------------------------------------------------------------------
# step 1: no warp specialisation
# ----------------------------------------------------------------------------------------------------------------

@gluon.jit
def _pipe_load(k_desc, v_desc, k_smem, v_smem, k_bar, v_bar, kv_row, j, n_tiles,
               BN: gl.constexpr, STAGES: gl.constexpr):
    """TMA K and V of tile ``j`` (if ``j < n_tiles``) into ring slot ``j % STAGES``."""
    slot = j % STAGES
    ok = j < n_tiles
    mbarrier.expect(k_bar.index(slot), k_desc.block_type.nbytes, pred=ok)
    tma.async_copy_global_to_shared(k_desc, [kv_row + j * BN, 0], k_bar.index(slot), k_smem.index(slot), pred=ok)
    mbarrier.expect(v_bar.index(slot), v_desc.block_type.nbytes, pred=ok)
    tma.async_copy_global_to_shared(v_desc, [kv_row + j * BN, 0], v_bar.index(slot), v_smem.index(slot), pred=ok)


@gluon.jit
def attn_fwd_pipe(q_desc, k_desc, v_desc, o_desc, lse_ptr, qk_scale, S,
                  D: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, NW: gl.constexpr,
                  OVERLAP: gl.constexpr, CAUSAL: gl.constexpr):
    """Attention forward, one program per (BM query rows, head); see the module docstring."""
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = mma_layout(NW, BN)
    o_layout: gl.constexpr = mma_layout(NW, D)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m
    bh = gl.program_id(1)
    q_row = bh * S + pid_m * BM
    kv_row = bh * S
    if CAUSAL:
        n_tiles = gl.cdiv((pid_m + 1) * BM, BN)
    else:
        n_tiles = S // BN

    q_smem = gl.allocate_shared_memory(dtype, [BM, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bar.index(i), count=1)
        mbarrier.init(v_bar.index(i), count=1)
    fence_async_shared()

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
    for i in gl.static_range(STAGES):
        _pipe_load(k_desc, v_desc, k_smem, v_smem, k_bar, v_bar, kv_row, i, n_tiles, BN, STAGES)

    m_i = gl.full([BM], -float("inf"), gl.float32, row_s)
    l_i = gl.full([BM], 0.0, gl.float32, row_s)
    acc = gl.zeros([BM, D], gl.float32, o_layout)
    s_zero = gl.zeros([BM, BN], gl.float32, s_layout)
    mbarrier.wait(q_bar, 0)

    if OVERLAP:
        # tile 0: S and softmax only; its PV is issued with tile 1's QK
        mbarrier.wait(k_bar.index(0), 0)
        s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, pid_m * BM, 0, CAUSAL)
        p16 = gl.convert_layout(p.to(dtype), p_layout)
        for j in range(1, n_tiles):
            slot = j % STAGES
            prev = (j - 1) % STAGES
            mbarrier.wait(k_bar.index(slot), (j // STAGES) & 1)
            s = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            mbarrier.wait(v_bar.index(prev), ((j - 1) // STAGES) & 1)
            acc = warpgroup_mma(p16, v_smem.index(prev), acc, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, pid_m * BM, j * BN, CAUSAL)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            p16 = gl.convert_layout(p.to(dtype), p_layout)
            # every warp is past tile j-1's GEMMs: its slot takes tile j - 1 + STAGES
            gl.thread_barrier()
            _pipe_load(k_desc, v_desc, k_smem, v_smem, k_bar, v_bar, kv_row, j - 1 + STAGES, n_tiles, BN, STAGES)
        last = (n_tiles - 1) % STAGES
        mbarrier.wait(v_bar.index(last), ((n_tiles - 1) // STAGES) & 1)
        acc = warpgroup_mma(p16, v_smem.index(last), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    else:
        for j in range(n_tiles):
            slot = j % STAGES
            ph = (j // STAGES) & 1
            mbarrier.wait(k_bar.index(slot), ph)
            s = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, pid_m * BM, j * BN, CAUSAL)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            p16 = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(v_bar.index(slot), ph)
            acc = warpgroup_mma(p16, v_smem.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            gl.thread_barrier()
            _pipe_load(k_desc, v_desc, k_smem, v_smem, k_bar, v_bar, kv_row, j + STAGES, n_tiles, BN, STAGES)

    # (no mbarrier.invalidate: a slower warp may still be inside its last wait)
    _epilogue(acc, m_i, l_i, o_desc, q_smem, lse_ptr, q_row, BM, o_layout)


# ----------------------------------------------------------------------------------------------------------------
# step 2: warp specialisation (a TMA load partition, NC MMA + softmax consumer partitions)
# ----------------------------------------------------------------------------------------------------------------

@gluon.jit
def _ws_coords(t, S, BM: gl.constexpr, BN: gl.constexpr, CAUSAL: gl.constexpr):
    """(flat row of the first query, flat row of the first key, sequence position of the first query,
    K/V tiles visited) of query tile ``t``. Tiles run head by head (consecutive programs share a head's
    K/V in L2); causal: the heaviest query tile of a head first."""
    num_m = S // BM
    bh = t // num_m
    m = t % num_m
    if CAUSAL:
        m = num_m - 1 - m
        n_tiles = gl.cdiv((m + 1) * BM, BN)
    else:
        n_tiles = S // BN
    return bh * S + m * BM, bh * S, m * BM, n_tiles


@gluon.jit
def _ws_load(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready, v_empty,
             S, n_q_tiles, BMC: gl.constexpr, BN: gl.constexpr, NC: gl.constexpr, STAGES: gl.constexpr,
             CAUSAL: gl.constexpr):
    """Load partition: for each of the program's query tiles, its NC query blocks (once the consumers
    are done with the previous ones), then K and V of every tile it visits into the ring, each slot
    reused once all consumers have released it."""
    g = 0                                     # K/V tiles loaded so far (ring position)
    i = 0                                     # query tiles so far
    for t in range(gl.program_id(0), n_q_tiles, gl.num_programs(0)):
        q_row, kv_row, q_pos, n_tiles = _ws_coords(t, S, NC * BMC, BN, CAUSAL)
        mbarrier.wait(q_empty, (i & 1) ^ 1)   # a fresh barrier passes a wait on parity 1
        mbarrier.expect(q_ready, NC * q_desc.block_type.nbytes)
        for c in gl.static_range(NC):
            tma.async_copy_global_to_shared(q_desc, [q_row + c * BMC, 0], q_ready, q_smem.index(c))
        for j in range(n_tiles):
            slot = g % STAGES
            ph = ((g // STAGES) & 1) ^ 1
            mbarrier.wait(k_empty.index(slot), ph)
            mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [kv_row + j * BN, 0], k_ready.index(slot), k_smem.index(slot))
            mbarrier.wait(v_empty.index(slot), ph)
            mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [kv_row + j * BN, 0], v_ready.index(slot), v_smem.index(slot))
            g += 1
        i += 1


@gluon.jit
def _ws_turn(turn, C: gl.constexpr, it, PINGPONG: gl.constexpr):
    """Ping-pong: wait until consumer C may issue its GEMMs of turn ``it`` (consumer 0 goes first)."""
    if PINGPONG:
        mbarrier.wait(turn.index(C), (it & 1) ^ (1 - C))


@gluon.jit
def _ws_pass(turn, C: gl.constexpr, PINGPONG: gl.constexpr):
    """Ping-pong: hand the tensor cores to the other consumer."""
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - C))


@gluon.jit
def _ws_tile(q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn, qk_scale, g0, tc0, n_tiles, pos0,
             C: gl.constexpr, NW: gl.constexpr, BMC: gl.constexpr, BN: gl.constexpr, D: gl.constexpr,
             STAGES: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, CAUSAL: gl.constexpr):
    """Consumer C's rows (query block ``q`` in shared memory, sequence positions ``pos0 ...``) against
    ``n_tiles`` K/V tiles starting at ring position ``g0`` (ping-pong turn ``tc0``): (acc, m, l).
    Releases each K slot once its QK GEMM is done and each V slot once its PV GEMM is done."""
    s_layout: gl.constexpr = mma_layout(NW, BN)
    o_layout: gl.constexpr = mma_layout(NW, D)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    dtype: gl.constexpr = k_smem.dtype
    m_i = gl.full([BMC], -float("inf"), gl.float32, row_s)
    l_i = gl.full([BMC], 0.0, gl.float32, row_s)
    acc = gl.zeros([BMC, D], gl.float32, o_layout)
    s_zero = gl.zeros([BMC, BN], gl.float32, s_layout)
    if OVERLAP:
        slot = g0 % STAGES
        _ws_turn(turn, C, tc0, PINGPONG)
        mbarrier.wait(k_ready.index(slot), (g0 // STAGES) & 1)
        s = warpgroup_mma(q, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        _ws_pass(turn, C, PINGPONG)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        mbarrier.arrive(k_empty.index(slot))
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, pos0, 0, CAUSAL)
        p16 = gl.convert_layout(p.to(dtype), p_layout)
        for j in range(1, n_tiles):
            g = g0 + j
            slot = g % STAGES
            prev = (g - 1) % STAGES
            _ws_turn(turn, C, tc0 + j, PINGPONG)
            mbarrier.wait(k_ready.index(slot), (g // STAGES) & 1)
            s = warpgroup_mma(q, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            mbarrier.wait(v_ready.index(prev), ((g - 1) // STAGES) & 1)
            acc = warpgroup_mma(p16, v_smem.index(prev), acc, is_async=True)
            _ws_pass(turn, C, PINGPONG)
            s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
            mbarrier.arrive(k_empty.index(slot))
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, pos0, j * BN, CAUSAL)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(v_empty.index(prev))
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            p16 = gl.convert_layout(p.to(dtype), p_layout)
        g = g0 + n_tiles - 1
        last = g % STAGES
        _ws_turn(turn, C, tc0 + n_tiles, PINGPONG)
        mbarrier.wait(v_ready.index(last), (g // STAGES) & 1)
        acc = warpgroup_mma(p16, v_smem.index(last), acc, is_async=True)
        _ws_pass(turn, C, PINGPONG)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(v_empty.index(last))
    else:
        gl.static_assert(not PINGPONG, "PINGPONG needs OVERLAP")
        for j in range(n_tiles):
            g = g0 + j
            slot = g % STAGES
            ph = (g // STAGES) & 1
            mbarrier.wait(k_ready.index(slot), ph)
            s = warpgroup_mma(q, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
            mbarrier.arrive(k_empty.index(slot))
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, pos0, j * BN, CAUSAL)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            p16 = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(v_ready.index(slot), ph)
            acc = warpgroup_mma(p16, v_smem.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(v_empty.index(slot))
    return acc, m_i, l_i


@gluon.jit
def _ws_consume(o_desc, lse_ptr, q_smem, o_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                v_empty, turn, qk_scale, S, n_q_tiles, C: gl.constexpr, NW: gl.constexpr, BMC: gl.constexpr,
                BN: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr, OVERLAP: gl.constexpr,
                PINGPONG: gl.constexpr, CAUSAL: gl.constexpr, SEP_O: gl.constexpr):
    """Consumer partition C (NW warps): rows ``C*BMC ...`` of each of the program's query tiles, then
    their epilogue (through ``o_smem``, its own buffer when ``SEP_O``, else the query block, which is
    then released only after the store)."""
    o_layout: gl.constexpr = mma_layout(NW, D)
    g = 0
    tc = 0
    i = 0
    for t in range(gl.program_id(0), n_q_tiles, gl.num_programs(0)):
        q_row, kv_row, q_pos, n_tiles = _ws_coords(t, S, BMC * q_smem.shape[0], BN, CAUSAL)
        mbarrier.wait(q_ready, i & 1)
        acc, m_i, l_i = _ws_tile(q_smem.index(C), k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn, qk_scale,
                                 g, tc, n_tiles, q_pos + C * BMC, C, NW, BMC, BN, D, STAGES, OVERLAP, PINGPONG,
                                 CAUSAL)
        if SEP_O:
            mbarrier.arrive(q_empty)
            _epilogue(acc, m_i, l_i, o_desc, o_smem.index(C), lse_ptr, q_row + C * BMC, BMC, o_layout)
        else:
            _epilogue(acc, m_i, l_i, o_desc, q_smem.index(C), lse_ptr, q_row + C * BMC, BMC, o_layout)
            mbarrier.arrive(q_empty)
        g += n_tiles
        if OVERLAP:
            tc += n_tiles + 1
        i += 1


@gluon.jit
def attn_fwd_ws(q_desc, k_desc, v_desc, o_desc, lse_ptr, qk_scale, S, n_q_tiles,
                D: gl.constexpr, BMC: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, NC: gl.constexpr,
                NW: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, CAUSAL: gl.constexpr,
                SEP_O: gl.constexpr, LOAD_REGS: gl.constexpr, MMA_REGS: gl.constexpr):
    """Warp-specialised attention forward over ``n_q_tiles`` query tiles of NC*BMC rows (all heads), one
    or more per program (a grid of fewer programs makes it persistent); see the module docstring.
    ``SEP_O``: a separate output staging buffer (the next tile's queries load during the epilogue).
    ``LOAD_REGS`` / ``MMA_REGS``: registers asked for the load partition and for each worker consumer
    partition (setmaxnreg)."""
    dtype: gl.constexpr = q_desc.dtype
    gl.static_assert(NC == 1 or NC == 2, "one or two consumer partitions")
    gl.static_assert(NC == 1 or NW == 4, "two consumers are one warpgroup each")
    gl.static_assert(not PINGPONG or NC == 2, "PINGPONG needs two consumers")
    q_smem = gl.allocate_shared_memory(dtype, [NC, BMC, D], q_desc.layout)
    if SEP_O:
        o_smem = gl.allocate_shared_memory(dtype, [NC, BMC, D], o_desc.layout)
    else:
        o_smem = q_smem
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, D], v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=NC)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=NC)
        mbarrier.init(v_empty.index(i), count=NC)
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)
    fence_async_shared()

    if NC == 1:
        gl.warp_specialize([
            (_ws_consume, (o_desc, lse_ptr, q_smem, o_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                           v_empty, turn, qk_scale, S, n_q_tiles, 0, NW, BMC, BN, D, STAGES, OVERLAP, PINGPONG, CAUSAL,
                           SEP_O)),
            (_ws_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                        v_empty, S, n_q_tiles, BMC, BN, NC, STAGES, CAUSAL)),
        ], [1], [LOAD_REGS])
    else:
        gl.warp_specialize([
            (_ws_consume, (o_desc, lse_ptr, q_smem, o_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                           v_empty, turn, qk_scale, S, n_q_tiles, 0, NW, BMC, BN, D, STAGES, OVERLAP, PINGPONG, CAUSAL,
                           SEP_O)),
            (_ws_consume, (o_desc, lse_ptr, q_smem, o_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                           v_empty, turn, qk_scale, S, n_q_tiles, 1, 4, BMC, BN, D, STAGES, OVERLAP, PINGPONG, CAUSAL,
                           SEP_O)),
            (_ws_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                        v_empty, S, n_q_tiles, BMC, BN, NC, STAGES, CAUSAL)),
        ], [4, 1], [MMA_REGS, LOAD_REGS])


# ----------------------------------------------------------------------------------------------------------------
# host side
# ----------------------------------------------------------------------------------------------------------------

def _pipe(bm, bn, stages, nw, overlap=True):
    return dict(kernel="pipe", BM=bm, BN=bn, STAGES=stages, NW=nw, OVERLAP=overlap)


def _ws(nc, bmc, bn, stages, nw=4, overlap=True, pingpong=False, persist=False, load_regs=24, mma_regs=240):
    return dict(kernel="ws", NC=nc, BMC=bmc, BN=bn, STAGES=stages, NW=nw, OVERLAP=overlap, PINGPONG=pingpong,
                PERSIST=persist, SEP_O=persist, LOAD_REGS=load_regs, MMA_REGS=mma_regs)


#: (name, head dims it applies to, configuration). ``pipe``: BM query rows, NW warps; ``ws``: NC consumers
#: of BMC rows each (consumer 0 the default partition of NW warps, consumer 1 a 4-warp worker), a 1-warp loader;
#: ``persist``: one program per SM looping over query tiles, the output staged in its own buffer.
VARIANTS = [
    ("pipe m128n128 s2 w8", (64, 128), _pipe(128, 128, 2, 8, overlap=False)),
    ("pipe m128n128 s2 w8 ovl", (64, 128), _pipe(128, 128, 2, 8)),
    ("pipe m128n64 s3 w8 ovl", (64, 128), _pipe(128, 64, 3, 8)),
    ("pipe m128n128 s3 w8 ovl", (64,), _pipe(128, 128, 3, 8)),
    ("pipe m64n128 s2 w4 ovl", (64, 128), _pipe(64, 128, 2, 4)),
    ("ws 1x(m128 w8) n128 s2 ovl", (64, 128), _ws(1, 128, 128, 2, nw=8)),
    ("ws 2x(m64 w4) n128 s2", (64, 128), _ws(2, 64, 128, 2, overlap=False)),
    ("ws 2x(m64 w4) n128 s2 ovl", (64, 128), _ws(2, 64, 128, 2)),
    ("ws 2x(m64 w4) n128 s2 ovl pp", (64, 128), _ws(2, 64, 128, 2, pingpong=True)),
    ("ws 2x(m64 w4) n128 s3 ovl pp", (64, 128), _ws(2, 64, 128, 3, pingpong=True)),
    ("ws 2x(m64 w4) n128 s2 ovl pp persist", (64, 128), _ws(2, 64, 128, 2, pingpong=True, persist=True)),
    ("ws 2x(m64 w4) n128 s3 ovl pp persist", (64,), _ws(2, 64, 128, 3, pingpong=True, persist=True)),
    ("ws 2x(m128 w4) n64 s3 ovl pp", (64,), _ws(2, 128, 64, 3, pingpong=True)),
    # (not listed: 128-row consumers at D128 (n64 s3) and at D64 n128 spill: 88 and 280 B of stack per thread)
]


def block_rows(cfg) -> int:
    """Query rows per program."""
    return cfg["BM"] if cfg["kernel"] == "pipe" else cfg["NC"] * cfg["BMC"]


def kernel_of(cfg):
    """The Gluon kernel a configuration runs."""
    return attn_fwd_pipe if cfg["kernel"] == "pipe" else attn_fwd_ws


def launch_meta(cfg, D: int, causal: bool) -> tuple[dict, int]:
    """(constexpr arguments by name, num_warps) of a configuration."""
    keys = (("BM", "BN", "STAGES", "NW", "OVERLAP") if cfg["kernel"] == "pipe" else
            ("BMC", "BN", "STAGES", "NC", "NW", "OVERLAP", "PINGPONG", "SEP_O", "LOAD_REGS", "MMA_REGS"))
    meta = {"D": D, **{k: cfg[k] for k in keys}, "CAUSAL": causal}
    return meta, cfg["NW"]


def smem_layout(block):
    """The NVMMA shared layout a TMA tile ``block`` of fp16 uses (largest swizzle)."""
    return gl.NVMMASharedLayout.get_default_for(block, gl.float16)


def q_block(cfg, D: int) -> list[int]:
    """The Q / O TMA box of a configuration (per consumer for ``ws``)."""
    return [cfg["BM"] if cfg["kernel"] == "pipe" else cfg["BMC"], D]


def gluon_attention(q, k, v, cfg, causal: bool):
    """A launcher of the Gluon kernel of ``cfg`` on ``q, k, v`` and its outputs: ``(launch, O, LSE)``;
    ``launch()`` (re)computes O (B, H, S, D) fp16 and LSE (B, H, S) fp32 (natural log) of
    ``softmax(q k^T / sqrt(D)) v``, descriptors and outputs made once. q, k, v: equal contiguous
    (B, H, S, D) fp16 CUDA tensors, D 64 or 128, S a multiple of the configuration's tiles; other
    shapes raise ValueError."""
    B, H, S, D = q.shape
    bm, bn = block_rows(cfg), cfg["BN"]
    if (q.dtype != torch.float16 or D not in (64, 128) or S % bm or S % bn or k.shape != q.shape
            or v.shape != q.shape or not all(t.is_contiguous() for t in (q, k, v))):
        raise ValueError(f"gluon_attention: needs equal contiguous fp16 (B, H, S, D) q/k/v, D 64 or 128, S a multiple "
                         f"of {bm} and {bn}; got {tuple(q.shape)} {q.dtype}")
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, device=q.device, dtype=torch.float32)
    qb, kb = q_block(cfg, D), [bn, D]
    descs = [TensorDescriptor.from_tensor(t.view(B * H * S, D), box, smem_layout(box))
             for t, box in ((q, qb), (k, kb), (v, kb), (o, qb))]
    meta, nw = launch_meta(cfg, D, causal)
    kernel, scale = kernel_of(cfg), D ** -0.5 * LOG2E
    if cfg["kernel"] == "pipe":
        grid, extra = (S // bm, B * H), ()
    else:
        n_q = B * H * S // bm
        n_sm = torch.cuda.get_device_properties(q.device).multi_processor_count
        grid, extra = (min(n_q, n_sm) if cfg["PERSIST"] else n_q, ), (n_q, )

    def launch():
        kernel[grid](*descs, lse, scale, S, *extra, **meta, num_warps=nw)

    return launch, o, lse


# ---------------------------------------------------------------- compile only (no GPU)

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def compile_sm90(cfg, D: int, causal: bool):
    """The Gluon kernel of ``cfg`` compiled for sm_90 by Triton's own toolchain, launching nothing."""
    fn = kernel_of(cfg)
    meta, nw = launch_meta(cfg, D, causal)
    qb, kb = q_block(cfg, D), [cfg["BN"], D]
    desc = lambda box: f"tensordesc<fp16[{box[0]},{box[1]}],{smem_layout(box)!r}>"  # noqa: E731
    sig = {"q_desc": desc(qb), "k_desc": desc(kb), "v_desc": desc(kb), "o_desc": desc(qb), "lse_ptr": "*fp32",
           "qk_scale": "fp32", "S": "i32"} | ({"n_q_tiles": "i32"} if cfg["kernel"] == "ws" else {})
    sig |= {k: "constexpr" for k in meta}
    attrs = {(fn.arg_names.index("lse_ptr"),): [["tt.divisibility", 16]],
             (fn.arg_names.index("S"),): [["tt.divisibility", 16]]}
    src = GluonASTSource(fn, sig, meta, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": nw})


def resources(ck) -> dict:
    """Registers and spill stack per thread (cuobjdump; a warp-specialised kernel's figure is its launch
    cap, its partitions re-size by setmaxnreg), shared memory, warps, the wgmma instructions, and for a
    warp-specialised kernel the registers its worker partitions ask for and the setmaxnreg values."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(ck.asm["cubin"])
    try:
        txt = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", txt)
    ptx = ck.asm["ptx"]
    return dict(regs=int(m.group(1)) if m else None, stack=int(m.group(2)) if m else None, smem=ck.metadata.shared,
                warps=ck.metadata.num_warps,
                setmaxnreg=sorted({int(v) for v in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)}),
                worker_regs=[int(v) for v in re.findall(r"requestedRegisters = array<i32: ([\d, ]+)>", ck.asm["ttgir"])
                             [0].split(",")] if "requestedRegisters" in ck.asm["ttgir"] else [],
                wgmma=len(re.findall(r"wgmma\.mma_async", ptx)))


def compile_only(cases, only, out) -> list[dict]:
    rows = []
    for spec in cases:
        kind, S, D = parse_case(spec)
        print(f"== {spec}: sm_90 compile ({'causal' if kind == 'c' else 'non-causal'}, D{D})", flush=True)
        for name, dims, cfg in VARIANTS:
            if D not in dims or (only and name not in only):
                continue
            row = dict(case=spec, variant=name, cfg=cfg)
            try:
                ck = compile_sm90(cfg, D, kind == "c")
                row |= resources(ck)
                if out:
                    base = os.path.join(out, re.sub(r"\W+", "_", f"{spec}_{name}"))
                    for ext in ("ttgir", "ptx"):
                        with open(f"{base}.{ext}", "w") as f:
                            f.write(ck.asm[ext])
                ws = (f" workers ask {row['worker_regs']} (setmaxnreg values {row['setmaxnreg']})"
                      if row["worker_regs"] else "")
                print(f"  {name:32s} regs {row['regs']:>3} stack {row['stack']:>3} smem {row['smem']:>6} B "
                      f"warps {row['warps']:>2} wgmma {row['wgmma']:>3}"
                      f"{ws}", flush=True)
            except Exception as e:  # noqa: BLE001 - a kernel that does not compile is a result
                row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:1500]}"
                print(f"  {name:32s} FAILED: {row['error'][:600]}", flush=True)
            rows.append(row)
    return rows


# ---------------------------------------------------------------- GPU: check and time

def parse_case(spec: str) -> tuple[str, int, int]:
    """``n4096x128`` -> ("n", 4096, 128): kind n (non-causal) or c (causal), S, D."""
    m = re.fullmatch(r"([nc])(\d+)x(\d+)", spec)
    if not m:
        raise ValueError(f"--cases: {spec!r} is not <n|c><S>x<D> (e.g. n4096x128)")
    return m.group(1), int(m.group(2)), int(m.group(3))


def reference(q, k, v, causal: bool):
    """(O, LSE) in fp32 math, one batch at a time (scores materialised; TF32 off)."""
    B, H, S, D = q.shape
    os_, ls = [], []
    mask = torch.ones(S, S, device=q.device, dtype=torch.bool).tril() if causal else None
    for b in range(B):
        s = torch.matmul(q[b].float(), k[b].float().transpose(-1, -2)) * D ** -0.5
        if causal:
            s = s.masked_fill(~mask, -float("inf"))
        ls.append(torch.logsumexp(s, dim=-1))
        os_.append(torch.matmul(torch.softmax(s, dim=-1), v[b].float()))
        del s
    return torch.stack(os_), torch.stack(ls)


def sdpa_backend(fn) -> str:
    """Which SDPA kernel ``fn`` runs (from the profiled CUDA kernel names)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.key for e in prof.key_averages()]
    for tag, words in (("cudnn", ("cudnn", "sm90_flash", "fmha")), ("flash", ("flash",)),
                       ("efficient", ("efficient", "mem_eff", "fmha_cutlass")), ("math", ("softmax",))):
        if any(w in n.lower() for n in names for w in words):
            return f"{tag} ({', '.join(n[:60] for n in names[:3])})"
    return "unknown (" + ", ".join(n[:60] for n in names[:3]) + ")"


def wait_or_die(what: str, seconds: float = 20.0) -> None:
    """Synchronise, but give up (exit the process: a hung kernel cannot be recovered) after ``seconds``."""
    import time
    ev = torch.cuda.Event()
    ev.record()
    t0 = time.time()
    while not ev.query():
        if time.time() - t0 > seconds:
            print(f"  {what}: HUNG (no completion after {seconds:.0f} s); exiting", flush=True)
            os._exit(3)
        time.sleep(0.01)


def run_case(spec, only, B, H, out_rows, save) -> None:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kind, S, D = parse_case(spec)
    causal = kind == "c"
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
    o_ref, lse_ref = reference(q, k, v, causal)
    flops = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    print(f"== {spec}: attention fp16 B{B} H{H} S{S} D{D} {'causal' if causal else 'non-causal'} "
          f"({flops / 1e12:.2f} TFLOP visible)", flush=True)
    print(f"  {'variant':34s} {'us':>9} {'TFLOP/s':>8} {'vs SDPA':>8} {'err O':>9} {'err LSE':>9}", flush=True)
    sd_us = None

    def emit(row):
        nonlocal sd_us
        if row["variant"] == "sdpa (default)" and row.get("us"):
            sd_us = row["us"]
        if row.get("us"):
            row["tflops"] = flops / row["us"] / 1e6
            row["vs_sdpa"] = sd_us / row["us"] if sd_us else None
        out_rows.append(row)
        save()
        if "error" in row:
            print(f"  {row['variant']:34s} {row['error'][:200]}", flush=True)
            return
        us = f"{row['us']:9.1f}" if row.get("us") else f"{'-':>9}"
        tf = f"{row['tflops']:8.1f}" if row.get("us") else f"{'-':>8}"
        vs = f"{row['vs_sdpa']:7.2f}x" if row.get("vs_sdpa") else f"{'-':>8}"
        eo = f"{row['err_o']:9.2e}" if row.get("err_o") is not None else f"{'-':>9}"
        el = f"{row['err_lse']:9.2e}" if row.get("err_lse") is not None else f"{'-':>9}"
        print(f"  {row['variant']:34s} {us} {tf} {vs} {eo} {el}" + (f"  {row['note']}" if row.get("note") else ""),
              flush=True)

    base = dict(case=spec, B=B, H=H, S=S, D=D, causal=causal)
    sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    row = dict(base, variant="sdpa (default)", backend=sdpa_backend(sdpa))
    row["err_o"] = (sdpa().float() - o_ref).abs().max().item()
    row["us"] = triton.testing.do_bench(sdpa, return_mode="median") * 1e3
    row["note"] = row["backend"][:70]
    emit(row)
    for label, backend in (("sdpa cudnn", "CUDNN_ATTENTION"), ("sdpa flash", "FLASH_ATTENTION")):
        row = dict(base, variant=label)
        try:
            with sdpa_kernel(getattr(SDPBackend, backend)):
                row["err_o"] = (sdpa().float() - o_ref).abs().max().item()
                row["us"] = triton.testing.do_bench(sdpa, return_mode="median") * 1e3
        except Exception as e:  # noqa: BLE001 - a backend that is not available is a result
            row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
        emit(row)
    for name, dims, cfg in VARIANTS:
        if D not in dims or (only and name not in only):
            continue
        row = dict(base, variant=name, cfg=cfg)
        try:
            fn, o, lse = gluon_attention(q, k, v, cfg, causal)
            o.fill_(float("nan"))
            lse.fill_(float("nan"))
            fn()
            wait_or_die(name)
            row["err_o"] = (o.float() - o_ref).abs().max().item()
            row["err_lse"] = (lse - lse_ref).abs().max().item()
            if not (row["err_o"] < 2e-2 and row["err_lse"] < 1e-2):
                row["note"] = "WRONG: not timed"
            else:
                row["us"] = triton.testing.do_bench(fn, return_mode="median") * 1e3
        except Exception as e:  # noqa: BLE001 - a failing variant is a result
            row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        emit(row)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="n4096x128,n1024x64,c4096x128", help="<n|c><S>x<D>, comma-separated")
    ap.add_argument("--only", default="", help="variant names to keep, comma-separated")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--out", default="", help="write probe_gluon_attention.json (and with --compile-only the "
                                              "TTGIR/PTX) here")
    ap.add_argument("--compile-only", action="store_true", help="compile every variant for sm_90; no GPU needed")
    a = ap.parse_args(argv)
    cases = [c for c in a.cases.split(",") if c]
    for c in cases:
        parse_case(c)
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "probe_gluon_attention.json") if a.out else ""
    info = dict(triton=triton.__version__, torch=torch.__version__)
    if a.compile_only:
        rows = compile_only(cases, only, a.out)
        if path:
            with open(path, "w") as f:
                json.dump(dict(info, mode="compile-only", rows=rows), f, indent=1)
        return
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: use --compile-only")
    info["device"] = torch.cuda.get_device_name()
    rows: list[dict] = []

    def save():
        if path:
            with open(path, "w") as f:
                json.dump(dict(info, mode="gpu", rows=rows), f, indent=1)

    for spec in cases:
        run_case(spec, only, a.batch, a.heads, rows, save)


if __name__ == "__main__":
    main()
