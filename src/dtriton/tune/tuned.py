"""``dt.compile(alg, "tuned")``: :class:`TunedKernel` runs, per call shape, the best schedule stored
in the tuning database (:mod:`dtriton.tune.db`), else the heuristic."""

from __future__ import annotations

import functools
import os
import threading
import warnings

import torch

from ..errors import CompileError, ScheduleError
from ..ir import Algorithm
from ..plan.smem import program_fits
from ..runtime import Kernel
from ..runtime.args import call_key, merge_named, outside_graph, tracing
from ..schedule import Schedule
from .check import Limits, check_outputs, check_resources, default_tolerance
from .db import TuningDB, TuningKey, TuningRecord, TuningWarning, default_db_path

__all__ = ["TunedKernel"]


class TunedKernel:
    """``dt.compile(alg, "tuned")``: a kernel that runs, for each call's shapes, the best schedule
    stored in the tuning database, else the heuristic.

    Per call it computes the :class:`TuningKey` (shape bucket, dtypes, device, Triton version),
    looks up the exact key, then (``nearest=True``, GPU calls only) the nearest stored bucket of the
    same algorithm, dtypes and device within a factor 4 per size; only records this dtriton version
    measured are used, and an interpreter-measured record serves its own bucket only (see
    :mod:`dtriton.tune.db`). A stored schedule is revalidated for
    the call's shapes before use: ``Schedule.validate``, the resource rules of
    :mod:`dtriton.tune.check` (shared memory of dot tiles, elements per program), and lowering plus
    code generation; with ``verify=True`` also one checked run against ``alg.reference``. A
    schedule that fails any of these, or whose kernel fails to compile at the call, is dropped
    for that key with a :class:`TuningWarning` and the heuristic (``Kernel(alg, None)``) is used;
    calling never raises because of the database. Decisions are cached per key; call
    :meth:`refresh` after exploring again in the same process.

    Args:
        alg: the ``@dt.algorithm``.
        db: a :class:`TuningDB`, a path, or ``None`` for the default database.
        nearest: also use the nearest stored shape bucket when the exact one is missing (GPU
            calls; on the interpreter a missing bucket always gets the heuristic).
        verify: check a stored schedule against the reference on its first use per key.

    Attributes:
        algorithm, db, source (generated Triton of the last call; ``AttributeError`` before one).
    """

    def __init__(self, alg: Algorithm, db: TuningDB | str | os.PathLike | None = None, *, nearest: bool = True,
                 verify: bool = False):
        if not isinstance(alg, Algorithm):
            raise TypeError(f"dt.compile expects an @dt.algorithm, got {type(alg).__name__}")
        self.algorithm = alg
        self.db = db if isinstance(db, TuningDB) else TuningDB(db)
        self.nearest = nearest
        self.verify = verify
        self.schedule = "tuned"
        self._heuristic = Kernel(alg, None)
        self._by_schedule: dict[str, Kernel] = {}
        self._choice: dict[TuningKey, tuple[Kernel, str, TuningRecord | None]] = {}
        self._fast: dict[tuple, Kernel] = {}
        self._lock = threading.Lock()
        self._last: Kernel | None = None

    def __reduce__(self):
        """Pickled as what built it (algorithm, database path unless the default, ``nearest``, ``verify``); cached
        choices, kernels and the lock are made again on load."""
        db = None if self.db.path == default_db_path() else self.db   # the default: the loading machine's
        return functools.partial(TunedKernel, nearest=self.nearest, verify=self.verify), (self.algorithm, db)

    def refresh(self) -> None:
        """Forget cached lookups (use after storing new results in the database)."""
        with self._lock:
            self._choice.clear()
            self._fast.clear()

    def _kernel_for_schedule(self, sched: Schedule) -> Kernel:
        k = sched.to_json()
        kern = self._by_schedule.get(k)
        if kern is None:
            kern = Kernel(self.algorithm, sched)
            self._by_schedule[k] = kern
        return kern

    def _revalidate(self, rec: TuningRecord, args) -> Kernel:
        """The kernel for ``rec`` if it is usable for ``args``; raises otherwise."""
        alg = self.algorithm
        # records stored before complete schedules dropped the tiles of "whole" axes that no
        # kernel reads (validation now rejects those tiles): drop them here too, same kernels
        sched = rec.schedule.without_unused_tiles(alg)
        if sched.access is None:
            # a stored schedule is the one that was measured: records written while "pointer" was
            # the default access leave it out of their JSON, and None would now let the heuristic
            # pick TMA on Hopper (a kernel nobody timed); explore itself stores access explicitly
            sched = sched.replace(access="pointer")
        sched.validate(alg)
        kern = self._kernel_for_schedule(sched)
        b = alg.bind(args)
        full = kern.complete(b)
        why = check_resources(alg, full, b, Limits.for_device(b.device))
        if why:
            raise ScheduleError(f"over the resource limits for these shapes: {why}")
        kern.source_for(*args)  # lowering + code generation (no GPU compile)
        if b.device.type == "cuda":   # the shared memory its kernels hold, from the plan
            why = program_fits(kern.program_for(*args), Limits.for_device(b.device).smem_bytes)
            if why:
                raise ScheduleError(f"over the resource limits for these shapes: {why}")
        if self.verify:
            clones = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
            ref = alg.reference(*clones)
            got = kern(*clones)
            ref = ref if isinstance(ref, tuple) else (ref,)
            got = got if isinstance(got, tuple) else (got,)
            ok, err, reason = check_outputs(got, ref, default_tolerance(b, full))
            if not ok:
                raise ScheduleError(f"wrong result on first use ({reason})")
        return kern

    def _choose(self, args) -> tuple[Kernel, str, TuningRecord | None]:
        alg = self.algorithm
        b = alg.bind(args)
        key = TuningKey.for_binding(alg, b)
        with self._lock:
            hit = self._choice.get(key)
        if hit is not None:
            return hit
        choice: tuple[Kernel, str, TuningRecord | None] = (self._heuristic, "heuristic", None)
        rec = self.db.lookup(key)
        origin = "tuned"
        if rec is None and self.nearest:
            rec = self.db.nearest(key)
            origin = "nearest"
        if rec is not None:
            try:
                choice = (self._revalidate(rec, args), origin, rec)
            except Exception as e:  # noqa: BLE001 - any failure means: use the heuristic
                warnings.warn(f"{alg.name}: the stored schedule for {rec.key.bucket} does not fit shapes "
                              f"{dict(b.sizes)} ({type(e).__name__}: {e}); using the heuristic schedule",
                              TuningWarning, stacklevel=3)
        with self._lock:
            self._choice[key] = choice
        return choice

    def kernel_for(self, *args) -> Kernel:
        """The :class:`~dtriton.Kernel` a call with these arguments runs (tuned or heuristic)."""
        return self._choose(args)[0]

    def fast_launcher_for(self, args):
        """The fast launcher an earlier call of this signature left in the kernel chosen for it
        (:meth:`dtriton.Kernel.fast_launcher_for`; ``args`` positional), or None. What
        ``dt.differentiable`` of a tuned kernel builds its steady steps from."""
        return self._choose(tuple(args))[0].fast_launcher_for(args)

    def origin_for(self, *args) -> str:
        """Where the schedule for these arguments comes from: "tuned" (exact bucket),
        "nearest" (nearest stored bucket) or "heuristic"."""
        return self._choose(args)[1]

    def schedule_for(self, *args) -> Schedule:
        """The complete schedule a call with these arguments runs."""
        return self.kernel_for(*args).schedule_for(*args)

    def source_for(self, *args) -> str:
        """Generated Triton source for a call with these arguments (compiles nothing on the GPU)."""
        return self.kernel_for(*args).source_for(*args)

    @property
    def launch_count(self) -> int:
        """Kernels the most recent call launched (0 before the first call): ``launch_count`` of the
        kernel it ran (tuned or heuristic)."""
        return self._last.launch_count if self._last is not None else 0

    @property
    def source(self) -> str:
        """Generated Triton source of the last call's kernel (``AttributeError`` before a call)."""
        if self._last is None:
            raise AttributeError("kernel.source is available after the first call, or use kernel.source_for(*args)")
        return self._last.source

    def __call__(self, *args, out=None, **named):
        """Run the algorithm: ``C = kernel(A, B)`` (arguments by name and ``out=`` as for
        :class:`~dtriton.Kernel`).

        The choice is remembered per call signature (shapes, strides, dtypes, alignment), so a
        repeated call costs one dictionary lookup on top of the chosen kernel's own launch. Under
        ``torch.compile`` the call runs outside the graph (a graph break)."""
        if tracing():
            return outside_graph(self.__call__, args, dict(named, out=out))
        if named:
            args = merge_named(self.algorithm, args, named)
        ck = call_key(args)   # (None,) for autograd calls: never cached
        fast = self._fast.get(ck) if ck != (None,) else None
        if fast is not None:
            self._last = fast
            return fast(*args, out=out)
        kern, origin, rec = self._choose(args)
        if kern is not self._heuristic:
            try:
                res = kern(*args, out=out)
                self._last = kern
                if ck != (None,):
                    self._fast[ck] = kern
                return res
            except CompileError as e:
                key = TuningKey.for_call(self.algorithm, args)
                warnings.warn(f"{self.algorithm.name}: the stored schedule failed to compile for these shapes "
                              f"({e}); using the heuristic schedule", TuningWarning, stacklevel=2)
                with self._lock:
                    self._choice[key] = (self._heuristic, "heuristic", None)
                    self._fast.pop(ck, None)
        res = self._heuristic(*args, out=out)
        self._last = self._heuristic
        if ck != (None,):
            self._fast[ck] = self._heuristic
        return res

    def __repr__(self):
        return f"<dt.TunedKernel {self.algorithm.name} db={str(self.db.path)!r}>"
