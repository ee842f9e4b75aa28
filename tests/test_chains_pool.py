"""Max pooling over blocks of a GEMM's output columns (issue 14): ``max over c of X[i, k] * W[g, c, k]``.

- a loop axis of tile 1 binds a scalar index (``AxisPlan.scalar``): the contraction inside the loop stays a 2-d
  ``tl.dot`` of (i, g) tiles, and the pooled value folds elementwise as the loop goes (no block dim of size 1);
- the heuristic fuses the GEMM into the pooling stage on the GPU (``dot_rules._pool_fused``): one kernel for
  max pooling, two when the pooled values are reduced further (a kernel over (i, g) tiles, then the rest);
- that fused kernel's outer loop is not pipelined (the dot loop inside it is, by the launch option);
- the runtime's TMA pick looks at the dot operands only (a grouped bias of 8-byte rows keeps TMA on);
- group norm over the groups' columns (``dot_rules._group_rows_whole``): the GEMM a kernel of its own, the
  statistics and the output reading each group's columns once, whole.

Checked on the plan (CPU, an H200 binding) and on the interpreter against float64 at odd sizes (groups not a
multiple of the tile, C = 3 and 5, NaN-poisoned outputs).
"""

from __future__ import annotations

import re

import pytest
import torch

import dtriton as dt
from dtriton.ir import contraction_operands
from dtriton.plan import call_spec, plan_program

from conftest import TOL, check, randn
from test_chains import _gpu_complete, linear_max_pool, linear_max_pool_sum

FUSED = dt.Schedule(grid=("i", "g"), tile={"i": 16, "g": 16, "c": 1, "k": 16}, strategy={"c": "loop"},
                    stages={"sum0": dt.StageSchedule(place="fuse")})


def _pool_args(M, K, G, C, dtype, gen):
    return (randn(M, K, dtype=dtype, gen=gen), randn(G, C, K, dtype=dtype, gen=gen, scale=K ** -0.5),
            randn(G, C, dtype=dtype, gen=gen, scale=0.1))


def _source(alg, sched, args) -> str:
    k = dt.compile(alg, sched)
    return k.source_for(*args)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("M,K,G,C", [(37, 48, 5, 3), (1, 16, 17, 5), (33, 40, 16, 4)])
