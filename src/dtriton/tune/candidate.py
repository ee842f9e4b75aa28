"""The records of an exploration: :class:`Candidate` (one row of :attr:`ExploreResult.table`),
:class:`Options` (:func:`~dtriton.tune.explorer.explore`'s settings) with :func:`check_call` (its
checks of the call), and :func:`src_hash` (what makes two candidates the same kernel)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from ..ir import Algorithm
from ..schedule import Schedule
from .samplers import PENALTY
from .space import Space

__all__ = ["Candidate", "Options", "src_hash", "ROW_KEYS", "params_json", "check_call"]


def src_hash(src: str, sched: Schedule) -> str:
    """Identity of what a candidate runs: its source (minus comments and the schedule line) and
    its launch options (:meth:`Schedule.launch_key`: every knob with ``launch=True``, the stages'
    overrides too), which are not part of the source. A knob that is not a launch option acts only
    through the plan, so it shows in the source when it changes anything: candidates that differ
    only in such a knob and print the same source run the same kernels, and are duplicates. (Hashing
    :meth:`Schedule.flat_values` instead would keep them apart and time the same kernels twice.)"""
    lines = []
    for ln in src.splitlines():   # comments do not change what runs (e.g. "warp_specialize off: ...")
        code = re.sub(r"\s*#.*$", "", ln)
        if code.strip() and not ln.startswith("Schedule:"):
            lines.append(code)
    return hashlib.sha256(("\n".join(lines) + repr(sched.launch_key())).encode()).hexdigest()


def params_json(point: Mapping) -> dict:
    """A point with grids as lists (JSON-ready)."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in point.items()}


#: the keys of a table row, in the order of :meth:`Candidate.to_dict`
ROW_KEYS = ("id", "origin", "params", "schedule", "schedule_json", "status", "reason", "median_us", "p20_us",
            "p80_us", "rel_err", "compile_s", "elapsed_s", "remeasured", "stored")


@dataclass(eq=False)
class Candidate:
    """One candidate of an exploration (a row of :attr:`ExploreResult.table`; see its docstring
    for the fields). ``kernel`` holds the compiled kernel of an "ok" candidate while the search
    runs (for the final re-measurement); it is not part of the row."""
    id: int
    origin: str
    params: dict
    schedule: Schedule | None
    schedule_json: str | None
    status: str | None = None
    reason: str = ""
    median_us: float | None = None
    p20_us: float | None = None
    p80_us: float | None = None
    rel_err: float | None = None
    compile_s: float | None = None
    elapsed_s: float | None = None
    remeasured: bool = False
    stored: bool = False
    search_median_us: float | None = None
    kernel: Any = field(default=None, repr=False)

    def update(self, **values) -> None:
        """Set fields by name (the keys of a measurement's result dict). Raises ``KeyError`` for
        a name that is not a row field."""
        for k, v in values.items():
            if k not in ROW_KEYS and k != "search_median_us":
                raise KeyError(f"a candidate has no field {k!r}")
            setattr(self, k, v)

    def value(self) -> float:
        """What the sampler is told: the median time of an "ok" candidate, else :data:`PENALTY`."""
        return self.median_us if self.status == "ok" and self.median_us is not None else PENALTY

    def to_dict(self) -> dict:
        """The table row: :data:`ROW_KEYS`, then ``search_median_us`` for a re-measured candidate."""
        d = {k: getattr(self, k) for k in ROW_KEYS}
        if self.remeasured:
            d["search_median_us"] = self.search_median_us
        return d


@dataclass(frozen=True)
class Options:
    """The settings of one exploration: :func:`explore`'s keyword arguments (same names and
    meanings; ``candidate_factory`` is its ``_candidate_factory``, ``(alg, schedule) -> kernel``)."""
    budget: float = 60.0
    strategy: str = "auto"
    max_trials: int | None = None
    patience: int | None = None
    seed: int = 0
    deterministic: bool = False
    top_k: int = 3
    rtol: float | None = None
    out: Any = None
    db: Any = None
    store: bool | str | None = None
    compile_workers: int | None = None
    compile_timeout: float = 120.0
    warmup_ms: float = 10.0
    rep_ms: float = 50.0
    progress: bool = True
    warm_start: bool = True
    timing: str = "cold"
    isolate: bool | None = None
    candidate_factory: Callable[[Algorithm, Schedule | None], Any] | None = None


def check_call(alg, args, space, budget, strategy) -> tuple[tuple, Space | None, torch.device]:
    """:func:`~dtriton.tune.explorer.explore`'s checks before anything is built or run: ``(args as a
    tuple, the user's space checked against alg or None, the call's device)``.

    Raises ``TypeError`` (not an algorithm, a space that is no Space or dict), ``ValueError`` (a
    negative or non-number budget, an unknown strategy), :class:`~dtriton.ShapeError` (arguments
    that do not fit the signature) and :class:`~dtriton.ScheduleError` (a space that does not fit)."""
    if not isinstance(alg, Algorithm):
        raise TypeError(f"dt.explore expects an @dt.algorithm, got {type(alg).__name__}")
    if isinstance(args, torch.Tensor) or not isinstance(args, (tuple, list)):
        args = (args,)
    args = tuple(args)
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget < 0:
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
    return args, sp, b_user.device
