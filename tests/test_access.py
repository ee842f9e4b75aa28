"""Memory-access styles (``Schedule.access``: pointer, block_ptr, tma) and warp specialisation, on
Triton's interpreter (which implements block pointers and TMA tensor descriptors, including
their 16-byte alignment rules).

Every kernel writes NaN-poisoned ``out=`` tensors and is compared with float64 references. The
cases cover sizes that are not multiples of the tile, size 1, transposed, expanded (stride 0)
and offset inputs (which TMA cannot address: the runtime keeps pointers for those tensors), rows
that are not 16-byte aligned, multi-kernel and batched (4-d) algorithms, fp32/fp16/bf16, and
random shapes and tiles drawn by hypothesis.
"""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import given, strategies as st

import dtriton as dt
from dtriton.library import attention, layer_norm, linear_relu, matmul, softmax, spatial_diffusion

from conftest import TOL, check

STYLES = ["pointer", "block_ptr", "tma"]


def rnd(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def kernel_source(alg, sched, args) -> str:
    k = dt.compile(alg, sched)
    k(*args)
    return k.source


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,K,N", [(37, 50, 29), (1, 16, 8), (64, 64, 64), (33, 128, 72)])
def test_matmul_access_styles(style, dtype, M, K, N):
    A, B = rnd(M, K, dtype=dtype, seed=M), rnd(K, N, dtype=dtype, seed=N)
    check(matmul, (A, B), dt.Schedule(tile={"i": 16, "j": 32, "k": 16}, access=style),
          torch_ref=lambda a, b: a @ b, tol=TOL[dtype])


@pytest.mark.parametrize("style", ["block_ptr", "tma"])
def test_odd_layouts_fall_back_or_work(style):
    """Transposed, expanded (stride 0), offset and unaligned inputs: TMA keeps pointers for the
    tensors it cannot address; results are right either way."""
    A = rnd(40, 48)
    Bt = rnd(24, 48, seed=1).t()                    # last stride 48: not TMA-addressable
    Bexp = rnd(48, 1, seed=2).expand(48, 24)        # stride 0
    base = rnd(48 * 24 + 3, seed=3)
    Boff = base[3:].view(48, 24)                    # storage offset of 3 floats: base not 16-byte aligned
    A_odd = rnd(40, 47, seed=4)                     # rows of 47 floats: stride not a multiple of 16 bytes
    sch = dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, access=style)
    for a, b in ((A, Bt), (A, Bexp), (A, Boff), (A_odd, rnd(47, 24, seed=5))):
        check(matmul, (a, b), sch, torch_ref=lambda x, y: x @ y)


def test_tma_descriptors_only_for_addressable_tensors():
    A, Bodd = rnd(40, 48), rnd(48, 25, seed=1)[:, :24]     # B's rows: 100 bytes, not a multiple of 16
    src = kernel_source(matmul, dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, access="tma"), (A, Bodd))
    assert "TMA-addressable on this call: A, out" in src
    assert "desc_A: TMA descriptor of A[i, k] in boxes of [16, 16] (built on the host)" in src and "desc_B" not in src
    assert re.search(r"def \w+\(.*, desc_A, desc_out, BLOCK_I: tl.constexpr", src)   # kernel arguments
    assert "desc_A.load([" in src and "desc_out.store([" in src
    assert "tl.load(B_ptr +" in src       # B keeps a pointer load
    # a transposed operand is read through a descriptor of its transposed view, permuted back
    Bt = rnd(24, 48, seed=1).t()
    src = kernel_source(matmul, dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, access="tma"), (A, Bt))
    assert "TMA-addressable on this call: A, B, out" in src
    assert "desc_B: TMA descriptor of B.permute(1, 0)[j, k] in boxes of [16, 16]" in src and "tl.permute(" in src
    src = kernel_source(matmul, dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, access="block_ptr"), (A, Bt))
    assert src.count("tl.make_block_ptr(") == 3 and "boundary_check" in src
    plain = kernel_source(matmul, dt.Schedule(tile={"i": 16, "j": 16, "k": 16}), (A, Bt))
    assert "make_block_ptr" not in plain and "make_tensor_descriptor" not in plain


