"""Argument constraints (``@dt.requires``): the library's torch convolutions and pools refuse the
arguments torch refuses (a stride or dilation below 1, a negative padding, a pool padding past half
the window, too few phase taps) and output sizes other than torch's, with a ShapeError naming the
argument, its value and the expected one; arguments that meet them still match torch in float64.
User-written algorithms without constraints keep their index-notation meaning (any output size)."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

import dtriton as dt
from dtriton import library as L
from dtriton.runtime import kernel as kernel_mod

from conftest import check, randn

X_NHWC, W_NHWC = (1, 7, 7, 4), (5, 3, 3, 4)


@pytest.mark.parametrize("args, message", [
    ((-1, 1, 1, 7, 7), "argument 'stride' must be >= 1, got -1"),
    ((0, 1, 1, 7, 7), "argument 'stride' must be >= 1, got 0"),
    ((1, 1, 0, 7, 7), "argument 'dilation' must be >= 1, got 0"),
    ((1, -1, 1, 3, 3), "argument 'padding' must be >= 0, got -1"),
    ((1, 1, 1, 9, 7), "argument 'Ho' must be (H + 2 * padding - dilation * (R - 1) - 1) // stride + 1 = 7"),
    ((1, 1, 1, 7, 6), "argument 'Wo' must be (W + 2 * padding - dilation * (Q - 1) - 1) // stride + 1 = 7"),
    ((2, 1, 1, 7, 7), "= 4 (H=7, padding=1, dilation=1, R=3, stride=2), got 7"),
])
def test_conv2d_nhwc_refuses_what_torch_refuses(args, message):
    k = dt.compile(L.conv2d_nhwc)
    with pytest.raises(dt.ShapeError, match="^conv2d_nhwc: ") as e:
        k(randn(*X_NHWC), randn(*W_NHWC), *args)
    assert message in str(e.value)
    with pytest.raises(dt.ShapeError):   # the reference evaluator checks them too
        L.conv2d_nhwc(randn(*X_NHWC), randn(*W_NHWC), *args)


@pytest.mark.parametrize("alg, args, message", [
    (L.conv1d, (randn(1, 3, 10), randn(2, 3, 3), -2, 0, 1, 4), "conv1d: argument 'stride' must be >= 1, got -2"),
    (L.conv1d, (randn(1, 3, 10), randn(2, 3, 3), 1, 0, 1, 10), "argument 'Lo' must be"),
    (L.conv2d, (randn(1, 2, 6, 5), randn(3, 2, 3, 3), 1, 0, 1, 4, 4), "conv2d: argument 'Wo' must be"),
    (L.depthwise_conv2d_nhwc, (randn(1, 5, 5, 3), randn(3, 3, 3), 1, -1, 5, 5), "argument 'padding' must be >= 0"),
    (L.conv3d, (randn(1, 2, 4, 4, 4), randn(1, 2, 3, 3, 3), 1, 0, 3, 2, 2), "conv3d: argument 'Do' must be"),
    (L.conv_transpose2d, (randn(1, 3, 5, 5), randn(3, 2, 3, 3), 2, 1, 1, 11, 9),
     "argument 'Ho' must be < (H - 1) * stride - 2 * padding + dilation * (R - 1) + 1 + max(stride, dilation) = 11"),
    (L.conv_transpose2d_phases, (randn(1, 3, 5, 5), randn(3, 2, 3, 3), 2, 1, 5, 5, 1),
     "conv_transpose2d_phases: argument 'J' must be >= (max(R, Q) + stride - 1) // stride = 2 (R=3, Q=3, stride=2), got 1"),
    (L.conv_transpose2d_phases, (randn(1, 3, 5, 5), randn(3, 2, 3, 3), 2, 1, 7, 5, 2), "argument 'Hh' must be"),
    (L.max_pool2d_window, (randn(1, 5, 5), 2, 1, 2, 8, 8), "max_pool2d_window: argument 'p' must be <= K // 2 = 1 (K=2), got 2"),
    (L.avg_pool2d_window, (randn(1, 5, 5), 3, 0, 1, 5, 5), "avg_pool2d_window: argument 's' must be >= 1, got 0"),
    (L.avg_pool2d_window, (randn(1, 5, 5), 3, 2, 1, 3, 2), "argument 'Wo' must be (W + 2 * p - K) // s + 1 = 3"),
    (L.gqa_attention, (randn(1, 7, 3, 2), randn(1, 2, 3, 2), randn(1, 2, 3, 2), 0.5, 3), "(H - 1) // rep < G"),
])
def test_library_ops_refuse_bad_arguments(alg, args, message):
    with pytest.raises(dt.ShapeError) as e:
        dt.compile(alg)(*args)
    assert message in str(e.value)


def test_valid_arguments_still_match_torch():
    X, W = randn(2, 7, 5, 3), randn(4, 3, 2, 3)   # odd sizes, a non-square window
    ho, wo = (7 + 2 - 2 * 2 - 1) // 2 + 1, (5 + 2 - 2 * 1 - 1) // 2 + 1
    check(L.conv2d_nhwc, (X, W, 2, 1, 2, ho, wo),
          torch_ref=lambda x, w, s, p, d, *_: F.conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), stride=s,
                                                      padding=p, dilation=d).permute(0, 2, 3, 1))
    # conv_transpose2d by phases with the J and Hh the constraints ask for: (5 - 1) 2 - 2 + 3 + 1 = 10 = 5 * 2
    X, W = randn(1, 3, 5, 5), randn(3, 2, 3, 3)
    out = dt.compile(L.conv_transpose2d_phases)(X, W, 2, 1, 5, 5, 2)
    ref = F.conv_transpose2d(X.double(), W.double(), stride=2, padding=1, output_padding=1)
    torch.testing.assert_close(out.reshape(ref.shape).double(), ref, rtol=1e-4, atol=1e-4)
    out = dt.compile(L.max_pool2d_window)(randn(3, 6, 5), 3, 2, 1, 3, 3)
    assert out.shape == (3, 3, 3)


@dt.algorithm
def free_conv(X: dt.Tensor["N", "H"], Wt: dt.Tensor["R"], stride: int, Ho: int):
    """A user-written strided correlation: no constraints, any output size and stride."""
    n, h, r = dt.axes("n h:Ho r")
    return dt.sum(X.pad(0.0)[n, h * stride + r] * Wt[r], over=r)[n, h]


def test_user_algorithms_keep_free_sizes():
    X, W = randn(2, 9), randn(3)
    out = dt.compile(free_conv)(X, W, -1, 4)   # a negative stride reads the zero padding: index notation
    ref = torch.zeros(2, 4, dtype=torch.float64)
    for h in range(4):
        for r in range(3):
            if 0 <= -h + r < 9:
                ref[:, h] += X[:, -h + r].double() * W[r].double()
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    assert free_conv.requires == () and free_conv.requires_check is None


def test_requires_decorator_errors():
    with pytest.raises(dt.AlgorithmError, match="not a comparison"):
        dt.requires("stride + 1")(free_conv)
    with pytest.raises(dt.AlgorithmError, match="names 'padding', which is neither"):
        dt.requires("padding >= 0")(free_conv)
    with pytest.raises(dt.AlgorithmError, match="above @dt.algorithm"):
        dt.requires("stride >= 1")(lambda X: X)


def test_user_requires_with_hint_and_general_condition():
    @dt.requires("stride >= 1", ("Ho * stride <= H", "the windows must start inside X"))
    @dt.algorithm
    def strided(X: dt.Tensor["N", "H"], Wt: dt.Tensor["R"], stride: int, Ho: int):
        n, h, r = dt.axes("n h:Ho r")
        return dt.sum(X.pad(0.0)[n, h * stride + r] * Wt[r], over=r)[n, h]
    k = dt.compile(strided)
    with pytest.raises(dt.ShapeError, match=r"strided: requires Ho \* stride <= H, which fails for Ho=5, stride=2, H=9; "
                                            "the windows must start inside X"):
        k(randn(2, 9), randn(3), 2, 5)
    assert k(randn(2, 9), randn(3), 2, 4).shape == (2, 4)


def test_fast_path_checks_constraints(monkeypatch):
    """A signature key holds an int's 1 and multiple-of-16 facts only, so a stride of -3 shares the
    signature of a stride of 3: the values of the constrained scalars key the fast launchers too, and
    a call with new ones takes the slow path, which checks them."""
    k = dt.compile(L.conv1d)
    X, W = randn(1, 3, 10), randn(2, 3, 3)
    good, bad = (X, W, 3, 0, 1, 3), (X, W, -3, 0, 1, 3)
    assert k._key(good)[0] == k._key(bad)[0]
    ran = []
    k._fast[k._key(good)[0] + k._sized(good)] = lambda args: ran.append(args) or "fast"
    monkeypatch.setattr(kernel_mod, "_fast_ok", lambda: True)
    assert k(*good) == "fast"
    with pytest.raises(dt.ShapeError, match="'stride' must be >= 1, got -3"):
        k(*bad)
    assert len(ran) == 1
    assert k._sized(good) != k._sized(bad)


def test_constraint_check_is_cheap():
    args = (randn(1, 3, 10), randn(2, 3, 3), 3, 0, 1, 3)
    check_fn = L.conv1d.requires_check
    assert check_fn(args) == -1
    t0 = time.perf_counter()
    for _ in range(2000):
        check_fn(args)
    per_call = (time.perf_counter() - t0) / 2000
    assert per_call < 20e-6, per_call   # ~1 us on a shared CPU: a few integer comparisons


@pytest.mark.parametrize("alg, args", [
    ("conv2d_nhwc", lambda: (randn(1, 1, 1, 4), randn(5, 5, 5, 4), 1, 0, 1, 0, 0)),
    ("conv2d_nhwc", lambda: (randn(1, 2, 2, 4), randn(5, 3, 3, 4), 1, 0, 1, 0, 0)),
    ("depthwise_conv2d_nhwc", lambda: (randn(1, 2, 7, 4), randn(3, 3, 4), 1, 0, 0, 5)),
    ("conv1d", lambda: (randn(1, 3, 2), randn(2, 3, 3), 1, 0, 1, 0)),
])
def test_window_larger_than_the_padded_input_is_refused(alg, args):
    """A window larger than the padded input (torch: "kernel size can't be greater than actual input size") is
    refused before the output-size rule, which would ask for a negative size (s12 trial: "must be ... = -3,
    got 0", then "must be >= 0")."""
    with pytest.raises(dt.ShapeError, match="larger than the padded input"):
        dt.compile(getattr(L, alg))(*args())


@pytest.mark.parametrize("args, message", [
    ((0, 0, 5), "chained: argument 'k' must be >= 1 (in 1 <= k <= N), got 0"),
    ((11, 0, 5), "chained: argument 'k' must be <= N = 10 (in 1 <= k <= N), got 11; chained reads X as (M, N), got shape (3, 10)"),
    ((3, 5, 5), "chained: argument 'lo' must be < hi = 5 (in 0 <= lo < hi <= N), got 5; a window inside the row"),
    ((3, 0, 12), "chained: argument 'hi' must be <= N = 10 (in 0 <= lo < hi <= N), got 12; a window inside the row; chained reads X as (M, N), got shape (3, 10)"),
    ((3, -1, 5), "chained: argument 'lo' must be >= 0 (in 0 <= lo < hi <= N), got -1; a window inside the row"),
    ((5, 0, 5), "chained: requires 0 < k * 2 < N - 1, which fails at k * 2 < N - 1 (k * 2 = 10, N - 1 = 9) for k=5, N=10; chained reads X as (M, N), got shape (3, 10)"),
])
def test_chained_requires_names_the_failing_side(args, message):
    """A chain (``1 <= k <= N``) reports the first link that fails with its values, read from the side
    of its name (was: "requires 1 <= k <= N, which fails for k=11, N=10"; trial finding), and the layout
    of the tensor a size it shows is read from (not for a link of arguments only)."""
    @dt.requires("1 <= k <= N", ("0 <= lo < hi <= N", "a window inside the row"), "0 < k * 2 < N - 1")
    @dt.algorithm
    def chained(X: dt.Tensor["M", "N"], k: int, lo: int, hi: int):
        i, j = dt.axes("i j")
        return (X[i, j] * k)[i, j]
    with pytest.raises(dt.ShapeError) as e:
        dt.compile(chained)(randn(3, 10), *args)
    assert str(e.value) == message
    X = randn(3, 10, dtype=torch.float64)
    torch.testing.assert_close(dt.compile(chained)(X, 3, 0, 5), X * 3)   # all links hold: it runs
