"""Schedule search spaces: :class:`Space` (the values to try per schedule field).

:meth:`Space.derive` builds the default space from the algorithm and the call's shapes
(:mod:`dtriton.tune.space_rules`: power-of-two tiles, grid permutations, grouped order, split
factors, strategies, placements, launch options, persistent loops, TMA tile loads and the fp32 dot
precision of tensor-core contractions, and every other flat knob's registry search values). Every
field that a :class:`Space` leaves ``None`` keeps the heuristic's value, so ``dt.Space(tile=...)``
narrows the search; :meth:`Space.widen` adds values to a derived space.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Mapping, Sequence

import torch

from ..errors import ScheduleError, UnknownFieldError
from ..ir import Algorithm, split_blockers
from ..runtime import Kernel, backend_for
from ..schedule import (EVICTIONS, STAGE_PLACES, STRATEGIES, Knob, Schedule, StageSchedule, flat_knobs, next_pow2,
                        unknown_fields_message)
from .check import Limits
from .space_rules import RULES, Derivation, derive_fields, derive_flat, field_names, flat_names, registry_values

__all__ = ["Space", "derive_fields", "derive_flat", "registry_values", "Derivation", "flat_names", "RULES"]


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
    the heuristic's value) unless the knob lists it (``warp_specialize``: None, the compiler picks)."""
    listed = None in (getattr(k.domain, "values", None) or ())

    def check(what, x):
        problem = "is not a value (leave the field out to keep the heuristic's value)" if x is None and not listed \
            else (None if x is None else k.problem(x))
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
        precision: e.g. ``["ieee", "tf32x3"]``. Derived for GPU contractions of fp32 operands:
            the precisions that keep fp32 accuracy (ieee, tf32x3, bf16x6) beside the heuristic's;
            tf32 (~1e-3) and bf16x3 (~1e-5) change results and are searched only when named.
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
        return field_names()

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
        for the constructor (``space.widen(tile={"i": [512]}, num_warps=[16])``). A field this space
        leaves ``None`` (not searched: the heuristic's value) becomes exactly the values given, so
        name the heuristic's value too to keep it in the search (``widen(access=["pointer", "tma"])``)."""
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
