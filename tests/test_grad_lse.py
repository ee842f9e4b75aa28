"""The log-sum-exp saving rule of the derivation (:mod:`dtriton.grad.logsumexp`): a stabilising max
and its sum of exponentials saved as one statistic ``lse = max + log(sum)``, the backward reading it
for the max and 1 for the sum, saved stages that depend on the max taken at its shift.

Numeric tests run the saving forward and the backward compiled (Triton's interpreter), outputs
poisoned with NaN, at odd sizes, against torch autograd of the reference in float64.
"""

from __future__ import annotations

import pytest
import torch

import dtriton as dt
from conftest import poisoned_outputs, randn
from dtriton.errors import AlgorithmError
from dtriton.grad import augmented_forward, saved_statistics
from dtriton.ir import Binary, walk
from dtriton.library import attention, causal_attention, cross_entropy, layer_norm, log_softmax, softmax

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")


@dt.algorithm
def masked_softmax(X: dt.Tensor["M", "N"], W: dt.Tensor["M", "N"]):
    """Softmax over the entries where W > 0 (a row without one is fully masked: NaN, as torch)."""
    i, j = dt.axes("i j")
    s = dt.where(W[i, j] > 0, X[i, j], -float("inf"))
    e = dt.exp(s - dt.max(s, over=j))
    return (e / dt.sum(e, over=j))[i, j]


@dt.algorithm
def shifted_pair(X: dt.Tensor["M", "N"], Y: dt.Tensor["M", "K"]):
    """A softmax plus a max that moves with the softmax's max (``r - m`` does not): exact at the
    log-sum-exp shift in real arithmetic, but its backward compares ``r`` with recomputed values, so
    the rule keeps the max and the sum."""
    i, j, k = dt.axes("i j k")
    m = dt.max(X[i, j], over=j)
    e = dt.exp(X[i, j] - m)
    r = dt.max(Y[i, k] + m, over=k)
    return (e / dt.sum(e, over=j) + (r - m))[i, j]


def _run(alg, args, wrt=None):
    """(gradients from the saving forward + derived backward, compiled; torch autograd in float64)."""
    names = saved_statistics(alg)
    aug, names = augmented_forward(alg, names)
    ga = dt.grad(alg, wrt, save=names)
    outs = dt.compile(aug)(*args, out=poisoned_outputs(aug, args))
    outs = outs if isinstance(outs, tuple) else (outs,)
    n = len(alg.outputs)
    gen = torch.Generator().manual_seed(3)
    grads = [randn(*o.shape, gen=gen) for o in outs[:n]]
    got = []
    for bwd in ga.algorithms:
        bargs = [*args, *grads, *outs[n:]]
        r = dt.compile(bwd)(*bargs, out=poisoned_outputs(bwd, bargs))
        got.extend(r if isinstance(r, tuple) else (r,))
    x64 = [a.double().requires_grad_(True) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
           for a in args]
    ref = alg.reference(*x64)
    ref = ref if isinstance(ref, tuple) else (ref,)
    wrt_t = [x for x, p in zip(x64, alg.params) if p.name in ga.wrt]
    want = torch.autograd.grad(ref, wrt_t, [g.double() for g in grads], allow_unused=True)
    return names, got, want


def test_saved_statistics_pair_max_and_sum():
    """softmax, log-softmax, cross-entropy and attention save one statistic for their max and sum
    (attention's sum1 beside it); layer norm, without a max, keeps its stages."""
    for alg in (softmax, log_softmax, cross_entropy):
        assert saved_statistics(alg) == ("lse_max0_sum0",)
    for alg in (attention, causal_attention):
        assert saved_statistics(alg) == ("lse_max0_sum2", "sum1")
    assert saved_statistics(layer_norm) == ("mean0", "mean1")
    assert saved_statistics(shifted_pair) == ("max0", "sum0", "max1")


def test_attention_backward_divides_by_nothing():
    """With the statistic, the derived attention backward has no division at all (the quotient
    derivative's divisions by the row sum fold away), reads no row max or sum, and the saving
    forward stores lse and the normalised sum1 (the output's value)."""
    names = saved_statistics(attention)
    (bwd,) = dt.grad(attention, save=names).algorithms
    assert not any(isinstance(n, Binary) and n.op == "div" for n in walk([o.expr for o in bwd.outputs]))
    assert [p.name for p in bwd.params][-2:] == ["saved_lse_max0_sum2", "saved_sum1"]
    aug, _ = augmented_forward(attention, names)
    assert aug.outputs[2].expr is aug.outputs[0].expr   # sum1 / sum2: the output itself
    assert aug.outputs[1].floor == torch.float32


