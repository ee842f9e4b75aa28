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
    _raises(dt.ShapeError, r"^matmul: K is 170 from A\.shape\[1\] but 171 from B\.shape\[0\]; matmul reads A as \(M, K\), "
            r"got shape \(300, 170\), and B as \(K, N\), got shape \(171, 200\)$", kernel, A, B)
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
    _raises(dt.ShapeError, r"out= for output 'out' must have shape \(4, 3\) and dtype torch\.float32, got \(3, 4\)",
            dt.compile(matmul), A, B, out=torch.empty(3, 4))
    # a wrong dtype is a DTypeError (a ShapeError too, as it was): the output, both dtypes, the fix
    _raises(dt.DTypeError, r"out= for output 'out' has dtype torch\.float16, but matmul's output 'out' is "
            r"torch\.float32 .*torch\.empty\(\(4, 3\), dtype=torch\.float32\).*dt\.cast\(expr, torch\.float16\)",
            dt.compile(matmul), A, B, out=torch.empty(4, 3, dtype=torch.float16))
    assert issubclass(dt.DTypeError, dt.ShapeError) and issubclass(dt.DTypeError, TypeError)


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


@pytest.mark.parametrize("t,hint", [(48, "32 or 64"), (3, "2 or 4"), (100, "64 or 128")])
def test_tile_not_a_power_of_two(t, hint):
    _raises(dt.ScheduleError, rf"tile\['i'\] = {t} is not a power of two.*\(try {hint}\)", dt.Schedule, tile={"i": t})


def test_stage_tile_not_a_power_of_two():
    _raises(dt.ScheduleError, r"stages\['sum0'\]\.tile\['k'\] = 24 is not a power of two", dt.Schedule,
            stages={"sum0": {"tile": {"k": 24}}})


def test_split_of_a_non_reduction_axis():
    _raises(dt.ScheduleError, r"split\['i'\]: axis 'i' is not a reduction axis of matmul \(reduction axes: \['k'\]\)",
            dt.compile, matmul, dt.Schedule(split={"i": 2}))


