"""Gradients of algorithms with an axis that only appears inside index expressions, sized by a
declared size symbol (``dt.axes("h:Ho")`` with ``Ho: int``): strided, padded convolutions and
pooling windows. Building the saving forward (``save="auto"`` with an epilogue, ``save=["out"]``)
and the backward used to count only axes that index a tensor directly as sized, and failed with
"output axes ['h', 'w'] ... index no tensor".

Numeric tests compare against torch autograd of the reference in float64 on fresh random data, odd
sizes, stride 2 and padding 1; the saving forward and the backward run compiled (Triton's
interpreter) with outputs poisoned with NaN. Shapes are tiny: the derived input gradient of a
strided read is a dense scan.
"""

from __future__ import annotations

import pytest
import torch

import dtriton as dt
import dtriton.library as L
from conftest import poisoned_outputs, randn
from dtriton.grad import augmented_forward

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")


@dt.algorithm
def conv2d_bias_relu(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["O", "R", "Q", "C"], b: dt.Tensor["O"],
                     s: int, p: int, Ho: int, Wo: int):
    """A channels-last conv with a bias and ReLU epilogue."""
    n, o, c, h, w, r, q = dt.axes("n o c h:Ho w:Wo r q")
    y = dt.sum(X.pad(0.0)[n, h * s + r - p, w * s + q - p, c] * Wt[o, r, q, c], over=(c, r, q))
    return dt.maximum(y + b[o], 0.0)[n, h, w, o]


@dt.algorithm
def conv2d_tanh(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["O", "R", "Q", "C"], s: int, p: int,
                Ho: int, Wo: int):
    """A channels-last conv with a tanh epilogue."""
    n, o, c, h, w, r, q = dt.axes("n o c h:Ho w:Wo r q")
    y = dt.sum(X.pad(0.0)[n, h * s + r - p, w * s + q - p, c] * Wt[o, r, q, c], over=(c, r, q))
    return dt.tanh(y)[n, h, w, o]


@dt.algorithm
def conv1d_bias_sigmoid(X: dt.Tensor["N", "C", "L"], Wt: dt.Tensor["O", "C", "R"], b: dt.Tensor["O"],
                        s: int, p: int, Lo: int):
    """A 1-D conv (output positions ``t:Lo``) with a bias and sigmoid epilogue."""
    n, o, c, t, r = dt.axes("n o c t:Lo r")
    y = dt.sum(X.pad(0.0)[n, c, t * s + r - p] * Wt[o, c, r], over=(c, r))
    return dt.sigmoid(y + b[o])[n, o, t]


def _reference_grads(alg, args, wrt, dy):
    """torch autograd of ``alg.reference`` in float64: the gradients wrt the arguments named in ``wrt``."""
    x64 = [a.double().requires_grad_(p.name in wrt) if isinstance(a, torch.Tensor) else a
           for a, p in zip(args, alg.params)]
    ref = alg.reference(*x64)
    return torch.autograd.grad(ref, [x for x, p in zip(x64, alg.params) if p.name in wrt], dy.double())


def _saved_run(alg, args, wrt, save):
    """Gradients from the saving forward (``augmented_forward(alg, save)``) and the derived backward,
    compiled with poisoned outputs, and torch's in float64."""
    aug, names = augmented_forward(alg, save)
    ga = dt.grad(alg, wrt, save=names)
    outs = dt.compile(aug)(*args, out=poisoned_outputs(aug, args))
    outs = outs if isinstance(outs, tuple) else (outs,)
    assert len(outs) == 2 and not torch.isnan(outs[1]).any()
    if save == ["out"]:   # the saved copy of the output
        torch.testing.assert_close(outs[1].double(), outs[0].double(), rtol=1e-6, atol=1e-6)
    dy = randn(*outs[0].shape, gen=torch.Generator().manual_seed(5))
    got = {}
    for bwd in ga.algorithms:
        bargs = [*args, dy, *outs[1:]]
        r = dt.compile(bwd)(*bargs, out=poisoned_outputs(bwd, bargs))
        r = r if isinstance(r, tuple) else (r,)
        got.update({nm: r[oi] for nm, (ai, oi) in ga.locate.items() if ga.algorithms[ai] is bwd})
    return [got[w] for w in wrt], _reference_grads(alg, args, wrt, dy)


def _close(got, want, tol=1e-4):
    for g, w in zip(got, want):
        assert not torch.isnan(g).any()
        torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol)


def test_conv_bias_relu_through_compile_default_save(gen):
    """The fresh-user path: ``dt.compile(alg)(X with requires_grad, ...)`` (save="auto" saves the
    conv's sum for the ReLU's gradient), loss through all three tensor inputs."""
    X, Wt, b = randn(2, 5, 5, 3, gen=gen), randn(4, 3, 3, 3, gen=gen), randn(4, gen=gen)
    xs = [t.clone().requires_grad_() for t in (X, Wt, b)]
    y = dt.compile(conv2d_bias_relu)(*xs, 2, 1, 3, 3)
    assert y.shape == (2, 3, 3, 4)
    dy = randn(*y.shape, gen=gen)
    (y * dy).sum().backward()
    want = _reference_grads(conv2d_bias_relu, [X, Wt, b, 2, 1, 3, 3], ["X", "Wt", "b"], dy)
    _close([t.grad for t in xs], want)


