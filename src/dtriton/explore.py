"""Schedule exploration: derived search spaces, safe measurement, strategies, reports.

::

    result = dt.explore(matmul, (A, B), budget=60)        # seconds; the space is derived
    result.best                                            # a dt.Schedule (None if nothing passed)
    result.table                                           # every candidate, as dicts
    print(result.summary()); result.plot("explore.png")
    kernel = dt.compile(matmul, "tuned")                   # uses what explore stored

**Space.** :meth:`Space.derive` builds the default space from the algorithm and the call's
shapes: power-of-two tiles per axis (no larger than the padded axis; 16..256 for the axes of a
``tl.dot``), permutations of the grid, grouped launch order, split factors for the reduction
axes of sum stages whose outputs have few tiles, the strategy (whole/loop/online) of every axis
that some kernel covers in-program, the placement (auto/fuse/materialize) of every reduction
stage, tiles of a split stage that runs in a kernel of its own (``stage_tile``), ``num_warps``
and ``num_stages`` (GPU only: the interpreter ignores both), persistent tile loops and, for 16-bit
contractions on Hopper-class GPUs, TMA tile loads (``access``). Every field
that a :class:`Space` leaves ``None`` keeps the heuristic's value, so ``dt.Space(tile=...)``
narrows the search; :meth:`Space.widen` adds values to a derived space.

**Pruning before compiling.** Each candidate is checked with ``Schedule.validate``, the resource
rules of :func:`check_resources` (shared memory of dot tiles ``(BM*BK + BK*BN) * bytes *
num_stages`` against the device's limit, 227 KB on H100/H200; at most 64K elements per program;
at most 256 fp32 accumulator registers per thread for a dot; "whole" blocks no larger than
32768), then lowered and turned into Triton source (no GPU work). Timing is ``triton.testing.do_bench``
(L2 flushed before each call) or, with ``timing="warm"``, :func:`warm_gpu_time` (L2 warm, GPU time
only, what a CUDA-graph replay of repeated calls shows). Candidates that generate the
same kernels with the same launch options as an earlier one are marked "duplicate".

**Safety.** The caller's tensors are never handed to a candidate: candidates run on copies that
are restored from a pristine copy before every run, outputs are poisoned with NaN first (passed
as ``out=``), and every output is compared with ``alg.reference`` by relative norm error
(fp32 1e-4, tf32 3e-3, fp16/bf16 1e-2, fp64 1e-5). A candidate that changes an input it does not
write, leaves NaN where the reference is finite, or misses the tolerance is "wrong" and is never
chosen. When the eager reference's largest intermediate would not fit in memory (or it runs out
of memory), candidates are compared with the heuristic schedule's output instead, with a warning
and ``result.oracle == "heuristic"``.

**Database.** The best schedule is stored in the tuning database (:mod:`dtriton.tuning`) for
``dt.compile(alg, "tuned")``, and every measured candidate is stored for the exact shapes; with
``deterministic=True`` those stored timings are reused instead of measuring again, so the same
stored timings always give the same winner (:meth:`ExploreResult.pick_best` breaks ties by p80,
then by schedule JSON).

**Speed.** On the GPU, candidates are compiled in batches by worker threads (Triton's compiler
spends much of its time outside the GIL, in MLIR passes and ``ptxas``), each on private copies
of the inputs, and each is checked there; timing then runs on the main thread with nothing else
on the GPU (``triton.testing.do_bench``: median, p20 and p80, after a short warm-up that brings
the clocks up). Compilation and timing never overlap: a batch is compiled, then timed. A compile
that outlives ``compile_timeout`` is recorded as "timeout", and one still running when the
budget ends as "skipped" (its thread is a daemon and is left to finish; Python threads cannot
be killed). The few best candidates and the heuristic baseline are measured again, interleaved,
before the winner is picked. On the Triton interpreter everything runs sequentially on the main
thread and timings are one wall-clock sample of Python: they mean nothing, and the result says so.

**Strategies.** "exhaustive" (every point, in order), "random" (uniform without repetition,
seeded) and "tpe" (optuna's TPE sampler; optuna is optional: without it "tpe" falls back to
"random" with a warning). "auto" picks exhaustive for spaces of at most 64 points, else tpe.
Random and tpe first try the heuristic's neighbours (one dimension one step away). Exploration
stops when the budget is spent, after ``max_trials`` compiled candidates, when the space is
exhausted, or (random/tpe) when ``patience`` measured candidates in a row brought no improvement
of at least 0.5%.

Note: ``dtriton/__init__.py`` binds ``dtriton.explore`` to the *function*; reach this module with
``from dtriton.explore import ...`` or ``sys.modules["dtriton.explore"]``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
import queue
import random
import re
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from .errors import DTritonError, ScheduleError, ShapeError, UnknownFieldError
from .heuristics import contractions
from .language import Algorithm, Binary, Binding, Reduce, expr_axes
from .lowering import next_pow2
from .runtime import Kernel, backend_for
from .schedule import (ACCESS, EVICTIONS, PLACES, SPLIT_MODES, STRATEGIES, Schedule, StageSchedule,
                       reject_unknown_keywords, unknown_fields_message)
from .tuning import TuningDB, TuningKey, TuningRecord, TuningWarning, device_name

__all__ = ["explore", "Space", "ExploreResult", "Limits", "check_resources", "check_outputs",
           "default_tolerance", "STATUSES"]

#: Candidate statuses in :attr:`ExploreResult.table`. Only "ok" candidates can be chosen.
#: ok: correct and timed; wrong: ran but failed the correctness check; failed: raised while
#: compiling or running; timeout: compile took longer than ``compile_timeout``; illegal: rejected
#: by validation or lowering; pruned: over a resource rule; duplicate: generates the same kernels
#: as an earlier candidate; skipped: compiled and checked but the budget ran out before timing.
STATUSES = ("ok", "wrong", "failed", "timeout", "illegal", "pruned", "duplicate", "skipped")

#: single-valued space fields (the rest are per axis or per stage)
_FLAT = ("num_warps", "num_stages", "precision", "split_mode", "persistent", "access", "warp_specialize")

_PENALTY = 1e12  # what a sampler is told for a candidate that cannot be chosen (µs)
_MIN_IMPROVEMENT = 0.005


# ----------------------------------------------------------------------------------------------
# device limits and resource rules
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    """Resource limits used to prune candidates before compiling.

    Attributes:
        smem_bytes: shared memory one program may use (bytes); 227 KB on H100/H200.
        sm_count: streaming multiprocessors (used to decide when output tiles are "few").
        max_block_elems: elements one program may hold in registers (about 64K).
        whole_max: largest padded extent of an axis covered by one block ("whole").
        max_acc_per_thread: fp32 dot-accumulator elements per thread (``BM*BN / (32*num_warps)``);
            above it the kernel spills registers and Triton can take minutes to compile it.
        max_elems_per_thread: block elements per thread for any stage.
        tma: the device has the tensor-memory accelerator (compute capability 9.0 or newer), so
            derived spaces of contractions include ``access="tma"`` and warp specialisation.
    """
    smem_bytes: int = 227 * 1024
    sm_count: int = 132
    max_block_elems: int = 65536
    whole_max: int = 32768
    max_acc_per_thread: int = 256
    max_elems_per_thread: int = 2048
    tma: bool = True

    @staticmethod
    def for_device(device: torch.device) -> "Limits":
        """Limits of the GPU holding ``device`` tensors; H100-like defaults (with whole blocks up
        to 4096, as the heuristic uses) for the interpreter."""
        if backend_for(device) == "interpreter" or not torch.cuda.is_available():
            return Limits(whole_max=4096)
        try:
            props = torch.cuda.get_device_properties(device)
            smem = int(getattr(props, "shared_memory_per_block_optin", 0) or 0)
            if smem <= 0:
                smem = {9: 227, 8: 163 if props.minor == 0 else 99}.get(props.major, 96) * 1024
            return Limits(smem_bytes=smem, sm_count=int(props.multi_processor_count), tma=props.major >= 9)
        except Exception:  # pragma: no cover - odd driver
            return Limits()


def _ongrid_axes(alg: Algorithm, sched: Schedule) -> set[str]:
    """Axes that some kernel may map to program ids: the grid, stage grids, free axes of reductions."""
    s = set(sched.grid or ())
    for ss in sched.stages.values():
        s |= set(ss.grid or ())
    for st in alg.stages.values():
        if not st.is_output:
            s |= set(st.free_axes)
    return s


def _stage_warps(sched: Schedule, stage: str) -> int:
    ss = sched.stages.get(stage)
    return int((ss.num_warps if ss is not None and ss.num_warps else None) or sched.num_warps or 4)


def check_resources(alg: Algorithm, sched: Schedule, b: Binding, limits: Limits) -> str | None:
    """Check a *complete* schedule against resource rules for the shapes in ``b``.

    Rules: a "whole" axis pads to at most ``limits.whole_max``; each contraction's dot tiles fit
    shared memory, ``(BM*BK + BK*BN) * bytes * num_stages <= limits.smem_bytes`` (bytes: the
    widest floating input dtype); each dot operand and accumulator, and each stage's block of
    elements per program (grid tiles times the blocks of in-program axes, dot reduction axes
    excepted), holds at most ``limits.max_block_elems`` elements; a dot accumulator spread over
    the program's threads holds at most ``limits.max_acc_per_thread`` per thread, any block at
    most ``limits.max_elems_per_thread``.

    Returns ``None`` when every rule holds, else a sentence naming the rule that failed."""
    sizes = b.axis_sizes
    grid = tuple(sched.grid or ())

    def strat(a):
        return sched.strategy.get(a, "auto")

    def blk(a, stage=None):
        if strat(a) == "whole":
            return next_pow2(sizes[a])
        own = sched.stage(stage).tile.get(a) if stage else None
        return int(own or sched.tile.get(a) or next_pow2(sizes[a]))

    for a in alg.axis_names:
        if strat(a) == "whole" and a not in grid and next_pow2(sizes[a]) > limits.whole_max:
            return f"axis {a!r} is 'whole' with a block of {next_pow2(sizes[a])} > {limits.whole_max}"
    cons = contractions(alg)
    dot_r = {r for (_, _, r) in cons.values()}
    fl = [d.itemsize for d in b.dtypes.values() if d.is_floating_point]
    nbytes = max(fl) if fl else 4
    for name, (m, n, r) in cons.items():
        bm, bn, bk = blk(m, name), blk(n, name), blk(r, name)
        stages = 1 if strat(r) == "whole" else max(1, int(sched.num_stages))
        smem = (bm * bk + bk * bn) * nbytes * stages
        if smem > limits.smem_bytes:
            return (f"stage {name!r}: dot tiles {bm}x{bk} and {bk}x{bn} of {nbytes}-byte elements x {stages} "
                    f"stages need {smem // 1024} KB of shared memory > {limits.smem_bytes // 1024} KB")
        for what, e in (("accumulator", bm * bn), ("left operand", bm * bk), ("right operand", bk * bn)):
            if e > limits.max_block_elems:
                return f"stage {name!r}: dot {what} of {e} elements > {limits.max_block_elems}"
        warps = _stage_warps(sched, name)
        per_thread = bm * bn // (32 * warps)
        if per_thread > limits.max_acc_per_thread:
            return (f"stage {name!r}: a {bm}x{bn} dot accumulator over {warps} warps is {per_thread} fp32 registers "
                    f"per thread > {limits.max_acc_per_thread} (spills; compiles slowly)")
    for st in alg.stages.values():
        if st.is_output:
            ss = sched.stage(st.name)
            g = list(ss.grid) if ss.grid is not None else [a for a in grid if a in st.free_axes]
        else:
            g = list(st.free_axes)
        elems = 1
        for a in g:
            elems *= int(sched.tile.get(a) or 1)
        for a in expr_axes(st.expr):
            if a not in g and a not in dot_r:
                elems *= blk(a)
        per_thread = elems // (32 * _stage_warps(sched, st.name))
        if per_thread > limits.max_elems_per_thread:
            return (f"stage {st.name!r}: {elems} elements per program over {_stage_warps(sched, st.name)} warps is "
                    f"{per_thread} per thread > {limits.max_elems_per_thread}")
        if elems > limits.max_block_elems:
            return (f"stage {st.name!r}: {elems} elements per program (grid tiles {dict((a, sched.tile.get(a, 1)) for a in g)}"
                    f" times in-program blocks) > {limits.max_block_elems}")
    return None


# ----------------------------------------------------------------------------------------------
# correctness
# ----------------------------------------------------------------------------------------------
def default_tolerance(b: Binding, sched: Schedule | None = None) -> float:
    """Relative norm error allowed for a call bound to ``b`` under ``sched``: 1e-2 when any
    input or output is fp16/bf16, 3e-3 for fp32 with ``precision="tf32"``, 1e-4 for fp32,
    1e-5 for fp64 (1e-9 with ``acc_dtype="float64"``)."""
    dts = [d for d in b.dtypes.values() if d.is_floating_point] + list(b.out_dtypes)
    if any(d in (torch.float16, torch.bfloat16) for d in dts):
        return 1e-2
    if any(d == torch.float32 for d in dts):
        return 3e-3 if sched is not None and sched.precision == "tf32" else 1e-4
    if any(d == torch.float64 for d in dts):
        return 1e-9 if sched is not None and sched.acc_dtype == "float64" else 1e-5
    return 1e-4


def check_outputs(got: Sequence[torch.Tensor], ref: Sequence[torch.Tensor], tol: float) -> tuple[bool, float, str]:
    """Compare kernel outputs with reference outputs.

    NaN and ±inf must appear exactly where the reference has them; over the finite elements the
    relative norm error ``||got - ref|| / ||ref||`` (absolute when ``ref`` is all zero) must be
    at most ``tol``. Returns ``(ok, worst relative error, reason)``; reason is "" when ok."""
    if len(got) != len(ref):
        return False, math.inf, f"{len(got)} outputs, the reference has {len(ref)}"
    worst = 0.0
    for k, (g, r) in enumerate(zip(got, ref)):
        name = f"output {k}"
        if not isinstance(g, torch.Tensor):
            return False, math.inf, f"{name} is a {type(g).__name__}, not a tensor"
        if tuple(g.shape) != tuple(r.shape):
            return False, math.inf, f"{name} has shape {tuple(g.shape)}, the reference {tuple(r.shape)}"
        if g.numel() == 0:
            continue
        g64 = g.detach().to(device=r.device, dtype=torch.float64)
        r64 = r.detach().to(torch.float64)
        gn, rn = torch.isnan(g64), torch.isnan(r64)
        bad = int((gn & ~rn).sum())
        if bad:
            return False, math.inf, f"{name}: {bad} NaN where the reference is finite (elements left unwritten?)"
        bad = int((rn & ~gn).sum())
        if bad:
            return False, math.inf, f"{name}: {bad} values where the reference is NaN"
        ri, gi = torch.isinf(r64), torch.isinf(g64)
        bad = int((ri & (g64 != r64)).sum()) + int((gi & ~ri).sum())
        if bad:
            return False, math.inf, f"{name}: {bad} infinities that differ from the reference"
        fin = ~(rn | ri)
        num = float(torch.linalg.vector_norm((g64 - r64)[fin]))
        den = float(torch.linalg.vector_norm(r64[fin]))
        err = num / den if den > 0 else num
        worst = max(worst, err)
        if not err <= tol:
            return False, err, f"{name}: relative error {err:.3g} > {tol:g}"
    return True, worst, ""


# ----------------------------------------------------------------------------------------------
# spaces
# ----------------------------------------------------------------------------------------------
def _pow2s(lo: int, hi: int) -> list[int]:
    out, t = [], 1
    while t <= hi:
        if t >= lo:
            out.append(t)
        t *= 2
    return out


def _seq(v) -> tuple:
    if v is None:
        return ()
    if isinstance(v, (str, int, float)) or not hasattr(v, "__iter__"):
        return (v,)
    return tuple(dict.fromkeys(v))


def _grid_value(g) -> tuple[str, ...]:
    if isinstance(g, str):
        return tuple(p for p in g.replace(",", " ").split() if p)
    return tuple(str(a) for a in g)


def _online_candidate(alg: Algorithm, a: str) -> bool:
    """True when axis ``a`` is reduced by a max stage (the online strategy can merge its passes)."""
    return any(not s.is_output and s.node.op == "max" and a in s.node.over for s in alg.stages.values())


class Space:
    """A schedule search space: for each schedule field, the values to try.

    Args (each optional; ``None`` keeps the heuristic's value for that field):
        tile: ``{axis: [block sizes]}`` (powers of two). Axes not named keep the heuristic tile.
        grid: list of grids, each a tuple of axis names or a string ``"i,j"``.
        group: grouped-launch sizes for the second-to-last grid axis (1: no grouping).
        split: ``{reduction axis: [split factors]}`` (1: no split).
        strategy: ``{axis: ["whole", "loop", "online"]}``.
        place: ``{reduction stage: ["auto", "fuse", "materialize"]}``.
        stage_tile: ``{"stage.axis": [block sizes]}``: tiles of a stage computed by a kernel of its
            own (``StageSchedule.tile``), e.g. ``{"sum0.k": [64, 128]}`` for the V-reduction of
            the diffusion layer, whose best tiles differ from the output kernel's.
        eviction: ``{input tensor: ["evict_normal", "evict_first", "evict_last"]}``: L2 hints of
            the tensor's loads ("evict_normal" is no hint).
        num_warps, num_stages: lists of launch options.
        precision: e.g. ``["ieee", "tf32x3"]`` (tf32 and tf32x3 are never derived: they change
            results, tf32 by ~1e-3, tf32x3 by a few fp32 ulps).
        split_mode: e.g. ``["atomic", "partials"]``.

    A single value is accepted where a list is expected. Raises :class:`~dtriton.ScheduleError`
    for a value a schedule cannot take (a tile that is not a power of two, an unknown strategy),
    and :class:`~dtriton.UnknownFieldError` (also a ``TypeError``) for a keyword that is not a
    field (``tiles=``). :meth:`validate` checks the names against an algorithm.

    The space's points are the product of every field's values (:meth:`dimensions`,
    :attr:`size`); :meth:`schedule_for` turns a point into a complete :class:`~dtriton.Schedule`
    on top of the heuristic's schedule.
    """

    FIELDS = ("tile", "grid", "group", "split", "strategy", "place", "num_warps", "num_stages", "precision",
              "split_mode", "persistent", "access", "warp_specialize", "stage_tile", "eviction")

    def __init__(self, tile=None, grid=None, group=None, split=None, strategy=None, place=None,
                 num_warps=None, num_stages=None, precision=None, split_mode=None, persistent=None,
                 access=None, warp_specialize=None, stage_tile=None, eviction=None):
        def per_key(v, what, check):
            if v is None:
                return None
            if not isinstance(v, Mapping):
                raise ScheduleError(f"Space({what}=...) must be a dict {{name: [values]}}, got {type(v).__name__}")
            out = {}
            for k, vals in v.items():
                vs = _seq(vals)
                if not vs:
                    raise ScheduleError(f"Space({what}[{k!r}]) has no values")
                for x in vs:
                    check(f"{what}[{k!r}]", x)
                out[str(k)] = vs
            return out

        def flat(v, what, check):
            if v is None:
                return None
            vs = _seq(v)
            if not vs:
                raise ScheduleError(f"Space({what}) has no values")
            for x in vs:
                check(what, x)
            return vs

        def pow2(what, x):
            if not (isinstance(x, int) and not isinstance(x, bool) and x >= 1 and x & (x - 1) == 0):
                raise ScheduleError(f"Space {what} value {x!r} is not a power of two")

        def posint(what, x):
            if not (isinstance(x, int) and not isinstance(x, bool) and x >= 1):
                raise ScheduleError(f"Space {what} value {x!r} must be a positive integer")

        def oneof(choices):
            def f(what, x):
                if x not in choices:
                    raise ScheduleError(f"Space {what} value {x!r} is not one of {choices}")
            return f

        def warps(what, x):
            pow2(what, x)
            if x > 32:
                raise ScheduleError(f"Space {what} value {x} must be at most 32")

        def nstages(what, x):
            if not (isinstance(x, int) and 1 <= x <= 8):
                raise ScheduleError(f"Space {what} value {x!r} must be an integer from 1 to 8")

        self.tile = per_key(tile, "tile", pow2)
        if grid is not None:
            gs = [grid] if isinstance(grid, str) else list(grid)
            if gs and all(isinstance(g, str) for g in gs) and all("," not in g and " " not in g.strip() for g in gs) \
                    and len(gs) > 1 and not isinstance(grid, list):
                # a bare tuple of axis names, e.g. grid=("i", "j"): one grid
                gs = [tuple(gs)]
            vals = tuple(dict.fromkeys(_grid_value(g) for g in gs))
            if not vals or any(not g for g in vals):
                raise ScheduleError("Space(grid=...) needs a list of non-empty grids, e.g. [('i', 'j'), ('j', 'i')]")
            self.grid = vals
        else:
            self.grid = None
        self.group = flat(group, "group", posint)
        self.split = per_key(split, "split", posint)
        self.strategy = per_key(strategy, "strategy", oneof(STRATEGIES))
        self.place = per_key(place, "place", oneof(PLACES))
        self.stage_tile = per_key(stage_tile, "stage_tile", pow2)
        self.eviction = per_key(eviction, "eviction", oneof(EVICTIONS))
        for k in self.stage_tile or {}:
            if k.count(".") != 1 or not all(k.split(".")):
                raise ScheduleError(f"Space(stage_tile) key {k!r} must be 'stage.axis', e.g. 'sum0.k'")
        self.num_warps = flat(num_warps, "num_warps", warps)
        self.num_stages = flat(num_stages, "num_stages", nstages)
        self.precision = flat(precision, "precision", oneof(("ieee", "tf32", "tf32x3")))
        self.split_mode = flat(split_mode, "split_mode", oneof(SPLIT_MODES))
        self.persistent = flat(persistent, "persistent", oneof(tuple(range(0, 33))))
        self.access = flat(access, "access", oneof(ACCESS))
        def boolean(what, x):
            if not isinstance(x, bool):
                raise ScheduleError(f"Space {what} value {x!r} must be True or False")
        self.warp_specialize = flat(warp_specialize, "warp_specialize", boolean)

    # -- views ----------------------------------------------------------------------------------
    def dimensions(self) -> list[tuple[str, tuple]]:
        """The space as ``[(name, values)]``; names are ``"grid"``, ``"group"``, ``"tile.<axis>"``,
        ``"split.<axis>"``, ``"strategy.<axis>"``, ``"place.<stage>"``,
        ``"stage_tile.<stage>.<axis>"``, ``"eviction.<tensor>"``, ``"num_warps"``,
        ``"num_stages"``, ``"precision"``, ``"split_mode"``, ``"persistent"``, ``"access"``,
        ``"warp_specialize"``."""
        dims: list[tuple[str, tuple]] = []
        if self.grid is not None:
            dims.append(("grid", self.grid))
        if self.group is not None:
            dims.append(("group", self.group))
        for f in ("strategy", "tile", "split", "place", "stage_tile", "eviction"):
            m = getattr(self, f)
            for k in sorted(m or {}):
                dims.append((f"{f}.{k}", m[k]))
        for f in _FLAT:
            v = getattr(self, f)
            if v is not None:
                dims.append((f, v))
        return dims

    @property
    def size(self) -> int:
        """Number of points (the product of the number of values of every dimension)."""
        return math.prod(len(v) for _, v in self.dimensions())

    def to_dict(self) -> dict:
        """JSON-ready dict of the fields that are set (grids as lists)."""
        d = {}
        for f in self.FIELDS:
            v = getattr(self, f)
            if v is None:
                continue
            if isinstance(v, dict):
                d[f] = {k: list(x) for k, x in v.items()}
            elif f == "grid":
                d[f] = [list(g) for g in v]
            else:
                d[f] = list(v)
        return d

    def __eq__(self, o):
        return isinstance(o, Space) and self.to_dict() == o.to_dict()

    def __repr__(self):
        return "Space(" + ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items()) + f")  # {self.size} points"

    # -- editing ----------------------------------------------------------------------------------
    def narrow(self, **fields) -> "Space":
        """A copy with the given fields replaced (``None`` drops a field: heuristic value)."""
        d = {f: getattr(self, f) for f in self.FIELDS}
        bad = [k for k in fields if k not in self.FIELDS]
        if bad:
            raise UnknownFieldError(unknown_fields_message("Space", bad, self.FIELDS))
        d.update(fields)
        return Space(**d)

    def widen(self, other: "Space | None" = None, **fields) -> "Space":
        """A copy with values added: from another :class:`Space` and/or keyword fields given as
        for the constructor (``space.widen(tile={"i": [512]}, num_warps=[16])``)."""
        add = Space(**fields) if fields else Space()
        d = {}
        for f in self.FIELDS:
            vals = [getattr(self, f), getattr(other, f) if other is not None else None, getattr(add, f)]
            vals = [v for v in vals if v is not None]
            if not vals:
                d[f] = None
            elif isinstance(vals[0], dict):
                m: dict[str, tuple] = {}
                for v in vals:
                    for k, xs in v.items():
                        m[k] = tuple(dict.fromkeys(m.get(k, ()) + tuple(xs)))
                d[f] = m
            else:
                d[f] = list(dict.fromkeys(itertools.chain.from_iterable(vals)))
        return Space(**d)

    # -- checks against an algorithm -----------------------------------------------------------------
    def validate(self, alg: Algorithm) -> None:
        """Check the names and values of this space against ``alg`` before any candidate runs.

        Raises :class:`~dtriton.ScheduleError` naming the field for: an axis, stage or tensor that
        ``alg`` does not have; a split of an axis that no stage reduces, or that a max/min stage
        reduces (only sums can be split across programs); a grid with an axis that no output has
        (the grid maps output axes to programs) or that repeats an axis; a place for an output
        stage (an output always has a kernel of its own)."""
        axes = list(alg.axis_names)
        red = set(alg.reduction_axes)
        out_axes = {a for o in alg.outputs for a in o.layout}
        outs = ", ".join(f"{o.name}[{', '.join(o.layout)}]" for o in alg.outputs)
        for name, vals in self.dimensions():
            f, _, sub = name.partition(".")
            if f in ("tile", "strategy", "split") and sub not in axes:
                raise ScheduleError(f"space names axis {sub!r}, which {alg.name} does not have; its axes are {axes}")
            if f in ("place", "stage_tile") and sub.split(".")[0] not in alg.stages:
                raise ScheduleError(f"space names stage {sub.split('.')[0]!r}, which {alg.name} does not have; its "
                                    f"stages are {list(alg.stages)}")
            if f == "eviction" and sub not in [p.name for p in alg.tensor_params]:
                raise ScheduleError(f"space names tensor {sub!r} in eviction, which is not an input of {alg.name} "
                                    f"(inputs: {[p.name for p in alg.tensor_params]})")
            if f == "stage_tile" and sub.split(".", 1)[1] not in axes:
                raise ScheduleError(f"space stage_tile {sub!r} names axis {sub.split('.', 1)[1]!r}, which {alg.name} "
                                    f"does not have; its axes are {axes}")
            if f == "split" and any(v > 1 for v in vals):
                if sub not in red:
                    raise ScheduleError(
                        f"Space(split={{{sub!r}: {list(vals)}}}): axis {sub!r} is not a reduction axis of {alg.name} "
                        f"(reduction axes: {sorted(red)}); only a summed axis can be split across programs. Name a "
                        f"reduction axis, or drop {sub!r} from split")
                bad = [st.name for st in alg.stages.values()
                       if not st.is_output and sub in st.node.over and st.node.op != "sum"]
                if bad:
                    raise ScheduleError(
                        f"Space(split={{{sub!r}: {list(vals)}}}): axis {sub!r} is reduced by the "
                        f"{alg.stages[bad[0]].node.op} stage {bad[0]!r}; only sum/mean stages can be split across "
                        f"programs. Drop {sub!r} from split")
            if f == "place" and alg.stages[sub].is_output and any(v != "auto" for v in vals):
                reds = [n for n, st in alg.stages.items() if not st.is_output]
                raise ScheduleError(
                    f"Space(place={{{sub!r}: {list(vals)}}}): {sub!r} is an output stage of {alg.name}, which always "
                    f"runs in a kernel of its own; place applies to reduction stages ({reds})")
            if f == "grid":
                for g in vals:
                    for a in g:
                        if a not in axes:
                            raise ScheduleError(f"Space grid {g} names axis {a!r}, which {alg.name} does not have; its "
                                                f"axes are {axes}")
                        if a not in out_axes:
                            raise ScheduleError(
                                f"Space grid {g} names axis {a!r}, which no output of {alg.name} has (outputs: "
                                f"{outs}); the grid maps output axes to programs (split divides a sum). Take {a!r} "
                                f"off that grid")
                    if len(set(g)) != len(g):
                        raise ScheduleError(f"Space grid {g} repeats an axis")

    # -- points -> schedules ------------------------------------------------------------------------
    def schedule_for(self, point: Mapping[str, Any], base: Schedule, alg: Algorithm,
                     sizes: Mapping[str, int] | None = None) -> Schedule:
        """The complete schedule for ``point`` (``{dimension name: value}``) on top of the
        heuristic's complete schedule ``base``. The group size applies to the second-to-last grid
        axis. A tile of a "whole" axis that no kernel puts on a grid is irrelevant and is dropped
        (:meth:`Schedule.without_unused_tiles`), so equivalent points give equal schedules; an axis
        the point moves off "whole" without a tile gets the heuristic's default, 64 capped at the
        axis' padded size in ``sizes`` (axis name -> extent).

        Raises :class:`~dtriton.ScheduleError` when the values make no schedule."""
        tile = dict(base.tile)
        strategy = dict(base.strategy)
        split = dict(base.split)
        stages = dict(base.stages)
        grid = tuple(base.grid or ())
        kw: dict[str, Any] = {}
        gval = None
        regroup = False
        for name, v in point.items():
            f, _, sub = name.partition(".")
            if f == "tile":
                tile[sub] = int(v)
            elif f == "strategy":
                strategy[sub] = v
            elif f == "split":
                if int(v) > 1:
                    split[sub] = int(v)
                else:
                    split.pop(sub, None)
            elif f == "place":
                stages[sub] = stages.get(sub, StageSchedule()).replace(place=v)
            elif f == "eviction":
                ev = dict(kw.get("eviction", base.eviction))
                if v == "evict_normal":
                    ev.pop(sub, None)   # no hint: the heuristic's schedule, canonically
                else:
                    ev[sub] = v
                kw["eviction"] = ev
            elif f == "stage_tile":
                st, ax = sub.split(".", 1)
                cur = stages.get(st, StageSchedule())
                stages[st] = cur.replace(tile=dict(cur.tile, **{ax: int(v)}))
            elif f == "grid":
                grid = tuple(v)
                regroup = True
            elif f == "group":
                gval = int(v)
                regroup = True
            elif f in _FLAT:
                kw[f] = v
            else:
                raise ScheduleError(f"unknown space dimension {name!r}")
        group = dict(base.group)
        if regroup:
            if gval is None:
                gval = max(base.group.values(), default=1)
            group = {grid[-2]: gval} if gval > 1 and len(grid) >= 2 else {}
        for a, s in strategy.items():
            if s != "whole" and a not in tile and base.strategy.get(a) == "whole":
                tile[a] = min(64, next_pow2(sizes[a])) if sizes and a in sizes else 64
        stages = {k: v for k, v in stages.items() if v != StageSchedule()}
        out = base.replace(tile=tile, grid=grid, group=group, split=split, strategy=strategy, stages=stages, **kw)
        return out.without_unused_tiles(alg)

    # -- derivation -------------------------------------------------------------------------------
    @classmethod
    def derive(cls, alg: Algorithm, args: Sequence[Any], *, target: str | None = None,
               limits: Limits | None = None) -> "Space":
        """The default space for ``alg`` called with ``args`` (see the module docstring).

        Args:
            target: "gpu" or "interpreter"; by default where the arguments would run. Deriving
                for "gpu" from CPU tensors gives the space (and heuristic) a GPU would use.
            limits: resource limits; by default those of the device.

        Raises :class:`~dtriton.ShapeError` for arguments that do not fit the signature."""
        b = alg.bind(tuple(args))
        if target is None:
            target = "interpreter" if backend_for(b.device) == "interpreter" else "gpu"
        if target not in ("gpu", "interpreter"):
            raise ValueError(f"target must be 'gpu' or 'interpreter', got {target!r}")
        if limits is None:
            limits = Limits.for_device(b.device) if (target == "gpu") == (backend_for(b.device) == "gpu") else \
                (Limits() if target == "gpu" else Limits(whole_max=4096))
        bb = dataclasses.replace(b, device=torch.device("cuda") if target == "gpu" else torch.device("cpu"))
        base = Kernel(alg, None).complete(bb)
        return cls(**_derive_fields(alg, bb, base, target == "gpu", limits))


Space.__init__ = reject_unknown_keywords(Space.__init__, "Space", Space.FIELDS)


def _derive_fields(alg: Algorithm, b: Binding, base: Schedule, gpu: bool, limits: Limits) -> dict:
    sizes = b.axis_sizes
    cons = contractions(alg)
    dot_mn = {a for (m, n, _) in cons.values() for a in (m, n)}
    dot_r = {r for (_, _, r) in cons.values()}
    grid = tuple(base.grid or ())
    reduced = set(alg.reduction_axes)
    ongrid = _ongrid_axes(alg, base)

    def with_base(vals, bv):
        if bv is not None and bv not in vals:
            vals = sorted(set(vals) | {bv})
        return vals

    tile: dict[str, list[int]] = {}
    for a in alg.axis_names:
        p = next_pow2(sizes[a])
        if a in dot_mn:
            vals = [t for t in (16, 32, 64, 128, 256) if t <= max(16, p)]
        elif a in dot_r:
            vals = [t for t in (16, 32, 64, 128) if t <= max(16, p)]
        elif a in ongrid:
            vals = _pow2s(1, min(p, 1024))
        else:
            vals = _pow2s(min(p, 16), min(p, 4096))
        vals = with_base(vals, base.tile.get(a))
        if len(vals) > 1:
            tile[a] = vals

    strategy: dict[str, list[str]] = {}
    for a in alg.axis_names:
        if (a in grid or a in dot_mn) and a not in reduced:
            continue
        vals = []
        if next_pow2(sizes[a]) <= limits.whole_max:
            vals.append("whole")
        vals.append("loop")
        if _online_candidate(alg, a):
            vals.append("online")
        if len(vals) > 1:
            strategy[a] = vals

    group = None
    if len(grid) >= 2:
        group = with_base([1, 4, 8, 16] if gpu else [1, 8], max(base.group.values(), default=1))
    grids = None
    if 2 <= len(grid) <= 3:
        grids = [grid] + [p for p in itertools.permutations(grid) if p != grid]

    split: dict[str, list[int]] = {}
    for r in sorted(reduced):
        reds = [s.node for s in alg.stages.values() if not s.is_output and r in s.node.over]
        if not reds or any(n.op != "sum" for n in reds):
            continue
        ntiles = None
        for n in reds:
            t = 1
            for f in n.axes:
                if base.strategy.get(f) == "whole" and f not in grid:
                    continue
                t *= -(-sizes[f] // max(1, int(base.tile.get(f) or 1)))
            ntiles = t if ntiles is None else min(ntiles, t)
        if ntiles is None or ntiles >= limits.sm_count:
            continue
        tr = int(base.tile.get(r) or 16)
        bs = base.split.get(r, 1)   # the heuristic's split and its neighbours (64 for the diffusion's V)
        cand = sorted({1, 2, 4, 8, 16} | ({bs // 2, bs, bs * 2} if bs > 1 else set()))
        vals = [s for s in cand if s == 1 or s * tr * 2 <= sizes[r]]
        if len(vals) > 1:
            split[r] = vals

    place = {s.name: list(PLACES) for s in alg.stages.values() if not s.is_output}
    # a split reduction stage that is not itself an output runs in a kernel of its own (the
    # diffusion layer's V-reduction): its tiles are dimensions of their own
    stage_tile: dict[str, list[int]] = {}
    outs = {id(o.expr) for o in alg.outputs}
    for st in alg.stages.values():
        n = st.node
        if st.is_output or id(n) in outs or not (set(base.split) & set(n.over)):
            continue
        for a in dict.fromkeys(tuple(n.axes) + tuple(n.over)):
            vals = tile.get(a)
            if vals and len(vals) > 1:
                stage_tile[f"{st.name}.{a}"] = vals
    # streaming (memory-bound, no contraction) kernels on the GPU: L2 hints for the largest inputs
    # (the H200 probe: evict_first on X sped layer norm 4096x4096 fp16 up from 19.8 to 18.4 us and
    # slowed 4096x8192 from 35.7 to 37.1 us, so it is searched, not set)
    eviction: dict[str, list[str]] = {}
    if gpu and not cons:
        elems = {p.name: math.prod(b.sizes[s] for s in p.dims) for p in alg.tensor_params}
        top = max(elems.values(), default=0)
        for name, n in elems.items():
            if top and n * 2 >= top and n >= 1 << 16:
                eviction[name] = ["evict_normal", "evict_first"]
    num_warps = num_stages = None
    if gpu:
        widest = max([next_pow2(sizes[a]) for a in alg.axis_names if a not in grid] or [1])
        num_warps = with_base([2, 4, 8] + ([16] if widest >= 2048 else []), base.num_warps)
        num_stages = with_base([2, 3, 4, 5] if cons else [1, 2, 3, 4], base.num_stages)
    # persistent tile loops (1 or 2 programs per SM) for contractions, where tiles are many
    persistent = with_base([0, 1, 2], base.persistent) if gpu and cons else None
    # Hopper (sm90+) contractions: TMA tile loads. Warp specialisation stays out of derived spaces
    # (a user Space may add it): on the H200 it gained nothing on the matmul probe, and a
    # candidate of the diffusion layer with it faulted ("misaligned address"), which ends the
    # CUDA context and so the whole exploration
    access = wspec = None
    floats = [d for d in b.dtypes.values() if d.is_floating_point]
    tensor_cores = bool(floats) and (all(d.itemsize == 2 for d in floats)
                                     or (all(d.itemsize <= 4 for d in floats) and base.precision in ("tf32", "tf32x3")))
    if gpu and cons and limits.tma and tensor_cores:
        # operands that feed tensor cores: 16-bit, or fp32 at tf32 / tf32x3 precision (the
        # "ieee" fp32 dots run on FMA units, where the H200 probe saw no gain from TMA). Session 3's
        # "misaligned address" fault exploring the fp32 diffusion layer came with in-kernel
        # descriptors; with host-side descriptors its TMA schedules ran clean (session 4 probe).
        # explore() and Space.derive derive around the heuristic's schedule, whose precision is
        # "ieee": their fp32 spaces get TMA only from a user's widen(access=...)
        access = with_base(["pointer", "tma"], base.access)
        if base.warp_specialize:
            wspec = [False, True]
    return dict(tile=tile or None, grid=grids, group=group, split=split or None, strategy=strategy or None,
                place=place or None, num_warps=num_warps, num_stages=num_stages, persistent=persistent,
                access=access, warp_specialize=wspec, stage_tile=stage_tile or None, eviction=eviction or None)


# ----------------------------------------------------------------------------------------------
# samplers
# ----------------------------------------------------------------------------------------------
class _Exhaustive:
    name = "exhaustive"

    def __init__(self, dims, seed):
        self.names = [n for n, _ in dims]
        self.it = itertools.product(*[v for _, v in dims])

    def ask(self):
        try:
            vals = next(self.it)
        except StopIteration:
            return None
        return None, dict(zip(self.names, vals))

    def tell(self, handle, value):
        pass


class _Random:
    name = "random"

    def __init__(self, dims, seed):
        self.dims = dims
        self.size = math.prod(len(v) for _, v in dims)
        self.rng = random.Random(seed)
        self.seen: set[int] = set()

    def prepend(self, points):
        self.queue = list(points) + getattr(self, "queue", [])

    def _index(self, point) -> int:
        idx = 0
        for name, vals in self.dims:
            idx = idx * len(vals) + vals.index(point[name])
        return idx

    def ask(self):
        q = getattr(self, "queue", [])
        while q:
            point = q.pop(0)
            idx = self._index(point)
            if idx not in self.seen:
                self.seen.add(idx)
                return None, point
        if len(self.seen) >= self.size:
            return None
        if self.size - len(self.seen) < 64 and self.size <= 4096:
            rest = [i for i in range(self.size) if i not in self.seen]
            idx = self.rng.choice(rest)
        else:
            while True:
                idx = self.rng.randrange(self.size)
                if idx not in self.seen:
                    break
        self.seen.add(idx)
        point = {}
        for name, vals in reversed(self.dims):
            idx, r = divmod(idx, len(vals))
            point[name] = vals[r]
        return None, {n: point[n] for n, _ in self.dims}

    def tell(self, handle, value):
        pass


def _enc(v):
    return ",".join(v) if isinstance(v, tuple) else v


class _TPE:
    name = "tpe"

    def __init__(self, dims, seed):
        import optuna  # noqa: F401 - ImportError is handled by the caller
        from optuna.samplers import TPESampler
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.dims = dims
        self.dec = {n: {_enc(v): v for v in vals} for n, vals in dims}
        size = math.prod(len(v) for _, v in dims)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                 n_startup_trials=min(10, max(3, int(math.sqrt(size)))))
        self.study = optuna.create_study(direction="minimize", sampler=sampler)

    def prepend(self, points):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for p in points:
                self.study.enqueue_trial({n: _enc(p[n]) for n, _ in self.dims}, skip_if_exists=True)

    def ask(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trial = self.study.ask()
            point = {n: self.dec[n][trial.suggest_categorical(n, list(self.dec[n]))] for n, _ in self.dims}
        return trial, point

    def tell(self, handle, value):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if value is None:
                self.study.tell(handle, state=self.optuna.trial.TrialState.FAIL)
            else:
                self.study.tell(handle, float(value))

    def add_known(self, point, value):
        """Tell the model about a point measured outside it (the heuristic baseline)."""
        try:
            from optuna.distributions import CategoricalDistribution
            from optuna.trial import create_trial
            params = {n: _enc(point[n]) for n, _ in self.dims}
            if any(params[n] not in self.dec[n] for n in params):
                return
            dists = {n: CategoricalDistribution(list(self.dec[n])) for n, _ in self.dims}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.study.add_trial(create_trial(params=params, distributions=dists, value=float(value)))
        except Exception:  # pragma: no cover - a hint only
            pass


def _base_point(dims, base: Schedule) -> dict:
    """The heuristic schedule as a point of the space (None where it has no value there)."""
    point = {}
    for name, vals in dims:
        f, _, sub = name.partition(".")
        if not sub:
            v = getattr(base, f) if f in _FLAT else \
                {"grid": tuple(base.grid or ()), "group": max(base.group.values(), default=1)}.get(f)
        else:
            st = base.strategy.get(sub, "auto")
            if f == "stage_tile":
                sn, ax = sub.split(".", 1)
                v = base.stage(sn).tile.get(ax, base.tile.get(ax))
            elif f == "eviction":
                v = base.eviction.get(sub, "evict_normal")
            else:
                v = {"tile": base.tile.get(sub), "strategy": "loop" if st == "auto" else st,
                     "split": base.split.get(sub, 1), "place": base.stage(sub).place}.get(f)
        point[name] = v if v in vals else None
    return point


_NEIGHBOUR_ORDER = ("access", "tile", "stage_tile", "num_stages", "num_warps", "persistent", "eviction", "group",
                    "strategy", "split", "place", "grid")

#: Tile configurations of a 16-bit tensor-core contraction on the GPU tried right after the
#: heuristic: (m tile, n tile, k tile, num_warps, num_stages). The fastest hand-listed schedules of
#: the session-4 H200 probe (``bench/results/probe_session4_*.json``): 128x256x64/8 warps/3 stages
#: at 2048^3 and larger, 128x128x64/8/3 at 2048^3 bf16, 64x128x64/4/4 at 1024^3, each with TMA
#: loads, the layouts of Triton's persistent-matmul tutorial.
_DOT_SEEDS = ((128, 256, 64, 8, 3), (128, 128, 64, 8, 3), (64, 128, 64, 4, 4), (128, 128, 64, 8, 4))


def _dot_seeds(alg: Algorithm, dims, base_point: Mapping, b: Binding) -> list[dict]:
    """Points of the space at the :data:`_DOT_SEEDS` configurations of the main output's
    contraction, with TMA where the space offers it (each value only where the space has it; the
    other dimensions keep the heuristic's values). Empty for algorithms without a contraction,
    spaces without those tile dimensions, and calls (binding ``b``) that are not 16-bit GPU ones:
    the seeds are tensor-core tilings of the 16-bit probe (fp32 "ieee" dots run on FMA units, and
    on the interpreter they would take the few trials it gets from the heuristic's neighbours)."""
    floats = [d for d in b.dtypes.values() if d.is_floating_point]
    if b.device.type != "cuda" or not floats or any(d.itemsize != 2 for d in floats):
        return []
    cons = contractions(alg)
    main = getattr(alg.outputs[0].expr, "name", None)
    mnr = cons.get(main) or next(iter(cons.values()), None)
    if mnr is None:
        return []
    lay = list(alg.outputs[0].layout)
    m, n = sorted(mnr[:2], key=lambda a: lay.index(a) if a in lay else len(lay))   # rows, then columns of the output
    mnr = (m, n, mnr[2])
    vals = dict(dims)
    full = {n: (base_point.get(n) if base_point.get(n) is not None else v[0]) for n, v in dims}
    out = []
    for cfg in _DOT_SEEDS:
        p = dict(full)
        for name, v in zip(("tile." + mnr[0], "tile." + mnr[1], "tile." + mnr[2], "num_warps", "num_stages"), cfg):
            if name in vals and v in vals[name]:
                p[name] = v
        if "tma" in vals.get("access", ()):
            p["access"] = "tma"
        if p != full and p not in out:
            out.append(p)
    return out


def _neighbours(dims, base_point: Mapping, limit: int = 20) -> list[dict]:
    """Points one step away from the heuristic's point along one dimension (the next smaller or
    larger value), access style and tiles first: a cheap local search before the sampler takes over."""
    full = {n: (base_point.get(n) if base_point.get(n) is not None else vals[0]) for n, vals in dims}
    out = []
    for f in _NEIGHBOUR_ORDER:
        for name, vals in dims:
            if name.partition(".")[0] != f or base_point.get(name) is None:
                continue
            i = vals.index(base_point[name])
            for j in (i - 1, i + 1):
                if 0 <= j < len(vals):
                    out.append(dict(full, **{name: vals[j]}))
    return out[:limit]


def _make_sampler(strategy: str, dims, seed) -> Any:
    if strategy == "exhaustive":
        return _Exhaustive(dims, seed)
    if strategy == "random":
        return _Random(dims, seed)
    if strategy == "tpe":
        try:
            return _TPE(dims, seed)
        except ImportError:
            warnings.warn("strategy 'tpe' needs optuna (pip install 'dtriton[explore]'); exploring at random "
                          "instead", TuningWarning, stacklevel=3)
            return _Random(dims, seed)
    raise ValueError(f"strategy must be 'auto', 'exhaustive', 'random' or 'tpe', got {strategy!r}")


# ----------------------------------------------------------------------------------------------
# measurement
# ----------------------------------------------------------------------------------------------
def _clone(a, device=None):
    if isinstance(a, torch.Tensor):
        t = a.detach()
        if device is not None and t.device != device:
            return t.to(device, copy=True)
        return t.clone()
    return a


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.is_floating_point:
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return f"{type(e).__name__}: {s.splitlines()[0][:300] if s else ''}"


def _quantile(xs: Sequence[float], q: float) -> float:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mul_chain(n) -> list:
    if isinstance(n, Binary) and n.op == "mul":
        return _mul_chain(n.a) + _mul_chain(n.b)
    return [n]


def _reference_peak(alg: Algorithm, sizes: Mapping[str, int]) -> int:
    """Elements of the largest tensor :meth:`Algorithm.reference` builds: every node it evaluates
    holds its free axes; a sum of a product is one ``einsum`` (its factors, then pairwise
    contractions left to right keeping the axes still needed), never the broadcast product."""
    def size(axes) -> int:
        return math.prod(sizes[a] for a in axes)
    peak, seen = 1, set()
    stack = [o.expr for o in alg.outputs]
    while stack:
        n = stack.pop()
        if n._id in seen:
            continue
        seen.add(n._id)
        peak = max(peak, size(set(n.axes)))
        if isinstance(n, Reduce) and n.op == "sum" and isinstance(n.x, Binary) and n.x.op == "mul":
            fs = _mul_chain(n.x)
            cur = set(fs[0].axes)
            for k, f in enumerate(fs[1:], 1):
                later = set(n.axes).union(*(set(g.axes) for g in fs[k + 1:]))
                cur = (cur | set(f.axes)) & later
                peak = max(peak, size(cur))
            stack.extend(fs)
        else:
            stack.extend(n.children())
    return peak


class _Bench:
    """Pristine and working copies of the inputs, the reference, poisoned outputs, timing."""

    def __init__(self, alg: Algorithm, args: tuple, out, interpret: bool, warmup_ms: float, rep_ms: float,
                 timing: str = "cold"):
        self.alg = alg
        self.timing = timing
        b0 = alg.bind(args)
        dev = b0.device
        if interpret and dev.type != "cpu":
            dev = torch.device("cpu")  # the interpreter reads host memory; work on host copies
        self.device = dev
        self.interpret = interpret
        self.warmup_ms, self.rep_ms = warmup_ms, rep_ms
        self.pristine = tuple(_clone(a, dev) for a in args)
        self.work = tuple(_clone(a, dev) for a in args)
        self.b = alg.bind(self.work)
        # in-place calls: out= tensors that are (views of) input arguments
        self.alias: dict[int, int] = {}
        if out is not None:
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if len(outs) != len(alg.outputs):
                raise ShapeError(f"out= gives {len(outs)} tensors; {alg.name} has {len(alg.outputs)} outputs")
            for k, o in enumerate(outs):
                for p, a in enumerate(args):
                    if isinstance(a, torch.Tensor) and isinstance(o, torch.Tensor) and (
                            o is a or (o.data_ptr() == a.data_ptr() and o.shape == a.shape and o.stride() == a.stride())):
                        self.alias[k] = p
        self.shapes = [tuple(self.b.axis_sizes[a] for a in o.layout) for o in alg.outputs]
        self.refs: tuple[torch.Tensor, ...] | None = None
        self.warmed = False

    def reference_feasible(self) -> bool:
        """Whether the eager reference's largest intermediate fits comfortably in memory."""
        fp64 = any(d == torch.float64 for d in self.b.dtypes.values())
        need = _reference_peak(self.alg, self.b.axis_sizes) * (8 if fp64 else 4) * 3
        if self.device.type == "cuda":
            try:
                free, _ = torch.cuda.mem_get_info(self.device)
            except Exception:  # pragma: no cover
                return True
            return need <= free * 0.6
        return need <= 8 << 30

    def compute_reference(self):
        clones = tuple(_clone(a) for a in self.pristine)
        r = self.alg.reference(*clones)
        self.refs = r if isinstance(r, tuple) else (r,)

    def outs_for(self, work, poison=True) -> list[torch.Tensor]:
        outs = []
        for k, (shape, dt) in enumerate(zip(self.shapes, self.b.out_dtypes)):
            if k in self.alias:
                outs.append(work[self.alias[k]])
            elif poison:
                outs.append(torch.full(shape, float("nan"), dtype=dt, device=self.device))
            else:
                outs.append(torch.empty(shape, dtype=dt, device=self.device))
        return outs

    def restore(self, work=None):
        for w, p in zip(self.work if work is None else work, self.pristine):
            if isinstance(w, torch.Tensor):
                w.copy_(p)

    def private(self):
        return tuple(_clone(a) for a in self.pristine)

    def changed_input(self, work) -> str | None:
        aliased = set(self.alias.values())
        for k, (w, p, prm) in enumerate(zip(work, self.pristine, self.alg.params)):
            if k in aliased or not isinstance(w, torch.Tensor):
                continue
            if not _same(w, p):
                return prm.name
        return None

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run_check(self, kern, tol: float, private: bool) -> dict:
        """First run (compiles) on poisoned outputs; check inputs and outputs."""
        work = self.private() if private else self.work
        if not private:
            self.restore()
        outs = self.outs_for(work, poison=True)
        t = time.perf_counter()
        try:
            if self.device.type == "cuda":
                with torch.cuda.device(self.device):
                    res = kern(*work, out=outs if len(outs) > 1 else outs[0])
                    self.sync()
            else:
                res = kern(*work, out=outs if len(outs) > 1 else outs[0])
        except Exception as e:  # noqa: BLE001 - any failure of a candidate is recorded
            return {"status": "failed", "reason": _first_line(e), "compile_s": time.perf_counter() - t}
        compile_s = time.perf_counter() - t
        res = res if isinstance(res, tuple) else (res,)
        changed = self.changed_input(work)
        if changed is not None:
            return {"status": "wrong", "reason": f"modified input {changed!r}", "compile_s": compile_s}
        ok, err, reason = check_outputs(res, self.refs, tol)
        return {"status": "ok" if ok else "wrong", "reason": reason, "rel_err": err, "compile_s": compile_s}

    def measure(self, kern, rep_ms: float | None = None) -> tuple[float, float, float]:
        """(median, p20, p80) in µs of one call on the working copies.

        Calls are timed as a user makes them, without ``out=`` (the runtime's fast launch path
        for repeated signatures is taken only then; output allocation is part of a real call)."""
        self.restore()
        work = self.work
        if self.interpret:  # one wall-clock sample: meaningless anyway, and the interpreter is slow
            t = time.perf_counter()
            kern(*work)
            us = (time.perf_counter() - t) * 1e6
            return us, us, us
        import triton.testing
        with torch.cuda.device(self.device):
            if not self.warmed:  # bring the clocks up before the first measurement (the baseline)
                t = time.perf_counter()
                while time.perf_counter() - t < 0.3:
                    for _ in range(8):
                        kern(*work)
                    self.sync()
                self.warmed = True
            if self.timing == "warm":
                med, p20, p80 = warm_gpu_time(lambda: kern(*work), self.warmup_ms, rep_ms or self.rep_ms)
            else:
                med, p20, p80 = triton.testing.do_bench(lambda: kern(*work), warmup=self.warmup_ms,
                                                        rep=rep_ms or self.rep_ms, quantiles=[0.5, 0.2, 0.8])
        self.restore()
        return med * 1e3, p20 * 1e3, p80 * 1e3


_SLEEP_CYCLES_PER_MS: list[float] = []


def warm_gpu_time(fn: Callable[[], Any], warmup_ms: float = 10.0, rep_ms: float = 50.0) -> tuple[float, float, float]:
    """(median, p20, p80) GPU time of ``fn`` in ms with a warm L2 cache and no host launch gaps.

    Before each timed call the GPU spins (``torch.cuda._sleep``) for longer than the host takes
    to issue the call, so the CUDA events around the call see only GPU work: the kernel time a
    CUDA-graph replay of repeated calls shows (the benchmark suite's "kernel" column), without
    the capture. ``triton.testing.do_bench`` instead flushes L2 before every call (a cold cache)."""
    torch.cuda.synchronize()
    if not _SLEEP_CYCLES_PER_MS:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(2_000_000)
        b.record()
        b.synchronize()
        _SLEEP_CYCLES_PER_MS.append(2_000_000 / max(a.elapsed_time(b), 1e-3))
    t = time.perf_counter()
    for _ in range(5):
        fn()
    host_ms = (time.perf_counter() - t) * 1e3 / 5
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int((2 * host_ms * 5 + 0.02) * _SLEEP_CYCLES_PER_MS[0]))   # GPU time, not launch gaps
    a.record()
    for _ in range(5):
        fn()
    b.record()
    b.synchronize()
    est = max(a.elapsed_time(b) / 5, 1e-4)
    end = time.perf_counter() + warmup_ms / 1e3
    while time.perf_counter() < end:
        fn()
    # each sample times ``per`` back-to-back calls (up to 10 for kernels under 50 us), so the fixed
    # cost of an event pair and a kernel start after the sleep is shared. Session-4 H200
    # diagnostic (bench/results/diag_explore_timing_*.log), 1024^3 matmuls: one call per sample
    # read 8.5-8.9 us against 5.8-6.3 us in a CUDA graph, and noise of that size ranked a pointer
    # schedule over the faster TMA one; grouped, 6.7-7.1 us
    per = max(1, min(10, int(0.05 / est)))
    sleep_ms = 2 * host_ms * per + 0.02
    n = max(10, min(1000, int(rep_ms / (est * per + sleep_ms))))   # about rep_ms of GPU time in all
    cycles = int(sleep_ms * _SLEEP_CYCLES_PER_MS[0])
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        torch.cuda._sleep(cycles)
        starts[i].record()
        for _ in range(per):
            fn()
        ends[i].record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) / per for s, e in zip(starts, ends))
    return ts[len(ts) // 2], ts[len(ts) // 5], ts[(4 * len(ts)) // 5]


_WORKERS: list[threading.Thread] = []   # compile/check threads started by _run_parallel


def _drain_workers(timeout: float) -> int:
    """Wait up to ``timeout`` seconds for compile/check threads left running past the budget, so
    none of them launches GPU work after :func:`explore` returns (a kernel launched from such a
    thread during a user's CUDA-graph capture invalidates the capture). Returns how many are
    still running."""
    end = time.perf_counter() + timeout
    for th in list(_WORKERS):
        th.join(max(0.0, end - time.perf_counter()))
    _WORKERS[:] = [t for t in _WORKERS if t.is_alive()]
    return len(_WORKERS)


def _run_parallel(tasks: Sequence[Callable[[], dict]], workers: int, timeout: float,
                  deadline: float | None = None) -> list[dict]:
    """Run tasks on daemon threads, at most ``workers`` at a time; a task running longer than
    ``timeout`` seconds is reported as a timeout (its thread is abandoned, a fresh one takes over).
    Past ``deadline`` (a ``time.perf_counter`` value) every unfinished task is reported as
    skipped and nothing new starts."""
    n = len(tasks)
    results: list[dict | None] = [None] * n
    starts: dict[int, float] = {}
    done = [False] * n
    q: queue.Queue[int] = queue.Queue()
    for i in range(n):
        q.put(i)
    lock = threading.Lock()

    def worker():
        while True:
            try:
                i = q.get_nowait()
            except queue.Empty:
                return
            with lock:
                starts[i] = time.perf_counter()
            try:
                r = tasks[i]()
            except BaseException as e:  # noqa: BLE001
                r = {"status": "failed", "reason": _first_line(e)}
            with lock:
                if results[i] is None:
                    results[i] = r
                done[i] = True

    def spawn():
        th = threading.Thread(target=worker, daemon=True, name="dtriton-compile")
        th.start()
        _WORKERS.append(th)

    for _ in range(max(1, min(workers, n))):
        spawn()
    while True:
        with lock:
            if all(r is not None for r in results):
                break
            now = time.perf_counter()
            if deadline is not None and now > deadline:
                while True:  # start nothing new
                    try:
                        q.get_nowait()
                    except queue.Empty:
                        break
                for i in range(n):
                    if results[i] is None:
                        results[i] = {"status": "skipped", "reason": "the budget ran out while compiling",
                                      "compile_s": now - starts[i] if i in starts else None}
                break
            late = [i for i, s in starts.items() if results[i] is None and not done[i] and now - s > timeout]
            for i in late:
                results[i] = {"status": "timeout", "reason": f"compile took longer than {timeout:g} s",
                              "compile_s": now - starts[i]}
        for _ in late:
            spawn()  # replace the stuck worker
        time.sleep(0.005)
    return results  # type: ignore[return-value]


def _src_hash(src: str, sched: Schedule) -> str:
    """Identity of what a candidate runs: its source (minus the schedule comment) and the launch
    options, which are not part of the source (num_warps, num_stages, per stage too)."""
    lines = []
    for ln in src.splitlines():   # comments do not change what runs (e.g. "warp_specialize off: ...")
        code = re.sub(r"\s*#.*$", "", ln)
        if code.strip() and not ln.startswith("Schedule:"):
            lines.append(code)
    launch = [sched.num_warps, sched.num_stages] + sorted(
        (k, v.num_warps, v.num_stages) for k, v in sched.stages.items())
    return hashlib.sha256(("\n".join(lines) + repr(launch)).encode()).hexdigest()


def _params_json(point: Mapping) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in point.items()}


