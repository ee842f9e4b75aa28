"""Issue 17 (reliability): each case is a small legal input that gave a wrong value, a raw crash or a
wrong refusal; every test here failed before its fix. Shapes are tiny (Triton's interpreter)."""

from __future__ import annotations

import math

import pytest
import torch

import dtriton as dt

from conftest import poisoned_outputs


def same_bits(out: torch.Tensor, ref: torch.Tensor) -> None:
    """Equal values with equal signs of zero and equal NaN positions."""
    assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
    torch.testing.assert_close(out, ref, equal_nan=True)
    assert torch.equal(torch.signbit(out), torch.signbit(ref)), (out, ref)


# ----------------------------------------------------------------------------------------------
# case 9: a number raised to an expression
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("base", [2.0, 0.5, 1.0, 3])
def test_case9_number_to_the_power_of_an_expression(base):
    @dt.algorithm
    def rpow(X: dt.Tensor["N"]):
        i, = dt.axes("i")
        return (base ** X[i])[i]

    X = torch.tensor([-3.0, -0.5, 0.0, 0.25, 1.0, 7.0, 10.0])
    ref = torch.pow(torch.tensor(float(base), dtype=torch.float64), X.double()).float()
    torch.testing.assert_close(dt.compile(rpow)(X), ref)
    torch.testing.assert_close(rpow.reference(X), ref)


@pytest.mark.parametrize("base", [-2.0, 0.0, -0.0, -3, 0, 2, float("inf")])
def test_case9_any_number_base_is_torch_pow(base):
    """``c ** x`` for zero, negative, infinite and integer bases: torch.pow(c, x) (NaN for a negative
    base and a non-integer exponent), its dtype (an integer base to an integer tensor: int64, exact),
    in the kernel and the reference; a non-numeric base is refused."""
    @dt.algorithm
    def rpow(X: dt.Tensor["N"]):
        i, = dt.axes("i")
        return (base ** X[i])[i]

    X = torch.tensor([-3.0, -2.0, -0.5, -0.0, 0.0, 0.25, 1.0, 3.0, 7.0, float("nan"), float("inf"), -float("inf")])
    Xi = torch.tensor([0, 1, 2, 3, 5, 9])
    for x in (X, Xi) if isinstance(base, int) else (X,):
        ref = base ** x
        for got in (dt.compile(rpow)(x), rpow.reference(x)):
            assert got.dtype == ref.dtype
            torch.testing.assert_close(got, ref, equal_nan=True, rtol=2e-7, atol=0)
    if isinstance(base, float):   # the gradient in x: c ** x * log(c), as torch's (the log of c in double)
        x1 = X.double().requires_grad_()
        dt.compile_autograd(rpow)(x1).sum().backward()
        x2 = X.double().requires_grad_()
        torch.pow(base, x2).sum().backward()
        torch.testing.assert_close(x1.grad, x2.grad, equal_nan=True, rtol=1e-15, atol=0)
    i, = dt.axes("i")
    with pytest.raises(dt.AlgorithmError, match="base"):
        "2" ** i


# ----------------------------------------------------------------------------------------------
# case 3: signed zeros
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def recip_neg(X: dt.Tensor["N"]):
    i, = dt.axes("i")
    return (1.0 / (-X[i]))[i]


@dt.algorithm
def recip_tanh(X: dt.Tensor["N"]):
    i, = dt.axes("i")
    return (1.0 / dt.tanh(X[i]))[i]


@dt.algorithm
def signed_literals(X: dt.Tensor["N"]):
    i, = dt.axes("i")
    return (1.0 / (X[i] * 0.0 + -0.0))[i], (1.0 / (X[i] * 0.0 + 0.0))[i]


def test_case3_negation_keeps_the_sign_of_zero():
    X = torch.tensor([0.0, -0.0, 1.0, -2.0])
    same_bits(dt.compile(recip_neg)(X), 1.0 / (-X))
    same_bits(recip_neg.reference(X), 1.0 / (-X))


def test_case3_tanh_of_negative_zero():
    X = torch.tensor([-0.0, 0.0, -0.05, 0.05, -3.0, 3.0])
    same_bits(dt.compile(recip_tanh)(X), 1.0 / torch.tanh(X))


