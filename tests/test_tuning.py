"""Tests of the tuning database and dt.compile(alg, "tuned") (runs on the CPU interpreter)."""

from __future__ import annotations

import json
import sqlite3
import time
import warnings

import pytest
import torch

import dtriton as dt
from dtriton.tune import (SCHEMA_VERSION, TunedKernel, TuningDatabaseError, TuningDB, TuningKey, TuningRecord,
                          TuningWarning, default_db_path, dtype_key, shape_bucket)

from dtriton.library import matmul, softmax  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DTRITON_TUNING_DB", raising=False)
    yield


def mm(M=40, K=32, N=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)


TUNED = dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, grid=("j", "i"), num_warps=2)


def record(args, sched=TUNED, median=10.0, alg=matmul):
    key = TuningKey.for_call(alg, args)
    return TuningRecord(key, alg.name, sched.to_json(), median, median * 0.9, median * 1.1,
                        dict(alg.bind(args).sizes), time.time())


# ----------------------------------------------------------------------------------------------
# keys and paths
# ----------------------------------------------------------------------------------------------
def test_keys():
    assert shape_bucket({"M": 40, "K": 32, "N": 24}) == "K=32/16,M=64,N=32"
    assert shape_bucket({"M": 4096}) == shape_bucket({"M": 4096}) != shape_bucket({"M": 4095})
    assert dtype_key({"B": torch.float16, "A": torch.float32}) == "A=float32,B=float16"
    k = TuningKey.for_call(matmul, mm())
    assert k.fingerprint == matmul.fingerprint and k.device == "interpreter"
    assert k.triton and k.bucket == "K=32/16,M=64,N=32" and k.dtypes == "A=float32,B=float32"
    assert TuningKey.for_call(matmul, mm(M=48)) != k  # 48 divides by 16, 40 does not


