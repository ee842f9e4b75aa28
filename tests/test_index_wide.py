"""Padded and guarded reads whose computed index passes 2**31 (an ``int`` argument, a product, an
int64 label) read the pad, as the reference does, instead of wrapping to a small index in int32
(fresh-user trial, session 6)."""
from __future__ import annotations

import pytest
import torch

import dtriton as dt


@dt.algorithm
def shifted(X: dt.Tensor["M"], o: int):
    i, = dt.axes("i:M")
    return X.pad(7.0)[i + o][i]


@dt.algorithm
def strided(X: dt.Tensor["M"], s: int):
    i, = dt.axes("i:M")
    return X.pad(5.0)[i * s][i]


@dt.algorithm
def gathered(X: dt.Tensor["B", "C"], L: dt.Tensor["B"]):
    i, = dt.axes("i:B")
    return X.pad(-1.0)[i, L[i]][i]


def _check(alg, *args):
    out = torch.full((args[0].shape[0],), 123.0)   # poisoned
    dt.compile(alg)(*args, out=out)
    ref = alg.reference(*args)
    ref = ref[0] if isinstance(ref, tuple) else ref
    torch.testing.assert_close(out, ref.to(out.dtype))
    return out


def test_large_int_argument_offset():
    x = torch.arange(5.0)
    for o in (2 ** 32, 2 ** 31, -(2 ** 32), 2 ** 32 - 3, 1, -2):
        out = _check(shifted, x, o)
        want = torch.tensor([x[i + o].item() if 0 <= i + o < 5 else 7.0 for i in range(5)])
        torch.testing.assert_close(out, want)


def test_product_passing_int32():
    x = torch.arange(8.0)
    out = _check(strided, x, 2 ** 30)
    torch.testing.assert_close(out, torch.tensor([0.0] + [5.0] * 7))


def test_int64_labels_past_int32():
    x = torch.arange(12.0).reshape(3, 4)
    labels = torch.tensor([2 ** 32 + 1, 3, -(2 ** 32) + 2], dtype=torch.int64)
    out = _check(gathered, x, labels)
    torch.testing.assert_close(out, torch.tensor([-1.0, 7.0, -1.0]))


@dt.algorithm
def strided_pad(X: dt.Tensor["N"], a: int):
    i, = dt.axes("i:N")
    return X.pad(-1.0)[i * a][i]


@pytest.mark.parametrize("a", [2**62, -(2**62), 2**64])
def test_index_arithmetic_past_int64_is_a_clear_error(a):
    # s7 fresh-user trial: i * 2**62 wrapped around int64 and read X[0] (kernel and reference alike); 2**64
    # ended in a CompileError blaming the schedule
    X = torch.arange(1.0, 6.0)
    for run in (lambda: dt.compile(strided_pad)(X, a), lambda: strided_pad.reference(X, a)):
        with pytest.raises(dt.ShapeError, match="int64"):
            run()
    torch.testing.assert_close(dt.compile(strided_pad)(X, 2**40), torch.tensor([1.0, -1, -1, -1, -1]))
