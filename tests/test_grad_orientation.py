"""The orientation of derived sums (issue 15): a sum ``dt.grad`` builds for the adjoint of a node
keeps that node's axis order (:func:`dtriton.grad.derive.orientation`), so a buffer that stores it
has the forward's layout. The diffusion layer's ``d_mul = sum over v of dout[v, c] * basis[v, k]``
came out ``(c, k)`` where the forward's projection is ``(k, c)``; compiled for sm_90 its consumer
spilled 64 bytes that the hand-written backward (reading ``(k, c)``) does not.

Pinned here: derived stages' axes against their forward nodes' (and where the node's own order
crosses the tensors' layouts, the layouts'), the derived diffusion backward's GPU plan against the
hand-written one's (buffer axes, dot orientations), and the gradients of the algorithms whose
orientation changed, on the interpreter at odd sizes against float64 autograd with NaN-poisoned
outputs.
"""

from __future__ import annotations

import pytest
import torch

import dtriton as dt
from conftest import poisoned_outputs
from dtriton.grad import augmented_forward, saved_statistics
from dtriton.ir import Binary, Reduce, Unary, topo_order

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")


@dt.algorithm
def project_tanh(x: dt.Tensor["V", "C"], basis: dt.Tensor["V", "K"], w: dt.Tensor["K", "C"]):
    """A projection to (k, c), an elementwise tanh there, and back: the tanh's adjoint is a sum
    over v of ``dout[v, c] * basis[v, k]`` (the product's own order: (c, k))."""
    v, k, c = dt.axes("v k c")
    z = dt.tanh(dt.sum(basis[v, k] * x[v, c], over=v) * w[k, c])
    return dt.sum(basis[v, k] * z, over=k)[v, c]


def torch_project_tanh(x, basis, w):
    return basis @ torch.tanh((basis.t() @ x) * w)


@dt.algorithm
def batched_diffusion(x: dt.Tensor["B", "V", "C"], basis: dt.Tensor["B", "V", "K"], evals: dt.Tensor["K"],
                      times: dt.Tensor["C"]):
    """The diffusion layer's shape with a batch axis: the spectral node is (b, k, c)."""
    b, v, k, c = dt.axes("b v k c")
    spectral = dt.sum(basis[b, v, k] * x[b, v, c], over=v) * dt.exp(-evals[k] * times[c])
    return dt.sum(basis[b, v, k] * spectral, over=k)[b, v, c]


def torch_batched_diffusion(x, basis, evals, times):
    spectral = (basis.transpose(1, 2) @ x) * torch.exp(-evals[:, None] * times[None, :])
    return basis @ spectral


def _stages(alg: dt.Algorithm) -> dict[str, Reduce]:
    return {n.name: n for n in topo_order([o.expr for o in alg.outputs]) if isinstance(n, Reduce)}


def _node(alg: dt.Algorithm, pred) -> tuple[str, ...]:
    (n,) = [n for n in alg.nodes if pred(n)]
    return n.axes


@pytest.mark.parametrize("alg, stage, node", [
    (project_tanh, "d_tanh", lambda n: isinstance(n, Unary) and n.op == "tanh"),
    (batched_diffusion, "d_mul", lambda n: isinstance(n, Binary) and n.op == "mul" and set(n.axes) == {"b", "k", "c"}),
], ids=["project_tanh", "batched_diffusion"])
def test_adjoint_sum_has_its_node_orientation(alg, stage, node):
    """The derived stage summing a node's adjoint has the node's axes in the node's order, where
    the product it sums lists them the other way round (before the rule: (c, k) and (b, c, k))."""
    (bwd,) = dt.grad(alg).algorithms
    want = _node(alg, node)
    assert _stages(bwd)[stage].axes == want, (_stages(bwd)[stage].axes, want)


