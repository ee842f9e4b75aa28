"""What an exploration found: :class:`ExploreResult` (the table of candidates, the best schedule,
reports, a plot, JSON)."""

from __future__ import annotations

import io
import json
import math
import os
import re
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..ir import Algorithm
from ..runtime import Kernel
from ..schedule import Schedule
from .space import Space

__all__ = ["ExploreResult", "STATUSES"]


#: Candidate statuses in :attr:`ExploreResult.table`. Only "ok" candidates can be chosen.
#: ok: correct and timed; wrong: ran but failed the correctness check; failed: raised while
#: compiling or running; timeout: compile took longer than ``compile_timeout``; illegal: rejected
#: by validation or lowering; pruned: over a resource rule; duplicate: generates the same kernels
#: as an earlier candidate; skipped: compiled and checked but the budget ran out before timing.
STATUSES = ("ok", "wrong", "failed", "timeout", "illegal", "pruned", "duplicate", "skipped")


def _us(v) -> str:
    """A time in µs: two decimals, thousands separated (``1,234,567.89``); "-" when missing."""
    return "-" if v is None or not math.isfinite(v) else f"{v:,.2f}"


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _short(schedule_json: str | None) -> str:
    """A schedule's JSON without quotes and spaces (``{grid:[i,j],tile:{i:64,j:32}}``)."""
    if not schedule_json:
        return "-"
    try:
        return json.dumps(json.loads(schedule_json), separators=(",", ":")).replace('"', "")
    except ValueError:
        return schedule_json


#: A number standing alone in a reason (``300000``, ``#12``, ``1.5e-3``, ``64x32``), not digits inside a name
#: (``sm_90``, ``float16``, ``conv2d``, ``e4m3``), which say what the reason is about
_NUMBER = re.compile(r"(?<![\w.])#?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?:x\d+)*(?![\w])")


def _reason_kind(reason: str) -> str:
    """A reason with its numbers and candidate ids replaced by ``N`` (names keep their digits), so like
    reasons count together."""
    return _NUMBER.sub("N", reason)


def _row(t: Table, *cells) -> None:
    """Add a row of plain text (no rich markup: ``[i, j]`` is data)."""
    t.add_row(*(Text(str(c)) for c in cells))


