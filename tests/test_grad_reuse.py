"""A forward output named in ``save=`` is read by the derived backward wherever it recomputes it
(:mod:`dtriton.grad.reuse`): the node itself, or a product holding all of its factors (flattened
products compared as multisets of graph nodes). The diffusion layer's gradient of the times then
reads ``spectral`` as the hand-written backward does, instead of ``exp(-evals t) * projection``.

Numeric tests run the saving forward and the backward compiled (Triton's interpreter), outputs
poisoned with NaN, at odd sizes, against torch autograd of the reference in float64.
"""

from __future__ import annotations

import pytest
import torch

import dtriton as dt
from conftest import poisoned_outputs, randn
from dtriton.errors import AlgorithmError
from dtriton.grad import augmented_forward
from dtriton.integrations import differentiable
from dtriton.ir import Load, Reduce, Unary, walk
from dtriton.library import spatial_diffusion

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")


@dt.algorithm
def growth(a: dt.Tensor["N"], t: dt.Tensor["M"], s: dt.Tensor["N", "M"], w: dt.Tensor["N", "M"]):
    """``y = exp(a t) * s`` (returned) and ``z = sum over j of exp(a t) * w`` (the exponential without s)."""
    i, j = dt.axes("i j")
    e = dt.exp(a[i] * t[j])
    return (e * s[i, j])[i, j], dt.sum(e * w[i, j], over=j)[i]


@dt.algorithm
def swish(x: dt.Tensor["M", "N"], b: dt.Tensor["N"]):
    """``y = u / (1 + exp(-u))`` with ``u = x + b``: a saved value with a denominator."""
    i, j = dt.axes("i j")
    u = x[i, j] + b[j]
    return (u / (1.0 + dt.exp(-u)))[i, j]


def _nodes(alg: dt.Algorithm, k: int) -> list:
    """Every node output ``k`` of ``alg`` computes, through the stages it reads."""
    return list(walk([alg.outputs[k].expr]))


def _exps(nodes) -> int:
    return sum(isinstance(n, Unary) and n.op == "exp" for n in nodes)


def _reads(nodes, name: str) -> bool:
    return any(isinstance(n, Load) and n.tensor.name == name for n in nodes)


def _run(alg, args, wrt, save, seeded=None):
    """(gradients from the saving forward + derived backward, compiled; torch autograd in float64)."""
    aug, names = augmented_forward(alg, save)
    ga = dt.grad(alg, wrt, save=names, outputs=seeded)
    outs = dt.compile(aug)(*args, out=poisoned_outputs(aug, args))
    outs = outs if isinstance(outs, tuple) else (outs,)
    n = len(alg.outputs)
    gen = torch.Generator().manual_seed(3)
    grads = [randn(*o.shape, gen=gen).to(o.dtype) for o in outs[:n]]
    if seeded is not None:
        grads = [g if k in seeded else torch.zeros_like(g) for k, g in enumerate(grads)]
    got = {}
    for bwd in ga.algorithms:
        bargs = [*args, *grads, *outs[n:]]
        r = dt.compile(bwd)(*bargs, out=poisoned_outputs(bwd, bargs))
        r = r if isinstance(r, tuple) else (r,)
        got.update({name: r[oi] for name, (ai, oi) in ga.locate.items() if ga.algorithms[ai] is bwd})
    x64 = [a.double().requires_grad_(p.name in wrt) for a, p in zip(args, alg.params)]
    ref = alg.reference(*x64)
    ref = ref if isinstance(ref, tuple) else (ref,)
    want = torch.autograd.grad(ref, [x for x, p in zip(x64, alg.params) if p.name in wrt],
                               [g.double() for g in grads], allow_unused=True)
    return ga, [got[w] for w in wrt], list(want)


def _diffusion_args(V, K, C, dtype, gen):
    basis = randn(V, K, gen=gen) / V ** 0.5
    return [randn(V, C, gen=gen).to(dtype), basis.to(dtype), (torch.rand(V, generator=gen) + 0.5).to(dtype),
            (torch.rand(K, generator=gen) * 4).to(dtype), (torch.rand(C, generator=gen) * 0.5 + 0.05).to(dtype)]


# ----------------------------------------------------------------------------------------------
# the graph
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seeded", [None, (0,)], ids=["both_outputs", "out_only"])
def test_diffusion_gradient_of_times_reads_spectral(seeded):
    """Saving the spectral output: the gradient of the times reads it and computes no exponential
    (the hand-written backward's sum over k of -evals * spectral * gs); the gradient of x keeps its
    exponential (a partial match: exp(-evals t) without the projection). Saving the projection
    instead (as before) recomputes exp(-evals t) * projection there."""
    (bwd,) = dt.grad(spatial_diffusion, ["x", "times"], save=["out1"], outputs=seeded).algorithms
    dx, dtimes = _nodes(bwd, 0), _nodes(bwd, 1)
    assert _reads(dtimes, "saved_out1") and _exps(dtimes) == 0
    assert _exps(dx) == 1 and not _reads(dx, "saved_out1")
    assert [p.name for p in bwd.params][-1] == "saved_out1"
    assert bwd.provenance.saved == ("out1",) and bwd.provenance.saved_params == ("saved_out1",)
    (old,) = dt.grad(spatial_diffusion, ["x", "times"], save=["sum0"], outputs=seeded).algorithms
    assert _exps(_nodes(old, 1)) == 1 and _reads(_nodes(old, 1), "saved_sum0")


