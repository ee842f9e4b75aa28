"""The base-2 form of a max-shifted exponential keeps the row max exact in natural units
(:func:`dtriton.ir.base2_exponents`): the max stage stays ``max(X)`` and each exponent reads
``X * log2(e) - max(X) * log2(e)``, the shift formed as each element's exponent is (rounding is
monotone, so the argmax element's exponent is exactly 0). Its other uses (cross-entropy's
``max + log(sum) - X[label]``, a saved log-sum-exp) then read ``max(X)`` itself.

Before, those uses read ``max(X * log2(e)) * ln(2)``, up to an ulp below ``max(X)``: a row whose
label logit dominates (the other exponentials underflow) had a cross-entropy of about -1e-6 where
torch's is 0 (user trial, s18). Interpreter, odd sizes, NaN-poisoned outputs, float64 references.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import dtriton as dt
from conftest import poisoned_outputs
from dtriton.grad import augmented_forward, saved_statistics
from dtriton.ir import Binary, Reduce, Unary, base2_exponents, walk
from dtriton.library import cross_entropy, log_softmax, softmax

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")

TOL = {torch.float16: 2e-3, torch.bfloat16: 2e-2}
SCHEDULES = {"default": None, "online": dt.Schedule(strategy={"j": "online"}, tile={"j": 8}),
             "whole": dt.Schedule(strategy={"j": "whole"})}


def _rows(dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (6, 37) and labels: dominated rows (12 / 11.5 / 13.25 against -12 / -9, the other
    exponentials underflow), rows with -inf entries, a row all equal, random rows."""
    X = (torch.randn(6, 37, generator=gen) * 3).to(dtype)
    labels = torch.randint(0, 37, (6,), generator=gen)
    X[0] = -12.0
    X[0, 5], labels[0] = 12.0, 5
    X[1] = -12.0
    X[1, 30], labels[1] = 11.5, 30
    X[2, 7] = X[2, 8] = -math.inf
    labels[2] = 3
    X[3], labels[3] = 0.75, 9
    X[4] = -9.0
    X[4, 0], X[4, 1], labels[4] = 13.25, -math.inf, 0
    return X, labels


@pytest.mark.parametrize("sched", SCHEDULES, ids=list(SCHEDULES))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_cross_entropy_is_never_negative(gen, dtype, sched):
    X, labels = _rows(dtype, gen)
    k = dt.compile(cross_entropy, SCHEDULES[sched])
    assert "tl.exp2(" in k.source_for(X, labels)   # (the base-2 form is what is tested)
    got = k(X, labels, out=poisoned_outputs(cross_entropy, [X, labels])[0]).double()
    want = F.cross_entropy(X.double(), labels, reduction="none")
    assert not torch.isnan(got).any()
    assert (got >= 0).all(), got
    torch.testing.assert_close(got, want, rtol=TOL[dtype], atol=TOL[dtype])
    dominated = torch.tensor([0, 1, 4])
    assert torch.equal(got[dominated], torch.zeros(3, dtype=torch.float64)), got[dominated]