@pytest.mark.parametrize("style", ["block_ptr", "tma"])
def test_multi_stage_and_batched_algorithms(style):
    X = rnd(37, 48, dtype=torch.float16)
    check(softmax, (X,), dt.Schedule(access=style), torch_ref=lambda x: torch.softmax(x, -1), tol=TOL[torch.float16])
    check(softmax, (X,), dt.Schedule(access=style, tile={"i": 4, "j": 16}, strategy={"j": "loop"}),
          torch_ref=lambda x: torch.softmax(x, -1), tol=TOL[torch.float16])
    w, b = rnd(48, seed=1), rnd(48, seed=2)
    check(layer_norm, (X.float(), w, b), dt.Schedule(access=style),
          torch_ref=lambda x, w_, b_: torch.nn.functional.layer_norm(x, (48,), w_, b_))
    V, K, C = 300, 32, 16
    args = (rnd(V, C), rnd(V, K, seed=1), torch.rand(V) + 0.5, torch.rand(K), torch.rand(C))
    check(spatial_diffusion, args, dt.Schedule(access=style))
    Q, Kt, Vv = (rnd(2, 3, n, 16, dtype=torch.float16, seed=s) for s, n in ((0, 20), (1, 24), (2, 24)))
    check(attention, (Q, Kt, Vv, 0.25), dt.Schedule(access=style), tol=TOL[torch.float16])
    Xl, W, bb = rnd(40, 50), rnd(24, 50, seed=1), rnd(24, seed=2)
    check(linear_relu, (Xl, W, bb), dt.Schedule(access=style, tile={"i": 16, "j": 8, "k": 16}))


def test_batched_tma_tile_drops_unit_dims_before_permuting():
    Q, Kt = rnd(2, 3, 20, 16, dtype=torch.float16), rnd(2, 3, 24, 16, dtype=torch.float16, seed=1)
    src = kernel_source(attention, dt.Schedule(access="tma"), (Q, Kt, Kt, 0.25))
    assert re.search(r"desc_Q: TMA descriptor of Q\[b, h, i, d\] in boxes of \[1, 1, \d+, \d+\]", src)
    # K[b, h, j, d] is read as a [1, 1, j, d] box, reshaped to [j, d], then transposed for the dot
    assert re.search(r"tl\.reshape\(tile_\d+, \(BLOCK_J, BLOCK_D\)\)", src)


def test_warp_specialize_only_on_tma_fed_loops():
    A, B = rnd(64, 128), rnd(128, 32, seed=1)
    sch = dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, access="tma", warp_specialize=True)
    assert "tl.range(0, size_k, BLOCK_K, warp_specialize=True)" in kernel_source(matmul, sch, (A, B))
    # rows of 131 floats are not TMA-addressable: pointer loads, so no warp specialisation
    A2, B2 = rnd(65, 131), rnd(131, 33, seed=1)
    with pytest.warns(dt.ScheduleWarning, match="warp_specialize=True has no effect on loops whose loads are not all TMA"):
        src = kernel_source(matmul, sch, (A2, B2))
    assert "warp_specialize=True" not in src and "warp_specialize off" in src
    with pytest.warns(dt.ScheduleWarning):
        check(matmul, (A2, B2), sch, torch_ref=lambda a, b: a @ b)
    check(matmul, (A, B), sch.replace(persistent=1), torch_ref=lambda a, b: a @ b)
    with pytest.warns(dt.ScheduleWarning):   # block pointers are not TMA
        kernel_source(matmul, sch.replace(access="block_ptr"), (A, B))


