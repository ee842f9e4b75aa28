"""Reductions over several large axes (issue 16), H200: one device call, a table printed last.

    PYTHONPATH=src python3 bench/reductions.py [--budget SECONDS] [--budget-for 'CASE=SECONDS,...']
                                               [--only norm,pool,dims] [--dtypes float32,float16]
                                               [--cases A,B] [--no-compile] [--stages 3,4]
                                               [--variants 'NAME[CASE,...]=JSON;...'] [--profile]
                                               [--out bench/results/reductions] [--dry-run]

Cases (shapes of the issue's marks):

- ``norm``: batch norm (training statistics + normalise) 64x64x512x512, instance norm and group norm
  (8 groups) 16x64x256x256, layer norm over (C, H, W) 16x64x256x256, Frobenius normalisation
  16x64x256x256; fp32 and fp16.
- ``pool``: average and max pooling 2-D, 2x2 windows of stride 2, on 16x64x512x512 (written over the
  block view ``x.view(n, c, h // 2, 2, w // 2, 2)``), and max pooling over 3x3 windows of stride 2
  with padding 1 (overlapping windows, computed indices: ``library.max_pool2d_window``), and average
  pooling over the same windows (``library.avg_pool2d_window``, zero padding counted); fp32 and fp16.
- ``dims``: sum / mean / max over the middle and over the last dim of a 4096x4096x16 fp32 tensor.

Per case: the default schedule (``dt.compile(alg)``, no schedule) is first checked against float64
torch on a smaller check shape (row ``check``), then at the benchmark shape these rows are timed:
``dtriton`` (default schedule), ``dtriton explored`` (``dt.explore`` with ``--budget`` seconds),
``torch`` (eager) and ``torch.compile`` (and with ``--stages 3,4`` the default schedule with that
``num_stages``: reduction loops pipelined; with ``--variants 'h4={"tile": {"h": 4}}'`` a row
``dtriton h4``, the default schedule with those fields merged in, a JSON ``null`` removing a key:
``'s8[frobenius]={"split": {"c": null, "h": 256, "n": 2}}'``; ``NAME[A,B]`` only for cases whose name
contains A or B, e.g. ``batchnorm float32``; a variant equal to the default schedule gives no row).
``--budget-for 'batchnorm=20'``: the exploration budget of cases whose name contains ``batchnorm``
(default ``--budget``); an exploration prints its timed candidates, fastest first, as schedule
changes from the heuristic's. Every timed row is checked against fp32 torch first.
Kernel time is a CUDA-graph replay of 5 calls (``bench/run.py``'s helpers: the same timing and JSON/markdown
rows), median of 5 replays after ``--warm-ms`` (default 50) milliseconds of untimed replays: the first replays
of a freshly captured graph run slower (H200 s7, ``bench/graph_gap.py``), for every implementation. ``% copy``: the rate counting the minimum passes over memory, against the device-to-device
copy rate measured in the same run (row ``ceiling``): norms 2 reads + 1 write of X (statistics, then
normalise; the reduced extent does not fit one program), pooling 1 read of X + 1 write of X/4,
reductions over one dim 1 read of X (the copy rate stands in for the read rate).

Writes ``<out>/h200.json`` and ``<out>/h200.md``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R  # noqa: E402  (timing, checking and result helpers of the suite)
import dtriton as dt  # noqa: E402
from dtriton.library import (avg_pool2d, batch_norm, frobenius_normalize, group_norm, instance_norm,  # noqa: E402
                             layer_norm_chw, max_pool2d, max_pool2d_window, avg_pool2d_window)

F = torch.nn.functional
COPY_TBS: list[float] = []   # the copy rate of this run (TB/s), once measured
STAGES: list[int] = []       # --stages: extra rows, the default schedule with these num_stages
PROFILE: list[bool] = [False]  # --profile: per-kernel device times in the notes of dtriton rows
VARIANTS: dict[str, tuple[list[str], dict]] = {}  # --variants: name -> (case filters, fields merged into the default)
BUDGETS: dict[str, float] = {}  # --budget-for: case substring -> exploration seconds


@dt.algorithm
def sum_mid(X: dt.Tensor["A", "B", "C"]):
    i, j, k = dt.axes("i j k")
    return dt.sum(X[i, j, k], over=j)[i, k]


@dt.algorithm
def mean_mid(X: dt.Tensor["A", "B", "C"]):
    i, j, k = dt.axes("i j k")
    return dt.mean(X[i, j, k], over=j)[i, k]


@dt.algorithm
def max_mid(X: dt.Tensor["A", "B", "C"]):
    i, j, k = dt.axes("i j k")
    return dt.max(X[i, j, k], over=j)[i, k]


@dt.algorithm
def sum_last(X: dt.Tensor["A", "B", "C"]):
    i, j, k = dt.axes("i j k")
    return dt.sum(X[i, j, k], over=k)[i, j]


@dt.algorithm
def mean_last(X: dt.Tensor["A", "B", "C"]):
    i, j, k = dt.axes("i j k")
    return dt.mean(X[i, j, k], over=k)[i, j]


@dt.algorithm
def max_last(X: dt.Tensor["A", "B", "C"]):
    i, j, k = dt.axes("i j k")
    return dt.max(X[i, j, k], over=k)[i, j]


def _bn(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True, eps=1e-5)


#: name -> (algorithm, shape, check shape, dry shape, torch eager (X, *params) -> out, dtriton args from X,
#:          minimum bytes as a multiple of X's bytes)
NORMS = {
    "batchnorm": (batch_norm, (64, 64, 512, 512), (4, 8, 30, 33), (3, 4, 5, 7), _bn,
                  lambda x: (x, torch.randn(x.shape[1], device=x.device, dtype=x.dtype),
                             torch.randn(x.shape[1], device=x.device, dtype=x.dtype)), 3),
    "instancenorm": (instance_norm, (16, 64, 256, 256), (2, 8, 61, 67), (2, 3, 5, 7),
                     lambda x: F.instance_norm(x, eps=1e-5), lambda x: (x,), 3),
    "groupnorm8": (group_norm, (16, 64, 256, 256), (2, 16, 31, 33), (2, 8, 5, 7),
                   lambda x: F.group_norm(x, 8, eps=1e-5), lambda x: (x.view(x.shape[0], 8, -1, *x.shape[2:]),), 3),
    "layernorm_chw": (layer_norm_chw, (16, 64, 256, 256), (2, 8, 61, 67), (2, 3, 5, 7),
                      lambda x: F.layer_norm(x, x.shape[1:], eps=1e-5), lambda x: (x,), 3),
    "frobenius": (frobenius_normalize, (16, 64, 256, 256), (2, 8, 61, 67), (2, 3, 5, 7),
                  lambda x: x / torch.linalg.vector_norm(x.to(torch.promote_types(x.dtype, torch.float32))).to(x.dtype),
                  lambda x: (x,), 3),
}
def window_args(x, k: int, s: int, p: int):
    """dtriton's arguments for a ``k`` x ``k`` pool of stride ``s``, padding ``p`` of NCHW ``x``:
    ``x`` as (N*C, H, W) images and the window sizes."""
    n, c, h, w = x.shape
    return (x.view(n * c, h, w), k, s, p, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)


#: name -> (algorithm, shape, check shape, dry shape, torch eager (x, *dtriton args after the first) -> out,
#:          dtriton args from x)
POOLS = {
    "avgpool2d": (avg_pool2d, (16, 64, 512, 512), (2, 8, 62, 66), (2, 3, 6, 8), lambda x: F.avg_pool2d(x, 2),
                  lambda x: block_view(x)),
    "maxpool2d": (max_pool2d, (16, 64, 512, 512), (2, 8, 62, 66), (2, 3, 6, 8), lambda x: F.max_pool2d(x, 2),
                  lambda x: block_view(x)),
    "maxpool3x3s2": (max_pool2d_window, (16, 64, 512, 512), (2, 8, 61, 67), (2, 3, 7, 9),
                     lambda x, *_: F.max_pool2d(x, 3, 2, 1), lambda x: window_args(x, 3, 2, 1)),
    "avgpool3x3s2": (avg_pool2d_window, (16, 64, 512, 512), (2, 8, 61, 67), (2, 3, 7, 9),
                     lambda x, *_: F.avg_pool2d(x, 3, 2, 1), lambda x: window_args(x, 3, 2, 1)),
}
DIMS = {
    "sum_mid": (sum_mid, lambda x: x.sum(1)), "mean_mid": (mean_mid, lambda x: x.mean(1)),
    "max_mid": (max_mid, lambda x: x.amax(1)), "sum_last": (sum_last, lambda x: x.sum(2)),
    "mean_last": (mean_last, lambda x: x.mean(2)), "max_last": (max_last, lambda x: x.amax(2)),
}


def block_view(x):
    """``x`` (N, C, H, W) as 2x2 windows: (N, C, H/2, 2, W/2, 2)."""
    n, c, h, w = x.shape
    return (x.view(n, c, h // 2, 2, w // 2, 2),)


def check_default(group, case, alg, make, eager, shape, dtype):
    """The default schedule on the check shape against float64 torch: a row ``check`` (err only)."""
    x = torch.randn(shape, device=R.DEV, dtype=dtype)
    args = make(x)
    try:
        ref = eager(*[a.double() if torch.is_tensor(a) else a for a in (x,) + tuple(args[1:])])
        err = R.relerr(dt.compile(alg)(*args).reshape(ref.shape), ref)
        tol = 2e-2 if dtype == torch.float16 else 1e-4
        note = "ok" if err <= tol else f"WRONG: err above {tol}"
    except Exception as e:  # noqa: BLE001 - recorded as the row's note
        err, note = None, f"failed: {type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}"
    R.add_row(group, case, "check", float("nan"), float("nan"), "TB/s", 0.0, err, None,
              f"default schedule on {'x'.join(map(str, shape))} vs float64: {note}")


def bench_case(group, case, alg, args, eager, eager_args, bytes_, budget, use_compile):
    """Time the default and explored schedules on dtriton's ``args``, torch eager and torch.compile
    on ``eager_args`` (the same tensors)."""
    ref = eager(*[a.float() for a in eager_args])
    impls = []
    try:
        k = dt.compile(alg)
        impls.append(("dtriton", lambda: k(*args), k.schedule_for(*args).to_json(), "default schedule"))
    except Exception as e:  # noqa: BLE001
        R.add_row(group, case, "dtriton", float("nan"), float("nan"), "TB/s", bytes_ / 1e6, None, None,
                  f"failed: {type(e).__name__}: {str(e)[:150]}")
    for n in STAGES:
        try:
            # num_stages >= 3 marks the reduction loops for Triton's pipeliner (tl.range)
            ks = dt.compile(alg, dt.compile(alg).schedule_for(*args).replace(num_stages=n))
            impls.append((f"dtriton stages={n}", lambda ks=ks: ks(*args), ks.schedule_for(*args).to_json(),
                          f"default schedule, num_stages={n}"))
        except Exception as e:  # noqa: BLE001
            R.add_row(group, case, f"dtriton stages={n}", float("nan"), float("nan"), "TB/s", bytes_ / 1e6, None, None,
                      f"failed: {type(e).__name__}: {str(e)[:150]}")
    default = dt.compile(alg).schedule_for(*args)
    for vname, (only, fields) in VARIANTS.items():
        if only and not any(c in case for c in only):
            continue
        try:
            kv = dt.compile(alg, merged(default, fields))
            if kv.schedule_for(*args) == default:
                print(f"    variant {vname}: the default schedule (no row)", flush=True)
                continue
            impls.append((f"dtriton {vname}", lambda kv=kv: kv(*args), kv.schedule_for(*args).to_json(),
                          f"default schedule with {json.dumps(fields, sort_keys=True)}"))
        except Exception as e:  # noqa: BLE001
            R.add_row(group, case, f"dtriton {vname}", float("nan"), float("nan"), "TB/s", bytes_ / 1e6, None, None,
                      f"failed: {type(e).__name__}: {str(e)[:150]}")
    budget = next((s for c, s in BUDGETS.items() if c in case), budget)
    if budget > 0:
        try:
            ke, note = R.tuned_kernel(alg, args, budget)
            impls.append(("dtriton explored", lambda: ke(*args), ke.schedule_for(*args).to_json(), note))
        except Exception as e:  # noqa: BLE001
            R.add_row(group, case, "dtriton explored", float("nan"), float("nan"), "TB/s", bytes_ / 1e6, None, None,
                      f"failed: {type(e).__name__}: {str(e)[:150]}")
    impls.append(("torch", lambda: eager(*eager_args), None, "eager"))
    c = R.maybe_compile(eager, use_compile)
    if c is not None:
        impls.append(("torch.compile", lambda: c(*eager_args), None, ""))
    for name, fn, sched, note in impls:
        try:
            err = R.relerr(fn().reshape(ref.shape), ref)
            if not err <= 2e-2:
                R.add_row(group, case, name, float("nan"), float("nan"), "TB/s", bytes_ / 1e6, err, sched,
                          "WRONG: not timed")
                continue
            # few replays: a call moves up to 13 GB, and the whole run must fit one device call
            us = R.graph_time_us(fn, reps=5, iters=5)
            if PROFILE[0] and name.startswith("dtriton") and not R.DRY:
                note = f"{note}; kernels (us): {kernel_times(fn)}"
            R.add_row(group, case, name, us, R.call_time_us(fn, n=5), "TB/s", bytes_ / 1e6, err, sched, note)
        except Exception as e:  # noqa: BLE001 - recorded, the other rows go on
            R.add_row(group, case, name, float("nan"), float("nan"), "TB/s", bytes_ / 1e6, None, sched,
                      f"failed: {type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}")


def kernel_times(fn, n: int = 5) -> str:
    """The device time per call of each kernel ``fn`` launches (torch.profiler over ``n`` calls), as
    ``name time, ...`` longest first: where a statistics-then-normalise call spends its time."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    evs = sorted(p.key_averages(), key=lambda e: -e.device_time_total)
    return ", ".join(f"{e.key[:40]} {e.device_time_total / n:.1f}" for e in evs[:4] if e.device_time_total > 0)


