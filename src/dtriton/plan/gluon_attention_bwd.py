"""Whether a derived attention backward runs as the hand-written Gluon backward on Hopper.

``dt.grad(attention, save=saved_statistics(attention))`` gives one backward algorithm computing dQ, dK
and dV from (Q, K, V, scale, grad_out, the saved row log-sum-exp, the saved normalised output); the
Triton backend runs it as three Triton kernels. On an sm_90 GPU, head dim 128, it runs instead as the
Gluon backward (:mod:`dtriton.backends.triton.gluon_bwd_kernels`): a delta kernel
(``rowsum(dO * O)``), one dK/dV kernel per 128 keys streaming 64-query tiles of Q and dO (and their
LSE and delta) through a 3-slot TMA ring, its dQ share added into an fp32 buffer by TMA reduce-adds,
and a cast of dQ (H200, B4 H32 S4096 D128 fp16: 5995.9 us against the derived Triton kernels' 7130 to
7310 and SDPA's 5200.4; causal 3381.8 against SDPA's 2927.4; bench/results/s10/call3). At head dim 64
the derived Triton kernels are as fast (Gluon 556.6 us, SDPA 429.6): they keep running there.

The schedule's ``warp_specialize`` decides as for the forward (:mod:`.gluon_attention`): None (the
default) the Gluon backward where it applies, silently the Triton kernels elsewhere; True the same,
saying why where it does not apply (a ``ScheduleWarning``); False never.

:func:`match_attention_bwd` recognises the backward from the facts :func:`~dtriton.grad.grad` records
on each backward algorithm (:class:`~dtriton.grad.GradProvenance`: the forward, the saved stages and
their parameters, the upstream-gradient parameters, which output is which input's gradient): the
forward a softmax attention forward (:func:`~.gluon_attention.match_attention`, one output), its
statistics saved as the row log-sum-exp and the normalised output, dQ, dK and dV in one algorithm.
:func:`plan_gluon_attention_bwd` takes the decision for one call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from ..grad.logsumexp import lse_statistics
from ..ir import Algorithm
from .gluon_attention import GLUON_TILE, AttentionMatch, asked, match_attention, platform_problem

__all__ = ["AttentionBwdMatch", "GluonAttentionBwd", "match_attention_bwd", "plan_gluon_attention_bwd"]

HEAD = "the Gluon attention backward does not apply"


@dataclass(frozen=True)
class AttentionBwdMatch:
    """The roles of a derived attention backward's tensors (:func:`match_attention_bwd`).

    ``fwd``: the forward's roles (:class:`~.gluon_attention.AttentionMatch`: Q, K, V, the axes, the
    scale, causal); ``do``: the upstream gradient (dO, laid out (lead, i, e)); ``lse``: the saved row
    log-sum-exp (natural log, (lead, i)); ``o``: the saved normalised output ((lead, i, e));
    ``dq``/``dk``/``dv``: the output names of the three gradients; ``dq_perm``/``dk_perm``/``dv_perm``:
    the dims of those outputs in the order (lead, i, d) / (lead, j, d) / (lead, j, e)
    (``tensor.permute(perm)`` is the kernel's view); ``lse_perm``/``o_perm``: the same of the saved LSE
    and output, laid out along their forward stages' axes (a causal forward's: the query axis first)."""
    fwd: AttentionMatch
    do: str
    lse: str
    o: str
    dq: str
    dk: str
    dv: str
    dq_perm: tuple[int, ...]
    dk_perm: tuple[int, ...]
    dv_perm: tuple[int, ...]
    lse_perm: tuple[int, ...] = ()
    o_perm: tuple[int, ...] = ()

    @property
    def inputs(self) -> tuple[str, ...]:
        """The tensor inputs the kernels read: Q, K, V, dO, the LSE, the saved output."""
        f = self.fwd
        return (f.q, f.k, f.v, self.do, self.lse, self.o)

    @property
    def outputs(self) -> tuple[str, ...]:
        """The gradients' output names: dQ, dK, dV."""
        return (self.dq, self.dk, self.dv)


