"""Strided pooling windows whose taps are read as contiguous runs split in registers (``plan.pairs``,
the schedule's ``window_loads``), with the window's stride and padding printed as literals and a 16-bit
max/min folded in its dtype (``narrow_minmax``): on the interpreter, against float64 torch
(``max_pool2d`` / ``avg_pool2d``, ``count_include_pad``), outputs poisoned with NaN, odd and size-1
image sizes, NaN and infinite inputs for the max, each with the new lowering and with it turned off."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import dtriton as dt
from dtriton.library import avg_pool2d_window, max_pool2d_window
from dtriton.plan.callspec import call_spec
from dtriton.plan.decide import plan_program
from dtriton.schedule import complete_schedule

F = torch.nn.functional
ALGS = {"max": max_pool2d_window, "avg": avg_pool2d_window}


def window_schedule(**kw) -> dt.Schedule:
    """The GPU heuristic's kind of schedule for a window (the taps unrolled one index a step), with
    programs of 2 x 8 outputs so that interpreter-sized images span several programs and tails."""
    return dt.Schedule(tile={"n": 1, "h": 2, "w": 8, "r": 1, "q": 1}, strategy={"r": "loop", "q": "loop"},
                       grid=["n", "h", "w"], **kw)


def out_size(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


def run(kind: str, x: torch.Tensor, k: int, s: int, p: int, sched: dt.Schedule):
    """(dtriton's pool of (N, H, W) ``x`` into a NaN-poisoned output, the kernel's source)."""
    ho, wo = out_size(x.shape[1], k, s, p), out_size(x.shape[2], k, s, p)
    args = (x, k, s, p, ho, wo)
    kern = dt.compile(ALGS[kind], sched)
    out = torch.full((x.shape[0], ho, wo), float("nan"), dtype=x.dtype)
    kern(*args, out=out)
    return out, kern.source_for(*args)


def reference(kind: str, x: torch.Tensor, k: int, s: int, p: int) -> torch.Tensor:
    fn = F.max_pool2d if kind == "max" else F.avg_pool2d
    return fn(x.double()[:, None], k, stride=s, padding=p)[:, 0]


def check(kind, x, k, s, p, out):
    tol = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[x.dtype]
    if kind == "max":   # a max is exact in any dtype
        torch.testing.assert_close(out.double(), reference(kind, x, k, s, p), rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(out.double(), reference(kind, x, k, s, p), rtol=tol, atol=tol)


def runs_expected(k: int, s: int, p: int) -> bool:
    """Whether two taps or more of a k-tap window at stride s, padding p share a run of s columns."""
    starts = [(q - p) // s for q in range(k)]
    return s in (2, 4, 8) and any(starts.count(a) >= 2 for a in set(starts))


@pytest.mark.parametrize("loads", ["pairs", "taps"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (2, 2, 1), (3, 2, 0), (3, 2, 1), (4, 2, 0), (4, 2, 1), (4, 4, 1),
                                   (5, 4, 2), (3, 3, 1)])
def test_windows_match_float64_torch(k, s, p, kind, dtype, loads):
    torch.manual_seed(k * 100 + s * 10 + p)
    # one image: several programs and tails in h and w (the batch's offsets: the tests below, 3 images)
    x = (torch.randn(1, 13, 41) * 4).to(dtype)
    out, src = run(kind, x, k, s, p, window_schedule(window_loads=loads))
    check(kind, x, k, s, p, out)
    assert ("tl.split(" in src) == (loads == "pairs" and runs_expected(k, s, p)), src
    assert "s_s" not in src and "s_p" not in src, "the stride and padding are literals"


@pytest.mark.parametrize("loads", ["pairs", "taps"])
@pytest.mark.parametrize("narrow", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_max_propagates_nan_and_infinities(dtype, narrow, loads):
    torch.manual_seed(7)
    x = torch.randn(3, 11, 23)
    flat = x.view(-1)
    idx = torch.randperm(flat.numel())
    flat[idx[:6]] = float("nan")
    flat[idx[6:20]] = float("inf")
    flat[idx[20:60]] = float("-inf")
    x[2] = float("-inf")   # an image of -inf only: its windows are -inf, not the padding's
    x = x.to(dtype)
    out, src = run("max", x, 3, 2, 1, window_schedule(window_loads=loads, narrow_minmax=narrow))
    check("max", x, 3, 2, 1, out)
    native = narrow and dtype == torch.float16   # (bf16 folds in fp32 on the interpreter: numpy has no bf16)
    assert ("dtype=tl.float16)" in src) == native, src


@pytest.mark.parametrize("loads", ["pairs", "taps"])
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("n,h,w", [(1, 1, 1), (1, 2, 1), (2, 1, 9), (1, 7, 2), (3, 5, 33)])
def test_size_one_and_tiny_images(n, h, w, kind, loads):
    torch.manual_seed(n + h + w)
    x = torch.randn(n, h, w).half()
    out, _ = run(kind, x, 3, 2, 1, window_schedule(window_loads=loads))
    check(kind, x, 3, 2, 1, out)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_the_gpu_default_schedule_and_persistent_programs(kind):
    """The GPU heuristic's schedule (2 x 256 outputs a program) and a persistent one, on odd sizes."""
    e = dict(device="meta", dtype=torch.float16)
    args = (torch.empty(1024, 512, 512, **e), 3, 2, 1, 256, 256)
    b = dataclasses.replace(ALGS[kind].bind(args), device=torch.device("cuda"))
    gpu = complete_schedule(ALGS[kind], None, b)
    x = torch.randn(2, 9, 301).half()
    for sched in (gpu, window_schedule(persistent=2)):
        out, src = run(kind, x, 3, 2, 1, sched)
        check(kind, x, 3, 2, 1, out)
        assert "tl.split(" in src, src


