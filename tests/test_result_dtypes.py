"""Result and accumulator dtypes as the docs state them (issue 17, a fresh user's report).

``acc_dtype="float64"`` on float32 inputs really accumulates in float64 (a sum whose float32
accumulation loses every small term is exact with it, in every strategy and split); the result
dtype of integer inputs follows torch (sums and products of integers are int64, division and
float functions give float32, mixing with a Python float gives float32).
"""
from __future__ import annotations

import pytest
import torch

import dtriton as dt

SCHEDULES = {
    "whole": dt.Schedule(tile={"i": 1}, grid=("i",), strategy={"j": "whole"}),
    "loop": dt.Schedule(tile={"i": 1, "j": 8}, grid=("i",), strategy={"j": "loop"}),
    "partials": dt.Schedule(tile={"i": 1, "j": 8}, grid=("i",), split={"j": 3}, split_mode="partials",
                            stages={"sum0": {"place": "materialize"}}),
    "atomic": dt.Schedule(tile={"i": 1, "j": 8}, grid=("i",), split={"j": 3}, split_mode="atomic",
                          stages={"sum0": {"place": "materialize"}}),
}


@dt.algorithm
def rowsum(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.sum(X[i, j], over=j)[i]


def cancelling_rows(m: int, reps: int) -> torch.Tensor:
    """Rows of ``1e8, 1, -1e8, 1`` repeated, then a 1: the sum is ``2 * reps + 1``, and a float32
    accumulator, holding 1e8 when each 1 arrives, loses every one of them."""
    row = torch.tensor([1e8, 1.0, -1e8, 1.0]).repeat(reps)
    return torch.cat([row, torch.ones(1)]).repeat(m, 1)


@pytest.mark.parametrize("how", list(SCHEDULES))
def test_acc_dtype_float64_accumulates_in_float64(how):
    X = cancelling_rows(3, 10)
    want = X.double().sum(1).float()
    assert want[0].item() == 21.0
    sched = SCHEDULES[how]
    got = dt.compile(rowsum, sched.replace(acc_dtype="float64"))(X, out=torch.full((3,), float("nan")))
    assert got.dtype == torch.float32 and torch.equal(got, want)
    # the float32 accumulator does lose them (so the check above can fail)
    assert not torch.equal(dt.compile(rowsum, sched)(X), want)


@pytest.mark.parametrize("idt", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_result_dtypes_of_integer_inputs_follow_torch(idt):
    """The rule the tutorial states: torch's promotion, with Python numbers as weak scalars; sums
    and products of integers are int64; division and float functions of integers give float32."""
    @dt.algorithm
    def ops(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return (dt.sum(X[i, j], over=j)[i], (0.5 * X[i, j])[i, j], (X[i, j] / 2)[i, j],
                dt.exp(X[i, j])[i, j], (X[i, j] + 1)[i, j], dt.max(X[i, j], over=j)[i])
    X = torch.randint(0, 5, (3, 7)).to(idt)
    want = [X.sum(1), 0.5 * X, X / 2, torch.exp(X), X + 1, X.amax(1)]
    for got in (ops.reference(X), dt.compile(ops)(X)):
        for g, w in zip(got, want):
            assert g.dtype == w.dtype, (g.dtype, w.dtype)
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("idt", [torch.uint8, torch.int8, torch.int16])
def test_integer_intermediates_are_int64_unlike_torch(idt):
    """The difference the tutorial states: integer values inside an algorithm are computed in int64
    and wrap only where an output of a narrower dtype stores them (as torch does); a float operation
    or a sum reading a product of narrow integers keeps every digit (torch wraps the product first),
    and ``dt.cast`` to the narrow dtype gives torch's wrapped values."""
    @dt.algorithm
    def wide(X: dt.Tensor["M"]):
        i, = dt.axes("i:M")
        sq = X[i] * X[i]
        return (sq[i], (sq + 0.5)[i], dt.sum(sq, over=i), (dt.cast(sq, idt) + 0.5)[i],
                dt.sum(dt.cast(sq, idt), over=i))

    info = torch.iinfo(idt)
    g = torch.Generator().manual_seed(11)
    x = torch.randint(info.min, info.max + 1, (13,), generator=g, dtype=torch.int64).to(idt)
    x[0] = info.max   # its square wraps in the dtype
    sq64 = x.long() * x.long()
    assert not torch.equal((x * x).long(), sq64)   # torch's products wrap (so the checks below can fail)
    wants = (x * x, sq64.float() + 0.5, sq64.sum(), x * x + 0.5, (x * x).sum())
    outs = tuple(torch.full(w.shape, 7, dtype=w.dtype) for w in wants)   # poisoned
    for got in (wide.reference(x), dt.compile(wide)(x, out=outs)):
        for k, (v, w) in enumerate(zip(got, wants)):
            assert v.dtype == w.dtype and torch.equal(v, w), (idt, k, v, w)
