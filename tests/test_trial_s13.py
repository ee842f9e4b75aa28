"""Problems fresh-user trials found (session 12, left for session 13), each fixed with a test here.

``group=`` of ``dt.compile_autograd`` / ``dt.differentiable`` / ``dt.grad`` refused where it is given
(it was a ValueError from deep in the first backward); ``res.summary()`` keeps the digits of names in
reasons (``sm_90``, ``float16``) and a reason's numbers where it is the only one of its kind, untruncated;
a numpy bool and a 0-d numpy array are taken as the scalar they hold (as torch takes them), a 1-element
array refused naming its shape and ``x.item()``; a size mismatch names the algorithm and, where a
permutation of the tensor's dims fits (a torch conv weight (O, C, R, Q) given for (O, R, Q, C)), the
permute."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dtriton as dt
from dtriton import library as L


# ----------------------------------------------------------------------------------------------
# 1. group= checked at the API call
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("group, hint", [("per_input", None), ("Auto", "did you mean group='auto'"),
                                         (None, "did you mean group='none'"), (1, None)])
def test_group_is_refused_at_the_call(group, hint):
    for make in (lambda: dt.compile_autograd(L.softmax, group=group),
                 lambda: dt.differentiable(dt.compile(L.softmax), group=group),
                 lambda: dt.grad(L.softmax, group=group)):
        with pytest.raises(dt.AlgorithmError, match=r"group=.* is not a valid choice: group is 'auto' .*'none' .*'all'") as e:
            make()   # (no call: the old check ran at the first backward)
        assert "softmax" in str(e.value)
        assert hint is None or hint in str(e.value), str(e.value)


@pytest.mark.parametrize("group", ["auto", "none", "all"])
def test_group_values_run(group):
    X = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    dk = dt.compile_autograd(L.softmax, group=group)
    g = torch.randn(3, 7, dtype=torch.float64)
    (dk(X) * g).sum().backward()
    Xr = X.detach().clone().requires_grad_(True)
    (torch.softmax(Xr, -1) * g).sum().backward()
    torch.testing.assert_close(X.grad, Xr.grad)


# ----------------------------------------------------------------------------------------------
# 2. res.summary() keeps the digits of reasons
# ----------------------------------------------------------------------------------------------
def test_summary_keeps_digits_in_reasons():
    from dtriton.tune import ExploreResult
    js = '{"grid": ["i", "j"], "tile": {"i": 64, "j": 32}}'
    long = ("the Gluon conv2d does not apply: it needs an sm_90 GPU (Hopper) and float16 or bfloat16 inputs, "
            "c a multiple of 64 (c=48) and o a positive multiple of 128 (o=96); tile 64x32 of conv2d_nhwc, e4m3 "
            "and int8 dots aside, 3 stages")
    rows = [dict(id=0, origin="heuristic", status="ok", median_us=12.5, p20_us=12.0, p80_us=13.0, rel_err=1e-7,
                 compile_s=0.5, schedule_json=js, reason="", elapsed_s=1.0),
            dict(id=1, origin="space", status="illegal", schedule_json=js, reason=long),
            dict(id=2, origin="space", status="illegal", schedule_json=js, reason=long),
            dict(id=3, origin="space", status="pruned", schedule_json=js, reason="shared memory 300000 > 232448"),
            dict(id=4, origin="space", status="pruned", schedule_json=js, reason="registers 255 > 128 on sm_90"),
            dict(id=5, origin="space", status="pruned", schedule_json=js, reason="registers 300 > 128 on sm_90")]
    res = ExploreResult(algorithm=None, table=rows, device="interpreter", timings_meaningful=False, strategy="tpe",
                        stop_reason="budget", elapsed_s=2.0, budget_s=20)
    text = res.summary(width=400)
    assert f"2 illegal: {long}" in text, text                              # whole, its numbers and names kept
    assert "1 pruned: shared memory 300000 > 232448" in text, text           # the only one of its kind: as it is
    assert "2 pruned: registers N > N on sm_90" in text, text               # counted together; names keep digits


# ----------------------------------------------------------------------------------------------
# 3. numpy bools and 0-d arrays as scalars
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def scaled_shift(X: dt.Tensor["N"], a: float, k: int):
    i = dt.axes("i")
    return (X[i] * a + k)[i]


def test_numpy_bool_and_0d_array_scalars_are_their_numbers():
    X = torch.randn(37, dtype=torch.float64)
    kern = dt.compile(scaled_shift)
    # (numpy bools for the float argument; an int argument refuses a bool since s14, as torch's do:
    # tests/test_trial_s14.py)
    calls = [(np.array(2.5), np.array(3)), (np.array(-1.25), np.array(16)), (np.True_, np.int16(0)),
             (np.float32(0.5), np.uint8(1)), (np.array(np.float32(4.0)), np.array(1, dtype=np.int8)),
             (np.array(False), np.int64(5))]
    for a, k in calls * 2:   # (twice: the later calls take the cached fast path)
        want = X * float(a.item()) + int(k.item())
        out = torch.full_like(X, float("nan"))
        kern(X, a, k, out=out)
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(scaled_shift.reference(X, a, k), want)


def test_numpy_scalars_in_a_library_conv():
    X, W = torch.randn(2, 7, 9, 16, dtype=torch.float64), torch.randn(3, 3, 16, dtype=torch.float64)
    kern = dt.compile(L.depthwise_conv2d_nhwc)
    for s, p, ho, wo in [(np.array(1), np.array(1), 7, 9), (np.array(2), np.int64(0), 3, 4), (np.array(1), np.array(0), 5, 7)]:
        ref = F.conv2d(X.permute(0, 3, 1, 2), W.permute(2, 0, 1)[:, None], stride=int(s), padding=int(p),
                       groups=16).permute(0, 2, 3, 1)
        torch.testing.assert_close(kern(X, W, s, p, np.array(ho), np.array(wo)), ref)


@pytest.mark.parametrize("bad, shape", [(np.array([2.0]), r"\(1,\); pass a Python number \(x\.item\(\) for a one-element array\)"),
                                        (np.ones((2, 2)), r"\(2, 2\); pass torch\.from_numpy\(x\)")])
def test_numpy_arrays_with_dims_are_refused_naming_the_argument(bad, shape):
    with pytest.raises(dt.ShapeError, match=r"argument 'a' of scaled_shift is a scalar \(float\); got ndarray of shape " + shape):
        dt.compile(scaled_shift)(torch.randn(5), bad, 1)


# ----------------------------------------------------------------------------------------------
# 4. a conv weight in torch's layout: the algorithm and the permute named
# ----------------------------------------------------------------------------------------------
def test_torch_conv_weight_gets_the_permute_hint():
    X = torch.randn(2, 9, 9, 16, dtype=torch.float64)
    Wt = torch.randn(32, 16, 3, 3, dtype=torch.float64)                      # torch's (O, C, R, Q)
    kern = dt.compile(L.conv2d_nhwc)
    with pytest.raises(dt.ShapeError, match=r"^conv2d_nhwc: C is 16 from X\.shape\[3\] but 3 from Wt\.shape\[3\]; "
                                            r"conv2d_nhwc reads .*Wt as \(O, R, Q, C\), got shape \(32, 16, 3, 3\); "
                                            r"Wt\.permute\(0, 2, 3, 1\) \(Wt's sizes fit \(O, C, R, Q\)\) makes every size"):
        kern(X, Wt, 1, 1, 1, 9, 9)
    ref = F.conv2d(X.permute(0, 3, 1, 2), Wt, padding=1).permute(0, 2, 3, 1)
    torch.testing.assert_close(kern(X, Wt.permute(0, 2, 3, 1), 1, 1, 1, 9, 9), ref)   # the hint, followed
    Wd = torch.randn(16, 1, 3, 3, dtype=torch.float64)                         # torch's depthwise (C, 1, R, Q)
    with pytest.raises(dt.ShapeError, match=r"^depthwise_conv2d_nhwc: C is 16 .* Wt\.permute\(1, 2, 0\) \(Wt's sizes fit \(C, R, Q\)\) makes every"):
        dt.compile(L.depthwise_conv2d_nhwc)(X, Wd[:, 0], 1, 1, 9, 9)
    with pytest.raises(dt.ShapeError, match=r"^conv2d: C is 16 from X\.shape\[1\] but 8 from Wt\.shape\[1\]; conv2d reads X as \(N, C, H, W\), "
                                            r"got shape \(2, 16, 9, 9\), and Wt as \(O, C, R, Q\), got shape \(32, 8, 3, 3\)$"):
        dt.compile(L.conv2d)(X.permute(0, 3, 1, 2), torch.randn(32, 8, 3, 3), 1, 1, 1, 9, 9)   # no permute fits


def test_0d_array_scalars_on_the_cached_paths():
    """A constrained scalar (dt.requires) given as a 0-d array is part of the cached paths' keys: it must
    not reach a dict unhashed (a TypeError from the differentiable call's step cache, or from the GPU's
    fast launchers: simulated here by one stored under another key); the calls run as with Python ints."""
    X, W = torch.randn(2, 7, 9, 16, dtype=torch.float64), torch.randn(3, 3, 16, dtype=torch.float64)
    g = torch.randn(2, 7, 9, 16, dtype=torch.float64)
    dk = dt.compile_autograd(L.depthwise_conv2d_nhwc)
    for _ in range(2):
        Xg, Xr = X.clone().requires_grad_(True), X.clone().requires_grad_(True)
        (dk(Xg, W, np.array(1), np.array(1), np.array(7), np.array(9)) * g).sum().backward()
        ref = F.conv2d(Xr.permute(0, 3, 1, 2), W.permute(2, 0, 1)[:, None], padding=1, groups=16).permute(0, 2, 3, 1)
        (ref * g).sum().backward()
        torch.testing.assert_close(Xg.grad, Xr.grad)
    with pytest.raises(dt.ShapeError, match=r"argument 'stride' of depthwise_conv2d_nhwc is a scalar \(int\); got ndarray"):
        dk(X.clone().requires_grad_(True), W, np.array([1]), 1, 7, 9)
    kern = dt.compile(L.depthwise_conv2d_nhwc)
    kern._fast[("another signature",)] = None   # (as a GPU call leaves one)
    ref = F.conv2d(X.permute(0, 3, 1, 2), W.permute(2, 0, 1)[:, None], padding=1, groups=16).permute(0, 2, 3, 1)
    torch.testing.assert_close(kern(X, W, np.array(1), np.array(1), 7, 9), ref)
    assert kern.fast_launcher_for((X, W, np.array(1), np.array(1), 7, 9)) is None


def test_the_permute_hint_does_not_claim_a_torch_layout():
    """conv_transpose2d already reads torch's (C_in, O, R, Q) weight: a channel mismatch may get a permute
    that fits the sizes, offered as a possibility only (s13 trial: "(a torch weight)" misled)."""
    with pytest.raises(dt.ShapeError) as e:
        dt.compile(L.conv_transpose2d)(torch.randn(2, 3, 5, 4), torch.randn(6, 3, 3, 3), 2, 1, 1, 9, 7)
    assert "torch weight" not in str(e.value) and "a matching size alone does not say so" in str(e.value)


def test_a_torch_depthwise_weight_with_its_size_1_dim_gets_the_squeeze():
    X = torch.randn(1, 6, 6, 16)
    with pytest.raises(dt.ShapeError, match=r"must have 3 dims .*got 4 .*Wt\.squeeze\(1\) drops one"):
        dt.compile(L.depthwise_conv2d_nhwc)(X, torch.randn(16, 1, 3, 3), 1, 1, 6, 6)
