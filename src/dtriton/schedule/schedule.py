"""Schedules: how an algorithm runs. Plain, immutable, comparable, JSON round-trippable values.

A :class:`Schedule` gives, per axis, a tile (block) size and a reduction strategy; which axes are
mapped to program ids (the grid, outermost first, the last varying fastest); grouped launch order
(the L2 swizzle of Triton's matmul tutorial); split factors for reduction axes (split-K);
``num_warps``/``num_stages``; accumulation dtype and dot precision; and per-stage overrides
(:class:`StageSchedule`) that say where a stage is computed and its own tile and grid.

The fields, their defaults and value checks come from the knob table (:mod:`.knobs`): a knob
registered there is a keyword, an attribute, part of equality, hashing, JSON and ``repr``. The
checks against an algorithm (:meth:`Schedule.validate`) are written here. This module depends
only on :mod:`dtriton.errors`, :mod:`.knobs` and the IR's analysis (stage grids, split legality).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
from typing import Any, Callable, Mapping, Sequence

from ..errors import ScheduleError, UnknownFieldError
from ..ir import grid_candidates, reduces_in, reduction_stages, splittable, stage_grid
from .knobs import STAGE_PLACES, FrozenMap, Knob, flat_knobs, knob, knobs, launch_knobs, names, reserve_names

__all__ = ["Schedule", "StageSchedule", "unknown_fields_message", "reject_unknown_keywords"]


def _fm(v, what: str) -> FrozenMap:
    if v is None:
        return FrozenMap()
    if isinstance(v, FrozenMap):
        return v
    if not isinstance(v, Mapping):
        raise ScheduleError(f"schedule field {what!r} must be a dict, got {type(v).__name__}")
    return FrozenMap(v)


def unknown_fields_message(owner: str, bad: Sequence[str], names: Sequence[str], whole: Sequence[str] = ()) -> str:
    """``"Schedule has no field 'tiles' (did you mean 'tile'?); its fields are ..."``; ``whole``: the
    fields of the whole call's Schedule, named as such where a stage was given one."""
    parts = []
    for k in bad:
        close = difflib.get_close_matches(str(k), list(names), n=1, cutoff=0.6)
        parts.append(repr(k) + (f" (did you mean {close[0]!r}?)" if close else ""))
    there = [repr(k) for k in bad if k in whole]
    return (f"{owner} has no field{'s' if len(parts) > 1 else ''} {', '.join(parts)}; its fields are "
            f"{', '.join(names)}" + (f". {', '.join(there)}: a field of dt.Schedule (the whole call), not of a "
                                     "stage: give it there" if there else ""))


def reject_unknown_keywords(init: Callable, owner: str, names: Sequence[str]) -> Callable:
    """Wrap a constructor so that an unknown keyword raises :class:`UnknownFieldError` (naming it,
    the closest field and every field) instead of Python's bare ``TypeError``."""
    names = tuple(names)

    @functools.wraps(init)
    def __init__(self, *args, **kw):
        bad = [k for k in kw if k not in names]
        if bad:
            raise UnknownFieldError(unknown_fields_message(owner, bad, names))
        init(self, *args, **kw)
    return __init__


def _normalise(k: Knob, v):
    """A knob's value in canonical form: maps as FrozenMap, axis tuples as tuples."""
    if k.kind in ("per_axis", "per_tensor"):
        return _fm(v, k.name)
    if k.kind == "axes" and v is not None:
        return (v,) if isinstance(v, str) else tuple(v)
    return v


def _check(k: Knob, what: str, v) -> None:
    """Raise ``ScheduleError("<what> = <v> <what is wrong>")`` for a value outside the domain."""
    problem = k.problem(v)
    if problem is not None:
        raise ScheduleError(f"{what} = {v!r} {problem}")


