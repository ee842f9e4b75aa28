"""Printing and launching a derived attention backward the plan decided to run as the Gluon backward.

:func:`render_gluon_bwd` prints the module text binding the kernel's name to the three kernels of
:mod:`.gluon_bwd_kernels` (:data:`~.gluon_bwd_kernels.ATTENTION_BWD`: delta, dK/dV with dQ's fp32 sum,
dQ's cast) with the decision (:class:`~dtriton.plan.gluon_attention_bwd.GluonAttentionBwd`) in its
header, and the launch metadata; :func:`launch_gluon_bwd` allocates delta and the zero-filled fp32 dQ
sum, builds the host TMA descriptors of the (rows, D) views and launches the three;
:data:`KIND` is both for :mod:`.gluon_table`. Nothing here decides: every choice is the
plan's.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ...plan.gluon_attention_bwd import GluonAttentionBwd
from ...plan.kernel import KernelPlan
from ..base import KernelMeta
from .gluon import LOG2E, shared_layout
from .gluon_kind import GluonKind

__all__ = ["KIND", "bwd_constants", "launch_gluon_bwd", "render_gluon_bwd"]

#: rows a program of the delta kernel reduces; elements a program of the dQ cast converts
PRE_ROWS, CAST_BLOCK = 64, 1024


def bwd_constants(g: GluonAttentionBwd) -> dict[str, Any]:
    """The dK/dV kernel's compile-time arguments by name (:func:`~.gluon_bwd_kernels.bwd_dkdv`)."""
    return dict(D=g.d, BM=g.bm, BN=g.bn, STAGES=g.stages, NW=g.nw, CAUSAL=g.causal, DQ=2, OVERLAP=True,
                QSPLIT=g.qsplit, LSE_TMA=g.lse_tma, KEY_MAJOR=False)


def render_gluon_bwd(k: KernelPlan) -> tuple[str, KernelMeta]:
    """The module text of kernel ``k`` (planned as the Gluon attention backward: ``k.gluon``) and its
    launch metadata: tensors Q, K, V, dO, the saved LSE and output, then dQ, dK, dV; the scale
    argument when the scale is one."""
    g = k.gluon
    bm = g.match
    m = bm.fwd
    scale = repr(m.scale) if m.scale is not None else f"the argument {m.scale_param}"
    lead = ", ".join(m.lead)
    text = "\n".join([
        f"# {k.name}: the Gluon attention backward (Hopper), decided by dtriton.plan.gluon_attention_bwd",
        f"#   d{m.q}, d{m.k}, d{m.v} ({bm.dq}, {bm.dk}, {bm.dv}) of O[{lead}, {m.i}, {m.e}] = "
        f"softmax_{m.j}({m.q} . {m.k} "
        f"over {m.d} * scale{', causal j <= i' if m.causal else ''}) . {m.v}; scale {scale}",
        f"#   from dO = {bm.do}, the saved row log-sum-exp {bm.lse} (natural log, fp32) and output {bm.o}",
        f"#   {g.dtype}, head dim {g.d}: delta = rowsum(dO * O); dK/dV kv{g.bn}x{g.bm} s{g.stages} w{g.nw}, "
        f"dQ added by TMA reduce-add (qs{g.qsplit}) into fp32{', LSE/delta by TMA' if g.lse_tma else ''}; dQ cast",
        *([f"#   the saved {bm.lse} / {bm.o} are laid out query axis first: the LSE copied to (lead, query) order, "
          "the output read through its strides (copied where D is not its unit-stride dim)"]
          if bm.lse_perm != tuple(range(len(bm.lse_perm))) or bm.o_perm != tuple(range(len(bm.o_perm))) else []),
        f"#   why: {g.why}",
        "#   the kernels: dtriton/backends/triton/gluon_bwd_kernels.py (bwd_pre, bwd_dkdv, bwd_cast); launched with "
        f"host TMA descriptors of the (rows, {g.d}) views",
        f"from dtriton.backends.triton.gluon_bwd_kernels import ATTENTION_BWD as {k.name}  # noqa: E402",
        ""])
    names = list(bm.inputs) + list(bm.outputs)
    ndim = {t: len(m.lead) + (1 if t == bm.lse else 2) for t in names}
    scalars = [f"s_{m.scale_param}"] if m.scale is None else []
    return text, KernelMeta(k.name, names, ndim, [], scalars, bwd_constants(g), k)


