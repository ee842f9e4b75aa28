"""``dt.axes`` with one name, and ``out=`` of the wrong dtype (session 10 fixes).

``i = dt.axes("i")`` gives the axis itself (it was a 1-tuple, so ``X.pad(0.0)[i + 1]`` failed with
Python's "can only concatenate tuple" error); ``i, = dt.axes("i")`` still unpacks it. An ``out=``
tensor of the wrong dtype is a :class:`dt.DTypeError` (a ShapeError and a TypeError too) naming
the output, both dtypes and the fix.
"""
from __future__ import annotations

import pytest
import torch

import dtriton as dt


def _shift_reference(X: torch.Tensor) -> torch.Tensor:
    return torch.cat([X[1:], torch.zeros(1, dtype=X.dtype)]) - X


@dt.algorithm
def diff_plain(X: dt.Tensor["N"]):
    i = dt.axes("i")   # one name: the axis itself
    return (X.pad(0.0)[i + 1] - X[i])[i]


@dt.algorithm
def diff_unpacked(X: dt.Tensor["N"]):
    i, = dt.axes("i")   # the spelling of the docs and the library: unpacks as a 1-tuple
    (j,) = dt.axes("j")
    return (X.pad(0.0)[i + 1] - X[i] + dt.sum(X[j], over=dt.axes("j")) * 0.0)[i]


@pytest.mark.parametrize("alg", [diff_plain, diff_unpacked], ids=["plain", "unpacked"])
def test_one_axis_both_spellings(alg):
    X = torch.randn(11, dtype=torch.float64)
    want = _shift_reference(X)
    got = dt.compile(alg)(X, out=torch.full((11,), float("nan"), dtype=torch.float64))
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(alg.reference(X), want)


def test_one_name_is_the_axis_and_a_one_tuple():
    i = dt.axes("i")
    assert isinstance(i, dt.Axis) and i.name == "i"
    (a,) = dt.axes("i")
    assert isinstance(a, dt.Axis) and a.name == "i"
    assert len(i) == 1 and list(i) == [i] and i[0] is i and i[-1] is i
    with pytest.raises(IndexError, match="index 0 or -1"):
        i[1]
    d = dt.axes("d:D")
    assert d.name == "d" and d.size == "D"
    several = dt.axes("i j")
    assert isinstance(several, tuple) and [a.name for a in several] == ["i", "j"]


def test_a_tuple_of_axes_in_an_expression_says_how_to_unpack():
    with pytest.raises(dt.AlgorithmError, match=r"dt\.axes with several names returns a tuple.*i, j = dt\.axes"):
        @dt.algorithm
        def bad(X: dt.Tensor["N"]):
            ij = dt.axes("i j")
            return dt.exp(ij)[ij[0]]


def test_axis_still_fixes_an_output_layout():
    @dt.algorithm
    def iota(X: dt.Tensor["N"]):
        i = dt.axes("i")
        return (X[i] * 0 + i)[i]
    X = torch.randn(6)
    torch.testing.assert_close(dt.compile(iota)(X), torch.arange(6, dtype=torch.float32))


@dt.algorithm
def scale(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X[i, j] * 2.0)[i, j]


@pytest.mark.parametrize("given", [torch.float16, torch.float64, torch.int32])
def test_out_of_the_wrong_dtype_is_a_dtype_error(given):
    X = torch.randn(3, 5)
    kernel = dt.compile(scale)
    kernel(X, out=torch.empty(3, 5))   # the right out= first: the signature's cached path after it
    for _ in range(2):
        with pytest.raises(dt.DTypeError) as info:
            kernel(X, out=torch.empty(3, 5, dtype=given))
        msg = str(info.value)
        assert f"out= for output 'out' has dtype {given}" in msg and "is torch.float32" in msg
        assert "torch.empty((3, 5), dtype=torch.float32)" in msg and f"dt.cast(expr, {given})" in msg
        assert isinstance(info.value, dt.ShapeError) and isinstance(info.value, TypeError)


def test_out_of_the_wrong_shape_stays_a_shape_error():
    X = torch.randn(3, 5)
    with pytest.raises(dt.ShapeError, match=r"must have shape \(3, 5\)") as info:
        dt.compile(scale)(X, out=torch.empty(5, 3))
    assert not isinstance(info.value, dt.DTypeError)


def test_unsupported_input_dtype_is_a_dtype_error():
    with pytest.raises(dt.DTypeError, match="unsupported dtype torch.complex64"):
        dt.compile(scale)(torch.randn(3, 5, dtype=torch.complex64))


def test_out_dtype_error_through_autograd():
    X = torch.randn(3, 5, requires_grad=True)
    with torch.no_grad(), pytest.raises(dt.DTypeError, match="has dtype torch.float16"):
        dt.compile_autograd(scale)(X, out=torch.empty(3, 5, dtype=torch.float16))
