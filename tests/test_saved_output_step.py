"""A saved forward output is the output itself (issue 15): ``dt.differentiable(kernel, save=["out1"])``
keeps the output tensor for the backward where the call's output already has the saved value's
dtype (float32, float64), so the forward writes it once, as a hand-written autograd function that
saves its result does; 16-bit outputs keep the float32 copy the saving forward writes beside them.

The diffusion layer's "auto" backend saves its spectral output: a steady training step of it must
launch and allocate what the hand-written backend's step does (before, its forward wrote the
spectral coefficients twice, into one more allocation). The GPU code path (fast launchers, steps)
runs here on CPU tensors with launches interpreted (``interp_gpu`` of test_host_path.py: every
allocation counted, the uninitialised ones poisoned with NaN); gradients against float64 autograd.
"""

from __future__ import annotations

import pytest
import torch

import dtriton as dt
from conftest import assert_close, randn
from dtriton.examples.diffusionnet import layer as L
from dtriton.integrations import differentiable
from dtriton.library import spatial_diffusion
from test_host_path import interp_gpu  # noqa: F401  (the fixture)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")


def _inputs(V, K, C, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (randn(V, C, gen=g).to(dtype), (randn(V, K, gen=g) / V ** 0.5).to(dtype),
            (torch.rand(V, generator=g) + 0.5).to(dtype), (torch.rand(K, generator=g) * 4).to(dtype),
            (torch.rand(C, generator=g) * 0.5 + 0.05).to(dtype))


def _step(f, args, w, w_spec=None):
    """One training step: loss ``sum(out * w)`` (plus ``sum(spectral * w_spec)`` when given, for a
    function returning both outputs); returns the gradients of x and times."""
    x, basis, mass, evals, times = args
    x, t = x.detach().clone().requires_grad_(), times.detach().clone().requires_grad_()
    res = f(x, basis, mass, evals, t)
    loss = (res[0] * w).sum() if w_spec is None else (res[0] * w).sum() + (res[1] * w_spec).sum()
    loss.backward()
    return x.grad, t.grad


def _reference(args, w, w_spec=None):
    x, basis, mass, evals, times = (a.double() for a in args)
    x, t = x.requires_grad_(), times.requires_grad_()
    proj = basis.T @ (x * mass[:, None])
    spec = torch.exp(-evals[:, None] * t[None, :]) * proj
    loss = ((basis @ spec) * w.double()).sum()
    if w_spec is not None:
        loss = loss + (spec * w_spec.double()).sum()
    loss.backward()
    return x.grad, t.grad


def _check(got, want, tol):
    for g, r, name in zip(got, want, ("dx", "dtimes")):
        assert_close(g.double(), r, tol, name)


def test_diffusion_step_launches_and_allocates_what_the_hand_written_one_does(interp_gpu):  # noqa: F811
    """Steady steps (third and later) of the derived backend and of the hand-written one: the same
    kernel launches and the same allocations; the derived forward is the plain forward (no kernel
    writing a copy of the spectral coefficients) and keeps the spectral output for the backward.
    Fresh data every step, gradients right."""
    V, K, C = 37, 6, 5
    derived = differentiable(dt.compile(spatial_diffusion), save=[L.spectral_stage()])
    kernels = L.DiffusionKernels(None)
    rows = {"derived": lambda *a: derived(*a), "manual": lambda *a: (L.spatial_diffusion_fn(
        *a, backend="dtriton-manual", kernels=kernels),)}
    counts = {}
    for name, f in rows.items():
        for seed in range(4):
            args = _inputs(V, K, C, torch.float32, seed)
            w = randn(V, C, gen=torch.Generator().manual_seed(10 + seed))
            fast, allocs = interp_gpu.fast, interp_gpu.allocations
            got = _step(f, args, w)
            _check(got, _reference(args, w), 1e-5)
        counts[name] = (interp_gpu.fast - fast, interp_gpu.allocations - allocs)
    assert counts["derived"] == counts["manual"], counts
    assert counts["derived"][0] == 6, counts   # three kernels forward, three backward, through the fast launchers
    (runner,) = derived.last_runs["forward"]
    assert runner.alg is spatial_diffusion   # not spatial_diffusion_fwd_saving (out0, out1 and a copy of out1)
    (step,) = derived._steps.values()
    assert step.pick == (1,) and step.n_saved == 1


def test_saved_output_is_the_output_tensor_on_the_general_path():
    """Without fast launchers (the interpreter): the saved value is the returned output, not a copy,
    for float32 and float64 inputs; gradients right with both outputs seeded; changing the saved
    output in place before the backward is autograd's error, as for torch ops saving their result."""
    dk = differentiable(dt.compile(spatial_diffusion), save=[L.spectral_stage()])
    V, K, C = 29, 7, 3
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        args = _inputs(V, K, C, dtype, 1)
        outs, saved = dk.run_forward(args)
        assert len(saved) == 1 and saved[0] is outs[1]
        g = torch.Generator().manual_seed(5)
        w, w_spec = randn(V, C, gen=g).to(dtype), randn(K, C, gen=g).to(dtype)
        _check(_step(dk, args, w, w_spec), _reference(args, w, w_spec), tol)
    x, basis, mass, evals, times = _inputs(V, K, C, torch.float32, 2)
    out, spec = dk(x.requires_grad_(), basis, mass, evals, times)
    spec.detach().mul_(2.0)   # (through a detached view: autograd sees the version change)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_sixteen_bit_outputs_keep_the_float32_copy():
    """fp16 inputs give an fp16 spectral output: the saving forward's float32 copy is what the
    backward reads (the output would lose precision), and the gradients are right."""
    dk = differentiable(dt.compile(spatial_diffusion), save=[L.spectral_stage()])
    args = _inputs(33, 8, 5, torch.float16, 3)
    outs, saved = dk.run_forward(args)
    assert outs[1].dtype == torch.float16 and saved[0].dtype == torch.float32
    assert dk.last_runs["forward"][0].alg.name == "spatial_diffusion_fwd_saving"
    w = randn(33, 5, gen=torch.Generator().manual_seed(7)).half()
    _check(_step(dk, args, w), _reference(args, w), 3e-3)


def test_saved_output_with_a_saved_statistic():
    """A saved output beside a saved reduction stage: the forward outputs only the statistic after
    the outputs, the saved values are (statistic, output) in the order named; gradients right."""
    dk = differentiable(dt.compile(spatial_diffusion), save=["sum0", L.spectral_stage()])
    args = _inputs(31, 6, 4, torch.float32, 4)
    outs, saved = dk.run_forward(args)
    (runner,) = dk.last_runs["forward"]
    assert len(runner.alg.outputs) == 3 and saved[1] is outs[1] and saved[0].shape == (6, 4)
    w = randn(31, 4, gen=torch.Generator().manual_seed(8))
    _check(_step(dk, args, w), _reference(args, w), 1e-5)


@pytest.mark.parametrize("save", [None, [L.spectral_stage()]], ids=["recompute", "spectral"])
def test_differentiable_tuned_kernel(save, tmp_path):
    """``differentiable`` of a tuned kernel (``dt.compile(alg, "tuned")``, as the layer's default
    kernels are) runs the tuned kernel's choice for its forward, with or without saving (the
    forward runs the tuned kernel itself in both cases) and builds its step from it; gradients right."""
    from dtriton.tune import TuningDB
    dk = differentiable(dt.tune.TunedKernel(spatial_diffusion, TuningDB(tmp_path / "db.json")), save=save)
    for seed in range(3):
        args = _inputs(23, 5, 4, torch.float32, 20 + seed)
        w = randn(23, 4, gen=torch.Generator().manual_seed(seed))
        _check(_step(dk, args, w), _reference(args, w), 1e-5)
    (runner,) = dk.last_runs["forward"]
    assert runner.alg is spatial_diffusion
