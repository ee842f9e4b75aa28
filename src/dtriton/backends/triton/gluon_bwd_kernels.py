"""The hand-written Gluon attention backward kernels (Triton 3.6's ``triton.experimental.gluon``, Hopper sm_90).

Device code and an sm_90 compile; :mod:`.gluon_bwd` prints and launches them as
:class:`~dtriton.plan.gluon_attention_bwd.GluonAttentionBwd` decides (moved from
bench/gluon_attention_bwd_kernels.py, whose probe imports them from here and keeps its other variants).

Backward of O = softmax(Q K^T * scale [+ causal mask, key <= query]) V for contiguous (.., S, D) 16-bit
Q, K, V, O, dO (S = T, a multiple of the tiles), given the forward's row log-sum-exp ``lse`` (.., S) fp32
(natural log, of the scaled scores, as dtriton's saving forward stores it). Every (rows, D) view is
addressed by a host TMA descriptor; scores are taken in base 2 inside (``qk_scale`` = scale * log2 e,
lse * log2 e).

- :func:`bwd_pre` (plain Triton): ``delta = rowsum(dO * O)`` fp32 (:func:`bwd_pre_strided`: O through
  strides, as the forward laid it out; what dtriton launches).
- :func:`bwd_dkdv` (Gluon, ``NW`` warps, no warp specialisation): one program per (BN keys, head);
  K and V stay in shared memory (TMA), the query tiles (BM rows) of Q and dO stream through a
  ``STAGES`` ring (TMA + mbarriers). Per tile: ``S^T = K Q^T`` and ``dP^T = V dO^T`` (async wgmma from
  shared memory), ``P^T = exp2(S^T qk_scale - lse2)``, ``dV += P^T dO`` and ``dK += dS^T Q`` with
  ``dS^T = P^T (dP^T - delta)``, then dK * scale and dV leave through shared memory by TMA stores.
  ``DQ``: 0 no dQ (a separate kernel, the bench's), 1 ``dS`` goes to shared memory and ``dQ_tile = dS K``
  (wgmma, transposed A) is added into an fp32 dQ buffer by per-thread atomics, 2 the same tile is added by
  one TMA bulk reduce-add (``cp.reduce.async.bulk.tensor``, :func:`tma_reduce_add`). ``CAUSAL``: a key
  tile starts at the query tile holding its first key (fully masked tiles skipped) and masks only tiles
  crossing the diagonal. ``OVERLAP``: step i-1's dK/dV GEMMs keep running while step i's S^T and dP^T are
  issued. ``QSPLIT``: dQ's GEMM in that many column chunks. ``LSE_TMA``: the steps' LSE and delta ride in
  the ring (TMA). ``KEY_MAJOR``: a (head, key tile) grid.
- :func:`bwd_cast` (plain Triton): the fp32 dQ buffer to the inputs' dtype.

:data:`ATTENTION_BWD` names the three, the object a printed module binds (:mod:`.gluon_bwd`).

Known Gluon pitfalls kept in mind (see :mod:`.gluon_kernels`): no mbarrier.invalidate at the end (a slower
warp may still wait on it), fresh barrier parity 0, and a ``thread_barrier`` before a ring slot (or any
shared buffer an async wgmma / TMA store read) is refilled in these non-specialised kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl
from triton._C.libtriton import ir as triton_ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin as gluon_builtin
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_init, warpgroup_mma_wait)

__all__ = ["ATTENTION_BWD", "BwdKernels", "bwd_cast", "bwd_dkdv", "bwd_pre", "bwd_pre_strided", "compile_dkdv_sm90",
           "compile_sm90", "mma_layout", "nvmma_shared", "tma_reduce_add"]


# ----------------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------------

@gluon_builtin
def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """TMA bulk reduce-add of the shared tile ``src`` into global memory at ``coord`` of ``tensor_desc``
    (ttng.async_tma_reduce ADD; Triton 3.6's Gluon has the builder op but no Python wrapper). Asynchronous:
    ``tma.store_wait`` before ``src`` is written again."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(triton_ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                              src.handle)


@gluon.constexpr_function
def mma_layout(wm, wn, n):
    """wgmma accumulator layout: ``wm`` x ``wn`` warps (M x N), instruction N = ``n`` (16-bit inputs: K 16)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[wm, wn], instr_shape=[16, n, 16])


@gluon.constexpr_function
def nvmma_shared(shape, dtype):
    """The NVMMA shared layout (largest swizzle) of a ``shape`` tile of ``dtype``."""
    return gl.NVMMASharedLayout.get_default_for(shape, dtype)


@triton.jit
def bwd_pre(o_ptr, do_ptr, delta_ptr, D: tl.constexpr, BM: tl.constexpr):
    """delta[r] = sum_d dO[r, d] * O[r, d] (fp32) of BM rows a program."""
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    offs = rows[:, None] * D + tl.arange(0, D)[None, :]
    o = tl.load(o_ptr + offs).to(tl.float32)
    do = tl.load(do_ptr + offs).to(tl.float32)
    tl.store(delta_ptr + rows, tl.sum(o * do, axis=1))


@triton.jit
def bwd_pre_strided(o_ptr, do_ptr, delta_ptr, S, o_head, o_row, D: tl.constexpr, BM: tl.constexpr):
    """delta[r] = sum_d dO[r, d] * O[r, d] (fp32) of BM rows a program (S a multiple of BM): dO contiguous
    (rows, D), O read at flat head ``r // S``, row ``r % S`` through the strides ``o_head``, ``o_row`` (unit
    stride along D): the saved output as the forward laid it out (a causal forward's: query axis first)."""
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, D)[None, :]
    o = tl.load(o_ptr + ((rows // S) * o_head + (rows % S) * o_row)[:, None] + cols).to(tl.float32)
    do = tl.load(do_ptr + rows[:, None] * D + cols).to(tl.float32)
    tl.store(delta_ptr + rows, tl.sum(o * do, axis=1))


@triton.jit
def bwd_cast(src, dst, BLOCK: tl.constexpr):
    """dst = src in dst's dtype, BLOCK elements a program."""
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + o, tl.load(src + o).to(dst.dtype.element_ty))


# ----------------------------------------------------------------------------------------------------------------
# dK, dV (and optionally dQ by atomics / TMA reduce-add)
# ----------------------------------------------------------------------------------------------------------------

@gluon.jit
def _kv_load(q_desc, do_desc, q_smem, do_smem, q_bar, do_bar, row, i, n_steps, BM: gl.constexpr,
             STAGES: gl.constexpr, lse_desc, delta_desc, lse_smem, delta_smem, LSE_TMA: gl.constexpr):
    """TMA Q and dO of step ``i`` (query rows ``row + i*BM``; if ``i < n_steps``) into ring slot ``i % STAGES``;
    ``LSE_TMA``: the rows' LSE with Q and their delta with dO too."""
    slot = i % STAGES
    ok = i < n_steps
    if LSE_TMA:
        mbarrier.expect(q_bar.index(slot), q_desc.block_type.nbytes + lse_desc.block_type.nbytes, pred=ok)
        tma.async_copy_global_to_shared(lse_desc, [row + i * BM], q_bar.index(slot), lse_smem.index(slot), pred=ok)
    else:
        mbarrier.expect(q_bar.index(slot), q_desc.block_type.nbytes, pred=ok)
    tma.async_copy_global_to_shared(q_desc, [row + i * BM, 0], q_bar.index(slot), q_smem.index(slot), pred=ok)
    if LSE_TMA:
        mbarrier.expect(do_bar.index(slot), do_desc.block_type.nbytes + delta_desc.block_type.nbytes, pred=ok)
        tma.async_copy_global_to_shared(delta_desc, [row + i * BM], do_bar.index(slot), delta_smem.index(slot),
                                        pred=ok)
    else:
        mbarrier.expect(do_bar.index(slot), do_desc.block_type.nbytes, pred=ok)
    tma.async_copy_global_to_shared(do_desc, [row + i * BM, 0], do_bar.index(slot), do_smem.index(slot), pred=ok)


@gluon.jit
def _dq_reduce(dqp, dq_desc, dq_smem, dq_ptr, row, col, sm_scale, D: gl.constexpr, DQ: gl.constexpr):
    """Add ``dqp * sm_scale`` (fp32 registers: a query tile's share of dQ, rows ``row ...``, columns
    ``col ...``) into the fp32 dQ buffer: DQ 1 per-thread atomics, DQ 2 one TMA reduce-add through ``dq_smem``
    (which the caller has made sure the previous reduce-add no longer reads: ``tma.store_wait``, a barrier)."""
    dqp = dqp * sm_scale
    if DQ == 1:
        r = row + gl.arange(0, dqp.shape[0], layout=gl.SliceLayout(1, dqp.type.layout))
        c = col + gl.arange(0, dqp.shape[1], layout=gl.SliceLayout(0, dqp.type.layout))
        gl.atomic_add(dq_ptr + gl.expand_dims(r, 1) * D + gl.expand_dims(c, 0), dqp, sem="relaxed")
    else:
        dq_smem.store(dqp)
        fence_async_shared()
        gl.thread_barrier()   # every warp's rows are in dq_smem before one thread issues the reduce-add
        tma_reduce_add(dq_desc, [row, col], dq_smem)


@gluon.jit
def _dq_tile(ds_smem, k_smem, dk, dq_desc, dq_smem, dq_ptr, row, sm_scale, D: gl.constexpr, NW: gl.constexpr,
             DQ: gl.constexpr, QSPLIT: gl.constexpr, DK_SMEM_A: gl.constexpr, q_tile):
    """A query tile's dQ share ``dS K`` (A = dS^T in shared memory, transposed) in QSPLIT column chunks (fewer
    registers), each added into the fp32 dQ buffer as soon as its GEMM is done; with ``DK_SMEM_A`` this also
    issues the step's ``dK += dS^T Q`` (A = dS^T from shared memory, ``q_tile``) behind the first chunk and
    returns it still running (an accumulator token); otherwise ``dk`` is returned as given."""
    BM: gl.constexpr = ds_smem.shape[1]
    DC: gl.constexpr = D // QSPLIT
    dq_layout: gl.constexpr = mma_layout(4, NW // 4, DC // (NW // 4))
    zero = gl.zeros([BM, DC], gl.float32, dq_layout)
    dqp = warpgroup_mma(ds_smem.permute((1, 0)), k_smem.slice(0, DC, dim=1), zero, use_acc=False, is_async=True)
    if DK_SMEM_A:
        dk = warpgroup_mma(ds_smem, q_tile, dk, is_async=True)
        dqp = warpgroup_mma_wait(num_outstanding=1, deps=(dqp, ))   # (older GEMMs too; dK keeps running)
    else:
        dqp = warpgroup_mma_wait(num_outstanding=0, deps=(dqp, ))
    _dq_reduce(dqp, dq_desc, dq_smem.index(0), dq_ptr, row, 0, sm_scale, D, DQ)
    for c in gl.static_range(1, QSPLIT):
        dqp = warpgroup_mma(ds_smem.permute((1, 0)), k_smem.slice(c * DC, DC, dim=1), zero, use_acc=False,
                            is_async=True)
        if DK_SMEM_A:
            dqp, dk = warpgroup_mma_wait(num_outstanding=0, deps=(dqp, dk))
            dk = warpgroup_mma_init(dk)
        else:
            dqp = warpgroup_mma_wait(num_outstanding=0, deps=(dqp, ))
        _dq_reduce(dqp, dq_desc, dq_smem.index(c), dq_ptr, row, c * DC, sm_scale, D, DQ)
    return dk


@gluon.jit
def _dkdv_serial(q_desc, do_desc, q_smem, do_smem, q_bar, do_bar, k_smem, v_smem, ds_smem, dq_desc, dq_smem, dq_ptr,
                 lse_ptr, delta_ptr, qk_scale, sm_scale, q_base, m_start, n_steps, k0,
                 D: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, NW: gl.constexpr,
                 CAUSAL: gl.constexpr, DQ: gl.constexpr, QSPLIT: gl.constexpr,
                 lse_desc, delta_desc, lse_smem, delta_smem, LSE_TMA: gl.constexpr):
    """The step loop, one step's GEMMs finished before the next starts (the simple schedule): (dk, dv)."""
    dtype: gl.constexpr = q_desc.dtype
    t_layout: gl.constexpr = mma_layout(NW, 1, BM)
    kv_layout: gl.constexpr = mma_layout(NW, 1, D)
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    q_row = q_base + m_start * BM
    for s in gl.static_range(STAGES):
        _kv_load(q_desc, do_desc, q_smem, do_smem, q_bar, do_bar, q_row, s, n_steps, BM, STAGES,
                 lse_desc, delta_desc, lse_smem, delta_smem, LSE_TMA)
    dk = gl.zeros([BN, D], gl.float32, kv_layout)
    dv = gl.zeros([BN, D], gl.float32, kv_layout)
    t_zero = gl.zeros([BN, BM], gl.float32, t_layout)
    cols = gl.arange(0, BM, layout=gl.SliceLayout(0, t_layout))
    keys = k0 + gl.arange(0, BN, layout=gl.SliceLayout(1, t_layout))
    for i in range(n_steps):
        slot = i % STAGES
        ph = (i // STAGES) & 1
        q0 = (m_start + i) * BM
        mbarrier.wait(q_bar.index(slot), ph)
        st = warpgroup_mma(k_smem, q_smem.index(slot).permute((1, 0)), t_zero, use_acc=False, is_async=True)
        mbarrier.wait(do_bar.index(slot), ph)
        dpt = warpgroup_mma(v_smem, do_smem.index(slot).permute((1, 0)), t_zero, use_acc=False, is_async=True)
        st = warpgroup_mma_wait(num_outstanding=1, deps=(st, ))
        lse2 = _row_stat(lse_ptr, lse_smem, q_base + q0, slot, cols, LSE_TMA) * 1.4426950408889634
        pt = _p_tile(st, lse2, qk_scale, keys, q0 + cols, q0 < k0 + BN, CAUSAL)
        dv = warpgroup_mma(gl.convert_layout(pt.to(dtype), a_layout), do_smem.index(slot), dv, is_async=True)
        dlt = _row_stat(delta_ptr, delta_smem, q_base + q0, slot, cols, LSE_TMA)
        dpt = warpgroup_mma_wait(num_outstanding=1, deps=(dpt, ))
        ds16 = (pt * (dpt - gl.expand_dims(dlt, 0))).to(dtype)
        dk = warpgroup_mma(gl.convert_layout(ds16, a_layout), q_smem.index(slot), dk, is_async=True)
        dv, dk = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk))
        if DQ > 0:
            ds_smem.store(ds16)
            fence_async_shared()
            if DQ == 2:
                tma.store_wait(pendings=0)   # the previous tile's reduce-adds have read dq_smem
            gl.thread_barrier()   # every warp's dS^T rows are in shared memory
            dk = _dq_tile(ds_smem, k_smem, dk, dq_desc, dq_smem, dq_ptr, q_base + q0, sm_scale, D, NW, DQ, QSPLIT,
                          False, q_smem)
        gl.thread_barrier()   # every warp is past this step's GEMMs (and dQ's read of dS^T)
        _kv_load(q_desc, do_desc, q_smem, do_smem, q_bar, do_bar, q_row, i + STAGES, n_steps, BM, STAGES,
                 lse_desc, delta_desc, lse_smem, delta_smem, LSE_TMA)
    return dk, dv


@gluon.jit
def _dkdv_overlap(q_desc, do_desc, q_smem, do_smem, q_bar, do_bar, k_smem, v_smem, ds_smem, dq_desc, dq_smem, dq_ptr,
                  lse_ptr, delta_ptr, qk_scale, sm_scale, q_base, m_start, n_steps, k0,
                  D: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, NW: gl.constexpr,
                  CAUSAL: gl.constexpr, DQ: gl.constexpr, QSPLIT: gl.constexpr,
                  lse_desc, delta_desc, lse_smem, delta_smem, LSE_TMA: gl.constexpr):
    """The step loop with step i-1's dK (and dV) GEMMs still running while step i's S^T and dP^T are issued;
    a ring slot is refilled (STAGES - 1 steps ahead) once the S^T wait of the next step has retired them.
    With dQ (DQ > 0) dS^T goes to shared memory and is the A operand of both dK and dQ: (dk, dv)."""
    dtype: gl.constexpr = q_desc.dtype
    t_layout: gl.constexpr = mma_layout(NW, 1, BM)
    kv_layout: gl.constexpr = mma_layout(NW, 1, D)
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    q_row = q_base + m_start * BM
    for s in gl.static_range(STAGES - 1):
        _kv_load(q_desc, do_desc, q_smem, do_smem, q_bar, do_bar, q_row, s, n_steps, BM, STAGES,
                 lse_desc, delta_desc, lse_smem, delta_smem, LSE_TMA)
    dk = warpgroup_mma_init(gl.zeros([BN, D], gl.float32, kv_layout))
    dv = warpgroup_mma_init(gl.zeros([BN, D], gl.float32, kv_layout))
    t_zero = gl.zeros([BN, BM], gl.float32, t_layout)
    cols = gl.arange(0, BM, layout=gl.SliceLayout(0, t_layout))
    keys = k0 + gl.arange(0, BN, layout=gl.SliceLayout(1, t_layout))
    for i in range(n_steps):
        slot = i % STAGES
        ph = (i // STAGES) & 1
        q0 = (m_start + i) * BM
        mbarrier.wait(q_bar.index(slot), ph)
        st = warpgroup_mma(k_smem, q_smem.index(slot).permute((1, 0)), t_zero, use_acc=False, is_async=True)
        mbarrier.wait(do_bar.index(slot), ph)
        dpt = warpgroup_mma(v_smem, do_smem.index(slot).permute((1, 0)), t_zero, use_acc=False, is_async=True)
        st, dk, dv = warpgroup_mma_wait(num_outstanding=1, deps=(st, dk, dv))   # (and step i-1's dK, dV)
        if DQ == 2:
            tma.store_wait(pendings=0)   # step i-1's dQ reduce-add has read dq_smem
        gl.thread_barrier()   # every warp is past step i-1's GEMMs: its slot and dS^T are free
        _kv_load(q_desc, do_desc, q_smem, do_smem, q_bar, do_bar, q_row, i + STAGES - 1, n_steps, BM, STAGES,
                 lse_desc, delta_desc, lse_smem, delta_smem, LSE_TMA)
        lse2 = _row_stat(lse_ptr, lse_smem, q_base + q0, slot, cols, LSE_TMA) * 1.4426950408889634
        pt = _p_tile(st, lse2, qk_scale, keys, q0 + cols, q0 < k0 + BN, CAUSAL)
        dv = warpgroup_mma(gl.convert_layout(pt.to(dtype), a_layout), do_smem.index(slot), dv, is_async=True)
        dlt = _row_stat(delta_ptr, delta_smem, q_base + q0, slot, cols, LSE_TMA)
        dpt = warpgroup_mma_wait(num_outstanding=1, deps=(dpt, ))
        ds16 = (pt * (dpt - gl.expand_dims(dlt, 0))).to(dtype)
        if DQ > 0:
            ds_smem.store(ds16)
            fence_async_shared()
            gl.thread_barrier()   # every warp's dS^T rows are in shared memory
            dk = _dq_tile(ds_smem, k_smem, dk, dq_desc, dq_smem, dq_ptr, q_base + q0, sm_scale, D, NW, DQ, QSPLIT,
                          True, q_smem.index(slot))
        else:
            dk = warpgroup_mma(gl.convert_layout(ds16, a_layout), q_smem.index(slot), dk, is_async=True)
    dk, dv = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv))
    return dk, dv


@gluon.jit
def _row_stat(ptr, smem, row, slot, cols, LSE_TMA: gl.constexpr):
    """A per-query statistic (LSE or delta) of the step's rows ``row + cols`` in the layout of ``cols``: from its
    ring slot in shared memory (``LSE_TMA``: loaded by TMA with the step's Q / dO) or from global memory."""
    if LSE_TMA:
        return smem.index(slot).load(cols.type.layout)
    else:
        return gl.load(ptr + row + cols)


@gluon.jit
def _p_tile(st, lse2, qk_scale, keys, queries, crosses, CAUSAL: gl.constexpr):
    """P^T = exp2(S^T * qk_scale - lse2[query]) of a [keys, queries] score tile; causal: where the tile
    ``crosses`` the diagonal (a run-time test), keys after their query give 0."""
    x = st * qk_scale - gl.expand_dims(lse2, 0)
    if CAUSAL:   # (masked after scaling: a negative scale would turn a -inf score into +inf)
        if crosses:
            keep = gl.expand_dims(keys, 1) <= gl.expand_dims(queries, 0)
            x = gl.where(keep, x, -float("inf"))
    return gl.exp2(x)


@gluon.jit
def bwd_dkdv(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, dq_desc, lse_desc, delta_desc, dq_ptr, lse_ptr,
             delta_ptr, qk_scale, sm_scale, S,
             D: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, NW: gl.constexpr,
             CAUSAL: gl.constexpr, DQ: gl.constexpr, OVERLAP: gl.constexpr, QSPLIT: gl.constexpr,
             LSE_TMA: gl.constexpr, KEY_MAJOR: gl.constexpr):
    """dK, dV of BN keys of one head (program (key tile, head), or (head, key tile) with ``KEY_MAJOR``: every
    head's first key tile (causal: the heaviest) is launched before any head's second); see the module docstring."""
    dtype: gl.constexpr = q_desc.dtype
    if KEY_MAJOR:
        pid_n = gl.program_id(1)
        bh = gl.program_id(0)
    else:
        pid_n = gl.program_id(0)
        bh = gl.program_id(1)
    k0 = pid_n * BN
    q_base = bh * S
    if CAUSAL:
        m_start = k0 // BM
    else:
        m_start = 0
    n_steps = S // BM - m_start

    k_smem = gl.allocate_shared_memory(dtype, [BN, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BN, D], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BM, D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BM, D], do_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    do_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    if DQ > 0:
        ds_smem = gl.allocate_shared_memory(dtype, [BN, BM], nvmma_shared([BN, BM], dtype))
    else:
        ds_smem = k_smem
    if DQ == 2:
        dq_smem = gl.allocate_shared_memory(gl.float32, [QSPLIT, BM, D // QSPLIT], dq_desc.layout)
    else:
        dq_smem = q_smem
    if LSE_TMA:
        lse_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BM], lse_desc.layout)
        delta_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BM], delta_desc.layout)
    else:
        lse_smem = q_smem
        delta_smem = q_smem
    mbarrier.init(kv_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(q_bar.index(s), count=1)
        mbarrier.init(do_bar.index(s), count=1)
    fence_async_shared()

    mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [q_base + k0, 0], kv_bar, k_smem)
    tma.async_copy_global_to_shared(v_desc, [q_base + k0, 0], kv_bar, v_smem)
    mbarrier.wait(kv_bar, 0)
    if OVERLAP:
        dk, dv = _dkdv_overlap(q_desc, do_desc, q_smem, do_smem, q_bar, do_bar, k_smem, v_smem, ds_smem, dq_desc,
                               dq_smem, dq_ptr, lse_ptr, delta_ptr, qk_scale, sm_scale, q_base, m_start, n_steps, k0,
                               D, BM, BN, STAGES, NW, CAUSAL, DQ, QSPLIT,
                               lse_desc, delta_desc, lse_smem, delta_smem, LSE_TMA)
    else:
        dk, dv = _dkdv_serial(q_desc, do_desc, q_smem, do_smem, q_bar, do_bar, k_smem, v_smem, ds_smem, dq_desc,
                              dq_smem, dq_ptr, lse_ptr, delta_ptr, qk_scale, sm_scale, q_base, m_start, n_steps, k0,
                              D, BM, BN, STAGES, NW, CAUSAL, DQ, QSPLIT,
                              lse_desc, delta_desc, lse_smem, delta_smem, LSE_TMA)

    # (no mbarrier.invalidate: a slower warp may still be inside its last wait)
    if DQ == 2:
        tma.store_wait(pendings=0)
    gl.thread_barrier()   # every warp's GEMMs (and the last reduce-add) are done with K, V
    k_smem.store((dk * sm_scale).to(dtype))
    v_smem.store(dv.to(dtype))
    fence_async_shared()
    gl.thread_barrier()
    tma.async_copy_shared_to_global(dk_desc, [q_base + k0, 0], k_smem)
    tma.async_copy_shared_to_global(dv_desc, [q_base + k0, 0], v_smem)
    tma.store_wait(pendings=0)



