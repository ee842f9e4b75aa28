"""Samplers: the order in which exploration visits the points of a :class:`~dtriton.tune.space.Space`.

A sampler has ``name``, ``ask() -> (handle, point) | None`` (``None``: the space is exhausted) and
``tell(handle, value)`` (the candidate's time in µs, :data:`PENALTY` when it cannot be chosen,
``None`` when it was skipped). "exhaustive" visits every point in order, "random" draws uniformly
without repetition (seeded), "tpe" asks optuna's TPE sampler (optuna is optional: without it "tpe"
falls back to "random" with a warning). Random and TPE samplers also take ``prepend(points)``: the
warm start, points tried before sampling (:func:`dot_seeds`, then :func:`neighbours` of the
heuristic's :func:`base_point`).
"""

from __future__ import annotations

import itertools
import math
import random
import warnings
from typing import Any, Mapping

from ..ir import Algorithm, Binding, contractions
from ..schedule import Schedule, flat_knobs, next_pow2
from .db import TuningWarning
from .space import flat_names

__all__ = ["Exhaustive", "Random", "TPE", "make_sampler", "base_point", "dot_seeds", "flash_seeds", "output_tile_seeds",
           "warm_start", "neighbours", "neighbour_order", "NEIGHBOUR_ORDER", "DOT_SEEDS", "OUTPUT_TILE_ELEMENTS", "PENALTY"]

PENALTY = 1e12  # what a sampler is told for a candidate that cannot be chosen (µs)


class Exhaustive:
    """Every point of ``dims`` (``[(name, values)]``) in order: the product, last dimension fastest."""
    name = "exhaustive"

    def __init__(self, dims, seed):
        self.names = [n for n, _ in dims]
        self.it = itertools.product(*[v for _, v in dims])

    def ask(self):
        """``(None, point)``, or ``None`` when every point was given."""
        try:
            vals = next(self.it)
        except StopIteration:
            return None
        return None, dict(zip(self.names, vals))

    def tell(self, handle, value):
        """Nothing to learn."""


class Random:
    """Uniform draws without repetition (seeded ``random.Random``), after the prepended points."""
    name = "random"

    def __init__(self, dims, seed):
        self.dims = dims
        self.size = math.prod(len(v) for _, v in dims)
        self.rng = random.Random(seed)
        self.seen: set[int] = set()
        self.queue: list[dict] = []

    def prepend(self, points):
        """Give these points first (in order), before any random draw."""
        self.queue = list(points) + self.queue

    def _index(self, point) -> int:
        idx = 0
        for name, vals in self.dims:
            idx = idx * len(vals) + vals.index(point[name])
        return idx

    def ask(self):
        """``(None, point)``: a prepended point not seen yet, else a random unseen one; ``None``
        when every point was given."""
        q = self.queue
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
        """Nothing to learn."""


def _enc(v):
    """A categorical value optuna can store: grids as ``"i,j"``."""
    return ",".join(v) if isinstance(v, tuple) else v


class TPE:
    """optuna's multivariate TPE sampler over categorical dimensions. Raises ``ImportError``
    without optuna."""
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
        """Enqueue these points as the first trials."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for p in points:
                self.study.enqueue_trial({n: _enc(p[n]) for n, _ in self.dims}, skip_if_exists=True)

    def ask(self):
        """``(trial, point)`` of the next optuna trial."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trial = self.study.ask()
            point = {n: self.dec[n][trial.suggest_categorical(n, list(self.dec[n]))] for n, _ in self.dims}
        return trial, point

    def tell(self, handle, value):
        """The trial's time (µs), or ``None`` for a trial that was not run (a failed trial)."""
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


def base_point(dims, base: Schedule) -> dict:
    """The heuristic schedule as a point of the space (None where it has no value there)."""
    point = {}
    for name, vals in dims:
        f, _, sub = name.partition(".")
        if not sub:
            v = getattr(base, f) if f in flat_names() else \
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