@dataclass(frozen=True)
class GluonAttentionBwd:
    """The Gluon attention backward a derived backward is printed as (:func:`plan_gluon_attention_bwd`).

    ``match``: the tensors; ``dtype``: "float16" or "bfloat16" (Q, K, V, dO, the saved output and the
    gradients); ``d``: the head dim. The dK/dV kernel's configuration: ``bn`` keys a program, ``bm``
    query rows a step, a ``stages``-slot ring of Q / dO (and their LSE / delta: ``lse_tma``), ``nw``
    warps, ``qsplit`` column chunks of a step's dQ GEMM, its dQ share added by a TMA reduce-add into an
    fp32 buffer; ``why``: the decision, for the module header."""
    match: AttentionBwdMatch
    dtype: str
    d: int
    bn: int = 128
    bm: int = 64
    stages: int = 3
    nw: int = 8
    qsplit: int = 2
    lse_tma: bool = True
    why: str = ""

    @property
    def causal(self) -> bool:
        """The forward's scores are masked ``where(j <= i, s, -inf)``."""
        return self.match.fwd.causal


def match_attention_bwd(alg: Algorithm) -> tuple[AttentionBwdMatch | None, str]:
    """``(roles, "")`` when ``alg`` is the derived backward of a softmax attention forward (see the module
    docstring); ``(None, why not)`` when it is a backward of one that the Gluon backward does not
    compute (another gradient set, other saved statistics, grouped-query attention); ``(None, "")``
    for any other algorithm."""
    p = alg.provenance
    if p is None or not hasattr(p, "forward"):
        return None, ""
    fwd = p.forward
    m = match_attention(fwd)
    if m is None or len(fwd.outputs) != 1:
        return None, ""
    what = f"the backward of {fwd.name}"
    if m.grouped:
        return None, f"{HEAD}: grouped-query attention (its kernel reads K and V at the query's own head)"
    if p.seeded != (0,) or len(p.grad_params) != 1:
        return None, f"{HEAD}: {what} reads no upstream gradient of its output"
    if sorted(p.wrt) != sorted((m.q, m.k, m.v)) or len(alg.outputs) != 3:
        return None, (f"{HEAD}: it computes the gradients of {m.q}, {m.k} and {m.v} in one algorithm; {alg.name} "
                      f"computes those of {', '.join(p.wrt)}")
    mx, den, num = m.stages
    lse = [s for s in p.saved if lse_statistics(fwd).get(s) == (mx, den)]
    if sorted(p.saved) != sorted(lse + [num]) or len(lse) != 1:
        return None, (f"{HEAD}: it reads the forward's saved row log-sum-exp and normalised output "
                      f"(save=saved_statistics({fwd.name})); {alg.name} saves {list(p.saved) or 'nothing'}")
    saved = dict(zip(p.saved, p.saved_params))
    lead = m.lead
    lse_axes, o_axes = tuple(fwd.stages[mx].node.axes), tuple(fwd.stages[num].node.axes)
    if sorted(lse_axes) != sorted(lead + (m.i,)) or sorted(o_axes) != sorted(lead + (m.i, m.e)):
        return None, f"{HEAD}: the saved statistics of {fwd.name} are not over (lead, query[, value])"
    outs = {w: o for w, o in zip(p.wrt, alg.outputs)}
    want = {m.q: lead + (m.i, m.d), m.k: lead + (m.j, m.d), m.v: lead + (m.j, m.e)}
    if any(sorted(outs[t].layout) != sorted(want[t]) for t in want):
        return None, f"{HEAD}: the gradients are not laid out along their inputs' axes"
    perm = {t: tuple(outs[t].layout.index(a) for a in want[t]) for t in want}
    return AttentionBwdMatch(m, p.grad_params[0], saved[lse[0]], saved[num], outs[m.q].name, outs[m.k].name,
                             outs[m.v].name, perm[m.q], perm[m.k], perm[m.v],
                             tuple(lse_axes.index(a) for a in lead + (m.i,)),
                             tuple(o_axes.index(a) for a in lead + (m.i, m.e))), ""


