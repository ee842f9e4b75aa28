"""Running one algorithm for :class:`~dtriton.integrations.autograd.DifferentiableKernel`: a
:class:`Runner` (a compiled kernel per precision class), and the forwards a differentiable kernel
runs when it saves statistics for its backward (:func:`saving_forward`, :func:`lean_forward`)."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..errors import AlgorithmError, ScheduleError
from ..grad import augmented_forward, saved_outputs, saved_statistics
from ..ir import Algorithm
from ..runtime import Kernel
from ..schedule import Schedule

__all__ = ["Runner", "seeded_outputs", "has_fp64", "saving_forward", "lean_forward"]


class Runner:
    """Runs one algorithm: a compiled kernel per precision class (float64 inputs or not)."""

    def __init__(self, alg: Algorithm, schedule: Schedule | None, kernel=None, fp64_own: bool = False,
                 origin: str = ""):
        """``kernel``: the compiled kernel to run (for calls with float64 inputs too, unless
        ``fp64_own``: those then get their own kernel, as without ``kernel``). ``origin``: where a
        user's ``schedule`` came from (``backward_schedules``), named first in its ScheduleErrors."""
        self.alg = alg
        self.schedule = schedule
        self.origin = origin
        self._kernels: dict[bool, Any] = {}
        self.last = None   # the kernel of the most recent call
        if kernel is not None:
            self._kernels[False] = kernel
            if not fp64_own:
                self._kernels[True] = kernel

    def kernel(self, fp64: bool):
        """The kernel for calls with (``fp64``) or without float64 inputs; without a schedule, the
        float64 one accumulates in float64."""
        k = self._kernels.get(fp64)
        if k is None:
            sched = self.schedule
            if sched is None and fp64:
                sched = Schedule(acc_dtype="float64")
            k = self._kernels[fp64] = Kernel(self.alg, sched)
        return k

    def __call__(self, *args, fp64: bool | None = None) -> tuple[torch.Tensor, ...]:
        """Run on ``args``; ``fp64``: whether a tensor argument is float64 (found out when None)."""
        if fp64 is None:
            fp64 = has_fp64(args)
        try:
            self.last = self.kernel(fp64)
            r = self.last(*args)
        except ScheduleError as e:   # a user's backward schedule: say where it came from
            if self.origin and e.args and isinstance(e.args[0], str) and not e.args[0].startswith(self.origin):
                e.args = (f"{self.origin}: {e.args[0]}",) + e.args[1:]
            raise
        return r if isinstance(r, tuple) else (r,)


def seeded_outputs(grads: Sequence[torch.Tensor | None]) -> tuple[int, ...] | None:
    """The indices of the outputs that have an upstream gradient (``grads``: one per output, None
    where autograd gives none), or None when every output has one."""
    if all(g is not None for g in grads):
        return None
    return tuple(k for k, g in enumerate(grads) if g is not None)


def has_fp64(args) -> bool:
    """Whether a tensor among ``args`` is float64 (such calls accumulate in float64)."""
    return any(isinstance(a, torch.Tensor) and a.dtype == torch.float64 for a in args)



def saving_forward(alg: Algorithm, sched: Schedule | None, save) -> tuple[Runner, tuple[str, ...]] | None:
    """The forward that also outputs the stages ``save`` names (``"auto"``: the statistics the
    backward of every input reads, :func:`~dtriton.grad.saved_statistics`), and their names; None
    to recompute them in the backward. Under ``"auto"`` a kernel schedule that does not apply to
    the saving forward keeps the plain forward. A tuned kernel's saving forward gets the heuristic
    schedule here; per call, the schedule the tuned kernel chose (``DifferentiableKernel._saves``)."""
    if save is None:
        return None
    if save == "auto":
        try:
            names = saved_statistics(alg)
        except AlgorithmError:   # not differentiable: the forward runs as it is; a backward raises then
            return None
        if not names:
            return None
        aug, names = augmented_forward(alg, names)
    else:
        aug, names = augmented_forward(alg, save)
    if sched is not None and not isinstance(sched, Schedule):   # a tuned kernel's schedule name
        sched = None
    if sched is not None:
        try:
            sched.validate(aug)
        except ScheduleError:
            if save == "auto":
                return None
            sched = None
    return Runner(aug, sched), names


def lean_forward(alg: Algorithm, sched, names: Sequence[str], kernel) -> tuple[Runner, tuple[int, ...], dict[int, int]] | None:
    """For saved stages ``names`` some of which are outputs of ``alg`` (:func:`~dtriton.grad.saved_outputs`):
    ``(runner, pick, copies)``, the forward that outputs only the other saved values after ``alg``'s
    outputs (``kernel`` itself, through its runner, when there are none), per saved value its index among
    that forward's results, and the saved outputs (position in ``names`` -> output index). Used on calls
    whose outputs already have the copies' dtypes (:meth:`DifferentiableKernel._saves`): the backward
    reads the outputs themselves, and the forward writes each once. None when no saved stage is an output."""
    copies = saved_outputs(alg, names)
    if not copies:
        return None
    n = len(alg.outputs)
    rest = [s for k, s in enumerate(names) if k not in copies]
    own = sched if isinstance(sched, Schedule) else None   # (a tuned kernel's schedule name: the heuristic)
    if rest:
        aug, got = augmented_forward(alg, rest)
        if tuple(got) != tuple(rest):   # pragma: no cover - explicit names come back as given
            return None
        if own is not None:
            try:
                own.validate(aug)
            except ScheduleError:
                own = None
        runner = Runner(aug, own)
    else:   # the kernel itself for calls without float64 inputs; float64 ones as the saving forward runs them
        runner = Runner(alg, own, kernel, fp64_own=True)
    later = iter(range(n, n + len(rest)))
    pick = tuple(copies[k] if k in copies else next(later) for k in range(len(names)))
    return runner, pick, copies