#: The order in which :func:`neighbours` steps along dimensions (by field): access style, the fp32 dot
#: precision (derived only with the choices that keep fp32 accuracy: every other value is one step
#: away, :data:`CATEGORICAL`) and tiles first. Flat knobs with registry search values that are not
#: named here follow, in registry order (:func:`neighbour_order`); a flat knob without search values
#: (``split_mode``, ``warp_specialize``, ``acc_dtype``: results or faults change, not only speed) is
#: not stepped.
NEIGHBOUR_ORDER = ("access", "precision", "tile", "stage_tile", "num_stages", "num_warps", "persistent", "eviction",
                   "group", "strategy", "split", "place", "grid")
#: Fields whose values have no order: :func:`neighbours` steps to each other value, not the adjacent ones.
CATEGORICAL = frozenset({"precision"})


def neighbour_order() -> tuple[str, ...]:
    """The fields :func:`neighbours` steps along, in order: :data:`NEIGHBOUR_ORDER`, then every
    other flat knob that has search values in the registry."""
    return NEIGHBOUR_ORDER + tuple(k.name for k in flat_knobs() if k.search and k.name not in NEIGHBOUR_ORDER)

#: Tile configurations of a 16-bit tensor-core contraction on the GPU tried right after the
#: heuristic: (m tile, n tile, k tile, num_warps, num_stages). The fastest hand-listed schedules of
#: the session-4 H200 probe (``bench/results/probe_session4_*.json``): 128x256x64/8 warps/3 stages
#: at 2048^3 and larger, 128x128x64/8/3 at 2048^3 bf16, 64x128x64/4/4 at 1024^3, each with TMA
#: loads, the layouts of Triton's persistent-matmul tutorial.
DOT_SEEDS = ((128, 256, 64, 8, 3), (128, 128, 64, 8, 3), (64, 128, 64, 4, 4), (128, 128, 64, 8, 4))


