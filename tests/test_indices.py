"""Index arithmetic (issue 19): integer indices of axes and scalars, reads outside a dim as errors,
explicit padding, guarded loads, ``//`` and ``%`` with Python's rounding.

Kernels run on Triton's interpreter and are compared with float64 torch; every error case is also
checked in the reference evaluator, which must raise the same :class:`dt.IndexRangeError`.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, strategies as st

import dtriton as dt
from dtriton.ir import Interval, int_magnitude, interval
from dtriton.ir.intervals import guard_ranges
from dtriton.plan import call_spec

from conftest import check, dims, randn, run_bench, run_random, schedules


# ----------------------------------------------------------------------------------------------
# algorithms
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def forward_diff(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X[i, j + 1] - X[i, j])[i, j]


@dt.algorithm
def forward_diff_padded(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X.pad(0.0)[i, j + 1] - X[i, j])[i, j]


@dt.algorithm
def rotate_half(X: dt.Tensor["M", "N"], half: int):
    i, d = dt.axes("i d:N")
    return dt.where(d < half, -X[i, d + half], X[i, d - half])[i, d]


@dt.algorithm
def conv1d(X: dt.Tensor["B", "C", "H"], W: dt.Tensor["O", "C", "R"], s: int, d: int, p: int):
    """A padded, strided, dilated 1-d convolution whose output has the input's length H."""
    n, o, c, h, r = dt.axes("n o c h:H r")
    return dt.sum(dt.pad(X, 0.0)[n, c, h * s + r * d - p] * W[o, c, r], over=(c, r))[n, o, h]


@dt.algorithm
def conv1d_sized(X: dt.Tensor["B", "C", "H"], W: dt.Tensor["O", "C", "R"], s: int, d: int, p: int, Ho: int):
    """torch's conv1d: the output length Ho is an int argument sizing axis h."""
    n, o, c, h, r = dt.axes("n o c h:Ho r")
    return dt.sum(X.pad(0.0)[n, c, h * s + r * d - p] * W[o, c, r], over=(c, r))[n, o, h]


@dt.algorithm
def maxpool2d(X: dt.Tensor["B", "H", "W"], KH: int, KW: int, s: int, p: int, Ho: int, Wo: int):
    """torch's max_pool2d: windows KH x KW, stride s, padding p (reads -inf there)."""
    n, h, w, r, q = dt.axes("n h:Ho w:Wo r:KH q:KW")
    return dt.max(X.pad(float("-inf"))[n, h * s + r - p, w * s + q - p], over=(r, q))[n, h, w]


@dt.algorithm
def maxpool1d(X: dt.Tensor["B", "H"], K: dt.Tensor["R"]):
    """Max pooling of window R = 3 (K, zeros, sizes the window), stride 1, padded with -inf."""
    n, h, r = dt.axes("n h:H r")
    return dt.max(X.pad(float("-inf"))[n, h + r - 1] + K[r], over=r)[n, h]


