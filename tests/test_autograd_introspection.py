"""What a differentiable kernel reports about its passes: ``launch_counts`` and ``gradients().saved``
under tuned kernels and under schedules whose forward cannot save the statistics (session 18 trial).

Softmax's backward reads the forward's row max and sum (saved as one log-sum-exp statistic,
``lse_max0_sum0``) when the forward saves them, else recomputes them. Whether it saves is decided per
call signature: a schedule whose saving forward takes more kernels than the plain one (a grid over
the reduced axis) saves nothing. Shapes are small: everything runs on Triton's interpreter.
"""

from __future__ import annotations

import time
import warnings

import pytest
import torch

import dtriton as dt
from dtriton.library import softmax
from dtriton.tune.db import TuningDB, TuningKey, TuningRecord

pytestmark = pytest.mark.filterwarnings("ignore::dtriton.ScheduleWarning")

ROWS = dt.Schedule(tile={"i": 2, "j": 4}, grid=("i",), strategy={"j": "loop"})   # one kernel, saving or not
SPLIT = dt.Schedule(tile={"i": 2, "j": 4}, grid=("i", "j"))   # the row reductions in kernels of their own


def _inputs(seed: int, M: int = 4, N: int = 16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, N, generator=g), torch.randn(M, N, generator=g)


def _check_against_float64(dk, X, G):
    x = X.clone().requires_grad_()
    y = dk(x)
    y.backward(G)
    x64 = X.double().requires_grad_()
    y64 = torch.softmax(x64, dim=1)
    y64.backward(G.double())
    torch.testing.assert_close(y.double(), y64, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-5, atol=1e-6)


def _reads_saved(runners) -> bool:
    """Whether the backward kernels that ran take a saved forward statistic."""
    return any(p.name.startswith("saved_") for r in runners for p in r.alg.params)


def test_a_tuned_kernel_saves_the_statistics_and_counts_its_forward(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRITON_TUNING_DB", str(tmp_path / "tuning.sqlite"))   # empty: the heuristic
    dk = dt.compile_autograd(softmax, "tuned")
    X, G = _inputs(1)
    for _ in range(2):   # the general path, then the steady step
        _check_against_float64(dk, X, G)
        assert dk.launch_counts() == {"forward": 1, "backward": 1}
        (fwd,) = dk.last_runs["forward"]
        assert len(fwd.alg.outputs) == 2   # the output and the saved statistic
        assert _reads_saved(dk.last_runs["backward"])
        assert dk.gradients().saved == ("lse_max0_sum0",)


@pytest.mark.parametrize("stored,saves", [(ROWS, True), (SPLIT, False)], ids=["rows", "split"])
def test_a_tuned_kernel_saves_with_the_schedule_it_chose(tmp_path, stored, saves):
    X, G = _inputs(2)
    db = TuningDB(tmp_path / "tuning.sqlite")
    db.store(TuningRecord(TuningKey.for_call(softmax, (X,)), "softmax", stored.to_json(), 10.0, 9.0, 11.0,
                          dict(softmax.bind((X,)).sizes), time.time()))
    dk = dt.differentiable(dt.tune.tuned.TunedKernel(softmax, db=db))
    assert dk.kernel.origin_for(X) == "tuned"
    assert dk.gradients(args=(X,)).saved == (("lse_max0_sum0",) if saves else ())
    _check_against_float64(dk, X, G)
    (fwd,) = dk.last_runs["forward"]
    chosen = dk.kernel.kernel_for(X)
    if saves:   # the saving forward, with the stored schedule
        assert len(fwd.alg.outputs) == 2 and fwd.schedule is chosen.schedule
    else:       # the tuned kernel itself: its saving forward would take more kernels
        assert fwd.alg is softmax and fwd.last is dk.kernel
    assert dk.launch_counts()["forward"] == (1 if saves else 3)   # (the split: max, sum, output)
    assert _reads_saved(dk.last_runs["backward"]) is saves
    assert dk.gradients().saved == (("lse_max0_sum0",) if saves else ())


def test_gradients_report_what_the_calls_forward_saved():
    X, G = _inputs(3)
    split = dt.compile_autograd(softmax, SPLIT)
    assert split.gradients(args=(X,)).saved == ()
    _check_against_float64(split, X, G)
    assert not _reads_saved(split.last_runs["backward"])
    assert split.gradients().saved == ()   # the most recent call's
    assert split.gradients(["X"]).saved == ()
    rows = dt.compile_autograd(softmax, ROWS)
    assert rows.gradients(args=(X,)).saved == ("lse_max0_sum0",)
    _check_against_float64(rows, X, G)
    assert _reads_saved(rows.last_runs["backward"]) and rows.gradients().saved == ("lse_max0_sum0",)
    assert dt.compile_autograd(softmax, ROWS, save=None).gradients(args=(X,)).saved == ()


@pytest.mark.parametrize("bad", [torch.zeros(4, 16), (), (torch.zeros(4, 16), 1)])
def test_gradients_refuses_args_that_are_not_a_call(bad):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dk = dt.compile_autograd(softmax)
    with pytest.raises(TypeError, match=r"args must be a call's arguments, a tuple of 1 \(one per parameter: X\)"):
        dk.gradients(args=bad)
