"""Problems a fresh-user trial found (session 10, second batch), each fixed with a test here.

Padding values an integer or bool tensor cannot hold are refused at the call (the kernel read
them in the tensor's dtype, the reference kept them); ``&`` of conditions as a factor of a
reduction bounds its loop as a ``dt.where`` does; clearer errors for an int literal past int64,
float ``//`` and ``%``, an output indexed by an axis reduced inside it, a user tile too big for
one block, and an empty size name in ``dt.axes``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import dtriton as dt

from conftest import check



# ----------------------------------------------------------------------------------------------
# 1. padding values the tensor's dtype does not hold
# ----------------------------------------------------------------------------------------------
def _padded_shift(value):
    @dt.algorithm
    def shift(X: dt.Tensor["N"]):
        i = dt.axes("i")
        return (X.pad(value)[i + 1] + X[i])[i]
    return shift


@pytest.mark.parametrize("value, dtype, fix", [
    (1.5, torch.int64, r"write X\.pad\(1\) or X\.pad\(2\)"),
    (float("nan"), torch.int8, r"write X\.pad\(0\)"),
    (-1, torch.uint8, r"write X\.pad\(0\)"),
    (300, torch.int8, r"write X\.pad\(127\)"),
    (2, torch.bool, r"write X\.pad\(False\) or X\.pad\(True\)"),
    (0.5, torch.bool, r"X\.pad\(False\)"),
])
def test_pad_value_the_dtype_does_not_hold_is_refused_at_the_call(value, dtype, fix):
    alg = _padded_shift(value)
    x = torch.tensor([1, 0, 1], dtype=dtype)
    for call in (lambda: alg.reference(x), lambda: dt.compile(alg)(x)):
        with pytest.raises(dt.AlgorithmError, match=r"X\.pad\(.*\): X is " + str(dtype).replace(".", r"\.")
                           + r", which does not hold .*" + fix + r".*float tensor"):
            call()


def test_integer_pad_values_held_by_the_dtype_match_torch():
    # exact past 2**53 (an int64 pad is not rounded through a float), the dtype's least value for a max
    for value, dtype in [(1.0, torch.int64), (-7, torch.int8), (2 ** 62 + 1, torch.int64), (255, torch.uint8),
                         (-2 ** 31, torch.int32), (True, torch.bool), (0, torch.bool), (-3, torch.float32)]:
        alg = _padded_shift(value)
        n = 7
        x = (torch.randint(0, 2, (n,)).to(dtype) if dtype in (torch.bool, torch.uint8)
             else torch.randint(-50, 50, (n,)).to(dtype))
        got = dt.compile(alg)(x)
        want = torch.cat([x[1:], torch.tensor([value], dtype=dtype)]) + x   # (F.pad rounds through a float)
        assert got.dtype == want.dtype
        assert torch.equal(got, want), (value, dtype, got, want)
        assert torch.equal(alg.reference(x), got)


def test_integer_max_pool_padded_with_the_least_value():
    @dt.algorithm
    def maxpool(X: dt.Tensor["C", "N"], R: int):
        c, i, r = dt.axes("c i:N r:R")
        return dt.max(X.pad(-2 ** 31)[c, i + r - 1], over=r)[c, i]
    x = torch.randint(-1000, 1000, (3, 11), dtype=torch.int32)
    want = F.max_pool1d(x.double()[None], 3, 1, 1)[0]
    got = dt.compile(maxpool, dt.Schedule(tile={"c": 1, "i": 4}, grid=("c", "i")))(x, 3)
    assert torch.equal(got.double(), want) and torch.equal(maxpool.reference(x, 3), got)


# ----------------------------------------------------------------------------------------------
# 2. a conjunction of conditions as a factor bounds the loop
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def band_factor(A: dt.Tensor["M", "M"], B: dt.Tensor["M", "N"], W: int):
    """The band ``i - W < k <= i`` of ``A`` times ``B``, the mask a factor: ``* ((k <= i) & (k > i - W))``."""
    i, j, k = dt.axes("i j k")
    return dt.sum(A[i, k] * B[k, j] * ((k <= i) & (k > i - W)), over=k)[i, j]


def _band_plan_bounds(args, sched):
    from dtriton.plan import call_spec, plan_program
    from dtriton.schedule import complete_schedule
    b = band_factor.bind(args)
    prog = plan_program(band_factor, complete_schedule(band_factor, sched, b), b,
                        call_spec(band_factor, b, args, interpret=True))
    return [lb for k in prog.kernels for lb in k.bounds.values()]


def test_conjunction_factor_is_a_guard_solved_on_both_sides():
    from dtriton.ir import Axis, ScalarParam, axis_bounds, guard
    i, k, w = Axis("i"), Axis("k"), ScalarParam("W", int)
    c = (k <= i) & (k > i - w)
    assert guard(Axis("a") * Axis("b") * c, 0.0) is c
    ab = axis_bounds(guard(Axis("a") * c, 0.0), "k")
    assert ab.exact and len(ab.lower) == 1 and len(ab.upper) == 1
    assert guard(Axis("a") * ~(k > i), 0.0) is not None and guard(Axis("a") * (k | i), 0.0) is None


@pytest.mark.parametrize("M, N, W, tm, tk", [(19, 3, 3, 4, 4), (45, 11, 7, 16, 8), (23, 5, 1, 8, 4),
                                             (37, 4, 0, 16, 16), (29, 6, 40, 8, 8)])
def test_band_mask_as_a_conjunction_factor_is_bounded(M, N, W, tm, tk):
    A, B = torch.randn(M, M), torch.randn(M, N)
    rows, cols = torch.arange(M)[:, None], torch.arange(M)[None]
    band = (cols <= rows) & (cols > rows - W)
    sched = dt.Schedule(grid=("i", "j"), tile={"i": tm, "j": 4, "k": tk})
    k, _ = check(band_factor, (A, B, W), sched, torch_ref=lambda a, b, w: torch.where(band, a, 0.0) @ b)
    (lb,) = _band_plan_bounds((A, B, W), sched)
    assert lb.axis == "k" and len(lb.lower) == 1 and len(lb.upper) == 1
    assert "loop bounds of k from the mask" in k.source_for(A, B, W)
    off = dt.Schedule(grid=("i", "j"), tile={"i": tm, "j": 4, "k": tk}, mask_bounds=False)
    k_off, _ = check(band_factor, (A, B, W), off, torch_ref=lambda a, b, w: torch.where(band, a, 0.0) @ b)
    assert _band_plan_bounds((A, B, W), off) == [] and "from the mask" not in k_off.source_for(A, B, W)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # (the interpreter's 0 * inf lanes)
def test_band_factor_skips_tiles_outside_the_band():
    """B's last row is inf: the rows whose band ends before it never read it (torch gives NaN there)."""
    A, B = torch.randn(40, 40), torch.randn(40, 8)
    B[39] = float("inf")
    out = dt.compile(band_factor, dt.Schedule(grid=("i", "j"), tile={"i": 16, "j": 8, "k": 16}))(A, B, 3)
    assert torch.isfinite(out[:32]).all()


