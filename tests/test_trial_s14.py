"""Problems a fresh-user trial found (session 14), each fixed with a test here.

A conv weight in another layout than the library conv reads surfaced as an output-size message (its
kernel size read off a channel dim) and an NCHW input given to ``conv2d_nhwc`` got no hint: a size or
constraint error now names the layouts read and the shapes given, and the permute of the tensor (or of
two) that makes every size and constraint agree; following it matches torch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dtriton as dt
from dtriton import library as L

from conftest import check, randn

_CAUTION = "a matching size alone does not say so"


def _message(alg, args) -> str:
    """The ShapeError of compiling and calling ``alg`` on ``args``; the reference evaluator raises the same."""
    with pytest.raises(dt.ShapeError) as e:
        dt.compile(alg)(*args)
    with pytest.raises(dt.ShapeError) as r:
        alg.reference(*args)
    assert str(r.value) == str(e.value)
    return str(e.value)


def _conv2d_nhwc(x, w, s, p, d, *_):
    return F.conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), stride=s, padding=p, dilation=d).permute(0, 2, 3, 1)


# ----------------------------------------------------------------------------------------------
# 1. a conv weight in another layout: the weight, its layout, the shape given and the permute
# ----------------------------------------------------------------------------------------------
# (name, algorithm, X, the weight as given, scalars, the start of the message, the layout note, the
#  permute, what the weight's sizes look like, the torch oracle of the call with the weight permuted)
WEIGHT_CASES = [
    # a 3 x 5 window given as 5 x 3 (O, C, Q, R) to conv2d: R = 5 read off Q's dim, an output-size message before
    ("conv2d window", L.conv2d, (2, 3, 8, 9), (6, 3, 5, 3), (1, 1, 1, 8, 7),
     r"^conv2d: argument 'Ho' must be \(H \+ 2 \* padding - dilation \* \(R - 1\) - 1\) // stride \+ 1 = 6 ",
     "conv2d reads X as (N, C, H, W), got shape (2, 3, 8, 9), and Wt as (O, C, R, Q), got shape (6, 3, 5, 3)",
     "Wt.permute(0, 1, 3, 2)", "Wt's sizes fit (O, C, Q, R)",
     lambda x, w, s, p, d, *_: F.conv2d(x, w, stride=s, padding=p, dilation=d)),
    # a channels-last (O, R, Q, C) weight given to conv2d
    ("conv2d", L.conv2d, (2, 4, 8, 9), (6, 3, 5, 4), (1, 1, 1, 8, 7),
     r"^conv2d: C is 4 from X\.shape\[1\] but 3 from Wt\.shape\[1\]",
     "conv2d reads X as (N, C, H, W), got shape (2, 4, 8, 9), and Wt as (O, C, R, Q), got shape (6, 3, 5, 4)",
     "Wt.permute(0, 3, 1, 2)", "Wt's sizes fit (O, R, Q, C)",
     lambda x, w, s, p, d, *_: F.conv2d(x, w, stride=s, padding=p, dilation=d)),
    # torch's (O, C, R, Q) weight given to conv2d_nhwc (C = 4 is not R or Q): a size mismatch
    ("conv2d_nhwc", L.conv2d_nhwc, (2, 7, 9, 4), (5, 4, 3, 3), (2, 1, 1, 4, 5),
     r"^conv2d_nhwc: C is 4 from X\.shape\[3\] but 3 from Wt\.shape\[3\]",
     "conv2d_nhwc reads X as (N, H, W, C), got shape (2, 7, 9, 4), and Wt as (O, R, Q, C), got shape (5, 4, 3, 3)",
     "Wt.permute(0, 2, 3, 1)", "Wt's sizes fit (O, C, R, Q)", _conv2d_nhwc),
    # a (O, R, C) weight given to conv1d
    ("conv1d", L.conv1d, (2, 3, 11), (4, 5, 3), (1, 2, 1, 11),
     r"^conv1d: C is 3 from X\.shape\[1\] but 5 from Wt\.shape\[1\]",
     "conv1d reads X as (N, C, L), got shape (2, 3, 11), and Wt as (O, C, R), got shape (4, 5, 3)",
     "Wt.permute(0, 2, 1)", "Wt's sizes fit (O, R, C)",
     lambda x, w, s, p, d, *_: F.conv1d(x, w, stride=s, padding=p, dilation=d)),
    # a (C, R, Q, O) weight given to conv_transpose2d: C reads right, Q = 6 off O's dim: an output-size
    # message before
    ("conv_transpose2d", L.conv_transpose2d, (1, 4, 5, 6), (4, 3, 3, 6), (2, 1, 1, 9, 11),
     r"^conv_transpose2d: argument 'Wo' must be >= \(W - 1\) \* stride .* = 14 \(.*Q=6\), got 11",
     "conv_transpose2d reads X as (N, C, H, W), got shape (1, 4, 5, 6), and Wt as (C, O, R, Q), got shape (4, 3, 3, 6)",
     "Wt.permute(0, 3, 1, 2)", "Wt's sizes fit (C, R, Q, O)",
     lambda x, w, s, p, d, *_: F.conv_transpose2d(x, w, stride=s, padding=p, dilation=d)),
    # a conv2d weight (O, C, R, Q) given to conv_transpose2d, which reads (C, O, R, Q)
    ("conv_transpose2d torch conv2d weight", L.conv_transpose2d, (1, 4, 5, 6), (6, 4, 3, 3), (2, 1, 1, 9, 11),
     r"^conv_transpose2d: C is 4 from X\.shape\[1\] but 6 from Wt\.shape\[0\]",
     "and Wt as (C, O, R, Q), got shape (6, 4, 3, 3)", "Wt.permute(1, 0, 2, 3)", "Wt's sizes fit (O, C, R, Q)",
     lambda x, w, s, p, d, *_: F.conv_transpose2d(x, w, stride=s, padding=p, dilation=d)),
]


@pytest.mark.parametrize("name, alg, xs, ws, scalars, start, note, fix, looks, oracle", WEIGHT_CASES,
                         ids=[c[0] for c in WEIGHT_CASES])
def test_a_weight_in_another_layout_names_the_weight_its_layout_and_the_permute(name, alg, xs, ws, scalars, start,
                                                                                 note, fix, looks, oracle):
    X, W = randn(*xs), randn(*ws)
    text = _message(alg, (X, W, *scalars))
    assert re.search(start, text), text
    assert note in text, text
    # an output size that fails is named first; the permute is then the other explanation ("would make")
    assert re.search(re.escape(f"{fix} ({looks})") + " (makes|would make) every size and constraint of the call agree",
                     text), text
    assert _CAUTION in text and "torch weight" not in text, text
    perm = tuple(int(j) for j in re.search(r"permute\(([\d, ]+)\)", fix).group(1).split(", "))
    check(alg, (X, W.permute(*perm), *scalars), torch_ref=oracle)   # the hint, followed: torch's result


def test_a_wrong_output_size_alone_gets_no_permute():
    """Weights in the right layout and a wrong output size: the message names the size and the layouts,
    no permute (none fits), and not one of a square window's two orders of the same shape."""
    text = _message(L.conv2d, (randn(2, 3, 8, 8), randn(6, 3, 3, 3), 1, 1, 1, 7, 8))
    assert text.startswith("conv2d: argument 'Ho' must be (H + 2 * padding - dilation * (R - 1) - 1) // stride + 1 = 8 "
                           "(H=8, padding=1, dilation=1, R=3, stride=1), got 7; pass torch's output size; conv2d reads X as "
                           "(N, C, H, W), got shape (2, 3, 8, 8), and Wt as (O, C, R, Q), got shape (6, 3, 3, 3)"), text
    assert ".permute(" not in text, text
    text = _message(L.conv2d, (randn(2, 3, 8, 8), randn(6, 3, 3, 3), 0, 1, 1, 8, 8))   # a scalar's constraint
    assert text == "conv2d: argument 'stride' must be >= 1, got 0", text                 # no tensor named


