"""The tuning database: keys, records and the SQLite store.

:func:`dtriton.explore` stores the best schedule it finds here; :class:`~dtriton.tune.tuned.TunedKernel`
(``dt.compile(alg, "tuned")``) looks it up per call shape. The database is a SQLite file (stdlib ``sqlite3``):

- location: the ``path`` argument, else ``$DTRITON_TUNING_DB``, else
  ``$DTRITON_CACHE_DIR/tuning.sqlite``, else ``~/.cache/dtriton/tuning.sqlite``;
- key (:class:`TuningKey`): algorithm fingerprint (a hash of the expression graph), shape bucket
  (each size symbol rounded up to a power of two, plus whether it divides by 16), input dtypes,
  device name (``torch.cuda.get_device_name`` or ``"interpreter"``) and Triton version;
- value (:class:`TuningRecord`): the complete schedule as JSON, its median/p20/p80 time in
  microseconds (µs), the exact sizes it was tuned on and the dtriton version that measured it;
- a second table keeps every measured candidate of an exploration (exact sizes), so that
  ``dt.explore(..., deterministic=True)`` can pick the same winner from stored timings.

Which records serve a call (:meth:`TuningDB.lookup`, :meth:`TuningDB.nearest`): only records
measured by this dtriton version (others, including records from before versions were stored,
are ignored and replaced by the next store), on the same device name (``"interpreter"`` for the
Triton interpreter, so an interpreter record never serves a GPU call nor the reverse) with the same
Triton version. A record serves another shape bucket ("nearest") only when it was measured on a
GPU: interpreter timings say nothing about a kernel's speed at another size (on the CPU a stored
16x16 tile ran 6-8x slower than the heuristic's at 8x the size it was measured on).

A corrupt file (for example one truncated by a crash) gives a :class:`TuningWarning`; the file is
moved aside (``tuning.sqlite.corrupt``) and an empty database is built in its place. A file of an
older schema version is migrated in place; one of a newer version (a newer dtriton's) is left as it
is and not used, with a warning. A locked
file (another process writing for longer than the busy timeout) gives a warning and the
operation is skipped (lookups miss, stores are dropped). Neither ever raises. The file is in
write-ahead-log mode (``tuning.sqlite-wal`` beside it) and every write is one transaction, so
several processes can explore into one database at once without losing a record.

Export/import use JSON with a versioned schema (``{"format": "dtriton-tuning", "version": 1,
"records": [...]}``).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from ..backends import default_backend
from ..errors import DTritonError, ScheduleError
from ..ir import Algorithm, Binding
from ..schedule import Schedule, next_pow2
from ..runtime import backend_for, cache_dir
from ..version import __version__

__all__ = ["TuningDB", "TuningKey", "TuningRecord", "TuningWarning", "TuningDatabaseError",
           "default_db_path", "shape_bucket", "dtype_key", "device_name", "triton_version", "dtriton_version",
           "SCHEMA_VERSION", "INTERPRETER"]

#: Version of both the SQLite schema and the JSON export format. Version 2 added the ``dtriton``
#: column (the version that measured a record); version-1 files are migrated in place, their
#: records marked with an empty version (ignored by lookups).
SCHEMA_VERSION = 2
#: The device name of records measured on Triton's interpreter (see :func:`device_name`).
INTERPRETER = "interpreter"
EXPORT_FORMAT = "dtriton-tuning"


class TuningWarning(UserWarning):
    """Something about tuning went wrong but was recovered from: a corrupt or locked database, a
    stored schedule that no longer fits, meaningless timings on the interpreter."""


class TuningDatabaseError(DTritonError, ValueError):
    """An export file that cannot be imported (wrong format, newer schema version)."""


class NewerSchemaError(Exception):
    """A database file of a newer schema version: this dtriton leaves it as it is and does not use it."""


# ----------------------------------------------------------------------------------------------
# keys
# ----------------------------------------------------------------------------------------------
def default_db_path() -> Path:
    """``$DTRITON_TUNING_DB``, else ``$DTRITON_CACHE_DIR/tuning.sqlite``, else
    ``~/.cache/dtriton/tuning.sqlite`` (a temp dir when the home cache is not writable)."""
    env = os.environ.get("DTRITON_TUNING_DB")
    if env:
        return Path(env)
    return cache_dir() / "tuning.sqlite"


def shape_bucket(sizes: Mapping[str, int]) -> str:
    """The shape part of a tuning key: each size symbol rounded up to a power of two, with a
    ``/16`` suffix when the size divides by 16. ``{"M": 40, "K": 32}`` -> ``"K=32/16,M=64"``."""
    parts = []
    for name in sorted(sizes):
        n = int(sizes[name])
        parts.append(f"{name}={next_pow2(n)}{'/16' if n % 16 == 0 else ''}")
    return ",".join(parts)


def _parse_bucket(bucket: str) -> dict[str, tuple[int, bool]]:
    out = {}
    for p in bucket.split(","):
        if not p:
            continue
        name, _, v = p.partition("=")
        n, _, d = v.partition("/")
        out[name] = (int(n), d == "16")
    return out


def dtype_key(dtypes: Mapping[str, torch.dtype]) -> str:
    """``{"A": torch.float16}`` -> ``"A=float16"`` (sorted by argument name)."""
    return ",".join(f"{k}={str(v).replace('torch.', '')}" for k, v in sorted(dtypes.items()))


def device_name(device: torch.device) -> str:
    """``torch.cuda.get_device_name`` for a GPU call, ``"interpreter"`` for the Triton interpreter."""
    if backend_for(device) == "interpreter":
        return INTERPRETER
    try:
        return torch.cuda.get_device_name(device)
    except Exception:  # pragma: no cover - a CUDA device without a name
        return "cuda"


def triton_version() -> str:
    """The installed Triton's version string ("none" when Triton cannot be imported), from the
    backend kernels are generated with."""
    return default_backend().version()


def dtriton_version() -> str:
    """This dtriton's version (``dtriton.__version__``): records measured by another are ignored."""
    return __version__


