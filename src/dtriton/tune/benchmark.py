"""``dt.benchmark`` and ``dtriton bench``: a user's algorithm side by side with what they would otherwise run.

::

    res = dt.benchmark(softmax, (X,))                  # heuristic schedule
    res = dt.benchmark(softmax, (X,), budget=60)       # explore for 60 s first, then time the winner
    res = dt.benchmark(softmax, (X,), baseline=lambda X: torch.softmax(X, -1))   # beside your torch code
    print(res)                                         # a rich table
    res.plot("bench.png")

Rows: the dtriton kernel (the heuristic's schedule, the stored ``"tuned"`` one, a given
:class:`~dtriton.schedule.Schedule`, or the winner of a ``dt.explore`` run); the user's own torch
code when ``baseline=`` gives it, and it under ``torch.compile``; the algorithm's reference
evaluator run eagerly (``alg.reference``: dtriton's interpreter of the index notation in torch,
whose Python overhead makes it much slower than hand-written torch for small sizes, so it is no
measure of "eager PyTorch") and under ``torch.compile``. The "vs" column compares call times with
the baseline when there is one, else with ``alg.reference``. Each row is checked against
``alg.reference`` on float64 copies of the inputs (relative norm error, with
:func:`~dtriton.tune.check.default_tolerance`) and timed:

- **call time**: wall clock of one synchronised call, as a user calls it (host work included):
  the median and the interquartile range of many samples;
- **kernel time** (GPU only): :func:`~dtriton.tune.measure.warm_gpu_time`, GPU time of repeated
  calls with warm caches, the median and its p20-p80 spread.

On the CPU the dtriton kernel runs on Triton's interpreter: its times measure Python, not a GPU,
and the result says so (``res.interpreter``).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..ir import Algorithm
from ..runtime import Kernel, backend_for
from ..schedule import Schedule
from .check import check_outputs, default_tolerance
from .db import device_name
from .explorer import explore
from .measure import warm_gpu_time
from .tuned import TunedKernel

__all__ = ["benchmark", "BenchmarkResult", "BenchRow", "time_calls"]

BASELINE = "baseline"                   # row name prefixes
REFERENCE = "alg.reference"


@dataclass
class BenchRow:
    """One implementation's line of a :class:`BenchmarkResult`.

    ``call_us`` / ``kernel_us``: ``(median, low, high)`` in microseconds (call: quartiles; kernel:
    p20 and p80), ``None`` when not measured. ``rel_err``: relative norm error against float64."""
    name: str
    status: str                      # "ok", "wrong" or "failed"
    call_us: tuple[float, float, float] | None = None
    kernel_us: tuple[float, float, float] | None = None
    rel_err: float | None = None
    note: str = ""


@dataclass
class BenchmarkResult:
    """What :func:`benchmark` measured: ``rows`` (dtriton first), where, and with which schedule."""
    algorithm: str
    shapes: dict[str, int]
    dtypes: list[str]
    device: str
    interpreter: bool
    schedule: str                    # the dtriton kernel's complete schedule, JSON
    schedule_origin: str             # "heuristic", "tuned", "given" or "explored (N s)"
    tolerance: float
    rows: list[BenchRow] = field(default_factory=list)

    def row(self, name_prefix: str) -> BenchRow:
        """The first row whose name starts with ``name_prefix``. Raises ``KeyError`` when none does."""
        for r in self.rows:
            if r.name.startswith(name_prefix):
                return r
        raise KeyError(f"no row named {name_prefix!r}...; rows: {[r.name for r in self.rows]}")

    def table(self):
        """The result as a :class:`rich.table.Table`."""
        from rich.markup import escape
        from rich.table import Table
        where = "Triton interpreter on the CPU: times measure Python, not a GPU" if self.interpreter else self.device
        shapes = ", ".join(f"{k}={v}" for k, v in self.shapes.items())
        gpu = any(r.kernel_us for r in self.rows)
        t = Table(title=f"{self.algorithm} ({shapes}; {', '.join(self.dtypes)})",
                  caption=escape(f"{where}. call: median [IQR] of synchronised calls; "
                                 + ("kernel: GPU time, median [p20-p80]; " if gpu else "")
                                 + f"error: relative norm vs float64 (tolerance {self.tolerance:.0e}). "
                                 f"{REFERENCE}: dtriton's evaluator of the index notation in torch (Python "
                                 "overhead: slower than hand-written torch; compare with baseline=). "
                                 f"dtriton schedule ({self.schedule_origin}): {self.schedule}"))
        ref = self.speed_reference()
        cols = [("implementation", "left"), ("call µs", "right")] + ([("kernel µs", "right")] if gpu else []) + \
            [("vs baseline" if ref and ref.name.startswith(BASELINE) else "vs reference", "right"),
             ("error", "right"), ("check", "left")]
        for col, just in cols:
            t.add_column(col, justify=just, no_wrap=col == "implementation")
        base = ref.call_us[0] if ref else None
        for r in self.rows:
            speed = f"{base / r.call_us[0]:.3g}x" if base and r.call_us else "-"
            if self.interpreter and r.name.startswith("dtriton"):   # Python against torch's C++: no speed-up
                speed = "n/a (interpreter)"
            check = r.status + (f": {r.note}" if r.note else "")
            cells = (r.name, _fmt_spread(r.call_us)) + ((_fmt_spread(r.kernel_us),) if gpu else ()) + \
                (speed, "-" if r.rel_err is None else f"{r.rel_err:.1e}", check)
            t.add_row(*(escape(c) for c in cells))
        return t

    def speed_reference(self) -> BenchRow | None:
        """The row the "vs" column divides by: the baseline (the user's torch code) when timed, else
        ``alg.reference`` run eagerly; ``None`` when neither was timed."""
        for prefix in (BASELINE, REFERENCE):
            r = next((r for r in self.rows if r.name.startswith(prefix) and r.call_us), None)
            if r is not None:
                return r
        return None

    def __str__(self) -> str:
        import io
        from rich.console import Console
        console = Console(width=140, record=True, file=io.StringIO())
        console.print(self.table())
        return console.export_text()

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        return asdict(self)

    def to_json(self) -> str:
        """The result as JSON text."""
        return json.dumps(self.to_dict(), indent=1)

    def plot(self, path: str | Path) -> Path:
        """Save a bar chart of call (and kernel) medians with their spread as a PNG; returns the path.
        Raises ``ImportError`` without matplotlib (``pip install 'dtriton[explore]'``)."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        rows = [r for r in self.rows if r.call_us]
        fig, ax = plt.subplots(figsize=(7, 3.6))
        ys = range(len(rows))
        both = any(r.kernel_us for r in rows)
        for attr, colour, off in (("call_us", "C0", -0.2 if both else 0.0), ("kernel_us", "C1", 0.2)):
            pts = [(y + off, getattr(r, attr)) for y, r in zip(ys, rows) if getattr(r, attr)]
            if pts:
                ax.barh([y for y, _ in pts], [v[0] for _, v in pts], height=0.38 if both else 0.6, color=colour,
                        xerr=[[v[0] - v[1] for _, v in pts], [v[2] - v[0] for _, v in pts]],
                        label=attr.replace("_us", " time"))
        ax.set_yticks(list(ys), [r.name for r in rows])
        ax.invert_yaxis()   # dtriton on top, as in the table
        ax.set_xscale("log")
        ax.set_xlabel("µs (median; bars: spread)" + (", Triton interpreter on CPU" if self.interpreter else ""))
        ax.set_title(f"{self.algorithm}: {', '.join(f'{k}={v}' for k, v in self.shapes.items())}", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path


def _fmt_spread(v: tuple[float, float, float] | None) -> str:
    if v is None:
        return "-"
    med, lo, hi = v

    def f(x):
        return f"{x:,.0f}" if x >= 100 else (f"{x:.1f}" if x >= 10 else f"{x:.2f}")
    return f"{f(med)} [{f(lo)}-{f(hi)}]"


def time_calls(fn: Callable[[], Any], cuda: bool, min_calls: int = 5, seconds: float = 1.0,
               max_calls: int = 1000) -> tuple[float, float, float]:
    """Wall clock of synchronised calls of ``fn``: ``(median, q1, q3)`` in microseconds.

    One warm-up call (it compiles), then at least ``min_calls`` samples, more until ``seconds``
    have passed (at most ``max_calls``). On CUDA each sample ends with ``torch.cuda.synchronize``."""
    fn()
    if cuda:
        torch.cuda.synchronize()
    ts: list[float] = []
    start = time.perf_counter()
    while len(ts) < min_calls or (time.perf_counter() - start < seconds and len(ts) < max_calls):
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e6)
    if len(ts) < 2:
        return ts[0], ts[0], ts[0]
    q1, med, q3 = statistics.quantiles(ts, n=4, method="inclusive")
    return med, q1, q3


def _as_tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def _measure(name: str, fn: Callable[[], Any], ref64: Sequence[torch.Tensor], tol: float, cuda: bool,
             seconds: float) -> BenchRow:
    """Check one implementation against float64, then time it (a failure is a row, not an exception)."""
    try:
        got = _as_tuple(fn())
    except Exception as e:  # noqa: BLE001 - torch.compile or a schedule may fail: report it
        return BenchRow(name, "failed", note=f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
    ok, err, reason = check_outputs(got, ref64, tol)
    row = BenchRow(name, "ok" if ok else "wrong", rel_err=None if math.isinf(err) else err, note=reason)
    row.call_us = time_calls(fn, cuda, seconds=seconds)
    if cuda:
        med, p20, p80 = warm_gpu_time(fn)
        row.kernel_us = (med * 1e3, p20 * 1e3, p80 * 1e3)
    return row


def _compiled(fn: Callable) -> Callable:
    """``torch.compile(fn)``, or a function raising its error (so that it becomes a "failed" row)."""
    try:
        return torch.compile(fn)
    except Exception as e:  # noqa: BLE001 - reported as the row's failure
        def fail(*_):
            raise e
        return fail


def _dtriton_kernel(alg: Algorithm, args: tuple, schedule, budget: float | None, db, progress: bool):
    """(kernel, origin) of the dtriton row."""
    if budget:
        if isinstance(schedule, (Schedule, str)):
            raise ValueError("benchmark: give budget= (explore, then time the winner) or schedule=, not both")
        res = explore(alg, args, budget=budget, db=db, progress=progress)
        if res.best is None:
            raise ValueError(f"benchmark: exploring {alg.name} for {budget} s found no passing schedule; "
                             "see dt.explore(...).summary()")
        return Kernel(alg, res.best), f"explored ({budget:g} s)"
    if schedule == "tuned":
        k = TunedKernel(alg, db)
        return k, k.origin_for(*args)
    if schedule is None or isinstance(schedule, Schedule):
        return Kernel(alg, schedule), "heuristic" if schedule is None else "given"
    raise TypeError(f"benchmark: schedule must be a dt.Schedule, None or 'tuned', got {schedule!r}")


def benchmark(alg: Algorithm, args: Sequence[Any], *, schedule: Schedule | str | None = None,
              budget: float | None = None, compile: bool = True, seconds: float = 1.0,  # noqa: A002
              db=None, progress: bool = True, baseline: Callable | None = None) -> BenchmarkResult:
    """Time ``alg`` as a dtriton kernel beside your torch code, ``alg.reference`` and ``torch.compile``.

    Args:
        alg: an ``@dt.algorithm``. args: its arguments (tensors on one device, scalars).
        schedule: the dtriton kernel's schedule: a :class:`Schedule`, ``None`` (the heuristic) or
            ``"tuned"`` (the tuning database's best for these shapes, else the heuristic).
        budget: seconds of ``dt.explore`` before timing; the winner is timed (and stored).
        compile: also time ``torch.compile`` of the baseline and of ``alg.reference`` (each first
            call compiles: ~10 s on a CPU).
        baseline: your own torch implementation, called as ``baseline(*args)`` and returning what
            ``alg`` returns (a tensor or a tuple of them): its own row (``"baseline (NAME)"``),
            checked against float64 like the others, and the row the "vs" column compares with.
        seconds: wall-clock time spent sampling each implementation's call time.
        db: tuning database (path or ``TuningDB``) for ``"tuned"`` and ``budget``.
        progress: show exploration's progress bar.

    Returns:
        :class:`BenchmarkResult` (``print(res)`` shows the table, ``res.plot(path)`` a chart).

    Raises:
        TypeError: ``schedule`` of another type, a ``baseline`` that is not callable. ValueError: ``schedule`` with ``budget``, or an
        exploration that found no passing schedule; binding errors of ``alg`` (``dt.ShapeError``).
    """
    args = tuple(args)
    if baseline is not None and not callable(baseline):
        raise TypeError(f"benchmark: baseline must be a callable taking {alg.name}'s arguments, "
                        f"got {type(baseline).__name__}")
    b = alg.bind(args)
    kern, origin = _dtriton_kernel(alg, args, schedule, budget, db, progress)
    dev = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
    cuda = dev.type == "cuda"
    args64 = tuple(a.to(torch.float64) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
    ref64 = _as_tuple(alg.reference(*args64))
    sched = kern.schedule_for(*args)
    tol = default_tolerance(b, sched)
    dtypes = sorted({str(a.dtype).replace("torch.", "") for a in args if isinstance(a, torch.Tensor)})
    res = BenchmarkResult(alg.name, dict(b.sizes), dtypes, device_name(dev), backend_for(dev) == "interpreter",
                          sched.to_json(), origin, tol)
    impls: list[tuple[str, Callable[[], Any]]] = [
        ("dtriton" + (" (interpreter)" if res.interpreter else ""), lambda: kern(*args))]
    fns = [(f"{BASELINE} ({getattr(baseline, '__name__', 'baseline')})", "torch.compile(baseline)", baseline)] \
        if baseline is not None else []
    fns.append((f"{REFERENCE} (eager)", f"torch.compile({REFERENCE})", alg.reference))
    for name, cname, f in fns:
        impls.append((name, lambda f=f: f(*args)))
        if compile:
            impls.append((cname, lambda c=_compiled(f): c(*args)))
    for name, fn in impls:
        res.rows.append(_measure(name, fn, ref64, tol, cuda, seconds))
    return res
