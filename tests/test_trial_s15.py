"""Fixes from the session-15 fresh-user trial (README only, a clean clone, the CPU interpreter)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import dtriton as dt

INF = float("inf")


@dt.algorithm
def masked_softmax(X: dt.Tensor["M", "N"], L: dt.Tensor["M"]):
    i, j = dt.axes("i j")
    s = dt.where(j < L[i], X[i, j], -INF)
    e = dt.exp(s - dt.max(s, over=j))
    return (e / dt.sum(e, over=j))[i, j]


def test_masked_lanes_raise_no_numpy_warning_under_warnings_as_errors():
    """Lanes that masks discard compute -inf - -inf on the interpreter: under ``-W error`` (pytest's
    filterwarnings = error) a correct call failed with a CompileError naming a RuntimeWarning."""
    torch.manual_seed(2)
    for M, N in [(1, 1), (3, 7), (4, 13)]:
        x = torch.randn(M, N) * 3
        lens = torch.randint(1, N + 1, (M,))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            y = dt.compile(masked_softmax)(x, lens)
        keep = torch.arange(N)[None, :] < lens[:, None]
        ref = torch.softmax(x.double().masked_fill(~keep, -INF), dim=1)
        torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-6)


@dt.algorithm
def plane_mean(X: dt.Tensor["N", "C", "H", "W"]):
    n, c, h, q = dt.axes("n c h q")
    return dt.mean(X[n, c, h, q], over=(h, q))[n, c]


@dt.algorithm
def plane_max(X: dt.Tensor["N", "C", "H", "W"]):
    n, c, h, q = dt.axes("n c h q")
    return dt.max(X[n, c, h, q], over=(h, q))[n, c]


@pytest.mark.parametrize("shape", [(1, 1, 4, 5), (1, 1, 5, 6), (1, 2, 4, 5), (2, 3, 4, 5)])
@pytest.mark.parametrize("alg, ref", [(plane_mean, lambda x: x.mean((2, 3))), (plane_max, lambda x: x.amax((2, 3)))])
@pytest.mark.parametrize("mode", ["partials", "finish", "last"])
def test_flat_output_axes_of_one_element_under_a_split(shape, alg, ref, mode):
    """flat_axes=2 with a split statistics kernel: where the output's flat axis held one element in all (tiles
    of 1), its kernel looped over the members and stored a block to a scalar address (CompileError)."""
    torch.manual_seed(3)
    x = torch.randn(shape)
    out = torch.full(shape[:2], float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dt.ScheduleWarning)   # (the flat_axes note where a kernel keeps its tiles)
        dt.compile(alg, dt.Schedule(flat_axes=2, split={"h": 2}, split_mode=mode))(x, out=out)
    torch.testing.assert_close(out.double(), ref(x.double()), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kw, msg", [
    (dict(split={"j": True}), r"split\['j'\] = True must be a positive integer \(got the bool True\)"),
    (dict(tile={"j": np.int64(8)}), r"must be an int .*\(got numpy\.int64 8: pass int\(8\)\)"),
    (dict(split={"j": np.int64(2)}), r"must be a positive integer \(got numpy\.int64 2: pass int\(2\)\)"),
    (dict(num_warps=np.int64(4)), r"num_warps = np\.int64\(4\) must be a power of two .*\(got numpy\.int64 4: pass int\(4\)\)"),
    (dict(num_stages=True), r"num_stages = True must be an integer from 1 to 8 \(got the bool True\)"),
    (dict(split={"j": np.int64(0)}), r"must be a positive integer \(got numpy\.int64 0\)$"),
])
def test_schedule_integers_refuse_bools_and_name_numpy_integers(kw, msg):
    """Per-axis knobs (first trial s15) and value knobs (second trial): a bool or a numpy integer is named, with
    the int() that passes it where that is valid."""
    with pytest.raises(dt.ScheduleError, match=msg):
        dt.Schedule(**kw)


def test_a_backward_schedule_callable_returning_no_schedule_is_named():
    @dt.algorithm
    def scaled(X: dt.Tensor["M", "N"], w: dt.Tensor["N"]):
        i, j = dt.axes("i j")
        return (X[i, j] * w[j])[i, j]
    dk = dt.compile_autograd(scaled, backward_schedules=lambda alg: "fast")
    x, w = torch.randn(3, 5, requires_grad=True), torch.randn(5, requires_grad=True)
    with pytest.raises(dt.ScheduleError, match=r"backward_schedules \(a callable\) returned str 'fast' for the backward "
                                               r"algorithm '\w+': it must return a dt\.Schedule, or None"):
        dk(x, w).sum().backward()


def test_whole_strategy_on_a_split_axis_says_it_loops():
    """Fresh-user trial s15: strategy={'j': 'whole'} with split={'j': 3} ran a loop over tiles of 16 per slice
    while the completed schedule still read 'whole', silently."""
    @dt.algorithm
    def rsum(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.sum(X[i, j], over=j)[i]
    x = torch.randn(2, 100)
    with pytest.warns(dt.ScheduleWarning, match=r"strategy=\{'j': 'whole'\} has no effect on split axis 'j': each "
                                                r"program steps over its slice of 'j' in tiles of \d+"):
        y = dt.compile(rsum, dt.Schedule(split={"j": 3}, strategy={"j": "whole"}))(x)
    torch.testing.assert_close(y.double(), x.double().sum(1), rtol=1e-5, atol=1e-5)
    with warnings.catch_warnings():   # the heuristic's own choice for the same split says nothing
        warnings.simplefilter("error", dt.ScheduleWarning)
        dt.compile(rsum, dt.Schedule(split={"j": 3}))(x)


def test_a_dims_mismatch_quotes_the_algorithms_own_reading_of_its_input():
    """Trial s15: group_norm given an NCHW tensor said only 'must have 5 dims'; its docstring has the view."""
    from dtriton.library import group_norm
    with pytest.raises(dt.ShapeError, match=r"must have 5 dims \['N', 'G', 'D', 'H', 'W'\], got 4 \(shape \(2, 8, 5, 5\)\)"
                                            r"\. group_norm: Group norm of an NCHW tensor viewed as .*x\.view\(n, g, -1, h, w\)"):
        dt.compile(group_norm)(torch.randn(2, 8, 5, 5))


def test_two_backward_schedule_entries_for_one_backward_kernel_are_refused():
    """Second trial s15: dX and dw come from one backward algorithm; {'X': ..., 'w': ...} silently kept X's."""
    @dt.algorithm
    def lnorm(X: dt.Tensor["M", "N"], w: dt.Tensor["N"]):
        i, j = dt.axes("i j")
        mu = dt.mean(X[i, j], over=j)
        d = X[i, j] - mu
        v = dt.mean(d * d, over=j)
        return (d / dt.sqrt(v + 1e-5) * w[j])[i, j]
    x, w = torch.randn(3, 5, requires_grad=True), torch.randn(5, requires_grad=True)
    dk = dt.compile_autograd(lnorm, backward_schedules={"w": dt.Schedule(split={"i": 2}), "X": dt.Schedule(num_warps=2)})
    with pytest.raises(dt.ScheduleError, match=r"backward_schedules: the keys '(X|w)', '(X|w)' all name the backward "
                                               r"algorithm 'lnorm_grad_X_w' .*give one entry, keyed 'lnorm_grad_X_w'"):
        dk(x, w).sum().backward()
    same = dt.Schedule(num_warps=2)   # equal entries are one choice
    dt.compile_autograd(lnorm, backward_schedules={"w": same, "X": same})(x, w).sum().backward()


