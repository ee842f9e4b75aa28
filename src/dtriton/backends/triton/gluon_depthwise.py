"""Printing and launching a depthwise convolution the plan decided to run as the Gluon depthwise kernel (Hopper).

:func:`render_gluon_depthwise` prints the module text binding the kernel's name to
:func:`~.gluon_depthwise_kernels.dw3x3_rows` with the decision
(:class:`~dtriton.plan.gluon_depthwise.GluonDepthwise`) in its header, and the launch metadata (the
compile-time constants); :func:`launch_gluon_depthwise` evaluates the offsets of the input's index with
the call's int arguments, builds the host TMA descriptor of X (4-d, boxes of one row of TW columns x BC
channels) and launches it (:func:`depthwise_launch`); :data:`KIND` is both for :mod:`.gluon_table`.
Nothing here decides: every choice is the plan's.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ...ir import poly_value
from ...plan.gluon_depthwise import GluonDepthwise
from ...plan.kernel import KernelPlan
from ..base import KernelMeta
from .gluon_kind import GluonKind

__all__ = ["KIND", "depthwise_constants", "depthwise_grid", "depthwise_launch",
           "launch_gluon_depthwise", "offset_text", "render_gluon_depthwise"]


def depthwise_constants(g: GluonDepthwise) -> dict[str, Any]:
    """The Gluon kernel's compile-time arguments by name (:func:`~.gluon_depthwise_kernels.dw3x3_rows`)."""
    return dict(BH=g.bh, TW=g.tw, BC=g.bc, V=g.v, NW=g.nw, STAGES=g.stages)


def offset_text(p) -> str:
    """`` - padding`` / `` + 2`` / "": the constant term of an index (a :data:`~dtriton.ir.Poly`) as text
    following the axes."""
    out = ""
    for names, c in p:
        term = "*".join(([str(abs(c))] if abs(c) != 1 or not names else []) + list(names))
        out += f" {'-' if c < 0 else '+'} {term}"
    return out


def render_gluon_depthwise(k: KernelPlan) -> tuple[str, KernelMeta]:
    """The module text of kernel ``k`` (planned as the Gluon depthwise kernel: ``k.gluon``) and its launch
    metadata: tensors X (4-d), the weight (3-d, any strides: the launch passes them) and the output (4-d),
    then the int arguments of X's offsets."""
    g = k.gluon
    m = g.match
    n, h, w = m.rows
    r, q = m.taps
    idx = [f"{a} + {t}{offset_text(o)}" for a, t, o in zip((h, w), m.taps, m.offset)]
    persist = f"{g.persist} programs an SM" if g.persist else "a program a strip"
    text = "\n".join([
        f"# {k.name}: the Gluon depthwise conv2d (Hopper), decided by dtriton.plan.gluon_depthwise",
        f"#   {m.out}[{n}, {h}, {w}, {m.c}] = sum over ({r}, {q}) of {m.x}.pad(0)[{n}, {idx[0]}, {idx[1]}, {m.c}] * "
        f"{m.w}[{r}, {q}, {m.c}] (3x3, stride 1)",
        f"#   {g.dtype}: strips of {g.bh} rows x {g.tw} columns x {g.bc} channels, V{g.v} w{g.nw}, a {g.stages}-row "
        f"TMA ring, {persist}; rows read as 4-d TMA boxes of {m.x} (zero fill: the padding)",
        f"#   why: {g.why}",
        "#   the kernel: dtriton/backends/triton/gluon_depthwise_kernels.py dw3x3_rows; launched with a host TMA "
        "descriptor",
        f"from dtriton.backends.triton.gluon_depthwise_kernels import dw3x3_rows as {k.name}  # noqa: E402",
        ""])
    names = [m.x, m.w, m.out]
    return text, KernelMeta(k.name, names, {m.x: 4, m.w: 3, m.out: 4}, [], [f"s_{p}" for p in m.params],
                            depthwise_constants(g), k)


def depthwise_grid(consts: dict[str, Any], y_shape: Sequence[int], persist: int, n_sm: int) -> tuple[int, ...]:
    """``(programs, strips, HB, WB, CB)`` of a launch writing an output of shape ``y_shape`` (N, Ho, Wo, C):
    HB row chunks of BH, WB column tiles of TW, CB channel blocks of BC; one program a strip and channel
    block, or, ``persist`` programs an SM of ``n_sm``, a multiple of CB at most that (at least CB)."""
    N, Ho, Wo, C = y_shape
    HB, WB, CB = -(-Ho // consts["BH"]), -(-Wo // consts["TW"]), -(-C // consts["BC"])
    strips = N * HB * WB
    programs = strips * CB
    if persist:
        programs = min(programs, max(CB, n_sm * persist // CB * CB))
    return programs, strips, HB, WB, CB


def depthwise_launch(fn: Any, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, consts: dict[str, Any],
                     off: tuple[int, int], persist: int) -> None:
    """Launch the Gluon depthwise kernel ``fn`` (:func:`~.gluon_depthwise_kernels.dw3x3_rows` or a stand-in
    taking its arguments) writing ``y`` (N, Ho, Wo, C) = the depthwise 3x3 convolution of ``x`` (N, H, W,
    C) with ``w`` (3, 3, C), stride 1, ``y[n, h, w, c] = sum of x[n, h + r + off[0], w + q + off[1], c] *
    w[r, q, c]`` (x zero outside). CUDA tensors of one 16-bit dtype, x and y contiguous with a 16-byte
    aligned base, w of any strides, C a multiple of 8 (the plan's facts; not checked here). ``persist``: programs an SM (0: a program a
    strip). Boxes may exceed the input's dims (TMA reads zeros past them)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from .gluon_depthwise_kernels import box_layout
    if y.numel() == 0:
        return
    if x.numel() == 0:   # (H or W 0: every read is the padding's zero; a descriptor needs positive dims)
        y.zero_()
        return
    n_sm = torch.cuda.get_device_properties(y.device).multi_processor_count if persist else 0
    programs, strips, HB, WB, CB = depthwise_grid(consts, y.shape, persist, n_sm)
    x_desc = TensorDescriptor.from_tensor(x, [1, 1, consts["TW"], consts["BC"]], box_layout())
    _, Ho, Wo, C = y.shape
    fn[(programs,)](x_desc, w, y, strips, Ho, Wo, C, off[0], off[1], HB, WB, CB, *w.stride(), **consts,
                    num_warps=consts["NW"])


def launch_gluon_depthwise(fn: Any, call: Sequence[Any], meta: KernelMeta) -> None:
    """Launch the Gluon depthwise kernel ``fn`` on the runtime's argument list ``call`` (X, the weight, the
    output; their strides; the int arguments of ``meta.scalars``): the output is written."""
    g = meta.ir.gluon
    x, w, y = call[:3]
    values = dict(zip([s[2:] for s in meta.scalars], call[3 + sum(meta.tensor_ndim[t] for t in meta.tensors):]))
    off = tuple(poly_value(p, values) for p in g.match.offset)
    depthwise_launch(fn, x, w, y, meta.consts, off, g.persist)


#: how the depthwise conv2d is printed and launched (the launch looked up at call time)
KIND = GluonKind(render=render_gluon_depthwise, launch=lambda fn, call, meta: launch_gluon_depthwise(fn, call, meta),
                 inputs=lambda g: (g.match.x, g.match.w))
