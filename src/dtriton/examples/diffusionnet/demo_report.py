"""The demo's report (:mod:`.demo`): the results table (medians with their spread), ``report.md``,
``results.json`` and the plots."""

from __future__ import annotations

import json
import math
from pathlib import Path

from dtriton.schedule import Schedule

from .demo_mesh import SPLITS, MeshResult

__all__ = ["results_table", "speedups", "markdown_table", "text_table", "crossover", "write_outputs", "fmt_us",
           "check_verdict", "speed_verdict", "TOLERANCES"]

#: table columns: (header, key in MeshResult.times_us)
COLUMNS = (("dt fwd", "dtriton_fwd"), ("dt f+b", "dtriton_fwdbwd"), ("dt-auto f+b", "dtriton-auto_fwdbwd"),
           ("dt fwd @S", "dtriton-best_fwd"), ("dt f+b @S", "dtriton-best_fwdbwd"),
           ("eager fwd", "eager_fwd"), ("eager f+b", "eager_fwdbwd"),
           ("compile fwd", "compile_fwd"), ("compile f+b", "compile_fwdbwd"))

#: what each column of the results table means (the report explains only the columns it shows)
COLUMN_WORDS = {
    "dt fwd": "dtriton forward (the heuristic's or the tuned schedule, as listed under Schedules)",
    "dt f+b": "dtriton forward plus the gradients for x and the times through the hand-written backward algorithms",
    "dt-auto f+b": "the same with the backward derived by `dt.grad` through `dtriton.integrations`",
    "best S": "the fastest split of the V reduction in the GPU sweep",
    "dt fwd @S": "dtriton forward with the V reduction split *best S* ways",
    "dt f+b @S": "forward plus hand-written backward with that split",
    "eager fwd": "the eager PyTorch layer", "eager f+b": "its forward plus autograd backward",
    "compile fwd": "the eager layer under `torch.compile`", "compile f+b": "its forward plus backward",
    "max err": "max |dtriton − eager PyTorch| over the output",
    "fwd vs eager": "eager fwd / dt fwd (above 1: dtriton is faster)",
    "f+b vs eager": "eager f+b / the dtriton f+b of the backward the layer runs (dt-auto f+b where measured, else dt f+b)",
}


def speedups(r: MeshResult, gpu: bool = True) -> tuple[str, str]:
    """The forward and forward-plus-backward speed-ups of dtriton over eager PyTorch on mesh ``r``
    ("1.52×"; "n/a" where a time is missing): eager time / dtriton time, the f+b one for the
    backward the layer runs ("dt-auto f+b" where measured, else the hand-written one). Without a
    GPU (``gpu`` False) both read "n/a (interpreter)": interpreter times against CPU PyTorch
    compare Python with C++ and say nothing about the kernels."""
    if not gpu:
        return "n/a (interpreter)", "n/a (interpreter)"
    t = r.times_us
    fb = t.get("dtriton-auto_fwdbwd") or t.get("dtriton_fwdbwd")
    out = []
    for eager, mine in ((t.get("eager_fwd"), t.get("dtriton_fwd")), (t.get("eager_fwdbwd"), fb)):
        out.append(f"{eager / mine:.2f}×" if eager and mine else "n/a")
    return out[0], out[1]


def _ratios(results: list[MeshResult]) -> dict[str, list[tuple[float, str]]]:
    """Per pass ("forward", "forward+backward"): (eager time / dtriton time, mesh name) of every
    mesh where both were timed (the f+b one for the backward the layer runs, as :func:`speedups`)."""
    out: dict[str, list[tuple[float, str]]] = {"forward": [], "forward+backward": []}
    for r in results:
        t = r.times_us
        fb = t.get("dtriton-auto_fwdbwd") or t.get("dtriton_fwdbwd")
        for key, eager, mine in (("forward", t.get("eager_fwd"), t.get("dtriton_fwd")),
                                 ("forward+backward", t.get("eager_fwdbwd"), fb)):
            if eager and mine:
                out[key].append((eager / mine, r.name))
    return out


def speed_verdict(results: list[MeshResult], gpu: bool = True) -> str:
    """One line on dtriton's speed against eager PyTorch over the meshes: per pass the geometric mean
    of eager time / dtriton time, the lowest and highest with their meshes, and on how many meshes
    dtriton is faster, e.g. ``speed vs eager PyTorch: forward 1.62x geomean (1.21x cow .. 2.05x
    face000; faster on 8 of 8 meshes); forward+backward ...``. Without a GPU it says the times are
    the interpreter's and compare nothing."""
    if not gpu:
        return "speed vs eager PyTorch: n/a (the dtriton kernels ran on Triton's interpreter on the CPU)"
    parts = []
    for key, rs in _ratios(results).items():
        if not rs:
            parts.append(f"{key} n/a (not timed)")
            continue
        geo = math.exp(sum(math.log(x) for x, _ in rs) / len(rs))
        lo, hi = min(rs), max(rs)
        faster = sum(x > 1 for x, _ in rs)
        parts.append(f"{key} {geo:.2f}x geomean ({lo[0]:.2f}x {lo[1]} .. {hi[0]:.2f}x {hi[1]}; "
                     f"faster on {faster} of {len(rs)} meshes)")
    return "speed vs eager PyTorch: " + "; ".join(parts)


