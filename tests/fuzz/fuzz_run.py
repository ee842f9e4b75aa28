"""Running one fuzz case and classifying what happened; the command line of long runs.

One case (``fuzz_grammar.Case``) runs under two schedules (the heuristic's, a random partial
schedule from the knobs, or a point of the derived exploration space), each into NaN-poisoned
``out=`` tensors, and is compared with the independent evaluator (``fuzz_eval``) in float64 and
with the other schedule's result. Outcomes:

- ``match``: every schedule that ran matched (some may have been refused: see ``runs``);
- ``wrong``: a value differs from the oracle; ``schedule-dependent``: the two schedules disagree;
- ``refusal``: dtriton refused every schedule with one of its own errors (class and first line);
- ``bug``: an exception that is not a dtriton error; ``timeout``: over the per-case limit.

Summaries also count ``bad-refusal`` (a CompileError on a legal program, or the heuristic's own
schedule refused) and ``known:<name>`` (a failure matching an open bug of :data:`KNOWN`).

Long runs (outside CI)::

    nice python3 tests/fuzz/fuzz_run.py --start 0 --count 1000 --out /tmp/fuzz/part0.json
    python3 tests/fuzz/fuzz_run.py --merge /tmp/fuzz/part*.json --out fuzz-summary.json
    python3 tests/fuzz/fuzz_run.py --replay fuzz-summary.json --out replayed.json   # failures, re-run

On a GPU, ``--device cuda`` (or ``DTRITON_FUZZ_DEVICE=cuda``) runs the kernels there (the oracle
stays on the CPU; inputs keep their strides, offsets and stride-0 axes on the device).
``--time-limit S`` stops starting cases after S seconds and cuts the case running at S (not
counted), so a run ends cleanly within about S seconds plus the summary; the JSON (``--out``,
rewritten every 20 cases) then says ``"stopped": "time-limit"`` and the ``next_seed`` to resume
from. A case after which the CUDA context is unusable (a fault on the GPU) is a ``bug``, and the
run stops there (``"stopped": "cuda-context-lost"``): later cases could not run. A case that
never returns (a GPU kernel that does not end: the per-case alarm cannot interrupt it) ends the run
30 s after its limit with ``"stopped": "hung"`` and exit status 3. The run ends with a table of the
counts per outcome, per run status and per refusal class.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_eval import Evaluator  # noqa: E402
from fuzz_grammar import AXES, Case, Draw, Reject, build_algorithm, describe, draw_case, make_args  # noqa: E402

import dtriton as dt  # noqa: E402

#: relative tolerance per output dtype (widened per element by the float32/float64 disagreement)
RTOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 2e-2, torch.float64: 1e-9}
P2 = (1, 2, 4, 8, 16, 32)


# ----------------------------------------------------------------------------------------------
# schedules
# ----------------------------------------------------------------------------------------------
def knob_schedule(d: Draw, alg: dt.Algorithm, axis_sizes: dict[str, int]) -> dt.Schedule:
    """A random partial schedule from the knobs: tiles, grid, strategy, split and split mode,
    placement of every reduction stage, persistent, num_warps. It may be illegal (then dtriton
    must refuse it with a :class:`dt.ScheduleError`)."""
    axes = list(alg.axis_names)
    red = list(alg.reduction_axes)
    out_axes = list(dict.fromkeys(a for o in alg.outputs for a in o.layout))
    kw: dict[str, Any] = {}
    tile = {}
    for a in axes:
        if d.chance(0.6):
            lo = max(1, (1 << max(0, math.ceil(math.log2(max(axis_sizes[a], 1))))) // 8)
            tile[a] = d.choice([t for t in P2 if t >= lo] or [32])
    if tile:
        kw["tile"] = tile
    if out_axes and d.chance(0.3):
        g = list(out_axes)
        for n in range(len(g) - 1, 0, -1):
            m = d.integer(0, n)
            g[n], g[m] = g[m], g[n]
        kw["grid"] = tuple(g[:d.integer(0, len(g))])
    strategy = {}
    for a in axes:
        if a in kw.get("grid", ()):
            continue
        if a in red and d.chance(0.5):
            strategy[a] = d.choice(("whole", "loop", "loop", "online"))
        elif a not in red and d.chance(0.25):
            strategy[a] = d.choice(("whole", "loop"))
    if strategy:
        kw["strategy"] = strategy
        if d.chance(0.8):   # mostly legal: a whole axis takes no tile
            tile = {a: t for a, t in tile.items() if strategy.get(a) != "whole"}
            kw["tile"] = tile
    split = {a: d.integer(2, 4) for a in red if d.chance(0.2)}
    if split:
        kw["split"] = split
        kw["split_mode"] = d.choice(("atomic", "partials"))
    stages = {}
    for s in alg.stages.values():
        if not s.is_output and d.chance(0.5):
            stages[s.name] = {"place": d.choice(("fuse", "fuse", "materialize", "auto"))}
    if stages:
        kw["stages"] = stages
    if d.chance(0.2):
        kw["persistent"] = d.integer(1, 2)
    if d.chance(0.3):
        kw["num_warps"] = d.choice((1, 2, 4, 8))
    return dt.Schedule(**kw)


def space_schedule(d: Draw, alg: dt.Algorithm, args: list) -> dt.Schedule:
    """A random point of the exploration space :meth:`dt.Space.derive` gives for this call (each
    dimension moved off the heuristic's value with probability 1/2), sometimes persistent."""
    sp = dt.Space.derive(alg, args)
    base = dt.compile(alg).schedule_for(*args)
    point = {name: d.choice(list(vals)) for name, vals in sp.dimensions() if vals and d.chance(0.5)}
    sched = sp.schedule_for(point, base, alg, alg.bind(args).axis_sizes)
    if d.chance(0.2):
        sched = sched.replace(persistent=d.integer(1, 2))
    return sched


def draw_schedules(d: Draw, alg: dt.Algorithm, args: list) -> list[tuple[str, dt.Schedule | None]]:
    """Two schedules to compare: (how, schedule or None for the heuristic's)."""
    out: list[tuple[str, dt.Schedule | None]] = []
    for _ in range(2):
        how = d.choice(("default", "knobs", "knobs", "space", "space"))
        if how == "default" and any(h == "default" for h, _ in out):
            how = "knobs"
        if how == "default":
            out.append((how, None))
        elif how == "knobs":
            out.append((how, knob_schedule(d, alg, alg.bind(args).axis_sizes)))
        else:
            try:
                out.append((how, space_schedule(d, alg, args)))
            except dt.DTritonError as e:   # no heuristic schedule: the default run reports it
                out.append(("default", None) if not out or out[0][1] is not None else
                           ("knobs", knob_schedule(d, alg, alg.bind(args).axis_sizes)))
                del e
    return out


# ----------------------------------------------------------------------------------------------
# comparison
# ----------------------------------------------------------------------------------------------
def _same(a: torch.Tensor, b: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Elementwise: equal NaN, equal infinities, or finite and within ``tol``."""
    both_nan = torch.isnan(a) & torch.isnan(b)
    eq = a == b
    fin = torch.isfinite(a) & torch.isfinite(b)
    return both_nan | eq | (fin & ((a - b).abs() <= tol))


def tolerance(r64: torch.Tensor, r32: torch.Tensor, odt: torch.dtype) -> torch.Tensor:
    """Per-element tolerance: relative to the element and to the output's RMS, plus 16x how much
    float32 and float64 evaluation disagree there (ill-conditioned elements get more room)."""
    rtol = RTOL[odt]
    fin = r64[torch.isfinite(r64)]
    rms = float(fin.square().mean().sqrt()) if fin.numel() else 0.0
    env = (r64 - r32).abs()
    env = torch.where(torch.isfinite(env), env, torch.zeros_like(env))
    return rtol * (r64.abs() + rms + 1e-30) + 16 * env


def compare_output(got: torch.Tensor, ev64: Evaluator, ev32: Evaluator, n: int,
                   r64: torch.Tensor, r32: torch.Tensor) -> str | None:
    """None when output ``n`` matches the oracle, else a one-line description of the mismatch."""
    odt = got.dtype
    if tuple(got.shape) != tuple(r64.shape):
        return f"output {n}: shape {tuple(got.shape)}, expected {tuple(r64.shape)}"
    if odt == torch.int64 and ev64.arg_values(n) is not None:
        return _compare_index(got, ev64.arg_values(n), ev32.arg_values(n), r64, n)
    g = got.double()
    a, b = r64.to(odt).double(), r32.to(odt).double()
    tol = tolerance(r64.double(), r32.double(), odt if odt in RTOL else torch.float64)
    ok = _same(g, a, tol) | _same(g, b, tol)
    if bool(ok.all()):
        return None
    bad = (~ok).nonzero()
    first = tuple(bad[0].tolist())
    return (f"output {n} ({odt}): {len(bad)}/{g.numel()} elements differ; at {first} got {g[first].item()!r}, "
            f"expected {a[first].item()!r} (float32 evaluation {b[first].item()!r})")


def _compare_index(got, v64, v32, r64, n) -> str | None:
    """An arg-reduction output: the index must be in range and point at a value equal (within the
    conditioning tolerance) to the one the oracle's index points at."""
    span = v64.shape[-1]
    if bool(((got < 0) | (got >= span)).any()):
        bad = ((got < 0) | (got >= span)).nonzero()[0].tolist()
        return f"output {n}: index {got[tuple(bad)].item()} outside [0, {span}) at {tuple(bad)}"
    want = r64.long().unsqueeze(-1)
    vg = v64.gather(-1, got.unsqueeze(-1)).squeeze(-1)
    vr = v64.gather(-1, want).squeeze(-1)
    env = (v64 - v32).abs().nan_to_num(0.0, 0.0, 0.0).amax(-1) if span else torch.zeros_like(vr)
    ok = (got == r64.long()) | _same(vg, vr, 1e-5 * (vr.abs().nan_to_num(0.0, 0.0, 0.0) + 1) + 16 * env)
    if bool(ok.all()):
        return None
    first = tuple((~ok).nonzero()[0].tolist())
    return (f"output {n} (index): at {first} got {got[first].item()} (value {vg[first].item()!r}), expected "
            f"{r64.long()[first].item()} (value {vr[first].item()!r})")


# ----------------------------------------------------------------------------------------------
# one case
# ----------------------------------------------------------------------------------------------
#: where the kernels run: "cpu" (Triton's interpreter) or "cuda" (DTRITON_FUZZ_DEVICE=cuda on a GPU)
DEVICE = os.environ.get("DTRITON_FUZZ_DEVICE", "cpu")


def on_device(a: torch.Tensor, device: str) -> torch.Tensor:
    """``a`` on ``device`` with the same sizes, strides and storage offset (its whole storage is
    copied, so transposed, offset and expanded, stride-0, layouts stay what they are; ``.to``
    would make an expanded tensor contiguous)."""
    n = a.untyped_storage().nbytes() // a.element_size()
    flat = torch.empty(0, dtype=a.dtype).set_(a.untyped_storage(), 0, (n,), (1,))
    return flat.to(device, copy=True).as_strided(a.shape, a.stride(), a.storage_offset())


def cuda_lost() -> str | None:
    """On a GPU run: why the CUDA context is unusable (after a fault), or None."""
    if not DEVICE.startswith("cuda"):
        return None
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device=DEVICE).add_(1).item()
        return None
    except Exception as e:  # noqa: BLE001 - a sticky CUDA error
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"


def _poison(shape, dtype, value=float("nan")) -> torch.Tensor:
    return torch.full(shape, value if dtype.is_floating_point else -12345, dtype=dtype, device=DEVICE)


def _run_one(alg: dt.Algorithm, sched, args, fill=float("nan")) -> list[torch.Tensor]:
    b = alg.bind(args)
    outs = [_poison([b.axis_sizes[a] for a in o.layout], odt, fill) for o, odt in zip(alg.outputs, b.out_dtypes)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel = dt.compile(alg, sched)
        got = kernel(*args, out=tuple(outs) if len(outs) > 1 else outs[0])
    got = list(got) if isinstance(got, tuple) else [got]
    if len(got) != len(outs) or any(g is not o for g, o in zip(got, outs)):
        raise AssertionError("kernel(out=...) did not return the tensors it was given")
    return [g.cpu() for g in got]


def _classify(e: BaseException) -> dict:
    lines = str(e).strip().splitlines() or [""]
    first = lines[0][:300]
    if isinstance(e, dt.CompileError):   # the first line names the kernel; the cause comes last
        first = f"{first.split(';')[0]}: {lines[-1][:240]}"
    if isinstance(e, dt.DTritonError):
        return {"status": "refusal", "cls": type(e).__name__, "msg": first}
    tb = traceback.extract_tb(e.__traceback__)
    where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
    return {"status": "bug", "cls": type(e).__name__, "msg": first, "where": where}


def run_case(case: Case, scheds: list[tuple[str, dt.Schedule | None]] | None = None,
             d: Draw | None = None) -> dict:
    """Run ``case`` under ``scheds`` (drawn from ``d`` when None) and classify the outcome.

    Returns ``{"outcome", "detail", "runs": [{"how", "schedule", "status", ...}], "case"}``; the
    case's ``schedules`` field is filled with the schedules' JSON, so the record replays."""
    rec: dict[str, Any] = {"outcome": None, "detail": "", "runs": []}
    try:
        alg = build_algorithm(case)
        args, exact = make_args(case)
        if DEVICE != "cpu":   # same layouts on the device (expanded inputs keep their stride 0)
            args = [on_device(a, DEVICE) if isinstance(a, torch.Tensor) else a for a in args]
        alg.bind(args)
        if scheds is None:
            scheds = draw_schedules(d, alg, args)
    except Exception as e:  # noqa: BLE001 - classified
        c = _classify(e)
        rec.update(outcome=c["status"], detail=f"{c['cls']}: {c['msg']}", runs=[dict(c, how="build")])
        rec["case"] = case.to_dict()
        return rec
    case.schedules = [{"how": h, "json": s.to_json() if s is not None else None} for h, s in scheds]
    rec["case"] = case.to_dict()
    ev64, ev32 = Evaluator(case, exact, torch.float64), Evaluator(case, exact, torch.float32)
    r64, r32 = ev64.outputs(), ev32.outputs()
    # the float32 evaluation furthest from float64 of two summation orders, per element
    seq = Evaluator(case, exact, torch.float32, sequential=True).outputs()
    r32 = [torch.where((q.double() - a.double()).abs() > (b.double() - a.double()).abs(), q, b)
           if b.is_floating_point() else b for a, b, q in zip(r64, r32, seq)]
    results = []
    for how, s in scheds:
        run: dict[str, Any] = {"how": how, "schedule": repr(s)}
        try:
            got = _run_one(alg, s, args)
            bad = [m for n, g in enumerate(got) if (m := compare_output(g, ev64, ev32, n, r64[n], r32[n]))]
            if not bad and any(bool(torch.isnan(g).any()) for g in got if g.is_floating_point()):
                again = _run_one(alg, s, args, fill=7.0)   # a NaN the oracle has too: was it written?
                bad = [f"output {n}: NaN only under a NaN poison (element never written)"
                       for n, (g, h) in enumerate(zip(got, again)) if g.is_floating_point()
                       and not bool(torch.isnan(h)[torch.isnan(g)].all())]
            run.update(status="wrong" if bad else "match", msg="; ".join(bad))
            results.append(got if not bad else None)
        except Exception as e:  # noqa: BLE001 - classified
            run.update(_classify(e))
            results.append(None)
        rec["runs"].append(run)
    rec["outcome"], rec["detail"] = _outcome(rec["runs"], results, r64, r32)
    return rec


def _outcome(runs, results, r64, r32) -> tuple[str, str]:
    for status in ("bug", "wrong"):
        hit = [r for r in runs if r["status"] == status]
        if hit:
            r = hit[0]
            return status, f"[{r['how']}] " + (f"{r.get('cls')}: {r['msg']} at {r.get('where')}"
                                              if status == "bug" else r["msg"])
    if all(r["status"] == "refusal" for r in runs):
        return "refusal", f"{runs[0]['cls']}: {runs[0]['msg']}"
    if len(results) == 2 and all(x is not None for x in results):
        for n, (a, b) in enumerate(zip(*results)):
            if a.dtype == torch.int64:
                continue   # indices of near-ties may differ; each was checked against the oracle
            tol = tolerance(r64[n].double(), r32[n].double(), a.dtype if a.dtype in RTOL else torch.float64)
            ok = _same(a.double(), b.double(), 2 * tol) | ~_same(r64[n].double(), r32[n].to(a.dtype).double(),
                                                                 tol)
            if not bool(ok.all()):
                first = tuple((~ok).nonzero()[0].tolist())
                return "schedule-dependent", (f"output {n} at {first}: {a[first].item()!r} vs "
                                              f"{b[first].item()!r}")
    return "match", ""


# ----------------------------------------------------------------------------------------------
# seeded runs and summaries
# ----------------------------------------------------------------------------------------------
class Timeout(Exception):
    """A case ran longer than the per-case limit."""


#: set when the per-case alarm fires: the Timeout it raises may reach run_case wrapped in a
#: dtriton error (a CompileError around an interpreted launch), which must not count as a refusal
_ALARM = {"fired": False}


def _alarm(signum, frame):
    _ALARM["fired"] = True
    raise Timeout("case exceeded its time limit")


def case_for_seed(seed: int) -> tuple[Case, Draw]:
    """The case of ``seed`` (redrawn from the same generator while a draw is not legal)."""
    d = Draw(seed)
    for _ in range(50):
        try:
            return draw_case(d), d
        except Reject:
            continue
    raise RuntimeError(f"seed {seed}: no legal case in 50 draws")


def run_seed(seed: int, limit_s: int = 0, deadline: float | None = None) -> dict:
    """Draw and run the case of ``seed``; with ``limit_s``, a case running longer has the outcome
    ``timeout`` (the interpreter is slow on a loaded machine: not counted as a failure). A case
    still running at ``deadline`` (a ``time.time()`` value: the run's time limit) is stopped
    there and has the outcome ``cut`` (not counted). On a GPU, a case after which the CUDA
    context is unusable is a ``bug`` with ``rec["cuda_lost"]`` set."""
    case, d = case_for_seed(seed)
    alarm, cut = limit_s, False
    if deadline is not None and (not limit_s or deadline - time.time() < limit_s):
        alarm, cut = max(1, math.ceil(deadline - time.time())), True
    if alarm:
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(alarm)
    t0 = time.time()
    _ALARM["fired"] = False
    try:
        rec = run_case(case, d=d)
    except Timeout:
        _ALARM["fired"] = True
    finally:
        if alarm:
            signal.alarm(0)
    if _ALARM["fired"]:   # however the Timeout surfaced (raised, or caught inside a dtriton error)
        rec = {"outcome": "cut" if cut else "timeout", "detail": f"Timeout: case exceeded its time limit ({alarm} s)",
               "runs": [], "case": case.to_dict()}
    lost = cuda_lost()
    if lost:
        rec.update(outcome="bug", cuda_lost=True, detail=f"the CUDA context is unusable after this case ({lost}); "
                   + rec.get("detail", ""))
    rec["seed"], rec["seconds"] = seed, round(time.time() - t0, 2)
    rec["text"] = describe(case)
    return rec


def _passes_without(rec: dict, failed, uses, change) -> bool:
    """Whether every run of ``rec`` that ``failed(run)`` has a schedule that ``uses(schedule)`` and
    runs right under ``change(schedule)``: the failure is then due to that schedule feature."""
    case = Case.from_dict(rec["case"])
    bad = [n for n, r in enumerate(rec["runs"]) if failed(r)]
    if not bad or len(case.schedules) != len(rec["runs"]):
        return False
    for n in bad:
        js = case.schedules[n]["json"]
        s = dt.Schedule.from_json(js) if js else None
        if s is None or not uses(s):
            return False
        if run_case(Case.from_dict(rec["case"]), [("changed", change(s))])["outcome"] != "match":
            return False
    return True


def _fused_in_loop(rec: dict) -> bool:
    """Issue 17 case 1: a reduction placed with place="fuse" in a kernel that loops over the
    reduced axis reads the current tile only. The record is that bug when every wrong run asked
    for a fused stage and runs right once those placements are left to the compiler."""
    return _passes_without(
        rec, lambda r: r["status"] == "wrong", lambda s: any(st.place == "fuse" for st in s.stages.values()),
        lambda s: s.replace(stages={k: st.replace(place="auto") for k, st in s.stages.items()}))


def _persistent_0d(rec: dict) -> bool:
    """Issue 17 case 8: with persistent >= 1, a stage computed once before the persistent tile loop
    is a 0-d value that later code treats as a block (interpreter: "'dtype' object has no attribute
    'numel'"); the same schedule with persistent=0 runs right."""
    return _passes_without(
        rec, lambda r: r["status"] == "refusal" and r["cls"] == "CompileError" and "numel" in r["msg"],
        lambda s: s.persistent, lambda s: s.replace(persistent=0))


def _f64_output_f32_compute(rec: dict) -> bool:
    """Integer-valued outputs (of integer inputs only) are float64 by dtriton's dtype rule, but an
    algorithm with 16/32-bit float inputs elsewhere computes them in float32 (exp(tanh(I[j])) is
    float32-accurate in a float64 tensor; torch would give float32). The dtype rules are issue 17
    case 4's: errors of float32 size (<= 1e-6 relative) in float64 outputs of such cases."""
    import re
    dtypes = {t["dtype"] for t in rec["case"]["tensors"].values()}
    if "float64" in dtypes or not dtypes & {"float32", "float16", "bfloat16"}:
        return False
    wrong = [r for r in rec["runs"] if r["status"] == "wrong"]
    for r in wrong:
        m = re.search(r"\(torch\.float64\).* got (\S+), expected (\S+) ", r["msg"])
        if m is None or not abs(float(m.group(1)) - float(m.group(2))) <= 1e-6 * max(abs(float(m.group(2))), 1e-3):
            return False
    return bool(wrong)


#: bugs the fuzzer found, by name: a predicate over a failing record (consulted only after a
#: failure, so a fixed bug never hides a pass). Such records count under "known:<name>". The three
#: below were fixed in 39ff34c; they stay so that a return of one is named at once.
KNOWN = {"issue17-case1-fused-in-loop": _fused_in_loop, "issue17-case8-persistent-0d": _persistent_0d,
         "f64-output-f32-compute": _f64_output_f32_compute}


def known_issue(rec: dict) -> str | None:
    """The name of the :data:`KNOWN` open bug a failing record matches, or None."""
    for name, pred in KNOWN.items():
        if pred(rec):
            return name
    return None


#: refusals that mean "the compiler failed on a legal program": they count as failures
BAD_REFUSALS = ("CompileError",)


def verdict(rec: dict) -> str | None:
    """None when a record of :func:`run_case` is acceptable (a match, or refusals by dtriton's
    own checks), else why not: a wrong value, a schedule-dependent result, a non-dtriton
    exception, a :data:`BAD_REFUSALS` error on a legal program, or the heuristic's own schedule
    (none given) refused."""
    if rec["outcome"] in ("bug", "wrong", "schedule-dependent"):
        return f"{rec['outcome']}: {rec['detail']}"
    bad = [r for r in rec["runs"] if r["status"] == "refusal" and (r["cls"] in BAD_REFUSALS or (
        r["how"] == "default" and r["cls"] in ("ScheduleError", "CompileError")))]
    if bad:
        return f"refusal {bad[0]['cls']} of a legal program [{bad[0]['how']}]: {bad[0]['msg']}"
    return None


class Summary:
    """Counts per case outcome, per run status, per refusal class (with example first lines),
    and every non-match record in full (for regression files)."""

    def __init__(self):
        self.cases = collections.Counter()
        self.runs = collections.Counter()
        self.refusals = collections.Counter()
        self.messages: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.failures: list[dict] = []
        self.seconds = 0.0

    def add(self, rec: dict) -> None:
        """Count one record of :func:`run_case`/:func:`run_seed`."""
        bad = verdict(rec) is not None
        known = known_issue(rec) if bad else None
        label = rec["outcome"]
        if known:
            label = f"known:{known}"
        elif bad and label in ("match", "refusal"):
            label = "bad-refusal"   # a CompileError, or the heuristic's own schedule refused
        self.cases[label] += 1
        self.seconds += rec.get("seconds", 0.0)
        for r in rec["runs"]:
            self.runs[r["status"]] += 1
            if r["status"] == "refusal":
                self.refusals[r["cls"]] += 1
                self.messages[r["cls"]][_shape_of(r["msg"])] += 1
        if verdict(rec) is not None:
            self.failures.append(dict(rec, known=known))

    def to_dict(self) -> dict:
        """The summary as JSON-able data."""
        return {"cases": sum(self.cases.values()), "outcomes": dict(self.cases), "runs": dict(self.runs),
                "refusal_classes": dict(self.refusals),
                "refusal_messages": {k: dict(v.most_common(25)) for k, v in self.messages.items()},
                "seconds": round(self.seconds, 1), "failures": self.failures}

    @staticmethod
    def merge(parts: list[dict]) -> dict:
        """One summary from several :meth:`to_dict` results."""
        out: dict[str, Any] = {"cases": 0, "outcomes": {}, "runs": {}, "refusal_classes": {},
                               "refusal_messages": {}, "seconds": 0.0, "failures": []}
        for p in parts:
            out["cases"] += p["cases"]
            out["seconds"] += p["seconds"]
            out["failures"] += p["failures"]
            for k in ("outcomes", "runs", "refusal_classes"):
                for a, n in p[k].items():
                    out[k][a] = out[k].get(a, 0) + n
            for cls, msgs in p["refusal_messages"].items():
                m = out["refusal_messages"].setdefault(cls, {})
                for a, n in msgs.items():
                    m[a] = m.get(a, 0) + n
        return out


def _shape_of(msg: str) -> str:
    """A refusal message with its quoted names and numbers blanked, so equal causes count together."""
    import re
    msg = re.sub(r"\[[^\]]*\]", "[_]", re.sub(r"'[^']*'", "'_'", msg))
    return re.sub(r"\d+", "N", msg)[:160]


def replay(rec: dict) -> dict:
    """Run a record's case again under its recorded schedules (with the code as it is now)."""
    case = Case.from_dict(rec["case"])
    if not case.schedules:
        return dict(run_case(case, d=Draw(case.data_seed)), seed=rec.get("seed"), text=describe(case))
    scheds = [(s["how"], dt.Schedule.from_json(s["json"]) if s["json"] else None) for s in case.schedules]
    return dict(run_case(case, scheds), seed=rec.get("seed"), text=describe(case))


def keep(rec: dict, path: Path, what: str) -> None:
    """Append the case of ``rec`` (with its schedules and data seed) to the regressions file
    ``path`` as ``{"id", "what", "case"}``."""
    entries = json.loads(path.read_text()) if path.exists() else []
    entries.append({"id": f"seed{rec.get('seed', len(entries))}", "what": what, "case": rec["case"]})
    path.write_text(json.dumps(entries, indent=1) + "\n")
    print(f"kept {entries[-1]['id']}: {rec.get('text', '')[:200]}")


class Watchdog:
    """Ends a run whose case outlives its alarm by ``grace_s`` seconds: a GPU kernel that never
    returns blocks the main thread in a C call, where SIGALRM cannot interrupt it. This thread then
    calls ``on_hang(seed)`` (which writes the summary and prints the table) and exits with status 3."""

    def __init__(self, grace_s: float, on_hang):
        import threading
        self.grace_s, self.on_hang = grace_s, on_hang
        self.seed: int | None = None
        self.until = math.inf
        threading.Thread(target=self._watch, daemon=True, name="fuzz-watchdog").start()

    def case(self, seed: int, limit_s: float) -> None:
        """A case starts; it should end within ``limit_s`` seconds (0: no limit)."""
        self.seed, self.until = seed, time.time() + limit_s + self.grace_s if limit_s else math.inf

    def _watch(self) -> None:
        while True:
            time.sleep(1.0)
            if time.time() > self.until:
                self.on_hang(self.seed)
                sys.stdout.flush()
                os._exit(3)


def run_seeds(start: int, count: int, out: Path, limit: int, time_limit: float = 0.0, hang_grace_s: float = 30.0) -> dict:
    """Run seeds ``start`` .. ``start + count - 1`` (fewer with ``time_limit`` seconds, or after a
    lost CUDA context), rewriting the summary at ``out`` every 20 cases and at the end. Returns the
    summary with ``device``, ``start``, ``next_seed``, ``stopped`` ("running" in the files written
    meanwhile; "count", "time-limit", "cuda-context-lost"; "hung" when a case never returned: see :class:`Watchdog`, the process
    then exits with status 3) and ``wall_s``."""
    summ, t0 = Summary(), time.time()
    deadline = t0 + time_limit if time_limit else None
    stopped, nxt = "running", start   # what the JSON says while the run goes on

    def write() -> dict:
        d = dict(summ.to_dict(), device=DEVICE, start=start, next_seed=nxt, stopped=stopped,
                 wall_s=round(time.time() - t0, 1))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(d, indent=1))
        return d

    def hung(seed: int) -> None:
        nonlocal stopped, nxt
        stopped, nxt = "hung", seed + 1
        summ.cases["bug"] += 1
        summ.failures.append({"seed": seed, "outcome": "bug", "runs": [], "known": None,
                              "detail": "hung: the case ran past its time limit and never returned (a GPU kernel "
                                        "that does not end?)"})
        print(count_table(write()))
    dog = Watchdog(hang_grace_s, hung)
    for n, seed in enumerate(range(start, start + count)):
        if deadline is not None and time.time() >= deadline:
            stopped, nxt = "time-limit", seed
            break
        limits = ([limit] if limit else []) + ([deadline - time.time()] if deadline is not None else [])
        dog.case(seed, min(limits) if limits else 0)
        rec = run_seed(seed, limit, deadline)
        dog.case(seed, 0)
        if rec["outcome"] == "cut":
            stopped, nxt = "time-limit", seed
            break
        summ.add(rec)
        nxt = seed + 1
        if rec.get("cuda_lost"):
            stopped = "cuda-context-lost"
            break
        if n % 20 == 19:
            write()
    else:
        stopped = "count"
    return write()


def count_table(d: dict, top: int = 10) -> str:
    """A summary (:meth:`Summary.to_dict`) as text: counts per outcome, per run status, per
    refusal class, and the first ``top`` failures."""
    lines = []
    for title, key in (("outcome", "outcomes"), ("run status", "runs"), ("refusal class", "refusal_classes")):
        items = sorted(d.get(key, {}).items(), key=lambda kv: (-kv[1], kv[0]))
        lines += [f"{title:32s} {'count':>7s}", "-" * 40] + [f"{k:32s} {v:7d}" for k, v in items]
        lines += [f"{'total':32s} {sum(v for _, v in items):7d}", ""]
    fails = d.get("failures", [])
    if fails:
        lines.append(f"failures ({len(fails)}; the first {min(top, len(fails))}):")
        lines += [f"  seed {r.get('seed')}: {(verdict(r) or r['outcome'])[:150]}" for r in fails[:top]]
    extra = [f"{k} {d[k]}" for k in ("device", "stopped", "next_seed", "wall_s") if k in d]
    lines.append(f"{d.get('cases', 0)} cases ({float(d.get('seconds', 0)):.1f} s running them)" + ("; " if extra else "")
                 + ", ".join(extra))
    return "\n".join(lines)


def main(argv=None) -> int:
    """Run seeds ``--start`` .. ``--start + --count - 1`` and write a summary JSON, or ``--merge``."""
    global DEVICE
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--count", type=int, default=None, help="cases to run (default 100; no limit with --time-limit)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--limit", type=int, default=120, help="seconds per case before it counts as a Timeout bug")
    p.add_argument("--time-limit", type=float, default=0.0, help="stop the run cleanly after this many seconds")
    p.add_argument("--device", default=DEVICE, help="where kernels run: cpu (interpreter) or cuda")
    p.add_argument("--merge", nargs="*", type=Path, help="summary files to merge into --out")
    p.add_argument("--replay", type=Path, help="re-run the failures of this summary (their cases and schedules)")
    p.add_argument("--keep", type=int, help="append the case of this seed to --out (a regressions file)")
    p.add_argument("--what", default="", help="with --keep: what the case found")
    a = p.parse_args(argv)
    DEVICE = a.device
    if DEVICE.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {DEVICE}: torch sees no CUDA device here")
    if a.replay is not None:
        summ = Summary()
        for old in json.loads(a.replay.read_text())["failures"]:
            summ.add(replay(old))
        a.out.write_text(json.dumps(summ.to_dict(), indent=1))
        print(count_table(summ.to_dict()))
        return 0
    if a.keep is not None:
        keep(run_seed(a.keep), a.out, a.what)
        return 0
    if a.merge:
        merged = Summary.merge([json.loads(f.read_text()) for f in a.merge])
        a.out.write_text(json.dumps(merged, indent=1))
        print(count_table(merged))
        return 0
    count = a.count if a.count is not None else (10 ** 9 if a.time_limit else 100)
    d = run_seeds(a.start, count, a.out, a.limit, a.time_limit)
    print(count_table(d))
    print(f"summary JSON: {a.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
