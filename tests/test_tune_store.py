"""Explorations on the Triton interpreter store nothing by default (their timings measure Python);
store=True (or deterministic=True) stores, store=False never; the CLI's --store/--no-store likewise."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

import dtriton as dt
from dtriton.tune import TuningDB, TuningWarning

from conftest import matmul


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DTRITON_TUNING_DB", raising=False)


def _explore(db, **kw):
    A, B = torch.randn(23, 17), torch.randn(17, 9)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = dt.explore(matmul, (A, B), space=dt.Space(tile={"i": [16, 32]}), progress=False, db=db, **kw)
    return res, [str(x.message) for x in w if issubclass(x.category, TuningWarning)]


def test_interpreter_exploration_stores_nothing_by_default(tmp_path):
    db = tmp_path / "t.sqlite"
    res, msgs = _explore(db)
    assert res.best is not None
    assert not db.exists() or TuningDB(db).records() == []
    assert any("not stored in the tuning database (pass store=True" in m for m in msgs)


@pytest.mark.parametrize("kw", [dict(store=True), dict(store="replace"), dict(deterministic=True)])
def test_interpreter_exploration_stores_when_asked(tmp_path, kw):
    db = tmp_path / "t.sqlite"
    res, msgs = _explore(db, **kw)
    rec = TuningDB(db).lookup(res.key)
    assert rec is not None and rec.schedule == res.best
    assert not any("not stored" in m for m in msgs)


def test_store_false_never_stores(tmp_path):
    db = tmp_path / "t.sqlite"
    _, msgs = _explore(db, store=False)
    assert not db.exists()
    assert not any("pass store=True" in m for m in msgs)   # the user said so: no advice



@pytest.mark.parametrize("flag,stored", [(None, False), ("--store", True), ("--no-store", False)])
def test_cli_explore_store_flags(tmp_path, flag, stored):
    from click.testing import CliRunner
    from dtriton.cli import main
    db = tmp_path / "c.sqlite"
    args = ["explore", "dtriton.library:matmul", "--shape", "M=20,K=16,N=12", "--budget", "20", "--max-trials", "1",
            "--db", str(db), "--quiet"] + ([flag] if flag else [])
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert (db.exists() and len(TuningDB(db).records()) == 1) == stored


def test_the_summary_says_what_was_stored(tmp_path):
    db = tmp_path / "t.sqlite"
    res, _ = _explore(db)
    assert "tuning database: not stored (interpreter timings measure Python; pass store=True" in res.summary()
    res, _ = _explore(db, store=False)
    assert "tuning database: not stored (store=False)" in res.summary()
    res, _ = _explore(db, store=True)
    assert f"tuning database: best stored in {db}" in res.summary()
    back = dt.ExploreResult.from_json(res.to_json())
    assert back.storage == res.storage
    # a second, slower-or-equal run keeps the stored record unless told to replace it
    rec = TuningDB(db).lookup(res.key)
    TuningDB(db).store(dataclasses.replace(rec, median_us=1e-3), overwrite=True)
    res2, _ = _explore(db, store=True)
    assert "best not written to" in res2.summary() and "store='replace'" in res2.summary()
