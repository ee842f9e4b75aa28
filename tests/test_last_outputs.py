"""Outputs stored by the last program of a split kernel (``split_mode="last"``,
:func:`dtriton.plan.last_finish.absorb_outputs`).

An output that is a function of split reductions' final values alone (a column sum, a column mean,
a norm of columns, layer norm's dw and db) is stored by the program that folds the partials, so a
split column reduction is one kernel. On the interpreter against float64 (outputs poisoned with
NaN), at sizes the tiles and splits do not divide, size 1 and primes, in fp32, fp16 and bf16: the
same bits as ``split_mode="finish"`` (the same fold in the same order), one launch; outputs that
also read an input keep their own kernel; the final buffers no kernel reads are not allocated; the
derived layer-norm backward runs in two kernels against float64 autograd.
"""
from __future__ import annotations

import pytest
import torch

import dtriton as dt
from conftest import check, launches
from dtriton.backends.triton.counters import counter_memory
from dtriton.library import column_sum, layer_norm, rms_norm
from dtriton.plan.callspec import call_spec
from dtriton.plan.decide import plan_program
from dtriton.schedule import complete_schedule


@dt.algorithm
def column_mean(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.mean(X[i, j], over=i)[j]


@dt.algorithm
def column_norm(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.sqrt(dt.sum(X[i, j] * X[i, j], over=i) + 1.0)[j]


@dt.algorithm
def column_sum_and_sumsq(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.sum(X[i, j], over=i)[j], (dt.sum(X[i, j] * X[i, j], over=i) * 0.5)[j]


@dt.algorithm
def scaled_column_sum(X: dt.Tensor["M", "N"], w: dt.Tensor["N"]):
    i, j = dt.axes("i j")
    return (dt.sum(X[i, j], over=i) * w[j])[j]


def split_rows(split: int, mode: str, tile_j: int = 8) -> dt.Schedule:
    return dt.Schedule(grid=("j",), tile={"j": tile_j, "i": 4}, strategy={"i": "loop"}, split={"i": split},
                       split_mode=mode)


TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
SHAPES = [(37, 20, 3), (1, 5, 2), (13, 1, 4), (64, 33, 8), (7, 17, 2)]


@pytest.mark.parametrize("alg", [column_sum, column_mean, column_norm, column_sum_and_sumsq],
                         ids=lambda a: a.name)
@pytest.mark.parametrize("M, N, split", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_split_column_reductions_are_one_kernel_with_finish_s_bits(alg, M, N, split, dtype):
    torch.manual_seed(M * 100 + N)
    x = (torch.randn(M, N) * 2.0 + 0.5).to(dtype)
    got = {}
    for mode in ("finish", "last"):
        k, outs = check(alg, [x], split_rows(split, mode), tol=TOL[dtype])
        got[mode] = (outs, launches(k))
    assert got["last"][1] == 1, got["last"][1]
    assert got["finish"][1] == 3, got["finish"][1]   # the split kernel, the finishing kernel, the output kernel
    for a, b in zip(got["finish"][0], got["last"][0]):
        assert torch.equal(a, b)
    assert not counter_memory(torch.device("cpu"), 1).any()   # every counter back to 0


def test_a_second_call_on_fresh_data_computes_its_own_values():
    k = dt.compile(column_sum, split_rows(3, "last"))
    for seed in (0, 1):
        torch.manual_seed(seed)
        x = torch.randn(23, 11)
        check(column_sum, [x], kernel=k, tol=1e-5)
        assert launches(k) == 1


def test_an_output_reading_an_input_keeps_its_kernel():
    torch.manual_seed(0)
    x, w = torch.randn(29, 19), torch.randn(19)
    k, _ = check(scaled_column_sum, [x, w], split_rows(3, "last"), tol=1e-5)
    assert launches(k) == 2   # the split kernel (its last program folds), then x-sum times w
    src = k.source_for(x, w)
    assert "buf_sum0_final_ptr" in src.split("def scaled_column_sum_out")[1]


def test_the_unread_final_buffers_are_neither_allocated_nor_stored():
    x = torch.randn(37, 20)
    k = dt.compile(column_sum_and_sumsq, split_rows(3, "last"))
    prog = k.program_for(x)
    assert [kp.name for kp in prog.kernels] == ["column_sum_and_sumsq_sum0_sum1"], [kp.name for kp in prog.kernels]
    assert not [b for b in prog.buffers if b.endswith("_final")], list(prog.buffers)
    lf = prog.kernels[0].last_finish
    assert lf.absorbed and {st.target for st in lf.outputs} == {"out0", "out1"}
    src = k.source_for(x)
    last = src.split("== 2:")[1]
    assert "tl.store(out0_ptr" in last and "tl.store(out1_ptr" in last and "_final_ptr" not in src


def _gpu_program(alg, args):
    b = alg.bind(args)
    b.device = torch.device("cuda")
    sched = complete_schedule(alg, None, b)
    spec = call_spec(alg, b, args, False)
    return sched, plan_program(alg, sched, b, spec)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_backward_plans_two_kernels_on_the_gpu(dtype):
    """dX, then dw and db split over rows whose last programs store the 16-bit outputs (was three
    kernels: a casting kernel folding the partials)."""
    g = dt.grad(layer_norm, save="all").algorithms[0]
    M, N = 4096, 8192
    meta = dict(dtype=dtype, device="meta")
    args = [torch.empty(M, N, **meta), torch.empty(N, **meta), torch.empty(N, **meta), torch.empty(M, N, **meta),
            torch.empty(M, device="meta"), torch.empty(M, device="meta")]
    sched, prog = _gpu_program(g, args)
    assert sched.split_mode == "last"
    assert len(prog.kernels) == 2, [k.name for k in prog.kernels]
    lf = prog.kernels[1].last_finish
    assert {st.target for st in lf.outputs} == {"out1", "out2"}
    assert not [b for b in prog.buffers if b.endswith("_final")]
    assert prog.kernels[1].num_stages == 3   # dw and db: the row loop pipelined (heuristics.COLUMN_STAGES)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rms_norm_backward_plans_two_kernels_and_an_unpipelined_column_sum(dtype):
    """RMSNorm's dw alone: 'last' too, its row loop not pipelined (3 stages cost it 6 us on the H200, s16)."""
    g = dt.grad(rms_norm, save="all").algorithms[0]
    M, N = 4096, 8192
    meta = dict(dtype=dtype, device="meta")
    args = [torch.empty(M, N, **meta), torch.empty(N, **meta), torch.empty(M, N, **meta), torch.empty(M, device="meta")]
    sched, prog = _gpu_program(g, args)
    assert sched.split_mode == "last" and len(prog.kernels) == 2, [k.name for k in prog.kernels]
    assert {st.target for st in prog.kernels[1].last_finish.outputs} == {"out1"}
    assert prog.kernels[1].num_stages == 2


@pytest.mark.parametrize("M, N", [(13, 37), (1, 9), (33, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_layer_norm_gradients_with_the_last_program_storing_dw_db(M, N, dtype):
    """The derived backward with dw/db split over rows and folded by the last program, against
    float64 autograd; the backward is two kernels."""
    torch.manual_seed(M + N)
    X = torch.randn(M, N).to(dtype).requires_grad_()
    w = (torch.randn(N) + 1.0).to(dtype).requires_grad_()
    b = torch.randn(N).to(dtype).requires_grad_()
    name = dt.grad(layer_norm, save="all").algorithms[0].name
    cols = dt.StageSchedule(grid=("j",), tile={"j": 8, "i": 4}, strategy={"i": "loop"})
    bwd = dt.Schedule(grid=("i",), tile={"i": 1}, strategy={"j": "whole"}, split={"i": 3}, split_mode="last",
                      stages={s: cols for s in ("d_w", "d_b", "out1", "out2")})
    f = dt.compile_autograd(layer_norm, backward_schedules={name: bwd})
    gy = torch.randn(M, N).to(dtype)
    y = f(X, w, b)
    y.backward(gy)
    X64, w64, b64 = (t.detach().double().requires_grad_() for t in (X, w, b))
    torch.nn.functional.layer_norm(X64, (N,), w64, b64, eps=1e-5).backward(gy.double())
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for got, ref, what in ((X.grad, X64.grad, "dX"), (w.grad, w64.grad, "dw"), (b.grad, b64.grad, "db")):
        err = ((got.double() - ref).norm() / (ref.norm() + 1e-30)).item()
        assert err < tol, (what, err)
    assert f.launch_counts()["backward"] == 2, f.launch_counts()


@pytest.mark.parametrize("interleaved", [False, True])
def test_a_split_slice_past_the_axis_end_runs_no_step(interleaved):
    """1031 rows split 8 ways in slices of 160: the eighth starts at 1120. Its printed end is at least its
    start, so the slice's loop is empty also where Triton unrolls it (Triton 3.6 takes a negative trip
    count as unsigned: on the H200 the remainder loop re-read rows 992-1030, s16 call 5); the loop's
    range is evaluated here as Python would, from the printed lines."""
    rows = 100 if interleaved else 1031   # (interleaved: slices 4-7 start at tiles 128-224, past 100 rows)
    x = torch.empty(rows, 9)
    s = split_rows(8, "partials", tile_j=8).replace(tile={"j": 8, "i": 32})
    if interleaved:   # slices of tiles p, p + 8, ...: the end is the axis's size, at least the slice's start
        s = s.replace(split_order="interleaved")
    src = dt.compile(column_sum, s).source_for(x)
    assert ("interleaved slices" in src) == interleaved
    lo = next(line.split(" = ", 1)[1].split("  #")[0] for line in src.splitlines() if line.strip().startswith("i_lo = "))
    hi = next(line.split(" = ", 1)[1].split("  #")[0] for line in src.splitlines() if line.strip().startswith("i_hi = "))
    env = {"size_i": rows, "BLOCK_I": 32, "tl": type("tl", (), {"maximum": max, "minimum": min})}
    for p in range(8):
        env["pid_split"] = p
        a = env["i_lo"] = eval(lo.strip(), env)   # noqa: S307 - the kernel's own integer expressions
        b = eval(hi.strip(), env)   # noqa: S307
        assert b >= a, (p, a, b)
