"""The hand-written Gluon attention forward kernels (Triton 3.6's ``triton.experimental.gluon``, Hopper sm_90).

Device code only; :mod:`.gluon` prints, launches and compiles them as :class:`~dtriton.plan.GluonAttention`
decides (moved from bench/gluon_attention.py, which keeps its own copy for the probe).
Attention forward of (rows, D) views of contiguous (..., S, D) 16-bit Q and (..., T, D) K, V (D 64 or 128,
S and T multiples of the tiles; causal top-left aligned, key j <= query i, as torch's ``is_causal``;
grouped-query attention through the K/V head map of :func:`_kv_row`), addressed by host TMA
descriptors: O in Q's dtype and, with ``STORE_LSE``, the row log-sum-exp fp32 (natural log, of the
scaled scores); online softmax in base 2 (``qk_scale`` = scale * log2 e). ``NEG_SCALE``: the scale is negative (the row maximum of the scaled scores is the scaled
minimum; masked scores are +inf before scaling).

- :func:`attn_fwd_pipe` (no warp specialisation): one program per BM query rows of one head, ``NW``
  warps; K and V tiles in a ``STAGES`` ring loaded by TMA ahead of use; S = Q K^T by async wgmma, P kept
  in registers as the A operand of O += P V. ``OVERLAP``: QK of tile j and PV of tile j-1 issued together.
- :func:`attn_fwd_ws` (``gl.warp_specialize``): a 1-warp load partition and ``NC`` consumer partitions
  (MMA + softmax) of BMC query rows each sharing every K/V tile; ``PINGPONG``: two consumers take turns
  issuing their GEMMs (FA3's inter-warpgroup schedule). A grid of fewer programs than query tiles makes
  it persistent (``SEP_O``: the output staged in its own buffer).

``CAUSAL``: a program visits K/V tiles up to its diagonal, masks only the tiles that cross it, and
programs run heaviest first.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from ...plan.gluon_attention import GluonAttention
from .gluon import constants, shared_layout

__all__ = ["LOG2E", "attn_fwd_pipe", "attn_fwd_ws", "compile_sm90", "mma_layout"]

LOG2E = 1.4426950408889634


# ----------------------------------------------------------------------------------------------------------------
# shared device helpers
# ----------------------------------------------------------------------------------------------------------------

@gluon.constexpr_function
def mma_layout(nw, n):
    """wgmma accumulator layout of ``nw`` warps stacked along M, instruction N = ``n`` (fp16: K 16)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[nw, 1], instr_shape=[16, n, 16])


