"""DiffusionNet's spatial diffusion layer, written as dtriton algorithms.

The layer of Sharp, Attaiki, Crane and Ovsjanikov, "DiffusionNet: Discretization Agnostic
Learning on Surfaces", ACM TOG 2022 (arXiv:2012.00888), diffuses each feature channel ``c`` for
its own learned time ``t_c`` with the heat kernel in a truncated Laplacian eigenbasis::

    spectral[k, c] = exp(-evals[k] * t[c]) * sum_v basis[v, k] * x[v, c] * mass[v]    # (K, C)
    out[v, c]      = sum_k basis[v, k] * spectral[k, c]                               # (V, C)

Here that is the dtriton algorithm :data:`spatial_diffusion`. Its backward (gradients for ``x``
and ``t``; the operators are constants) is two more algorithms in index notation. With
``G = dL/dout`` (V, C) and ``Gs = basis^T G`` (K, C)::

    dL/dx[v, c] = mass[v] * sum_k basis[v, k] * exp(-evals[k] t[c]) * Gs[k, c]
    dL/dt[c]    = sum_k -evals[k] * spectral[k, c] * Gs[k, c]

(the forward's second output ``spectral`` already holds ``exp(-evals t) * basis^T (x mass)``).

Public API:

* :func:`spatial_diffusion_fn` -- differentiable functional form, every FLOP in dtriton kernels.
* :class:`SpatialDiffusion` -- the ``torch.nn.Module`` (learnable per-channel times, operators
  held as buffers).
* :func:`torch_spatial_diffusion` / :func:`compiled_torch_spatial_diffusion` -- the eager PyTorch
  reference (as in the authors' code) and its ``torch.compile`` version, for comparisons.
* :class:`DiffusionKernels` -- the compiled dtriton kernels and the schedules they run.

Backends (``backend=`` of the function and the module):

* ``"dtriton-manual"``: forward and backward are dtriton kernels; the backward algorithms are the
  hand-written ones above, glued to PyTorch autograd by a ``torch.autograd.Function``.
* ``"auto"``: automatic gradients: the forward kernel wrapped by
  ``dtriton.integrations.differentiable`` (backward algorithms derived by ``dt.grad``; the forward's
  ``spectral`` output is saved for them, read by the gradient of the times as in the hand-written
  backward: the output tensor itself for float32 and float64 inputs, so a training step launches and
  allocates what the hand-written backend's does; a float32 copy beside a 16-bit output). Used only when that module imports and
  passes a numerical check against the manual backward (see :func:`available_backend`).
* ``"torch"``: the eager PyTorch reference (no dtriton).
* ``None`` (default): ``"auto"`` when available, else ``"dtriton-manual"``.

Schedules: by default each algorithm is compiled with ``dt.compile(alg, "tuned")`` (best schedule
from the tuning database, heuristic otherwise); when ``dtriton.tune`` is not importable, with
``dt.compile(alg)`` (the heuristic, which splits the long V reduction across programs on large
meshes on the GPU). :meth:`DiffusionKernels.schedules_for` shows what a call would run.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

import torch

import dtriton as dt
from dtriton.library import spatial_diffusion  # the layer's forward: out (V, C), spectral (K, C)

__all__ = [
    "BACKENDS",
    "DiffusionKernels",
    "SpatialDiffusion",
    "available_backend",
    "compiled_torch_spatial_diffusion",
    "default_kernels",
    "projection_stage",
    "spectral_stage",
    "spatial_diffusion",
    "spatial_diffusion_backward",
    "spatial_diffusion_backward_times",
    "spatial_diffusion_fn",
    "torch_spatial_diffusion",
]

#: Accepted values of ``backend=`` (``None`` picks "auto" when available, else "dtriton-manual").
BACKENDS = ("auto", "dtriton-manual", "torch")

#: Lower bound applied to the diffusion times (as the authors' code does).
MIN_TIME = 1e-8


# ----------------------------------------------------------------------------------------------
# the algorithms
# ----------------------------------------------------------------------------------------------


@dt.algorithm
def spatial_diffusion_backward(grad_out: dt.Tensor["V", "C"], basis: dt.Tensor["V", "K"],
                               mass: dt.Tensor["V"], evals: dt.Tensor["K"], times: dt.Tensor["C"],
                               spectral: dt.Tensor["K", "C"]):
    """Backward for ``x`` and ``times``: returns ``grad_x`` (V, C) and ``grad_times`` (C)."""
    v, k, c = dt.axes("v k c")
    gs = dt.sum(basis[v, k] * grad_out[v, c], over=v)                       # basis^T G  (K, C)
    grad_x = mass[v] * dt.sum(basis[v, k] * (dt.exp(-evals[k] * times[c]) * gs), over=k)
    grad_times = dt.sum(-evals[k] * spectral[k, c] * gs, over=k)
    return grad_x[v, c], grad_times[c]


@dt.algorithm
def spatial_diffusion_backward_times(grad_out: dt.Tensor["V", "C"], basis: dt.Tensor["V", "K"],
                                     evals: dt.Tensor["K"], spectral: dt.Tensor["K", "C"]):
    """Backward for ``times`` only (``x`` needs no gradient): returns ``grad_times`` (C)."""
    v, k, c = dt.axes("v k c")
    gs = dt.sum(basis[v, k] * grad_out[v, c], over=v)
    return dt.sum(-evals[k] * spectral[k, c] * gs, over=k)[c]


# ----------------------------------------------------------------------------------------------
# eager PyTorch reference and torch.compile
# ----------------------------------------------------------------------------------------------
def torch_spatial_diffusion(x: torch.Tensor, basis: torch.Tensor, mass: torch.Tensor,
                            evals: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
    """Eager PyTorch spatial diffusion (the spectral method of Sharp et al. 2022, as in the authors'
    code: project to the basis, scale by ``exp(-evals t)``, project back).

    Args:
        x: (V, C) features. basis: (V, K) M-orthonormal eigenvectors. mass: (V,) lumped vertex
            areas. evals: (K,) eigenvalues >= 0. times: (C,) diffusion times > 0, in the inverse
            units of ``evals`` (squared length units of the mesh).
            Any float dtype PyTorch can combine; all on one device.

    Returns:
        (V, C) tensor: the diffused features. Differentiable by PyTorch autograd.

    Raises:
        RuntimeError: PyTorch's own errors for mismatched shapes or devices.
    """
    spectral = basis.transpose(0, 1) @ (x * mass[:, None])
    spectral = torch.exp(-evals[:, None] * times[None, :]) * spectral
    return basis @ spectral


_compiled_lock = threading.Lock()
_compiled_fn: Callable | None = None


def compiled_torch_spatial_diffusion(x: torch.Tensor, basis: torch.Tensor, mass: torch.Tensor,
                                     evals: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
    """:func:`torch_spatial_diffusion` through ``torch.compile`` (default options: the first shape
    is compiled static, a second shape recompiles with dynamic sizes), compiled on first use. Same
    arguments, result and errors; compile failures surface as PyTorch's ``torch._dynamo`` errors."""
    global _compiled_fn
    with _compiled_lock:
        if _compiled_fn is None:
            _compiled_fn = torch.compile(torch_spatial_diffusion)
    return _compiled_fn(x, basis, mass, evals, times)