def test_scalar_loop_keeps_the_pooled_gemm_a_dot(dtype, M, K, G, C, gen):
    args = _pool_args(M, K, G, C, dtype, gen)
    src = _source(linear_max_pool, FUSED, args)
    # one kernel; the loop over c binds c0 itself (no offs_c block), the dot is 2-d over (i, g)
    assert src.count('"""Kernel ') == 1 and "tl.dot(" in src
    assert "offs_c" not in src and "tl.full((BLOCK_I, BLOCK_G)," in src
    check(linear_max_pool, args, FUSED, tol=2 * TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_scalar_loop_of_a_plain_reduction(dtype, gen):
    """A row max looped one column at a time (tile 1, no dot): the same values as a blocked loop."""
    @dt.algorithm
    def row_max(x: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.max(x[i, j] * 2.0, over=j)[i]
    x = randn(13, 7, dtype=dtype, gen=gen)
    s = dt.Schedule(grid=("i",), tile={"i": 4, "j": 1}, strategy={"j": "loop"})
    assert "offs_j" not in _source(row_max, s, (x,))
    check(row_max, (x,), s)


def test_heuristic_fuses_the_gemm_into_max_pooling():
    big = (torch.empty(4096, 4096, dtype=torch.float16), torch.empty(1024, 4, 4096, dtype=torch.float16),
           torch.empty(1024, 4, dtype=torch.float16))
    s = _gpu_complete(linear_max_pool, None, big)
    assert s.stage("sum0").place == "fuse" and s.grid == ("i", "g") and s.group == {"i": 8}
    assert s.tile["c"] == 1 and s.strategy["c"] == "loop" and s.tile["i"] == s.tile["g"] == 128
    # a layout given: the rule leaves it alone
    assert _gpu_complete(linear_max_pool, dt.Schedule(tile={"i": 64}), big).stage("sum0").place == "auto"
    # fp32 (3xTF32): 64 pooled columns a program at 8 warps (128 spilled when compiled for sm_90)
    f32 = _gpu_complete(linear_max_pool, None, tuple(t.float() for t in big))
    assert f32.stage("sum0").place == "fuse" and f32.tile["g"] == 64 and f32.num_warps == 8


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_pooled_then_summed_runs_in_two_kernels(dtype, gen):
    """max pooling then a sum over the groups: the pooling kernel over (i, g) tiles with the GEMM fused, then the
    sum (it was GEMM kernel, pooling kernel, sum kernel: 0.30x torch.compile on the H200)."""
    big = (torch.empty(4096, 4096, dtype=dtype), torch.empty(512, 16, 4096, dtype=dtype),
           torch.empty(512, 16, dtype=dtype))
    s = _gpu_complete(linear_max_pool_sum, None, big)
    mx = s.stage("max0")
    assert s.stage("sum0").place == "fuse" and mx.place == "materialize" and mx.grid == ("i", "g")
    assert mx.group == {"i": 8} and mx.tile == {"c": 1} and mx.strategy == {"c": "loop"}
    args = _pool_args(37, 48, 21, 5, dtype, gen)
    small = s.replace(access="pointer", tile={"i": 16, "g": 16, "c": 1, "k": 16}, num_stages=2)
    b = linear_max_pool_sum.bind(args)
    prog = plan_program(linear_max_pool_sum, dt.compile(linear_max_pool_sum, small).complete(b), b,
                        call_spec(linear_max_pool_sum, b, args, True, None, frozenset()))
    assert len(prog.kernels) == 2
    check(linear_max_pool_sum, args, small, tol=2 * TOL[dtype])


def test_pooling_loop_around_a_dot_is_not_pipelined():
    """On an H200 binding the fused kernel's loop over c is a plain ``range`` (the dot loop inside is pipelined
    by the launch option; a software-pipelined loop around another loop is not what Triton pipelines)."""
    from dtriton.backends import default_backend
    big = (torch.empty(256, 256, dtype=torch.float16), torch.empty(64, 4, 256, dtype=torch.float16),
           torch.empty(64, 4, dtype=torch.float16))
    b = linear_max_pool.bind(big)
    b.device = torch.device("cuda")
    s = dt.compile(linear_max_pool).complete(b).replace(access="pointer")
    assert s.num_stages >= 3
    src, _ = default_backend().render(plan_program(linear_max_pool, s, b,
                                                   call_spec(linear_max_pool, b, big, False, None, frozenset())))
    assert "for c0 in range(" in src and "tl.dot(" in src


def test_tma_pick_reads_the_dot_operands_only():
    assert contraction_operands(linear_max_pool) == {"X", "W_g"}
    assert contraction_operands(linear_max_pool_sum) == {"X", "W_g"}


def test_fused_pooling_through_tma_descriptors(gen):
    """The GPU's form: the weight read through a 3-d TMA descriptor in boxes of one column of each group at the
    loop's scalar index (Triton's interpreter runs the descriptors)."""
    args = _pool_args(48, 64, 32, 4, torch.float16, gen)
    s = FUSED.replace(access="tma")
    src = _source(linear_max_pool, s, args)
    # the loop's scalar index: the loop variable (on the interpreter cast to a tensor first)
    assert re.search(r"desc_W_g\.load\(\[pid_g \* BLOCK_G, (c0|c_index_\d+), k0\]\)", src), src
    check(linear_max_pool, args, s, tol=2 * TOL[torch.float16])


@dt.algorithm
def linear_group_norm(X: dt.Tensor["M", "K"], W_g: dt.Tensor["G", "C", "K"], b_g: dt.Tensor["G", "C"]):
    i, g, c, k = dt.axes("i g c k")
    y = dt.sum(X[i, k] * W_g[g, c, k], over=k) + b_g[g, c]
    yc = y - dt.mean(y, over=c)
    return (yc * dt.rsqrt(dt.mean(yc * yc, over=c) + 1e-5))[i, g, c]


@pytest.mark.parametrize("C,rows", [(128, 128), (256, 64)])
def test_group_norm_statistics_read_each_group_once(C, rows):
    N = 4096 if C == 128 else 8192
    big = (torch.empty(4096, 4096, dtype=torch.float16), torch.empty(N // C, C, 4096, dtype=torch.float16),
           torch.empty(N // C, C, dtype=torch.float16))
    s = _gpu_complete(linear_group_norm, None, big)
    g = s.stage("sum0")
    # the GEMM apart at 128 x 128 (fused, its epilogue was slower on the H200: 302.6 us against 260.9), persistent;
    # groups of 256 columns in a GEMM of 2^37 multiply-adds: 128 x 256 (the wide GEMM's tiles)
    assert g.place == "materialize" and g.tile["i"] == 128 and g.tile["c"] == min(C, 256) and g.grid == ("c", "i", "g")
    assert g.persistent == 1
    assert s.strategy["c"] == "whole" and s.tile["c"] == C and s.tile["i"] == rows
    wide = (big[0], torch.empty(8, 512, 4096, dtype=torch.float16), torch.empty(8, 512, dtype=torch.float16))
    assert _gpu_complete(linear_group_norm, None, wide).strategy.get("c") != "whole"


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("M,K,G,C", [(37, 48, 5, 12), (1, 16, 3, 16), (33, 40, 2, 30)])
def test_group_norm_with_whole_groups_is_right(dtype, M, K, G, C, gen):
    args = _pool_args(M, K, G, C, dtype, gen)
    width = max(16, 1 << (C - 1).bit_length())
    s = dt.Schedule(grid=("i", "g"), tile={"i": 16, "g": 1, "c": width, "k": 16}, strategy={"c": "whole"},
                    stages={"sum0": dt.StageSchedule(place="materialize", grid=("c", "i", "g"), group={"i": 8},
                                                     tile={"i": 16, "c": 16, "g": 1})})
    src = _source(linear_group_norm, s, args)
    assert src.count('"""Kernel ') == 2 and "for c0" not in src   # c on the GEMM's grid, whole after it
    check(linear_group_norm, args, s, tol=4 * TOL[dtype] if dtype != torch.float32 else 1e-4)


def test_a_sum_over_the_groups_columns_is_not_fused_pooling():
    """Only max/min pooling fuses the GEMM: a sum over the extra axis (a GQA backward's dK over the heads that
    share K) may be split by later rules, which a fused product cannot be (the GQA default was refused)."""
    @dt.algorithm
    def linear_sum_pool(X: dt.Tensor["M", "K"], W_g: dt.Tensor["G", "C", "K"]):
        i, g, c, k = dt.axes("i g c k")
        return dt.sum(dt.sum(X[i, k] * W_g[g, c, k], over=k), over=c)[i, g]
    big = (torch.empty(4096, 4096, dtype=torch.float16), torch.empty(1024, 4, 4096, dtype=torch.float16))
    assert _gpu_complete(linear_sum_pool, None, big).stage("sum0").place != "fuse"
