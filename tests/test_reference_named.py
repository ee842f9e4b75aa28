"""``alg.reference(...)`` (and ``alg(...)``) take the inputs by name, as calling the compiled kernel
does, with the kernel call's checks and messages (session 8: ``reference`` took positional arguments
only, a TypeError for any name)."""
from __future__ import annotations

import pytest
import torch

import dtriton as dt


@dt.algorithm
def scaled_rows(X: dt.Tensor["M", "N"], b: dt.Tensor["N"], s: float):
    i, j = dt.axes("i j")
    return (X[i, j] * s + b[j])[i, j], dt.sum(X[i, j], over=j)[i]


def test_reference_by_name_matches_positional_and_the_kernel():
    g = torch.Generator().manual_seed(3)
    X, b = torch.randn(7, 13, generator=g), torch.randn(13, generator=g)
    want = (X.double() * 0.5 + b.double(), X.double().sum(1))
    k = dt.compile(scaled_rows)
    for got in (scaled_rows.reference(X, b, 0.5), scaled_rows.reference(X=X, b=b, s=0.5),
                scaled_rows.reference(X, s=0.5, b=b), scaled_rows(b=b, X=X, s=0.5), k(s=0.5, X=X, b=b)):
        for g_, w in zip(got, want):
            torch.testing.assert_close(g_.double(), w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("args,named,pattern", [
    ((), {"X": 1, "Y": 2}, r"scaled_rows has no parameter 'Y'; its parameters are \['X', 'b', 's'\]"),
    ((torch.ones(2, 3),), {"X": torch.ones(2, 3)}, r"scaled_rows: 'X' is given both by position and by name"),
    ((torch.ones(2, 3),), {"s": 1.0}, r"scaled_rows: missing argument 'b' \(parameters: \['X', 'b', 's'\]\)"),
])
def test_reference_by_name_errors_are_the_kernels(args, named, pattern):
    with pytest.raises(dt.ShapeError, match=pattern):
        scaled_rows.reference(*args, **named)
    with pytest.raises(dt.ShapeError, match=pattern):
        dt.compile(scaled_rows)(*args, **named)
