"""Measurement: safe working copies of a call's inputs, checked first runs, timing, parallel compiles.

:class:`Bench` keeps pristine and working copies of the inputs (candidates never see the caller's
tensors), computes the reference, poisons outputs with NaN, restores inputs before every run and
times calls (``triton.testing.do_bench``, L2 flushed, or :func:`warm_gpu_time`, L2 warm).
:func:`run_parallel` compiles and checks candidates on daemon worker threads with a timeout and a
deadline; :func:`drain_workers` waits for threads left running past the budget.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from typing import Any, Callable, Mapping, Sequence

import torch

from ..backends import default_backend
from ..errors import ShapeError
from ..ir import Algorithm, sum_of_products, walk
from .check import CHECK_CHUNK, check_outputs

__all__ = ["Bench", "sleep_cycles_per_ms", "warm_gpu_time", "run_parallel", "drain_workers", "reference_peak", "first_line",
           "workers_for_memory"]


def _clone(a, device=None):
    """A detached copy of a tensor argument (on ``device`` when given); other arguments as they are."""
    if isinstance(a, torch.Tensor):
        t = a.detach()
        if device is not None and t.device != device:
            return t.to(device, copy=True)
        return t.clone()
    return a


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal element by element, NaN equal to NaN (compared :data:`~dtriton.tune.check.CHECK_CHUNK`
    elements at a time: no masks the size of a large input)."""
    if a.dtype.is_floating_point and a.shape == b.shape:
        fa, fb = a.reshape(-1), b.reshape(-1)
        for lo in range(0, fa.numel(), CHECK_CHUNK):
            x, y = fa[lo:lo + CHECK_CHUNK], fb[lo:lo + CHECK_CHUNK]
            if not bool(((x == y) | (torch.isnan(x) & torch.isnan(y))).all()):
                return False
        return True
    return bool(torch.equal(a, b))


def first_line(e: BaseException) -> str:
    """``"TypeName: first line of the message"`` (at most 300 characters of it)."""
    s = str(e).strip()
    return f"{type(e).__name__}: {s.splitlines()[0][:300] if s else ''}"


