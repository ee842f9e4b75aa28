"""The differential fuzzer in the test suite (issue 17).

- ``test_fuzz``: hypothesis draws cases from the grammar (``fuzz_grammar``) and two schedules
  each; a wrong value, a schedule-dependent result, a non-dtriton exception or a CompileError
  (generated code that does not compile on legal input) fails. The number of cases follows the
  hypothesis profile (``ci``: 3 x 20, derandomised).
- ``test_regressions``: every failure the fuzzer ever found, replayed from ``regressions.json``
  (the case, its data seed and its schedules), must now match; an entry naming an open bug
  (``"known"``, see ``fuzz_run.KNOWN``) is an expected failure while it still fails that way.
- the long runs' options (``fuzz_run.py``): a time limit that stops cleanly, the count table, the
  device copy of inputs that keeps their layouts (how ``--device cuda`` runs).
- ``test_fuzz_many``: runs only with ``DTRITON_FUZZ_CASES=N`` (e.g. 5000): N seeded cases
  (from ``DTRITON_FUZZ_START``, default 0), summary JSON written to ``DTRITON_FUZZ_SUMMARY``
  (default ``fuzz-summary.json``): counts per outcome, per run status and per refusal class.
  Long runs are better split into chunks with ``python3 tests/fuzz/fuzz_run.py``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, note, settings, strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dtriton as dt  # noqa: E402
from fuzz_grammar import Case, HypothesisDraw, Reject, describe, draw_case  # noqa: E402
from fuzz_run import Summary, known_issue, run_case, run_seed, verdict  # noqa: E402

HERE = Path(__file__).resolve().parent
REGRESSIONS = HERE / "regressions.json"


#: cases per test_fuzz run: 3x the profile's examples (ci: 60, about 30-60 s on the interpreter)
CI_CASES = 3 * settings.default.max_examples


@settings(max_examples=CI_CASES)
@given(st.data())
def test_fuzz(data):
    d = HypothesisDraw(data)
    try:
        case = draw_case(d)
    except Reject:
        assume(False)
    note(describe(case))
    rec = run_case(case, d=d)
    note(json.dumps(rec["case"]))
    note(json.dumps(rec["runs"], indent=1))
    why = verdict(rec)
    if why is not None and known_issue(rec) is not None:
        assume(False)
    assert why is None, why


def _regressions() -> list[dict]:
    return json.loads(REGRESSIONS.read_text()) if REGRESSIONS.exists() else []


@pytest.mark.parametrize("entry", _regressions(), ids=lambda e: e["id"])
def test_regressions(entry):
    case = Case.from_dict(entry["case"])
    scheds = [(s["how"], dt.Schedule.from_json(s["json"]) if s["json"] else None) for s in case.schedules]
    rec = run_case(case, scheds)
    why = verdict(rec)
    if why is not None and entry.get("known") and known_issue(rec) == entry["known"]:
        pytest.xfail(f"open bug {entry['known']}: {why}")
    assert why is None, f"{entry['id']} ({entry['what']}): {why}\n{describe(case)}"


@pytest.mark.skipif("DTRITON_FUZZ_CASES" not in os.environ, reason="set DTRITON_FUZZ_CASES=N to run N cases")
def test_fuzz_many():
    n = int(os.environ["DTRITON_FUZZ_CASES"])
    start = int(os.environ.get("DTRITON_FUZZ_START", "0"))
    out = Path(os.environ.get("DTRITON_FUZZ_SUMMARY", "fuzz-summary.json"))
    summ = Summary()
    for k, seed in enumerate(range(start, start + n)):
        summ.add(run_seed(seed, limit_s=120))
        if k % 50 == 49:
            out.write_text(json.dumps(summ.to_dict(), indent=1))
    res = summ.to_dict()
    out.write_text(json.dumps(res, indent=1))
    bad = [f"seed {r['seed']}: {verdict(r)}" for r in res["failures"] if not r["known"]]
    assert not bad, f"{len(bad)} failing cases (summary in {out}):\n" + "\n".join(bad[:20])


def _case(tensors: dict, outputs: list, sizes: dict, axis_sym: dict) -> Case:
    full = {n: {"dims": dims, "dtype": "float64", "kind": kind, "hi": hi, "layout": "contiguous"}
            for n, (dims, kind, hi) in tensors.items()}
    return Case(sizes, dict({a: "M" for a in "ijkl"}, **axis_sym), full, {}, outputs)


def test_evaluator_against_torch():
    """The fuzzer's own evaluator agrees with plain torch on softmax, matmul, a gather and argmax."""
    import torch
    from fuzz_eval import Evaluator
    g = torch.Generator().manual_seed(5)
    X, B = torch.randn(3, 5, generator=g, dtype=torch.float64), torch.randn(5, 4, generator=g, dtype=torch.float64)
    idx = torch.tensor([4, 0, 2])
    x = ["load", "X", ["i", "j"]]
    e = ["un", "exp", ["bin", "sub", x, ["red", "max", ["j"], x]]]
    outputs = [[["bin", "div", e, ["red", "sum", ["j"], e]], ["i", "j"]],
               [["red", "sum", ["j"], ["bin", "mul", x, ["load", "B", ["j", "k"]]]], ["k", "i"]],
               [["gather", "X", ["i", ["load", "G", ["i"]]]], ["i"]],
               [["red", "argmax", ["j"], x], ["i"]]]
    case = _case({"X": (["M", "N"], "float", None), "B": (["N", "K"], "float", None), "G": (["M"], "index", "N")},
                 outputs, {"M": 3, "N": 5, "K": 4}, {"i": "M", "j": "N", "k": "K"})
    sm, mm, ga, am = Evaluator(case, [X, B, idx]).outputs()
    torch.testing.assert_close(sm, torch.softmax(X, -1))
    torch.testing.assert_close(mm, (X @ B).t())
    torch.testing.assert_close(ga, X[torch.arange(3), idx])
    assert torch.equal(am.long(), X.argmax(-1))


