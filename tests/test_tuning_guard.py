"""Which stored tuning records may serve a call (tune/db.py): same dtriton version, same device,
and an interpreter-measured record only for its own shape bucket. Also: tests and bench dry runs
keep out of the user's tuning database. Runs on the CPU interpreter."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

import dtriton as dt
import dtriton.tune.db as tdb
from dtriton.library import matmul, softmax
from dtriton.tune import (SCHEMA_VERSION, TunedKernel, TuningDB, TuningKey, TuningRecord, TuningWarning,
                          default_db_path, dtriton_version)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
ROOT = Path(__file__).resolve().parents[1]
SMALL = dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, grid=("j", "i"), num_warps=2)


def mm(M=40, K=32, N=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)


def record(args, key=None, version=None, median=10.0):
    key = key or TuningKey.for_call(matmul, args)
    rec = TuningRecord(key, "mm", SMALL.to_json(), median, median, median, dict(matmul.bind(args).sizes),
                       time.time())
    if version is not None:
        rec.dtriton = version
    return rec


def on_gpu(key: TuningKey, name="NVIDIA H200") -> TuningKey:
    return TuningKey(key.fingerprint, key.bucket, key.dtypes, name, key.triton)


def test_interpreter_record_serves_its_own_bucket_only(tmp_path):
    """The stale-cache case: a schedule timed on the interpreter at one size ran 6-8x slower than
    the heuristic's at another; it now serves only calls of its own bucket."""
    db = TuningDB(tmp_path / "t.sqlite")
    db.store(record(mm()))                              # M=40: bucket 64
    k = TunedKernel(matmul, db)
    assert k.origin_for(*mm(M=56, N=20)) == "tuned"     # same bucket
    A, B = mm(M=100)                                    # bucket 128: once "nearest", now the heuristic
    assert db.nearest(TuningKey.for_call(matmul, (A, B))) is None
    assert k.origin_for(A, B) == "heuristic"
    assert k.schedule_for(A, B) == dt.compile(matmul).schedule_for(A, B)
    torch.testing.assert_close(k(A, B), A @ B, rtol=1e-4, atol=1e-4)


def test_records_never_cross_devices(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    args = mm()
    key = TuningKey.for_call(matmul, args)
    assert key.device == tdb.INTERPRETER
    db.store(record(args))
    assert db.lookup(on_gpu(key)) is None and db.nearest(on_gpu(key)) is None   # interpreter -> GPU: never
    gpu = on_gpu(key)
    db.store(record(args, key=gpu))
    other = on_gpu(key, "NVIDIA A100")
    assert db.lookup(other) is None and db.nearest(other) is None                # one GPU -> another: never
    db.delete(key)
    assert db.lookup(key) is None                                                # GPU -> interpreter: never
    near = TuningKey(gpu.fingerprint, "K=32/16,M=128,N=32", gpu.dtypes, gpu.device, gpu.triton)
    assert db.nearest(near).key == gpu                                           # GPU -> nearby GPU bucket


def test_records_of_another_dtriton_version_are_ignored_and_replaced(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    args = mm()
    key = TuningKey.for_call(matmul, args)
    assert record(args).dtriton == dtriton_version() == dt.__version__
    db.store(record(args, version="0.0.1", median=1.0))
    assert db.lookup(key) is None and db.nearest(on_gpu(key)) is None
    assert [r.dtriton for r in db.records()] == ["0.0.1"]
    assert TunedKernel(matmul, db).origin_for(*args) == "heuristic"
    assert db.store(record(args, median=50.0))        # slower, but the old one is another version's
    assert db.lookup(key).dtriton == dtriton_version() and db.lookup(key).median_us == 50.0
    assert not db.store(record(args, median=60.0))    # same version: the faster one stays
    # exported records keep their version; a version-1 export carries none: stored, never served
    doc = db.export_json()
    assert doc["version"] == SCHEMA_VERSION and doc["records"][0]["dtriton"] == dtriton_version()
    old = dict(doc["records"][0])
    old.pop("dtriton")
    db2 = TuningDB(tmp_path / "t2.sqlite")
    assert db2.import_json({"format": "dtriton-tuning", "version": 1, "records": [old]}) == 1
    assert db2.records()[0].dtriton == "" and db2.lookup(key) is None


def test_trials_of_another_version_are_ignored(tmp_path, monkeypatch):
    db = TuningDB(tmp_path / "t.sqlite")
    key = TuningKey.for_call(matmul, mm())
    row = dict(schedule_json=SMALL.to_json(), status="ok", reason="", median_us=1.0, p20_us=1.0, p80_us=1.0)
    db.store_trials(key, {"M": 40}, [row])
    assert list(db.trials(key, {"M": 40})) == [SMALL.to_json()]
    monkeypatch.setattr(tdb, "__version__", "9.9.9")
    assert db.trials(key, {"M": 40}) == {} and db.lookup(key) is None


def test_schema_1_file_is_migrated_not_thrown_away(tmp_path):
    """A database written before records carried a version: kept (no 'unreadable' warning, not
    moved aside), its records listed but serving no call; new stores work."""
    path = tmp_path / "t.sqlite"
    key = TuningKey.for_call(matmul, mm())
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    con.execute("""CREATE TABLE records (fingerprint TEXT, bucket TEXT, dtypes TEXT, device TEXT, triton TEXT,
        algorithm TEXT, schedule TEXT, median_us REAL, p20_us REAL, p80_us REAL, sizes TEXT, created REAL,
        PRIMARY KEY (fingerprint, bucket, dtypes, device, triton))""")
    con.execute("""CREATE TABLE trials (fingerprint TEXT, sizes TEXT, dtypes TEXT, device TEXT, triton TEXT,
        schedule TEXT, status TEXT, reason TEXT, median_us REAL, p20_us REAL, p80_us REAL, created REAL,
        PRIMARY KEY (fingerprint, sizes, dtypes, device, triton, schedule))""")
    con.execute("INSERT INTO records VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (key.fingerprint, key.bucket, key.dtypes, key.device, key.triton, "mm", SMALL.to_json(),
                 1.0, 1.0, 1.0, json.dumps({"M": 40}), time.time()))
    con.commit()
    con.close()
    db = TuningDB(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TuningWarning)
        recs = db.records()
        assert [r.dtriton for r in recs] == [""] and db.lookup(key) is None
        assert db.store(record(mm(), median=5.0)) and db.lookup(key).median_us == 5.0
    assert not Path(str(path) + ".corrupt").exists()
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    con.close()


def test_a_newer_schema_is_left_alone(tmp_path):
    """A newer dtriton's file is neither read nor moved aside (an older version's run must not
    throw away a newer one's tuning): lookups miss and stores are dropped, with a warning."""
    path = tmp_path / "t.sqlite"
    db = TuningDB(path)
    db.store(record(mm()))
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    con.commit()
    con.close()
    key = TuningKey.for_call(matmul, mm())
    with pytest.warns(TuningWarning, match="schema version 99, written by a newer dtriton"):
        assert TuningDB(path).lookup(key) is None
    with pytest.warns(TuningWarning, match="store skipped"):
        assert not TuningDB(path).store(record(mm(), median=1.0))
    assert not list(tmp_path.glob("*.corrupt*"))
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*) FROM records").fetchone()[0] == 1
    con.close()


