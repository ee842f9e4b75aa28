"""Checking ``backward_schedules=`` (:class:`~dtriton.integrations.autograd.DifferentiableKernel`):
its type, its keys (tensor input names or the names :func:`dtriton.grad` gives backward
algorithms), its values (schedules, schedule dicts or None)."""

from __future__ import annotations

import difflib
from typing import Mapping, Sequence

from ..errors import DTritonError, ScheduleError, article
from ..grad import grad
from ..ir import Algorithm, InputTensor
from ..schedule import Schedule

__all__ = ["check_backward_schedules"]

_FORMATS = ("one dt.Schedule for every backward kernel, a dict {input name or backward algorithm name: "
            "dt.Schedule | schedule dict | None}, or a callable (backward_algorithm) -> dt.Schedule | None")


def _is_backward_name(alg: Algorithm, key: str, inputs: Sequence[str]) -> bool:
    """Whether ``key`` is a name :func:`dtriton.grad` can give a backward algorithm of ``alg``:
    ``{alg.name}_grad_`` then tensor input names joined by ``_`` (some grouping of the inputs)."""
    rest = key.removeprefix(f"{alg.name}_grad_")
    if rest == key:
        return False
    ends = {0}
    for i in range(len(rest) + 1):
        if i in ends:
            ends |= {i + len(n) + 1 for n in inputs if rest.startswith(n, i)}
    return len(rest) + 1 in ends


def _unknown_key(alg: Algorithm, key, inputs: Sequence[str], group: str) -> ScheduleError:
    """The error for a ``backward_schedules`` key that names neither a tensor input nor a backward
    algorithm: the valid keys, the names ``dt.grad(alg)`` gives its algorithms (derived here, on
    the error path only), and the closest key when one is close."""
    try:
        printed = [a.name for a in grad(alg, group=group).algorithms]
    except DTritonError:   # not differentiable: name the pattern
        printed = []
    names = printed or [f"{alg.name}_grad_{n}" for n in inputs]
    close = difflib.get_close_matches(str(key), inputs + names, n=1, cutoff=0.6)
    if not close:
        close = [n for n in inputs if n.lower() == str(key).lower()]
    hint = f" Did you mean {close[0]!r}?" if close else ""
    what = (f"the backward algorithm names dt.grad({alg.name}) prints ({', '.join(repr(n) for n in printed)}; "
            f"with fewer inputs needing a gradient, {alg.name}_grad_ followed by those inputs joined by '_')"
            if printed else f"the backward algorithm names that dt.grad({alg.name}) prints (such as "
                            f"{', '.join(repr(n) for n in names)})")
    return ScheduleError(
        f"backward_schedules of {alg.name}: unknown key {key!r}.{hint} Valid keys are the tensor input names "
        f"{list(inputs)} (the schedule of the kernel computing that input's gradient) or {what}; forward stage "
        f"names are not keys: schedule a backward algorithm's stages inside its Schedule(stages=...)")


def check_backward_schedules(alg: Algorithm, spec, group: str = "auto"):
    """``spec`` (a ``backward_schedules=`` argument) checked against ``alg``, dict values converted
    to :class:`Schedule`. Raises :class:`~dtriton.errors.ScheduleError` naming the key or type at
    fault (for an unknown key: the valid ones, ``dt.grad``'s names for ``group``, the closest)."""
    if spec is None or isinstance(spec, Schedule) or (callable(spec) and not isinstance(spec, Mapping)):
        return spec
    if not isinstance(spec, Mapping):
        kind = type(spec).__name__
        raise ScheduleError(f"backward_schedules of {alg.name}: got {article(kind)} {kind} ({spec!r:.80}); "
                            f"expected {_FORMATS}")
    inputs = [p.name for p in alg.params if isinstance(p, InputTensor)]
    out = {}
    for key, val in spec.items():
        if not isinstance(key, str) or not (key in inputs or _is_backward_name(alg, key, inputs)):
            raise _unknown_key(alg, key, inputs, group)
        if isinstance(val, Mapping):
            try:
                val = Schedule.from_dict(val)
            except ScheduleError as e:   # name the entry: the schedule's own error does not know it
                raise type(e)(f"backward_schedules[{key!r}] of {alg.name}: {e}") from None
        elif val is not None and not isinstance(val, Schedule):
            kind = type(val).__name__
            raise ScheduleError(f"backward_schedules[{key!r}] of {alg.name}: got {article(kind)} {kind} "
                                f"({val!r:.80}); expected a dt.Schedule, a schedule dict or None")
        out[key] = val
    return out