# ----------------------------------------------------------------------------------------------------------------
# what a printed module binds; the sm_90 compile
# ----------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BwdKernels:
    """The three kernels of the Gluon attention backward, launched in this order by
    :func:`~dtriton.backends.triton.gluon_bwd.launch_gluon_bwd`: ``pre`` (delta), ``dkdv`` (dK, dV and
    dQ's fp32 sum), ``cast`` (dQ to its dtype)."""
    pre: Any
    dkdv: Any
    cast: Any


#: The Gluon attention backward's kernels (a printed module binds the kernel's name to this).
ATTENTION_BWD = BwdKernels(bwd_pre_strided, bwd_dkdv, bwd_cast)


def _tdesc(ty: str, box, gdt) -> str:
    return f"tensordesc<{ty}[{','.join(map(str, box))}],{gl.NVMMASharedLayout.get_default_for(box, gdt)!r}>"


def compile_dkdv_sm90(cfg: dict, D: int, causal: bool, dtype: str = "float16"):
    """:func:`bwd_dkdv` of configuration ``cfg`` (its constants BM, BN, STAGES, NW, DQ, OVERLAP, QSPLIT,
    LSE_TMA, KEY_MAJOR), head dim ``D``, ``dtype`` "float16" or "bfloat16", compiled for sm_90 by
    Triton's own toolchain (ptxas included; no GPU needed, nothing launched): Triton's compiled kernel
    (``.asm``, ``.metadata``)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    gdt, ty = (gl.float16, "fp16") if dtype in ("float16", "fp16") else (gl.bfloat16, "bf16")
    bm, bn = cfg["BM"], cfg["BN"]
    qd, kd = _tdesc(ty, [bm, D], gdt), _tdesc(ty, [bn, D], gdt)
    dqd = _tdesc("fp32", [bm, D // cfg["QSPLIT"]], gl.float32) if cfg["DQ"] == 2 else qd
    rowd = _tdesc("fp32", [bm], gl.float32)
    sig = {"q_desc": qd, "k_desc": kd, "v_desc": kd, "do_desc": qd, "dk_desc": kd, "dv_desc": kd, "dq_desc": dqd,
           "lse_desc": rowd, "delta_desc": rowd, "dq_ptr": "*fp32", "lse_ptr": "*fp32", "delta_ptr": "*fp32",
           "qk_scale": "fp32", "sm_scale": "fp32", "S": "i32"}
    meta = dict(D=D, BM=bm, BN=bn, STAGES=cfg["STAGES"], NW=cfg["NW"], CAUSAL=causal, DQ=cfg["DQ"],
                OVERLAP=cfg["OVERLAP"], QSPLIT=cfg["QSPLIT"], LSE_TMA=cfg["LSE_TMA"], KEY_MAJOR=cfg["KEY_MAJOR"])
    sig |= {k: "constexpr" for k in meta}
    attrs = {(bwd_dkdv.arg_names.index(p),): [["tt.divisibility", 16]] for p in ("dq_ptr", "lse_ptr", "delta_ptr", "S")}
    return triton.compile(GluonASTSource(bwd_dkdv, sig, meta, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": cfg["NW"]})


def compile_sm90(g):
    """The dK/dV kernel of decision ``g`` (a :class:`~dtriton.plan.gluon_attention_bwd.GluonAttentionBwd`)
    compiled for sm_90 (:func:`compile_dkdv_sm90`; the delta and cast kernels are plain Triton)."""
    from .gluon_bwd import bwd_constants
    return compile_dkdv_sm90(bwd_constants(g), g.d, g.causal, g.dtype)
