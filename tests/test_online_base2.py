"""Online softmax in base 2 where the row max is used beyond its shift (:func:`dtriton.ir.base2_exponents`
with ``shift_only``, :func:`dtriton.grad.shift_only`): a saving forward's log-sum-exp or saved max,
log-softmax's ``x - max``, cross-entropy's ``max + log(sum)``. 16-bit calls compute the exponentials in
base 2. A max of unscaled X stays the natural max (the exponents read ``max * log2(e)``, per row; its
other uses read it exactly); where the scale folds into log2(e) (attention) the max, the sums and their
rescaling factors run in base 2 and the other uses read ``max2 * ln(2)`` once per row, so saved
statistics keep their natural-log values and the backward stays exact.

Numeric tests run on Triton's interpreter, outputs poisoned with NaN, odd sizes, against float64.
"""

from __future__ import annotations

import math

import pytest
import torch

import dtriton as dt
from conftest import poisoned_outputs, randn
from dtriton.grad import augmented_forward, saved_statistics, shift_only
from dtriton.ir import Binary, Reduce, Unary, base2_exponents, walk
from dtriton.library import attention, causal_attention, cross_entropy, log_softmax, softmax

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")

TOL = {torch.float16: 1e-2, torch.bfloat16: 3e-2, torch.float32: 1e-4}


def _max(alg):
    (m,) = [n for n in alg.nodes if isinstance(n, Reduce) and n.combiner.name == "max"]
    return m


@dt.algorithm
def max_twice(X: dt.Tensor["M", "N"]):
    """Softmax and its own max, the max returned twice (as a saving forward of a returned max does)."""
    i, j = dt.axes("i j")
    m = dt.max(X[i, j], over=j)
    e = dt.exp(X[i, j] - m)
    return (e / dt.sum(e, over=j))[i, j], m[i], m[i]


@dt.algorithm
def max_moves(X: dt.Tensor["M", "N"]):
    """Softmax plus its max added to the output: the output moves with the max."""
    i, j = dt.axes("i j")
    m = dt.max(X[i, j], over=j)
    e = dt.exp(X[i, j] - m)
    return (e / dt.sum(e, over=j) + m)[i, j]


def test_shift_only_tells_a_shift_from_a_value():
    aug, _ = augmented_forward(attention, saved_statistics(attention))
    assert shift_only(aug, _max(aug))                         # lse = max + log(sum): invariant
    pair, _ = augmented_forward(softmax, ["max0", "sum0"])
    assert shift_only(pair, _max(pair))                       # the saved max itself, once
    for alg in (cross_entropy, softmax):
        assert shift_only(alg, _max(alg))
    # log-softmax's X - m - log(sum) reads the max outside exp over its own axis: exact only at the true max
    assert not shift_only(log_softmax, _max(log_softmax))
    assert not shift_only(max_twice, _max(max_twice))
    assert not shift_only(max_moves, _max(max_moves))


def test_rewrite_reads_the_base2_max_times_ln2_elsewhere():
    """A max of unscaled X stays the natural-units stage (the exponents read ``m * log2(e)``, its
    other uses ``m`` itself: exact, whether or not shift_only holds); a max whose X folds a scalar
    (attention's scores) becomes the base-2 stage, its other uses reading it times ln(2), only
    with shift_only and no element read beside it."""
    for alg in (log_softmax, cross_entropy, max_moves):
        out = base2_exponents(alg, lambda r: True)
        nodes = list(walk([o.expr for o in out.outputs]))
        assert {n.op for n in nodes if isinstance(n, Unary) and n.op.startswith("exp")} == {"exp2"}
        maxes = [n for n in nodes if isinstance(n, Reduce) and n.combiner.name == "max"]
        assert len(maxes) == 1 and "1.44269" not in str(maxes[0].x) and maxes[0] is _max(alg)
        assert not any("0.693147" in str(n) for n in nodes)
    aug, _ = augmented_forward(attention, saved_statistics(attention))
    out = base2_exponents(aug, lambda r: True, lambda r: shift_only(aug, r))
    nodes = list(walk([o.expr for o in out.outputs]))
    maxes = [n for n in nodes if isinstance(n, Reduce) and n.combiner.name == "max"]
    assert len(maxes) == 1 and "1.44269" in str(maxes[0].x)
    assert any(isinstance(n, Binary) and n.op == "mul" and n.a is maxes[0] and "0.693147" in str(n.b) for n in nodes)
    # (without shift_only the saved lse needs the exact max: the exponents take the multiply per element)
    out = base2_exponents(aug, lambda r: True)
    nodes = list(walk([o.expr for o in out.outputs]))
    assert not any("0.693147" in str(n) for n in nodes)


