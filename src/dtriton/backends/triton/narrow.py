"""The Triton text of narrow-type conversions: fp8 rounding, encoding and decoding, saturating casts.

Generated kernels convert to fp8 with their own helpers instead of Triton's casts, so the result is
the same on the GPU and on the interpreter and agrees with torch: Triton's interpreter converts
fp32 to fp8 without rounding to nearest even, saturation or subnormals, and reads fp8's top
exponent (NaN, e5m2's infinities) as ordinary numbers; the GPU's conversion saturates e5m2's
infinities, which torch keeps. A value cast to fp8 is computed on (rounded onto the fp8 grid in
fp32) and, where an output stores it, encoded bit by bit. On the GPU, casts whose semantics are
the hardware's (:meth:`Fp8Format.native`: saturating ones, and every e4m3fn cast) use Triton's
conversion instead, one instruction per value: the helpers cost about 25 integer and float
operations per value, which made a per-token quantisation ALU-bound (1.67 TB/s on the H200).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["FP8_FORMATS", "Fp8Format", "ROUND_FP8", "ENCODE_FP8", "DECODE_FP8", "SATURATE_INT", "saturate_int_text",
           "saturate_float_bounds"]


@dataclass(frozen=True)
class Fp8Format:
    """One fp8 format: mantissa bits, smallest normal exponent, exponent bias, largest finite
    value, whether it has infinities, the bits of its NaN, and Triton's dtype name."""
    mbits: int
    emin: int
    bias: int
    max: float
    has_inf: bool
    nan_bits: int
    tl: str

    def native(self, saturate: bool) -> bool:
        """Whether the GPU's own conversion (``cvt.rn.satfinite``: round to nearest even, clamp to
        the finite range, infinities too, NaN kept) is this cast: a saturating one, or any cast to a
        format without infinities (e4m3fn, which torch's cast saturates too). The interpreter's
        conversion never is."""
        return saturate or not self.has_inf

    def round_call(self, x: str, saturate: bool) -> str:
        """``x`` (fp32 text) rounded to nearest even onto this format's values, in fp32.
        ``saturate``: clamp to the finite range (e4m3fn always does, as torch's cast)."""
        sat = saturate or not self.has_inf
        return f"_round_fp8({x}, {self.mbits}, {self.emin}, {self.max!r}, {sat})"

    def encode_call(self, x: str, saturate: bool) -> str:
        """``x`` (fp32 text) as this fp8 dtype: rounded (:meth:`round_call`), then encoded."""
        return (f"_encode_fp8({self.round_call(x, saturate)}, {self.mbits}, {self.emin}, {self.bias}, "
                f"{float(2 ** (self.mbits - self.emin))!r}, {self.has_inf}, {self.nan_bits}, {self.tl})")

    def decode_call(self, x: str) -> str:
        """``x`` (text of an fp8 value) in fp32, NaN and infinities included (the interpreter's)."""
        return f"_decode_fp8({x}, {self.has_inf})"


#: torch fp8 dtype -> its format
FP8_FORMATS = {
    torch.float8_e4m3fn: Fp8Format(3, -6, 7, 448.0, False, 0x7F, "tl.float8e4nv"),
    torch.float8_e5m2: Fp8Format(2, -14, 15, 57344.0, True, 0x7F, "tl.float8e5"),
}

ROUND_FP8 = '''@_jit
def _round_fp8(x, MBITS: tl.constexpr, EMIN: tl.constexpr, MAXV: tl.constexpr, SAT: tl.constexpr):
    # x (fp32) rounded to nearest even onto an fp8 format's values (MBITS mantissa bits, smallest
    # normal exponent EMIN, largest finite MAXV), in fp32: the step at |x| is a power of two, so
    # |x| / step is rounded by the 2**23 addition and scaled back exactly. SAT clamps to +-MAXV
    # (infinities too), else what rounds past MAXV is infinite. NaN stays NaN
    bits = x.to(tl.int32, bitcast=True)
    a = tl.abs(x)
    if SAT:
        a = tl.minimum(a, MAXV)
    e = tl.maximum(((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, EMIN) - MBITS
    step = ((e + 127) << 23).to(tl.float32, bitcast=True)
    inv = ((127 - e) << 23).to(tl.float32, bitcast=True)
    r = ((a * inv + 8388608.0) - 8388608.0) * step
    if not SAT:
        r = tl.where(r > MAXV, float('inf'), r)
    r = tl.where(bits < 0, r * -1.0, r)   # (-r would give 0.0 for -0.0 on the interpreter)
    return tl.where(x != x, x, r)
'''

