"""Depthwise convolutions' window loops (issue 19, session 5): where the window's sizes are known on the
call, the taps are unrolled (``tl.static_range`` over the exact count, ``plan.taps``), so their loads
issue together; they run on Triton's interpreter into NaN-poisoned outputs against torch in float64,
on odd sizes, strides, paddings and windows."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import dtriton as dt
from dtriton import library as L

from conftest import check, randn


def osize(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - (k - 1) - 1) // s + 1


def t_depthwise(X, W, s, p, ho, wo):
    return F.conv2d(X.permute(0, 3, 1, 2), W.permute(2, 0, 1)[:, None], stride=s, padding=p,
                    groups=X.shape[-1]).permute(0, 2, 3, 1)


def gpu_schedule(alg, args) -> dt.Schedule:
    """The heuristic's schedule of a CUDA call with ``args`` (it runs on the interpreter as well)."""
    b = alg.bind(args)
    b.device = torch.device("cuda")
    return dt.compile(alg).complete(b)


@pytest.mark.parametrize("r,q,s,p", [(3, 3, 1, 1), (5, 3, 2, 2), (2, 2, 1, 0), (1, 3, 1, 1)])
def test_depthwise_taps_unrolled_on_odd_sizes(r, q, s, p):
    X, W = randn(2, 7, 9, 6), randn(r, q, 6)
    args = [X, W, s, p, osize(7, r, s, p), osize(9, q, s, p)]
    sched = gpu_schedule(L.depthwise_conv2d_nhwc, args)
    src = dt.compile(L.depthwise_conv2d_nhwc, sched).source_for(*args)
    loops = [f"tl.static_range(0, {n})" for n in (r, q) if n > 1]
    assert all(x in src for x in loops) and "for r0 in range(" not in src
    # at stride 1 every tap reads the tile's address block plus its shift times the strides (plan.taps)
    assert ("offs_h[:, None, None] * X_s1 + offs_w[None, :, None] * X_s2" in src) == (s == 1)
    check(L.depthwise_conv2d_nhwc, args, sched, torch_ref=t_depthwise)


def test_long_windows_keep_their_loops():
    """A window of 9 taps along an axis (more than the call's exact small sizes) keeps a range loop."""
    X, W = randn(1, 12, 5, 4), randn(9, 1, 4)
    args = [X, W, 1, 4, 12, 13]   # (torch pads both dims by 4)
    sched = gpu_schedule(L.depthwise_conv2d_nhwc, args)
    src = dt.compile(L.depthwise_conv2d_nhwc, sched).source_for(*args)
    assert "tl.static_range" not in src
    check(L.depthwise_conv2d_nhwc, args, sched, torch_ref=t_depthwise)


@dt.algorithm
def box_blur(X: dt.Tensor["N", "H", "W", "C"], Ho: int, Wo: int, K: int):
    """A K x K window sum of one tensor (a pooling, no weight)."""
    n, c, h, w, r, q = dt.axes("n c h:Ho w:Wo r:K q:K")
    return dt.sum(X.pad(0.0)[n, h + r - 1, w + q - 1, c], over=(r, q))[n, h, w, c]


def test_a_window_of_one_tensor_unrolls_its_taps_too():
    """A pooling window read through computed indices (one load) unrolls its taps as well
    (``plan.taps``: the max pool 3x3/s2 waited for each tap's loads in turn, s5 394 us on the H200);
    ``unroll=1`` keeps the loops."""
    X = randn(2, 5, 6, 8)
    sched = dt.Schedule(tile={"n": 1, "h": 1, "w": 8, "c": 8, "r": 1, "q": 1}, grid=("n", "h", "w", "c"),
                        strategy={"r": "loop", "q": "loop"})
    k = dt.compile(box_blur, sched)
    out = k(X, 5, 6, 3)
    assert "tl.static_range(0, 3)" in k.source and "for r0 in range(" not in k.source
    ref = torch.nn.functional.conv2d(X.double().permute(0, 3, 1, 2), torch.ones(8, 1, 3, 3, dtype=torch.float64),
                                     padding=1, groups=8).permute(0, 2, 3, 1)
    torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)
    src = dt.compile(box_blur, sched.replace(unroll=1)).source_for(X, 5, 6, 3)
    assert "tl.static_range" not in src and "for r0 in range(" in src


