"""Gradient fuzzing in the suite (``fuzz_grad``): ``dt.grad``'s reference and backward kernels
against torch autograd through the fuzzer's evaluator, in float64, on the interpreter.

The seeds that found a wrong gradient (session 7) are replayed, then a fixed block of seeds;
about 5 s together."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_grad import grad_case  # noqa: E402

#: seed -> what it found
FOUND = {1004: "a value broadcast along a summed axis got one term instead of N; dX0 of a mean "
               "constant along l raised (carrier term)",
         3199: "maximum/minimum with a NaN side gave no gradient (torch: both sides all of it)",
         6529: "abs at 0 under an infinite upstream gradient gave 0 (torch: bar * sgn(x), NaN)",
         6681: "the same through sqrt(abs(maximum(...)))",
         9998: "the default schedule of its backward raised ScheduleError: the attention rule fused a mean that a "
               "sum over another axis also reads, into a kernel whose grid split the mean's axis"}


@pytest.mark.parametrize("seed", sorted(FOUND))
def test_gradient_fuzz_regressions(seed):
    outcome, detail = grad_case(seed, kernels=True)
    assert outcome == "match", f"seed {seed} ({FOUND[seed]}): {outcome}: {detail}"


def test_gradient_fuzz_block():
    bad = []
    for seed in range(4000, 4040):
        outcome, detail = grad_case(seed, kernels=True)
        if not (outcome == "match" or outcome.startswith("skip:")):
            bad.append(f"{seed} {outcome}: {detail}")
    assert not bad, "\n".join(bad)