# ----------------------------------------------------------------------------------------------
# 3. errors
# ----------------------------------------------------------------------------------------------
def test_integer_literal_outside_int64_is_refused_where_the_algorithm_is_defined():
    for lit in (2 ** 70, -2 ** 63 - 1, 2 ** 63):
        with pytest.raises(dt.AlgorithmError, match=rf"integer literal {lit} is outside int64.*write it as a float"):
            @dt.algorithm
            def big(X: dt.Tensor["N"]):
                i = dt.axes("i")
                return (X[i] + lit)[i]

    with pytest.raises(dt.AlgorithmError, match=r"literal 9223372036854775807 is past 2\*\*53 and not exact.*int argument"):
        @dt.algorithm
        def inexact(X: dt.Tensor["N"]):
            i = dt.axes("i")
            return (X[i] + (2 ** 63 - 1))[i]

    @dt.algorithm
    def edge(X: dt.Tensor["N"], q: int):   # int64's least value and 2**62 are exact; an int argument is
        i = dt.axes("i")
        return (X[i] + (-2 ** 63) + 2 ** 62 + 2 ** 62 + q)[i]
    x = torch.tensor([1, -5, 7])
    assert torch.equal(dt.compile(edge)(x, 2 ** 53 + 1), x + (2 ** 53 + 1))


