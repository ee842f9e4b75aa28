"""Integer reductions are exact in int64 (issue 17, a fresh user's report).

A sum of int64 values near 2**53 came back rounded (the kernel and ``alg.reference`` both folded
through float64, so the self-check could not see it). Sums, products, maxima and minima of bool or
integer values now fold in int64 in the kernel (whole, loop, block accumulators, split partials,
atomic splits, whole-tensor reductions) and in the reference, also beside float inputs (whose
kernels compute in fp32). Every expected value is torch's own integer reduction; outputs are
poisoned first so a lane the kernel forgets fails. The algorithms, schedules and values are
bench/int_cases.py's, which bench/int_exact_check.py runs on the GPU.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import dtriton as dt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from int_cases import (BIG, big_ints, centred, imm, masked_count, rowmax, rowmin, rowprod, rowsum,  # noqa: E402
                       schedules, total)

SCHEDULES = schedules(loop_tile=4)


def run(alg, sched, *args) -> torch.Tensor:
    """``alg`` compiled with ``sched`` into a poisoned output."""
    ref = alg.reference(*args)
    out = torch.full_like(ref, -12345)
    got = dt.compile(alg, sched)(*args, out=out)
    assert got.data_ptr() == out.data_ptr()
    return got


def test_the_reported_sum_past_2_to_the_53_is_exact():
    X = torch.full((2, 3), 2**53 + 1, dtype=torch.int64)
    want = X.sum(1)
    assert int(want[0]) == 27021597764222979
    for got in (dt.compile(rowsum)(X), rowsum.reference(X)):
        assert got.dtype == torch.int64 and torch.equal(got, want)


@pytest.mark.parametrize("how", list(SCHEDULES))
@pytest.mark.parametrize("base", BIG)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (5, 13)])
def test_sums_near_2_to_the_53_and_62_are_exact(how, base, shape):
    # (sums of near +-2**62 overflow int64 and wrap, as torch's do: compared bit for bit)
    X = big_ints(*shape, seed=shape[1], base=base)
    want = X.sum(1)
    assert torch.equal(rowsum.reference(X), want)
    assert torch.equal(run(rowsum, SCHEDULES[how], X), want)


@pytest.mark.parametrize("how", ["whole", "loop"])
@pytest.mark.parametrize("alg, ref", [(rowmax, lambda x: x.amax(1)), (rowmin, lambda x: x.amin(1))])
@pytest.mark.parametrize("base", BIG)
def test_extrema_of_int64_stay_exact(how, alg, ref, base):
    X = big_ints(3, 11, seed=5, base=base)
    want = ref(X)
    for got in (alg.reference(X), run(alg, SCHEDULES[how], X)):
        assert got.dtype == torch.int64 and torch.equal(got, want)


@pytest.mark.parametrize("how", ["whole", "loop", "partials"])
def test_products_of_integers_are_exact(how):
    g = torch.Generator().manual_seed(2)
    X = torch.randint(1, 4, (3, 37), generator=g) * (1 - 2 * torch.randint(0, 2, (3, 37), generator=g))
    X[0, :] = 3 ** (torch.arange(37) % 2)                       # 3**18 * ... beyond 2**24
    X[1, 0] = 2**40 + 1                                         # a product past 2**53
    want = X.prod(1)
    sched = SCHEDULES[how].replace(stages={"prod0": {"place": "materialize"}}) if how == "partials" else SCHEDULES[how]
    for got in (rowprod.reference(X), run(rowprod, sched, X)):
        assert got.dtype == torch.int64 and torch.equal(got, want)


@pytest.mark.parametrize("split", [None, 5, 19])
def test_whole_tensor_sum_is_exact(split):
    X = big_ints(3, 7, seed=9, base=2**55)
    sched = None if split is None else dt.Schedule(tile={"i": 1, "j": 1}, split={"i": split} if split <= 3 else {"j": split},
                                                   split_mode="partials")
    if split is not None and split > 7:
        X = big_ints(3, 23, seed=9, base=2**55)   # 19 partials: read back as one block
    want = X.sum()
    for got in (total.reference(X), dt.compile(total, sched)(X)):
        assert got.dtype == torch.int64 and torch.equal(got, want)


@pytest.mark.parametrize("how", list(SCHEDULES))
def test_an_integer_sum_beside_float_values_is_exact(how):
    """The float input makes the kernel compute in fp32 (exact only to 2**24): the integer sum
    still folds in int64."""
    g = torch.Generator().manual_seed(4)
    X = torch.randn(5, 13, generator=g)
    C = big_ints(5, 13, seed=4, base=2**40)
    want = torch.where(X > 0, C, 0).sum(1)
    sched = SCHEDULES[how]
    assert torch.equal(masked_count.reference(X, C), want)
    assert torch.equal(run(masked_count, sched, X, C), want)


def test_counts_of_bools_and_small_int_dtypes_are_int64():
    g = torch.Generator().manual_seed(6)
    for dtype in (torch.bool, torch.int8, torch.int32, torch.uint8):
        X = torch.randint(0, 100, (3, 29), generator=g).to(dtype)
        for how in ("whole", "loop", "atomic"):
            got = run(rowsum, SCHEDULES[how], X)
            assert got.dtype == torch.int64 and torch.equal(got, X.sum(1)), (dtype, how)


@pytest.mark.parametrize("place", ["fuse", "materialize"])
def test_an_integer_sum_read_by_a_later_stage_is_exact(place):
    C = big_ints(3, 5, seed=7, base=2**54)
    want = C.sum(1, keepdim=True) - C
    sched = dt.Schedule(stages={"sum0": {"place": place}})
    for got in (centred.reference(C), dt.compile(centred, sched)(C)):
        assert got.dtype == torch.int64 and torch.equal(got, want)


def test_an_integer_matmul_folds_in_int64():
    """A sum of products of integers is not a float dot: exact past 2**53."""
    g = torch.Generator().manual_seed(8)
    A = torch.randint(-2**27, 2**27, (17, 19), generator=g)
    B = torch.randint(-2**27, 2**27, (19, 16), generator=g)
    want = A @ B
    sched = dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, grid=("i", "j"), strategy={"k": "loop"})
    for got in (imm.reference(A, B), dt.compile(imm, sched)(A, B)):
        assert got.dtype == torch.int64 and torch.equal(got, want)
