"""Convolutions (issue 19): index notation lowered to implicit GEMMs on ``tl.dot``.

Every kernel runs on Triton's interpreter into NaN-poisoned outputs and is compared with torch's
``F.conv1d``/``conv2d``/``conv3d``/``conv_transpose2d`` in float64 (and the reference evaluator),
on odd sizes: primes, size 1, strides, paddings, dilations and groups. The GEMM cases must print
a ``tl.dot`` (before the planner's flat axes, a sum over (c, r, q) was a masked multiply-and-sum).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import dtriton as dt
from dtriton import library as L
from dtriton.plan import call_spec, plan_program

from conftest import check, randn, run_bench


def osize(n: int, k: int, s: int, p: int, d: int = 1) -> int:
    """torch's output length of a convolution."""
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def nchw(x):
    return x.permute(0, 3, 1, 2)


def nhwc(x):
    return x.permute(0, 2, 3, 1)


def t_conv2d_nhwc(X, W, s, p, d, ho, wo):
    return nhwc(F.conv2d(nchw(X), nchw(W), stride=s, padding=p, dilation=d))


def source(alg, args, sched=None) -> str:
    return dt.compile(alg, sched).source_for(*args)


@dt.algorithm
def conv2d_bias_relu(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["O", "R", "Q", "C"], b: dt.Tensor["O"],
                     Ho: int, Wo: int):
    """A 'same' 3x3 conv channels-last with a bias and ReLU epilogue (fused into the GEMM's store)."""
    n, o, c, h, w, r, q = dt.axes("n o c h:Ho w:Wo r q")
    y = dt.sum(X.pad(0.0)[n, h + r - 1, w + q - 1, c] * Wt[o, r, q, c], over=(c, r, q))
    return dt.maximum(y + b[o], 0.0)[n, h, w, o]


# ----------------------------------------------------------------------------------------------
# each convolution against torch, default schedules
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,c,h,w,o,k,s,p,d", [
    (2, 5, 7, 6, 3, 3, 1, 1, 1),      # primes, 'same'
    (1, 1, 5, 5, 1, 1, 1, 0, 1),      # size 1 everywhere but the image: a 1x1 conv
    (2, 3, 11, 9, 7, 3, 2, 2, 2),     # stride, padding and dilation
    (3, 17, 4, 13, 19, 2, 3, 0, 1),   # even kernel, stride 3, no padding
])
def test_conv2d_nhwc_is_a_dot_and_matches_torch(n, c, h, w, o, k, s, p, d):
    ho, wo = osize(h, k, s, p, d), osize(w, k, s, p, d)
    args = [randn(n, h, w, c), randn(o, k, k, c), s, p, d, ho, wo]
    check(L.conv2d_nhwc, args, torch_ref=t_conv2d_nhwc)
    assert "tl.dot(" in source(L.conv2d_nhwc, args)


@pytest.mark.parametrize("s,p,d", [(1, 0, 1), (2, 3, 2), (3, 1, 4)])
def test_conv1d_with_stride_and_dilation(s, p, d):
    X, W = randn(3, 7, 23), randn(11, 7, 3)
    args = [X, W, s, p, d, osize(23, 3, s, p, d)]
    check(L.conv1d, args, torch_ref=lambda X, W, s, p, d, lo: F.conv1d(X, W, stride=s, padding=p, dilation=d))
    assert "tl.dot(" in source(L.conv1d, args)


def test_conv2d_nchw():
    args = [randn(2, 3, 9, 10), randn(5, 3, 3, 2), 2, 1, 1, osize(9, 3, 2, 1), osize(10, 2, 2, 1)]
    check(L.conv2d, args, torch_ref=lambda X, W, s, p, d, ho, wo: F.conv2d(X, W, stride=s, padding=p, dilation=d))
    assert "tl.dot(" in source(L.conv2d, args)


