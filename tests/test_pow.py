"""``x ** p`` has torch.pow's values for every exponent form: literal integers (products), a float
literal, an ``int``/``float`` argument known only at run time; negative bases, zeros, infinities,
NaN; and its gradients (issue found by session 6's fresh-user trial: ``exp(p * log(x))`` gave NaN
for every negative base)."""
from __future__ import annotations

import pytest
import torch

import dtriton as dt

INF, NAN = float("inf"), float("nan")
SPECIAL = [-2.0, -0.5, 0.0, 1.5, -INF, NAN, 1.0, 3.0, INF, -1.0, 0.25, -7.0, 2.0]


@dt.algorithm
def pow_arg(X: dt.Tensor["M"], p: float):
    i, = dt.axes("i:M")
    return (X[i] ** p)[i]


@dt.algorithm
def pow_ten(X: dt.Tensor["M"]):
    i, = dt.axes("i:M")
    return (X[i] ** 10)[i]


@dt.algorithm
def pow_frac(X: dt.Tensor["M"]):
    i, = dt.axes("i:M")
    return (X[i] ** 2.5)[i]


@pytest.mark.parametrize("p", [3.0, 2.0, 0.0, -1.0, 2.5, -3.0, 3, 10.0, -0.5, 0.5, 1.0, NAN, INF, -INF, 64.0, 2.0 ** 20 + 1])
def test_runtime_exponent_matches_torch(p):
    x = torch.tensor(SPECIAL)
    out = torch.full_like(x, 123.0)   # poisoned
    dt.compile(pow_arg)(x, p, out=out)
    want = torch.pow(x.double(), p)
    # float32 results (overflow to inf and denormals as torch's own float32 pow), float64 reference
    torch.testing.assert_close(out, torch.pow(x, p), rtol=4e-6, atol=1e-37, equal_nan=True)
    torch.testing.assert_close(out.double(), want.float().double(), rtol=4e-6, atol=1e-37, equal_nan=True)
    ref = pow_arg.reference(x.double(), p)
    ref = ref[0] if isinstance(ref, tuple) else ref
    torch.testing.assert_close(ref, want, rtol=1e-12, atol=0.0, equal_nan=True)


@pytest.mark.parametrize("alg,p", [(pow_ten, 10), (pow_frac, 2.5)])
def test_literal_exponents_match_torch(alg, p):
    x = torch.tensor(SPECIAL)
    out = dt.compile(alg)(x)
    torch.testing.assert_close(out.double(), torch.pow(x.double(), p), rtol=2e-6, atol=0.0, equal_nan=True)


def test_pow_on_odd_sizes_random_data():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(37, generator=g) * 3
    for p in (3.0, 4.0, -2.0, 1.7):
        out = dt.compile(pow_arg)(x, p)
        torch.testing.assert_close(out.double(), torch.pow(x.double(), p), rtol=2e-6, atol=1e-30, equal_nan=True)


def test_gradients():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(11, generator=g, dtype=torch.float64) * 2
    G = torch.randn(11, generator=g, dtype=torch.float64)
    bwd = dt.grad(pow_arg, "X")
    for p in (3.0, -2.0):
        xr = x.clone().requires_grad_(True)
        torch.pow(xr, p).backward(G)
        (got,) = bwd.reference(x, p, G)
        torch.testing.assert_close(got, xr.grad)
    # a literal integer exponent is a product: finite gradient at 0, as torch
    z = torch.tensor([0.0, -1.5, 2.0], dtype=torch.float64)
    zr = z.clone().requires_grad_(True)
    torch.pow(zr, 10).backward(torch.ones(3, dtype=torch.float64))
    (gz,) = dt.grad(pow_ten).reference(z, torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(gz, zr.grad)


def test_float64_odd_exponent_past_float32_precision():
    # 2**25 + 1 is odd but not a float32: the parity test must not round p to float32
    x = torch.tensor([-2.0, -0.5, 3.0, -1.0], dtype=torch.float64)
    p = 2.0 ** 25 + 1
    torch.testing.assert_close(dt.compile(pow_arg)(x, p), torch.pow(x, p), equal_nan=True)


@dt.algorithm
def pow_minus_three(X: dt.Tensor["M"]):
    i, = dt.axes("i:M")
    return (X[i] ** -3)[i]


def test_negative_literal_power_gradient_stays_finite_at_small_x():
    # fresh-user trial, s7: 1 / x^3's chain rule divided by x^3 twice and gave -inf for |x| < ~1e-8 in fp32,
    # where torch's -3 x^-4 is finite (-3e32 at 1e-8); values and gradients against torch at float64
    x = torch.tensor([1e-8, -3e-9, 1e-7, 2.0, -0.5, 0.0, -0.0, INF, 7.25])
    X = x.clone().requires_grad_(True)
    k = dt.compile_autograd(pow_minus_three)
    y = k(X)
    (g,) = torch.autograd.grad(y, X, torch.ones_like(y))
    x64 = x.double().requires_grad_(True)
    y64 = x64 ** -3
    (g64,) = torch.autograd.grad(y64, x64, torch.ones_like(y64))
    torch.testing.assert_close(y.double(), y64.detach(), rtol=1e-6, atol=0, equal_nan=True)
    torch.testing.assert_close(g.double(), g64.to(torch.float32).double(), rtol=1e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("p", [0, 0.0])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.int32, torch.int64, torch.bool])
