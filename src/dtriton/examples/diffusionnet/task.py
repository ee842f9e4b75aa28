"""A real task for the dtriton spatial diffusion layer: learn diffusion times back from data.

A signal on a mesh (a random vertex field, or a few unit heat sources) is diffused with known
per-channel times by the eager PyTorch reference in float64; a :class:`.layer.SpatialDiffusion`
starting from a common initial time then learns the times back by Adam on the relative squared
error, with forward and backward running through dtriton kernels. The times are the layer's
learnable parameters exactly as in DiffusionNet (Sharp et al. 2022): raw times, clamped to
>= 1e-8 after each step.

Also here: checks of heat-diffusion properties (mass conservation, the semigroup property) and of
agreement with the eager PyTorch layer, values and gradients.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import torch

from .layer import (DiffusionKernels, SpatialDiffusion, spatial_diffusion_fn,
                    torch_spatial_diffusion)

__all__ = [
    "GradientCheck",
    "HeatCheck",
    "Problem",
    "RecoveryResult",
    "check_gradients",
    "check_heat_properties",
    "learnable_time_range",
    "make_problem",
    "recover_times",
]


def _f64(*ts):
    return tuple(t.detach().double() for t in ts)


def learnable_time_range(evals: torch.Tensor) -> tuple[float, float]:
    """Diffusion times the layer can tell apart with K eigenpairs: ``0.5 / evals[K-1]`` (the
    highest mode decays by e^-0.5) to ``2 / lambda_8`` (the ninth positive eigenvalue, or the
    largest when there are fewer, decays by e^-2). Zero eigenvalues (one per connected component
    of the mesh) are skipped. Longer times leave only the first few modes, so the loss flattens
    and recovery slows down.

    Args:
        evals: (K,) ascending eigenvalues with at least 2 positive ones (above 1e-6 times the
            largest).

    Returns:
        ``(t_lo, t_hi)`` in the inverse units of ``evals``.

    Raises:
        ValueError: fewer than 2 positive eigenvalues.
    """
    e = evals.detach().double().cpu()
    pos = e[e > 1e-6 * e.abs().max()] if e.numel() else e
    if pos.numel() < 2:
        raise ValueError(f"need at least 2 positive eigenvalues, got {pos.numel()} of {e.numel()}")
    t_lo, t_hi = 0.5 / float(pos[-1]), 2.0 / float(pos[min(8, pos.numel() - 1)])
    return (t_lo, t_hi) if t_lo < t_hi else (t_hi, t_lo)


@dataclass
class Problem:
    """Inputs and ground truth of the time-recovery task.

    Attributes: x (V, C) float32 signal; true_times (C,) float32; target (V, C) float32, the
    signal diffused for ``true_times`` by the eager reference computed in float64; signal: kind.
    """
    x: torch.Tensor
    true_times: torch.Tensor
    target: torch.Tensor
    signal: str


def make_problem(basis: torch.Tensor, mass: torch.Tensor, evals: torch.Tensor, channels: int, *,
                 signal: str = "random", seed: int = 0) -> Problem:
    """Make a signal and its diffusion for known times, log-uniform in :func:`learnable_time_range`.

    Args:
        basis (V, K), mass (V,), evals (K,): the mesh operators (any device).
        channels: C >= 1.
        signal: ``"random"``: i.i.d. standard normal vertex values; ``"onehot"``: channel c is a
            unit of heat at one random vertex v_c (value 1 / mass[v_c] there, 0 elsewhere).
        seed: seed of a private generator (the global RNG is untouched).

    Returns:
        :class:`Problem` on the operators' device.

    Raises:
        ValueError: unknown ``signal``, ``channels < 1``.
    """
    if channels < 1:
        raise ValueError(f"channels must be >= 1, got {channels}")
    g = torch.Generator().manual_seed(seed)
    V, dev = basis.shape[0], basis.device
    if signal == "random":
        x = torch.randn(V, channels, generator=g)
    elif signal == "onehot":
        x = torch.zeros(V, channels)
        where = torch.randint(0, V, (channels,), generator=g)
        x[where, torch.arange(channels)] = 1.0 / mass.detach().cpu().float()[where]
    else:
        raise ValueError(f"unknown signal {signal!r}; expected 'random' or 'onehot'")
    t_lo, t_hi = learnable_time_range(evals)
    u = torch.rand(channels, generator=g, dtype=torch.float64)
    true_times = torch.exp(math.log(t_lo) + u * (math.log(t_hi) - math.log(t_lo)))
    x = x.to(dev)
    target = torch_spatial_diffusion(*_f64(x, basis, mass, evals), true_times.to(dev)).float()
    return Problem(x, true_times.float().to(dev), target, signal)


@dataclass
class RecoveryResult:
    """Outcome of :func:`recover_times`.

    Attributes: true_times, init_times, learned_times (lists of C floats); losses (relative squared
    error before each step, then after the last); rel_err (per channel |learned - true| / true);
    steps, lr (initial Adam learning rate), seconds (wall clock), backend.
    """
    true_times: list[float]
    init_times: list[float]
    learned_times: list[float]
    losses: list[float]
    rel_err: list[float]
    steps: int
    lr: float
    seconds: float
    backend: str

    @property
    def max_rel_err(self) -> float:
        return max(self.rel_err)

    @property
    def median_rel_err(self) -> float:
        return float(np.median(self.rel_err))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["max_rel_err"], d["median_rel_err"] = self.max_rel_err, self.median_rel_err
        return d


def recover_times(basis: torch.Tensor, mass: torch.Tensor, evals: torch.Tensor, problem: Problem, *,
                  steps: int = 200, lr: float | None = None, init_time: float | None = None,
                  backend: str | None = None, kernels: DiffusionKernels | None = None,
                  progress: Callable[[int, float], None] | None = None) -> RecoveryResult:
    """Learn the diffusion times of ``problem`` back with a :class:`.layer.SpatialDiffusion`.

    Loss: ``mean((layer(x) - target)^2) / mean(target^2)``. Optimiser: Adam with betas
    (0.5, 0.9) (short memory: the gradient shrinks by orders of magnitude as times converge),
    learning rate ``lr`` (default ``0.05 * t_hi`` of :func:`learnable_time_range`, since Adam's
    steps are about ``lr`` in time units; 0.2 * t_hi sent channels with short times far past their
    target on some meshes at K=128) decayed by a cosine schedule to 1 % of it; after each step the
    times are clamped to >= 1e-8 (:meth:`.layer.SpatialDiffusion.clamp_times_`), as in DiffusionNet.
    With the defaults, 150 steps (K=64) to 200 steps (K=128) recover every time to a relative error
    below about 1e-5 on the demo meshes; 100 steps leave up to about 10 %.

    Args:
        basis, mass, evals: operators; problem: from :func:`make_problem` (same device).
        steps: optimiser steps (>= 1). lr: initial learning rate (time units).
        init_time: starting time of every channel (default: geometric mean of the time range).
        backend, kernels: passed to the layer.
        progress: called as ``progress(step, loss)`` after each step.

    Returns:
        :class:`RecoveryResult`.

    Raises:
        ValueError: ``steps < 1`` (and the layer's errors).
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    t_lo, t_hi = learnable_time_range(evals)
    init = math.sqrt(t_lo * t_hi) if init_time is None else float(init_time)
    lr = 0.05 * t_hi if lr is None else float(lr)
    C = problem.x.shape[1]
    layer = SpatialDiffusion(basis, mass, evals, C, init_time=init, backend=backend,
                             kernels=kernels).to(basis.device)
    init_times = layer.times.detach().cpu().tolist()
    opt = torch.optim.Adam(layer.parameters(), lr=lr, betas=(0.5, 0.9))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=0.01 * lr)
    scale = problem.target.pow(2).mean()
    losses: list[float] = []
    t0 = time.perf_counter()
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = (layer(problem.x) - problem.target).pow(2).mean() / scale
        loss.backward()
        opt.step()
        sched.step()
        layer.clamp_times_()
        losses.append(float(loss.detach()))
        if progress is not None:
            progress(step, losses[-1])
    with torch.no_grad():
        losses.append(float((layer(problem.x) - problem.target).pow(2).mean() / scale))
    seconds = time.perf_counter() - t0
    learned = layer.times.detach().cpu().double()
    true = problem.true_times.detach().cpu().double()
    rel = ((learned - true).abs() / true).tolist()
    return RecoveryResult(true.tolist(), init_times, learned.tolist(), losses, rel, steps, lr, seconds,
                          layer.backend)