def test_not_saved_or_partial_match_is_not_read():
    """Without the output in save= nothing reads it; a product holding only some of its factors
    keeps the recomputation: ds = gy * exp(a t), and dt with both outputs seeded, which the
    derivation factors as (gy * s + gz * w) * exp(a t) * a (s inside a sum: not distributed).
    With y's gradient alone, dt = sum over i of gy * exp(a t) * s * a reads y."""
    (plain,) = dt.grad(growth, ["t"]).algorithms
    assert not any(p.name.startswith("saved_") for p in plain.params)
    ga = dt.grad(growth, ["t", "s"], save=["out0"], group="none")
    dt_nodes, ds_nodes = _nodes(ga["t"], 0), _nodes(ga["s"], 0)
    assert not _reads(dt_nodes, "saved_out0") and _exps(dt_nodes) == 1
    assert not _reads(ds_nodes, "saved_out0") and _exps(ds_nodes) == 1
    only_y = dt.grad(growth, ["t", "s"], save=["out0"], outputs=[0], group="none")
    assert _reads(_nodes(only_y["t"], 0), "saved_out0") and _exps(_nodes(only_y["t"], 0)) == 0
    assert not _reads(_nodes(only_y["s"], 0), "saved_out0") and _exps(_nodes(only_y["s"], 0)) == 1


def test_saving_forward_stores_the_output_in_at_least_float32():
    """The saved copy of an output is stored in at least float32 (the precision the backward
    computes in): a float16 call returns y in float16 and its saved copy in float32."""
    aug, names = augmented_forward(growth, ["out0"])
    assert names == ("out0",) and aug.outputs[2].floor == torch.float32
    assert aug.outputs[2].expr is aug.outputs[0].expr
    gen = torch.Generator().manual_seed(5)
    args = [randn(5, gen=gen).half(), randn(3, gen=gen).half(), randn(5, 3, gen=gen).half(), randn(5, 3, gen=gen).half()]
    y, z, saved = dt.compile(aug)(*args, out=poisoned_outputs(aug, args))
    assert y.dtype == torch.float16 and saved.dtype == torch.float32
    torch.testing.assert_close(saved.double(), growth.reference(*[a.double() for a in args])[0], rtol=2e-3, atol=2e-3)


def test_save_names_an_unknown_stage():
    with pytest.raises(AlgorithmError, match="output stages"):
        dt.grad(growth, ["t"], save=["out7"])


# ----------------------------------------------------------------------------------------------
# numbers
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("V,K,C,seeded", [(37, 5, 3, None), (23, 7, 4, (0,))], ids=["37x5x3", "23x7x4_out_only"])
def test_diffusion_gradients_against_float64(gen, dtype, V, K, C, seeded):
    args = _diffusion_args(V, K, C, dtype, gen)
    ga, got, want = _run(spatial_diffusion, args, ["x", "times"], ["out1"], seeded)
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    for g, w in zip(got, want):
        assert not torch.isnan(g).any()
        torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_growth_and_swish_against_float64(gen, dtype):
    a, t = (randn(9, gen=gen) * 0.5).to(dtype), (randn(5, gen=gen) * 0.5).to(dtype)
    s, w = randn(9, 5, gen=gen).to(dtype), randn(9, 5, gen=gen).to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    for alg, args, wrt, save, seeded in ((growth, [a, t, s, w], ["a", "t", "s"], ["out0"], (0,)),
                                         (swish, [randn(7, 11, gen=gen).to(dtype), randn(11, gen=gen).to(dtype)],
                                          ["x", "b"], ["out"], None)):
        ga, got, want = _run(alg, args, wrt, save, seeded)
        assert any(_reads(walk([o.expr for o in b.outputs]), f"saved_{save[0]}") for b in ga.algorithms), alg.name
        for g, w_ in zip(got, want):
            assert not torch.isnan(g).any()
            torch.testing.assert_close(g.double(), w_, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_differentiable_saving_the_spectral_output(gen, dtype):
    """Through ``dt.differentiable(save=["out1"])`` (the layer's "auto" backend), loss on both
    outputs, against torch autograd in float64."""
    args = _diffusion_args(19, 6, 5, dtype, gen)
    dk = differentiable(dt.compile(spatial_diffusion), save=["out1"])
    w0, w1 = randn(19, 5, gen=gen).to(dtype), randn(6, 5, gen=gen).to(dtype)
    xs = [a.clone().requires_grad_(k in (0, 4)) for k, a in enumerate(args)]
    out, spec = dk(*xs)
    ((out * w0).sum() + (spec * w1).sum()).backward()
    x64 = [a.double().requires_grad_(k in (0, 4)) for k, a in enumerate(args)]
    ro, rs = spatial_diffusion.reference(*x64)
    ((ro * w0.double()).sum() + (rs * w1.double()).sum()).backward()
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    for k in (0, 4):
        assert xs[k].grad.dtype == dtype
        torch.testing.assert_close(xs[k].grad.double(), x64[k].grad, rtol=tol, atol=tol)
    bwd = dk.gradients(["x", "times"]).algorithms[0]
    assert _exps(_nodes(bwd, 1)) == 0


def test_softmax_output_beside_its_log_sum_exp(gen):
    """Softmax saving its log-sum-exp statistic and its output: the statistic's rule runs first and
    the output (a value over the max and sum it replaces) matches nothing after it; the gradient is
    exact. Alone, the output matches no product of the derived gradient either (its factors sit
    inside a difference), so nothing reads it."""
    from dtriton.library import softmax
    X = randn(6, 13, gen=gen, scale=3.0)
    ga, got, want = _run(softmax, [X], ["X"], ["lse_max0_sum0", "out"])
    torch.testing.assert_close(got[0].double(), want[0], rtol=1e-5, atol=1e-5)
    (alone,) = dt.grad(softmax, save=["out"]).algorithms
    assert not _reads(_nodes(alone, 0), "saved_out")