def test_default_path_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRITON_CACHE_DIR", str(tmp_path / "c"))
    assert default_db_path() == tmp_path / "c" / "tuning.sqlite"
    monkeypatch.setenv("DTRITON_TUNING_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"
    assert TuningDB().path == tmp_path / "x.db"


# ----------------------------------------------------------------------------------------------
# the database
# ----------------------------------------------------------------------------------------------
def test_store_lookup_keeps_the_faster(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    args = mm()
    rec = record(args, median=10.0)
    assert db.lookup(rec.key) is None
    assert db.store(rec)
    got = db.lookup(rec.key)
    assert got.schedule == TUNED and got.median_us == 10.0 and got.sizes == {"M": 40, "K": 32, "N": 24}
    slower = record(args, sched=TUNED.replace(num_warps=4), median=20.0)
    assert not db.store(slower)
    assert db.lookup(rec.key).median_us == 10.0
    assert db.store(slower, overwrite=True)
    assert db.lookup(rec.key).median_us == 20.0
    assert len(db.records()) == 1 and len(db.records(matmul.fingerprint)) == 1 and db.records("nope") == []
    assert db.delete(rec.key) and db.lookup(rec.key) is None


def test_trials_round_trip(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    key = TuningKey.for_call(matmul, mm())
    rows = [{"schedule_json": TUNED.to_json(), "status": "ok", "reason": "", "median_us": 3.0, "p20_us": 2.0,
             "p80_us": 4.0},
            {"schedule_json": "{}", "status": "wrong", "reason": "relative error", "median_us": None,
             "p20_us": None, "p80_us": None}]
    assert db.store_trials(key, {"M": 40, "K": 32, "N": 24}, rows)
    got = db.trials(key, {"N": 24, "M": 40, "K": 32})
    assert got[TUNED.to_json()]["median_us"] == 3.0 and got["{}"]["status"] == "wrong"
    assert db.trials(key, {"M": 41, "K": 32, "N": 24}) == {}


def _fill(db, n=60):
    base = record(mm())
    for k in range(n):
        key = TuningKey(f"fp{k:03d}", base.key.bucket, base.key.dtypes, base.key.device, base.key.triton)
        db.store(TuningRecord(key, "filler", TUNED.to_json(), float(k + 1), 1.0, 2.0, {"M": 40}, time.time()))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty-header"])
def test_corrupt_database_warns_and_rebuilds(tmp_path, damage):
    path = tmp_path / "t.sqlite"
    db = TuningDB(path)
    _fill(db, 30)
    assert len(db.records()) == 30
    size = path.stat().st_size
    if damage == "truncate":
        with open(path, "r+b") as f:
            f.truncate(size // 2)
    elif damage == "garbage":
        path.write_bytes(b"this is not a database " * 200)
    else:
        with open(path, "r+b") as f:
            f.write(b"\0" * 100)
    key = record(mm()).key
    with pytest.warns(TuningWarning, match="unreadable"):
        assert TuningDB(path).lookup(key) is None
    assert (tmp_path / "t.sqlite.corrupt").exists()
    db2 = TuningDB(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rebuilt database is healthy: no more warnings
        assert db2.store(record(mm()))
        assert db2.lookup(key).schedule == TUNED


def test_corrupt_database_while_tuned_kernel_runs(tmp_path):
    path = tmp_path / "t.sqlite"
    _fill(TuningDB(path), 10)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)
    A, B = mm()
    k = TunedKernel(matmul, path)
    with pytest.warns(TuningWarning):
        C = k(A, B)
    torch.testing.assert_close(C, A @ B, rtol=1e-4, atol=1e-4)
    assert k.origin_for(A, B) == "heuristic"


def test_locked_database_warns_and_skips(tmp_path):
    path = tmp_path / "t.sqlite"
    db = TuningDB(path, timeout_s=0.05)
    rec = record(mm())
    db.store(rec)
    holder = sqlite3.connect(str(path))
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.warns(TuningWarning, match="skipped"):
            assert db.store(record(mm(), median=1.0)) is False
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # write-ahead log: a writer does not block readers
            assert db.lookup(rec.key).median_us == 10.0
    finally:
        holder.rollback()
        holder.close()
    assert db.lookup(rec.key).median_us == 10.0  # nothing was lost or rebuilt
    assert not (tmp_path / "t.sqlite.corrupt").exists()


def test_unwritable_location_warns(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    db = TuningDB(blocker / "sub" / "t.sqlite")  # its folder cannot be created
    with pytest.warns(TuningWarning):
        assert db.store(record(mm())) is False


def test_export_import_round_trip(tmp_path):
    src = TuningDB(tmp_path / "a.sqlite")
    src.store(record(mm()))
    src.store(record(mm(M=128), sched=TUNED.replace(num_warps=8), median=5.0))
    doc = src.export_json(tmp_path / "export.json")
    assert doc["format"] == "dtriton-tuning" and doc["version"] == SCHEMA_VERSION
    assert json.loads((tmp_path / "export.json").read_text())["records"] == json.loads(json.dumps(doc["records"]))
    dst = TuningDB(tmp_path / "b.sqlite")
    assert dst.import_json(tmp_path / "export.json") == 2
    a = [(r.key, r.schedule, r.median_us, r.sizes) for r in src.records()]
    b = [(r.key, r.schedule, r.median_us, r.sizes) for r in dst.records()]
    assert a == b
    assert dst.import_json(doc) == 0  # not faster than what is there
    assert dst.import_json(json.dumps(doc), overwrite=True) == 2


def test_import_rejects_bad_documents(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    with pytest.raises(TuningDatabaseError, match="not a dtriton tuning export"):
        db.import_json({"format": "something-else", "version": 1, "records": []})
    with pytest.raises(TuningDatabaseError, match="version"):
        db.import_json({"format": "dtriton-tuning", "version": SCHEMA_VERSION + 1, "records": []})
    with pytest.raises(TuningDatabaseError, match="JSON"):
        db.import_json("{not json")
    good = record(mm()).to_dict()
    bad = dict(good, schedule={"tile": {"i": 3}})
    with pytest.warns(TuningWarning, match="record 0 skipped"):
        n = db.import_json({"format": "dtriton-tuning", "version": 1, "records": [bad, good]})
    assert n == 1


# ----------------------------------------------------------------------------------------------
# dt.compile(alg, "tuned")
# ----------------------------------------------------------------------------------------------
def test_tuned_kernel_uses_stored_schedule_else_heuristic(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRITON_TUNING_DB", str(tmp_path / "t.sqlite"))
    A, B = mm()
    k = dt.compile(matmul, "tuned")
    assert isinstance(k, TunedKernel)
    with pytest.raises(AttributeError):
        k.source
    assert k.origin_for(A, B) == "heuristic"
    assert k.schedule_for(A, B) == dt.compile(matmul).schedule_for(A, B)
    TuningDB().store(record((A, B)))
    k.refresh()
    assert k.origin_for(A, B) == "tuned"
    # completed: the heuristic's access pick; the stages the record omits are the ones it ran with (2)
    assert k.schedule_for(A, B) == TUNED.replace(access="pointer", num_stages=2)
    C = k(A, B)
    torch.testing.assert_close(C, A @ B, rtol=1e-4, atol=1e-4)
    assert '"grid": ["j", "i"]' in k.source
    out = torch.full((40, 24), float("nan"))
    assert k(A, B, out=out) is out and torch.isfinite(out).all()
    assert k.source_for(A, B) == dt.compile(matmul, TUNED).source_for(A, B)


@pytest.fixture
def gpu_keys(monkeypatch):
    """Keys name a GPU (records measured there may serve nearby buckets); the kernels still run
    on the interpreter."""
    import dtriton.tune.db as tdb
    monkeypatch.setattr(tdb, "device_name", lambda device: "NVIDIA H200")


def test_stored_schedule_reused_for_nearby_shape_and_revalidated(tmp_path, gpu_keys):
    db = TuningDB(tmp_path / "t.sqlite")
    db.store(record(mm()))                      # tuned on M=40 (bucket 64)
    k = TunedKernel(matmul, db)
    A2, B2 = mm(M=56, N=20)                     # same bucket: exact hit
    assert k.origin_for(A2, B2) == "tuned"
    A3, B3 = mm(M=100, N=24)                    # bucket 128: nearest stored one is used, revalidated
    assert k.origin_for(A3, B3) == "nearest"
    torch.testing.assert_close(k(A3, B3), A3 @ B3, rtol=1e-4, atol=1e-4)
    A4, B4 = mm(M=1000)                         # far away: the heuristic
    assert k.origin_for(A4, B4) == "heuristic"
    assert not TunedKernel(matmul, db, nearest=False).origin_for(A3, B3) == "nearest"


def test_invalid_stored_schedule_falls_back_to_heuristic(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    # a stored schedule naming an axis the algorithm does not have: heuristic, with a warning
    Xs = torch.randn(8, 24)
    bad = TuningRecord(TuningKey.for_call(softmax, (Xs,)), "softmax", json.dumps({"tile": {"q": 16}}),
                       1.0, 1.0, 1.0, {}, time.time())
    db.store(bad)
    k = TunedKernel(softmax, db)
    with pytest.warns(TuningWarning, match="does not fit"):
        assert k.origin_for(Xs) == "heuristic"
    torch.testing.assert_close(k(Xs), torch.softmax(Xs, -1))
    # a record whose JSON no longer parses as a schedule at all: the same
    db.store(TuningRecord(TuningKey.for_call(softmax, (Xs,)), "softmax", json.dumps({"colour": "red"}),
                          0.5, 0.5, 0.5, {}, time.time()), overwrite=True)
    with pytest.warns(TuningWarning, match="does not fit"):
        assert TunedKernel(softmax, db).origin_for(Xs) == "heuristic"


def test_over_resource_stored_schedule_is_dropped(tmp_path, gpu_keys):
    db = TuningDB(tmp_path / "t.sqlite")
    X = torch.randn(16, 1024)
    wide = dt.Schedule(tile={"i": 16, "j": 64}, grid=("i",), strategy={"j": "whole"})  # 16 x 1024: fits
    db.store(record((X,), sched=wide, alg=softmax))
    k = TunedKernel(softmax, db)
    assert k.origin_for(X) == "tuned"
    X2 = torch.zeros(()).expand(16, 4096)        # 16 x 4096 = 65536: still fits
    assert k.origin_for(X2) == "nearest"
    db.delete(record((X,), sched=wide, alg=softmax).key)
    db.store(record((torch.zeros(()).expand(32, 1024),), sched=wide.replace(tile={"i": 32, "j": 64}), alg=softmax))
    k = TunedKernel(softmax, db)
    X3 = torch.zeros(()).expand(32, 4096)        # 32 x 4096 > 64K elements per program
    with pytest.warns(TuningWarning, match="resource"):
        assert k.origin_for(X3) == "heuristic"


def test_stored_tile_of_a_whole_axis_from_older_versions_is_dropped_not_refused(tmp_path):
    """Complete schedules used to carry a tile for a "whole" axis that no kernel reads; validation
    now refuses such a tile, so a stored record is used without it (the same kernels)."""
    db = TuningDB(tmp_path / "t.sqlite")
    X = torch.randn(8, 24)
    old = dt.Schedule(tile={"i": 4, "j": 64}, grid=("i",), strategy={"j": "whole"})
    with pytest.raises(dt.ScheduleError, match=r"tile\['j'\] = 64 would be ignored"):
        old.validate(softmax)
    db.store(record((X,), sched=old, alg=softmax))
    k = TunedKernel(softmax, db)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TuningWarning)
        assert k.origin_for(X) == "tuned"
    # (the launch options the record leaves open are the heuristic's: 4 warps, 2 stages here)
    assert k.schedule_for(X) == old.replace(tile={"i": 4}, access="pointer", num_warps=4, num_stages=2)
    torch.testing.assert_close(k(X), torch.softmax(X, -1))


def test_stored_record_without_access_runs_pointer_loads_as_measured(tmp_path):
    """Records written while "pointer" was the default access leave it out of their JSON. Read
    as None it let the heuristic pick TMA for a large 16-bit matmul on Hopper, a kernel that was
    never timed; the stored schedule runs with pointer loads, as it was measured."""
    import dataclasses
    from dtriton.schedule import complete_schedule
    db = TuningDB(tmp_path / "t.sqlite")
    A = torch.zeros((), dtype=torch.float16).expand(4096, 2048).contiguous()
    B = torch.zeros((), dtype=torch.float16).expand(2048, 4096).contiguous()
    old = dt.Schedule(tile={"i": 128, "j": 128, "k": 64}, grid=("i", "j"), group={"i": 8}, num_warps=8, num_stages=4)
    assert "access" not in old.to_json()          # as such a record's JSON reads
    db.store(record((A, B), sched=old))
    k = TunedKernel(matmul, db)
    assert k.origin_for(A, B) == "tuned"
    kern = k.kernel_for(A, B)
    assert kern.schedule == old.replace(access="pointer")
    gpu = dataclasses.replace(matmul.bind((A, B)), device=torch.device("cuda"))   # an H200 when none is visible
    assert complete_schedule(matmul, kern.schedule, gpu).access == "pointer"
    assert complete_schedule(matmul, old, gpu).access == "tma"   # what None would have picked
    # explore stores complete schedules, whose access is explicit either way
    tma = old.replace(access="tma")
    assert db.store(record((A, B), sched=tma), overwrite=True)
    k.refresh()
    assert k.kernel_for(A, B).schedule == tma


def test_compile_failure_of_stored_schedule_falls_back(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    A, B = mm()
    db.store(record((A, B)))
    k = TunedKernel(matmul, db)
    kern, origin, rec = k._choose((A, B))
    assert origin == "tuned"

    class Exploding(dt.Kernel):
        def __call__(self, *args, out=None):
            raise dt.CompileError("out of shared memory (injected)")

    key = TuningKey.for_call(matmul, (A, B))
    k._choice[key] = (Exploding(matmul, TUNED), "tuned", rec)
    with pytest.warns(TuningWarning, match="failed to compile"):
        C = k(A, B)
    torch.testing.assert_close(C, A @ B, rtol=1e-4, atol=1e-4)
    assert k.origin_for(A, B) == "heuristic"


def test_verify_on_first_use(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    A, B = mm()
    db.store(record((A, B)))
    k = TunedKernel(matmul, db, verify=True)
    assert k.origin_for(A, B) == "tuned"


def test_explore_then_tuned(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRITON_TUNING_DB", str(tmp_path / "t.sqlite"))
    A, B = mm()
    res = dt.explore(matmul, (A, B), space=dt.Space(tile={"i": [16, 32]}), progress=False, store=True)
    k = dt.compile(matmul, "tuned")
    assert k.origin_for(A, B) == "tuned" and k.schedule_for(A, B) == res.best

