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


# ----------------------------------------------------------------------------------------------
# maximum / minimum at ties, and ReLU
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def max_min(X: dt.Tensor["M", "N"], Y: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (dt.maximum(X[i, j], Y[i, j]) * 2.0 + dt.minimum(X[i, j], 0.0) * 3.0)[i, j]


@dt.algorithm
def relu(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.where(X[i, j] <= 0.0, 0.0, X[i, j])[i, j]


def _ties(m: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """float64 values drawn from a few, so that ties with each other and with 0 are frequent."""
    pool = torch.tensor([0.0, -0.0, 1.5, -2.0, 0.25], dtype=torch.float64)
    return pool[torch.randint(0, len(pool), (m, n), generator=gen)]


def test_maximum_and_minimum_split_the_gradient_of_a_tie_as_torch():
    """dt.maximum and dt.minimum are torch.maximum and torch.minimum, gradient included: each side
    of a tie gets half (``dt.maximum(x, 0.0)`` at ``x == 0``: 0.5, where F.relu gives 0 and
    torch.clamp(x, min=0) gives 1). Compared with torch's autograd in float64, reference and kernel."""
    g = torch.Generator().manual_seed(3)
    x, y = _ties(5, 7, g), _ties(5, 7, g)
    gy = torch.randn(5, 7, generator=g, dtype=torch.float64)
    xt, yt = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
    ((torch.maximum(xt, yt) * 2.0 + torch.minimum(xt, torch.zeros_like(xt)) * 3.0) * gy).sum().backward()
    ga = dt.grad(max_min)
    ref = ga.reference(x, y, gy)
    torch.testing.assert_close(ref[0], xt.grad)
    torch.testing.assert_close(ref[1], yt.grad)
    assert bool((xt.grad[(x == 0) & (y != 0)] != 0).any())   # ties with the literal 0 do occur
    xk, yk = x.float().requires_grad_(True), y.float().requires_grad_(True)
    (dt.compile(max_min)(xk, yk) * gy.float()).sum().backward()
    torch.testing.assert_close(xk.grad.double(), xt.grad)
    torch.testing.assert_close(yk.grad.double(), yt.grad)


def test_relu_written_as_a_where_is_f_relu_in_value_and_gradient():
    """``dt.where(x <= 0, 0.0, x)`` is F.relu: 0 gradient at 0, NaN kept, -inf to 0; so is
    ``dtriton.library.linear_relu`` (it was dt.maximum(y, 0.0): gradient 0.5 at y == 0)."""
    from dtriton.library import linear_relu
    g = torch.Generator().manual_seed(4)
    x = _ties(6, 5, g)
    x[0, :3] = torch.tensor([float("nan"), float("-inf"), float("inf")], dtype=torch.float64)
    out = torch.full((6, 5), -5.0)
    got = dt.compile(relu)(x.float(), out=out)
    torch.testing.assert_close(got.double(), torch.relu(x), equal_nan=True)
    torch.testing.assert_close(relu.reference(x), torch.relu(x), equal_nan=True)
    gy = torch.randn(6, 5, generator=g, dtype=torch.float64)
    xt = x.clone().requires_grad_(True)
    (torch.relu(xt) * gy).sum().backward()
    xk = x.float().requires_grad_(True)
    (dt.compile(relu)(xk) * gy.float()).sum().backward()
    torch.testing.assert_close(xk.grad.double(), xt.grad, equal_nan=True)
    # linear_relu with exact zero pre-activations (rows of zeros, zero bias entries)
    X, W, b = torch.randn(5, 6, generator=g), torch.randn(7, 6, generator=g), torch.randn(7, generator=g)
    X[1], b[2] = 0.0, 0.0
    want = [t.double().clone().requires_grad_(True) for t in (X, W, b)]
    (torch.relu(want[0] @ want[1].T + want[2]) * 1.0).sum().backward()
    got = [t.clone().requires_grad_(True) for t in (X, W, b)]
    dt.compile(linear_relu)(*got).sum().backward()
    for w, t in zip(want, got):
        torch.testing.assert_close(t.grad.double(), w.grad, rtol=1e-5, atol=1e-5)