@gluon.jit
def _kv_row(bh, S, HQ, HKV, GROUP):
    """Flat row of the first key of query head ``bh`` (flat over the lead axes, the query heads last,
    HQ of them): K/V head ``(bh // HQ) * HKV + (bh % HQ) // GROUP`` times the sequence length (grouped-query
    attention: HKV heads in K, query head h reads K/V head h // GROUP; HQ = HKV = GROUP = 1: head bh)."""
    return ((bh // HQ) * HKV + (bh % HQ) // GROUP) * S


@gluon.jit
def _softmax_tile(s, m_i, l_i, qk_scale, row0, col0, CAUSAL: gl.constexpr, NEG_SCALE: gl.constexpr):
    """One online-softmax step on the fp32 score tile ``s`` (raw Q K^T, wgmma layout), base 2.

    Returns (P (fp32, unnormalised), alpha = exp2(m_old - m_new), m_new, l_new); m is kept in the
    scaled log2 domain (``qk_scale`` = scale * log2 e). ``CAUSAL``: when the tile crosses the diagonal
    (a run-time test), the causal mask of rows ``row0 + r`` against columns ``col0 + c`` (key index <=
    query index kept; masked raw scores are -inf, +inf with ``NEG_SCALE``, so scaled they are -inf).
    ``NEG_SCALE``: ``qk_scale`` < 0, the scaled row maximum is the scaled row minimum."""
    if CAUSAL:
        if col0 + s.shape[1] > row0 + 1:
            rows = row0 + gl.arange(0, s.shape[0], layout=gl.SliceLayout(1, s.type.layout))
            cols = col0 + gl.arange(0, s.shape[1], layout=gl.SliceLayout(0, s.type.layout))
            keep = gl.expand_dims(rows, 1) >= gl.expand_dims(cols, 0)
            if NEG_SCALE:
                s = gl.where(keep, s, float("inf"))
            else:
                s = gl.where(keep, s, -float("inf"))
    if NEG_SCALE:
        m_new = gl.maximum(m_i, gl.max(-s, axis=1) * -qk_scale)   # (the scaled row minimum)
    else:
        m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    l_new = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_new


@gluon.jit
def _epilogue(acc, m_i, l_i, o_desc, o_smem, lse_ptr, row0, BM: gl.constexpr, o_layout: gl.constexpr,
              STORE_LSE: gl.constexpr):
    """O = acc / l in the output's dtype through ``o_smem`` and one TMA store at row ``row0``; with
    ``STORE_LSE`` the LSE (natural log) to ``lse_ptr + row0 + r``."""
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    l_o = gl.convert_layout(l_i, row_o)
    out = acc * gl.expand_dims(1.0 / l_o, 1)
    o_smem.store(out.to(o_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [row0, 0], o_smem)
    if STORE_LSE:
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
def attn_fwd_pipe(q_desc, k_desc, v_desc, o_desc, lse_ptr, qk_scale, S, T, HQ, HKV, GROUP,
                  D: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, NW: gl.constexpr,
                  OVERLAP: gl.constexpr, CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, NEG_SCALE: gl.constexpr):
    """Attention forward, one program per (BM query rows, head); see the module docstring (``HQ``,
    ``HKV``, ``GROUP``: the K/V head map of :func:`_kv_row`)."""
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
    kv_row = _kv_row(bh, T, HQ, HKV, GROUP)
    n_tiles = _key_tiles(pid_m * BM, T, BM, BN, CAUSAL)

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
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, pid_m * BM, 0, CAUSAL, NEG_SCALE)
        p16 = gl.convert_layout(p.to(dtype), p_layout)
        for j in range(1, n_tiles):
            slot = j % STAGES
            prev = (j - 1) % STAGES
            mbarrier.wait(k_bar.index(slot), (j // STAGES) & 1)
            s = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            mbarrier.wait(v_bar.index(prev), ((j - 1) // STAGES) & 1)
            acc = warpgroup_mma(p16, v_smem.index(prev), acc, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, pid_m * BM, j * BN, CAUSAL, NEG_SCALE)
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
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, pid_m * BM, j * BN, CAUSAL, NEG_SCALE)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            p16 = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(v_bar.index(slot), ph)
            acc = warpgroup_mma(p16, v_smem.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            gl.thread_barrier()
            _pipe_load(k_desc, v_desc, k_smem, v_smem, k_bar, v_bar, kv_row, j + STAGES, n_tiles, BN, STAGES)

    # (no mbarrier.invalidate: a slower warp may still be inside its last wait)
    _epilogue(acc, m_i, l_i, o_desc, q_smem, lse_ptr, q_row, BM, o_layout, STORE_LSE)


# ----------------------------------------------------------------------------------------------------------------
# step 2: warp specialisation (a TMA load partition, NC MMA + softmax consumer partitions)
# ----------------------------------------------------------------------------------------------------------------

@gluon.jit
def _key_tiles(pos, T, BM: gl.constexpr, BN: gl.constexpr, CAUSAL: gl.constexpr):
    """K/V tiles of BN keys the query rows ``pos ... pos + BM - 1`` visit among T keys: all of them,
    causal (top-left aligned: key j <= query i) those up to the last row's diagonal."""
    if CAUSAL:
        return gl.minimum(gl.cdiv(pos + BM, BN), T // BN)
    else:
        return T // BN


@gluon.jit
def _ws_coords(t, S, T, BM: gl.constexpr, BN: gl.constexpr, CAUSAL: gl.constexpr):
    """(flat row of the first query, flat (lead) head, sequence position of the first query, K/V tiles
    visited) of query tile ``t``. Tiles run head by head (consecutive programs share a head's
    K/V in L2); causal: the heaviest query tile of a head first."""
    num_m = S // BM
    bh = t // num_m
    m = t % num_m
    if CAUSAL:
        m = num_m - 1 - m
    return bh * S + m * BM, bh, m * BM, _key_tiles(m * BM, T, BM, BN, CAUSAL)


@gluon.jit
def _ws_load(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready, v_empty,
             S, T, n_q_tiles, HQ, HKV, GROUP, BMC: gl.constexpr, BN: gl.constexpr, NC: gl.constexpr,
             STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """Load partition: for each of the program's query tiles, its NC query blocks (once the consumers
    are done with the previous ones), then K and V of every tile it visits into the ring, each slot
    reused once all consumers have released it."""
    g = 0                                     # K/V tiles loaded so far (ring position)
    i = 0                                     # query tiles so far
    for t in range(gl.program_id(0), n_q_tiles, gl.num_programs(0)):
        q_row, bh, q_pos, n_tiles = _ws_coords(t, S, T, NC * BMC, BN, CAUSAL)
        kv_row = _kv_row(bh, T, HQ, HKV, GROUP)
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
             STAGES: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, CAUSAL: gl.constexpr,
             NEG_SCALE: gl.constexpr):
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
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, pos0, 0, CAUSAL, NEG_SCALE)
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
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, pos0, j * BN, CAUSAL, NEG_SCALE)
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
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, pos0, j * BN, CAUSAL, NEG_SCALE)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            p16 = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(v_ready.index(slot), ph)
            acc = warpgroup_mma(p16, v_smem.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(v_empty.index(slot))
    return acc, m_i, l_i


@gluon.jit
def _ws_consume(o_desc, lse_ptr, q_smem, o_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                v_empty, turn, qk_scale, S, T, n_q_tiles, C: gl.constexpr, NW: gl.constexpr, BMC: gl.constexpr,
                BN: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr, OVERLAP: gl.constexpr,
                PINGPONG: gl.constexpr, CAUSAL: gl.constexpr, SEP_O: gl.constexpr, STORE_LSE: gl.constexpr,
                NEG_SCALE: gl.constexpr):
    """Consumer partition C (NW warps): rows ``C*BMC ...`` of each of the program's query tiles, then
    their epilogue (through ``o_smem``, its own buffer when ``SEP_O``, else the query block, which is
    then released only after the store)."""
    o_layout: gl.constexpr = mma_layout(NW, D)
    g = 0
    tc = 0
    i = 0
    for t in range(gl.program_id(0), n_q_tiles, gl.num_programs(0)):
        q_row, bh, q_pos, n_tiles = _ws_coords(t, S, T, BMC * q_smem.shape[0], BN, CAUSAL)
        mbarrier.wait(q_ready, i & 1)
        acc, m_i, l_i = _ws_tile(q_smem.index(C), k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn, qk_scale,
                                 g, tc, n_tiles, q_pos + C * BMC, C, NW, BMC, BN, D, STAGES, OVERLAP, PINGPONG,
                                 CAUSAL, NEG_SCALE)
        if SEP_O:
            mbarrier.arrive(q_empty)
            _epilogue(acc, m_i, l_i, o_desc, o_smem.index(C), lse_ptr, q_row + C * BMC, BMC, o_layout, STORE_LSE)
        else:
            _epilogue(acc, m_i, l_i, o_desc, q_smem.index(C), lse_ptr, q_row + C * BMC, BMC, o_layout, STORE_LSE)
            mbarrier.arrive(q_empty)
        g += n_tiles
        if OVERLAP:
            tc += n_tiles + 1
        i += 1


@gluon.jit
def attn_fwd_ws(q_desc, k_desc, v_desc, o_desc, lse_ptr, qk_scale, S, T, n_q_tiles, HQ, HKV, GROUP,
                D: gl.constexpr, BMC: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, NC: gl.constexpr,
                NW: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, CAUSAL: gl.constexpr,
                SEP_O: gl.constexpr, LOAD_REGS: gl.constexpr, MMA_REGS: gl.constexpr, STORE_LSE: gl.constexpr,
                NEG_SCALE: gl.constexpr):
    """Warp-specialised attention forward over ``n_q_tiles`` query tiles of NC*BMC rows (all heads), one
    or more per program (a grid of fewer programs makes it persistent); see the module docstring.
    ``SEP_O``: a separate output staging buffer (the next tile's queries load during the epilogue).
    ``LOAD_REGS`` / ``MMA_REGS``: registers asked for the load partition and for each worker consumer
    partition (setmaxnreg). ``HQ``, ``HKV``, ``GROUP``: the K/V head map of :func:`_kv_row`."""
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
                           v_empty, turn, qk_scale, S, T, n_q_tiles, 0, NW, BMC, BN, D, STAGES, OVERLAP, PINGPONG,
                           CAUSAL, SEP_O, STORE_LSE, NEG_SCALE)),
            (_ws_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                        v_empty, S, T, n_q_tiles, HQ, HKV, GROUP, BMC, BN, NC, STAGES, CAUSAL)),
        ], [1], [LOAD_REGS])
    else:
        gl.warp_specialize([
            (_ws_consume, (o_desc, lse_ptr, q_smem, o_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                           v_empty, turn, qk_scale, S, T, n_q_tiles, 0, NW, BMC, BN, D, STAGES, OVERLAP, PINGPONG,
                           CAUSAL, SEP_O, STORE_LSE, NEG_SCALE)),
            (_ws_consume, (o_desc, lse_ptr, q_smem, o_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                           v_empty, turn, qk_scale, S, T, n_q_tiles, 1, 4, BMC, BN, D, STAGES, OVERLAP, PINGPONG,
                           CAUSAL, SEP_O, STORE_LSE, NEG_SCALE)),
            (_ws_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                        v_empty, S, T, n_q_tiles, HQ, HKV, GROUP, BMC, BN, NC, STAGES, CAUSAL)),
        ], [4, 1], [MMA_REGS, LOAD_REGS])