def test_derived_diffusion_buffer_is_laid_out_as_the_forward_projection():
    """The layer's derived backward (x and times, projection saved, the spectral output receiving no
    gradient): d_mul is (k, c) as the forward's projection, and its GPU plan at V = 20000 has the
    hand-written backward's buffer axes and dot orientations kernel by kernel."""
    from dtriton.examples.diffusionnet.layer import projection_stage, spatial_diffusion_backward
    from dtriton.examples.diffusionnet.plans import empty_args, gpu_program
    from dtriton.library import spatial_diffusion
    (bwd,) = dt.grad(spatial_diffusion, ["x", "times"], save=[projection_stage()], outputs=[0]).algorithms
    assert _stages(bwd)["d_mul"].axes == spatial_diffusion.stages[projection_stage()].node.axes == ("k", "c")
    progs = [gpu_program(a, empty_args(a, {"V": 20000, "K": 128, "C": 128}))[1]
             for a in (bwd, spatial_diffusion_backward)]
    derived, manual = ([b.axes for b in p.buffers.values()] for p in progs)
    assert derived == manual == [("k", "c")], (derived, manual)
    dots = [[[(d.m, d.n, d.precision) for d in k.dots.values()] for k in p.kernels] for p in progs]
    assert dots[0] == dots[1], dots


def test_tensor_layouts_then_stages_decide_over_a_nodes_own_order():
    """The causal attention's row statistic sum2 is (i, b, h) and its probabilities (j, i, b, h) (the
    mask's condition ``j <= i`` names its axes first): their adjoints follow the queries' layout
    (b, h, i) and the scores stage's (b, h, i, j), as the non-causal backward's do (the dK/dV kernel
    would read an (i, b, h) buffer along i at a stride of B*H)."""
    from dtriton.library import attention, causal_attention
    sums = {}
    for alg in (attention, causal_attention):
        aug, names = augmented_forward(alg, saved_statistics(alg))
        (bwd,) = dt.grad(alg, save=names).algorithms
        st = _stages(bwd)
        sums[alg.name] = (st["d_sum2"].axes, st["d_exp"].axes)
    assert causal_attention.stages["sum2"].node.axes == ("i", "b", "h")
    assert sums["causal_attention"] == sums["attention"] == (("b", "h", "i"), ("b", "h", "i", "j")), sums


def test_orientation_levels():
    """Tensor pairs decide first, stage pairs next, the node's own order last; a pair the tensors
    leave open is not decided by a stage pair they contradict."""
    from dtriton.grad.derive import orientation
    tensors = frozenset({("b", "h"), ("b", "i"), ("h", "i"), ("b", "j"), ("h", "j")})
    stages = frozenset({("i", "j"), ("i", "b"), ("i", "h")})
    assert orientation(("i", "b", "h"), (tensors, stages)) == ("b", "h", "i")
    assert orientation(("j", "i", "b", "h"), (tensors, stages)) == ("b", "h", "i", "j")
    assert orientation(("j", "i", "b", "h"), (tensors,)) == ("b", "h", "j", "i")
    assert orientation(("c", "k"), (frozenset(), frozenset())) == ("c", "k")


CASES = {
    "project_tanh": (project_tanh, torch_project_tanh,
                     lambda g: [torch.randn(37, 23, generator=g), torch.randn(37, 19, generator=g) / 6,
                                torch.randn(19, 23, generator=g)]),
    "batched_diffusion": (batched_diffusion, torch_batched_diffusion,
                          lambda g: [torch.randn(3, 37, 23, generator=g), torch.randn(3, 37, 19, generator=g) / 6,
                                     torch.rand(19, generator=g) * 2, torch.rand(23, generator=g)]),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("seed", [0, 1])
def test_reoriented_gradients_match_float64_autograd(name, seed):
    """Every input's gradient from the derived backward kernels (heuristic schedule, interpreter, odd
    sizes, fresh data, outputs poisoned with NaN) against float64 autograd of plain torch."""
    alg, fn, make = CASES[name]
    g = torch.Generator().manual_seed(100 + seed)
    args = make(g)
    gout = torch.randn(fn(*args).shape, generator=g)
    ga = dt.grad(alg)
    got = {}
    for k, bwd in enumerate(ga.algorithms):
        bargs = (*args, gout)
        outs = poisoned_outputs(bwd, bargs)
        res = dt.compile(bwd)(*bargs, out=tuple(outs) if len(outs) > 1 else outs[0])
        res = res if isinstance(res, tuple) else (res,)
        assert all(r is o for r, o in zip(res, outs))
        for n, (ai, oi) in ga.locate.items():
            if ai == k:
                got[n] = res[oi]
    x64 = [a.double().requires_grad_() for a in args]
    want = torch.autograd.grad(fn(*x64), x64, gout.double())
    names = [p.name for p in alg.params]
    assert set(got) == set(names), (set(got), names)
    for n, w in zip(names, want):
        err = ((got[n].double() - w).norm() / w.norm()).item()
        assert err < 1e-5, (name, n, err)
