"""dtriton: Decoupled Triton.

Write the *algorithm* in index notation and the *schedule* as a plain value; dtriton lowers the
pair to readable Triton source, compiles it, and launches it (on the GPU, or through Triton's
interpreter on a machine without one).

    import dtriton as dt

    @dt.algorithm
    def matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
        i, j, k = dt.axes("i j k")
        return dt.sum(A[i, k] * B[k, j], over=k)[i, j]

    kernel = dt.compile(matmul, dt.Schedule(tile={"i": 64, "j": 64, "k": 32}, grid=("i", "j")))
"""

from .errors import (AlgorithmError, CompileError, DTritonError, DTypeError, IndexRangeError, IntegerOpError, MethodError,
                     ResourceError, ScheduleError, ScheduleWarning, ShapeError, UnknownFieldError, ZeroDivisorError)
from .ir import Algorithm, Axis
from . import dsl
from .dsl import *  # noqa: F401,F403 - every builder in dsl.__all__ (a new builder needs no edit here)
from .schedule import FrozenMap, Schedule, StageSchedule
from .runtime import Kernel
from .grad import GradientAlgorithms, grad
from .integrations import as_torch_op, differentiable
from .tune import BenchmarkResult, ExploreResult, Space, benchmark, explore
from .api import compile, compile_autograd, native_steps

from .version import __version__

__all__ = [
    "AlgorithmError", "CompileError", "DTritonError", "DTypeError", "IndexRangeError", "IntegerOpError", "MethodError",
    "ResourceError", "ScheduleError", "ScheduleWarning", "ShapeError", "UnknownFieldError", "ZeroDivisorError",
    *dsl.__all__,
    "FrozenMap", "Schedule", "StageSchedule", "Kernel", "compile",
    "grad", "GradientAlgorithms", "differentiable", "compile_autograd", "native_steps", "as_torch_op",
    "explore", "Space", "ExploreResult", "benchmark", "BenchmarkResult",
]