def workers_for_memory(free_bytes: int | None, in_bytes: int, out_bytes: int, most: int) -> int:
    """How many candidates may compile, check and time at once (at least 1, at most ``most``): each
    holds two copies of the inputs (``in_bytes`` in all: pristine and working) and three of the
    outputs (``out_bytes``: the reference, the poisoned ``out=`` of its check, the output of a timed
    call), and they may use half of ``free_bytes`` (the device's free memory; ``None``: unknown, no
    limit). Batch norm of 64x64x512x512 fp16 (2 GB in, 2 GB out) on an H200 with ~120 GB free: 6."""
    if free_bytes is None:
        return max(1, most)
    each = 2 * in_bytes + 3 * out_bytes
    return max(1, min(most, int(free_bytes * 0.5 // max(each, 1))))


def reference_peak(alg: Algorithm, sizes: Mapping[str, int]) -> int:
    """Elements of the largest tensor :meth:`Algorithm.reference` builds: every node it evaluates
    holds its free axes; a sum of a product is one ``einsum`` (its factors, then pairwise
    contractions left to right keeping the axes still needed), never the broadcast product."""
    def size(axes) -> int:
        return math.prod(sizes[a] for a in axes)
    peak = 1
    for n in walk([o.expr for o in alg.outputs], children=lambda n: sum_of_products(n) or n.children()):
        peak = max(peak, size(set(n.axes)))
        fs = sum_of_products(n)
        if fs:
            cur = set(fs[0].axes)
            for k, f in enumerate(fs[1:], 1):
                later = set(n.axes).union(*(set(g.axes) for g in fs[k + 1:]))
                cur = (cur | set(f.axes)) & later
                peak = max(peak, size(cur))
    return peak


class Bench:
    """Pristine and working copies of the inputs, the reference, poisoned outputs, timing."""

    def __init__(self, alg: Algorithm, args: tuple, out, interpret: bool, warmup_ms: float, rep_ms: float,
                 timing: str = "cold"):
        self.alg = alg
        self.timing = timing
        b0 = alg.bind(args)
        dev = b0.device
        if interpret and dev.type != "cpu":
            dev = torch.device("cpu")  # the interpreter reads host memory; work on host copies
        self.device = dev
        self.interpret = interpret
        self.warmup_ms, self.rep_ms = warmup_ms, rep_ms
        self.pristine = tuple(_clone(a, dev) for a in args)
        self.work = tuple(_clone(a, dev) for a in args)
        self.b = alg.bind(self.work)
        # in-place calls: out= tensors that are (views of) input arguments
        self.alias: dict[int, int] = {}
        if out is not None:
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if len(outs) != len(alg.outputs):
                raise ShapeError(f"out= gives {len(outs)} tensors; {alg.name} has {len(alg.outputs)} outputs")
            for k, o in enumerate(outs):
                for p, a in enumerate(args):
                    if isinstance(a, torch.Tensor) and isinstance(o, torch.Tensor) and (
                            o is a or (o.data_ptr() == a.data_ptr() and o.shape == a.shape and o.stride() == a.stride())):
                        self.alias[k] = p
        self.shapes = [tuple(self.b.axis_sizes[a] for a in o.layout) for o in alg.outputs]
        self.refs: tuple[torch.Tensor, ...] | None = None
        self.warmed = False

    def reference_feasible(self) -> bool:
        """Whether the eager reference's largest intermediate fits comfortably in memory."""
        fp64 = any(d == torch.float64 for d in self.b.dtypes.values())
        need = reference_peak(self.alg, self.b.axis_sizes) * (8 if fp64 else 4) * 3
        if self.device.type == "cuda":
            try:
                free, _ = torch.cuda.mem_get_info(self.device)
            except Exception:  # pragma: no cover
                return True
            return need <= free * 0.6
        return need <= 8 << 30

    def compute_reference(self):
        """The eager reference outputs of the pristine inputs, in ``refs``."""
        clones = tuple(_clone(a) for a in self.pristine)
        r = self.alg.reference(*clones)
        self.refs = r if isinstance(r, tuple) else (r,)

    def outs_for(self, work, poison=True) -> list[torch.Tensor]:
        """``out=`` tensors for a run on ``work``: the aliased input for an in-place output, else
        a fresh tensor (filled with NaN, or -1 for integer outputs, when ``poison``)."""
        outs = []
        for k, (shape, dt) in enumerate(zip(self.shapes, self.b.out_dtypes)):
            if k in self.alias:
                outs.append(work[self.alias[k]])
            elif poison:
                # NaN where a float can hold it; -1 for integer outputs (arg-reductions: never an index)
                outs.append(torch.full(shape, float("nan") if dt.is_floating_point else -1, dtype=dt, device=self.device))
            else:
                outs.append(torch.empty(shape, dtype=dt, device=self.device))
        return outs

    def restore(self, work=None):
        """Copy the pristine inputs back into ``work`` (default: the working copies)."""
        for w, p in zip(self.work if work is None else work, self.pristine):
            if isinstance(w, torch.Tensor):
                w.copy_(p)

    def private(self):
        """Fresh private copies of the pristine inputs (for a worker thread)."""
        return tuple(_clone(a) for a in self.pristine)

    def changed_input(self, work) -> str | None:
        """The name of an input in ``work`` that differs from its pristine copy (in-place outputs
        excepted), or ``None``."""
        aliased = set(self.alias.values())
        for k, (w, p, prm) in enumerate(zip(work, self.pristine, self.alg.params)):
            if k in aliased or not isinstance(w, torch.Tensor):
                continue
            if not _same(w, p):
                return prm.name
        return None

    def sync(self):
        """Wait for the GPU (nothing on the CPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run_check(self, kern, tol: float, private: bool) -> dict:
        """First run (compiles) on poisoned outputs; check inputs and outputs."""
        work = self.private() if private else self.work
        if not private:
            self.restore()
        outs = self.outs_for(work, poison=True)
        t = time.perf_counter()
        try:
            if self.device.type == "cuda":
                with torch.cuda.device(self.device):
                    res = kern(*work, out=outs if len(outs) > 1 else outs[0])
                    self.sync()
            else:
                res = kern(*work, out=outs if len(outs) > 1 else outs[0])
        except Exception as e:  # noqa: BLE001 - any failure of a candidate is recorded
            return {"status": "failed", "reason": first_line(e), "compile_s": time.perf_counter() - t}
        compile_s = time.perf_counter() - t
        res = res if isinstance(res, tuple) else (res,)
        changed = self.changed_input(work)
        if changed is not None:
            return {"status": "wrong", "reason": f"modified input {changed!r}", "compile_s": compile_s}
        ok, err, reason = check_outputs(res, self.refs, tol)
        return {"status": "ok" if ok else "wrong", "reason": reason, "rel_err": err, "compile_s": compile_s}

    def measure(self, kern, rep_ms: float | None = None) -> tuple[float, float, float]:
        """(median, p20, p80) in µs of one call on the working copies.

        Calls are timed as a user makes them, without ``out=`` (the runtime's fast launch path
        for repeated signatures is taken only then; output allocation is part of a real call)."""
        self.restore()
        work = self.work
        if self.interpret:  # one wall-clock sample: meaningless anyway, and the interpreter is slow
            t = time.perf_counter()
            kern(*work)
            us = (time.perf_counter() - t) * 1e6
            return us, us, us
        with torch.cuda.device(self.device):
            if not self.warmed:  # bring the clocks up before the first measurement (the baseline)
                t = time.perf_counter()
                while time.perf_counter() - t < 0.3:
                    for _ in range(8):
                        kern(*work)
                    self.sync()
                self.warmed = True
            if self.timing == "warm":
                med, p20, p80 = warm_gpu_time(lambda: kern(*work), self.warmup_ms, rep_ms or self.rep_ms)
            else:
                med, p20, p80 = default_backend().bench(lambda: kern(*work), self.warmup_ms, rep_ms or self.rep_ms)
        self.restore()
        return med * 1e3, p20 * 1e3, p80 * 1e3


def sleep_cycles_per_ms() -> float:
    """Cycles of ``torch.cuda._sleep`` a millisecond takes now. Measured at each use: the rate follows
    the SM clock, which an idle GPU holds low (the H200 at 345 MHz before work, about 1980 under load;
    a rate measured idle made the spins about 6 times too short once the clock rose, so the host's
    launch gaps showed in the times: s12, a Gluon kernel's 35 us read as its 109 us host time)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(5_000_000)   # (a spin first: the clock rises under it)
    a.record()
    torch.cuda._sleep(1_000_000)
    b.record()
    b.synchronize()
    return 1_000_000 / max(a.elapsed_time(b), 1e-3)


def warm_gpu_time(fn: Callable[[], Any], warmup_ms: float = 10.0, rep_ms: float = 50.0) -> tuple[float, float, float]:
    """(median, p20, p80) GPU time of ``fn`` in ms with a warm L2 cache and no host launch gaps.

    Before each timed call the GPU spins (``torch.cuda._sleep``) for longer than the host takes
    to issue the call, so the CUDA events around the call see only GPU work: the kernel time a
    CUDA-graph replay of repeated calls shows (the benchmark suite's "kernel" column), without
    the capture. ``triton.testing.do_bench`` instead flushes L2 before every call (a cold cache).
    The spin's rate is measured after the warm-up (:func:`sleep_cycles_per_ms`: the clock is up)."""
    torch.cuda.synchronize()
    end = time.perf_counter() + warmup_ms / 1e3
    while time.perf_counter() < end:
        fn()
    rate = sleep_cycles_per_ms()
    t = time.perf_counter()
    for _ in range(5):
        fn()
    host_ms = (time.perf_counter() - t) * 1e3 / 5
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int((3 * host_ms * 5 + 0.02) * rate))   # GPU time, not launch gaps
    a.record()
    for _ in range(5):
        fn()
    b.record()
    b.synchronize()
    est = max(a.elapsed_time(b) / 5, 1e-4)
    # each sample times ``per`` back-to-back calls (up to 10 for kernels under 50 us), so the fixed
    # cost of an event pair and a kernel start after the sleep is shared. Session-4 H200
    # diagnostic (bench/results/diag_explore_timing_*.log), 1024^3 matmuls: one call per sample
    # read 8.5-8.9 us against 5.8-6.3 us in a CUDA graph, and noise of that size ranked a pointer
    # schedule over the faster TMA one; grouped, 6.7-7.1 us
    per = max(1, min(10, int(0.05 / est)))
    sleep_ms = 3 * host_ms * per + 0.02   # (3x: the clock may still rise during the samples)
    n = max(10, min(1000, int(rep_ms / (est * per + sleep_ms))))   # about rep_ms of GPU time in all
    got = _spun_samples(fn, n, per, int(sleep_ms * rate))
    if got[0] >= 0.8 * host_ms:   # as long as the host's issue time: maybe its gaps; once more, 4x the spin
        got = min(got, _spun_samples(fn, n, per, int(4 * sleep_ms * rate)))
    return got


def _spun_samples(fn: Callable[[], Any], n: int, per: int, cycles: int) -> tuple[float, float, float]:
    """(median, p20, p80) in ms of ``n`` samples of ``per`` back-to-back calls of ``fn``, each sample
    after a GPU spin of ``cycles`` (:func:`warm_gpu_time`)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        torch.cuda._sleep(cycles)
        starts[i].record()
        for _ in range(per):
            fn()
        ends[i].record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) / per for s, e in zip(starts, ends))
    return ts[len(ts) // 2], ts[len(ts) // 5], ts[(4 * len(ts)) // 5]


_WORKERS: list[threading.Thread] = []   # compile/check threads started by run_parallel


def drain_workers(timeout: float) -> int:
    """Wait up to ``timeout`` seconds for compile/check threads left running past the budget, so
    none of them launches GPU work after :func:`explore` returns (a kernel launched from such a
    thread during a user's CUDA-graph capture invalidates the capture). Returns how many are
    still running."""
    end = time.perf_counter() + timeout
    for th in list(_WORKERS):
        th.join(max(0.0, end - time.perf_counter()))
    _WORKERS[:] = [t for t in _WORKERS if t.is_alive()]
    return len(_WORKERS)


def run_parallel(tasks: Sequence[Callable[[], dict]], workers: int, timeout: float,
                  deadline: float | None = None) -> list[dict]:
    """Run tasks on daemon threads, at most ``workers`` at a time; a task running longer than
    ``timeout`` seconds is reported as a timeout (its thread is abandoned, a fresh one takes over).
    Past ``deadline`` (a ``time.perf_counter`` value) every unfinished task is reported as
    skipped and nothing new starts."""
    n = len(tasks)
    results: list[dict | None] = [None] * n
    starts: dict[int, float] = {}
    done = [False] * n
    q: queue.Queue[int] = queue.Queue()
    for i in range(n):
        q.put(i)
    lock = threading.Lock()

    def worker():
        while True:
            try:
                i = q.get_nowait()
            except queue.Empty:
                return
            with lock:
                starts[i] = time.perf_counter()
            try:
                r = tasks[i]()
            except BaseException as e:  # noqa: BLE001
                r = {"status": "failed", "reason": first_line(e)}
            with lock:
                if results[i] is None:
                    results[i] = r
                done[i] = True

    def spawn():
        th = threading.Thread(target=worker, daemon=True, name="dtriton-compile")
        th.start()
        _WORKERS.append(th)

    for _ in range(max(1, min(workers, n))):
        spawn()
    while True:
        with lock:
            if all(r is not None for r in results):
                break
            now = time.perf_counter()
            if deadline is not None and now > deadline:
                while True:  # start nothing new
                    try:
                        q.get_nowait()
                    except queue.Empty:
                        break
                for i in range(n):
                    if results[i] is None:
                        results[i] = {"status": "skipped", "reason": "the budget ran out while compiling",
                                      "compile_s": now - starts[i] if i in starts else None}
                break
            late = [i for i, s in starts.items() if results[i] is None and not done[i] and now - s > timeout]
            for i in late:
                results[i] = {"status": "timeout", "reason": f"compile took longer than {timeout:g} s",
                              "compile_s": now - starts[i]}
        for _ in late:
            spawn()  # replace the stuck worker
        time.sleep(0.005)
    return results  # type: ignore[return-value]