def test_conv_tanh_saving_the_sum(gen):
    """save="auto" on a tanh epilogue (saves the conv's sum), then ``save=["sum0"]`` named."""
    args = [randn(1, 5, 5, 3, gen=gen), randn(3, 3, 3, 3, gen=gen) * 0.5, 2, 1, 3, 3]
    for save in ("auto", ["sum0"]):
        aug, names = augmented_forward(conv2d_tanh, save)
        assert names == ("sum0",)
        ga = dt.grad(conv2d_tanh, ["X", "Wt"], save=names)
        outs = dt.compile(aug)(*args, out=poisoned_outputs(aug, args))
        dy = randn(*outs[0].shape, gen=gen)
        got = {}
        for bwd in ga.algorithms:
            bargs = [*args, dy, outs[1]]
            r = dt.compile(bwd)(*bargs, out=poisoned_outputs(bwd, bargs))
            r = r if isinstance(r, tuple) else (r,)
            got.update({nm: r[oi] for nm, (ai, oi) in ga.locate.items() if ga.algorithms[ai] is bwd})
        _close([got["X"], got["Wt"]], _reference_grads(conv2d_tanh, args, ["X", "Wt"], dy))


def test_conv1d_bias_sigmoid_through_compile_autograd(gen):
    """A 1-D conv (``t:Lo``) with an epilogue through ``compile_autograd`` (default save="auto"), odd length."""
    X, Wt, b = randn(2, 3, 7, gen=gen), randn(4, 3, 3, gen=gen), randn(4, gen=gen)
    xs = [t.clone().requires_grad_() for t in (X, Wt, b)]
    y = dt.compile_autograd(conv1d_bias_sigmoid)(*xs, 2, 1, 4)
    dy = randn(*y.shape, gen=gen)
    (y * dy).sum().backward()
    _close([t.grad for t in xs], _reference_grads(conv1d_bias_sigmoid, [X, Wt, b, 2, 1, 4], ["X", "Wt", "b"], dy))


@pytest.mark.parametrize("alg,args,wrt", [
    (L.conv2d_nhwc, lambda g: [randn(1, 5, 5, 3, gen=g), randn(2, 3, 3, 3, gen=g), 2, 1, 1, 3, 3], ["X", "Wt"]),
    (L.depthwise_conv2d_nhwc, lambda g: [randn(2, 5, 5, 3, gen=g), randn(3, 3, 3, gen=g), 2, 1, 3, 3], ["X", "Wt"]),
    (L.conv1d, lambda g: [randn(2, 3, 7, gen=g), randn(2, 3, 3, gen=g), 2, 1, 1, 4], ["X", "Wt"]),
    (L.max_pool2d_window, lambda g: [randn(3, 5, 5, gen=g), 3, 2, 1, 3, 3], ["X"]),
    (L.avg_pool2d_window, lambda g: [randn(3, 5, 5, gen=g), 3, 2, 1, 3, 3], ["X"]),
    (L.conv_transpose2d, lambda g: [randn(1, 2, 3, 3, gen=g), randn(2, 3, 3, 3, gen=g), 2, 1, 1, 5, 5], ["X", "Wt"]),
], ids=["conv2d_nhwc", "depthwise", "conv1d", "max_pool", "avg_pool", "conv_transpose2d"])
def test_library_saving_the_output(gen, alg, args, wrt):
    """``save=["out"]`` on the library's convolutions and pooling windows: the saving forward
    stores the output beside itself and the backward reads it where it needs it."""
    got, want = _saved_run(alg, args(gen), wrt, ["out"])
    _close(got, want)


def test_conv_tanh_save_all(gen):
    """``save="all"`` (every reduction stage) on the tanh conv."""
    got, want = _saved_run(conv2d_tanh, [randn(1, 5, 5, 3, gen=gen), randn(3, 3, 3, 3, gen=gen) * 0.5, 2, 1, 3, 3],
                           ["X", "Wt"], "all")
    _close(got, want)


def test_library_conv_compile_autograd_save_out(gen):
    """``dt.compile_autograd(conv2d_nhwc, save=["out"])`` end to end."""
    X, Wt = randn(1, 5, 5, 3, gen=gen), randn(2, 3, 3, 3, gen=gen)
    xs = [t.clone().requires_grad_() for t in (X, Wt)]
    y = dt.compile_autograd(L.conv2d_nhwc, save=["out"])(*xs, 2, 1, 1, 3, 3)
    dy = randn(*y.shape, gen=gen)
    (y * dy).sum().backward()
    _close([t.grad for t in xs], _reference_grads(L.conv2d_nhwc, [X, Wt, 2, 1, 1, 3, 3], ["X", "Wt"], dy))