def merged(sched: dt.Schedule, fields: dict) -> dt.Schedule:
    """``sched`` with ``fields`` (a JSON object of schedule fields) put in: objects (``tile``,
    ``split``, ``stages`` and a stage's fields) merged key by key, other values replaced, a
    ``None`` (JSON ``null``) removing the key."""
    def put(into: dict, new: dict) -> dict:
        for k, v in new.items():
            if v is None:
                into.pop(k, None)
            else:
                into[k] = put(dict(into.get(k) or {}), v) if isinstance(v, dict) else v
        return into
    return dt.Schedule.from_json(json.dumps(put(json.loads(sched.to_json()), fields)))


def ceiling():
    """The device-to-device copy rate (TB/s, read + write bytes) of a 1 GiB fp32 tensor."""
    n = R.S(256 * 1024 ** 2)
    x = torch.randn(n, device=R.DEV)
    y = torch.empty_like(x)
    us = R.graph_time_us(lambda: y.copy_(x), reps=5)
    R.add_row("ceiling", "copy 1 GiB d2d", "torch", us, us, "TB/s", 2 * x.numel() * 4 / 1e6)
    COPY_TBS.append(2 * x.numel() * 4 / 1e6 / us)
    del x, y


def run_norms(dtypes, budget, use_compile):
    for case, (alg, shape, cshape, dshape, eager, make, passes) in NORMS.items():
        for dtype in dtypes:
            name = f"{case} {str(dtype)[6:]}"
            if not R.want(name):
                continue
            check_default("norm", name, alg, make, eager, dshape if R.DRY else cshape, dtype)
            x = torch.randn(dshape if R.DRY else shape, device=R.DEV, dtype=dtype)
            args = make(x)
            eager_args = (x,) + tuple(args[1:])
            bench_case("norm", f"{name} {'x'.join(map(str, x.shape))}", alg, args, eager, eager_args,
                       passes * x.numel() * x.element_size(), budget, use_compile)
            del x, args, eager_args
            torch.cuda.empty_cache() if not R.DRY else None


