"""Printing and launching a convolution the plan decided to run as the Gluon conv2d (Hopper).

:func:`render_gluon_conv` prints the module text binding the kernel's name to :func:`~.gluon_conv_kernels.
conv2d_ws` with the decision (:class:`~dtriton.plan.gluon_conv.GluonConv`) in its header, and the launch
metadata (the compile-time constants); :func:`launch_gluon_conv` evaluates the dilations and offsets
of the input's index with the call's int arguments, builds the host TMA descriptors (4-d of X and the
output, 2-d of the weight viewed (O, R*Q*C)) and launches it (:func:`conv2d_launch`, which the
bench probe shares); :data:`KIND` is both for :mod:`.gluon_table`. Nothing here decides:
every choice is the plan's.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ...ir import poly_value
from ...plan.gluon_conv import GluonConv
from ...plan.kernel import KernelPlan
from ..base import KernelMeta
from .gluon import shared_layout
from .gluon_kind import GluonKind

__all__ = ["KIND", "conv2d_launch", "conv_constants", "launch_gluon_conv", "render_gluon_conv"]

BK = 64   # (gluon_conv_kernels.BK: the channels of a K step, the boxes' last dim)


def conv_constants(g: GluonConv) -> dict[str, Any]:
    """The Gluon kernel's compile-time arguments by name (:func:`~.gluon_conv_kernels.conv2d_ws`)."""
    return dict(BH=g.bh, BW=g.bw, MB=g.mb, BN=g.bn, STAGES=g.stages, NC=g.nc, LOAD_REGS=g.load_regs,
                MMA_REGS=g.mma_regs)


def _poly_text(p) -> str:
    """A :data:`~dtriton.ir.Poly` as Python-like text (``2*dilation - 1``)."""
    parts = []
    for names, c in p:
        term = "*".join(([str(abs(c))] if abs(c) != 1 or not names else []) + list(names))
        parts.append(("- " if c < 0 else "+ ") + term)
    text = " ".join(parts) or "+ 0"
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


def render_gluon_conv(k: KernelPlan) -> tuple[str, KernelMeta]:
    """The module text of kernel ``k`` (planned as the Gluon conv2d: ``k.gluon``) and its launch
    metadata: tensors X, the weight and the output (4-d, contiguous), then the int arguments of X's
    index terms."""
    g = k.gluon
    m = g.match
    n, h, w = m.rows
    r, q = m.taps
    idx = [f"{a} + {t} * ({_poly_text(d)}) + ({_poly_text(o)})" for a, t, d, o in zip((h, w), m.taps, m.dilation,
                                                                                          m.offset)]
    text = "\n".join([
        f"# {k.name}: the Gluon conv2d (Hopper), decided by dtriton.plan.gluon_conv",
        f"#   {m.out}[{n}, {h}, {w}, {m.o}] = sum over ({m.c}, {r}, {q}) of {m.x}.pad(0)[{n}, {idx[0]}, {idx[1]}, "
        f"{m.c}] * {m.w}[{m.o}, {r}, {q}, {m.c}] (stride 1)",
        f"#   {g.dtype}: ws {g.nc}x(m{g.block_rows // g.nc}) n{g.bn} s{g.stages}{' persistent' if g.persist else ''}, "
        f"patches of {g.bh}x{g.bw} output pixels read as 4-d TMA boxes of {m.x} (zero fill: the padding)",
        f"#   why: {g.why}",
        "#   the kernel: dtriton/backends/triton/gluon_conv_kernels.py conv2d_ws; launched with host TMA descriptors",
        f"from dtriton.backends.triton.gluon_conv_kernels import conv2d_ws as {k.name}  # noqa: E402",
        ""])
    names = [m.x, m.w, m.out]
    return text, KernelMeta(k.name, names, {t: 4 for t in names}, [], [f"s_{p}" for p in m.params],
                            conv_constants(g), k)


def conv2d_launch(fn: Any, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, consts: dict[str, Any], dtype: str,
                  off: tuple[int, int], dil: tuple[int, int], persist: bool) -> None:
    """Launch the Gluon conv ``fn`` (:func:`~.gluon_conv_kernels.conv2d_ws` or a stand-in taking its
    arguments) writing ``y`` (N, Ho, Wo, O) = the convolution of ``x`` (N, H, W, C) with ``w`` (O, R, Q, C),
    stride 1, ``y[n, h, w] = sum of x[n, h + r * dil[0] + off[0], w + q * dil[1] + off[1]] * w[o, r, q]``
    (x zero outside). All three contiguous 16-byte aligned CUDA tensors of 16-bit ``dtype``, C a multiple
    of 64, O of ``consts["BN"]`` (the plan's facts; not checked here). ``persist``: one program per SM.
    Boxes may exceed the tensors' dims (H or W below 8: TMA reads zeros past them, clips the stores)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    if y.numel() == 0:
        return
    if x.numel() == 0:   # (H or W 0: every read is the padding's zero; a descriptor needs positive dims)
        y.zero_()
        return
    N, Ho, Wo, O = y.shape
    O_, R, Q, C = w.shape
    xb, wb = [1, consts["BH"], consts["BW"], BK], [consts["BN"], BK]
    x_desc = TensorDescriptor.from_tensor(x, xb, shared_layout(xb, dtype))
    w_desc = TensorDescriptor.from_tensor(w.view(O_, R * Q * C), wb, shared_layout(wb, dtype))
    y_desc = TensorDescriptor.from_tensor(y, xb, shared_layout(xb, dtype))
    PH, PW = -(-Ho // consts["BH"]), -(-Wo // consts["BW"])
    n_tiles_o = O // consts["BN"]
    n_tiles = -(-(N * PH * PW) // consts["MB"]) * n_tiles_o
    grid = min(n_tiles, torch.cuda.get_device_properties(y.device).multi_processor_count) if persist else n_tiles
    fn[(grid,)](x_desc, w_desc, y_desc, C, Q, off[0], off[1], dil[0], dil[1], PH, PW, n_tiles, n_tiles_o,
                R * Q * (C // BK), **consts, num_warps=4)


def launch_gluon_conv(fn: Any, call: Sequence[Any], meta: KernelMeta) -> None:
    """Launch the Gluon conv2d ``fn`` on the runtime's argument list ``call`` (X, the weight, the
    output; their strides; the int arguments of ``meta.scalars``): the output is written."""
    g = meta.ir.gluon
    m = g.match
    x, w, y = call[:3]
    values = dict(zip([s[2:] for s in meta.scalars], call[3 + sum(meta.tensor_ndim[t] for t in meta.tensors):]))
    off = tuple(poly_value(p, values) for p in m.offset)
    dil = tuple(poly_value(p, values) for p in m.dilation)
    conv2d_launch(fn, x, w, y, meta.consts, g.dtype, off, dil, g.persist)


#: how the conv2d is printed and launched (the launch looked up at call time)
KIND = GluonKind(render=render_gluon_conv, launch=lambda fn, call, meta: launch_gluon_conv(fn, call, meta),
                 inputs=lambda g: (g.match.x, g.match.w))
