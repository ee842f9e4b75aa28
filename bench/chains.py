"""Fused GEMM chains (issue 14's catalogue, ``bench/chain_catalogue.py``): each chain is ONE dtriton algorithm and
the same torch code, checked against float64 and timed against torch eager and torch.compile.

    PYTHONPATH=src python3 bench/chains.py [--dtypes float32,float16] [--cases relu,softmax] [--budget S]
                                           [--no-compile] [--deadline 540] [--append | --resume] [--out DIR]
    PYTHONPATH=src python3 bench/chains.py --dry-run      # CPU interpreter, tiny shapes: correctness only
    PYTHONPATH=src python3 bench/chains.py --list         # the chains and their shapes (no run)
    PYTHONPATH=src python3 bench/chains.py --plans [DIR]  # H200 heuristic schedule + kernels per chain, on a CPU
    PYTHONPATH=src python3 bench/chains.py --variant hand --append --no-compile   # hand schedules (see below)
    PYTHONPATH=src python3 bench/chains.py --dtypes float32 --precision tf32x3 --resume --no-compile
                                                        # fp32 chains, default schedule with another dot precision
    PYTHONPATH=src python3 bench/chains.py --dtypes float16 --cases bias,gelu --schedule '{"persistent": 1}' --append
                                                        # the default schedule with fields put in

Per chain and dtype: (1) dtriton's default schedule (or ``--budget`` seconds of exploration) is checked
against float64 on a small odd shape, then (2) at the benchmark shape against float64 too; only then (3) the
kernel time (CUDA-graph replay, ``bench/run.py``'s timer, short warmup) of dtriton, torch eager and
torch.compile (default mode) is taken. The printed kernels are counted (``kernels``: how many launches the
chain takes, with the first docstring line of each). Ratios are torch's time / dtriton's; geomeans per dtype.

``--variant hand`` runs the GEMM + row-reduction chains under the schedule eager torch runs, written with
dtriton's knobs (``hand_schedule``: the GEMM materialised, then one row kernel for every other stage; group
norms: one kernel per (rows, group) tile), so the gap between the heuristic's plan and a plan the compiler
already supports is measured in the same table.

Writes ``<out>/chains_h200.json`` and ``.md`` after every row (``--append``: keep the rows of another
dtype / chain from an earlier run of the file). ``--deadline``: seconds after which no new row starts
(the device call limit is 600 s; the remaining rows are listed as skipped). A row being measured is listed as
"died" until it finishes, so a CUDA fault that ends the process leaves a row naming the chain, and ``--resume``
goes on after it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as timing  # noqa: E402  (bench/run.py: graph_time_us, relerr, tuned_kernel, maybe_compile)
from chain_catalogue import (CHAINS, CHECK_SHAPE, DRY_CHECK_SHAPE, DRY_SHAPE, TORCH, Chain, as_float64,  # noqa: E402
                             make_inputs, shape_of)
from dtriton.ir.analysis import contraction_operands, contractions, reduction_stages  # noqa: E402
from dtriton.schedule.knobs import PRECISIONS  # noqa: E402
from fp32 import git_commit  # noqa: E402


# ---------------------------------------------------------------------------------------------
def kernels_of(source: str) -> list[str]:
    """The first docstring line of every kernel in a printed module (``Kernel x: stores y.``)."""
    return re.findall(r'"""(Kernel [^\n]*)', source)


def dtriton_error(k, chain, shape, dtype) -> float:
    """Relative error of the compiled chain against float64 torch at ``shape``."""
    tkw, args = make_inputs(chain, *shape, dtype, timing.DEV)
    ref = TORCH[chain.name](**as_float64(tkw))
    return timing.relerr(k(*args).reshape(ref.shape), ref)


TOL = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 5e-2}