# ----------------------------------------------------------------------------------------------
# compiled dtriton kernels
# ----------------------------------------------------------------------------------------------
_ALGORITHMS = {
    "forward": spatial_diffusion,
    "backward": spatial_diffusion_backward,
    "backward_times": spatial_diffusion_backward_times,
}


def _compile(alg: dt.Algorithm, schedule) -> tuple[Any, str]:
    """``dt.compile`` with "tuned" falling back to the heuristic when ``dtriton.tune`` is absent."""
    if isinstance(schedule, str) and schedule == "tuned":
        try:
            return dt.compile(alg, "tuned"), "tuned (tuning database, heuristic where it has no entry)"
        except ImportError:
            return dt.compile(alg), "heuristic (dtriton.tune is not installed)"
    if schedule is None:
        return dt.compile(alg), "heuristic"
    return dt.compile(alg, schedule), "given"


def _call_args(x, basis, mass, evals, times) -> dict[str, tuple]:
    """Representative arguments of the three kernels for these inputs (empty spectral and
    gradient tensors of the right shapes), keyed forward / backward / backward_times."""
    K, C = basis.shape[1], x.shape[1]
    spectral = torch.empty(K, C, dtype=torch.float32, device=x.device)
    grad = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    return {"forward": (x, basis, mass, evals, times),
            "backward": (grad, basis, mass, evals, times, spectral),
            "backward_times": (grad, basis, evals, spectral)}