@pytest.mark.parametrize("sched", ["default", "online"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_saved_log_sum_exp_is_at_least_the_max(gen, dtype, sched):
    """The saving forward's loss is never negative and its lse never below the row max (the
    backward reads it as the shift: a probability above 1 would come of it)."""
    X, labels = _rows(dtype, gen)
    aug, _ = augmented_forward(cross_entropy, saved_statistics(cross_entropy))
    loss, lse = dt.compile(aug, SCHEDULES[sched])(X, labels, out=poisoned_outputs(aug, [X, labels]))
    assert (loss.double() >= 0).all(), loss
    assert (lse.double() >= X.double().amax(1)).all(), lse.double() - X.double().amax(1)
    torch.testing.assert_close(lse.double(), torch.logsumexp(X.double(), 1), rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_log_softmax_and_softmax_at_the_row_max(gen, dtype):
    """Log-softmax's largest entry per row is <= 0, and exactly 0 where torch's is; softmax's <= 1."""
    X, _ = _rows(dtype, gen)
    for name, sched in SCHEDULES.items():
        ls = dt.compile(log_softmax, sched)(X, out=poisoned_outputs(log_softmax, [X])[0])
        top, want = ls.double().amax(1), torch.log_softmax(X, 1).double().amax(1)
        assert (top <= 0).all() and torch.equal(top[want == 0], want[want == 0]), (name, top)
        torch.testing.assert_close(ls.double(), torch.log_softmax(X.double(), 1), rtol=TOL[dtype], atol=TOL[dtype])
        p = dt.compile(softmax, sched)(X, out=poisoned_outputs(softmax, [X])[0]).double()
        assert (p <= 1).all(), (name, p.amax(1))
        torch.testing.assert_close(p, torch.softmax(X.double(), 1), rtol=TOL[dtype], atol=TOL[dtype])


def test_rewrite_keeps_the_natural_max():
    """Cross-entropy and log-softmax: every exp becomes exp2 of ``(X - m) * log2(e)`` with
    ``m = max(X)`` the traced stage (no ``* ln(2)`` conversion back): the difference is exact at
    the row max whatever FMA the compiler forms (``X * log2(e) - m * log2(e)`` was not on the H200:
    -6e-5 losses, s18 call 4)."""
    for alg in (cross_entropy, log_softmax):
        out = base2_exponents(alg, lambda r: True)
        nodes = list(walk([o.expr for o in out.outputs]))
        exps = [n for n in nodes if isinstance(n, Unary) and n.op.startswith("exp")]
        assert exps and all(n.op == "exp2" for n in exps)
        (m,) = [n for n in nodes if isinstance(n, Reduce) and n.combiner.name == "max"]
        assert "1.44269" not in str(m.x) and "0.693147" not in str(out.outputs[0].expr)
        for e in exps:
            d = e.x.a
            assert e.x.op == "mul" and abs(e.x.b.value - 1.4426950408889634) < 1e-15
            assert isinstance(d, Binary) and d.op == "sub" and d.b is m and d.a is m.x


@dt.algorithm
def scaled_cross_entropy(X: dt.Tensor["M", "N"], labels: dt.Tensor["M"], t: float):
    """Cross-entropy of logits ``X * t`` (a temperature): the scale would fold into log2(e)."""
    i, j = dt.axes("i j")
    s = X[i, j] * t
    m = dt.max(s, over=j)
    return (m + dt.log(dt.sum(dt.exp(s - m), over=j)) - X[i, labels[i]] * t)[i]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_scaled_cross_entropy_takes_the_exact_form(gen, dtype):
    """With a scalar factor the base-2 max would fold it (attention's form) and its other uses
    read ``max2 * ln(2)``; a loss that subtracts a logit from it takes the exact form instead."""
    X, labels = _rows(dtype, gen)
    sched = SCHEDULES["online"]
    args = [X, labels, 1.5]   # (at 1.5 the folded form gave -1.9e-6 on row 1)
    assert "tl.exp2(" in dt.compile(scaled_cross_entropy, sched).source_for(*args)
    got = dt.compile(scaled_cross_entropy, sched)(*args, out=poisoned_outputs(scaled_cross_entropy, args)[0])
    want = F.cross_entropy(X.double() * 1.5, labels, reduction="none")
    assert (got.double() >= 0).all(), got
    assert torch.equal(got[[0, 1, 4]].double(), torch.zeros(3, dtype=torch.float64)), got
    torch.testing.assert_close(got.double(), want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_saved_max_is_the_max(gen, dtype):
    """A saving forward that keeps the max and the sum: the saved max is max(X) bit for bit."""
    X, _ = _rows(dtype, gen)
    aug, _ = augmented_forward(softmax, ["max0", "sum0"])
    sched = SCHEDULES["online"]
    assert "tl.exp2(" in dt.compile(aug, sched).source_for(X)
    _, m, _ = dt.compile(aug, sched)(X, out=poisoned_outputs(aug, [X]))
    assert torch.equal(m.double(), X.double().amax(1)), m.double() - X.double().amax(1)