def test_schedule_validation_and_round_trip():
    with pytest.raises(dt.ScheduleError, match=r"access = 'tmaa' must be one of \('pointer', 'block_ptr', 'tma'\)"):
        dt.Schedule(access="tmaa")
    with pytest.raises(dt.ScheduleError, match="warp_specialize = 1 must be True, False or None"):
        dt.Schedule(warp_specialize=1)
    s = dt.Schedule(access="tma", warp_specialize=True, persistent=1)
    assert dt.Schedule.from_json(s.to_json()) == s
    assert "access" not in dt.Schedule().to_dict()


@given(M=st.integers(1, 40), K=st.integers(1, 40), N=st.integers(1, 40), style=st.sampled_from(STYLES),
       ti=st.sampled_from([16, 32]), tj=st.sampled_from([16, 32]), tk=st.sampled_from([16, 32]),
       dtype=st.sampled_from([torch.float32, torch.float16]), seed=st.integers(0, 2**16))
def test_random_shapes_and_tiles(M, K, N, style, ti, tj, tk, dtype, seed):
    A, B = rnd(M, K, dtype=dtype, seed=seed), rnd(K, N, dtype=dtype, seed=seed + 1)
    check(matmul, (A, B), dt.Schedule(tile={"i": ti, "j": tj, "k": tk}, access=style),
          torch_ref=lambda a, b: a @ b, tol=TOL[dtype])


def test_tma_refuses_bool_zero_stride_and_empty_tensors():
    """Bool tensors (Triton counts them as 1-bit), stride-0 expanded dims and empty tensors keep
    pointers instead of failing to compile or building odd descriptors."""
    @dt.algorithm
    def masked(X: dt.Tensor["M", "N"], Mk: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.where(Mk[i, j], X[i, j], 0.0)[i, j]
    X, Mk = rnd(40, 64), torch.rand(40, 64, generator=torch.Generator().manual_seed(1)) > 0.5
    sch = dt.Schedule(tile={"i": 16, "j": 32}, access="tma")
    _, (got,) = check(masked, (X, Mk), sch, torch_ref=lambda x, m: torch.where(m.bool(), x, 0.0))
    src = kernel_source(masked, sch, (X, Mk))
    assert "desc_X" in src and "desc_Mk" not in src
    row = rnd(48, seed=2)[None].expand(40, 48)            # strides (0, 1)
    src = kernel_source(matmul, dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, access="tma"), (row, rnd(48, 24)))
    assert "desc_A" not in src and "desc_B" in src
    check(matmul, (row, rnd(48, 24)), dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, access="tma"),
          torch_ref=lambda a, b: a @ b)
    check(matmul, (rnd(5, 0), rnd(0, 7)), dt.Schedule(access="tma"), torch_ref=lambda a, b: a @ b)


def test_tma_needs_no_triton_allocator():
    """Descriptors are built on the host: no global-scratch allocator is installed anywhere."""
    from triton.runtime import _allocation
    before = _allocation._allocator.get()
    kernel_source(matmul, dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, access="tma"), (rnd(32, 32), rnd(32, 32, seed=1)))
    assert _allocation._allocator.get() is before


def test_schedule_warning_points_at_the_callers_line():
    A, B = rnd(65, 131), rnd(131, 33, seed=1)
    k = dt.compile(matmul, dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, warp_specialize=True))
    with pytest.warns(dt.ScheduleWarning) as rec:
        k(A, B)
    assert rec[0].filename == __file__