# ----------------------------------------------------------------------------------------------
# the result
# ----------------------------------------------------------------------------------------------
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
        key: the :class:`~dtriton.tuning.TuningKey` results were stored under.
    """

    def __init__(self, *, algorithm, table, device, timings_meaningful, strategy, stop_reason, elapsed_s,
                 space=None, oracle="reference", key=None, budget_s=None):
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
    def summary(self, top: int = 10) -> str:
        """A text report: header, warnings, the best candidate and the ``top`` fastest, then the
        candidates that were wrong or failed (with reasons)."""
        name = self.algorithm.name if self.algorithm is not None else "?"
        lines = [f"dtriton explore: {name} on {self.device}, strategy {self.strategy}, "
                 f"{self.elapsed_s:.1f} s" + (f" of {self.budget_s:g} s" if self.budget_s else "") +
                 f", stopped: {self.stop_reason}"]
        lines.append("candidates: " + str(len(self.table)) + " (" +
                     ", ".join(f"{k} {v}" for k, v in self.counts().items()) + ")")
        if not self.timings_meaningful:
            lines.append("WARNING: these timings come from the Triton interpreter (Python on the CPU); they say "
                         "nothing about GPU speed. Only the correctness checks mean something here.")
        if self.oracle != "reference":
            lines.append("NOTE: the eager reference would not fit in memory; candidates were checked against "
                         "the heuristic schedule's output.")
        b = self.best_row
        if b is None:
            lines.append("best: none (no candidate passed the correctness check)")
        else:
            lines.append(f"best: #{b['id']} {b['median_us']:.2f} µs (p20 {b['p20_us']:.2f}, p80 {b['p80_us']:.2f})"
                         + (f", {self.speedup:.2f}x the heuristic" if self.speedup else ""))
            lines.append(f"  schedule: {b['schedule_json']}")
        ok = sorted((r for r in self.table if r["status"] == "ok"), key=lambda r: (r["median_us"], r["id"]))
        if ok:
            lines.append("")
            lines.append(f"{'#':>4}  {'status':<9}{'median µs':>11}{'p20':>10}{'p80':>10}  schedule")
            shown = ok[:top]
            h = self.heuristic_row
            if h is not None and h["status"] == "ok" and h not in shown:
                shown.append(h)
            for r in shown:
                tag = " (heuristic)" if r.get("origin") == "heuristic" else ""
                lines.append(f"{r['id']:>4}  {r['status']:<9}{r['median_us']:>11.2f}{r['p20_us']:>10.2f}"
                             f"{r['p80_us']:>10.2f}  {r['schedule_json']}{tag}")
        bad = [r for r in self.table if r["status"] in ("wrong", "failed", "timeout")]
        if bad:
            lines.append("")
            lines.append("rejected after running:")
            for r in bad[:top]:
                lines.append(f"{r['id']:>4}  {r['status']:<9} {r['reason']}  {r['schedule_json']}")
            if len(bad) > top:
                lines.append(f"      ... and {len(bad) - top} more")
        return "\n".join(lines)

    def __repr__(self):
        return (f"<ExploreResult {self.algorithm.name if self.algorithm else '?'}: {len(self.table)} candidates, "
                f"best {self.best_row['median_us']:.2f} µs>" if self.best_row else
                f"<ExploreResult: {len(self.table)} candidates, no best>")

    def plot(self, path: str | os.PathLike) -> Path:
        """Save a figure (PNG, or whatever the suffix says) of time per candidate and best-so-far
        against elapsed seconds; rejected candidates are marked with red crosses along the top.
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
                       label="wrong / failed", zorder=3)
        if ok and max(r["median_us"] for r in ok) / max(min(r["median_us"] for r in ok), 1e-9) > 8:
            ax.set_yscale("log")
        ax.set_xlabel("elapsed (s)")
        ax.set_ylabel("time per call (µs)")
        name = self.algorithm.name if self.algorithm is not None else ""
        title = f"dtriton explore {name} on {self.device}"
        if not self.timings_meaningful:
            title += "\n(interpreter: timings are meaningless)"
        ax.set_title(title, fontsize=10)
        if ok or bad:
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
                           "budget_s": self.budget_s, "oracle": self.oracle,
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
                             budget_s=d.get("budget_s"))


