"""dtriton benchmark suite (H200). One entry point, one device call, a compact table printed last.

    PYTHONPATH=src python3 bench/run.py [--budget SECONDS] [--matmul-budget SECONDS]
                                        [--only matmul,softmax,norm,diffusion,overhead,attention]
                                        [--no-compile] [--out bench/results]

Every row is checked against a float64/fp32 reference before it is timed. Two timings per row:
``kernel_us`` — CUDA-graph replay of 20 calls, divided by 20 (launch gaps hidden), and ``call_us`` —
a plain Python call in a loop, synchronised at the end (host overhead visible). dtriton's schedule
for every row comes from ``dt.explore`` (a short budget per row, results stored in the tuning
database), never from constants edited in here; the schedule used is recorded beside each result.

Writes ``<out>/h200.json``, ``<out>/h200.md`` and ``<out>/h200.png``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from algorithms import add_one, attention, layer_norm, matmul, rms_norm, softmax, spatial_diffusion  # noqa: E402

DEV = "cuda"
DRY = False          # --dry-run: CPU interpreter, tiny shapes, wall-clock timing (checks the script)
ROWS: list[dict] = []
OLD_ROWS: list[dict] = []  # --append: an earlier run's rows, replaced case by case by this run's
OUT_META: tuple = ()   # (out_dir, meta) once main() has them
CASES: list[str] = []  # --cases: run only cases whose name contains one of these


def want(case: str) -> bool:
    return not CASES or any(c in case for c in CASES)


def S(n: int) -> int:
    """A benchmark size, shrunk to at most 40 in a dry run."""
    return n if not DRY else max(1, min(n, 40))


def add_pdl_options(ap: argparse.ArgumentParser) -> None:
    """The dependent-launch options of the scripts that A/B it (``--pdl-signal``, ``--pdl-max-programs``);
    :func:`apply_pdl_options` puts them into :mod:`dtriton.plan.dependent_launch` before anything plans."""
    ap.add_argument("--pdl-signal", choices=("first", "end"), default="first",
                    help="dependent launch: kernels signal the next launch first thing (the default) or at their end")
    ap.add_argument("--pdl-max-programs", type=int, default=None,
                    help="dependent launch only for kernels of at most this many programs (default: the plan's)")


def apply_pdl_options(a: argparse.Namespace) -> None:
    """Set :mod:`dtriton.plan.dependent_launch`'s signal policy from :func:`add_pdl_options`' options."""
    from dtriton.plan import dependent_launch   # noqa: PLC0415
    dependent_launch.SIGNAL_FIRST = a.pdl_signal == "first"
    if a.pdl_max_programs is not None:
        dependent_launch.MAX_PROGRAMS = a.pdl_max_programs


def captured_graph(fn, reps: int) -> "torch.cuda.CUDAGraph":
    """``reps`` calls of ``fn`` captured in one CUDA graph (after warm-up on a side stream), replayed once."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    return g


#: --warm-ms of the scripts that offer it: milliseconds of untimed replays before the timed ones (0: none)
WARM_MS = [0.0]


def recorded_launches(kernel, args, out):
    """Call ``kernel(*args, out=out)`` once, recording each kernel launch it makes: returns
    ([(fn, programs, call, meta, interpret)], the backend's launch) so a caller can replay one kernel
    alone with the same arguments (``launch(fn, programs, call, meta, interpret)``)."""
    from dtriton.backends import default_backend   # noqa: PLC0415
    be = default_backend()
    orig = be.launch
    rec = []

    def recording(fn, programs, call, meta, interpret):
        rec.append((fn, programs, list(call), meta, interpret))
        return orig(fn, programs, call, meta, interpret)
    be.launch = recording
    try:
        kernel(*args, out=out)
    finally:
        del be.launch
    return rec, orig