class _KnobValues:
    """An immutable record of named values (the fields of a :class:`Schedule` or a
    :class:`StageSchedule`), compared and hashed by value. Subclasses say which fields exist
    (:meth:`field_names`), their defaults and canonical forms."""

    def __init__(self, *args, **kw):
        owner, fields = type(self).__name__, self.field_names()
        bad = [k for k in kw if k not in fields]
        if bad:
            raise UnknownFieldError(unknown_fields_message(owner, bad, fields, Schedule.field_names()
                                                           if owner == "StageSchedule" else ()))
        if len(args) > len(fields):
            raise TypeError(f"{owner}() takes at most {len(fields)} positional arguments ({len(args)} given)")
        given = dict(zip(fields, args))
        twice = [k for k in kw if k in given]
        if twice:
            raise TypeError(f"{owner}() got multiple values for argument {twice[0]!r}")
        given.update(kw)
        for name in fields:
            value = given[name] if name in given else self._default(name)
            object.__setattr__(self, name, self._canonical(name, value))
        self._check_values()

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The field names, in positional order (from the knob registry)."""
        raise NotImplementedError

    @classmethod
    def _default(cls, name: str):
        raise NotImplementedError

    def _canonical(self, name: str, value):
        raise NotImplementedError

    def _check_values(self) -> None:
        pass

    def __getattr__(self, name: str):
        # only reached for a name not set at construction: a knob registered since takes its default
        if not name.startswith("_") and name in type(self).field_names():
            return type(self)._default(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def field_values(self) -> tuple:
        """Every field's value, in :meth:`field_names` order."""
        d = self.__dict__   # (a knob registered after this record was made: getattr gives its default)
        return tuple([d[n] if n in d else getattr(self, n) for n in self.field_names()])

    def __eq__(self, o):
        if o.__class__ is not self.__class__:
            return NotImplemented
        return self.field_values() == o.field_values()

    def __hash__(self):
        # cached (schedules key the kernel caches), and recomputed once the registry changes
        cached = self.__dict__.get("_hash")
        if cached is None or cached[0] is not knobs():
            cached = (knobs(), hash(self.field_values()))
            object.__setattr__(self, "_hash", cached)
        return cached[1]

    def __getstate__(self):
        # string hashes differ between processes: a pickle carries the values only
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def replace(self, **kw):
        """A copy with some fields changed (as ``dataclasses.replace``)."""
        return type(self)(**dict(zip(self.field_names(), self.field_values()), **kw))


class StageSchedule(_KnobValues):
    """Per-stage overrides, addressed by stage name (``Schedule(stages={"rowmax": ...})``).

    - ``place``: "auto", "fuse" (computed in the consumer's kernel: once per program when its free
      axes are all in the program's tile, recomputed inside the consumer's loops otherwise) or
      "materialize" (a kernel of its own, its result written to global memory first) or "atomic"
      (a sum materialised by fp32 atomic partial sums added inside the loop of the kernel holding
      its operands: :mod:`dtriton.plan.loop_stores`).
    - ``tile``/``grid``/``group``/``strategy``/``num_warps``/``num_stages``/``precision``/``persistent``/
      ``flat_axes`` (the knobs of scope "stage"): used for the stage's own kernel when it has one; unset fields (None or empty)
      inherit from the enclosing :class:`Schedule`.

    Positional order: ``place`` then the stage knobs in registry order.
    """

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return ("place",) + names("stage")

    @classmethod
    def _default(cls, name: str):
        return "auto" if name == "place" else knob(name).stage_default

    def _canonical(self, name: str, value):
        return value if name == "place" else _normalise(knob(name), value)

    def _check_values(self) -> None:
        if self.place not in STAGE_PLACES:
            raise ScheduleError(f"stage place {self.place!r} is not one of {STAGE_PLACES}")

    def to_dict(self) -> dict:
        """A JSON-ready dict of the fields that are set (a non-"auto" place, non-empty maps, values
        not None)."""
        d: dict[str, Any] = {}
        for name in self.field_names():
            v = getattr(self, name)
            if isinstance(v, FrozenMap):
                if len(v):
                    d[name] = dict(v)
            elif v is not None and not (name == "place" and v == "auto"):
                d[name] = list(v) if isinstance(v, tuple) else v
        return d

    @staticmethod
    def from_dict(d: Mapping) -> "StageSchedule":
        """The inverse of :meth:`to_dict`. Raises :class:`UnknownFieldError` for a key that is not
        a field."""
        d = dict(d)
        if "grid" in d and d["grid"] is not None:
            d["grid"] = tuple(d["grid"])
        return StageSchedule(**d)

    def __repr__(self):
        return f"StageSchedule({', '.join(f'{n}={getattr(self, n)!r}' for n in self.field_names())})"


