"""Hand-written Gluon (Triton 3.6) attention forward kernels for Hopper (sm_90), issue 18's probe.

Self-contained (no dtriton imports); bench/probe_gluon_attention.py checks and times them. dtriton's own
lowering (``warp_specialize=True`` on sm_90: dtriton.plan.gluon_attention) runs an adapted copy in
src/dtriton/backends/triton/gluon_kernels.py (bf16, no LSE store, a negative scale).
Attention forward of contiguous (B, H, S, D) fp16 Q, K, V (S = T, D 64 or 128, scale 1/sqrt(D),
S a multiple of the tiles): O fp16 (B, H, S, D) and the row log-sum-exp LSE fp32 (B, H, S)
(natural log, of the scaled scores), online softmax in base 2. Q, K, V and O are addressed as
(B*H*S, D) by host TMA descriptors.

Kernels (``VARIANTS`` names configurations of them; :func:`gluon_attention` launches one,
:func:`compile_sm90` compiles one for sm_90 without a GPU):

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
"""
from __future__ import annotations

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