def graph_time_us(fn, reps: int = 20, iters: int = 10) -> float:
    """Kernel time: capture ``reps`` calls in one CUDA graph and time its replays (median), after
    :data:`WARM_MS` milliseconds of untimed replays (the GPU's clocks up after an idle moment)."""
    if DRY:
        return call_time_us(fn, n=1)
    g = captured_graph(fn, reps)
    t0 = time.perf_counter()
    while WARM_MS[0] > 0 and (time.perf_counter() - t0) * 1e3 < WARM_MS[0]:
        g.replay()
        torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / reps)
    ts.sort()
    return ts[len(ts) // 2]


CALL_REPEATS = 3


def call_time_us(fn, n: int = 50) -> float:
    """Call time: ``n`` plain Python calls, synchronised at the end (host overhead included); the
    best of ``CALL_REPEATS`` such runs."""
    if DRY:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(CALL_REPEATS):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def relerr(o, r) -> float:
    o, r = o.double(), r.double()
    if torch.isnan(o).any():
        return float("nan")
    return ((o - r).norm() / r.norm().clamp_min(1e-30)).item()


def tuned_kernel(alg, args, budget: float, space=None):
    """Schedule from a short exploration (stored in the tuning DB, except in a dry run: interpreter
    timings of tiny shapes must not reach the user's database); the heuristic if that fails."""
    sched, note = None, "heuristic"
    if budget <= 0:
        k = dt.compile(alg, "tuned")   # best stored schedule for these shapes, else the heuristic
        try:
            note = k.origin_for(*args)
        except Exception:  # noqa: BLE001
            note = "tuned-or-heuristic"
        return k, note
    if budget > 0:
        try:
            # "warm" timing: the same L2-warm GPU time as the kernel column (CUDA-graph replay)
            res = dt.explore(alg, args, budget=budget, space=space, progress=False, top_k=2, timing="warm",
                             store=not DRY)
            print(f"    explore {alg.name}: {res.counts()}; " + "; ".join(
                f"{st}: {next(r['reason'] for r in res.table if r['status'] == st)[:150]}"
                for st in res.counts() if st not in ("ok", "duplicate", "skipped")), flush=True)
            print_candidates(res)
            if res.best is not None:
                sched, note = res.best, f"explore({budget:.0f}s, {len(res.table)} cand.)"
        except Exception as e:  # noqa: BLE001 - record and go on with the heuristic
            note = f"heuristic (explore failed: {type(e).__name__}: {str(e)[:80]})"
    k = dt.compile(alg, sched)
    return k, note


def schedule_changes(js: str | None, base: str | None) -> str:
    """How schedule JSON ``js`` differs from ``base``: the changed fields, an object's changed keys
    (``tile.h=4``, ``stages.mean0.tile.h=8``), ``KEY=-`` for a key removed."""
    def flat(d, pre=""):
        out = {}
        for k, v in (d or {}).items():
            out.update(flat(v, f"{pre}{k}.") if isinstance(v, dict) else {f"{pre}{k}": v})
        return out
    a, b = flat(json.loads(js) if js else {}), flat(json.loads(base) if base else {})
    return " ".join(f"{k}={json.dumps(a.get(k, '-'), separators=(',', ':'))}" for k in sorted(set(a) | set(b))
                    if a.get(k) != b.get(k)) or "(the heuristic's)"


def print_candidates(res, most: int = 8) -> None:
    """The timed candidates of an exploration, fastest first (at most ``most``): warm GPU µs, where
    each came from, and its changes from the heuristic's schedule."""
    rows = [r for r in res.table if r["status"] == "ok" and r.get("median_us") is not None]
    base = next((r["schedule_json"] for r in res.table if r["origin"] == "heuristic"), None)
    shown = sorted(rows, key=lambda r: r["median_us"])[:most]
    for r in shown:
        print(f"      #{r['id']:<3d} {r['median_us']:10.1f} us  {r['origin']:9s} {schedule_changes(r['schedule_json'], base)}",
              flush=True)
    for r in res.table:   # the baseline always: its status and time (or why it has none)
        if r["origin"] == "heuristic" and r not in shown:
            print(f"      #{r['id']:<3d} heuristic: {r['status']} median {r.get('median_us')} us "
                  f"{(r.get('reason') or '')[:200]}", flush=True)


def add_row(group, case, impl, kernel_us, call_us, unit, work, err=None, schedule=None, note=""):
    rate = work / kernel_us if kernel_us and kernel_us == kernel_us else float("nan")  # MFLOP/us = TFLOP/s; MB/us = TB/s
    ROWS.append(dict(group=group, case=case, impl=impl, kernel_us=round(kernel_us, 2), call_us=round(call_us, 2),
                     rate=round(rate, 3), unit=unit, err=err, schedule=schedule, note=note))
    if OUT_META:
        write_results(*OUT_META, plot=False)   # after every row, so a run cut off by a timeout keeps what it measured
    print(f"  {group:9s} {case:34s} {impl:14s} kernel {kernel_us:9.1f} us  call {call_us:9.1f} us  {rate:8.3f} {unit}"
          + (f"  err {err:.1e}" if err is not None else ""), flush=True)


def bench_impls(group, case, unit, work, impls, ref, args_desc=""):
    for name, fn, sched, note in impls:
        try:
            out = fn()
            outs = out if isinstance(out, tuple) else (out,)
            refs = ref if isinstance(ref, tuple) else (ref,)
            err = max(relerr(o, r) for o, r in zip(outs, refs))
            tol = 5e-2 if unit == "TFLOP/s" else 2e-2
            if not err <= tol:
                add_row(group, case, name, float("nan"), float("nan"), unit, work, err, sched, "WRONG: not timed")
                continue
            add_row(group, case, name, graph_time_us(fn), call_time_us(fn), unit, work, err, sched, note)
        except Exception as e:  # noqa: BLE001
            add_row(group, case, name, float("nan"), float("nan"), unit, work, None, sched,
                    f"failed: {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}")


MAX_AUTOTUNE = {(4096, 4096, 4096), (16, 4096, 4096)}


def maybe_compile(f, enabled, mode=None):
    if not enabled or DRY:
        return None
    try:
        torch._dynamo.reset()   # a fresh compile per row: no recompile limit reached across rows
        return torch.compile(f, dynamic=False, mode=mode)
    except Exception:  # noqa: BLE001
        return None


# ---------------------------------------------------------------------------------------------
def ceilings():
    x = torch.empty(2 * 1024**3 // 2, dtype=torch.float16, device=DEV).normal_()
    y = torch.empty_like(x)
    us = graph_time_us(lambda: y.copy_(x), reps=5)
    add_row("ceiling", "copy 2 GiB d2d", "torch", us, us, "TB/s", 2 * x.numel() * 2 / 1e6)
    xs, ys = x[: 64 * 1024**2], y[: 64 * 1024**2]   # 128 MiB: the size of the softmax / norm cases
    us = graph_time_us(lambda: ys.copy_(xs), reps=20)
    add_row("ceiling", "copy 128 MiB d2d", "torch", us, us, "TB/s", 2 * xs.numel() * 2 / 1e6)
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    us = graph_time_us(lambda: a @ b, reps=5)
    add_row("ceiling", "cuBLAS bf16 8192^3", "torch", us, us, "TFLOP/s", 2 * 8192**3 / 1e6)
    del x, y


def run_matmul(budget, use_compile):
    shapes = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
              (4096, 4096, 11008), (4096, 11008, 4096), (16, 4096, 4096)]
    for dtype in (torch.float16, torch.bfloat16):
        for (M, K, N) in shapes:
            M, K, N = S(M), S(K), S(N)
            if not want(f"{str(dtype)[6:]} {M}x{K}x{N}"):
                continue
            A = torch.randn(M, K, device=DEV, dtype=dtype)
            B = torch.randn(K, N, device=DEV, dtype=dtype)
            ref = A.float() @ B.float()
            k, note = tuned_kernel(matmul, (A, B), budget)
            sched = k.schedule_for(A, B).to_json()
            impls = [("dtriton", lambda: k(A, B), sched, note), ("torch.matmul", lambda: A @ B, None, "cuBLAS")]
            # max-autotune compiles ~20 Triton templates per shape (tens of seconds each), so it is
            # used on two representative shapes to fit the suite in one device call; default mode
            # (which calls cuBLAS for a plain mm) elsewhere. The mode is recorded in the note.
            mode = "max-autotune-no-cudagraphs" if dtype == torch.float16 and (M, K, N) in MAX_AUTOTUNE else None
            c = maybe_compile(lambda a, b: a @ b, use_compile, mode)
            if c is not None:
                impls.append(("torch.compile", lambda: c(A, B), None, mode or "default mode"))
            bench_impls("matmul", f"{str(dtype)[6:]} {M}x{K}x{N}", "TFLOP/s", 2 * M * N * K / 1e6, impls, ref)


def run_softmax(budget, use_compile):
    for dtype in (torch.float16, torch.float32):
        for (M, N) in [(4096, 256), (4096, 1024), (4096, 4096), (4096, 16384), (4096, 32768), (32768, 1000)]:
            M, N = S(M), S(N)
            if not want(f"{str(dtype)[6:]} {M}x{N}"):
                continue
            X = torch.randn(M, N, device=DEV, dtype=dtype)
            ref = torch.softmax(X.double(), -1)
            k, note = tuned_kernel(softmax, (X,), budget)
            impls = [("dtriton", lambda: k(X), k.schedule_for(X).to_json(), note),
                     ("torch", lambda: torch.softmax(X, -1), None, "")]
            c = maybe_compile(lambda x: torch.softmax(x, -1), use_compile)
            if c is not None:
                impls.append(("torch.compile", lambda: c(X), None, ""))
            bytes_ = 2 * X.numel() * X.element_size()
            bench_impls("softmax", f"{str(dtype)[6:]} {M}x{N}", "TB/s", bytes_ / 1e6, impls, ref)


def run_norms(budget, use_compile):
    F = torch.nn.functional
    for N in (1024, 4096, 8192):
        N = S(N)
        X = torch.randn(S(4096), N, device=DEV, dtype=torch.float16)
        w = torch.randn(N, device=DEV, dtype=torch.float16)
        b = torch.randn(N, device=DEV, dtype=torch.float16)
        bytes_ = 2 * X.numel() * 2
        ref = F.layer_norm(X.double(), (N,), w.double(), b.double(), 1e-5)
        k, note = tuned_kernel(layer_norm, (X, w, b), budget)
        impls = [("dtriton", lambda: k(X, w, b), k.schedule_for(X, w, b).to_json(), note),
                 ("torch", lambda: F.layer_norm(X, (N,), w, b, 1e-5), None, "")]
        c = maybe_compile(lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5), use_compile)
        if c is not None:
            impls.append(("torch.compile", lambda: c(X, w, b), None, ""))
        bench_impls("layernorm", f"fp16 4096x{N}", "TB/s", bytes_ / 1e6, impls, ref)

        def rms_eager(x, w):
            xf = x.float()
            return (xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
        ref = rms_eager(X.double(), w.double())
        k, note = tuned_kernel(rms_norm, (X, w), budget)
        impls = [("dtriton", lambda: k(X, w), k.schedule_for(X, w).to_json(), note), ("torch", lambda: rms_eager(X, w), None, "eager ops")]
        if hasattr(F, "rms_norm"):
            impls.append(("torch F.rms_norm", lambda: F.rms_norm(X, (N,), w, 1e-6), None, ""))
        c = maybe_compile(rms_eager, use_compile)
        if c is not None:
            impls.append(("torch.compile", lambda: c(X, w), None, ""))
        bench_impls("rmsnorm", f"fp16 4096x{N}", "TB/s", bytes_ / 1e6, impls, ref)


def diffusion_eager(x, basis, mass, evals, times):
    spectral = torch.exp(-evals[:, None] * times[None, :]) * (basis.t() @ (x * mass[:, None]))
    return basis @ spectral, spectral


def run_diffusion(budget, use_compile):
    K = S(128)
    for C in map(S, (64, 128, 256)):
        for V in map(S, (2000, 6000, 20000, 100000)):
            if not want(f"fp32 V={V} C={C}"):
                continue
            x = torch.randn(V, C, device=DEV)
            basis = torch.randn(V, K, device=DEV) / math.sqrt(V)
            mass = torch.rand(V, device=DEV) + 0.5
            evals = torch.rand(K, device=DEV) * 10
            times = torch.rand(C, device=DEV)
            args = (x, basis, mass, evals, times)
            ref = diffusion_eager(*(a.double() for a in args))
            # two dtriton rows: the derived space at the default "ieee" precision (fp32 FMA dots, as
            # torch's fp32 matmul), and the same space at "tf32x3" (3xTF32 tensor-core dots, checked
            # against the fp32 tolerance like every candidate; the error column shows its accuracy)
            k, note = tuned_kernel(spatial_diffusion, args, budget)
            impls = [("dtriton", lambda: k(*args), k.schedule_for(*args).to_json(), note)]
            if not DRY:
                space3 = dt.Space.derive(spatial_diffusion, args).narrow(precision=["tf32x3"])
                if torch.cuda.get_device_capability()[0] >= 9:   # tf32x3 dots run on tensor cores: TMA may help
                    space3 = space3.widen(access=["pointer", "tma"])
                k3, note3 = tuned_kernel(spatial_diffusion, args, budget, space3)
                impls.append(("dtriton tf32x3", lambda: k3(*args), k3.schedule_for(*args).to_json(), note3))
            impls += [
                     ("torch eager", lambda: diffusion_eager(*args), None, "")]
            c = maybe_compile(diffusion_eager, use_compile)
            if c is not None:
                impls.append(("torch.compile", lambda: c(*args), None, ""))
            flops = 2 * 2 * V * K * C
            bench_impls("diffusion", f"fp32 V={V} C={C}", "TFLOP/s", flops / 1e6, impls, ref)


def run_attention(budget, use_compile):
    shape = (4, 32, 4096, 128) if not DRY else (1, 2, 40, 16)
    Q, Kt, Vt = (torch.randn(*shape, device=DEV, dtype=torch.float16) for _ in range(3))
    F = torch.nn.functional
    ref = F.scaled_dot_product_attention(Q.float(), Kt.float(), Vt.float(), scale=0.088)
    fused = dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": 128 if not DRY else 16, "j": 64 if not DRY else 16},
                        strategy={"j": "online", "d": "whole", "e": "whole"}, stages={"sum0": {"place": "fuse"}},
                        num_warps=8, num_stages=2)
    k = dt.compile(attention, fused)
    note = "fused online schedule (given)"
    impls = [("dtriton fused", lambda: k(Q, Kt, Vt, 0.088), fused.to_json(), note)]
    if budget > 0 and not DRY:
        # the heuristic's default for attention is the fused online schedule; explore its tiles and launch options
        space = dt.Space(tile={"i": [64, 128], "j": [32, 64, 128]}, num_warps=[4, 8], num_stages=[2, 3, 4])
        try:
            res = dt.explore(attention, (Q, Kt, Vt, 0.088), space=space, budget=max(6 * budget, 20), progress=False, top_k=2,
                             timing="warm")
            print(res.summary(top=5), flush=True)
            for r in res.table[:6]:
                print("   ", r["status"], r["reason"][:300], flush=True)
            ke = dt.compile(attention, res.best)
            impls.append(("dtriton explored", lambda: ke(Q, Kt, Vt, 0.088), res.best.to_json(),
                          f"explore({max(6 * budget, 20):.0f}s, {len(res.table)} cand.)"))
        except Exception as e:  # noqa: BLE001
            print(f"attention explore failed: {type(e).__name__}: {e}", flush=True)
    flops = 4 * shape[0] * shape[1] * shape[2] * shape[2] * shape[3]
    bench_impls("attention", "fp16 B4 H32 S=T=4096 D128", "TFLOP/s", flops / 1e6,
                impls + [("torch sdpa", lambda: F.scaled_dot_product_attention(Q, Kt, Vt, scale=0.088), None, "")], ref)


