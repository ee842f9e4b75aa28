"""Output strides (session 18 trial): an output the kernel allocates is contiguous in its axes'
order whatever the inputs' strides (the tutorial says so; torch's batch_norm follows a channels_last
input), and ``out=torch.empty_like(X)`` of a channels_last X is written through its strides. Values
against float64 torch, poisoned outputs, odd sizes.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import dtriton as dt
from dtriton.library import batch_norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_batch_norm_channels_last_input_and_output(dtype):
    g = torch.Generator().manual_seed(9)
    X = torch.randn(3, 5, 4, 7, generator=g, dtype=torch.float64).to(dtype).to(memory_format=torch.channels_last)
    w, b = torch.randn(5, generator=g).to(dtype), torch.randn(5, generator=g).to(dtype)
    want = F.batch_norm(X.double(), None, None, w.double(), b.double(), training=True)
    assert want.is_contiguous(memory_format=torch.channels_last)   # torch's rule
    tol = 1e-5 if dtype == torch.float32 else 3e-3
    k = dt.compile(batch_norm)
    got = k(X, w, b)
    assert got.is_contiguous() and got.dtype == dtype   # allocated contiguous (documented)
    assert ((got.double() - want).norm() / want.norm()).item() < tol
    out = torch.full_like(X, float("nan"))
    assert out.stride() == X.stride() and not out.is_contiguous()
    res = k(X, w, b, out=out)
    assert res is out and res.stride() == X.stride()
    assert ((res.double() - want).norm() / want.norm()).item() < tol
