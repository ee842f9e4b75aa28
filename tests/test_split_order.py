"""``split_order``: which tiles of a split axis each slice's program visits (blocked runs or interleaved
tiles j, j + split, ...), checked against float64 torch on odd sizes under every split mode, for a
whole-tensor statistic, a split-K matmul and a masked loop (which keeps blocked slices, with a note);
and the heuristic's choice on the GPU's plans (interleaved for a split whole-tensor statistic only)."""

import pytest
import torch

import dtriton as dt
from dtriton.errors import ScheduleError
from dtriton.library import frobenius_normalize, matmul
from test_bounds import _plan, tril_matmul
from test_norm_tiles import bench_args, gpu_schedule

MODES = ("atomic", "partials", "finish", "last")


def _fro_ref(x):
    return x.double() / torch.linalg.vector_norm(x.double())


def _fro_sched(split, mode, order, tile):
    """The statistics kernel looping over n, c, h (tiles ``tile``, c in 2s), q whole, split by ``split``."""
    return dt.Schedule(split=split, split_mode=mode, split_order=order,
                       stages={"sum0": {"tile": {"n": 1, "h": 1, **tile, "c": 2},
                                        "strategy": {"n": "loop", "c": "loop", "h": "loop", "q": "whole"}}})


def _poisoned_call(k, *args):
    out = torch.full(args[0].shape, float("nan"), dtype=args[0].dtype)
    k(*args, out=out)
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape, split, tile", [
    ((5, 3, 7, 9), {"n": 2, "h": 3}, {"n": 1, "h": 2}),     # sizes no split or tile divides
    ((4, 8, 6, 8), {"n": 3}, {"n": 1}),                       # more slices than some programs' tiles
    ((1, 2, 3, 5), {"h": 4}, {"h": 1}),                       # a slice with no tile at all
])
def test_interleaved_frobenius_matches_float64_in_every_mode(mode, shape, split, tile):
    torch.manual_seed(sum(shape))
    x = torch.randn(shape)
    ref = _fro_ref(x)
    for order in ("blocked", "interleaved"):
        k = dt.compile(frobenius_normalize, _fro_sched(split, mode, order, tile))
        y = _poisoned_call(k, x)
        assert torch.isfinite(y).all()
        torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-6)
    src = dt.compile(frobenius_normalize, _fro_sched(split, mode, "interleaved", tile)).source_for(x)
    assert "interleaved slices" in src
    a = next(iter(split))
    assert f"range({a}_lo, {a}_hi, {split[a]} * BLOCK_{a.upper()}" in src


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_interleaved_split_k_matmul(dtype):
    torch.manual_seed(3)
    a, b = torch.randn(37, 53).to(dtype), torch.randn(53, 29).to(dtype)
    ref = a.double() @ b.double()
    for order in ("blocked", "interleaved"):
        k = dt.compile(matmul, dt.Schedule(split={"k": 3}, tile={"i": 16, "j": 16, "k": 8}, split_order=order))
        y = k(a, b)
        torch.testing.assert_close(y.double(), ref, rtol=2e-2 if dtype == torch.float16 else 1e-5,
                                   atol=5e-2 if dtype == torch.float16 else 1e-4)


def test_masked_split_loop_keeps_blocked_slices_with_a_note():
    torch.manual_seed(4)
    A, B = torch.randn(37, 45), torch.randn(45, 19)
    sched = dt.Schedule(grid=("i", "j"), tile={"i": 16, "j": 16, "k": 8}, split={"k": 2}, split_order="interleaved")
    prog = _plan(tril_matmul, (A, B), sched)
    assert [k.split_interleaved for k in prog.kernels if k.split_axes] == [False]
    k = dt.compile(tril_matmul, sched)
    with pytest.warns(dt.ScheduleWarning, match="split_order=.interleaved. is not applied .* a mask bounds"):
        y = k(A, B)
    torch.testing.assert_close(y.double(), torch.tril(A.double()) @ B.double(), rtol=1e-5, atol=1e-4)