def test_one_kernel_object_specialises_per_stride_and_padding():
    """The stride and padding are literals: each value gets its own plan (the call spec holds them)."""
    kern = dt.compile(max_pool2d_window, window_schedule())
    x = torch.randn(2, 12, 19)
    for k, s, p in ((3, 2, 1), (3, 2, 0), (3, 1, 1), (2, 3, 0), (3, 2, 1)):
        ho, wo = out_size(12, k, s, p), out_size(19, k, s, p)
        out = torch.full((2, ho, wo), float("nan"))
        kern(x, k, s, p, ho, wo, out=out)
        check("max", x, k, s, p, out)


def test_the_plan_on_the_h200_shape():
    """fp16 16x64x512x512 3x3/s2/p1 as the GPU plans it: one run (taps 1, 2) and one lone tap (0), the
    max folded in fp16; fp32 folds in fp32; window_loads="taps" and narrow_minmax=False turn each off."""
    def kernel(dtype, **kw):
        args = (torch.empty(1024, 512, 512, device="meta", dtype=dtype), 3, 2, 1, 256, 256)
        b = dataclasses.replace(max_pool2d_window.bind(args), device=torch.device("cuda"))
        sched = complete_schedule(max_pool2d_window, None, b).replace(**kw)
        return plan_program(max_pool2d_window, sched, b, call_spec(max_pool2d_window, b, args, False)).kernels[0]
    k = kernel(torch.float16)
    (pt,) = k.pair_taps.values()
    assert (pt.stride, pt.groups, pt.lone) == (2, ((0, ((1, 0), (2, 1))),), (0,)), pt
    assert k.literal_scalars == {"s": 2, "p": 1} and len(k.native_folds) == 1
    assert not kernel(torch.float32).native_folds
    assert not kernel(torch.float16, window_loads="taps").pair_taps
    assert not kernel(torch.float16, narrow_minmax=False).native_folds


def test_the_window_loads_knob_is_checked():
    with pytest.raises(dt.ScheduleError, match="window_loads"):
        dt.Schedule(window_loads="runs")


def test_window_knobs_warn_where_they_have_no_effect():
    # window_loads="taps" and narrow_minmax=False were silently ignored where no window uses them (docs/knobs.md
    # promises a ScheduleWarning for a legal knob with no effect, as rolling=True gives)
    import warnings
    from dtriton.library import softmax
    X = torch.randn(4, 5)
    for kw, name in ((dict(window_loads="taps"), "window_loads"), (dict(narrow_minmax=False), "narrow_minmax")):
        with pytest.warns(dt.ScheduleWarning, match=f"{name}=.*has no effect"):
            dt.compile(softmax, dt.Schedule(**kw))(X)
    x16 = torch.randn(2, 9, 17).half()
    with warnings.catch_warnings():   # where they change the kernel, and at their defaults, no warning
        warnings.simplefilter("error", dt.ScheduleWarning)
        for kw in (dict(window_loads="taps"), dict(narrow_minmax=False), dict(window_loads="pairs", narrow_minmax=True)):
            out, _ = run("max", x16, 3, 2, 1, window_schedule(**kw))
            check("max", x16, 3, 2, 1, out)
        dt.compile(softmax, dt.Schedule(window_loads="pairs", narrow_minmax=True))(X)
    with pytest.warns(dt.ScheduleWarning, match="narrow_minmax=False has no effect"):   # fp32: nothing narrow
        run("max", x16.float(), 3, 2, 1, window_schedule(narrow_minmax=False))
