"""``x ** p`` through the ``pow`` node against ``torch.pow`` over a grid of special values (signed
zeros, infinities, NaN, negative bases with integer and non-integer exponents, tiny and huge
magnitudes), forward and gradient, in float64, float32 and float16 (reliability fixes of session 8:
``(-0.0) ** -1`` was +inf, ``x ** 3.0`` at -0.0 was +0, float64 results were off by the rounding of
``p * log|x|``, gradients underflowed to 0 and were NaN at ``x = inf`` for ``0 < p < 1``)."""
from __future__ import annotations

import pytest
import torch

import dtriton as dt

INF, NAN = float("inf"), float("nan")
EXPONENTS = [-3.0, -2.0, -1.0, -0.5, 0.0, 0.3, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, -1.5, 7.0, NAN, INF, -INF]
TINY_HUGE = {torch.float64: [1e-300, -1e-300, 1e300, 5e-324], torch.float32: [1e-40, -1e-30, 3e38, 1e-45],
             torch.float16: [6e-8, -1e-5, 6e4, 1e-4]}


@dt.algorithm
def pow_arg(X: dt.Tensor["M"], p: float):
    i, = dt.axes("i:M")
    return (X[i] ** p)[i]


@dt.algorithm
def pow_tensor(X: dt.Tensor["M"], P: dt.Tensor["M"]):
    i, = dt.axes("i:M")
    return (X[i] ** P[i])[i]


def grid(dtype):
    g = torch.Generator().manual_seed(11)
    vals = [0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.7, -3.7, 1.0 + 2 ** -20]
    return torch.tensor(vals + TINY_HUGE[dtype] + (torch.randn(7, generator=g) * 4).tolist(), dtype=dtype)


def tol(dtype):   # C's pow on either side: within an ulp or two of each other
    return dict(rtol={torch.float64: 5e-16, torch.float32: 3e-7, torch.float16: 1e-3}[dtype], atol=0.0, equal_nan=True)


def same_signs(a, b):
    both = (a == 0) | a.isinf()
    assert torch.equal(torch.signbit(a[both]), torch.signbit(b[both])), (a, b)


def torch_pow_and_grad(x, p):
    X = x.clone().requires_grad_(True)
    y = torch.pow(X, p)
    (g,) = torch.autograd.grad(y, X, torch.ones_like(y))
    return y.detach(), g


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
@pytest.mark.parametrize("p", EXPONENTS)
def test_number_exponent_forward_and_gradient(dtype, p):
    if dtype != torch.float64:
        # a float argument reaches a float32 kernel as a float32 (torch keeps 0.3 in double: pow(1e-40, 0.3)
        # differs by |ln x| * 2**-24 relative, 1e-6 there); the docs say so
        p = float(torch.tensor(p, dtype=torch.float32))
    x = grid(dtype)
    X = x.clone().requires_grad_(True)
    y = dt.compile_autograd(pow_arg)(X, p)
    (g,) = torch.autograd.grad(y, X, torch.ones_like(y))
    y = y.detach()
    # against float64 torch rounded to the dtype: torch's own fp16 gradient rounds p * x ** (p - 1) to fp16
    # twice (inf where p * x ** (p - 1) is finite, 0 where it is a denormal), dtriton's once from fp32
    y64, g64 = torch_pow_and_grad(x.double(), p)
    torch.testing.assert_close(y, y64.to(dtype), **tol(dtype))
    torch.testing.assert_close(g, g64.to(dtype), **tol(dtype))
    same_signs(y, y64.to(dtype))
    same_signs(g, g64.to(dtype))
    y_t, _ = torch_pow_and_grad(x, p)
    keep = torch.ones_like(x, dtype=torch.bool)
    if dtype == torch.float16 and abs(p) == 0.5:
        # torch's CPU fp16 pow has no sqrt / rsqrt special case: C's pow at x = -inf and -0.0 (the docs say so)
        keep = ~((x == -INF) | ((x == 0) & x.signbit()))
    # torch's own CPU fp16 pow is an ulp further from the float64 value at some denormals (6e-8 ** 0.3)
    torch.testing.assert_close(y[keep], y_t[keep], **dict(tol(dtype), rtol=2 * tol(dtype)["rtol"]))
    same_signs(y[keep], y_t[keep])
    ref = pow_arg.reference(x.double(), p)
    ref = ref[0] if isinstance(ref, tuple) else ref
    torch.testing.assert_close(ref, y64, rtol=0, atol=0, equal_nan=True)
    same_signs(ref, y64)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tensor_exponent_forward_and_gradients(dtype):
    x = grid(dtype)
    ps = EXPONENTS   # +-0.5 and 1.5 included: torch's tensor pow is C's, without the sqrt cases of a number exponent
    X = x.repeat(len(ps)).clone()
    P = torch.tensor(ps, dtype=dtype).repeat_interleave(len(x))
    Xa, Pa = X.clone().requires_grad_(True), P.clone().requires_grad_(True)
    y = dt.compile_autograd(pow_tensor)(Xa, Pa)
    G = torch.randn(y.shape, generator=torch.Generator().manual_seed(5), dtype=dtype)
    gx, gp = torch.autograd.grad(y, (Xa, Pa), G)
    Xb, Pb = X.clone().requires_grad_(True), P.clone().requires_grad_(True)
    y2 = torch.pow(Xb, Pb)
    gx2, gp2 = torch.autograd.grad(y2, (Xb, Pb), G)
    torch.testing.assert_close(y.detach(), y2.detach(), **tol(dtype))
    same_signs(y.detach(), y2.detach())
    torch.testing.assert_close(gx, gx2, **tol(dtype))
    torch.testing.assert_close(gp, gp2, **dict(tol(dtype), rtol=4 * tol(dtype)["rtol"]))


