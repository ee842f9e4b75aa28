"""Hand-written Gluon (Triton 3.6) FlashAttention backward kernels for Hopper (sm_90): the device code
(the dK/dV, delta and cast kernels are the package's, dtriton/backends/triton/gluon_bwd_kernels.py), the
host launcher and an sm_90 compile (no GPU needed) of bench/gluon_attention_bwd.py's variants.

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
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

# the dK/dV kernel (every variant: dQ by a second kernel, atomics or TMA reduce-add; overlap; LSE by TMA), the
# delta and cast kernels: the package's (the variant dtriton runs is one configuration of them)
from dtriton.backends.triton.gluon_bwd_kernels import (bwd_cast, bwd_dkdv, bwd_pre, compile_dkdv_sm90,  # noqa: F401
                                                      mma_layout, nvmma_shared, tma_reduce_add)

LOG2E = 1.4426950408889634

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
    if kernel == "dkdv":
        return compile_dkdv_sm90(cfg, D, causal, dtype)
    gdt = gl.float16 if dtype == "fp16" else gl.bfloat16
    bm, bn = cfg["BM"], cfg["BN"]
    qd, kd = _tdesc(dtype, [bm, D], gdt), _tdesc(dtype, [bn, D], gdt)
    fn = bwd_dq
    sig = {"q_desc": qd, "k_desc": kd, "v_desc": kd, "do_desc": qd, "dq_desc": qd, "lse_ptr": "*fp32",
           "delta_ptr": "*fp32", "qk_scale": "fp32", "sm_scale": "fp32", "S": "i32"}
    meta = dict(D=D, BM=bm, BN=bn, STAGES=cfg["STAGES"], NW=cfg["NW"], CAUSAL=causal)
    ptrs = ("lse_ptr", "delta_ptr", "S")
    sig |= {k: "constexpr" for k in meta}
    attrs = {(fn.arg_names.index(p),): [["tt.divisibility", 16]] for p in ptrs}
    return triton.compile(GluonASTSource(fn, sig, meta, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": cfg["NW"]})