def compile_sm90(g: GluonAttention, neg_scale: bool = False):
    """The Gluon kernel of decision ``g`` compiled for sm_90 by Triton's own toolchain (no GPU needed,
    nothing launched): Triton's compiled kernel (``.asm["ptx"]``, ``.metadata``)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    fn = attn_fwd_ws if g.kernel == "ws" else attn_fwd_pipe
    meta = constants(g) | {"NEG_SCALE": neg_scale}
    qb, kb = [g.bmc, g.d], [g.bn, g.d]
    ty = "fp16" if g.dtype == "float16" else "bf16"
    desc = lambda box: f"tensordesc<{ty}[{box[0]},{box[1]}],{shared_layout(box, g.dtype)!r}>"  # noqa: E731
    sig = {"q_desc": desc(qb), "k_desc": desc(kb), "v_desc": desc(kb), "o_desc": desc(qb), "lse_ptr": "*fp32",
           "qk_scale": "fp32", "S": "i32", "T": "i32"} | ({"n_q_tiles": "i32"} if g.kernel == "ws" else {})
    if g.match.grouped:   # the K/V head map as launched: run-time ints, or 1s (Triton makes an int 1 a constant)
        sig |= {"HQ": "i32", "HKV": "i32", "GROUP": "i32"}
    else:
        meta |= {"HQ": 1, "HKV": 1, "GROUP": 1}
    sig |= {k: "constexpr" for k in meta}
    attrs = {(fn.arg_names.index("lse_ptr"),): [["tt.divisibility", 16]],
             (fn.arg_names.index("S"),): [["tt.divisibility", 16]],
             (fn.arg_names.index("T"),): [["tt.divisibility", 16]]}
    return triton.compile(GluonASTSource(fn, sig, meta, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": g.nw})