ENCODE_FP8 = '''@_jit
def _encode_fp8(r, MBITS: tl.constexpr, EMIN: tl.constexpr, BIAS: tl.constexpr, SUB: tl.constexpr,
                INF: tl.constexpr, NANBITS: tl.constexpr, DT: tl.constexpr):
    # r (fp32, already on the fp8 grid, +-inf or NaN) as the fp8 dtype DT, built from its bits:
    # sign, biased exponent and mantissa of a normal value; r * SUB (2**(MBITS - EMIN)) of a
    # subnormal one; the format's infinity (INF) or NaN
    bits = r.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    a = tl.abs(r)
    ab = a.to(tl.int32, bitcast=True)
    e = ((ab >> 23) & 0xFF) - 127
    normal = ((e + BIAS) << MBITS) | ((ab >> (23 - MBITS)) & ((1 << MBITS) - 1))
    sub = e < EMIN
    code = tl.where(sub, (tl.where(sub, a, 0.0) * SUB).to(tl.int32), normal)
    if INF:
        code = tl.where(a == float('inf'), ((1 << (7 - MBITS)) - 1) << MBITS, code)
    else:
        code = tl.where(a == float('inf'), NANBITS, code)
    code = tl.where(r != r, NANBITS, code) | sign
    return code.to(tl.uint8).to(DT, bitcast=True)
'''

DECODE_FP8 = '''@_jit
def _decode_fp8(v, INF: tl.constexpr):
    # an fp8 value in fp32 on the interpreter, which reads the top exponent as a number: e4m3fn's
    # 0x7F is NaN; e5m2's 0x7C is infinity, above it NaN
    b = v.to(tl.uint8, bitcast=True).to(tl.int32) & 0x7F
    f = v.to(tl.float32)
    if INF:
        f = tl.where(b == 0x7C, tl.where(f < 0, -float('inf'), float('inf')), f)
        f = tl.where(b > 0x7C, float('nan'), f)
    else:
        f = tl.where(b == 0x7F, float('nan'), f)
    return f
'''

SATURATE_INT = '''@_jit
def _saturate_int(x, LO: tl.constexpr, HI: tl.constexpr):
    # x (fp32 or fp64) clamped to [LO, HI] and rounded to nearest even (the 2**23 or 2**52
    # addition rounds |x| below it; above it every value is an integer); NaN becomes 0
    # (the bounds in x's dtype: a float literal would be float32, 2**31 - 1 rounded up to 2**31)
    big = 4503599627370496.0 if x.dtype == tl.float64 else 8388608.0
    c = tl.minimum(tl.maximum(x, tl.full((), LO, x.dtype)), tl.full((), HI, x.dtype))
    a = tl.abs(c)
    a = tl.where(a < big, (a + big) - big, a)
    return tl.where(x != x, 0.0, tl.where(c < 0, -a, a))
'''


def saturate_int_text(x: str, dtype: torch.dtype, cdt: str, integer: bool) -> str:
    """The text of ``x`` (in the compute dtype ``cdt``, or an integer when ``integer``) cast to
    the integer ``dtype`` with saturation; the helper ``_saturate_int`` for floats."""
    info = torch.iinfo(dtype)
    tdt = f"tl.{str(dtype).replace('torch.', '')}"
    if integer:
        return f"tl.minimum(tl.maximum({x}, {info.min}), {info.max}).to({tdt})"
    if cdt == "tl.float32" and dtype == torch.int32:
        # 2**31 - 1 is no float32: clamp to the largest float32 below 2**31, then put 2**31 - 1
        # where the value reaches 2**31
        sat = f"_saturate_int({x}, {float(info.min)!r}, 2147483520.0).to({tdt})"
        return f"tl.where({x} >= 2147483648.0, {info.max}, {sat})"
    return f"_saturate_int({x}, {float(info.min)!r}, {float(info.max)!r}).to({tdt})"


def saturate_float_bounds(x: str, dtype: torch.dtype) -> str:
    """``x`` clamped to the finite range of the float ``dtype`` (infinities to its largest values),
    NaN kept: rounding to nearest then gives a saturating cast."""
    big = float(torch.finfo(dtype).max)
    return f"tl.where({x} != {x}, {x}, tl.minimum(tl.maximum({x}, {-big!r}), {big!r}))"
