"""Cross-entropy labels outside the classes (session 18 trial): torch's default ``ignore_index=-100``
marks padding rows. ``library.cross_entropy`` refuses such a label with an IndexRangeError naming
``labels[i]``, the value, the row and the classes (never a silent read); ``library.cross_entropy_ignore``
gives those rows loss 0 and a zero gradient, as torch's ``reduction="none"``. Against float64 torch,
poisoned outputs, float32 and float16.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import dtriton as dt
from dtriton.library import cross_entropy, cross_entropy_ignore

TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.float64: 1e-12}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b).norm() / b.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("bad", [-100, 7, -1])
def test_cross_entropy_label_outside_the_classes_is_refused(bad):
    X = torch.randn(4, 7, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([0, 6, bad, 2])
    for fn in (cross_entropy.reference, dt.compile(cross_entropy), dt.compile_autograd(cross_entropy)):
        with pytest.raises(dt.IndexRangeError) as e:
            fn(X.clone().requires_grad_(), labels)
        msg = str(e.value)
        assert "labels[i]" in msg and f"is {bad} at i = 2" in msg and "indices 0..6" in msg, msg
        # the fixes a library caller can make (not the generic pad / guard / sizes of an algorithm's author)
        assert "cross_entropy_ignore(X, labels, -100)" in msg and "fix the labels" in msg, msg
        assert "dt.where(" not in msg and "Pad the tensor" not in msg, msg


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("ignore", [-100, 3])
def test_cross_entropy_ignore_against_torch(dtype, ignore):
    g = torch.Generator().manual_seed(4)
    M, N = 9, 5
    X64 = torch.randn(M, N, generator=g, dtype=torch.float64) * 3
    X = X64.to(dtype)
    labels = torch.randint(0, N, (M,), generator=g)
    labels[[0, 4, 8]] = ignore
    up = torch.randn(M, generator=g, dtype=torch.float64)
    Xd = X.detach().double().clone().requires_grad_()
    want = F.cross_entropy(Xd, labels, ignore_index=ignore, reduction="none")
    (want * up).sum().backward()
    assert (want[[0, 4, 8]] == 0).all() and (Xd.grad[[0, 4, 8]] == 0).all()
    assert (want != 0).sum() > 3   # the other rows are not ignored (so the comparison can fail)

    out = torch.full((M,), float("nan"), dtype=dtype)
    got = dt.compile(cross_entropy_ignore)(X, labels, ignore, out=out)
    assert got is out and got.dtype == dtype and _rel(got, want.detach()) < TOL[dtype]

    dX = torch.full((M, N), float("nan"), dtype=dtype)
    got_dx = dt.compile(dt.grad(cross_entropy_ignore)["X"])(X, labels, ignore, up.to(dtype), out=dX)
    assert got_dx.dtype == dtype and _rel(got_dx, Xd.grad) < TOL[dtype]
    assert (got_dx[[0, 4, 8]] == 0).all()

    Xa = X.clone().requires_grad_()
    loss = dt.compile_autograd(cross_entropy_ignore)(Xa, labels, ignore)
    (loss * up.to(dtype)).sum().backward()
    assert _rel(loss.detach(), want.detach()) < TOL[dtype]
    assert Xa.grad.dtype == dtype and _rel(Xa.grad, Xd.grad) < TOL[dtype]
    assert (Xa.grad[[0, 4, 8]] == 0).all()


def test_cross_entropy_ignore_refuses_other_labels_outside():
    X = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
    for fn in (cross_entropy_ignore.reference, dt.compile(cross_entropy_ignore)):
        assert torch.equal(fn(X, torch.tensor([1, -100, -100]), -100)[1:], torch.zeros(2))
        with pytest.raises(dt.IndexRangeError, match=r"labels\[i\] is 4 at i = 1"):
            fn(X, torch.tensor([1, 4, -100]), -100)