def test_power_zero_keeps_torch_dtype(dtype, p):
    # x ** 0 was a constant 1.0 selection: float32 whatever x (torch: float64 ones for a float64 x, int ones for
    # an int x ** 0, ...); it is the pow node now, 1 at NaN and infinities too, in torch's result dtype
    @dt.algorithm
    def pow0(X: dt.Tensor["M"]):
        i, = dt.axes("i:M")
        return (X[i] ** p)[i]

    x = torch.tensor([True, False, True]) if dtype == torch.bool else torch.tensor(SPECIAL).to(dtype)
    want = x ** p
    out = torch.full(x.shape, 7, dtype=want.dtype)
    got = dt.compile(pow0)(x, out=out)
    assert got.dtype == want.dtype and pow0.reference(x).dtype == want.dtype
    assert torch.equal(got, want), (got, want)
    if dtype == torch.float64:
        X = x.clone().requires_grad_(True)
        dt.compile_autograd(pow0)(X).sum().backward()
        assert torch.equal(X.grad, torch.zeros_like(x))


def _int_data(dtype, n=37, seed=5):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) > 0.5
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -300), min(info.max, 300)
    x = torch.randint(lo, hi + 1, (n,), generator=g, dtype=torch.int64)
    x[:3] = torch.tensor([lo, hi, 0])   # the extremes (uint8 255, int8 -128) and 0
    return x.to(dtype)


@pytest.mark.parametrize("p", [2.0, 1.0, -1.0, 0.0, 3.0, -2.0])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64, torch.bool])
def test_float_literal_power_of_integers_is_float(dtype, p):
    # X_int ** 2.0 was the integer product in X's dtype (uint8 200 ** 2.0 -> 64, int8 -128 ** 2.0 -> 0,
    # int32 ** 1.0 int32) and X_int ** -1.0 was refused; torch: float32, computed in floats
    @dt.algorithm
    def powf(X: dt.Tensor["M"]):
        i, = dt.axes("i:M")
        return (X[i] ** p)[i]

    x = _int_data(dtype)
    want = x ** p
    assert want.dtype == torch.float32
    want64 = (x.double() ** p).float()
    out = torch.full(x.shape, 7.0, dtype=want.dtype)   # poisoned
    got = dt.compile(powf)(x, out=out)
    ref = powf.reference(x)
    assert got.dtype == want.dtype and ref.dtype == want.dtype
    for v in (got, ref):
        torch.testing.assert_close(v, want, rtol=2e-7, atol=0.0)
        torch.testing.assert_close(v, want64, rtol=2e-7, atol=0.0)


def test_int_literal_power_of_integers_stays_exact_integer():
    # the integer path is unchanged: int literal powers stay in the dtype (wrapping as torch's)
    @dt.algorithm
    def powi(X: dt.Tensor["M"]):
        i, = dt.axes("i:M")
        return (X[i] ** 2)[i], (X[i] ** 3)[i]

    for dtype in (torch.uint8, torch.int8, torch.int32):
        x = _int_data(dtype)
        for got, want in zip(dt.compile(powi)(x), (x ** 2, x ** 3)):
            assert got.dtype == want.dtype and torch.equal(got, want), (dtype, got, want)


@pytest.mark.parametrize("p", [1, 2, 3, 7, 64])
def test_int_literal_power_of_bool_is_int64(p):
    # bool ** 2 kept dtype bool (torch: int64), and so did (X > 0) ** 2; a sum of two counts was 1, not 2
    @dt.algorithm
    def powb(B: dt.Tensor["M"], X: dt.Tensor["M"]):
        i, = dt.axes("i:M")
        return (B[i] ** p)[i], ((X[i] > 0) ** p)[i], (B[i] ** p + B[i] ** p)[i], dt.sum(B[i] ** p, over=i)

    b = _int_data(torch.bool)
    x = torch.randn(37, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    wants = (b ** p, (x > 0) ** p, b ** p + b ** p, (b ** p).sum())
    outs = tuple(torch.full(w.shape, 7, dtype=w.dtype) for w in wants)   # poisoned
    for got in (dt.compile(powb)(b, x, out=outs), powb.reference(b, x)):
        for g, w in zip(got, wants):
            assert w.dtype == torch.int64
            assert g.dtype == w.dtype and torch.equal(g, w), (p, g, w)
