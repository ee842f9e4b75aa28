"""Split statistics finished once (``split_mode="finish"``) and reductions split over several axes.

Both are checked on the interpreter against float64 torch, outputs poisoned with NaN first (an
``out=`` tensor the kernel must overwrite), at odd sizes (primes, size 1), fp16 and fp32: forced by
a schedule, and chosen by the GPU heuristic (the binding told it is on CUDA) at small shapes with
its budgets shrunk (``ROW_BLOCK``, ``STEP_BLOCK``, ``FINISH_FOLDS``).
"""
from __future__ import annotations

import pytest
import torch

import dtriton as dt
from dtriton.errors import ScheduleError
from dtriton.library import batch_norm, frobenius_normalize, group_norm, instance_norm, layer_norm_chw
from dtriton.schedule import complete_schedule, heuristics, split_rules

F = torch.nn.functional


@pytest.fixture
def small_budgets(monkeypatch):
    """The GPU heuristic's block budgets shrunk (tiny shapes split their statistics, over several
    axes when one leaves fewer than two waves)."""
    monkeypatch.setitem(heuristics.ROW_BLOCK, True, 64)
    monkeypatch.setitem(heuristics.STEP_BLOCK, True, 16)


def gpu_schedule(alg, args) -> dt.Schedule:
    b = alg.bind(args)
    b.device = torch.device("cuda")
    return complete_schedule(alg, None, b)


def _bn(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True, eps=1e-5)


#: name -> (algorithm, make args from x (N, C, H, W), float64 reference of x and the args)
NORMS = {
    "batch_norm": (batch_norm, lambda x: (x, torch.randn(x.shape[1]), torch.randn(x.shape[1])),
                   lambda x, w, b: _bn(x, w, b)),
    "frobenius": (frobenius_normalize, lambda x: (x,), lambda x: x / torch.linalg.vector_norm(x)),
    "layer_norm_chw": (layer_norm_chw, lambda x: (x,), lambda x: F.layer_norm(x, x.shape[1:], eps=1e-5)),
    "instance_norm": (instance_norm, lambda x: (x,), lambda x: F.instance_norm(x, eps=1e-5)),
}


def run_poisoned(k, args, shape, dtype):
    """The kernel's result written over a NaN-filled ``out=`` tensor."""
    out = torch.full(shape, float("nan"), dtype=dtype)
    got = k(*args, out=out)
    assert got.data_ptr() == out.data_ptr()
    return out


def check(alg, args, eager, sched, tol):
    x = args[0]
    out = run_poisoned(dt.compile(alg, sched), args, x.shape, x.dtype)
    ref = eager(*[a.double() for a in args])
    assert not out.isnan().any()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < tol, err
    return out


def _split_schedule(alg, x, split, mode):
    """A schedule splitting the statistics stages of ``alg`` over ``split`` (one stage kernel per
    statistic with free axes on its grid, reduced axes looped in small tiles). The output's tiles of
    4 rows and 8 columns leave a partial tile at the odd sizes (the interpreter's time grows with its
    programs; the statistics kernels do not depend on them)."""
    red = [st for st in alg.stages.values() if not st.is_output]
    stages = {}
    for st in red:
        r = st.node
        stages[st.name] = dt.StageSchedule(grid=tuple(r.axes), tile=dict({a: 1 for a in r.axes},
                                                                           **{a: 2 for a in r.over}),
                                           strategy={a: "loop" for a in r.over})
    return dt.Schedule(grid=("n", "c", "h", "q"), tile={"n": 1, "c": 1, "h": 4, "q": 8}, split=split,
                       split_mode=mode, stages=stages)


FORCED = [("batch_norm", (5, 3, 7, 9), {"h": 2}), ("batch_norm", (5, 3, 7, 9), {"n": 2, "h": 3}),
          ("batch_norm", (1, 1, 13, 3), {"h": 2, "q": 3}), ("batch_norm", (3, 2, 1, 11), {"n": 3, "q": 2}),
          ("frobenius", (5, 3, 7, 9), {"n": 2, "h": 3}), ("frobenius", (1, 1, 13, 3), {"h": 2}),
          ("frobenius", (3, 2, 1, 11), {"n": 2, "q": 3}), ("layer_norm_chw", (5, 3, 7, 9), {"h": 2, "q": 3}),
          ("layer_norm_chw", (3, 2, 1, 11), {"c": 2})]


@pytest.mark.parametrize("name, shape, split", [("batch_norm", (5, 3, 7, 9), {"n": 2, "h": 3}),
                                                 ("layer_norm_chw", (5, 3, 7, 9), {"h": 2, "q": 3})])
def test_empty_splits_and_masked_lanes_compute_no_invalid_values(name, shape, split):
    """h = 7 in 3 splits of 2-row tiles leaves the last split empty, and c = 3 in tiles of 4 masks a lane of the
    finishing and normalising kernels: the variance state's M2 / count was 0 / 0 there (discarded, but numpy's
    invalid value on the interpreter); now it divides by a count of at least 1 (NaN where nothing is counted)."""
    from conftest import numpy_warnings_raise
    alg, make, eager = NORMS[name]
    x = torch.randn(shape) + 3.0
    args = make(x)
    with numpy_warnings_raise():
        for mode in ("partials", "finish"):
            check(alg, args, eager, _split_schedule(alg, x, split, mode), 1e-5)