def _plan_src(alg, args):
    return dt.compile(alg).source_for(*args)


@pytest.mark.parametrize("causal,S,T", [(False, 37, 19), (True, 29, 29), (False, 1, 1), (True, 1, 1)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["fp16", "bf16", "fp32"])
def test_saving_attention_forward_and_backward(gen, causal, S, T, dtype):
    """The saving forward (output, lse, normalised sum1) and the derived backward against float64;
    16-bit calls print the online loop with exp2 only and the scale folded once."""
    alg = causal_attention if causal else attention
    D = 16
    Q, K, V = (randn(2, 3, n, D, gen=gen, scale=2.0).to(dtype) for n in (S, T, T))
    scale = 0.37
    aug, names = augmented_forward(alg, saved_statistics(alg))
    src = _plan_src(aug, [Q, K, V, scale])
    loop = src.split("for j0")[1].split("acc_max0_1 = max0_new")[0]
    if dtype != torch.float32:
        assert "tl.exp2(" in loop and "tl.exp(" not in loop and "* 1.4426950408889634" not in loop, loop
        assert src.count("s_scale * 1.4426950408889634") == 1
        assert "0.6931471805599453" in src
    else:
        assert "tl.exp2(" not in src
    outs = dt.compile(aug)(Q, K, V, scale, out=poisoned_outputs(aug, [Q, K, V, scale]))
    x64 = [t.double().requires_grad_(True) for t in (Q, K, V)]
    s = x64[0] @ x64[1].transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(S, T, dtype=torch.bool).triu(1), -math.inf)
    want_o = torch.softmax(s, -1) @ x64[2]
    want_lse = torch.logsumexp(s, -1).detach()
    if outs[1].shape != want_lse.shape:   # (the statistic's layout follows its kernel's grid: [i, b, h])
        want_lse = want_lse.permute(2, 0, 1)
    tol = TOL[dtype]
    assert not any(torch.isnan(o).any() for o in outs)
    assert ((outs[0].double() - want_o).norm() / want_o.norm()).item() < tol
    torch.testing.assert_close(outs[1].double(), want_lse, rtol=1e-3 if dtype != torch.float32 else 1e-5,
                               atol=1e-3 if dtype != torch.float32 else 1e-5)
    (bwd,) = dt.grad(alg, save=names).algorithms
    G = randn(2, 3, S, D, gen=gen).to(dtype)
    bargs = [Q, K, V, scale, G, *outs[1:]]
    got = dt.compile(bwd)(*bargs, out=poisoned_outputs(bwd, bargs))
    want = torch.autograd.grad(want_o, x64, G.double())
    for g, w in zip(got, want):
        assert not torch.isnan(g).any()
        assert ((g.double() - w).norm() / w.norm().clamp_min(1e-12)).item() < 2 * tol