def run_overhead():
    import triton
    import triton.language as tl

    @triton.jit
    def raw_add_one(X, Y, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < N
        tl.store(Y + offs, tl.load(X + offs, mask=m) + 1.0, mask=m)

    x = torch.randn(1000, device=DEV)
    k = dt.compile(add_one, dt.Schedule(tile={"i": 1024}, grid=("i",)))

    def raw():
        y = torch.empty_like(x)
        raw_add_one[(1,)](x, y, 1000, BLOCK=1024)
        return y
    # host time is noisy (a 22.6 us raw launch in one run, 16.2 us in another): warm both paths up
    # together, then take the best of 15 runs of 50 calls for each
    global CALL_REPEATS
    for _ in range(3):
        call_time_us(raw)
        call_time_us(lambda: k(x))
    CALL_REPEATS = 15
    bench_impls("overhead", "add_one N=1000 (per call)", "TB/s", 8000 / 1e6,
                [("raw triton", raw, None, "hand-written kernel, launch via JITFunction"),
                 ("dtriton", lambda: k(x), '{"grid": ["i"], "tile": {"i": 1024}}', "")], x + 1)
    CALL_REPEATS = 3


# ---------------------------------------------------------------------------------------------
def fmt_err(e) -> str:
    return "" if e is None else f"{e:.1e}"


def merged_rows() -> list[dict]:
    """This run's rows, in the place of an earlier run's rows of the same (group, case, impl)."""
    if not OLD_ROWS:
        return ROWS
    new: dict[tuple, list[dict]] = {}
    for r in ROWS:
        new.setdefault((r["group"], r["case"], r["impl"]), []).append(r)
    out, done = [], set()
    for r in OLD_ROWS:
        k = (r["group"], r["case"], r["impl"])
        if k in new:
            if k not in done:
                out.extend(new[k])
                done.add(k)
        else:
            out.append(r)
    out.extend(r for k, rs in new.items() if k not in done for r in rs)
    return out


def write_results(out_dir, meta, plot=True):
    os.makedirs(out_dir, exist_ok=True)
    global ROWS
    mine, ROWS = ROWS, merged_rows()
    try:
        _write_results(out_dir, meta, plot)
    finally:
        ROWS = mine


def _write_results(out_dir, meta, plot=True):
    with open(os.path.join(out_dir, "h200.json"), "w") as f:
        json.dump({"meta": meta, "rows": ROWS}, f, indent=1, default=str)
    lines = [f"# dtriton benchmark — {meta['gpu']}", "",
             f"{meta['date']}; torch {meta['torch']}, triton {meta['triton']}; kernel = CUDA-graph replay, "
             "call = plain Python call (host overhead visible). Rate from kernel time."
             + (f" Merged with an earlier run ({meta['appended_to']})." if meta.get("appended_to") else "")
             + (f" Started {meta['started']}; {meta['isolated']}." if meta.get("isolated") else ""), "",
             "| group | case | impl | kernel µs | call µs | rate | vs torch (kernel) | rel err | schedule / note |",
             "|---|---|---|---:|---:|---:|---:|---:|---|"]
    base = {}
    for r in ROWS:
        if r["impl"] in ("torch.matmul", "torch", "torch eager", "torch sdpa", "raw triton"):
            base[(r["group"], r["case"])] = r["kernel_us"]
    for r in ROWS:
        b = base.get((r["group"], r["case"]))
        ratio = f"{b / r['kernel_us']:.2f}×" if b and r["kernel_us"] == r["kernel_us"] and r["kernel_us"] else ""
        sn = (r["schedule"] or "") + (" — " + r["note"] if r["note"] else "")
        lines.append(f"| {r['group']} | {r['case']} | {r['impl']} | {r['kernel_us']} | {r['call_us']} | {r['rate']} {r['unit']} "
                     f"| {ratio} | {fmt_err(r['err'])} | {sn.replace('|', '/')} |")
    with open(os.path.join(out_dir, "h200.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if not plot:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        groups = sorted({r["group"] for r in ROWS if r["group"] not in ("ceiling",)})
        if not groups:
            return
        fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 4))
        axes = [axes] if len(groups) == 1 else axes
        for ax, g in zip(axes, groups):
            rs = [r for r in ROWS if r["group"] == g]
            cases = list(dict.fromkeys(r["case"] for r in rs))
            impls = list(dict.fromkeys(r["impl"] for r in rs))
            for n, im in enumerate(impls):
                vals = [next((r["rate"] for r in rs if r["case"] == c and r["impl"] == im), float("nan")) for c in cases]
                ax.bar([i + n * 0.8 / len(impls) for i in range(len(cases))], vals, width=0.8 / len(impls), label=im)
            ax.set_xticks(range(len(cases)))
            ax.set_xticklabels(cases, rotation=70, fontsize=6)
            ax.set_title(g)
            ax.set_ylabel(rs[0]["unit"])
            ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "h200.png"), dpi=110)
    except Exception:  # noqa: BLE001
        traceback.print_exc()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=4.0, help="exploration seconds per row (0: heuristic)")
    ap.add_argument("--matmul-budget", type=float, default=None,
                    help="exploration seconds per matmul row (default: --budget); the space has TMA and warp specialisation")
    ap.add_argument("--only", default="ceiling,overhead,matmul,softmax,norm,diffusion,attention")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile baselines")
    ap.add_argument("--cases", default="", help="comma-separated substrings: only matmul/softmax/diffusion cases whose name has one")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--append", default="",
                    help="an earlier h200.json: keep its rows of the groups not re-run here (a second device call)")
    ap.add_argument("--isolate", action="store_true",
                    help="run each group in a process of its own, merging rows into one results file, so a CUDA fault "
                         "in one group (it ends the process's CUDA context) leaves the other groups' rows")
    ap.add_argument("--part-of-call", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dry-run", action="store_true",
                    help="check the script on the CPU interpreter with tiny shapes (no GPU, timings meaningless)")
    a = ap.parse_args(argv)
    if a.isolate:
        return run_isolated(a, list(sys.argv[1:] if argv is None else argv))
    global DEV, DRY, OUT_META, CASES
    CASES = [c for c in a.cases.split(",") if c]
    if a.dry_run:
        DEV, DRY = "cpu", True
        a.budget = 0
        a.only = ",".join(g for g in a.only.split(",") if g not in ("ceiling", "overhead"))
    torch.manual_seed(0)
    meta = dict(gpu=torch.cuda.get_device_name() if not DRY else "cpu (dry run: interpreter, tiny shapes)", torch=torch.__version__, triton=__import__("triton").__version__,
                date=_dt.datetime.now().isoformat(timespec="seconds"), budget_s=a.budget)
    print(f"# {meta}", flush=True)
    OUT_META = (a.out, meta)
    groups = a.only.split(",")
    if a.append:
        with open(a.append) as f:
            old = json.load(f)
        OLD_ROWS.extend(old["rows"])
        meta["appended_to"] = (f"{old['meta'].get('date')}: rows re-run here (same group, case and impl) replace "
                               f"that run's; the others are kept")
        meta["started"] = old["meta"].get("started", old["meta"].get("date"))
    if a.part_of_call:
        meta.pop("appended_to", None)
        meta["isolated"] = "each group ran in a process of its own within one call (--isolate)"
        meta.setdefault("started", meta["date"])   # the first group's process has no earlier file
    fns = {"ceiling": lambda: ceilings(), "overhead": run_overhead,
           "matmul": lambda: run_matmul(a.budget if a.matmul_budget is None or DRY else a.matmul_budget, not a.no_compile),
           "softmax": lambda: run_softmax(a.budget, not a.no_compile),
           "norm": lambda: run_norms(a.budget, not a.no_compile),
           "diffusion": lambda: run_diffusion(a.budget, not a.no_compile),
           "attention": lambda: run_attention(a.budget, not a.no_compile)}
    t0 = time.time()
    for g in groups:
        print(f"== {g} ({time.time() - t0:.0f}s)", flush=True)
        try:
            fns[g]()
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        write_results(a.out, meta)
    print_table(ROWS)