def test_conv3d():
    args = [randn(2, 3, 5, 4, 6), randn(4, 3, 2, 3, 3), 1, 1, osize(5, 2, 1, 1), osize(4, 3, 1, 1), osize(6, 3, 1, 1)]
    check(L.conv3d, args, torch_ref=lambda X, W, s, p, a, b, c: F.conv3d(X, W, stride=s, padding=p))
    assert "tl.dot(" in source(L.conv3d, args)


@pytest.mark.parametrize("g", [1, 3])
def test_grouped_conv2d_over_group_views(g):
    n, h, w, cg, og = 2, 6, 5, 3, 4
    X, W = randn(n, h, w, g * cg), randn(g * og, 3, 3, cg)
    args = [X.view(n, h, w, g, cg), W.view(g, og, 3, 3, cg), 1, 1, 1, h, w]
    ref = nhwc(F.conv2d(nchw(X.double()), nchw(W.double()), padding=1, groups=g)).reshape(n, h, w, g, og)
    _, (out,) = check(L.grouped_conv2d_nhwc, args)
    assert torch.allclose(out.double(), ref, atol=1e-4)
    assert "tl.dot(" in source(L.grouped_conv2d_nhwc, args)


@pytest.mark.parametrize("s,p", [(1, 1), (2, 0), (2, 1)])
def test_depthwise_conv2d(s, p):
    n, h, w, c = 2, 7, 6, 5
    X, W = randn(n, h, w, c), randn(3, 3, c)
    args = [X, W, s, p, osize(h, 3, s, p), osize(w, 3, s, p)]
    check(L.depthwise_conv2d_nhwc, args,
          torch_ref=lambda X, W, s, p, ho, wo: nhwc(F.conv2d(nchw(X), W.permute(2, 0, 1)[:, None], stride=s,
                                                             padding=p, groups=X.shape[-1])))


@pytest.mark.parametrize("h,w,s,p,d", [(4, 5, 2, 1, 1), (3, 3, 1, 0, 1), (5, 2, 3, 2, 2), (1, 1, 2, 0, 1)])
def test_conv_transpose2d_gather_form(h, w, s, p, d):
    c, o = 3, 4
    ho, wo = (h - 1) * s - 2 * p + d * 2 + 1, (w - 1) * s - 2 * p + d * 2 + 1
    args = [randn(2, c, h, w), randn(c, o, 3, 3), s, p, d, ho, wo]
    check(L.conv_transpose2d, args, torch_ref=lambda X, W, s, p, d, ho, wo: F.conv_transpose2d(
        X, W, stride=s, padding=p, dilation=d))
    assert "tl.dot(" in source(L.conv_transpose2d, args)