class DiffusionKernels:
    """The three compiled dtriton kernels of the layer: ``forward``, ``backward`` (x and times) and
    ``backward_times`` (times only).

    Args:
        schedule: ``"tuned"`` (default), ``None`` (heuristic), a :class:`dtriton.Schedule` for all
            three (fields left unset are filled per call shape), or a mapping from ``"forward"``,
            ``"backward"``, ``"backward_times"`` to any of those (missing keys: ``"tuned"``).

    Attributes:
        forward, backward, backward_times: the kernels (``dt.compile`` results); call them like
            the algorithms :data:`spatial_diffusion`, :data:`spatial_diffusion_backward`,
            :data:`spatial_diffusion_backward_times`.
        schedule_source: per kernel, where its schedule comes from (text).

    Raises:
        dtriton.ScheduleError: a given schedule does not fit an algorithm.
    """

    def __init__(self, schedule: Any = "tuned"):
        per = dict(schedule) if isinstance(schedule, Mapping) else {k: schedule for k in _ALGORITHMS}
        unknown = set(per) - set(_ALGORITHMS)
        if unknown:
            raise KeyError(f"unknown kernel name(s) {sorted(unknown)}; expected {sorted(_ALGORITHMS)}")
        self.schedule_source: dict[str, str] = {}
        for name, alg in _ALGORITHMS.items():
            kern, src = _compile(alg, per.get(name, "tuned"))
            setattr(self, name, kern)
            self.schedule_source[name] = src
        self._auto = None
        self._resolved: dict[tuple, Any] = {}

    def run(self, name: str, *args):
        """Call kernel ``name`` ("forward", "backward", "backward_times") on ``args``.

        A tuned kernel chooses its schedule per call (binding, tuning key, database lookup: tens of
        µs of host time, which shows on small meshes); here that choice is made once per argument
        shapes, dtypes and devices and the chosen kernel is called directly. A chosen kernel that
        fails to compile is forgotten and the tuned kernel called instead (it falls back to the
        heuristic)."""
        kern = getattr(self, name)
        if not hasattr(kern, "kernel_for"):
            return kern(*args)
        key = (name,) + tuple((a.shape, a.dtype, a.device) if isinstance(a, torch.Tensor) else a for a in args)
        chosen = self._resolved.get(key)
        if chosen is None:
            chosen = self._resolved[key] = kern.kernel_for(*args)
        try:
            return chosen(*args)
        except dt.CompileError:
            self._resolved.pop(key, None)
            return kern(*args)

    def refresh(self) -> None:
        """Forget the per-shape choices (call after storing new results in the tuning database)."""
        self._resolved.clear()
        for name in _ALGORITHMS:
            kern = getattr(self, name)
            if hasattr(kern, "refresh"):
                kern.refresh()

    @property
    def auto(self):
        """The forward kernel made differentiable by ``dtriton.integrations`` (created on first use;
        see :func:`available_backend`). Raises ImportError when that module is missing."""
        if self._auto is None:
            self._auto = _auto_entry(self.forward)
        return self._auto

    def schedules_for(self, x, basis, mass, evals, times) -> dict[str, dt.Schedule]:
        """The complete schedules that forward and backward calls with these inputs run
        (``kernel.schedule_for(*args)``; compiles nothing). Keys: forward, backward, backward_times.
        """
        args = _call_args(x, basis, mass, evals, times)
        return {name: getattr(self, name).schedule_for(*a) for name, a in args.items()}

    def origins_for(self, x, basis, mass, evals, times) -> dict[str, str]:
        """Where each kernel's schedule for these inputs comes from: "tuned" / "nearest" (tuning
        database) or "heuristic" for tuned kernels; :attr:`schedule_source` otherwise."""
        args = _call_args(x, basis, mass, evals, times)
        out = {}
        for name, a in args.items():
            kern = getattr(self, name)
            out[name] = kern.origin_for(*a) if hasattr(kern, "origin_for") else self.schedule_source[name]
        return out


_kernels_lock = threading.Lock()
_default_kernels: DiffusionKernels | None = None


def default_kernels() -> DiffusionKernels:
    """The process-wide :class:`DiffusionKernels` with ``schedule="tuned"`` (created on first use;
    compiled kernels are cached per shape specialisation, so sharing them saves recompiles)."""
    global _default_kernels
    with _kernels_lock:
        if _default_kernels is None:
            _default_kernels = DiffusionKernels("tuned")
        return _default_kernels