def print_table(rows) -> None:
    """The compact table printed last: kernel and call µs and the rate of every row."""
    print(f"\n{'group':9s} {'case':30s} {'impl':16s} {'kernel us':>10s} {'call us':>10s} {'rate':>9s}")
    for r in rows:
        print(f"{r['group']:9s} {r['case'][:30]:30s} {r['impl'][:16]:16s} {r['kernel_us']:10.1f} {r['call_us']:10.1f} "
              f"{r['rate']:9.3f} {r['unit']}")


def run_isolated(a, argv: list[str]) -> None:
    """``--isolate``: one child process per group, each merging its rows into ``<out>/h200.json``."""
    import subprocess
    keep, skip = [], False
    for x in argv:
        if skip:
            skip = False
            continue
        if x in ("--only", "--append"):
            skip = True
            continue
        if x == "--isolate" or x.startswith(("--only=", "--append=")):
            continue
        keep.append(x)
    path = os.path.join(a.out, "h200.json")
    prev = a.append or None
    groups = [g for g in a.only.split(",") if g and not (a.dry_run and g in ("ceiling", "overhead"))]
    for g in groups:
        cmd = [sys.executable, os.path.abspath(__file__), *keep, "--only", g, "--part-of-call"] + (["--append", prev] if prev else [])
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            print(f"!! group {g}: process exited with {rc}", flush=True)
        if os.path.exists(path):
            prev = path
    if os.path.exists(path):
        with open(path) as f:
            rows = json.load(f)["rows"]
        print_table(rows)


if __name__ == "__main__":
    main()