def test_a_channel_mismatch_no_permute_fixes_names_both_layouts():
    text = _message(L.conv2d_nhwc, (randn(1, 6, 6, 8), randn(4, 3, 3, 5), 1, 1, 1, 6, 6))
    assert text == ("conv2d_nhwc: C is 8 from X.shape[3] but 5 from Wt.shape[3]; conv2d_nhwc reads X as (N, H, W, C), "
                    "got shape (1, 6, 6, 8), and Wt as (O, R, Q, C), got shape (4, 3, 3, 5)"), text


# ----------------------------------------------------------------------------------------------
# 2. an NCHW X given to conv2d_nhwc: the permute of X (and of both tensors where both are torch's)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("xs", [(2, 5, 7, 9), (1, 5, 6, 6)], ids=["non-square", "square"])
def test_an_nchw_input_to_conv2d_nhwc_gets_the_permute_of_x(xs):
    X, W = randn(*xs), randn(6, 3, 3, 5)   # X (N, C, H, W); the weight is channels-last (O, R, Q, C)
    ho, wo = xs[2], xs[3]
    text = _message(L.conv2d_nhwc, (X, W, 1, 1, 1, ho, wo))
    assert text.startswith(f"conv2d_nhwc: C is {xs[3]} from X.shape[3] but 5 from Wt.shape[3]; conv2d_nhwc reads X as "
                           f"(N, H, W, C), got shape {xs}, and Wt as (O, R, Q, C), got shape (6, 3, 3, 5); "
                           "X.permute(0, 2, 3, 1) (X's sizes fit (N, C, H, W)) makes every size and constraint of the "
                           "call agree"), text
    check(L.conv2d_nhwc, (X.permute(0, 2, 3, 1), W, 1, 1, 1, ho, wo), torch_ref=_conv2d_nhwc)