# ----------------------------------------------------------------------------------------------
# autograd: the hand-written backward through dtriton kernels
# ----------------------------------------------------------------------------------------------
class _ManualDiffusion(torch.autograd.Function):
    """Forward and backward both launch dtriton kernels; gradients for x and times only."""

    @staticmethod
    def forward(ctx, x, times, basis, mass, evals, kernels: DiffusionKernels):
        out, spectral = kernels.run("forward", x, basis, mass, evals, times)
        ctx.kernels = kernels
        ctx.x_dtype = x.dtype
        ctx.save_for_backward(basis, mass, evals, times, spectral)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        basis, mass, evals, times, spectral = ctx.saved_tensors
        need_x, need_t = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_x = grad_t = None
        if need_x:
            grad_x, grad_t = ctx.kernels.run("backward", grad_out, basis, mass, evals, times, spectral)
            grad_x = grad_x.to(ctx.x_dtype)
            grad_t = grad_t.to(times.dtype) if need_t else None
        elif need_t:
            grad_t = ctx.kernels.run("backward_times", grad_out, basis, evals, spectral).to(times.dtype)
        return grad_x, grad_t, None, None, None, None


def _manual(x, basis, mass, evals, times, kernels: DiffusionKernels) -> torch.Tensor:
    return _ManualDiffusion.apply(x, times, basis, mass, evals, kernels)


# ----------------------------------------------------------------------------------------------
# autograd: automatic gradients from dtriton.integrations, when it exists and works
# ----------------------------------------------------------------------------------------------
_auto_lock = threading.Lock()
_auto_state: tuple[bool, str] | None = None


def projection_stage() -> str:
    """Name of the forward's reduction over v (``basis^T (x mass)``), kept for the backward."""
    return next(s.name for s in spatial_diffusion.stages.values()
                if not s.is_output and s.node.over == ("v",))


def spectral_stage() -> str:
    """Name of the forward's output stage ``spectral`` (``exp(-evals t) * basis^T (x mass)``, (K, C)),
    the value the "auto" backend saves for the backward."""
    return next(s.name for s in spatial_diffusion.stages.values()
                if s.is_output and s.node is spatial_diffusion.outputs[1])


def _auto_entry(kernel) -> Callable:
    """``kernel`` (the compiled forward) made differentiable by dtriton's automatic gradients:
    ``dtriton.integrations.differentiable(kernel, save=[spectral stage])``, so the derived backward
    reads ``spectral`` from the forward where it would recompute ``exp(-evals t) * basis^T (x mass)``
    (the gradient of the times, as the hand-written backward does; ``dt.grad``'s ``save=`` of an output).
    The one place to adapt if that API changes. Raises ImportError / AttributeError / TypeError when it
    is not usable."""
    from dtriton.integrations import differentiable
    return differentiable(kernel, save=[spectral_stage()])


def _check_auto() -> None:
    """Compare the automatic gradients with the manual backward on a small problem, on the GPU
    when there is one (the layer's usual device; Triton 3.6's interpreter also fails under
    numpy >= 2.5, as on some GPU images), else on the CPU."""
    g = torch.Generator().manual_seed(0)
    V, K, C = 37, 6, 5
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    basis, mass, evals, x0, t0, w = (a.to(dev) for a in (
        torch.randn(V, K, generator=g), torch.rand(V, generator=g) + 0.5, torch.rand(K, generator=g) * 4,
        torch.randn(V, C, generator=g), torch.rand(C, generator=g) * 0.5 + 0.05, torch.randn(V, C, generator=g)))
    auto = _auto_entry(dt.compile(spatial_diffusion))
    kernels = DiffusionKernels(None)
    grads = []
    for f in (lambda *a: auto(*a)[0], lambda *a: _manual(*a, kernels=kernels)):
        x, t = x0.clone().requires_grad_(), t0.clone().requires_grad_()
        (f(x, basis, mass, evals, t) * w).sum().backward()
        grads.append((x.grad, t.grad))
    for (a, b), name in zip(zip(*grads), ("x", "times")):
        if a is None or not torch.allclose(a, b, rtol=1e-4, atol=1e-4):
            raise RuntimeError(f"automatic gradient for {name} disagrees with the manual backward")


