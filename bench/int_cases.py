"""The integer-reduction cases shared by bench/int_exact_check.py (the GPU check of issue 17) and
tests/test_int_reductions.py (the same cases on the interpreter), so the two stay in step.

Algorithms: row sum, max, min and product, a whole-tensor sum, an integer sum beside float32
values (``masked_count``), an integer sum read by a later stage (``centred``) and an integer
matmul (``imm``). :func:`schedules` gives the schedules each integer fold is checked under (whole
row, a loop, split partials, int64 atomics); :func:`big_ints` the values near 2**53 or 2**62 whose
sums a float64 fold rounds.
"""
from __future__ import annotations

import torch

import dtriton as dt

#: bases of :func:`big_ints`: past float64's 53-bit mantissa, and near +-2**62 (sums wrap as torch's)
BIG = [2**53 + 1, 2**62 + 3, -(2**62) - 5]


def schedules(loop_tile: int = 16) -> dict[str, dt.Schedule]:
    """``{"whole", "loop", "partials", "atomic"}``: the ways a row reduction over ``j`` folds (rows
    in tiles of 2; ``loop_tile``: the tile of ``j`` in a loop and per split; 3 splits)."""
    whole = dt.Schedule(tile={"i": 2}, grid=("i",), strategy={"j": "whole"})
    loop = dt.Schedule(tile={"i": 2, "j": loop_tile}, grid=("i",), strategy={"j": "loop"})
    partials = dt.Schedule(tile={"i": 2, "j": loop_tile}, grid=("i",), split={"j": 3}, split_mode="partials",
                           stages={"sum0": {"place": "materialize"}})
    return {"whole": whole, "loop": loop, "partials": partials, "atomic": partials.replace(split_mode="atomic")}


def big_ints(m: int, n: int, seed: int, base: int = 2**53) -> torch.Tensor:
    """An (m, n) int64 tensor of ``base`` plus small integers of both signs: a float64 fold rounds
    their sum."""
    g = torch.Generator().manual_seed(seed)
    return base + torch.randint(-7, 8, (m, n), generator=g)


@dt.algorithm
def rowsum(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.sum(X[i, j], over=j)[i]


@dt.algorithm
def rowmax(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.max(X[i, j], over=j)[i]


@dt.algorithm
def rowmin(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.min(X[i, j], over=j)[i]


@dt.algorithm
def rowprod(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.prod(X[i, j], over=j)[i]


@dt.algorithm
def total(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.sum(X[i, j], over=(i, j))[()]


@dt.algorithm
def masked_count(X: dt.Tensor["M", "N"], C: dt.Tensor["M", "N"]):
    """An integer sum in a kernel whose other values are float32 (X)."""
    i, j = dt.axes("i j")
    return dt.sum(dt.where(X[i, j] > 0, C[i, j], 0), over=j)[i]


@dt.algorithm
def centred(C: dt.Tensor["M", "N"]):
    """An integer sum read back by a later elementwise stage (exact differences)."""
    i, j = dt.axes("i j")
    s = dt.sum(C[i, j], over=j)
    return (s[i] - C[i, j])[i, j]


@dt.algorithm
def imm(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    """A sum of products of integers: not a float dot, exact past 2**53."""
    i, j, k = dt.axes("i j k")
    return dt.sum(A[i, k] * B[k, j], over=k)[i, j]
