"""``dtriton demo``: DiffusionNet's spatial diffusion on real meshes, end to end.

For each mesh (real meshes shipped inside installed PyPI packages or found in
``$DTRITON_MESH_DIR``; see :mod:`.meshes`), the demo computes the spectral operators, runs the
dtriton layer (:mod:`.layer`) and

* checks it against the eager PyTorch layer: values, gradients for x and the times, mass
  conservation and the semigroup property of heat diffusion (:mod:`.task`);
* learns diffusion times back from diffused signals by Adam through the dtriton kernels;
* times forward and forward+backward for dtriton, eager PyTorch and ``torch.compile`` (median and
  interquartile range, microseconds), and on the GPU sweeps the split of the V reduction to show
  where splitting pays off;

then prints a table and writes ``report.md``, ``results.json`` and plots into ``--out``. Every step
that takes more than a couple of seconds shows a ``rich`` progress bar.

Modules: :mod:`.demo_meshes` (which meshes), :mod:`.demo_mesh` (the steps on one mesh, timing,
progress) and :mod:`.demo_report` (tables, report, plots).

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
import platform
import sys
import time
from pathlib import Path

import torch

from .demo_mesh import MeshResult, run_mesh, say
from .demo_meshes import CPU_MAX_VERTICES, default_meshes, header_vertices, split_names
from .demo_report import check_verdict, crossover, results_table, speed_verdict, text_table, write_outputs

__all__ = ["main", "build_parser"]


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


def _render(src: Path, out: Path) -> int:
    """Rewrite the report and plots of an earlier run from its results.json."""
    data = json.loads(src.read_text(encoding="utf-8"))
    results = []
    for d in data["results"]:
        for key in ("sweep_fwd_us", "sweep_fwdbwd_us", "sweep_err"):
            d[key] = {int(k): v for k, v in (d.get(key) or {}).items()}
        d["spread_us"] = d.get("spread_us") or {}   # results.json of runs before timings had a spread
        results.append(MeshResult(**d))
    args = argparse.Namespace(**data["args"])
    out.mkdir(parents=True, exist_ok=True)
    plots = write_outputs(results, [tuple(x) for x in data.get("skipped", [])], data["env"], args, out,
                          bool(data["env"].get("gpu")), float(data.get("seconds", 0.0)))
    say(text_table(results_table(results, bool(data["env"].get("gpu")))))
    say(speed_verdict(results, bool(data["env"].get("gpu"))))
    say(check_verdict(results)[1])
    say(f"Split of V: {crossover(results)[1]}.")
    say(f"Report: {out / 'report.md'}" + (f"; plots: {', '.join(plots)}" if plots else ""))
    return 0


def _environment(args, gpu: bool, backend: str, why: str, schedules: str) -> dict:
    """The report's Setup section: device, sizes, backward, versions."""
    import triton
    return {
        "device": torch.cuda.get_device_name() if gpu else f"CPU ({platform.processor() or platform.machine()}), "
                                                           "Triton interpreter",
        "gpu": gpu,
        "dtype": "float32",
        "K (eigenpairs)": args.k,
        "C (channels)": args.channels,
        "backward": f"{backend} — {why}",
        "schedules": schedules,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
    }


def _print_summary(results: list[MeshResult], env: dict, gpu: bool, out: Path, plots: list[str]) -> bool:
    """The closing table and lines of the demo's log, with the checks' verdict line; returns whether
    every check passed (:func:`~.demo_report.check_verdict`)."""
    say("")
    say(text_table(results_table(results, gpu)))
    say(f"(times: median µs ± half the interquartile range in % of the median, "
        f"{'do_bench on ' + env['device'] if gpu else 'wall clock, Triton interpreter on CPU'}; "
        f"f+b: forward plus backward, dt = hand-written backward algorithms, dt-auto = dt.grad's)")
    say(speed_verdict(results, gpu))
    _, cross_text = crossover(results)
    say(f"Split of V: {cross_text}.")
    for r in results:
        if r.recovery:
            rc = r.recovery
            say(f"Learned times on {r.name}: loss {rc['losses'][0]:.2e} -> {rc['losses'][-1]:.2e}, relative error "
                f"max {rc['max_rel_err']:.1e}, median {rc['median_rel_err']:.1e}")
    say(f"Report: {out / 'report.md'}"
        + (f"; plots: {', '.join(plots)}" if plots else "; no plot (matplotlib missing)"))
    ok, verdict = check_verdict(results)
    say(verdict)
    return ok


def main(argv: list[str] | None = None) -> int:
    """Run the demo. ``argv``: command-line arguments (default ``sys.argv[1:]``). Returns the exit
    status: 0 on success, 1 when a check against eager PyTorch or a heat-diffusion property is
    outside its tolerance (the closing "checks: FAILED (...)" line names it), 2 for bad options (no
    GPU with ``--device cuda``, no mesh could be run)."""
    args = build_parser().parse_args(argv)
    t_start = time.perf_counter()
    if args.list:
        from .meshes import list_meshes
        for i in list_meshes():
            V, F = i.header_counts()
            say(f"{i.name:24s} {V:>8,} vertices {F:>8,} faces  {i.source}: {i.description}")
        return 0
    if args.render:
        return _render(Path(args.render), Path(args.out))
    if args.device == "cuda" and not torch.cuda.is_available():
        say("error: --device cuda but torch sees no CUDA GPU")
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
        say(f"GPU: {torch.cuda.get_device_name()} — every mesh, K={args.k}, C={args.channels}, fp32.")
    else:
        say("No GPU: the dtriton kernels run on Triton's interpreter on the CPU (slow; the dtriton times "
            "are interpreter times, not GPU performance). "
            + ("Quick mode: a tiny mesh." if args.quick else f"Meshes of <= {CPU_MAX_VERTICES:,} vertices")
            + f", K={args.k}, C={args.channels}.")
    say(f"Backward: {backend} ({why})")
    backends = ["dtriton-manual"] + (["auto"] if backend == "auto" else [])

    names = split_names(args.meshes)
    note = ""
    if names is None:
        names, note = (["synthetic-sphere-300"], "quick mode") if args.quick else default_meshes(gpu)
    say(f"Meshes: {', '.join(names)}" + (f" ({note})" if note else ""))
    task_names = split_names(args.task_meshes)
    if task_names is None and not gpu:
        # on the CPU learn on the largest mesh only (vertex counts from the files' headers)
        task_names = [max(names, key=header_vertices)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    env = _environment(args, gpu, backend, why, L.default_kernels().schedule_source["forward"])
    results: list[MeshResult] = []
    skipped: list[tuple[str, str]] = []
    plots: list[str] = []
    for n in names:
        learn = task_names is None or n in task_names
        try:
            r = run_mesh(n, args, dev, gpu, learn, backends)
        except (ValueError, ImportError, OSError, RuntimeError) as e:
            skipped.append((n, f"{type(e).__name__}: {e}"))
            say(f"  {n}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:300]})")
            continue
        results.append(r)
        # write after every mesh, so an interrupted run still leaves a report
        plots = write_outputs(results, skipped, env, args, out, gpu, time.perf_counter() - t_start)
    if not results:
        say("error: no mesh could be run" + (" (install the mesh extra: pip install 'dtriton[mesh]')"
                                             if any("robust" in w or "scipy" in w for _, w in skipped) else ""))
        return 2
    plots = write_outputs(results, skipped, env, args, out, gpu, time.perf_counter() - t_start)

    ok = _print_summary(results, env, gpu, out, plots)
    say(f"Done in {time.perf_counter() - t_start:.0f} s.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