def available_backend(backend: str | None = None) -> tuple[str, str]:
    """Resolve ``backend`` to one of :data:`BACKENDS` and say why.

    ``None`` gives ``"auto"`` when ``dtriton.integrations.differentiable`` is importable and passes a
    numerical check against the manual backward on a small problem (on the GPU when there is one;
    checked once per process), else ``"dtriton-manual"``.

    Returns:
        ``(name, reason)``.

    Raises:
        ValueError: an unknown backend name, or ``"auto"`` asked for explicitly but unavailable
            (the message says why).
    """
    global _auto_state
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS} or None")
    if backend in ("dtriton-manual", "torch"):
        return backend, "requested"
    with _auto_lock:
        if _auto_state is None:
            try:
                _check_auto()
                _auto_state = (True, "dtriton.integrations.differentiable: backward derived by dt.grad, "
                                     "checked against the hand-written backward")
            except Exception as e:  # noqa: BLE001 - any failure means: not usable (yet)
                _auto_state = (False, f"automatic gradients unavailable ({type(e).__name__}: {e})")
    ok, why = _auto_state
    if ok:
        return "auto", why
    if backend == "auto":
        raise ValueError(f"backend 'auto' was requested but {why}")
    return "dtriton-manual", f"hand-written backward algorithms; {why}"


