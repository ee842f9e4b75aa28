"""A wrong gather index reads NaN, not other memory (the kernels' side of an index check).

On the GPU no host check runs unless ``check_indices=True``: an out-of-range gather index (a
cross-entropy label of -100 used for padding, a token id past the vocabulary) used to read
whatever memory lay there and return a plausible wrong number. The plan now masks every
unguarded, unpadded computed index to its dim (``ir.kernel_reads``, ``plan.access.plan_read_masks``)
and a floating-point load reads NaN where the index is outside, so the result is NaN where it is
wrong. The interpreter checks on the host before launching (IndexRangeError), so these tests turn
that check off (as on the GPU) and run the kernels on such indices; rows with good indices must
stay exact, tile padding must not be poisoned (a gathered operand of a contraction whose reduced
size is not a multiple of its tile), and padded or guarded reads keep their padding.
"""
from __future__ import annotations

import pytest
import torch

import dtriton as dt
from dtriton.library import cross_entropy
from dtriton.runtime import kernel as runtime_kernel


@pytest.fixture
def unchecked(monkeypatch):
    """The kernels run as on the GPU without check_indices: no host check of the indices."""
    monkeypatch.setattr(runtime_kernel, "check_reads", lambda *a, **k: None)


@dt.algorithm
def embed(E: dt.Tensor["V", "D"], ids: dt.Tensor["T"]):
    t, d = dt.axes("t d")
    return (E[ids[t], d] * 2.0)[t, d]


@dt.algorithm
def embed_matmul(E: dt.Tensor["V", "K"], ids: dt.Tensor["T"], W: dt.Tensor["K", "N"]):
    t, k, n = dt.axes("t k n")
    return dt.sum(E[ids[t], k] * W[k, n], over=k)[t, n]


@dt.algorithm
def guarded(X: dt.Tensor["M", "N"], L: dt.Tensor["M"]):
    i, = dt.axes("i")
    return dt.where(L[i] >= 0, X[i, L[i]], 0.0)[i]


@dt.algorithm
def padded(X: dt.Tensor["M", "N"], L: dt.Tensor["M"]):
    i, = dt.axes("i")
    return (X.pad(-3.0)[i, L[i]] + 1.0)[i]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cross_entropy_with_a_bad_label_is_nan_on_that_row_only(unchecked, dtype):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(7, 37, generator=g).to(dtype)
    labels = torch.randint(0, 37, (7,), generator=g)
    labels[2], labels[5] = -100, 37   # torch's padding label, one past the last class
    got = dt.compile(cross_entropy)(X, labels)
    assert torch.isnan(got[2]) and torch.isnan(got[5])
    good = [0, 1, 3, 4, 6]
    want = torch.nn.functional.cross_entropy(X.double()[good], labels[good], reduction="none")
    torch.testing.assert_close(got[good].double(), want, rtol=2e-2 if dtype != torch.float32 else 1e-5, atol=1e-3)


def test_a_gathered_row_past_the_table_is_nan(unchecked):
    g = torch.Generator().manual_seed(2)
    E = torch.randn(11, 9, generator=g)
    ids = torch.tensor([0, 10, 11, -1, 3])
    got = dt.compile(embed)(E, ids)
    assert torch.isnan(got[[2, 3]]).all()
    torch.testing.assert_close(got[[0, 1, 4]], E[ids[[0, 1, 4]]] * 2.0, rtol=0, atol=0)


def test_tile_padding_of_a_gathered_contraction_operand_is_not_poisoned(unchecked):
    """K = 13 is not a multiple of the k tile: the padded lanes of E's tile must read 0 (poisoning
    them would turn every row into NaN through the contraction)."""
    g = torch.Generator().manual_seed(3)
    E, W = torch.randn(6, 13, generator=g), torch.randn(13, 5, generator=g)
    ids = torch.tensor([5, 0, 2, 6, 1])   # 6 is past the table
    k = dt.compile(embed_matmul, dt.Schedule(tile={"t": 4, "n": 4, "k": 8}))
    got = k(E, ids, W)
    assert torch.isnan(got[3]).all()
    good = [0, 1, 2, 4]
    torch.testing.assert_close(got[good].double(), (E.double()[ids[good]] @ W.double()), rtol=1e-4, atol=1e-4)


def test_guarded_and_padded_reads_are_not_poisoned(unchecked):
    X = torch.randn(4, 6)
    L = torch.tensor([1, -1, 5, -2])
    torch.testing.assert_close(dt.compile(guarded)(X, L), torch.tensor([X[0, 1], 0.0, X[2, 5], 0.0]))
    L2 = torch.tensor([1, 6, -1, 0])   # outside reads the pad -3
    torch.testing.assert_close(dt.compile(padded)(X, L2), torch.tensor([X[0, 1] + 1, -2.0, -2.0, X[3, 0] + 1]))


def test_the_printed_gather_reads_nan_outside_and_a_guarded_one_does_not():
    X, labels = torch.randn(4, 10), torch.tensor([1, 2, 3, 4])
    src = dt.compile(cross_entropy).source_for(X, labels)
    line = next(s for s in src.splitlines() if "X[i, labels[i]]" in s and "tl.load" in s)
    assert "float('nan')" in line and "tl.where(~(" in line
    src = dt.compile(guarded).source_for(X, labels)
    assert "float('nan')" not in src


def test_the_host_check_still_raises_first():
    X, labels = torch.randn(4, 10), torch.tensor([1, 2, -100, 4])
    with pytest.raises(dt.IndexRangeError, match="labels"):
        dt.compile(cross_entropy)(X, labels)