@pytest.mark.parametrize("alg,M,N", [(softmax, 7, 13), (softmax, 1, 1), (log_softmax, 5, 31), (log_softmax, 3, 1),
                                     (cross_entropy, 11, 3)],
                         ids=["softmax", "softmax_1x1", "log_softmax", "log_softmax_n1", "cross_entropy"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("strategy", ["online", "whole"])
def test_row_softmax_family_forward_and_backward(gen, alg, M, N, dtype, strategy):
    """Plain forward, saving forward (lse) and the derived backward against float64: the lse keeps
    its natural-log value; 16-bit calls compute the exponentials in base 2 (log-softmax's too: its
    max stays exact, :func:`dtriton.ir.base2_exponents`)."""
    X = randn(M, N, gen=gen, scale=3.0).to(dtype)
    extra = [torch.randint(0, N, (M,), generator=gen)] if alg is cross_entropy else []
    args = [X, *extra]
    sched = dt.Schedule(strategy={"j": strategy}, tile={"j": 8} if strategy == "online" else {})
    x64 = X.double().requires_grad_(True)
    want = alg.reference(x64, *extra)
    tol = TOL[dtype]
    got = dt.compile(alg, sched)(*args, out=poisoned_outputs(alg, args)[0])
    assert ("tl.exp2(" in dt.compile(alg, sched).source_for(*args)) == (dtype != torch.float32)
    torch.testing.assert_close(got.double(), want.detach(), rtol=tol, atol=tol)
    aug, names = augmented_forward(alg, saved_statistics(alg))
    outs = dt.compile(aug, sched)(*args, out=poisoned_outputs(aug, args))
    # (the row statistic is stored in the call's dtype here: the tolerance is its rounding)
    lt = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-5}[outs[1].dtype]
    torch.testing.assert_close(outs[1].double(), torch.logsumexp(x64, 1).detach(), rtol=lt, atol=lt)
    (bwd,) = dt.grad(alg, ["X"], save=names).algorithms
    G = randn(*got.shape, gen=gen).to(dtype)
    bargs = [*args, G, *outs[1:]]
    dX = dt.compile(bwd)(*bargs, out=poisoned_outputs(bwd, bargs)[0])
    (wX,) = torch.autograd.grad(want, x64, G.double())
    assert not torch.isnan(dX).any()
    torch.testing.assert_close(dX.double(), wX, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_saved_max_pair_keeps_its_natural_log_value(gen, dtype):
    """Saving the max and the sum themselves: the saved max is max(X) (to fp32 rounding of the
    base-2 conversion) and the backward from the pair matches float64."""
    X = randn(6, 23, gen=gen, scale=3.0).to(dtype)
    aug, names = augmented_forward(softmax, ["max0", "sum0"])
    sched = dt.Schedule(strategy={"j": "online"}, tile={"j": 8})
    assert "tl.exp2(" in dt.compile(aug, sched).source_for(X)
    y, m, l = dt.compile(aug, sched)(X, out=poisoned_outputs(aug, [X]))
    torch.testing.assert_close(m.double(), X.double().amax(1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(l.double(), torch.exp(X.double() - X.double().amax(1, keepdim=True)).sum(1),
                               rtol=1e-3, atol=1e-3)
    G = randn(6, 23, gen=gen).to(dtype)
    (bwd,) = dt.grad(softmax, save=names).algorithms
    dX = dt.compile(bwd)(X, G, m, l)
    x64 = X.double().requires_grad_(True)
    (w,) = torch.autograd.grad(torch.softmax(x64, 1), x64, G.double())
    torch.testing.assert_close(dX.double(), w, rtol=TOL[dtype], atol=TOL[dtype])


@dt.algorithm
def masked_lse(X: dt.Tensor["M", "N"], W: dt.Tensor["M", "N"]):
    """log-sum-exp over the entries where W > 0 (a row without one is fully masked)."""
    i, j = dt.axes("i j")
    s = dt.where(W[i, j] > 0, X[i, j], -float("inf"))
    m = dt.max(s, over=j)
    return (m + dt.log(dt.sum(dt.exp(s - m), over=j)))[i]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["fp16", "bf16", "fp32"])
def test_fully_masked_rows(gen, dtype):
    """A masked log-sum-exp: a fully masked row is NaN (as before the base-2 form: 0 / 0 in the
    online state), the others match float64, in base 2 for 16-bit calls."""
    M, N = 5, 37
    X = randn(M, N, gen=gen, scale=3.0).to(dtype)
    W = (randn(M, N, gen=gen) > 0).to(dtype)
    W[2] = 0
    W[4] = 0
    W[4, 11] = 1
    sched = dt.Schedule(strategy={"j": "online"}, tile={"j": 8})
    k = dt.compile(masked_lse, sched)
    assert ("tl.exp2(" in k.source_for(X, W)) == (dtype != torch.float32)
    got = k(X, W, out=poisoned_outputs(masked_lse, [X, W])[0]).double()
    want = torch.logsumexp(X.double().masked_fill(W == 0, -math.inf), 1)
    ok = torch.arange(M) != 2
    assert torch.isnan(got[2]) or got[2] == -math.inf
    torch.testing.assert_close(got[ok], want[ok], rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_one_element_log_softmax_is_exactly_zero(dtype):
    """A one-element row's log-probability is exactly 0 in torch; a base-2 stand-in for the max,
    off by an ulp of it, made it nonzero (H200 s8 call 5: fp16 / bf16 1x1 log-softmax). Large
    logits too: ``X - max`` stays exact at the row max."""
    x = torch.tensor([[371.25], [-1234.5], [0.0]], dtype=dtype)
    out = torch.full_like(x, float("nan"))
    got = dt.compile(log_softmax)(x, out=out)
    assert torch.equal(got, torch.zeros_like(x))
    x = torch.randn(5, 37, dtype=dtype) * 300
    x[:, 3] = x.amax(1) + 1000   # each row's max far above the rest: its log-probability rounds to 0
    got = dt.compile(log_softmax)(x)
    assert torch.equal(got[:, 3], torch.zeros(5, dtype=dtype))
