"""Candidate isolation: worker processes that compile, check and time an exploration's candidates.

A candidate that faults the GPU (an illegal memory access leaves the CUDA context unusable), hangs,
or aborts the process must not take the exploration, or the user's process, down. :class:`WorkerPool`
runs candidates in child processes, each holding its own working copies of the inputs (a
:class:`~dtriton.tune.measure.Bench`) and the kernels it compiled:

- a request that outlives its ``timeout`` or the exploration's ``deadline`` kills the worker (a
  compile still running at the deadline is abandoned, never waited for);
- a worker that dies (a signal, ``os.abort()``, a CUDA fault after which the worker exits) has the
  death recorded against the candidate it was running;
- either way a fresh worker is started for the next request, and the exploration goes on.

On a CUDA device workers are started with ``spawn`` (CUDA cannot be used in a forked child); the
algorithm is sent by reference (its module and name; a module loaded from a file under a private
name is loaded from that file again), else by value when its IR pickles (``dt.grad``'s algorithms):
so it must be defined at the top level of a module, or of the ``__main__`` script, whose work must
sit under an ``if __name__ == "__main__":`` guard (each worker imports the script again;
:func:`dtriton.explore` refuses to run inside a worker). The inputs and reference outputs travel in a
temporary file (``torch.save``), written once per pool: not through torch's shared-memory tensor
passing, which needs a writable ``/dev/shm`` (without one every spawned worker fails to start, and
the exploration would run in-process). On the CPU (the
Triton interpreter) workers are forked, which costs milliseconds; ``DTRITON_WORKER_START=spawn``
spawns them there too (how tests check the GPU's path). :func:`can_isolate` says whether an
algorithm can be isolated; the explorer runs candidates in-process otherwise, and says so in its
result (``ExploreResult.isolation``).

For tests, ``DTRITON_TEST_WORKER_ABORT=<check|time>:<candidate id>`` makes a worker call
``os.abort()`` when it is asked to check (or time) that candidate: a worker death on demand.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import multiprocessing as mp
import os
import pickle
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_ready
from typing import Any, Callable

import torch

from ..ir import Algorithm
from ..schedule import Schedule
from .measure import Bench, first_line

__all__ = ["WorkerSpec", "WorkerPool", "WorkerUnavailable", "can_isolate", "algorithm_ref", "start_method_for",
           "WORKER_NAME", "in_worker", "sendable"]

#: the process name of candidate workers (set before a spawned worker imports the ``__main__`` script)
WORKER_NAME = "dtriton-candidate"


def in_worker() -> bool:
    """Whether this process is a candidate worker (e.g. one importing the user's script again)."""
    return mp.current_process().name == WORKER_NAME


class WorkerUnavailable(RuntimeError):
    """Worker processes cannot run this exploration (the algorithm or factory cannot be sent to a
    spawned process, or a worker dies before it is ready); the explorer falls back to in-process."""


def algorithm_ref(alg: Algorithm) -> tuple[str, str] | None:
    """``(module, name)`` under which ``alg`` can be imported again in a fresh process, or ``None``
    (an algorithm defined inside a function, derived by ``dt.grad``, or typed at a prompt)."""
    fn = getattr(alg, "fn", None)
    mod = getattr(fn, "__module__", None)
    if fn is None or mod is None or getattr(fn, "__qualname__", "") != alg.name:
        return None
    m = sys.modules.get(mod)
    if m is None or getattr(m, alg.name, None) is not alg:
        return None
    if mod == "__main__" and not getattr(m, "__file__", None):
        return None
    return mod, alg.name


def sendable(alg: Algorithm) -> bool:
    """Whether a spawned worker can get ``alg``: by reference (:func:`algorithm_ref`), or by value
    when its IR pickles (an algorithm derived by ``dt.grad`` has no function to import; one
    traced from a function defined inside another function has a function that cannot be sent)."""
    if algorithm_ref(alg) is not None:
        return True
    try:
        pickle.dumps(alg)
        return True
    except Exception:  # noqa: BLE001 - pickling fails in many ways (local functions, lambdas)
        return False


def _importable(obj) -> bool:
    """Whether a class or function can be pickled by reference (a spawned process imports it)."""
    mod, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    m = sys.modules.get(mod or "")
    return m is not None and "<locals>" not in name and getattr(m, name.split(".")[0], None) is not None


def start_method_for(device: torch.device | str) -> str:
    """How worker processes start on ``device``: "spawn" on a GPU (CUDA cannot run in a forked
    child), "fork" elsewhere; the environment variable ``DTRITON_WORKER_START`` ("fork" or "spawn")
    overrides the CPU's choice. Raises ``ValueError`` for another value of the variable."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return "spawn"
    env = os.environ.get("DTRITON_WORKER_START", "").strip().lower()
    if env not in ("", "fork", "spawn"):
        raise ValueError(f"DTRITON_WORKER_START must be 'fork' or 'spawn', got {env!r}")
    return env or "fork"


def can_isolate(alg: Algorithm, factory: Callable, device: torch.device) -> bool:
    """Whether candidates of ``alg`` built by ``factory`` can run in worker processes on ``device``:
    forked workers always can (the CPU), spawned ones (a GPU) when the algorithm can be sent
    (:func:`sendable`) and the factory imported by a fresh process."""
    if start_method_for(device) == "fork":
        return hasattr(os, "fork")
    return sendable(alg) and _importable(factory)


def _load_algorithm(ref: tuple[str, str], file: str | None = None) -> Algorithm:
    """The algorithm ``ref`` names, imported in a worker: from a module already loaded (the
    ``__main__`` script spawn imported again), an importable one, or else the file the module was
    loaded from (``dtriton explore FILE.py:ALG`` loads files under a private module name)."""
    mod = sys.modules.get(ref[0])
    if mod is None:
        try:
            mod = importlib.import_module(ref[0])
        except ImportError:
            if not file:
                raise
            spec = importlib.util.spec_from_file_location(ref[0], file)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[ref[0]] = mod
            sys.path.insert(0, os.path.dirname(os.path.abspath(file)))
            spec.loader.exec_module(mod)
    return getattr(mod, ref[1])


@dataclass
class WorkerSpec:
    """What a worker needs: the algorithm, the pristine inputs (host copies when spawned), the
    reference outputs, the in-place aliases (output index -> argument index) and the timing
    options of :class:`~dtriton.tune.measure.Bench`; ``factory(alg, schedule)`` builds a kernel."""
    alg: Algorithm
    args: tuple
    refs: tuple | None
    alias: dict
    device: str
    interpret: bool
    warmup_ms: float
    rep_ms: float
    timing: str
    factory: Callable[[Algorithm, Schedule | None], Any]
    spawned: bool = False
    tensor_file: str | None = field(default=None, repr=False)

    def save_tensors(self) -> str:
        """The path of a temporary file holding host copies of ``args`` and ``refs`` (written on
        the first call); :meth:`remove_tensors` deletes it."""
        if self.tensor_file is None:
            fd, path = tempfile.mkstemp(prefix="dtriton-worker-", suffix=".pt")
            with os.fdopen(fd, "wb") as f:
                torch.save({"args": tuple(a.detach().cpu() if isinstance(a, torch.Tensor) else a for a in self.args),
                            "refs": None if self.refs is None else tuple(r.detach().cpu() for r in self.refs)}, f)
            self.tensor_file = path
        return self.tensor_file

    def remove_tensors(self) -> None:
        """Delete the file of :meth:`save_tensors` (if any)."""
        if self.tensor_file is not None:
            try:
                os.unlink(self.tensor_file)
            except OSError:
                pass
            self.tensor_file = None

    def __getstate__(self):  # spawned workers: tensors in a file, the algorithm by reference or value
        ref = algorithm_ref(self.alg)
        if ref is None and not sendable(self.alg):
            raise WorkerUnavailable(f"{self.alg.name} cannot be imported by a worker process (define it at the "
                                    "top level of a module)")
        d = dict(self.__dict__)
        d.update(alg=ref if ref is not None else self.alg, args=None, refs=None, spawned=True,
                 tensor_file=self.save_tensors(),
                 alg_file=getattr(sys.modules[ref[0]], "__file__", None) if ref is not None else None)
        return d

    def resolve(self) -> None:
        """In a spawned worker: import the algorithm and read the tensors back (in the worker's
        setup, so that a failure is reported to the pool with its reason)."""
        if isinstance(self.alg, tuple):
            self.alg = _load_algorithm(self.alg, self.__dict__.get("alg_file"))
        if self.tensor_file is not None and self.args is None:
            # mapped, not read: each worker's copy goes from the page cache to the device (a batch
            # norm of 64x64x512x512 saves 4 GB of input and reference per pool)
            saved = torch.load(self.tensor_file, weights_only=True, mmap=True)
            self.args, self.refs = tuple(saved["args"]), saved["refs"]


def _make_bench(spec: WorkerSpec) -> Bench:
    spec.resolve()
    dev = torch.device(spec.device)
    args = tuple(a.to(dev) if isinstance(a, torch.Tensor) else a for a in spec.args)
    bench = Bench(spec.alg, args, None, spec.interpret, spec.warmup_ms, spec.rep_ms, spec.timing)
    bench.alias = dict(spec.alias)
    bench.refs = None if spec.refs is None else tuple(r.to(bench.device) for r in spec.refs)
    return bench


def _cuda_lost(bench: Bench) -> bool:
    """After a failure on a GPU: whether the CUDA context is unusable (a sticky fault)."""
    if bench.device.type != "cuda":
        return False
    try:
        torch.cuda.synchronize(bench.device)
        torch.zeros(1, device=bench.device).add_(1).item()
        return False
    except Exception:  # noqa: BLE001
        return True


def _handle(bench: Bench, spec: WorkerSpec, kernels: dict, msg: tuple) -> dict:
    """One request in the worker: ``("check", id, schedule JSON or None, tolerance)`` compiles and
    checks (keeping the kernel of a correct candidate), ``("time", id, rep_ms)`` times a kept kernel."""
    op, cid = msg[0], msg[1]
    if op == "check":
        js, tol = msg[2], msg[3]
        try:
            kern = spec.factory(spec.alg, None if js is None else Schedule.from_json(js))
            kern.quiet = True
        except Exception as e:  # noqa: BLE001
            return {"status": "failed", "reason": first_line(e)}
        res = bench.run_check(kern, tol, private=False)
        if res["status"] == "ok":
            kernels[cid] = kern
        return res
    try:
        med, p20, p80 = bench.measure(kernels[cid], rep_ms=msg[2])
        return {"median_us": med, "p20_us": p20, "p80_us": p80}
    except Exception as e:  # noqa: BLE001
        return {"status": "failed", "reason": "while timing: " + first_line(e)}


def serve(conn, spec: WorkerSpec) -> None:
    """A worker's main loop: answer requests on ``conn`` until "stop" or the pipe closes. After a
    failure that leaves the CUDA context unusable it answers, then exits (the pool restarts it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
    if not spec.spawned:
        torch.set_num_threads(1)   # a forked child must not use the parent's OpenMP pool (it hangs)
        faulthandler.disable()     # a death is reported by the pool, not as a traceback on the parent's stderr
    try:
        bench = _make_bench(spec)
    except Exception as e:  # noqa: BLE001
        conn.send(("error", None, first_line(e)))
        return
    conn.send(("ready", None, os.getpid()))
    kernels: dict = {}
    hook = os.environ.get("DTRITON_TEST_WORKER_ABORT")   # tests: "<op>:<id>" aborts this worker there
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "stop":
            return
        if hook and hook == f"{msg[0]}:{msg[1]}":
            os.abort()
        res = _handle(bench, spec, kernels, msg)
        lost = res.get("status") == "failed" and _cuda_lost(bench)
        if lost:
            res["reason"] += " (the CUDA context was lost; the worker was restarted)"
        conn.send(("done", msg[1], res))
        if lost:
            os._exit(3)


def _death(proc) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class _Slot:
    """One worker process and its pipe; ``kept`` are the candidates whose kernels it holds."""
    proc: Any = None
    conn: Any = None
    ready: bool = False
    kept: set = field(default_factory=set)


class WorkerPool:
    """``n`` worker processes for one exploration (see the module docstring). Workers start on
    first use and again after a death or a kill; :attr:`restarts` counts the restarts and
    :attr:`started` the processes started.
    ``start_method``: "fork" or "spawn" (default: :func:`start_method_for` the spec's device).

    Raises :class:`WorkerUnavailable` (from a request) when a worker cannot be started at all, or
    fails to set up before any worker ever did; once one worker has been ready, a worker failing
    its setup (e.g. out of GPU memory for its copies) leaves its request "skipped" with the reason,
    and the slot starts afresh on the next request."""

    def __init__(self, spec: WorkerSpec, n: int, start_method: str | None = None):
        self.spec = spec
        self.start_method = start_method or start_method_for(spec.device)
        self.ctx = mp.get_context(self.start_method)
        self.slots = [_Slot() for _ in range(max(1, n))]
        self.restarts = 0
        self.started = 0
        self.ever_ready = False

    def __len__(self):
        return len(self.slots)

    def _start(self, s: _Slot) -> None:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=serve, args=(child, self.spec), daemon=True, name=WORKER_NAME)
        try:
            proc.start()
        except Exception as e:  # noqa: BLE001 - e.g. an unpicklable factory
            raise WorkerUnavailable(f"cannot start a worker process: {first_line(e)}") from e
        child.close()
        s.proc, s.conn, s.ready, s.kept = proc, parent, False, set()
        self.started += 1

    def start_all(self) -> None:
        """Start every worker now (spawned ones import torch and dtriton meanwhile)."""
        for s in self.slots:
            if s.proc is None:
                self._start(s)

    def _kill(self, s: _Slot, restart: bool = True) -> None:
        if s.proc is not None:
            if s.proc.is_alive():
                s.proc.kill()
            s.proc.join(2.0)
            s.conn.close()
            self.restarts += restart
        s.proc, s.conn, s.ready, s.kept = None, None, False, set()

    def holder(self, cid: int) -> int | None:
        """The worker holding the kernel of candidate ``cid`` (checked correct there), or ``None``."""
        return next((k for k, s in enumerate(self.slots) if cid in s.kept), None)

    def run(self, requests: list[tuple[int, tuple]], timeout: float, deadline: float | None,
            on_wait: Callable[[], None] | None = None) -> list[dict]:
        """Send ``requests`` (``[(worker index, message)]``, at most one per worker) and collect one
        result dict each. A request still running after ``timeout`` seconds, or at ``deadline`` (a
        ``time.perf_counter`` value), is abandoned and its worker killed: its result has status
        "timeout", or "skipped" with the reason. A worker that dies gives status "failed" with a
        ``WorkerDied`` reason. Each result has the seconds it took in ``"seconds"``. ``on_wait`` is
        called about every half second while waiting (the progress bar)."""
        t0 = time.perf_counter()
        out: list[dict | None] = [None] * len(requests)
        pending = {}
        for j, (k, msg) in enumerate(requests):
            s = self.slots[k]
            if s.proc is None:
                self._start(s)
            try:
                s.conn.send(msg)
            except OSError:   # it died while idle (e.g. the out-of-memory killer): a fresh one
                self._kill(s)
                self._start(s)
                s.conn.send(msg)
            pending[k] = j
        while pending:
            now = time.perf_counter()
            waits = [timeout - (now - t0)] + ([deadline - now] if deadline is not None else [])
            live = {self.slots[k].conn: k for k in pending}
            live.update({self.slots[k].proc.sentinel: k for k in pending})
            for obj in wait_ready(list(live), timeout=max(0.0, min(waits + [0.5]))):
                k = live[obj]
                if k in pending:
                    self._collect(k, requests[pending[k]][1], out, pending, t0)
            if on_wait is not None:
                on_wait()
            now = time.perf_counter()
            over_deadline = deadline is not None and now >= deadline
            if over_deadline or now - t0 >= timeout:
                for k, j in list(pending.items()):
                    what = "compiling and checking" if requests[j][1][0] == "check" else "timing"
                    out[j] = ({"status": "skipped", "reason": f"the budget ran out while {what} (abandoned)"}
                              if over_deadline else
                              {"status": "timeout", "reason": f"{what} took longer than {timeout:g} s (abandoned)"})
                    out[j]["seconds"] = now - t0
                    self._kill(self.slots[k])
                    del pending[k]
        return out  # type: ignore[return-value]

    def _collect(self, k: int, msg: tuple, out: list, pending: dict, t0: float) -> None:
        """Read what worker ``k`` sent (or learn that it died) for its pending request."""
        s, j = self.slots[k], pending[k]
        while True:
            try:
                if not s.conn.poll():
                    break
                kind, cid, payload = s.conn.recv()
            except (EOFError, OSError):
                break
            if kind == "ready":
                s.ready = self.ever_ready = True
                continue
            if kind == "error":
                self._setup_failed(k, out, pending, t0, f"could not set up the exploration: {payload}")
                return
            payload["seconds"] = time.perf_counter() - t0
            if msg[0] == "check" and payload.get("status") == "ok":
                s.kept.add(cid)
            out[j] = payload
            del pending[k]
            if not s.proc.is_alive() or payload.get("status") == "failed" and "CUDA context" in payload["reason"]:
                s.proc.join(2.0)
                self._kill(s)
            return
        if not s.proc.is_alive():
            s.proc.join(1.0)
            what = "compiling and checking" if msg[0] == "check" else "timing"
            death = _death(s.proc)
            if not s.ready:   # it died setting up, before any candidate: not the candidate's fault
                self._setup_failed(k, out, pending, t0, f"died while setting up ({death})")
                return
            out[j] = {"status": "failed", "seconds": time.perf_counter() - t0,
                      "reason": f"WorkerDied: the worker process running this candidate died while {what} "
                                f"({death}); a fresh worker took over"}
            self._kill(s)
            del pending[k]

    def _setup_failed(self, k: int, out: list, pending: dict, t0: float, why: str) -> None:
        """Worker ``k`` failed before it was ready: its request is skipped (not the candidate's
        fault) when some worker has been ready before, else :class:`WorkerUnavailable` is raised."""
        self._kill(self.slots[k])
        if self.start_method == "spawn" and "__main__" in (algorithm_ref(self.spec.alg) or ("",))[0] + " " + \
                getattr(self.spec.factory, "__module__", ""):
            why += ("; each spawned worker imports the __main__ script again: keep its work (the call of "
                    "dt.explore) under `if __name__ == \"__main__\":`")
        if not self.ever_ready:
            raise WorkerUnavailable(f"a worker process {why}")
        out[pending.pop(k)] = {"status": "skipped", "seconds": time.perf_counter() - t0,
                               "reason": f"its worker process {why}; a fresh one starts for the next candidate"}

    def close(self, grace_s: float = 0.5) -> None:
        """Stop every worker: ask them all, wait up to ``grace_s`` seconds in all, kill the rest."""
        for s in self.slots:
            if s.proc is not None:
                try:
                    s.conn.send(("stop", None))
                except (OSError, ValueError):
                    pass
        end = time.perf_counter() + grace_s
        for s in self.slots:
            if s.proc is not None:
                s.proc.join(max(0.0, end - time.perf_counter()))
                self._kill(s, restart=False)
        self.spec.remove_tensors()
