"""Whether a fused attention forward runs as the hand-written Gluon kernel on Hopper, and which one.

An attention forward on an sm_90 GPU runs as the warp-specialised Gluon kernel where its facts hold
(the schedule's ``warp_specialize`` left to the compiler, None, the default, or True; False keeps the
Triton kernel): the warp-specialised Gluon kernel (a 1-warp TMA loader, two 4-warp consumer
warpgroups ping-ponging their GEMMs, the softmax of one overlapped with the other's wgmma: FA3's
schedule, written in Triton 3.6's ``triton.experimental.gluon``), which Triton's automatic warp
specialisation cannot produce for these loops. This module decides it; the Triton backend prints and
launches the kernel the decision names (:mod:`dtriton.backends.triton.gluon`), nothing more.

:func:`match_attention` recognises the algorithm: one output
``(sum_j exp(s - max_j s) * V[.., j, e] / sum_j exp(s - max_j s))[.., i, e]`` with
``s = sum_d Q[.., i, d] * K[.., j, d] * scale`` (the scale a float argument or a literal, on either
side), optionally ``where(j <= i, s, -inf)`` (causal, top-left aligned, as torch's ``is_causal``), the
same leading (batch, head) axes in every tensor, or grouped-query attention (K and V read at head
``h // rep`` of the last lead axis ``h``, ``rep`` an int argument or literal, as torch's ``enable_gqa``:
any group the call binds, H = G * rep or not, the kernel's K/V head map is general); also the forward
autograd runs for it (:func:`~dtriton.grad.augmented_forward`: the output, the row log-sum-exp
``max + log(sum)`` in fp32, the output again), whose statistic the kernel stores. The query and key
lengths S and T may differ (multiples of 128; a plan taken at S = T serves calls of other lengths with
the same size facts: the kernel takes both). :func:`plan_gluon_attention` takes the decision for one
call: eligible only where every fact the kernel relies on holds, else the reason (a
``ScheduleWarning``; the Triton kernel runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from ..ir import Algorithm, Axis, Binary, Const, Load, Reduce, ScalarParam, Unary, Where

__all__ = ["AttentionMatch", "GluonAttention", "GLUON_TILE", "asked", "match_attention", "match_output", "plan_gluon_attention",
           "platform_problem"]

#: Query and key rows per tile of every Gluon variant (128 query rows per program: two 64-row consumers or
#: one 128-row tile; 128 keys per step): the query and key lengths must be multiples of it.
GLUON_TILE = 128


@dataclass(frozen=True)
class AttentionMatch:
    """The roles of an attention forward's tensors and axes (:func:`match_attention`).

    ``q``, ``k``, ``v``: the input tensors (B.., S, D), (B.., T, D), (B.., T, E); ``out``: the output's
    name; ``lead``: the leading axes shared by all four (batch, heads); ``i``, ``j``, ``d``, ``e``: the
    query, key, head and value axes; ``scale``: the scale's literal value, or None when it is the float
    argument ``scale_param``; ``causal``: the scores are masked ``where(j <= i, s, -inf)``. A forward
    saving statistics for the backward (:func:`~dtriton.grad.augmented_forward`) has two more outputs:
    ``lse`` (``max + log(sum of exp)`` per row, natural log of the scaled scores, fp32) and ``copy``
    (the output once more: the saved normalised sum); "" otherwise. ``lse_perm`` / ``copy_perm``: the
    dims of those outputs (laid out in the axis order of the algorithm's expression) in the order
    (lead, i) / (lead, i, e): ``tensor.permute(perm)`` is the view in the kernel's order.
    Grouped-query attention (``K[b, h // rep, j, d]``, ``V[b, h // rep, j, e]``: the last lead axis
    divided, the same divisor in both): ``group`` is the literal divisor, or ``group_param`` names the
    int argument (``group`` then 1); K and V's leading dims are (lead[:-1], G), G their own size.
    ``stages``: the stage names of the row max, the row sum of exponentials and the unnormalised
    ``sum_j p V`` (what a derived backward saves, :mod:`dtriton.plan.gluon_attention_bwd`)."""
    q: str
    k: str
    v: str
    out: str
    lead: tuple[str, ...]
    i: str
    j: str
    d: str
    e: str
    scale: float | None
    scale_param: str
    causal: bool
    lse: str = ""
    copy: str = ""
    lse_perm: tuple[int, ...] = ()
    copy_perm: tuple[int, ...] = ()
    group: int = 1
    group_param: str = ""
    stages: tuple[str, ...] = ()

    @property
    def grouped(self) -> bool:
        """Grouped-query attention: K and V are read at head ``h // group`` (``h`` the last lead axis)."""
        return bool(self.group_param) or self.group != 1


@dataclass(frozen=True)
class GluonAttention:
    """The Gluon attention forward a kernel is printed as (:func:`plan_gluon_attention`).

    ``kernel``: "ws" (warp-specialised: ``nc`` consumer partitions of ``bmc`` query rows, consumer 0
    the default partition of ``nw`` warps, a 1-warp TMA loader; ``pingpong``: the consumers take turns
    issuing their GEMMs; ``persist``: one program per SM looping over query tiles, the output staged
    in its own buffer) or "pipe" (no warp specialisation: ``bmc`` query rows, ``nw`` warps, K/V in a
    TMA ring). ``bn``: keys per step; ``stages``: K/V ring slots; ``overlap``: the QK GEMM of one tile
    and the PV GEMM of the previous issued together. ``load_regs`` / ``mma_regs``: setmaxnreg of the
    loader and of the worker consumer. ``match``: the tensors and scale; ``dtype``: "float16" or
    "bfloat16" (Q, K, V and the output); ``d``: head dim. ``why``: the decision, for the module header."""
    match: AttentionMatch
    dtype: str
    d: int
    kernel: str
    bmc: int
    bn: int
    stages: int
    nc: int = 1
    nw: int = 4
    overlap: bool = False
    pingpong: bool = False
    persist: bool = False
    load_regs: int = 24
    mma_regs: int = 240
    why: str = ""

    @property
    def block_rows(self) -> int:
        """Query rows per program (per persistent step)."""
        return self.nc * self.bmc if self.kernel == "ws" else self.bmc


def _same(a, b) -> bool:
    """Whether expressions ``a`` and ``b`` are the same computation (kind, attributes, children)."""
    if a is b:
        return True
    if type(a) is not type(b) or a.signature() != b.signature():
        return False
    if isinstance(a, Load) and a.tensor is not b.tensor:
        return False
    ca, cb = a.children(), b.children()
    return len(ca) == len(cb) and all(_same(x, y) for x, y in zip(ca, cb))


def _grouped_axes(ld):
    """``(axis names, (position, divisor))`` of a load indexed by distinct bare axes except at most one
    ``a // rep`` (``rep`` an int argument or an int literal; the divisor its name or its int value;
    ``(-1, 1)`` when none), else None (another computed index, a padded read)."""
    if not isinstance(ld, Load) or ld.pad is not None:
        return None
    names, div = [], (-1, 1)
    for k, e in enumerate(ld.index):
        if isinstance(e, Binary) and e.op == "floordiv" and isinstance(e.a, Axis) and div[0] < 0:
            if isinstance(e.b, ScalarParam) and e.b.pytype is int:
                div = (k, e.b.name)
            elif isinstance(e.b, Const) and e.b.integer:
                div = (k, int(e.b.value))
            else:
                return None
            e = e.a
        if not isinstance(e, Axis):
            return None
        names.append(e.name)
    return (tuple(names), div) if len(set(names)) == len(names) else None


def _product(x):
    """``(a, b)`` of ``a * b`` (either order left to the caller), else None."""
    return (x.a, x.b) if isinstance(x, Binary) and x.op == "mul" else None


def _scaled_scores(s):
    """``(the QK sum, scale literal or None, scale parameter name)`` of ``sum * scale`` / ``scale * sum``."""
    pair = _product(s)
    if pair is None:
        return None
    for dot, c in (pair, pair[::-1]):
        if isinstance(dot, Reduce) and dot.combiner.name == "sum" and len(dot.over) == 1:
            if isinstance(c, Const) and not c.integer:
                return dot, c.value, ""
            if isinstance(c, ScalarParam) and c.pytype is float:
                return dot, None, c.name
    return None


def _causal(s):
    """``(scores, causal)``: ``where(j <= i, x, -inf)`` (or ``i >= j``) -> (x, (j, i)); else (s, None)."""
    if not (isinstance(s, Where) and isinstance(s.b, Const) and s.b.value == -float("inf")):
        return s, None
    c = s.cond
    if isinstance(c, Binary) and isinstance(c.a, Axis) and isinstance(c.b, Axis):
        if c.op == "le":
            return s.a, (c.a.name, c.b.name)
        if c.op == "ge":
            return s.a, (c.b.name, c.a.name)
    return s, None


def match_attention(alg: Algorithm) -> AttentionMatch | None:
    """The roles of ``alg`` when it is exactly a softmax attention forward with one output (see the
    module docstring), else None. Nothing looser: any other algorithm keeps the Triton kernels."""
    if len(alg.outputs) == 1:
        return match_output(alg.outputs[0])
    if len(alg.outputs) != 3:
        return None
    o, lse, copy = alg.outputs
    got = _parts(o)
    if got is None or not (_same(copy.expr, o.expr) and sorted(copy.layout) == sorted(o.layout)):
        return None
    m, mx, den = got
    x = lse.expr
    if not (isinstance(x, Binary) and x.op == "add" and _same(x.a, mx) and isinstance(x.b, Unary) and x.b.op == "log"
            and _same(x.b.x, den) and sorted(lse.layout) == sorted(m.lead + (m.i,))):
        return None
    return AttentionMatch(**{**m.__dict__, "lse": lse.name, "copy": copy.name,
                             "lse_perm": tuple(lse.layout.index(a) for a in m.lead + (m.i,)),
                             "copy_perm": tuple(copy.layout.index(a) for a in o.layout)})


def match_output(o) -> AttentionMatch | None:
    """The roles of output ``o`` (an :class:`~dtriton.ir.Output`) when it is a softmax attention
    forward's (see :func:`match_attention`), else None."""
    got = _parts(o)
    return got[0] if got is not None else None


def _parts(o):
    """(roles, the row max node, the row sum node) of an attention output ``o``, or None."""
    top = o.expr
    if not (isinstance(top, Binary) and top.op == "div" and isinstance(top.a, Reduce) and isinstance(top.b, Reduce)):
        return None
    num, den = top.a, top.b
    if num.combiner.name != "sum" or den.combiner.name != "sum" or len(num.over) != 1 or num.over != den.over:
        return None
    j = num.over[0]
    p = den.x
    if not (isinstance(p, Unary) and p.op == "exp" and isinstance(p.x, Binary) and p.x.op == "sub"):
        return None
    s, mx = p.x.a, p.x.b
    if not (isinstance(mx, Reduce) and mx.combiner.name == "max" and mx.over == (j,) and _same(mx.x, s)):
        return None
    pv = _product(num.x)
    if pv is None:
        return None
    vload = pv[1] if _same(pv[0], p) else (pv[0] if _same(pv[1], p) else None)
    inner, mask = _causal(s)
    scaled = _scaled_scores(inner)
    if vload is None or scaled is None:
        return None
    dot, scale, scale_param = scaled
    qk = _product(dot.x)
    if qk is None:
        return None
    d = dot.over[0]
    vg, qg, kg = _grouped_axes(vload), _grouped_axes(qk[0]), _grouped_axes(qk[1])
    if None in (vg, qg, kg) or len(vg[0]) < 2 or len(o.layout) != len(vg[0]):
        return None
    lead, e = tuple(o.layout[:-2]), o.layout[-1]
    i = o.layout[-2]
    if qg[0][-2:] == (j, d) and kg[0][-2:] == (i, d):
        qk, qg, kg = qk[::-1], kg, qg
    (qa, qdiv), (ka, kdiv), (va, vdiv) = qg, kg, vg
    if not (qa == lead + (i, d) and ka == lead + (j, d) and va == lead + (j, e) and len({i, j, d, e} | set(lead))
            == len(lead) + 4):
        return None
    # plain attention, or grouped-query: K and V read the last lead axis divided by the same int
    if qdiv[0] >= 0 or kdiv != vdiv or kdiv[0] not in (-1, len(lead) - 1):
        return None
    if mask is not None and mask != (j, i):
        return None
    group, group_param = (kdiv[1], "") if isinstance(kdiv[1], int) else (1, kdiv[1])
    return AttentionMatch(qk[0].tensor.name, qk[1].tensor.name, vload.tensor.name, o.name, lead, i, j, d, e,
                          scale, scale_param, mask is not None, group=group, group_param=group_param,
                          stages=(mx.name, den.name, num.name)), mx, den


def _variant(m: AttentionMatch, dtype: str, d: int) -> GluonAttention:
    """The Gluon configuration for head dim ``d`` (H200, B4 H32 fp16, bench/results/s9 call 6)."""
    if d == 128 and not m.causal:
        return GluonAttention(m, dtype, d, "ws", 64, 128, 2, nc=2, overlap=True, pingpong=True, persist=True,
                              why="ws 2x(m64 w4) n128 s2 overlap ping-pong persistent: S4096 D128 1798 us, SDPA 1786")
    if d == 128:
        return GluonAttention(m, dtype, d, "ws", 64, 128, 3, nc=2, overlap=True, pingpong=True,
                              why="ws 2x(m64 w4) n128 s3 overlap ping-pong: causal S4096 D128 1029 us, SDPA 1071")
    return GluonAttention(m, dtype, d, "pipe", 128, 128, 2, nw=8,
                          why="pipe m128n128 s2 w8 (no warp specialisation): S1024 D64 85.8 us, SDPA 85.8")


def plan_gluon_attention(alg: Algorithm, sizes: Mapping[str, int], dtypes: Mapping[str, torch.dtype],
                         out_dtypes: Mapping[str, torch.dtype], *, requested: bool | None, interpret: bool, arch: int,
                         dense: frozenset, one_online_kernel: bool, i64: bool = False) -> tuple[GluonAttention | None, str]:
    """The Gluon kernel one call of ``alg`` runs as, or ``(None, why not)``; ``why`` is "" when no
    question arises (turned off, left to the compiler, or not an attention forward).

    ``sizes``: axis sizes; ``dtypes``/``out_dtypes``: the call's input and output dtypes;
    ``requested``: the schedule's ``warp_specialize``: True asks for it (a call it does not apply to
    says why), None leaves it to the compiler (the kernel where it applies, silently the Triton
    kernel elsewhere), False turns it off; ``interpret``: Triton's interpreter
    runs the call; ``arch``: the GPU's compute capability as 10 * major + minor (0: none);
    ``dense``: the tensors that are contiguous with a 16-byte aligned base on this call;
    ``one_online_kernel``: the schedule's plan has one kernel with an online pass (the fused forward,
    its keys split or not; a schedule materialising the scores keeps its kernels);
    ``i64``: offsets need 64 bits (TMA coordinates are 32-bit)."""
    return asked(requested, lambda: _decide(alg, sizes, dtypes, out_dtypes, interpret, arch, dense,
                                            one_online_kernel, i64))


def asked(requested: bool | None, decide) -> tuple:
    """A Gluon decision under the schedule's ``warp_specialize`` (``requested``): False, ``(None, "")``
    without deciding; else ``decide()``'s ``(kernel or None, why not)``, the reason kept only where True
    asked for the kernel (None, the compiler's pick, falls back silently)."""
    if requested is False:
        return None, ""
    g, why = decide()
    return g, (why if requested else "")


def platform_problem(head: str, interpret: bool, arch: int) -> str:
    """Why a Gluon kernel (``head``: which, in the reason) cannot run on this platform ("" when it can):
    ``interpret``: Triton's interpreter runs the call (Gluon has none); ``arch``: the GPU's compute
    capability as 10 * major + minor, sm_90 (Hopper) needed."""
    if interpret:
        return f"{head}: Gluon has no interpreter (CPU tensors; it runs with CUDA tensors on an sm_90 GPU)"
    if arch != 90:
        return f"{head}: it needs an sm_90 GPU (Hopper), this is sm_{arch}"
    return ""


def _decide(alg, sizes, dtypes, out_dtypes, interpret, arch, dense, one_online_kernel, i64):
    """:func:`plan_gluon_attention`'s decision once asked: (the kernel, "") or (None, why not)."""
    m = match_attention(alg)
    head = "the Gluon attention forward does not apply"
    if m is None:
        if len(alg.outputs) > 1 and match_output(alg.outputs[0]) is not None:
            return None, (f"{head}: it computes the attention output and, for the backward, the row log-sum-exp and "
                          "the output again, not other further outputs")
        return None, ""
    if why := platform_problem(head, interpret, arch):
        return None, why
    if not one_online_kernel:
        return None, f"{head}: the schedule does not fuse the scores into one online pass over the keys"
    if m.lse and out_dtypes[m.lse] != torch.float32:
        return None, f"{head}: the saved log-sum-exp is stored in float32, not {out_dtypes[m.lse]}"
    dts = {dtypes[m.q], dtypes[m.k], dtypes[m.v], out_dtypes[m.out]} | ({out_dtypes[m.copy]} if m.copy else set())
    if len(dts) != 1 or next(iter(dts)) not in (torch.float16, torch.bfloat16):
        return None, (f"{head}: Q, K, V and the output must share one 16-bit dtype (float16 or bfloat16), got "
                      f"{sorted(str(t).replace('torch.', '') for t in dts)}")
    d, e, s, t = sizes[m.d], sizes[m.e], sizes[m.i], sizes[m.j]
    if d != e or d not in (64, 128):
        return None, f"{head}: it needs the head dims {m.d} and {m.e} equal, 64 or 128 (got {d} and {e})"
    if s % GLUON_TILE or t % GLUON_TILE or not t:
        return None, (f"{head}: it needs the query and key lengths multiples of {GLUON_TILE}, the keys not none "
                      f"(got {m.i}={s}, {m.j}={t})")
    if i64:
        return None, f"{head}: the tensors need 64-bit offsets (TMA coordinates are 32-bit)"
    if m.group < 1:
        return None, f"{head}: K and V are read at head {m.lead[-1]} // {m.group}, a divisor below 1"
    loose = [n for n in (m.q, m.k, m.v, m.out) + ((m.lse, m.copy) if m.lse else ()) if n not in dense]
    if loose:
        return None, f"{head}: {', '.join(loose)} not contiguous with a 16-byte aligned base (TMA descriptors of (rows, D))"
    g = _variant(m, str(next(iter(dts))).replace("torch.", ""), d)
    heads = 1
    for a in m.lead:
        heads *= sizes[a]
    if g.kernel == "pipe" and heads > 65535:
        return None, f"{head}: {heads} heads ({', '.join(m.lead)}) exceed the grid's second dim (65535)"
    return g, ""