def test_case3_negative_zero_literal_is_kept_and_not_merged_with_zero():
    X = torch.tensor([-1.0, 2.0])     # X * 0.0 is -0.0 then +0.0
    want = (1.0 / (X * 0.0 + -0.0), 1.0 / (X * 0.0 + 0.0))
    for got in (dt.compile(signed_literals)(X), signed_literals.reference(X)):
        for g, w in zip(got, want):
            same_bits(g, w)


# ----------------------------------------------------------------------------------------------
# case 7: float math of an int scalar parameter
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", ["exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "abs"])
def test_case7_unary_math_of_an_int_scalar(fn):
    @dt.algorithm
    def f(X: dt.Tensor["N"], s: int):
        i, = dt.axes("i")
        return (X[i] + getattr(dt, fn)(s))[i]

    X = torch.randn(5)
    want = (X.double() + getattr(torch, fn)(torch.tensor(3.0, dtype=torch.float64))).float()
    torch.testing.assert_close(dt.compile(f)(X, 3), want)
    torch.testing.assert_close(f.reference(X, 3), want)


# ----------------------------------------------------------------------------------------------
# case 6: the default schedule of single-query attention (no free axis of the scores in the output)
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def one_query_attention(q: dt.Tensor["D"], K: dt.Tensor["S", "D"], V: dt.Tensor["S", "E"]):
    j, d, e = dt.axes("j d e")
    s = dt.sum(q[d] * K[j, d], over=d)
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[j, e], over=j) / dt.sum(p, over=j))[e]