def test_a_tile_that_cannot_feed_every_split_program_says_how_many_it_can():
    """Second trial s15: 5 elements split 4 ways in tiles of 4: the tile advice left one program idle still."""
    @dt.algorithm
    def rowmean(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.mean(X[i, j], over=j)[i]
    x = torch.randn(3, 5)
    with pytest.warns(dt.ScheduleWarning, match=r"only 2 of its 4 split programs get work; give a tile of at most 2 "
                                                r"for 'j' \(the schedule's or the stage's tile\) \(3 of them: no tile feeds all 4\)"):
        y = dt.compile(rowmean, dt.Schedule(split={"j": 4}, tile={"j": 4}, strategy={"j": "loop"}))(x)
    torch.testing.assert_close(y.double(), x.double().mean(1), rtol=1e-6, atol=1e-6)


def test_flat_axes_note_names_an_atomic_split_and_its_fix():
    """Second trial s15: the note blamed a fused sum where the sum was split by atomics; split_mode='partials'
    flattens it with no note."""
    @dt.algorithm
    def psum(X: dt.Tensor["N", "C", "H", "W"]):
        n, c, h, q = dt.axes("n c h q")
        return dt.sum(X[n, c, h, q], over=(h, q))[n, c]
    x = torch.randn(2, 3, 8, 8)
    with pytest.warns(dt.ScheduleWarning, match=r"flat_axes=2 has no effect: .*nor is a sum split across programs by "
                                                r"atomics, as here: split_mode='partials' keeps the split"):
        y = dt.compile(psum, dt.Schedule(flat_axes=2, split={"h": 2}))(x)
    torch.testing.assert_close(y.double(), x.double().sum((2, 3)), rtol=1e-5, atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        y = dt.compile(psum, dt.Schedule(flat_axes=2, split={"h": 2}, split_mode="partials"))(x)
    torch.testing.assert_close(y.double(), x.double().sum((2, 3)), rtol=1e-5, atol=1e-5)
