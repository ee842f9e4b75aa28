"""Messages found by the session-5 fresh-user trial and fixed in session 6: a number as an axis size,
``dtriton tuning`` on a database path that does not exist, importing a missing export file."""

from __future__ import annotations

import pytest
import torch

import dtriton as dt
from dtriton.tune import TuningDatabaseError, TuningDB


def test_axis_size_given_as_a_number_says_how_to_pass_it():
    with pytest.raises(dt.AlgorithmError) as info:
        dt.axes("i r:3")
    msg = str(info.value)
    assert "axis 'r' has the size 3, a number" in msg
    assert "add an argument 'R: int'" in msg and "dt.axes('r:R')" in msg and "pass R=3" in msg


def test_the_fix_the_axis_message_gives_works():
    """The message's recipe: a window of R elements summed, R an int argument."""
    i, r = dt.axes("i:N r:R")

    @dt.algorithm
    def window_sum(X: dt.Tensor["N"], R: int):
        return dt.sum(X.pad(0.0)[i + r], over=r)[i]

    X = torch.randn(11)
    out = dt.compile(window_sum)(X, 3)
    ref = torch.stack([X[k:k + 3].sum() for k in range(11)])
    torch.testing.assert_close(out, ref.to(out.dtype))


def _cli(args):
    from click.testing import CliRunner
    from dtriton.cli import main
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize("action", [["list"], ["clear"], ["clear", "--stale"], ["export", "out.json"]])
def test_tuning_on_a_missing_db_path_says_so_and_creates_nothing(tmp_path, action):
    path = tmp_path / "sub" / "typo.sqlite"
    args = ["tuning", *action[:1], *([str(tmp_path / action[1])] if action[1:2] == ["out.json"] else action[1:]),
            "--db", str(path)]
    r = _cli(args)
    assert r.exit_code != 0
    assert f"tuning database {path} does not exist (nothing was created)" in r.output
    assert not path.exists() and not path.parent.exists()


def test_tuning_list_without_db_on_a_fresh_machine(tmp_path, monkeypatch):
    path = tmp_path / "fresh.sqlite"
    monkeypatch.setenv("DTRITON_TUNING_DB", str(path))
    r = _cli(["tuning"])
    assert r.exit_code == 0 and "no tuning database yet" in r.output and "0 record(s)" in r.output
    assert not path.exists()


def test_tuning_import_of_a_missing_file_names_it(tmp_path):
    missing = tmp_path / "nothere.json"
    r = _cli(["tuning", "import", str(missing), "--db", str(tmp_path / "t.sqlite")])
    assert r.exit_code != 0 and "Errno" not in r.output
    assert f"cannot import '{missing}': no such file" in r.output and "dtriton tuning export FILE" in r.output
    assert not (tmp_path / "t.sqlite").exists()
    with pytest.raises(TuningDatabaseError, match="is a directory|Is a directory"):
        TuningDB(tmp_path / "u.sqlite").import_json(tmp_path)


def test_python_max_and_chained_comparisons_point_to_the_dt_functions():
    i, j = dt.axes("i j")
    with pytest.raises(dt.AlgorithmError, match=r"dt\.maximum\(a, b\) / dt\.minimum\(a, b\) instead of Python's max"):
        @dt.algorithm
        def relu(X: dt.Tensor["M", "N"]):
            return max(X[i, j], 0.0)[i, j]
    with pytest.raises(dt.AlgorithmError, match=r"`\(a < b\) & \(b < c\)` for a chained comparison"):
        @dt.algorithm
        def band(X: dt.Tensor["M", "N"]):
            return dt.where(0 < j < 4, X[i, j], 0.0)[i, j]

    @dt.algorithm
    def band_fixed(X: dt.Tensor["M", "N"]):   # the message's fix
        return dt.where((0 < j) & (j < 4), X[i, j], 0.0)[i, j]
    X = torch.randn(3, 7)
    ref = X.clone()
    ref[:, 0] = 0
    ref[:, 4:] = 0
    assert torch.equal(dt.compile(band_fixed)(X), ref)


def test_round_builtin_says_how_to_round():
    i, j = dt.axes("i j")
    with pytest.raises(dt.AlgorithmError, match=r"round\(\) cannot take a dtriton expression.*saturate=True"):
        @dt.algorithm
        def r(X: dt.Tensor["M", "N"]):
            return round(X[i, j])[i, j]

    @dt.algorithm
    def r_fixed(X: dt.Tensor["M", "N"]):
        return dt.cast(X[i, j], torch.int32, saturate=True)[i, j]
    X = torch.tensor([[0.5, 1.5, -2.5, 2.4, -0.6]])
    assert dt.compile(r_fixed)(X).tolist() == torch.round(X).int().tolist()


def test_reading_a_missing_tuning_database_creates_nothing(tmp_path):
    from conftest import matmul
    from dtriton.tune import TuningKey
    path = tmp_path / "sub" / "typo.sqlite"
    db = TuningDB(path)
    key = TuningKey.for_call(matmul, (torch.randn(4, 3), torch.randn(3, 2)))
    assert db.lookup(key) is None and db.records() == [] and db.trials(key, {"M": 4, "K": 3, "N": 2}) == {}
    assert db.delete(key) is False
    db.clear()
    assert not path.exists() and not path.parent.exists()


@pytest.mark.parametrize("cmd", ["show", "bench"])
def test_cli_tuned_with_a_missing_db_says_so(tmp_path, cmd):
    path = tmp_path / "typo.sqlite"
    r = _cli([cmd, "dtriton.library:matmul", "--shape", "M=8,K=8,N=8", "--tuned", "--db", str(path)])
    assert r.exit_code != 0 and f"tuning database {path} does not exist" in r.output
    assert not path.exists()


def test_cli_space_that_is_not_json():
    r = _cli(["explore", "dtriton.library:matmul", "--shape", "M=8,K=8,N=8", "--space", "{tile: 3}", "--quiet"])
    assert r.exit_code != 0 and "--space is not JSON" in r.output and '{"tile": {"i": [64, 128]}' in r.output


@pytest.mark.parametrize("mode", ["atomic", "partials"])
def test_split_mode_without_a_split_warns(mode):
    from dtriton.library import softmax
    with pytest.warns(dt.ScheduleWarning, match=rf"split_mode='{mode}' has no effect: this call splits no reduction"):
        dt.compile(softmax, dt.Schedule(split_mode=mode))(torch.randn(4, 37))
