"""Tuning: schedule exploration (``dt.explore``), the tuning database and ``dt.compile(alg, "tuned")``.

::

    result = dt.explore(matmul, (A, B), budget=60)        # seconds; the space is derived
    result.best                                            # a dt.Schedule (None if nothing passed)
    result.table                                           # every candidate, as dicts
    print(result.summary()); result.plot("explore.png")
    kernel = dt.compile(matmul, "tuned")                   # uses what explore stored

**Space.** :meth:`Space.derive` builds the default space from the algorithm and the call's
shapes: power-of-two tiles per axis (no larger than the padded axis; 16..256 for the axes of a
``tl.dot``), permutations of the grid, grouped launch order, split factors for the reduction
axes of sum stages whose outputs have few tiles, the strategy (whole/loop/online) of every axis
that some kernel covers in-program, the placement (auto/fuse/materialize) of every reduction
stage, tiles of a split stage that runs in a kernel of its own (``stage_tile``), ``num_warps``
and ``num_stages`` (GPU only: the interpreter ignores both), persistent tile loops, for GPU contractions
of fp32 operands the dot precisions that keep fp32 accuracy (``precision``: ieee, tf32x3, bf16x6)
and, for contractions on tensor cores of Hopper-class GPUs (16-bit, or fp32 whose precision, "auto"
resolved as the plan resolves it, is a tensor-core one), TMA tile loads (``access``). Every flat knob of
the registry (:mod:`dtriton.schedule.knobs`) is a :class:`Space` field; one without a derivation rule
(:data:`~dtriton.tune.space_rules.RULES`, in :mod:`dtriton.tune.space_rules`) is searched over its registry ``search`` values (launch
options on the GPU only). Every field that a :class:`Space` leaves ``None`` keeps the
heuristic's value, so ``dt.Space(tile=...)`` narrows the search; :meth:`Space.widen` adds values
to a derived space.

**Pruning before compiling.** Each candidate is checked with ``Schedule.validate``, the resource
rules of :func:`check_resources` (shared memory of dot tiles ``(BM*BK + BK*BN) * bytes *
num_stages`` against the device's limit, 227 KB on H100/H200; at most 64K elements per program;
at most 256 fp32 accumulator registers per thread for a dot; "whole" blocks no larger than
32768), then lowered and turned into Triton source (no GPU work). Timing is ``triton.testing.do_bench``
(L2 flushed before each call) or, with ``timing="warm"``, :func:`warm_gpu_time` (L2 warm, GPU time
only, what a CUDA-graph replay of repeated calls shows). Candidates that generate the
same kernels with the same launch options (``Schedule.launch_key()``) as an earlier one are
marked "duplicate".

**Safety.** The caller's tensors are never handed to a candidate: candidates run on copies that
are restored from a pristine copy before every run, outputs are poisoned with NaN first (passed
as ``out=``), and every output is compared with ``alg.reference`` by relative norm error
(fp32 1e-4, tf32 3e-3, fp16/bf16 1e-2, fp64 1e-5). A candidate that changes an input it does not
write, leaves NaN where the reference is finite, or misses the tolerance is "wrong" and is never
chosen. When the eager reference's largest intermediate would not fit in memory (or it runs out
of memory), candidates are compared with the heuristic schedule's output instead, with a warning
and ``result.oracle == "heuristic"``.

**Database.** The best schedule is stored in the tuning database (:mod:`dtriton.tune.db`) for
``dt.compile(alg, "tuned")``, and every measured candidate is stored for the exact shapes; with
``deterministic=True`` those stored timings are reused instead of measuring again, so the same
stored timings always give the same winner (:meth:`ExploreResult.pick_best` breaks ties by p80,
then by schedule JSON).

**Speed and isolation.** Candidates are compiled, checked and timed in worker processes
(:mod:`dtriton.tune.worker`: spawned on a GPU, one per compile slot, each with private copies of
the inputs; forked on the CPU), so a candidate that faults the GPU, aborts or hangs is recorded
against itself ("failed" with a ``WorkerDied`` reason, or "timeout") and a fresh worker takes
over. A batch is compiled and checked in parallel, then timed one candidate at a time with
nothing else on the GPU (``triton.testing.do_bench``: median, p20 and p80, after a short warm-up
that brings the clocks up). The budget is hard: work still running when it ends is abandoned
(the worker is killed) and the candidate is listed as "skipped" with the reason; only the
heuristic baseline is always measured. The few best candidates and the baseline are measured
again, interleaved, before the winner is picked (``result.remeasure_s``). With
``isolate=False``, or on a GPU for an algorithm a spawned process cannot import, candidates run
in this process instead (threads compiling on the GPU; a compile outliving the budget is then
left to finish on its daemon thread); ``result.isolated`` is then False and ``result.isolation``
says why (also a line of :meth:`ExploreResult.summary`). On the Triton interpreter timings are one wall-clock sample
of Python: they mean nothing, and the result says so.

**Strategies.** "exhaustive" (every point, in order), "random" (uniform without repetition,
seeded) and "tpe" (optuna's TPE sampler; optuna is optional: without it "tpe" falls back to
"random" with a warning). "auto" picks exhaustive for spaces of at most ``max(64, max_trials)``
points, else tpe; an exhaustive search stops at ``max_trials`` and the budget too (then it tried only
the space's first points).
Random and tpe first try seeds on the GPU (fused attention and 16-bit contraction tilings, the output
tiles of statistics-then-normalise calls), then the heuristic's neighbours (one dimension one step
away). Exploration
stops when the budget is spent, after ``max_trials`` compiled candidates, when the space is
exhausted, or (random/tpe) when ``patience`` measured candidates in a row brought no improvement
of at least 0.5%.

Modules, in import order (each imports only those before it): :mod:`~dtriton.tune.check`
(limits, resource rules, tolerances, output checks), :mod:`~dtriton.tune.db` (keys, records, the
SQLite database), :mod:`~dtriton.tune.space` (:class:`Space` and its derivation),
:mod:`~dtriton.tune.samplers`, :mod:`~dtriton.tune.measure` (working copies, timing, compile
threads), :mod:`~dtriton.tune.worker` (worker processes), :mod:`~dtriton.tune.result`
(:class:`ExploreResult`), :mod:`~dtriton.tune.candidate` (:class:`Candidate`, the options),
:mod:`~dtriton.tune.explorer` (the loop: :class:`Explorer`, :func:`explore`) and :mod:`~dtriton.tune.tuned`
(:class:`TunedKernel`); :mod:`~dtriton.tune.benchmark` (``dt.benchmark``: a kernel beside eager PyTorch and
``torch.compile``) comes last.
"""

from .check import Limits, check_outputs, check_resources, default_tolerance
from .db import (INTERPRETER, SCHEMA_VERSION, TuningDatabaseError, TuningDB, TuningKey, TuningRecord, TuningWarning,
                 default_db_path, device_name, dtriton_version, dtype_key, shape_bucket, triton_version)
from .space import Space
from .measure import warm_gpu_time
from .result import STATUSES, ExploreResult
from .explorer import Candidate, Explorer, explore
from .tuned import TunedKernel
from .benchmark import BenchmarkResult, BenchRow, benchmark

__all__ = ["explore", "benchmark", "BenchmarkResult", "BenchRow", "Explorer", "Candidate", "Space", "ExploreResult",
           "STATUSES", "Limits", "check_resources",
           "check_outputs", "default_tolerance", "warm_gpu_time", "TuningDB", "TuningKey", "TuningRecord",
           "TunedKernel", "TuningWarning", "TuningDatabaseError", "default_db_path", "shape_bucket", "dtype_key",
           "device_name", "triton_version", "dtriton_version", "SCHEMA_VERSION", "INTERPRETER"]
