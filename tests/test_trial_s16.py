"""Findings of session 16's fresh-user trials, fixed.

A mean computed in one pass with a variance (statistics-then-normalise algorithms) over values holding an
infinity came out NaN instead of the infinity when the reduced axis was split with per-split buffers
(``partials``, ``finish``, ``last``): a lane (or a program) shifted its values by its first one, an inf, so
``x - k`` turned the finite values into -inf and the inf into NaN, and Chan's merge of a state with an
infinite mean computed ``inf - inf``. Shifts are now finite (0 where the first value or the first tile's
mean is not) and the merge weighs two means when their difference is not finite. Checked against torch on
the interpreter, rows with +inf, -inf, both, and NaN at every position, under every split mode and strategy.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import dtriton as dt
from dtriton.library import batch_norm


@dt.algorithm
def row_mean_var(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    mu = dt.mean(X[i, j], over=j)
    return mu[i], dt.mean((X[i, j] - mu) * (X[i, j] - mu), over=j)[i]


SCHEDULES = [None, dt.Schedule(tile={"j": 4}, strategy={"j": "loop"})] + [
    dt.Schedule(split={"j": s}, split_mode=m) for s in (2, 3) for m in ("atomic", "partials", "finish", "last")]


def rows(n: int) -> torch.Tensor:
    """Rows of ``n`` finite values, then each special pattern at every position."""
    torch.manual_seed(n)
    base = torch.randn(1, n) + 5.0
    out = [base]
    for p in range(n):
        for v in (float("inf"), float("-inf"), float("nan")):
            r = base.clone()
            r[0, p] = v
            out.append(r)
        r = base.clone()
        r[0, p], r[0, (p + 1) % n] = float("inf"), float("-inf")
        out.append(r)
    return torch.cat(out)


def same(got: torch.Tensor, ref: torch.Tensor, tol: float) -> bool:
    """Equal infinities and NaNs where the reference has them, close elsewhere."""
    g, r = got.double(), ref.double()
    fin = torch.isfinite(r)
    if not torch.equal(torch.isnan(g), torch.isnan(r)) or not torch.equal(torch.isinf(g) & (g > 0), torch.isinf(r) & (r > 0)):
        return False
    if not torch.equal(torch.isinf(g) & (g < 0), torch.isinf(r) & (r < 0)):
        return False
    return bool(((g[fin] - r[fin]).abs() <= tol * (1 + r[fin].abs())).all())


@pytest.mark.parametrize("sched", SCHEDULES, ids=lambda s: "default" if s is None else s.to_json())
@pytest.mark.parametrize("n", [7, 10])
def test_mean_beside_a_variance_keeps_infinities(sched, n):
    X = rows(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mu, var = dt.compile(row_mean_var, sched)(X)
    assert same(mu, X.double().mean(1), 1e-5), (mu, X.double().mean(1))
    assert same(var, X.double().var(1, correction=0), 1e-4), (var, X.double().var(1, correction=0))


@dt.algorithm
def channel_mean_var(X: dt.Tensor["N", "C", "H", "W"]):
    n, c, h, q = dt.axes("n c h q")
    mu = dt.mean(X[n, c, h, q], over=(n, h, q))
    xc = X[n, c, h, q] - mu
    return mu[c], dt.mean(xc * xc, over=(n, h, q))[c]


@pytest.mark.parametrize("mode", ["partials", "finish", "last"])
def test_program_shifted_means_keep_infinities(mode):
    """Per-channel statistics split over n, whose programs shift by their first tile's mean
    (``backends/triton/shifted.py``): an inf in a first tile gives that channel's mean inf and variance NaN,
    as torch's; -inf likewise; the other channels right."""
    torch.manual_seed(1)
    x = torch.randn(4, 3, 6, 8) + 2.0
    x[0, 1, 0, 0] = float("inf")    # the first tile of channel 1's first split
    x[2, 2, 0, 3] = float("-inf")   # the first tile of channel 2's second split
    sched = dt.Schedule(grid=("c",), tile={"c": 1, "n": 1, "h": 2}, strategy={"n": "loop", "h": "loop", "q": "whole"},
                        split={"n": 2}, split_mode=mode)
    k = dt.compile(channel_mean_var, sched)
    assert "the mean of the first tile" in k.source_for(x)   # (the program-shifted statistics)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mu, var = k(x)
    x64 = x.double()
    assert same(mu, x64.mean((0, 2, 3)), 1e-5), mu
    assert same(var, x64.var((0, 2, 3), correction=0), 1e-4), var