def _table(title: str, columns: Sequence[str]) -> Table:
    """A plain rich table (ASCII-safe box, numbers right-aligned, the last column folded)."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for k, c in enumerate(columns):
        last = k == len(columns) - 1
        t.add_column(c, justify="left" if last or c in ("from", "status", "reason") else "right",
                     overflow="fold", ratio=2 if last else None, no_wrap=not last and c not in ("reason",))
    return t


class ExploreResult:
    """What :func:`explore` found.

    Attributes:
        best: the fastest correct schedule (a complete :class:`~dtriton.Schedule`), or ``None``
            when no candidate passed.
        table: every candidate, as dicts with keys ``id``, ``origin`` ("heuristic", "space" or
            "stored"), ``schedule`` (a Schedule or None), ``schedule_json``, ``params`` (the point),
            ``status`` (see :data:`STATUSES`), ``reason``, ``median_us``, ``p20_us``, ``p80_us``
            (microseconds per call), ``rel_err``, ``compile_s``, ``elapsed_s`` (seconds since the
            start when it finished), ``remeasured`` (timed again at the end; the search's time is
            then in ``search_median_us``), ``stored`` (timings reused from the database).
        algorithm: the algorithm (``None`` for a result loaded with :meth:`from_json`).
        device: GPU name or "interpreter". timings_meaningful: False on the interpreter.
        strategy: the strategy used. stop_reason: "budget", "max_trials", "converged" or
            "exhausted". elapsed_s: seconds spent. space: the :class:`Space` searched.
        oracle: "reference" or, when the eager reference would not fit in memory, "heuristic".
        key: the :class:`~dtriton.tune.db.TuningKey` results were stored under.
        budget_s: the budget asked for. remeasure_s: seconds of the final re-measurement of the
            best candidates (after the budget; 0 on the interpreter).
        isolated: every candidate ran in a worker process (:mod:`dtriton.tune.worker`), so a
            candidate that faults or hangs could not take the exploration down.
        isolation: where the candidates ran, in words; when not isolated, why not (``isolate=False``,
            an algorithm a spawned process cannot import, workers that could not start).
        storage: what happened in the tuning database, in words (the best stored in which file, a
            faster stored record kept, or not stored and why); "" for a result built otherwise.
    """

    def __init__(self, *, algorithm, table, device, timings_meaningful, strategy, stop_reason, elapsed_s,
                 space=None, oracle="reference", key=None, budget_s=None, remeasure_s=0.0, isolated=False,
                 isolation="", storage=""):
        self.algorithm = algorithm
        self.table = table
        self.device = device
        self.timings_meaningful = timings_meaningful
        self.strategy = strategy
        self.stop_reason = stop_reason
        self.elapsed_s = elapsed_s
        self.space = space
        self.oracle = oracle
        self.key = key
        self.budget_s = budget_s
        self.remeasure_s = remeasure_s
        self.isolated = isolated
        self.isolation = isolation
        self.storage = storage
        row = self.pick_best(table)
        self.best_row = row
        self.best: Schedule | None = None if row is None else (
            row.get("schedule") or Schedule.from_json(row["schedule_json"]))

    @staticmethod
    def pick_best(rows: Sequence[Mapping]) -> dict | None:
        """The winning row: status "ok", lowest median, ties broken by p80 then by schedule JSON
        (deterministic: the same rows always give the same winner). ``None`` if none is ok."""
        ok = [r for r in rows if r.get("status") == "ok" and r.get("median_us") is not None
              and math.isfinite(r["median_us"])]
        if not ok:
            return None
        return dict(min(ok, key=lambda r: (r["median_us"], r.get("p80_us") or math.inf, r.get("schedule_json") or "")))

    @property
    def heuristic_row(self) -> dict | None:
        """The row of the heuristic's schedule (the baseline)."""
        return next((r for r in self.table if r.get("origin") == "heuristic"), None)

    @property
    def speedup(self) -> float | None:
        """Heuristic median time / best median time (None when either is missing)."""
        h, b = self.heuristic_row, self.best_row
        if not h or not b or h.get("status") != "ok" or not b.get("median_us"):
            return None
        return h["median_us"] / b["median_us"]

    def counts(self) -> dict[str, int]:
        """Number of candidates per status."""
        c = {s: 0 for s in STATUSES}
        for r in self.table:
            c[r["status"]] = c.get(r["status"], 0) + 1
        return {k: v for k, v in c.items() if v}

    def compile(self) -> Kernel:
        """``dt.compile(algorithm, best)``. Raises ``ValueError`` when there is no best schedule
        or no algorithm (a result loaded from JSON)."""
        if self.best is None or self.algorithm is None:
            raise ValueError("no best schedule to compile" if self.best is None else "result has no algorithm")
        return Kernel(self.algorithm, self.best)

    # -- reports ----------------------------------------------------------------------------------
    def summary(self, top: int = 10, width: int = 140) -> str:
        """A text report, ``width`` characters wide: header, warnings, the best candidate, a table
        of the ``top`` fastest (and the heuristic), a table of the candidates that ran but were
        rejected (wrong, failed, timeout) or were abandoned (skipped), each with its reason, and
        the counts and most common reasons of those decided without running (illegal, pruned,
        duplicate). Tables are drawn with ``rich``, so columns grow with their values."""
        name = self.algorithm.name if self.algorithm is not None else "?"
        head = [f"dtriton explore: {name} on {self.device}, strategy {self.strategy}, "
                f"{self.elapsed_s:.1f} s" + (f" of {self.budget_s:g} s" if self.budget_s else "") +
                f", stopped: {self.stop_reason}",
                "candidates: " + str(len(self.table)) + " (" + ", ".join(f"{k} {v}" for k, v in self.counts().items()) + ")"]
        if not self.timings_meaningful:
            head.append("WARNING: these timings come from the Triton interpreter (Python on the CPU); they say "
                        "nothing about GPU speed. Only the correctness checks mean something here.")
        if self.isolation:
            head.append(("isolation: candidates ran in " if self.isolated else "WARNING: candidates ran ")
                        + self.isolation)
        if self.oracle != "reference":
            head.append("NOTE: the eager reference would not fit in memory; candidates were checked against "
                        "the heuristic schedule's output.")
        b = self.best_row
        if b is None:
            head.append("best: none (no candidate passed the correctness check)")
        else:
            head.append(f"best: #{b['id']} {_us(b['median_us'])} µs (p20 {_us(b['p20_us'])}, p80 {_us(b['p80_us'])})"
                        + (f", {self.speedup:.2f}x the heuristic" if self.speedup else ""))
            head.append(f"  schedule: {b['schedule_json']}")
        if self.storage:
            head.append(f"tuning database: {self.storage}")
        buf = io.StringIO()
        con = Console(file=buf, width=width, color_system=None, emoji=False, highlight=False)
        con.print("\n".join(head), markup=False, soft_wrap=True)
        ok = sorted((r for r in self.table if r["status"] == "ok"), key=lambda r: (r["median_us"], r["id"]))
        if ok:
            shown = ok[:top]
            h = self.heuristic_row
            if h is not None and h["status"] == "ok" and h not in shown:
                shown.append(h)
            t = _table("fastest candidates", ["#", "from", "median µs", "p20", "p80", "rel err", "compile s", "schedule"])
            for r in shown:
                _row(t, r["id"], "(heuristic)" if r.get("origin") == "heuristic" else r.get("origin"),
                     _us(r["median_us"]), _us(r["p20_us"]), _us(r["p80_us"]), _num(r.get("rel_err"), ".1e"),
                     _num(r.get("compile_s"), ".2f"), _short(r["schedule_json"]))
            con.print(t)
        bad = [r for r in self.table if r["status"] in ("wrong", "failed", "timeout", "skipped")]
        if bad:
            t = _table("rejected after running, or abandoned (skipped)", ["#", "status", "reason", "schedule"])
            for r in bad[:top]:
                _row(t, r["id"], r["status"], r.get("reason") or "", _short(r.get("schedule_json")))
            con.print(t)
            if len(bad) > top:
                con.print(f"... and {len(bad) - top} more", markup=False)
        pre = [r for r in self.table if r["status"] in ("illegal", "pruned", "duplicate")]
        if pre:
            con.print(f"decided without running: {len(pre)}", markup=False)
            reasons = Counter((r["status"], _reason_kind(r.get("reason") or "")) for r in pre)
            texts: dict[tuple, set] = {}   # (the reason itself where a kind has one: its numbers kept)
            for r in pre:
                texts.setdefault((r["status"], _reason_kind(r.get("reason") or "")), set()).add(r.get("reason") or "")
            for (st, why), n in reasons.most_common(top):
                one = texts[st, why]
                con.print(f"  {n:>4} {st}: {next(iter(one)) if len(one) == 1 else why}", markup=False, soft_wrap=True)
        return "\n".join(ln.rstrip() for ln in buf.getvalue().rstrip("\n").splitlines())

    def __repr__(self):
        return (f"<ExploreResult {self.algorithm.name if self.algorithm else '?'}: {len(self.table)} candidates, "
                f"best {self.best_row['median_us']:.2f} µs>" if self.best_row else
                f"<ExploreResult: {len(self.table)} candidates, no best>")

    def plot(self, path: str | os.PathLike) -> Path:
        """Save a figure (PNG, or whatever the suffix says) of time per candidate and best-so-far
        against elapsed seconds; rejected candidates (wrong, failed, timeout) are red crosses along
        the top, skipped ones orange squares, and the budget a dotted line.
        Uses matplotlib's Agg canvas (no display needed). Returns the path.

        Raises ``ImportError`` when matplotlib is missing (``pip install 'dtriton[explore]'``)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        fig = Figure(figsize=(8, 4.5), dpi=110)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        ok = [r for r in self.table if r["status"] == "ok" and r.get("elapsed_s") is not None]
        if ok:
            xs = [r["elapsed_s"] for r in ok]
            ys = [r["median_us"] for r in ok]
            lo = [max(0.0, r["median_us"] - r["p20_us"]) for r in ok]
            hi = [max(0.0, r["p80_us"] - r["median_us"]) for r in ok]
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", ms=3, lw=0.8, color="tab:blue", alpha=0.7,
                        label="candidate (median, p20-p80)")
            order = sorted(ok, key=lambda r: r["elapsed_s"])
            bx, by, cur = [], [], math.inf
            for r in order:
                cur = min(cur, r["median_us"])
                bx.append(r["elapsed_s"])
                by.append(cur)
            bx.append(max(self.elapsed_s, bx[-1]))
            by.append(cur)
            ax.step(bx, by, where="post", color="tab:green", lw=2, label="best so far")
            h = self.heuristic_row
            if h is not None and h["status"] == "ok":
                ax.axhline(h["median_us"], color="gray", ls="--", lw=1, label="heuristic")
            top = max(r["p80_us"] for r in ok) * 1.15
        else:
            top = 1.0
        bad = [r for r in self.table if r["status"] in ("wrong", "failed", "timeout") and r.get("elapsed_s") is not None]
        if bad:
            ax.scatter([r["elapsed_s"] for r in bad], [top] * len(bad), marker="x", color="red",
                       label="wrong / failed / timeout", zorder=3)
        skipped = [r for r in self.table if r["status"] == "skipped" and r.get("elapsed_s") is not None]
        if skipped:
            ax.scatter([r["elapsed_s"] for r in skipped], [top] * len(skipped), marker="s", facecolors="none",
                       edgecolors="tab:orange", label="skipped (budget)", zorder=3)
        if self.budget_s:
            ax.axvline(self.budget_s, color="black", ls=":", lw=1, label="budget")
        if ok and max(r["median_us"] for r in ok) / max(min(r["median_us"] for r in ok), 1e-9) > 8:
            ax.set_yscale("log")
        ax.set_xlabel("elapsed (s)")
        ax.set_ylabel("time per call (µs)")
        name = self.algorithm.name if self.algorithm is not None else ""
        title = f"dtriton explore {name} on {self.device}"
        if not self.timings_meaningful:
            title += "\n(interpreter: timings are meaningless)"
        ax.set_title(title, fontsize=10)
        if ok or bad or skipped:
            ax.legend(fontsize=8, loc="best")
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        p = Path(path)
        fig.savefig(str(p))
        return p

    # -- serialisation ----------------------------------------------------------------------------
    def to_json(self) -> str:
        """The result as JSON (schedules as JSON text); :meth:`from_json` reads it back."""
        rows = []
        for r in self.table:
            d = {k: v for k, v in r.items() if k != "schedule"}
            for k in ("median_us", "p20_us", "p80_us", "rel_err"):
                if isinstance(d.get(k), float) and not math.isfinite(d[k]):
                    d[k] = None
            rows.append(d)
        return json.dumps({"format": "dtriton-explore", "version": 1,
                           "algorithm": self.algorithm.name if self.algorithm is not None else None,
                           "fingerprint": self.algorithm.fingerprint if self.algorithm is not None else None,
                           "device": self.device, "timings_meaningful": self.timings_meaningful,
                           "strategy": self.strategy, "stop_reason": self.stop_reason, "elapsed_s": self.elapsed_s,
                           "budget_s": self.budget_s, "remeasure_s": self.remeasure_s, "oracle": self.oracle,
                           "isolated": self.isolated, "isolation": self.isolation, "storage": self.storage,
                           "space": self.space.to_dict() if self.space is not None else None,
                           "table": rows}, indent=1)

    @staticmethod
    def from_json(text: str, algorithm: Algorithm | None = None) -> "ExploreResult":
        """Load a result saved by :meth:`to_json`; ``best`` is picked again from the stored
        timings by :meth:`pick_best`, so it is the same winner. Raises ``ValueError`` for text
        that is not such a result."""
        d = json.loads(text)
        if not isinstance(d, dict) or d.get("format") != "dtriton-explore":
            raise ValueError("not a dtriton explore result")
        table = []
        for r in d["table"]:
            r = dict(r)
            r["schedule"] = Schedule.from_json(r["schedule_json"]) if r.get("schedule_json") else None
            table.append(r)
        return ExploreResult(algorithm=algorithm, table=table, device=d["device"],
                             timings_meaningful=d["timings_meaningful"], strategy=d["strategy"],
                             stop_reason=d["stop_reason"], elapsed_s=d["elapsed_s"],
                             space=Space(**d["space"]) if d.get("space") else None, oracle=d.get("oracle", "reference"),
                             budget_s=d.get("budget_s"), remeasure_s=d.get("remeasure_s") or 0.0,
                             isolated=bool(d.get("isolated")), isolation=d.get("isolation") or "",
                             storage=d.get("storage") or "")
