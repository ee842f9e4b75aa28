"""Fixes from the session-15 fresh-user trial (README only, a clean clone, the CPU interpreter)."""
from __future__ import annotations

import warnings

import pytest
import torch

import dtriton as dt

INF = float("inf")


@dt.algorithm
def masked_softmax(X: dt.Tensor["M", "N"], L: dt.Tensor["M"]):
    i, j = dt.axes("i j")
    s = dt.where(j < L[i], X[i, j], -INF)
    e = dt.exp(s - dt.max(s, over=j))
    return (e / dt.sum(e, over=j))[i, j]


def test_masked_lanes_raise_no_numpy_warning_under_warnings_as_errors():
    """Lanes that masks discard compute -inf - -inf on the interpreter: under ``-W error`` (pytest's
    filterwarnings = error) a correct call failed with a CompileError naming a RuntimeWarning."""
    torch.manual_seed(2)
    for M, N in [(1, 1), (3, 7), (4, 13)]:
        x = torch.randn(M, N) * 3
        lens = torch.randint(1, N + 1, (M,))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            y = dt.compile(masked_softmax)(x, lens)
        keep = torch.arange(N)[None, :] < lens[:, None]
        ref = torch.softmax(x.double().masked_fill(~keep, -INF), dim=1)
        torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-6)