def test_signed_zero_cases_named_in_the_issue():
    x = torch.tensor([-0.0, 0.0, -0.0], dtype=torch.float64)
    for p, want in ((-1.0, [-INF, INF, -INF]), (-3.0, [-INF, INF, -INF]), (3.0, [-0.0, 0.0, -0.0])):
        out = torch.full_like(x, 7.0)   # poisoned
        dt.compile(pow_arg)(x, p, out=out)
        assert out.tolist() == want and torch.equal(out.signbit(), torch.tensor(want).signbit()), (p, out)


def test_float64_values_are_c_pow_not_exp_of_log():
    # exp(p * log x) loses |p log x| ulps: 1.0001 ** 7e6 (p log x ~ 700) was ~100 ulps off
    x = torch.tensor([1.0001, 0.9999, 1.5, 123.456, 1e-3], dtype=torch.float64)
    for p in (7e6, -7e6, 137.3, -1000.5, 100.25):
        got = dt.compile(pow_arg)(x, p)
        torch.testing.assert_close(got, torch.pow(x, p), rtol=5e-16, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("which", ["inf", "-inf", "nan"])
def test_non_finite_literal_exponent(dtype, which):
    # a literal float("inf") / -inf / nan exponent was printed as a bare ``inf`` (NameError at compile)
    lit = float(which)

    @dt.algorithm
    def pow_lit(X: dt.Tensor["M"]):
        i, = dt.axes("i:M")
        return (X[i] ** lit)[i]

    x = grid(dtype)
    X = x.clone().requires_grad_(True)
    y = dt.compile_autograd(pow_lit)(X)
    (g,) = torch.autograd.grad(y, X, torch.ones_like(y))
    y64, g64 = torch_pow_and_grad(x.double(), lit)
    torch.testing.assert_close(y.detach(), y64.to(dtype), **tol(dtype))
    same_signs(y.detach(), y64.to(dtype))
    torch.testing.assert_close(g, g64.to(dtype), **tol(dtype))
    ref = pow_lit.reference(x.double())
    torch.testing.assert_close(ref, y64, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtypes", [(torch.int64, torch.int64), (torch.int32, torch.int8), (torch.uint8, torch.uint8),
                                    (torch.int16, torch.int64)])
def test_integer_tensor_exponent_is_exact_integer(dtypes):
    # integer ** integer was float32 (rounded: 7 ** 15, 2 ** 62); torch gives the promoted integer dtype,
    # exactly (wrapping on overflow as its products do), and 0 / 1 / -1 for a negative tensor exponent
    bd, ed = dtypes
    lo = 0 if bd == torch.uint8 else -9
    g = torch.Generator().manual_seed(3)
    x = torch.cat([torch.tensor([7, 3, 2, 1, 0, 5, 2]), torch.randint(lo, 10, (23,), generator=g)]).to(bd)
    if bd != torch.uint8:
        x[[0, 1, 2, 3, 4, 5, 6]] = torch.tensor([7, -3, 2, -1, 0, 1, -2]).to(bd)
    e_lo = 0 if ed == torch.uint8 else -3
    p = torch.cat([torch.tensor([15, 21, 62, 7, 3, 0, 63]), torch.randint(e_lo, 70, (23,), generator=g)]).to(ed)
    if ed != torch.uint8:
        p[[8, 9, 10, 11]] = torch.tensor([-1, -2, -3, -1]).to(ed)
        x[[8, 9, 10, 11]] = torch.tensor([1, -1, -1, 0] if bd != torch.uint8 else [1, 2, 3, 0]).to(bd)
    want = x ** p
    out = torch.full_like(want, 77)
    got = dt.compile(pow_tensor)(x, p, out=out)
    assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
    ref = pow_tensor.reference(x, p)
    assert ref.dtype == want.dtype and torch.equal(ref, want), (ref, want)
    assert dt.compile(pow_tensor)(x, p).dtype == want.dtype