def test_tests_never_use_the_users_cache():
    """conftest replaces DTRITON_CACHE_DIR (even one the shell set) and drops DTRITON_TUNING_DB."""
    user = Path.home() / ".cache" / "dtriton"
    assert "DTRITON_TUNING_DB" not in os.environ
    assert not default_db_path().resolve().is_relative_to(user.resolve())
    assert not dt.runtime.cache_dir().resolve().is_relative_to(user.resolve())


def test_bench_dry_run_exploration_does_not_store(tmp_path, monkeypatch):
    """bench/run.py's tuned_kernel (used by chains, conv, diffusion, narrow, reductions): in a dry run the
    interpreter timings of tiny shapes never reach the tuning database."""
    monkeypatch.setenv("DTRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import run as suite
    monkeypatch.setattr(suite, "DRY", True)
    X = torch.randn(4, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        k, note = suite.tuned_kernel(softmax, (X,), budget=1.0,
                                     space=dt.Space(strategy={"j": ["whole", "online"]}))
    torch.testing.assert_close(k(X), torch.softmax(X, -1))
    assert TuningDB().records() == []
    sys.modules.pop("run", None)


def test_cli_lists_clears_exports_and_imports_records(tmp_path):
    """``dtriton tuning``: what a user with an old cache runs to see and drop what no longer serves."""
    from click.testing import CliRunner
    from dtriton.cli import main
    path = tmp_path / "t.sqlite"
    db = TuningDB(path)
    args = mm()
    db.store(record(args))                                            # this version, interpreter
    db.store(record(args, key=on_gpu(TuningKey.for_call(matmul, args))))   # this version, a GPU
    db.store(record(mm(M=100), version="0.0.1"))                      # another version
    run = CliRunner().invoke
    r = run(main, ["tuning", "--db", str(path)])
    assert r.exit_code == 0, r.output
    assert f"3 record(s); this is dtriton {dtriton_version()}" in r.output
    assert "interpreter  10.0 us  serves: its bucket\n" in r.output
    assert "NVIDIA H200  10.0 us  serves: its bucket and nearby ones" in r.output
    assert "serves: none (measured by dtriton 0.0.1; this is" in r.output
    r = run(main, ["tuning", "export", str(tmp_path / "x.json"), "--db", str(path)])
    assert r.exit_code == 0 and "3 record(s)" in r.output
    r = run(main, ["tuning", "clear", "--stale", "--db", str(path)])
    assert r.exit_code == 0 and "1 of 3 record(s) removed" in r.output
    assert sorted(rec.dtriton for rec in db.records()) == [dtriton_version()] * 2
    r = run(main, ["tuning", "clear", "--db", str(path)])
    assert "2 of 2 record(s) removed" in r.output and db.records() == []
    r = run(main, ["tuning", "import", str(tmp_path / "x.json"), "--db", str(path)])
    assert r.exit_code == 0 and "3 record(s)" in r.output and len(db.records()) == 3
    r = run(main, ["tuning", "import", "--db", str(path)])
    assert r.exit_code != 0 and "needs a FILE" in r.output
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    r = run(main, ["tuning", "import", str(tmp_path / "bad.json"), "--db", str(path)])
    assert r.exit_code != 0 and "not a dtriton tuning export" in r.output
