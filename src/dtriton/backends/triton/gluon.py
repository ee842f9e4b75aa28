"""Printing, launching and compiling a kernel the plan decided to run as the Gluon attention forward.

:func:`render_gluon` prints the module text binding the kernel's name to the Gluon kernel of
:mod:`.gluon_kernels` the plan's :class:`~dtriton.plan.GluonAttention` names, with the decision in
its header, and the launch metadata (the compile-time constants); :func:`launch_gluon` builds the
host TMA descriptors of the (rows, D) views of Q, K, V and the output and launches it (a persistent
grid of one program per SM where the decision says so); :data:`KIND` is both for :mod:`.gluon_table`;
:func:`.gluon_kernels.compile_sm90` compiles it
for sm_90 without a GPU (tests, register counts). Nothing here decides: every choice is the plan's, except the
sign of the run-time scale (a compile-time flag of the launch, as Triton specialises integers).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ...errors import ZeroDivisorError
from ...plan.gluon_attention import GluonAttention
from ...plan.kernel import KernelPlan
from ..base import KernelMeta
from .gluon_kind import GluonKind

__all__ = ["KIND", "constants", "kernel_name", "kv_heads", "launch_gluon", "render_gluon", "shared_layout"]

LOG2E = 1.4426950408889634


def kernel_name(g: GluonAttention) -> str:
    """The name of the kernel of :mod:`.gluon_kernels` decision ``g`` runs."""
    return "attn_fwd_ws" if g.kernel == "ws" else "attn_fwd_pipe"


def constants(g: GluonAttention) -> dict[str, Any]:
    """The Gluon kernel's compile-time arguments by name (the scale's sign excepted)."""
    m = g.match
    if g.kernel == "ws":
        own = dict(BMC=g.bmc, BN=g.bn, STAGES=g.stages, NC=g.nc, NW=g.nw, OVERLAP=g.overlap, PINGPONG=g.pingpong,
                   SEP_O=g.persist, LOAD_REGS=g.load_regs, MMA_REGS=g.mma_regs)
    else:
        own = dict(BM=g.bmc, BN=g.bn, STAGES=g.stages, NW=g.nw, OVERLAP=g.overlap)
    return {"D": g.d, **own, "CAUSAL": m.causal, "STORE_LSE": bool(m.lse)}


def render_gluon(k: KernelPlan) -> tuple[str, KernelMeta]:
    """The module text of kernel ``k`` (planned as a Gluon attention forward: ``k.gluon``) and its
    launch metadata: tensors Q, K, V and the output (4-d or more, contiguous), for a saving forward
    the log-sum-exp and the output's copy, the scale argument when the scale is one."""
    g = k.gluon
    m = g.match
    desc = (f"ws {g.nc}x(m{g.bmc} w{g.nw}) n{g.bn} s{g.stages}" if g.kernel == "ws" else
            f"pipe m{g.bmc}n{g.bn} s{g.stages} w{g.nw}")
    flags = [f for f, on in (("overlap", g.overlap), ("ping-pong", g.pingpong), ("persistent", g.persist)) if on]
    scale = repr(m.scale) if m.scale is not None else f"the argument {m.scale_param}"
    text = "\n".join([
        f"# {k.name}: the Gluon attention forward (Hopper), decided by dtriton.plan.gluon_attention",
        f"#   O[{', '.join(m.lead + (m.i, m.e))}] = softmax_{m.j}({m.q} . {m.k} over {m.d} * scale"
        f"{', causal j <= i' if m.causal else ''}) . {m.v}; scale {scale}",
        *([f"#   grouped-query: {m.k} and {m.v} read at head {m.lead[-1]} // "
           f"{m.group_param or m.group} (their rows start at kv head * T)"] if m.grouped else []),
        f"#   {g.dtype}, head dim {g.d}: {desc} {' '.join(flags)}",
        *([f"#   saving forward: {m.lse} = the row log-sum-exp (natural log, fp32), {m.copy} = a copy of {m.out}"]
          if m.lse else []),
        f"#   why: {g.why}",
        f"#   the kernel: dtriton/backends/triton/gluon_kernels.py {kernel_name(g)}; launched with host TMA "
        f"descriptors of the (rows, {g.d}) views",
        f"from dtriton.backends.triton.gluon_kernels import {kernel_name(g)} as {k.name}  # noqa: E402",
        ""])
    names = [m.q, m.k, m.v, m.out] + ([m.lse, m.copy] if m.lse else [])
    ndim = {t: len(m.lead) + (1 if t == m.lse else 2) for t in names}
    scalars = ([f"s_{m.scale_param}"] if m.scale is None else []) + ([f"s_{m.group_param}"] if m.group_param else [])
    return text, KernelMeta(k.name, names, ndim, [], scalars, constants(g), k)


