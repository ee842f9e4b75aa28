"""fp32 contractions on tensor cores: operand order and precision from the call's layout (the
plan's rule in dtriton.plan.dots), the heuristic's tensor-core tiles, and results of every layout
against float64 on odd shapes (the interpreter runs the same operand order as the GPU)."""

import pytest
import torch

import dtriton as dt
from dtriton.library import matmul
from dtriton.plan import call_spec, plan_program
from dtriton.schedule.heuristics import complete_schedule


@dt.algorithm
def linear(X: dt.Tensor["M", "K"], W: dt.Tensor["N", "K"]):
    i, j, k = dt.axes("i j k")
    return dt.sum(X[i, k] * W[j, k], over=k)[i, j]


def layout(lay: str, m=37, k=50, n=29, dtype=torch.float32):
    A, B = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    a = A if lay[0] == "N" else A.T.contiguous().T
    b = B if lay[1] == "N" else B.T.contiguous().T
    return a, b


def gpu_dot(alg, args, sched):
    """The DotPlan of the one contraction, planned for the GPU (no GPU needed to plan)."""
    b = alg.bind(args)
    b.device = torch.device("cuda")
    full = complete_schedule(alg, sched, b)
    prog = plan_program(alg, full, b, call_spec(alg, b, args, interpret=False))
    (d,) = [d for k in prog.kernels for d in k.dots.values()]
    return full, d


@pytest.mark.parametrize("lay, right, prec", [("NN", "i", "tf32x3"), ("NT", "j", "tf32x3"),
                                              ("TT", "j", "tf32x3"), ("TN", "j", "ieee")])
def test_auto_precision_puts_the_unit_stride_side_on_the_right(lay, right, prec):
    a, b = layout(lay, 64, 64, 64)
    _, d = gpu_dot(matmul, (a, b), dt.Schedule(tile={"i": 32, "j": 32, "k": 32}))
    assert (d.n, d.precision) == (right, prec)


@pytest.mark.parametrize("p", ["ieee", "tf32", "tf32x3", "bf16x6"])
def test_explicit_precision_is_kept(p):
    a, b = layout("TN", 64, 64, 64)
    _, d = gpu_dot(matmul, (a, b), dt.Schedule(tile={"i": 32, "j": 32, "k": 32}, precision=p))
    assert d.precision == p
    a, b = layout("NN", 64, 64, 64)
    _, d = gpu_dot(matmul, (a, b), dt.Schedule(tile={"i": 32, "j": 32, "k": 32}, precision=p))
    assert d.precision == p and d.n == ("j" if p == "ieee" else "i")


def test_16bit_dots_keep_their_order_and_take_no_precision():
    a, b = layout("NN", 64, 64, 64, torch.float16)
    _, d = gpu_dot(matmul, (a, b), dt.Schedule(tile={"i": 32, "j": 32, "k": 32}))
    assert (d.n, d.precision) == ("j", None)


def test_heuristic_gives_fp32_tensor_core_tiles_for_the_linear_layout():
    X, W = torch.randn(2048, 64), torch.randn(2048, 64)
    full, d = gpu_dot(linear, (X, W), None)
    assert (full.tile["i"], full.tile["j"], full.tile["k"], full.num_stages) == (128, 128, 32, 4)
    assert d.precision == "tf32x3"
    # ieee keeps the FMA tiles
    full, d = gpu_dot(linear, (X, W), dt.Schedule(precision="ieee"))
    assert (full.tile["i"], full.tile["j"], d.precision) == (64, 64, "ieee")


