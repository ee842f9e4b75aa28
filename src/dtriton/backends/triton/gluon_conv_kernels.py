"""The hand-written Gluon implicit-GEMM conv2d kernel (Triton 3.6's ``triton.experimental.gluon``, Hopper sm_90).

Device code, and its sm_90 compile; :mod:`.gluon_conv` prints and launches it as
:class:`~dtriton.plan.gluon_conv.GluonConv` decides (moved from bench/gluon_conv2d.py, issue 19's probe,
which now imports it). Convolution of a contiguous NHWC 16-bit input X (N, H, W, C) with a contiguous
weight (O, R, Q, C), stride 1, output Y (N, Ho, Wo, O) in X's dtype, fp32 accumulation: ``Y[n, h, w, o] =
sum over (r, q, c) of X[n, h + r * DIL_H + OFF_H, w + q * DIL_W + OFF_W, c] * W[o, r, q, c]``, X read as
zero outside its bounds (``OFF = -padding``: any padding and dilation; Ho and Wo any sizes). C a
multiple of 64, O a multiple of the tile's BN.

GEMM view: M = output pixels, N = output channels O, K = taps x C (tap (r, q) major, channel minor),
one K step = one tap and 64 channels (BK = 64: a 128-byte row, the 128-byte swizzle's span).

- A (pixels x channels): an output tile of BM rows is ``MB`` *patches* of BH x BW output pixels (patches
  numbered over (n, h-block, w-block), any MB consecutive ones make a tile, so 56 x 56 images tile into
  8 x 8 patches without waste). For K step (r, q, c0) each patch is one TMA box ``[1, BH, BW, 64]`` of a
  4-D descriptor over X at ``[n, h0 + r * DIL_H + OFF_H, w0 + q * DIL_W + OFF_W, c0]``: TMA fills the
  out-of-bounds part (negative coordinates included) with zeros, which is the padding. A patch box of
  BH*BW rows of 128 bytes with the 128-byte swizzle has the bytes of the rows ``[BH*BW, 64]`` of a 2-D
  NVMMA tile (the swizzle is a function of the shared address only), so the ring is allocated once and
  viewed twice: 5-D ``[STAGES*MB, 1, BH, BW, 64]`` with the descriptor's layout for the copies, 3-D
  ``[STAGES, BM, 64]`` with the 2-D layout as wgmma's shared-memory A operand (``_reinterpret`` of the
  whole allocation; no register round trip).
- B (channels x out-channels): the weight viewed 2-D (O, R*Q*C), box ``[BN, 64]`` at ``[o0, tap*C + c0]``,
  K-major; wgmma reads the permuted (transposed) view.
- Epilogue: fp32 -> X's dtype into a 2-D NVMMA tile ``[BMC, BN]``, stored by TMA boxes ``[1, BH, BW, 64]``
  of a 4-D descriptor over Y, one a (patch, 64-column chunk); TMA clips boxes at the borders.

:func:`conv2d_ws` (``gl.warp_specialize``): a 1-warp loader partition fills a ``STAGES`` ring (ready /
empty mbarrier pairs, empty counting NC arrivals) and ``NC`` 4-warp consumer partitions each own MB/NC
patches of the tile (cuDNN's producer + two consumer warpgroups). A grid of fewer programs than tiles
makes it persistent (the loader runs ahead into the next tile during the epilogue; the epilogue's TMA
store is waited for only before the next tile's epilogue). Tiles run output-channel block fastest
(programs sharing an input patch run together).
"""
from __future__ import annotations

from typing import Any, Mapping

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from .gluon import shared_layout
from .gluon_kernels import mma_layout

__all__ = ["BK", "boxes", "compile_sm90", "conv2d_ws"]

BK = 64   # channels a K step (128 bytes of a 16-bit dtype: the 128-byte swizzle's span)
_BK = gl.constexpr(BK)