def test_integer_output_beside_a_16bit_contraction_keeps_tl_dot():
    """An integer output (int32, as torch promotes C * 2) does not turn the fp16 contraction of the
    same algorithm into float64 arithmetic without tl.dot."""
    @dt.algorithm
    def mm_and_count(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"], C: dt.Tensor["M"]):
        i, j, k = dt.axes("i j k")
        return dt.sum(A[i, k] * B[k, j], over=k)[i, j], (C[i] * 2)[i]
    A, B = rnd(40, 32, dtype=torch.float16), rnd(32, 24, dtype=torch.float16, seed=1)
    C = torch.randint(-1000, 1000, (40,), dtype=torch.int32)
    k = dt.compile(mm_and_count, dt.Schedule(tile={"i": 16, "j": 16, "k": 16}))
    out, cnt = k(A, B, C)
    assert out.dtype == torch.float16 and cnt.dtype == (C * 2).dtype == torch.int32
    assert torch.equal(cnt, C * 2)
    assert "tl.dot(" in k.source and "tl.float64" not in k.source.split("def mm_and_count_out0")[1].split("@_jit")[0]


def test_divisibility_hints_restate_sizes_and_strides():
    """Sizes and strides that are multiples of 2-8 (Triton itself tracks only 16) are restated as
    ``x // d * d`` so Triton can vectorise; the hints are part of the specialisation, so a later
    call whose strides divide by less gets its own kernel instead of a wrong stride."""
    base = rnd(7, 1000, dtype=torch.float16)
    X = base[:, :998]                         # row stride 1000 (a multiple of 8), 998 columns (of 2)
    k = dt.compile(softmax)
    torch.testing.assert_close(k(X).double(), torch.softmax(X.double(), -1), rtol=2e-3, atol=2e-3)
    src = k.source
    assert "X_s0 = X_s0 // 8 * 8" in src and "size_j = size_j // 2 * 2" in src
    assert "size_i =" not in src              # 7 rows: odd, no hint
    X2 = rnd(7, 999, dtype=torch.float16, seed=1)[:, :998]    # row stride 999: odd
    out = torch.full((7, 998), float("nan"), dtype=torch.float16)
    k(X2, out=out)
    torch.testing.assert_close(out.double(), torch.softmax(X2.double(), -1), rtol=2e-3, atol=2e-3)
    assert "X_s0 = X_s0 //" not in k.source
    A, B = rnd(48, 1000, dtype=torch.float16), rnd(1000, 40, dtype=torch.float16, seed=1)
    plain = kernel_source(matmul, dt.Schedule(tile={"i": 16, "j": 16, "k": 64}), (rnd(48, 1024), rnd(1024, 32)))
    assert "// 8 * 8" not in plain            # multiples of 16: Triton's own specialisation
    check(matmul, (A, B), dt.Schedule(tile={"i": 16, "j": 16, "k": 64}), torch_ref=lambda a, b: a @ b, tol=TOL[torch.float16])


def test_knobs_without_effect_warn():
    """warp_specialize without a contraction loop, a dot precision without fp32 dots and an
    eviction hint that only TMA loads would carry have no effect: a ScheduleWarning names each;
    the same knobs where they apply stay silent."""
    import warnings
    X = rnd(8, 40)
    with pytest.warns(dt.ScheduleWarning, match="warp_specialize=True has no effect: no kernel has a contraction"):
        dt.compile(softmax, dt.Schedule(warp_specialize=True))(X)
    with pytest.warns(dt.ScheduleWarning, match="precision='tf32' has no effect: no kernel has a tl.dot with fp32"):
        dt.compile(softmax, dt.Schedule(precision="tf32"))(X)
    A = rnd(32, 32, dtype=torch.float16)
    with pytest.warns(dt.ScheduleWarning, match="precision='tf32x3' has no effect"):
        dt.compile(matmul, dt.Schedule(precision="tf32x3"))(A, A)
    with pytest.warns(dt.ScheduleWarning, match=r"eviction=\{'A': 'evict_first'\} has no effect: no load of A"):
        dt.compile(matmul, dt.Schedule(access="tma", eviction={"A": "evict_first"}, tile={"i": 16, "j": 16, "k": 16}))(A, A)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        dt.compile(matmul, dt.Schedule(precision="tf32x3"))(A.float(), A.float())
        dt.compile(matmul, dt.Schedule(eviction={"A": "evict_first"}))(A, A)
        dt.compile(matmul, dt.Schedule(eviction={"A": "evict_normal"}, access="tma"))(A, A)