@dt.algorithm
def grouped(X: dt.Tensor["M", "N"], Y: dt.Tensor["G", "N"], g: int):
    i, j = dt.axes("i j")
    return (X[i, j] * Y[i // g, j])[i, j]


@dt.algorithm
def floor_ops(X: dt.Tensor["M", "N"], a: int, b: int):
    i, j = dt.axes("i j")
    return (X[i, j] + (i - a) // b + (j - a) % b)[i, j]


@dt.algorithm
def guarded_gather(X: dt.Tensor["M", "N"], L: dt.Tensor["M"]):
    i, j = dt.axes("i j")
    return dt.where(L[i] >= 0, X[i, L[i]], 0.0)[i]


@dt.algorithm
def axis_compare(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.where(j <= i - 1, X[i, j], 0.0)[i, j]


def conv1d_torch(X, W, s, d, p):
    """out[n, o, h] = sum_{c, r} Xpad[n, c, h*s + r*d - p] W[o, c, r] for h < H, zero outside X."""
    B, C, H = X.shape
    R = W.shape[2]
    big = H * s + R * d + 1
    Xp = F.pad(X, (p, big))
    idx = torch.arange(H)[:, None] * s + torch.arange(R)[None, :] * d   # (h, r) into Xp
    cols = Xp[:, :, idx]                                                # (n, c, h, r)
    return torch.einsum("nchr,ocr->noh", cols, W)


# ----------------------------------------------------------------------------------------------
# intervals
# ----------------------------------------------------------------------------------------------
def test_intervals_of_affine_floor_and_mod_indices():
    h, r, i = dt.axes("h r i")
    rg = {"h": Interval(0, 9, True, frozenset("h")), "r": Interval(0, 2, True, frozenset("r")),
          "i": Interval(0, 9, True, frozenset("i"))}
    assert interval(h * 2 + r * 3 - 1, rg) == Interval(-1, 23, True, frozenset("hr"))
    assert interval(h // 4, rg).lo == 0 and interval(h // 4, rg).hi == 2
    assert interval((h - 5) // 4, rg).lo == -2          # floor, not truncation
    m = interval(h % 4, rg)
    assert (m.lo, m.hi, m.exact) == (0, 3, True)
    assert not interval(h - h, rg).exact                # an axis used twice: the ends are not attained
    assert interval(h + 0.5, rg) is None                # not an integer
    g = guard_ranges(((h < 4, True),), rg)
    assert (g["h"].lo, g["h"].hi, g["h"].exact) == (0, 3, True)
    g = guard_ranges(((h < 4, False),), rg)
    assert (g["h"].lo, g["h"].hi) == (4, 9)
    g = guard_ranges(((h <= i, True),), rg)             # two axes: narrowed, no longer exact
    assert not g["h"].exact
    g = guard_ranges(((h + 1 < 6, True), (2 - 1 + h >= 3, True)), rg)   # an axis plus known integers
    assert (g["h"].lo, g["h"].hi, g["h"].exact) == (2, 4, True)


def test_read_verdicts_inside_guarded_outside_unknown():
    X = torch.randn(5, 6)
    b = forward_diff_padded.bind([X])
    (r,) = b.reads
    assert r.verdict == "outside" and (r.span.lo, r.span.hi) == (1, 6)
    b = rotate_half.bind([X, 3])
    assert {x.verdict for x in b.reads} == {"guarded"}
    b = guarded_gather.bind([X, torch.tensor([0, 1, 2, 3, 4])])
    assert {x.verdict for x in b.reads} == {"unknown"}
    b = grouped.bind([X, torch.randn(2, 6), 4])
    assert [x.verdict for x in b.reads] == ["inside"]


# ----------------------------------------------------------------------------------------------
# reading outside is an error, named
# ----------------------------------------------------------------------------------------------
def test_shifted_read_past_the_last_column_is_an_error_before_anything_runs():
    X = torch.randn(4, 7)
    msg = r"X\[i, \(j \+ 1\)\] reads outside dim 1 of X \(N = 7.*takes the values 1\.\.7.*pad"
    with pytest.raises(dt.IndexRangeError, match=msg):
        forward_diff.reference(X)
    with pytest.raises(dt.IndexRangeError, match=msg):
        dt.compile(forward_diff)(X)
    with pytest.raises(IndexError):   # still an IndexError, as torch's own
        forward_diff.reference(X)


def test_guard_that_does_not_cover_the_read_is_an_error_naming_the_values():
    X = torch.randn(3, 6)
    with pytest.raises(dt.IndexRangeError, match=r"\(d \+ half\).*4\.\.7"):
        rotate_half.reference(X, 4)
    with pytest.raises(dt.IndexRangeError, match=r"dim 0 of Y \(G = 2.*\(i // g\)"):
        grouped.reference(torch.randn(9, 6), torch.randn(2, 6), 4)


def test_data_dependent_index_outside_is_an_error_on_the_interpreter_and_in_the_reference():
    X = torch.randn(5, 6)
    L = torch.tensor([0, -1, 2, 6, 1])    # -1 is guarded off, 6 is read
    for f in (guarded_gather.reference, dt.compile(guarded_gather)):
        with pytest.raises(dt.IndexRangeError, match=r"X\[i, L\[i\]\].*is 6 at i = 3"):
            f(X, L)


def test_check_indices_option_is_accepted_and_validated():
    k = dt.compile(forward_diff_padded, check_indices=True)
    assert k.check_indices
    with pytest.raises(TypeError, match="DTRITON_CHECK_INDICES"):
        dt.compile(forward_diff_padded, "tuned", check_indices=True)


def test_float_index_and_float_floor_division_are_refused():
    with pytest.raises(dt.AlgorithmError, match="is a float; indices are integers"):
        @dt.algorithm
        def f(X: dt.Tensor["M"]):
            i, = dt.axes("i")
            return (X[i] + X[1.0])[i]

    # a float in an index is an error where the algorithm is defined (it was a call-time ShapeError,
    # or, with i only inside the index, a misleading "its size is unknown")
    for build in (lambda X, i: X[i] + X[i * 0.5], lambda X, i: X[i * 0.5], lambda X, i: X[i] + X[i / 2]):
        with pytest.raises(dt.AlgorithmError, match=r"index 0 of X\[.*\] is not an integer.*i // 2"):
            @dt.algorithm
            def half(X: dt.Tensor["M"]):
                i, = dt.axes("i")
                return build(X, i)[i]

    @dt.algorithm
    def float_tensor_index(X: dt.Tensor["M"], Y: dt.Tensor["M"]):   # a float tensor's dtype is known at the call
        i, = dt.axes("i")
        return (X[i] + X[Y[i] + 1])[i]
    with pytest.raises(dt.ShapeError, match="not integer-valued"):
        float_tensor_index.reference(torch.randn(4), torch.randn(4))

    @dt.algorithm
    def g(X: dt.Tensor["M"]):
        i, = dt.axes("i")
        return (X[i] // 2)[i]
    with pytest.raises(dt.ShapeError, match="// is integer arithmetic"):
        g.reference(torch.randn(4))


# ----------------------------------------------------------------------------------------------
# kernels against float64 torch
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("m,n", [(1, 1), (5, 7), (3, 17)])
def test_padded_shift_matches_torch(m, n):
    X = randn(m, n)
    check(forward_diff_padded, [X], torch_ref=lambda X: F.pad(X, (0, 1))[:, 1:] - X)


@pytest.mark.parametrize("n,half", [(6, 3), (10, 5), (7, 3)])
def test_guarded_loads_rotate_half(n, half):
    X = randn(5, n)
    if n == 2 * half:
        check(rotate_half, [X, half], torch_ref=lambda X, h: torch.cat([-X[:, h:], X[:, :h]], 1))
    else:   # odd N: d - half reaches N - 1 - 3 = 3 and d + half < 2 * half = 6 < 7: inside, guarded
        ref = torch.where(torch.arange(n) < half, -X.double()[:, (torch.arange(n) + half).clamp(max=n - 1)],
                          X.double()[:, (torch.arange(n) - half).clamp(min=0)])
        check(rotate_half, [X, half], torch_ref=lambda X, h: ref)


def test_guarded_gather_reads_only_where_the_guard_holds():
    X = randn(5, 6)
    L = torch.tensor([0, -1, 2, 5, -3])
    ref = torch.where(L >= 0, X.double()[torch.arange(5), L.clamp(min=0)], torch.zeros(5, dtype=torch.float64))
    check(guarded_gather, [X, L], torch_ref=lambda X, L: ref)


@pytest.mark.parametrize("g", [1, 3, 4])
def test_grouped_rows_floor_division(g):
    X, Y = randn(9, 5), randn(-(-9 // g), 5)
    check(grouped, [X, Y, g], torch_ref=lambda X, Y, g: X * Y[torch.arange(9) // g])


@pytest.mark.parametrize("a,b", [(3, 2), (5, 4), (0, 3), (2, -3)])
def test_floor_division_and_modulo_round_as_python(a, b):
    X = randn(7, 6)
    ii, jj = torch.arange(7)[:, None], torch.arange(6)[None, :]
    check(floor_ops, [X, a, b], torch_ref=lambda X, a, b: X + torch.div(ii - a, b, rounding_mode="floor")
          + torch.remainder(jj - a, b))


def test_axis_comparison_with_an_offset():
    X = randn(6, 6)
    check(axis_compare, [X], torch_ref=lambda X: torch.tril(X, -1))


def test_max_pool_padded_with_minus_infinity():
    X, K = randn(3, 8), torch.zeros(3)
    ref = F.max_pool1d(X.double()[:, None], 3, stride=1, padding=1)[:, 0]
    check(maxpool1d, [X, K], torch_ref=lambda X, K: ref)


@given(st.integers(1, 2), st.integers(1, 3), st.integers(1, 9), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 3), st.integers(0, 3), st.integers(0, 2**31 - 1))
def test_conv1d_affine_indices_against_torch(b, c, h, r, s, d, p, seed):
    """Hypothesis draws sizes, strides, dilations and paddings of ``X.pad(0)[n, c, h*s + r*d - p]``."""
    gen = torch.Generator().manual_seed(seed)
    X, W = randn(b, c, h, gen=gen), randn(2, c, r, gen=gen)
    check(conv1d, [X, W, s, d, p], torch_ref=conv1d_torch)


# ----------------------------------------------------------------------------------------------
# integer typing of the generated code
# ----------------------------------------------------------------------------------------------
def test_index_arithmetic_is_integer_in_the_kernel():
    X = randn(4, 6)
    k = dt.compile(forward_diff_padded)
    src = k.source_for(X)
    assert "+ 1\n" in src or "+ 1)" in src or " + 1" in src
    assert "+ 1.0" not in src and ".to(tl.float32) + 1" not in src
    assert "dim_N" in src and "other=0.0" in src            # the padded read is masked to its dim
    src = dt.compile(axis_compare).source_for(X)
    assert "- 1.0" not in src and "float32) <=" not in src     # j <= i - 1 compares integers


def test_index_wider_than_32_bits_takes_64_bit_arithmetic():
    """The plan's index dtype follows the values the index takes (here up to 5 * 2**29), without
    allocating a tensor that large (an expanded view of one element)."""
    @dt.algorithm
    def stride5(Y: dt.Tensor["M"], X: dt.Tensor["N"]):
        i, = dt.axes("i")
        return (Y[i] + X.pad(0.0)[i * 5])[i]
    Y, X = torch.zeros(1).expand(2**29), torch.zeros(10)
    b = stride5.bind([Y, X])
    assert int_magnitude(stride5.nodes, b.axis_sizes) == 5 * (2**29 - 1)
    assert call_spec(stride5, b, [Y, X], interpret=True).i64
    Y = torch.zeros(1).expand(2**20)
    assert not call_spec(stride5, stride5.bind([Y, X]), [Y, X], interpret=True).i64


def test_reference_keeps_axis_values_exact_past_2_24():
    """Axis values are int64 in the reference: i + 1 at i = 2**24 + 1 is exact (float32 is not)."""
    @dt.algorithm
    def plus_one(X: dt.Tensor["M"]):
        i, = dt.axes("i")
        return (X[i] * 0 + i + 1)[i]
    X = torch.zeros(1, dtype=torch.float64).expand(2**24 + 3)
    out = plus_one.reference(X)
    assert out[-1].item() == 2**24 + 3 and out[-2].item() == 2**24 + 2


def test_padded_and_plain_loads_are_not_merged():
    @dt.algorithm
    def both(X: dt.Tensor["M"]):
        i, = dt.axes("i")
        return (X[i] + X.pad(1.0)[i])[i]
    loads = [n for n in both.nodes if n.kind == "Load"]
    assert len(loads) == 2 and {l.pad for l in loads} == {None, 1.0}
    assert math.isclose(float(both.reference(torch.ones(3))[0]), 2.0)


def test_gpu_index_check_script_dry_run_passes(tmp_path):
    """bench/index_check.py (the lead's GPU command) on the interpreter: every case passes."""
    out = run_bench(["bench/index_check.py", "--dry-run"], tmp_path)
    assert "12/12 passed" in out and "FAIL" not in out


def test_gradient_of_a_padded_shift_keeps_the_padding():
    """dt.grad of X.pad(0)[i, j + 1] * X[i, j]: the derived backward reads X padded too (unpadded it
    would be an IndexRangeError), and matches torch autograd in float64."""
    @dt.algorithm
    def shifted_product(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return (X.pad(0.0)[i, j + 1] * X[i, j])[i, j]
    X = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    dt.compile(shifted_product)(X).sum().backward()
    Xt = X.detach().clone().requires_grad_()
    (F.pad(Xt, (0, 1))[:, 1:] * Xt).sum().backward()
    torch.testing.assert_close(X.grad, Xt.grad)


@dt.algorithm
def shifted_matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"], a: int):
    """A contraction whose operand is read through a padded shift: a dot operand with masked loads."""
    i, j, k = dt.axes("i j k")
    return dt.sum(A.pad(0.0)[i, k + a] * B[k, j], over=k)[i, j]


@given(data=st.data(), M=dims(1, 24), K=dims(1, 24), N=dims(1, 24), a=st.integers(-3, 3),
       dtype=st.sampled_from([torch.float32, torch.float16]), seed=st.integers(0, 2**16))
def test_padded_operand_under_random_schedules(data, M, K, N, a, dtype, seed):
    """Masked reads in every scope a schedule can put them (loops, split-K, whole blocks, dots)."""
    g = torch.Generator().manual_seed(seed)
    A, B = randn(M, K, dtype=dtype, gen=g), randn(K, N, dtype=dtype, gen=g)
    sched = data.draw(schedules(shifted_matmul, {"i": M, "k": K, "j": N}), label="schedule")

    def ref(A, B, a):
        k = torch.arange(K) + a
        ok = (k >= 0) & (k < K)
        return (A[:, k.clamp(0, K - 1)] * ok) @ B
    run_random(shifted_matmul, [A, B, a], sched, torch_ref=ref)


@given(data=st.data(), M=dims(1, 20), N=dims(1, 20), seed=st.integers(0, 2**16))
def test_guarded_reads_under_random_schedules(data, M, N, seed):
    """rotate-half with its guard, under random tiles, grids and strategies."""
    N = 2 * max(1, N // 2)
    X = randn(M, N, gen=torch.Generator().manual_seed(seed))
    sched = data.draw(schedules(rotate_half, {"i": M, "d": N}), label="schedule")
    run_random(rotate_half, [X, N // 2], sched, torch_ref=lambda X, h: torch.cat([-X[:, h:], X[:, :h]], 1))


@given(st.integers(1, 2), st.integers(1, 3), st.integers(1, 12), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 3), st.integers(0, 2), st.integers(0, 2**31 - 1))
def test_conv1d_with_output_size_argument_matches_torch(b, c, h, r, s, d, p, seed):
    """torch.nn.functional.conv1d itself is the oracle: stride, dilation, padding, the output length
    given as an int argument (a new value of it is a new specialisation, not a stale one)."""
    ho = (h + 2 * p - d * (r - 1) - 1) // s + 1
    assume(ho >= 1)
    gen = torch.Generator().manual_seed(seed)
    X, W = randn(b, c, h, gen=gen), randn(3, c, r, gen=gen)
    check(conv1d_sized, [X, W, s, d, p, ho], torch_ref=lambda X, W, s, d, p, ho: F.conv1d(X, W, stride=s, padding=p,
                                                                                         dilation=d))


@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_maxpool2d_matches_torch(k, s, p):
    X = randn(2, 7, 9)
    ho, wo = (7 + 2 * p - k) // s + 1, (9 + 2 * p - k) // s + 1
    check(maxpool2d, [X, k, k, s, p, ho, wo],
          torch_ref=lambda X, *a: F.max_pool2d(X[:, None], k, stride=s, padding=p)[:, 0])


def test_output_size_argument_is_checked_and_keys_the_cache():
    X, W = randn(1, 2, 9), randn(2, 2, 3)
    with pytest.raises(dt.ShapeError, match="'Ho' of conv1d_sized sizes an axis and must be >= 0"):
        conv1d_sized.reference(X, W, 1, 1, 0, -1)
    k = dt.compile(conv1d_sized)
    assert k(X, W, 1, 1, 0, 7).shape == (1, 2, 7)
    assert k(X, W, 2, 1, 0, 4).shape == (1, 2, 4)     # same tensors, another output size
    with pytest.raises(dt.AlgorithmError, match="nor an int argument names"):
        @dt.algorithm
        def bad(X: dt.Tensor["M"]):
            i, = dt.axes("i:Q")
            return X.pad(0.0)[i + 1][i]


@dt.algorithm
def prefix_shift(X: dt.Tensor["M", "N"], n: int):
    i, k = dt.axes("i k:N")
    return dt.sum(dt.where(k < n, X[i, k + 1], 0.0), over=k)[i]


def test_guard_inside_a_reduction_with_an_int_argument():
    """sum over k < n of X[i, k + 1]: inside for n < N (any n, the kernel unchanged), an error from
    n = N on, in the reference and the kernel alike."""
    X = randn(4, 6)
    k = dt.compile(prefix_shift)
    for n in (0, 3, 5):
        assert [r.verdict for r in prefix_shift.bind([X, n]).reads] == ["guarded"]
        check(prefix_shift, [X, n], kernel=k, torch_ref=lambda X, n: X[:, 1:n + 1].sum(1))
    for f in (prefix_shift.reference, k):
        with pytest.raises(dt.IndexRangeError, match=r"\(k \+ 1\) takes the values 1\.\.6"):
            f(X, 6)


def test_literal_index_padded_outside_reads_the_padding():
    @dt.algorithm
    def plus_col7(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return (X[i, j] + X.pad(-2.0)[i, 7])[i, j]
    k = dt.compile(plus_col7)
    check(plus_col7, [randn(3, 5)], kernel=k, torch_ref=lambda X: X - 2)
    check(plus_col7, [randn(3, 9)], kernel=k, torch_ref=lambda X: X + X[:, 7:8])


@dt.algorithm
def clamped_next(X: dt.Tensor["M", "N"], n: int):
    """X[i, j + 1], the last column repeated: the index is a dt.where of integers."""
    i, j = dt.axes("i j:N")
    return X[i, dt.where(j + 1 < n, j + 1, j)][i, j]


def test_integer_selection_and_abs_as_indices_stay_integer():
    X = randn(4, 7)
    k = dt.compile(clamped_next)
    check(clamped_next, [X, 7], kernel=k, torch_ref=lambda X, n: X[:, [1, 2, 3, 4, 5, 6, 6]])
    src = k.source_for(X, 7)
    assert "tl.where(" in src and ".to(tl.float32), " not in src.split("tl.where(", 1)[1].split("\n")[0]

    @dt.algorithm
    def mirrored(X: dt.Tensor["M", "N"], c: int):
        i, j = dt.axes("i j:N")
        return X[i, dt.abs(j - c)][i, j]
    check(mirrored, [randn(3, 5), 2], torch_ref=lambda X, c: X[:, [2, 1, 0, 1, 2]])


@dt.algorithm
def affine_read(X: dt.Tensor["L"], Y: dt.Tensor["M", "N"], a: int, b: int, c: int, q: int, m: int):
    """Y[i, j] plus X (padded with 0.5) at ((a i + b j - c) // q) % m + c: every integer operation."""
    i, j = dt.axes("i j")
    return (Y[i, j] + X.pad(0.5)[((i * a + j * b - c) // q) % m + c])[i, j]


nonzero = st.integers(-5, 5).filter(bool)


@given(st.integers(1, 9), st.integers(1, 7), st.integers(1, 12), st.integers(-4, 4), st.integers(-4, 4),
       st.integers(-6, 6), nonzero, nonzero)
def test_random_integer_index_expressions_against_torch(L, M, N, a, b, c, q, m):
    """Hypothesis draws the coefficients, offset, divisor and modulus (of either sign): the kernel,
    the reference and torch's int64 floor division and remainder agree, padding included."""
    X, Y = randn(L), randn(M, N)

    def ref(X, Y, a, b, c, q, m):
        ii, jj = torch.arange(M)[:, None], torch.arange(N)[None, :]
        idx = torch.remainder(torch.div(ii * a + jj * b - c, q, rounding_mode="floor"), m) + c
        ok = (idx >= 0) & (idx < L)
        return Y + torch.where(ok, X[idx.clamp(0, L - 1)], torch.full((), 0.5, dtype=X.dtype))
    check(affine_read, [X, Y, a, b, c, q, m], torch_ref=ref)


@dt.algorithm
def next_or_zero(X: dt.Tensor["M", "N"], n: int):
    i, j = dt.axes("i j:N")
    return dt.where(j + 1 < n, X[i, j + 1], 0.0)[i, j]


def test_edge_guard_of_a_shifted_axis_is_proved_before_running():
    """where(j + 1 < n, X[i, j + 1], 0): inside its branch for n <= N (no check on the data needed),
    provably outside for n > N."""
    X = randn(3, 5)
    assert [r.verdict for r in next_or_zero.bind([X, 5]).reads] == ["guarded"]
    check(next_or_zero, [X, 5], torch_ref=lambda X, n: F.pad(X, (0, 1))[:, 1:])
    with pytest.raises(dt.IndexRangeError, match=r"\(j \+ 1\) takes the values 1\.\.5"):
        next_or_zero.reference(X, 6)