def test_time_limit_stops_cleanly_with_a_summary(tmp_path, capsys):
    """``fuzz_run.py --time-limit``: the run ends within about the limit, the JSON says where to
    resume, and the count table is printed."""
    import time

    import fuzz_run
    out = tmp_path / "part.json"
    t = time.time()
    assert fuzz_run.main(["--start", "3", "--time-limit", "3", "--out", str(out)]) == 0
    assert time.time() - t < 3 + 15   # one interpreter case may be cut at the limit; never run past it
    d = json.loads(out.read_text())
    assert d["stopped"] == "time-limit" and d["next_seed"] == 3 + d["cases"] and d["device"] == "cpu"
    text = capsys.readouterr().out
    assert "outcome" in text and "run status" in text and "stopped time-limit" in text
    assert fuzz_run.count_table(d).splitlines()[2].split()[0] in d["outcomes"]


def test_device_copy_keeps_strides_offsets_and_expanded_axes():
    import torch

    from fuzz_run import on_device
    base = torch.arange(24.0).reshape(4, 6)
    for a in (base.t(), base[1:, 2:], torch.arange(3.0).expand(5, 3), base[:, 1]):
        b = on_device(a, "cpu")
        assert b.stride() == a.stride() and b.storage_offset() == a.storage_offset() and torch.equal(a, b)
        assert b.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()   # a copy


def test_a_case_that_never_returns_ends_the_run_with_a_summary(tmp_path):
    """A GPU kernel that never ends blocks the main thread where the per-case alarm cannot reach
    it (here: SIGALRM blocked around a sleep); the watchdog writes the summary, names the seed and
    exits with status 3."""
    import subprocess
    code = f"""
import signal, sys, time
sys.path.insert(0, {str(HERE)!r})
import fuzz_run
real = fuzz_run.run_seed
def patched(seed, limit_s=0, deadline=None):
    if seed == 2:
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGALRM}})
        time.sleep(120)
    return real(seed, limit_s, deadline)
fuzz_run.run_seed = patched
fuzz_run.run_seeds(0, 5, __import__("pathlib").Path({str(tmp_path / "s.json")!r}), 2, hang_grace_s=1)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(HERE.parents[1] / "src")))
    assert r.returncode == 3, r.stdout[-2000:] + r.stderr[-2000:]
    d = json.loads((tmp_path / "s.json").read_text())
    assert d["stopped"] == "hung" and d["next_seed"] == 3 and d["cases"] == 3
    assert d["failures"][-1]["seed"] == 2 and "hung" in d["failures"][-1]["detail"]
    assert "seed 2: bug: hung" in r.stdout


def test_a_timeout_caught_inside_a_dtriton_error_is_still_a_timeout(monkeypatch):
    """The per-case alarm can fire inside an interpreted launch, whose exception dtriton wraps in a
    CompileError; the case is a timeout (or cut at the run's time limit), never a refusal."""
    import time

    import fuzz_run

    def slow_case(case, scheds=None, d=None):
        try:
            time.sleep(30)
        except fuzz_run.Timeout as e:   # what the runtime does: a CompileError naming the launch's error
            c = fuzz_run._classify(dt.CompileError(f"kernel fuzz_out failed to compile or launch\n{e!r}"))
            return {"outcome": "refusal", "detail": c["msg"], "runs": [dict(c, how="default")]}
    monkeypatch.setattr(fuzz_run, "run_case", slow_case)
    assert fuzz_run.run_seed(0, limit_s=1)["outcome"] == "timeout"
    assert fuzz_run.run_seed(0, limit_s=60, deadline=time.time() + 1)["outcome"] == "cut"
