"""Persistent GEMM kernels whose tile loop is flattened with the contraction loop
(``tl.range(..., flatten=True)``, :mod:`dtriton.plan.persistent`) and whose TMA output tiles are
stored in pieces (``Schedule.store_pieces``), on Triton's interpreter.

Every kernel writes NaN-poisoned ``out=`` tensors and is compared with float64 references; sizes
are primes and non-multiples of the tiles (the edge tiles' TMA stores are clipped), with more
tiles than programs (4 per SM on the interpreter: each program loops over several tiles), in the
NT layout of ``nn.Linear`` (``X @ W.T``) and NN, fp16 and bf16, with fused epilogues.
"""

from __future__ import annotations

import pytest
import torch

import dtriton as dt
from dtriton.library import linear_relu, matmul

from conftest import TOL, check


def rnd(*shape, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def source(alg, sched, args) -> str:
    k = dt.compile(alg, sched)
    k(*args)
    return k.source


SCHED = dt.Schedule(tile={"i": 16, "j": 32, "k": 16}, access="tma", persistent=1, group={"i": 2}, num_warps=4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["NT", "NN"])
@pytest.mark.parametrize("pieces", [0, 1, 2])
def test_flattened_persistent_matmul_equals_float64(dtype, layout, pieces):
    # 67 x 40 x 88: 5 x 3 = 15 tiles of 16 x 32 (edges clipped) over 4 programs; rows 16-byte aligned (TMA)
    M, K, N = 67, 40, 88
    X = rnd(M, K, dtype=dtype)
    W = rnd(N, K, dtype=dtype, seed=1) if layout == "NT" else rnd(K, N, dtype=dtype, seed=1)
    Y = W.T if layout == "NT" else W
    sched = SCHED.replace(store_pieces=pieces)
    src = source(matmul, sched, (X, Y))
    assert "flatten=True" in src and "desc_out" in src
    # two pieces only when asked (0: the plan splits last dims of 128 or more; here 32)
    assert ("tl.split(" in src) == (pieces == 2)
    assert ("out[i, j] in boxes of [16, 16]" in src) == (pieces == 2)
    check(matmul, (X, Y), sched, torch_ref=lambda a, b: a @ b, tol=TOL[dtype])


def test_auto_pieces_halve_wide_tiles():
    X, W = rnd(40, 32), rnd(256, 32, seed=1)
    sched = dt.Schedule(tile={"i": 16, "j": 128, "k": 16}, access="tma", persistent=1, num_warps=4)
    src = source(matmul, sched, (X, W.T))
    assert "flatten=True" in src and "tl.split(" in src and "out[i, j] in boxes of [16, 64]" in src
    check(matmul, (X, W.T), sched, torch_ref=lambda a, b: a @ b, tol=TOL[torch.float16])


def test_linear_relu_epilogue_in_flattened_loop():
    # bias + ReLU fused after the contraction, inside the flattened loop; 53 rows, 72 features
    X, W, b = rnd(53, 24), rnd(72, 24, seed=1), rnd(72, seed=2)
    sched = SCHED.replace(store_pieces=2)
    src = source(linear_relu, sched, (X, W, b))
    assert "flatten=True" in src and "tl.split(" in src
    check(linear_relu, (X, W, b), sched, tol=TOL[torch.float16])


def test_pointer_stores_and_odd_rows_keep_pointers():
    # 33 x 37 fp16 rows are not 16-byte aligned: pointer loads and stores, still flattened and right
    X, W = rnd(29, 37), rnd(33, 37, seed=1)
    src = source(matmul, SCHED.replace(store_pieces=2), (X, W.T))
    assert "flatten=True" in src and "tl.split(" not in src
    check(matmul, (X, W.T), SCHED.replace(store_pieces=2), torch_ref=lambda a, b: a @ b, tol=TOL[torch.float16])


def test_not_flattened_without_persistence_or_with_warp_specialisation():
    X, W = rnd(32, 32), rnd(64, 32, seed=1)
    assert "flatten=True" not in source(matmul, SCHED.replace(persistent=0), (X, W.T))
    src = source(matmul, SCHED.replace(warp_specialize=True), (X, W.T))
    assert "flatten=True" not in src and "warp_specialize=True" in src
    # a split-K slice per program: not flattened either
    src = source(matmul, SCHED.replace(split={"k": 2}), (X, W.T))
    assert "flatten=True" not in src


def test_store_pieces_is_a_checked_knob():
    with pytest.raises(dt.ScheduleError, match="store_pieces = 3 must be 0"):
        dt.Schedule(store_pieces=3)
    s = dt.Schedule(store_pieces=2, persistent=1)
    assert dt.Schedule.from_json(s.to_json()) == s