def test_unroll_one_keeps_the_taps_looped():
    """The schedule's ``unroll=1`` (loops not unrolled) keeps the window's loops."""
    X, W = randn(2, 7, 9, 6), randn(3, 3, 6)
    args = [X, W, 1, 1, 7, 9]
    sched = gpu_schedule(L.depthwise_conv2d_nhwc, args).replace(unroll=1)
    src = dt.compile(L.depthwise_conv2d_nhwc, sched).source_for(*args)
    assert "tl.static_range" not in src and "for r0 in range(" in src


@pytest.mark.parametrize("stages,s,p", [(3, 1, 1), (2, 2, 1)])
def test_persistent_tile_loop_pipelined(stages, s, p):
    """A persistent depthwise kernel (its taps unrolled: no runtime loop but the tile loop) pipelines
    its tile loop over the schedule's stages; right on odd sizes with more tiles than programs."""
    X, W = randn(3, 11, 13, 6), randn(3, 3, 6)
    args = [X, W, s, p, osize(11, 3, s, p), osize(13, 3, s, p)]
    sched = gpu_schedule(L.depthwise_conv2d_nhwc, args).replace(persistent=1, num_stages=stages)
    src = dt.compile(L.depthwise_conv2d_nhwc, sched).source_for(*args)
    assert f"tl.num_programs(0), num_stages={stages}):" in src
    check(L.depthwise_conv2d_nhwc, args, sched, torch_ref=t_depthwise)
    looped = sched.replace(unroll=1)   # the taps looped: the tile loop stays a plain range
    assert "for pid in range(" in dt.compile(L.depthwise_conv2d_nhwc, looped).source_for(*args)


def test_unrolled_taps_keep_the_register_cap():
    """The taps' unrolled loop keeps the statistics loops' ``maxnreg`` cap (four programs an SM): the H200
    ran the bench's 4 x 8 x 64 default at 58.7 us under it (124 registers, s6 call 2a) and at 61.7 without
    it (112 registers: ptxas hoists fewer of the nine taps' loads; call 3)."""
    from dtriton.plan import call_spec, plan_program
    m = dict(device="meta", dtype=torch.float16)
    args = [torch.empty(32, 56, 56, 256, **m), torch.empty(3, 3, 256, **m), 1, 1, 56, 56]
    alg = L.depthwise_conv2d_nhwc
    sched = gpu_schedule(alg, args)
    b = alg.bind(args)
    b.device = torch.device("cuda")
    (k,) = plan_program(alg, sched, b, call_spec(alg, b, args, False)).kernels
    assert k.static_loops == {"r": 3, "q": 3} and k.max_registers == 128


@pytest.mark.parametrize("r,q,s,p,persistent", [(3, 3, 1, 1, 0), (3, 3, 1, 1, 1), (5, 3, 1, 2, 0), (3, 3, 2, 1, 0)])
def test_taps_read_in_tma_boxes(r, q, s, p, persistent):
    """Under TMA access each tap reads the input as one box shifted by the tap (zeros outside the image:
    the padding), at stride 1; a stride of 2 keeps the masked pointer loads. Odd sizes whose tiles
    overhang the image, fp16, into a poisoned output, against float64; persistent with the tile loop
    pipelined too."""
    X, W = randn(2, 7, 9, 16, dtype=torch.float16), randn(r, q, 16, dtype=torch.float16)
    args = [X, W, s, p, osize(7, r, s, p), osize(9, q, s, p)]
    sched = gpu_schedule(L.depthwise_conv2d_nhwc, args).replace(access="tma", persistent=persistent, num_stages=2)
    src = dt.compile(L.depthwise_conv2d_nhwc, sched).source_for(*args)
    assert ("desc_X.load([pid_n, pid_h * BLOCK_H + " in src) == (s == 1)
    assert ("tl.load(X_ptr" in src) == (s != 1)
    check(L.depthwise_conv2d_nhwc, args, sched, torch_ref=t_depthwise)


@pytest.mark.parametrize("r,q,s,p,dtype", [(3, 3, 1, 1, torch.float16), (3, 3, 1, 1, torch.float32),
                                           (5, 3, 1, 2, torch.float32), (2, 2, 1, 0, torch.float32),
                                           (3, 3, 2, 1, torch.float32)])
