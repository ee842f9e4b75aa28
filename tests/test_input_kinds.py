"""Inputs of other kinds than a dense tensor and a Python number: a sparse (non-strided) tensor is
refused with a ShapeError naming the argument and the fix (before, computing the call's key read its
data pointer and raised torch's RuntimeError); numpy integer and float scalars are taken as the
Python numbers they hold."""

from __future__ import annotations

import pytest
import torch

import dtriton as dt
from dtriton import library as L
from dtriton.runtime.args import signature_key

from conftest import randn


@pytest.mark.parametrize("to", ["to_sparse", "to_sparse_csr"])
@pytest.mark.parametrize("how", ["compile", "reference", "autograd"])
def test_sparse_tensor_is_refused_clearly(to, how):
    x = getattr(randn(4, 5), to)()
    f = {"compile": dt.compile(L.softmax), "reference": L.softmax, "autograd": dt.compile_autograd(L.softmax)}[how]
    with pytest.raises(dt.ShapeError, match=r"argument 'X' of softmax is a torch\.sparse_\w+ tensor; .*X\.to_dense\(\)"):
        f(x)


def test_sparse_signature_key():
    x = randn(3, 4).to_sparse()
    key, grad = signature_key((x,))
    assert key == ((torch.sparse_coo, False, x.dtype, x.device),) and not grad


@pytest.mark.parametrize("how", ["compile", "reference", "autograd"])
def test_nested_tensor_is_refused_clearly(how):
    """A nested tensor (strided layout, no sizes) is refused naming the argument and the fix (before: torch's
    RuntimeError "NestedTensorImpl doesn't support sizes" from the call's key)."""
    x = torch.nested.nested_tensor([randn(2, 6), randn(3, 6)])
    f = {"compile": dt.compile(L.softmax), "reference": L.softmax, "autograd": dt.compile_autograd(L.softmax)}[how]
    with pytest.raises(dt.ShapeError, match=r"argument 'X' of softmax is a nested tensor; .*to_padded_tensor"):
        f(x)


def test_numpy_scalars_are_numbers():
    np = pytest.importorskip("numpy")
    X, W = randn(1, 3, 11), randn(2, 3, 3)
    k = dt.compile(L.conv1d)
    plain = k(X, W, 2, 1, 1, 6)
    got = k(X, W, np.int64(2), np.int32(1), np.int16(1), np.int64(6))
    torch.testing.assert_close(got, plain, rtol=0, atol=0)
    ref = torch.nn.functional.conv1d(X.double(), W.double(), stride=2, padding=1)
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(L.conv1d(X, W, np.int64(2), 1, 1, np.int64(6)).double(), ref, rtol=1e-5, atol=1e-5)
    # numpy floats for a float argument
    Q, K, V = randn(1, 2, 3, 4), randn(1, 2, 5, 4), randn(1, 2, 5, 4)
    a = dt.compile(L.attention)(Q, K, V, np.float32(0.5))
    torch.testing.assert_close(a, dt.compile(L.attention)(Q, K, V, 0.5), rtol=1e-6, atol=1e-6)
    with pytest.raises(dt.ShapeError, match="'stride' must be >= 1, got -2"):   # constraints see the value
        k(X, W, np.int64(-2), 1, 1, 6)
    # a numpy bool is what a Python bool is: refused for an int argument, as torch's conv1d refuses
    # stride=True (session 13 took it as 1; s14 trial: tests/test_trial_s14.py)
    with pytest.raises(dt.ShapeError, match=r"argument 'stride' of conv1d is declared int but got the bool True"):
        k(X, W, np.bool_(True), 1, 1, 11)


def test_numpy_integer_keys_as_int():
    """A launcher specialised for a stride of 1 must not run a numpy stride of 2: numpy integers
    key as Python ints do (their 1 and multiple-of-16 facts)."""
    np = pytest.importorskip("numpy")
    from dtriton.runtime.args import plain_numbers, signature_key_for
    key = signature_key_for(L.conv1d)
    X, W = randn(1, 3, 11), randn(2, 3, 3)
    assert key((X, W, np.int64(1), 1, 1, 6)) == key((X, W, 1, 1, 1, 6))
    assert key((X, W, np.int64(2), 1, 1, 6)) == key((X, W, 2, 1, 1, 6)) != key((X, W, 1, 1, 1, 6))
    assert signature_key((np.int64(32),)) == signature_key((32,))
    got = plain_numbers((X, np.int64(3), np.float32(0.5), True))
    assert type(got[1]) is int and type(got[2]) is float and got[3] is True and got[0] is X