@dataclass
class HeatCheck:
    """Heat-diffusion properties of one forward pass (see :func:`check_heat_properties`).

    Attributes:
        max_abs_err: max |dtriton - eager float32| over the output; rel_err: that over max |eager|.
        max_abs_err_f64, eager_max_abs_err_f64: max error of dtriton / of the eager float32 layer
            against the eager layer in float64.
        evals0: the first eigenvalue (~0: its constant eigenvector carries the total heat).
        mass_in, mass_out, mass_out_eager: per channel, sum_v mass_v x_vc and sum_v mass_v out_vc.
        conservation_err, conservation_err_eager: max over channels of |mass_out - mass_in| divided
            by sum_v mass_v |x_vc| (the total absolute heat), for dtriton and for the eager layer.
        semigroup_err: max |D(D(x, t1), t2) - D(x, t1 + t2)| / max |D(x, t1 + t2)| for dtriton.
    """
    max_abs_err: float
    rel_err: float
    max_abs_err_f64: float
    eager_max_abs_err_f64: float
    evals0: float
    mass_in: list[float]
    mass_out: list[float]
    mass_out_eager: list[float]
    conservation_err: float
    conservation_err_eager: float
    semigroup_err: float

    def to_dict(self) -> dict:
        return asdict(self)


@torch.no_grad()
def check_heat_properties(basis: torch.Tensor, mass: torch.Tensor, evals: torch.Tensor,
                          x: torch.Tensor, times: torch.Tensor, *, backend: str | None = None,
                          kernels: DiffusionKernels | None = None) -> HeatCheck:
    """Run the dtriton layer once and check it against the eager layer and heat-diffusion facts.

    Mass conservation: with the constant eigenvector phi_0 in the basis (evals[0] ~ 0, M-orthonormal
    basis), ``sum_v mass_v out_vc = sum_v mass_v x_vc`` for every time, because only spectral
    component 0 carries the total and it is multiplied by ``exp(-evals[0] t) ~ 1``. Semigroup:
    diffusing for t1 then t2 equals diffusing for t1 + t2 (exact in the truncated basis up to its
    M-orthonormality and rounding).

    Args: operators, x (V, C), times (C,) on one device; backend, kernels for the layer.

    Returns:
        :class:`HeatCheck` (plain floats; no assertion is made here).
    """
    f = lambda xx, tt: spatial_diffusion_fn(xx, basis, mass, evals, tt, backend=backend,  # noqa: E731
                                            kernels=kernels)
    out = f(x, times)
    eager = torch_spatial_diffusion(x, basis, mass, evals, times)
    ref64 = torch_spatial_diffusion(*_f64(x, basis, mass, evals, times))
    m64 = mass.double()
    mass_in = (m64[:, None] * x.double()).sum(0)
    heat = (m64[:, None] * x.double().abs()).sum(0).clamp_min(1e-300)
    mass_out = (m64[:, None] * out.double()).sum(0)
    mass_eager = (m64[:, None] * eager.double()).sum(0)
    t1 = times * 0.4
    twice = f(f(x, t1), times - t1)
    once = out
    scale = float(eager.abs().max()) or 1.0
    return HeatCheck(
        max_abs_err=float((out - eager).abs().max()),
        rel_err=float((out - eager).abs().max()) / scale,
        max_abs_err_f64=float((out.double() - ref64).abs().max()),
        eager_max_abs_err_f64=float((eager.double() - ref64).abs().max()),
        evals0=float(evals[0]),
        mass_in=mass_in.cpu().tolist(),
        mass_out=mass_out.cpu().tolist(),
        mass_out_eager=mass_eager.cpu().tolist(),
        conservation_err=float(((mass_out - mass_in).abs() / heat).max()),
        conservation_err_eager=float(((mass_eager - mass_in).abs() / heat).max()),
        semigroup_err=float((twice - once).abs().max()) / (float(once.abs().max()) or 1.0),
    )