#: The demo's checks and their tolerances (fp32: errors relative to the largest entry, as the tests):
#: name -> (tolerance, what it bounds). The error against float64 is bounded by the eager fp32 layer's own
#: (:func:`check_verdict`), mass conservation by the eager layer's or this, whichever is larger.
TOLERANCES = {"values": (1e-5, "max |dtriton - eager| / max |eager|"),
              "gradients": (1e-5, "gradients for x and the times vs eager autograd, relative"),
              "vs fp64": (1e-6, "max |dtriton - fp64| above 10x the eager fp32 layer's"),
              "mass conservation": (1e-5, "relative mass change (or 10x the eager layer's)"),
              "semigroup": (1e-5, "max |D(D(x, 0.4t), 0.6t) - D(x, t)| / max |D(x, t)|")}


def _mesh_checks(r: MeshResult) -> list[tuple[str, float, float]]:
    """(check, error, tolerance) of every check of mesh ``r`` (see :data:`TOLERANCES`)."""
    h = r.heat
    out = [("values", h["rel_err"], TOLERANCES["values"][0]),
           ("vs fp64", h["max_abs_err_f64"], 10 * h["eager_max_abs_err_f64"] + TOLERANCES["vs fp64"][0]),
           ("mass conservation", h["conservation_err"],
            max(TOLERANCES["mass conservation"][0], 10 * h["conservation_err_eager"])),
           ("semigroup", h["semigroup_err"], TOLERANCES["semigroup"][0])]
    for b, g in r.grads.items():
        out += [(f"grad x ({b})", g["grad_x_rel"], TOLERANCES["gradients"][0]),
                (f"grad t ({b})", g["grad_t_rel"], TOLERANCES["gradients"][0])]
    return out


def check_verdict(results: list[MeshResult]) -> tuple[bool, str]:
    """Whether every check of every mesh is within its tolerance (:data:`TOLERANCES`), and one line
    saying so: ``checks: ok (max rel err 6.6e-07 <= tol 1.0e-05; ...)`` or ``checks: FAILED (mesh:
    check error > tolerance; ...)``. A NaN error fails."""
    fails, rels = [], []
    for r in results:
        for name, err, tol in _mesh_checks(r):
            if not err <= tol:   # NaN fails too
                fails.append(f"{r.name}: {name} {err:.1e} > tol {tol:.1e}")
            elif name == "values" or name.startswith("grad"):
                rels.append(err)
    if not results:
        return False, "checks: none ran (no mesh)"
    if fails:
        return False, "checks: FAILED (" + "; ".join(fails) + ")"
    tol = TOLERANCES["values"][0]
    return True, (f"checks: ok (max rel err {max(rels):.1e} <= tol {tol:.1e} for values and gradients; "
                  "error vs float64 within 10x eager fp32's; mass conservation and semigroup within tolerance)")


def fmt_us(v: float | None) -> str:
    """A time in µs for a table: thousands separated from 100 µs up, else one decimal."""
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _spread(r: MeshResult, key: str) -> str:
    """``median ±h%``: h is half the interquartile range in % of the median."""
    med = r.times_us.get(key)
    q = (r.spread_us or {}).get(key)
    if med is None or not q or med <= 0:
        return fmt_us(med)
    h = (q[1] - q[0]) / 2 / med * 100
    return f"{fmt_us(med)} ±{h:.0f}%" if h >= 1 else f"{fmt_us(med)} ±{h:.1f}%"


def results_table(results: list[MeshResult], gpu: bool = True) -> list[list[str]]:
    """Rows of the results table (the first is the header): only columns some mesh has; the
    speed-up columns read "n/a (interpreter)" without a GPU (``gpu`` False, :func:`speedups`)."""
    cols = [(h, k) for h, k in COLUMNS if any(k in r.times_us for r in results)]
    sweep = any(r.best_split for r in results)
    head = ["mesh", "V", "schedule (forward)"] + [h for h, _ in cols[:3]] + (["best S"] if sweep else []) + \
        [h for h, _ in cols[3:]] + ["fwd vs eager", "f+b vs eager", "max err"]
    rows = []
    for r in results:
        vals = [_spread(r, k) for _, k in cols]
        row = [r.name, f"{r.V:,}", sched_summary(Schedule.from_json(r.schedules["forward"]))] + vals[:3]
        if sweep:
            row.append(str(r.best_split) if r.best_split else "-")
        rows.append(row + vals[3:] + list(speedups(r, gpu)) + [f"{r.heat['max_abs_err']:.1e}"])
    return [head] + rows