def hand_schedule(chain: Chain, args) -> dt.Schedule | None:
    """A schedule written with dtriton's knobs for a chain whose GEMM is followed by reductions over its output,
    close to what eager torch runs (None for the other chains). It measures how far the heuristic's plan is from
    a plan the compiler already supports:

    - row reductions (softmax, norms, logsumexp, ...): the GEMM stage ``sum0`` materialised with the heuristic's
      GEMM tiles, then one row kernel (grid ``i``, 2 rows per program, the whole row in one block) computing every
      other reduction in registers (the heuristic: a kernel per reduction, row tiles of the GEMM's size);
    - column statistics (batch norm): the means over i split 8 ways, 32 columns per program (the heuristic: one
      program per 128 columns looping over every row);
    - a second GEMM after a softmax: the row statistics materialised once by row kernels (the heuristic
      recomputes them in every output tile of the second GEMM);
    - group norms: :func:`grouped_hand_schedule`."""
    gemms = contractions(chain.alg)
    others = {s.name: set(s.node.over) for s in reduction_stages(chain.alg) if s.name not in gemms}
    outs = [s for s in chain.alg.stages.values() if s.is_output]
    if "W_g" in chain.params() and all(s.free_axes == ("i", "g", "c") for s in outs):
        return grouped_hand_schedule(chain, args)
    if not others or "sum0" not in gemms or "W" not in chain.params() \
            or any(set(s.free_axes) - {"i", "j", "p"} for s in outs):
        return None
    base = json.loads(dt.compile(chain.alg).schedule_for(*args).to_json())
    gemm = {"place": "materialize", "grid": ["i", "j"], "group": base.get("group", {"i": 8}),
            "tile": {a: t for a, t in base["tile"].items() if a in ("i", "j", "k")},
            **{k: base[k] for k in ("num_warps", "num_stages") if k in base}}
    n = args[chain.params().index("W")].shape[0]
    row = {"grid": ["i"], "tile": {"i": 2 if n <= 4096 else 1}, "strategy": {"j": "whole"}, "num_warps": 8}
    if all(o == {"i"} for o in others.values()) and list(gemms) == ["sum0"]:
        return dt.Schedule.from_json(json.dumps({"split": {"i": 8}, "stages": {
            o: {"tile": {"i": 64, "j": 32}} for o in others}}))
    if any(o - {"j", "k"} for o in others.values()):
        return None
    if list(gemms) == ["sum0"]:
        return dt.Schedule.from_json(json.dumps({
            **row, "tile": {**row["tile"], "j": 1 << (n - 1).bit_length()},
            "stages": {"sum0": gemm, **{o: {"place": "fuse"} for o in others}}}))
    if [g for g in gemms if g != "sum0"] and all(o == {"j"} for o in others.values()):
        second = {"tile": {a: t for a, t in base["tile"].items()}}
        return dt.Schedule.from_json(json.dumps({**second, "stages": {
            "sum0": gemm, **{o: {"place": "materialize", **row} for o in others}}}))
    return None


def grouped_hand_schedule(chain: Chain, args) -> dt.Schedule | None:
    """Group norm chains (output (M, G, C), statistics over c): one kernel per (rows, group) tile with g on the
    grid at tile 1, so the GEMM is a dot over (i, c) and the group's statistics stay in registers (the heuristic
    tiles g, c and k at once, which is no dot and past Triton's block limit). None when C < 16 (a dot needs
    blocks of 16)."""
    W_g = args[chain.params().index("W_g")]
    c = W_g.shape[1]
    if c < 16:
        return None
    return dt.Schedule.from_json(json.dumps({
        "grid": ["i", "g"],
        "tile": {"i": 64, "g": 1, "c": 1 << (c - 1).bit_length(), "k": 32 if W_g.dtype == torch.float32 else 64},
        "strategy": {"c": "whole", "k": "loop"}, "split": {"k": 1}, "num_warps": 8, "num_stages": 3,
        "stages": {s.name: {"place": "fuse"} for s in reduction_stages(chain.alg)}}))


