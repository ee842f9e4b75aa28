"""Tests of the `dtriton` command line (click's CliRunner, CPU interpreter)."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch
from click.testing import CliRunner

import dtriton as dt
from dtriton.cli import load_algorithm, main, make_inputs, parse_dtypes, parse_shape
from dtriton.tune import ExploreResult

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

KERNELS = '''
import dtriton as dt

@dt.algorithm
def matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    i, j, k = dt.axes("i j k")
    return dt.sum(A[i, k] * B[k, j], over=k)[i, j]

@dt.algorithm
def pick(X: dt.Tensor["M", "C"], labels: dt.Tensor["M"], s: float):
    i, c = dt.axes("i c")
    return (X[i, labels[i]] * s)[i]

@dt.algorithm
def shift_scale(X: dt.Tensor["M"], s: float, t: float):
    i, = dt.axes("i")
    return (X[i] * s + t)[i]

not_an_algorithm = 3
'''


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DTRITON_TUNING_DB", raising=False)
    yield


@pytest.fixture
def kfile(tmp_path):
    p = tmp_path / "kernels.py"
    p.write_text(KERNELS)
    return p


def run(*args):
    res = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return res


def test_helpers(kfile):
    alg = load_algorithm(f"{kfile}:matmul")
    assert isinstance(alg, dt.Algorithm) and alg.name == "matmul"
    assert parse_shape("M=40,N=24 K=32") == {"M": 40, "N": 24, "K": 32}
    A, B = make_inputs(alg, {"M": 4, "K": 3, "N": 2}, torch.float16, "cpu")
    assert A.shape == (4, 3) and B.shape == (3, 2) and A.dtype == torch.float16
    pick = load_algorithm(f"{kfile}:pick")
    X, labels, s = make_inputs(pick, {"M": 50, "C": 7}, torch.float32, "cpu", {"s": 2.5})
    assert labels.dtype == torch.int64 and int(labels.min()) >= 0 and int(labels.max()) < 7 and s == 2.5
    torch.testing.assert_close(pick.reference(X, labels, s), X[torch.arange(50), labels] * 2.5)


def test_per_input_dtypes(kfile):
    """--dtype NAME=DTYPE: integer inputs hold valid indices (an index of a dim of size n: 0..n-1)
    or integers in [0, largest size]; floats follow the global --dtype."""
    assert parse_dtypes(["float16", "labels=int32", "X=float64"]) == (
        torch.float16, {"labels": torch.int32, "X": torch.float64})
    assert parse_dtypes([]) == (torch.float32, {})
    pick = load_algorithm(f"{kfile}:pick")
    X, labels, _ = make_inputs(pick, {"M": 60, "C": 3}, torch.float16, "cpu", dtypes={"labels": torch.int32})
    assert X.dtype == torch.float16 and labels.dtype == torch.int32
    assert int(labels.min()) == 0 and int(labels.max()) == 2
    mm = load_algorithm(f"{kfile}:matmul")
    A, B = make_inputs(mm, {"M": 30, "K": 5, "N": 2}, torch.float32, "cpu", dtypes={"A": torch.int64})
    assert A.dtype == torch.int64 and B.dtype == torch.float32
    assert int(A.min()) >= 0 and int(A.max()) <= 30 and len(A.unique()) > 3


def test_explore_command(kfile, tmp_path):
    db = tmp_path / "t.sqlite"
    res = run("explore", f"{kfile}:matmul", "--shape", "M=40,N=24,K=32", "--budget", "60", "--max-trials", "2",
              "--quiet", "--db", db, "--plot", tmp_path / "p.png", "--json", tmp_path / "r.json",
              "--store")   # the interpreter stores only when asked
    assert res.exit_code == 0, res.output
    assert "dtriton explore: matmul on interpreter" in res.output
    assert "best schedule" in res.output and "WARNING" in res.output
    best = dt.Schedule.from_json(res.output.split("dt.Schedule.from_json):")[1].strip().splitlines()[0])
    best.validate(load_algorithm(f"{kfile}:matmul"))
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    back = ExploreResult.from_json((tmp_path / "r.json").read_text())
    assert back.best == best
    # show --tuned now finds it
    res = run("show", f"{kfile}:matmul", "--shape", "M=40,N=24,K=32", "--tuned", "--db", db)
    assert res.exit_code == 0, res.output
    assert "# schedule from: tuned" in res.output and best.to_json() in res.output


def test_explore_command_with_space(kfile):
    space = json.dumps({"tile": {"i": [16, 32]}, "strategy": {"k": ["loop"]}})
    res = run("explore", f"{kfile}:matmul", "--shape", "M=40,N=24,K=32", "--space", space, "--quiet",
              "--no-store", "--strategy", "exhaustive")
    assert res.exit_code == 0, res.output
    assert "strategy exhaustive" in res.output and "stopped: exhausted" in res.output


def test_show_command(kfile):
    res = run("show", f"{kfile}:matmul", "--shape", "M=40,N=24,K=32")
    assert res.exit_code == 0, res.output
    assert "@_jit" in res.output and "def matmul_out" in res.output and "tl.dot" in res.output
    sched = dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, grid=("j", "i"))
    res = run("show", f"{kfile}:matmul", "--shape", "M=40,N=24,K=32", "--schedule", sched.to_json(),
              "--dtype", "float16")
    assert res.exit_code == 0, res.output
    # the heuristic's access pick and launch options shown
    assert sched.replace(access="pointer", num_warps=4, num_stages=2).to_json() in res.output
    res = run("show", f"{kfile}:pick", "--shape", "M=8,C=5", "--scalar", "s=2")
    assert res.exit_code == 0, res.output
    assert "def pick_out" in res.output


def test_show_schedule_from_file(kfile, tmp_path):
    f = tmp_path / "s.json"
    f.write_text(dt.Schedule(tile={"i": 32}, grid=("i", "j")).to_json())
    res = run("show", f"{kfile}:matmul", "--shape", "M=40,N=24,K=32", "--schedule", f)
    assert res.exit_code == 0, res.output
    assert '"i": 32' in res.output


@pytest.mark.parametrize("argv,msg", [
    (["show", "{k}:matmul", "--shape", "M=40"], "misses ['K', 'N']"),
    (["show", "{k}:matmul", "--shape", "M=4,K=4,N=4,Q=1"], "does not use"),
    (["show", "{k}:matmul", "--shape", "M=four"], "integer"),
    (["show", "{k}:nothing", "--shape", "M=4"], "has no 'nothing'"),
    (["show", "{k}:not_an_algorithm", "--shape", "M=4"], "not an @dt.algorithm"),
    (["show", "{k}", "--shape", "M=4"], "FILE.py:ALGORITHM"),
    (["show", "missing.py:matmul", "--shape", "M=4"], "no such file"),
    (["show", "{k}:matmul", "--shape", "M=4,K=4,N=4", "--dtype", "int3"], "--dtype"),
    (["show", "{k}:matmul", "--shape", "M=4,K=4,N=4", "--dtype", "A=int3"], "NAME=DTYPE"),
    (["show", "{k}:matmul", "--shape", "M=4,K=4,N=4", "--dtype", "Q=int64"], "not tensor inputs of matmul"),
    (["show", "{k}:matmul", "--shape", "M=4,K=4,N=4", "--dtype", "float16", "--dtype", "float64"], "give one"),
    (["show", "{k}:matmul", "--shape", "M=4,K=4,N=4", "--schedule", "{{\"tile\": {{\"i\": 3}}}}"], "power of two"),
    (["show", "{k}:matmul", "--shape", "M=4,K=4,N=4", "--schedule", "{{}}", "--tuned"], "not both"),
])
def test_errors_are_clear(kfile, argv, msg):
    res = CliRunner().invoke(main, [a.format(k=kfile) for a in argv])
    assert res.exit_code != 0
    assert msg in res.output, res.output


def test_demo_missing_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "dtriton.examples.diffusionnet.demo", None)
    res = CliRunner().invoke(main, ["demo", "--mesh", "bunny"])
    assert res.exit_code == 2
    assert "not part of this installation" in res.output


def test_demo_forwards_arguments(monkeypatch):
    seen = {}
    fake = types.ModuleType("dtriton.examples.diffusionnet.demo")

    def fake_main(args):
        seen["args"] = args
        return 0
    fake.main = fake_main
    monkeypatch.setitem(sys.modules, "dtriton.examples.diffusionnet.demo", fake)
    res = CliRunner().invoke(main, ["demo", "--mesh", "bunny", "-k", "64", "extra"])
    assert res.exit_code == 0, res.output
    assert seen["args"] == ["--mesh", "bunny", "-k", "64", "extra"]
    res = CliRunner().invoke(main, ["demo", "--help"])  # the demo's own help, not click's
    assert res.exit_code == 0 and seen["args"] == ["--help"]


def test_explore_space_that_does_not_fit_is_a_message_not_a_traceback(kfile):
    res = run("explore", f"{kfile}:matmul", "--shape", "M=40,N=24,K=32", "--space", '{"split": {"i": [2]}}',
              "--budget", "5", "--no-store", "--quiet")
    assert res.exit_code != 0
    assert "Error:" in res.output and "'i'" in res.output and "Traceback" not in res.output


def test_scalar_option_takes_comma_separated_pairs(kfile):
    """``--scalar s=2,t=3`` as ``--shape`` takes ``M=8,N=4`` (before: "VALUE must be a number")."""
    from dtriton.cli import _scalars
    assert _scalars(("s=2,t=3", "u=1.5")) == {"s": 2.0, "t": 3.0, "u": 1.5}
    assert _scalars(("s=2 t=-1",)) == {"s": 2.0, "t": -1.0}
    res = run("show", f"{kfile}:shift_scale", "--shape", "M=8", "--scalar", "s=2,t=3")
    assert res.exit_code == 0, res.output
    res = run("show", f"{kfile}:shift_scale", "--shape", "M=8", "--scalar", "s=2,t")
    assert res.exit_code != 0 and "'t': expected NAME=VALUE" in res.output
    res = run("show", f"{kfile}:shift_scale", "--shape", "M=8", "--scalar", "s=2,t=x")
    assert res.exit_code != 0 and "'t=x': VALUE must be a number" in res.output


def test_interpreter_explore_warning_names_the_cli_flag(kfile, tmp_path):
    from dtriton.tune import TuningWarning
    with pytest.warns(TuningWarning, match=r"pass store=True, or --store to `dtriton explore`"):
        res = run("explore", f"{kfile}:matmul", "--shape", "M=8,N=8,K=8", "--max-trials", "1", "--quiet",
                  "--db", tmp_path / "t.sqlite")
    assert res.exit_code == 0, res.output
    assert "--store" in res.output   # the summary's storage line


def test_explore_docstring_states_the_interpreter_default():
    """The interpreter's ``max_trials`` cap is 64 (explorer.py, docs/explore.md); the docstring said 8."""
    doc = " ".join(dt.explore.__doc__.split())
    assert "64 on the interpreter" in doc and "8 on the interpreter" not in doc.replace("64 on", "")
