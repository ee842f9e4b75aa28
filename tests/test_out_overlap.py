"""``out=`` overlap checks are exact for strided views (session 8: they compared byte ranges, so
disjoint interleaved views, ``out=buf[:, 0::2]`` with an input ``buf[:, 1::2]``, were refused as
overlapping); views that do share an element are still refused."""
from __future__ import annotations

import pytest
import torch

import dtriton as dt
from dtriton.runtime.args import overlap


@dt.algorithm
def scale_add(X: dt.Tensor["M", "N"], Y: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X[i, j] * 2.0 + Y[i, j])[i, j]


@dt.algorithm
def two_outputs(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X[i, j] + 1.0)[i, j], (X[i, j] * 3.0)[i, j]


def brute_overlap(x, y):
    def bytes_of(t):
        offs = torch.zeros((), dtype=torch.int64)
        for n, st in zip(t.shape, t.stride()):
            offs = offs.unsqueeze(-1) + torch.arange(n) * st
        starts = offs.reshape(-1) * t.element_size() + t.data_ptr()
        return {int(a) + k for a in starts for k in range(t.element_size())}
    return bool(bytes_of(x) & bytes_of(y)) if x.numel() and y.numel() else False


def test_interleaved_out_and_input_run_and_match():
    g = torch.Generator().manual_seed(7)
    buf = torch.full((7, 22), float("nan"))
    buf[:, 1::2] = torch.randn(7, 11, generator=g)
    Y = torch.randn(7, 11, generator=g)
    X = buf[:, 1::2]
    want = X.double() * 2 + Y.double()
    got = dt.compile(scale_add)(X, Y, out=buf[:, 0::2])
    assert got.data_ptr() == buf.data_ptr()
    torch.testing.assert_close(buf[:, 0::2].double(), want)
    torch.testing.assert_close(buf[:, 1::2], X)   # the input untouched


def test_interleaved_outputs_of_one_call():
    X = torch.randn(5, 3)
    buf = torch.full((5, 6), float("nan"))
    a, b = dt.compile(two_outputs)(X, out=(buf[:, 0::2], buf[:, 1::2]))
    torch.testing.assert_close(buf[:, 0::2], X + 1)
    torch.testing.assert_close(buf[:, 1::2], X * 3)


@pytest.mark.parametrize("out_of,in_of", [
    (lambda b: b[:, 1:12], lambda b: b[:, 0:11]),        # shifted columns: shared elements
    (lambda b: b[:, 0:20:2], lambda b: b[:, 2::2]),      # the same residue, shifted by one element
    (lambda b: b[1:, 0::2], lambda b: b[:-1, 0::2]),     # shifted rows of one residue
])
def test_overlapping_views_are_still_refused(out_of, in_of):
    buf = torch.zeros(7, 22)
    X, out = in_of(buf), out_of(buf)
    assert X.shape == out.shape and X.data_ptr() != out.data_ptr()
    with pytest.raises(dt.ShapeError, match="overlaps input 'X'"):
        dt.compile(scale_add)(X, torch.zeros(X.shape), out=out)


def test_overlap_is_exact_against_listing_bytes():
    g = torch.Generator().manual_seed(9)
    base = torch.zeros(4 * 60, dtype=torch.float32)
    views = []
    for _ in range(40):
        n0, n1 = (int(v) for v in torch.randint(1, 5, (2,), generator=g))
        s1 = int(torch.randint(1, 4, (1,), generator=g))
        s0 = s1 * n1 + int(torch.randint(0, 3, (1,), generator=g))
        off = int(torch.randint(0, 20, (1,), generator=g))
        views.append(base.as_strided((n0, n1), (s0, s1), off))
    views.append(base.view(torch.float64)[3:9])          # another element size
    views.append(base[5:6].expand(3))                     # a stride-0 view
    views.append(base.view(torch.int16)[7:40:3])          # 2-byte elements at odd 2-byte offsets
    for x in views:
        for y in views:
            assert overlap(x, y) == brute_overlap(x, y), (x.shape, x.stride(), x.storage_offset(), x.dtype,
                                                          y.shape, y.stride(), y.storage_offset(), y.dtype)