@pytest.mark.parametrize("h,w,s,p,r,op", [(4, 5, 2, 1, 3, 1), (3, 3, 2, 0, 4, 0), (5, 4, 3, 1, 3, 2), (1, 1, 2, 0, 2, 0)])
def test_conv_transpose2d_by_output_phases(h, w, s, p, r, op):
    """One implicit GEMM per output phase over its own taps: the output (N, O, Ho/s, s, Wo/s, s)
    viewed back as (N, O, Ho, Wo) is torch's."""
    X, W = randn(2, 3, h, w), randn(3, 4, r, r)
    ref = F.conv_transpose2d(X.double(), W.double(), stride=s, padding=p, output_padding=op)
    ho, wo = ref.shape[2:]
    assert ho % s == 0 and wo % s == 0
    args = [X, W, s, p, ho // s, wo // s, -(-r // s)]
    _, (out,) = check(L.conv_transpose2d_phases, args)
    torch.testing.assert_close(out.double().reshape(ref.shape), ref, rtol=1e-5, atol=1e-5)
    if h > 1:   # (two output rows per phase are too few for a dot: a multiply-and-sum)
        assert "tl.dot(" in source(L.conv_transpose2d_phases, args)


def test_depthwise_gpu_schedule_loops_over_the_taps():
    """On the GPU (a schedule derived for CUDA here), a depthwise conv takes 4 rows x 8 columns x 64
    channels per program and loops over the taps one at a time; the schedule runs right on the interpreter."""
    X, W = randn(2, 9, 10, 160), randn(3, 3, 160)
    args = [X, W, 1, 1, 9, 10]
    b = L.depthwise_conv2d_nhwc.bind(args)
    b.device = torch.device("cuda")
    sched = dt.compile(L.depthwise_conv2d_nhwc).complete(b)
    assert sched.strategy == {"r": "loop", "q": "loop"} and (sched.tile["h"], sched.tile["w"], sched.tile["c"]) == (4, 8, 64)
    check(L.depthwise_conv2d_nhwc, args, sched, torch_ref=lambda X, W, s, p, ho, wo: nhwc(
        F.conv2d(nchw(X), W.permute(2, 0, 1)[:, None], padding=1, groups=X.shape[-1])))


def test_conv2d_gpu_schedule_is_a_128_by_128_by_64_implicit_gemm():
    args = [randn(2, 12, 11, 128, dtype=torch.float16), randn(128, 3, 3, 128, dtype=torch.float16), 1, 1, 1, 12, 11]
    b = L.conv2d_nhwc.bind(args)
    b.device = torch.device("cuda")
    sched = dt.compile(L.conv2d_nhwc).complete(b)
    assert sched.tile["o"] == 128 and sched.tile["c"] == 64 and sched.tile["h"] * sched.tile["w"] * sched.tile["n"] == 128
    assert sched.num_warps == 8 and sched.strategy == {"c": "loop", "r": "loop", "q": "loop"}
    assert sched.access == "tma"   # the weight's tile (the gathered input keeps pointers; the interpreter all)
    check(L.conv2d_nhwc, args, sched, torch_ref=t_conv2d_nhwc)


def test_bias_and_relu_epilogue_fused_into_the_gemm():
    args = [randn(2, 5, 6, 4), randn(7, 3, 3, 4), randn(7), 5, 6]
    check(conv2d_bias_relu, args, torch_ref=lambda X, W, b, ho, wo: torch.relu(
        nhwc(F.conv2d(nchw(X), nchw(W), b, padding=1))))
    src = source(conv2d_bias_relu, args)
    assert src.count("@_jit") == 1 and "tl.dot(" in src


def test_fp16_conv():
    args = [randn(2, 9, 7, 16, dtype=torch.float16), randn(24, 3, 3, 16, dtype=torch.float16), 1, 1, 1, 9, 7]
    check(L.conv2d_nhwc, args, torch_ref=t_conv2d_nhwc)


def test_integer_conv_stays_exact():
    """Integer sums fold in int64, not on tensor cores: no flat axes, exact values."""
    X = torch.randint(-50, 50, (2, 5, 5, 3))
    W = torch.randint(-50, 50, (4, 3, 3, 3))
    out = dt.compile(L.conv2d_nhwc)(X, W, 1, 1, 1, 5, 5)
    ref = nhwc(F.conv2d(nchw(X).double(), nchw(W).double(), padding=1)).long()
    assert torch.equal(out, ref)


def test_user_schedules_flat_k_only_and_split():
    """A schedule whose rows are not all on the grid flattens K only; one that splits c keeps the
    plain multiply-and-sum; both are exact."""
    args = [randn(2, 7, 23), randn(16, 7, 3), 2, 1, 1, osize(23, 3, 2, 1)]
    ref = lambda X, W, s, p, d, lo: F.conv1d(X, W, stride=s, padding=p, dilation=d)  # noqa: E731
    k_only = dt.Schedule(tile={"n": 1, "t": 16, "o": 16, "c": 8, "r": 2}, grid=("n", "o", "t"),
                         strategy={"c": "loop", "r": "loop"})
    check(L.conv1d, args, k_only, torch_ref=ref)
    assert "tl.dot(" in source(L.conv1d, args, k_only)
    split = dt.Schedule(tile={"t": 16, "o": 16, "c": 4}, strategy={"c": "loop", "r": "whole"}, split={"c": 2})
    check(L.conv1d, args, split, torch_ref=ref)


@pytest.mark.parametrize("s,p", [(1, 1), (2, 0)])
def test_channels_last_steps_read_one_tap_per_tile(s, p):
    """With the channel tile the whole K block and dividing C, each K tile reads one (r, q) tap
    and contiguous channels: r and q are one index per tile, and K needs no tail mask."""
    c, h, w = 32, 6, 7
    args = [randn(2, h, w, c), randn(5, 3, 3, c), s, p, 1, osize(h, 3, s, p), osize(w, 3, s, p)]
    sched = dt.Schedule(tile={"n": 1, "h": 2, "w": 8, "o": 16, "c": 16, "r": 1, "q": 1}, grid=("n", "h", "w", "o"),
                        strategy={"c": "loop", "r": "loop", "q": "loop"})
    check(L.conv2d_nhwc, args, sched, torch_ref=t_conv2d_nhwc)
    src = source(L.conv2d_nhwc, args, sched)
    assert "idx_r = " in src and "idx_q = " in src and "mask_rqc" not in src
    k = _kernel(L.conv2d_nhwc, args, sched)
    assert k.flat_scalar_outer == {"rqc"}


def test_weight_tile_through_a_block_pointer():
    """With one tap per K tile, the weight's tile W[o, r, q, c] is a box (o block, 1, 1, c block):
    a block pointer here (a TMA descriptor on the GPU); the gathered input keeps pointers."""
    args = [randn(2, 6, 7, 32), randn(24, 3, 3, 32), 1, 1, 1, 6, 7]
    sched = dt.Schedule(tile={"n": 1, "h": 2, "w": 8, "o": 16, "c": 16, "r": 1, "q": 1}, grid=("n", "h", "w", "o"),
                        strategy={"c": "loop", "r": "loop", "q": "loop"}, access="block_ptr")
    check(L.conv2d_nhwc, args, sched, torch_ref=t_conv2d_nhwc)
    src = source(L.conv2d_nhwc, args, sched)
    assert "tl.make_block_ptr(Wt_ptr" in src and "tl.make_block_ptr(X_ptr" not in src


# ----------------------------------------------------------------------------------------------
# the plan's decisions
# ----------------------------------------------------------------------------------------------
def _kernel(alg, args, sched=None):
    b = alg.bind(args)
    full = dt.compile(alg, sched).complete(b)
    return plan_program(alg, full, b, call_spec(alg, b, args, True)).kernels[0]


def test_flat_k_puts_the_unit_stride_axis_innermost():
    k = _kernel(L.conv2d_nhwc, [randn(2, 5, 5, 16), randn(16, 3, 3, 16), 1, 1, 1, 5, 5])
    assert set(k.flat.values()) == {("r", "q", "c"), ("n", "h", "w")}
    k = _kernel(L.conv2d, [randn(2, 16, 5, 5), randn(16, 16, 3, 3), 1, 1, 1, 5, 5])
    assert set(k.flat.values()) == {("c", "r", "q"), ("n", "h", "w")}
    (d,) = k.dots.values()
    assert d.k in k.flat and k.axes[d.k].role == "loop"


def test_plain_matmul_has_no_flat_axes():
    k = _kernel(L.matmul, [randn(32, 32), randn(32, 32)])
    assert not k.flat and all(d.k == "k" for d in k.dots.values())


# ----------------------------------------------------------------------------------------------
# drawn shapes
# ----------------------------------------------------------------------------------------------
@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 6), h=st.integers(1, 9), w=st.integers(1, 9), o=st.integers(1, 9),
       k=st.integers(1, 3), s=st.integers(1, 3), p=st.integers(0, 2), d=st.integers(1, 3), seed=st.integers(0, 99))
