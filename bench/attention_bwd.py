"""The derived attention backward (issue 15): its kernels compiled for sm_90 on a machine without a
GPU, and on the GPU its time beside SDPA's backward for a few backward schedules.

    PYTHONPATH=src python3 bench/attention_bwd.py sm90 [--D 64 128] [--causal] [--variants NAME ...] [--dump DIR]
    PYTHONPATH=src python3 bench/attention_bwd.py time [--only d64 d128 ...] [--out DIR] [--dry-run]
    PYTHONPATH=src python3 bench/attention_bwd.py explore [--only ...] [--budget S] [--out DIR] [--dry-run]

``sm90``: the backward of ``dt.grad(attention, save=saved_statistics(attention))`` planned as a CUDA
call at the issue's shapes (B4 H16 S2048 D64, B4 H32 S4096 D128; nothing is allocated) under the
heuristic schedule, every kernel compiled by Triton for sm_90; per kernel: registers, spill stack,
SASS instructions, shared memory, warps and stages, wgmma / mma.sync, ex2 and division instructions, layout
conversions through shared memory (TTGIR ``convert_layout``). The saved statistics take the dtypes the
saving forward gives them (the row log-sum-exp fp32, sum1 normalised in the output's dtype), as in the
timed calls.

``time``: per case, the backward kernels alone (the saved statistics made once by the saving
forward) under the default schedule (on sm_90 at head dim 128: the Gluon backward, its row marked
"(Gluon)"), the derived Triton kernels' heuristic schedule and the variants of :func:`variants` (tiles of the two
accumulating kernels, warps, stages), against SDPA's backward (``torch.autograd.grad`` of SDPA's
output, its default backend), each checked against float64 first; beside them the saving
forward's and SDPA's forward time, and (fwd + bwd of SDPA) / (fwd + bwd of dtriton) per variant
(kernel calls, no autograd host path; the backend reported is the first SDPA accepts in torch's
priority order, which is the one its dispatcher picks when all are enabled). ``--dry-run``: tiny shapes on
the interpreter (checks the script).

``explore``: ``dt.explore`` of the backward per case within ``--budget`` seconds (the derived GPU
space: the accumulating kernels' tiles, warps, stages); writes the best schedules to
``attention_bwd_explored.json`` under ``--out``, keyed by bench/grad_bench.py's case names, which
``grad_bench.py --backward-schedules FILE`` runs as its "dtriton explored" rows.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time

import torch

import dtriton as dt
from dtriton.grad import augmented_forward, saved_statistics
from dtriton.ir import InputTensor
from dtriton.library import attention, causal_attention

CASES = {"d64": (4, 16, 2048, 64, False), "causal_d64": (4, 16, 2048, 64, True),
         "d128": (4, 32, 4096, 128, False), "causal_d128": (4, 32, 4096, 128, True)}
DRY = {"d16": (1, 1, 260, 16, False), "causal_d16": (1, 1, 260, 16, True)}


def backward_of(causal: bool):
    """(forward algorithm, saving forward algorithm, the backward algorithm, saved stage names)."""
    alg = causal_attention if causal else attention
    aug, names = augmented_forward(alg, saved_statistics(alg))
    ga = dt.grad(alg, save=names)
    (bwd,) = ga.algorithms
    return alg, aug, bwd, names


def bwd_args(bwd, B, H, S, D, dtype, device, aug=None, names=()):
    """Arguments of the backward algorithm (Q, K, V, scale, dO, saved statistics) on ``device``
    (``meta``: shapes only). The statistics are random stand-ins (:func:`case_inputs` computes
    them), in the dtypes the saving forward ``aug`` gives them (its outputs after the first, in the
    order of ``names``; the row log-sum-exp is fp32) when given, else in ``dtype``."""
    e = dict(dtype=dtype, device=device)
    sizes = {"B": B, "H": H, "S": S, "T": S, "D": D}
    make = torch.empty if device == "meta" else torch.randn
    saved = {}
    if aug is not None:
        fwd = [make(*[sizes[d] for d in p.dims], **e) if isinstance(p, InputTensor) else D ** -0.5 for p in aug.params]
        saved = {f"saved_{n}": d for n, d in zip(names, aug.bind(fwd).out_dtypes[1:])}
    return [make(*[sizes[d] for d in p.dims], dtype=saved.get(p.name, dtype), device=device)
            if isinstance(p, InputTensor) else D ** -0.5 for p in bwd.params]


# ----------------------------------------------------------------------------------------------
# sm_90 compile report
# ----------------------------------------------------------------------------------------------
def sm90_report(bwd, args, sched=None, dump: str | None = None) -> list[str]:
    """One line per kernel of ``bwd`` planned for a CUDA call with ``args`` (meta tensors) under
    ``sched`` (None: the heuristic), compiled by Triton for sm_90."""
    # (bench/sm90.py imports triton, which the timing modes do not need)
    from sm90 import (compile_sm90, dump_asm, load_kernels, plan_for_cuda, ptr_types, render, resources, sass_count,
                      signature)
    b, sched, prog = plan_for_cuda(bwd, args, sched)
    src, metas = render(prog)
    tmp = dump or tempfile.mkdtemp(prefix="dt_attnbwd_")
    mod = load_kernels(src, tmp, "kernels")
    ptr = ptr_types(bwd, b)   # the outputs (gradients) in Q's dtype, buffers fp32
    lines = [f"schedule: {sched.to_json()}"]
    for m in metas:
        fn = getattr(mod, m.name)
        k = compile_sm90(fn, m, *signature(bwd, fn, m, ptr))
        ptx, ttgir = k.asm["ptx"], k.asm["ttgir"]
        dump_asm(k, tmp, m.name)
        lines.append(f"  {m.name}: {resources(k.asm['cubin'])} sass {sass_count(k.asm['cubin'])} smem {k.metadata.shared} "
                     f"warps {m.ir.num_warps} stages {m.ir.num_stages} wgmma {ptx.count('wgmma.mma_async')} "
                     f"mma.sync {ptx.count('mma.sync')} ex2 {ptx.count('ex2.approx')} div {ptx.count('div.')} "
                     f"rcp {ptx.count('rcp.')} convert_layout {ttgir.count('ttg.convert_layout')}")
    lines.append(f"  (sources, TTGIR and PTX in {tmp})")
    return lines


# ----------------------------------------------------------------------------------------------
# GPU timing
# ----------------------------------------------------------------------------------------------
def variants(base: dt.Schedule, D: int) -> dict[str, dt.Schedule | None]:
    """Named backward schedules: "default" (None: the compiler picks; on sm_90 at head dim 128 the Gluon
    backward, :mod:`dtriton.plan.gluon_attention_bwd`), then the derived Triton kernels
    (``warp_specialize=False``): "heuristic" (the heuristic completing that), "heuristic given" (its
    complete schedule passed explicitly, a control), "heuristic tma", and around the heuristic's complete
    ``base`` the (key, query) tiles of the dK/dV kernel (out1, out2; the dQ kernel, out0, takes the
    transposed pair), warps, stages, and where dQ is computed: "dq-atomic" (added with atomics inside
    the dK/dV kernel's loop, :mod:`dtriton.plan.loop_stores`) or "dq-kernel" (a second kernel over query
    tiles)."""
    base = base.replace(warp_specialize=False)

    def with_(kv, warps, stages, dq):
        st = dict(base.stages)
        st["out0"] = st["out0"].replace(tile={"i": kv[1], "j": kv[0]})
        for o in ("out1", "out2"):
            st[o] = st[o].replace(tile={"i": kv[0], "j": kv[1]})
        st["d_Q"] = st["d_Q"].replace(place="atomic" if dq == "atomic" else "auto")
        return base.replace(stages=st, num_warps=warps, num_stages=stages)
    out = {"default": None, "heuristic": dt.Schedule(warp_specialize=False), "heuristic given": base,
           "heuristic tma": base.replace(access="tma")}
    if D <= 64:
        grid = [((32, 128), 4, 3), ((32, 128), 8, 3), ((64, 128), 8, 3), ((32, 64), 4, 3), ((64, 64), 4, 3),
                ((16, 128), 4, 3), ((32, 128), 4, 2), ((64, 128), 8, 2)]
    else:
        grid = [((32, 64), 4, 3), ((32, 128), 8, 3), ((32, 128), 8, 4), ((16, 128), 8, 3), ((64, 128), 8, 2),
                ((16, 64), 4, 3), ((32, 64), 8, 3), ((32, 64), 4, 4)]
    for kv, w, s in grid:
        for dq in ("atomic", "kernel"):
            out[f"kv{kv[0]}x{kv[1]} w{w} s{s} dq-{dq}"] = with_(kv, w, s, dq)
    return out


def _time(f, dev) -> float:
    """Median ms of ``f``: do_bench on the GPU, one wall-clock call on the interpreter."""
    if dev == "cpu":
        t0 = time.perf_counter()
        f()
        return (time.perf_counter() - t0) * 1e3
    from triton.testing import do_bench
    return do_bench(f, warmup=10, rep=50)


def kernel_split(f, reps: int = 5) -> str:
    """The GPU kernels (and memsets) of one ``f()`` with their device µs per call (torch.profiler,
    mean over ``reps`` calls; names without the backward algorithm's prefix), largest first; ""
    on the interpreter."""
    if not torch.cuda.is_available():
        return ""
    from torch.profiler import ProfilerActivity, profile
    f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            f()
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    for e in prof.events():
        if e.device_type.name == "CUDA" and "Memcpy" not in e.name:
            short = re.sub(r"^(causal_)?attention_grad_Q_K_V_", "", e.name)[:40]
            times[short] = times.get(short, 0.0) + e.time_range.elapsed_us() / reps
    return ", ".join(f"{k} {v:.1f}" for k, v in sorted(times.items(), key=lambda kv: -kv[1]))


def _sdpa_backend(Q, causal) -> str:
    """The SDPA backend that runs for ``Q`` (the first one enabled that accepts the call)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for b in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        try:
            with sdpa_kernel([b]):
                torch.nn.functional.scaled_dot_product_attention(Q, Q, Q, is_causal=causal)
            return b.name
        except RuntimeError:
            continue
    return "?"


def case_inputs(B, H, S, D, causal, dev):
    """(forward, saving forward, backward algorithm, (Q, K, V, scale, dO), saved statistics) of a
    case, the statistics computed by the saving forward."""
    alg, aug, bwd, _ = backward_of(causal)
    g = torch.Generator(dev).manual_seed(0)
    Q, K, V, dO = (torch.randn(B, H, S, D, device=dev, dtype=torch.float16, generator=g) for _ in range(4))
    res = dt.compile(aug)(Q, K, V, D ** -0.5)
    return alg, aug, bwd, (Q, K, V, D ** -0.5, dO), res[1:]


def explore_case(name, B, H, S, D, causal, dev, budget: float) -> dict:
    """``dt.explore`` of the backward at a case's shapes (its GPU space: the two accumulating
    kernels' tiles, warps, stages); the heuristic's and the best time and the best schedule."""
    _, _, bwd, (Q, K, V, scale, dO), saved = case_inputs(B, H, S, D, causal, dev)
    r = dt.explore(bwd, (Q, K, V, scale, dO, *saved), budget=budget, store=False, progress=False,
                   max_trials=None if dev == "cuda" else 2)
    heur, best = r.heuristic_row, r.best_row
    row = dict(case=name, heuristic_us=heur and heur["median_us"], best_us=best and best["median_us"],
               speedup=r.speedup, candidates=len(r.table), ok=sum(c["status"] == "ok" for c in r.table),
               stop=r.stop_reason, best=r.best.to_json() if r.best is not None else None)
    print({k: v for k, v in row.items() if k != "best"}, flush=True)
    return row


def time_case(name, B, H, S, D, causal, dev, rows, keep=None, split=False):
    """Rows for one case: SDPA's backward, the heuristic's and each variant's backward (ms),
    gradients checked against float64 autograd of the reference; ``split``: each row also gives
    its kernels' device µs (:func:`kernel_split`)."""
    alg, aug, bwd, (Q, K, V, scale, dO), saved = case_inputs(B, H, S, D, causal, dev)
    x64 = [t.detach().double().requires_grad_() for t in (Q, K, V)]
    want = torch.autograd.grad(alg.reference(*x64, scale) if dev == "cpu" else
                               torch.nn.functional.scaled_dot_product_attention(*x64, scale=scale, is_causal=causal),
                               x64, dO.double())
    qkv = [t.detach().clone().requires_grad_() for t in (Q, K, V)]
    o = torch.nn.functional.scaled_dot_product_attention(*qkv, scale=scale, is_causal=causal)
    t_sdpa = _time(lambda: torch.autograd.grad(o, qkv, dO, retain_graph=True), dev)
    fa = dt.compile(aug)
    t_fwd = _time(lambda: fa(Q, K, V, scale), dev)
    t_sdpa_fwd = _time(lambda: torch.nn.functional.scaled_dot_product_attention(Q, K, V, scale=scale, is_causal=causal), dev)
    rows.append(dict(case=name, impl="SDPA backward", ms=round(t_sdpa, 4), fwd_ms=round(t_sdpa_fwd, 4),
                     backend=_sdpa_backend(Q, causal) if dev == "cuda" else "math"))
    rows.append(dict(case=name, impl="dtriton saving forward", fwd_ms=round(t_fwd, 4), kernels=fa.launch_count))
    print(rows[-2], rows[-1], flush=True)
    args = (Q, K, V, scale, dO, *saved)
    base = dt.compile(bwd).complete(bwd.bind(args))
    for vname, sched in variants(base, D).items():
        if keep and vname not in keep:
            continue
        try:
            k = dt.compile(bwd, sched)
            got = k(*args)
            err = max(((x.double() - w).norm() / w.norm()).item() for x, w in zip(got, want))
            ms = _time(lambda: k(*args), dev)
            gluon = "gluon_bwd_kernels import" in k.source_for(*args)
            rows.append(dict(case=name, impl=f"dtriton {vname}{' (Gluon)' if gluon else ''}", ms=round(ms, 4),
                             kernels=k.launch_count,
                             rel_err=err, sdpa_over_this=round(t_sdpa / ms, 3),
                             fwd_bwd_vs_sdpa=round((t_sdpa + t_sdpa_fwd) / (ms + t_fwd), 3)))
            if split:
                rows[-1]["kernels_us"] = kernel_split(lambda: k(*args))
        except Exception as e:  # noqa: BLE001 - report and go on
            rows.append(dict(case=name, impl=f"dtriton {vname}", note=f"failed: {type(e).__name__}: {str(e)[:200]}"))
        print(rows[-1], flush=True)


def main(argv=None) -> int:
    """The command line (module docstring); returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["sm90", "time", "explore"])
    ap.add_argument("--budget", type=float, default=40.0, help="explore: seconds per case")
    ap.add_argument("--D", type=int, nargs="+", default=[64, 128], help="sm90: head dims")
    ap.add_argument("--causal", action="store_true", help="sm90: the causal backward")
    ap.add_argument("--schedule", default="", help="sm90: JSON fields merged into the heuristic's schedule")
    ap.add_argument("--dump", default=None, help="sm90: keep sources, TTGIR and PTX here")
    ap.add_argument("--only", nargs="*", help="time: cases (d64 causal_d64 d128 causal_d128; d16 causal_d16 dry)")
    ap.add_argument("--out", default=None, help="time: write attention_bwd.json there")
    ap.add_argument("--variants", nargs="*", help="time, sm90: only these variants (e.g. heuristic)")
    ap.add_argument("--split", action="store_true", help="time: each row's kernels with their device µs (torch.profiler)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    if a.mode == "sm90":
        _, aug, bwd, names = backward_of(a.causal)
        for D in a.D:
            B, H, S = (4, 16, 2048) if D <= 64 else (4, 32, 4096)
            args = bwd_args(bwd, B, H, S, D, torch.float16, "meta", aug, names)
            b = bwd.bind(args)
            b.device = torch.device("cuda")
            base = dt.compile(bwd).complete(b)
            scheds = {"heuristic": base.replace(warp_specialize=False)}
            if a.schedule:
                scheds = {"given": dt.Schedule.from_json(json.dumps(dict(json.loads(base.to_json()), **json.loads(a.schedule))))}
            if a.variants:
                # (complete schedules: "default" and "heuristic" are those the heuristic completes)
                done = {"default": base, "heuristic": base.replace(warp_specialize=False)}
                scheds = {n: done.get(n, v) for n, v in variants(base, D).items() if n in a.variants}
            for vname, sched in scheds.items():
                print(f"D{D}{' causal' if a.causal else ''} {vname}:")
                try:
                    print("\n".join(sm90_report(bwd, args, sched, a.dump and os.path.join(a.dump, f"d{D}"))), flush=True)
                except Exception as e:  # noqa: BLE001 - report and go on
                    print(f"  failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        return 0
    dev = "cpu" if a.dry_run else "cuda"
    cases = DRY if a.dry_run else CASES
    rows: list[dict] = []
    if a.mode == "explore":
        best = {}
        for name in a.only or list(cases):
            row = explore_case(name, *cases[name], dev, a.budget)
            rows.append(row)
            if row["best"]:
                best[f"attention{'_causal' if cases[name][4] else ''}_d{cases[name][3]}"] = json.loads(row["best"])
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, "attention_bwd_explored.json"), "w") as f:
                json.dump(dict(rows=rows, schedules=best), f, indent=1)
        return 0
    for name in a.only or list(cases):
        time_case(name, *cases[name], dev, rows, a.variants, a.split)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "attention_bwd.json"), "w") as f:
            json.dump(dict(rows=rows, gpu=torch.cuda.get_device_name() if dev == "cuda" else "cpu (dry run)",
                           date=time.strftime("%Y-%m-%dT%H:%M:%S")), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