def test_case6_default_schedule_of_single_query_attention():
    torch.manual_seed(0)
    q, K, V = torch.randn(8), torch.randn(11, 8), torch.randn(11, 5)
    out = dt.compile(one_query_attention)(q, K, V)
    want = torch.softmax(K.double() @ q.double(), 0) @ V.double()
    torch.testing.assert_close(out, want.float(), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# case 1: a fused reduction inside a kernel that loops over the reduced axis
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def minus_max_transposed(X: dt.Tensor["M", "N", "K"]):
    i, j, k = dt.axes("i j k")
    return (X[i, j, k] - dt.max(X[i, j, k], over=k))[k, j, i]


def test_case1_fuse_inside_a_loop_over_the_reduced_axis_is_refused_with_the_fix():
    X = torch.randn(2, 1, 13)
    s = dt.Schedule(tile={"k": 8}, strategy={"k": "loop", "j": "loop"}, stages={"max0": {"place": "fuse"}})
    with pytest.raises(dt.ScheduleError, match=r"max0.*'k'.*materiali"):
        dt.compile(minus_max_transposed, s)(X)


@pytest.mark.parametrize("place", ["auto", "materialize"])
def test_case1_other_placements_of_the_same_schedule_are_right(place):
    X = torch.randn(2, 3, 13)
    s = dt.Schedule(tile={"k": 8}, strategy={"k": "loop", "j": "loop"}, stages={"max0": {"place": place}})
    want = (X.double() - X.double().amax(2, keepdim=True)).permute(2, 1, 0).float()
    torch.testing.assert_close(dt.compile(minus_max_transposed, s)(X), want)


def test_case1_fuse_with_the_reduced_axis_whole_or_free_axes_on_the_grid_still_works():
    X = torch.randn(2, 3, 13)
    want = (X.double() - X.double().amax(2, keepdim=True)).permute(2, 1, 0).float()
    for s in (dt.Schedule(strategy={"k": "whole", "j": "loop"}, tile={"j": 1}, stages={"max0": {"place": "fuse"}}),
              dt.Schedule(grid=("i", "j"), tile={"k": 8, "i": 1, "j": 1}, strategy={"k": "loop"},
                          stages={"max0": {"place": "fuse"}})):
        torch.testing.assert_close(dt.compile(minus_max_transposed, s)(X), want)


# ----------------------------------------------------------------------------------------------
# case 11: the schedule is completed around the user's place="fuse"
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def scaled_by_global_max(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X[i, j] * dt.tanh(dt.max(X[i, j], over=(i, j))))[i, j]


@dt.algorithm
def softmax(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    e = dt.exp(X[i, j] - dt.max(X[i, j], over=j))
    return (e / dt.sum(e, over=j))[i, j]


def test_case11_user_fuse_without_a_grid_keeps_the_reduced_axes_off_the_grid():
    X = torch.randn(5, 6)
    out = dt.compile(scaled_by_global_max, dt.Schedule(stages={"max0": {"place": "fuse"}}))(X)
    torch.testing.assert_close(out, (X.double() * torch.tanh(X.double().max())).float())
    for st in ("sum0", "max0"):
        out = dt.compile(softmax, dt.Schedule(stages={st: {"place": "fuse"}}))(X)
        torch.testing.assert_close(out, torch.softmax(X.double(), 1).float())


def test_case11_a_user_grid_that_splits_the_fused_axis_is_still_refused():
    with pytest.raises(dt.ScheduleError, match="take"):
        dt.compile(scaled_by_global_max, dt.Schedule(grid=("i",), strategy={"j": "whole"}, stages={"max0": {"place": "fuse"}}))(torch.randn(5, 6))


# ----------------------------------------------------------------------------------------------
# case 12: the in-place check accounts for placement
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def centred(X: dt.Tensor["N"]):
    i, = dt.axes("i")
    return (X[i] - dt.mean(X[i], over=i))[i]


@dt.algorithm
def matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    i, j, k = dt.axes("i j k")
    return dt.sum(A[i, k] * B[k, j], over=k)[i, j]


@pytest.mark.parametrize("n", [1, 11, 300])
def test_case12_in_place_when_the_reduction_is_materialised_by_an_earlier_kernel(n):
    X = torch.randn(n)
    want = X.double() - X.double().mean()
    Y = X.clone()
    kernel = dt.compile(centred)
    assert kernel(Y, out=Y) is not None
    torch.testing.assert_close(Y, want.float())


def test_case12_in_place_still_refused_where_other_programs_read_what_is_written():
    A = torch.randn(6, 6)
    with pytest.raises(dt.ShapeError, match="in-place"):
        dt.compile(matmul)(A, A.clone(), out=A)
    X = torch.randn(5, 6)
    Y = X.clone()
    dt.compile(softmax)(Y, out=Y)   # a row per program: allowed, as before
    torch.testing.assert_close(Y, torch.softmax(X.double(), 1).float())


# ----------------------------------------------------------------------------------------------
# cases 4 and 5: result dtypes follow torch's promotion
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def row_sum(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.sum(X[i, j], over=j)[i]


@dt.algorithm
def row_max(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.max(X[i, j], over=j)[i]


@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.int64, torch.int8, torch.float16])
def test_case4_reductions_of_bool_and_integer_inputs_have_torch_dtypes(dtype):
    X = (torch.randn(3, 37) * 5).to(dtype)
    for alg, f in ((row_sum, lambda x: x.sum(1)), (row_max, lambda x: x.amax(1))):
        want = f(X)
        for got in (dt.compile(alg)(X), alg.reference(X)):
            assert got.dtype == want.dtype, (alg.name, got.dtype, want.dtype)
            torch.testing.assert_close(got, want)


def test_case4_a_count_of_bools_above_2_to_the_24_is_exact():
    # computed exactly (float64 or integers), returned as int64: 2**24 + 5 is not a float32
    X = torch.ones(1, 2 ** 24 + 5, dtype=torch.bool)
    got = row_sum.reference(X)
    assert got.dtype == torch.int64 and int(got[0]) == 2 ** 24 + 5


@dt.algorithm
def select(C: dt.Tensor["N"], A: dt.Tensor["N"], B: dt.Tensor["N"]):
    i, = dt.axes("i")
    return dt.where(C[i] > 0, A[i], B[i])[i]


@dt.algorithm
def select_scalar(C: dt.Tensor["N"], A: dt.Tensor["N"]):
    i, = dt.axes("i")
    return dt.where(C[i] > 0, A[i], 70000.0)[i]


@dt.algorithm
def arith(X: dt.Tensor["N"], s: int, f: float):
    i, = dt.axes("i")
    return (X[i] + 1)[i], (X[i] * 2.5)[i], (X[i] / 2)[i], (X[i] * s)[i], (X[i] + f)[i], (X[i] > 0)[i], (i + X[i])[i]


def test_case5_where_promotes_its_branches_only():
    C, A, B = torch.randn(9), torch.randn(9).half(), torch.randn(9).half()
    want = torch.where(C > 0, A, B)
    for got in (dt.compile(select)(C, A, B), select.reference(C, A, B)):
        assert got.dtype == torch.float16
        torch.testing.assert_close(got, want)


def test_case5_a_python_scalar_branch_is_weak():
    C, A = torch.randn(9), torch.randn(9).half()
    want = torch.where(C > 0, A, 70000.0)
    assert want.dtype == torch.float16 and torch.isinf(want).any()
    for got in (dt.compile(select_scalar)(C, A), select_scalar.reference(C, A)):
        assert got.dtype == torch.float16
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32])
def test_case5_elementwise_result_dtypes_follow_torch(dtype):
    X = (torch.randn(7) * 4).to(dtype)
    want = (X + 1, X * 2.5, X / 2, X * 3, X + 0.5, X > 0, torch.arange(7) + X)
    ref = arith.reference(X, 3, 0.5)
    got = dt.compile(arith)(X, 3, 0.5)
    for g, r, w in zip(got, ref, want):
        assert g.dtype == r.dtype == w.dtype, (g.dtype, r.dtype, w.dtype)
        torch.testing.assert_close(g, w)
        torch.testing.assert_close(r, w)


