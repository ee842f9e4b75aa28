"""Programmatic dependent launch: a call's kernels start before the kernel launched ahead of them ends.

On sm_90 and later a kernel launched with CUDA's programmatic stream serialization attribute may
begin once every program of the kernel before it in the stream has executed
``griddepcontrol.launch_dependents`` (or ended): its programs are placed on the SMs the earlier
kernel's last wave leaves free, and the launch latency between the two kernels overlaps that wave.
Such a kernel must not touch memory the earlier kernel writes before ``griddepcontrol.wait``, which
returns once that kernel has ended and its writes are visible.

:func:`plan_dependent_launch` decides, per kernel of a program, the two facts the printer and the
launcher read:

- :attr:`~dtriton.plan.kernel.KernelPlan.dependent_launch`: launched with the attribute, the
  kernel's first statement is ``tl.extra.cuda.gdc_wait()``, before any load or store. Every such
  kernel waits before it does anything, so by induction over the stream, when a kernel passes its
  wait every kernel launched before it (ours, torch's, anyone's) has ended: reading any tensor,
  writing any allocation the caching allocator handed back, and arrival counters left zero by the
  kernel before are as safe as with plain stream order.
- :attr:`~dtriton.plan.kernel.KernelPlan.launch_dependents`: the kernel's programs signal
  ``tl.extra.cuda.gdc_launch_dependents()`` first, so the next kernel may launch as soon as the
  last of them has started (without it the next launch waits for this kernel's programs to end).

The wait is on for every Triton-printed kernel of a call on a GPU of compute capability 9.0 or later
unless the schedule's ``dependent_launch`` is False, the signal only in those that launch at most
:data:`MAX_PROGRAMS` programs (a signal in every program of a many-program kernel cost more than the
overlap gains); neither on Triton's interpreter (which has no grid-dependency control) nor for a
Gluon kernel (launched without the attribute, as Triton's Gluon kernels are: the kernel after it
waits all the same).
"""

from __future__ import annotations

from .kernel import Program

__all__ = ["MAX_PROGRAMS", "MIN_ARCH", "plan_dependent_launch"]

#: The compute capability (10 * major + minor) from which CUDA has programmatic dependent launch.
MIN_ARCH = 90
#: The most programs a kernel that signals first thing may have on any call it serves (its tiles over
#: the call specialisation's size buckets). H200, s15 (CUDA-graph replay of whole calls): with every
#: program of every kernel signalling (call 1), the norms' many-program output kernels ran 15-18% slower
#: (Frobenius 16x64x256x256 fp16 118.0 us against 99.5 launched plainly, batch norm 64x64x512x512 fp32
#: 3475.7 against 2954.4) and a 3x3/s2 max pool's 262144 programs fp16 at 317.8 (call 2); waiting
#: without signalling cost nothing (call 2: Frobenius fp16 98.2, layer norm (C, H, W) fp16 106.0 against
#: 106.7 plainly). With this bound (call 3) Frobenius fp16 98.6 against 99.5 plainly, the max pool 175.3
#: against 175.5, and the diffusion layer's training step, whose kernels have 8 to 3126 programs, 98.73
#: against 101.72 us at V 20000 and 37.32 against 40.12 at V 2000.
MAX_PROGRAMS = 4096
#: Whether the kernels signal ``gdc_launch_dependents`` first thing (True), or leave the next launch
#: to their programs' ends (False: the implicit signal).
SIGNAL_FIRST = True


def plan_dependent_launch(prog: Program, requested: bool | None, arch: int, interpret: bool) -> None:
    """Set :attr:`~dtriton.plan.kernel.KernelPlan.dependent_launch` and
    :attr:`~dtriton.plan.kernel.KernelPlan.launch_dependents` on every kernel of ``prog``, and
    :attr:`~dtriton.plan.kernel.Program.launch_note` (why not) where the schedule asks for it
    (``requested`` True) and no kernel gets it.

    Args:
        prog: the planned program (Gluon kernels already marked).
        requested: the schedule's ``dependent_launch`` (None: on where the target has it).
        arch: the GPU's compute capability as 10 * major + minor (0: the interpreter or no GPU).
        interpret: the kernels run on Triton's interpreter.
    """
    on = requested is not False and not interpret and arch >= MIN_ARCH
    for k in prog.kernels:
        k.dependent_launch = on and k.gluon is None
        # (the programs bounded over the size buckets of every call the kernel serves)
        bound = k.launch_programs(k.size_buckets) if k.dependent_launch and SIGNAL_FIRST else None
        k.launch_dependents = bound is not None and bound <= MAX_PROGRAMS
    if requested is not True or any(k.dependent_launch for k in prog.kernels):
        return
    if interpret:
        why = "Triton's interpreter runs this call (it has no grid-dependency control)"
    elif arch < MIN_ARCH:
        why = (f"the GPU's compute capability is {arch // 10}.{arch % 10}; programmatic dependent launch needs "
               f"{MIN_ARCH // 10}.{MIN_ARCH % 10} or later")
    else:
        why = "this call's kernels are Gluon kernels, launched without it"
    prog.launch_note = f"dependent_launch=True has no effect: {why}"