def run_pools(dtypes, budget, use_compile):
    for case, (alg, shape, cshape, dshape, eager, make) in POOLS.items():
        for dtype in dtypes:
            name = f"{case} {str(dtype)[6:]}"
            if not R.want(name):
                continue
            check_default("pool", name, alg, make, eager, dshape if R.DRY else cshape, dtype)
            x = torch.randn(dshape if R.DRY else shape, device=R.DEV, dtype=dtype)
            bench_case("pool", f"{name} {'x'.join(map(str, x.shape))}", alg, make(x), eager, (x,),
                       1.25 * x.numel() * x.element_size(), budget, use_compile)
            del x


def run_dims(budget, use_compile):
    shape = (3, 37, 5) if R.DRY else (4096, 4096, 16)
    x = torch.randn(shape, device=R.DEV)
    for case, (alg, eager) in DIMS.items():
        if not R.want(case):
            continue
        check_default("dims", case, alg, lambda t: (t,), eager, (5, 11, 3) if R.DRY else (33, 61, 7), torch.float32)
        bench_case("dims", f"{case} fp32 {'x'.join(map(str, shape))}", alg, (x,), eager, (x,),
                   x.numel() * 4, budget, use_compile)


def parse_variants(text: str) -> dict[str, tuple[list[str], dict]]:
    """``--variants``: ``NAME=JSON`` or ``NAME[CASE,...]=JSON``, separated by semicolons, as
    ``{name: (case filters, fields)}``. Raises SystemExit naming a variant whose JSON does not parse."""
    out = {}
    for v in text.split(";"):
        if not v.strip():
            continue
        head, _, js = v.partition("=")
        name, _, only = head.strip().partition("[")
        try:
            out[name.strip()] = ([c.strip() for c in only.rstrip("]").split(",") if c.strip()], json.loads(js))
        except json.JSONDecodeError as e:
            raise SystemExit(f"--variants {name.strip()!r}: {e}") from None
    return out


