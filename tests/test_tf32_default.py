"""The heuristic's schedule for a large single-pass TF32 GEMM (``Schedule(precision="tf32")``,
``schedule.dot_rules._wide_tf32``) and that schedule's kernel on Triton's interpreter.

The GPU schedule is derived here from meta tensors bound as a CUDA call (nothing runs on a GPU); the
kernel test runs the same knobs at small tiles on NaN-poisoned ``out=`` tensors with prime sizes and
compares with float64 at TF32's error (a 10-bit mantissa: ~1e-3 relative).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import dtriton as dt
from dtriton import Tensor
from dtriton.library import matmul

from conftest import check


@dt.algorithm
def linear(X: Tensor["M", "K"], W: Tensor["N", "K"]):
    """X @ W.T, W in nn.Linear's (N, K) layout: both operands K-major."""
    i, j, k = dt.axes("i j k")
    return dt.sum(X[i, k] * W[j, k], over=k)[i, j]


def gpu_schedule(alg, args, user: dt.Schedule) -> dt.Schedule:
    """The complete schedule of a CUDA call with these (meta) arguments under ``user``."""
    b = dataclasses.replace(alg.bind(args), device=torch.device("cuda"))
    return dt.compile(alg, user).complete(b)


def meta(*shape):
    return torch.empty(*shape, dtype=torch.float32, device="meta")


def test_wide_tf32_gemm_takes_persistent_128x256_tiles():
    s = gpu_schedule(linear, (meta(1024, 8192), meta(8192, 8192)), dt.Schedule(precision="tf32"))
    assert s.tile == {"i": 128, "j": 256, "k": 32}
    assert (s.num_warps, s.num_stages, s.persistent, s.access) == (8, 3, 1, "tma")


@pytest.mark.parametrize("case", ["NN layout", "small", "tf32x3", "user tiles"])
def test_other_fp32_gemms_keep_their_schedules(case):
    X, W = meta(1024, 8192), meta(8192, 8192)
    alg, args, user = linear, (X, W), dt.Schedule(precision="tf32")
    if case == "NN layout":      # W read N-major: tf32 wgmma needs K-major operands; the rule is for X @ W.T
        alg, args = matmul, (X, W)
    elif case == "small":        # 2^31 multiply-adds
        args = (meta(256, 1024), meta(8192, 1024))
    elif case == "tf32x3":       # three passes: 4 stages of 128x128x32 (bench/results/issue14)
        user = dt.Schedule(precision="tf32x3")
    else:
        user = dt.Schedule(precision="tf32", tile={"i": 128, "j": 128})
    s = gpu_schedule(alg, args, user)
    assert s.persistent == 0 and s.tile["j"] == 128, s


@pytest.mark.parametrize("pieces", [0, 2])
def test_wide_tf32_knobs_run_right(pieces):
    # the rule's knobs (TMA, persistent, flattened, output in pieces, tf32) at interpreter tiles; 67 x 44 x 100
    # (rows of 176 and 400 bytes: TMA-addressable; edge tiles clipped; more tiles than programs)
    M, K, N = 67, 44, 100
    g = torch.Generator().manual_seed(0)
    X, W = torch.randn(M, K, generator=g), torch.randn(N, K, generator=g)
    sched = dt.Schedule(tile={"i": 16, "j": 32, "k": 16}, access="tma", persistent=1, store_pieces=pieces,
                        num_warps=4, num_stages=3, precision="tf32", group={"i": 2})
    src = dt.compile(linear, sched).source_for(X, W)
    assert "flatten=True" in src and "desc_out" in src and ("tl.split(" in src) == (pieces == 2)
    check(linear, (X, W), sched, torch_ref=lambda a, b: a @ b.T, tol=2e-3)