@dt.algorithm
def rowargmax(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.argmax(X[i, j], over=j)[i]


def test_split_of_a_max_stage_with_atomics():
    _raises(dt.ScheduleError, r"stage 'max0' is a max split over \['j'\] with split_mode='atomic'; atomics add "
                              r"partial sums only. Use split_mode='partials'",
            dt.compile(rowmax, dt.Schedule(split={"j": 2}, split_mode="atomic")), torch.randn(4, 8))
    x = torch.randn(4, 8)
    torch.testing.assert_close(dt.compile(rowmax, dt.Schedule(split={"j": 2}))(x), x.amax(1))


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


def test_out_of_range_gather_index_is_an_index_range_error():
    """X[i, labels[i]] with a label == N (or -1) would read past the row: the reference and the
    interpreter raise dt.IndexRangeError (an IndexError, as the tutorial says), naming the tensor,
    the dim, the index expression, the bad value and where it is."""
    from dtriton.library import cross_entropy
    X = torch.randn(5, 10)
    for bad, at in ((10, 4), (-1, 2)):
        labels = torch.tensor([0, 1, 2, 3, 4])
        labels[at] = bad
        want = rf"reads outside dim 1 of X \(N = 10, indices 0..9\): the index labels\[i\] is {bad} at i = {at}"
        for call in (lambda: cross_entropy.reference(X, labels), lambda: dt.compile(cross_entropy)(X, labels),
                     lambda: dt.compile(cross_entropy, check_indices=True)(X, labels)):
            with pytest.raises(dt.IndexRangeError, match=want) as e:
                call()
            assert isinstance(e.value, IndexError)
    # several bad labels: the first one, how many and their range
    with pytest.raises(dt.IndexRangeError, match=r"labels\[i\] is 12 at i = 1 \(3 reads outside, values -1..12\)"):
        dt.compile(cross_entropy)(X, torch.tensor([0, 12, -1, 3, 10]))
    # a padded gather reads the pad instead: no error on any path
    @dt.algorithm
    def padded(X: dt.Tensor["M", "N"], L: dt.Tensor["M"]):
        i, = dt.axes("i")
        return X.pad(-7.0)[i, L[i]][i]
    labels = torch.tensor([0, 10, -1, 3, 9])
    want = torch.tensor([X[0, 0], -7.0, -7.0, X[3, 3], X[4, 9]])
    for got in (padded.reference(X, labels), dt.compile(padded)(X, labels)):
        torch.testing.assert_close(got, want)


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


def test_axis_used_only_in_a_shifted_index_needs_a_size():
    with pytest.raises(dt.AlgorithmError, match=r"axis 'j' appears only inside an index expression .*dt.axes\('j:N'\)"):
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
    with pytest.raises(dt.ShapeError, match=r"'n' of scaled is declared int but got the float 2\.5"):
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


# ----------------------------------------------------------------------------------------------
# found by a demanding user: schedule knobs that were silently ignored, bare Python exceptions
# ----------------------------------------------------------------------------------------------
MM = (torch.randn(8, 16), torch.randn(16, 8))


def _mm_ok(sched):
    k = dt.compile(matmul, sched)
    torch.testing.assert_close(k(*MM), MM[0] @ MM[1])
    return k


def test_reduction_axis_on_the_grid_is_refused():
    """matmul's k on the grid mapped nothing to programs (one program looped over the whole output)."""
    t = {"i": 8, "j": 8, "k": 8}
    for grid in (("k",), ("i", "j", "k")):
        e = _raises(dt.ScheduleError, r"grid names axis 'k', which no output of matmul has \(outputs: out\[i, j\]\), "
                                      r"so no kernel would map it to program ids", dt.compile, matmul,
                    dt.Schedule(grid=grid, tile=t))
        assert "reduced by stage 'sum0'" in str(e) and "split={'k': 4}" in str(e)
    # a max splits too (per-split partials): the hint names it
    e = _raises(dt.ScheduleError, r"grid names axis 'j', which no output of rowmax has", dt.compile, rowmax,
                dt.Schedule(grid=("i", "j"), tile={"i": 2, "j": 4}))
    assert "reduced by stage 'max0'" in str(e) and "split={'j': 4}" in str(e)
    # an arg-reduction cannot be split: no split-K hint there
    e = _raises(dt.ScheduleError, r"grid names axis 'j', which no output of rowargmax has", dt.compile, rowargmax,
                dt.Schedule(grid=("i", "j"), tile={"i": 2, "j": 4}))
    assert "reduced by stage 'argmax0'" in str(e) and "split" not in str(e)
    # an axis that is reduced and also kept in an output (softmax's j) may be on the grid
    dt.compile(softmax, dt.Schedule(grid=("i", "j"), tile={"i": 2, "j": 4}))


def test_group_applies_to_the_second_to_last_grid_axis_only():
    t = {"i": 4, "j": 4, "k": 8}
    _raises(dt.ScheduleError, r"group\['j'\] = 2: grouped launch order applies to the second-to-last axis of "
                              r"the grid \('i', 'j'\), which is 'i', so a group on 'j' would be ignored; use "
                              r"group=\{'i': 2\}, or grid=\('j', 'i'\)",
            dt.compile, matmul, dt.Schedule(grid=("i", "j"), group={"j": 2}, tile=t))
    _raises(dt.ScheduleError, r"group\['i'\] = 4: grouped launch order reorders the last two axes of a grid, and the "
                              r"grid \('i',\) has 1", dt.compile, matmul, dt.Schedule(grid=("i",), group={"i": 4}, tile=t))
    # without a grid, the check runs on the heuristic's complete schedule, at the call
    _raises(dt.ScheduleError, r"group\['j'\] = 2: .*use group=\{'i': 2\}", dt.compile(matmul, dt.Schedule(group={"j": 2})), *MM)
    # a stage's kernel: a materialised reduction maps its free axes (i, j)
    _raises(dt.ScheduleError, r"stages\['sum0'\]\.group\['j'\] = 2: grouped launch order applies to the second-to-last "
                              r"axis of the grid of the kernel of stage 'sum0' \('i', 'j'\), which is 'i', so a group "
                              r"on 'j' would be ignored; use stages\['sum0'\]\.group=\{'i': 2\}, or "
                              r"stages\['sum0'\]\.grid=\('j', 'i'\)", dt.compile, matmul,
            dt.Schedule(stages={"sum0": {"place": "materialize", "group": {"j": 2}}}))
    _raises(dt.ScheduleError, r"stages\['sum0'\]\.group names axis 'q'", dt.compile, matmul,
            dt.Schedule(stages={"sum0": {"group": {"q": 2}}}))
    # the legal spellings: a group on grid[-2], or group 1 (no grouping) anywhere on the grid
    _mm_ok(dt.Schedule(grid=("j", "i"), group={"j": 2}, tile=t))
    _mm_ok(dt.Schedule(grid=("i", "j"), group={"j": 1}, tile=t))


def test_strategy_of_an_output_axis_on_the_grid_is_refused():
    t = {"i": 4, "j": 4, "k": 8}
    _raises(dt.ScheduleError, r"strategy\['i'\] = 'whole': axis 'i' is on the grid \('i', 'j'\), so each program takes "
                              r"one tile of it and the strategy would be ignored; take 'i' off that grid \(grid=\('j',\)\)",
            dt.compile, matmul, dt.Schedule(grid=("i", "j"), strategy={"i": "whole"}, tile=t))
    _raises(dt.ScheduleError, r"stages\['out'\]\.strategy\['j'\] = 'loop': axis 'j' is on the grid of the kernel of "
                              r"stage 'out' \('i', 'j'\), .* take 'j' off that grid \(stages\['out'\]\.grid=\('i',\)\)",
            dt.compile, matmul,
            dt.Schedule(grid=("i", "j"), tile=t, stages={"out": {"strategy": {"j": "loop"}}}))
    # "online" is a way to reduce: refused for an axis no stage reduces
    _raises(dt.ScheduleError, r"strategy\['j'\] = 'online': the online strategy is one running pass over a reduced "
                              r"axis .* no stage of matmul reduces 'j'; use 'loop'", dt.compile, matmul,
            dt.Schedule(grid=("i",), strategy={"j": "online"}, tile=t))
    # with the grid left to the heuristic, the strategy is honoured: j stays off the grid
    k = _mm_ok(dt.Schedule(strategy={"j": "whole"}, tile={"i": 4, "k": 8}))
    full = k.schedule_for(*MM)
    assert full.grid == ("i",) and full.strategy["j"] == "whole"
    full = _mm_ok(dt.Schedule(strategy={"i": "loop", "j": "whole"})).schedule_for(*MM)
    assert full.grid == () and full.strategy["i"] == "loop"
    # a reduced axis on the grid keeps its strategy: the materialised reductions' kernels use it
    dt.compile(softmax, dt.Schedule(grid=("i", "j"), tile={"i": 2, "j": 4}, strategy={"j": "whole"}))


def test_place_of_an_output_stage_is_refused():
    for place in ("materialize", "fuse"):
        _raises(dt.ScheduleError, rf"stages\['out'\]\.place = '{place}': 'out' is an output stage of matmul, which "
                                  r"always runs in a kernel of its own and writes its tensor; place applies to "
                                  r"reduction stages \(\['sum0'\]\)", dt.compile, matmul,
                dt.Schedule(stages={"out": {"place": place}}))
    dt.compile(matmul, dt.Schedule(stages={"out": {"place": "auto"}, "sum0": {"place": "materialize"}}))


def test_split_mode_without_a_split_warns_at_the_call():
    with pytest.warns(dt.ScheduleWarning, match=r"matmul: split_mode='partials' has no effect: this call splits no "
                                                 r"reduction axis .*split=\{'k': 4\}"):
        _mm_ok(dt.Schedule(split_mode="partials"))
    with pytest.warns(dt.ScheduleWarning, match=r"rowmax: .*e\.g\. split=\{'j': 4\}"):
        dt.compile(rowmax, dt.Schedule(split_mode="partials"))(torch.randn(3, 5))
    with pytest.warns(dt.ScheduleWarning, match=r"rowargmax has no reduction to split"):
        dt.compile(rowargmax, dt.Schedule(split_mode="partials"))(torch.randn(3, 5))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        _mm_ok(dt.Schedule(split={"k": 2}, tile={"k": 8}, split_mode="partials"))   # tiles of 8: both slices get work
        quiet = dt.compile(matmul, dt.Schedule(split_mode="partials"))
        quiet.quiet = True   # explore's candidates
        quiet(*MM)


def test_tile_of_a_whole_axis_is_refused_not_overridden():
    X = torch.randn(4, 32)
    msg = (r"tile\['j'\] = 8 would be ignored: strategy\['j'\] = 'whole' covers axis 'j' with one block of its padded "
           r"size, and no kernel it applies to puts 'j' on a grid; drop tile\['j'\], or use strategy=\{'j': 'loop'\} "
           r"to step over 'j' in tiles of 8")
    _raises(dt.ScheduleError, msg, dt.compile, softmax, dt.Schedule(grid=("i",), tile={"i": 1, "j": 8}, strategy={"j": "whole"}))
    # grid left to the heuristic: known once the schedule is complete, at the call
    _raises(dt.ScheduleError, msg, dt.compile(softmax, dt.Schedule(tile={"j": 8}, strategy={"j": "whole"})), X)
    _raises(dt.ScheduleError, r"stages\['sum0'\]\.tile\['k'\] = 8 would be ignored: strategy\['k'\] = 'whole'",
            dt.compile, matmul, dt.Schedule(grid=("i", "j"), tile={"i": 4, "j": 4}, strategy={"k": "whole"},
                                            stages={"sum0": {"tile": {"k": 8}}}))
    # a tile without a strategy is used: the heuristic steps over the axis in it (it used to pick
    # "whole" and drop the tile)
    k = dt.compile(softmax, dt.Schedule(tile={"j": 8}))
    torch.testing.assert_close(k(X), torch.softmax(X, -1))
    assert k.schedule_for(X).strategy["j"] == "online" and k.schedule_for(X).tile["j"] == 8
    # the tile of a whole axis that a kernel does map to programs is legal (softmax's j on the
    # output's grid, whole in the reductions' kernels); a split axis steps in its tile too
    dt.compile(softmax, dt.Schedule(grid=("i", "j"), tile={"i": 2, "j": 4}, strategy={"j": "whole"}))
    _mm_ok(dt.Schedule(grid=("i", "j"), tile={"i": 4, "j": 4, "k": 4}, strategy={"k": "whole"}, split={"k": 2}))
    # the heuristic fills no such tile itself
    full = dt.compile(softmax).schedule_for(X)
    assert full.strategy["j"] == "whole" and "j" not in full.tile and full.unused_tiles(softmax) == []


def test_arithmetic_on_an_indexed_stage_result():
    """n[i] + 1e-6 was a bare TypeError (X[i, j] - n[i] and n + 1e-6 worked)."""
    @dt.algorithm
    def rms(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        n = dt.sum(X[i, j] * X[i, j], over=j)
        return (X[i, j] / dt.sqrt(n[i] + 1e-6))[i, j]

    @dt.algorithm
    def ops(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        m = dt.max(X[i, j], over=j)
        return dt.where(m[i] > 0, 1.0 + m[i], -m[i] * 2 - abs(m[i]) ** 2 / (m[i] == m[i]))[i]

    X = torch.randn(5, 7)
    torch.testing.assert_close(dt.compile(rms)(X), X / torch.sqrt((X * X).sum(-1, keepdim=True) + 1e-6))
    m = X.amax(-1)
    torch.testing.assert_close(dt.compile(ops)(X), torch.where(m > 0, 1 + m, -m * 2 - m.abs() ** 2))
    with pytest.raises(dt.AlgorithmError, match="no truth value"):
        @dt.algorithm
        def branch(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            m = dt.max(X[i, j], over=j)
            return (m if m[i] else -m)[i]
    with pytest.raises(dt.AlgorithmError, match=r"torch\.exp cannot take a dtriton expression"):
        @dt.algorithm
        def tfn(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            return torch.exp(dt.max(X[i, j], over=j)[i])[i]
    with pytest.raises(dt.AlgorithmError, match=r"must return outputs with a layout.*Write `return "
                                                r"\(\.\.\.\)\[i\]` \(the expression in parentheses"):
        @dt.algorithm
        def unlaid(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            return dt.max(X[i, j], over=j)[i] + 1


def test_space_split_of_a_non_reduction_axis_is_refused_before_any_candidate():
    from dtriton.tune import Space
    built = []

    def factory(alg, sched):
        built.append(sched)
        return dt.Kernel(alg, sched)

    for space, pattern in (
            (Space(split={"i": [1, 2]}), r"Space\(split=\{'i': \[1, 2\]\}\): axis 'i' is not a reduction axis of matmul "
                                         r"\(reduction axes: \['k'\]\); only a reduced axis can be split"),
            (Space(grid=[("i", "k")]), r"Space grid \('i', 'k'\) names axis 'k', which no output of matmul has"),
            (Space(place={"out": ["auto", "fuse"]}), r"Space\(place=\{'out': \['auto', 'fuse'\]\}\): 'out' is an output stage")):
        _raises(dt.ScheduleError, pattern, space.validate, matmul)
        _raises(dt.ScheduleError, pattern, dt.explore, matmul, MM, space=space, budget=5, progress=False, store=False,
                _candidate_factory=factory)
    assert built == []   # refused before the heuristic baseline was even built
    _raises(dt.ScheduleError, r"Space\(split=\{'j': \[2\]\}\): axis 'j' is reduced by the argmax stage 'argmax0'; "
                              r"an arg-reduction cannot be split", Space(split={"j": [2]}).validate, rowargmax)
    Space(split={"j": [2]}).validate(rowmax)   # a max splits (per-split partials)
    Space(split={"k": [1, 2]}, grid=[("j", "i")]).validate(matmul)
    Space(split={"i": [1]}).validate(matmul)   # no split at all: nothing to refuse


def test_misspelled_schedule_and_space_keywords_name_the_field():
    from dtriton.tune import Space
    cases = [
        (lambda: dt.Schedule(tiles={"i": 64}), r"^Schedule has no field 'tiles' \(did you mean 'tile'\?\); its fields "
                                                r"are tile, grid, group, split, strategy, num_warps"),
        (lambda: dt.Schedule(num_warp=4, gird=("i",)), r"Schedule has no fields 'num_warp' \(did you mean 'num_warps'\?\), "
                                                       r"'gird' \(did you mean 'grid'\?\)"),
        (lambda: dt.Schedule().replace(splitmode="partials"), r"'splitmode' \(did you mean 'split_mode'\?\)"),
        (lambda: dt.StageSchedule(plce="fuse"), r"StageSchedule has no field 'plce' \(did you mean 'place'\?\); its "
                                                r"fields are place, tile, grid"),
        (lambda: dt.Schedule(stages={"sum0": {"placement": "fuse"}}), r"stages\['sum0'\]: StageSchedule has no field "
                                                                      r"'placement' \(did you mean 'place'\?\)"),
        (lambda: dt.Schedule.from_dict({"tiles": {}}), r"unknown schedule field\(s\): Schedule has no field 'tiles'"),
        (lambda: Space(tiles={"i": [16]}), r"^Space has no field 'tiles' \(did you mean 'tile'\?\); its fields are tile, "
                                           r"grid, group"),
        (lambda: Space().narrow(num_warp=[4]), r"Space has no field 'num_warp' \(did you mean 'num_warps'\?\)"),
        (lambda: dt.explore(matmul, MM, space={"strategies": {"k": ["loop"]}}, budget=1, progress=False, store=False),
         r"Space has no field 'strategies' \(did you mean 'strategy'\?\)"),
    ]
    for fn, pattern in cases:
        e = _raises(dt.UnknownFieldError, pattern, fn)
        assert isinstance(e, TypeError) and isinstance(e, dt.ScheduleError)
    with pytest.raises(TypeError, match="has no field 'tiles'"):   # existing `except TypeError` keeps working
        dt.Schedule(tiles={})


def test_source_for_and_schedule_for_take_arguments_by_name_as_the_call():
    # source_for / schedule_for raised a raw TypeError for keyword arguments the call accepts
    from dtriton.library import attention
    g = torch.Generator().manual_seed(4)
    Q, K, V = (torch.randn(1, 1, 5, 3, generator=g) for _ in range(3))
    k = dt.compile(attention)
    assert k.source_for(Q, K, V, scale=0.5) == k.source_for(Q, K, V, 0.5)
    assert k.schedule_for(Q, K, V, scale=0.5) == k.schedule_for(Q, K, V, 0.5)
    assert k.source_for(Q=Q, K=K, V=V, scale=0.5) == k.source_for(Q, K, V, 0.5)
    with pytest.raises(dt.ShapeError, match="scal"):
        k.source_for(Q, K, V, scal=0.5)
    with pytest.raises(dt.ShapeError):
        k.schedule_for(Q, K, V, 0.5, scale=0.5)


def test_overlapping_out_does_not_suggest_a_refused_in_place_call():
    # out=S.t() for X[i, j] + X[j, i] said "or pass out=S itself for an in-place call", which is then refused
    @dt.algorithm
    def symm(X: dt.Tensor["N", "N"]):
        i, j = dt.axes("i j")
        return (X[i, j] + X[j, i])[i, j]

    S = torch.randn(5, 5)
    with pytest.raises(dt.ShapeError, match=r"out= for output 'out' overlaps input 'X'.*out=X itself, an in-place "
                                            r"call, is refused too: it reads X\[j, i\]") as e:
        dt.compile(symm)(S, out=S.t())
    assert "or pass out=X itself" not in str(e.value)
    with pytest.raises(dt.ShapeError, match="in-place call"):
        dt.compile(symm)(S, out=S)
