"""Issue 17 (reliability): each case is a small legal input that gave a wrong value, a raw crash or a
wrong refusal; every test here failed before its fix. Shapes are tiny (Triton's interpreter)."""

from __future__ import annotations

import math

import pytest
import torch

import dtriton as dt

from conftest import poisoned_outputs


def same_bits(out: torch.Tensor, ref: torch.Tensor) -> None:
    """Equal values with equal signs of zero and equal NaN positions."""
    assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
    torch.testing.assert_close(out, ref, equal_nan=True)
    assert torch.equal(torch.signbit(out), torch.signbit(ref)), (out, ref)


# ----------------------------------------------------------------------------------------------
# case 9: a number raised to an expression
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("base", [2.0, 0.5, 1.0, 3])
def test_case9_number_to_the_power_of_an_expression(base):
    @dt.algorithm
    def rpow(X: dt.Tensor["N"]):
        i, = dt.axes("i")
        return (base ** X[i])[i]

    X = torch.tensor([-3.0, -0.5, 0.0, 0.25, 1.0, 7.0, 10.0])
    ref = torch.pow(torch.tensor(float(base), dtype=torch.float64), X.double()).float()
    torch.testing.assert_close(dt.compile(rpow)(X), ref)
    torch.testing.assert_close(rpow.reference(X), ref)


def test_case9_negative_or_zero_base_is_refused_with_a_clear_error():
    i, = dt.axes("i")
    with pytest.raises(dt.AlgorithmError, match="base"):
        (-2.0) ** i


# ----------------------------------------------------------------------------------------------
# case 3: signed zeros
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def recip_neg(X: dt.Tensor["N"]):
    i, = dt.axes("i")
    return (1.0 / (-X[i]))[i]


@dt.algorithm
def recip_tanh(X: dt.Tensor["N"]):
    i, = dt.axes("i")
    return (1.0 / dt.tanh(X[i]))[i]


@dt.algorithm
def signed_literals(X: dt.Tensor["N"]):
    i, = dt.axes("i")
    return (1.0 / (X[i] * 0.0 + -0.0))[i], (1.0 / (X[i] * 0.0 + 0.0))[i]


def test_case3_negation_keeps_the_sign_of_zero():
    X = torch.tensor([0.0, -0.0, 1.0, -2.0])
    same_bits(dt.compile(recip_neg)(X), 1.0 / (-X))
    same_bits(recip_neg.reference(X), 1.0 / (-X))


def test_case3_tanh_of_negative_zero():
    X = torch.tensor([-0.0, 0.0, -0.05, 0.05, -3.0, 3.0])
    same_bits(dt.compile(recip_tanh)(X), 1.0 / torch.tanh(X))


def test_case3_negative_zero_literal_is_kept_and_not_merged_with_zero():
    X = torch.tensor([-1.0, 2.0])     # X * 0.0 is -0.0 then +0.0
    want = (1.0 / (X * 0.0 + -0.0), 1.0 / (X * 0.0 + 0.0))
    for got in (dt.compile(signed_literals)(X), signed_literals.reference(X)):
        for g, w in zip(got, want):
            same_bits(g, w)


# ----------------------------------------------------------------------------------------------
# case 7: float math of an int scalar parameter
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", ["exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "abs"])
def test_case7_unary_math_of_an_int_scalar(fn):
    @dt.algorithm
    def f(X: dt.Tensor["N"], s: int):
        i, = dt.axes("i")
        return (X[i] + getattr(dt, fn)(s))[i]

    X = torch.randn(5)
    want = (X.double() + getattr(torch, fn)(torch.tensor(3.0, dtype=torch.float64))).float()
    torch.testing.assert_close(dt.compile(f)(X, 3), want)
    torch.testing.assert_close(f.reference(X, 3), want)


# ----------------------------------------------------------------------------------------------
# case 6: the default schedule of single-query attention (no free axis of the scores in the output)
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def one_query_attention(q: dt.Tensor["D"], K: dt.Tensor["S", "D"], V: dt.Tensor["S", "E"]):
    j, d, e = dt.axes("j d e")
    s = dt.sum(q[d] * K[j, d], over=d)
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[j, e], over=j) / dt.sum(p, over=j))[e]


def test_case6_default_schedule_of_single_query_attention():
    torch.manual_seed(0)
    q, K, V = torch.randn(8), torch.randn(11, 8), torch.randn(11, 5)
    out = dt.compile(one_query_attention)(q, K, V)
    want = torch.softmax(K.double() @ q.double(), 0) @ V.double()
    torch.testing.assert_close(out, want.float(), rtol=1e-5, atol=1e-5)