def test_float_floor_division_and_modulo_are_algorithm_errors_printing_the_float_literal():
    @dt.algorithm
    def fdiv(X: dt.Tensor["N"]):
        i = dt.axes("i")
        return (X[i] // 2.0)[i]

    @dt.algorithm
    def fmod(X: dt.Tensor["N"]):
        i = dt.axes("i")
        return (X[i] % 3)[i]
    for alg, text in ((fdiv, r"\(X\[i\] // 2\.0\): // is integer arithmetic"), (fmod, r"\(X\[i\] % 3\): % is integer")):
        for call in (lambda: alg.reference(torch.randn(5)), lambda: dt.compile(alg)(torch.randn(5))):
            with pytest.raises(dt.IntegerOpError, match=text) as e:
                call()
            assert isinstance(e.value, dt.AlgorithmError) and isinstance(e.value, dt.ShapeError)


def test_float_literals_print_as_floats_and_int_literals_as_ints():
    from dtriton.ir import fmt

    @dt.algorithm
    def lits(X: dt.Tensor["N"]):
        i = dt.axes("i")
        return (X.pad(0.0)[i + 1] * 2.0 + X.pad(0)[i - 1] * 2 + 1e20 - float("inf") + 0.5 + X[i])[i]
    text = fmt(lits.outputs[0].expr, limit=None)
    for part in ("X.pad(0.0)[(i + 1)]", "* 2.0)", "X.pad(0)[(i - 1)]", "* 2)", "1e+20", "inf", "0.5"):
        assert part in text, (part, text)


def test_output_indexed_by_an_axis_reduced_inside_names_the_reduction():
    with pytest.raises(dt.AlgorithmError, match=r"output \[i\]: axis i is reduced by dt\.sum\(\.\.\., over=i\) "
                       r"inside the expression, so it cannot index the output.*free axes are \['j'\]: index it \[j\]"):
        @dt.algorithm
        def a(X: dt.Tensor["N", "M"]):
            i, j = dt.axes("i j")
            return dt.sum(X[i, j], over=i)[i]
    with pytest.raises(dt.AlgorithmError, match=r"axis j is reduced by dt\.max\(\.\.\., over=j\)"):
        @dt.algorithm
        def b(X: dt.Tensor["N", "M"]):
            i, j = dt.axes("i j")
            return (X[i, j] - dt.max(X[i, j], over=j))[i, i] if False else dt.max(X[i, j], over=j)[j]
    with pytest.raises(dt.AlgorithmError, match=r"leaves axis \['j'\] free"):   # an axis missing, none reduced
        @dt.algorithm
        def c(X: dt.Tensor["N", "M"]):
            i, j = dt.axes("i j")
            return X[i, j][i]


@dt.algorithm
def matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    i, j, k = dt.axes("i j k")
    return dt.sum(A[i, k] * B[k, j], over=k)[i, j]


def test_user_tiles_whose_store_block_exceeds_triton_s_limit_are_a_schedule_error():
    A, B = torch.randn(9, 5), torch.randn(5, 7)
    with pytest.raises(dt.ScheduleError, match=r"kernel for stage 'out' .* store out\[i, j\] would be a block of "
                       r"16777216 elements \(4096 x 4096: blocks \{'i': 4096, 'j': 4096\}.*Triton allows at most "
                       r"1048576. Use tiles whose product is at most 1048576 \(tile=\{'i': 1024, 'j': 1024\}\)"):
        dt.compile(matmul, dt.Schedule(tile={"i": 4096, "j": 4096}))(A, B)
    # at the limit it runs
    out = dt.compile(matmul, dt.Schedule(tile={"i": 16, "j": 16}))(A, B)
    assert torch.allclose(out.double(), A.double() @ B.double(), atol=1e-5)


@pytest.mark.parametrize("spec, text", [("i:", r"axis 'i' is followed by ':' but no size name.*dt\.axes\('i:N'\)"),
                                        ("i j:", r"axis 'j' is followed by ':'"),
                                        (":N", r"':N' has no axis name before the ':'"),
                                        ("i :N", r"no space around")])
def test_axes_with_an_empty_size_or_name_is_refused(spec, text):
    with pytest.raises(dt.AlgorithmError, match=text):
        dt.axes(spec)


def test_int_and_float_paddings_of_the_same_value_hash_and_merge_as_before():
    """Int paddings are kept exact now; one a float holds (0 and 0.0) hashes as it did (stored tuning
    results keep their keys) and reads as one load, while 2**62 + 1 and 2**62 stay apart."""
    def fp(v, w):
        @dt.algorithm
        def a(X: dt.Tensor["N"]):
            i = dt.axes("i")
            return (X.pad(v)[i + 1] + X.pad(w)[i + 1] + X[i])[i]
        return a
    assert fp(0, 0).fingerprint == fp(0.0, 0.0).fingerprint
    assert fp(2 ** 62 + 1, 2 ** 62 + 1).fingerprint != fp(2 ** 62, 2 ** 62).fingerprint
    loads = lambda alg: [n for n in alg.nodes if n.kind == "Load" and n.pad is not None]
    assert len(loads(fp(0, 0.0))) == 1 and len(loads(fp(2 ** 62 + 1, 2 ** 62))) == 2
    x = torch.tensor([3, -4, 5])
    assert torch.equal(dt.compile(fp(2 ** 62 + 1, 2 ** 62))(x), x + torch.tensor([-8, 10, 2 ** 63 + 1 - 2 ** 64]))


@pytest.mark.parametrize("index", ["i // 2.0", "i % 2.0", "i * 1.0", "i + 0.0"])
def test_float_literal_in_an_index_is_refused_at_definition(index):
    """A float literal makes an index a float (as torch), even when its value is whole: `X[i // 2.0]` was a
    CompileError from Triton at the call and `X[i * 1.0]` ran as `X[i]`."""
    with pytest.raises(dt.AlgorithmError, match="is not an integer"):
        @dt.algorithm
        def f(X: dt.Tensor["N"]):
            i = dt.axes("i:N")
            return X[eval(index)][i]


def test_axis_floordiv_by_a_float_literal_as_a_value_is_an_integer_op_error():
    @dt.algorithm
    def f(X: dt.Tensor["N"]):
        i = dt.axes("i:N")
        return (X[i] + i // 2.0)[i]
    with pytest.raises(dt.IntegerOpError, match="integer arithmetic"):
        dt.compile(f)(torch.arange(6.0))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8])