def test_conv2d_drawn_strides_paddings_dilations(n, c, h, w, o, k, s, p, d, seed):
    ho, wo = osize(h, k, s, p, d), osize(w, k, s, p, d)
    if ho < 1 or wo < 1:
        return
    g = torch.Generator().manual_seed(seed)
    args = [randn(n, h, w, c, gen=g), randn(o, k, k, c, gen=g), s, p, d, ho, wo]
    check(L.conv2d_nhwc, args, torch_ref=t_conv2d_nhwc)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 5), h=st.integers(1, 6), o=st.integers(1, 6), k=st.integers(1, 3),
       s=st.integers(1, 3), p=st.integers(0, 2), d=st.integers(1, 2), seed=st.integers(0, 99))
def test_conv_transpose2d_drawn(n, c, h, o, k, s, p, d, seed):
    ho = (h - 1) * s - 2 * p + d * (k - 1) + 1
    if ho < 1:
        return
    g = torch.Generator().manual_seed(seed)
    args = [randn(n, c, h, h + 1, gen=g), randn(c, o, k, k, gen=g), s, p, d, ho, ho + s]
    check(L.conv_transpose2d, args, torch_ref=lambda X, W, s, p, d, ho, wo: F.conv_transpose2d(
        X, W, stride=s, padding=p, dilation=d))