@pytest.mark.parametrize("lay", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("shape", [(37, 50, 29), (1, 33, 17), (16, 16, 16), (67, 1, 19)])
def test_every_layout_matches_float64(lay, shape):
    a, b = layout(lay, *shape)
    k = dt.compile(matmul, dt.Schedule(tile={"i": 16, "j": 16, "k": 16}))
    out = torch.full((shape[0], shape[2]), float("nan"))
    k(a, b, out=out)
    ref = a.double() @ b.double()
    assert torch.allclose(out.double(), ref, rtol=1e-5, atol=1e-5)


def test_linear_with_offset_and_expanded_inputs():
    big = torch.randn(40, 60)
    X = big[3:34, 5:48]                         # offset, non-contiguous rows
    W = torch.randn(1, 43).expand(23, 43)       # expanded: stride 0 rows
    k = dt.compile(linear, dt.Schedule(tile={"i": 16, "j": 16, "k": 16}))
    got = k(X, W)
    assert torch.allclose(got.double(), X.double() @ W.double().T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m, k, n", [(37, 3001, 1), (5, 2048, 3), (1, 977, 1), (130, 64, 7)])
def test_matrix_vector_streams_rows_and_matches_float64(m, k, n):
    """The GPU heuristic's matrix-vector schedule (a few rows per program, the reduced axis
    looped, split when programs are few) is not a padded dot; run here on the interpreter."""
    A, x = torch.randn(m, k), torch.randn(k, n)
    b = matmul.bind((A, x))
    b.device = torch.device("cuda")
    full = complete_schedule(matmul, None, b)
    assert full.tile["k"] == min(1024, 1 << (k - 1).bit_length()) and full.strategy["k"] == "loop"
    assert full.tile["i"] * full.tile["j"] <= 8
    out = torch.full((m, n), float("nan"))
    dt.compile(matmul, full)(A, x, out=out)
    assert torch.allclose(out.double(), A.double() @ x.double(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("lay", ["NN", "NT", "TN", "TT"])
def test_transposed_operands_are_read_through_tma_of_the_transposed_view(dtype, lay):
    """access="tma": an operand whose unit-stride dim is not its last is read through a
    descriptor of the view with that dim last, and permuted back in registers (odd sizes: the
    descriptor's zero fill covers the edges)."""
    a, b = layout(lay, 40, 72, 24, dtype)    # rows of 16-byte multiples (TMA), sizes not tile multiples
    k = dt.compile(matmul, dt.Schedule(tile={"i": 16, "j": 16, "k": 32}, access="tma"))
    out = torch.full((40, 24), float("nan"), dtype=dtype)
    k(a, b, out=out)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(out.double(), a.double() @ b.double(), rtol=tol, atol=tol * 8)
    src = k.source_for(a, b)
    assert ("A.permute(1, 0)" in src) == (lay[0] == "T") and ("B.permute(1, 0)" in src) == (lay[1] == "T")


@dt.algorithm
def grouped_linear_norm(X: dt.Tensor["M", "K"], W: dt.Tensor["G", "C", "K"]):
    """A Linear whose output features are viewed as (groups, channels), normalised per group."""
    i, g, c, k = dt.axes("i g c k")
    y = dt.sum(X[i, k] * W[g, c, k], over=k)
    mu = dt.mean(y, over=c)
    return ((y - mu) * dt.rsqrt(dt.mean((y - mu) * (y - mu), over=c) + 1e-5))[i, g, c]


@pytest.mark.parametrize("G, C", [(4, 16), (3, 32), (1, 20)])
def test_contraction_with_three_free_axes_gets_a_2d_dot_by_default(G, C):
    """The GPU heuristic's schedule for X[i, k] * W[g, c, k] (three free axes) keeps a 2-d dot:
    the shorter side axis is covered one per program in the stage's kernel; it runs here and
    matches float64."""
    X, W = torch.randn(37, 48), torch.randn(G, C, 48) / 7
    b = grouped_linear_norm.bind((X, W))
    b.device = torch.device("cuda")
    full = complete_schedule(grouped_linear_norm, None, b).replace(access="pointer")
    assert full.stages["sum0"].tile["g" if C >= G else "c"] == 1
    out = dt.compile(grouped_linear_norm, full)(X, W)
    ref = grouped_linear_norm.reference(X.double(), W.double())
    assert torch.allclose(out.double(), ref, rtol=1e-4, atol=1e-4)


@dt.algorithm
def linear_max_pool(X: dt.Tensor["M", "K"], W: dt.Tensor["G", "C", "K"]):
    """Max pooling over blocks of C output features of a Linear."""
    i, g, c, k = dt.axes("i g c k")
    return dt.max(dt.sum(X[i, k] * W[g, c, k], over=k), over=c)[i, g]


@pytest.mark.parametrize("G, C", [(32, 4), (20, 3), (4, 16)])
def test_pooling_over_groups_of_a_linear_runs_by_default(G, C):
    X, W = torch.randn(37, 48), torch.randn(G, C, 48) / 7
    b = linear_max_pool.bind((X, W))
    b.device = torch.device("cuda")
    full = complete_schedule(linear_max_pool, None, b).replace(access="pointer")
    out = torch.full((37, G), float("nan"))
    dt.compile(linear_max_pool, full)(X, W, out=out)
    ref = linear_max_pool.reference(X.double(), W.double())
    assert torch.allclose(out.double(), ref, rtol=1e-4, atol=1e-4)


@dt.algorithm
def linear_softmax(X: dt.Tensor["M", "K"], W: dt.Tensor["N", "K"], b: dt.Tensor["N"]):
    i, j, k = dt.axes("i j k")
    y = dt.sum(X[i, k] * W[j, k], over=k) + b[j]
    e = dt.exp(y - dt.max(y, over=j))
    return (e / dt.sum(e, over=j))[i, j]


@dt.algorithm
def linear_layer_norm(X: dt.Tensor["M", "K"], W: dt.Tensor["N", "K"]):
    i, j, k = dt.axes("i j k")
    y = dt.sum(X[i, k] * W[j, k], over=k)
    mu = dt.mean(y, over=j)
    return ((y - mu) * dt.rsqrt(dt.mean((y - mu) * (y - mu), over=j) + 1e-5))[i, j]


@dt.algorithm
def linear_logsumexp(X: dt.Tensor["M", "K"], W: dt.Tensor["N", "K"]):
    i, j, k = dt.axes("i j k")
    y = dt.sum(X[i, k] * W[j, k], over=k)
    m = dt.max(y, over=j)
    return (dt.log(dt.sum(dt.exp(y - m), over=j)) + m)[i]


@pytest.mark.parametrize("alg", [linear_softmax, linear_layer_norm, linear_logsumexp])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gemm_then_row_reductions_is_a_gemm_kernel_and_one_row_kernel(alg, dtype):
    """GPU heuristic: the GEMM materialised by a kernel of its own, then one row kernel with every
    row statistic fused (run here on the interpreter against float64, odd sizes)."""
    args = [torch.randn(37, 48, dtype=dtype), (torch.randn(53, 48) / 7).to(dtype)]
    if alg is linear_softmax:
        args.append(torch.randn(53, dtype=dtype))
    b = alg.bind(args)
    b.device = torch.device("cuda")
    full = complete_schedule(alg, None, b).replace(access="pointer")
    assert full.stages["sum0"].place == "materialize" and tuple(full.grid) == ("i",)
    assert full.strategy["j"] == "whole"
    k = dt.compile(alg, full)
    out = torch.full((37, 53) if alg is not linear_logsumexp else (37,), float("nan"), dtype=dtype)
    k(*args, out=out)
    assert len(k._last.program.kernels) == 2
    ref = alg.reference(*[a.double() for a in args])
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    assert torch.allclose(out.double(), ref, rtol=tol, atol=tol)


def test_warp_specialised_loops_keep_the_algorithms_operand_order():
    """Triton 3.6 did not compile a swapped fp32 dot under warp specialisation (H200 gpu_check):
    with warp_specialize the order stays, so auto falls back to ieee for a row-major B."""
    a, b = layout("NN", 64, 64, 64)
    _, d = gpu_dot(matmul, (a, b), dt.Schedule(tile={"i": 32, "j": 32, "k": 32}, access="tma", warp_specialize=True))
    assert (d.n, d.precision) == ("j", "ieee")
    a, b = layout("NT", 64, 64, 64)
    _, d = gpu_dot(matmul, (a, b), dt.Schedule(tile={"i": 32, "j": 32, "k": 32}, access="tma", warp_specialize=True))
    assert (d.n, d.precision) == ("j", "tf32x3")


def test_split_precision_dots_of_small_tiles_cap_registers_at_128():
    """A GPU kernel of 4 warps whose fp32 dots run at a split precision in tiles of at most 64 x 64 (the
    diffusion layer's output GEMM at tf32x3) launches with ptxas's cap of 128 registers a thread (four
    programs an SM); 8 warps, larger tiles, plain tf32, 16-bit dots and the interpreter keep no cap."""
    from dtriton.examples.diffusionnet.plans import empty_args, gpu_program
    from dtriton.library import spatial_diffusion
    _, prog = gpu_program(spatial_diffusion, empty_args(spatial_diffusion, {"V": 100_000, "K": 128, "C": 128}))
    caps = {k.name.rsplit("_", 1)[-1]: k.max_registers for k in prog.kernels}
    assert caps == {"sum0": 0, "out0": 128, "out1": 0}, caps     # sum0: 128 x 64 at 8 warps
    a, b = layout("NN", 64, 64, 64)
    for sched, cap in [(dt.Schedule(tile={"i": 64, "j": 64, "k": 32}, num_warps=4, precision="tf32x3"), 128),
                       (dt.Schedule(tile={"i": 64, "j": 64, "k": 32}, num_warps=4, precision="bf16x6"), 128),
                       (dt.Schedule(tile={"i": 64, "j": 128, "k": 32}, num_warps=4, precision="tf32x3"), 0),
                       (dt.Schedule(tile={"i": 64, "j": 64, "k": 32}, num_warps=8, precision="tf32x3"), 0),
                       (dt.Schedule(tile={"i": 64, "j": 64, "k": 32}, num_warps=4, precision="tf32"), 0)]:
        bnd = matmul.bind((a, b))
        bnd.device = torch.device("cuda")
        prog = plan_program(matmul, complete_schedule(matmul, sched, bnd), bnd, call_spec(matmul, bnd, (a, b), interpret=False))
        assert [k.max_registers for k in prog.kernels] == [cap], sched
    h = a.half()
    bnd = matmul.bind((h, h))
    bnd.device = torch.device("cuda")
    sched = dt.Schedule(tile={"i": 64, "j": 64, "k": 32}, num_warps=4)
    prog = plan_program(matmul, complete_schedule(matmul, sched, bnd), bnd, call_spec(matmul, bnd, (h, h), interpret=False))
    assert [k.max_registers for k in prog.kernels] == [0]
    k = dt.compile(matmul, dt.Schedule(tile={"i": 64, "j": 64, "k": 32}, num_warps=4, precision="tf32x3"))
    out = torch.full((64, 64), float("nan"))
    k(a, b, out=out)                                   # the interpreter: no cap, the same result
    assert "registers: at most" not in k.source_for(a, b)
    assert torch.allclose(out.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
