"""The single-pass variance (issue 16): ``mean((X - mean(X))**2)`` over looped axes becomes one
Welford stage that reads X together with the mean, as accurate as two passes.

Checked against float64 torch on fresh data with a large offset (where ``E[x^2] - E[x]^2`` in fp32
would lose every digit), odd sizes (masked steps), fp16/bf16/fp32, outputs poisoned with NaN
before the call, NaN and inf rows (torch.var's NaN), and statistics split across programs (each
split's state merged by the reader).
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import dtriton as dt
from dtriton.ir import Reduce, single_pass_variance, variance_of
from dtriton.library import batch_norm, instance_norm, layer_norm, layer_norm_chw
from dtriton.plan.decide import one_pass_statistics

F = torch.nn.functional
Tensor = dt.Tensor
LOOP = dt.Schedule(grid=["n", "c"], tile={"h": 4}, strategy={"h": "loop", "q": "whole"})


@dt.algorithm
def variance(X: Tensor["N", "C", "H", "W"]):
    """The biased variance over (h, w) per (n, c), written as two passes."""
    n, c, h, q = dt.axes("n c h q")
    xc = X[n, c, h, q] - dt.mean(X[n, c, h, q], over=(h, q))
    return dt.mean(xc * xc, over=(h, q))[n, c]


@dt.algorithm
def variance_flipped(X: Tensor["N", "C", "H", "W"]):
    """The same variance with the deviation written mean - x."""
    n, c, h, q = dt.axes("n c h q")
    xc = dt.mean(X[n, c, h, q], over=(h, q)) - X[n, c, h, q]
    return dt.mean(xc * xc, over=(h, q))[n, c]


@dt.algorithm
def not_a_variance(X: Tensor["N", "C", "H", "W"]):
    """A mean over (h, w) of deviations from a mean over h only: not the variance pattern."""
    n, c, h, q = dt.axes("n c h q")
    xc = X[n, c, h, q] - dt.mean(X[n, c, h, q], over=(h,))
    return dt.mean(xc * xc, over=(h, q))[n, c]


def relerr(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def one_pass(src: str) -> bool:
    """The source computes a variance in one pass: running sums per lane about each lane's first
    value (``_var_step``), or about one shift per program (``PassPlan.shifted``)."""
    return "_var_step" in src or "# the shift of" in src


def stage(alg, name) -> Reduce:
    return alg.stages[name].node


def test_the_pattern_is_recognised_in_either_sign_and_only_over_the_same_axes():
    assert variance_of(stage(variance, "mean1")) is not None
    assert variance_of(stage(variance_flipped, "mean1")) is not None
    assert variance_of(stage(not_a_variance, "mean1")) is None
    assert variance_of(stage(variance, "mean0")) is None
    new = single_pass_variance(instance_norm, lambda r: True)
    assert new.stages["mean1"].node.combiner.name == "var" and new.stages["mean0"].node.combiner.name == "mean"
    assert single_pass_variance(instance_norm, lambda r: False) is instance_norm


def test_only_looped_unsplit_statistics_become_one_pass():
    r = stage(instance_norm, "mean1")
    assert one_pass_statistics(LOOP, r)
    assert not one_pass_statistics(dt.Schedule(strategy={"h": "whole", "q": "whole"}), r)
    assert one_pass_statistics(dt.Schedule(strategy={"h": "whole", "q": "whole"}, split={"h": 2}), r)
    assert not one_pass_statistics(dt.Schedule(strategy={"h": "online", "q": "whole"}), r)
    assert not one_pass_statistics(dt.Schedule(strategy={"h": "loop"}, split={"h": 2}, split_mode="atomic"), r)
    src = dt.compile(layer_norm).source_for(torch.randn(4, 32), torch.randn(32), torch.randn(32))
    assert not one_pass(src)   # a whole row is read once anyway: left as it is


@pytest.mark.parametrize("alg", [variance, variance_flipped])
@pytest.mark.parametrize("shape", [(2, 3, 13, 7), (1, 2, 1, 1), (1, 1, 17, 1), (2, 1, 5, 33)])
def test_variance_with_a_large_offset_matches_float64(alg, shape):
    x = torch.randn(shape, dtype=torch.float64) * 0.5 + 1e4
    x32 = x.float()
    k = dt.compile(alg, LOOP)
    assert one_pass(k.source_for(x32))
    out = torch.full(shape[:2], float("nan"))
    k(x32, out=out)
    ref = x32.double().var(dim=(2, 3), correction=0)
    # E[x^2] - E[x]^2 in fp32 would be off by ~(1e4)^2 * 6e-8 / 0.25, i.e. completely wrong
    assert torch.allclose(out.double(), ref, rtol=2e-5, atol=1e-9), (out, ref)


@pytest.mark.parametrize("first", [0.0, 40.0])
def test_lanes_over_shifting_data_and_an_outlying_first_value_match_float64(first):
    """A lane's running sums are taken about its first value: rows drifting far apart along the
    looped axis (each lane sees all of them) and a first value 40 spreads out still give the
    variance to fp32 rounding (the lane's own spread bounds the cancellation)."""
    x = torch.randn(2, 3, 37, 9, dtype=torch.float64) + 1e3 + 30.0 * torch.arange(37.0, dtype=torch.float64)[:, None]
    x[:, :, 0, :] += first * x[:, :, 1:, :].std()
    x32 = x.float()
    k = dt.compile(variance, LOOP)
    assert one_pass(k.source_for(x32))
    ref = x32.double().var(dim=(2, 3), correction=0)
    assert relerr(k(x32), ref) < 1e-6


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 2e-3), (torch.bfloat16, 1.5e-2)])
def test_instance_norm_in_one_statistics_pass_matches_torch(dtype, tol):
    x = (torch.randn(2, 3, 11, 9, dtype=torch.float64) * 2 + 50).to(dtype)
    k = dt.compile(instance_norm, LOOP)
    assert one_pass(k.source_for(x))
    out = torch.full_like(x, float("nan"))
    k(x, out=out)
    assert relerr(out, F.instance_norm(x.double(), eps=1e-5)) < tol


