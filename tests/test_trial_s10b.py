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
    (-float("inf"), torch.int64, r"write X\.pad\(-9223372036854775808\)"),
    (float("inf"), torch.int32, r"write X\.pad\(2147483647\)"),
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