def test_rolling_rows(r, q, s, p, dtype):
    """``rolling=True``: the program walks its tile's input rows once, each loaded once per column tap and
    added into the accumulators of the output rows it feeds (plan.taps.plan_rolling). Odd sizes whose
    row and column tiles overhang the image (7 rows in tiles of 4), poisoned outputs, against float64;
    a stride of 2 (the row index not a shift of the output's) keeps the unrolled taps."""
    X, W = randn(2, 7, 9, 16, dtype=dtype), randn(r, q, 16, dtype=dtype)
    args = [X, W, s, p, osize(7, r, s, p), osize(9, q, s, p)]
    sched = gpu_schedule(L.depthwise_conv2d_nhwc, args).replace(rolling=True)
    src = dt.compile(L.depthwise_conv2d_nhwc, sched).source_for(*args)
    assert ("# rolling rows of h" in src) == (s == 1)
    check(L.depthwise_conv2d_nhwc, args, sched, torch_ref=t_depthwise)


def test_rolling_without_a_window_warns():
    """``rolling=True`` on a call it cannot apply to (a stride of 2) says so."""
    X, W = randn(2, 7, 9, 16), randn(3, 3, 16)
    args = [X, W, 2, 1, osize(7, 3, 2, 1), osize(9, 3, 2, 1)]
    sched = gpu_schedule(L.depthwise_conv2d_nhwc, args).replace(rolling=True)
    with pytest.warns(dt.ScheduleWarning, match="rolling=True has no effect"):
        dt.compile(L.depthwise_conv2d_nhwc, sched)(*args)


def test_rolling_warning_says_what_to_change():
    """``rolling=True`` where the window axes are not unrolled one tap a step (each "whole" in one block,
    the CPU heuristic's choice) names them and the strategy and tiles that unroll them; following that
    advice applies it (checked against float64 on odd sizes, outputs poisoned). A stride of 2 says the
    stride is why (trial finding: the warning said neither)."""
    X, W = randn(2, 7, 9, 16), randn(3, 3, 16)
    args = [X, W, 1, 1, 7, 9]
    whole = dt.Schedule(rolling=True, strategy={"r": "whole", "q": "whole"})
    with pytest.warns(dt.ScheduleWarning, match=r"window axes are not unrolled one tap a step \('r' is 'whole'") as got:
        dt.compile(L.depthwise_conv2d_nhwc, whole)(*args)
    told = str(got[0].message)
    assert "give strategy={'r': 'loop', 'q': 'loop'} and tile={'r': 1, 'q': 1}" in told, told
    advised = dt.Schedule(rolling=True, strategy={"r": "loop", "q": "loop"}, tile={"r": 1, "q": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        assert "# rolling rows of h" in dt.compile(L.depthwise_conv2d_nhwc, advised).source_for(*args)
    check(L.depthwise_conv2d_nhwc, args, advised, torch_ref=t_depthwise)
    strided = [X, W, 2, 1, osize(7, 3, 2, 1), osize(9, 3, 2, 1)]
    with pytest.warns(dt.ScheduleWarning, match="a stride other than 1 keeps the unrolled taps"):
        dt.compile(L.depthwise_conv2d_nhwc, advised)(*strided)


def test_rolling_applies_under_the_cpu_heuristic():
    """``dt.Schedule(rolling=True)`` alone on CPU tensors: the heuristic loops the window one tap a step
    with row tiles of 2 or more, so the rows roll (it chose "whole" windows, where rolling never applied:
    trial finding); odd sizes, poisoned outputs, against float64; no warning."""
    X, W = randn(2, 7, 9, 16), randn(3, 3, 16)
    args = [X, W, 1, 1, 7, 9]
    sched = dt.Schedule(rolling=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        assert "# rolling rows of h" in dt.compile(L.depthwise_conv2d_nhwc, sched).source_for(*args)
        check(L.depthwise_conv2d_nhwc, args, sched, torch_ref=t_depthwise)
    assert "# rolling rows" not in dt.compile(L.depthwise_conv2d_nhwc).source_for(*args)   # (not asked: "whole")