def test_nan_and_inf_rows_give_nan_like_torch_var():
    x = torch.randn(2, 3, 6, 5)
    x[0, 1, 2, 3] = float("nan")
    x[1, 2, 0, 0] = float("inf")
    x[1, 0, 4, 4] = -float("inf")
    out = dt.compile(variance, LOOP)(x)
    ref = x.double().var(dim=(2, 3), correction=0)
    assert torch.equal(out.isnan(), ref.isnan()) and ref.isnan().sum() == 3
    fin = ~ref.isnan()
    assert torch.allclose(out.double()[fin], ref[fin], rtol=1e-5)


@pytest.mark.parametrize("shape,split", [((3, 2, 16, 5), 2), ((2, 3, 13, 7), 3), ((1, 2, 9, 1), 8)])
def test_split_statistics_merge_the_splits_states(shape, split):
    """Batch norm with h split across programs: one kernel writes each split's mean partial and
    Welford state; the output kernel merges the states in split order (Chan)."""
    x = torch.randn(shape, dtype=torch.float64) * 0.5 + 1e3
    x32 = x.float()
    w, b = torch.randn(shape[1]), torch.randn(shape[1])
    s = dt.Schedule(grid=["n", "c", "h", "q"], split={"h": split}, split_mode="partials",
                    stages={st: dt.StageSchedule(tile={"c": 1, "h": 2}, strategy={"n": "loop", "h": "loop", "q": "whole"})
                            for st in ("mean0", "mean1")})
    k = dt.compile(batch_norm, s)
    src = k.source_for(x32, w, b)
    assert one_pass(src) and src.count("def batch_norm_") == 2, src   # statistics: one kernel, one read
    out = torch.full_like(x32, float("nan"))
    k(x32, w, b, out=out)
    ref = F.batch_norm(x32.double(), None, None, w.double(), b.double(), training=True, eps=1e-5)
    assert relerr(out, ref) < 2e-4   # x - mean in fp32 near 1e3: ulp 6e-5 against a spread of 0.5


