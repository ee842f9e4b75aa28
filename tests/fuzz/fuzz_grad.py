"""Gradient fuzzing: ``dt.grad`` against torch autograd through the fuzzer's own evaluator.

A case of the grammar (``fuzz_grammar``) is evaluated by ``fuzz_eval.Evaluator`` in float64 on
inputs that require grad, and torch autograd gives the gradient of ``sum(out_n * g_n)`` (random
upstream gradients ``g_n``) with respect to every floating input. ``dt.grad`` of the case's
algorithm must give the same through its backward algorithms' reference evaluator and, with
``kernels=True``, through their kernels on the interpreter (outputs poisoned with NaN).

Outcomes (:func:`grad_case`): ``match``; ``wrong`` (the detail names the input, how many elements
differ and the first values); ``refused`` (``dt.grad`` or a backward kernel raised a dtriton
error); ``skip:<why>`` for cases outside the comparison: ``nofloat`` (no floating input),
``nograd`` (no output depends on one), ``illegal`` (the grammar drew an output dtriton refuses),
``cast`` (a 16-bit cast on the path: torch rounds the gradient through it to 16 bits, dtriton keeps
the compute dtype, so the two differ by design).

Where torch's own gradient is an artifact of its formulas the two differ too, and such a case is
reported ``wrong`` and needs reading: the gradient of ``amax`` to the elements that are not the
maximum under an infinite upstream gradient (torch multiplies by a mask: 0 * inf = NaN; dtriton
selects 0), and the gradient of a product at an infinite factor on a tensor without a zero (torch
divides, inf / inf = NaN; dtriton gives the product of the others, torch's value when the tensor
has a zero). Seen in seeds 5295, 7880 and 10278. Seed 9998 was a refusal (fixed, session 8): the attention
rule fused a mean of its backward algorithm into a kernel whose grid split the mean's axis.

    PYTHONPATH=src python3 tests/fuzz/fuzz_grad.py --start 1000 --count 200 [--kernels]
"""

from __future__ import annotations

import argparse
import collections
import signal
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dtriton as dt  # noqa: E402
from fuzz_eval import Evaluator  # noqa: E402
from fuzz_grammar import build_algorithm, describe, make_args, param_names  # noqa: E402
from fuzz_run import case_for_seed  # noqa: E402

#: relative and absolute tolerance of the float64 comparison
RTOL, ATOL = 1e-6, 1e-8


def _as_tuple(x):
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _differ(name: str, got: torch.Tensor, want: torch.Tensor) -> str | None:
    ok = torch.isclose(got.double(), want, rtol=RTOL, atol=ATOL, equal_nan=True)
    if bool(ok.all()):
        return None
    m = ~ok
    return (f"{name}: {int(m.sum())}/{m.numel()} differ; got {got.double()[m][:3].tolist()} "
            f"want {want[m][:3].tolist()}")


def torch_gradients(case, exact: list, floats: list[int], seed: int):
    """(upstream gradients, {input name: torch's gradient}) of the case on ``exact`` (its
    arguments), or None when no output depends on a floating input."""
    names = param_names(case)
    t64 = [a.double().clone().requires_grad_(True) if k in floats else a for k, a in enumerate(exact)]
    outs = Evaluator(case, t64, torch.float64).outputs()
    g = torch.Generator().manual_seed(seed)
    gys = [torch.randn(o.shape, generator=g, dtype=torch.float64) for o in outs]
    terms = [(o * gy).sum() for o, gy in zip(outs, gys) if o.is_floating_point() and o.requires_grad]
    if not terms:
        return None
    grads = torch.autograd.grad(sum(terms), [t64[k] for k in floats], allow_unused=True)
    want = {names[k]: (w if w is not None else torch.zeros_like(t64[k])) for k, w in zip(floats, grads)}
    return gys, want


def grad_case(seed: int, kernels: bool = False) -> tuple[str, str]:
    """The outcome of the case of ``seed`` (see the module docstring) and its detail."""
    case, _ = case_for_seed(seed)
    if "cast(" in describe(case):
        return "skip:cast", ""
    try:
        alg = build_algorithm(case)
    except dt.AlgorithmError:
        return "skip:illegal", ""
    _, exact = make_args(case)
    names = param_names(case)
    floats = [k for k, a in enumerate(exact) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if not floats:
        return "skip:nofloat", ""
    ref = torch_gradients(case, exact, floats, seed)
    if ref is None:
        return "skip:nograd", ""
    gys, want = ref
    args = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in exact]
    try:
        ga = dt.grad(alg, [names[k] for k in floats])
    except dt.DTritonError as e:
        return "refused", f"dt.grad: {type(e).__name__}: {str(e)[:200]}"
    bad = []
    for name, w in want.items():
        if name not in ga.locate:   # structurally zero in dtriton
            if bool((w != 0).any()) and bool(torch.isfinite(w).all()):
                bad.append(f"{name}: dtriton says zero, torch's largest is {float(w.abs().max()):.3g}")
            continue
        ai, oi = ga.locate[name]
        bwd = ga.algorithms[ai]
        try:
            res = _as_tuple(bwd.reference(*args, *gys))
            bad.append(_differ(name, res[oi], w))
            if kernels:
                outs = tuple(torch.full_like(r, float("nan")) for r in res)
                got = _as_tuple(dt.compile(bwd)(*args, *gys, out=outs if len(outs) > 1 else outs[0]))
                bad.append(_differ(f"kernel {name}", got[oi], w))
        except dt.DTritonError as e:
            return "refused", f"{bwd.name}: {type(e).__name__}: {str(e)[:200]}"
    bad = [b for b in bad if b]
    return ("wrong", "; ".join(bad)) if bad else ("match", "")


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--kernels", action="store_true", help="also run the backward kernels on the interpreter")
    ap.add_argument("--limit", type=int, default=60, help="seconds per case")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    counts, failures = collections.Counter(), []
    for seed in range(a.start, a.start + a.count):
        signal.alarm(a.limit)
        try:
            outcome, detail = grad_case(seed, a.kernels)
        except _Timeout:
            outcome, detail = "timeout", ""
        except Exception as e:   # a bug of dtriton (or of this harness): reported, the run goes on
            outcome, detail = "bug", f"{type(e).__name__}: {str(e)[:200]}"
        finally:
            signal.alarm(0)
        counts[outcome] += 1
        if outcome in ("wrong", "refused", "bug", "timeout"):
            failures.append((seed, outcome, detail))
    print(dict(sorted(counts.items())))
    for f in failures:
        print(*f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
