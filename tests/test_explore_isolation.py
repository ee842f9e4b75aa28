"""dt.explore's hard budget and candidate isolation (issue 17, cases 13 and 14), on the CPU.

Candidates run in forked worker processes here (spawned ones on a GPU). A worker that dies (the
stand-in for a CUDA fault: ``os.abort()``, through the ``DTRITON_TEST_WORKER_ABORT`` hook) or
hangs is recorded against its candidate, replaced, and the exploration goes on; a candidate still
running at the end of the budget is abandoned and listed as skipped.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

import dtriton as dt
from dtriton.library import matmul
from dtriton.tune import Space
from dtriton.tune.worker import WorkerPool, WorkerSpec, WorkerUnavailable, algorithm_ref, can_isolate

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.filterwarnings("ignore::dtriton.tune.TuningWarning")]

TILES = Space(tile={"i": [16, 32, 64]}, strategy={"k": ["loop"]})


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DTRITON_TUNING_DB", raising=False)
    monkeypatch.delenv("DTRITON_TEST_WORKER_ABORT", raising=False)


@pytest.fixture
def mm_args():
    g = torch.Generator().manual_seed(1)
    return torch.randn(40, 32, generator=g), torch.randn(32, 24, generator=g)


class _Slow(dt.Kernel):
    """Candidates with ``tile i == 16`` hang (sleep ``delay`` seconds) before running."""
    delay = 60.0

    def __call__(self, *args, out=None):
        if self.schedule is not None and self.schedule.tile.get("i") == 16:
            time.sleep(self.delay)
        return super().__call__(*args, out=out)


class _Abort(dt.Kernel):
    """Candidates with ``tile i == 16`` abort the process they run in (a CUDA fault's stand-in)."""
    def __call__(self, *args, out=None):
        if self.schedule is not None and self.schedule.tile.get("i") == 16:
            os.abort()
        return super().__call__(*args, out=out)


def _by_tile(res, i):
    return [r for r in res.table if r["schedule"] is not None and r["schedule"].tile.get("i") == i
            and r["origin"] != "heuristic"]


def test_aborting_candidate_is_recorded_and_exploration_goes_on(mm_args):
    res = dt.explore(matmul, mm_args, space=TILES, strategy="exhaustive", budget=120, progress=False, store=False,
                     _candidate_factory=_Abort)
    bad = _by_tile(res, 16)
    assert bad and bad[0]["status"] == "failed", res.table
    assert "WorkerDied" in bad[0]["reason"] and "SIGABRT" in bad[0]["reason"]
    later = [r for r in res.table if r["id"] > bad[0]["id"] and r["status"] == "ok"]
    assert later, "the exploration stopped at the faulting candidate"
    assert res.best is not None and res.best.tile["i"] != 16
    assert "WorkerDied" in res.summary()


@pytest.mark.parametrize("op", ["check", "time"])
def test_test_hook_aborts_a_worker_at_a_chosen_candidate(mm_args, monkeypatch, op):
    monkeypatch.setenv("DTRITON_TEST_WORKER_ABORT", f"{op}:1")
    res = dt.explore(matmul, mm_args, space=TILES, strategy="exhaustive", budget=120, progress=False, store=False)
    row = res.table[1]
    assert row["status"] == "failed" and "WorkerDied" in row["reason"], row
    assert ("while compiling" if op == "check" else "while timing") in row["reason"]
    assert sum(r["status"] == "ok" for r in res.table) >= 2 and res.best is not None


def test_hanging_candidate_times_out_and_is_abandoned(mm_args, monkeypatch):
    monkeypatch.setattr(_Slow, "delay", 60.0)
    t = time.perf_counter()
    res = dt.explore(matmul, mm_args, space=TILES, strategy="exhaustive", budget=120, compile_timeout=2.0,
                     progress=False, store=False, _candidate_factory=_Slow)
    assert time.perf_counter() - t < 45
    slow = _by_tile(res, 16)
    assert slow and slow[0]["status"] == "timeout" and "abandoned" in slow[0]["reason"]
    assert res.best is not None


def test_budget_is_hard_and_abandoned_candidate_is_listed(mm_args, monkeypatch):
    monkeypatch.setattr(_Slow, "delay", 60.0)
    sp = Space(tile={"i": [16, 32]}, strategy={"k": ["loop"]})
    t = time.perf_counter()
    res = dt.explore(matmul, mm_args, space=sp, strategy="exhaustive", budget=4, progress=False, store=False,
                     _candidate_factory=_Slow)
    wall = time.perf_counter() - t
    assert wall < 4 * 1.1 + 1.5, wall
    assert res.stop_reason == "budget"
    slow = _by_tile(res, 16)
    assert slow and slow[0]["status"] == "skipped" and "budget ran out" in slow[0]["reason"]
    text = res.summary()
    assert "skipped" in text and "budget ran out" in text


def test_isolate_false_runs_in_process(mm_args):
    res = dt.explore(matmul, mm_args, space=Space(tile={"i": [16, 32]}), budget=60, progress=False, store=False,
                     isolate=False)
    assert res.best is not None
    assert not res.isolated and "isolate=False" in res.isolation
    assert "WARNING: candidates ran in this process (isolate=False)" in res.summary()


def test_result_records_isolation_and_keeps_it_in_json(mm_args):
    res = dt.explore(matmul, mm_args, space=Space(tile={"i": [16]}), budget=60, progress=False, store=False)
    assert res.isolated and res.isolation == "1 worker process(es), started by fork"
    assert "isolation: candidates ran in 1 worker process(es), started by fork" in res.summary()
    back = dt.tune.ExploreResult.from_json(res.to_json())
    assert back.isolated and back.isolation == res.isolation


def test_spawned_workers_need_no_shared_memory(mm_args, monkeypatch):
    """The H200's failure (issue 17, case 14): torch's tensor passing to a spawned process needs a
    writable /dev/shm; without one every worker failed to start and the faulting candidate ran in
    the user's process. The spec's tensors now travel in a file: this exploration spawns its
    workers (the GPU's way) with torch's shared-memory sharing broken, and stays isolated."""
    def no_shm(*a, **k):
        raise RuntimeError("unable to open shared memory object </torch_0_0> in read-write mode")
    monkeypatch.setattr(torch.UntypedStorage, "_share_fd_cpu_", no_shm)
    monkeypatch.setattr(torch.UntypedStorage, "_share_filename_cpu_", no_shm)
    monkeypatch.setenv("DTRITON_WORKER_START", "spawn")
    res = dt.explore(matmul, mm_args, space=Space(tile={"i": [16, 32]}, strategy={"k": ["loop"]}),
                     strategy="exhaustive", budget=120, progress=False, store=False, _candidate_factory=_Abort)
    assert res.isolated and "spawn" in res.isolation, res.isolation
    bad = _by_tile(res, 16)
    assert bad and bad[0]["status"] == "failed" and "SIGABRT" in bad[0]["reason"], res.table
    assert res.best is not None and res.best.tile["i"] != 16


def test_worker_start_method_from_the_environment(monkeypatch):
    from dtriton.tune.worker import start_method_for
    assert start_method_for("cpu") == "fork" and start_method_for("cuda") == "spawn"
    monkeypatch.setenv("DTRITON_WORKER_START", "spawn")
    assert start_method_for(torch.device("cpu")) == "spawn"
    monkeypatch.setenv("DTRITON_WORKER_START", "forkserver")
    with pytest.raises(ValueError, match="DTRITON_WORKER_START"):
        start_method_for("cpu")


def _spec(args):
    b = matmul.bind(args)
    refs = (args[0] @ args[1],)
    return WorkerSpec(matmul, args, refs, {}, "cpu", True, 1.0, 1.0, "cold", dt.Kernel), b


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_restarts_a_dead_worker(mm_args, monkeypatch, method):
    """The pool on its own: a worker killed mid-request is reported and replaced (spawned: the
    replacement reads the inputs from the same file, removed when the pool closes)."""
    monkeypatch.setenv("DTRITON_TEST_WORKER_ABORT", "check:7")
    spec, _ = _spec(mm_args)
    pool = WorkerPool(spec, 2, start_method=method)
    try:
        res = pool.run([(0, ("check", 7, None, 1e-4)), (1, ("check", 8, None, 1e-4))], 60, None)
        assert res[0]["status"] == "failed" and "SIGABRT" in res[0]["reason"]
        assert res[1]["status"] == "ok" and pool.holder(8) == 1
        assert pool.restarts == 1
        res = pool.run([(0, ("check", 9, None, 1e-4))], 60, None)   # a fresh worker in slot 0
        assert res[0]["status"] == "ok" and pool.holder(9) == 0
        t = pool.run([(1, ("time", 8, None))], 60, None)[0]
        assert t["median_us"] > 0
        if method == "spawn":
            assert spec.tensor_file is not None and os.path.exists(spec.tensor_file)
    finally:
        pool.close()
    assert all(s.proc is None for s in pool.slots)
    assert spec.tensor_file is None


def test_algorithm_reference_for_spawned_workers():
    assert algorithm_ref(matmul) == ("dtriton.library", "matmul")

    @dt.algorithm
    def local(x: dt.Tensor["N"]):
        i, = dt.axes("i")
        return (x[i] + 1.0)[i]
    assert algorithm_ref(local) is None
    assert not can_isolate(local, dt.Kernel, torch.device("cuda"))
    assert can_isolate(local, dt.Kernel, torch.device("cpu"))
    assert can_isolate(matmul, dt.Kernel, torch.device("cuda"))


def test_spawned_worker_imports_the_algorithm_and_runs_candidates(mm_args):
    """The GPU's start method, on the CPU: the spec travels by pickle (the algorithm by reference)."""
    spec, _ = _spec(mm_args)
    pool = WorkerPool(spec, 1, start_method="spawn")
    try:
        res = pool.run([(0, ("check", 3, None, 1e-4))], 300, None)[0]
        assert res["status"] == "ok", res
        assert pool.run([(0, ("time", 3, None))], 300, None)[0]["median_us"] > 0
    finally:
        pool.close()


def test_spawned_worker_refuses_an_algorithm_it_cannot_import(mm_args):
    @dt.algorithm
    def local(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
        i, j, k = dt.axes("i j k")
        return dt.sum(A[i, k] * B[k, j], over=k)[i, j]
    spec, _ = _spec(mm_args)
    spec.alg = local
    pool = WorkerPool(spec, 1, start_method="spawn")
    with pytest.raises(WorkerUnavailable, match="cannot be imported"):
        pool.run([(0, ("check", 0, None, 1e-4))], 60, None)
    pool.close()


@pytest.mark.parametrize("script", [["bench/fault_check.py", "--dry-run"],
                                    ["bench/explore_budget.py", "--dry-run", "--budget", "3"]])
def test_gpu_scripts_dry_run(script, tmp_path):
    """The lead runs these on the H200 (without --dry-run); here they run on the interpreter."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "src"), DTRITON_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, *script, "--out", str(tmp_path)], cwd=root, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stdout + r.stderr
    if "fault" in script[0]:   # its dry run spawns the workers, as on a GPU
        assert "FAULT-CHECK PASS" in r.stdout and "SIGABRT" in r.stdout
        assert "isolation: candidates ran in 1 worker process(es), started by spawn" in r.stdout
    else:
        rows = __import__("json").loads((tmp_path / "explore_budget.json").read_text())["rows"]
        assert [r["case"] for r in rows] == ["matmul", "softmax", "attention"]


def test_progress_bar_on_a_terminal_only_after_the_delay():
    import io

    from rich.console import Console

    from dtriton.tune.progress import ExploreProgress
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True, width=120)
    bar = ExploreProgress("matmul", 20, console=con, delay_s=2.0)
    bar.update(1.0, 3, float("inf"))
    assert bar.bar is None and buf.getvalue() == ""   # short explorations print nothing
    bar.update(5.0, 7, 12.5)
    bar.close()
    out = buf.getvalue()
    assert "explore" in out and "7 candidates" in out and "12.5 µs" in out and "15 s left" in out
    quiet = ExploreProgress("matmul", 20, console=Console(file=io.StringIO()))   # not a terminal
    quiet.update(5.0, 1, 1.0)
    assert not quiet.enabled and quiet.bar is None
    off = ExploreProgress("matmul", 20, enabled=False, console=con)
    off.update(5.0, 1, 1.0)
    assert off.bar is None


@pytest.mark.parametrize("how", ["error", "death"])
def test_workers_that_cannot_set_up_fall_back_to_in_process(mm_args, monkeypatch, how):
    from dtriton.tune import worker

    def broken(spec):
        if how == "death":
            os._exit(7)
        raise RuntimeError("no inputs here")
    monkeypatch.setattr(worker, "_make_bench", broken)
    with pytest.warns(dt.tune.TuningWarning, match="without isolation"):
        res = dt.explore(matmul, mm_args, space=Space(tile={"i": [16, 32]}), budget=60, progress=False, store=False)
    assert res.best is not None and all(r["status"] in ("ok", "duplicate") for r in res.table)
    assert not res.isolated and ("could not set up" in res.isolation or "died while setting up" in res.isolation)
    assert "WARNING: candidates ran in this process, without isolation" in res.summary()


def test_a_worker_failing_setup_after_others_were_ready_skips_its_request(mm_args, monkeypatch, tmp_path):
    """Once a worker has been ready, another one failing its setup (e.g. out of GPU memory for its
    copies) does not end isolation: its request is skipped with the reason, the slot restarts."""
    from dtriton.tune import worker
    flag = tmp_path / "fail-setup"
    real = worker._make_bench

    def flaky(spec):
        if flag.exists():
            raise RuntimeError("CUDA out of memory (a stand-in)")
        return real(spec)
    monkeypatch.setattr(worker, "_make_bench", flaky)
    spec, _ = _spec(mm_args)
    pool = WorkerPool(spec, 2)
    try:
        assert pool.run([(0, ("check", 1, None, 1e-4))], 60, None)[0]["status"] == "ok"
        flag.touch()
        res = pool.run([(1, ("check", 2, None, 1e-4))], 60, None)[0]
        assert res["status"] == "skipped" and "out of memory" in res["reason"], res
        flag.unlink()
        assert pool.run([(1, ("check", 3, None, 1e-4))], 60, None)[0]["status"] == "ok"
    finally:
        pool.close()


def test_summary_columns_stay_apart_and_plot_shows_every_status(tmp_path):
    from dtriton.tune import ExploreResult
    js = '{"grid": ["i", "j"], "tile": {"i": 64, "j": 32}}'
    rows = [dict(id=0, origin="heuristic", status="ok", median_us=7393767.41, p20_us=7393767.41, p80_us=7493767.41,
                 rel_err=1e-7, compile_s=2.5, schedule_json=js, reason="", elapsed_s=3.0),
            dict(id=1, origin="space", status="ok", median_us=12.5, p20_us=12.0, p80_us=13.0, rel_err=1e-7,
                 compile_s=0.5, schedule_json=js, reason="", elapsed_s=4.0),
            dict(id=2, origin="space", status="skipped", median_us=None, p20_us=None, p80_us=None, schedule_json=js,
                 reason="the budget ran out while compiling and checking (abandoned)", elapsed_s=20.0),
            dict(id=3, origin="space", status="failed", median_us=None, p20_us=None, p80_us=None, schedule_json=js,
                 reason="WorkerDied: the worker process died (killed by SIGABRT)", elapsed_s=5.0),
            dict(id=4, origin="space", status="pruned", schedule_json=js, reason="shared memory 300000 > 232448"),
            dict(id=5, origin="space", status="pruned", schedule_json=js, reason="shared memory 400000 > 232448")]
    res = ExploreResult(algorithm=None, table=rows, device="interpreter", timings_meaningful=False, strategy="tpe",
                        stop_reason="budget", elapsed_s=20.1, budget_s=20)
    text = res.summary()
    assert "7,393,767.41  " in text and "7393767.417393767" not in text
    assert "[i,j]" in text   # schedules are data, not rich markup
    for needle in ("skipped", "budget ran out", "WorkerDied", "SIGABRT", "2 pruned: shared memory N > N"):
        assert needle in text, needle
    png = res.plot(tmp_path / "p.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_script_without_main_guard_is_explained_not_run_again(tmp_path):
    """A spawned worker imports the ``__main__`` script again to find its algorithm; a script that
    calls dt.explore at its top level would run a whole exploration in every worker. dt.explore
    refuses to run inside a worker, and the exploration says why it is not isolated."""
    import subprocess
    import sys
    script = tmp_path / "noguard.py"
    script.write_text(
        "import torch, dtriton as dt\n"
        "@dt.algorithm\n"
        "def twice(x: dt.Tensor['N']):\n"
        "    i, = dt.axes('i')\n"
        "    return (x[i] * 2.0)[i]\n"
        "res = dt.explore(twice, (torch.randn(37),), space=dt.Space(tile={'i': [16, 32]}), budget=60,\n"
        "                 progress=False, store=False)\n"
        "print('RESULT', res.isolated, res.best is not None, '|', res.isolation)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "src"), DTRITON_WORKER_START="spawn",
               DTRITON_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")]
    assert len(lines) == 1, r.stdout   # the worker did not run a second exploration
    assert lines[0].startswith("RESULT False True") and 'if __name__ == "__main__":' in lines[0]
    assert "dt.explore was called in a candidate worker process" in r.stderr


def test_explore_refuses_to_run_in_a_candidate_worker(mm_args, monkeypatch):
    import multiprocessing as mp

    from dtriton.tune.worker import WORKER_NAME
    monkeypatch.setattr(mp.current_process(), "name", WORKER_NAME)
    with pytest.raises(dt.DTritonError, match="candidate worker"):
        dt.explore(matmul, mm_args, budget=1, progress=False, store=False)


def test_spawned_worker_loads_an_algorithm_from_the_file_of_a_private_module(mm_args, tmp_path):
    """``dtriton explore FILE.py:ALG`` loads FILE under a private module name that a fresh process
    cannot import: a spawned worker loads the same file under that name."""
    import importlib.util
    import sys
    f = tmp_path / "algs.py"
    f.write_text("import dtriton as dt\n"
                 "@dt.algorithm\n"
                 "def mm(A: dt.Tensor['M', 'K'], B: dt.Tensor['K', 'N']):\n"
                 "    i, j, k = dt.axes('i j k')\n"
                 "    return dt.sum(A[i, k] * B[k, j], over=k)[i, j]\n")
    name = "dtriton_cli_test_private_module"
    sp = importlib.util.spec_from_file_location(name, f)
    mod = importlib.util.module_from_spec(sp)
    sys.modules[name] = mod
    try:
        sp.loader.exec_module(mod)
        spec, _ = _spec(mm_args)
        spec.alg = mod.mm
        pool = WorkerPool(spec, 1, start_method="spawn")
        try:
            res = pool.run([(0, ("check", 0, None, 1e-4))], 300, None)[0]
            assert res["status"] == "ok", res
        finally:
            pool.close()
    finally:
        del sys.modules[name]


def test_derived_algorithm_travels_by_value_to_spawned_workers(monkeypatch):
    """A dt.grad algorithm has no function to import; its IR pickles, so a spawned worker (the
    GPU's) gets it by value and the exploration is isolated."""
    from dtriton.library import softmax
    from dtriton.tune.worker import sendable
    g = dt.grad(softmax)["X"]
    assert algorithm_ref(g) is None and sendable(g) and can_isolate(g, dt.Kernel, torch.device("cuda"))
    monkeypatch.setenv("DTRITON_WORKER_START", "spawn")
    gen = torch.Generator().manual_seed(3)
    X, dY = torch.randn(5, 13, generator=gen), torch.randn(5, 13, generator=gen)
    res = dt.explore(g, (X, dY), space=Space(num_warps=[4]), budget=120, progress=False, store=False)
    assert res.isolated and "spawn" in res.isolation, res.isolation
    assert res.best is not None
