"""The IR's analysis (dtriton.ir.analysis) and walks: each fact computed in one place."""

import pytest
import torch

import dtriton as dt
from dtriton.ir import (Binary, Reduce, can_split, contractions, grid_candidates, mul_factors, online_candidate,
                        reduction_stages, split_blockers, splittable, stage_grid, sum_of_products, walk)
from dtriton.library import attention, layer_norm, linear_relu, matmul, softmax, spatial_diffusion
from dtriton.plan import lower


def test_contractions_name_the_dot_axes_in_axis_order():
    assert contractions(matmul) == {"sum0": ("i", "j", "k")}
    assert contractions(linear_relu) == {"sum0": ("i", "j", "k")}
    assert contractions(softmax) == {}
    assert contractions(layer_norm) == {}   # a mean of one factor is no product
    # q.k over d, then p.v over j; the row sum of p (sum2) has one factor
    assert contractions(attention) == {"sum0": ("i", "j", "d"), "sum1": ("i", "e", "j")}
    assert contractions(spatial_diffusion) == {"sum0": ("k", "c", "v"), "sum1": ("v", "c", "k")}
    assert [s.name for s in reduction_stages(attention, "j")] == ["max0", "sum1", "sum2"]


def test_sum_of_products_is_the_evaluators_einsum():
    r = matmul.stages["sum0"].node
    fs = sum_of_products(r)
    assert fs is not None and [f.tensor.name for f in fs] == ["A", "B"]
    assert sum_of_products(softmax.stages["max0"].node) is None
    assert sum_of_products(softmax.stages["sum0"].node) is None   # a sum of exp(...), no product


def test_online_candidates_are_axes_a_running_max_reduces():
    assert online_candidate(softmax, "j") and not online_candidate(softmax, "i")
    assert not online_candidate(layer_norm, "j") and not online_candidate(matmul, "k")


@dt.algorithm
def _row_argmax(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.argmax(X[i, j], over=j)[i]


def test_split_legality_reads_the_combiner():
    assert splittable(matmul, "k") and splittable(layer_norm, "j") and splittable(softmax, "j")
    assert not splittable(_row_argmax, "j")
    assert [s.name for s in split_blockers(_row_argmax, "j")] == ["argmax0"]
    assert splittable(_row_argmax, "i")   # no stage reduces i
    assert can_split(softmax.stages["max0"].node) and not can_split(_row_argmax.stages["argmax0"].node)


def test_split_of_an_arg_reduction_is_refused_with_the_stage_and_kind():
    x = torch.randn(8, 64)
    with pytest.raises(dt.ScheduleError, match=r"stage 'argmax0' is an argmax over \['j'\]"):
        dt.compile(_row_argmax, dt.Schedule(split={"j": 2}))(x)


def test_stage_grid_of_reductions_outputs_and_overrides():
    assert stage_grid(softmax, "max0", ("i",)) == ("i",)            # a reduction maps its free axes
    assert stage_grid(softmax, "out", ("i",)) == ("i",)
    assert stage_grid(softmax, "out", None) is None                  # not chosen yet
    assert stage_grid(matmul, "out", ("j", "i", "k")) == ("j", "i")  # restricted to the output's axes
    assert stage_grid(matmul, "out", ("i",), own=("j",)) == ("j",)
    assert stage_grid(matmul, "out", ("i",), own=("k",)) == ("k",)   # validation reports it, lowering raises
    with pytest.raises(dt.ScheduleError, match="not free axes of stage 'out'"):
        stage_grid(matmul, "out", ("i",), own=("k",), strict=True)
    s = dt.Schedule(grid=("i",), stages={"out": {"grid": ("j",)}})
    assert s.stage_grid(matmul, "out") == ("j",) and s.stage_grid(matmul, "sum0") == ("i", "j")


def test_grid_candidates():
    assert grid_candidates(softmax, ("i",), []) == {"i"}
    assert grid_candidates(softmax, None, []) == {"i", "j"}          # the reduced output axis may be mapped
    assert grid_candidates(matmul, (), [("j",), None]) == {"i", "j"}  # sum0's free axes, a stage grid
    assert grid_candidates(spatial_diffusion, (), []) == {"k", "c", "v"}


def test_lowering_uses_the_stage_grid():
    b = matmul.bind((torch.randn(16, 8), torch.randn(8, 4)))
    full = dt.compile(matmul).complete(b)
    prog = lower(matmul, full, b.axis_sizes)
    assert prog.kernels[-1].grid == list(stage_grid(matmul, "out", full.grid))
    assert prog.read_problems() == [] and prog.verify() == []


def test_walk_with_a_children_function_sees_factors_not_the_product_tree():
    r = matmul.stages["sum0"].node
    seen = list(walk([r], children=lambda n: sum_of_products(n) or n.children()))
    assert not any(isinstance(n, Binary) and n.op == "mul" for n in seen)
    assert any(isinstance(n, Reduce) for n in seen) and len(mul_factors(r.x)) == 2