def test_torch_tensors_both_to_conv2d_nhwc_get_both_permutes():
    X, W = randn(2, 5, 7, 9), randn(6, 5, 3, 3)   # torch's NCHW input and (O, C, R, Q) weight
    text = _message(L.conv2d_nhwc, (X, W, 1, 1, 1, 7, 9))
    assert ("; X.permute(0, 2, 3, 1) with Wt.permute(0, 2, 3, 1) (X's sizes fit (N, C, H, W), Wt's sizes fit "
            "(O, C, R, Q)) makes every size and constraint of the call agree") in text, text
    check(L.conv2d_nhwc, (X.permute(0, 2, 3, 1), W.permute(0, 2, 3, 1), 1, 1, 1, 7, 9), torch_ref=_conv2d_nhwc)


def test_an_nhwc_input_to_conv2d_gets_the_permute_back():
    X, W = randn(2, 7, 9, 5), randn(6, 5, 3, 3)   # channels-last X given to the NCHW conv2d
    text = _message(L.conv2d, (X, W, 1, 1, 1, 7, 9))
    assert "X.permute(0, 3, 1, 2) (X's sizes fit (N, H, W, C))" in text, text
    check(L.conv2d, (X.permute(0, 3, 1, 2), W, 1, 1, 1, 7, 9),
          torch_ref=lambda x, w, s, p, d, *_: F.conv2d(x, w, stride=s, padding=p, dilation=d))


# ----------------------------------------------------------------------------------------------
# 3. which reductions flat_axes flattens (docs/knobs.md says: plain dt.sum / dt.mean kernels)
# ----------------------------------------------------------------------------------------------
def _plane(reduce):
    @dt.algorithm
    def plane(X: dt.Tensor["N", "C", "H", "W"]):
        n, c, h, q = dt.axes("n c h q")
        return reduce(X[n, c, h, q], (h, q))[n, c]
    return plane