def sched_summary(s) -> str:
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


def markdown_table(rows: list[list[str]]) -> str:
    """A markdown table of ``rows`` (the first is the header)."""
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join("---" for _ in rows[0]) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(out)


def text_table(rows: list[list[str]]) -> str:
    """A plain-text table of ``rows`` (the first is the header) with aligned columns."""
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w[i]) if i in (0, 2) else c.rjust(w[i]) for i, c in enumerate(r)) for r in rows]
    lines.insert(1, "  ".join("-" * n for n in w))
    return "\n".join(lines)


def column_notes(header: list[str]) -> str:
    """One sentence per column of ``header`` that needs one (only those the table has)."""
    return "; ".join(f"*{h}*: {COLUMN_WORDS[h]}" for h in header if h in COLUMN_WORDS)


def crossover(results: list[MeshResult]) -> tuple[float | None, str]:
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


def plots(results: list[MeshResult], out: Path, use_compile: bool, gpu: bool, device: str) -> list[str]:
    """time_vs_V.png (forward, forward+backward) and recovery_loss.png into ``out``; returns the file
    names written (none without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    files = []
    rs = sorted(results, key=lambda r: r.V)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    cross, _ = crossover(results)
    series = ((("dtriton", "dtriton, hand-written backward"), "dtriton", "o-", "C0"),
              (("dtriton", "dtriton, backward by dt.grad"), "dtriton-auto", "v-", "C5"),
              (("dtriton, best split of V (sweep)",) * 2, "dtriton-best", "d:", "C4"),
              (("eager PyTorch",) * 2, "eager", "s-", "C1"),
              (("torch.compile",) * 2, "compile", "^-", "C2"))
    for ax, kind, title in ((axes[0], "fwd", "forward"), (axes[1], "fwdbwd", "forward + backward")):
        for labels, key, style, color in series:
            label = labels[kind == "fwdbwd"]
            k = f"{key}_{kind}"
            pts = [(r.V, r.times_us[k], *(r.spread_us or {}).get(k, (r.times_us[k],) * 2)) for r in rs
                   if r.times_us.get(k) is not None]
            if pts:   # error bars: the interquartile range
                vs, med, q1, q3 = (list(c) for c in zip(*pts))
                ax.errorbar(vs, med, yerr=[[m - a for m, a in zip(med, q1)], [b - m for m, b in zip(med, q3)]],
                            fmt=style, label=label, color=color, capsize=2)
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
        ax.set_ylabel("median time (µs), bars: IQR" + ("" if gpu else ", Triton interpreter on CPU"))
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


def report(results, skipped, env, args, out: Path, plot_files: list[str], seconds: float) -> str:
    """Write ``out/report.md`` and return its text."""
    rows = results_table(results, bool(env.get("gpu", True)))
    _, cross_text = crossover(results)
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
              "Times in µs: the median and, after ±, half the interquartile range in % of the median (" +
              ("`triton.testing.do_bench`" if env["gpu"] else "wall clock, PyTorch on one thread") + "). "
              + column_notes(rows[0]) + ".", "",
              markdown_table(rows), "",
              speed_verdict(results, bool(env.get("gpu", True))).replace("speed vs eager PyTorch:",
                                                                          "**Speed vs eager PyTorch:**", 1) + ".", ""]
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
            vals = [fmt_us(r.sweep_fwd_us.get(s)) for s in SPLITS]
            if fb:
                vals += [fmt_us(r.sweep_fwdbwd_us.get(s)) for s in SPLITS]
            chosen = Schedule.from_json(r.schedules["forward"]).split.get("v", 1)
            lines.append(f"| {r.name} | {r.V:,} | {chosen} | {r.best_split} | " + " | ".join(vals) + " |")
        lines += ["", "Max |output − eager| over the sweep: "
                  + f"{max(max(r.sweep_err.values()) for r in sw):.1e}.", ""]
    for p in plot_files:
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
              check_verdict(results)[1].replace("checks:", "**Checks:**", 1) + ".", "",
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


def write_outputs(results, skipped, env, args, out: Path, gpu: bool, seconds: float) -> list[str]:
    """report.md, results.json and the plots; returns the plot file names."""
    files = plots(results, out, args.use_compile, gpu, str(env.get("device", "")))
    report(results, skipped, env, args, out, files, seconds)
    payload = {"env": env, "args": vars(args), "seconds": seconds, "skipped": skipped,
               "results": [r.__dict__ for r in results]}
    (out / "results.json").write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
    return files
