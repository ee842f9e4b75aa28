"""Error messages: every user mistake raises a dt.DTritonError subclass whose text names the
argument, size symbol, axis or stage at fault (never a raw Triton traceback).
"""

from __future__ import annotations

import pytest
import torch

import dtriton as dt

from conftest import attention, colsum, matmul, rowmax, softmax


def _raises(exc_type, pattern, fn, *args, **kw):
    """``fn(*args)`` raises ``exc_type`` (a DTritonError) matching ``pattern``, from dtriton's own
    code: not an exception Triton raised and dtriton let through."""
    with pytest.raises(exc_type, match=pattern) as info:
        fn(*args, **kw)
    e = info.value
    assert isinstance(e, dt.DTritonError), f"{type(e).__name__} is not a dt.DTritonError"
    assert type(e).__module__.startswith("dtriton"), type(e).__module__
    assert "Traceback" not in str(e) and "triton.compiler" not in str(e)
    return e


# ----------------------------------------------------------------------------------------------
# call-time arguments (ShapeError)
# ----------------------------------------------------------------------------------------------
def test_inconsistent_sizes_name_both_sources():
    kernel = dt.compile(matmul)
    A, B = torch.randn(300, 170), torch.randn(171, 200)
    _raises(dt.ShapeError, r"^K is 170 from A\.shape\[1\] but 171 from B\.shape\[0\]$", kernel, A, B)
    assert not kernel._plans  # nothing was compiled
    _raises(dt.ShapeError, r"K is 170 from A\.shape\[1\] but 171 from B\.shape\[0\]", matmul.reference, A, B)


def test_inconsistent_sizes_in_a_later_argument():
    @dt.algorithm
    def axpy(x: dt.Tensor["N"], y: dt.Tensor["N"], w: dt.Tensor["N"]):
        (i,) = dt.axes("i")
        return (x[i] * w[i] + y[i])[i]

    _raises(dt.ShapeError, r"N is 5 from x\.shape\[0\] but 6 from w\.shape\[0\]",
            dt.compile(axpy), torch.randn(5), torch.randn(5), torch.randn(6))


def test_wrong_number_of_dims():
    _raises(dt.ShapeError, r"argument 'A' of matmul must have 2 dims \['M', 'K'\], got 1 \(shape \(3,\)\)",
            dt.compile(matmul), torch.randn(3), torch.randn(3, 4))
    _raises(dt.ShapeError, r"argument 'B' of matmul must have 2 dims \['K', 'N'\], got 3",
            dt.compile(matmul), torch.randn(3, 3), torch.randn(3, 4, 1))


def test_wrong_number_of_arguments():
    _raises(dt.ShapeError, r"matmul takes 2 arguments \['A', 'B'\], got 1", dt.compile(matmul), torch.randn(3, 3))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_unsupported_dtype(dtype):
    A = torch.randn(3, 3, dtype=dtype)
    _raises(dt.ShapeError, rf"argument 'A' of matmul has unsupported dtype {dtype}", dt.compile(matmul), A, A)


def test_scalar_and_tensor_argument_kinds():
    q = torch.randn(1, 1, 2, 2)
    _raises(dt.ShapeError, r"argument 'scale' of attention is a scalar \(float\); got Tensor",
            dt.compile(attention), q, q, q, torch.tensor(0.5))
    _raises(dt.ShapeError, r"argument 'A' of matmul must be a torch\.Tensor with dims \['M', 'K'\], got list",
            dt.compile(matmul), [[1.0]], torch.randn(1, 1))


def test_out_with_wrong_shape_or_dtype():
    A, B = torch.randn(4, 8), torch.randn(8, 3)
    _raises(dt.ShapeError, r"out= for out must have shape \(4, 3\) and dtype torch\.float32, got \(3, 4\)",
            dt.compile(matmul), A, B, out=torch.empty(3, 4))
    _raises(dt.ShapeError, r"got \(4, 3\) torch\.float16", dt.compile(matmul), A, B,
            out=torch.empty(4, 3, dtype=torch.float16))


# ----------------------------------------------------------------------------------------------
# schedules (ScheduleError)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["tile", "strategy", "split", "group"])
def test_unknown_axis_in_a_schedule(field):
    value = {"tile": 16, "strategy": "loop", "split": 2, "group": 2}[field]
    _raises(dt.ScheduleError, rf"{field} names axis 'x', which matmul does not have; its axes are \['i', 'j', 'k'\]",
            dt.compile, matmul, dt.Schedule(**{field: {"x": value}}))


def test_unknown_axis_in_grid_and_stage_tile():
    _raises(dt.ScheduleError, r"grid names axis 'q'", dt.compile, matmul, dt.Schedule(grid=("i", "q")))
    _raises(dt.ScheduleError, r"stages\['sum0'\]\.tile names axis 'q'", dt.compile, matmul,
            dt.Schedule(stages={"sum0": {"tile": {"q": 4}}}))


