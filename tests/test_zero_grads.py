"""An input that requires grad but that no output depends on (only through a comparison, or not at
all), or whose derived gradient is identically zero, gets a zeros gradient of its shape and dtype
through ``torch.autograd.grad`` and ``.backward()``, as torch gives an input its operation used
(session 8, "F4": dtriton returned None, so ``torch.autograd.grad`` raised "appears to not have been
used in the graph" and ``.grad`` stayed None)."""
from __future__ import annotations

import pytest
import torch

import dtriton as dt
from dtriton.integrations.steps import BackwardStep


@dt.algorithm
def through_condition(X: dt.Tensor["M", "N"], W: dt.Tensor["N"]):
    i, j = dt.axes("i j")
    return (X[i, j] * 2.0 + dt.where(W[j] > 0, 1.0, 0.0))[i, j]


@dt.algorithm
def unused_input(X: dt.Tensor["M", "N"], W: dt.Tensor["N"], b: dt.Tensor["M"]):
    i, j = dt.axes("i j")
    return (dt.sum(X[i, j], over=j) * 3.0)[i], (X[i, j] * W[j])[i, j]


def torch_through_condition(X, W):
    return X * 2.0 + torch.where(W > 0, 1.0, 0.0) + 0.0 * W   # 0 * W: torch's W used, its gradient zeros


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_input_only_in_a_condition_gets_zeros(dtype):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(7, 5, generator=g).to(dtype).requires_grad_(True)
    W = torch.randn(5, generator=g).to(dtype).requires_grad_(True)
    k = dt.compile_autograd(through_condition)
    for _ in range(2):   # the first call and a repeated signature
        y = k(X, W)
        G = torch.randn(y.shape, generator=g).to(dtype)
        gx, gw = torch.autograd.grad(y, (X, W), G)
        assert gw.shape == W.shape and gw.dtype == W.dtype and gw.device == W.device
        assert torch.equal(gw, torch.zeros_like(W))
        torch.testing.assert_close(gx, 2.0 * G)
    X.grad = W.grad = None
    k(X, W).sum().backward()
    assert W.grad is not None and torch.equal(W.grad, torch.zeros_like(W))
    W.grad.add_(1.0)   # a materialised .grad: writable, accumulates
    k(X, W).sum().backward()
    assert torch.equal(W.grad, torch.ones_like(W))
    torch.testing.assert_close(X.grad, torch.full_like(X, 4.0))


def test_only_the_zero_input_requires_grad():
    W = torch.randn(5, dtype=torch.float64, requires_grad=True)
    X = torch.randn(3, 5, dtype=torch.float64)
    y = dt.compile_autograd(through_condition)(X, W)
    (gw,) = torch.autograd.grad(y, W, torch.ones_like(y))
    assert torch.equal(gw, torch.zeros_like(W))
    Wt = W.detach().clone().requires_grad_(True)
    (gt,) = torch.autograd.grad(torch_through_condition(X, Wt), Wt, torch.ones_like(y))
    torch.testing.assert_close(gw, gt)


def test_unused_input_and_an_output_without_gradient():
    g = torch.Generator().manual_seed(2)
    X = torch.randn(4, 6, generator=g, requires_grad=True)
    W = torch.randn(6, generator=g, requires_grad=True)
    b = torch.randn(4, generator=g, requires_grad=True)
    s, y = dt.compile_autograd(unused_input)(X, W, b)
    gx, gw, gb = torch.autograd.grad(s, (X, W, b), torch.ones_like(s), retain_graph=True)   # one output seeded
    assert torch.equal(gb, torch.zeros_like(b)) and torch.equal(gw, torch.zeros_like(W))
    torch.testing.assert_close(gx, torch.full_like(X, 3.0))
    gx, gw, gb = torch.autograd.grad(y, (X, W, b), torch.ones_like(y))
    assert torch.equal(gb, torch.zeros_like(b))
    torch.testing.assert_close(gw, X.detach().sum(0))


def test_backward_step_fills_zero_parameters():
    # the GPU's cached backward step (no fast launcher on the interpreter): a stand-in launcher
    calls = []

    def launch(bargs):
        calls.append(len(bargs))
        return bargs[0] * 2.0

    X, W = torch.randn(3, 4), torch.randn(4, dtype=torch.float64)
    step = BackwardStep([(launch, True, [(0, 0, torch.float32)])], {}, 2, [], (torch.float32,), zero_params=(1,))
    assert step.direct is None
    res = step((X, W), (torch.ones(3, 4),), ())
    assert res[0] is None and torch.equal(res[1], X * 2.0)
    assert res[2].shape == W.shape and res[2].dtype == W.dtype and torch.equal(res[2], torch.zeros_like(W))
    assert calls == [3]
