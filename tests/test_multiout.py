"""Multi-output kernels (issue 15): grouped materialised reductions, outputs joining a kernel that
computes them, saved statistics in autograd, and the kernel counts of the layer-norm backward.

Every numeric test runs on the interpreter against float64 (``check`` poisons the outputs); the
kernel-count tests plan for the GPU (the heuristic's H200 schedule) without running anything.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import dtriton as dt
from conftest import check, launches, randn
from dtriton.grad import augmented_forward, saved_statistics
from dtriton.library import cross_entropy, layer_norm, rms_norm, softmax
from dtriton.plan.callspec import call_spec
from dtriton.plan.decide import plan_program
from dtriton.plan.lower import lower
from dtriton.plan.partition import reduction_groups
from dtriton.schedule.heuristics import complete_schedule


@dt.algorithm
def col_stats(X: dt.Tensor["M", "N"], Y: dt.Tensor["M", "N"]):
    """Two column sums over the same rows (layer norm's dw and db) and an elementwise output."""
    i, j = dt.axes("i j")
    return dt.sum(X[i, j] * Y[i, j], over=i)[j], dt.sum(Y[i, j], over=i)[j]


@dt.algorithm
def norm_with_stats(X: dt.Tensor["M", "N"]):
    """A normalised row beside its mean and mean square (a forward that saves its statistics)."""
    i, j = dt.axes("i j")
    mean = dt.mean(X[i, j], over=j)
    ms = dt.mean(X[i, j] * X[i, j], over=j)
    return ((X[i, j] - mean) * dt.rsqrt(ms - mean * mean + 1e-5))[i, j], mean[i], ms[i]


def gpu_plan(alg, args, sched=None):
    """The program the GPU heuristic plans for ``args`` (planned here, nothing runs)."""
    b = dataclasses.replace(alg.bind(args), device=torch.device("cuda"))
    s = complete_schedule(alg, sched, b)
    prog = lower(alg, s, b.axis_sizes, {o.name: str(d).replace("torch.", "") for o, d in zip(alg.outputs, b.out_dtypes)})
    assert prog.verify() == []
    return prog


COLS = dt.Schedule(grid=("j",), tile={"i": 4, "j": 8}, strategy={"i": "loop"})


@pytest.mark.parametrize("M, N", [(1, 1), (7, 13), (37, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_column_sums_share_one_kernel(M, N, dtype, gen):
    X, Y = randn(M, N, dtype=dtype, gen=gen), randn(M, N, dtype=dtype, gen=gen)
    k, _ = check(col_stats, [X, Y], COLS)
    assert launches(k) == 1


@pytest.mark.parametrize("M, N", [(1, 3), (29, 11), (64, 17)])
def test_split_column_sums_one_partial_kernel_and_a_finishing_one(M, N, gen):
    sched = COLS.replace(split={"i": 4}, split_mode="partials")
    for dtype in (torch.float32, torch.float16):
        X, Y = randn(M, N, dtype=dtype, gen=gen), randn(M, N, dtype=dtype, gen=gen)
        k, _ = check(col_stats, [X, Y], sched)
        names = [m.ir.name for m in (la.meta for la in k._last.launches)]
        # both partial sums in one kernel (two accumulators, two stores), one finishing kernel
        assert len(names) == 2 and sum("sum0" in n and "sum1" in n for n in names) == 1, names
        split_k = [la.meta.ir for la in k._last.launches if la.meta.ir.split][0]
        assert [s.target for s in split_k.stores] == ["buf_sum0", "buf_sum1"]
        assert all(s.partial_axis for s in split_k.stores)


def test_fuse_outputs_off_keeps_one_kernel_each(gen):
    X, Y = randn(9, 5, gen=gen), randn(9, 5, gen=gen)
    sched = COLS.replace(split={"i": 2}, split_mode="partials", fuse_outputs=False)
    k, _ = check(col_stats, [X, Y], sched)
    assert launches(k) == 3
    k, _ = check(norm_with_stats, [X], dt.Schedule(fuse_outputs=False, tile={"i": 4}, strategy={"j": "whole"}))
    assert launches(k) >= 2


@pytest.mark.parametrize("M, N", [(1, 1), (5, 31), (13, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_row_statistics_stored_by_the_output_kernel(M, N, dtype, gen):
    X = randn(M, N, dtype=dtype, gen=gen)
    for sched in (None, dt.Schedule(tile={"i": 2, "j": 8}, strategy={"j": "loop"})):
        k, _ = check(norm_with_stats, [X], sched)
        assert launches(k) == 1


def test_gpu_plans_forward_saving_statistics_in_one_kernel():
    X = torch.empty(4096, 8192, dtype=torch.float16)
    w = torch.empty(8192, dtype=torch.float16)
    aug, names = augmented_forward(layer_norm, saved_statistics(layer_norm))
    assert names == ("mean0", "mean1")
    prog = gpu_plan(aug, [X, w, w])
    assert len(prog.kernels) == 1 and [s.target for s in prog.kernels[0].stores] == ["out0", "out1", "out2"]
    for alg in (softmax, cross_entropy):
        args = [X] if alg is softmax else [X.float(), torch.zeros(4096, dtype=torch.int64)]
        aug, _ = augmented_forward(alg, saved_statistics(alg))
        assert len(gpu_plan(aug, args).kernels) == 1, alg.name


@pytest.mark.parametrize("alg, n_in", [(layer_norm, 3), (rms_norm, 2)])
def test_gpu_plans_norm_backward_in_two_kernels(alg, n_in):
    """dX, then dw (and db) split over rows in one kernel whose last program of each column tile folds
    the partials and stores the 16-bit outputs (``split_mode="last"``: no finishing or casting kernel)."""
    X = torch.empty(4096, 8192, dtype=torch.float16)
    w = torch.empty(8192, dtype=torch.float16)
    ga = dt.grad(alg, save=saved_statistics(alg))
    assert len(ga.algorithms) == 1   # dw and db: same-shaped column sums share the algorithm
    stats = [torch.empty(4096) for _ in ga.saved]
    args = [X] + [w] * (n_in - 1) + [X] + stats
    lowered = gpu_plan(ga.algorithms[0], args)
    split = [k for k in lowered.kernels if k.split]
    assert len(split) == 1 and len(split[0].stores) == n_in - 1   # dw (and db) partials in one kernel
    g = ga.algorithms[0]
    b = dataclasses.replace(g.bind(args), device=torch.device("cuda"))
    prog = plan_program(g, complete_schedule(g, None, b), b, call_spec(g, b, args, False))
    assert len(prog.kernels) == 2, [k.name for k in prog.kernels]
    lf = prog.kernels[1].last_finish
    assert prog.kernels[1].split and lf is not None
    assert {st.target for st in lf.outputs} == {f"out{n}" for n in range(1, n_in)}


@pytest.mark.parametrize("alg, n_in", [(layer_norm, 3), (rms_norm, 2), (softmax, 1)])
@pytest.mark.parametrize("M, N", [(1, 2), (7, 19)])
def test_autograd_saves_statistics_and_matches_float64(alg, n_in, M, N, gen):
    dk = dt.compile_autograd(alg)
    args = [randn(M, N, gen=gen)] + [randn(N, gen=gen) for _ in range(n_in - 1)]
    xs = [a.clone().requires_grad_() for a in args]
    x64 = [a.double().requires_grad_() for a in args]
    G = randn(M, N, gen=gen)
    y = dk(*xs)
    assert dk._save_ok and all(dk._save_ok.values())   # the forward stored its statistics
    grads = torch.autograd.grad(y, xs, G)
    ref = {layer_norm: lambda X, w, b: torch.nn.functional.layer_norm(X, (N,), w, b, 1e-5),
           rms_norm: lambda X, w: X * torch.rsqrt((X * X).mean(-1, keepdim=True) + 1e-6) * w,
           softmax: lambda X: torch.softmax(X, -1)}[alg]
    expect = torch.autograd.grad(ref(*x64), x64, G.double())
    for g, e in zip(grads, expect):
        torch.testing.assert_close(g.double(), e, rtol=1e-4, atol=1e-4)
    (bwd,) = [v for k, v in dk._bwd.items() if k[1]]
    assert bwd[0].saved == saved_statistics(alg)


def test_recompute_is_the_schedule_choice_save_none(gen):
    dk = dt.compile_autograd(layer_norm, save=None)
    X = randn(4, 6, gen=gen).requires_grad_()
    w, b = randn(6, gen=gen), randn(6, gen=gen)
    (gx,) = torch.autograd.grad(dk(X, w, b), [X], torch.ones(4, 6))
    ga = dk.gradients(["X"])
    assert ga.saved == () and torch.isfinite(gx).all()


def test_reduction_groups_never_form_a_cycle():
    # a and b would share a kernel, but c reads a and b reads c: grouping a with b is a cycle
    class R:
        def __init__(self, uid):
            self.uid = uid
    a, b, c = R(1), R(2), R(3)
    groups = reduction_groups([a, b, c], lambda r: "same" if r.uid != 3 else "other", {3: [1], 2: [3]})
    assert groups[1] == [1] and groups[2] == [2]
    groups = reduction_groups([a, b, c], lambda r: "same" if r.uid != 3 else "other", {})
    assert groups[1] == [1, 2] and groups[3] == [3]


@pytest.mark.parametrize("causal", [False, True])
def test_attention_forward_saves_its_row_statistics_in_the_flash_kernel(causal, gen):
    from dtriton.library import attention, causal_attention
    alg = causal_attention if causal else attention
    aug, names = augmented_forward(alg, saved_statistics(alg))
    assert names == ("lse_max0_sum2", "sum1")   # the row log-sum-exp, and sum1 normalised (the output)
    Q = torch.empty(4, 16, 2048, 64, dtype=torch.float16)
    prog = gpu_plan(aug, [Q, Q, Q, 0.125])
    assert len(prog.kernels) == 1 and not prog.buffers   # no S x T buffer, one online pass
    args = [randn(1, 2, 37, 16, gen=gen) for _ in range(3)] + [0.25]
    k, _ = check(aug, args)
    assert launches(k) == 1


@pytest.mark.parametrize("M, N", [(1, 1), (23, 9), (64, 33)])
def test_split_column_sums_into_fp32_outputs_with_atomics_in_one_kernel(M, N, gen):
    X, Y = randn(M, N, gen=gen), randn(M, N, gen=gen)
    k, _ = check(col_stats, [X, Y], COLS.replace(split={"i": 4}))
    assert launches(k) == 1
    (kp,) = k._last.program.kernels
    assert [(s.target, s.atomic) for s in kp.stores] == [("out0", True), ("out1", True)]


def test_gpu_plans_fp32_layer_norm_backward_in_two_kernels():
    X = torch.empty(4096, 8192)
    ga = dt.grad(layer_norm, save=saved_statistics(layer_norm))
    prog = gpu_plan(ga.algorithms[0], [X, X[0], X[0], X, X[:, 0], X[:, 0]])
    assert len(prog.kernels) == 2 and not prog.buffers
    assert prog.output_direct == {"out1": "zero", "out2": "zero"}


def _stats_like(alg, ga, Q):
    """Empty saved statistics of ``alg`` shaped as the saving forward lays them out."""
    sizes = {"B": Q.shape[0], "H": Q.shape[1], "S": Q.shape[2], "T": Q.shape[2], "D": Q.shape[3]}
    dims = {p.name: p.dims for p in ga.algorithms[0].params if hasattr(p, "dims")}
    return [torch.empty(tuple(sizes[d] for d in dims[f"saved_{s}"])) for s in ga.saved]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", [64, 128])
def test_gpu_plans_attention_backward_flash_style(causal, D):
    """FlashAttention-2's backward: dK and dV in one kernel over key tiles, dQ in one over query
    tiles, the per-query term in a third; no buffer of S x T elements; GPU heuristic, nothing runs."""
    from dtriton.library import attention, causal_attention
    alg = causal_attention if causal else attention
    ga = dt.grad(alg, save=saved_statistics(alg))
    (a,) = ga.algorithms
    Q = torch.empty(4, 16, 2048, D, dtype=torch.float16)
    prog = gpu_plan(a, [Q, Q, Q, 0.125, Q] + _stats_like(alg, ga, Q))
    assert len(prog.kernels) == 3, [k.name for k in prog.kernels]
    assert all(not {"i", "j"} <= set(b.axes) for b in prog.buffers.values())   # per-query terms, dQ's sums
    (kv,) = [k for k in prog.kernels if "out1" in [s.target for s in k.stores]]
    assert [s.target for s in kv.stores] == ["out1", "out2"]
    assert kv.grid == ["b", "h", "j"]
    assert kv.axes["i"].role == "loop" and kv.axes["d"].role == "whole" and kv.axes["e"].role == "whole"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_training_step_matches_float64(causal, gen):
    from dtriton.library import attention, causal_attention
    alg = causal_attention if causal else attention
    dk = dt.compile_autograd(alg)
    q, k, v = [randn(1, 1, 260, 16, gen=gen).requires_grad_() for _ in range(3)]
    G = randn(1, 1, 260, 16, gen=gen)
    grads = torch.autograd.grad(dk(q, k, v, 0.25), [q, k, v], G)
    assert dk.launch_counts() == {"forward": 1, "backward": 3}
    x64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
    expect = torch.autograd.grad(alg.reference(*x64, 0.25), x64, G.double())
    for g, e in zip(grads, expect):
        torch.testing.assert_close(g.double(), e, rtol=1e-4, atol=1e-5)


def test_verify_flags_a_store_that_misses_a_grid_axis():
    prog = gpu_plan(norm_with_stats, [torch.empty(64, 4096)])
    (k,) = prog.kernels
    assert k.grid == ["i"] and prog.verify() == []
    k.stores.append(dataclasses.replace(k.stores[1], target="out9", layout=()))
    assert any("store out9[] lacks grid axes ['i']" in p for p in prog.verify())


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_saved_statistics_of_a_16bit_forward_are_float32(name):
    """A 16-bit softmax over more than 65504 columns: its saved row sum exceeds fp16's range, so
    the saving forward stores its statistics in float32 (as torch does) and the gradients stay
    16-bit and right (stored in fp16, the sum overflowed to inf and every gradient was 0)."""
    import dtriton.library as lib
    alg = getattr(lib, name)
    X = (torch.randn(2, 70001) * 0.01).to(torch.float16)
    fwd, saved = augmented_forward(alg, "all")
    outs = dt.compile(fwd)(X)
    assert saved and all(o.dtype == torch.float32 for o in outs[1:]), [o.dtype for o in outs]
    assert outs[0].dtype == torch.float16
    Xg = X.clone().requires_grad_()
    y = dt.compile(alg)(Xg)
    g = torch.randn_like(y)
    y.backward(g)
    X64 = X.double().requires_grad_()
    tf = torch.softmax if name == "softmax" else torch.log_softmax
    tf(X64, -1).backward(g.double())
    Xt = X.clone().requires_grad_()
    tf(Xt, -1).backward(g)                       # torch's own fp16 error on these data
    rel = lambda a: ((a.double() - X64.grad).norm() / X64.grad.norm()).item()  # noqa: E731
    assert Xg.grad.dtype == torch.float16
    assert rel(Xg.grad) <= 2 * rel(Xt.grad) + 1e-3, (rel(Xg.grad), rel(Xt.grad))


def test_compile_autograd_save_is_checked_where_given():
    # save="yes" was reported by augmented_forward as "['yes'] are not reduction stages", naming neither the
    # argument nor its allowed values
    from dtriton.library import rms_norm
    for bad in ("yes", ["mean0", "nope"], 3):
        with pytest.raises(dt.AlgorithmError, match=r"compile_autograd\(rms_norm\): save=.*\"auto\".*None.*\['mean0'\]"):
            dt.compile_autograd(rms_norm, save=bad)
    for ok in ("auto", "all", None, ["mean0"], "mean0"):
        dt.compile_autograd(rms_norm, save=ok)


def test_grad_and_augmented_forward_check_save_as_differentiable_does():
    # dt.grad(save=3) was a TypeError from list(3), augmented_forward(alg, None) too, and an unknown name was
    # "['yes'] are not reduction stages": one validation now names the call, the allowed keywords and stages
    from dtriton.grad import augmented_forward
    from dtriton.library import rms_norm
    for bad in ("yes", ["mean0", "nope"], 3, {"nope"}):
        with pytest.raises(dt.AlgorithmError, match=r"dt.grad\(rms_norm\): save=.*\"auto\".*\"all\".*None.*\['mean0'\].*none of"):
            dt.grad(rms_norm, save=bad)
    for bad in ("yes", 3, None, ("mean0", 4)):
        with pytest.raises(dt.AlgorithmError, match=r"augmented_forward\(rms_norm\): save=.*\"all\".*\['mean0'\]"):
            augmented_forward(rms_norm, bad)
    for ok in ("all", None, ["mean0"], "mean0", ("mean0",), {"mean0"}, "auto"):
        dt.grad(rms_norm, save=ok)
    for ok in ("all", ["mean0"], "mean0", "auto", {"mean0"}):
        assert augmented_forward(rms_norm, ok)[1] == ("mean0",)


def test_grad_save_auto_is_the_saved_statistics():
    # the fresh-user trial of s9: dt.grad(save="auto") was refused though compile_autograd's default is "auto"
    # and the tutorial calls it so; it now saves what saved_statistics names (and a set of names is accepted)
    from dtriton.grad import augmented_forward, saved_statistics
    from dtriton.library import attention, layer_norm, softmax
    for alg in (layer_norm, softmax, attention):
        auto, named = dt.grad(alg, save="auto"), dt.grad(alg, save=list(saved_statistics(alg)))
        assert auto.saved == named.saved and auto.saved, (alg.name, auto.saved)
        assert augmented_forward(alg, "auto")[1] == augmented_forward(alg, list(saved_statistics(alg)))[1]
    torch.manual_seed(5)
    X, w, b = torch.randn(7, 13, dtype=torch.float64), torch.randn(13, dtype=torch.float64), torch.randn(13, dtype=torch.float64)
    g = dt.grad(layer_norm, save="auto")
    fwd, _ = augmented_forward(layer_norm, "auto")
    _, *saved = dt.compile(fwd)(X, w, b)
    dy = torch.randn(7, 13, dtype=torch.float64)
    got = dt.compile(g.algorithms[0])(X, w, b, dy, *saved)
    Xr, wr, br = (t.clone().requires_grad_() for t in (X, w, b))
    torch.nn.functional.layer_norm(Xr, (13,), wr, br).backward(dy)
    for gt, r in zip(got, (Xr.grad, wr.grad, br.grad)):
        torch.testing.assert_close(gt, r, rtol=1e-9, atol=1e-9)