@pytest.mark.parametrize("t,hint", [(48, "32 or 64"), (3, "2 or 4"), (0, "1 or 2"), (-4, "1 or 2"), (100, "64 or 128")])
def test_tile_not_a_power_of_two(t, hint):
    _raises(dt.ScheduleError, rf"tile\['i'\] = {t} is not a power of two.*\(try {hint}\)", dt.Schedule, tile={"i": t})


def test_stage_tile_not_a_power_of_two():
    _raises(dt.ScheduleError, r"stages\['sum0'\]\.tile\['k'\] = 24 is not a power of two", dt.Schedule,
            stages={"sum0": {"tile": {"k": 24}}})


def test_split_of_a_non_reduction_axis():
    _raises(dt.ScheduleError, r"split\['i'\]: axis 'i' is not a reduction axis of matmul \(reduction axes: \['k'\]\)",
            dt.compile, matmul, dt.Schedule(split={"i": 2}))


def test_split_of_a_max_stage():
    _raises(dt.ScheduleError, r"stage 'max0' is a max over \['j'\]; only sum/mean stages can be split",
            dt.compile(rowmax, dt.Schedule(split={"j": 2})), torch.randn(4, 8))


def test_split_stage_cannot_be_fused():
    _raises(dt.ScheduleError, r"stage 'sum0' is split over \['k'\] and must be materialised",
            dt.compile(matmul, dt.Schedule(split={"k": 2}, stages={"sum0": {"place": "fuse"}})),
            torch.randn(4, 8), torch.randn(8, 3))


def test_grid_leaving_an_output_axis_unmapped_and_untiled():
    _raises(dt.ScheduleError, r"output out\[i, j\]: axis 'j' is neither on the grid \('i',\) nor tiled",
            dt.compile, matmul, dt.Schedule(grid=("i",)))
    # any of the three fixes the message suggests is accepted
    for fix in (dict(grid=("i", "j")), dict(grid=("i",), tile={"j": 8}), dict(grid=("i",), strategy={"j": "whole"})):
        dt.compile(matmul, dt.Schedule(**fix))


def test_fusing_across_the_grid_is_rejected():
    _raises(dt.ScheduleError, r"stage 'max0' reduces over \['j'\], which the grid of the kernel for 'out' splits "
                              r"across programs; it cannot be fused there",
            dt.compile(softmax, dt.Schedule(grid=("i", "j"), tile={"i": 2, "j": 4}, stages={"max0": {"place": "fuse"}})),
            torch.randn(4, 8))


def test_other_schedule_mistakes():
    _raises(dt.ScheduleError, r"stages names stage 'foo', which matmul does not have; its stages are \['sum0', 'out'\]",
            dt.compile, matmul, dt.Schedule(stages={"foo": {"place": "fuse"}}))
    _raises(dt.ScheduleError, r"strategy\['k'\] = 'fast' is not one of", dt.Schedule, strategy={"k": "fast"})
    _raises(dt.ScheduleError, r"stage place 'gpu' is not one of", dt.Schedule, stages={"sum0": {"place": "gpu"}})
    _raises(dt.ScheduleError, r"num_warps = 3 must be a power of two", dt.Schedule, num_warps=3)
    _raises(dt.ScheduleError, r"num_stages = 0 must be an integer from 1 to 8", dt.Schedule, num_stages=0)
    _raises(dt.ScheduleError, r"split\['k'\] = 0 must be a positive integer", dt.Schedule, split={"k": 0})
    _raises(dt.ScheduleError, r"group\['k'\]: axis 'k' is not on the grid", dt.compile, matmul,
            dt.Schedule(grid=("i", "j"), group={"k": 2}))
    _raises(dt.ScheduleError, r"grid \('i', 'i'\) repeats an axis", dt.compile, matmul, dt.Schedule(grid=("i", "i")))
    _raises(dt.ScheduleError, r"acc_dtype = 'float16'", dt.Schedule, acc_dtype="float16")
    _raises(dt.ScheduleError, r"precision = 'bf16'", dt.Schedule, precision="bf16")
    _raises(dt.ScheduleError, r"split_mode = 'x'", dt.Schedule, split_mode="x")
    _raises(dt.ScheduleError, r"stages\['out'\]\.grid names \['k'\], which are not free axes of stage 'out'",
            dt.compile(matmul, dt.Schedule(stages={"out": {"grid": ("k",)}})), torch.randn(4, 8), torch.randn(8, 3))
    _raises(dt.ScheduleError, r"schedule field 'tile' must be a dict", dt.Schedule, tile=[("i", 4)])


def test_schedule_errors_are_value_errors_too():
    """Callers that catch ValueError keep working."""
    with pytest.raises(ValueError):
        dt.Schedule(tile={"i": 3})
    with pytest.raises(ValueError):
        dt.compile(matmul)(torch.randn(2, 3), torch.randn(4, 5))


def test_compile_type_errors():
    with pytest.raises(TypeError, match="dt.compile expects an @dt.algorithm"):
        dt.compile(lambda x: x)
    with pytest.raises(TypeError, match="schedule must be a dt.Schedule"):
        dt.compile(matmul, {"tile": {}})