@gluon.constexpr_function
def _tile_layout(rank):
    """The 128-byte-swizzled NVMMA shared layout of 16-bit tiles whose rows are 64 elements (rank 2:
    the wgmma view; rank 4/5: the TMA box view)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=rank)


@gluon.jit
def _patch(p, PH, PW, BH: gl.constexpr, BW: gl.constexpr):
    """(n, h0, w0) of patch ``p`` (patches numbered over (n, h-block, w-block), w-block fastest). Patches
    beyond the last image have n >= N: their loads read zeros and their stores are clipped."""
    pw = p % PW
    r = p // PW
    return r // PH, (r % PH) * BH, pw * BW


@gluon.jit
def _issue_step(x_desc, w_desc, a4, b_smem, bar, slot, k, m_tile, o0, C, Q, OFF_H, OFF_W, DIL_H, DIL_W, PH, PW,
                BH: gl.constexpr, BW: gl.constexpr, MB: gl.constexpr):
    """TMA loads of K step ``k`` (tap ``k // (C/64)`` row-major over (r, q), channels ``(k % (C/64)) * 64``)
    of tile ``m_tile`` (its MB patches) and output channels ``o0 ...`` into ring slot ``slot``,
    completing on ``bar``."""
    cb = C // _BK
    tap = k // cb
    c0 = (k % cb) * _BK
    dr = (tap // Q) * DIL_H + OFF_H
    dq = (tap % Q) * DIL_W + OFF_W
    mbarrier.expect(bar, MB * x_desc.block_type.nbytes + w_desc.block_type.nbytes)
    for j in gl.static_range(MB):
        n, h0, w0 = _patch(m_tile * MB + j, PH, PW, BH, BW)
        tma.async_copy_global_to_shared(x_desc, [n, h0 + dr, w0 + dq, c0], bar, a4.index(slot * MB + j))
    tma.async_copy_global_to_shared(w_desc, [o0, tap * C + c0], bar, b_smem.index(slot))


@gluon.jit
def _store_tile(acc, y_desc, c_smem, c4, CI: gl.constexpr, m_tile, o0, PH, PW, BH: gl.constexpr,
                BW: gl.constexpr, MB: gl.constexpr, MBC: gl.constexpr, BN: gl.constexpr):
    """Epilogue of consumer CI (MBC patches of the tile): acc -> Y's dtype into its tile ``c_smem``
    [MBC*BH*BW, BN], then one TMA box store a (64-column chunk, patch) through ``c4``, the 5-D box view
    of all consumers' tiles. The stores are left in flight (``tma.store_wait`` before the tile is
    written again)."""
    c_smem.store(acc.to(y_desc.dtype))
    fence_async_shared()
    for kc in gl.static_range(BN // _BK):
        for j in gl.static_range(MBC):
            n, h0, w0 = _patch(m_tile * MB + CI * MBC + j, PH, PW, BH, BW)
            tma.async_copy_shared_to_global(y_desc, [n, h0, w0, o0 + kc * _BK],
                                            c4.index((CI * (BN // _BK) + kc) * MBC + j))


@gluon.jit
def _tile_of(t, n_tiles_o, BN: gl.constexpr):
    """(M tile, first output channel) of tile ``t`` (output-channel block fastest)."""
    return t // n_tiles_o, (t % n_tiles_o) * BN


@gluon.jit
def _ws_load(x_desc, w_desc, a4, b_smem, ready, empty, C, Q, OFF_H, OFF_W, DIL_H, DIL_W, PH, PW, n_tiles, n_tiles_o,
             k_steps, BH: gl.constexpr, BW: gl.constexpr, MB: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr):
    """Loader partition: every K step of every tile of the program into the ring, a slot refilled once
    all consumers have released it."""
    g = 0
    for t in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        m_tile, o0 = _tile_of(t, n_tiles_o, BN)
        for k in range(k_steps):
            slot = g % STAGES
            mbarrier.wait(empty.index(slot), ((g // STAGES) & 1) ^ 1)   # a fresh barrier passes parity 1
            _issue_step(x_desc, w_desc, a4, b_smem, ready.index(slot), slot, k, m_tile, o0, C, Q, OFF_H, OFF_W,
                        DIL_H, DIL_W, PH, PW, BH, BW, MB)
            g += 1


@gluon.jit
def _ws_consume(y_desc, a2, b_smem, c_smem, c4, ready, empty, PH, PW, n_tiles, n_tiles_o, k_steps, CI: gl.constexpr,
                BH: gl.constexpr, BW: gl.constexpr, MB: gl.constexpr, MBC: gl.constexpr, BN: gl.constexpr,
                STAGES: gl.constexpr):
    """Consumer partition CI (4 warps): patches ``CI*MBC ...`` of each of the program's tiles; releases
    each slot once the MMA reading it has retired (one wgmma group kept in flight)."""
    BMC: gl.constexpr = MBC * BH * BW
    acc_layout: gl.constexpr = mma_layout(4, BN)
    my_c = c_smem.index(CI)
    g = 0
    for t in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        m_tile, o0 = _tile_of(t, n_tiles_o, BN)
        acc = gl.zeros([BMC, BN], gl.float32, acc_layout)
        for k in range(k_steps):
            slot = (g + k) % STAGES
            mbarrier.wait(ready.index(slot), ((g + k) // STAGES) & 1)
            acc = warpgroup_mma(a2.index(slot).slice(CI * BMC, BMC), b_smem.index(slot).permute((1, 0)), acc,
                                use_acc=k > 0, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            if k > 0:
                mbarrier.arrive(empty.index((g + k - 1) % STAGES))
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty.index((g + k_steps - 1) % STAGES))
        g += k_steps
        tma.store_wait(0)   # the previous tile's stores have read my_c
        _store_tile(acc, y_desc, my_c, c4, CI, m_tile, o0, PH, PW, BH, BW, MB, MBC, BN)
    tma.store_wait(0)


@gluon.jit
def conv2d_ws(x_desc, w_desc, y_desc, C, Q, OFF_H, OFF_W, DIL_H, DIL_W, PH, PW, n_tiles, n_tiles_o, k_steps,
              BH: gl.constexpr, BW: gl.constexpr, MB: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr,
              NC: gl.constexpr, LOAD_REGS: gl.constexpr, MMA_REGS: gl.constexpr):
    """Warp-specialised conv over ``n_tiles`` tiles of MB patches x BN output channels (``n_tiles_o`` output
    channel blocks; ``PH`` x ``PW`` patches an image; ``k_steps`` = R * Q * C / 64 K steps a tile, Q taps a
    filter row), NC consumers of MB/NC patches each (launch with num_warps 4: consumer 0 is the default
    partition); a grid of fewer programs than tiles makes it persistent. ``LOAD_REGS`` / ``MMA_REGS``:
    registers asked for the loader and for the worker consumer (setmaxnreg)."""
    gl.static_assert(NC == 1 or NC == 2, "one or two consumer partitions")
    gl.static_assert(MB % NC == 0, "each consumer owns whole patches")
    dtype: gl.constexpr = x_desc.dtype
    BM: gl.constexpr = MB * BH * BW
    MBC: gl.constexpr = MB // NC
    a4 = gl.allocate_shared_memory(dtype, [STAGES * MB, 1, BH, BW, _BK], x_desc.layout)
    a2 = a4._reinterpret(dtype, [STAGES, BM, _BK], _tile_layout(2))
    b_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, _BK], w_desc.layout)
    c_smem = gl.allocate_shared_memory(dtype, [NC, MBC * BH * BW, BN], _tile_layout(2))
    c4 = c_smem._reinterpret(dtype, [NC * (BN // _BK) * MBC, 1, BH, BW, _BK], y_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=NC)
    fence_async_shared()
    if NC == 1:
        gl.warp_specialize([
            (_ws_consume, (y_desc, a2, b_smem, c_smem, c4, ready, empty, PH, PW, n_tiles, n_tiles_o, k_steps, 0, BH,
                           BW, MB, MBC, BN, STAGES)),
            (_ws_load, (x_desc, w_desc, a4, b_smem, ready, empty, C, Q, OFF_H, OFF_W, DIL_H, DIL_W, PH, PW, n_tiles,
                        n_tiles_o, k_steps, BH, BW, MB, BN, STAGES)),
        ], [1], [LOAD_REGS])
    else:
        gl.warp_specialize([
            (_ws_consume, (y_desc, a2, b_smem, c_smem, c4, ready, empty, PH, PW, n_tiles, n_tiles_o, k_steps, 0, BH,
                           BW, MB, MBC, BN, STAGES)),
            (_ws_consume, (y_desc, a2, b_smem, c_smem, c4, ready, empty, PH, PW, n_tiles, n_tiles_o, k_steps, 1, BH,
                           BW, MB, MBC, BN, STAGES)),
            (_ws_load, (x_desc, w_desc, a4, b_smem, ready, empty, C, Q, OFF_H, OFF_W, DIL_H, DIL_W, PH, PW, n_tiles,
                        n_tiles_o, k_steps, BH, BW, MB, BN, STAGES)),
        ], [4, 1], [MMA_REGS, LOAD_REGS])


def boxes(consts: Mapping[str, Any]) -> tuple[list[int], list[int], list[int]]:
    """TMA boxes of X (``[1, BH, BW, 64]``), the 2-D weight view (``[BN, 64]``) and Y (as X's) of
    :func:`conv2d_ws`'s compile-time arguments ``consts``."""
    return [1, consts["BH"], consts["BW"], BK], [consts["BN"], BK], [1, consts["BH"], consts["BW"], BK]


def compile_sm90(consts: Mapping[str, Any], dtype: str = "float16", dilated: bool = True):
    """:func:`conv2d_ws` with the compile-time arguments ``consts`` (BH, BW, MB, BN, STAGES, NC,
    LOAD_REGS, MMA_REGS) for 16-bit ``dtype`` ("float16" or "bfloat16") compiled for sm_90 by Triton's
    own toolchain (no GPU needed, nothing launched): Triton's compiled kernel (``.asm["ptx"]``,
    ``.metadata``). ``dilated``: the dilations are run-time ints (False: both 1, which Triton makes
    constants, as a launch with dilation 1 does)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    ty = {"float16": "fp16", "bfloat16": "bf16"}[dtype]
    xb, wb, yb = boxes(consts)
    desc = lambda box: f"tensordesc<{ty}[{','.join(map(str, box))}],{shared_layout(box, dtype)!r}>"  # noqa: E731
    meta = dict(consts) | ({} if dilated else {"DIL_H": 1, "DIL_W": 1})
    types = {"x_desc": desc(xb), "w_desc": desc(wb), "y_desc": desc(yb)}
    sig = {n: "constexpr" if n in meta else types.get(n, "i32") for n in conv2d_ws.arg_names}
    attrs = {(conv2d_ws.arg_names.index("C"),): [["tt.divisibility", 16]]}
    return triton.compile(GluonASTSource(conv2d_ws, sig, meta, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": 4})