@pytest.mark.parametrize("name, shape, split", FORCED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_forced_finish_and_multi_axis_splits_match_float64(name, shape, split, dtype):
    alg, make, eager = NORMS[name]
    x = (torch.randn(shape) + 3.0).to(dtype)
    args = tuple(a.to(dtype) for a in make(x))
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    outs = {}
    for mode in ("partials", "finish"):
        s = _split_schedule(alg, x, split, mode)
        outs[mode] = check(alg, args, eager, s, tol)
        src = dt.compile(alg, s).source_for(*args)
        if len(split) > 1:
            assert all(f"pid_split_{a} = " in src for a in split), src
        finishing = [blk for blk in src.split("@_jit") if "_finish_" in blk.split("(")[0]]
        if mode == "finish":
            assert len(finishing) == 1 and "_final" in src.rsplit("@_jit", 1)[1]
            assert "pid_split" not in src.rsplit("@_jit", 1)[1]   # the output reads the finished values
        else:
            assert not finishing and "_final" not in src
    # the same fold in the same split order: the same values
    torch.testing.assert_close(outs["partials"], outs["finish"], rtol=1e-6, atol=1e-6)


def test_finish_buffers_are_planned_and_read_after_the_statistics():
    from dtriton.plan.callspec import call_spec
    from dtriton.plan.decide import plan_program
    x = torch.randn(5, 3, 7, 9)
    args = (x, torch.randn(3), torch.randn(3))
    s = _split_schedule(batch_norm, x, {"n": 2, "h": 2}, "finish")
    b = batch_norm.bind(args)
    prog = plan_program(batch_norm, s, b, call_spec(batch_norm, b, args, True))
    assert prog.ok(), prog.verify()
    names = [k.name for k in prog.kernels]
    assert names == ["batch_norm_mean0_mean1", "batch_norm_finish_mean0_mean1", "batch_norm_out"], names
    assert prog.buffers["buf_mean1"].partials == 4 and prog.buffers["buf_mean1"].state == 4
    assert prog.buffers["buf_mean1_final"].partials == 0 and not prog.buffers["buf_mean1_final"].state
    out = prog.kernels[-1]
    assert sorted(bs.name for bs in out.materialized.values()) == ["buf_mean0_final", "buf_mean1_final"]
    assert prog.kernels[0].split_factor == 4 and prog.kernels[0].split_axes == ("n", "h")


@pytest.mark.parametrize("mode", [None, "partials", "finish"])   # None: the sum by atomics, the max by partials
@pytest.mark.parametrize("shape", [(37, 29), (1, 17), (13, 1)])
def test_whole_tensor_sum_and_max_split_over_two_axes(mode, shape):
    @dt.algorithm
    def scaled(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return (X[i, j] * dt.rsqrt(dt.sum(X[i, j] * X[i, j], over=(i, j))) - dt.max(X[i, j], over=(i, j)))[i, j]

    x = torch.randn(shape)
    split = {a: f for a, f, n in (("i", 2, shape[0]), ("j", 3, shape[1])) if n > 1}
    stage = dt.StageSchedule(grid=(), tile={"i": 4, "j": 4}, strategy={"i": "loop", "j": "loop"})
    s = dt.Schedule(grid=("i", "j"), tile={"i": 8, "j": 16}, split=split, split_mode=mode,
                    stages={"sum0": stage, "max0": stage})
    xd = x.double()
    ref = xd * torch.rsqrt((xd * xd).sum()) - xd.max()
    out = run_poisoned(dt.compile(scaled, s), (x,), x.shape, x.dtype)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


def test_an_online_axis_beside_another_split_is_refused():
    @dt.algorithm
    def lse(X: dt.Tensor["B", "M", "N"]):
        b, i, j = dt.axes("b i j")
        m = dt.max(X[b, i, j], over=(i, j))
        return (dt.log(dt.sum(dt.exp(X[b, i, j] - m), over=(i, j))) + m)[b]

    x = torch.randn(2, 6, 8)
    s = dt.Schedule(grid=("b",), tile={"b": 1, "i": 2, "j": 4}, split={"i": 2, "j": 2},
                    strategy={"i": "loop", "j": "online"})
    with pytest.raises(ScheduleError, match="online"):
        dt.compile(lse, s)(x)


@pytest.mark.parametrize("name", list(NORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_heuristic_finishes_splits_read_by_many_programs(name, dtype, small_budgets, monkeypatch):
    """At the threshold shrunk to one fold the heuristic finishes every split it makes; at a huge
    one it keeps the readers folding; both match float64."""
    alg, make, eager = NORMS[name]
    x = (torch.randn(5, 3, 7, 9) + 3.0).to(dtype)
    args = tuple(a.to(dtype) for a in make(x))
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    monkeypatch.setattr(split_rules, "FINISH_FOLDS", 1 << 40)
    keep = gpu_schedule(alg, args)
    monkeypatch.setattr(split_rules, "FINISH_FOLDS", 1)
    fin = gpu_schedule(alg, args)
    if not keep.split:   # instance norm: many programs, nothing split, nothing to finish
        assert not fin.split and fin.split_mode is None and keep.split_mode is None
        return
    assert keep.split_mode == "partials" and fin.split_mode == split_rules.FINISHED_MODE
    # a finished output may also take smaller tiles (heuristics.OUTPUT_BYTES: 2 KB a program, 4096 elements folding)
    assert fin.replace(split_mode="partials", tile=keep.tile) == keep
    for s in (keep, fin):
        check(alg, args, eager, s, tol)


def test_the_heuristic_splits_a_whole_tensor_statistic_over_two_axes(small_budgets):
    """A Frobenius norm whose best one-axis split leaves fewer than two waves splits a second axis."""
    x = torch.randn(5, 3, 7, 9)
    s = gpu_schedule(frobenius_normalize, (x,))
    assert len(s.split) >= 2, s
    check(frobenius_normalize, (x,), NORMS["frobenius"][2], s, 1e-5)
    # group norm over (channel of group, h, w): the same rule
    xg = torch.randn(2, 2, 3, 5, 7) + 1.0
    sg = gpu_schedule(group_norm, (xg,))
    assert sg.split, sg
    out = run_poisoned(dt.compile(group_norm, sg), (xg,), xg.shape, xg.dtype)
    ref = F.group_norm(xg.double().reshape(2, 6, 5, 7), 2, eps=1e-5).reshape(xg.shape)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


def test_issue_shapes_plan_a_finish_for_batch_norm_frobenius_and_layer_norm():
    """At the H200 bench shapes: batch norm (262144 output programs folding 40 values each),
    Frobenius (512 partials, 16384 programs) and layer norm over (C, H, W) (16384 x 160) are finished
    (by the split kernel's last programs, :data:`split_rules.FINISHED_MODE`); group norm (16384 x 20)
    keeps its readers' folds; Frobenius splits n and h."""
    e = dict(device="meta", dtype=torch.float16)
    bn = gpu_schedule(batch_norm, (torch.empty(64, 64, 512, 512, **e), torch.empty(64, **e), torch.empty(64, **e)))
    fro = gpu_schedule(frobenius_normalize, (torch.empty(16, 64, 256, 256, **e),))
    ln = gpu_schedule(layer_norm_chw, (torch.empty(16, 64, 256, 256, **e),))
    gn = gpu_schedule(group_norm, (torch.empty(16, 8, 8, 256, 256, **e),))
    assert bn.split_mode == "last" and bn.split == {"n": 8}, bn
    assert fro.split_mode == "last" and fro.split == {"h": 256, "n": 2}, fro
    assert ln.split_mode == "last" and ln.split == {"c": 32}, ln
    assert gn.split_mode == "partials" and gn.split == {"c": 4}, gn


def test_split_mode_finish_without_a_split_warns():
    x = torch.randn(4, 8)

    @dt.algorithm
    def total(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.sum(X[i, j], over=j)[i]

    with pytest.warns(dt.ScheduleWarning, match="split_mode='finish' has no effect"):
        dt.compile(total, dt.Schedule(split_mode="finish"))(x)


@pytest.mark.parametrize("T, split", [(53, 3), (7, 2), (1, 1)])
def test_finished_online_split_of_attention_matches_sdpa(T, split):
    """Split-KV attention (an online group: a max and sums rescaled by it, over different kept axes)
    finished once: one finishing kernel per set of kept axes, the sums merged rescaled to the max
    over splits, which the output then reads as plain values."""
    from dtriton.library import attention
    Q, K, V = torch.randn(1, 2, 5, 16), torch.randn(1, 2, T, 16), torch.randn(1, 2, T, 16)
    s = dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": 16, "j": 8}, split={"j": split} if split > 1 else {},
                    split_mode="finish" if split > 1 else None, strategy={"j": "online", "d": "whole", "e": "whole"},
                    stages={"sum0": {"place": "fuse"}})
    k = dt.compile(attention, s)
    out = run_poisoned(k, (Q, K, V, 0.25), (1, 2, 5, 16), torch.float32)
    ref = F.scaled_dot_product_attention(Q.double(), K.double(), V.double(), scale=0.25)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    assert ("_finish_" in k.source_for(Q, K, V, 0.25)) == (split > 1)


def test_the_heuristic_splits_online_whole_tensor_passes_over_one_axis(small_budgets):
    """A whole-tensor log-sum-exp (an online max and sum over both axes) splits one axis only: an
    online pass merges the partials of one split axis."""
    @dt.algorithm
    def lse(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        m = dt.max(X[i, j], over=(i, j))
        return (dt.log(dt.sum(dt.exp(X[i, j] - m), over=(i, j))) + m)[()]

    x = torch.randn(37, 29)
    s = gpu_schedule(lse, (x,))
    assert len(s.split) == 1 and "online" in s.strategy.values(), s
    ref = torch.logsumexp(x.double().flatten(), 0)
    torch.testing.assert_close(dt.compile(lse, s)(x).double(), ref, rtol=1e-5, atol=1e-5)