def test_integer_tensor_integer_exponent_literal_and_argument():
    @dt.algorithm
    def pow_big(X: dt.Tensor["M"], q: int):
        i, = dt.axes("i:M")
        return (X[i] ** 100)[i], (X[i] ** q)[i]

    x = torch.tensor([3, -3, 2, 1, 0, -1, 7], dtype=torch.int32)
    a, b = dt.compile(pow_big)(x, 40)
    assert a.dtype == torch.int32 and torch.equal(a, x ** 100)
    assert b.dtype == torch.int32 and torch.equal(b, x ** 40)
    ra, rb = pow_big.reference(x, 40)
    assert torch.equal(ra, x ** 100) and torch.equal(rb, x ** 40)
    with pytest.raises(dt.AlgorithmError, match="negative integer powers"):
        dt.compile(pow_big)(x, -2)
    with pytest.raises(dt.AlgorithmError, match="negative integer powers"):
        pow_big.reference(x, -2)


@pytest.mark.parametrize("lit", [-1, -2, -70])
def test_integer_tensor_negative_literal_exponent_raises(lit):
    # X_int ** -1 was accepted and returned float32; torch raises "Integers to negative integer powers are not allowed"
    @dt.algorithm
    def inv(X: dt.Tensor["M"]):
        i, = dt.axes("i:M")
        return (X[i] ** lit)[i]

    x = torch.tensor([-3, -1, 0, 1, 2])
    with pytest.raises(RuntimeError):
        x ** lit
    with pytest.raises(dt.AlgorithmError, match="negative integer powers.*float"):
        dt.compile(inv)(x)
    with pytest.raises(dt.AlgorithmError, match="negative integer powers.*float"):
        inv.reference(x)
    xf = torch.tensor([-3.0, -1.0, 0.5, 1.0, 2.0])   # a float base is fine
    torch.testing.assert_close(dt.compile(inv)(xf), xf ** lit)


def test_negative_literal_power_survives_rebuilds():
    # the refusal of X_int ** -n lived in a module dict keyed by the reciprocal node's uid: CSE rebuilds
    # (X[i] + X[i]) ** -1's reciprocal (its second X[i] merges into the first), so the mark was lost and
    # an integer base was accepted (float32 result); it is now a field of the node, kept by rebuild
    from dtriton.ir.expr import Binary

    @dt.algorithm
    def inv_sum(X: dt.Tensor["M"]):
        i, = dt.axes("i:M")
        return ((X[i] + X[i]) ** -3)[i], (1.0 / X[i])[i]

    x = torch.tensor([-3, -1, 2, 1, 5])
    with pytest.raises(RuntimeError):
        (x + x) ** -3
    with pytest.raises(dt.AlgorithmError, match="negative integer powers.*float"):
        dt.compile(inv_sum)(x)
    with pytest.raises(dt.AlgorithmError, match="negative integer powers.*float"):
        inv_sum.reference(x)
    marked = [n for n in inv_sum.nodes if isinstance(n, Binary) and n.power is not None]
    assert len(marked) == 1 and marked[0].power == -3 and marked[0].rebuild(marked[0].children()).power == -3
    # a written 1.0 / X[i] is no power (torch gives a float quotient): not merged with the marked node
    assert sum(isinstance(n, Binary) and n.op == "div" for n in inv_sum.nodes) == 2
    xf = torch.randn(7, dtype=torch.float64) + 3.0
    a, b = dt.compile(inv_sum)(xf)
    torch.testing.assert_close(a, (xf + xf) ** -3, rtol=1e-15, atol=0.0)
    torch.testing.assert_close(b, 1.0 / xf, rtol=1e-15, atol=0.0)