@pytest.mark.parametrize("alg,M,N", [(softmax, 7, 13), (softmax, 1, 1), (log_softmax, 5, 31), (cross_entropy, 11, 3)],
                         ids=["softmax", "softmax_1x1", "log_softmax", "cross_entropy"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_row_softmax_family_against_float64(gen, alg, M, N, dtype):
    X = randn(M, N, gen=gen, scale=3.0).to(dtype)
    args = [X] if alg is not cross_entropy else [X, torch.randint(0, N, (M,), generator=gen)]
    names, got, want = _run(alg, args, ["X"])
    assert names == ("lse_max0_sum0",)
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    for g, w in zip(got, want):
        assert not torch.isnan(g).any()
        torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol)


def test_stage_compared_in_the_backward_keeps_the_pair(gen):
    """A saved max that moves with the softmax's max: saved_statistics keeps the pair and the
    gradient is exact; asking for the statistic beside it is refused."""
    X, Y = randn(6, 9, gen=gen), randn(6, 5, gen=gen)
    names, got, want = _run(shifted_pair, [X, Y])
    assert names == ("max0", "sum0", "max1")
    for g, w in zip(got, want):
        assert not torch.isnan(g).any()
        torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5)
    with pytest.raises(AlgorithmError, match="max1"):
        dt.grad(shifted_pair, save=["lse_max0_sum0", "max1"])
    with pytest.raises(AlgorithmError, match="max1"):
        augmented_forward(shifted_pair, ["lse_max0_sum0", "max1"])


def test_masked_rows_and_fully_masked_rows(gen):
    """Masked entries get exactly zero gradient (exp(-inf - lse)); a fully masked row is NaN in the
    forward (0 / 0, as torch), its statistic NaN, and its gradient zero (every entry masked: the
    derived backward selects 0 there, as it does recomputing the statistics; torch's is NaN); the
    other rows match float64."""
    M, N = 5, 11
    X = randn(M, N, gen=gen)
    W = (randn(M, N, gen=gen) > 0).float()
    W[2] = 0.0          # fully masked
    W[4] = 0.0
    W[4, 7] = 1.0       # one entry
    names, (dX,), (wX,) = _run(masked_softmax, [X, W], ["X"])
    assert names == ("lse_max0_sum0",)
    assert (dX[2] == 0).all()
    (rec,) = dt.grad(masked_softmax, ["X"]).algorithms   # recomputing the max and sum
    G = randn(M, N, gen=torch.Generator().manual_seed(3))
    assert (dt.compile(rec)(X, W, G)[2] == 0).all()
    ok = torch.tensor([r != 2 for r in range(M)])
    torch.testing.assert_close(dX[ok].double(), wX[ok], rtol=1e-5, atol=1e-6)
    assert (dX[ok][W[ok] == 0] == 0).all()


@pytest.mark.parametrize("causal,S,T,D", [(False, 19, 7, 16), (True, 23, 23, 16), (False, 1, 1, 16)])
def test_attention_with_lse_against_float64(gen, causal, S, T, D):
    alg = causal_attention if causal else attention
    T = S if causal else T
    Q, K, V = (randn(2, 3, n, D, gen=gen) for n in (S, T, T))
    names, got, want = _run(alg, [Q, K, V, 0.4])
    assert names == ("lse_max0_sum2", "sum1")
    for g, w in zip(got, want):
        assert not torch.isnan(g).any()
        assert ((g.double() - w).norm() / w.norm().clamp_min(1e-12)).item() < 1e-4


def test_errors_name_the_statistics():
    """Saving a max beside the statistic made of it is refused; an unknown name lists the
    statistics."""
    with pytest.raises(AlgorithmError, match="log-sum-exp"):
        dt.grad(softmax, save=["lse_max0_sum0", "max0"])
    with pytest.raises(AlgorithmError, match="lse_max0_sum0"):
        dt.grad(softmax, save=["nope"])
    with pytest.raises(AlgorithmError, match="lse_max0_sum0"):
        augmented_forward(softmax, ["nope"])


def test_explicit_pair_still_works(gen):
    """Saving the max and the sum themselves (the former rule) still gives the exact gradient."""
    X = randn(4, 9, gen=gen)
    aug, names = augmented_forward(softmax, ["max0", "sum0"])
    ga = dt.grad(softmax, save=names)
    y, m, l = dt.compile(aug)(X)
    G = randn(4, 9, gen=gen)
    dX = dt.compile(ga.algorithms[0])(X, G, m, l)
    x64 = X.double().requires_grad_(True)
    (w,) = torch.autograd.grad(torch.softmax(x64, 1), x64, G.double())
    torch.testing.assert_close(dX.double(), w, rtol=1e-5, atol=1e-6)
