"""Temporary shim: the names ``dtriton.language`` exported before the IR moved to :mod:`dtriton.ir`
and the builders to :mod:`dtriton.dsl`. Modules still importing from here keep working until they
move; the shim is then removed. Add nothing here."""

from .dsl import (Tensor, abs, algorithm, axes, cast, exp, log, max, maximum, mean, min, minimum,  # noqa: A004
                  rsqrt, sigmoid, sqrt, sum, tanh, where)
from .ir import (BINARY_OPS, COMPARE_OPS, FLOAT_DTYPES, INDEX_DTYPES, UNARY_OPS, Algorithm, Axis, Binary, Binding,
                 Cast, Const, Expr, InputTensor, Load, Output, Reduce, ScalarParam, Stage, Unary, Where,
                 compute_dtype, evaluate, expr_axes, kernel_f64, result_dtype, topo_order)
from .ir import float_inputs as _float_inputs
from .ir import fmt as _fmt_expr

__all__ = [
    "Axis", "axes", "Tensor", "Expr", "algorithm", "Algorithm",
    "sum", "max", "min", "mean", "where", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid",
    "abs", "maximum", "minimum", "cast",
]
