"""Temporary shim: lowering moved to :mod:`dtriton.plan` (``plan/lower.py``, ``plan/kernel.py``).

Re-exports the names other modules, tests and scripts import from here; removed once they import
from :mod:`dtriton.plan`.
"""

from .plan.kernel import AxisPlan, BufferSpec, KernelIR, KernelPlan, Program, StoreSpec, next_pow2
from .plan.lower import lower

__all__ = ["AxisPlan", "BufferSpec", "KernelIR", "KernelPlan", "Program", "StoreSpec", "lower", "next_pow2"]