def dtriton_kernel(chain: Chain, args, budget: float, variant: str, precision: str | None = None,
                   fields: dict | None = None):
    """(kernel, origin) of a variant: "heuristic" (or explored for ``budget`` seconds) or "hand". ``precision``:
    the fp32 dot precision replacing the schedule's, every other knob as the variant chose it; ``fields``:
    schedule fields (JSON names) put into the heuristic's schedule of the call (``--schedule``)."""
    if fields:
        if timing.DRY:
            # a dry run checks the schedule the GPU would run: the fields put into the H200 heuristic's schedule of
            # the benchmark shape (a CUDA binding of empty tensors), run here at the dry run's small shapes
            _, big = make_inputs(chain, *shape_of(chain, None), args[0].dtype, "cpu", empty=True)
            b = chain.alg.bind(big)
            b.device = torch.device("cuda")
            base = dt.compile(chain.alg).complete(b).to_dict()
        else:
            base = dt.compile(chain.alg).schedule_for(*args).to_dict()
        # a stage's fields merge into that stage's overrides ({"stages": {"sum0": {"persistent": 0}}})
        stages = {n: {**base.get("stages", {}).get(n, {}), **ss} for n, ss in fields.get("stages", {}).items()}
        sched = dt.Schedule.from_dict({**base, **fields, "stages": {**base.get("stages", {}), **stages}})
        return dt.compile(chain.alg, sched), "heuristic + " + json.dumps(fields, sort_keys=True)
    if variant == "hand":
        sched = hand_schedule(chain, args)
        if sched is None:
            raise ValueError(f"{chain.name} has no hand schedule (only GEMM + row-reduction chains have one)")
        sched = sched.replace(precision=precision) if precision else sched
        return dt.compile(chain.alg, sched), "hand: " + sched.to_json()
    if budget > 0:
        return timing.tuned_kernel(chain.alg, args, budget)
    if precision:
        return dt.compile(chain.alg, dt.compile(chain.alg).schedule_for(*args).replace(precision=precision)), \
            f"heuristic, precision={precision}"
    return dt.compile(chain.alg), "heuristic"


def run_chain(chain: Chain, dtype_name: str, budget: float, use_compile: bool, variant: str = "heuristic",
              precision: str | None = None, fields: dict | None = None) -> dict:
    """Check and time one chain in one dtype; returns its row (failures recorded in ``note``)."""
    dtype = getattr(torch, dtype_name)
    M, K, N, P, C = shape = shape_of(chain, DRY_SHAPE if timing.DRY else None)
    row = dict(chain=chain.name, dtype=dtype_name, shape=dict(M=M, K=K, N=N, P=P, C=C), flops=chain.flops(M, K, N, P),
               err_check=None, err=None, dtriton_us=None, eager_us=None, compile_us=None, kernels=[], schedule=None,
               origin=None, note="", variant=variant_name(variant, budget, precision, fields))
    tkw, args = make_inputs(chain, *shape, dtype, timing.DEV)
    fn = TORCH[chain.name]
    ref = fn(**as_float64(tkw))
    try:
        k, row["origin"] = dtriton_kernel(chain, args, budget, variant, precision, fields)
        small = shape_of(chain, DRY_CHECK_SHAPE if timing.DRY else CHECK_SHAPE)
        row["err_check"] = dtriton_error(k, chain, small, dtype)
        out = k(*args)
        row["err"] = timing.relerr(out.reshape(ref.shape), ref)
        row["kernels"] = kernels_of(k.source)
        row["schedule"] = k.schedule_for(*args).to_json()
        if not (row["err_check"] <= TOL[dtype_name] and row["err"] <= TOL[dtype_name]):
            row["note"] = f"WRONG: error above {TOL[dtype_name]}, not timed"
        else:
            row["dtriton_us"] = timing.graph_time_us(lambda: k(*args), reps=5, iters=5)
    except Exception as e:  # noqa: BLE001 - a refused or failing chain is a finding: record it
        row["note"] = f"dtriton failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
    row["err_eager"] = timing.relerr(fn(**tkw), ref)
    row["eager_us"] = timing.graph_time_us(lambda: fn(**tkw), reps=5, iters=5)
    c = timing.maybe_compile(fn, use_compile)
    if c is not None:
        try:
            c(**tkw)
            row["compile_us"] = timing.graph_time_us(lambda: c(**tkw), reps=5, iters=5)
        except Exception as e:  # noqa: BLE001
            row["note"] += f" torch.compile failed: {type(e).__name__}: {str(e)[:120]}"
    for base in ("eager", "compile"):
        ok = row["dtriton_us"] and row[f"{base}_us"]
        row[f"vs_{base}"] = row[f"{base}_us"] / row["dtriton_us"] if ok else None
    return row


