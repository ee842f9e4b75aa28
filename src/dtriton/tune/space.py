"""Schedule search spaces: :class:`Space` (the values to try per schedule field) and its derivation.

:meth:`Space.derive` builds the default space from the algorithm and the call's shapes: power-of-two
tiles per axis (no larger than the padded axis; 16..256 for the axes of a ``tl.dot``), permutations
of the grid, grouped launch order, split factors for the reduction axes of sum stages whose outputs
have few tiles, the strategy (whole/loop/online) of every axis that some kernel covers in-program,
the placement (auto/fuse/materialize) of every reduction stage, tiles of a split stage that runs in
a kernel of its own (``stage_tile``), ``num_warps`` and ``num_stages`` (GPU only: the interpreter
ignores both), persistent tile loops and, for 16-bit contractions on Hopper-class GPUs, TMA tile
loads (``access``): the :data:`RULES` of the built-in flat knobs; every other flat knob of the
registry gets its registry search values (:func:`registry_values`). Every field that a
:class:`Space` leaves ``None`` keeps the heuristic's value, so ``dt.Space(tile=...)`` narrows the
search; :meth:`Space.widen` adds values to a derived space.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Mapping, Sequence

import torch

from ..errors import ScheduleError, UnknownFieldError
from ..ir import (Algorithm, Binding, contractions, grid_candidates, online_candidate, reduction_stages,
                  split_blockers)
from ..runtime import Kernel, backend_for
from ..schedule import (EVICTIONS, PLACES, STAGE_PLACES, STRATEGIES, Knob, Schedule, StageSchedule, conv_space_tiles,
                        flash_backward_places, flash_backward_space, flash_forward_space, flat_knobs, mask_bounded, next_pow2,
                        unknown_fields_message)
from .check import Limits

__all__ = ["Space", "derive_fields", "derive_flat", "registry_values", "Derivation", "flat_names", "RULES"]

#: Space fields before the flat knobs (per axis, per stage, or the grid's own values) ...
HEAD_FIELDS = ("tile", "grid", "group", "split", "strategy", "place")
#: ... and after them; the flat knobs (:func:`flat_names`) come from the registry.
TAIL_FIELDS = ("stage_tile", "eviction")


def flat_names() -> tuple[str, ...]:
    """The single-valued knobs a :class:`Space` can search: every registered flat knob
    (:func:`dtriton.schedule.flat_knobs`), in registry order."""
    return tuple(k.name for k in flat_knobs())


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


# -- value checks of Space fields: each raises ScheduleError naming the field and the value --
def _pow2(what, x):
    if not (isinstance(x, int) and not isinstance(x, bool) and x >= 1 and x & (x - 1) == 0):
        raise ScheduleError(f"Space {what} value {x!r} is not a power of two")


def _posint(what, x):
    if not (isinstance(x, int) and not isinstance(x, bool) and x >= 1):
        raise ScheduleError(f"Space {what} value {x!r} must be a positive integer")


def _oneof(choices):
    def check(what, x):
        if x not in choices:
            raise ScheduleError(f"Space {what} value {x!r} is not one of {choices}")
    return check


def _knob_value(k: Knob):
    """The check of a flat knob's Space values: its registry domain (the error text is the one a
    Schedule gives, after ``Space <knob> value <v>``); None is not a value (a field left None keeps
    the heuristic's value)."""
    def check(what, x):
        problem = "is not a value (leave the field out to keep the heuristic's value)" if x is None else \
            k.problem(x)
        if problem is not None:
            raise ScheduleError(f"Space {what} value {x!r} {problem}")
    return check


def _per_key(v, what, check) -> dict[str, tuple] | None:
    """A ``{name: [values]}`` field as ``{name: tuple of values}``, each value checked."""
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


def _flat(v, what, check) -> tuple | None:
    """A single-valued field's list of values as a tuple, each value checked."""
    if v is None:
        return None
    vs = _seq(v)
    if not vs:
        raise ScheduleError(f"Space({what}) has no values")
    for x in vs:
        check(what, x)
    return vs


def _grids(grid) -> tuple[tuple[str, ...], ...] | None:
    """The grid field: a list of grids (tuples of axis names or strings ``"i,j"``), or one bare
    tuple of axis names."""
    if grid is None:
        return None
    gs = [grid] if isinstance(grid, str) else list(grid)
    if gs and all(isinstance(g, str) for g in gs) and all("," not in g and " " not in g.strip() for g in gs) \
            and len(gs) > 1 and not isinstance(grid, list):
        # a bare tuple of axis names, e.g. grid=("i", "j"): one grid
        gs = [tuple(gs)]
    vals = tuple(dict.fromkeys(_grid_value(g) for g in gs))
    if not vals or any(not g for g in vals):
        raise ScheduleError("Space(grid=...) needs a list of non-empty grids, e.g. [('i', 'j'), ('j', 'i')]")
    return vals


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
            the diffusion layer, whose best tiles differ from the output kernel's. Stages joined
            by ``+`` take one tile together (``{"out1+out2.j": [64, 128]}``: outputs that share a
            kernel only while their schedules agree, as an attention backward's dK and dV).
        eviction: ``{input tensor: ["evict_normal", "evict_first", "evict_last"]}``: L2 hints of
            the tensor's loads ("evict_normal" is no hint).
        num_warps, num_stages: lists of launch options.
        precision: e.g. ``["ieee", "tf32x3"]`` (tf32 and tf32x3 are never derived: they change
            results, tf32 by ~1e-3, tf32x3 by a few fp32 ulps).
        split_mode: e.g. ``["atomic", "partials"]``.
        Every other flat knob of the registry (:func:`flat_names`: ``persistent``, ``access``,
        ``warp_specialize``, ``acc_dtype`` and any :func:`~dtriton.schedule.register`-ed knob)
        is a keyword too: a list of its values.

    A single value is accepted where a list is expected. Raises :class:`~dtriton.ScheduleError`
    for a value a schedule cannot take (a tile that is not a power of two, an unknown strategy; a
    flat knob's values are checked against its registry domain, and None is never a value), and
    :class:`~dtriton.UnknownFieldError` (also a ``TypeError``) for a keyword that is not a field
    (``tiles=``). :meth:`validate` checks the names against an algorithm.

    The space's points are the product of every field's values (:meth:`dimensions`,
    :attr:`size`); :meth:`schedule_for` turns a point into a complete :class:`~dtriton.Schedule`
    on top of the heuristic's schedule.
    """

    def __init__(self, tile=None, grid=None, group=None, split=None, strategy=None, place=None, *,
                 stage_tile=None, eviction=None, **flat):
        bad = [k for k in flat if k not in flat_names()]
        if bad:
            raise UnknownFieldError(unknown_fields_message("Space", bad, self.field_names()))
        self.tile = _per_key(tile, "tile", _pow2)
        self.grid = _grids(grid)
        self.group = _flat(group, "group", _posint)
        self.split = _per_key(split, "split", _posint)
        self.strategy = _per_key(strategy, "strategy", _oneof(STRATEGIES))
        self.place = _per_key(place, "place", _oneof(STAGE_PLACES))
        self.stage_tile = _per_key(stage_tile, "stage_tile", _pow2)
        self.eviction = _per_key(eviction, "eviction", _oneof(EVICTIONS))
        for k in self.stage_tile or {}:
            if k.count(".") != 1 or not all(k.split(".")):
                raise ScheduleError(f"Space(stage_tile) key {k!r} must be 'stage.axis', e.g. 'sum0.k'")
        for k in flat_knobs():
            setattr(self, k.name, _flat(flat.get(k.name), k.name, _knob_value(k)))

    @staticmethod
    def field_names() -> tuple[str, ...]:
        """The fields, in constructor and :meth:`to_dict` order: tile, grid, group, split,
        strategy, place, the registry's flat knobs (:func:`flat_names`), stage_tile, eviction."""
        return HEAD_FIELDS + flat_names() + TAIL_FIELDS

    def __getattr__(self, name: str):
        # only reached for a name not set at construction: a knob registered since is not searched
        if not name.startswith("_") and name in flat_names():
            return None
        raise AttributeError(f"'Space' object has no attribute {name!r}")

    # -- views ----------------------------------------------------------------------------------
    def dimensions(self) -> list[tuple[str, tuple]]:
        """The space as ``[(name, values)]``; names are ``"grid"``, ``"group"``, ``"tile.<axis>"``,
        ``"split.<axis>"``, ``"strategy.<axis>"``, ``"place.<stage>"``,
        ``"stage_tile.<stage>.<axis>"``, ``"eviction.<tensor>"``, then the flat knobs' names
        (``"num_warps"``, ``"num_stages"``, ``"precision"``, ..., in registry order)."""
        dims: list[tuple[str, tuple]] = []
        if self.grid is not None:
            dims.append(("grid", self.grid))
        if self.group is not None:
            dims.append(("group", self.group))
        for f in ("strategy", "tile", "split", "place", "stage_tile", "eviction"):
            m = getattr(self, f)
            for k in sorted(m or {}):
                dims.append((f"{f}.{k}", m[k]))
        for f in flat_names():
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
        for f in self.field_names():
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
        d = {f: getattr(self, f) for f in self.field_names()}
        bad = [k for k in fields if k not in d]
        if bad:
            raise UnknownFieldError(unknown_fields_message("Space", bad, self.field_names()))
        d.update(fields)
        return Space(**d)

    def widen(self, other: "Space | None" = None, **fields) -> "Space":
        """A copy with values added: from another :class:`Space` and/or keyword fields given as
        for the constructor (``space.widen(tile={"i": [512]}, num_warps=[16])``)."""
        add = Space(**fields) if fields else Space()
        d = {}
        for f in self.field_names():
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
            names = sub.split(".")[0].split("+") if f == "stage_tile" else [sub]
            missing = [n for n in names if n not in alg.stages]
            if f in ("place", "stage_tile") and missing:
                raise ScheduleError(f"space names stage {missing[0]!r}, which {alg.name} does not have; its "
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
                        f"(reduction axes: {sorted(red)}); only a reduced axis can be split across programs. Name a "
                        f"reduction axis, or drop {sub!r} from split")
                bad = split_blockers(alg, sub)
                if bad:
                    raise ScheduleError(
                        f"Space(split={{{sub!r}: {list(vals)}}}): axis {sub!r} is reduced by the "
                        f"{bad[0].node.combiner.name} stage {bad[0].name!r}; an arg-reduction cannot be split across "
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
                sts, ax = sub.split(".", 1)
                for st in sts.split("+"):   # stages joined by "+" take the tile together
                    cur = stages.get(st, StageSchedule())
                    stages[st] = cur.replace(tile=dict(cur.tile, **{ax: int(v)}))
            elif f == "grid":
                grid = tuple(v)
                regroup = True
            elif f == "group":
                gval = int(v)
                regroup = True
            elif f in flat_names():
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
        return cls(**derive_fields(alg, bb, base, target == "gpu", limits))


def _with_base(vals: list, bv) -> list:
    """``vals`` with the heuristic's value ``bv`` added (sorted; appended when the values do not
    sort) when it is missing."""
    if bv is not None and bv not in vals:
        try:
            vals = sorted(set(vals) | {bv})
        except TypeError:
            vals = list(vals) + [bv]
    return vals


def _derive_tiles(alg: Algorithm, sizes: Mapping[str, int], base: Schedule, cons: Mapping) -> dict[str, list[int]]:
    """Power-of-two tiles per axis: 16..256 for a dot's m/n axes, 16..128 for its reduction axis,
    up to 1024 for axes some kernel maps to programs, else from 16 up to 4096 (never above the
    padded axis), always with the heuristic's tile."""
    dot_mn = {a for (m, n, _) in cons.values() for a in (m, n)}
    dot_r = {r for (_, _, r) in cons.values()}
    ongrid = grid_candidates(alg, base.grid, [ss.grid for ss in base.stages.values()])
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
        vals = _with_base(vals, base.tile.get(a))
        if len(vals) > 1:
            tile[a] = vals
    return tile


def _derive_strategies(alg: Algorithm, sizes: Mapping[str, int], base: Schedule, cons: Mapping,
                       limits: Limits) -> dict[str, list[str]]:
    """whole (when the padded axis fits ``limits.whole_max``), loop and, for axes a max reduces,
    online, for every axis that is reduced or not on the grid nor a dot's m/n axis."""
    dot_mn = {a for (m, n, _) in cons.values() for a in (m, n)}
    grid = tuple(base.grid or ())
    reduced = set(alg.reduction_axes)
    strategy: dict[str, list[str]] = {}
    for a in alg.axis_names:
        if (a in grid or a in dot_mn) and a not in reduced:
            continue
        vals = []
        if next_pow2(sizes[a]) <= limits.whole_max:
            vals.append("whole")
        vals.append("loop")
        if online_candidate(alg, a):
            vals.append("online")
        if len(vals) > 1:
            strategy[a] = vals
    return strategy


def _derive_splits(alg: Algorithm, sizes: Mapping[str, int], base: Schedule, limits: Limits) -> dict[str, list[int]]:
    """Split factors for axes reduced only by sums whose outputs have fewer tiles than SMs: 1..16
    and the heuristic's split with its neighbours, each leaving at least two tiles per part."""
    grid = tuple(base.grid or ())
    split: dict[str, list[int]] = {}
    for r in sorted(set(alg.reduction_axes)):
        reds = [s.node for s in reduction_stages(alg, r)]
        if not reds or split_blockers(alg, r):
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
        # the tile r is stepped in: its split stages' own (statistics split across programs), else the schedule's
        tr = min([int(base.stage(s.name).tile[r]) for s in reduction_stages(alg, r) if r in base.stage(s.name).tile]
                 or [int(base.tile.get(r) or 16)])
        bs = base.split.get(r, 1)   # the heuristic's split and its neighbours (64 for the diffusion's V)
        cand = sorted({1, 2, 4, 8, 16} | ({bs // 2, bs, bs * 2} if bs > 1 else set()))
        vals = [s for s in cand if s in (1, bs) or s * tr * 2 <= sizes[r]]
        if len(vals) > 1:
            split[r] = vals
    return split


def _derive_stage_tiles(alg: Algorithm, base: Schedule, tile: Mapping[str, list[int]]) -> dict[str, list[int]]:
    """A split reduction stage that is not itself an output runs in a kernel of its own (the
    diffusion layer's V-reduction): its tiles are dimensions of their own."""
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
    return stage_tile


def _derive_evictions(alg: Algorithm, b: Binding) -> dict[str, list[str]]:
    """Streaming (memory-bound, no contraction) kernels on the GPU: L2 hints for the largest
    inputs (the H200 probe: evict_first on X sped layer norm 4096x4096 fp16 up from 19.8 to
    18.4 us and slowed 4096x8192 from 35.7 to 37.1 us, so it is searched, not set)."""
    eviction: dict[str, list[str]] = {}
    elems = {p.name: math.prod(b.sizes[s] for s in p.dims) for p in alg.tensor_params}
    top = max(elems.values(), default=0)
    for name, n in elems.items():
        if top and n * 2 >= top and n >= 1 << 16:
            eviction[name] = ["evict_normal", "evict_first"]
    return eviction


@dataclasses.dataclass(frozen=True)
class Derivation:
    """What a flat knob's derivation rule sees: the algorithm, its binding ``b``, the heuristic's
    complete schedule ``base``, the target (``gpu``), the resource ``limits`` and the algorithm's
    contractions (``cons``, :func:`~dtriton.schedule.contractions`)."""
    alg: Algorithm
    b: Binding
    base: Schedule
    gpu: bool
    limits: Limits
    cons: Mapping


def registry_values(k: Knob, d: Derivation) -> list | None:
    """The values a flat knob without a rule gets: its registry search values with the
    heuristic's value added; launch options only on the GPU (the interpreter ignores them).
    None (not searched) for a knob without search values, or with fewer than two."""
    if not k.search or (k.launch and not d.gpu):
        return None
    vals = _with_base(list(k.search), getattr(d.base, k.name))
    return vals if len(vals) > 1 else None


def _rule_num_warps(k: Knob, d: Derivation) -> list | None:
    """GPU only: 2, 4, 8 warps (16 when an in-program axis pads to 2048 or more)."""
    if not d.gpu:
        return None
    grid = tuple(d.base.grid or ())
    widest = max([next_pow2(d.b.axis_sizes[a]) for a in d.alg.axis_names if a not in grid] or [1])
    return _with_base([2, 4, 8] + ([16] if widest >= 2048 else []), d.base.num_warps)


def _rule_num_stages(k: Knob, d: Derivation) -> list | None:
    """GPU only: 2..5 pipeline stages for contractions, else 1..4."""
    return _with_base([2, 3, 4, 5] if d.cons else [1, 2, 3, 4], d.base.num_stages) if d.gpu else None


def _rule_persistent(k: Knob, d: Derivation) -> list | None:
    """Persistent tile loops (1 or 2 programs per SM) for GPU contractions, where tiles are many."""
    return _with_base([0, 1, 2], d.base.persistent) if d.gpu and d.cons else None


def _tensor_core_tma(d: Derivation) -> bool:
    """A GPU contraction on a TMA device (Hopper, sm90+) whose operands feed tensor cores (16-bit,
    or fp32 at tf32 / tf32x3 precision; "ieee" fp32 dots run on FMA units, where the H200 probe
    saw no gain from TMA)."""
    if not (d.gpu and d.cons and d.limits.tma):
        return False
    floats = [t for t in d.b.dtypes.values() if t.is_floating_point]
    return bool(floats) and (all(t.itemsize == 2 for t in floats)
                             or (all(t.itemsize <= 4 for t in floats) and d.base.precision in ("tf32", "tf32x3")))


def _rule_access(k: Knob, d: Derivation) -> list | None:
    """TMA tile loads (pointer or tma) of a tensor-core contraction on a TMA device
    (:func:`_tensor_core_tma`). explore() and Space.derive derive around the heuristic's
    schedule, whose precision is "ieee": their fp32 spaces get TMA only from a user's
    widen(access=...)."""
    return _with_base(["pointer", "tma"], d.base.access) if _tensor_core_tma(d) else None


def _rule_warp_specialize(k: Knob, d: Derivation) -> list | None:
    """Warp specialisation stays out of derived spaces unless the heuristic set it (a user Space
    may add it): on the H200 it gained nothing on the matmul probe, and a candidate of the
    diffusion layer with it faulted ("misaligned address"), which ends the CUDA context and so the
    whole exploration. Session 3's "misaligned address" fault exploring the fp32 diffusion layer
    came with in-kernel descriptors; with host-side descriptors its TMA schedules ran clean
    (session 4 probe). Fused attention neither: its warp-specialised kernel (descriptors built in
    the kernel, 4 warps: Triton 3.6 specialises it on sm_90) printed no result within 90 s on the
    H200 (session 4, calls 4 and 5), which would end an exploration's budget."""
    return [False, True] if d.base.warp_specialize and _tensor_core_tma(d) else None


#: The derivation rules of built-in flat knobs: knob name -> ``rule(knob, Derivation)`` giving the
#: values to search (None: not searched). Every other flat knob (``precision``, ``split_mode``,
#: ``acc_dtype`` and registered ones) gets :func:`registry_values`.
def _rule_tile_order(k: Knob, d: Derivation) -> list | None:
    """GPU: both launch orders where some reduction's loop is bounded by a mask (causal attention:
    with the query axis outermost on the grid, "reverse" starts the longest rows first)."""
    return ["forward", "reverse"] if d.gpu and mask_bounded(d.alg) else None


def _rule_unroll(k: Knob, d: Derivation) -> list | None:
    """GPU reductions without contractions that loop over a reduced axis: the plan's pick (0), one
    step, 2 and 4 steps per loop iteration (loads issued together)."""
    loops = any(d.base.strategy.get(a) == "loop" or any(s.strategy.get(a) == "loop" for s in d.base.stages.values())
                for a in d.alg.reduction_axes)
    return _with_base([0, 1, 2, 4], d.base.unroll) if d.gpu and not d.cons and loops else None


RULES = {"num_warps": _rule_num_warps, "num_stages": _rule_num_stages, "persistent": _rule_persistent,
         "access": _rule_access, "warp_specialize": _rule_warp_specialize, "tile_order": _rule_tile_order,
         "unroll": _rule_unroll}


def derive_flat(d: Derivation) -> dict[str, list | None]:
    """The values of every registered flat knob (:data:`RULES`, else :func:`registry_values`)."""
    return {k.name: RULES.get(k.name, registry_values)(k, d) for k in flat_knobs()}


def derive_fields(alg: Algorithm, b: Binding, base: Schedule, gpu: bool, limits: Limits) -> dict:
    """The fields of the default :class:`Space` (keyword arguments of its constructor) for ``alg``
    bound to ``b`` around the heuristic's complete schedule ``base``: on the GPU (``gpu``) also
    launch options, persistent loops, L2 hints and TMA access; ``limits`` bound "whole" blocks,
    decide when output tiles are few (split-K) and whether the device has TMA. Every flat knob of
    the registry has a field (:func:`derive_flat`)."""
    sizes = b.axis_sizes
    fb = flash_backward_space(alg, sizes, base) if gpu else None
    if fb is not None:   # the FlashAttention-2 backward's own knobs; nothing else applies to it
        return dict({f: None for f in Space.field_names()}, stage_tile=fb, place=flash_backward_places(alg, sizes),
                    num_warps=_with_base([4, 8], base.num_warps),
                    num_stages=_with_base([1, 2, 3, 4], base.num_stages),
                    access=_with_base(["pointer", "tma"], base.access) if limits.tma else None)
    cons = contractions(alg)
    ff = flash_forward_space(alg, sizes, base, mask_bounded(alg)) if gpu else None
    if ff is not None:   # a fused attention forward: its layout kept, the knobs that matter searched
        flat = derive_flat(Derivation(alg, b, base, gpu, limits, cons))
        flat.update(num_warps=_with_base([4, 8], base.num_warps), num_stages=_with_base([2, 3, 4], base.num_stages),
                    persistent=None)
        return dict({f: None for f in Space.field_names()}, **flat, **ff)
    grid = tuple(base.grid or ())
    tile = _derive_tiles(alg, sizes, base, cons)
    if gpu and any(t in (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8) for t in b.dtypes.values()):
        # 8-bit dots need a reduction tile of at least 32 on the GPU (below it: an fp32 dot, plan.dots)
        dot_r = {r for (_, _, r) in cons.values()}
        tile = {a: [t for t in v if a not in dot_r or t >= 32] or v for a, v in tile.items()}
    strategy = _derive_strategies(alg, sizes, base, cons, limits)
    conv = conv_space_tiles(alg, sizes, base) if gpu and not cons else None
    if conv is not None:   # a convolution's implicit GEMM: its M, N and K tiles only, reductions looped
        tile, strategy = conv, {a: v for a, v in strategy.items() if base.strategy.get(a) != "loop"}
    group = None
    if len(grid) >= 2:
        group = _with_base([1, 4, 8, 16] if gpu else [1, 8], max(base.group.values(), default=1))
    grids = None
    if 2 <= len(grid) <= 3:
        grids = [grid] + [p for p in itertools.permutations(grid) if p != grid]
    split = _derive_splits(alg, sizes, base, limits)
    place = {s.name: list(PLACES) for s in alg.stages.values() if not s.is_output}
    stage_tile = _derive_stage_tiles(alg, base, tile)
    eviction = _derive_evictions(alg, b) if gpu and not cons else {}
    flat = derive_flat(Derivation(alg, b, base, gpu, limits, cons))
    return dict(tile=tile or None, grid=grids, group=group, split=split or None, strategy=strategy or None,
                place=place or None, **flat, stage_tile=stage_tile or None, eviction=eviction or None)