def test_a_split_variance_matches_float64_with_a_large_offset():
    x = torch.randn(2, 3, 40, 7, dtype=torch.float64) * 0.5 + 1e4
    x32 = x.float()
    s = dt.Schedule(grid=["n", "c"], split={"h": 4}, split_mode="partials", tile={"h": 2},
                    strategy={"h": "loop", "q": "whole"})
    k = dt.compile(variance, s)
    assert one_pass(k.source_for(x32))
    ref = x32.double().var(dim=(2, 3), correction=0)
    assert torch.allclose(k(x32).double(), ref, rtol=2e-5, atol=1e-9)


def test_the_reference_of_the_variance_combiner_is_torch_var():
    from dtriton.ir import get_combiner
    c = get_combiner("var")
    x = torch.randn(3, 4, 5)
    assert torch.allclose(c.reference(x, [1, 2]), x.var(dim=(1, 2), correction=0))
    assert c.state == ("n", "k", "m", "q") and c.splittable and math.isnan(c.reference(torch.empty(2, 0), [1])[0].item())


@pytest.mark.parametrize("shape", [(2, 3, 7, 5), (1, 1, 1, 3)])
def test_a_variance_stage_over_whole_axes_reads_its_block_once(shape):
    """The variance combiner where one block holds the row (the rewrite is applied by hand here):
    the mean and the squared deviations from it, in registers."""
    alg = single_pass_variance(variance, lambda r: True)
    x = torch.randn(shape) * 0.5 + 1e3
    k = dt.compile(alg, dt.Schedule(grid=["n", "c"], strategy={"h": "whole", "q": "whole"}))
    src = k.source_for(x)
    assert not one_pass(src) and "dev_mean1" in src
    assert torch.allclose(k(x).double(), x.double().var(dim=(2, 3), correction=0), rtol=1e-4, atol=1e-9)


@dt.algorithm
def naive_variance(X: Tensor["N", "C", "H", "W"]):
    """The textbook one-pass variance, mean(x^2) - mean(x)^2."""
    n, c, h, q = dt.axes("n c h q")
    m = dt.mean(X[n, c, h, q], over=(h, q))
    return (dt.mean(X[n, c, h, q] * X[n, c, h, q], over=(h, q)) - m * m)[n, c]


def test_the_textbook_formula_becomes_the_welford_stage():
    from dtriton.ir import naive_variance_of
    new = single_pass_variance(naive_variance, lambda r: True)
    x_, sq = naive_variance_of(naive_variance.outputs[0].expr)
    assert [s for s in new.stages if isinstance(new.stages[s].node, Reduce) and
            new.stages[s].node.combiner.name == "var"] == [f"{sq.name}_var"]
    x = (torch.randn(2, 3, 13, 7, dtype=torch.float64) * 0.5 + 1e4).float()
    out = dt.compile(naive_variance, LOOP)(x)
    ref = x.double().var(dim=(2, 3), correction=0)
    # as written (fp32 E[x^2] - E[x]^2 near 1e8) it is off by whole units; rewritten, as accurate as two passes
    assert torch.allclose(out.double(), ref, rtol=2e-5, atol=1e-9), (out, ref)


def _variance_alg(ndim: int, red: tuple[int, ...]):
    """The two-pass variance of an ``ndim``-d X over the dims ``red``, kept axes in order."""
    names = "abcd"[:ndim]

    def fn(X):
        ax = dt.axes(" ".join(names))
        over = tuple(ax[k] for k in red)
        xc = X[ax] - dt.mean(X[ax], over=over)
        return dt.mean(xc * xc, over=over)[tuple(ax[k] for k in range(ndim) if k not in red)]

    fn.__annotations__ = {"X": dt.Tensor[tuple(f"S{n.upper()}" for n in names)]}
    fn.__name__ = f"var_{ndim}d_over_{''.join(map(str, red))}"
    return dt.algorithm(fn), names


@st.composite
def variance_case(draw):
    ndim = draw(st.integers(2, 4), label="ndim")
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=ndim, max_size=ndim), label="shape"))
    red = tuple(sorted(draw(st.sets(st.integers(0, ndim - 1), min_size=1, max_size=ndim - 1), label="reduced")))
    split = draw(st.sampled_from([0, 2, 3, 5]), label="split")
    offset = draw(st.sampled_from([0.0, 1e3, -1e4]), label="offset")
    return shape, red, split, offset