def test_negative_literal_power_kept_by_saving_forward():
    # the gradient graph's copy of the forward (augmented_forward's saving forward) rebuilt x ** -1's
    # reciprocal without its power: an integer base was accepted there (float results where torch raises)
    from dtriton.grad import augmented_forward

    @dt.algorithm
    def inv_scaled(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return (X[i, j] ** -1 * dt.sum(X[i, j], over=j))[i, j]

    aug, _ = augmented_forward(inv_scaled, "all")
    x = torch.tensor([[1, 2, 3], [4, -5, 6]])
    with pytest.raises(dt.AlgorithmError, match="negative integer powers.*float"):
        aug.reference(x)
    xf = torch.randn(3, 5, dtype=torch.float64) + 3.0
    out, saved = dt.compile(aug)(xf)
    torch.testing.assert_close(out, xf ** -1 * xf.sum(1, keepdim=True), rtol=1e-14, atol=0.0)
    torch.testing.assert_close(saved, xf.sum(1), rtol=1e-14, atol=0.0)


def test_tensor_exponent_gradient_at_infinities_and_zeros():
    # the +-0.5 cases of a number exponent leaked into a tensor exponent's gradient: x ** (p - 1) at p = 1.5,
    # x = -inf was sqrt(-inf) = NaN where torch's pow_backward gives inf (and 0 at p = 0.5)
    x = torch.tensor([-INF, -INF, INF, INF, -0.0, 0.0, -0.0, -2.0, -2.0, -INF, 0.0], dtype=torch.float64)
    p = torch.tensor([1.5, 0.5, 1.5, 0.5, 1.5, 0.5, -0.5, 1.5, 0.5, -0.5, -0.5], dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        Xa, Pa = x.to(dtype).requires_grad_(True), p.to(dtype).requires_grad_(True)
        y = dt.compile_autograd(pow_tensor)(Xa, Pa)
        gx, gp = torch.autograd.grad(y, (Xa, Pa), torch.ones_like(y))
        X6, P6 = x.clone().requires_grad_(True), p.clone().requires_grad_(True)
        y6 = torch.pow(X6, P6)
        gx6, gp6 = torch.autograd.grad(y6, (X6, P6), torch.ones_like(y6))
        torch.testing.assert_close(y.detach(), y6.detach().to(dtype), **tol(dtype))
        same_signs(y.detach(), y6.detach().to(dtype))
        torch.testing.assert_close(gx, gx6.to(dtype), **tol(dtype))
        torch.testing.assert_close(gp, gp6.to(dtype), **tol(dtype))
        ref = pow_tensor.reference(x, p)
        torch.testing.assert_close(ref, y6.detach(), rtol=0, atol=0, equal_nan=True)


def test_bool_to_a_bool_power_raises_as_torch():
    # bool ** bool was typed int64 and computed; torch raises "pow" not implemented for 'Bool'
    @dt.algorithm
    def bool_pow(A: dt.Tensor["M"], B: dt.Tensor["M"]):
        i, = dt.axes("i:M")
        return (A[i] ** B[i])[i]

    @dt.algorithm
    def cmp_pow(X: dt.Tensor["M"], Y: dt.Tensor["M"]):
        i, = dt.axes("i:M")
        return ((X[i] > 0) ** (Y[i] > 0))[i]

    a, b = torch.tensor([True, False, True]), torch.tensor([True, True, False])
    with pytest.raises(RuntimeError, match="Bool"):
        a ** b
    with pytest.raises(dt.AlgorithmError, match=r"A\[i\].*B\[i\].*both torch.bool.*'Bool'"):
        dt.compile(bool_pow)(a, b)
    with pytest.raises(dt.AlgorithmError, match="both torch.bool"):
        bool_pow.reference(a, b)
    x, y = torch.randn(5), torch.randn(5)
    with pytest.raises(dt.AlgorithmError, match=r"\(X\[i\] > 0\).*both torch.bool"):
        dt.compile(cmp_pow)(x, y)
    # a bool base to an integer exponent and an integer base to a bool exponent stay torch's int64 powers
    ai, bi = torch.tensor([3, -2, 0]), torch.tensor([2, 5, 0])
    for p, q in ((a, bi), (ai, b)):
        out = torch.full((3,), -7, dtype=torch.int64)
        dt.compile(bool_pow)(p, q, out=out)
        assert torch.equal(out, p ** q), (out, p ** q)
