"""Hand-written Gluon (Triton 3.6) FlashAttention backward kernels for Hopper (sm_90): the device code,
the host launcher and an sm_90 compile (no GPU needed) of bench/gluon_attention_bwd.py's variants.

Backward of O = softmax(Q K^T * scale [+ causal mask, key <= query]) V for contiguous (B, H, S, D)
16-bit Q, K, V, O, dO (D 64 or 128, S a multiple of every tile), given the forward's row
log-sum-exp ``lse`` (B, H, S) fp32 (natural log, of the scaled scores, as dtriton's forward saves it).
Every (B*H*S, D) view is addressed by a host TMA descriptor; scores are taken in base 2 inside
(``qk_scale`` = scale * log2 e, lse * log2 e).

- :func:`bwd_pre` (plain Triton): ``delta = rowsum(dO * O)`` fp32.
- :func:`bwd_dkdv` (Gluon, ``NW`` warps, no warp specialisation): one program per (BN keys, head);
  K and V stay in shared memory (TMA), the query tiles (BM rows) of Q and dO stream through a
  ``STAGES`` ring (TMA + mbarriers, refilled ``STAGES`` tiles ahead). Per tile:
  ``S^T = K Q^T`` and ``dP^T = V dO^T`` (async wgmma from shared memory), ``P^T = exp2(S^T qk_scale
  - lse2)``, ``dV += P^T dO`` and ``dK += dS^T Q`` with ``dS^T = P^T (dP^T - delta)`` (register-A
  wgmma), then dK * scale and dV leave through shared memory by TMA stores. ``DQ``: 0 no dQ (a
  separate :func:`bwd_dq` kernel), 1 ``dS`` goes to shared memory and ``dQ_tile = dS K`` (wgmma,
  transposed A) is added into an fp32 dQ buffer by per-thread atomics, 2 the same tile is added by one
  TMA bulk reduce-add (``cp.reduce.async.bulk.tensor``, :func:`tma_reduce_add`).
  ``CAUSAL``: a key tile starts at the query tile holding its first key (fully masked tiles skipped)
  and masks only tiles crossing the diagonal. ``OVERLAP`` (else each step's GEMMs finish before the next
  step): step i-1's dK/dV GEMMs keep running while step i's S^T and dP^T are issued, the ring is refilled
  STAGES-1 steps ahead once they are retired, and with dQ, dS^T in shared memory is the A operand of both dK
  and dQ. ``QSPLIT``: dQ's GEMM in that many column chunks (fewer registers live). ``LSE_TMA``: the steps'
  LSE and delta ride in the ring (TMA) instead of per-thread global loads. ``KEY_MAJOR``: a (head, key tile)
  grid.
- :func:`bwd_dq` (Gluon): one program per (BM queries, head) loops over the key tiles (``STAGES``
  ring of K and V): ``S = Q K^T``, ``dP = dO V^T``, ``dS = P (dP - delta)``, ``dQ += dS K``;
  causal: up to the diagonal, heaviest programs first.
- :func:`bwd_cast` (plain Triton): the fp32 dQ buffer to the inputs' dtype.

Known Gluon pitfalls kept in mind (see dtriton/backends/triton/gluon_kernels.py): no mbarrier.invalidate
at the end (a slower warp may still wait on it), fresh barrier parity 0, and a ``thread_barrier`` before a
ring slot (or any shared buffer an async wgmma / TMA store read) is refilled in these non-specialised kernels.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton._C.libtriton import ir as triton_ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin as gluon_builtin
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_init, warpgroup_mma_wait)

LOG2E = 1.4426950408889634


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
    if CAUSAL:
        if crosses:
            keep = gl.expand_dims(keys, 1) <= gl.expand_dims(queries, 0)
            st = gl.where(keep, st, -float("inf"))
    return gl.exp2(st * qk_scale - gl.expand_dims(lse2, 0))


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
# dQ (a separate kernel)
# ----------------------------------------------------------------------------------------------------------------

@gluon.jit
def _q_load(k_desc, v_desc, k_smem, v_smem, k_bar, v_bar, row, j, n_tiles, BN: gl.constexpr, STAGES: gl.constexpr):
    """TMA K and V of key tile ``j`` (if ``j < n_tiles``) into ring slot ``j % STAGES``."""
    slot = j % STAGES
    ok = j < n_tiles
    mbarrier.expect(k_bar.index(slot), k_desc.block_type.nbytes, pred=ok)
    tma.async_copy_global_to_shared(k_desc, [row + j * BN, 0], k_bar.index(slot), k_smem.index(slot), pred=ok)
    mbarrier.expect(v_bar.index(slot), v_desc.block_type.nbytes, pred=ok)
    tma.async_copy_global_to_shared(v_desc, [row + j * BN, 0], v_bar.index(slot), v_smem.index(slot), pred=ok)


@gluon.jit
def bwd_dq(q_desc, k_desc, v_desc, do_desc, dq_desc, lse_ptr, delta_ptr, qk_scale, sm_scale, S,
           D: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, NW: gl.constexpr,
           CAUSAL: gl.constexpr):
    """dQ of BM queries of one head (program (query tile, head)); see the module docstring."""
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = mma_layout(NW, 1, BN)      # S, dP: [BM, BN]
    q_layout: gl.constexpr = mma_layout(NW, 1, D)       # dQ: [BM, D]
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=q_layout, k_width=2)
    row_l: gl.constexpr = gl.SliceLayout(1, s_layout)

    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m
    bh = gl.program_id(1)
    q0 = pid_m * BM
    base = bh * S
    if CAUSAL:
        n_tiles = gl.cdiv(q0 + BM, BN)
    else:
        n_tiles = S // BN

    q_smem = gl.allocate_shared_memory(dtype, [BM, D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [BM, D], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for st in gl.static_range(STAGES):
        mbarrier.init(k_bar.index(st), count=1)
        mbarrier.init(v_bar.index(st), count=1)
    fence_async_shared()

    mbarrier.expect(q_bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [base + q0, 0], q_bar, q_smem)
    tma.async_copy_global_to_shared(do_desc, [base + q0, 0], q_bar, do_smem)
    for st in gl.static_range(STAGES):
        _q_load(k_desc, v_desc, k_smem, v_smem, k_bar, v_bar, base, st, n_tiles, BN, STAGES)

    rows = q0 + gl.arange(0, BM, layout=row_l)
    lse2 = gl.expand_dims(gl.load(lse_ptr + base + rows) * 1.4426950408889634, 1)
    dlt = gl.expand_dims(gl.load(delta_ptr + base + rows), 1)
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    dq = gl.zeros([BM, D], gl.float32, q_layout)
    s_zero = gl.zeros([BM, BN], gl.float32, s_layout)
    mbarrier.wait(q_bar, 0)
    for j in range(n_tiles):
        slot = j % STAGES
        ph = (j // STAGES) & 1
        mbarrier.wait(k_bar.index(slot), ph)
        s = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        mbarrier.wait(v_bar.index(slot), ph)
        dp = warpgroup_mma(do_smem, v_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
        if CAUSAL:
            if j * BN + BN > q0 + 1:   # the tile crosses the diagonal
                keep = gl.expand_dims(rows, 1) >= gl.expand_dims(j * BN + cols, 0)
                s = gl.where(keep, s, -float("inf"))
        p = gl.exp2(s * qk_scale - lse2)
        dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp, ))
        ds16 = (p * (dp - dlt)).to(dtype)
        dq = warpgroup_mma(gl.convert_layout(ds16, a_layout), k_smem.index(slot), dq, is_async=True)
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ))
        gl.thread_barrier()
        _q_load(k_desc, v_desc, k_smem, v_smem, k_bar, v_bar, base, j + STAGES, n_tiles, BN, STAGES)

    q_smem.store((dq * sm_scale).to(dtype))
    fence_async_shared()
    gl.thread_barrier()
    tma.async_copy_shared_to_global(dq_desc, [base + q0, 0], q_smem)
    tma.store_wait(pendings=0)


# ----------------------------------------------------------------------------------------------------------------
# host side
# ----------------------------------------------------------------------------------------------------------------

def kv_cfg(bn, bm, stages, nw, dq, overlap=True, qsplit=1, lse_tma=False, key_major=False):
    """A dK/dV kernel configuration: BN keys a program, BM-query steps, a ``stages`` Q/dO ring, ``nw`` warps,
    ``dq`` 0 (separate dQ kernel) / 1 (atomics) / 2 (TMA reduce-add), ``overlap`` the overlapped schedule,
    ``qsplit`` column chunks of a tile's dQ GEMM, ``lse_tma`` the steps' LSE and delta loaded by TMA into the
    ring (else from global memory by every thread), ``key_major`` the grid key tile by key tile across heads."""
    return dict(BN=bn, BM=bm, STAGES=stages, NW=nw, DQ=dq, OVERLAP=overlap, QSPLIT=qsplit, LSE_TMA=lse_tma,
                KEY_MAJOR=key_major)


def q_cfg(bm, bn, stages, nw):
    """A dQ kernel configuration: BM queries a program, BN-key steps, a ``stages`` K/V ring, ``nw`` warps."""
    return dict(BM=bm, BN=bn, STAGES=stages, NW=nw)


def _gl_dtype(t: torch.dtype):
    return {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float32: gl.float32}[t]


def _desc(t2d, box):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    return TensorDescriptor.from_tensor(t2d, box, gl.NVMMASharedLayout.get_default_for(box, _gl_dtype(t2d.dtype)))


def check_inputs(q, k, v, o, do, lse, variant):
    """Raise ValueError unless q, k, v, o, do are equal contiguous (B, H, S, D) fp16/bf16 CUDA tensors, D 64 or
    128, S a multiple of every tile of ``variant``, and lse a contiguous (B, H, S) fp32 tensor."""
    B, H, S, D = q.shape
    tiles = {variant["kv"]["BN"], variant["kv"]["BM"]} | ({variant["q"]["BM"], variant["q"]["BN"]}
                                                           if variant.get("q") else set())
    bad = [n for n, t in (("k", k), ("v", v), ("o", o), ("do", do)) if t.shape != q.shape or t.dtype != q.dtype]
    if (q.dtype not in (torch.float16, torch.bfloat16) or D not in (64, 128) or any(S % b for b in tiles) or bad
            or not all(t.is_contiguous() for t in (q, k, v, o, do, lse)) or lse.shape != (B, H, S)
            or lse.dtype != torch.float32):
        raise ValueError(f"gluon attention backward: needs equal contiguous fp16/bf16 (B, H, S, D) q/k/v/o/do "
                         f"(mismatched: {bad}), D 64 or 128, S a multiple of {sorted(tiles)}, lse fp32 (B, H, S); "
                         f"got q {tuple(q.shape)} {q.dtype}, lse {tuple(lse.shape)} {lse.dtype}")


def backward(q, k, v, o, do, lse, variant, causal: bool, scale: float | None = None):
    """(dQ, dK, dV) of ``O = softmax(q k^T * scale) v`` (``causal``: key <= query) for the output gradient
    ``do``; ``lse`` the forward's row log-sum-exp (natural log, fp32, (B, H, S)). ``variant``: a dict with
    ``kv`` (:func:`kv_cfg`) and, when its DQ is 0, ``q`` (:func:`q_cfg`). Scale defaults to 1/sqrt(D)."""
    check_inputs(q, k, v, o, do, lse, variant)
    B, H, S, D = q.shape
    sm = D ** -0.5 if scale is None else scale
    rows = B * H * S
    kv = variant["kv"]
    delta = torch.empty(B, H, S, device=q.device, dtype=torch.float32)
    bwd_pre[(rows // 64,)](o, do, delta, D=D, BM=64)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    v2 = lambda t: t.view(rows, D)   # noqa: E731
    bm, bn = kv["BM"], kv["BN"]
    dq32 = torch.zeros(rows, D, device=q.device, dtype=torch.float32) if kv["DQ"] else None
    dq_desc = _desc(dq32, [bm, D // kv["QSPLIT"]]) if kv["DQ"] == 2 else _desc(v2(dq), [bm, D])
    bwd_dkdv[(B * H, S // bn) if kv["KEY_MAJOR"] else (S // bn, B * H)](
        _desc(v2(q), [bm, D]), _desc(v2(k), [bn, D]), _desc(v2(v), [bn, D]), _desc(v2(do), [bm, D]),
        _desc(v2(dk), [bn, D]), _desc(v2(dv), [bn, D]), dq_desc, _desc(lse.view(rows), [bm]),
        _desc(delta.view(rows), [bm]), dq32 if dq32 is not None else delta, lse, delta,
        sm * LOG2E, sm, S, D=D, BM=bm, BN=bn, STAGES=kv["STAGES"], NW=kv["NW"], CAUSAL=causal, DQ=kv["DQ"],
        OVERLAP=kv["OVERLAP"], QSPLIT=kv["QSPLIT"], LSE_TMA=kv["LSE_TMA"],
        KEY_MAJOR=kv["KEY_MAJOR"], num_warps=kv["NW"])
    if kv["DQ"]:
        bwd_cast[(rows * D // 1024,)](dq32, dq, BLOCK=1024)
    else:
        c = variant["q"]
        bwd_dq[(S // c["BM"], B * H)](
            _desc(v2(q), [c["BM"], D]), _desc(v2(k), [c["BN"], D]), _desc(v2(v), [c["BN"], D]),
            _desc(v2(do), [c["BM"], D]), _desc(v2(dq), [c["BM"], D]), lse, delta, sm * LOG2E, sm, S,
            D=D, BM=c["BM"], BN=c["BN"], STAGES=c["STAGES"], NW=c["NW"], CAUSAL=causal, num_warps=c["NW"])
    return dq, dk, dv


# ----------------------------------------------------------------------------------------------------------------
# sm_90 compile without a GPU
# ----------------------------------------------------------------------------------------------------------------

def _tdesc(ty: str, box, gdt) -> str:
    return f"tensordesc<{ty}[{','.join(map(str, box))}],{gl.NVMMASharedLayout.get_default_for(box, gdt)!r}>"


def compile_sm90(kernel: str, cfg: dict, D: int, causal: bool, dtype: str = "fp16"):
    """Gluon kernel ``kernel`` ("dkdv" or "dq") of configuration ``cfg`` compiled for sm_90 by Triton's own
    toolchain (ptxas included), nothing launched: Triton's compiled kernel (``.asm``, ``.metadata``)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    gdt = gl.float16 if dtype == "fp16" else gl.bfloat16
    bm, bn = cfg["BM"], cfg["BN"]
    qd, kd = _tdesc(dtype, [bm, D], gdt), _tdesc(dtype, [bn, D], gdt)
    if kernel == "dkdv":
        fn = bwd_dkdv
        dqd = _tdesc("fp32", [bm, D // cfg["QSPLIT"]], gl.float32) if cfg["DQ"] == 2 else qd
        rowd = _tdesc("fp32", [bm], gl.float32)
        sig = {"q_desc": qd, "k_desc": kd, "v_desc": kd, "do_desc": qd, "dk_desc": kd, "dv_desc": kd, "dq_desc": dqd,
               "lse_desc": rowd, "delta_desc": rowd, "dq_ptr": "*fp32", "lse_ptr": "*fp32", "delta_ptr": "*fp32",
               "qk_scale": "fp32", "sm_scale": "fp32", "S": "i32"}
        meta = dict(D=D, BM=bm, BN=bn, STAGES=cfg["STAGES"], NW=cfg["NW"], CAUSAL=causal, DQ=cfg["DQ"],
                    OVERLAP=cfg["OVERLAP"], QSPLIT=cfg["QSPLIT"], LSE_TMA=cfg["LSE_TMA"],
                    KEY_MAJOR=cfg["KEY_MAJOR"])
        ptrs = ("dq_ptr", "lse_ptr", "delta_ptr", "S")
    else:
        fn = bwd_dq
        sig = {"q_desc": qd, "k_desc": kd, "v_desc": kd, "do_desc": qd, "dq_desc": qd, "lse_ptr": "*fp32",
               "delta_ptr": "*fp32", "qk_scale": "fp32", "sm_scale": "fp32", "S": "i32"}
        meta = dict(D=D, BM=bm, BN=bn, STAGES=cfg["STAGES"], NW=cfg["NW"], CAUSAL=causal)
        ptrs = ("lse_ptr", "delta_ptr", "S")
    sig |= {k: "constexpr" for k in meta}
    attrs = {(fn.arg_names.index(p),): [["tt.divisibility", 16]] for p in ptrs}
    return triton.compile(GluonASTSource(fn, sig, meta, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": cfg["NW"]})