@dataclass(frozen=True)
class TuningKey:
    """What a stored schedule is valid for. All fields are strings (see the module docstring)."""
    fingerprint: str
    bucket: str
    dtypes: str
    device: str
    triton: str

    @staticmethod
    def for_binding(alg: Algorithm, b: Binding) -> "TuningKey":
        """The key of a call whose arguments bound to ``b``."""
        return TuningKey(alg.fingerprint, shape_bucket(b.sizes), dtype_key(b.dtypes), device_name(b.device),
                         triton_version())

    @staticmethod
    def for_call(alg: Algorithm, args: Sequence[Any]) -> "TuningKey":
        """The key of ``alg(*args)``. Raises :class:`~dtriton.ShapeError` for bad arguments."""
        return TuningKey.for_binding(alg, alg.bind(args))


@dataclass
class TuningRecord:
    """One stored best schedule. Times are microseconds (µs); ``sizes`` are the exact size
    symbols it was tuned on; ``created`` is a Unix time in seconds; ``dtriton`` the version that
    measured it (this one for a new record; ``""`` for records stored before versions were)."""
    key: TuningKey
    algorithm: str
    schedule_json: str
    median_us: float | None = None
    p20_us: float | None = None
    p80_us: float | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    created: float = 0.0
    dtriton: str = field(default_factory=dtriton_version)

    @property
    def current(self) -> bool:
        """Whether this dtriton version measured the record (only such records serve calls)."""
        return self.dtriton == dtriton_version()

    @property
    def schedule(self) -> Schedule:
        """The stored schedule. Raises :class:`~dtriton.ScheduleError` when the JSON no longer
        parses as a schedule (a record from an incompatible dtriton)."""
        return Schedule.from_json(self.schedule_json)

    def to_dict(self) -> dict:
        """The record as a JSON-ready dict (key fields flattened, the schedule as a JSON object)."""
        d = asdict(self)
        d.pop("key")
        d.update(asdict(self.key))
        d["schedule"] = json.loads(self.schedule_json)
        d.pop("schedule_json")
        return d

    @staticmethod
    def from_dict(d: Mapping) -> "TuningRecord":
        """A record from :meth:`to_dict`'s form. Raises ``KeyError``/``TypeError``/``ValueError`` or
        :class:`~dtriton.ScheduleError` for a malformed one."""
        key = TuningKey(str(d["fingerprint"]), str(d["bucket"]), str(d["dtypes"]), str(d["device"]),
                        str(d["triton"]))
        sched = d["schedule"]
        sj = sched if isinstance(sched, str) else json.dumps(sched, sort_keys=True)
        Schedule.from_json(sj)  # raises ScheduleError for a malformed schedule
        return TuningRecord(key, str(d.get("algorithm", "")), sj, _opt_float(d.get("median_us")),
                            _opt_float(d.get("p20_us")), _opt_float(d.get("p80_us")),
                            {str(k): int(v) for k, v in dict(d.get("sizes") or {}).items()},
                            float(d.get("created") or 0.0), str(d.get("dtriton") or ""))


