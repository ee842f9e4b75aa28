"""The algorithm IR: expression nodes, reduction combiners, graph walks, traced algorithms and the
eager reference evaluator.

Layering inside the package (each module imports only those before it): ``combiners`` (reduction
kinds as data) <- ``expr`` (nodes, ``fmt``) <- ``walk`` (the graph walks), ``layouts`` (the layout and
permute hints of a size error) <- ``requires`` (argument constraints, ``dt.requires``) <- ``intervals`` (integer
ranges of index expressions, which reads may fall outside a dim) <- ``reference`` (``Binding``, dtype rules, the evaluator),
``bounds`` (the ranges of an axis a mask leaves) <- ``algorithm`` (tracing, CSE, stage names) <- ``analysis``
(contractions, online candidates, split legality, stage grids) <- ``convolution`` (the sides and
flat order of contractions over several axes) <- ``rewrite`` (named algebraic rewrites the
plan applies: the single-pass variance).
The user-facing builders (``dt.sum``, ``dt.exp``, ...) live in :mod:`dtriton.dsl`.
"""

from .combiners import COMBINERS, Combiner, get as get_combiner, register as register_combiner
from .expr import (BINARY_OPS, COMPARE_OPS, FP8_DTYPES, INT_OPS, SATURATING_DTYPES, UNARY_OPS, Axis, Binary, Cast, Const, Expr, InputTensor, Load,
                   Output, PaddedTensor, Reduce, ScalarParam, Unary, Where, as_expr, fmt)
from .requires import Requirement, attach_requires, check_requires, requires_message
from .walk import contains, expr_axes, float_inputs, mul_factors, reduces_in, topo_order, walk
from .bounds import AxisBounds, axis_bounds, guard, reduction_guard
from .intervals import Interval, Read, analyse_reads, int_magnitude, integer_valued, interval, kernel_reads, never_negative
from .reference import (BOOL_OPS, FLOAT_DTYPES, INDEX_DTYPES, Binding, boolean_ops, check_reads, compute_dtype, evaluate, integer_reductions, is_index,
                        kernel_f64,
                        numpy_item, output_dtype, output_dtypes, unit_dim)
from .dtypes import pad_value
from .algorithm import Algorithm, Stage, TensorAnnotation, cse, merge_named
from .analysis import (can_split, contraction_operands, contractions, grid_candidates, is_sum, online_candidate, reads_unit_stride,
                       reduction_stages, split_blockers, splittable, stage_grid, sum_of_products, tensor_core_sides)
from .convolution import affine_index, contraction_sides, convolutions, poly_value, reduced_order, shift_of
from .rewrite import (base2_exponents, base2_shifted_exponents, common_divisors, folded_literals, naive_variance_of, reciprocal_divisors,
                      shift_exponential, single_pass_variance, variance_of)

__all__ = [
    "unit_dim",
    "Requirement", "attach_requires", "check_requires", "requires_message",
    "reads_unit_stride", "tensor_core_sides", "contraction_operands",
    "COMBINERS", "Combiner", "get_combiner", "register_combiner",
    "BINARY_OPS", "COMPARE_OPS", "UNARY_OPS", "Axis", "Binary", "Cast", "Const", "Expr", "InputTensor", "Load",
    "Output", "Reduce", "ScalarParam", "Unary", "Where", "as_expr", "fmt",
    "AxisBounds", "axis_bounds", "guard", "integer_valued", "reduction_guard",
    "contains", "expr_axes", "float_inputs", "mul_factors", "reduces_in", "topo_order", "walk",
    "Interval", "Read", "analyse_reads", "int_magnitude", "interval", "kernel_reads", "never_negative", "check_reads",
    "INT_OPS", "PaddedTensor", "FP8_DTYPES", "SATURATING_DTYPES",
    "BOOL_OPS", "FLOAT_DTYPES", "INDEX_DTYPES", "Binding", "boolean_ops", "compute_dtype", "evaluate", "integer_reductions", "is_index", "kernel_f64",
    "output_dtype", "output_dtypes", "pad_value", "numpy_item",
    "Algorithm", "Stage", "TensorAnnotation", "cse", "merge_named",
    "can_split", "is_sum", "contractions", "grid_candidates", "online_candidate", "reduction_stages", "split_blockers", "splittable",
    "stage_grid", "sum_of_products",
    "affine_index", "contraction_sides", "convolutions", "poly_value", "reduced_order", "shift_of",
    "base2_exponents", "base2_shifted_exponents", "common_divisors", "folded_literals", "naive_variance_of", "reciprocal_divisors", "shift_exponential",
    "single_pass_variance", "variance_of",
]