@pytest.mark.parametrize("mode", ["partials", "finish", "last"])
def test_program_shifted_statistics_keep_infinities(mode):
    """Batch norm's statistics split over n and h, whose programs shift by their first tile's mean
    (``shifted.py``): an inf in a first tile makes that channel's output NaN, as torch's, and leaves the
    other channels right."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 6, 8) + 2.0
    x[0, 1, 0, 0] = float("inf")   # the first tile of channel 1's first split
    w, b = torch.randn(3), torch.randn(3)
    stages = {s: dt.StageSchedule(grid=("c",), tile={"c": 1, "n": 1, "h": 2},
                                  strategy={"n": "loop", "h": "loop", "q": "whole"}) for s in ("mean0", "mean1")}
    sched = dt.Schedule(grid=("n", "c", "h", "q"), tile={"n": 1, "c": 1, "h": 2, "q": 8}, split={"n": 2},
                        split_mode=mode, stages=stages)
    k = dt.compile(batch_norm, sched)
    assert "the mean of the first tile" in k.source_for(x, w, b)   # (the program-shifted statistics)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = k(x, w, b)
    ref = torch.nn.functional.batch_norm(x.double(), None, None, w.double(), b.double(), training=True, eps=1e-5)
    assert torch.isnan(y[:, 1]).all() and torch.isnan(ref[:, 1]).all()
    assert torch.allclose(y[:, [0, 2]].double(), ref[:, [0, 2]], rtol=1e-4, atol=1e-4)


@dt.algorithm
def ln(X: dt.Tensor["M", "N"], w: dt.Tensor["N"], b: dt.Tensor["N"]):
    i, j = dt.axes("i j")
    mu = dt.mean(X[i, j], over=j)
    xc = X[i, j] - mu
    return (xc * dt.rsqrt(dt.mean(xc * xc, over=j) + 1e-5) * w[j] + b[j])[i, j]


@pytest.mark.parametrize("bad, says", [
    (dt.Schedule(grid=("j",)), "axis 'i' is neither on the grid"),
    (dt.Schedule(split={"k": 2}), "split names axis 'k'"),
])
def test_a_bad_backward_schedule_is_named_as_such(bad, says):
    """A backward schedule's error names ``backward_schedules`` and the backward algorithm it was given for
    (it surfaces at the first backward, when the gradient algorithms are derived)."""
    f = dt.compile_autograd(ln, backward_schedules=bad)
    X = torch.randn(5, 7, requires_grad=True)
    y = f(X, torch.randn(7), torch.randn(7))
    with pytest.raises(dt.ScheduleError, match=r"^backward_schedules, for the backward algorithm 'ln_grad_X[^']*' "
                                                r"\(gradients of X[^)]*\): .*" + says):
        y.sum().backward()


def test_a_stage_given_a_whole_call_knob_says_where_it_belongs():
    with pytest.raises(dt.ScheduleError, match=r"'split_mode': a field of dt.Schedule \(the whole call\), not of a stage"):
        dt.StageSchedule(split_mode="last")
    with pytest.raises(dt.ScheduleError, match=r"did you mean 'tile'") as e:
        dt.StageSchedule(tiles={"i": 2})
    assert "whole call" not in str(e.value)


def test_a_fused_split_stage_names_the_fix():
    with pytest.raises(dt.ScheduleError, match=r"cannot be fused\. Drop stages\['mean0'\]\.place='fuse'"):
        dt.compile(row_mean_var, dt.Schedule(split={"j": 2}, stages={"mean0": dt.StageSchedule(place="fuse")}))(
            torch.randn(4, 9))


def test_a_last_launch_stopped_partway_leaves_the_counters_zero(monkeypatch):
    """An interpreted split_mode='last' launch that stops after some programs arrived (an error; Ctrl-C on
    a slow run) resets the counters, so the next calls fold whole partials (they were garbage: s16 trial)."""
    import triton.runtime.interpreter as interp
    from dtriton.backends.triton.counters import counter_memory
    from dtriton.library import column_sum
    k = dt.compile(column_sum, dt.Schedule(grid=("j",), tile={"j": 8, "i": 4}, strategy={"i": "loop"}, split={"i": 3},
                                           split_mode="last"))
    x = torch.randn(30, 20)
    k(x)   # compiled, counters zero
    real = interp.InterpreterBuilder.create_atomic_rmw
    calls = []

    def stop_at_the_fourth(self, *a, **kw):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(self, *a, **kw)
    monkeypatch.setattr(interp.InterpreterBuilder, "create_atomic_rmw", stop_at_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        k(x)
    monkeypatch.setattr(interp.InterpreterBuilder, "create_atomic_rmw", real)
    assert not counter_memory(torch.device("cpu"), 1).any()
    for seed in (1, 2):
        torch.manual_seed(seed)
        y = torch.randn(30, 20)
        out = torch.full((20,), float("nan"))
        k(y, out=out)
        torch.testing.assert_close(out, y.sum(0), rtol=1e-5, atol=1e-5)