# ----------------------------------------------------------------------------------------------
# explore
# ----------------------------------------------------------------------------------------------
def explore(alg: Algorithm, args: Sequence[Any], *, budget: float = 60.0, space: Space | Mapping | None = None,
            strategy: str = "auto", max_trials: int | None = None, patience: int | None = None, seed: int = 0,
            deterministic: bool = False, top_k: int = 3, rtol: float | None = None, out=None,
            db: TuningDB | str | os.PathLike | None = None, store: bool | str = True,
            compile_workers: int | None = None, compile_timeout: float = 120.0, warmup_ms: float = 10.0,
            rep_ms: float = 50.0, progress: bool = True, warm_start: bool = True, timing: str = "cold",
            _candidate_factory: Callable[[Algorithm, Schedule | None], Any] | None = None) -> ExploreResult:
    """Search schedules of ``alg`` for the call ``alg(*args)`` and return the fastest correct one.

    Args:
        alg: an ``@dt.algorithm``.
        args: the call's arguments (a tuple; a single tensor is accepted). They are never passed
            to a candidate and are left bitwise unchanged.
        budget: seconds for the search (compiling, checking, timing). The final re-measurement of
            the ``top_k`` best adds about ``top_k * 2 * max(100, 2 * rep_ms)`` ms on the GPU.
        space: a :class:`Space` (or a dict of its fields); ``None`` derives one
            (:meth:`Space.derive`). Fields a Space leaves ``None`` keep the heuristic's value.
        strategy: "auto", "exhaustive", "random" or "tpe" (optuna; random without it).
        max_trials: at most this many candidates compiled and run, besides the heuristic
            baseline (default: unlimited on the GPU, 8 on the interpreter).
        patience: stop after this many measured candidates without a 0.5% improvement
            (default 30 for random/tpe, off for exhaustive).
        seed: sampler seed.
        deterministic: reuse timings stored in the database for candidates already measured on
            exactly these shapes (no compile, no re-measurement), so the same stored timings give
            the same winner; combine with ``max_trials`` for a fixed candidate list.
        top_k: how many of the fastest candidates are measured again before picking (GPU).
        rtol: relative norm error allowed; default by dtype (:func:`default_tolerance`).
        out: the ``out=`` the kernel will be called with; an output that is one of ``args``
            (an in-place call) is written into a fresh copy of that input on every trial.
        db: tuning database (a :class:`~dtriton.tuning.TuningDB` or a path); default location
            otherwise. store: write the best schedule and the measured candidates there
            (``"replace"``: replace a stored record even if it was faster).
        compile_workers: threads compiling candidates at once on the GPU (default: up to 8,
            fewer when input copies would use over a quarter of free GPU memory); the
            interpreter always uses 1 (it is not thread-safe).
        compile_timeout: seconds after which a compile is recorded as "timeout".
        warmup_ms, rep_ms: warm-up and repetition times of each measurement (ms).
        timing: "cold" (``triton.testing.do_bench``: L2 flushed before every call) or "warm"
            (:func:`warm_gpu_time`: inputs in L2 as in a loop of repeated calls, GPU time only,
            the kernel time of a CUDA-graph replay). Short kernels rank differently under the two:
            a 16x4096x4096 fp16 matmul reads a weight that fits in L2. Timings stored in the
            tuning database are in the mode of the exploration that stored them.
        progress: show a tqdm progress bar with the best time so far.
        warm_start: random/tpe first try the heuristic's neighbours (one dimension one step
            away, tiles first), a cheap local search before sampling.

    Returns an :class:`ExploreResult` (``best`` is ``None`` when no candidate was correct).

    Raises:
        TypeError: ``alg`` is not an algorithm.
        ShapeError: ``args`` (or ``out``) do not fit the signature.
        ValueError: unknown strategy or a negative budget.
        ScheduleError: the space does not fit ``alg`` (:meth:`Space.validate`: an unknown axis,
            stage or tensor, a split of an axis no sum reduces, ...), before any candidate runs;
            UnknownFieldError (a ScheduleError and a TypeError) for a space dict with a key that
            is not a Space field.
        DTritonError: correctness cannot be checked (the reference does not fit in memory and the
            heuristic schedule fails).
    """
    t_start = time.perf_counter()
    if not isinstance(alg, Algorithm):
        raise TypeError(f"dt.explore expects an @dt.algorithm, got {type(alg).__name__}")
    if isinstance(args, torch.Tensor) or not isinstance(args, (tuple, list)):
        args = (args,)
    args = tuple(args)
    if budget is None or budget < 0:
        raise ValueError(f"budget must be a number of seconds >= 0, got {budget!r}")
    if strategy not in ("auto", "exhaustive", "random", "tpe"):
        raise ValueError(f"strategy must be 'auto', 'exhaustive', 'random' or 'tpe', got {strategy!r}")
    b_user = alg.bind(args)
    # a user's space is checked against the algorithm before anything is built or run
    if space is None:
        sp = None
    elif isinstance(space, Space):
        sp = space
    elif isinstance(space, Mapping):
        sp = Space(**space)
    else:
        raise TypeError(f"space must be a dt.Space or a dict, got {type(space).__name__}")
    if sp is not None:
        sp.validate(alg)
    interpret = backend_for(b_user.device) == "interpreter"
    dev_name = device_name(b_user.device)
    if interpret:
        warnings.warn(f"exploring {alg.name} on the Triton interpreter: candidates are checked for correctness, "
                      "but their timings measure Python on the CPU and mean nothing for a GPU",
                      TuningWarning, stacklevel=2)
        if max_trials is None:
            max_trials = 8
    factory = _candidate_factory or Kernel
    if timing not in ("cold", "warm"):
        raise ValueError(f"timing must be 'cold' or 'warm', got {timing!r}")
    bench = _Bench(alg, args, out, interpret, warmup_ms, rep_ms, timing)
    b = bench.b
    limits = Limits.for_device(bench.device)
    tdb = db if isinstance(db, TuningDB) else (TuningDB(db) if (store or deterministic) else None)
    key = TuningKey.for_binding(alg, b)

    # the heuristic baseline and the space
    heur = factory(alg, None)
    base = heur.schedule_for(*bench.work)
    if sp is None:
        sp = Space(**_derive_fields(alg, b, base, not interpret, limits))
    dims = sp.dimensions()
    if strategy == "auto":
        strategy = "exhaustive" if sp.size <= max(64, max_trials or 0) else "tpe"
    sampler = _make_sampler(strategy, dims, seed)
    if patience is None and sampler.name != "exhaustive":
        patience = 30
    if compile_workers is None:
        compile_workers = 1
        if not interpret:
            compile_workers = min(8, os.cpu_count() or 1)
            in_bytes = sum(a.numel() * a.element_size() for a in bench.pristine if isinstance(a, torch.Tensor))
            in_bytes += sum(math.prod(s) * d.itemsize for s, d in zip(bench.shapes, b.out_dtypes))
            try:
                free, _ = torch.cuda.mem_get_info(bench.device)
                compile_workers = max(1, min(compile_workers, int(free * 0.25 // max(in_bytes, 1))))
            except Exception:  # pragma: no cover
                pass
    if interpret:
        compile_workers = 1
    batch = max(1, compile_workers)
    stored = tdb.trials(key, b.sizes) if (deterministic and tdb is not None) else {}

    rows: list[dict] = []
    by_sched: dict[str, int] = {}
    by_src: dict[str, int] = {}
    tol_of = (lambda s: rtol) if rtol is not None else (lambda s: default_tolerance(b, s))

    def elapsed():
        return time.perf_counter() - t_start

    def value_of(row) -> float:
        return row["median_us"] if row["status"] == "ok" and row["median_us"] is not None else _PENALTY

    def new_row(origin, point, sched: Schedule | None) -> dict:
        return {"id": len(rows), "origin": origin, "params": _params_json(point or {}), "schedule": sched,
                "schedule_json": sched.to_json() if sched is not None else None, "status": None, "reason": "",
                "median_us": None, "p20_us": None, "p80_us": None, "rel_err": None, "compile_s": None,
                "elapsed_s": None, "remeasured": False, "stored": False}

    def precheck(origin, point, sched: Schedule | None):
        """-> (row or None for an exact repeat, kernel or None, index of the repeated row)."""
        if sched is not None:
            js = sched.to_json()
            if js in by_sched:
                return None, None, by_sched[js]
        row = new_row(origin, point, sched if sched is not None else base)
        if sched is not None:
            by_sched[js] = row["id"]
        try:
            if sched is not None:
                sched.validate(alg)
                kern = factory(alg, sched)
                kern.quiet = True   # knobs a candidate cannot use are its own business: no ScheduleWarning
                full = kern.schedule_for(*bench.work)
            else:
                kern, full = heur, base
        except ScheduleError as e:
            row.update(status="illegal", reason=str(e).splitlines()[0])
            return row, None, None
        except Exception as e:  # noqa: BLE001
            row.update(status="failed", reason=_first_line(e))
            return row, None, None
        row["schedule"], row["schedule_json"] = full, full.to_json()
        if sched is not None and row["schedule_json"] in by_sched and by_sched[row["schedule_json"]] != row["id"]:
            return None, None, by_sched[row["schedule_json"]]
        by_sched[row["schedule_json"]] = row["id"]
        if origin != "heuristic":
            why = check_resources(alg, full, b, limits)
            if why:
                row.update(status="pruned", reason=why)
                return row, None, None
        try:
            src = kern.source_for(*bench.work)
        except ScheduleError as e:
            row.update(status="illegal", reason=str(e).splitlines()[0])
            return row, None, None
        except Exception as e:  # noqa: BLE001
            row.update(status="failed", reason="code generation: " + _first_line(e))
            return row, None, None
        h = _src_hash(src, full)
        if h in by_src:
            row.update(status="duplicate", reason=f"generates the same kernels as #{by_src[h]}")
            return row, None, by_src[h]
        by_src[h] = row["id"]
        if row["schedule_json"] in stored:
            st = stored[row["schedule_json"]]
            row.update(status=st["status"], reason=st["reason"], median_us=st["median_us"], p20_us=st["p20_us"],
                       p80_us=st["p80_us"], origin="stored" if origin == "space" else origin, stored=True)
            return row, None, None
        return row, kern, None

    # oracle
    oracle = "reference"
    if bench.reference_feasible():
        try:
            bench.compute_reference()
        except (MemoryError, RuntimeError) as e:
            if "memory" not in str(e).lower() and not isinstance(e, MemoryError):
                raise
            bench.refs = None
    if bench.refs is None:
        oracle = "heuristic"
        warnings.warn(f"{alg.name}: the eager reference would not fit in memory for these shapes; candidates "
                      "are checked against the heuristic schedule's output instead", TuningWarning, stacklevel=2)
        try:
            bench.restore()
            r = heur(*bench.work)
            bench.sync()
            bench.refs = tuple(t.clone() for t in (r if isinstance(r, tuple) else (r,)))
        except Exception as e:  # noqa: BLE001
            raise DTritonError(f"cannot check candidates of {alg.name}: the reference does not fit in memory and "
                               f"the heuristic schedule fails ({_first_line(e)})") from e

    pbar = None
    if progress:
        try:
            from tqdm.auto import tqdm
            pbar = tqdm(total=float(budget), desc=f"explore {alg.name}", unit="s", leave=False,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s {postfix}")
        except Exception:  # pragma: no cover - tqdm missing
            pbar = None
    best_val = math.inf
    compiled = 0
    since_improve = 0
    stop_reason = "budget"
    shown = [0.0]

    def tick():
        if pbar is None:
            return
        e = min(elapsed(), float(budget))
        pbar.update(max(0.0, e - shown[0]))
        shown[0] = e
        pbar.set_postfix_str(f"{len(rows)} cands, best {best_val:.1f} µs" if math.isfinite(best_val)
                             else f"{len(rows)} cands")

    def evaluate(batch_items):
        """Compile+check (parallel on the GPU), then time sequentially. batch_items: [(handle, row, kern)]."""
        nonlocal compiled
        if not batch_items:
            return
        tasks = [(lambda kern=kern, row=row: bench.run_check(kern, tol_of(row["schedule"]), private=not interpret))
                 for _, row, kern in batch_items]
        if interpret:
            results = [t() for t in tasks]
        else:
            heuristic = any(row["origin"] == "heuristic" for _, row, _ in batch_items)
            results = _run_parallel(tasks, compile_workers, compile_timeout,
                                    None if heuristic else t_start + budget)
        compiled += len(batch_items)
        for (handle, row, kern), res in zip(batch_items, results):
            row.update({k: v for k, v in res.items()})
            if row["status"] == "ok":
                if elapsed() >= budget and row["origin"] != "heuristic":
                    row.update(status="skipped", reason="the budget ran out before timing")
                else:
                    try:
                        med, p20, p80 = bench.measure(kern)
                        row.update(median_us=med, p20_us=p20, p80_us=p80)
                    except Exception as e:  # noqa: BLE001
                        row.update(status="failed", reason="while timing: " + _first_line(e))
            row["elapsed_s"] = elapsed()
            row["_kernel"] = kern if row["status"] == "ok" else None
            account(row)
            if row["origin"] != "heuristic":
                sampler.tell(handle, None if row["status"] == "skipped" else value_of(row))
            tick()

    def account(row):
        """Best-so-far and the no-improvement counter, after a measured (or stored) candidate."""
        nonlocal best_val, since_improve
        if row["status"] == "ok" and row["median_us"] is not None:
            if row["median_us"] < best_val * (1 - _MIN_IMPROVEMENT):
                since_improve = 0
            else:
                since_improve += 1
            best_val = min(best_val, row["median_us"])
        elif row["status"] != "skipped":
            since_improve += 1

    # candidate 0: the heuristic
    row0, kern0, _ = precheck("heuristic", {}, None)
    rows.append(row0)
    if kern0 is not None:
        evaluate([(None, row0, kern0)])
        compiled -= 1  # the baseline does not count against max_trials
    else:
        row0["elapsed_s"] = elapsed()
    base_point = _base_point(dims, base)
    if isinstance(sampler, _TPE) and row0["status"] == "ok":
        sampler.add_known(base_point, row0["median_us"])
    if sampler.name != "exhaustive" and warm_start:
        sampler.prepend(_dot_seeds(alg, dims, base_point, b) + _neighbours(dims, base_point))

    stale = 0
    stale_limit = 10 ** 9 if sampler.name == "exhaustive" else 500
    while True:
        if elapsed() >= budget:
            stop_reason = "budget"
            break
        if max_trials is not None and compiled >= max_trials:
            stop_reason = "max_trials"
            break
        if patience is not None and since_improve >= patience:
            stop_reason = "converged"
            break
        want = batch if max_trials is None else max(1, min(batch, max_trials - compiled))
        items = []
        exhausted = False
        while len(items) < want and elapsed() < budget and (max_trials is None or compiled + len(items) < max_trials):
            got = sampler.ask()
            if got is None:
                exhausted = True
                break
            handle, point = got
            try:
                sched = sp.schedule_for(point, base, alg, b.axis_sizes)
            except ScheduleError as e:
                row = new_row("space", point, None)
                row.update(status="illegal", reason=str(e).splitlines()[0], elapsed_s=elapsed())
                rows.append(row)
                sampler.tell(handle, _PENALTY)
                stale += 1
                continue
            row, kern, rep = precheck("space", point, sched)
            if row is None:  # the same schedule as an earlier candidate: no new row
                sampler.tell(handle, value_of(rows[rep]))
                stale += 1
            elif kern is None:  # decided without compiling: illegal, pruned, duplicate, stored
                rows.append(row)
                row["elapsed_s"] = elapsed()
                v = value_of(rows[rep]) if row["status"] == "duplicate" else value_of(row)
                if row.get("stored"):  # a candidate measured by an earlier run counts as measured
                    compiled += 1
                    account(row)
                    stale = 0
                else:
                    stale += 1
                sampler.tell(handle, v)
                if row.get("stored") and max_trials is not None and compiled >= max_trials:
                    break
            else:
                rows.append(row)
                items.append((handle, row, kern))
                stale = 0
            if stale >= stale_limit:
                exhausted = True
                break
            tick()
        if items:
            evaluate(items)
        if exhausted:
            stop_reason = "exhausted"
            break
    if pbar is not None:
        tick()
        pbar.close()

    # re-measure the few best, interleaved, before picking (GPU only; stored timings stay as stored)
    if not interpret and not deterministic and top_k > 1:
        ok = sorted((r for r in rows if r["status"] == "ok" and r.get("_kernel") is not None),
                    key=lambda r: r["median_us"])[:top_k]
        if rows[0]["status"] == "ok" and rows[0].get("_kernel") is not None and rows[0] not in ok:
            ok.append(rows[0])  # the baseline too, so the reported speedup compares like with like
        if len(ok) > 1:
            rounds: dict[int, list[tuple[float, float, float]]] = {r["id"]: [] for r in ok}
            for _ in range(2):
                for r in ok:
                    try:
                        rounds[r["id"]].append(bench.measure(r["_kernel"], rep_ms=max(100.0, 2 * rep_ms)))
                    except Exception:  # noqa: BLE001 - keep the search timing
                        pass
            for r in ok:
                if rounds[r["id"]]:
                    med, p20, p80 = min(rounds[r["id"]])
                    r.update(search_median_us=r["median_us"], median_us=med, p20_us=p20, p80_us=p80, remeasured=True)
    for r in rows:
        r.pop("_kernel", None)

    left = _drain_workers(compile_timeout) if not interpret else 0
    if left:
        warnings.warn(f"{alg.name}: {left} compile thread(s) still running after {compile_timeout:g} s; they may "
                      "launch GPU work later", TuningWarning, stacklevel=2)
    result = ExploreResult(algorithm=alg, table=rows, device=dev_name, timings_meaningful=not interpret,
                           strategy=sampler.name, stop_reason=stop_reason, elapsed_s=elapsed(), space=sp,
                           oracle=oracle, key=key, budget_s=float(budget))
    if result.best is None:
        why = "; ".join(f"{st} {n}" + next((f" (e.g. {r['reason'][:160]})" for r in rows
                                            if r["status"] == st and r["reason"]), "")
                        for st, n in result.counts().items())
        warnings.warn(f"{alg.name}: no candidate passed the correctness check; nothing is stored. "
                      f"Candidates: {why}", TuningWarning, stacklevel=2)
    if store and tdb is not None:
        measured = [r for r in rows if r["status"] in ("ok", "wrong", "failed", "timeout")
                    and r.get("schedule_json") and not r.get("stored")]
        if measured:
            tdb.store_trials(key, b.sizes, measured)
        if result.best_row is not None:
            br = result.best_row
            tdb.store(TuningRecord(key, alg.name, br["schedule_json"], br["median_us"], br["p20_us"], br["p80_us"],
                                   dict(b.sizes), time.time()), overwrite=(store == "replace"))
    return result
