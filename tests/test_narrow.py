"""Narrow types: fp8 (e4m3fn, e5m2) tensors, casts and dots with scales, int8 x int8 -> int32 dots,
saturating casts and per-token quantisation, against float64 / int64 torch on odd sizes (the
interpreter), and the plans the GPU gets (planned here, no GPU needed)."""

import math

import pytest
import torch

import dtriton as dt
from dtriton.plan import call_spec, plan_program, unused_knobs
from dtriton.schedule.heuristics import complete_schedule
from dtriton.tune.space import Space

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
FP8 = (E4, E5)


@dt.algorithm
def matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    i, j, k = dt.axes("i j k")
    return dt.sum(A[i, k] * B[k, j], over=k)[i, j]


@dt.algorithm
def scaled_mm(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"], sa: dt.Tensor["M"], sb: dt.Tensor["N"]):
    i, j, k = dt.axes("i j k")
    return dt.cast(sa[i] * sb[j] * dt.sum(A[i, k] * B[k, j], over=k), torch.bfloat16)[i, j]


@dt.algorithm
def tensor_scaled_mm(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"], s: dt.Tensor["One"], t: float):
    i, j, k = dt.axes("i j k")
    return (s[0] * t * dt.sum(A[i, k] * B[k, j], over=k))[i, j]


@dt.algorithm
def int_mm(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    i, j, k = dt.axes("i j k")
    return dt.cast(dt.sum(A[i, k] * B[k, j], over=k), torch.int32)[i, j]


def cast_to(dtype, saturate=False):
    @dt.algorithm
    def cast(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.cast(X[i, j], dtype, saturate=saturate)[i, j]
    return dt.compile(cast)


def same_bits(y: torch.Tensor, ref: torch.Tensor) -> bool:
    """Equal fp8 tensors: the same bits, any NaN matching any NaN."""
    nan = y.float().isnan()
    return torch.equal(nan, ref.float().isnan()) and torch.equal(y.view(torch.uint8)[~nan], ref.view(torch.uint8)[~nan])


EDGES = [0.0, -0.0, 1.0, -1.5, 2.5, 3.5, 200.0, 448.0, 464.0, 465.0, 480.0, 1e3, -1e3, 6e4, 6.2e4, 1e5,
         float("inf"), float("-inf"), float("nan"), 2.0 ** -9, 1.5 * 2.0 ** -10, 0.75 * 2.0 ** -9, 2.0 ** -16,
         0.51 * 2.0 ** -16, 1e-30]   # (NaN at 18)


def edge_and_random(n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    rnd = torch.randn(n, generator=g) * torch.exp2(torch.randint(-24, 18, (n,), generator=g).float())
    return torch.cat([torch.tensor(EDGES), rnd]).reshape(1, -1)


# -- fp8 values ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FP8)
def test_fp8_cast_rounds_and_saturates_as_torch(dtype):
    x = edge_and_random()
    y = cast_to(dtype)(x)
    assert y.dtype == dtype and same_bits(y, x.to(dtype))


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_saturating_cast_clamps_infinities_and_keeps_nan(dtype):
    x = edge_and_random(seed=1)
    y = cast_to(dtype, saturate=True)(x)
    big = torch.finfo(dtype).max
    ref = torch.where(x.isnan(), x, x.clamp(-big, big)).to(dtype)
    assert same_bits(y, ref)
    assert y.float()[0, EDGES.index(float("inf"))] == big and y.float()[0, 18].isnan()


@pytest.mark.parametrize("dtype", FP8)
def test_every_fp8_value_loads_exactly(dtype):
    """All 256 bit patterns (NaN, e5m2's infinities, subnormals) read as torch reads them."""
    @dt.algorithm
    def twice(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return (X[i, j] * 2.0)[i, j]
    x = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).reshape(1, -1)
    y, ref = dt.compile(twice)(x), x.float() * 2
    assert y.dtype == torch.float32
    assert torch.equal(y.isnan(), ref.isnan()) and torch.equal(y[~y.isnan()], ref[~ref.isnan()])


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_copy_keeps_every_bit_pattern(dtype):
    @dt.algorithm
    def copy(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return X[i, j][i, j]
    x = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).reshape(16, 16)
    y = dt.compile(copy)(x)
    assert y.dtype == dtype and same_bits(y, x)


def test_fp8_arithmetic_is_float32():
    @dt.algorithm
    def f(X: dt.Tensor["M", "N"], Y: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return (X[i, j] * Y[i, j])[i, j], dt.sum(X[i, j], over=j)[i], dt.cast(X[i, j], E5)[i, j]
    x, y = torch.randn(3, 5).to(E4), torch.randn(3, 5).to(E5)
    b = f.bind((x, y))
    assert b.out_dtypes == [torch.float32, torch.float32, E5]
    p, s, c = dt.compile(f)(x, y)
    assert torch.allclose(p.double(), x.double() * y.double(), rtol=1e-6)
    assert torch.allclose(s.double(), x.double().sum(1), rtol=1e-6)
    assert same_bits(c, x.float().to(E5))


def test_saturating_cast_to_other_dtypes_raises():
    with pytest.raises(dt.AlgorithmError, match="saturating cast"):
        cast_to(torch.float32, saturate=True)


# -- fp8 dots ------------------------------------------------------------------------------------
def operands(dtype, m, k, n, lay="NT", seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(n, k, generator=g).to(dtype).T if lay[1] == "T" else torch.randn(k, n, generator=g).to(dtype)
    if lay[0] == "T":
        a = a.T.contiguous().T
    return a, b


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("lay", ["NN", "NT", "TN"])
@pytest.mark.parametrize("m, k, n", [(37, 70, 29), (1, 33, 17), (64, 128, 48)])
def test_fp8_matmul_against_float64(dtype, lay, m, k, n):
    a, b = operands(dtype, m, k, n, lay)
    y = dt.compile(matmul)(a, b)
    ref = a.double() @ b.double()
    assert y.dtype == torch.float32
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5 * math.sqrt(k))


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_matmul_with_per_row_scales(dtype):
    a, b = operands(dtype, 45, 67, 31)
    sa, sb = torch.rand(45) + 0.1, torch.rand(31) * 100
    y = dt.compile(scaled_mm)(a, b, sa, sb)
    ref = sa.double()[:, None] * sb.double()[None, :] * (a.double() @ b.double())
    assert y.dtype == torch.bfloat16
    assert torch.allclose(y.double(), ref, rtol=2 ** -7, atol=1e-3)


def test_fp8_matmul_with_per_tensor_scales():
    a, b = operands(E4, 19, 40, 23)
    s = torch.tensor([0.37])
    y = dt.compile(tensor_scaled_mm)(a, b, s, 3.0)
    ref = 0.37 * 3.0 * (a.double() @ b.double())
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-4)


def test_fp8_matmul_propagates_nan_and_inf():
    a, b = operands(E5, 20, 32, 18)
    a[3, 5] = float("nan")
    a[7, 1] = float("inf")
    y, ref = dt.compile(matmul)(a, b), a.double() @ b.double()
    assert torch.equal(y.isnan(), ref.isnan()) and torch.equal(y.isinf(), ref.isinf())
    ok = ~(ref.isnan() | ref.isinf())
    assert torch.allclose(y.double()[ok], ref[ok], rtol=1e-5, atol=1e-4)


# -- int8 dots -----------------------------------------------------------------------------------
@pytest.mark.parametrize("m, k, n", [(37, 70, 29), (1, 17, 3), (64, 96, 48)])
def test_int8_matmul_is_exact(m, k, n):
    g = torch.Generator().manual_seed(m)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g).T
    y = dt.compile(int_mm)(a, b)
    assert y.dtype == torch.int32 and torch.equal(y.long(), a.long() @ b.long())
    y64 = dt.compile(matmul)(a, b)   # without the cast: int64, as torch's sum of integers
    assert y64.dtype == torch.int64 and torch.equal(y64, a.long() @ b.long())


def test_int8_matmul_at_the_extremes():
    a = torch.full((20, 300), -128, dtype=torch.int8)
    b = torch.full((300, 24), -128, dtype=torch.int8)
    assert torch.equal(dt.compile(int_mm)(a, b).long(), a.long() @ b.long())


# -- the plans the GPU gets ----------------------------------------------------------------------
def gpu_dots(alg, args, sched=None):
    b = alg.bind(args)
    b.device = torch.device("cuda")
    full = complete_schedule(alg, sched, b)
    prog = plan_program(alg, full, b, call_spec(alg, b, args, interpret=False))
    return full, [d for k in prog.kernels for d in k.dots.values()]


@pytest.mark.parametrize("dtype, op", [(E4, "float8e4nv"), (E5, "float8e5")])
def test_gpu_fp8_dot_takes_fp8_operands_k_major(dtype, op):
    a, b = operands(dtype, 256, 256, 256, "NN")   # B row-major: A goes on the right (K-major)
    full, (d,) = gpu_dots(matmul, (a, b))
    assert (d.operand_dtype, d.operand_cast, d.raw_left, d.raw_right, d.acc_dtype) == (op, op, True, True, "float32")
    assert d.n == "i" and d.precision is None and full.tile["k"] >= 32
    a, b = operands(dtype, 256, 256, 256, "NT")
    _, (d,) = gpu_dots(matmul, (a, b))
    assert d.n == "j"
    a, b = operands(dtype, 4096, 4096, 4096, "NT")   # the H200's best at 4096^3: 128x128x128, 3 stages, 4 warps
    full, _ = gpu_dots(matmul, (a, b))
    assert (full.tile["i"], full.tile["j"], full.tile["k"], full.num_stages, full.num_warps) == (128, 128, 128, 3, 4)


def test_fp8_default_is_not_shrunk_for_its_fp32_scales():
    """The runtime's shared-memory fit counts the dot operands' bytes (1 for fp8), not the fp32
    per-row scales': at 4 bytes 128x128x128 at 4 stages looked like 512 KB and was shrunk to
    64x128x128 at 2 stages (149.8 us on the H200 against 113)."""
    from dtriton.schedule import fits_smem, operand_itemsize
    from dtriton.backends import default_backend
    a, b = operands(E4, 4096, 4096, 4096, "NT")
    alg = scaled_mm
    args = (a, b, torch.ones(4096), torch.ones(4096))
    bd = alg.bind(args)
    bd.device = torch.device("cuda")
    full = complete_schedule(alg, None, bd)
    size = operand_itemsize(alg, bd.dtypes)
    assert size == 1 and fits_smem(alg, full, size, default_backend().limits.smem_bytes)


def test_gpu_fp8_dot_hoists_the_scales():
    """Scales inside the sum are factors free of the reduced axis: hoisted out of the loop."""
    @dt.algorithm
    def inside(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"], sa: dt.Tensor["M"], sb: dt.Tensor["N"]):
        i, j, k = dt.axes("i j k")
        return dt.sum(sa[i] * A[i, k] * B[k, j] * sb[j], over=k)[i, j]
    a, b = operands(E4, 256, 256, 256)
    sa, sb = torch.rand(256), torch.rand(256)
    _, (d,) = gpu_dots(inside, (a, b, sa, sb))
    assert d.operand_dtype == "float8e4nv" and len(d.hoist) == 2
    a, b = operands(E4, 33, 64, 20)
    sa, sb = torch.rand(33), torch.rand(20)
    ref = sa.double()[:, None] * sb.double()[None, :] * (a.double() @ b.double())
    assert torch.allclose(dt.compile(inside)(a, b, sa, sb).double(), ref, rtol=1e-5, atol=1e-5)


def test_gpu_int8_dot_accumulates_in_int32():
    a = torch.zeros(256, 256, dtype=torch.int8)
    full, (d,) = gpu_dots(int_mm, (a, a.T))
    assert (d.operand_dtype, d.raw_left, d.raw_right, d.acc_dtype) == ("int8", True, True, "int32")
    assert full.tile["k"] == 128


def test_gpu_int8_dot_needs_a_reduction_int32_holds():
    """Past 2**16 products the int32 sum could overflow: the sum folds in int64 instead."""
    a = torch.zeros(16, 70000, dtype=torch.int8)
    _, dots = gpu_dots(int_mm, (a, a.T), dt.Schedule(tile={"i": 16, "j": 16, "k": 64}))
    assert dots == []


def test_gpu_8bit_dot_needs_a_reduction_block_of_32():
    a, b = operands(E4, 64, 64, 64)
    _, (d,) = gpu_dots(matmul, (a, b), dt.Schedule(tile={"i": 32, "j": 32, "k": 16}))
    assert d.operand_dtype is None   # an fp32 dot of the decoded values


# -- int4 packed weights -------------------------------------------------------------------------
@dt.algorithm
def int4_linear(X: dt.Tensor["M", "K"], Wp: dt.Tensor["N", "Kh"], s: dt.Tensor["N"]):
    """Two signed int4 weights per byte of Wp (element 2c in the low nibble, 2c + 1 in the high one),
    unpacked with integer // and % in the dot's prologue, a scale per output column."""
    i, j, k = dt.axes("i j k")
    byte = Wp[j, k // 2]
    nib = dt.where(k % 2 == 0, byte % 16, byte // 16)
    w = dt.where(nib >= 8, nib - 16, nib)
    return (s[j] * dt.sum(X[i, k] * w, over=k))[i, j]


def pack_int4(w: torch.Tensor, dtype) -> torch.Tensor:
    """(N, K) int4 values in -8..7 -> (N, ceil(K / 2)) bytes, low nibble first."""
    if w.shape[1] % 2:
        w = torch.cat([w, torch.zeros(w.shape[0], 1, dtype=w.dtype)], 1)
    b = (w[:, 0::2] & 15) | ((w[:, 1::2] & 15) << 4)
    return (b - 256 * (b >= 128)).to(dtype) if dtype == torch.int8 else b.to(dtype)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
@pytest.mark.parametrize("m, k, n", [(37, 70, 29), (5, 33, 16)])
def test_int4_packed_weights(dtype, m, k, n):
    g = torch.Generator().manual_seed(k)
    w = torch.randint(-8, 8, (n, k), generator=g)
    x, s = torch.randn(m, k, generator=g).to(torch.float16), torch.rand(n, generator=g)
    y = dt.compile(int4_linear)(x, pack_int4(w, dtype), s)
    ref = s.double() * (x.double() @ w.double().T)
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-4)


def test_gpu_int4_weights_feed_a_16bit_dot():
    """The unpacked weights are small integers, exact in fp16: the dot is fp16 x fp16."""
    x, wp = torch.zeros(256, 512, dtype=torch.float16), torch.zeros(256, 256, dtype=torch.uint8)
    _, (d,) = gpu_dots(int4_linear, (x, wp, torch.ones(256)))
    assert d.operand_dtype == "float16" and d.raw_left and not d.raw_right


def test_mixed_fp8_operands_are_an_fp32_dot():
    a, _ = operands(E4, 33, 64, 20)
    _, b = operands(E5, 33, 64, 20, seed=1)
    y = dt.compile(matmul)(a, b)
    assert torch.allclose(y.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-4)
    a, _ = operands(E4, 256, 256, 256)
    _, b = operands(E5, 256, 256, 256, seed=1)
    _, (d,) = gpu_dots(matmul, (a, b))
    assert d.operand_dtype is None


def test_saturating_cast_is_its_own_algorithm():
    """CSE keeps a saturating cast apart from a plain one; the fingerprint (tuning records) differs."""
    def make(sat):
        @dt.algorithm
        def f(X: dt.Tensor["N"]):
            i, = dt.axes("i")
            return dt.cast(X[i], torch.int8, saturate=sat)[i], dt.cast(X[i], torch.int8)[i]
        return f
    sat, plain = make(True), make(False)
    assert sat.fingerprint != plain.fingerprint
    y, z = dt.compile(sat)(torch.tensor([300.0, -2.5]))
    assert y.tolist() == [127, -2] and z.tolist() == torch.tensor([300.0, -2.5]).to(torch.int8).tolist()


# -- block scales --------------------------------------------------------------------------------
def block_scaled_mm(g: int):
    """A scale per row and g-block of K for A, per g x g block for B (DeepSeek-V3's fp8 recipe at
    g = 128); the block size a literal, so the plan knows the tiles that divide it."""
    @dt.algorithm
    def block_scaled(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"], sa: dt.Tensor["M", "KB"],
                     sb: dt.Tensor["KB", "NB"]):
        i, j, k = dt.axes("i j k")
        return dt.sum(A[i, k] * sa[i, k // g] * B[k, j] * sb[k // g, j // g], over=k)[i, j]
    return block_scaled


def block_scaled_case(m, k, n, g, seed=0):
    a, b = operands(E4, m, k, n, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    sa = torch.rand(m, -(-k // g), generator=gen) + 0.5
    sb = torch.rand(-(-k // g), -(-n // g), generator=gen) + 0.5
    af = a.double() * sa.double().repeat_interleave(g, 1)[:, :k]
    bf = b.double() * sb.double().repeat_interleave(g, 0)[:k].repeat_interleave(g, 1)[:, :n]
    return (a, b, sa, sb), af @ bf


@pytest.mark.parametrize("m, k, n, g, sched", [
    (40, 192, 72, 64, None),                                                      # a tile per scale block
    (33, 250, 20, 128, dt.Schedule(tile={"i": 32, "j": 32, "k": 64})),            # two tiles per block, K ragged
    (33, 256, 40, 64, dt.Schedule(tile={"i": 32, "j": 32, "k": 32}, split={"k": 2})),   # split-K slices
    (20, 96, 24, 32, dt.Schedule(tile={"i": 32, "j": 32, "k": 64}))])             # tile past the block: no tile scale
def test_fp8_block_scaled_matmul(m, k, n, g, sched):
    args, ref = block_scaled_case(m, k, n, g)
    alg = block_scaled_mm(g)
    y = dt.compile(alg, sched)(*args)
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-4 * ref.abs().max())
    d = gpu_dots(alg, args, sched)[1] if sched is not None else []
    assert all(bool(x.tile_scale) == (g % sched.tile["k"] == 0) for x in d)


def test_gpu_block_scales_scale_each_tile_of_an_fp8_dot():
    args, _ = block_scaled_case(256, 512, 256, 128)
    full, (d,) = gpu_dots(block_scaled_mm(128), args)
    assert d.operand_dtype == "float8e4nv" and d.raw_left and d.raw_right and len(d.tile_scale) == 2
    assert 128 % full.tile["k"] == 0


def test_explored_8bit_dots_keep_reduction_tiles_of_32():
    """The GPU space of an fp8 or int8 contraction has no reduction tile below 32 (an fp32 dot there)."""
    for dtype in (E4, torch.int8):
        a = torch.zeros((), dtype=dtype).expand(1024, 1024)
        ks = Space.derive(matmul, (a, a), target="gpu").tile["k"]
        assert min(ks) == 32 and 128 in ks
    h = torch.zeros((), dtype=torch.float16).expand(1024, 1024)
    assert 16 in Space.derive(matmul, (h, h), target="gpu").tile["k"]


@dt.algorithm
def w8a8(A: dt.Tensor["M", "K"], B: dt.Tensor["N", "K"], sa: dt.Tensor["M"], sb: dt.Tensor["N"]):
    """int8 activations and weights with per-row scales inside the sum (a float sum)."""
    i, j, k = dt.axes("i j k")
    return dt.sum(sa[i] * A[i, k] * B[j, k] * sb[j], over=k)[i, j]


def test_int8_dot_with_float_scales_inside_the_sum():
    g = torch.Generator().manual_seed(5)
    a = torch.randint(-128, 128, (37, 90), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (29, 90), dtype=torch.int8, generator=g)
    sa, sb = torch.rand(37, generator=g), torch.rand(29, generator=g)
    y = dt.compile(w8a8)(a, b, sa, sb)
    ref = sa.double()[:, None] * sb.double()[None, :] * (a.double() @ b.double().T)
    assert y.dtype == torch.float32 and torch.allclose(y.double(), ref, rtol=1e-6, atol=1e-3)
    a2, b2 = torch.zeros(256, 256, dtype=torch.int8), torch.zeros(256, 256, dtype=torch.int8)
    _, (d,) = gpu_dots(w8a8, (a2, b2, torch.ones(256), torch.ones(256)))
    assert (d.operand_dtype, d.acc_dtype, len(d.hoist)) == ("int8", "int32", 2)


@dt.algorithm
def quantised_linear(X: dt.Tensor["M", "K"], W: dt.Tensor["N", "K"], sx: dt.Tensor["M"], sw: float):
    """Activations quantised to e4m3 in the dot's prologue (a saturating cast), fp8 weights."""
    i, j, k = dt.axes("i j k")
    q = dt.cast(X[i, k] / sx[i], E4, saturate=True)
    return (sx[i] * sw * dt.sum(q * W[j, k], over=k))[i, j]


def test_fp8_operand_quantised_in_the_prologue():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(37, 70, generator=g) * 10
    w = torch.randn(29, 70, generator=g).to(E4)
    sx = x.abs().amax(1) / 448.0
    y = dt.compile(quantised_linear)(x, w, sx, 0.5)
    q = (x.double() / sx.double()[:, None]).clamp(-448, 448).to(E4).double()
    ref = sx.double()[:, None] * 0.5 * (q @ w.double().T)
    assert torch.allclose(y.double(), ref, rtol=1e-4, atol=1e-3)
    x2, w2 = torch.zeros(256, 256), torch.zeros(256, 256, dtype=E4)
    _, (d,) = gpu_dots(quantised_linear, (x2, w2, torch.ones(256), 1.0))
    assert d.operand_dtype == "float8e4nv" and (d.raw_left, d.raw_right) == (False, True)


def test_fp8_dot_loops_are_never_warp_specialised():
    """Triton 3.6's warp-specialised fp8 dots were wrong on the H200: the plan runs them without it
    (with a warning); a 16-bit dot under the same schedule keeps it."""
    sched = dt.Schedule(tile={"i": 128, "j": 128, "k": 128}, num_warps=4, num_stages=3, access="tma",
                        warp_specialize=True)
    for dtype, on in ((E4, False), (torch.float16, True)):
        a = torch.zeros(256, 256, dtype=dtype)
        b = a.T   # column-major, TMA-addressable through its transposed view
        bind = matmul.bind((a, b))
        bind.device = torch.device("cuda")
        full = complete_schedule(matmul, sched, bind)
        spec = call_spec(matmul, bind, (a, b), interpret=False, tma_ok=frozenset({"A", "B", "out"}))
        prog = plan_program(matmul, full, bind, spec)
        ps = [p for k in prog.kernels for p in k.all_passes() if p.ws_requested]
        assert ps and all(p.warp_specialize == on for p in ps)
        notes = unused_knobs(matmul, full, prog)
        assert any("fp8 dots" in n for n in notes) == (not on)
