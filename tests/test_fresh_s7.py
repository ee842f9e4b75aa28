"""Wrong results and unclear errors a fresh user found (session-6 trial), each checked against
torch in float64 and the reference evaluator on the interpreter, outputs poisoned first: integer
``//`` and ``%`` by zero, the gradient of ``dt.maximum`` and ``dt.minimum`` at ties, ``x ** p`` at
``x = 0``, and the messages for a repeated axis name, a float index and a backward schedule key.
"""

from __future__ import annotations

import pytest
import torch

import dtriton as dt


# ----------------------------------------------------------------------------------------------
# integer // and % by zero
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def int_div_mod(A: dt.Tensor["N"], B: dt.Tensor["N"]):
    i, = dt.axes("i")
    return (A[i] // B[i])[i], (A[i] % B[i])[i]


@dt.algorithm
def grouped_rows(X: dt.Tensor["M", "N"], Y: dt.Tensor["G", "N"], g: int):
    i, j = dt.axes("i j")
    return (X[i, j] * Y[i // g, j])[i, j]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16])
def test_integer_floor_division_and_modulo_of_negative_operands_match_torch(dtype):
    """``//`` floors and ``%`` takes the divisor's sign (Python's and torch's rounding), for every
    sign pair, in the kernel (poisoned outputs) and the reference."""
    a = torch.tensor([7, -7, 7, -7, 0, 5, -1, 1, 13, -13, 6], dtype=dtype)
    b = torch.tensor([2, 2, -2, -2, 3, -5, 4, -4, 1, 7, -6], dtype=dtype)
    want = (a // b, a % b)
    ref = int_div_mod.reference(a, b)
    outs = tuple(torch.full_like(w, -99) for w in want)
    got = dt.compile(int_div_mod)(a, b, out=outs)
    for w, r, g in zip(want, ref, got):
        assert torch.equal(r.long(), w.long()) and torch.equal(g.long(), w.long())


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_division_by_a_zero_in_the_data_raises_as_torch(dtype):
    """Found by a fresh user: ``A // B`` and ``A % B`` with a 0 in ``B`` gave 0 and ``A`` in the
    kernel while the reference raised torch's bare "ZeroDivisionError" RuntimeError. Both raise
    dt.ZeroDivisorError (a ZeroDivisionError and a ShapeError) naming the expression and where."""
    a = torch.tensor([7, -7, 5, 4, 1, 2, 3], dtype=dtype)
    b = torch.tensor([2, 3, 1, 0, 5, 0, 1], dtype=dtype)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        a // b
    for fn in (dt.compile(int_div_mod), int_div_mod.reference):
        with pytest.raises(dt.ZeroDivisorError, match=r"\(A\[i\] // B\[i\]\): the divisor B\[i\] is 0 at i = 3 "
                                                      r"\(2 elements\).*torch raises ZeroDivisionError.*"
                                                      r"dt.where\(B\[i\] == 0, 1, B\[i\]\)") as info:
            fn(a, b)
        assert isinstance(info.value, ZeroDivisionError) and isinstance(info.value, dt.ShapeError)


def test_integer_division_by_a_zero_argument_raises_naming_it():
    """``X[i // g]`` called with ``g = 0`` raised torch's bare RuntimeError from the reference."""
    X, Y = torch.randn(6, 5), torch.randn(3, 5)
    for fn in (dt.compile(grouped_rows), grouped_rows.reference):
        with pytest.raises(dt.ZeroDivisorError, match=r"\(i // g\): the divisor g is 0;"):
            fn(X, Y, 0)
    out = torch.full((6, 5), float("nan"))
    got = dt.compile(grouped_rows)(X, Y, 2, out=out)
    torch.testing.assert_close(got.double(), X.double() * Y.double()[torch.arange(6) // 2])


@pytest.mark.parametrize("op", ["//", "%"])
def test_a_literal_zero_divisor_is_an_algorithm_error(op):
    with pytest.raises(dt.AlgorithmError, match=rf"\(A\[i\] {op} 0\): an integer {op} by the literal 0 has no value"):
        @dt.algorithm
        def by_zero(A: dt.Tensor["N"]):
            i, = dt.axes("i")
            return (A[i] // 0 if op == "//" else A[i] % 0)[i]


