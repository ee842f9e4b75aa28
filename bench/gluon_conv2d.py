"""Hand-written Gluon (Triton 3.6) implicit-GEMM conv2d kernels for Hopper (sm_90), issue 19's probe.

bench/probe_gluon_conv2d.py checks and times them (self-contained: Triton 3.6's Gluon and torch only).
Convolution of an NHWC fp16 input X (N, H, W, C) with a weight (O, C, R, Q) (stored here as (O, R, Q, C)
contiguous), stride 1, zero padding PAD on both sides of H and W, output Y (N, H + 2 PAD - R + 1,
W + 2 PAD - Q + 1, O) fp16 NHWC, fp32 accumulation; C a multiple of 64, O a multiple of the tile's BN.

GEMM view: M = output pixels, N = output channels O, K = taps x C (tap (r, q) major, channel minor),
one K step = one tap and 64 channels (BK = 64: a 128-byte row, the 128-byte swizzle's span).

- A (pixels x channels): an output tile of BM rows is ``MB`` *patches* of BH x BW output pixels (patches
  numbered over (n, h-block, w-block), any MB consecutive ones make a tile, so 56 x 56 images tile into
  8 x 8 patches without waste). For K step (r, q, c0) each patch is one TMA box ``[1, BH, BW, 64]`` of a
  4-D descriptor over X at ``[n, h0 + r - PAD, w0 + q - PAD, c0]``: TMA fills the out-of-bounds part
  (negative coordinates included) with zeros, which is the padding. A patch box of BH*BW rows of 128
  bytes with the 128-byte swizzle has the bytes of the rows ``[BH*BW, 64]`` of a 2-D NVMMA tile (the
  swizzle is a function of the shared address only: 16-byte chunk index XOR row mod 8), so the ring is
  allocated once and viewed twice: 5-D ``[STAGES*MB, 1, BH, BW, 64]`` with the descriptor's layout for the
  copies, 3-D ``[STAGES, BM, 64]`` with the 2-D layout as wgmma's shared-memory A operand (``_reinterpret``
  of the whole allocation; no register round trip).
- B (channels x out-channels): the weight viewed 2-D (O, R*Q*C), box ``[BN, 64]`` at ``[o0, tap*C + c0]``,
  K-major; wgmma reads the permuted (transposed) view, as the attention kernels read K.
- Epilogue: fp32 -> fp16 into a 2-D NVMMA tile ``[BMC, BN]`` (128-byte swizzle: column chunks of 64 are
  the outer blocks of the tile, rows inside), stored by TMA boxes ``[1, BH, BW, 64]`` of a 4-D
  descriptor over Y, one a (patch, 64-column chunk); TMA clips boxes at the borders.

Kernels (``VARIANTS`` names configurations; :func:`gluon_conv2d` launches one, :func:`compile_sm90`
compiles one for sm_90 without a GPU):

- :func:`conv_pipe`: no warp specialisation, one program a tile, ``NW`` warps stacked along M; a
  ``STAGES`` TMA ring loaded by the same warps ``STAGES - 1`` steps ahead, async wgmma with one group in
  flight (the slot of step k-1 is refilled once step k's MMA is issued and k-1's has retired).
- :func:`conv_ws`: ``gl.warp_specialize``: a 1-warp loader partition fills a ``STAGES`` ring (ready /
  empty mbarrier pairs, empty counting NC arrivals) and ``NC`` 4-warp consumer partitions each own BMC of
  the tile's NC*BMC rows (cuDNN's producer + two consumer warpgroups: NC 2, BMC 64, BN 128). A grid of
  fewer programs than tiles makes it persistent (the loader runs ahead into the next tile during the
  epilogue; the epilogue's TMA store is waited for only before the next tile's epilogue).
Tiles run output-channel block fastest (programs sharing an input patch run together).
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

BK = gl.constexpr(64)   # channels a K step (128 bytes of fp16: the 128-byte swizzle's span)
BKI = 64                # the same, for the host


# ----------------------------------------------------------------------------------------------------------------
# device helpers
# ----------------------------------------------------------------------------------------------------------------

@gluon.constexpr_function
def mma_layout(nw, n):
    """wgmma accumulator layout of ``nw`` warps stacked along M, instruction N = ``n`` (fp16: K 16)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[nw, 1], instr_shape=[16, n, 16])


