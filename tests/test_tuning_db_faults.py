"""The tuning database under faults (issue 17): processes writing at once lose no record; corrupt
files are moved aside (never over an earlier one) and rebuilt; a whole exploration from two
processes into one database keeps every candidate."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import warnings

import pytest
import torch

from dtriton.tune import TuningDB, TuningKey, TuningRecord, TuningWarning

N_EACH = 60


def _key(k: int, who: int) -> TuningKey:
    return TuningKey(f"fp-{who}-{k:03d}", "M=64", "A=float32", "interpreter", "3.6")


def _writer(path: str, who: int, start, errors) -> None:
    """Store N_EACH records and N_EACH x 3 trials, one transaction each, as fast as possible."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a lock that outlasts the busy timeout would drop a record: fail
        try:
            db = TuningDB(path, timeout_s=20)
            start.wait(30)
            for k in range(N_EACH):
                key = _key(k, who)
                assert db.store(TuningRecord(key, "alg", '{"tile": {"i": 16}}', float(k + 1), 1.0, 2.0, {"M": 40}))
                rows = [{"schedule_json": f'{{"tile": {{"i": {t}}}}}', "status": "ok", "reason": "",
                         "median_us": 1.0, "p20_us": 1.0, "p80_us": 1.0} for t in (16, 32, 64)]
                assert db.store_trials(key, {"M": 40 + k}, rows)
        except BaseException as e:  # noqa: BLE001
            errors.put(f"{who}: {type(e).__name__}: {e}")


def test_two_processes_writing_at_once_lose_no_record(tmp_path):
    path = str(tmp_path / "t.sqlite")
    TuningDB(path).records()   # create it
    ctx = mp.get_context("fork")
    start, errors = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, who, start, errors)) for who in (1, 2)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs)
    errs = []
    while not errors.empty():
        errs.append(errors.get())
    assert not errs, errs
    db = TuningDB(path)
    assert len(db.records()) == 2 * N_EACH
    for who in (1, 2):
        for k in range(N_EACH):
            assert len(db.trials(_key(k, who), {"M": 40 + k})) == 3
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_second_corruption_does_not_overwrite_the_first(tmp_path):
    path = tmp_path / "t.sqlite"
    key = _key(0, 0)
    for n in range(2):
        db = TuningDB(path)
        db.store(TuningRecord(key, "alg", '{"tile": {"i": 16}}', 1.0, 1.0, 1.0, {}))
        for suffix in ("-wal", "-shm"):
            (tmp_path / ("t.sqlite" + suffix)).unlink(missing_ok=True)
        path.write_bytes(b"garbage " * 500)
        with pytest.warns(TuningWarning, match="unreadable"):
            assert TuningDB(path).lookup(key) is None
    assert (tmp_path / "t.sqlite.corrupt").exists() and (tmp_path / "t.sqlite.corrupt.1").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TuningDB(path).store(TuningRecord(key, "alg", '{"tile": {"i": 16}}', 1.0, 1.0, 1.0, {}))


def _explore_into(path: str, seed: int, errors) -> None:
    import dtriton as dt
    from dtriton.library import matmul
    torch.set_num_threads(1)   # a forked child must not use the parent's OpenMP pool (it hangs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g = torch.Generator().manual_seed(seed)
            A, B = torch.randn(40, 32, generator=g), torch.randn(32, 24, generator=g)
            dt.explore(matmul, (A, B), space=dt.Space(tile={"i": [16, 32, 64]}), strategy="exhaustive",
                       db=path, progress=False, budget=120, store=True)
    except BaseException as e:  # noqa: BLE001
        errors.put(f"{type(e).__name__}: {e}")


def test_two_explorations_into_one_database(tmp_path):
    """Two processes explore the same matmul (same key, same sizes) into one file at once: the
    stored candidates are every schedule either measured, and the best record is there."""
    path = str(tmp_path / "t.sqlite")
    ctx = mp.get_context("fork")
    errors = ctx.Queue()
    procs = [ctx.Process(target=_explore_into, args=(path, s, errors)) for s in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert all(p.exitcode == 0 for p in procs) and errors.empty()
    from dtriton.library import matmul
    A, B = torch.randn(40, 32), torch.randn(32, 24)
    key = TuningKey.for_call(matmul, (A, B))
    db = TuningDB(path)
    assert db.lookup(key) is not None
    assert len(db.trials(key, matmul.bind((A, B)).sizes)) >= 3