FLAT_CASES = [   # (name, the reduction over (h, q), its torch oracle, flattened)
    ("sum", lambda x, o: dt.sum(x * x, over=o), lambda x: (x * x).sum((2, 3)), True),
    ("mean", lambda x, o: dt.mean(x, over=o), lambda x: x.mean((2, 3)), True),
    ("sum and mean", lambda x, o: dt.sum(x, over=o) * dt.mean(x * x, over=o),
     lambda x: x.sum((2, 3)) * (x * x).mean((2, 3)), True),
    ("max", lambda x, o: dt.max(x, over=o), lambda x: x.amax((2, 3)), False),
    ("prod", lambda x, o: dt.prod(x, over=o), lambda x: x.flatten(2).prod(2), False),
    ("sum beside a max", lambda x, o: dt.sum(dt.exp(x - dt.max(x, over=o)), over=o),
     lambda x: (x - x.amax((2, 3), keepdim=True)).exp().sum((2, 3)), False),
]


@pytest.mark.parametrize("name, reduce, oracle, flat", FLAT_CASES, ids=[c[0] for c in FLAT_CASES])
def test_flat_axes_flattens_the_reductions_the_docs_name(name, reduce, oracle, flat):
    import warnings
    alg = _plane(reduce)
    x = randn(2, 3, 5, 7) * 0.5
    sched = dt.Schedule(grid=("n", "c"), tile={"n": 1, "c": 1, "h": 2}, strategy={"h": "loop", "q": "whole"}, flat_axes=2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        k, _ = check(alg, (x,), sched, torch_ref=oracle)
    assert ("flat over h, q" in k.source) == flat, k.source
    assert any("flat_axes=2 has no effect" in str(w.message) for w in seen) == (not flat)
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "knobs.md").read_text().split())
    assert "every reduction computed in the kernel is a `dt.sum` or `dt.mean`" in page
    assert "Not flattened: a kernel computing a `dt.max`, `dt.min`, `dt.prod`" in page


# ----------------------------------------------------------------------------------------------
# 4. max_trials stops an exhaustive search too (docs/explore.md says so)
# ----------------------------------------------------------------------------------------------
def test_max_trials_cuts_an_exhaustive_search_to_its_first_points():
    import warnings
    X = randn(8, 40)
    space = dt.Space(num_warps=[1, 2, 4, 8], num_stages=[1, 2, 3])   # 12 points: "auto" is exhaustive
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dt.explore(L.softmax, (X,), space=space, max_trials=3, budget=120, progress=False)
    assert res.strategy == "exhaustive" and res.stop_reason == "max_trials", (res.strategy, res.stop_reason)
    tried = [json.loads(r["schedule_json"]) for r in res.table if r["origin"] == "space"]
    assert [(s["num_warps"], s["num_stages"]) for s in tried] == [(1, 1), (1, 2), (1, 3)]   # the first points
    assert all(r["status"] == "ok" for r in res.table)
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "explore.md").read_text().split())
    assert "exhaustive when the space has at most `max(64, max_trials)` points, else TPE" in page
    assert "an exhaustive search tries only its first points and reports the stop reason `\"max_trials\"`" in page


# ----------------------------------------------------------------------------------------------
# 5. an int argument refuses a float (even 2.0) and a bool, as torch's do; a float one takes both
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def scaled_shift(X: dt.Tensor["N"], a: float, k: int):
    i = dt.axes("i")
    return (X[i] * a + k)[i]


@pytest.mark.parametrize("k, message", [
    (1.0, r"declared int but got the float 1\.0; pass an int \(k=1: torch and numpy refuse a float for an int "
          r"argument too\), or declare it `float`"),
    (np.float32(3), r"declared int but got the float 3\.0; pass an int \(k=3: "),
    (np.array(2.0), r"declared int but got the float 2\.0; pass an int \(k=2: "),
    (2.5, r"declared int but got the float 2\.5; pass an integer, or declare it `float`"),
    (float("inf"), r"declared int but got the float inf; pass an integer"),
    (True, r"declared int but got the bool True; pass an int \(k=1: torch refuses a bool for an int argument too\)"),
    (np.True_, r"declared int but got the bool True; pass an int \(k=1: "),
    (np.array(False), r"declared int but got the bool False; pass an int \(k=0: "),
], ids=["1.0", "np.float32", "0-d float array", "2.5", "inf", "True", "np.True_", "0-d bool array"])
def test_an_int_argument_refuses_floats_and_bools(k, message):
    X = randn(7)
    kern = dt.compile(scaled_shift)
    torch.testing.assert_close(kern(X, 0.5, 2), X * 0.5 + 2)   # (a cached launcher for an int k: not reused)
    for call in (lambda: kern(X, 0.5, k), lambda: scaled_shift.reference(X, 0.5, k),
                 lambda: dt.compile_autograd(scaled_shift)(X.clone().requires_grad_(True), 0.5, k)):
        with pytest.raises(dt.ShapeError, match=r"^argument 'k' of scaled_shift is " + message):
            call()