def launch_gluon_bwd(fn: Any, call: Sequence[Any], meta: KernelMeta) -> None:
    """Launch the Gluon attention backward ``fn`` (an :class:`~.gluon_bwd_kernels.BwdKernels`: ``pre``,
    ``dkdv``, ``cast``) on the runtime's argument list ``call`` (the tensors of ``meta``: Q, K, V, dO,
    LSE, O, dQ, dK, dV; their strides; the scale argument if any): dQ, dK and dV are written (each
    through its view in the kernel's (lead, row, D) order, through a buffer where that view is not
    contiguous)."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    g = meta.ir.gluon
    bm = g.match
    m = bm.fwd
    n = len(meta.tensors)
    q, k, v, do = call[:4]
    # the saved LSE in the kernel's (lead, row) order, copied where laid out otherwise (a causal forward's
    # statistics have the query axis first); the saved output, read once by the delta kernel, through its
    # strides as (flat head, row, D) where they allow it
    lse = call[4].permute(bm.lse_perm).contiguous()
    o = _head_rows(call[5].permute(bm.o_perm), q.shape[-2], g.d)
    scalars = dict(zip(meta.scalars, call[n + sum(meta.tensor_ndim[t] for t in meta.tensors):]))
    scale = float(scalars[f"s_{m.scale_param}"]) if m.scale is None else m.scale
    D, S = g.d, q.shape[-2]
    rows = q.numel() // D
    dev = q.device
    views = [t.permute(p) for t, p in zip(call[6:9], (bm.dq_perm, bm.dk_perm, bm.dv_perm))]
    grads = [w if w.is_contiguous() else torch.empty(w.shape, dtype=w.dtype, device=dev) for w in views]
    delta = torch.empty(rows, dtype=torch.float32, device=dev)
    dq32 = torch.zeros(rows, D, dtype=torch.float32, device=dev)

    def desc(t, box):
        return TensorDescriptor.from_tensor(t, box, shared_layout(box, g.dtype))

    def flat(t):
        return t.reshape(rows, D)

    fn.pre[(rows // PRE_ROWS,)](o, do, delta, S, o.stride(0), o.stride(1), D=D, BM=PRE_ROWS)
    qb, kb = [g.bm, D], [g.bn, D]
    dq_box, row_box = [g.bm, D // g.qsplit], [g.bm]
    dq_desc = TensorDescriptor.from_tensor(dq32, dq_box, gl.NVMMASharedLayout.get_default_for(dq_box, gl.float32))
    row_layout = gl.NVMMASharedLayout.get_default_for(row_box, gl.float32)
    lse_desc = TensorDescriptor.from_tensor(lse.reshape(rows), row_box, row_layout)
    delta_desc = TensorDescriptor.from_tensor(delta, row_box, row_layout)
    fn.dkdv[(S // g.bn, rows // S)](
        desc(flat(q), qb), desc(flat(k), kb), desc(flat(v), kb), desc(flat(do), qb), desc(flat(grads[1]), kb),
        desc(flat(grads[2]), kb), dq_desc, lse_desc, delta_desc, dq32, lse, delta, scale * LOG2E, scale, S,
        **meta.consts, num_warps=g.nw)
    fn.cast[(rows * D // CAST_BLOCK,)](dq32, grads[0], BLOCK=CAST_BLOCK)
    for w, t in zip(views, grads):
        if t is not w:
            w.copy_(t)


def _head_rows(t: torch.Tensor, S: int, D: int) -> torch.Tensor:
    """``t`` (lead.., S, D) as a (flat head, S, D) view with unit stride along D, copied where its strides
    allow none."""
    try:
        v = t.view(-1, S, D)
    except RuntimeError:
        return t.contiguous().view(-1, S, D)
    return v if v.stride(2) == 1 else v.contiguous()


#: how the attention backward is printed and launched (the launch looked up at call time)
KIND = GluonKind(render=render_gluon_bwd, launch=lambda fn, call, meta: launch_gluon_bwd(fn, call, meta),
                 inputs=lambda g: g.match.inputs, outputs=lambda g: g.match.outputs)
