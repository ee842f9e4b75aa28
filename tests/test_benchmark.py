"""``dt.benchmark`` / ``dtriton bench``, ``python -m dtriton``, GPU-only options on the CPU, and the
test session's private cache directory (CPU interpreter, tiny shapes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import dtriton as dt
from dtriton.cli import main
from dtriton.library import softmax
from dtriton.tune import TuningWarning, default_db_path

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

ROOT = Path(__file__).resolve().parents[1]

MASKED = '''

@dt.algorithm
def masked_sum(X: dt.Tensor["M", "N"], L: dt.Tensor["M"]):
    i, j = dt.axes("i j")
    return dt.sum(dt.where(j < L[i], X[i, j], 0.0), over=j)[i]
'''

KERNELS = '''
import dtriton as dt

@dt.algorithm
def rowsum(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.sum(X[i, j], over=j)[i]
'''


def test_benchmark_rows_are_checked_against_float64():
    X = torch.randn(5, 37)
    res = dt.benchmark(softmax, (X,), compile=False, seconds=0.05)
    assert [r.name for r in res.rows] == ["dtriton (interpreter)", "alg.reference (eager)"]
    assert res.interpreter and res.schedule_origin == "heuristic" and res.shapes == {"M": 5, "N": 37}
    for r in res.rows:
        assert r.status == "ok" and r.rel_err < 1e-6, r
        med, q1, q3 = r.call_us
        assert 0 < q1 <= med <= q3
        assert r.kernel_us is None                      # no GPU: no kernel time
    text = str(res)
    assert "Triton interpreter on the CPU" in text and "softmax" in text and "[IQR]" in text
    flat = " ".join(text.split())
    assert "vs reference" in flat and "eager PyTorch" not in flat and "Python overhead" in flat
    # interpreter times against torch say nothing about speed: no 0.00x for the dtriton row
    dt_line = next(ln for ln in text.splitlines() if "dtriton (interpreter)" in ln)
    assert "n/a (interpreter)" in dt_line and "x " not in dt_line.split("n/a")[0]
    back = json.loads(res.to_json())
    assert back["rows"][0]["status"] == "ok" and dt.Schedule.from_json(back["schedule"]).grid


def test_benchmark_given_schedule_and_plot(tmp_path):
    X = torch.randn(3, 20, dtype=torch.float64)
    sched = dt.Schedule(tile={"i": 2}, grid=("i",), strategy={"j": "loop"}, stages={})
    res = dt.benchmark(softmax, (X,), schedule=sched.replace(tile={"i": 2, "j": 8}), compile=False, seconds=0.02)
    assert res.schedule_origin == "given" and '"j": 8' in res.schedule
    assert res.row("dtriton").status == "ok" and res.row("dtriton").rel_err < 1e-12
    assert res.plot(tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_benchmark_reports_wrong_and_failing_implementations(monkeypatch):
    """A row whose outputs differ from float64 is "wrong", one that raises is "failed": both are rows."""
    X = torch.randn(4, 9)
    monkeypatch.setattr(torch, "compile", lambda f: (lambda *a: f(*a) + 1e-2))
    res = dt.benchmark(softmax, (X,), seconds=0.02)
    row = res.row("torch.compile")
    assert row.status == "wrong" and row.rel_err > 1e-3, row

    def broken(f):
        def g(*a):
            raise RuntimeError("no C++ compiler\nsecond line")
        return g
    monkeypatch.setattr(torch, "compile", broken)
    row = dt.benchmark(softmax, (X,), seconds=0.02).row("torch.compile")
    assert row.status == "failed" and row.note == "RuntimeError: no C++ compiler" and row.call_us is None


def test_benchmark_baseline_is_a_checked_row_and_the_speed_reference(monkeypatch):
    X = torch.randn(3, 11)

    def torch_softmax(X):
        return torch.softmax(X, -1)
    monkeypatch.setattr(torch, "compile", lambda f: f)       # no inductor compile here (slow on the CPU)
    res = dt.benchmark(softmax, (X,), baseline=torch_softmax, seconds=0.02)
    assert [r.name for r in res.rows] == ["dtriton (interpreter)", "baseline (torch_softmax)",
                                          "torch.compile(baseline)", "alg.reference (eager)",
                                          "torch.compile(alg.reference)"]
    assert all(r.status == "ok" for r in res.rows), res.rows
    assert res.speed_reference().name == "baseline (torch_softmax)" and "vs baseline" in str(res)
    res = dt.benchmark(softmax, (X,), baseline=lambda X: torch.softmax(X, 0), compile=False, seconds=0.02)
    assert res.row("baseline").status == "wrong"                    # checked against float64 too
    with pytest.raises(TypeError, match="baseline must be a callable"):
        dt.benchmark(softmax, (X,), baseline="torch.softmax")


def test_benchmark_argument_errors():
    X = torch.randn(4, 9)
    with pytest.raises(ValueError, match="not both"):
        dt.benchmark(softmax, (X,), schedule=dt.Schedule(), budget=1)
    with pytest.raises(TypeError, match="schedule must be"):
        dt.benchmark(softmax, (X,), schedule={"tile": {}})


def test_benchmark_after_exploring(tmp_path):
    X = torch.randn(4, 9)
    with pytest.warns(TuningWarning):
        res = dt.benchmark(softmax, (X,), budget=3, compile=False, seconds=0.02, db=tmp_path / "t.sqlite",
                           progress=False)
    assert res.schedule_origin == "explored (3 s)" and res.row("dtriton").status == "ok"


def test_bench_command(tmp_path):
    f = tmp_path / "kernels.py"
    f.write_text(KERNELS)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["bench", f"{f}:rowsum", "--shape", "M=3,N=17", "--no-compile", "--seconds",
                                    "0.02", "--json", str(out), "--dtype", "float16"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "rowsum" in res.output and "alg.reference (eager)" in res.output and "interpreter" in res.output
    data = json.loads(out.read_text())
    assert data["dtypes"] == ["float16"] and [r["status"] for r in data["rows"]] == ["ok", "ok"]
    res = CliRunner().invoke(main, ["bench", f"{f}:rowsum", "--shape", "M=3,N=17", "--tuned", "--budget", "2"])
    assert res.exit_code != 0 and "one of --budget, --schedule and --tuned" in res.output


BASELINE = '''
import torch

def torch_rowsum(X):
    return X.sum(-1)
'''


def test_bench_command_baseline_and_integer_inputs(tmp_path):
    f = tmp_path / "kernels.py"
    f.write_text(KERNELS + MASKED)
    (tmp_path / "base.py").write_text(BASELINE)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["bench", f"{f}:rowsum", "--shape", "M=3,N=5", "--no-compile", "--seconds", "0.02",
                                    "--baseline", f"{tmp_path / 'base.py'}:torch_rowsum", "--json", str(out)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["rows"]
    assert [(r["name"], r["status"]) for r in rows] == [
        ("dtriton (interpreter)", "ok"), ("baseline (torch_rowsum)", "ok"), ("alg.reference (eager)", "ok")]
    res = CliRunner().invoke(main, ["bench", f"{f}:rowsum", "--shape", "M=3,N=5", "--baseline", f"{f}:nothing"])
    assert res.exit_code != 0 and "nothing" in res.output
    res = CliRunner().invoke(main, ["bench", f"{f}:masked_sum", "--shape", "M=4,N=6", "--no-compile", "--seconds",
                                    "0.02", "--dtype", "float64", "--dtype", "L=int64", "--json", str(out)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["dtypes"] == ["float64", "int64"] and all(r["status"] == "ok" for r in data["rows"])


def test_python_dash_m_dtriton():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "dtriton", "--help"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    for cmd in ("bench", "explore", "show", "demo"):
        assert cmd in r.stdout
    assert "Usage: dtriton" in r.stdout


def test_warm_timing_on_the_cpu_warns(tmp_path):
    X = torch.randn(4, 9)
    with pytest.warns(TuningWarning, match="timing='warm' has no effect on the Triton interpreter"):
        dt.explore(softmax, (X,), budget=2, max_trials=1, timing="warm", store=False, progress=False)


def test_tests_use_a_private_cache_directory():
    """conftest points DTRITON_CACHE_DIR at a temporary folder: tests never write ~/.cache/dtriton."""
    cache = os.environ.get("DTRITON_CACHE_DIR")
    assert cache and not Path(cache).resolve().is_relative_to(Path.home() / ".cache")
    assert Path(cache) in default_db_path().parents


def test_table_shows_kernel_times_only_when_measured(tmp_path):
    """The GPU layout (a kernel-time column, its caption) from a result built by hand: no GPU here."""
    from dtriton.tune import BenchmarkResult, BenchRow
    rows = [BenchRow("dtriton", "ok", (10.0, 9.0, 12.0), (4.0, 3.5, 4.5), 1e-7),
            BenchRow("alg.reference (eager)", "ok", (20.0, 19.0, 22.0), (8.0, 7.9, 8.2), 1e-8),
            BenchRow("torch.compile(alg.reference)", "failed", note="RuntimeError: x")]
    res = BenchmarkResult("softmax", {"M": 4, "N": 8}, ["float16"], "NVIDIA H200", False, "{}", "heuristic", 1e-2,
                          rows)
    text = str(res)
    assert "kernel µs" in text and "GPU time" in text and "2x" in text
    assert "4.00 [3.50-4.50]" in text and "10.0 [9.00-12.0]" in text
    assert "failed: RuntimeError: x" in text and "interpreter" not in text
    assert res.plot(tmp_path / "g.png").stat().st_size > 0
    res.rows = [BenchRow(r.name, r.status, r.call_us, None, r.rel_err, r.note) for r in rows]
    assert "kernel µs" not in str(res)