@gluon.constexpr_function
def tile_layout(rank):
    """The 128-byte-swizzled NVMMA shared layout of fp16 tiles whose rows are 64 elements (rank 2: the
    wgmma view; rank 4: the TMA box view)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=rank)


@gluon.jit
def _patch(p, PH, PW, BH: gl.constexpr, BW: gl.constexpr):
    """(n, h0, w0) of patch ``p`` (patches numbered over (n, h-block, w-block), w-block fastest). Patches
    beyond the last image have n >= N: their loads read zeros and their stores are clipped."""
    pw = p % PW
    r = p // PW
    return r // PH, (r % PH) * BH, pw * BW


@gluon.jit
def _issue_step(x_desc, w_desc, a4, b_smem, bar, slot, k, m_tile, o0, C, PH, PW, Q: gl.constexpr,
                PAD: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, MB: gl.constexpr):
    """TMA loads of K step ``k`` (tap (k // (C/64)) row-major over (r, q), channels ``(k % (C/64)) * 64``)
    of tile ``m_tile`` (its MB patches) and output channels ``o0 ...`` into ring slot ``slot``,
    completing on ``bar``."""
    cb = C // BK
    tap = k // cb
    c0 = (k % cb) * BK
    dr = tap // Q - PAD
    dq = tap % Q - PAD
    mbarrier.expect(bar, MB * x_desc.block_type.nbytes + w_desc.block_type.nbytes)
    for j in gl.static_range(MB):
        n, h0, w0 = _patch(m_tile * MB + j, PH, PW, BH, BW)
        tma.async_copy_global_to_shared(x_desc, [n, h0 + dr, w0 + dq, c0], bar, a4.index(slot * MB + j))
    tma.async_copy_global_to_shared(w_desc, [o0, tap * C + c0], bar, b_smem.index(slot))


@gluon.jit
def _store_tile(acc, y_desc, c_smem, c4, CI: gl.constexpr, m_tile, o0, PH, PW, BH: gl.constexpr,
                BW: gl.constexpr, MB: gl.constexpr, MBC: gl.constexpr, BN: gl.constexpr):
    """Epilogue of consumer CI (rows ``CI*MBC*BH*BW ...`` of the tile, MBC patches): acc -> fp16 into its
    tile ``c_smem`` [MBC*BH*BW, BN], then one TMA box store a (64-column chunk, patch) through ``c4``,
    the 5-D box view of all consumers' tiles. The stores are left in flight (``tma.store_wait`` before
    the tile is written again)."""
    c_smem.store(acc.to(y_desc.dtype))
    fence_async_shared()
    for kc in gl.static_range(BN // BK):
        for j in gl.static_range(MBC):
            n, h0, w0 = _patch(m_tile * MB + CI * MBC + j, PH, PW, BH, BW)
            tma.async_copy_shared_to_global(y_desc, [n, h0, w0, o0 + kc * BK],
                                            c4.index((CI * (BN // BK) + kc) * MBC + j))


@gluon.jit
def _tile_of(t, n_tiles_o, BN: gl.constexpr):
    """(M tile, first output channel) of tile ``t`` (output-channel block fastest)."""
    return t // n_tiles_o, (t % n_tiles_o) * BN


# ----------------------------------------------------------------------------------------------------------------
# plain pipelined kernel (no warp specialisation)
# ----------------------------------------------------------------------------------------------------------------

@gluon.jit
def conv_pipe(x_desc, w_desc, y_desc, C, PH, PW, n_tiles_o, R: gl.constexpr, Q: gl.constexpr, PAD: gl.constexpr,
              BH: gl.constexpr, BW: gl.constexpr, MB: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr,
              NW: gl.constexpr):
    """One program a tile of MB patches (BM = MB*BH*BW rows) x BN output channels, NW warps; needs
    R*Q*C/64 >= STAGES - 1 (checked by the host)."""
    dtype: gl.constexpr = x_desc.dtype
    BM: gl.constexpr = MB * BH * BW
    acc_layout: gl.constexpr = mma_layout(NW, BN)
    m_tile, o0 = _tile_of(gl.program_id(0), n_tiles_o, BN)
    a4 = gl.allocate_shared_memory(dtype, [STAGES * MB, 1, BH, BW, BK], x_desc.layout)
    a2 = a4._reinterpret(dtype, [STAGES, BM, BK], tile_layout(2))
    b_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], w_desc.layout)
    c_smem = gl.allocate_shared_memory(dtype, [1, BM, BN], tile_layout(2))
    c4 = c_smem._reinterpret(dtype, [(BN // BK) * MB, 1, BH, BW, BK], y_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    fence_async_shared()
    k_steps = R * Q * (C // BK)
    for i in gl.static_range(STAGES - 1):
        _issue_step(x_desc, w_desc, a4, b_smem, ready.index(i), i, i, m_tile, o0, C, PH, PW, Q, PAD, BH, BW, MB)
    acc = gl.zeros([BM, BN], gl.float32, acc_layout)
    for k in range(k_steps):
        slot = k % STAGES
        mbarrier.wait(ready.index(slot), (k // STAGES) & 1)
        acc = warpgroup_mma(a2.index(slot), b_smem.index(slot).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        kn = k + STAGES - 1
        if kn < k_steps:
            sn = kn % STAGES
            _issue_step(x_desc, w_desc, a4, b_smem, ready.index(sn), sn, kn, m_tile, o0, C, PH, PW, Q, PAD, BH, BW,
                        MB)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    _store_tile(acc, y_desc, c_smem.index(0), c4, 0, m_tile, o0, PH, PW, BH, BW, MB, MB, BN)
    tma.store_wait(0)


# ----------------------------------------------------------------------------------------------------------------
# warp-specialised kernel (a TMA loader partition, NC wgmma consumer partitions), optionally persistent
# ----------------------------------------------------------------------------------------------------------------

@gluon.jit
def _ws_load(x_desc, w_desc, a4, b_smem, ready, empty, C, PH, PW, n_tiles, n_tiles_o, R: gl.constexpr,
             Q: gl.constexpr, PAD: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, MB: gl.constexpr,
             BN: gl.constexpr, STAGES: gl.constexpr):
    """Loader partition: every K step of every tile of the program into the ring, a slot refilled once
    all consumers have released it."""
    k_steps = R * Q * (C // BK)
    g = 0
    for t in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        m_tile, o0 = _tile_of(t, n_tiles_o, BN)
        for k in range(k_steps):
            slot = g % STAGES
            mbarrier.wait(empty.index(slot), ((g // STAGES) & 1) ^ 1)   # a fresh barrier passes parity 1
            _issue_step(x_desc, w_desc, a4, b_smem, ready.index(slot), slot, k, m_tile, o0, C, PH, PW, Q, PAD, BH,
                        BW, MB)
            g += 1


@gluon.jit
def _ws_consume(y_desc, a2, b_smem, c_smem, c4, ready, empty, C, PH, PW, n_tiles, n_tiles_o, CI: gl.constexpr,
                R: gl.constexpr, Q: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, MB: gl.constexpr,
                MBC: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr):
    """Consumer partition CI (4 warps): rows ``CI*BMC ...`` (BMC = MBC*BH*BW) of each of the program's
    tiles; releases each slot once the MMA reading it has retired (one wgmma group kept in flight)."""
    BMC: gl.constexpr = MBC * BH * BW
    acc_layout: gl.constexpr = mma_layout(4, BN)
    k_steps = R * Q * (C // BK)
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
def conv_ws(x_desc, w_desc, y_desc, C, PH, PW, n_tiles, n_tiles_o, R: gl.constexpr, Q: gl.constexpr,
            PAD: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, MB: gl.constexpr, BN: gl.constexpr,
            STAGES: gl.constexpr, NC: gl.constexpr, LOAD_REGS: gl.constexpr, MMA_REGS: gl.constexpr):
    """Warp-specialised conv over ``n_tiles`` tiles of MB patches x BN output channels, NC consumers of
    MB/NC patches each (launch with num_warps 4: consumer 0 is the default partition); a grid of fewer
    programs than tiles makes it persistent. ``LOAD_REGS`` / ``MMA_REGS``: registers asked for the loader
    and for the worker consumer (setmaxnreg)."""
    gl.static_assert(NC == 1 or NC == 2, "one or two consumer partitions")
    gl.static_assert(MB % NC == 0, "each consumer owns whole patches")
    dtype: gl.constexpr = x_desc.dtype
    BM: gl.constexpr = MB * BH * BW
    MBC: gl.constexpr = MB // NC
    a4 = gl.allocate_shared_memory(dtype, [STAGES * MB, 1, BH, BW, BK], x_desc.layout)
    a2 = a4._reinterpret(dtype, [STAGES, BM, BK], tile_layout(2))
    b_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], w_desc.layout)
    c_smem = gl.allocate_shared_memory(dtype, [NC, MBC * BH * BW, BN], tile_layout(2))
    c4 = c_smem._reinterpret(dtype, [NC * (BN // BK) * MBC, 1, BH, BW, BK], y_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=NC)
    fence_async_shared()
    if NC == 1:
        gl.warp_specialize([
            (_ws_consume, (y_desc, a2, b_smem, c_smem, c4, ready, empty, C, PH, PW, n_tiles, n_tiles_o, 0, R, Q, BH,
                           BW, MB, MBC, BN, STAGES)),
            (_ws_load, (x_desc, w_desc, a4, b_smem, ready, empty, C, PH, PW, n_tiles, n_tiles_o, R, Q, PAD, BH, BW,
                        MB, BN, STAGES)),
        ], [1], [LOAD_REGS])
    else:
        gl.warp_specialize([
            (_ws_consume, (y_desc, a2, b_smem, c_smem, c4, ready, empty, C, PH, PW, n_tiles, n_tiles_o, 0, R, Q, BH,
                           BW, MB, MBC, BN, STAGES)),
            (_ws_consume, (y_desc, a2, b_smem, c_smem, c4, ready, empty, C, PH, PW, n_tiles, n_tiles_o, 1, R, Q, BH,
                           BW, MB, MBC, BN, STAGES)),
            (_ws_load, (x_desc, w_desc, a4, b_smem, ready, empty, C, PH, PW, n_tiles, n_tiles_o, R, Q, PAD, BH, BW,
                        MB, BN, STAGES)),
        ], [4, 1], [MMA_REGS, LOAD_REGS])


# ----------------------------------------------------------------------------------------------------------------
# host side
# ----------------------------------------------------------------------------------------------------------------

def _pipe(mb, bn, stages, nw, bh=8, bw=8):
    return dict(kernel="pipe", BH=bh, BW=bw, MB=mb, BN=bn, STAGES=stages, NW=nw)


def _ws(nc, mb, bn, stages, persist, bh=8, bw=8, load_regs=40, mma_regs=232):
    return dict(kernel="ws", BH=bh, BW=bw, MB=mb, BN=bn, STAGES=stages, NC=nc, PERSIST=persist, LOAD_REGS=load_regs,
                MMA_REGS=mma_regs)


#: (name, configuration). Patches are 8 x 8 pixels; a tile is MB patches (BM = 64 MB rows) x BN channels.
#: ``pipe``: NW warps stacked along M; ``ws NCx(BMC)``: NC consumer warpgroups of BMC rows each, a
#: 1-warp loader; ``persist``: one program an SM looping over tiles.
VARIANTS = [
    ("pipe m128n128 s4 w4", _pipe(2, 128, 4, 4)),
    ("pipe m128n256 s3 w8", _pipe(2, 256, 3, 8)),
    ("ws 2x(m64) n128 s4", _ws(2, 2, 128, 4, False)),
    ("ws 2x(m64) n128 s5 persist", _ws(2, 2, 128, 5, True)),
    ("ws 2x(m64) n256 s3 persist", _ws(2, 2, 256, 3, True)),
    ("ws 2x(m128) n128 s3 persist", _ws(2, 4, 128, 3, True)),
    ("ws 1x(m128) n128 s4 persist", _ws(1, 2, 128, 4, True)),
]


def kernel_of(cfg):
    """The Gluon kernel a configuration runs."""
    return conv_pipe if cfg["kernel"] == "pipe" else conv_ws


def launch_meta(cfg, R: int, Q: int, pad: int) -> tuple[dict, int]:
    """(constexpr arguments by name, num_warps) of a configuration for an R x Q filter, padding ``pad``."""
    keys = ("BH", "BW", "MB", "BN", "STAGES") + (("NW", ) if cfg["kernel"] == "pipe" else
                                                 ("NC", "LOAD_REGS", "MMA_REGS"))
    meta = {"R": R, "Q": Q, "PAD": pad, **{k: cfg[k] for k in keys}}
    return meta, cfg["NW"] if cfg["kernel"] == "pipe" else 4


def boxes(cfg) -> tuple[list[int], list[int], list[int]]:
    """TMA boxes of X, the 2-D weight and Y."""
    return [1, cfg["BH"], cfg["BW"], BKI], [cfg["BN"], BKI], [1, cfg["BH"], cfg["BW"], BKI]


def nvmma(box):
    """The NVMMA shared layout of an fp16 TMA box (largest swizzle: 128 bytes for 64-element rows)."""
    return gl.NVMMASharedLayout.get_default_for(box, gl.float16)


def check_shapes(cfg, x, w, pad: int) -> tuple[int, ...]:
    """(N, H, W, C, O, R, Q, output H, output W) of NHWC ``x`` and (O, R, Q, C) ``w`` for ``cfg``, or
    ValueError naming what does not fit."""
    if x.dim() != 4 or w.dim() != 4 or x.dtype != w.dtype:
        raise ValueError(f"gluon_conv2d: x must be (N, H, W, C) and w (O, R, Q, C) of one dtype; got {tuple(x.shape)} "
                         f"{x.dtype}, {tuple(w.shape)} {w.dtype}")
    N, H, W, C = x.shape
    O, R, Q, Cw = w.shape
    if Cw != C:
        raise ValueError(f"gluon_conv2d: weight channels {Cw} != input channels {C}")
    if C % BKI or O % cfg["BN"]:
        raise ValueError(f"gluon_conv2d: C ({C}) must be a multiple of {BKI} and O ({O}) of BN = {cfg['BN']}")
    if not (x.is_contiguous() and w.is_contiguous()):
        raise ValueError("gluon_conv2d: x (NHWC) and w (O, R, Q, C) must be contiguous")
    if cfg["kernel"] == "pipe" and R * Q * C // BKI < cfg["STAGES"] - 1:
        raise ValueError(f"gluon_conv2d: {R * Q * C // BKI} K steps < STAGES - 1 = {cfg['STAGES'] - 1}")
    return N, H, W, C, O, R, Q, H + 2 * pad - R + 1, W + 2 * pad - Q + 1


def gluon_conv2d(x, w, cfg, pad: int = 1):
    """A launcher of the Gluon conv of ``cfg`` and its output: ``(launch, y)``; ``launch()`` (re)computes
    ``y`` (N, OH, OW, O) fp16 NHWC = conv2d(x, w), stride 1, zero padding ``pad``. x: contiguous NHWC
    (N, H, W, C) fp16 CUDA tensor, w: contiguous (O, R, Q, C) fp16 (torch's (O, C, R, Q) permuted),
    C a multiple of 64, O a multiple of the configuration's BN; ValueError otherwise."""
    N, H, W, C, O, R, Q, OH, OW = check_shapes(cfg, x, w, pad)
    if x.dtype != torch.float16 or not x.is_cuda:
        raise ValueError(f"gluon_conv2d: x and w must be fp16 CUDA tensors; got {x.dtype} on {x.device}")
    y = torch.empty(N, OH, OW, O, device=x.device, dtype=torch.float16)
    xb, wb, yb = boxes(cfg)
    x_desc = TensorDescriptor.from_tensor(x, xb, nvmma(xb))
    w_desc = TensorDescriptor.from_tensor(w.view(O, R * Q * C), wb, nvmma(wb))
    y_desc = TensorDescriptor.from_tensor(y, yb, nvmma(yb))
    PH, PW = triton.cdiv(OH, cfg["BH"]), triton.cdiv(OW, cfg["BW"])
    n_tiles_o = O // cfg["BN"]
    n_tiles = triton.cdiv(N * PH * PW, cfg["MB"]) * n_tiles_o
    meta, nw = launch_meta(cfg, R, Q, pad)
    kernel = kernel_of(cfg)
    if cfg["kernel"] == "pipe":
        grid, args = (n_tiles, ), (C, PH, PW, n_tiles_o)
    else:
        n_sm = torch.cuda.get_device_properties(x.device).multi_processor_count
        grid, args = (min(n_tiles, n_sm) if cfg["PERSIST"] else n_tiles, ), (C, PH, PW, n_tiles, n_tiles_o)

    def launch():
        kernel[grid](x_desc, w_desc, y_desc, *args, **meta, num_warps=nw)

    return launch, y


def compile_sm90(cfg, R: int = 3, Q: int = 3, pad: int = 1):
    """The Gluon kernel of ``cfg`` compiled for sm_90 by Triton's own toolchain, launching nothing."""
    fn = kernel_of(cfg)
    meta, nw = launch_meta(cfg, R, Q, pad)
    xb, wb, yb = boxes(cfg)
    desc = lambda box: f"tensordesc<fp16[{','.join(map(str, box))}],{nvmma(box)!r}>"  # noqa: E731
    sig = {"x_desc": desc(xb), "w_desc": desc(wb), "y_desc": desc(yb), "C": "i32", "PH": "i32", "PW": "i32"}
    sig |= {"n_tiles": "i32"} if cfg["kernel"] == "ws" else {}
    sig |= {"n_tiles_o": "i32"} | {k: "constexpr" for k in meta}
    attrs = {(fn.arg_names.index("C"),): [["tt.divisibility", 16]]}
    src = GluonASTSource(fn, sig, meta, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": nw})