def _opt_float(v) -> float | None:
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else None


# ----------------------------------------------------------------------------------------------
# the database
# ----------------------------------------------------------------------------------------------
_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)",
    """CREATE TABLE IF NOT EXISTS records (
        fingerprint TEXT, bucket TEXT, dtypes TEXT, device TEXT, triton TEXT,
        algorithm TEXT, schedule TEXT, median_us REAL, p20_us REAL, p80_us REAL,
        sizes TEXT, created REAL, dtriton TEXT DEFAULT '',
        PRIMARY KEY (fingerprint, bucket, dtypes, device, triton))""",
    """CREATE TABLE IF NOT EXISTS trials (
        fingerprint TEXT, sizes TEXT, dtypes TEXT, device TEXT, triton TEXT, schedule TEXT,
        status TEXT, reason TEXT, median_us REAL, p20_us REAL, p80_us REAL, created REAL,
        dtriton TEXT DEFAULT '',
        PRIMARY KEY (fingerprint, sizes, dtypes, device, triton, schedule))""",
]
#: Migrations: the statements taking a file of schema version ``v`` to ``v + 1``.
_MIGRATE = {1: ["ALTER TABLE records ADD COLUMN dtriton TEXT DEFAULT ''",
                "ALTER TABLE trials ADD COLUMN dtriton TEXT DEFAULT ''"]}