# ----------------------------------------------------------------------------------------------
# case 2: a fully masked (all -inf) row gives torch's value under every strategy
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def sum_exp_shifted(S: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.sum(dt.exp(S[i, j] - dt.max(S[i, j], over=j)), over=j)[i]


def masked_rows(n: int) -> torch.Tensor:
    """Row 0 all -inf; row 1 -inf in its first tiles then finite; row 2 finite then -inf; row 3 random."""
    S = torch.randn(4, n)
    S[0] = -math.inf
    S[1, : n // 2] = -math.inf
    S[2, n // 2:] = -math.inf
    return S


@pytest.mark.parametrize("strategy", ["whole", "loop", "online"])
@pytest.mark.parametrize("n", [1, 5, 37])
def test_case2_all_minus_inf_row_follows_torch_under_every_strategy(strategy, n):
    S = masked_rows(n)
    want = torch.exp(S.double() - S.double().amax(1, keepdim=True)).sum(1).float()
    assert torch.isnan(want[0])
    sched = dt.Schedule(strategy={"j": strategy}, **({} if strategy == "whole" else {"tile": {"j": 4}}))
    got = dt.compile(sum_exp_shifted, sched)(S, out=poisoned_outputs(sum_exp_shifted, [S])[0])
    torch.testing.assert_close(got, want, equal_nan=True)
    torch.testing.assert_close(sum_exp_shifted.reference(S), want, equal_nan=True)


def test_case2_softmax_of_an_all_minus_inf_row_online_is_nan_as_torch():
    S = masked_rows(37)
    want = torch.softmax(S.double(), 1).float()
    got = dt.compile(softmax, dt.Schedule(strategy={"j": "online"}, tile={"j": 8}))(S)
    torch.testing.assert_close(got, want, equal_nan=True)


# ----------------------------------------------------------------------------------------------
# case 8: persistent kernels with a value that no tile axis feeds (tanh of a whole-input max)
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def scaled_by_other_max(X: dt.Tensor["M", "N", "K"], Y: dt.Tensor["L"]):
    i, j, k, l = dt.axes("i j k l")
    return (X[i, j, k] * dt.tanh(dt.max(Y[l], over=l)))[i, j, k]


@pytest.mark.parametrize("grid,tile", [(("i", "j", "k"), {"i": 1, "j": 1, "k": 1}),
                                       (("i",), {"i": 2}), (("j", "k"), {"j": 2, "k": 4})])
def test_case8_persistent_kernel_with_a_tile_independent_stage(grid, tile):
    X, Y = torch.randn(3, 4, 5), torch.randn(6)
    want = (X.double() * torch.tanh(Y.double().max())).float()
    strategy = {a: "whole" for a in "ijkl" if a not in grid}
    for persistent in (0, 1):
        s = dt.Schedule(persistent=persistent, grid=grid, tile=tile, strategy=strategy)
        out = dt.compile(scaled_by_other_max, s)(X, Y, out=poisoned_outputs(scaled_by_other_max, [X, Y])[0])
        torch.testing.assert_close(out, want)


# ----------------------------------------------------------------------------------------------
# case 10: a default schedule always compiles: resources checked first, shrink and retry on failure
# ----------------------------------------------------------------------------------------------
def test_case10_shrink_steps_down_stages_then_the_largest_block():
    from dtriton.schedule import shrink
    s = dt.Schedule(tile={"i": 128, "j": 64, "k": 32}, num_stages=4, strategy={"r": "whole"})
    sizes = {"i": 1000, "j": 1000, "k": 1000, "r": 300}
    steps = []
    while s is not None:
        steps.append(s)
        s = shrink(s, sizes)
    assert [x.num_stages for x in steps[:3]] == [4, 3, 2]
    # the whole axis r (padded 512) is the largest block: it loops in tiles of 256, then 128
    assert steps[3].strategy["r"] == "loop" and steps[3].tile["r"] == 256 and steps[3].tile["i"] == 128
    assert steps[4].tile["r"] == 128 and steps[4].tile["i"] == 128
    assert steps[5].tile["i"] == 64 or steps[5].tile["r"] == 64
    last = steps[-1]
    assert all(t <= 16 for t in last.tile.values()) and last.num_stages == 2


def test_case10_smem_estimate_of_the_largest_contraction():
    from dtriton.schedule import fits_smem, smem_estimate
    s = dt.Schedule(tile={"i": 128, "j": 128, "k": 64}, num_stages=4)
    assert smem_estimate(matmul, s, 2) == (128 * 64 + 64 * 128) * 2 * 4
    assert fits_smem(matmul, s, 2, 227 * 1024) and not fits_smem(matmul, s.replace(tile={"i": 256, "j": 256, "k": 128}),
                                                                   2, 227 * 1024)


class _OutOfResources(Exception):
    pass


class _SmallBackend:
    """The real backend, except that compiling a kernel with a block above 16 fails as Triton's
    OutOfResources does on a GPU."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def launch(self, fn, programs, args, meta, interpret):
        big = {a: p.block for a, p in meta.ir.axes.items() if p.block > 16}
        if big:
            raise _OutOfResources(f"out of resource: shared memory (blocks {big})")
        return self.real.launch(fn, programs, args, meta, interpret)

    def is_resource_error(self, exc):
        return isinstance(exc, _OutOfResources)


def test_case10_default_schedule_shrinks_and_retries_with_a_warning(monkeypatch):
    import dtriton.runtime.kernel as rk
    monkeypatch.setattr(rk, "_BACKEND", _SmallBackend(rk._BACKEND))
    A, B = torch.randn(37, 29), torch.randn(29, 23)
    k = dt.compile(matmul)
    with pytest.warns(dt.ScheduleWarning, match="exceeds a resource limit"):
        out = k(A, B)
    torch.testing.assert_close(out, (A.double() @ B.double()).float())
    assert all(t <= 16 for t in k.schedule_for(A, B).tile.values())
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)   # the smaller schedule is remembered: no retry
        torch.testing.assert_close(k(A, B), out)


def test_case10_a_given_schedule_is_not_changed(monkeypatch):
    import dtriton.runtime.kernel as rk
    monkeypatch.setattr(rk, "_BACKEND", _SmallBackend(rk._BACKEND))
    with pytest.raises(dt.CompileError, match="out of resource"):
        dt.compile(matmul, dt.Schedule(tile={"i": 32, "j": 32, "k": 32}))(torch.randn(37, 29), torch.randn(29, 23))


def test_case10_gpu_check_script_dry_run(tmp_path):
    """bench/default_compile_check.py (the lead runs it on the H200): one flushed line per case
    with its times, a final table, JSON; on the interpreter here with tiny shapes."""
    import json

    from conftest import run_bench
    out = run_bench(["bench/default_compile_check.py", "--dry-run", "--only", "GQA"], tmp_path)
    assert "... GQA dK (gather): gqa_grad_K" in out and "FAILURES: 0" in out
    assert "attention_grad" not in out   # --only
    assert "GPU default at full size: renders" in out
    rows = json.loads((tmp_path / "out" / "default_compile_check.json").read_text())["rows"]
    assert [r["algorithm"] for r in rows] == ["gqa_grad_K"] and rows[0]["status"] == "ok"
    assert rows[0]["rel_err"] < 1e-4 and rows[0]["first_s"] > 0


# ----------------------------------------------------------------------------------------------
# case 15: Triton 3.6's interpreter under numpy >= 2.4
# ----------------------------------------------------------------------------------------------
def test_case15_interpreter_loops_under_this_numpy(record_property):
    """Runs under whatever numpy is installed (CI pins one; the H200 image has 2.5): a kernel with
    runtime loops converts its loop bounds through the shim (numpy >= 2.4 refuses int() of a
    one-element array), with no DeprecationWarning under older numpy either."""
    import warnings

    import numpy as np

    from dtriton.backends.triton import npcompat
    record_property("numpy", np.__version__)
    print(f"numpy {np.__version__}; int() of a one-element array refused: {npcompat.needed()}")
    X = torch.randn(5, 37)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        out = dt.compile(softmax, dt.Schedule(strategy={"j": "loop"}, tile={"j": 8}))(X)
    torch.testing.assert_close(out, torch.softmax(X.double(), 1).float())


def test_division_of_two_literals_by_zero_is_ieee():
    """Found by the fuzzer: ``0.0 / 0.0`` between literals was divided by Python (ZeroDivisionError)."""
    from dtriton.ir import Binary, Const

    def div(a, b):   # a literal over a literal, as the IR holds it (Python would divide 0.0 / 0.0 itself)
        return Binary("div", Const(a), Const(b))

    @dt.algorithm
    def lit(X: dt.Tensor["N"]):
        i, = dt.axes("i")
        return (X[i] + div(0.0, 0.0))[i], (X[i] + div(1.0, 0.0))[i], (X[i] * div(-1.0, 0.0))[i]

    X = torch.tensor([1.0, -2.0])
    for got, want in zip(dt.compile(lit)(X), (X + math.nan, X + math.inf, X * -math.inf)):
        torch.testing.assert_close(got, want, equal_nan=True)


@dt.algorithm
def masked_attention(Q: dt.Tensor["S", "D"], K: dt.Tensor["T", "D"], V: dt.Tensor["T", "E"], L: dt.Tensor["S"]):
    """Attention whose row i sees keys j < L[i] (L[i] = 0: a fully masked row)."""
    i, j, d, e = dt.axes("i j d e")
    s = dt.where(j < L[i], dt.sum(Q[i, d] * K[j, d], over=d), -math.inf)
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[j, e], over=j) / dt.sum(p, over=j))[i, e]


def test_case2_online_attention_rows_masked_in_their_first_tiles_or_entirely_follow_torch():
    """The online pass shifts the tiles by 0 while a row's max is still -inf and makes rows whose
    max ends -inf NaN after the loop: rows masked entirely are NaN (torch), rows whose first key
    tiles are masked match torch (no NaN carried from the masked tiles)."""
    S, T, D, E = 5, 53, 16, 16
    Q, K, V = torch.randn(S, D), torch.randn(T, D), torch.randn(T, E)
    L = torch.tensor([0.0, 1.0, 20.0, 53.0, 37.0])
    s = (Q.double() @ K.double().T).masked_fill(torch.arange(T)[None, :] >= L[:, None], -math.inf)
    want = (torch.softmax(s, 1) @ V.double()).float()
    assert torch.isnan(want[0]).all() and not torch.isnan(want[1:]).any()
    sched = dt.Schedule(strategy={"j": "online"}, tile={"j": 16, "i": 16}, mask_bounds=False)
    got = dt.compile(masked_attention, sched)(Q, K, V, L, out=poisoned_outputs(masked_attention, [Q, K, V, L])[0])
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-4, atol=1e-5)


def test_base2_exponents_for_16_bit_calls_only_and_still_follow_torch():
    """fp16/bf16 calls write exp(x - max) as exp2(x*log2(e) - max) (the scale folded, one multiply
    fewer per term); fp32 calls keep exp. Rows masked entirely stay NaN, others match float64."""
    S, T, D, E = 5, 53, 16, 16
    L = torch.tensor([0.0, 1.0, 20.0, 53.0, 37.0])
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        Q, K, V = (torch.randn(n, m).to(dtype) for n, m in ((S, D), (T, D), (T, E)))
        s = (Q.double() @ K.double().T).masked_fill(torch.arange(T)[None, :] >= L[:, None], -math.inf)
        want = torch.softmax(s, 1) @ V.double()
        Ld = L.to(dtype)   # every floating input 16-bit: the call's terms are 16-bit
        for strategy in ("online", "loop"):
            sched = dt.Schedule(strategy={"j": strategy}, tile={"j": 16, "i": 16})
            k = dt.compile(masked_attention, sched)
            src = k.source_for(Q, K, V, Ld)
            assert ("tl.exp2(" in src) == (dtype != torch.float32), (dtype, strategy)
            got = k(Q, K, V, Ld, out=poisoned_outputs(masked_attention, [Q, K, V, Ld])[0]).double()
            # row 0 is masked entirely: NaN as in torch; the others to the dtype's precision (the
            # relative norm error, as gpu_check measures: bf16 rounds P and the output to 8 bits)
            assert torch.isnan(got[0]).all() and not torch.isnan(got[1:]).any()
            err = ((got[1:] - want[1:]).norm() / want[1:].norm()).item()
            assert err < {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-5}[dtype], (dtype, strategy, err)


def _max_stages(alg):
    from dtriton.ir import Reduce, walk
    return [n for n in walk([o.expr for o in alg.outputs]) if isinstance(n, Reduce) and n.combiner.name == "max"]


def test_base2_exponents_keep_a_max_used_outside_the_shift():
    """logsumexp uses its max outside exp(x - max) (m + log(sum)): the exact base-2 form (s18) writes
    exp2((x - m) * log2(e)) and keeps the max stage itself, so that use reads the exact max (the
    folded form, whose base-2 max would stand in for it, needs ``shift_only``)."""
    from dtriton.ir import base2_exponents

    @dt.algorithm
    def lse(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        m = dt.max(X[i, j], over=j)
        return (m + dt.log(dt.sum(dt.exp(X[i, j] - m), over=j)))[i]
    out = base2_exponents(lse, lambda r: True)
    assert out is not lse and "exp2" in str(out.outputs[0].expr) and "0.6931" not in str(out.outputs[0].expr)
    assert [str(m) for m in _max_stages(out)] == [str(m) for m in _max_stages(lse)]
    assert base2_exponents(softmax, lambda r: True) is not softmax
    X = torch.randn(5, 37).half()
    torch.testing.assert_close(dt.compile(lse)(X).float(), torch.logsumexp(X.float(), 1), rtol=1e-3, atol=1e-3)


def test_base2_exponents_keep_a_max_that_is_an_output():
    """A max returned as an output (a statistic saved for the backward): the exact form keeps the max
    stage (one stage of that name: rewriting the exponential around a new base-2 max stage left two,
    and softmax's derived forward failed so), and the output is the exact max."""
    from dtriton.ir import base2_exponents

    @dt.algorithm
    def softmax_and_max(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        m = dt.max(X[i, j], over=j)
        e = dt.exp(X[i, j] - m)
        return (e / dt.sum(e, over=j))[i, j], m[i]
    out = base2_exponents(softmax_and_max, lambda r: True)
    assert [str(m) for m in _max_stages(out)] == [str(m) for m in _max_stages(softmax_and_max)]
    X = torch.randn(5, 37).half()
    y, m = dt.compile(softmax_and_max)(X)
    assert torch.equal(m.float(), X.float().amax(1))
    torch.testing.assert_close(y.float(), torch.softmax(X.float(), 1), rtol=1e-2, atol=1e-3)