def test_bench_conv_dry_run(tmp_path):
    """bench/conv.py runs on the interpreter, checks every row against float64 and writes its JSON."""
    out = run_bench(["bench/conv.py", "--dry-run", "--no-compile", "--cases", "conv2d,depthwise"], tmp_path)
    assert "vs torch" in out
    rows = json.loads((tmp_path / "out" / "conv.json").read_text())["rows"]
    assert {r["impl"] for r in rows} >= {"dtriton", "dtriton taps whole", "torch"}
    assert all(r["err"] is not None and r["err"] < 1e-5 for r in rows)


def test_readme_conv_example_is_the_tested_snippet():
    """The README's convolution block is the start of docs/snippets/conv.py (run by test_docs)."""
    root = Path(__file__).resolve().parents[1]
    block = (root / "README.md").read_text(encoding="utf-8").split("## Convolutions", 1)[1]
    block = block.split("```python\n", 1)[1].split("```", 1)[0]
    assert (root / "docs" / "snippets" / "conv.py").read_text(encoding="utf-8").startswith(block)


def test_explore_space_of_a_conv_on_the_gpu_varies_the_gemm_tiles():
    """The space derived for the GPU varies the implicit GEMM's M (a box of the rows n, h, w), N
    and K tiles only (the other reduced axes stay 1, the reductions looped), around the heuristic's."""
    from dtriton.tune.space import Space
    args = (torch.empty(4, 56, 56, 256, dtype=torch.float16), torch.empty(256, 3, 3, 256, dtype=torch.float16),
            1, 1, 1, 56, 56)
    sp = Space.derive(L.conv2d_nhwc, args, target="gpu")
    assert set(sp.tile) == {"n", "w", "h", "o", "c"} and sp.tile["c"] == (32, 64, 128) and sp.tile["n"] == (1, 2, 4)
    assert not sp.strategy


def test_conv2d_gradients_are_derived():
    """dt.compile_autograd of a padded, strided conv: the derived backward's input and weight
    gradients match torch's in float64."""
    g = torch.Generator().manual_seed(3)
    X = torch.randn(2, 7, 6, 4, generator=g, dtype=torch.float64, requires_grad=True)
    W = torch.randn(5, 3, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    y = dt.compile_autograd(L.conv2d_nhwc)(X, W, 2, 1, 1, 4, 3)
    dy = torch.randn(y.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad((y * dy).sum(), (X, W))
    ref = t_conv2d_nhwc(X, W, 2, 1, 1, 4, 3)
    want = torch.autograd.grad((ref * dy).sum(), (X, W))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