def plan_gluon_attention_bwd(alg: Algorithm, sizes: Mapping[str, int], dtypes: Mapping[str, torch.dtype],
                             out_dtypes: Mapping[str, torch.dtype], *, requested: bool | None, interpret: bool,
                             arch: int, dense: frozenset, i64: bool = False) -> tuple[GluonAttentionBwd | None, str]:
    """The Gluon backward one call of ``alg`` runs as, or ``(None, why not)``; ``why`` is "" when no
    question arises (turned off, left to the compiler, or not a derived attention backward).

    ``sizes``: axis sizes; ``dtypes``/``out_dtypes``: the call's input and output dtypes (by name);
    ``requested``: the schedule's ``warp_specialize`` (True: a call it does not apply to says why; None:
    the compiler picks, silently; False: off); ``interpret``: Triton's interpreter runs the call;
    ``arch``: the GPU's compute capability as 10 * major + minor (0: none); ``dense``: the tensors
    (inputs, outputs) contiguous with a 16-byte aligned base on this call; ``i64``: offsets need 64
    bits (TMA coordinates are 32-bit)."""
    return asked(requested, lambda: _decide(alg, sizes, dtypes, out_dtypes, interpret, arch, dense, i64))


def _decide(alg, sizes, dtypes, out_dtypes, interpret, arch, dense, i64):
    """:func:`plan_gluon_attention_bwd`'s decision once asked: (the kernels, "") or (None, why not)."""
    bm, why = match_attention_bwd(alg)
    if bm is None:
        return None, why
    m = bm.fwd
    if why := platform_problem(HEAD, interpret, arch):
        return None, why
    if dtypes[bm.lse] != torch.float32:
        return None, f"{HEAD}: it reads the saved log-sum-exp {bm.lse} in float32, not {dtypes[bm.lse]}"
    names = [m.q, m.k, m.v, bm.do, bm.o]
    dts = {dtypes[n] for n in names} | {out_dtypes[n] for n in bm.outputs}
    if len(dts) != 1 or next(iter(dts)) not in (torch.float16, torch.bfloat16):
        return None, (f"{HEAD}: Q, K, V, the upstream gradient, the saved output and the gradients must share one "
                      f"16-bit dtype (float16 or bfloat16), got {sorted(str(t).replace('torch.', '') for t in dts)}")
    d, e, s, t = sizes[m.d], sizes[m.e], sizes[m.i], sizes[m.j]
    if d != e or d != 128:
        return None, (f"{HEAD}: it is used at head dim 128 ({m.d} = {m.e} = 128; got {d} and {e}): at 64 the "
                      f"derived Triton kernels are as fast")
    if s != t or s % GLUON_TILE or not s:
        return None, (f"{HEAD}: it needs the query and key lengths equal, a multiple of {GLUON_TILE} "
                      f"(got {m.i}={s}, {m.j}={t})")
    if i64:
        return None, f"{HEAD}: the tensors need 64-bit offsets (TMA coordinates are 32-bit)"
    loose = [n for n in (*bm.inputs, *bm.outputs) if n not in dense]
    if loose:
        return None, f"{HEAD}: {', '.join(loose)} not contiguous with a 16-byte aligned base (TMA descriptors)"
    heads = 1
    for a in m.lead:
        heads *= sizes[a]
    if heads > 65535:
        return None, f"{HEAD}: {heads} heads ({', '.join(m.lead)}) exceed the grid's second dim (65535)"
    return GluonAttentionBwd(bm, str(next(iter(dts))).replace("torch.", ""), d,
                             why="dK/dV kv128x64 s3 w8, dQ by TMA reduce-add qs2, LSE/delta by TMA: S4096 D128 "
                                 "5995.9 us (derived Triton 7130-7310, SDPA 5200.4), causal 3381.8 (SDPA 2927.4)"), ""
