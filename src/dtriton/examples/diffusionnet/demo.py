"""``dtriton demo``: DiffusionNet's spatial diffusion on real meshes, end to end.

For each mesh (real meshes shipped inside installed PyPI packages or found in
``$DTRITON_MESH_DIR``; see :mod:`.meshes`), the demo computes the spectral operators, runs the
dtriton layer (:mod:`.layer`) and

* checks it against the eager PyTorch layer: values, gradients for x and the times, mass
  conservation and the semigroup property of heat diffusion (:mod:`.task`);
* learns diffusion times back from diffused signals by Adam through the dtriton kernels;
* times forward and forward+backward for dtriton, eager PyTorch and ``torch.compile``
  (``triton.testing.do_bench``, median, microseconds), and on the GPU sweeps the split of the V
  reduction to show where splitting pays off;

then prints a table and writes ``report.md``, ``results.json`` and plots into ``--out``.

On a machine without a GPU the kernels run on Triton's interpreter: only meshes of up to 3,000
vertices, K=64, C=32, and the times are interpreter times, not GPU performance. ``--quick`` runs
a tiny synthetic mesh with few steps (the CI/test mode).

Run: ``dtriton demo [options]`` or ``python -m dtriton.examples.diffusionnet.demo [options]``.
Source of the layer: Sharp, Attaiki, Crane, Ovsjanikov, "DiffusionNet: Discretization Agnostic
Learning on Surfaces", ACM TOG 2022 (arXiv:2012.00888).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from dtriton.schedule import Schedule

__all__ = ["main", "build_parser"]

SPLITS = (1, 2, 4, 8, 16, 32, 64)
CPU_MAX_VERTICES = 3000


def build_parser() -> argparse.ArgumentParser:
    """The demo's command-line options (see ``--help``)."""
    p = argparse.ArgumentParser(
        prog="dtriton demo",
        description="DiffusionNet spatial diffusion (Sharp et al. 2022) on real meshes through dtriton: "
                    "checks, learning diffusion times back, timings against eager PyTorch and torch.compile.")
    p.add_argument("--meshes", nargs="+", default=None, metavar="NAME",
                   help="mesh names (see --list), paths to .ply/.obj files, or synthetic-sphere-N / "
                        "synthetic-grid-N; comma-separated lists are accepted. Default: every mesh found "
                        f"(on the CPU only those of <= {CPU_MAX_VERTICES} vertices)")
    p.add_argument("--list", action="store_true", help="list the meshes found and exit")
    p.add_argument("--render", metavar="RESULTS_JSON", default=None,
                   help="only rewrite report.md and the plots into --out from a results.json of an earlier run")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"),
                   help="cuda: GPU; cpu: Triton's interpreter; auto: cuda when available")
    p.add_argument("--k", type=int, default=None, help="eigenpairs K (default 128 on GPU, 64 on CPU, 16 quick)")
    p.add_argument("--channels", type=int, default=None,
                   help="channels C (default 128 on GPU, 32 on CPU, 8 quick)")
    p.add_argument("--steps", type=int, default=None,
                   help="Adam steps of the time recovery (default 200 on GPU, 150 on CPU, 25 quick)")
    p.add_argument("--task-meshes", nargs="+", default=None, metavar="NAME",
                   help="meshes to learn times on (default: all on GPU, the largest on CPU)")
    p.add_argument("--signal", default="random", choices=("random", "onehot"),
                   help="signal to diffuse in the recovery task")
    p.add_argument("--no-sweep", action="store_true", help="skip the split sweep (GPU only anyway)")
    p.add_argument("--sweep-backward", action="store_true",
                   help="time forward+backward for every split of the sweep too (more compiles)")
    p.add_argument("--explore", type=float, default=0.0, metavar="SECONDS",
                   help="before timing a mesh, run dt.explore on each of its algorithms for this many seconds "
                        "(stored in the tuning database, then used by the tuned kernels); default 0: off")
    p.add_argument("--compile", dest="use_compile", action="store_true", default=None,
                   help="time torch.compile too (default on GPU only)")
    p.add_argument("--no-compile", dest="use_compile", action="store_false", help="skip torch.compile")
    p.add_argument("--quick", action="store_true",
                   help="CI/test mode: a tiny synthetic mesh (unless --meshes), K=16, C=8, 25 steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="demo_out", help="output folder (default demo_out/)")
    return p


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def _say(msg: str = "") -> None:
    print(msg, flush=True)


def _split_names(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [n.strip() for v in values for n in v.split(",") if n.strip()]


def _load(name: str):
    """(verts, faces, source) for a mesh name, path or synthetic-KIND-N."""
    from .meshes import load_mesh
    from .operators import synthetic_mesh
    if name.startswith("synthetic-"):
        parts = name.split("-")
        if len(parts) != 3 or not parts[2].isdigit():
            raise ValueError(f"synthetic mesh names look like synthetic-sphere-1000, got {name!r}")
        v, f = synthetic_mesh(int(parts[2]), parts[1])
        return v, f, "synthetic_mesh (numpy)"
    v, f = load_mesh(name)
    return v, f, "file"


def _default_meshes(gpu: bool) -> tuple[list[str], str]:
    from .meshes import list_meshes
    try:
        infos = list_meshes()
    except Exception as e:  # noqa: BLE001 - discovery must never stop the demo
        infos, err = [], f"{type(e).__name__}: {e}"
    else:
        err = ""
    if not gpu:
        def small(i):
            try:
                return i.header_counts()[0] <= CPU_MAX_VERTICES
            except (OSError, ValueError):
                return False
        infos = [i for i in infos if small(i)]
    if infos and (gpu or len(infos) >= 3):
        return [i.name for i in infos], ""
    if infos:
        # few small real meshes here (pymeshfix ships one): add synthetic spheres so the CPU plot of
        # time against V has more than one point; the report marks them synthetic
        fill = [f"synthetic-sphere-{n}" for n in (500, 2500)][: 3 - len(infos)]
        return [i.name for i in infos] + fill, (f"only {len(infos)} real mesh(es) of <= {CPU_MAX_VERTICES:,} vertices "
                                                f"found; adding {', '.join(fill)}")
    why = ("no mesh package found (pip install 'dtriton[mesh]' for pymeshfix/trimesh, or set "
           "$DTRITON_MESH_DIR)" + (f"; {err}" if err else ""))
    if not gpu:
        why = f"no real mesh of <= {CPU_MAX_VERTICES} vertices found: " + why
    return ["synthetic-sphere-1000", "synthetic-grid-900"], why + "; using synthetic meshes"


def _header_vertices(name: str) -> int:
    """Vertex count of a mesh name without loading it (0 when unknown)."""
    if name.startswith("synthetic-"):
        tail = name.rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else 0
    from .meshes import MeshInfo, list_meshes
    try:
        for i in list_meshes():
            if i.name == name:
                return i.header_counts()[0]
        p = Path(name)
        return MeshInfo(p.stem, p, "path").header_counts()[0] if p.is_file() else 0
    except (OSError, ValueError):
        return 0


def _bench(fn: Callable[[], Any], gpu: bool, reps: int) -> float:
    """Median time of ``fn`` in microseconds: ``triton.testing.do_bench`` on the GPU; on the CPU
    the wall clock of at least ``reps`` calls, repeated until 0.2 s have passed (at most 1000),
    after one warm-up call, with PyTorch on one thread (on a busy 2-core machine its thread pool
    stalled single calls for tens of ms; the interpreter is single-threaded anyway)."""
    if gpu:
        import triton.testing
        return float(triton.testing.do_bench(fn, return_mode="median")) * 1000.0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fn()
        ts: list[float] = []
        start = time.perf_counter()
        while len(ts) < max(1, reps) or (time.perf_counter() - start < 0.2 and len(ts) < 1000):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(ts) * 1e6


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


def _sched_summary(s) -> str:
    """A short text for a complete schedule: split, tiles, warps/stages."""
    d = s.to_dict() if hasattr(s, "to_dict") else dict(s)
    parts = []
    split = d.get("split") or {}
    parts.append("split " + ",".join(f"{a}={n}" for a, n in sorted(split.items())) if split else "no split")
    tile = d.get("tile") or {}
    if tile:
        parts.append("tile " + " ".join(f"{a}{n}" for a, n in sorted(tile.items())))
    if "num_warps" in d or "num_stages" in d:
        parts.append(f"w{d.get('num_warps', 4)}/s{d.get('num_stages', 2)}")
    return "; ".join(parts)


def _fmt_us(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


@dataclass
class MeshResult:
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


# ----------------------------------------------------------------------------------------------
# one mesh
# ----------------------------------------------------------------------------------------------
def _run_mesh(name: str, args, dev: torch.device, gpu: bool, learn: bool, backends: list[str]) -> MeshResult:
    from . import layer as L
    from .operators import spectral_operators
    from .task import check_gradients, check_heat_properties, make_problem, recover_times

    verts, faces, source = _load(name)
    t0 = time.perf_counter()
    ops = spectral_operators(verts, faces, k=args.k)
    t_ops = time.perf_counter() - t0
    d = ops.as_torch(device=dev)
    basis, mass, evals = d["basis"], d["mass"], d["evals"]
    V, K, C = ops.V, ops.K, args.channels
    _say(f"  {name}: V={V:,} F={len(faces):,} K={K} C={C}; operators {t_ops:.1f} s"
         f"{' (cache)' if ops.from_cache else ''}")
    problem = make_problem(basis, mass, evals, C, signal=args.signal, seed=args.seed)
    x, times = problem.x, problem.true_times
    kernels = L.default_kernels()
    if args.explore > 0:
        _explore(kernels, x, basis, mass, evals, times, args.explore)
    scheds = kernels.schedules_for(x, basis, mass, evals, times)
    res = MeshResult(name, source, V, len(faces), K, C, t_ops, ops.from_cache,
                     {k: s.to_json() for k, s in scheds.items()},
                     kernels.origins_for(x, basis, mass, evals, times), {}, {}, {})
    _say(f"    schedule (forward, {res.schedule_source['forward']}): {scheds['forward'].to_json()}")

    heat = check_heat_properties(basis, mass, evals, x, times, backend="dtriton-manual", kernels=kernels)
    res.heat = heat.to_dict()
    res.grads = {b: check_gradients(basis, mass, evals, x, times, seed=args.seed, backend=b,
                                    kernels=kernels).to_dict() for b in backends}
    _say(f"    max |dtriton - eager| = {heat.max_abs_err:.2e} (rel {heat.rel_err:.1e}); mass conservation "
         f"{heat.conservation_err:.1e} (eager {heat.conservation_err_eager:.1e}); semigroup {heat.semigroup_err:.1e}")
    for b, gr in res.grads.items():
        _say(f"    gradients ({b}) vs eager autograd: x rel {gr['grad_x_rel']:.1e}, times rel {gr['grad_t_rel']:.1e}")

    # timings
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(args.seed + 1)).to(dev)
    reps = 1 if args.quick else 3
    impls: list[tuple[str, Callable, bool]] = []
    for b in backends:
        f = lambda *a, _b=b: L.spatial_diffusion_fn(*a, backend=_b, kernels=kernels)  # noqa: E731
        impls.append((_BACKEND_LABEL[b], f, b == backends[0]))
    impls.append(("eager", L.torch_spatial_diffusion, True))
    if args.use_compile:
        impls.append(("compile", L.compiled_torch_spatial_diffusion, True))
    for label, f, with_fwd in impls:
        try:
            if with_fwd:
                res.times_us[f"{label}_fwd"] = _bench(_fwd(f, x, basis, mass, evals, times), gpu, reps)
            res.times_us[f"{label}_fwdbwd"] = _bench(_fwd_bwd(f, x, basis, mass, evals, times, g), gpu, reps)
        except Exception as e:  # noqa: BLE001 - torch.compile may be unavailable here
            res.times_us.setdefault(f"{label}_fwd", None)
            res.times_us[f"{label}_fwdbwd"] = None
            res.notes.append(f"{label} timing failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            _say(f"    {res.notes[-1]}")
    _say("    µs  " + "  ".join(f"{k}={_fmt_us(v)}" for k, v in res.times_us.items()))

    # split sweep (GPU): the forward (and with --sweep-backward the manual backward) with the V
    # reduction split S ways; then forward+backward once more with the fastest S
    if gpu and not args.no_sweep:
        ref = L.torch_spatial_diffusion(x, basis, mass, evals, times)
        by_split = {}
        for S in SPLITS:
            split = {"v": S} if S > 1 else {}
            kern = L.DiffusionKernels({k: sc.replace(split=split) for k, sc in scheds.items()})
            f = by_split[S] = lambda *a, _k=kern: L.spatial_diffusion_fn(  # noqa: E731
                *a, backend="dtriton-manual", kernels=_k)
            with torch.no_grad():
                res.sweep_err[S] = float((f(x, basis, mass, evals, times) - ref).abs().max())
            res.sweep_fwd_us[S] = _bench(_fwd(f, x, basis, mass, evals, times), gpu, reps)
            if args.sweep_backward:
                res.sweep_fwdbwd_us[S] = _bench(_fwd_bwd(f, x, basis, mass, evals, times, g), gpu, reps)
        best = min(res.sweep_fwd_us, key=res.sweep_fwd_us.get)
        res.best_split = best
        res.times_us["dtriton-best_fwd"] = res.sweep_fwd_us[best]
        res.times_us["dtriton-best_fwdbwd"] = res.sweep_fwdbwd_us.get(best) or _bench(
            _fwd_bwd(by_split[best], x, basis, mass, evals, times, g), gpu, reps)
        _say("    split sweep fwd µs: " + "  ".join(f"S={s}:{_fmt_us(t)}" for s, t in res.sweep_fwd_us.items())
             + f"  (best S={best}; forward+backward with it {_fmt_us(res.times_us['dtriton-best_fwdbwd'])})")

    if learn:
        _say(f"    learning {C} diffusion times back ({args.steps} Adam steps, {args.signal} signal) ...")
        rec = recover_times(basis, mass, evals, problem, steps=args.steps, backend=backends[-1], kernels=kernels)
        res.recovery = rec.to_dict()
        _say(f"    loss {rec.losses[0]:.3e} -> {rec.losses[-1]:.3e}; time rel. error max {rec.max_rel_err:.2e}, "
             f"median {rec.median_rel_err:.2e}; {rec.seconds:.1f} s ({rec.backend} backward)")
    return res


def _explore(kernels, x, basis, mass, evals, times, budget: float) -> None:
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
        r = dt.explore(alg, a, budget=budget, progress=False)
        best = r.best.to_json() if r.best is not None else "none"
        _say(f"    explored {name} ({budget:.0f} s): best {best}")
    kernels.refresh()


_BACKEND_LABEL = {"dtriton-manual": "dtriton", "auto": "dtriton-auto"}


# ----------------------------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------------------------
#: table columns: (header, key in MeshResult.times_us)
_COLUMNS = (("dt fwd", "dtriton_fwd"), ("dt f+b", "dtriton_fwdbwd"), ("dt-auto f+b", "dtriton-auto_fwdbwd"),
            ("dt fwd @S", "dtriton-best_fwd"), ("dt f+b @S", "dtriton-best_fwdbwd"),
            ("eager fwd", "eager_fwd"), ("eager f+b", "eager_fwdbwd"),
            ("compile fwd", "compile_fwd"), ("compile f+b", "compile_fwdbwd"))


def _table(results: list[MeshResult], use_compile: bool) -> list[list[str]]:
    cols = [(h, k) for h, k in _COLUMNS if any(k in r.times_us for r in results)]
    sweep = any(r.best_split for r in results)
    head = ["mesh", "V", "schedule (forward)"] + [h for h, _ in cols[:3]] + (["best S"] if sweep else []) + \
        [h for h, _ in cols[3:]] + ["max err"]
    rows = []
    for r in results:
        vals = [_fmt_us(r.times_us.get(k)) for _, k in cols]
        row = [r.name, f"{r.V:,}", _sched_summary(Schedule.from_json(r.schedules["forward"]))] + vals[:3]
        if sweep:
            row.append(str(r.best_split) if r.best_split else "-")
        rows.append(row + vals[3:] + [f"{r.heat['max_abs_err']:.1e}"])
    return [head] + rows


def _markdown_table(rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join("---" for _ in rows[0]) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(out)


def _text_table(rows: list[list[str]]) -> str:
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w[i]) if i in (0, 2) else c.rjust(w[i]) for i, c in enumerate(r)) for r in rows]
    lines.insert(1, "  ".join("-" * n for n in w))
    return "\n".join(lines)


def _crossover(results: list[MeshResult]) -> tuple[float | None, str]:
    """Where a split of the V reduction starts to pay off (a forward more than 5 % faster than
    without), from the sweep: the smallest V from which every larger mesh gains, and a sentence."""
    pts = sorted((r.V, r.name, r.sweep_fwd_us) for r in results if r.sweep_fwd_us)
    if not pts:
        return None, "no split sweep was run (it runs on the GPU only)"

    def gains(sw):
        return min(sw.values()) < 0.95 * sw[1]

    k = len(pts)
    while k > 0 and gains(pts[k - 1][2]):
        k -= 1
    if k == len(pts):
        return None, "the largest mesh's forward does not run more than 5 % faster with a split of V"
    first_V = pts[k][0]
    below = [f"{n} (V = {V:,})" for V, n, sw in pts[:k] if gains(sw)]
    also = f"; below it {', '.join(below)} also gained" if below else ""
    if k == 0:
        return float(first_V), f"a split of the V reduction pays off (> 5 %) on every mesh, from V = {first_V:,}"
    last = pts[k - 1][0]
    cross = math.sqrt(last * first_V)
    return cross, (f"a split of the V reduction pays off (> 5 % faster forward) on every mesh from V = {first_V:,}; "
                   f"V = {last:,} does not gain, so the crossover lies between (about {cross:,.0f}){also}")


def _plots(results: list[MeshResult], out: Path, use_compile: bool, gpu: bool, device: str) -> list[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    files = []
    rs = sorted(results, key=lambda r: r.V)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    cross, _ = _crossover(results)
    series = (("dtriton, chosen schedule", "dtriton", "o-", "C0"),
              ("dtriton, automatic backward", "dtriton-auto", "v-", "C5"),
              ("dtriton, best split of V (sweep)", "dtriton-best", "d:", "C4"),
              ("eager PyTorch", "eager", "s-", "C1"),
              ("torch.compile", "compile", "^-", "C2"))
    for ax, kind, title in ((axes[0], "fwd", "forward"), (axes[1], "fwdbwd", "forward + backward")):
        for label, key, style, color in series:
            pts = [(r.V, r.times_us[f"{key}_{kind}"]) for r in rs if r.times_us.get(f"{key}_{kind}") is not None]
            if pts:
                ax.plot(*zip(*pts), style, label=label, color=color)
        sweep = [(r.V, r.sweep_fwd_us) for r in rs if r.sweep_fwd_us]
        if sweep and kind == "fwd":
            ax.plot([v for v, _ in sweep], [sw[1] for _, sw in sweep], "x--", color="C3",
                    label="dtriton, no split of V")
            for v, sw in sweep:
                b = min(sw, key=sw.get)
                ax.annotate(f"S={b}", (v, sw[b]), textcoords="offset points", xytext=(0, -12), fontsize=7,
                            ha="center", color="C4")
        if cross is not None:
            ax.axvline(cross, color="grey", ls="--", lw=1)
            ax.text(cross, ax.get_ylim()[1] if ax.lines else 1, " split pays off →", fontsize=8, va="top",
                    color="grey")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("vertices V")
        ax.set_ylabel("median time (µs)" + ("" if gpu else ", Triton interpreter on CPU"))
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    K, C = (rs[0].K, rs[0].C) if rs else (0, 0)
    fig.suptitle(f"DiffusionNet spatial diffusion, K={K}, C={C}, fp32 "
                 f"({'GPU: ' + device if gpu else 'CPU, Triton interpreter: not GPU performance'})",
                 fontsize=10)
    fig.tight_layout()
    p = out / "time_vs_V.png"
    fig.savefig(p, dpi=120)
    plt.close(fig)
    files.append(p.name)
    recs = [r for r in rs if r.recovery]
    if recs:
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in recs:
            ax.plot(r.recovery["losses"], label=f"{r.name} (V={r.V:,})")
        ax.set_yscale("log")
        ax.set_xlabel("Adam step")
        ax.set_ylabel("relative squared error")
        ax.set_title("learning diffusion times back through dtriton kernels", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        p = out / "recovery_loss.png"
        fig.savefig(p, dpi=120)
        plt.close(fig)
        files.append(p.name)
    return files


def _report(results, skipped, env, args, out: Path, plots: list[str], seconds: float) -> str:
    rows = _table(results, args.use_compile)
    _, cross_text = _crossover(results)
    lines = ["# DiffusionNet spatial diffusion through dtriton", ""]
    lines += [
        "The spatial diffusion layer of Sharp, Attaiki, Crane, Ovsjanikov, *DiffusionNet: Discretization "
        "Agnostic Learning on Surfaces*, ACM TOG 2022 (arXiv:2012.00888), written as dtriton algorithms "
        "(forward and hand-written backward in index notation) and run on real meshes.", ""]
    lines += ["## Setup", ""] + [f"- {k}: {v}" for k, v in env.items()] + [f"- demo wall time: {seconds:.0f} s", ""]
    if not env["gpu"]:
        lines += ["**No GPU: every dtriton kernel ran on Triton's interpreter on the CPU. The dtriton times are "
                  "interpreter times and say nothing about GPU performance; the eager PyTorch times are CPU "
                  "times.**", ""]
    lines += ["## Results", "",
              "Times are medians in µs (" + ("`triton.testing.do_bench`" if env["gpu"] else
                                             "wall clock, PyTorch on one thread") +
              "); *f+b* is forward plus the gradients for x and the times (*dt*: hand-written backward algorithms; "
              "*dt-auto*: backward derived by `dt.grad` through `dtriton.integrations`); *max err* is max |dtriton − eager "
              "PyTorch| over the output; *best split* is the fastest split of the V reduction in the sweep.", "",
              _markdown_table(rows), ""]
    if skipped:
        lines += ["Skipped meshes:", ""] + [f"- {n}: {why}" for n, why in skipped] + [""]
    lines += ["## Split of the V reduction", "", cross_text + ".", ""]
    sw = [r for r in results if r.sweep_fwd_us]
    if sw:
        fb = any(r.sweep_fwdbwd_us for r in sw)
        heads = [f"fwd S={s}" for s in SPLITS] + ([f"f+b S={s}" for s in SPLITS] if fb else [])
        lines += ["Forward times (µs) of the chosen schedule with the V reduction split S ways (the rest of "
                  "the schedule unchanged); *chosen S*: the split of the chosen (tuned or heuristic) schedule.", "",
                  "| mesh | V | chosen S | best S | " + " | ".join(heads) + " |", "|" + "---|" * (4 + len(heads))]
        for r in sorted(sw, key=lambda r: r.V):
            vals = [_fmt_us(r.sweep_fwd_us.get(s)) for s in SPLITS]
            if fb:
                vals += [_fmt_us(r.sweep_fwdbwd_us.get(s)) for s in SPLITS]
            chosen = Schedule.from_json(r.schedules["forward"]).split.get("v", 1)
            lines.append(f"| {r.name} | {r.V:,} | {chosen} | {r.best_split} | " + " | ".join(vals) + " |")
        lines += ["", "Max |output − eager| over the sweep: "
                  + f"{max(max(r.sweep_err.values()) for r in sw):.1e}.", ""]
    for p in plots:
        lines += [f"![{p}]({p})", ""]
    lines += ["## Learning diffusion times back", "",
              "A signal is diffused for known times (log-uniform between 0.5/λ_{K-1} and 2/λ_8, counting positive "
              "eigenvalues only) by the eager "
              "layer in float64; a `SpatialDiffusion` layer starting from one common time learns them back with "
              "Adam (betas 0.5, 0.9; cosine learning-rate decay; times clamped to ≥ 1e-8 after each step), "
              "forward and backward in dtriton kernels.", "",
              "| mesh | V | steps | loss first → last | time rel. err max | median | seconds |",
              "|---|---|---|---|---|---|---|"]
    for r in results:
        if r.recovery:
            rc = r.recovery
            lines.append(f"| {r.name} | {r.V:,} | {rc['steps']} | {rc['losses'][0]:.2e} → {rc['losses'][-1]:.2e} | "
                         f"{rc['max_rel_err']:.1e} | {rc['median_rel_err']:.1e} | {rc['seconds']:.1f} |")
    bnames = list(results[0].grads) if results else []
    lines += ["", "## Checks against eager PyTorch and heat-diffusion properties", "",
              "| mesh | max err | vs fp64: dtriton / eager fp32 | "
              + " | ".join(f"grad x rel ({b}) | grad t rel ({b})" for b in bnames)
              + " | λ₀ | mass conservation: dtriton / eager | semigroup |",
              "|" + "---|" * (6 + 2 * len(bnames))]
    for r in results:
        h = r.heat
        gcols = " | ".join(f"{r.grads[b]['grad_x_rel']:.1e} | {r.grads[b]['grad_t_rel']:.1e}" for b in bnames)
        lines.append(f"| {r.name} | {h['max_abs_err']:.1e} | {h['max_abs_err_f64']:.1e} / "
                     f"{h['eager_max_abs_err_f64']:.1e} | {gcols} | "
                     f"{h['evals0']:.1e} | {h['conservation_err']:.1e} / {h['conservation_err_eager']:.1e} | "
                     f"{h['semigroup_err']:.1e} |")
    lines += ["", "Mass conservation is max over channels of |Σ_v m_v out_vc − Σ_v m_v x_vc| / Σ_v m_v |x_vc|; "
              "the semigroup error is max |D(D(x, 0.4t), 0.6t) − D(x, t)| / max |D(x, t)|.", "",
              "## Schedules (complete, as `kernel.schedule_for(*args).to_json()`)", ""]
    for r in results:
        lines.append(f"- **{r.name}** (V={r.V:,}):")
        for k, s in r.schedules.items():
            lines.append(f"  - {k} ({r.schedule_source.get(k, '')}): `{s}`")
    notes = [f"{r.name}: {n}" for r in results for n in r.notes]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text, encoding="utf-8")
    return text


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------
def _write_outputs(results, skipped, env, args, out: Path, gpu: bool, seconds: float) -> list[str]:
    """report.md, results.json and the plots; returns the plot file names."""
    plots = _plots(results, out, args.use_compile, gpu, str(env.get("device", "")))
    _report(results, skipped, env, args, out, plots, seconds)
    payload = {"env": env, "args": vars(args), "seconds": seconds, "skipped": skipped,
               "results": [r.__dict__ for r in results]}
    (out / "results.json").write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
    return plots


def _render(src: Path, out: Path) -> int:
    """Rewrite the report and plots of an earlier run from its results.json."""
    data = json.loads(src.read_text(encoding="utf-8"))
    results = []
    for d in data["results"]:
        for key in ("sweep_fwd_us", "sweep_fwdbwd_us", "sweep_err"):
            d[key] = {int(k): v for k, v in (d.get(key) or {}).items()}
        results.append(MeshResult(**d))
    args = argparse.Namespace(**data["args"])
    out.mkdir(parents=True, exist_ok=True)
    plots = _write_outputs(results, [tuple(x) for x in data.get("skipped", [])], data["env"], args, out,
                           bool(data["env"].get("gpu")), float(data.get("seconds", 0.0)))
    _say(_text_table(_table(results, args.use_compile)))
    _say(f"Split of V: {_crossover(results)[1]}.")
    _say(f"Report: {out / 'report.md'}" + (f"; plots: {', '.join(plots)}" if plots else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the demo. ``argv``: command-line arguments (default ``sys.argv[1:]``). Returns the exit
    status: 0 on success, 2 for bad options (no GPU with ``--device cuda``, no mesh could be run)."""
    args = build_parser().parse_args(argv)
    t_start = time.perf_counter()
    if args.list:
        from .meshes import list_meshes
        for i in list_meshes():
            V, F = i.header_counts()
            _say(f"{i.name:24s} {V:>8,} vertices {F:>8,} faces  {i.source}: {i.description}")
        return 0
    if args.render:
        return _render(Path(args.render), Path(args.out))
    if args.device == "cuda" and not torch.cuda.is_available():
        _say("error: --device cuda but torch sees no CUDA GPU")
        return 2
    gpu = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    dev = torch.device("cuda" if gpu else "cpu")
    if args.use_compile is None:
        args.use_compile = gpu and not args.quick
    if args.k is None:
        args.k = 16 if args.quick else (128 if gpu else 64)
    if args.channels is None:
        args.channels = 8 if args.quick else (128 if gpu else 32)
    if args.steps is None:
        args.steps = 25 if args.quick else (200 if gpu else 150)

    from . import layer as L
    backend, why = L.available_backend(None)
    if gpu:
        _say(f"GPU: {torch.cuda.get_device_name()} — every mesh, K={args.k}, C={args.channels}, fp32.")
    else:
        _say("No GPU: the dtriton kernels run on Triton's interpreter on the CPU (slow; the dtriton times "
             "are interpreter times, not GPU performance). "
             + ("Quick mode: a tiny mesh." if args.quick else f"Meshes of <= {CPU_MAX_VERTICES:,} vertices")
             + f", K={args.k}, C={args.channels}.")
    _say(f"Backward: {backend} ({why})")
    backends = ["dtriton-manual"] + (["auto"] if backend == "auto" else [])

    names = _split_names(args.meshes)
    note = ""
    if names is None:
        names, note = (["synthetic-sphere-300"], "quick mode") if args.quick else _default_meshes(gpu)
    _say(f"Meshes: {', '.join(names)}" + (f" ({note})" if note else ""))
    task_names = _split_names(args.task_meshes)
    if task_names is None and not gpu:
        # on the CPU learn on the largest mesh only (vertex counts from the files' headers)
        task_names = [max(names, key=_header_vertices)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import triton
    env = {
        "device": torch.cuda.get_device_name() if gpu else f"CPU ({platform.processor() or platform.machine()}), "
                                                           "Triton interpreter",
        "gpu": gpu,
        "dtype": "float32",
        "K (eigenpairs)": args.k,
        "C (channels)": args.channels,
        "backward": f"{backend} — {why}",
        "schedules": L.default_kernels().schedule_source["forward"],
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
    }
    results: list[MeshResult] = []
    skipped: list[tuple[str, str]] = []
    plots: list[str] = []
    for n in names:
        learn = task_names is None or n in task_names
        try:
            r = _run_mesh(n, args, dev, gpu, learn, backends)
        except (ValueError, ImportError, OSError, RuntimeError) as e:
            skipped.append((n, f"{type(e).__name__}: {e}"))
            _say(f"  {n}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:300]})")
            continue
        results.append(r)
        # write after every mesh, so an interrupted run still leaves a report
        plots = _write_outputs(results, skipped, env, args, out, gpu, time.perf_counter() - t_start)
    if not results:
        _say("error: no mesh could be run" + (" (install the mesh extra: pip install 'dtriton[mesh]')"
                                             if any("robust" in w or "scipy" in w for _, w in skipped) else ""))
        return 2
    plots = _write_outputs(results, skipped, env, args, out, gpu, time.perf_counter() - t_start)

    _say("")
    _say(_text_table(_table(results, args.use_compile)))
    _say(f"(times: median µs, {'do_bench on ' + env['device'] if gpu else 'wall clock, Triton interpreter on CPU'})")
    _, cross_text = _crossover(results)
    _say(f"Split of V: {cross_text}.")
    for r in results:
        if r.recovery:
            rc = r.recovery
            _say(f"Learned times on {r.name}: loss {rc['losses'][0]:.2e} -> {rc['losses'][-1]:.2e}, relative error "
                 f"max {rc['max_rel_err']:.1e}, median {rc['median_rel_err']:.1e}")
    _say(f"Report: {out / 'report.md'}" + (f"; plots: {', '.join(plots)}" if plots else "; no plot (matplotlib missing)"))
    _say(f"Done in {time.perf_counter() - t_start:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