def dot_seeds(alg: Algorithm, dims, start: Mapping, b: Binding) -> list[dict]:
    """Points of the space at the :data:`DOT_SEEDS` configurations of the main output's
    contraction, with TMA where the space offers it (each value only where the space has it; the
    other dimensions keep the heuristic's values, ``start``: :func:`base_point`). Empty for
    algorithms without a contraction, spaces without those tile dimensions, and calls (binding
    ``b``) that are not 16-bit GPU ones:
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
    full = {n: (start.get(n) if start.get(n) is not None else v[0]) for n, v in dims}
    out = []
    for cfg in DOT_SEEDS:
        p = dict(full)
        for name, v in zip(("tile." + mnr[0], "tile." + mnr[1], "tile." + mnr[2], "num_warps", "num_stages"), cfg):
            if name in vals and v in vals[name]:
                p[name] = v
        if "tma" in vals.get("access", ()):
            p["access"] = "tma"
        if p != full and p not in out:
            out.append(p)
    return out


#: Schedules of a 16-bit fused attention-like kernel (an online pass over a contraction) on the GPU
#: tried right after the heuristic: (query tile, key tile, num_warps, num_stages, access). The
#: H200's order at B4 H32 S4096 D128 fp16 (call 3 of session 4: pointers 128x64/8 warps/3 stages
#: 2389 us, TMA 128x128/8/2 2503, 64x64/4/3 2506, 128x128/8/2 2570, TMA 128x64/8/3 2561). No
#: warp-specialised seed: on the H200 such a kernel (TMA descriptors built in the kernel, 4 warps)
#: printed no result within 90 s (calls 4 and 5: a hang or a compile that long), which would end a
#: budget.
FLASH_SEEDS = ((128, 64, 8, 3, "pointer"), (128, 128, 8, 2, "tma"), (64, 64, 4, 3, "pointer"),
               (128, 64, 8, 3, "tma"), (128, 128, 8, 2, "pointer"))


def flash_seeds(dims, start: Mapping, base: Schedule, b: Binding) -> list[dict]:
    """Points of the space at the :data:`FLASH_SEEDS` configurations when the heuristic's schedule
    ``base`` runs an online pass (``strategy`` "online": the key axis) in programs tiled over a
    query axis (the last grid axis), for a 16-bit GPU call (binding ``b``); each value only where
    the space has it, the other dimensions at the heuristic's values (``start``:
    :func:`base_point`); first, where the space has ``warp_specialize`` None (a Hopper attention
    forward: the Gluon kernel), the heuristic's point with it, and the configurations with it False
    (the Triton kernel). Empty otherwise."""
    floats = [d for d in b.dtypes.values() if d.is_floating_point]
    online = [a for a, s in base.strategy.items() if s == "online"]
    if b.device.type != "cuda" or not floats or any(d.itemsize != 2 for d in floats) or not online or not base.grid:
        return []
    vals = dict(dims)
    full = {n: (start.get(n) if start.get(n) is not None else v[0]) for n, v in dims}
    names = ("tile." + base.grid[-1], "tile." + online[0], "num_warps", "num_stages", "access")
    out = []
    gluon = None in vals.get("warp_specialize", ())   # (space_rules: None runs the Gluon kernel where it applies)
    if gluon:   # the H200's fastest first; the Triton configurations with it off (else they run as it too)
        out.append(dict(full, warp_specialize=None))
    for cfg in FLASH_SEEDS:
        p = dict(full, warp_specialize=False) if gluon else dict(full)
        for name, v in zip(names, cfg):
            if name in vals and v in vals[name]:
                p[name] = v
        if p != full and p not in out:
            out.append(p)
    return out


#: Elements a program of a statistics-then-normalise output holds at the :func:`output_tile_seeds`:
#: the range the H200 measured (s8 calls 5 and 6; output kernels, us): batch norm 64x64x512x512 fp16
#: 4x512 1004.2, 8x512 (the default) 1032.7, 2x512 1164.0; fp32 2x512 2012.2, 4x512 2088.8, 8x512
#: 2084.5; instance norm 16x64x256x256 fp16 16x256 (the default) 62.6, 4x256 71.0; fp32 4x256 123.1,
#: 16x256 128.3. The best differs by case and dtype, so exploration tries them first; 512 since s13 (with
#: the 3-D launch grid, call 4: batch norm fp32 1x512 2015.9 against the default 2x512's 2027.1).
OUTPUT_TILE_ELEMENTS = (512, 1024, 2048, 4096)


def output_tile_seeds(alg: Algorithm, dims, start: Mapping, base: Schedule, b: Binding) -> list[dict]:
    """Points of the space whose main output tile holds each of :data:`OUTPUT_TILE_ELEMENTS`
    elements, nearest the heuristic's first (fewer first on a tie), for a GPU call (binding ``b``)
    whose heuristic schedule ``base`` runs the main output as an element-wise pass over
    statistics computed before it (batch, instance, group, layer norm over several axes, a
    Frobenius norm: every reduced axis the output keeps is on its grid, no contraction). The
    innermost grid axis keeps the heuristic's tile (the contiguous width, narrowed only below
    it); the others take the rest innermost first: rows of the reduced layout. Where the
    heuristic's output folds split partials in every program (``split_mode="partials"``: layer
    norm over (C, H, W), group norm), the same tiles follow with the partials finished once
    instead (``"finish"``, the heuristic's tile first), then at the heuristic's tile finished by the
    split kernel's last program per tile (``"last"``; a heuristic finishing them, by default with
    ``"last"`` since s13, tries the other of the two at its tile): on the H200 (s8 call 6) layer norm's fp32
    output took 132.7 us folding 32 splits where instance norm's, reading finished statistics of
    the same shape, took 123.1. Each value only where the space has it; other dimensions at the
    heuristic's values (``start``: :func:`base_point`). Empty otherwise."""
    main = alg.outputs[0]
    grid = tuple(base.grid or ())
    rows = [a for a in main.layout if a in alg.reduction_axes]
    if b.device.type != "cuda" or contractions(alg) or not grid or not rows or not set(rows) <= set(grid):
        return []
    vals = dict(dims)
    full = {n: (start.get(n) if start.get(n) is not None else v[0]) for n, v in dims}
    sizes = b.axis_sizes
    have = math.prod(int(base.tile.get(a, 1)) for a in grid)
    width = int(base.tile.get(grid[-1], 1))
    targets = sorted((e for e in OUTPUT_TILE_ELEMENTS if e != have), key=lambda e: (abs(math.log2(e / have)), e))
    # the other ways of finishing the partials where the heuristic splits (finish, then last: the same fold
    # in the split kernel's last program per tile, one launch less)
    modes = [None] + [m for m in ("finish", "last") if base.split_mode in ("partials", "finish", "last")
                      and m != base.split_mode and m in vals.get("split_mode", ())]
    out = []
    for mode in modes:
        # (readers folding partials try "finish" at every tile; otherwise the other way of finishing only at
        # the heuristic's tile: the same fold, one launch more or less; the sampler explores its other tiles)
        for e in (targets if mode is None else [have] + targets if (mode, base.split_mode) == ("finish", "partials")
                  else [have]):
            tiles, left = {grid[-1]: min(width, e)}, max(1, e // min(width, e))
            for a in reversed(grid[:-1]):
                tiles[a] = max(1, min(left, next_pow2(sizes[a])))
                left = max(1, left // tiles[a])
            p = dict(full, **({"split_mode": mode} if mode else {}))
            for a, v in tiles.items():
                if f"tile.{a}" in vals and v in vals[f"tile.{a}"]:
                    p[f"tile.{a}"] = v
            if p != full and p not in out:
                out.append(p)
    return out


def warm_start(alg: Algorithm, dims, start: Mapping, base: Schedule, b: Binding) -> list[dict]:
    """The points random and TPE exploration try first, in order: the seeds of a fused attention
    (:func:`flash_seeds`), else of a 16-bit contraction (:func:`dot_seeds`), else of a
    statistics-then-normalise output (:func:`output_tile_seeds`), then the heuristic's one-step
    :func:`neighbours` (``start``: :func:`base_point` of the heuristic's schedule ``base``). With no
    seeds and ``warp_specialize`` None at the start, False in the space (the Gluon kernel of a Hopper
    conv2d, which the tiles do not change): the start, then the start with it False and that point's
    neighbours (the Triton kernel's tilings)."""
    seeds = (flash_seeds(dims, start, base, b) or dot_seeds(alg, dims, start, b)
             or output_tile_seeds(alg, dims, start, base, b))
    ws = dict(dims).get("warp_specialize", ())
    if not seeds and start.get("warp_specialize", False) is None and False in ws:
        # (a Gluon kernel where it applies, space_rules: a Hopper conv2d, None where the default picks it,
        # True where it is not yet the default; its tiles do not change it, so the heuristic's point with
        # it, then the Triton kernel's: the heuristic's tiles and their neighbours)
        off = dict(start, warp_specialize=False)
        return [dict(start, warp_specialize=next(v for v in ws if v is not False)), off] + neighbours(dims, off)
    return seeds + neighbours(dims, start)


def neighbours(dims, start: Mapping, limit: int = 20) -> list[dict]:
    """Points one step away from the heuristic's point ``start`` (:func:`base_point`) along one
    dimension (the next smaller or larger value; every other value of a :data:`CATEGORICAL` field),
    access style, precision and tiles first: a cheap local
    search before the sampler takes over. At most ``limit`` points."""
    full = {n: (start.get(n) if start.get(n) is not None else vals[0]) for n, vals in dims}
    out = []
    for f in neighbour_order():
        for name, vals in dims:
            if name.partition(".")[0] != f or start.get(name) is None:
                continue
            i = vals.index(start[name])
            steps = [j for j in range(len(vals)) if j != i] if f in CATEGORICAL else (i - 1, i + 1)
            for j in steps:
                if 0 <= j < len(vals):
                    out.append(dict(full, **{name: vals[j]}))
    return out[:limit]


def make_sampler(strategy: str, dims, seed, stacklevel: int = 3) -> Any:
    """The sampler for ``strategy`` ("exhaustive", "random" or "tpe") over ``dims``. "tpe" without
    optuna warns (:class:`~dtriton.tune.db.TuningWarning`, at ``stacklevel`` from here) and gives
    "random". Raises ``ValueError`` for another strategy."""
    if strategy == "exhaustive":
        return Exhaustive(dims, seed)
    if strategy == "random":
        return Random(dims, seed)
    if strategy == "tpe":
        try:
            return TPE(dims, seed)
        except ImportError:
            warnings.warn("strategy 'tpe' needs optuna (pip install 'dtriton[explore]'); exploring at random "
                          "instead", TuningWarning, stacklevel=stacklevel)
            return Random(dims, seed)
    raise ValueError(f"strategy must be 'auto', 'exhaustive', 'random' or 'tpe', got {strategy!r}")
