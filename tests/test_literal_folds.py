"""Functions of literals (``dt.log(3.0) * X``, ``dt.exp(2)``, ``dt.sqrt(2.0)``, ...) in the kernels'
precision: a float64 kernel gives float64-exact values (a printed ``tl.log(3.0)`` is evaluated in
float32 by Triton: 1e-8 relative off), and the special values are torch's (``log(0) = -inf``,
``log(-1) = sqrt(-1) = NaN``, ``exp(1000) = inf``). Checked on the interpreter against float64 torch,
outputs poisoned with NaN, at an odd size."""
from __future__ import annotations

import math

import pytest
import torch

import dtriton as dt

INF, NAN = float("inf"), float("nan")

#: (name, the function of a literal in the algorithm, the same in float64 torch)
LITERALS = [
    ("log3", lambda: dt.log(3.0), lambda: math.log(3.0)),
    ("log_int", lambda: dt.log(7), lambda: math.log(7.0)),
    ("exp2", lambda: dt.exp(2.0), lambda: math.exp(2.0)),
    ("sqrt2", lambda: dt.sqrt(2.0), lambda: math.sqrt(2.0)),
    ("rsqrt3", lambda: dt.rsqrt(3.0), lambda: 1.0 / math.sqrt(3.0)),
    ("tanh1", lambda: dt.tanh(1.0), lambda: math.tanh(1.0)),
    ("sigmoid1", lambda: dt.sigmoid(1.0), lambda: 1.0 / (1.0 + math.exp(-1.0))),
    ("nested", lambda: dt.exp(dt.log(3.0) * 0.5) + dt.sqrt(dt.abs(-5.0)), lambda: math.sqrt(3.0) + math.sqrt(5.0)),
    ("neg_tanh", lambda: -dt.tanh(0.5), lambda: -math.tanh(0.5)),
]


def _scaled(fn):
    @dt.algorithm
    def scaled(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return (fn() * X[i, j])[i, j]
    return scaled


@pytest.mark.parametrize("name, fn, ref", LITERALS, ids=[x[0] for x in LITERALS])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_function_of_literal_in_kernel_precision(name, fn, ref, dtype):
    x = torch.randn(5, 37, dtype=dtype) + 0.5
    out = torch.full_like(x, NAN)
    got = dt.compile(_scaled(fn))(x, out=out)
    assert got.data_ptr() == out.data_ptr()
    want = ref() * x.double()
    if dtype == torch.float64:
        torch.testing.assert_close(out, want, rtol=4e-16, atol=0.0)
    else:
        torch.testing.assert_close(out.double(), want, rtol=1.5e-7, atol=0.0)


def test_special_values_of_literals():
    @dt.algorithm
    def specials(X: dt.Tensor["M"]):
        i, = dt.axes("i")
        return ((dt.log(0.0) + X[i] * 0.0)[i], (dt.log(-1.0) * X[i])[i], (dt.sqrt(-2.0) + X[i])[i],
                (dt.exp(1000.0) * X[i])[i], (dt.sqrt(-0.0) * dt.abs(X[i]))[i])

    x = torch.tensor([1.5, 2.0, 3.25], dtype=torch.float64)
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    want = (torch.log(t(0.0)) + x * 0.0, torch.log(t(-1.0)) * x, torch.sqrt(t(-2.0)) + x, torch.exp(t(1000.0)) * x,
            torch.sqrt(t(-0.0)) * x.abs())
    for got, w in zip(dt.compile(specials)(x), want):
        torch.testing.assert_close(got, w, equal_nan=True, rtol=0.0, atol=0.0)
    got = dt.compile(specials)(x)[4]
    assert torch.equal(torch.signbit(got), torch.signbit(want[4]))   # -0.0 * |x|: negative zeros


@pytest.mark.parametrize("base", [2.0, 0.3, 3, 10.0])
def test_number_base_gradient_float64(base):
    # the gradient of c ** x is c ** x * log(c): log(c) of a literal, folded in double with the others
    # (the earlier special case of the gradient is gone; its test checked only bases whose log is not finite)
    @dt.algorithm
    def rpow(X: dt.Tensor["N"]):
        i, = dt.axes("i")
        return (base ** X[i])[i]

    x = torch.randn(13, dtype=torch.float64)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    dt.compile_autograd(rpow)(x1).sum().backward()
    torch.pow(base, x2).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-15, atol=0)
