"""Pooling (issue 16): windows of any size, stride and padding over odd image sizes, written with
computed indices (``library.max_pool2d_window``, ``avg_pool2d_window``) and over a block view
(``max_pool2d``, ``avg_pool2d``); the default schedules (interpreter and GPU heuristic) against
float64 torch, outputs poisoned with NaN before the call."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

import dtriton as dt
from dtriton.library import avg_pool2d_window, max_pool2d_window
from dtriton.schedule import complete_schedule

F = torch.nn.functional


def default_schedule(alg, args, gpu: bool) -> dt.Schedule:
    """The default schedule of ``alg`` on ``args``, as the GPU heuristic would give it when ``gpu``."""
    b = alg.bind(args)
    if gpu:
        b.device = torch.device("cuda")
    return complete_schedule(alg, None, b)


def pooled(kind: str, x: torch.Tensor, k: int, s: int, p: int, gpu: bool) -> torch.Tensor:
    """dtriton's ``kind`` pool of (N, H, W) ``x`` into a NaN-poisoned output."""
    alg = max_pool2d_window if kind == "max" else avg_pool2d_window
    ho, wo = (x.shape[1] + 2 * p - k) // s + 1, (x.shape[2] + 2 * p - k) // s + 1
    args = (x, k, s, p, ho, wo)
    out = torch.full((x.shape[0], ho, wo), float("nan"), dtype=x.dtype)
    dt.compile(alg, default_schedule(alg, args, gpu))(*args, out=out)
    return out


def reference(kind: str, x: torch.Tensor, k: int, s: int, p: int) -> torch.Tensor:
    fn = F.max_pool2d if kind == "max" else F.avg_pool2d
    return fn(x.double()[:, None], k, stride=s, padding=p)[:, 0]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("gpu", [False, True])
def test_3x3_stride_2_padding_1_on_odd_sizes(kind, dtype, gpu):
    x = torch.randn(3, 13, 11).to(dtype)
    out = pooled(kind, x, 3, 2, 1, gpu)
    tol = 1e-3 if dtype == torch.float16 else 1e-6
    torch.testing.assert_close(out.double(), reference(kind, x, 3, 2, 1), rtol=tol, atol=tol)


def test_a_window_of_one_element_is_a_strided_copy():
    x = torch.randn(2, 7, 5)
    torch.testing.assert_close(pooled("max", x, 1, 2, 0, False), x[:, ::2, ::2])


def test_padding_never_wins_a_max_of_negative_values():
    x = -torch.rand(1, 5, 5) - 1.0      # every value below the zero a wrong padding would give
    out = pooled("max", x, 3, 1, 1, True)
    assert (out < 0).all()
    torch.testing.assert_close(out.double(), reference("max", x, 3, 1, 1))


@st.composite
def pool_case(draw):
    k = draw(st.integers(1, 4), label="window")
    s = draw(st.integers(1, 3), label="stride")
    p = draw(st.integers(0, k // 2), label="padding")
    h = draw(st.integers(max(1, k - 2 * p), 17), label="H")
    w = draw(st.integers(max(1, k - 2 * p), 17), label="W")
    n = draw(st.integers(1, 3), label="N")
    kind = draw(st.sampled_from(["max", "avg"]), label="kind")
    gpu = draw(st.booleans(), label="gpu heuristic")
    return n, h, w, k, s, p, kind, gpu


@settings(max_examples=25, deadline=None)
@given(pool_case())
def test_random_windows_strides_and_paddings_match_float64(case):
    n, h, w, k, s, p, kind, gpu = case
    x = torch.randn(n, h, w)
    torch.testing.assert_close(pooled(kind, x, k, s, p, gpu).double(), reference(kind, x, k, s, p),
                               rtol=1e-6, atol=1e-6)


def small_tiles(kind: str, th: int, tw: int, **extra) -> dt.Schedule:
    """Programs of ``th`` x ``tw`` outputs looping over the window one index a step (the GPU's
    layout for padded windows), so an image spans several programs on the interpreter."""
    return dt.Schedule(tile={"n": 1, "h": th, "w": tw, "r": 1, "q": 1}, grid=("n", "h", "w"),
                       strategy={"r": "loop", "q": "loop"}, **extra)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_mean_over_a_window_the_call_pins_divides_by_a_literal(dtype):
    """The 2x2 average pool's mean over its window axes (sizes the call pins: at most 8) multiplies by
    0.25 (exact), a 3x3 window's divides by 9, instead of dividing by the product of size arguments
    (``plan.passes.plan_exact_counts``); both match float64 torch on NaN-poisoned outputs."""
    from dtriton.library import avg_pool2d
    x = torch.randn(2, 3, 10, 14).to(dtype)
    k = dt.compile(avg_pool2d)
    view = (x.view(2, 3, 5, 2, 7, 2),)
    assert "* 0.25  # stage" in k.source_for(*view)
    out = torch.full((2, 3, 5, 7), float("nan"), dtype=dtype)
    k(*view, out=out)
    tol = 1e-3 if dtype == torch.float16 else 1e-6
    torch.testing.assert_close(out.double(), F.avg_pool2d(x.double(), 2), rtol=tol, atol=tol)
    y = torch.randn(2, 11, 13).to(dtype)
    kw = dt.compile(avg_pool2d_window, small_tiles("avg", 2, 4))
    assert "/ (9)  # stage" in kw.source_for(y, 3, 2, 1, 6, 7)
    torch.testing.assert_close(kw(y, 3, 2, 1, 6, 7).double(), reference("avg", y, 3, 2, 1), rtol=tol, atol=tol)