def print_table(rows) -> None:
    """The table printed last: kernel µs, TB/s, % of the copy rate, ratio to torch eager, error."""
    copy = COPY_TBS[0] if COPY_TBS else float("nan")
    base = {(r["group"], r["case"]): r["kernel_us"] for r in rows if r["impl"] == "torch"}
    print(f"\ncopy rate {copy:.3f} TB/s (row 'ceiling'); % copy counts the minimum passes; kernel us: CUDA-graph replay "
          f"of 5 calls a replay (as bench/chains.py), median of 5 replays, after {R.WARM_MS[0]:g} ms of untimed replays")
    print(f"{'group':6s} {'case':40s} {'impl':17s} {'kernel us':>10s} {'TB/s':>7s} {'% copy':>7s} {'x torch':>8s} "
          f"{'rel err':>8s}  note")
    for r in rows:
        if r["group"] == "ceiling":
            continue
        b = base.get((r["group"], r["case"]))
        ratio = b / r["kernel_us"] if b and r["kernel_us"] == r["kernel_us"] and r["kernel_us"] else float("nan")
        pct = 100 * r["rate"] / copy if r["rate"] == r["rate"] else float("nan")
        err = "" if r["err"] is None else f"{r['err']:.1e}"
        note = r["note"] if r["impl"] == "check" or r["note"].startswith(("WRONG", "failed")) else ""
        if "kernels (us): " in r["note"]:
            note = r["note"].split("kernels (us): ", 1)[1]
        print(f"{r['group']:6s} {r['case'][:40]:40s} {r['impl'][:17]:17s} {r['kernel_us']:10.1f} {r['rate']:7.3f} "
              f"{pct:7.1f} {ratio:8.2f} {err:>8s}  {note[:160]}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=None, help="exploration seconds per case (0: no explored row; "
                    "default 3, 0 with --dry-run, where a budget given is capped at 2 s on the interpreter)")
    ap.add_argument("--budget-for", default="", help="comma-separated CASE=SECONDS: the budget of cases whose name "
                    "contains CASE (e.g. 'batchnorm=20')")
    ap.add_argument("--only", default="norm,pool,dims")
    ap.add_argument("--dtypes", default="float32,float16", help="dtypes of the norm and pool cases")
    ap.add_argument("--cases", default="", help="comma-separated substrings: only cases whose name has one")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    R.add_pdl_options(ap)
    ap.add_argument("--stages", default="", help="comma-separated num_stages: a row each, the default schedule "
                    "with that num_stages (3 or more pipelines the reduction loops)")
    ap.add_argument("--variants", default="", help="semicolon-separated NAME=JSON or NAME[CASE,...]=JSON: a row each "
                    "(only for cases whose name contains a CASE), the default schedule with the JSON's fields merged "
                    "in, null removing a key (e.g. 'h4={\"tile\": {\"h\": 4}};w2[batchnorm]={\"num_warps\": 2}')")
    ap.add_argument("--profile", action="store_true", help="per-kernel device times (torch.profiler) in the notes of "
                    "the dtriton rows")
    ap.add_argument("--warm-ms", type=float, default=50.0, help="milliseconds of untimed CUDA-graph replays before "
                    "each timed row (bench/run.py WARM_MS; 0: none, as before session 7). H200 s7 call 2: a freshly "
                    "captured graph's first replays run slow (batch norm fp16, 1-call graph: median of the first 5 "
                    "replays 1703.8 us, later replays 1519-1529), torch.compile's as dtriton's")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "reductions"))
    ap.add_argument("--dry-run", action="store_true",
                    help="check the script on the CPU interpreter with tiny shapes (no GPU, timings meaningless)")
    a = ap.parse_args(argv)
    R.apply_pdl_options(a)
    R.CASES[:] = [c for c in a.cases.split(",") if c]
    STAGES[:] = [int(n) for n in a.stages.split(",") if n]
    PROFILE[0] = a.profile
    R.WARM_MS[0] = a.warm_ms
    VARIANTS.clear()
    VARIANTS.update(parse_variants(a.variants))
    BUDGETS.clear()
    BUDGETS.update({c.split("=", 1)[0].strip(): float(c.split("=", 1)[1]) for c in a.budget_for.split(",") if c.strip()})
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
        a.budget = 0.0 if a.budget is None else min(a.budget, 2.0)   # exploring on the interpreter: the code path only
        BUDGETS.update({c: min(s, 2.0) for c, s in BUDGETS.items()})
    elif a.budget is None:
        a.budget = 3.0
    torch.manual_seed(0)
    meta = dict(gpu=torch.cuda.get_device_name() if not R.DRY else "cpu (dry run: interpreter, tiny shapes)",
                torch=torch.__version__, triton=__import__("triton").__version__,
                date=_dt.datetime.now().isoformat(timespec="seconds"), budget_s=a.budget, budget_for=a.budget_for,
                script="bench/reductions.py",
                timing=f"CUDA-graph replay of 5 calls, median of 5 replays, after {a.warm_ms:g} ms of untimed replays")
    print(f"# {meta}", flush=True)
    R.OUT_META = (a.out, meta)
    dtypes = [getattr(torch, d) for d in a.dtypes.split(",") if d]
    fns = {"norm": lambda: run_norms(dtypes, a.budget, not a.no_compile),
           "pool": lambda: run_pools(dtypes, a.budget, not a.no_compile),
           "dims": lambda: run_dims(a.budget, not a.no_compile)}
    t0 = time.time()
    ceiling()
    for g in a.only.split(","):
        print(f"== {g} ({time.time() - t0:.0f}s)", flush=True)
        try:
            fns[g]()
        except Exception:  # noqa: BLE001 - the other groups still run
            traceback.print_exc()
    R.write_results(a.out, meta, plot=False)
    print(f"\n{time.time() - t0:.0f}s in all")
    print_table(R.ROWS)


if __name__ == "__main__":
    main()