class TuningDB:
    """The persistent tuning database (see the module docstring for location, key and recovery).

    Args:
        path: the SQLite file; ``None`` for :func:`default_db_path`. Its folder is created.
        timeout_s: how long an operation waits for a lock held by another process (seconds).

    Every method catches SQLite errors: a corrupt file is rebuilt (with a :class:`TuningWarning`),
    a locked one is skipped with a warning, so lookups return ``None``/empty and stores return
    ``False`` instead of raising. A connection is opened per operation, so one ``TuningDB`` can be
    used from several threads and processes.
    """

    def __init__(self, path: str | os.PathLike | None = None, timeout_s: float = 5.0):
        self.path = Path(path) if path is not None else default_db_path()
        self.timeout_s = float(timeout_s)

    def __repr__(self):
        return f"TuningDB({str(self.path)!r})"

    # -- plumbing -------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(str(self.path), timeout=self.timeout_s)
        try:
            try:   # write-ahead log: readers never block the one writer; writers queue on the busy timeout
                con.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError:   # another process is switching it now: it is WAL next time
                pass
            # a truncated or overwritten file is caught here rather than half-way through a query;
            # tuning databases are small, so the check costs about a millisecond
            res = con.execute("PRAGMA quick_check").fetchall()
            if not res or res[0][0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {res[:3]}")
            for stmt in _SCHEMA:
                con.execute(stmt)
            row = con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                con.commit()
            elif row[0] != str(SCHEMA_VERSION):
                self._migrate(con, row[0])
            return con
        except BaseException:
            con.close()
            raise

    @staticmethod
    def _migrate(con: sqlite3.Connection, found: str) -> None:
        """Bring a file of an older schema version to :data:`SCHEMA_VERSION` (one transaction).
        Raises :class:`NewerSchemaError` for a newer version (a newer dtriton's file: left as it is)
        and ``sqlite3.DatabaseError`` for one that is not a version at all."""
        v = int(found) if found.isdigit() else -1
        if v > SCHEMA_VERSION:
            raise NewerSchemaError(f"it has schema version {v}, written by a newer dtriton; this one reads "
                                   f"versions up to {SCHEMA_VERSION}. Upgrade dtriton, or set DTRITON_TUNING_DB "
                                   "to another file")
        if v not in _MIGRATE:
            raise sqlite3.DatabaseError(f"schema version {found}, this dtriton reads version {SCHEMA_VERSION}")
        con.execute("BEGIN IMMEDIATE")
        row = con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        v = int(row[0])   # another process may have migrated it meanwhile
        while v < SCHEMA_VERSION:
            for stmt in _MIGRATE[v]:
                con.execute(stmt)
            v += 1
        con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        con.commit()

    def _aside_path(self) -> Path:
        """Where a corrupt file is moved: ``<name>.corrupt``, else ``<name>.corrupt.1``, ``.2``, ..."""
        p = Path(str(self.path) + ".corrupt")
        k = 1
        while p.exists():
            p = Path(f"{self.path}.corrupt.{k}")
            k += 1
        return p

    def _rebuild(self, why: str):
        aside = self._aside_path()
        warnings.warn(f"tuning database {self.path} is unreadable ({why}); moving it to "
                      f"{aside.name} and starting an empty one", TuningWarning, stacklevel=4)
        for suffix in ("-journal", "-wal", "-shm"):
            try:
                Path(str(self.path) + suffix).unlink()
            except OSError:
                pass
        try:
            os.replace(self.path, aside)
        except OSError:
            try:
                self.path.unlink()
            except OSError:
                pass

    def _op(self, fn: Callable[[sqlite3.Connection], Any], default: Any, what: str, writes: bool = True):
        """Run ``fn(con)`` (in one transaction: ``fn`` commits); recover from locks (wait up to the
        busy timeout, then warn and return ``default``) and corruption (rebuild, retry once). An
        operation that only reads or removes (``writes`` False) on a file that does not exist
        returns ``default`` without creating it (a mistyped path is not turned into a database)."""
        if not writes and not self.path.exists():
            return default
        for attempt in (0, 1):
            try:
                con = self._connect()
                try:
                    return fn(con)
                except BaseException:
                    con.rollback()
                    raise
                finally:
                    con.close()
            except NewerSchemaError as e:
                warnings.warn(f"tuning database {self.path}: {what} skipped ({e})", TuningWarning, stacklevel=3)
                return default
            except sqlite3.OperationalError as e:
                msg = str(e).lower()
                if "locked" in msg or "busy" in msg or "unable to open" in msg or "readonly" in msg \
                        or "read-only" in msg or "disk i/o" in msg:
                    warnings.warn(f"tuning database {self.path}: {what} skipped ({e})", TuningWarning, stacklevel=3)
                    return default
                if attempt:
                    break
                self._rebuild(str(e))
            except sqlite3.DatabaseError as e:
                if attempt:
                    break
                self._rebuild(str(e))
            except OSError as e:
                warnings.warn(f"tuning database {self.path}: {what} skipped ({e})", TuningWarning, stacklevel=3)
                return default
        warnings.warn(f"tuning database {self.path}: {what} failed after a rebuild", TuningWarning, stacklevel=3)
        return default

    # -- best schedules -------------------------------------------------------------------------
    @staticmethod
    def _row_to_record(r) -> TuningRecord:
        (fp, bucket, dts, dev, tri, alg, sched, med, p20, p80, sizes, created, version) = r
        try:
            sz = {str(k): int(v) for k, v in json.loads(sizes or "{}").items()}
        except (ValueError, AttributeError):
            sz = {}
        return TuningRecord(TuningKey(fp, bucket, dts, dev, tri), alg or "", sched, med, p20, p80, sz, created or 0.0,
                            version or "")

    _COLS = ("fingerprint, bucket, dtypes, device, triton, algorithm, schedule, median_us, p20_us, p80_us, sizes, "
             "created, dtriton")

    def lookup(self, key: TuningKey) -> TuningRecord | None:
        """The record for exactly this key measured by this dtriton version, or ``None``."""
        def f(con):
            r = con.execute(f"SELECT {self._COLS} FROM records WHERE fingerprint=? AND bucket=? AND dtypes=? "
                            "AND device=? AND triton=? AND dtriton=?", (key.fingerprint, key.bucket, key.dtypes,
                                                                         key.device, key.triton, dtriton_version())
                            ).fetchone()
            return None if r is None else self._row_to_record(r)
        return self._op(f, None, "lookup", writes=False)

    def nearest(self, key: TuningKey, max_log2_distance: int = 2) -> TuningRecord | None:
        """The record of the same algorithm, dtypes, device, Triton and dtriton version whose shape
        bucket is closest to ``key.bucket`` (sum over sizes of |log2 difference|, plus 0.5 per
        divisibility mismatch), when every size is within a factor ``2**max_log2_distance``.
        Always ``None`` for an interpreter key: interpreter timings serve their own bucket only."""
        if key.device == INTERPRETER:
            return None
        want = _parse_bucket(key.bucket)

        def f(con):
            rows = con.execute(f"SELECT {self._COLS} FROM records WHERE fingerprint=? AND dtypes=? AND device=? "
                               "AND triton=? AND dtriton=?", (key.fingerprint, key.dtypes, key.device, key.triton,
                                                             dtriton_version())).fetchall()
            best, best_d = None, None
            for r in rows:
                rec = self._row_to_record(r)
                have = _parse_bucket(rec.key.bucket)
                if set(have) != set(want):
                    continue
                d, ok = 0.0, True
                for name, (n, div) in want.items():
                    m, mdiv = have[name]
                    ld = abs(int(math.log2(max(n, 1))) - int(math.log2(max(m, 1))))
                    if ld > max_log2_distance:
                        ok = False
                        break
                    d += ld + (0.5 if div != mdiv else 0.0)
                if ok and (best_d is None or d < best_d or (d == best_d and rec.key.bucket < best.key.bucket)):
                    best, best_d = rec, d
            return best
        return self._op(f, None, "nearest lookup", writes=False)

    def store(self, record: TuningRecord, overwrite: bool = False) -> bool:
        """Store ``record`` unless a record with the same key, measured by the same dtriton
        version, and a lower (or equal) median time is there already (``overwrite=True`` replaces
        it anyway; a record of another version is always replaced). Returns whether it was written."""
        def f(con):
            k = record.key
            con.execute("BEGIN IMMEDIATE")   # the comparison and the write are one transaction
            old = con.execute("SELECT median_us, dtriton FROM records WHERE fingerprint=? AND bucket=? AND dtypes=? "
                              "AND device=? AND triton=?", (k.fingerprint, k.bucket, k.dtypes, k.device, k.triton)
                              ).fetchone()
            if old is not None and not overwrite and old[0] is not None and record.median_us is not None \
                    and old[0] <= record.median_us and old[1] == record.dtriton:
                con.rollback()
                return False
            con.execute(f"INSERT OR REPLACE INTO records ({self._COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (k.fingerprint, k.bucket, k.dtypes, k.device, k.triton, record.algorithm,
                         record.schedule_json, record.median_us, record.p20_us, record.p80_us,
                         json.dumps(record.sizes, sort_keys=True), record.created or time.time(), record.dtriton))
            con.commit()
            return True
        return self._op(f, False, "store")

    def records(self, fingerprint: str | None = None) -> list[TuningRecord]:
        """Every stored record (of one algorithm when ``fingerprint`` is given), sorted by key."""
        def f(con):
            q = f"SELECT {self._COLS} FROM records"
            args: tuple = ()
            if fingerprint is not None:
                q += " WHERE fingerprint=?"
                args = (fingerprint,)
            q += " ORDER BY fingerprint, bucket, dtypes, device, triton"
            return [self._row_to_record(r) for r in con.execute(q, args).fetchall()]
        return self._op(f, [], "listing", writes=False)

    def delete(self, key: TuningKey) -> bool:
        """Remove the record for ``key``; returns whether one was there."""
        def f(con):
            cur = con.execute("DELETE FROM records WHERE fingerprint=? AND bucket=? AND dtypes=? AND device=? AND "
                              "triton=?", (key.fingerprint, key.bucket, key.dtypes, key.device, key.triton))
            con.commit()
            return cur.rowcount > 0
        return self._op(f, False, "delete", writes=False)

    def clear(self) -> None:
        """Remove every record and stored trial."""
        def f(con):
            con.execute("DELETE FROM records")
            con.execute("DELETE FROM trials")
            con.commit()
        self._op(f, None, "clear", writes=False)

    # -- per-candidate trials (deterministic mode) ------------------------------------------------
    @staticmethod
    def _trial_key(key: TuningKey, sizes: Mapping[str, int]) -> tuple:
        return (key.fingerprint, json.dumps(dict(sorted(sizes.items()))), key.dtypes, key.device, key.triton)

    def store_trials(self, key: TuningKey, sizes: Mapping[str, int], rows: Iterable[Mapping]) -> bool:
        """Store measured candidates (dicts with ``schedule_json``, ``status``, ``reason``,
        ``median_us``, ``p20_us``, ``p80_us``) for the exact ``sizes``; later rows replace earlier
        ones with the same schedule."""
        rows = list(rows)

        def f(con):
            tk = self._trial_key(key, sizes)
            now = time.time()
            con.executemany("INSERT OR REPLACE INTO trials VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                            [tk + (r["schedule_json"], r["status"], r.get("reason", ""), r.get("median_us"),
                                   r.get("p20_us"), r.get("p80_us"), now, dtriton_version()) for r in rows])
            con.commit()
            return True
        return self._op(f, False, "storing trials")

    def trials(self, key: TuningKey, sizes: Mapping[str, int]) -> dict[str, dict]:
        """Stored candidates for exactly these sizes, measured by this dtriton version:
        ``{schedule_json: row dict}``."""
        def f(con):
            rs = con.execute("SELECT schedule, status, reason, median_us, p20_us, p80_us FROM trials WHERE "
                             "fingerprint=? AND sizes=? AND dtypes=? AND device=? AND triton=? AND dtriton=?",
                             self._trial_key(key, sizes) + (dtriton_version(),)).fetchall()
            return {r[0]: {"schedule_json": r[0], "status": r[1], "reason": r[2] or "", "median_us": r[3],
                           "p20_us": r[4], "p80_us": r[5]} for r in rs}
        return self._op(f, {}, "reading trials", writes=False)

    # -- export / import -------------------------------------------------------------------------
    def export_json(self, path: str | os.PathLike | None = None) -> dict:
        """Every record as a JSON-ready dict ``{"format", "version", "exported", "records"}``;
        also written to ``path`` when given."""
        doc = {"format": EXPORT_FORMAT, "version": SCHEMA_VERSION, "exported": time.time(),
               "records": [r.to_dict() for r in self.records()]}
        if path is not None:
            p = Path(path)
            tmp = p.with_name(p.name + ".tmp")
            tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
            os.replace(tmp, p)
        return doc

    def import_json(self, src: str | os.PathLike | Mapping, overwrite: bool = False) -> int:
        """Import records exported by :meth:`export_json` (a path, a JSON string or the dict).
        A record replaces a stored one only when it is faster, or with ``overwrite=True``.
        Returns how many were written. Malformed records are skipped with a warning; records of
        another dtriton version (version-1 exports carry none) are stored but serve no call.

        Raises :class:`TuningDatabaseError` when the file cannot be read (a missing file, a
        directory), the document is not a dtriton tuning export or has a newer schema version than
        this dtriton reads."""
        if isinstance(src, Mapping):
            doc = dict(src)
        else:
            text = str(src)
            if not text.lstrip().startswith("{"):
                try:
                    text = Path(src).read_text()
                except FileNotFoundError as e:
                    raise TuningDatabaseError(f"cannot import {str(src)!r}: no such file; pass the path of a "
                                              "file written by `dtriton tuning export FILE`") from e
                except (OSError, UnicodeDecodeError) as e:
                    raise TuningDatabaseError(f"cannot import {str(src)!r}: {e.strerror if isinstance(e, OSError) else e}"
                                              " (expected a JSON file written by `dtriton tuning export FILE`)") from e
            try:
                doc = json.loads(text)
            except ValueError as e:
                raise TuningDatabaseError(f"tuning export is not valid JSON: {e}") from e
        if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
            raise TuningDatabaseError(f"not a dtriton tuning export (expected format {EXPORT_FORMAT!r})")
        ver = doc.get("version")
        if not isinstance(ver, int) or ver > SCHEMA_VERSION or ver < 1:
            raise TuningDatabaseError(f"tuning export has schema version {ver!r}; this dtriton reads versions "
                                      f"1..{SCHEMA_VERSION}. Upgrade dtriton to import it")
        n = 0
        for k, raw in enumerate(doc.get("records") or []):
            try:
                rec = TuningRecord.from_dict(raw)
            except (KeyError, TypeError, ValueError, ScheduleError) as e:
                warnings.warn(f"tuning import: record {k} skipped ({type(e).__name__}: {e})", TuningWarning,
                              stacklevel=2)
                continue
            n += bool(self.store(rec, overwrite=overwrite))
        return n
