"""Gluon (Triton 3.6) implicit-GEMM conv2d for Hopper (sm_90), issue 19's probe: configurations and a launcher.

bench/probe_gluon_conv2d.py checks and times them. The kernel is the package's
(:mod:`dtriton.backends.triton.gluon_conv_kernels`: ``conv2d_ws``, its docstring describes the tiling;
launched by :func:`dtriton.backends.triton.gluon_conv.conv2d_launch`), one copy for the compiler's
lowering (:mod:`dtriton.plan.gluon_conv`) and this probe. Convolution of an NHWC 16-bit input X
(N, H, W, C) with a weight (O, R, Q, C) contiguous, stride 1, zero padding PAD on both sides of H and
W, output Y (N, H + 2 PAD - R + 1, W + 2 PAD - Q + 1, O) NHWC, fp32 accumulation; C a multiple of 64, O
a multiple of the configuration's BN.

The probe's first version (commit 9e8d88b) had a plain pipelined kernel too (no warp specialisation);
on the H200 (bench/results/s11/call2/conv.log) it ran 175.4 us (m128n256 s3 w8) and 186.8 (m128n128 s4
w4) against 165.8 for ``ws 2x(m64) n256 s3 persist`` and cuDNN's 163.6, and was dropped.
"""
from __future__ import annotations

import torch

from dtriton.backends.triton.gluon_conv import conv2d_launch
from dtriton.backends.triton.gluon_conv_kernels import BK as BKI
from dtriton.backends.triton.gluon_conv_kernels import compile_sm90 as compile_consts
from dtriton.backends.triton.gluon_conv_kernels import conv2d_ws


def _ws(nc, mb, bn, stages, persist, bh=8, bw=8, load_regs=40, mma_regs=232):
    return dict(kernel="ws", BH=bh, BW=bw, MB=mb, BN=bn, STAGES=stages, NC=nc, PERSIST=persist, LOAD_REGS=load_regs,
                MMA_REGS=mma_regs)


#: (name, configuration). Patches are 8 x 8 pixels; a tile is MB patches (BM = 64 MB rows) x BN channels;
#: ``ws NCx(BMC)``: NC consumer warpgroups of BMC rows each, a 1-warp loader; ``persist``: one program an
#: SM looping over tiles. The first two are the ones dtriton.plan.gluon_conv picks (O % 256, O % 128).
VARIANTS = [
    ("ws 2x(m64) n256 s3 persist", _ws(2, 2, 256, 3, True)),
    ("ws 2x(m128) n128 s3 persist", _ws(2, 4, 128, 3, True)),
    ("ws 2x(m64) n128 s4", _ws(2, 2, 128, 4, False)),
    ("ws 2x(m64) n128 s5 persist", _ws(2, 2, 128, 5, True)),
    ("ws 1x(m128) n128 s4 persist", _ws(1, 2, 128, 4, True)),
]


def consts(cfg) -> dict:
    """The kernel's compile-time arguments of a configuration."""
    return {k: cfg[k] for k in ("BH", "BW", "MB", "BN", "STAGES", "NC", "LOAD_REGS", "MMA_REGS")}


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
    return N, H, W, C, O, R, Q, H + 2 * pad - R + 1, W + 2 * pad - Q + 1


def gluon_conv2d(x, w, cfg, pad: int = 1):
    """A launcher of the Gluon conv of ``cfg`` and its output: ``(launch, y)``; ``launch()`` (re)computes
    ``y`` (N, OH, OW, O) NHWC = conv2d(x, w), stride 1, zero padding ``pad``. x: contiguous NHWC
    (N, H, W, C) fp16 or bf16 CUDA tensor, w: contiguous (O, R, Q, C) of its dtype (torch's (O, C, R, Q)
    permuted), C a multiple of 64, O a multiple of the configuration's BN; ValueError otherwise."""
    N, H, W, C, O, R, Q, OH, OW = check_shapes(cfg, x, w, pad)
    if x.dtype not in (torch.float16, torch.bfloat16) or not x.is_cuda:
        raise ValueError(f"gluon_conv2d: x and w must be fp16 or bf16 CUDA tensors; got {x.dtype} on {x.device}")
    y = torch.empty(N, OH, OW, O, device=x.device, dtype=x.dtype)
    dtype = str(x.dtype).replace("torch.", "")
    meta = consts(cfg)

    def launch():
        conv2d_launch(conv2d_ws, x, w, y, meta, dtype, (-pad, -pad), (1, 1), cfg["PERSIST"])

    return launch, y


def compile_sm90(cfg, R: int = 3, Q: int = 3, pad: int = 1):
    """The Gluon kernel of ``cfg`` compiled for sm_90 (fp16, dilation 1) by Triton's own toolchain,
    launching nothing (R, Q and the padding are run-time arguments of the kernel)."""
    return compile_consts(consts(cfg), "float16", dilated=False)