def test_a_float_argument_takes_bools_and_ints_and_an_int_one_numpy_ints():
    X = randn(9, dtype=torch.float64)
    kern = dt.compile(scaled_shift)
    for a, k in [(np.True_, np.int8(3)), (True, np.uint8(1)), (2, np.array(4)), (np.array(False), np.int64(-2))]:
        out = torch.full_like(X, float("nan"))
        kern(X, a, k, out=out)
        torch.testing.assert_close(out, X * float(a) + int(k))
        torch.testing.assert_close(scaled_shift.reference(X, a, k), X * float(a) + int(k))


def test_the_cli_refuses_a_fractional_scalar_for_an_int_argument():
    import click
    from dtriton.cli import make_inputs
    args = make_inputs(L.conv1d, {"N": 1, "C": 2, "L": 9, "O": 3, "R": 3}, torch.float32, "cpu",
                       {"stride": 2, "padding": 1, "dilation": 1, "Lo": 5})
    assert args[2:] == (2, 1, 1, 5) and all(type(a) is int for a in args[2:])
    with pytest.raises(click.BadParameter, match=r"--scalar stride=1\.5: stride is an int argument of conv1d"):
        make_inputs(L.conv1d, {"N": 1, "C": 2, "L": 9, "O": 3, "R": 3}, torch.float32, "cpu", {"stride": 1.5})


def test_a_library_conv_refuses_a_float_stride():
    X, W = randn(1, 6, 6, 4), randn(3, 3, 3, 4)
    with pytest.raises(dt.ShapeError, match=r"^argument 'stride' of conv2d_nhwc is declared int but got the float 1\.0"):
        dt.compile(L.conv2d_nhwc)(X, W, 1.0, 1, 1, 6, 6)


# ----------------------------------------------------------------------------------------------
# 6. frobenius_normalize at float32's extremes: as torch's x / vector_norm(x) (no rescaling), documented
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale, want", [(1e30, "zero"), (2e19, "zero"), (1e-25, "inf"), (1e3, "finite"),
                                         (0.0, "nan")])
def test_frobenius_normalize_at_float32_extremes_is_torchs(scale, want):
    x = randn(2, 3, 4, 5) * scale
    x[0, 0, 0, 0] = 0.0
    got = dt.compile(L.frobenius_normalize)(x)
    torch_out = x / torch.linalg.vector_norm(x)   # torch on the CPU: no rescaling either
    torch.testing.assert_close(got, torch_out, equal_nan=True)
    rest = got.flatten()[1:]
    if want == "zero":
        assert bool((rest == 0).all()) and bool(got[0, 0, 0, 0] == 0)
    elif want == "inf":
        assert bool(rest.isinf().all()) and bool(got[0, 0, 0, 0].isnan())   # 0 * inf
    elif want == "nan":
        assert bool(got.isnan().all())
    else:
        torch.testing.assert_close(got.double(), x.double() / x.double().norm(), rtol=1e-5, atol=1e-7)
    if want in ("zero", "inf"):   # the float64 oracle of the CPU stays finite
        ref = L.frobenius_normalize.reference(x)
        torch.testing.assert_close(ref.double(), x.double() / x.double().norm(), rtol=1e-5, atol=1e-7)
    doc = " ".join(L.frobenius_normalize.__doc__.split())
    assert "passes about 1.8e19" in doc and "the output is 0" in doc and "x / x.abs().amax()" in doc
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "library.md").read_text().split())
    assert "passes about 1.8e19 (the root of float32's largest, 3.4e38)" in page