@dataclass
class GradientCheck:
    """dtriton gradients against PyTorch autograd on the eager layer (see :func:`check_gradients`).

    Attributes: grad_x_err, grad_t_err: max absolute differences; grad_x_rel, grad_t_rel: the same
    over the max |eager gradient|; times_only_rel: the relative difference of the times gradient
    when x needs none (the ``backward_times`` kernel of the manual backend).
    """
    grad_x_err: float
    grad_x_rel: float
    grad_t_err: float
    grad_t_rel: float
    times_only_rel: float

    def to_dict(self) -> dict:
        return asdict(self)


def check_gradients(basis: torch.Tensor, mass: torch.Tensor, evals: torch.Tensor, x: torch.Tensor,
                    times: torch.Tensor, *, seed: int = 0, backend: str | None = None,
                    kernels: DiffusionKernels | None = None) -> GradientCheck:
    """Gradients of ``sum(w * D(x, t))`` (w random normal) for x and t: dtriton vs eager autograd.

    Returns:
        :class:`GradientCheck` (float32 on both sides; no assertion is made here).
    """
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(x.shape, generator=g).to(x.device)

    def grads(fn, need_x=True):
        xx = x.detach().clone().requires_grad_(need_x)
        tt = times.detach().clone().requires_grad_(True)
        (fn(xx, basis, mass, evals, tt) * w).sum().backward()
        return xx.grad, tt.grad

    dfn = lambda *a: spatial_diffusion_fn(*a, backend=backend, kernels=kernels)  # noqa: E731
    gx, gt = grads(dfn)
    ex, et = grads(torch_spatial_diffusion)
    _, gt_only = grads(dfn, need_x=False)
    ax, at = float((gx - ex).abs().max()), float((gt - et).abs().max())
    tscale = float(et.abs().max()) or 1.0
    return GradientCheck(ax, ax / (float(ex.abs().max()) or 1.0), at, at / tscale,
                         float((gt_only - et).abs().max()) / tscale)
