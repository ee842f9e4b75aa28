"""The dtype of a reduction of Python numbers only (session 18 trial): a count such as ``sum over r, q
of where(c, 1.0, 0.0)`` promotes as a Python number. The gradient of a mean divides by one (the
window size of ``avg_pool2d_window``), and a max's gradient by its tie count; both used to be typed
float64, so the gradients of float32 inputs were written in float64 and converted. Now the gradient
is written in the input's dtype (computed in float32, float64 for float64 inputs); values against
float64 torch, poisoned outputs, odd shapes, overlapping windows and padding.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import dtriton as dt
import dtriton.library as L
from dtriton.ir import output_dtypes

TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float64: 1e-12}
POOLS = {"avg": (L.avg_pool2d_window, F.avg_pool2d), "max": (L.max_pool2d_window, F.max_pool2d)}


def _torch_grad(tf, X: torch.Tensor, dy: torch.Tensor, K: int, s: int, p: int) -> torch.Tensor:
    Xd = X.detach().double().clone().requires_grad_()
    (tf(Xd[:, None], K, s, p)[:, 0] * dy.double()).sum().backward()
    return Xd.grad


@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_pool_gradient_is_written_in_the_input_dtype(kind, dtype):
    alg, tf = POOLS[kind]
    N, H, W, K, s, p = 2, 7, 5, 3, 2, 1
    Ho, Wo = (H + 2 * p - K) // s + 1, (W + 2 * p - K) // s + 1
    bwd = dt.grad(alg)["X"]
    dtypes = {"X": dtype, "grad_out": dtype}
    assert output_dtypes(bwd, dtypes) == [dtype]
    g = torch.Generator().manual_seed(5)
    X = torch.randn(N, H, W, generator=g, dtype=torch.float64).to(dtype)
    dy = torch.randn(N, Ho, Wo, generator=g, dtype=torch.float64).to(dtype)
    want = _torch_grad(tf, X, dy, K, s, p)
    out = torch.full((N, H, W), float("nan"), dtype=dtype)
    got = dt.compile(bwd)(X, K, s, p, Ho, Wo, dy, out=out)
    assert got is out and got.dtype == dtype
    err = ((got.double() - want).norm() / want.norm()).item()
    assert err < TOL[dtype], err


def test_avg_pool_autograd_float32_writes_float32():
    """compile_autograd: the backward algorithm's output is float32 for float32 inputs (no float64
    buffer converted afterwards); the gradient matches float64 torch on an odd shape."""
    N, H, W, K, s, p = 3, 11, 4, 3, 2, 1
    Ho, Wo = (H + 2 * p - K) // s + 1, (W + 2 * p - K) // s + 1
    f = dt.compile_autograd(L.avg_pool2d_window)
    assert output_dtypes(dt.grad(L.avg_pool2d_window)["X"], {"X": torch.float32, "grad_out": torch.float32}) \
        == [torch.float32]
    g = torch.Generator().manual_seed(7)
    X = torch.randn(N, H, W, generator=g).requires_grad_()
    dy = torch.randn(N, Ho, Wo, generator=g)
    (f(X, K, s, p, Ho, Wo) * dy).sum().backward()
    want = _torch_grad(F.avg_pool2d, X.detach(), dy, K, s, p)
    assert X.grad.dtype == torch.float32
    torch.testing.assert_close(X.grad.double(), want, rtol=1e-5, atol=1e-6)


@dt.algorithm
def positives(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    c = dt.sum(dt.where(X[i, j] > 0, 1.0, 0.0), over=j)
    return c[i], (X[i, 0] / (c + 1.0))[i]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_reduction_of_literals_promotes_as_a_python_number(dtype):
    """A count written with literals is float32 as an output (torch's ``torch.where(c, 1., 0.).sum(1)``)
    and keeps X's dtype inside an expression (it was float64 in both places)."""
    X = torch.randn(4, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(dtype)
    assert output_dtypes(positives, {"X": dtype}) == [torch.float32, dtype]
    cnt = (X.double() > 0).double().sum(1)
    want = (cnt, X.double()[:, 0] / (cnt + 1.0))
    outs = (torch.full((4,), float("nan")), torch.full((4,), float("nan"), dtype=dtype))
    for got in (positives.reference(X), dt.compile(positives)(X, out=outs)):
        assert [v.dtype for v in got] == [torch.float32, dtype]
        for v, w in zip(got, want):
            assert ((v.double() - w).norm() / w.norm()).item() < TOL[dtype]