def gpu_plan(chain: Chain, dtype: torch.dtype, folder: str | None = None, schedule: dt.Schedule | None = None) -> dict:
    """What the H200 would run for the chain at its benchmark shape, derived on this machine (no GPU needed):
    the heuristic's schedule for a CUDA binding (as on an H200), the plan's kernels and the printed source
    (written to ``folder/<chain>_<dtype>.py`` when given); ``schedule``: a partial schedule the heuristic
    completes (default: none). Inputs are uninitialised CPU tensors of the real
    sizes. Returns dict(schedule, kernels, lines) or dict(error) when the compiler refuses the chain."""
    from dtriton.backends import default_backend
    from dtriton.plan import call_spec, plan_program, tma_addressable
    _, args = make_inputs(chain, *shape_of(chain, None), dtype, "cpu", empty=True)
    try:
        b = chain.alg.bind(args)
        b.device = torch.device("cuda")
        sched = dt.compile(chain.alg, schedule).complete(b)
        tma = tma_addressable(chain.alg, b, args) if sched.access == "tma" else frozenset()
        tiles = [p for p, a in zip(chain.params(), args) if a.dim() >= 2]
        operands = contraction_operands(chain.alg)
        tiles = [t for t in tiles if t in operands] if operands else tiles
        if sched.access == "tma" and not all(t in tma for t in tiles):   # the runtime's rule (Kernel._auto_access)
            sched, tma = sched.replace(access="pointer"), frozenset()
        prog = plan_program(chain.alg, sched, b, call_spec(chain.alg, b, args, False, None, tma))
        source, _ = default_backend().render(prog)
    except Exception as e:  # noqa: BLE001 - a refused chain is a finding
        return dict(error=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{chain.name}_{str(dtype)[6:]}.py"), "w") as f:
            f.write(source)
    return dict(schedule=sched.to_json(), kernels=kernels_of(source), lines=source.count("\n"))


def print_plans(chains: list[Chain], dtypes: list[str], folder: str | None) -> None:
    """``--plans``: per chain and dtype, the H200 heuristic schedule and its kernels (derived on the CPU)."""
    for d in dtypes:
        for c in chains:
            p = gpu_plan(c, getattr(torch, d), folder)
            if "error" in p:
                print(f"{c.name:24s} {d:8s} REFUSED {p['error']}")
                continue
            print(f"{c.name:24s} {d:8s} {len(p['kernels'])} kernel(s)  {p['schedule']}")
            for k in p["kernels"]:
                print(f"{'':34s}{k}")


# ---------------------------------------------------------------------------------------------
#: H200 rates of the floor (:func:`floor_us`): cuBLAS fp16 NT at 4096^3, 180.6 us (761 TFLOP/s; NN 177.7 us,
#: bench/results/issue14/probe_nt_call2.json), and the copy bandwidth, bytes read + written (1 GiB d2d copy in
#: 797.5 us, 2.69 TB/s, bench/results/issue16/reductions_h200.md)
CUBLAS_16BIT_FLOPS = 2 * 4096 ** 3 / 180.6e-6
COPY_BYTES_PER_S = 2.693e12


def floor_us(chain: Chain, dtype_name: str, shape: dict) -> float | None:
    """The least time of a 16-bit chain on the H200 with its GEMMs at cuBLAS speed (:data:`CUBLAS_16BIT_FLOPS`),
    or the bytes beyond the GEMM operands at copy bandwidth where they take longer (the output written and every
    other input, bias, residual, norm weights, read once; an epilogue overlaps the GEMM: cuBLAS with a bias ran
    4096^3 fp16 in 183.5 us, its GEMM alone 180.6). A chain whose GEMM dominates cannot beat torch.compile (cuBLAS + a fused
    epilogue) by more than compile / floor unless its GEMM beats cuBLAS. None for fp32 (dtriton's default fp32
    dot, 3xTF32, already runs ahead of cuBLAS's fp32; no cuBLAS-speed floor applies)."""
    if dtype_name not in ("float16", "bfloat16"):
        return None
    dtype = getattr(torch, dtype_name)
    M, K, N, P, C = (shape[k] for k in ("M", "K", "N", "P", "C"))
    tkw, _ = make_inputs(chain, M, K, N, P, C, dtype, "meta", empty=True)
    out = TORCH[chain.name](**tkw)
    # the torch names of the GEMM operands (a grouped view W_g is torch's W)
    skip = {p[:-2] if p.endswith("_g") else p for p in contraction_operands(chain.alg)}
    other = sum(t.numel() * t.element_size() for k, t in tkw.items() if isinstance(t, torch.Tensor) and k not in skip)
    moved = other + out.numel() * out.element_size()
    return max(chain.flops(M, K, N, P) / CUBLAS_16BIT_FLOPS, moved / COPY_BYTES_PER_S) * 1e6


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def summary(rows: list[dict]) -> list[str]:
    """Geomean lines per dtype and overall (rows with both times), and the chains below 0.9x torch.compile."""
    lines = []
    for var in sorted({r.get("variant", "heuristic") for r in rows}):
        lines += summary_of(var, [r for r in rows if r.get("variant", "heuristic") == var])
    bad = [r for r in rows if r["note"]]
    if bad:
        lines.append(f"- not timed or failed: {', '.join(r['chain'] + ' ' + r['dtype'] for r in bad)}")
    return lines


def summary_of(variant: str, rows: list[dict]) -> list[str]:
    """The geomean lines of one variant's rows."""
    lines = []
    for dt_name in sorted({r["dtype"] for r in rows}) + ["all"]:
        rs = [r for r in rows if dt_name in ("all", r["dtype"]) and r.get("vs_eager")]
        if not rs:
            continue
        ge, gc = geomean([r["vs_eager"] for r in rs]), geomean([r.get("vs_compile") for r in rs])
        low = sorted((r for r in rs if r.get("vs_compile") and r["vs_compile"] < 0.9), key=lambda r: r["vs_compile"])
        gh = geomean([r.get("vs_heuristic") for r in rs])
        gf = geomean([r.get("compile_vs_floor") for r in rs])
        lines.append(f"- {variant}, {dt_name}: {len(rs)} chains timed; geomean {ge:.3f}x eager"
                     + (f", {gc:.3f}x torch.compile" if gc else "") + (f", {gh:.3f}x the heuristic's" if gh else "")
                     + (f" (at most {gf:.3f}x torch.compile with GEMMs at cuBLAS speed: compile / floor)" if gf else "")
                     + ("; below 0.9x torch.compile: " + ", ".join(f"{r['chain']} {r['vs_compile']:.2f}" for r in low)
                        if low else ""))
    return lines


def relate_variants(rows: list[dict]) -> None:
    """Rows of another variant than the heuristic's get ``vs_heuristic`` (the heuristic row's dtriton time / this
    row's) and, when run with --no-compile, the heuristic row's torch.compile time (and ``vs_compile``)."""
    heur = {(r["chain"], r["dtype"]): r for r in rows if r.get("variant", "heuristic") == "heuristic"}
    for r in rows:
        h = heur.get((r["chain"], r["dtype"]))
        if h is None or h is r or not r.get("dtriton_us"):
            continue
        r["vs_heuristic"] = h["dtriton_us"] / r["dtriton_us"] if h.get("dtriton_us") else None
        if not r.get("compile_us") and h.get("compile_us"):
            r["compile_us"], r["vs_compile"] = h["compile_us"], h["compile_us"] / r["dtriton_us"]
            r["compile_from"] = "heuristic row"


def add_floors(rows: list[dict]) -> None:
    """Each 16-bit row gets ``floor_us`` (:func:`floor_us`) and ``compile_vs_floor`` (torch.compile's time over it)."""
    by_name = {c.name: c for c in CHAINS}
    for r in rows:
        c = by_name.get(r["chain"])
        if c is None or r.get("floor_us") is not None:
            continue
        r["floor_us"] = floor_us(c, r["dtype"], r["shape"])
        ok = r["floor_us"] and r.get("compile_us")
        r["compile_vs_floor"] = r["compile_us"] / r["floor_us"] if ok else None


def write_results(out_dir: str, meta: dict, rows: list[dict]) -> None:
    """``chains_h200.json`` (meta, rows, summary) and ``chains_h200.md`` (summary and one table)."""
    os.makedirs(out_dir, exist_ok=True)
    relate_variants(rows)
    add_floors(rows)
    lines = summary(rows)
    with open(os.path.join(out_dir, "chains_h200.json"), "w") as f:
        json.dump({"meta": meta, "summary": lines, "rows": rows}, f, indent=1, default=str)

    def num(v, f="{:.1f}"):
        return "" if v is None else f.format(v)
    md = [f"# Fused GEMM chains (issue 14) — {meta['gpu']}", "",
          f"{meta['date']}; torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}; dtriton "
          f"{'explored ' + str(meta['budget_s']) + ' s per chain' if meta['budget_s'] else 'default schedule'}. "
          "Kernel time by CUDA-graph replay (5 calls per replay, median of 5). err: relative error against float64 "
          "at the benchmark shape (check: at M=67 K=96 N=128, same algorithm; eager: torch eager's error). vs: torch's "
          "time / dtriton's. "
          "kernels: launches of the dtriton chain. "
          "floor: the least time with the GEMMs at cuBLAS speed (16-bit: 761 TFLOP/s, cuBLAS fp16 NT 4096^3) or the "
          "bytes beyond the GEMM operands at copy bandwidth (2.69 TB/s), whichever is longer; compile/floor: the most "
          "any kernel with a cuBLAS-speed GEMM can gain on torch.compile.", ""] + lines + ["",
          "| chain | dtype | variant | M×K×N (P, C) | dtriton µs | eager µs | compile µs | vs eager | vs compile | floor µs | "
          "compile/floor | TFLOP/s | err | err check | err eager | kernels | note / schedule |",
          "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        s = r["shape"]
        extra = ", ".join(f"{k}={s[k]}" for k in ("P", "C") if s[k])
        tf = r["flops"] / r["dtriton_us"] / 1e6 if r["dtriton_us"] else None
        note = " — ".join(x for x in (r["note"], r["schedule"] or "") if x).replace("|", "/")
        md.append(f"| {r['chain']} | {r['dtype']} | {r.get('variant', 'heuristic')} | "
                  f"{s['M']}×{s['K']}×{s['N']}{' (' + extra + ')' if extra else ''} | "
                  f"{num(r['dtriton_us'])} | {num(r['eager_us'])} | {num(r['compile_us'])} | "
                  f"{num(r['vs_eager'], '{:.2f}')} | {num(r['vs_compile'], '{:.2f}')} | {num(r.get('floor_us'))} | "
                  f"{num(r.get('compile_vs_floor'), '{:.2f}')} | {num(tf, '{:.0f}')} | "
                  f"{num(r['err'], '{:.1e}')} | {num(r['err_check'], '{:.1e}')} | {num(r.get('err_eager'), '{:.1e}')} | "
                  f"{len(r['kernels'])} | {note} |")
    with open(os.path.join(out_dir, "chains_h200.md"), "w") as f:
        f.write("\n".join(md) + "\n")


def variant_name(variant: str, budget: float, precision: str | None, fields: dict | None = None) -> str:
    """The row label of a run: "heuristic", "hand", "explored Ss", with " P" for a replaced precision and the
    ``--schedule`` fields (``heuristic {"persistent": 1}``)."""
    name = variant if budget <= 0 or variant == "hand" else f"explored {budget:g}s"
    name = f"{name} {precision}" if precision else name
    return f"{name} {json.dumps(fields, sort_keys=True)}" if fields else name


def empty_row(c: Chain, dtype: str, variant: str, note: str) -> dict:
    """The row of a chain that was not measured (``note`` says why)."""
    return dict(chain=c.name, dtype=dtype, shape=dict(M=c.M, K=c.K, N=c.N, P=c.P, C=c.C), flops=0, err=None,
                err_check=None, dtriton_us=None, eager_us=None, compile_us=None, vs_eager=None, vs_compile=None,
                kernels=[], schedule=None, variant=variant, note=note)


def main(argv=None) -> None:
    """Parse the options and run the selected chains x dtypes, rewriting the results after every row."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="float32,float16", help="comma-separated: float32, float16, bfloat16")
    ap.add_argument("--cases", default="", help="comma-separated substrings of chain names, run in that order "
                    "(default: all, in the catalogue's order)")
    ap.add_argument("--budget", type=float, default=0.0, help="exploration seconds per chain (0: default schedule)")
    ap.add_argument("--variant", choices=("heuristic", "hand"), default="heuristic",
                    help="hand: the chains with a hand schedule (GEMM + one row kernel, see hand_schedule) only")
    ap.add_argument("--precision", choices=PRECISIONS, default=None,
                    help="fp32 dot precision replacing the schedule's (variant 'heuristic P' / 'hand P')")
    ap.add_argument("--schedule", default="", help='JSON schedule fields put into the heuristic schedule of each '
                    'chain (variant \'heuristic {...}\'), e.g. \'{"persistent": 1}\'')
    ap.add_argument("--ab", default="", help='A/B rows in one process: a JSON list of [chain, fields] pairs (or a '
                    'file holding one), each chain run with those --schedule fields ({} or null: its default), in '
                    'that order, e.g. \'[["row_mean", {}], ["row_mean", {"persistent": 1}]]\'')
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds after which no new chain starts (default 540 on the GPU, none in a dry run)")
    ap.add_argument("--append", action="store_true",
                    help="keep the rows of other chains / dtypes / variants from <out>/chains_h200.json")
    ap.add_argument("--resume", action="store_true",
                    help="--append, and run only the rows the results file lacks or lists as skipped (the same "
                         "command repeated in device calls of 10 minutes finishes the catalogue)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--list", action="store_true", help="print the chains and their shapes, run nothing")
    ap.add_argument("--plans", nargs="?", const="", default=None, metavar="FOLDER",
                    help="print the H200 heuristic's schedule and kernels per chain, derived on this machine (no run); "
                         "with FOLDER, write each printed module there")
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes (timings meaningless)")
    ap.add_argument("--render", action="store_true",
                    help="rewrite <out>/chains_h200.md from its .json (adding the floor columns), run nothing")
    a = ap.parse_args(argv)
    if a.render:
        old = json.load(open(os.path.join(a.out, "chains_h200.json")))
        return write_results(a.out, old["meta"], old["rows"])
    cases = [c for c in a.cases.split(",") if c]
    chains = [c for c in CHAINS if not cases or any(s in c.name for s in cases)]
    # in the order --cases names them (a device call that runs out of time keeps the first ones)
    chains.sort(key=lambda c: next((k for k, s in enumerate(cases) if s in c.name), 0))
    dtypes = [d for d in a.dtypes.split(",") if d]
    for d in dtypes:
        if d not in TOL:
            raise SystemExit(f"--dtypes: unknown dtype {d!r}; use {', '.join(TOL)}")
    if a.variant == "hand":
        chains = [c for c in chains if hand_schedule(c, make_inputs(c, *shape_of(c, DRY_SHAPE), torch.float32, "cpu",
                                                                    empty=True)[1]) is not None]
    if a.plans is not None:
        return print_plans(chains, dtypes, a.plans or None)
    if a.list:
        for c in chains:
            print(f"{c.name:24s} M={c.M:6d} K={c.K} N={c.N}" + (f" P={c.P}" if c.P else "")
                  + (f" C={c.C}" if c.C else ""))
        print(f"{len(chains)} chains")
        return
    if a.dry_run:
        timing.DEV, timing.DRY = "cpu", True
        a.budget = 0
    a.deadline = a.deadline if a.deadline is not None else (float("inf") if a.dry_run else 540.0)
    meta = dict(gpu="cpu (dry run: interpreter, tiny shapes)" if timing.DRY else torch.cuda.get_device_name(),
                torch=torch.__version__, triton=__import__("triton").__version__, commit=git_commit(),
                date=datetime.datetime.now().isoformat(timespec="seconds"), budget_s=a.budget)
    print(f"# {meta}", flush=True)
    path = os.path.join(a.out, "chains_h200.json")
    old = json.load(open(path))["rows"] if (a.append or a.resume) and os.path.exists(path) else []
    if a.precision and a.budget > 0:
        raise SystemExit("--precision replaces the precision of the heuristic's or the hand schedule; "
                         "it does not combine with --budget")
    fields = json.loads(a.schedule) if a.schedule else None
    if fields and (a.budget > 0 or a.variant == "hand" or a.precision):
        raise SystemExit("--schedule puts fields into the heuristic's schedule; it does not combine with --budget, "
                         "--variant hand or --precision")
    todo = [(c, d, fields) for d in dtypes for c in chains]
    if a.ab:
        if fields or a.budget > 0 or a.variant == "hand" or a.precision:
            raise SystemExit("--ab gives each row its schedule fields; it does not combine with --schedule, --budget, "
                             "--variant hand or --precision")
        pairs = json.load(open(a.ab)) if os.path.exists(a.ab) else json.loads(a.ab)
        by_name = {c.name: c for c in CHAINS}
        unknown = [p[0] for p in pairs if p[0] not in by_name]
        if unknown:
            raise SystemExit(f"--ab: unknown chain(s) {', '.join(unknown)}; see --list")
        todo = [(by_name[n], d, f or None) for d in dtypes for n, f in pairs]
    name = {id(f): variant_name(a.variant, a.budget, a.precision, f) for _, _, f in todo}
    if a.resume:   # rows measured (or failed) by an earlier call stay; skipped and missing ones run
        done = {(r["chain"], r["dtype"], r.get("variant", "heuristic")) for r in old if not r["note"].startswith("skipped")}
        todo = [(c, d, f) for c, d, f in todo if (c.name, d, name[id(f)]) not in done]
        print(f"# --resume: {len(todo)} rows left to run", flush=True)
    keys = {(c.name, d, name[id(f)]) for c, d, f in todo}
    rows = [r for r in old if (r["chain"], r["dtype"], r.get("variant", "heuristic")) not in keys]
    t0 = time.time()
    for c, d, f in todo:
        variant = name[id(f)]
        if time.time() - t0 > a.deadline:
            rows.append(empty_row(c, d, variant, f"skipped: --deadline {a.deadline:.0f}s"))
            continue
        # a CUDA fault ends the process: the row says so, and --resume goes on after it
        write_results(a.out, meta, rows + [empty_row(c, d, variant, "died: the process ended during this row")])
        try:
            r = run_chain(c, d, a.budget, not a.no_compile, a.variant, a.precision, f)
        except Exception as e:  # noqa: BLE001 - the torch side failed: keep going
            traceback.print_exc()
            rows.append(empty_row(c, d, variant, f"torch failed: {type(e).__name__}: {str(e)[:200]}"))
            continue
        rows.append(r)
        print(f"  {c.name:24s} {d:8s} {variant[:70]:16s} dtriton {r['dtriton_us'] or float('nan'):9.1f} us  eager "
              f"{r['eager_us'] or float('nan'):9.1f}  compile {r['compile_us'] or float('nan'):9.1f}  err {r['err']}  "
              f"kernels {len(r['kernels'])}  ({time.time() - t0:.0f}s) {r['note']}", flush=True)
        write_results(a.out, meta, rows)
    write_results(a.out, meta, rows)
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