@settings(max_examples=25, deadline=None)
@given(variance_case())
def test_random_one_pass_variances_match_float64(case):
    """Random shapes and reduced dims: the looped variance (the outer reduced axes in tiles of 2,
    the innermost whole), optionally split across programs, against float64 on offset data."""
    shape, red, split, offset = case
    alg, names = _variance_alg(len(shape), red)
    over = [names[k] for k in red]
    strategy = {a: "loop" for a in over[:-1]} | {over[-1]: "whole" if len(over) > 1 else "loop"}
    s = dt.Schedule(grid=[names[k] for k in range(len(shape)) if k not in red],
                    tile={a: 2 for a in over if strategy[a] == "loop"},
                    strategy=strategy, split={over[0]: split} if split else {},
                    split_mode="partials" if split else None)
    x = (torch.randn(shape, dtype=torch.float64) * 0.5 + offset).float()
    k = dt.compile(alg, s)
    assert one_pass(k.source_for(x))
    ref = x.double().var(dim=red, correction=0)
    # unshifted, Welford's update near 1e4 loses ~1e-3 of the variance in fp32
    assert torch.allclose(k(x).double(), ref, rtol=5e-5, atol=1e-6), (k(x), ref)


@pytest.mark.parametrize("split", [20, 32])
def test_many_split_states_of_one_sample_fold_as_one_block(split):
    """Layer norm over (c, h, w) with h split 20 or 32 ways: each output program reads one sample's
    partial means and Welford states as blocks (masked past the last) and folds them once."""
    x = (torch.randn(2, 3, 40, 5, dtype=torch.float64) * 0.5 + 1e3).float()
    s = dt.Schedule(grid=["n", "c", "h", "q"], tile={"n": 1, "c": 1, "h": 8, "q": 8}, split={"h": split},
                    split_mode="partials",
                    stages={st: dt.StageSchedule(tile={"n": 1, "c": 1, "h": 1},
                                                 strategy={"c": "loop", "h": "loop", "q": "whole"})
                            for st in ("mean0", "mean1")})
    k = dt.compile(layer_norm_chw, s)
    src = k.source_for(x)
    assert "tl.arange(0, 32)  # the" in src and "tl.reduce((tl.load(" in src, src
    out = torch.full_like(x, float("nan"))
    k(x, out=out)
    assert relerr(out, F.layer_norm(x.double(), x.shape[1:], eps=1e-5)) < 2e-4


@dt.algorithm
def instance_norm_and_mean(X: Tensor["N", "C", "H", "W"]):
    """Instance norm that also returns its mean (as a forward saving statistics would)."""
    n, c, h, q = dt.axes("n c h q")
    mu = dt.mean(X[n, c, h, q], over=(h, q))
    xc = X[n, c, h, q] - mu
    return (xc * dt.rsqrt(dt.mean(xc * xc, over=(h, q)) + 1e-5))[n, c, h, q], mu[n, c]


def test_the_mean_beside_a_variance_is_read_off_its_state():
    """In one statistics loop the mean needs no block of its own: count * (shift + mean deviation)
    of the variance's folded state, divided by the count, is the mean."""
    x = torch.randn(2, 3, 13, 7, dtype=torch.float64) * 3 + 100
    src = dt.compile(instance_norm, LOOP).source_for(x.float())
    assert "acc_mean0" not in src and "# stage mean0" in src, src
    out = dt.compile(instance_norm, LOOP)(x.float())
    assert relerr(out, F.instance_norm(x, eps=1e-5)) < 1e-5


def test_a_mean_returned_as_an_output_keeps_its_own_sum():
    """A mean the algorithm returns keeps its block sum: over an infinite value it is inf, as in
    torch (a state would give NaN)."""
    x = torch.randn(2, 3, 9, 5)
    x[1, 2, 0, 0] = float("inf")   # a lane's first value: its shift
    k = dt.compile(instance_norm_and_mean, LOOP)
    assert "acc_mean0" in k.source_for(x)
    out, mu = k(x)
    torch.testing.assert_close(mu, x.mean(dim=(2, 3)))
    assert mu[1, 2] == float("inf")
    ref = F.instance_norm(x.double(), eps=1e-5)
    fin = ~ref.isnan()
    assert torch.equal(out.isnan(), ref.isnan()) and relerr(out[fin], ref[fin]) < 1e-5