def test_split_order_without_a_split_warns():
    x = torch.randn(2, 3, 4, 5)
    k = dt.compile(frobenius_normalize, dt.Schedule(split_order="interleaved"))
    with pytest.warns(dt.ScheduleWarning, match="split_order='interleaved' has no effect"):
        k(x)


def test_split_order_is_validated():
    with pytest.raises(ScheduleError, match="split_order = 'strided' must be one of"):
        dt.Schedule(split_order="strided")


@pytest.mark.parametrize("name, want", [("frobenius", "interleaved"), ("layer_norm_chw", None),
                                        ("batch_norm", None), ("instance_norm", None)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_heuristic_interleaves_split_whole_tensor_statistics_only(name, want, dtype):
    """16-bit only (H200 s14 call 3: the fp32 Frobenius call was 2.3 us slower interleaved)."""
    alg, args = bench_args(name, dtype)
    assert gpu_schedule(alg, args).split_order == (want if dtype == torch.float16 else None)


@dt.algorithm
def sum_ac(X: dt.Tensor["A", "B", "C"]):
    a, b, c = dt.axes("a b c")
    return dt.sum(X[a, b, c], over=(a, c))[b]


@pytest.mark.parametrize("shape, split, fit", [
    ((3, 4, 3000), 4, 256),    # the heuristic's 1024-wide tile left the fourth program idle
    ((3, 4, 13), 2, 8),        # one block of 16 covered the 13 elements: only the first program worked
])
def test_a_users_split_gets_tiles_that_give_every_split_program_work(shape, split, fit):
    import warnings
    torch.manual_seed(5)
    x = torch.randn(shape)
    k = dt.compile(sum_ac, dt.Schedule(split={"c": split}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        y = k(x)
    torch.testing.assert_close(y.double(), x.double().sum((0, 2)), rtol=1e-5, atol=1e-4)
    s = k.schedule_for(x)
    assert s.tile["c"] == fit and s.strategy["c"] == "loop", s


@pytest.mark.parametrize("shape, split, tile, busy, fit", [
    ((3, 4, 3000), 4, 1024, 3, 256),    # the user's own tile: kept, and the idle program reported
    ((3, 4, 13), 2, 16, 1, 8),
])
def test_a_users_tile_leaving_split_programs_idle_is_reported_with_the_tile_that_fits(shape, split, tile, busy, fit):
    torch.manual_seed(5)
    x = torch.randn(shape)
    sched = dt.Schedule(split={"c": split}, tile={"c": tile}, strategy={"c": "loop"})
    with pytest.warns(dt.ScheduleWarning, match=rf"only {busy} of its {split} split programs get work; .*at most {fit} "):
        y = dt.compile(sum_ac, sched)(x)
    torch.testing.assert_close(y.double(), x.double().sum((0, 2)), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n, split, best", [(10, 8, 5), (3, 8, 3), (1, 4, 1)])
def test_a_split_into_more_slices_than_any_tile_can_fill_says_so(n, split, best):
    """Blocked slices of ceil(n / split) elements: 10 elements in 8 slices are 5 runs of 2 whatever the tile
    (fresh-user trial s15: the note proposed the tile of 1 already in place, or said nothing for 3 elements)."""
    torch.manual_seed(5)
    x = torch.randn(2, 3, n)
    fix = f"split 'c' at most {best} ways" if best > 1 else "drop the split of 'c'"
    with pytest.warns(dt.ScheduleWarning, match=rf"only {best} of its {split} split programs can get work whatever "
                                                rf"the tile; {fix}") as rec:
        y = dt.compile(sum_ac, dt.Schedule(split={"c": split}))(x)
    assert not [w for w in rec if "give a tile" in str(w.message)]
    torch.testing.assert_close(y.double(), x.double().sum((0, 2)), rtol=1e-5, atol=1e-5)


def test_a_split_of_an_empty_axis_sums_to_zero():
    """Fresh-user trial s15: split over an axis of 0 elements raised ZeroDivisionError in the idle-program note."""
    @dt.algorithm
    def row_sum(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.sum(X[i, j], over=j)[i]
    x = torch.randn(3, 0)
    y = dt.compile(row_sum, dt.Schedule(split={"j": 2}))(x)
    assert torch.equal(y, torch.zeros(3))
