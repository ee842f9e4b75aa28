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
    assert key == ((torch.sparse_coo, x.shape, x.dtype, x.device),) and not grad
