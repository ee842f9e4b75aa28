"""Problems a fresh-user trial found (session 10, second batch), each fixed with a test here.

Padding values an integer or bool tensor cannot hold are refused at the call (the kernel read
them in the tensor's dtype, the reference kept them); ``&`` of conditions as a factor of a
reduction bounds its loop as a ``dt.where`` does; clearer errors for an int literal past int64,
float ``//`` and ``%``, an output indexed by an axis reduced inside it, a user tile too big for
one block, and an empty size name in ``dt.axes``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import dtriton as dt



# ----------------------------------------------------------------------------------------------
# 1. padding values the tensor's dtype does not hold
# ----------------------------------------------------------------------------------------------
def _padded_shift(value):
    @dt.algorithm
    def shift(X: dt.Tensor["N"]):
        i = dt.axes("i")
        return (X.pad(value)[i + 1] + X[i])[i]
    return shift


@pytest.mark.parametrize("value, dtype, fix", [
    (1.5, torch.int64, r"write X\.pad\(1\) or X\.pad\(2\)"),
    (-float("inf"), torch.int64, r"write X\.pad\(-9223372036854775808\)"),
    (float("inf"), torch.int32, r"write X\.pad\(2147483647\)"),
    (float("nan"), torch.int8, r"write X\.pad\(0\)"),
    (-1, torch.uint8, r"write X\.pad\(0\)"),
    (300, torch.int8, r"write X\.pad\(127\)"),
    (2, torch.bool, r"write X\.pad\(False\) or X\.pad\(True\)"),
    (0.5, torch.bool, r"X\.pad\(False\)"),
])
def test_pad_value_the_dtype_does_not_hold_is_refused_at_the_call(value, dtype, fix):
    alg = _padded_shift(value)
    x = torch.tensor([1, 0, 1], dtype=dtype)
    for call in (lambda: alg.reference(x), lambda: dt.compile(alg)(x)):
        with pytest.raises(dt.AlgorithmError, match=r"X\.pad\(.*\): X is " + str(dtype).replace(".", r"\.")
                           + r", which does not hold .*" + fix + r".*float tensor"):
            call()


def test_integer_pad_values_held_by_the_dtype_match_torch():
    # exact past 2**53 (an int64 pad is not rounded through a float), the dtype's least value for a max
    for value, dtype in [(1.0, torch.int64), (-7, torch.int8), (2 ** 62 + 1, torch.int64), (255, torch.uint8),
                         (-2 ** 31, torch.int32), (True, torch.bool), (0, torch.bool), (-3, torch.float32)]:
        alg = _padded_shift(value)
        n = 7
        x = (torch.randint(0, 2, (n,)).to(dtype) if dtype in (torch.bool, torch.uint8)
             else torch.randint(-50, 50, (n,)).to(dtype))
        got = dt.compile(alg)(x)
        want = torch.cat([x[1:], torch.tensor([value], dtype=dtype)]) + x   # (F.pad rounds through a float)
        assert got.dtype == want.dtype
        assert torch.equal(got, want), (value, dtype, got, want)
        assert torch.equal(alg.reference(x), got)


def test_integer_max_pool_padded_with_the_least_value():
    @dt.algorithm
    def maxpool(X: dt.Tensor["C", "N"], R: int):
        c, i, r = dt.axes("c i:N r:R")
        return dt.max(X.pad(-2 ** 31)[c, i + r - 1], over=r)[c, i]
    x = torch.randint(-1000, 1000, (3, 11), dtype=torch.int32)
    want = F.max_pool1d(x.double()[None], 3, 1, 1)[0]
    got = dt.compile(maxpool, dt.Schedule(tile={"c": 1, "i": 4}, grid=("c", "i")))(x, 3)
    assert torch.equal(got.double(), want) and torch.equal(maxpool.reference(x, 3), got)