def _gl_dtype(name: str):
    from triton.experimental.gluon import language as gl
    return gl.float16 if name == "float16" else gl.bfloat16


def shared_layout(box, dtype: str):
    """The NVMMA shared layout (largest swizzle) of a TMA box ``box`` of 16-bit ``dtype``."""
    from triton.experimental.gluon import language as gl
    return gl.NVMMASharedLayout.get_default_for(box, _gl_dtype(dtype))


def launch_gluon(fn: Any, call: Sequence[Any], meta: KernelMeta) -> None:
    """Launch the Gluon attention forward ``fn`` on the runtime's argument list ``call`` (the tensors
    of ``meta``, their strides, then the scale argument if any); the output tensor is written (a saving
    forward's: the output, the log-sum-exp by the kernel, then the output's copy)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    g = meta.ir.gluon
    q, k, v, o = call[:4]
    n = len(meta.tensors)
    lse = o   # (no LSE: the kernel stores none, any pointer)
    if n > 4:   # a saving forward: the LSE in the kernel's (lead, i) order, through a buffer where laid out otherwise
        view = call[4].permute(g.match.lse_perm)
        lse = view if view.is_contiguous() else torch.empty(view.shape, dtype=torch.float32, device=o.device)
    scalars = dict(zip(meta.scalars, call[n + sum(meta.tensor_ndim[t] for t in meta.tensors):]))
    scale = float(scalars[f"s_{g.match.scale_param}"]) if g.match.scale is None else g.match.scale
    heads = kv_heads(g, q, k, scalars)
    D, S, T = g.d, q.shape[-2], k.shape[-2]
    rows = q.numel() // D
    qb, kb = [g.bmc, D], [g.bn, D]
    descs = [TensorDescriptor.from_tensor(t.view(t.numel() // D, D), box, shared_layout(box, g.dtype))
             for t, box in ((q, qb), (k, kb), (v, kb), (o, qb))]
    qk_scale = scale * LOG2E
    if g.kernel == "pipe":
        fn[(S // g.bmc, rows // S)](*descs, lse, qk_scale, S, T, *heads, **meta.consts, NEG_SCALE=qk_scale < 0,
                                    num_warps=g.nw)
    else:
        n_q = rows // g.block_rows
        grid = min(n_q, torch.cuda.get_device_properties(q.device).multi_processor_count) if g.persist else n_q
        fn[(grid,)](*descs, lse, qk_scale, S, T, n_q, *heads, **meta.consts, NEG_SCALE=qk_scale < 0, num_warps=g.nw)
    if n > 4:
        if lse is not view:
            view.copy_(lse)
        call[5].permute(g.match.copy_perm).copy_(o)   # the saved normalised output: the output itself


def kv_heads(g: GluonAttention, q: torch.Tensor, k: torch.Tensor, scalars) -> tuple[int, int, int]:
    """``(HQ, HKV, GROUP)`` of the kernel's K/V head map: the (lead) program of flat query head ``bh``
    reads K/V rows from flat head ``(bh // HQ) * HKV + (bh % HQ) // GROUP``, i.e. query head ``h`` of
    the last lead axis (HQ of them in Q) reads K/V head ``h // GROUP`` (HKV in K); (1, 1, 1): the same
    head (no grouping). ``scalars``: the call's scalar arguments by kernel name (``s_<param>``).

    Raises:
        ZeroDivisorError: the group argument is 0 (``h // rep`` has no value)."""
    m = g.match
    if not m.grouped:
        return 1, 1, 1
    group = int(scalars[f"s_{m.group_param}"]) if m.group_param else m.group
    if group == 0:
        raise ZeroDivisorError(f"{m.lead[-1]} // {m.group_param}: the divisor {m.group_param} is 0; an integer // by 0 "
                               f"has no value (torch raises ZeroDivisionError). Pass a nonzero {m.group_param}")
    return q.shape[len(m.lead) - 1], k.shape[len(m.lead) - 1], group


#: how the attention forward is printed and launched (the launch looked up at call time)
KIND = GluonKind(render=render_gluon, launch=lambda fn, call, meta: launch_gluon(fn, call, meta),
                 inputs=lambda g: (g.match.q, g.match.k, g.match.v))
