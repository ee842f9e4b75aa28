"""Temporary shim: the Triton printer moved to :mod:`dtriton.backends.triton`.

Re-exports the names other modules, tests and scripts import from here; removed once they import
from the backend (and :func:`generate` callers use :func:`dtriton.plan.decide.decide` plus the
backend's ``render``).
"""

from __future__ import annotations

from .backends.triton.kernel import KernelPrinter, KernelSource, render
from .backends.triton.prelude import HEADER, TL_DTYPES, fmt
from .plan.decide import decide
from .plan.kernel import Program

__all__ = ["HEADER", "KernelGen", "KernelPrinter", "KernelSource", "TL_DTYPES", "fmt", "generate", "render"]

#: The printer's former name.
KernelGen = KernelPrinter


def generate(prog: Program, alg, sched, dtypes, out_dtypes, interpret: bool, i64: bool, spec_note: str = "",
             tma_ok: frozenset = frozenset(), hints: dict | None = None) -> tuple[str, list[KernelSource]]:
    """Decide (:func:`dtriton.plan.decide.decide`) and print a lowered program: the entry point
    before the plan was complete. ``tma_ok`` names the tensors (inputs and outputs) a TMA
    descriptor may address on this specialisation; ``hints`` maps integer arguments
    (``size_<axis>``, ``<tensor>_s<dim>``) to a power of two they are a multiple of."""
    decide(prog, sched, dtypes, out_dtypes, interpret, i64, tma_ok, hints, spec_note)
    return render(prog)