def test_block_beyond_tritons_element_limit_is_refused_before_compiling():
    """A block beyond Triton's element limit (256 rows x 8192 whole columns) is refused up front as a
    dt.ScheduleError that names the stage, the blocks and the way out, not a Triton trace."""
    kernel = dt.compile(softmax, dt.Schedule(grid=("i",), tile={"i": 256}, strategy={"j": "whole"}))
    e = _raises(dt.ScheduleError, r"kernel for stage 'out' .*would be a block of 2097152 elements", kernel, torch.randn(4, 8000))
    assert "'j': 8192" in str(e) and "'loop'/'online'" in str(e)


def test_block_limit_counts_real_blocks_not_the_product_of_all_axes():
    """Fused attention at D=128 with 128-row tiles holds [i, d], [d, j] and [i, e] blocks; the
    [i, d, e] product is never formed (tl.dot contracts d), so the schedule is legal."""
    from dtriton.library import attention
    sched = dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": 128, "j": 64},
                        strategy={"j": "online", "d": "whole", "e": "whole"}, stages={"sum0": {"place": "fuse"}})
    Q = torch.empty(1, 1, 256, 128, device="meta")
    src = dt.compile(attention, sched).source_for(Q, Q, Q, 0.1)
    assert "tl.dot" in src


# ----------------------------------------------------------------------------------------------
# algorithm errors (AlgorithmError), raised while tracing
# ----------------------------------------------------------------------------------------------
def test_algorithm_output_leaving_an_axis_free():
    def trace():
        @dt.algorithm
        def bad(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            return dt.exp(X[i, j])[i]
    _raises(dt.AlgorithmError, r"output \[i\] leaves axis \['j'\] free; reduce it", trace)


def test_algorithm_axis_indexing_two_differently_named_dims():
    def trace():
        @dt.algorithm
        def bad(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
            i, k = dt.axes("i k")
            return dt.sum(A[i, k] * B[i, k], over=k)[i]
    _raises(dt.AlgorithmError, r"axis 'i' indexes dim 'K' of B but dim 'M' of A; use two axes", trace)


def test_colsum_reduces_over_rows_not_a_free_axis():
    """Sanity: the column sum from the issue is a legal algorithm (no error)."""
    assert colsum.outputs[0].layout == ("j",) and colsum.reduction_axes == ("i",)


def test_out_of_range_gather_index_is_a_shape_error_on_the_interpreter():
    """X[i, labels[i]] with a label == N would read past the row; the interpreter backend checks the
    index range first and names the index tensor, the gathered dim and the valid range."""
    from dtriton.library import cross_entropy
    X = torch.randn(5, 10)
    with pytest.raises(dt.ShapeError, match=r"gather index labels has values in \[0, 10\] .* dim 1 of X \(N = 10\)"):
        dt.compile(cross_entropy)(X, torch.tensor([0, 1, 2, 3, 10]))
    with pytest.raises(dt.ShapeError, match=r"\[-1, 3\]"):
        dt.compile(cross_entropy)(X, torch.tensor([0, 1, 2, 3, -1]))


# ----------------------------------------------------------------------------------------------
# found by a fresh user trying the README (stop 8)
# ----------------------------------------------------------------------------------------------
def test_torch_and_math_functions_on_expressions_point_to_dt_functions():
    import math
    with pytest.raises(dt.AlgorithmError, match=r"torch.exp cannot take a dtriton expression.*dt.exp"):
        @dt.algorithm
        def f(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            return torch.exp(X[i, j])[i, j]
    with pytest.raises(dt.AlgorithmError, match=r"not a Python number: use dt.exp"):
        @dt.algorithm
        def g(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            return math.exp(X[i, j])


def test_shifted_index_is_named_as_unsupported():
    with pytest.raises(dt.AlgorithmError, match=r"axis 'j' appears only inside an index expression .*not supported"):
        @dt.algorithm
        def f(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            return X[i, j + 1][i, j]


def test_int_scalar_rejects_a_fractional_float_and_gather_rejects_float_indices():
    @dt.algorithm
    def scaled(X: dt.Tensor["M", "N"], n: int):
        i, j = dt.axes("i j")
        return (X[i, j] * n)[i, j]
    X = torch.randn(3, 4)
    with pytest.raises(dt.ShapeError, match=r"'n' of scaled is declared int but got 2.5"):
        dt.compile(scaled)(X, 2.5)
    torch.testing.assert_close(dt.compile(scaled)(X, 3), 3 * X)
    from dtriton.library import cross_entropy
    with pytest.raises(dt.ShapeError, match=r"'labels' indexes dim 1 of X .* must be an integer tensor"):
        dt.compile(cross_entropy)(X, torch.tensor([0.0, 1.0, 2.0]))


def test_unknown_backend_variable_and_float_tile_are_refused(monkeypatch):
    with pytest.raises(dt.ScheduleError, match=r"tile\['i'\] = 16.0 must be an int"):
        dt.Schedule(tile={"i": 16.0})
    monkeypatch.setenv("DTRITON_BACKEND", "foo")
    with pytest.raises(dt.ShapeError, match=r"DTRITON_BACKEND='foo' is not understood"):
        dt.compile(softmax)(torch.randn(2, 3))
