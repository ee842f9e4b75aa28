"""One mesh of the demo (:mod:`.demo`): operators, checks, timings with spread, the split sweep and
the time recovery, each step over about two seconds with a ``rich`` progress bar."""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from functools import partial
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from .demo_meshes import load_named_mesh

__all__ = ["SPLITS", "BACKEND_LABEL", "MeshResult", "bench_us", "progress", "say", "run_mesh"]

#: split factors of the V reduction swept on the GPU
SPLITS = (1, 2, 4, 8, 16, 32, 64, 128)
#: label in the tables of each layer backend
BACKEND_LABEL = {"dtriton-manual": "dtriton", "auto": "dtriton-auto"}


def say(msg: str = "") -> None:
    """Print a line of the demo's log (flushed, so it interleaves with progress bars)."""
    print(msg, flush=True)


@contextmanager
def progress(description: str, total: int | None = None) -> Iterator[Callable[..., None]]:
    """A transient ``rich`` progress bar (a spinner when ``total`` is None) for one step.

    Yields ``advance(n=1, info="")``: move the bar by ``n`` and show ``info`` after it (a loss, a
    name). The bar disappears when the step ends; the step's result is then printed by :func:`say`.
    Without a terminal (a log file, a pipe) there is no bar."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    cols = [SpinnerColumn(), TextColumn("    {task.description}")]
    if total is not None:
        cols += [BarColumn(), MofNCompleteColumn(), TextColumn("eta"), TimeRemainingColumn()]
    cols += [TimeElapsedColumn(), TextColumn("{task.fields[info]}")]
    console = Console()
    if not console.is_terminal:
        yield lambda n=1, info="": None
        return
    with Progress(*cols, transient=True, console=console) as p:
        task = p.add_task(description, total=total, info="")

        def advance(n: int = 1, info: str = "") -> None:
            p.update(task, advance=n, info=info)
        yield advance


@dataclass
class MeshResult:
    """Everything the demo measured on one mesh (``times_us``: medians; ``spread_us``: quartiles)."""
    name: str
    source: str
    V: int
    F: int
    K: int
    C: int
    seconds_operators: float
    operators_cached: bool
    schedules: dict[str, str]
    schedule_source: dict[str, str]
    times_us: dict[str, float | None]
    heat: dict
    grads: dict
    sweep_fwd_us: dict[int, float] = field(default_factory=dict)
    sweep_fwdbwd_us: dict[int, float] = field(default_factory=dict)
    sweep_err: dict[int, float] = field(default_factory=dict)
    best_split: int | None = None
    recovery: dict | None = None
    notes: list[str] = field(default_factory=list)
    spread_us: dict[str, list[float]] = field(default_factory=dict)   # key of times_us -> [q1, q3]


def bench_us(fn: Callable[[], Any], gpu: bool, reps: int) -> tuple[float, float, float]:
    """(median, q1, q3) time of ``fn`` in microseconds.

    GPU: ``triton.testing.do_bench`` quantiles. CPU: the wall clock of at least ``reps`` calls,
    repeated until 0.2 s have passed (at most 1000), after one warm-up call, with PyTorch on one
    thread (on a busy 2-core machine its thread pool stalled single calls for tens of ms; the
    interpreter is single-threaded anyway)."""
    if gpu:
        import triton.testing
        med, q1, q3 = triton.testing.do_bench(fn, quantiles=[0.5, 0.25, 0.75])
        return med * 1e3, q1 * 1e3, q3 * 1e3
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fn()
        ts: list[float] = []
        start = time.perf_counter()
        while len(ts) < max(1, reps) or (time.perf_counter() - start < 0.2 and len(ts) < 1000):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e6)
    finally:
        torch.set_num_threads(threads)
    if len(ts) < 2:
        return ts[0], ts[0], ts[0]
    q1, med, q3 = statistics.quantiles(ts, n=4, method="inclusive")
    return med, q1, q3


def _fwd_bwd(f, x, basis, mass, evals, times, g):
    xg = x.detach().clone().requires_grad_(True)
    tg = times.detach().clone().requires_grad_(True)

    def run():
        out = f(xg, basis, mass, evals, tg)
        torch.autograd.grad(out, (xg, tg), g)
    return run


def _fwd(f, x, basis, mass, evals, times):
    def run():
        with torch.no_grad():
            f(x, basis, mass, evals, times)
    return run


def _record(res: MeshResult, key: str, t: tuple[float, float, float]) -> None:
    res.times_us[key] = t[0]
    res.spread_us[key] = [t[1], t[2]]


def _checks(res: MeshResult, kernels, ops, x, times, backends, seed: int) -> None:
    from .task import check_gradients, check_heat_properties
    basis, mass, evals = ops
    with progress(f"checking against eager PyTorch ({1 + len(backends)} checks)", total=1 + len(backends)) as adv:
        heat = check_heat_properties(basis, mass, evals, x, times, backend="dtriton-manual", kernels=kernels)
        adv(info="values done")
        for b in backends:
            res.grads[b] = check_gradients(basis, mass, evals, x, times, seed=seed, backend=b,
                                           kernels=kernels).to_dict()
            adv(info=f"gradients ({b}) done")
    res.heat = heat.to_dict()
    say(f"    max |dtriton - eager| = {heat.max_abs_err:.2e} (rel {heat.rel_err:.1e}); mass conservation "
        f"{heat.conservation_err:.1e} (eager {heat.conservation_err_eager:.1e}); semigroup {heat.semigroup_err:.1e}")
    for b, gr in res.grads.items():
        say(f"    gradients ({b}) vs eager autograd: x rel {gr['grad_x_rel']:.1e}, times rel {gr['grad_t_rel']:.1e}")


def _timings(res: MeshResult, args, kernels, ops, x, times, g, gpu: bool, backends) -> None:
    from . import layer as L
    basis, mass, evals = ops
    reps = 1 if args.quick else 3
    impls: list[tuple[str, Callable, bool]] = []
    for b in backends:
        impls.append((BACKEND_LABEL[b], partial(L.spatial_diffusion_fn, backend=b, kernels=kernels), b == backends[0]))
    impls.append(("eager", L.torch_spatial_diffusion, True))
    if args.use_compile:
        impls.append(("compile", L.compiled_torch_spatial_diffusion, True))
    n = sum(2 if w else 1 for _, _, w in impls)
    with progress("timing forward and forward+backward", total=n) as adv:
        for label, f, with_fwd in impls:
            try:
                if with_fwd:
                    _record(res, f"{label}_fwd", bench_us(_fwd(f, x, basis, mass, evals, times), gpu, reps))
                    adv(info=f"{label} forward")
                _record(res, f"{label}_fwdbwd", bench_us(_fwd_bwd(f, x, basis, mass, evals, times, g), gpu, reps))
                adv(info=f"{label} forward+backward")
            except Exception as e:  # noqa: BLE001 - torch.compile may be unavailable here
                res.times_us.setdefault(f"{label}_fwd", None)
                res.times_us[f"{label}_fwdbwd"] = None
                res.notes.append(f"{label} timing failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                say(f"    {res.notes[-1]}")
    say("    µs (median)  " + "  ".join(f"{k}={_fmt(v)}" for k, v in res.times_us.items()))


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.1f}")


def _sweep(res: MeshResult, args, scheds, ops, x, times, g) -> None:
    """GPU: the forward (and with --sweep-backward the hand-written backward) with the V reduction
    split S ways; then forward+backward once more with the fastest S."""
    from . import layer as L
    basis, mass, evals = ops
    reps = 1 if args.quick else 3
    ref = L.torch_spatial_diffusion(x, basis, mass, evals, times)
    by_split = {}
    with progress("split sweep of the V reduction", total=len(SPLITS)) as adv:
        for S in SPLITS:
            split = {"v": S} if S > 1 else {}
            kern = L.DiffusionKernels({k: sc.replace(split=split) for k, sc in scheds.items()})
            f = by_split[S] = partial(L.spatial_diffusion_fn, backend="dtriton-manual", kernels=kern)
            with torch.no_grad():
                res.sweep_err[S] = float((f(x, basis, mass, evals, times) - ref).abs().max())
            res.sweep_fwd_us[S] = bench_us(_fwd(f, x, basis, mass, evals, times), True, reps)[0]
            if args.sweep_backward:
                res.sweep_fwdbwd_us[S] = bench_us(_fwd_bwd(f, x, basis, mass, evals, times, g), True, reps)[0]
            adv(info=f"S={S}: {_fmt(res.sweep_fwd_us[S])} µs")
    best = min(res.sweep_fwd_us, key=res.sweep_fwd_us.get)
    res.best_split = best
    res.times_us["dtriton-best_fwd"] = res.sweep_fwd_us[best]
    res.times_us["dtriton-best_fwdbwd"] = res.sweep_fwdbwd_us.get(best) or bench_us(
        _fwd_bwd(by_split[best], x, basis, mass, evals, times, g), True, reps)[0]
    say("    split sweep fwd µs: " + "  ".join(f"S={s}:{_fmt(t)}" for s, t in res.sweep_fwd_us.items())
        + f"  (best S={best}; forward+backward with it {_fmt(res.times_us['dtriton-best_fwdbwd'])})")


def _learn(res: MeshResult, args, ops, problem, backend: str, kernels) -> None:
    from .task import recover_times
    basis, mass, evals = ops
    C = problem.x.shape[1]
    with progress(f"learning {C} diffusion times back (Adam, {args.signal} signal)", total=args.steps) as adv:
        rec = recover_times(basis, mass, evals, problem, steps=args.steps, backend=backend, kernels=kernels,
                            progress=lambda step, loss: adv(info=f"loss {loss:.2e}"))
    res.recovery = rec.to_dict()
    say(f"    learned {C} diffusion times back in {args.steps} Adam steps: loss {rec.losses[0]:.3e} -> "
        f"{rec.losses[-1]:.3e}; time rel. error max {rec.max_rel_err:.2e}, median {rec.median_rel_err:.2e}; "
        f"{rec.seconds:.1f} s ({rec.backend} backward)")


def explore_kernels(kernels, x, basis, mass, evals, times, budget: float) -> None:
    """dt.explore the forward and backward algorithms for these shapes (results go to the tuning
    database, which the "tuned" kernels then use)."""
    import dtriton as dt
    from . import layer as L
    K, C = basis.shape[1], x.shape[1]
    spectral = torch.zeros(K, C, device=x.device)
    grad = torch.randn(x.shape, device=x.device)
    calls = {"forward": (L.spatial_diffusion, (x, basis, mass, evals, times)),
             "backward": (L.spatial_diffusion_backward, (grad, basis, mass, evals, times, spectral)),
             "backward_times": (L.spatial_diffusion_backward_times, (grad, basis, evals, spectral))}
    for name, (alg, a) in calls.items():
        r = dt.explore(alg, a, budget=budget, progress=True)
        best = r.best.to_json() if r.best is not None else "none"
        say(f"    explored {name} ({budget:.0f} s): best {best}")
    kernels.refresh()


def run_mesh(name: str, args, dev: torch.device, gpu: bool, learn: bool, backends: list[str]) -> MeshResult:
    """Run every step of the demo on mesh ``name`` (options ``args`` of :func:`.demo.build_parser`).

    Raises what loading the mesh or computing its operators raises (``ValueError``, ``OSError``,
    ``ImportError`` without the mesh extra, ``RuntimeError``)."""
    from . import layer as L
    from .operators import spectral_operators
    from .task import make_problem

    verts, faces, source = load_named_mesh(name)
    t0 = time.perf_counter()
    with progress(f"{name}: Laplacian eigenbasis (K={args.k}) of {len(verts):,} vertices"):
        ops = spectral_operators(verts, faces, k=args.k)
    t_ops = time.perf_counter() - t0
    d = ops.as_torch(device=dev)
    basis, mass, evals = d["basis"], d["mass"], d["evals"]
    V, K, C = ops.V, ops.K, args.channels
    say(f"  {name}: V={V:,} F={len(faces):,} K={K} C={C}; operators {t_ops:.1f} s"
        f"{' (cache)' if ops.from_cache else ''}")
    problem = make_problem(basis, mass, evals, C, signal=args.signal, seed=args.seed)
    x, times = problem.x, problem.true_times
    kernels = L.default_kernels()
    if args.explore > 0:
        explore_kernels(kernels, x, basis, mass, evals, times, args.explore)
    scheds = kernels.schedules_for(x, basis, mass, evals, times)
    res = MeshResult(name, source, V, len(faces), K, C, t_ops, ops.from_cache,
                     {k: s.to_json() for k, s in scheds.items()},
                     kernels.origins_for(x, basis, mass, evals, times), {}, {}, {})
    say(f"    schedule (forward, {res.schedule_source['forward']}): {scheds['forward'].to_json()}")
    _checks(res, kernels, (basis, mass, evals), x, times, backends, args.seed)
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(args.seed + 1)).to(dev)
    _timings(res, args, kernels, (basis, mass, evals), x, times, g, gpu, backends)
    if gpu and not args.no_sweep:
        _sweep(res, args, scheds, (basis, mass, evals), x, times, g)
    if learn:
        _learn(res, args, (basis, mass, evals), problem, backends[-1], kernels)
    return res
