"""The compile facade: ``dt.compile`` (a schedule, ``None`` or ``"tuned"``) and ``dt.compile_autograd``.

It sits above the runtime, the integrations and tuning, so none of them needs to import another
to offer these entry points (the runtime knows nothing of tuned kernels or autograd).
"""

from __future__ import annotations

import warnings

from .errors import ScheduleWarning
from .backends.triton import native as _native
from .integrations.autograd import DifferentiableKernel, check_options
from .ir import Algorithm
from .runtime import Kernel
from .schedule import Schedule
from .tune.tuned import TunedKernel

__all__ = ["compile", "compile_autograd", "native_steps"]


def compile(alg: Algorithm, schedule: Schedule | str | None = None, *,  # noqa: A001
            check_indices: bool | None = None) -> Kernel | TunedKernel:
    """Compile an algorithm under a schedule.

    Args:
        alg: an ``@dt.algorithm``.
        schedule: a :class:`Schedule` (fields left unset are filled per call shape by the
            heuristic), ``None`` for the heuristic alone, or ``"tuned"`` for the best schedule in
            the tuning database for each call's shapes (falling back to the heuristic).
        check_indices: check, before each launch, that every computed or gathered index the
            sizes alone do not prove inside its dim is inside it on the call's data (an
            :class:`~dtriton.IndexRangeError` otherwise), and that no integer ``//`` or ``%``
            divides by 0 (a :class:`~dtriton.ZeroDivisorError`). The interpreter always checks; on the
            GPU it costs a host synchronisation and the fast launch path, so it is off unless
            this is True or ``DTRITON_CHECK_INDICES=1``. The kernel itself is the same.

    Returns a :class:`~dtriton.Kernel` (a :class:`~dtriton.tune.tuned.TunedKernel` for
    ``"tuned"``); nothing is compiled until the first call (compilation is cached per
    specialisation, so new shapes with the same divisibility facts reuse the compiled kernel).

    Raises :class:`ScheduleError` when the schedule does not fit the algorithm, ``TypeError`` for
    a string other than ``"tuned"`` or a value that is not a schedule. Warns
    (:class:`ScheduleWarning`) for a valid schedule that is probably not meant
    (:meth:`Schedule.advice`: a reduced axis on the grid).
    """
    if isinstance(schedule, str):
        if schedule != "tuned":
            hint = ("; for a schedule's JSON text use dt.Schedule.from_json(text)" if schedule.lstrip().startswith("{")
                    else "; leave it out (or None) for the heuristic's schedule")
            raise TypeError(f"schedule must be a dt.Schedule, None or 'tuned', got {schedule!r}{hint}")
        if check_indices is not None:
            raise TypeError("check_indices applies to dt.compile(alg, schedule); a tuned kernel reads "
                            "DTRITON_CHECK_INDICES=1 instead")
        return TunedKernel(alg)
    if isinstance(schedule, dict):
        raise TypeError(f"schedule must be a dt.Schedule, None or 'tuned', got a dict; build one with "
                        f"dt.Schedule(**{schedule!r})")
    kern = Kernel(alg, schedule, check_indices)
    for note in schedule.advice(alg) if schedule is not None else ():
        warnings.warn(f"{alg.name}: {note}", ScheduleWarning, stacklevel=2)
    return kern


#: the keyword options of :class:`~dtriton.integrations.autograd.DifferentiableKernel`


def compile_autograd(alg: Algorithm, schedule: Schedule | str | None = None, **kw) -> DifferentiableKernel:
    """``differentiable(dt.compile(alg, schedule), **kw)``: compile and make differentiable (options
    as for :class:`~dtriton.integrations.autograd.DifferentiableKernel`: ``backward_schedules``,
    ``save``, ``group``, ``native``).

    Raises:
        TypeError: ``alg`` is a compiled kernel (use ``dt.differentiable(kernel)``), or an option
            is none of those (the message names the closest).
    """
    if isinstance(alg, (Kernel, TunedKernel, DifferentiableKernel)):
        raise TypeError(f"compile_autograd expects an @dt.algorithm, got a compiled {type(alg).__name__}: "
                        f"dt.differentiable(kernel) makes a compiled kernel differentiable"
                        + (" (this one already is)" if isinstance(alg, DifferentiableKernel) else ""))
    check_options(f"compile_autograd({getattr(alg, 'name', alg)})", kw)
    return DifferentiableKernel(compile(alg, schedule), **kw)


def native_steps(flag: bool | None = None) -> bool:
    """Whether differentiable kernels run their steady-state training steps as C++ autograd nodes
    (``compile_autograd(native=None)``, the default; see :class:`~dtriton.integrations.autograd.DifferentiableKernel`).

    Args:
        flag: ``True`` or ``False`` sets it for the process (steps already native stay so);
            ``None`` only reads it. On by default; ``DTRITON_NATIVE_STEPS=0`` turns it off at import.

    Returns:
        The setting after the call (bool).

    Raises:
        TypeError: ``flag`` is not a bool or None.
    """
    if flag is not None:
        if not isinstance(flag, bool):
            raise TypeError(f"native_steps(flag): expected True, False or None, got {flag!r}")
        _native.set_enabled(flag)
    return _native.enabled()