class Schedule(_KnobValues):
    """How an algorithm runs. Every field is optional; unset fields are filled by the heuristic.

    The fields are the registered knobs (:func:`dtriton.schedule.knobs.knobs`, in this order;
    the docs' knob table, docs/knobs.md, lists them); the built-in ones:

    Args:
        tile: block size per axis name, powers of two (``{"i": 64, "j": 64, "k": 32}``).
        grid: axes mapped to program ids, outermost first; the last varies fastest. Output axes
            left off the grid are covered by a tile in a loop, or whole (``strategy``).
        group: ``{"i": 8}``: grouped launch order over the last two grid axes (GROUP_SIZE_M in
            Triton's matmul tutorial), so programs that share input tiles run together (L2 reuse).
            It is given for the second-to-last grid axis (the one it swizzles).
        split: split factor per reduction axis (split-K): the axis is divided across programs
            and the partial results combined by atomics or a second pass (``split_mode``).
        strategy: per axis, one of :data:`~.knobs.STRATEGIES`, for axes covered inside a program:
            reduced axes, and output axes off the grid ("online" only for reduced axes).
        num_warps, num_stages: Triton launch options (warps per program; software-pipeline depth).
        acc_dtype: accumulation dtype, "float32" (default) or "float64".
        precision: dot precision for fp32 operands. "auto" (default): "tf32x3" on tensor cores
            where the call's layout suits them (one operand reads the reduced axis at unit stride,
            as ``X @ W.T`` and ``X @ W`` do), else "ieee"; either way the error stays at fp32's
            (measured against float64: bench/probe_fp32.py). "ieee": FMA units, as torch's
            default. "tf32": one tensor-core pass on 10-bit mantissas (relative error ~1e-3, as
            torch with TF32 allowed). "tf32x3": each operand split into a tf32 part and its
            remainder, three tensor-core passes (~2^-22 per product; NaN of the correction terms
            masked, so inf and NaN propagate as in fp32). "bf16x6": a three-way bf16 split, six
            passes (fp32 accuracy); "bf16x3": three passes (~1e-5).
        split_mode: "atomic" (fp32 atomics into a zeroed buffer), "partials" (per-split buffer,
            combined by each consumer: deterministic) or "finish" (per-split buffer that a small
            finishing kernel combines once, in split order, into the final values the consumers
            read: deterministic, one more launch; for statistics read by many programs) or "last"
            (the same fold, in the same order, run by the last program of each tile of the split
            kernel to arrive, counted by an int32 atomic: finish's values, one launch less), or None
            (default): the heuristic picks "partials" for the reductions it splits across
            programs ("finish" when the programs reading them would fold many partials in all:
            :data:`~dtriton.schedule.split_rules.FINISH_FOLDS`), and a split max/min always uses
            per-split buffers, so do column-reduction splits where no output is fp32 or fp64 (as
            "last", whose last programs then store the outputs: one kernel); other splits use
            atomics. A call that splits nothing warns (a ScheduleWarning).
        stages: per-stage overrides, ``{stage_name: StageSchedule}`` (dicts are accepted).
        eviction: L2 cache hint per input tensor, ``{"X": "evict_first"}`` for data read once
            (streams), ``"evict_last"`` for data re-read by other programs (Triton's
            ``eviction_policy`` of ``tl.load``).
        persistent: 0 (one program per tile), or k >= 1: launch k programs per SM (4 on the
            interpreter) and let each loop over output tiles (the persistent kernels of Triton's
            Hopper matmul tutorials), which saves launch and tail costs when tiles are many. A stage may
            set its own (``stages={"sum0": {"persistent": 1}}``: a chain's GEMM kernel, not its row
            kernel). The heuristic makes wide 16-bit GEMMs persistent (:mod:`dtriton.plan.persistent`).
        access: memory-access style of tile loads and output stores, one of :data:`~.knobs.ACCESS`,
            or None (default): the heuristic picks "tma" for 16-bit contractions of at least 2^35
            multiply-adds (4096x4096x2048) on Hopper-class GPUs (compute capability 9.0+) when every
            input tile of the call is TMA-addressable and ``eviction`` gives none of them a hint,
            "pointer" otherwise (a call with TMA descriptors costs the host about 6-15 us more, H200).
            "pointer": address blocks and masks; "block_ptr" (``tl.make_block_ptr`` +
            ``boundary_check``) or "tma" (Hopper TMA tensor descriptors built on the host
            per call, ``triton.tools.tensor_descriptor.TensorDescriptor``, passed as kernel
            arguments; Triton's persistent-matmul tutorial). Applies to
            tensors indexed by plain axes with at least two tiled dims; a tensor of a call that
            TMA cannot address (last stride not 1, rows or base not 16-byte aligned, a stride-0
            dim, bool, empty) keeps pointers. TMA loads take no ``eviction`` hint.
        warp_specialize: split each contraction loop into producer (loads) and consumer (MMA)
            warp groups (``tl.range(..., warp_specialize=True)``; Triton's automatic warp
            specialisation, Hopper and newer, best with ``access="tma"``).
        mask_bounds: True (default): a loop whose reductions are the identity outside a mask
            condition on its axis (``where(j <= i, s, -inf)``, ``where(k <= i, A, 0) * B``, ``j <
            lengths[b]``) visits, per program, only the tiles where the condition can hold, and
            runs the tiles where it holds on every lane without it. False: every tile, masked.
        tile_order: "auto" (default), "forward" or "reverse": programs take their tiles in program
            id order or in reverse ("auto": the plan's choice, program-id order; on the H200,
            causal attention with the query axis outermost and reversed, grid=("i", "b", "h"),
            was 15% faster at S1024 D64 and 20% slower at S4096 D128, so exploration tries it).
        fuse_outputs: True (default): multi-output kernels. Materialised reductions over the same
            axes with the same kept axes, kernel schedule and kind of buffer are computed by one kernel
            (layer norm's dw and db: one pass over the rows, two accumulators, two stores); an output
            over a subset of another output's axes joins that output's kernel when each of its
            programs computes it once (a layer norm returning mean and rstd beside y). False: one
            kernel per materialised reduction and per output layout.
        descriptors: "auto" (default), "host" or "device": where the TMA descriptors of
            ``access="tma"`` tiles are built. "host": once per call, passed as kernel arguments;
            "device": ``tl.make_tensor_descriptor`` at the start of each program (a fence and 128
            bytes of global scratch per program); "auto": device in kernels with a
            warp-specialised loop (on Hopper, Triton 3.6 splits the consumers' tiles between two
            warp groups only with in-kernel descriptors, and fails to compile or does not
            specialise with host ones), host elsewhere.
        rolling: True: a window sum over an output row axis (``X.pad(0)[n, h + r - 1, w + q - 1, c] *
            Wt[r, q, c]`` summed over ``(r, q)``) walks the program's rows of ``h`` once: each input row is
            loaded once per other tap and added into the accumulators of the output rows it feeds
            (:mod:`dtriton.plan.taps`); False: each tap reads its own shifted tile; None (default):
            the heuristic picks.
        store_pieces: 0 (default: the plan picks), 1 or 2: in a persistent kernel whose tile loop
            is flattened with its contraction loop (:mod:`dtriton.plan.persistent`), each TMA output
            tile is stored in this many pieces along its last dim ("epilogue subtiling": the store's
            shared-memory buffer, live beside the pipeline's in a flattened loop, is that much
            smaller). "0" stores tiles whose last dim is 128 or more in two halves.
        window_loads: "pairs" (default) or "taps": a pooling window of stride 2, 4 or 8 on the call
            (``X.pad(-inf)[n, h * s + r - p, w * s + q - p]`` over unrolled taps) reads the taps that
            share a run of ``s`` contiguous columns with one load of the run, split in registers
            (:mod:`dtriton.plan.pairs`); "taps": one strided load per tap.
        narrow_minmax: True (default): a pooling window's max or min of one fp16/bf16 input folds in
            that dtype (exact; NaN propagates as in torch); False: in the compute dtype.

    Raises :class:`ScheduleError` for a value outside its knob's domain (a tile that is not a
    power of two, a bad strategy name, non-positive warps/stages, ...; also for the per-stage
    values), and :class:`UnknownFieldError` (also a ``TypeError``) for a keyword that is not a
    field (``tiles=``). Checks against an algorithm (unknown axes, split of a non-reduction axis,
    knobs that would be ignored, ...) are done by :meth:`validate`.
    """

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return names()

    @classmethod
    def _default(cls, name: str):
        return knob(name).default

    def _canonical(self, name: str, value):
        k = knob(name)
        if k.kind != "per_stage":
            return _normalise(k, value)
        st = {}
        for s, v in _fm(value, name).items():
            if isinstance(v, StageSchedule):
                st[s] = v
            elif isinstance(v, Mapping):
                try:
                    st[s] = StageSchedule.from_dict(v)
                except UnknownFieldError as e:
                    raise UnknownFieldError(f"stages[{s!r}]: {e}") from None
            else:
                raise ScheduleError(f"stages[{s!r}] must be a StageSchedule or dict, got {type(v).__name__}")
        return FrozenMap(st)

    def _check_values(self) -> None:
        """Every value against its knob's domain, the stages' overrides too (``stages['s'].tile``)."""
        for k in knobs():
            if k.kind not in ("flat", "per_axis", "per_tensor"):
                continue
            owners = [(k.name, getattr(self, k.name))]
            if k.scope == "stage":   # a stage's unset value (None) inherits the schedule's
                owners += [(f"stages[{s!r}].{k.name}", getattr(ss, k.name)) for s, ss in self.stages.items()
                           if getattr(ss, k.name) is not None]
            for what, v in owners:
                if k.kind == "flat":
                    _check(k, what, v)
                else:
                    for a, x in v.items():
                        _check(k, f"{what}[{a!r}]", x)

    # -- the knobs by role ------------------------------------------------------------------------
    def flat_values(self) -> dict[str, Any]:
        """Name -> value of every registered flat knob (``num_warps``, ``precision``, ...)."""
        return {k.name: getattr(self, k.name) for k in flat_knobs()}

    def launch_options(self, stage: str | None = None) -> dict[str, Any]:
        """The launch options (knobs with ``launch=True``) of the schedule's kernels, or of stage
        ``stage``'s own kernel (its overrides, else the schedule's values)."""
        ss = self.stages.get(stage) if stage is not None else None
        out = {}
        for k in launch_knobs():
            v = getattr(ss, k.name) if ss is not None and k.scope == "stage" else None
            out[k.name] = getattr(self, k.name) if v is None else v
        return out

    def launch_key(self) -> tuple:
        """What the launch options add to a kernel's source as its identity: the schedule's launch
        values, then ``(stage, its overrides...)`` per stage in name order. Two candidates with the
        same source and launch key run the same (exploration's duplicate detection)."""
        per_stage = [k.name for k in launch_knobs() if k.scope == "stage"]
        return tuple(getattr(self, k.name) for k in launch_knobs()) + tuple(sorted(
            (s,) + tuple(getattr(ss, n) for n in per_stage) for s, ss in self.stages.items()))

    # ------------------------------------------------------------------------------------------
    def validate(self, alg) -> None:
        """Check this schedule against an algorithm. Raises :class:`ScheduleError` naming the field,
        axis or stage, what was expected and the way out, for:

        - an axis, stage or tensor the algorithm does not have; a grid that repeats an axis;
        - a grid axis that no output has (a reduction axis such as matmul's ``k``: the grid maps
          output axes to programs; ``split`` divides a sum across programs);
        - a split of a non-reduction axis;
        - a group on an axis off the grid, or a group > 1 on a grid axis other than the
          second-to-last (grouped launch order swizzles that axis only), also per stage;
        - a strategy for an axis that no stage reduces while every kernel maps it to program ids
          (it is on the grid), or "online" for an axis that no stage reduces, also per stage;
        - a tile that no kernel can use: its axis is "whole" (one block of the padded size) in
          the kernels the tile applies to and none of them puts it on a grid
          (:meth:`unused_tiles`);
        - a ``place`` other than "auto" for an output stage (an output always has a kernel of its
          own and writes its tensor);
        - an output axis neither on the grid, tiled nor whole.
        """
        self._check_names(alg)
        self._check_grid_and_split(alg)
        self._check_groups(alg)
        self._check_strategies(alg)
        self._check_unused_tiles(alg)
        self._check_places(alg)
        self._check_outputs_covered(alg)

    def _check_names(self, alg) -> None:
        """Axes, tensors and stages that the algorithm has; a grid without repeats."""
        known = set(alg.axis_names)
        klist = sorted(known)

        def check_axes(what, names):
            for a in names:
                if a not in known:
                    raise ScheduleError(
                        f"{what} names axis {a!r}, which {alg.name} does not have; its axes are {klist}")

        check_axes("tile", self.tile)
        check_axes("strategy", self.strategy)
        check_axes("group", self.group)
        check_axes("split", self.split)
        if self.grid is not None:
            check_axes("grid", self.grid)
            if len(set(self.grid)) != len(self.grid):
                raise ScheduleError(f"grid {self.grid} repeats an axis")
        tensors = [p.name for p in alg.tensor_params]
        for t in self.eviction:
            if t not in tensors:
                raise ScheduleError(f"eviction names tensor {t!r}, which is not an input of {alg.name} (inputs: {tensors})")
        for s, ss in self.stages.items():
            if s not in alg.stages:
                raise ScheduleError(f"stages names stage {s!r}, which {alg.name} does not have; its stages are "
                                    f"{list(alg.stages)}")
            check_axes(f"stages[{s!r}].tile", ss.tile)
            check_axes(f"stages[{s!r}].strategy", ss.strategy)
            check_axes(f"stages[{s!r}].group", ss.group)
            if ss.grid is not None:
                check_axes(f"stages[{s!r}].grid", ss.grid)

    def _check_grid_and_split(self, alg) -> None:
        """Grid axes are output axes (the grid maps output axes to programs; nothing else reads
        it); split axes are reduction axes."""
        red = set(alg.reduction_axes)
        reducers = {a: reduction_stages(alg, a) for a in red}
        out_axes = {a for o in alg.outputs for a in o.layout}
        outs = ", ".join(f"{o.name}[{', '.join(o.layout)}]" for o in alg.outputs)
        for a in self.grid or ():
            if a not in out_axes:
                by = reducers.get(a, [])
                why = f"{a!r} is reduced by stage {by[0].name!r}" if by else f"{a!r} is not an output axis"
                if by and splittable(alg, a):
                    why += f"; to divide that reduction across programs use split={{{a!r}: 4}} (split-K)"
                raise ScheduleError(
                    f"grid names axis {a!r}, which no output of {alg.name} has (outputs: {outs}), so no kernel "
                    f"would map it to program ids and it would be ignored; {why}. Take {a!r} off the grid "
                    f"(grid={tuple(x for x in self.grid if x != a)})")
        for a, s in self.split.items():
            if a not in red:
                raise ScheduleError(
                    f"split[{a!r}]: axis {a!r} is not a reduction axis of {alg.name} (reduction axes: "
                    f"{sorted(red)}); only a reduced axis can be split across programs")

    def _check_groups(self, alg) -> None:
        """Grouped launch order: the second-to-last axis of a kernel's grid (codegen's swizzle)."""
        for a, g in self.group.items():
            if self.grid is not None and a not in self.grid:
                raise ScheduleError(f"group[{a!r}]: axis {a!r} is not on the grid {self.grid}; group the "
                                    f"second-to-last grid axis, or drop group")
            if self.grid is not None and g > 1:
                self._check_group("group", a, g, self.grid, "the grid", "grid")
        for s, ss in self.stages.items():
            sg = self.stage_grid(alg, s)
            for a, g in ss.group.items():
                if sg is not None and g > 1:
                    self._check_group(f"stages[{s!r}].group", a, g, sg, f"the grid of the kernel of stage {s!r}",
                                      f"stages[{s!r}].grid")

    def _check_strategies(self, alg) -> None:
        """Strategies that some kernel can use: "online" on a reduced axis, none on a grid axis."""
        red = set(alg.reduction_axes)
        excluded = {a for s, ss in self.stages.items() if ss.grid is not None
                    for a in alg.stages[s].free_axes if a not in ss.grid}
        for what, strat, sg, owner in [("strategy", self.strategy, self.grid, "the grid")] + [
                (f"stages[{s!r}].strategy", ss.strategy, self.stage_grid(alg, s), f"the grid of the kernel of stage {s!r}")
                for s, ss in self.stages.items()]:
            for a, v in strat.items():
                if v == "online" and a not in red:
                    raise ScheduleError(
                        f"{what}[{a!r}] = 'online': the online strategy is one running pass over a reduced axis "
                        f"(a running max with rescaled sums), and no stage of {alg.name} reduces {a!r}; use 'loop' "
                        f"(tiles in a loop) or 'whole' (one block)")
                on_grid = sg is not None and a in sg and (what != "strategy" or a not in excluded)
                if v != "auto" and on_grid and (a not in red or what != "strategy"):
                    rest = tuple(x for x in sg if x != a)
                    raise ScheduleError(
                        f"{what}[{a!r}] = {v!r}: axis {a!r} is on {owner} {tuple(sg)}, so each program takes "
                        f"one tile of it and the strategy would be ignored; take {a!r} off that grid "
                        f"({'grid' if what == 'strategy' else what.replace('.strategy', '.grid')}={rest}) to cover it "
                        f"inside each program, or drop {what}[{a!r}]")

    def _check_unused_tiles(self, alg) -> None:
        for s, a, t in self.unused_tiles(alg):
            what = "tile" if s is None else f"stages[{s!r}].tile"
            sw = "strategy" if s is None or a not in self.stages[s].strategy else f"stages[{s!r}].strategy"
            raise ScheduleError(
                f"{what}[{a!r}] = {t} would be ignored: {sw}[{a!r}] = 'whole' covers axis {a!r} with one block "
                f"of its padded size, and no kernel it applies to puts {a!r} on a grid; drop {what}[{a!r}], or "
                f"use {sw}={{{a!r}: 'loop'}} to step over {a!r} in tiles of {t}")

    def _check_places(self, alg) -> None:
        for s, ss in self.stages.items():
            if alg.stages[s].is_output and ss.place != "auto":
                reds = [n for n, st in alg.stages.items() if not st.is_output]
                raise ScheduleError(
                    f"stages[{s!r}].place = {ss.place!r}: {s!r} is an output stage of {alg.name}, which always runs "
                    f"in a kernel of its own and writes its tensor; place applies to reduction stages "
                    f"({reds if reds else 'it has none'}). Remove place from stages[{s!r}]")

    def _check_outputs_covered(self, alg) -> None:
        """The main grid must map or tile every output axis of the outputs it covers."""
        if self.grid is None:
            return
        for o in alg.outputs:
            ss = self.stages.get(o.name)
            grid = ss.grid if ss and ss.grid is not None else self.grid
            tiles = dict(self.tile, **(dict(ss.tile) if ss else {}))
            strat = dict(self.strategy, **(dict(ss.strategy) if ss else {}))
            for a in o.layout:
                if a not in grid and a not in tiles and strat.get(a, "auto") != "whole":
                    raise ScheduleError(
                        f"output {o.name}[{', '.join(o.layout)}]: axis {a!r} is neither on the grid {grid} nor tiled; "
                        f"add {a!r} to grid, give tile={{{a!r}: ...}} to loop over it, or strategy={{{a!r}: 'whole'}}")

    @staticmethod
    def _check_group(what: str, a: str, g: int, grid: tuple, owner: str, grid_field: str) -> None:
        """A group > 1 swizzles the second-to-last axis of ``grid`` only (codegen's grouped order);
        ``grid_field`` is the schedule field that sets that grid, for the hint."""
        grid = tuple(grid)
        if len(grid) < 2:
            raise ScheduleError(
                f"{what}[{a!r}] = {g}: grouped launch order reorders the last two axes of a grid, and {owner} "
                f"{grid} has {len(grid)}; map a second axis to programs, or drop the group")
        if a != grid[-2]:
            others = [x for x in grid if x != a]
            order = tuple(others[:-1] + [a] + others[-1:])
            raise ScheduleError(
                f"{what}[{a!r}] = {g}: grouped launch order applies to the second-to-last axis of {owner} "
                f"{grid}, which is {grid[-2]!r}, so a group on {a!r} would be ignored; use "
                f"{what}={{{grid[-2]!r}: {g}}}, or {grid_field}={order}")

    def advice(self, alg) -> list[str]:
        """Valid choices that are probably not meant (``dt.compile`` turns each into a
        :class:`~dtriton.ScheduleWarning`): a grid that puts a reduced axis on program ids, so
        the reductions over it that an output reads cannot be fused into its kernel and run as
        kernels of their own (not said for stages whose ``place`` is given, nor for split ones,
        which have kernels of their own anyway, nor where no grid axis would be left). One note
        per output. A schedule that sets its launch options (``num_warps`` and ``num_stages``, as
        every complete schedule does: the heuristic's, or one ``dt.explore`` measured) gets none:
        its grid was chosen, not guessed."""
        notes = []
        if self.num_warps is not None and self.num_stages is not None:
            return notes
        for o in alg.outputs:
            grid = self.stage_grid(alg, o.name)
            if grid is None:
                continue
            moved = [r for r in reduces_in([o.expr], frozenset()) if set(r.over) & set(grid)
                     and self.stage(r.name).place == "auto" and all(self.split.get(x, 1) == 1 for x in r.over)]
            if not moved:
                continue
            moved.sort(key=lambda r: list(alg.stages).index(r.name))
            axes = [a for a in grid if any(a in r.over for r in moved)]
            if len(axes) == len(grid):
                continue   # every grid axis is reduced: there is no fused plan with a grid to point to
            ax = ", ".join(repr(a) for a in axes)
            names = ", ".join(repr(r.name) for r in moved)
            places = ", ".join(f"{r.name!r}: {{'place': 'materialize'}}" for r in moved)
            many = len(moved) > 1
            notes.append(
                f"the grid {tuple(grid)} of output {o.name} maps {'axes' if len(axes) > 1 else 'axis'} {ax} to "
                f"program ids, but {'stages' if many else 'stage'} {names} {'reduce' if many else 'reduces'} over "
                f"{'them' if len(axes) > 1 else 'it'}: no program sees all of {ax}, so "
                f"{'they run in kernels of their' if many else 'it runs in a kernel of its'} own that "
                f"{'write' if many else 'writes'} to memory, read back by the output's kernel (more launches and "
                f"traffic than one fused kernel). Take {ax} off the grid "
                f"(grid={tuple(x for x in grid if x not in axes)}) to fuse {'them' if many else 'it'}, or give "
                f"stages={{{places}}} to keep this plan without the warning")
        return notes

    def stage_grid(self, alg, name: str) -> tuple[str, ...] | None:
        """The grid of stage ``name``'s own kernel (:func:`dtriton.ir.stage_grid`, as lowering
        computes it), or None while it is not known (an output stage without a grid of its own
        under a schedule whose grid the heuristic has yet to choose). A reduction stage's kernel
        maps all its free axes."""
        return stage_grid(alg, name, self.grid, self.stage(name).grid)

    def unused_tiles(self, alg) -> list[tuple[str | None, str, int]]:
        """Tiles that no kernel can use, as ``(stage or None for the global tile, axis, tile)``: the
        axis is "whole" (covered by one block of its padded size, whatever the tile) in every
        kernel the tile applies to, and none of those kernels puts the axis on a grid (where a tile
        sets the block per program). :meth:`validate` rejects them; the heuristic and
        ``dt.explore`` drop those they would fill in themselves (:meth:`without_unused_tiles`).

        Axes that some kernel may map to program ids count as used: the grid (while the grid is
        left to the heuristic: the output axes that a stage reduces), every stage's own grid, and
        the free axes of every reduction stage (its kernel's grid when it is materialised)."""
        maybe = grid_candidates(alg, self.grid, [ss.grid for ss in self.stages.values()])
        out: list[tuple[str | None, str, int]] = []
        for a, t in self.tile.items():
            if self.strategy.get(a) != "whole" or a in maybe or self.split.get(a, 1) > 1:
                continue   # (a split axis is stepped over in tiles whatever its strategy)
            # a stage that loops over a without a tile of its own steps in the global tile
            if any(ss.strategy.get(a, "whole") != "whole" and a not in ss.tile for ss in self.stages.values()):
                continue
            out.append((None, a, t))
        for s, ss in self.stages.items():
            if s not in alg.stages:
                continue
            sg = self.stage_grid(alg, s)
            for a, t in ss.tile.items():
                if (ss.strategy.get(a, self.strategy.get(a)) == "whole" and sg is not None and a not in sg
                        and self.split.get(a, 1) == 1):
                    out.append((s, a, t))
        return out

    def without_unused_tiles(self, alg, keep: "Schedule | None" = None) -> "Schedule":
        """A copy without the tiles of :meth:`unused_tiles`, except those ``keep`` gives too (a
        user's own tiles, which :meth:`validate` reports instead of dropping)."""
        drop = [(s, a) for s, a, _ in self.unused_tiles(alg)
                if keep is None or (a not in keep.tile if s is None else a not in keep.stage(s).tile)]
        if not drop:
            return self
        tile = {a: t for a, t in self.tile.items() if (None, a) not in drop}
        stages = {s: ss.replace(tile={a: t for a, t in ss.tile.items() if (s, a) not in drop})
                  for s, ss in self.stages.items()}
        return self.replace(tile=tile, stages={s: ss for s, ss in stages.items() if ss != StageSchedule()})


    # ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-ready dict with only the fields that differ from the defaults."""
        d: dict[str, Any] = {}
        for k in knobs():
            v = getattr(self, k.name)
            if v == k.default:
                continue
            if k.kind == "per_stage":
                d[k.name] = {s: ss.to_dict() for s, ss in v.items()}
            elif isinstance(v, FrozenMap):
                d[k.name] = dict(v)
            elif isinstance(v, tuple):
                d[k.name] = list(v)
            else:
                d[k.name] = v
        return d

    def to_json(self) -> str:
        """Serialise; :meth:`from_json` gives back an equal schedule."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def from_dict(d: Mapping) -> "Schedule":
        """The inverse of :meth:`to_dict`. Raises :class:`UnknownFieldError` for a key that is not
        a field."""
        d = dict(d)
        names = Schedule.field_names()
        bad = [k for k in d if k not in names]
        if bad:
            raise UnknownFieldError("unknown schedule field(s): " + unknown_fields_message("Schedule", bad, names))
        if d.get("grid") is not None:
            d["grid"] = tuple(d["grid"])
        if "stages" in d:
            d["stages"] = {k: StageSchedule.from_dict(v) for k, v in d["stages"].items()}
        return Schedule(**d)

    @staticmethod
    def from_json(s: str) -> "Schedule":
        """The inverse of :meth:`to_json`. Raises :class:`ScheduleError` for text that is not a JSON
        object, :class:`UnknownFieldError` for a field that is not a knob."""
        try:
            d = json.loads(s)
        except (TypeError, ValueError) as e:
            raise ScheduleError(f"a schedule's JSON does not parse ({e}); expected an object such as "
                                '{"tile": {"i": 64}, "num_warps": 4}') from e
        if not isinstance(d, dict):
            raise ScheduleError(f"a schedule's JSON must be an object of fields such as "
                                f'{{"tile": {{"i": 64}}}}, got {type(d).__name__} {d!r}')
        return Schedule.from_dict(d)

    def stage(self, name: str) -> StageSchedule:
        """The overrides for stage ``name`` (empty when none were given)."""
        return self.stages.get(name, StageSchedule())

    def __repr__(self):
        return f"Schedule({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"


# no knob may shadow a method or attribute of the schedule classes
reserve_names({"place"} | {n for cls in (Schedule, StageSchedule) for n in dir(cls) if not n.startswith("_")})
