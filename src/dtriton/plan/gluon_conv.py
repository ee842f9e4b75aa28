"""Whether a 2-D channels-last convolution runs as the hand-written Gluon implicit-GEMM kernel on Hopper.

A convolution on an sm_90 GPU runs as the warp-specialised Gluon conv2d kernel where its facts hold
(the schedule's ``warp_specialize`` left to the compiler, None, the default, or True; False keeps the
Triton kernel): a 1-warp TMA loader reading each tap of 8 x 8 output-pixel patches as 4-D TMA boxes
of the input (the padding is TMA's zero fill), two 4-warp consumer warpgroups running wgmma from
shared memory, persistent over the tiles (issue 19's probe, bench/gluon_conv2d.py: 165.8 us against
cuDNN's 163.6 and torch.compile's 177.3 at N32 C256 H56 W56 O256 3x3 on the H200; the Triton kernel
dtriton prints ~204). This module decides it; the Triton backend prints and launches the kernel the
decision names (:mod:`dtriton.backends.triton.gluon_conv`), nothing more.

:func:`match_conv2d` recognises the algorithm by structure: one output ``[n, h, w, o] = sum over (c, r,
q) of X.pad(0)[n, h * s + r * d - p, w * s + q * d - p, c] * Wt[o, r, q, c]`` (:func:`~dtriton.library.
conv2d_nhwc`; either factor first; ``X`` unpadded too), every index of X affine in its axes
(:func:`~dtriton.ir.affine_index`) with stride, dilation and offset polynomials in int arguments and
literals, each spatial dim of its own (output axis, tap axis) pair; the plan keeps the polynomials
and the launch evaluates the dilations and offsets with the call's arguments (any dilation and
padding: the tap's coordinate ``h0 + r * d - p`` may be negative or past the end, TMA fills zeros;
output sizes Ho and Wo any: rows past the input read zeros, as ``X.pad(0)`` says). Other
convolutions (NCHW, depthwise, grouped, 1-D, 3-D, transposed) are recognised as convolutions not of
this form, with the reason. :func:`plan_gluon_conv` takes the decision for one call (the
tri-state rule and the platform check of :mod:`dtriton.plan.gluon_attention`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from ..ir import Algorithm, Axis, Load, Reduce, affine_index, fmt, mul_factors, poly_value
from .gluon_attention import asked, platform_problem

__all__ = ["BLOCK_K", "BY_DEFAULT", "ConvMatch", "GluonConv", "dtype_stride_problem", "match_conv2d", "plan_gluon_conv",
           "stride_value"]

#: Channels a K step of the kernel reads (128 bytes of a 16-bit dtype: one swizzled row); C must be a multiple.
BLOCK_K = 64

HEAD = "the Gluon conv2d does not apply"

#: Whether ``warp_specialize`` None (the default schedule) picks the Gluon conv2d where it applies: yes
#: since the packaged kernel ran on the H200 (session 11 call 3: ``bench/gpu_check.py --only gluon-conv``
#: 11/11 rows against float64, fp16 and bf16, dilation 2, padding 0-3, 1x1, O 128-512, an image smaller
#: than a patch; N32 C256 56x56 K256 3x3: 170.9 us asked for, 157.1 explored, cuDNN 160.8, torch.compile
#: 161.3, the Triton kernel 203.9). False would leave it to ``warp_specialize=True`` and exploration.
BY_DEFAULT = True


@dataclass(frozen=True)
class ConvMatch:
    """The roles of a channels-last 2-D convolution's tensors and axes (:func:`match_conv2d`).

    ``x``: the input (N, H, W, C), ``w``: the weight (O, R, Q, C), ``out``: the output (N, Ho, Wo, O);
    ``rows``: the output axes (n, h, w); ``o``: the output-channel axis; ``taps``: (r, q); ``c``: the
    input-channel axis. ``stride``, ``dilation``, ``offset``: per spatial dim (h, w), the coefficient
    of the output axis, of the tap axis and the constant term of X's index, as polynomials in int
    arguments (:data:`~dtriton.ir.Poly`; ``offset`` is minus the padding). ``params``: the int arguments
    those read, sorted (the launch passes them)."""
    x: str
    w: str
    out: str
    rows: tuple[str, str, str]
    o: str
    taps: tuple[str, str]
    c: str
    stride: tuple[tuple, tuple]
    dilation: tuple[tuple, tuple]
    offset: tuple[tuple, tuple]
    params: tuple[str, ...] = ()


@dataclass(frozen=True)
class GluonConv:
    """The Gluon conv2d a kernel is printed as (:func:`plan_gluon_conv`): the warp-specialised kernel of
    ``nc`` consumer warpgroups of ``mb // nc`` patches of ``bh`` x ``bw`` output pixels each (tile rows
    ``mb * bh * bw``), ``bn`` output channels a tile, a ``stages``-slot TMA ring filled by a 1-warp
    loader; ``persist``: one program per SM looping over the tiles. ``load_regs`` / ``mma_regs``:
    setmaxnreg of the loader and of the worker consumer. ``match``: the tensors and index terms;
    ``dtype``: "float16" or "bfloat16" (X, the weight and the output); ``why``: the decision, for the
    module header."""
    match: ConvMatch
    dtype: str
    bn: int
    mb: int
    nc: int
    stages: int
    persist: bool = True
    bh: int = 8
    bw: int = 8
    load_regs: int = 40
    mma_regs: int = 232
    why: str = ""

    @property
    def block_rows(self) -> int:
        """Output pixels a tile (``mb`` patches)."""
        return self.mb * self.bh * self.bw


def _bare(ld: Load) -> tuple[str, ...] | None:
    """The axis names of a load indexed by distinct bare axes, else None."""
    names = tuple(e.name for e in ld.index if isinstance(e, Axis))
    return names if len(names) == len(ld.index) == len(set(names)) else None


def _load_text(ld: Load) -> str:
    """``T[i, j * s + ...]``: a load as written."""
    return f"{ld.tensor.name}[{', '.join(fmt(e) for e in ld.index)}]"


def _conv_loads(alg: Algorithm):
    """``(output, its sum, input load, weight load)`` where ``alg`` has one output that is a sum over two
    axes or more of a product of two loads, one read at a computed index or padded (a convolution), else
    None."""
    if len(alg.outputs) != 1:
        return None
    o = alg.outputs[0]
    r = o.expr
    if not (isinstance(r, Reduce) and r.combiner.base == "sum" and r.combiner.results == 1 and len(r.over) >= 2):
        return None
    f = mul_factors(r.x)
    if len(f) != 2 or not all(isinstance(x, Load) for x in f):
        return None
    computed = [x for x in f if x.pad is not None or _bare(x) is None]
    if not computed:
        return None
    x = computed[0]
    return o, r, x, f[1] if x is f[0] else f[0]


def match_conv2d(alg: Algorithm) -> tuple[ConvMatch | None, str]:
    """``(the roles, "")`` when ``alg`` is a channels-last 2-D convolution of the module docstring's form;
    ``(None, why not)`` for another convolution (a sum of a product of two loads, one read at computed
    indices or padded); ``(None, "")`` for anything else."""
    got = _conv_loads(alg)
    if got is None:
        return None, ""
    o, r, x, w = got
    if _bare(w) is None or w.pad is not None:
        return None, f"{HEAD}: it reads two tensors at computed indices ({x.tensor.name}, {w.tensor.name})"
    if x.pad not in (None, 0.0):
        return None, f"{HEAD}: it reads {x.tensor.name} padded with {x.pad!r}, not with zeros (TMA's fill)"
    if len(r.over) != 3:
        return None, (f"{HEAD}: it sums over {len(r.over)} axes ({', '.join(r.over)}), not over the channels and "
                      f"two filter taps{' (a depthwise convolution)' if len(r.over) == 2 else ''}")
    if len(x.index) != 4 or len(o.layout) != 4:
        return None, (f"{HEAD}: it needs a 4-d input (N, H, W, C) and output (N, Ho, Wo, O); {x.tensor.name} is "
                      f"read in {len(x.index)} dims and {o.name} has {len(o.layout)} (a grouped, 1-d or 3-d "
                      "convolution is not this form)")
    n, h, wd, oc = o.layout
    xi = x.index
    if not (isinstance(xi[0], Axis) and xi[0].name == n and isinstance(xi[3], Axis) and xi[3].name in r.over):
        return None, (f"{HEAD}: it needs the input channels-last, {x.tensor.name}[n, h * s + r * d - p, w * s + q * d - "
                      f"p, c] with n the output's first axis and c summed (got {_load_text(x)})")
    c = xi[3].name
    rq = [a for a in r.over if a != c]
    terms = [affine_index(e) for e in xi[1:3]]
    spatial = []
    for d, (a, t) in enumerate(zip((h, wd), terms)):
        taps = [b for b in rq if t is not None and b in t]
        if t is None or set(t) - {"", a, *taps} or a not in t or len(taps) != 1:
            return None, (f"{HEAD}: {x.tensor.name}'s dim {d + 1} must be {a} * stride + tap * dilation - padding "
                          f"(int arguments or literals; one tap axis) (got {_load_text(x)})")
        spatial.append((t[a], taps[0], t[taps[0]], t.get("", ())))
    if spatial[0][1] == spatial[1][1]:
        return None, f"{HEAD}: both spatial dims of {x.tensor.name} read the tap axis {spatial[0][1]}"
    taps = (spatial[0][1], spatial[1][1])
    if _bare(w) != (oc, *taps, c):
        return None, (f"{HEAD}: it needs the weight read as {w.tensor.name}[{oc}, {taps[0]}, {taps[1]}, {c}] "
                      f"(O, R, Q, C) (got {_load_text(w)})")
    polys = [p for s in spatial for p in (s[0], s[2], s[3])]
    params = tuple(sorted({name for p in polys for names, _ in p for name in names}))
    return ConvMatch(x.tensor.name, w.tensor.name, o.name, (n, h, wd), oc, taps, c, (spatial[0][0], spatial[1][0]),
                     (spatial[0][2], spatial[1][2]), (spatial[0][3], spatial[1][3]), params), ""


def stride_value(m: ConvMatch, ones: frozenset) -> tuple[int | None, int | None]:
    """The strides (h, w) on a call whose int arguments ``ones`` are 1 (None: not known from them)."""
    return tuple(poly_value(s, {p: 1 for p in ones}) for s in m.stride)


def dtype_stride_problem(head: str, m, dtypes, out_dtypes, ones) -> str:
    """Why a Gluon convolution kernel (this module's, :mod:`~dtriton.plan.gluon_depthwise`'s) does not
    apply to the match ``m`` (its ``x``, ``w``, ``out``, ``rows`` and ``stride``) on this call, as far as
    dtypes and strides go: one 16-bit dtype for X, the weight and the output, stride 1 (``ones``: the int
    arguments equal to 1). "" where both hold."""
    dts = {dtypes[m.x], dtypes[m.w], out_dtypes[m.out]}
    if len(dts) != 1 or next(iter(dts)) not in (torch.float16, torch.bfloat16):
        return (f"{head}: {m.x}, {m.w} and the output must share one 16-bit dtype (float16 or bfloat16), got "
                f"{sorted(str(t).replace('torch.', '') for t in dts)}")
    strides = stride_value(m, ones)
    if strides != (1, 1):
        got = ", ".join("not 1" if s is None else str(s) for s in strides)
        return (f"{head}: it needs stride 1 (the coefficients of {m.rows[1]} and {m.rows[2]} in {m.x}'s index); "
                f"on this call the strides are ({got})")
    return ""


def _variant(m: ConvMatch, dtype: str, o: int) -> GluonConv | None:
    """The Gluon configuration for ``o`` output channels (H200, N32 C256 H56 W56 O256 fp16 3x3,
    bench/results/s11/call2/conv.log), None where O is not a multiple of 128."""
    if o % 256 == 0:
        return GluonConv(m, dtype, 256, 2, 2, 3,
                         why="ws 2x(m64) n256 s3 persistent: 165.8 us, cuDNN 163.6, torch.compile 177.3")
    if o % 128 == 0:
        return GluonConv(m, dtype, 128, 4, 2, 3,
                         why="ws 2x(m128) n128 s3 persistent: 169.7 us at O256 (the best of BN 128)")
    return None


def plan_gluon_conv(alg: Algorithm, sizes: Mapping[str, int], dtypes: Mapping[str, torch.dtype],
                    out_dtypes: Mapping[str, torch.dtype], *, requested: bool | None, interpret: bool, arch: int,
                    dense: frozenset, ones: frozenset, i64: bool = False) -> tuple[GluonConv | None, str]:
    """The Gluon conv2d one call of ``alg`` runs as, or ``(None, why not)``; ``why`` is "" when no
    question arises (turned off, left to the compiler, or not a convolution).

    ``sizes``: axis sizes; ``dtypes``/``out_dtypes``: the call's input and output dtypes; ``requested``:
    the schedule's ``warp_specialize`` (True asks, a call it does not apply to says why; None: the kernel
    where it applies, silently the Triton kernel elsewhere; False: off); ``interpret``: Triton's
    interpreter runs the call; ``arch``: the GPU's compute capability as 10 * major + minor (0: none);
    ``dense``: the tensors contiguous with a 16-byte aligned base on this call; ``ones``: the int
    arguments equal to 1 on it (a stride argument must be); ``i64``: offsets need 64 bits (TMA
    coordinates are 32-bit)."""
    if requested is None and not BY_DEFAULT:
        return None, ""
    return asked(requested, lambda: _decide(alg, sizes, dtypes, out_dtypes, interpret, arch, dense, ones, i64))


def _decide(alg, sizes, dtypes, out_dtypes, interpret, arch, dense, ones, i64):
    """:func:`plan_gluon_conv`'s decision once asked: (the kernel, "") or (None, why not)."""
    m, why = match_conv2d(alg)
    if m is None:
        return None, why
    if why := platform_problem(HEAD, interpret, arch):
        return None, why
    if why := dtype_stride_problem(HEAD, m, dtypes, out_dtypes, ones):
        return None, why
    c, o, r, q = sizes[m.c], sizes[m.o], sizes[m.taps[0]], sizes[m.taps[1]]
    if c % BLOCK_K or not c:
        return None, f"{HEAD}: it needs the input channels a multiple of {BLOCK_K} ({m.c}={c})"
    g = _variant(m, str(dtypes[m.x]).replace("torch.", ""), o)
    if g is None or not o:
        return None, f"{HEAD}: it needs the output channels a positive multiple of 128 ({m.o}={o})"
    if not r or not q:
        return None, f"{HEAD}: the filter has no taps ({m.taps[0]}={r}, {m.taps[1]}={q})"
    if i64:
        return None, f"{HEAD}: the tensors need 64-bit offsets (TMA coordinates are 32-bit)"
    loose = [t for t in (m.x, m.w, m.out) if t not in dense]
    if loose:
        return None, (f"{HEAD}: {', '.join(loose)} not contiguous with a 16-byte aligned base (4-d TMA descriptors of "
                      f"NHWC {m.x} and the output, 2-d of {m.w} (O, R*Q*C))")
    return g, ""
