"""Whether a channels-last depthwise 3x3 convolution runs as the hand-written Gluon row-ring kernel on Hopper.

A depthwise convolution on an sm_90 GPU runs as the Gluon depthwise kernel where its facts hold (the
schedule's ``warp_specialize`` left to the compiler, None, the default, or True; False keeps the Triton
kernel, :mod:`dtriton.plan.taps`): each program walks strips of BH output rows x TW output columns x BC
channels, every input row two TMA boxes into a shared-memory ring (the padding is TMA's zero fill), the
output columns in 4 residue classes each rolling two fp32 accumulators (issue 19's probe,
bench/probe_depthwise2.py ``gl_rows``: 35.8 us against cuDNN's 51.1 and torch.compile's 62.4 at fp16 N32
H56 W56 C256 3x3 pad 1 on the H200; the Triton kernel dtriton prints ~60). This module decides it; the
Triton backend prints and launches the kernel the decision names (:mod:`dtriton.backends.triton.
gluon_depthwise`), nothing more.

:func:`match_depthwise` recognises the algorithm by structure: one output ``[n, h, w, c] = sum over (r,
q) of X.pad(0)[n, h * s + r * d - p, w * s + q * d - p, c] * Wt[r, q, c]`` (:func:`~dtriton.library.
depthwise_conv2d_nhwc`; either factor first; ``X`` unpadded too), each index of X affine in its axes
(:func:`~dtriton.ir.affine_index`) with stride, dilation and offset polynomials in int arguments and
literals, each spatial dim of its own (output axis, tap axis) pair. The plan keeps the polynomials; the
launch evaluates the offsets with the call's arguments (any padding, each dim its own: the coordinate
``h0 + r - p`` may be negative or past the end, TMA fills zeros; output sizes Ho and Wo any). The kernel
is written for what the probe's index math covers: a 3x3 filter, stride 1, dilation 1. Other sums over
two axes of a product of two loads (NCHW, 1-d, the weight read otherwise) are recognised as
convolutions not of this form, with the reason; a sum over three axes or more is
:mod:`dtriton.plan.gluon_conv`'s. :func:`plan_gluon_depthwise` takes the decision for one call (the
tri-state rule and the platform check of :mod:`dtriton.plan.gluon_attention`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from ..ir import Algorithm, Axis, Load, Reduce, affine_index, fmt, mul_factors, poly_value
from .gluon_attention import asked, platform_problem
from .gluon_conv import dtype_stride_problem

__all__ = ["BY_DEFAULT", "DepthwiseMatch", "GluonDepthwise", "match_depthwise", "plan_gluon_depthwise"]

HEAD = "the Gluon depthwise conv2d does not apply"

#: Whether ``warp_specialize`` None (the default schedule) picks the Gluon depthwise kernel where it
#: applies: yes on the probe's measurement (session 11 call 3, bench/results/s11/call3/dw.log: 35.8 us,
#: 1.43x cuDNN, checked against fp32 torch on the bench shape and N3 H13 W37 C40), to be confirmed by
#: ``bench/gpu_check.py --only gluon-depthwise`` on the packaged kernel. False would leave it to
#: ``warp_specialize=True`` and exploration.
BY_DEFAULT = True


@dataclass(frozen=True)
class DepthwiseMatch:
    """The roles of a channels-last depthwise 2-D convolution's tensors and axes (:func:`match_depthwise`).

    ``x``: the input (N, H, W, C), ``w``: the weight (R, Q, C), ``out``: the output (N, Ho, Wo, C);
    ``rows``: the output axes (n, h, w); ``c``: the channel axis (the output's last, not summed);
    ``taps``: (r, q). ``stride``, ``dilation``, ``offset``: per spatial dim (h, w), the coefficient of
    the output axis, of the tap axis and the constant term of X's index, as polynomials in int arguments
    (:data:`~dtriton.ir.Poly`; ``offset`` is minus the padding). ``params``: the int arguments the offsets
    read, sorted (the launch passes them)."""
    x: str
    w: str
    out: str
    rows: tuple[str, str, str]
    c: str
    taps: tuple[str, str]
    stride: tuple[tuple, tuple]
    dilation: tuple[tuple, tuple]
    offset: tuple[tuple, tuple]
    params: tuple[str, ...] = ()


@dataclass(frozen=True)
class GluonDepthwise:
    """The Gluon depthwise kernel a kernel is printed as (:func:`plan_gluon_depthwise`): strips of ``bh``
    output rows x ``tw`` output columns x ``bc`` channels, ``v`` channels a thread, ``nw`` warps, a
    ``stages``-row TMA ring; ``persist``: programs an SM (0: one program a strip and channel block).
    ``match``: the tensors and index terms; ``dtype``: "float16" or "bfloat16" (X, the weight and the
    output); ``why``: the decision, for the module header."""
    match: DepthwiseMatch
    dtype: str
    bh: int
    tw: int
    bc: int
    v: int
    nw: int
    stages: int
    persist: int
    why: str = ""


def _bare(ld: Load) -> tuple[str, ...] | None:
    """The axis names of a load indexed by distinct bare axes, else None."""
    names = tuple(e.name for e in ld.index if isinstance(e, Axis))
    return names if len(names) == len(ld.index) == len(set(names)) else None


def _load_text(ld: Load) -> str:
    """``T[i, j * s + ...]``: a load as written."""
    return f"{ld.tensor.name}[{', '.join(fmt(e) for e in ld.index)}]"


def _window_loads(alg: Algorithm):
    """``(output, its sum, input load, weight load)`` where ``alg`` has one output that is a sum over
    exactly two axes of a product of two loads, one read at a computed index or padded, else None."""
    if len(alg.outputs) != 1:
        return None
    o = alg.outputs[0]
    r = o.expr
    if not (isinstance(r, Reduce) and r.combiner.base == "sum" and r.combiner.results == 1 and len(r.over) == 2):
        return None
    f = mul_factors(r.x)
    if len(f) != 2 or not all(isinstance(x, Load) for x in f):
        return None
    computed = [x for x in f if x.pad is not None or _bare(x) is None]
    if not computed:
        return None
    x = computed[0]
    return o, r, x, f[1] if x is f[0] else f[0]


def match_depthwise(alg: Algorithm) -> tuple[DepthwiseMatch | None, str]:
    """``(the roles, "")`` when ``alg`` is a channels-last depthwise 2-D convolution of the module
    docstring's form; ``(None, why not)`` for another sum over two axes of a product of two loads, one read
    at computed indices or padded (a 1-d or NCHW convolution, the weight read otherwise); ``(None, "")``
    for anything else (a conv2d's sum over three axes included)."""
    got = _window_loads(alg)
    if got is None:
        return None, ""
    o, r, x, w = got
    if _bare(w) is None or w.pad is not None:
        return None, f"{HEAD}: it reads two tensors at computed indices ({x.tensor.name}, {w.tensor.name})"
    if x.pad not in (None, 0.0):
        return None, f"{HEAD}: it reads {x.tensor.name} padded with {x.pad!r}, not with zeros (TMA's fill)"
    if len(x.index) != 4 or len(o.layout) != 4:
        return None, (f"{HEAD}: it needs a 4-d input (N, H, W, C) and output (N, Ho, Wo, C); {x.tensor.name} is read "
                      f"in {len(x.index)} dims and {o.name} has {len(o.layout)} (a 1-d or 3-d convolution is not this "
                      "form)")
    n, h, wd, c = o.layout
    xi = x.index
    if not (isinstance(xi[0], Axis) and xi[0].name == n and isinstance(xi[3], Axis) and xi[3].name == c):
        return None, (f"{HEAD}: it needs the input channels-last, {x.tensor.name}[n, h * s + r * d - p, w * s + q * d - "
                      f"p, c] with n and c the output's first and last axes (got {_load_text(x)})")
    spatial = []
    for d, (a, e) in enumerate(zip((h, wd), xi[1:3])):
        t = affine_index(e)
        taps = [b for b in r.over if t is not None and b in t]
        if t is None or set(t) - {"", a, *taps} or a not in t or len(taps) != 1:
            return None, (f"{HEAD}: {x.tensor.name}'s dim {d + 1} must be {a} * stride + tap * dilation - padding "
                          f"(int arguments or literals; one tap axis) (got {_load_text(x)})")
        spatial.append((t[a], taps[0], t[taps[0]], t.get("", ())))
    if spatial[0][1] == spatial[1][1]:
        return None, f"{HEAD}: both spatial dims of {x.tensor.name} read the tap axis {spatial[0][1]}"
    taps = (spatial[0][1], spatial[1][1])
    if _bare(w) != (*taps, c):
        return None, (f"{HEAD}: it needs the weight read as {w.tensor.name}[{taps[0]}, {taps[1]}, {c}] (R, Q, C) "
                      f"(got {_load_text(w)})")
    params = tuple(sorted({name for s in spatial for names, _ in s[3] for name in names}))
    return DepthwiseMatch(x.tensor.name, w.tensor.name, o.name, (n, h, wd), c, taps, (spatial[0][0], spatial[1][0]),
                          (spatial[0][2], spatial[1][2]), (spatial[0][3], spatial[1][3]), params), ""


#: The configurations by (TW, BC): (V, warps, stages, programs an SM (0: one a strip), why). The first
#: three as measured at N32 H56 W56 C256 (bench/results/s11/call3/dw.log); the narrower ones follow them
#: (a warp's rows x its channels covering the strip's TW / 4 x BC; not measured).
CONFIGS = {
    (64, 64): (2, 8, 4, 2, "TW64 BC64 V2 w8 s4 2 programs an SM: 35.8 us at N32 H56 W56 C256, cuDNN 51.1, "
                           "torch.compile 62.4"),
    (64, 32): (2, 4, 4, 4, "TW64 BC32 V2 w4 s4 4 programs an SM: 38.7 us at N32 H56 W56 C256"),
    (32, 64): (2, 4, 4, 0, "TW32 BC64 V2 w4 s4 a program a strip: 40.0 us at N32 H56 W56 C256"),
    (32, 32): (2, 4, 4, 0, "TW32 BC32 V2 w4 s4 a program a strip (not measured: TW32 BC64's form)"),
    (16, 64): (2, 4, 4, 0, "TW16 BC64 V2 w4 s4 a program a strip (not measured: TW32 BC64's form)"),
    (16, 32): (2, 2, 4, 0, "TW16 BC32 V2 w2 s4 a program a strip (not measured: TW32 BC64's form)"),
}

#: Output rows a strip at most (the measured BH 14: 4 strips of a 56-row image).
MAX_BH = 14


def variant(m: DepthwiseMatch, dtype: str, ho: int, wo: int, c: int) -> GluonDepthwise:
    """The configuration for an ``ho`` x ``wo`` output of ``c`` channels: the narrowest TW of 16, 32, 64
    holding ``wo`` (64 past it: several column tiles), BC 32 for at most 32 channels else 64, BH the
    rows of ``ceil(ho / 14)`` even strips (14 at 56 rows; ``ho`` itself below 15)."""
    tw = 16 if wo <= 16 else 32 if wo <= 32 else 64
    bc = 32 if c <= 32 else 64
    chunks = max(1, -(-ho // MAX_BH))
    bh = max(1, -(-ho // chunks))
    v, nw, stages, persist, why = CONFIGS[(tw, bc)]
    return GluonDepthwise(m, dtype, bh, tw, bc, v, nw, stages, persist, why=why)


def plan_gluon_depthwise(alg: Algorithm, sizes: Mapping[str, int], dtypes: Mapping[str, torch.dtype],
                         out_dtypes: Mapping[str, torch.dtype], *, requested: bool | None, interpret: bool, arch: int,
                         dense: frozenset, ones: frozenset, i64: bool = False) -> tuple[GluonDepthwise | None, str]:
    """The Gluon depthwise kernel one call of ``alg`` runs as, or ``(None, why not)``; ``why`` is "" when
    no question arises (turned off, left to the compiler, or not a depthwise convolution).

    ``sizes``: axis sizes; ``dtypes``/``out_dtypes``: the call's input and output dtypes; ``requested``:
    the schedule's ``warp_specialize`` (True asks, a call it does not apply to says why; None: the kernel
    where it applies, silently the Triton kernel elsewhere; False: off); ``interpret``: Triton's
    interpreter runs the call; ``arch``: the GPU's compute capability as 10 * major + minor (0: none);
    ``dense``: the tensors contiguous with a 16-byte aligned base on this call (X and the output must be;
    the weight's strides are the launch's arguments); ``ones``: the int
    arguments equal to 1 on it (a stride argument must be); ``i64``: offsets need 64 bits (TMA
    coordinates and the kernel's channel offsets are 32-bit)."""
    if requested is None and not BY_DEFAULT:
        return None, ""
    return asked(requested, lambda: _decide(alg, sizes, dtypes, out_dtypes, interpret, arch, dense, ones, i64))


def _decide(alg, sizes, dtypes, out_dtypes, interpret, arch, dense, ones, i64):
    """:func:`plan_gluon_depthwise`'s decision once asked: (the kernel, "") or (None, why not)."""
    m, why = match_depthwise(alg)
    if m is None:
        return None, why
    if why := platform_problem(HEAD, interpret, arch):
        return None, why
    if why := dtype_stride_problem(HEAD, m, dtypes, out_dtypes, ones):
        return None, why
    dils = tuple(poly_value(s, {p: 1 for p in ones}) for s in m.dilation)
    if dils != (1, 1):
        got = ", ".join("not 1" if s is None else str(s) for s in dils)
        return None, (f"{HEAD}: it needs dilation 1 (the coefficients of {m.taps[0]} and {m.taps[1]} in {m.x}'s "
                      f"index); on this call the dilations are ({got})")
    r, q, c = sizes[m.taps[0]], sizes[m.taps[1]], sizes[m.c]
    if (r, q) != (3, 3):
        return None, f"{HEAD}: the kernel is written for 3x3 filters ({m.taps[0]}={r}, {m.taps[1]}={q})"
    if c % 8 or not c:
        return None, f"{HEAD}: it needs the channels a positive multiple of 8 (16-byte TMA row strides) ({m.c}={c})"
    if i64:
        return None, f"{HEAD}: the tensors need 64-bit offsets (TMA coordinates are 32-bit)"
    loose = [t for t in (m.x, m.out) if t not in dense]
    if loose:
        return None, (f"{HEAD}: {', '.join(loose)} not contiguous with a 16-byte aligned base (a 4-d TMA descriptor of "
                      f"NHWC {m.x}; the output addressed as dense; {m.w} may have any strides)")
    return variant(m, str(dtypes[m.x]).replace("torch.", ""), sizes[m.rows[1]], sizes[m.rows[2]], c), ""