def test_infinite_pad_of_an_integer_tensor_reads_the_dtype_extreme(dtype):
    """``X.pad(-inf)`` on an integer tensor reads its dtype's lowest value (the identity of max: integer max
    pooling, library.max_pool2d_window), ``X.pad(inf)`` its highest, in the kernel and the reference alike."""
    info = torch.iinfo(dtype)
    for value, fill in ((-float("inf"), info.min), (float("inf"), info.max)):
        @dt.algorithm
        def edge(X: dt.Tensor["N"]):
            i = dt.axes("i:N")
            return X.pad(value)[i + 1][i]
        x = torch.randint(0, 100, (7,)).to(dtype)
        want = torch.cat([x[1:], torch.tensor([fill], dtype=dtype)])
        for got in (dt.compile(edge)(x), edge.reference(x)):
            assert got.dtype == dtype and torch.equal(got, want), (value, got)
    # integer max pooling with -inf padding against torch (on float64 values, exact here)
    x = torch.randint(-100, 100, (3, 9, 7)).to(dtype if dtype != torch.uint8 else torch.int16)
    K, s, p = 3, 2, 1
    Ho, Wo = (9 + 2 * p - K) // s + 1, (7 + 2 * p - K) // s + 1
    got = dt.compile(dt.library.max_pool2d_window)(x, K, s, p, Ho, Wo)
    want = torch.nn.functional.max_pool2d(x.double()[:, None], K, s, p)[:, 0].to(x.dtype)
    assert torch.equal(got, want)
