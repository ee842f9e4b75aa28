"""The exploration loop: :func:`explore` (``dt.explore``) and the :class:`Explorer` it runs.

Each candidate is a :class:`Candidate` record (one row of :attr:`ExploreResult.table`, as a dict
by :meth:`Candidate.to_dict`). The steps, in order: check the oracle (the eager reference, or the
heuristic schedule's output when the reference would not fit in memory), run the heuristic
baseline and seed the sampler (warm start), search (batches of points: schedule, precheck without
compiling, compile and check in parallel in worker processes, time sequentially), measure the few
best again, then build the result and store it in the tuning database. Candidates run in the
worker processes of :mod:`dtriton.tune.worker` (in this process with ``isolate=False``); work
still running at the end of the budget is abandoned. See :mod:`dtriton.tune` for the whole design.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from typing import Any, Callable, Mapping, Sequence

import torch

from ..errors import DTritonError, ScheduleError
from ..ir import Algorithm
from ..plan.smem import program_fits
from ..runtime import Kernel, backend_for
from ..schedule import Schedule
from .check import Limits, check_resources, default_tolerance
from .db import TuningDB, TuningKey, TuningRecord, TuningWarning, device_name
from .measure import Bench, drain_workers, first_line, run_parallel, workers_for_memory
from .result import ExploreResult
from .samplers import PENALTY, TPE, base_point, make_sampler, warm_start
from .space import Space, derive_fields
from .candidate import Candidate, Options, check_call, params_json, src_hash
from .progress import ExploreProgress
from .worker import WorkerPool, WorkerSpec, WorkerUnavailable, can_isolate, in_worker, start_method_for

__all__ = ["explore", "Explorer", "Candidate", "Options", "src_hash"]

#: a measured candidate counts as an improvement when it beats the best so far by this fraction
MIN_IMPROVEMENT = 0.005


class Explorer:
    """One exploration of ``alg`` for the call ``alg(*args)`` on ``device`` (see :func:`explore`).

    Construction binds the working copies, builds the heuristic baseline, the space (derived when
    ``space`` is ``None``) and the sampler. :func:`explore` then calls :meth:`check_oracle`,
    :meth:`run_baseline`, :meth:`search`, :meth:`remeasure` and :meth:`finish`, in that order.
    Warnings are attributed to :func:`explore`'s caller.
    """

    def __init__(self, alg: Algorithm, args: tuple, device: torch.device, space: Space | None, opts: Options,
                 t_start: float):
        self.interpret = backend_for(device) == "interpreter"
        unstored = opts.store is None and not opts.deterministic   # the default on the interpreter: say so
        self.unstored_default = unstored
        if opts.store is None:   # the default: store GPU explorations (interpreter timings measure Python)
            opts = dataclasses.replace(opts, store=not self.interpret or opts.deterministic)
        self.alg, self.opts, self.t_start = alg, opts, t_start
        self.device_name = device_name(device)
        self.max_trials = opts.max_trials
        if self.interpret:
            warnings.warn(f"exploring {alg.name} on the Triton interpreter: candidates are checked for correctness, "
                          "but their timings measure Python on the CPU and mean nothing for a GPU"
                          + ("; the winner is not stored in the tuning database (pass store=True, or --store to "
                             "`dtriton explore`, to store it)"
                             if unstored else ""),
                          TuningWarning, stacklevel=3)
            if self.max_trials is None:
                # a cap for CPU explorations, whose times mean nothing; with the interpreter's
                # built-in reductions a softmax 64x1000 candidate takes about 0.1 s, so a minute's
                # budget measures dozens (issue 20)
                self.max_trials = 64
        self.factory = opts.candidate_factory or Kernel
        if opts.timing not in ("cold", "warm"):
            raise ValueError(f"timing must be 'cold' or 'warm', got {opts.timing!r}")
        if opts.timing == "warm" and self.interpret:
            warnings.warn("timing='warm' has no effect on the Triton interpreter (it times L2-warm GPU kernels); "
                          "the CPU takes one wall-clock sample per candidate", TuningWarning, stacklevel=3)
        self.bench = Bench(alg, args, opts.out, self.interpret, opts.warmup_ms, opts.rep_ms, opts.timing)
        self.b = self.bench.b
        self.limits = Limits.for_device(self.bench.device)
        db = opts.db
        self.tdb = db if isinstance(db, TuningDB) else (TuningDB(db) if (opts.store or opts.deterministic) else None)
        self.key = TuningKey.for_binding(alg, self.b)
        # the heuristic baseline and the space
        self.heuristic = self.factory(alg, None)
        self.base = self.heuristic.schedule_for(*self.bench.work)
        if space is None:
            space = Space(**derive_fields(alg, self.b, self.base, not self.interpret, self.limits))
        self.space = space
        self.dims = space.dimensions()
        strategy = opts.strategy
        if strategy == "auto":
            strategy = "exhaustive" if space.size <= max(64, self.max_trials or 0) else "tpe"
        self.sampler = make_sampler(strategy, self.dims, opts.seed, stacklevel=4)
        self.patience = opts.patience
        if self.patience is None and self.sampler.name != "exhaustive":
            self.patience = 30
        self.workers = self._compile_workers()
        self.batch = max(1, min(self.workers, space.size))   # no more workers than points to try
        self.stored = self.tdb.trials(self.key, self.b.sizes) if (opts.deterministic and self.tdb is not None) else {}
        self.rows: list[Candidate] = []
        self.by_sched: dict[str, int] = {}   # schedule JSON -> id of the first candidate with it
        self.by_src: dict[str, int] = {}     # src_hash -> id of the first candidate generating it
        self.oracle = "reference"
        self.best_val = math.inf
        self.compiled = 0          # candidates compiled and run (or reused from the database)
        self.since_improve = 0
        self.stale = 0             # points in a row that gave no new candidate to compile
        self.stale_limit = 10 ** 9 if self.sampler.name == "exhaustive" else 500
        self.stop_reason = "budget"
        self.pbar = ExploreProgress(alg.name, opts.budget, enabled=False)
        self.pool: WorkerPool | None = None
        self.isolated = False                # every candidate ran in a worker process (open_pool, _no_pool)
        self.isolation = "in this process"   # where candidates ran, in words (the result's isolation)
        self.remeasure_s = 0.0

    def _compile_workers(self) -> int:
        """Threads (or worker processes) compiling at once: as given, else up to 8 on the GPU, fewer
        when their copies of the call's tensors would not fit half the free GPU memory
        (:func:`~dtriton.tune.measure.workers_for_memory`); 1 on the interpreter."""
        if self.interpret:
            return 1
        n = self.opts.compile_workers
        if n is None:
            bench = self.bench
            in_bytes = sum(a.numel() * a.element_size() for a in bench.pristine if isinstance(a, torch.Tensor))
            out_bytes = sum(math.prod(s) * d.itemsize for s, d in zip(bench.shapes, self.b.out_dtypes))
            try:
                free, _ = torch.cuda.mem_get_info(bench.device)
            except Exception:  # pragma: no cover
                free = None
            n = workers_for_memory(free, in_bytes, out_bytes, min(8, os.cpu_count() or 1))
        return n

    # -- small helpers ----------------------------------------------------------------------------
    def elapsed(self) -> float:
        """Seconds since :func:`explore` was called."""
        return time.perf_counter() - self.t_start

    def tolerance(self, sched: Schedule | None) -> float:
        """The relative error a candidate under ``sched`` may have (``rtol``, else by dtype)."""
        return self.opts.rtol if self.opts.rtol is not None else default_tolerance(self.b, sched)

    def new_candidate(self, origin: str, point: Mapping | None, sched: Schedule | None) -> Candidate:
        """A fresh row (its id is the number of rows so far)."""
        return Candidate(id=len(self.rows), origin=origin, params=params_json(point or {}), schedule=sched,
                         schedule_json=sched.to_json() if sched is not None else None)

    # -- deciding without compiling ------------------------------------------------------------
    def precheck(self, origin: str, point: Mapping | None, sched: Schedule | None):
        """Everything decided before compiling a candidate (``sched``; ``None`` for the heuristic):
        validation, exact repeats, resource rules, code generation, duplicates, stored timings.

        Returns ``(row or None for an exact repeat, kernel or None, id of the repeated row)``: a
        kernel only for a candidate still to be compiled and run."""
        if sched is not None:
            js = sched.to_json()
            if js in self.by_sched:
                return None, None, self.by_sched[js]
        row = self.new_candidate(origin, point, sched if sched is not None else self.base)
        if sched is not None:
            self.by_sched[js] = row.id
        kern, full = self._build(row, sched)
        if kern is None:
            return row, None, None
        row.schedule, row.schedule_json = full, full.to_json()
        if sched is not None and row.schedule_json in self.by_sched and self.by_sched[row.schedule_json] != row.id:
            return None, None, self.by_sched[row.schedule_json]
        self.by_sched[row.schedule_json] = row.id
        return self._screen(row, origin, kern, full)

    def _build(self, row: Candidate, sched: Schedule | None):
        """``(kernel, complete schedule)`` of a candidate, or ``(None, None)`` with ``row`` marked
        illegal or failed."""
        if sched is None:
            return self.heuristic, self.base
        try:
            sched.validate(self.alg)
            kern = self.factory(self.alg, sched)
            kern.quiet = True   # knobs a candidate cannot use are its own business: no ScheduleWarning
            return kern, kern.schedule_for(*self.bench.work)
        except ScheduleError as e:
            row.update(status="illegal", reason=str(e).splitlines()[0])
        except Exception as e:  # noqa: BLE001
            row.update(status="failed", reason=first_line(e))
        return None, None

    def _screen(self, row: Candidate, origin: str, kern, full: Schedule):
        """Resource rules, code generation, duplicate sources and stored timings (see :meth:`precheck`)."""
        if origin != "heuristic":
            why = check_resources(self.alg, full, self.b, self.limits)
            if why:
                row.update(status="pruned", reason=why)
                return row, None, None
        try:
            src = kern.source_for(*self.bench.work)
            # the shared memory its kernels hold, from the plan (pipelined loads of every loop, dot operands)
            gpu = self.bench.device.type == "cuda" and hasattr(kern, "program_for")
            why = program_fits(kern.program_for(*self.bench.work), self.limits.smem_bytes) if gpu else None
        except ScheduleError as e:
            row.update(status="illegal", reason=str(e).splitlines()[0])
            return row, None, None
        except Exception as e:  # noqa: BLE001
            row.update(status="failed", reason="code generation: " + first_line(e))
            return row, None, None
        if why:
            row.update(status="pruned", reason=why)
            return row, None, None
        h = src_hash(src, full)
        if h in self.by_src:
            row.update(status="duplicate", reason=f"generates the same kernels as #{self.by_src[h]}")
            return row, None, self.by_src[h]
        self.by_src[h] = row.id
        st = self.stored.get(row.schedule_json)
        if st is not None:
            row.update(status=st["status"], reason=st["reason"], median_us=st["median_us"], p20_us=st["p20_us"],
                       p80_us=st["p80_us"], origin="stored" if origin == "space" else origin, stored=True)
            return row, None, None
        return row, kern, None

    # -- the oracle and the progress bar --------------------------------------------------------------
    def check_oracle(self) -> None:
        """Compute the reference outputs; when the eager reference would not fit in memory (or runs
        out of it), use the heuristic schedule's output instead, with a warning. Raises
        :class:`~dtriton.DTritonError` when that fails too."""
        bench = self.bench
        if bench.reference_feasible():
            try:
                bench.compute_reference()
            except (MemoryError, RuntimeError) as e:
                if "memory" not in str(e).lower() and not isinstance(e, MemoryError):
                    raise
                bench.refs = None
        if bench.refs is not None:
            return
        self.oracle = "heuristic"
        warnings.warn(f"{self.alg.name}: the eager reference would not fit in memory for these shapes; candidates "
                      "are checked against the heuristic schedule's output instead", TuningWarning, stacklevel=3)
        try:
            bench.restore()
            r = self.heuristic(*bench.work)
            bench.sync()
            bench.refs = tuple(t.clone() for t in (r if isinstance(r, tuple) else (r,)))
        except Exception as e:  # noqa: BLE001
            raise DTritonError(f"cannot check candidates of {self.alg.name}: the reference does not fit in memory and "
                               f"the heuristic schedule fails ({first_line(e)})") from e

    def open_progress(self) -> None:
        """The progress bar (:mod:`dtriton.tune.progress`): when asked for, on a terminal, after 2 s."""
        self.pbar = ExploreProgress(self.alg.name, self.opts.budget, enabled=self.opts.progress)

    def tick(self) -> None:
        """Show the elapsed time, the candidates so far and the best time on the progress bar."""
        self.pbar.update(self.elapsed(), len(self.rows), self.best_val)

    # -- running candidates ---------------------------------------------------------------------------
    def evaluate(self, items: Sequence[tuple[Any, Candidate, Any]]) -> None:
        """Compile and check ``items`` (``[(sampler handle, row, kernel)]``; in parallel on the
        GPU), then time the correct ones sequentially and tell the sampler."""
        if not items:
            return
        results = self._check_isolated(items) if self.pool is not None else None
        if results is None:
            results = self._check_in_process(items)
        self.compiled += len(items)
        for (handle, row, kern), res in zip(items, results):
            row.update(**res)
            if row.status == "ok":
                self._time(row, kern)
            row.elapsed_s = self.elapsed()
            row.kernel = kern if row.status == "ok" else None
            self.account(row)
            if row.origin != "heuristic":
                self.sampler.tell(handle, None if row.status == "skipped" else row.value())
            self.tick()

    def _deadline(self, rows) -> float | None:
        """The ``time.perf_counter`` value at which work on ``rows`` is abandoned: the end of the
        budget, or none for the heuristic baseline (always measured)."""
        if any(r.origin == "heuristic" for r in rows):
            return None
        return self.t_start + self.opts.budget

    def _check_in_process(self, items) -> list[dict]:
        """Compile and check in this process (threads on the GPU, sequential on the interpreter)."""
        tasks = [(lambda kern=kern, row=row: self.bench.run_check(kern, self.tolerance(row.schedule),
                                                                  private=not self.interpret))
                 for _, row, kern in items]
        if self.interpret:
            return [t() for t in tasks]
        return run_parallel(tasks, self.workers, self.opts.compile_timeout, self._deadline([r for _, r, _ in items]))

    def _check_isolated(self, items) -> list[dict] | None:
        """Compile and check in the worker processes, one candidate per worker (``None`` when
        workers turn out to be unavailable: the caller runs the items in-process)."""
        reqs = []
        for k, (_, row, kern) in enumerate(items):
            sched = getattr(kern, "schedule", None)
            reqs.append((k, ("check", row.id, None if sched is None else sched.to_json(), self.tolerance(row.schedule))))
        try:
            res = self.pool.run(reqs, self.opts.compile_timeout, self._deadline([r for _, r, _ in items]),
                                on_wait=self.tick)
        except WorkerUnavailable as e:
            self._no_pool(str(e))
            return None
        for r in res:
            r["compile_s"] = r.pop("seconds", None)
        return res

    def open_pool(self) -> None:
        """Start the worker processes candidates run in (:mod:`dtriton.tune.worker`), unless
        ``isolate=False`` or the algorithm cannot be sent to one (then with a warning on a GPU)."""
        iso = self.opts.isolate
        if iso is False:
            self.isolation = "in this process (isolate=False)"
            return
        bench = self.bench
        if not can_isolate(self.alg, self.factory, bench.device):
            why = (f"{self.alg.name} or its kernel factory cannot be imported by a spawned process "
                   "(define both at the top level of a module)")
            if iso or start_method_for(bench.device) == "spawn":
                self._no_pool(why)
            else:
                self.isolation = f"in this process ({why})"
            return
        spec = WorkerSpec(self.alg, bench.pristine, bench.refs, dict(bench.alias), str(bench.device),
                          self.interpret, self.opts.warmup_ms, self.opts.rep_ms, self.opts.timing, self.factory)
        self.pool = WorkerPool(spec, self.batch)
        self.isolated = True
        self.isolation = f"{len(self.pool)} worker process(es), started by {self.pool.start_method}"
        if self.pool.start_method == "spawn":
            try:
                self.pool.start_all()   # spawned workers import torch and dtriton while the baseline starts
            except WorkerUnavailable as e:
                self._no_pool(str(e))

    def _no_pool(self, why: str) -> None:
        """Run candidates in this process from now on, with a warning; the result's
        ``isolation`` says so, with ``why``."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        ran = sum(1 for r in self.rows if r.compile_s is not None)
        self.isolated = False
        self.isolation = (f"in this process, without isolation: {why}"
                          + (f" (after {ran} candidate(s) ran in workers)" if ran else ""))
        warnings.warn(f"{self.alg.name}: candidates run in this process, without isolation ({why}); a candidate "
                      "that faults the GPU would end the exploration", TuningWarning, stacklevel=4)

    def _measure(self, row: Candidate, kern, rep_ms: float | None, deadline: float | None):
        """``(median, p20, p80)`` of a correct candidate, in its worker or here; raises
        ``RuntimeError`` with the reason when it could not be timed; returns a result dict (a
        status and reason) when its worker died, timed out or was stopped at the deadline."""
        if self.pool is None:
            return self.bench.measure(kern, rep_ms=rep_ms)
        k = self.pool.holder(row.id)
        if k is None:
            raise RuntimeError("its worker process was restarted since it was checked")
        res = self.pool.run([(k, ("time", row.id, rep_ms))], self.opts.compile_timeout, deadline, on_wait=self.tick)[0]
        if "median_us" in res:
            return res["median_us"], res["p20_us"], res["p80_us"]
        return res

    def _time(self, row: Candidate, kern) -> None:
        """Time a correct candidate (skipped once the budget is spent, the baseline excepted)."""
        if self.elapsed() >= self.opts.budget:
            if row.origin != "heuristic":
                row.update(status="skipped", reason="the budget ran out before timing")
                return
            if self.interpret and row.compile_s:   # the baseline past the budget: its checked call is the one
                row.update(median_us=row.compile_s * 1e6, p20_us=row.compile_s * 1e6, p80_us=row.compile_s * 1e6)
                return                             # (meaningless) interpreter sample, not a second call
        try:
            got = self._measure(row, kern, None, self._deadline([row]))
        except Exception as e:  # noqa: BLE001
            row.update(status="failed", reason="while timing: " + first_line(e))
            return
        if isinstance(got, dict):
            row.update(status=got["status"], reason=got["reason"])
        else:
            row.update(median_us=got[0], p20_us=got[1], p80_us=got[2])

    def account(self, row: Candidate) -> None:
        """Best-so-far and the no-improvement counter, after a measured (or stored) candidate."""
        if row.status == "ok" and row.median_us is not None:
            if row.median_us < self.best_val * (1 - MIN_IMPROVEMENT):
                self.since_improve = 0
            else:
                self.since_improve += 1
            self.best_val = min(self.best_val, row.median_us)
        elif row.status != "skipped":
            self.since_improve += 1

    def run_baseline(self) -> None:
        """Candidate 0: the heuristic's schedule (it does not count against ``max_trials``); then
        tell the sampler about it and give it the warm-start points."""
        row0, kern0, _ = self.precheck("heuristic", {}, None)
        self.rows.append(row0)
        if kern0 is not None:
            self.evaluate([(None, row0, kern0)])
            self.compiled -= 1
        else:
            row0.elapsed_s = self.elapsed()
        start = base_point(self.dims, self.base)
        if isinstance(self.sampler, TPE) and row0.status == "ok":
            self.sampler.add_known(start, row0.median_us)
        if self.sampler.name != "exhaustive" and self.opts.warm_start:
            self.sampler.prepend(warm_start(self.alg, self.dims, start, self.base, self.b))

    # -- the search loop ------------------------------------------------------------------------------
    def search(self) -> None:
        """Ask the sampler for batches of candidates and run them until the budget is spent,
        ``max_trials`` candidates ran, ``patience`` ran out, or the space is exhausted."""
        while True:
            reason = self._stop_reason()
            if reason is not None:
                self.stop_reason = reason
                break
            items, exhausted = self._next_batch()
            if items:
                self.evaluate(items)
            if exhausted:
                self.stop_reason = "exhausted"
                break
        self.pbar.close()

    def _stop_reason(self) -> str | None:
        """Why the search stops before the next batch ("budget", "max_trials", "converged"), or None.

        On a GPU a batch is not started when the budget left is shorter than the median compile
        time so far: it would be abandoned, and killing its workers would lose the kernels they
        hold for the final re-measurement."""
        left = self.opts.budget - self.elapsed()
        if left <= 0:
            return "budget"
        took = sorted(r.compile_s for r in self.rows if r.origin == "space" and r.compile_s)
        if self.pool is not None and not self.interpret and len(took) >= 3 and left < took[len(took) // 2]:
            return "budget"
        if self.max_trials is not None and self.compiled >= self.max_trials:
            return "max_trials"
        if self.patience is not None and self.since_improve >= self.patience:
            return "converged"
        return None

    def _next_batch(self) -> tuple[list, bool]:
        """Up to one batch of candidates to compile: ``(items, exhausted)``. Points decided without
        compiling (illegal, pruned, duplicate, stored, repeats) become rows here."""
        budget, max_trials = self.opts.budget, self.max_trials
        want = self.batch if max_trials is None else max(1, min(self.batch, max_trials - self.compiled))
        items: list = []
        while len(items) < want and self.elapsed() < budget and (
                max_trials is None or self.compiled + len(items) < max_trials):
            got = self.sampler.ask()
            if got is None:
                return items, True
            verdict = self._consider(*got, items)
            if verdict == "illegal":
                continue
            if verdict == "full":
                break
            if self.stale >= self.stale_limit:
                return items, True
            self.tick()
        return items, False

    def _consider(self, handle, point: Mapping, items: list) -> str | None:
        """Turn a sampled point into a row, appended to ``items`` when it is to be compiled.
        Returns "illegal" for a point that makes no schedule, "full" when a stored candidate
        reached ``max_trials``, else None."""
        try:
            sched = self.space.schedule_for(point, self.base, self.alg, self.b.axis_sizes)
        except ScheduleError as e:
            row = self.new_candidate("space", point, None)
            row.update(status="illegal", reason=str(e).splitlines()[0], elapsed_s=self.elapsed())
            self.rows.append(row)
            self.sampler.tell(handle, PENALTY)
            self.stale += 1
            return "illegal"
        row, kern, rep = self.precheck("space", point, sched)
        if row is None:  # the same schedule as an earlier candidate: no new row
            self.sampler.tell(handle, self.rows[rep].value())
            self.stale += 1
        elif kern is None:  # decided without compiling: illegal, pruned, duplicate, stored
            self.rows.append(row)
            row.elapsed_s = self.elapsed()
            v = self.rows[rep].value() if row.status == "duplicate" else row.value()
            if row.stored:  # a candidate measured by an earlier run counts as measured
                self.compiled += 1
                self.account(row)
                self.stale = 0
            else:
                self.stale += 1
            self.sampler.tell(handle, v)
            if row.stored and self.max_trials is not None and self.compiled >= self.max_trials:
                return "full"
        else:
            self.rows.append(row)
            items.append((handle, row, kern))
            self.stale = 0
        return None

    # -- the end -------------------------------------------------------------------------------------
    def remeasure(self) -> None:
        """Measure the few best again, interleaved, before picking (GPU only; stored timings stay
        as stored), with the baseline so the reported speedup compares like with like. Then drop
        the kernels."""
        opts = self.opts
        t = time.perf_counter()
        if not self.interpret and not opts.deterministic and opts.top_k > 1:
            ok = sorted((r for r in self.rows if r.status == "ok" and r.kernel is not None),
                        key=lambda r: r.median_us)[:opts.top_k]
            r0 = self.rows[0]
            if r0.status == "ok" and r0.kernel is not None and all(r is not r0 for r in ok):
                ok.append(r0)
            if len(ok) > 1:
                self._measure_again(ok)
        self.remeasure_s = time.perf_counter() - t
        for r in self.rows:
            r.kernel = None
        if self.pool is not None:
            self.pool.close()

    def close(self) -> None:
        """Stop the worker processes (if any are left; :meth:`remeasure` stops them) and the progress bar."""
        self.pbar.close()
        if self.pool is not None:
            self.pool.close()

    def _measure_again(self, ok: list[Candidate]) -> None:
        """Two interleaved rounds of longer measurements; each keeps its best (lowest) round."""
        rounds: dict[int, list[tuple[float, float, float]]] = {r.id: [] for r in ok}
        for _ in range(2):
            for r in ok:
                try:
                    got = self._measure(r, r.kernel, max(100.0, 2 * self.opts.rep_ms), None)
                except Exception:  # noqa: BLE001 - keep the search timing
                    continue
                if not isinstance(got, dict):
                    rounds[r.id].append(got)
        for r in ok:
            if rounds[r.id]:
                med, p20, p80 = min(rounds[r.id])
                r.update(search_median_us=r.median_us, median_us=med, p20_us=p20, p80_us=p80, remeasured=True)

    def finish(self) -> ExploreResult:
        """Wait for compile threads left running, build the :class:`ExploreResult` (warning when
        nothing passed) and store it in the tuning database."""
        # in-process compiles left running past the budget: wait for them within the budget's slack
        slack = max(0.5, 1.1 * self.opts.budget - self.elapsed() + self.remeasure_s)
        left = drain_workers(min(self.opts.compile_timeout, slack)) if not self.interpret else 0
        if left:
            warnings.warn(f"{self.alg.name}: {left} compile thread(s) still running at the end of the budget; they "
                          "may launch GPU work later (candidates run in-process: see dt.explore's isolate)",
                          TuningWarning, stacklevel=3)
        rows = [r.to_dict() for r in self.rows]
        result = ExploreResult(algorithm=self.alg, table=rows, device=self.device_name,
                               timings_meaningful=not self.interpret, strategy=self.sampler.name,
                               stop_reason=self.stop_reason, elapsed_s=self.elapsed(), space=self.space,
                               oracle=self.oracle, key=self.key, budget_s=float(self.opts.budget),
                               remeasure_s=self.remeasure_s, isolated=self.isolated,
                               isolation=self.isolation)
        if result.best is None:
            why = "; ".join(f"{st} {n}" + next((f" (e.g. {r['reason'][:160]})" for r in rows
                                                if r["status"] == st and r["reason"]), "")
                            for st, n in result.counts().items())
            warnings.warn(f"{self.alg.name}: no candidate passed the correctness check; nothing is stored. "
                          f"Candidates: {why}", TuningWarning, stacklevel=3)
        self._store(result, rows)
        return result

    def _store(self, result: ExploreResult, rows: list[dict]) -> None:
        """Store the measured candidates and the best schedule (``store="replace"``: even over a
        faster stored record); ``result.storage`` says what happened."""
        store = self.opts.store
        if not store or self.tdb is None:
            result.storage = ("not stored (interpreter timings measure Python; pass store=True, or --store to "
                              "`dtriton explore`, to store)"
                              if self.interpret and self.opts.store is False and self.unstored_default
                              else "not stored (store=False)")
            return
        measured = [r for r in rows if r["status"] in ("ok", "wrong", "failed", "timeout")
                    and r.get("schedule_json") and not r.get("stored")]
        if measured:
            self.tdb.store_trials(self.key, self.b.sizes, measured)
        br = result.best_row
        if br is None:
            result.storage = f"nothing stored (no candidate passed); {len(measured)} timing(s) kept in {self.tdb.path}"
            return
        wrote = self.tdb.store(TuningRecord(self.key, self.alg.name, br["schedule_json"], br["median_us"],
                                            br["p20_us"], br["p80_us"], dict(self.b.sizes), time.time()),
                               overwrite=(store == "replace"))
        result.storage = (f"best stored in {self.tdb.path} (dt.compile(alg, 'tuned') uses it)" if wrote else
                          f"best not written to {self.tdb.path}: a faster record is stored for this call "
                          "(store='replace' replaces it), or the database could not be written (a TuningWarning says so)")


def explore(alg: Algorithm, args: Sequence[Any], *, budget: float = 60.0, space: Space | Mapping | None = None,
            strategy: str = "auto", max_trials: int | None = None, patience: int | None = None, seed: int = 0,
            deterministic: bool = False, top_k: int = 3, rtol: float | None = None, out=None,
            db: TuningDB | str | os.PathLike | None = None, store: bool | str | None = None,
            compile_workers: int | None = None, compile_timeout: float = 120.0, warmup_ms: float = 10.0,
            rep_ms: float = 50.0, progress: bool = True, warm_start: bool = True, timing: str = "cold",
            isolate: bool | None = None, _candidate_factory: Callable[[Algorithm, Schedule | None], Any] | None = None) -> ExploreResult:
    """Search schedules of ``alg`` for the call ``alg(*args)`` and return the fastest correct one.

    Args:
        alg: an ``@dt.algorithm``.
        args: the call's arguments (a tuple; a single tensor is accepted). They are never passed
            to a candidate and are left bitwise unchanged.
        budget: seconds for the search (compiling, checking, timing): a candidate still compiling,
            checking or timing at the end is abandoned and recorded as "skipped". The heuristic
            baseline is always measured, and the final re-measurement of the ``top_k`` best adds
            about ``top_k * 2 * max(100, 2 * rep_ms)`` ms on the GPU (``result.remeasure_s``).
        space: a :class:`Space` (or a dict of its fields); ``None`` derives one
            (:meth:`Space.derive`). Fields a Space leaves ``None`` keep the heuristic's value.
        strategy: "auto", "exhaustive", "random" or "tpe" (optuna; random without it). "auto":
            exhaustive for a space of at most ``max(64, max_trials)`` points, else tpe.
        max_trials: at most this many candidates compiled and run, besides the heuristic
            baseline (default: unlimited on the GPU, 64 on the interpreter); every strategy stops
            there, an exhaustive one too (having tried the space's first points only: stop reason
            "max_trials"). Points compiling nothing (illegal, pruned, duplicate) do not count.
        patience: stop after this many measured candidates without a 0.5% improvement
            (default 30 for random/tpe, off for exhaustive).
        seed: sampler seed.
        deterministic: reuse timings stored in the database for candidates already measured on
            exactly these shapes (no compile, no re-measurement), so the same stored timings give
            the same winner; combine with ``max_trials`` for a fixed candidate list.
        top_k: how many of the fastest candidates are measured again before picking (GPU).
        rtol: relative norm error allowed; default by dtype (:func:`~dtriton.tune.check.default_tolerance`).
        out: the ``out=`` the kernel will be called with; an output that is one of ``args``
            (an in-place call) is written into a fresh copy of that input on every trial.
        db: tuning database (a :class:`~dtriton.tune.db.TuningDB` or a path); default location
            otherwise. store: write the best schedule and the measured candidates there
            (``"replace"``: replace a stored record even if it was faster; ``False``: never).
            ``None`` (default): on the GPU; an exploration on the Triton interpreter stores only
            with ``store=True`` (or ``"replace"``) or ``deterministic=True`` (whose reruns read the
            stored timings), since its timings measure Python, not kernels (such a record serves
            its own size bucket only).
        compile_workers: threads compiling candidates at once on the GPU (default: up to 8,
            fewer when input copies would use over a quarter of free GPU memory); the
            interpreter always uses 1 (it is not thread-safe).
        compile_timeout: seconds after which a compile is recorded as "timeout".
        warmup_ms, rep_ms: warm-up and repetition times of each measurement (ms).
        timing: "cold" (``triton.testing.do_bench``: L2 flushed before every call) or "warm"
            (:func:`~dtriton.tune.measure.warm_gpu_time`: inputs in L2 as in a loop of repeated calls, GPU time only,
            the kernel time of a CUDA-graph replay). Short kernels rank differently under the two:
            a 16x4096x4096 fp16 matmul reads a weight that fits in L2. Timings stored in the
            tuning database are in the mode of the exploration that stored them.
        progress: show a progress bar (candidates done, best so far, time left) on a terminal.
        isolate: run candidates in worker processes (:mod:`dtriton.tune.worker`), so that one
            that faults the GPU, aborts or hangs is recorded as failed or timed out and the
            exploration goes on, and one still compiling at the end of the budget is abandoned.
            ``None`` (default): on the CPU always (forked workers), on a GPU when the algorithm can
            be imported by a spawned process (else in-process, with a warning); ``False``: never.
            ``result.isolated`` and ``result.isolation`` say where candidates ran.
        warm_start: random/tpe first try seeds (GPU tilings of fused attention and 16-bit
            contractions; output tiles of 1024, 2048 and 4096 elements for a statistics-then-normalise
            output: :func:`~dtriton.tune.samplers.warm_start`), then the heuristic's neighbours
            (one dimension one step away, tiles first), a cheap local search before sampling.

    Returns an :class:`ExploreResult` (``best`` is ``None`` when no candidate was correct).

    Raises:
        TypeError: ``alg`` is not an algorithm.
        ShapeError: ``args`` (or ``out``) do not fit the signature.
        ValueError: unknown strategy or a negative budget.
        ScheduleError: the space does not fit ``alg`` (:meth:`Space.validate`: an unknown axis,
            stage or tensor, a split of an axis no sum reduces, ...), before any candidate runs;
            UnknownFieldError (a ScheduleError and a TypeError) for a space dict with a key that
            is not a Space field.
        DTritonError: correctness cannot be checked (the reference does not fit in memory and the
            heuristic schedule fails), or ``explore`` runs in a candidate worker (a script that
            calls it outside ``if __name__ == "__main__":``, imported again by a spawned worker).
    """
    t_start = time.perf_counter()
    if in_worker():
        raise DTritonError("dt.explore was called in a candidate worker process, which imports the __main__ "
                           "script again to find the algorithm: keep the script's work under "
                           "`if __name__ == \"__main__\":`")
    args, sp, device = check_call(alg, args, space, budget, strategy)
    opts = Options(budget=budget, strategy=strategy, max_trials=max_trials, patience=patience, seed=seed,
                   deterministic=deterministic, top_k=top_k, rtol=rtol, out=out, db=db, store=store,
                   compile_workers=compile_workers, compile_timeout=compile_timeout, warmup_ms=warmup_ms,
                   rep_ms=rep_ms, progress=progress, warm_start=warm_start, timing=timing, isolate=isolate,
                   candidate_factory=_candidate_factory)
    ex = Explorer(alg, args, device, sp, opts, t_start)
    try:
        ex.check_oracle()
        ex.open_pool()
        ex.open_progress()
        ex.run_baseline()
        ex.search()
        ex.remeasure()
    finally:
        ex.close()
    return ex.finish()
