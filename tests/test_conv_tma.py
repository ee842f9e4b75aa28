"""A convolution's input read in TMA boxes (issue 19, session 5): each M tile a box of the output rows
(n, h, w), each tap's input tile one TMA box shifted by the tap, zeros outside the tensor as the padding.

The kernels run on Triton's interpreter (its descriptors fill out-of-range coordinates, negative ones
too, with zeros as TMA does) into NaN-poisoned outputs and are compared with torch's ``F.conv2d`` in
float64, on odd sizes whose boxes overhang the image; the plan's decision is checked at the bench
shape (planned as a CUDA call, nothing launched).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import dtriton as dt
from dtriton import library as L
from dtriton.ir import Axis, ScalarParam, shift_of
from dtriton.plan import call_spec, implicit_gemm, plan_program

from conftest import check, randn


def t_conv2d_nhwc(X, W, s, p, d, ho, wo):
    return F.conv2d(X.permute(0, 3, 1, 2), W.permute(0, 3, 1, 2), stride=s, padding=p, dilation=d).permute(0, 2, 3, 1)


def osize(n: int, s: int, p: int, d: int) -> int:
    return (n + 2 * p - d * 2 - 1) // s + 1


def boxed(tile: dict) -> dt.Schedule:
    """A TMA schedule of conv2d_nhwc with these tiles (K one tap per step)."""
    full = {"r": 1, "q": 1, **tile}
    return dt.Schedule(tile=full, grid=("n", "h", "w", "o"), strategy={"c": "loop", "r": "loop", "q": "loop"},
                       access="tma")


def gpu_kernel(args, sched=None):
    """The kernel plan of a CUDA call with ``args`` (meta tensors: every one TMA-addressable)."""
    alg = L.conv2d_nhwc
    b = alg.bind(args)
    b.device = torch.device("cuda")
    full = dt.compile(alg, sched).complete(b)
    tma = frozenset({"X", "Wt", "out"}) if full.access == "tma" else frozenset()
    return full, plan_program(alg, full, b, call_spec(alg, b, args, False, tma_ok=tma)).kernels[0]


def bench_args(stride: int = 1):
    m = dict(device="meta", dtype=torch.float16)
    ho = osize(56, stride, 1, 1)
    return [torch.empty(32, 56, 56, 256, **m), torch.empty(256, 3, 3, 256, **m), stride, 1, 1, ho, ho]


def test_shift_of_takes_unit_coefficients_only():
    h, r = Axis("h"), Axis("r")
    s, d, p = (ScalarParam(x, int) for x in ("s", "d", "p"))
    e = h * s + r * d - p
    at0 = shift_of(e, "h", {"s"})
    assert at0 is not None and "h" not in at0.axes and set(at0.axes) == {"r"}
    assert shift_of(e, "h", {"d"}) is None            # a stride that is not 1 on this call
    assert shift_of(h // 2 + r, "h", {"s"}) is None    # not affine
    assert shift_of(h * h + r, "h", set()) is None
    assert shift_of(-h + r, "h", set()) is None        # coefficient -1
    assert shift_of(h * 2 - h + r - 1, "h", set()) is not None


def test_bench_conv_reads_its_input_in_tma_boxes():
    sched, k = gpu_kernel(bench_args())
    assert sched.access == "tma" and (sched.tile["n"], sched.tile["h"], sched.tile["w"]) == (4, 8, 8)
    assert sched.tile["o"] == 128 and sched.tile["c"] == 64 and sched.num_stages == 4   # (256 x 128 x 64)
    assert k.flat_box == {"nhw": (4, 8, 8)}
    (dims,) = k.shifted_reads.values()
    assert sorted(dims) == [1, 2] and [dims[1][0], dims[2][0]] == ["h", "w"]
    assert k.access[("X", ("n", "h", "w", "c"))].box == (4, 8, 8, 64)
    small = [torch.empty(2, 56, 56, 256, device="meta", dtype=torch.float16)] + bench_args()[1:]
    sched, k = gpu_kernel(small)   # one wave of 256-row tiles: 128 x 256 x 64, 3 stages
    assert (sched.tile["n"], sched.tile["h"], sched.tile["w"], sched.tile["o"], sched.num_stages) == (2, 8, 8, 256, 3)
    assert sched.tile["o"] == 256 and k.flat_box == {"nhw": (2, 8, 8)}


def test_stride_two_keeps_the_gathered_pointer_loads():
    _, k = gpu_kernel(bench_args(stride=2))
    assert not k.flat_box and not k.shifted_reads and ("X", ("n", "h", "w", "c")) not in k.access


def test_boxes_only_where_few_rows_are_wasted():
    m = dict(device="meta", dtype=torch.float16)
    args = [torch.empty(3, 8, 10, 64, **m), torch.empty(64, 3, 3, 64, **m), 1, 1, 1, 8, 10]
    _, k = gpu_kernel(args, boxed({"n": 1, "h": 8, "w": 16, "o": 64, "c": 64}))   # 16 columns of 10: pointers
    assert not k.flat_box
    _, k = gpu_kernel(args, boxed({"n": 1, "h": 8, "w": 2, "o": 64, "c": 64}))    # 8 and 2 divide 8 and 10
    assert k.flat_box == {"nhw": (1, 8, 2)}


@pytest.mark.parametrize("s,p,d", [(1, 1, 1), (1, 2, 2), (1, 0, 1)])
def test_boxed_conv_on_odd_sizes(monkeypatch, s, p, d):
    """Boxes of 2 x 2 x 4 rows over a 3 x 5 x 7 image (every member masked, taps reading at -2..+2
    past the edges) are right; so are fp16 ones."""
    monkeypatch.setattr(implicit_gemm, "BOX_WASTE", 1)   # (boxes on sizes this small waste rows)
    H, W = 5, 7
    args = [randn(3, H, W, 16), randn(24, 3, 3, 16), s, p, d, osize(H, s, p, d), osize(W, s, p, d)]
    sched = boxed({"n": 2, "h": 2, "w": 4, "o": 16, "c": 16})
    src = dt.compile(L.conv2d_nhwc, sched).source_for(*args)
    assert "desc_X.load([start_n, start_h + " in src and "tl.load(X_ptr" not in src
    check(L.conv2d_nhwc, args, sched, torch_ref=t_conv2d_nhwc)


def test_boxed_fp16_conv_divisible_tiles():
    args = [randn(2, 4, 8, 16, dtype=torch.float16), randn(16, 3, 3, 16, dtype=torch.float16), 1, 1, 1, 4, 8]
    sched = boxed({"n": 1, "h": 2, "w": 8, "o": 16, "c": 16})
    src = dt.compile(L.conv2d_nhwc, sched).source_for(*args)
    assert "desc_X" in src and "mask_nhw" not in src   # (every box inside the output: no row mask)
    check(L.conv2d_nhwc, args, sched, torch_ref=t_conv2d_nhwc)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(2, 3), h=st.integers(3, 7), w=st.integers(5, 9), o=st.integers(1, 20), k=st.integers(1, 3),
       s=st.integers(1, 2), p=st.integers(0, 2), d=st.integers(1, 2), box=st.sampled_from([(1, 2, 8), (2, 2, 4), (2, 4, 2)]),
       seed=st.integers(0, 99))
def test_boxed_conv_drawn(n, h, w, o, k, s, p, d, box, seed):
    """Drawn shapes, windows, strides, paddings and dilations under boxes of 16 rows: stride 1 reads
    the input in TMA boxes (a stride of 2, or boxes longer than an image's padded side, keep the
    gathered loads), both right against float64."""
    ho, wo = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    if ho < 1 or wo < 1:
        return
    g = torch.Generator().manual_seed(seed)
    args = [randn(n, h, w, 16, gen=g), randn(o, k, k, 16, gen=g), s, p, d, ho, wo]
    sched = boxed({"n": box[0], "h": box[1], "w": box[2], "o": 16, "c": 16})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(implicit_gemm, "BOX_WASTE", 1)
        src = dt.compile(L.conv2d_nhwc, sched).source_for(*args)
        pow2 = lambda x: 1 << (x - 1).bit_length()  # noqa: E731
        fits = all(size % t == 0 or pow2(size) >= t for size, t in zip((n, ho, wo), box))   # (BOX_WASTE 1)
        assert ("desc_X" in src) == (s == 1 and fits)
        check(L.conv2d_nhwc, args, sched, torch_ref=t_conv2d_nhwc)


@dt.algorithm
def transpose_phases_nhwc(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["O", "R", "Q", "C"], stride: int,
                          padding: int, Hh: int, Wh: int, J: int):
    """conv_transpose2d by output phases, channels-last (as bench/conv.py's): each phase's input read
    is ``a + (ph + padding) // stride - j``, a shift of the row axis ``a`` by a phase and a tap."""
    n, o, c, a, b, j, i = dt.axes("n o c a:Hh b:Wh j:J i:J")
    ph, pw = dt.axes("ph:stride pw:stride")
    x = X.pad(0.0)[n, a + (ph + padding) // stride - j, b + (pw + padding) // stride - i, c]
    wt = Wt.pad(0.0)[o, (ph + padding) % stride + j * stride, (pw + padding) % stride + i * stride, c]
    return dt.sum(x * wt, over=(c, j, i))[n, a, ph, b, pw, o]


def test_transposed_conv_phases_read_boxes(monkeypatch):
    """The phases of a stride-2 transposed conv read their input in boxes too (shifted by the phase's
    floor division and the tap); right against torch's conv_transpose2d in float64, fp16."""
    monkeypatch.setattr(implicit_gemm, "BOX_WASTE", 1)
    N, C, H = 3, 16, 5
    x, w = randn(N, C, H, H, dtype=torch.float16), randn(C, C, 3, 3, dtype=torch.float16)
    xl, wl = x.permute(0, 2, 3, 1).contiguous(), w.permute(1, 2, 3, 0).contiguous()
    ho = 2 * H   # stride 2, padding 1, output_padding 1
    args = [xl, wl, 2, 1, ho // 2, ho // 2, 2]
    sched = dt.Schedule(tile={"n": 2, "a": 2, "b": 4, "o": 16, "c": 16, "j": 1, "i": 1, "ph": 1, "pw": 1},
                        grid=("ph", "pw", "n", "a", "b", "o"), strategy={"c": "loop", "j": "loop", "i": "loop"},
                        access="tma")
    k = dt.compile(transpose_phases_nhwc, sched)
    assert "desc_X.load([start_n, start_a + " in k.source_for(*args)
    out = torch.full((N, ho // 2, 2, ho // 2, 2, C), float("nan"), dtype=torch.float16)   # poisoned
    got = k(*args, out=out).reshape(N, ho, ho, C).permute(0, 3, 1, 2).double()
    ref = F.conv_transpose2d(x.double(), w.double(), stride=2, padding=1, output_padding=1)
    assert ((got - ref).norm() / ref.norm()).item() < 2e-3


def test_weight_with_output_channels_contiguous():
    """A weight stored (R, Q, C, O) (the GEMM's B operand N-major) is read through a TMA descriptor of its
    (R, Q, C, O) view beside the input's boxes; right against float64."""
    W = randn(3, 3, 16, 24).permute(3, 0, 1, 2)            # (O, R, Q, C) view, o of stride 1
    args = [randn(2, 4, 8, 16), W, 1, 1, 1, 4, 8]
    sched = boxed({"n": 1, "h": 2, "w": 8, "o": 16, "c": 16})
    src = dt.compile(L.conv2d_nhwc, sched).source_for(*args)
    assert "desc_X.load(" in src and "desc_Wt.load([idx_r, idx_q" in src
    check(L.conv2d_nhwc, args, sched, torch_ref=t_conv2d_nhwc)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_persistent_boxed_conv_stores_its_boxes_by_tma(monkeypatch, dtype):
    """A persistent boxed conv (programs looping over more tiles than there are programs; the tile loop
    flattened with the K loop, plan.persistent) stores each box of output rows through one TMA
    descriptor of the output (clipped at the image's edges: boxes
    of 2 x 2 x 4 overhang a 3 x 5 x 7 output); right against float64, into a poisoned output."""
    monkeypatch.setattr(implicit_gemm, "BOX_WASTE", 1)
    args = [randn(3, 5, 7, 16, dtype=dtype), randn(24, 3, 3, 16, dtype=dtype), 1, 1, 1, 5, 7]
    sched = boxed({"n": 2, "h": 2, "w": 4, "o": 16, "c": 16}).replace(persistent=1)
    src = dt.compile(L.conv2d_nhwc, sched).source_for(*args)
    assert "num_tiles, tl.num_programs(0), flatten=True)" in src and "desc_X.load([start_n, start_h + " in src
    assert "desc_out.store([start_n, start_h, start_w, " in src and "tl.store(out_ptr" not in src
    check(L.conv2d_nhwc, args, sched, torch_ref=t_conv2d_nhwc)
    plain = dt.compile(L.conv2d_nhwc, sched.replace(persistent=0)).source_for(*args)
    assert "tl.store(out_ptr" in plain and "desc_out" not in plain   # (one tile a program: pointer stores)