# ----------------------------------------------------------------------------------------------
# public functional form and module
# ----------------------------------------------------------------------------------------------
def _check_args(x, basis, mass, evals, times):
    for name, t, nd in (("x", x, 2), ("basis", basis, 2), ("mass", mass, 1), ("evals", evals, 1),
                        ("times", times, 1)):
        if not isinstance(t, torch.Tensor) or t.dim() != nd:
            raise ValueError(f"{name} must be a {nd}-d torch.Tensor, got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    V, K = basis.shape
    if x.shape[0] != V or mass.shape[0] != V or evals.shape[0] != K or times.shape[0] != x.shape[1]:
        raise ValueError(f"shapes do not fit: x {tuple(x.shape)} (V, C), basis {tuple(basis.shape)} "
                         f"(V, K), mass {tuple(mass.shape)} (V,), evals {tuple(evals.shape)} (K,), "
                         f"times {tuple(times.shape)} (C,)")
    for name, t in (("basis", basis), ("mass", mass), ("evals", evals)):
        if t.requires_grad and torch.is_grad_enabled():
            raise ValueError(f"{name} requires grad, but the dtriton backends differentiate only x and "
                             "times (the operators are constants in DiffusionNet); detach it")


def spatial_diffusion_fn(x: torch.Tensor, basis: torch.Tensor, mass: torch.Tensor,
                         evals: torch.Tensor, times: torch.Tensor, *, backend: str | None = None,
                         kernels: DiffusionKernels | None = None) -> torch.Tensor:
    """Spatial diffusion (Sharp et al. 2022) through dtriton, differentiable in ``x`` and ``times``.

    Args:
        x: (V, C) features, float32 (fp16/bf16/fp64 also run; results are float32, or float64
            for float64 inputs).
        basis: (V, K) M-orthonormal Laplacian eigenvectors; mass: (V,) lumped vertex areas;
            evals: (K,) eigenvalues >= 0 (float32, see :mod:`.operators`). Constants: they must not
            require grad.
        times: (C,) diffusion times (> 0 for a diffusion; the module clamps them), in the inverse
            units of ``evals``.
        backend: see the module docstring (None: "auto" if available, else "dtriton-manual").
        kernels: compiled kernels to use (default :func:`default_kernels`).

    All tensors on one device: CUDA runs on the GPU, CPU runs through Triton's interpreter.

    Returns:
        (V, C) diffused features.

    Raises:
        ValueError: wrong ranks or sizes, an operator that requires grad, an unknown backend.
        dtriton.ShapeError: mixed devices or unsupported dtypes (from the kernels).
    """
    _check_args(x, basis, mass, evals, times)
    name, _ = available_backend(backend)
    if name == "torch":
        return torch_spatial_diffusion(x, basis, mass, evals, times)
    kernels = kernels or default_kernels()
    if name == "auto":
        return kernels.auto(x, basis, mass, evals, times)[0]
    return _manual(x, basis, mass, evals, times, kernels)


class SpatialDiffusion(torch.nn.Module):
    """DiffusionNet's learned spatial diffusion (Sharp et al. 2022, spectral acceleration), with
    forward and backward in dtriton kernels.

    Args:
        basis: (V, K) M-orthonormal eigenvectors, mass: (V,) lumped vertex areas, evals: (K,)
            eigenvalues (from :func:`.operators.spectral_operators`); stored as buffers (they follow
            ``.to(device)``; copied, as float32).
        channels: C, the number of feature channels (one learned time each).
        init_time: initial diffusion time of every channel (the authors' code starts at 0.0, which
            the clamp lifts to 1e-8); a float or a (C,) tensor.
        backend: None, "auto", "dtriton-manual" or "torch" (see the module docstring).
        kernels: a :class:`DiffusionKernels` (default: the shared "tuned" ones).

    Attributes:
        times: ``torch.nn.Parameter`` (C,), the learned diffusion times (inverse units of evals).
        backend: the resolved backend name; backend_reason: why it was chosen.

    ``forward(x)`` takes (V, C) features on the buffers' device and returns (V, C). It first
    clamps the times to >= 1e-8 outside autograd (:meth:`clamp_times_`), as the authors' code
    does; call :meth:`clamp_times_` after each optimiser step too.

    Raises:
        ValueError: inconsistent operator shapes, ``channels < 1``, a bad ``init_time``, an
            unknown backend; in forward, ``x`` not of shape (V, C).
    """

    def __init__(self, basis: torch.Tensor, mass: torch.Tensor, evals: torch.Tensor, channels: int,
                 init_time: float | torch.Tensor = 0.0, backend: str | None = None,
                 kernels: DiffusionKernels | None = None):
        super().__init__()
        basis, mass, evals = (torch.as_tensor(t, dtype=torch.float32) for t in (basis, mass, evals))
        if basis.dim() != 2 or mass.shape != (basis.shape[0],) or evals.shape != (basis.shape[1],):
            raise ValueError(f"need basis (V, K), mass (V,), evals (K,); got {tuple(basis.shape)}, "
                             f"{tuple(mass.shape)}, {tuple(evals.shape)}")
        if int(channels) != channels or channels < 1:
            raise ValueError(f"channels must be a positive integer, got {channels!r}")
        self.register_buffer("basis", basis.detach().clone().contiguous())
        self.register_buffer("mass", mass.detach().clone().contiguous())
        self.register_buffer("evals", evals.detach().clone().contiguous())
        t = torch.as_tensor(init_time, dtype=torch.float32).detach().clone()
        if t.dim() == 0:
            t = t.expand(int(channels)).clone()
        if t.shape != (int(channels),):
            raise ValueError(f"init_time must be a float or a ({channels},) tensor, got shape {tuple(t.shape)}")
        t = t.to(basis.device)
        self.times = torch.nn.Parameter(t)
        self.backend, self.backend_reason = available_backend(backend)
        self.kernels = kernels
        self.clamp_times_()

    @classmethod
    def from_operators(cls, ops, channels: int, device=None, **kwargs) -> "SpatialDiffusion":
        """Build from an :class:`.operators.Operators` (numpy arrays) and move to ``device``."""
        d = ops.as_torch()
        return cls(d["basis"], d["mass"], d["evals"], channels, **kwargs).to(device)

    @property
    def V(self) -> int:
        return self.basis.shape[0]

    @property
    def K(self) -> int:
        return self.basis.shape[1]

    @property
    def C(self) -> int:
        return self.times.shape[0]

    @torch.no_grad()
    def clamp_times_(self) -> "SpatialDiffusion":
        """Clamp the times in place to >= 1e-8 (outside autograd, as DiffusionNet does). Returns self."""
        self.times.data.clamp_(min=MIN_TIME)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape != (self.V, self.C):
            raise ValueError(f"x must have shape (V, C) = ({self.V}, {self.C}), got {tuple(x.shape)}")
        self.clamp_times_()
        return spatial_diffusion_fn(x, self.basis, self.mass, self.evals, self.times,
                                    backend=self.backend, kernels=self.kernels)

    def schedules_for(self, x: torch.Tensor) -> dict[str, dt.Schedule]:
        """The complete dtriton schedules a forward/backward with input ``x`` runs
        (see :meth:`DiffusionKernels.schedules_for`)."""
        return (self.kernels or default_kernels()).schedules_for(x, self.basis, self.mass, self.evals,
                                                                 self.times.detach())

    def extra_repr(self) -> str:
        return f"V={self.V}, K={self.K}, C={self.C}, backend={self.backend!r}"
