"""Fused GEMM chains (issue 14): the plan decisions that make 16-bit chains cheap, each checked on the plan
(CPU, no GPU) and for correctness on the interpreter against float64 (odd sizes, NaN-poisoned outputs).

- buffer dtypes (``plan/buffers.py``): a materialised GEMM of a 16-bit chain is stored in the chain's dtype,
  statistics, split reductions and fp32/mixed calls keep fp32 buffers.
- partial schedules: the heuristic completes a schedule around the knobs it gives (launch options and
  grouped order by the rules, not the registry's defaults).
- GEMM + row statistics: cross entropy's gathered target joins the row kernel (``gemm_then_rows``); row
  statistics between two GEMMs get row kernels of their own (``rows_between_gemms``).
- grouped weights (max pooling, group norm over output columns): the GEMM's own kernel runs in grouped order.
- column statistics of a GEMM (batch norm of a Linear): kernels of 32 columns per program (``gemm_then_columns``).
- epilogues (``plan/epilogues.py``): a materialised GEMM's buffer holds the elementwise expression every reader
  applies to it (a second GEMM's activation is computed once, not once per output tile).
- fp32 TN (``A.T @ B``, both operands MN-major): one operand is copied K-major before the call
  (``plan/staging.py``), so the tensor-core fp32 path applies.
"""

from __future__ import annotations

import re

import pytest
import torch

import dtriton as dt
from dtriton.library import matmul
from dtriton.plan import call_spec, plan_program
from dtriton.schedule.heuristics import complete_schedule

from conftest import TOL, check, randn, rel_err

T = dt.Tensor


@dt.algorithm
def linear_softmax(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    y = dt.sum(X[i, k] * W[j, k], over=k) + b[j]
    e = dt.exp(y - dt.max(y, over=j))
    return (e / dt.sum(e, over=j))[i, j]


@dt.algorithm
def linear_layer_norm(X: T["M", "K"], W: T["N", "K"]):
    i, j, k = dt.axes("i j k")
    y = dt.sum(X[i, k] * W[j, k], over=k)
    yc = y - dt.mean(y, over=j)
    return (yc * dt.rsqrt(dt.mean(yc * yc, over=j) + 1e-5))[i, j]


@dt.algorithm
def linear_cross_entropy(X: T["M", "K"], W: T["N", "K"], b: T["N"], labels: T["M"]):
    i, j, k = dt.axes("i j k")
    y = dt.sum(X[i, k] * W[j, k], over=k) + b[j]
    m = dt.max(y, over=j)
    target = dt.sum(X[i, k] * W[labels[i], k], over=k) + b[labels[i]]
    return (m + dt.log(dt.sum(dt.exp(y - m), over=j)) - target)[i]


@dt.algorithm
def softmax_linear(X: T["M", "K"], W: T["N", "K"], b: T["N"], W2: T["P", "N"]):
    i, j, k, p = dt.axes("i j k p")
    y = dt.sum(X[i, k] * W[j, k], over=k) + b[j]
    e = dt.exp(y - dt.max(y, over=j))
    return dt.sum(e / dt.sum(e, over=j) * W2[p, j], over=j)[i, p]


@dt.algorithm
def linear_max_pool(X: T["M", "K"], W_g: T["G", "C", "K"], b_g: T["G", "C"]):
    i, g, c, k = dt.axes("i g c k")
    return dt.max(dt.sum(X[i, k] * W_g[g, c, k], over=k) + b_g[g, c], over=c)[i, g]


@dt.algorithm
def linear_batch_norm(X: T["M", "K"], W: T["N", "K"]):
    i, j, k = dt.axes("i j k")
    y = dt.sum(X[i, k] * W[j, k], over=k)
    yc = y - dt.mean(y, over=i)
    return (yc * dt.rsqrt(dt.mean(yc * yc, over=i) + 1e-5))[i, j]


@dt.algorithm
def linear_max_pool_sum(X: T["M", "K"], W_g: T["G", "C", "K"], b_g: T["G", "C"]):
    i, g, c, k = dt.axes("i g c k")
    pooled = dt.max(dt.sum(X[i, k] * W_g[g, c, k], over=k) + b_g[g, c], over=c)
    return (dt.sum(pooled, over=g) * 0.5)[i]


@dt.algorithm
def relu_mlp(X: T["M", "K"], W: T["N", "K"], W2: T["P", "N"]):
    i, j, k, p = dt.axes("i j k p")
    h = dt.maximum(dt.sum(X[i, k] * W[j, k], over=k), 0.0)
    return dt.sum(h * W2[p, j], over=j)[i, p]


#: the GEMM materialised (its own kernel), then one row kernel with the statistics
GEMM_THEN_ROWS = dt.Schedule(grid=("i",), tile={"i": 2, "j": 64}, strategy={"j": "whole"},
                             stages={"sum0": dt.StageSchedule(place="materialize", grid=("i", "j"),
                                                              tile={"i": 16, "j": 16, "k": 16})})
#: the statistics materialised too (row kernels of their own)
STATS_APART = dt.Schedule(grid=("i",), tile={"i": 2, "j": 64}, strategy={"j": "whole"},
                          stages={"sum0": dt.StageSchedule(place="materialize", grid=("i", "j"),
                                                           tile={"i": 16, "j": 16, "k": 16}),
                                  "mean0": dt.StageSchedule(place="materialize"),
                                  "mean1": dt.StageSchedule(place="materialize")})


def _args(M, K, N, dtype, gen, P=0):
    X = randn(M, K, dtype=dtype, gen=gen)
    W = randn(N, K, dtype=dtype, gen=gen, scale=K ** -0.5)
    if P:
        return X, W, randn(P, N, dtype=dtype, gen=gen, scale=N ** -0.5)
    return X, W, randn(N, dtype=dtype, gen=gen, scale=0.1)


def _program(alg, sched, args):
    """The plan of a call (CPU binding: the interpreter's decisions)."""
    b = alg.bind(args)
    full = dt.compile(alg, sched).complete(b)
    return plan_program(alg, full, b, call_spec(alg, b, args, True, None, frozenset()))


def _buffer_dtypes(alg, sched, args) -> dict[str, str]:
    return {n: bs.dtype for n, bs in _program(alg, sched, args).buffers.items()}


# ----------------------------------------------------------------------------------------------
# buffer dtypes
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gemm_buffer_of_16bit_chain_is_16bit(dtype, gen):
    args = _args(37, 48, 64, dtype, gen)
    prog = _program(linear_softmax, GEMM_THEN_ROWS, args)
    b = prog.buffers["buf_sum0"]
    assert b.dtype == str(dtype)[6:] and "contraction" in b.reason
    src = dt.compile(linear_softmax, GEMM_THEN_ROWS).source_for(*args)
    assert f"buf_sum0 in {str(dtype)[6:]}: a contraction" in src
    # the reader widens the 16-bit buffer to the compute dtype before the statistics
    assert re.search(r"buf_1 = tl.load\(buf_sum0_ptr [^\n]*\)\.to\(tl.float32\)", src)


def test_statistics_split_and_fp32_calls_keep_fp32_buffers(gen):
    args16 = _args(37, 48, 64, torch.float16, gen)
    got = _buffer_dtypes(linear_layer_norm, STATS_APART, args16[:2])
    assert got == {"buf_sum0": "float16", "buf_mean0": "float32", "buf_mean1": "float32"}, got
    # fp32 call, and a mixed call (fp16 X, fp32 W: the outputs are fp32): no narrowing
    args32 = _args(37, 48, 64, torch.float32, gen)
    assert _buffer_dtypes(linear_softmax, GEMM_THEN_ROWS, args32) == {"buf_sum0": "float32"}
    mixed = (args16[0], args32[1], args32[2])
    assert _buffer_dtypes(linear_softmax, GEMM_THEN_ROWS, mixed) == {"buf_sum0": "float32"}
    # a split GEMM adds fp32 partials (atomics or per-split buffers): fp32
    split = GEMM_THEN_ROWS.replace(split={"k": 3})
    assert _buffer_dtypes(linear_softmax, split, args16) == {"buf_sum0": "float32"}
    split = split.replace(split_mode="partials")
    assert _buffer_dtypes(linear_softmax, split, args16) == {"buf_sum0": "float32"}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,K,N", [(1, 16, 64), (37, 48, 61), (19, 97, 64)])
def test_narrowed_gemm_buffer_is_accurate(dtype, M, K, N, gen):
    """Against float64 at the 16-bit tolerance, and no worse than 3x torch's own 16-bit chain (which rounds
    the Linear's output too)."""
    args = _args(M, K, N, dtype, gen)
    sched = GEMM_THEN_ROWS.replace(tile={"i": 2, "j": 64 if N <= 64 else 128})
    _, (got,) = check(linear_softmax, args, sched)
    X, W, b = (a.double() for a in args)
    ref = torch.softmax(X @ W.T + b, -1)
    eager = torch.softmax((args[0] @ args[1].T + args[2]).float(), -1).to(dtype) if dtype == torch.float16 else \
        torch.softmax(torch.nn.functional.linear(args[0].float(), args[1].float()).to(dtype).float()
                      + args[2].float(), -1).to(dtype)
    assert rel_err(got, ref) <= max(3 * rel_err(eager, ref), TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_narrowed_buffer_feeds_a_second_gemm(dtype, gen):
    """relu(X @ W.T) @ W2.T with the first GEMM materialised: the 16-bit buffer is the second dot's operand."""
    args = _args(33, 32, 48, dtype, gen, P=40)
    sched = dt.Schedule(grid=("i", "p"), tile={"i": 16, "p": 16, "j": 16},
                        stages={"sum0": dt.StageSchedule(place="materialize", grid=("i", "j"),
                                                         tile={"i": 16, "j": 16, "k": 16})})
    assert _buffer_dtypes(relu_mlp, sched, args) == {"buf_sum0": str(dtype)[6:]}
    check(relu_mlp, args, sched, tol=2 * TOL[dtype])


# ----------------------------------------------------------------------------------------------
# partial schedules keep the heuristic's launch rules
# ----------------------------------------------------------------------------------------------
def _gpu_complete(alg, sched, args) -> dt.Schedule:
    """The complete schedule an H200 would run (derived on the CPU from uninitialised tensors)."""
    b = alg.bind(args)
    b.device = torch.device("cuda")
    return complete_schedule(alg, sched, b)


def test_precision_alone_keeps_the_rules_tiles_warps_stages_and_order():
    args = (torch.empty(4096, 4096), torch.empty(4096, 4096))
    full = _gpu_complete(matmul, None, args)
    tf32 = _gpu_complete(matmul, dt.Schedule(precision="tf32"), args)
    # the registry's defaults were 4 warps / 2 stages, no grouped order (H200: tf32 at 0.43x cuBLAS)
    assert (tf32.tile, tf32.grid, tf32.group, tf32.num_stages) == (full.tile, full.grid, full.group, full.num_stages)
    assert tf32.num_stages == 4 and tf32.group == {"i": 8} and tf32.num_warps == 4   # tf32's own warp rule
    # a launch option the user gives is kept; the others still follow the rules
    w = _gpu_complete(matmul, dt.Schedule(precision="tf32", num_warps=8), args)
    assert w.num_warps == 8 and w.num_stages == 4


def test_given_tiles_get_the_rules_launch_options():
    args = (torch.empty(4096, 4096, dtype=torch.float16), torch.empty(4096, 4096, dtype=torch.float16))
    s = _gpu_complete(matmul, dt.Schedule(tile={"i": 64, "j": 64, "k": 32}), args)
    assert dict(s.tile) == {"i": 64, "j": 64, "k": 32} and s.num_stages == 4 and s.num_warps == 4
    # a layout given: its grid order stays as written (no grouped order added)
    assert not s.group


def test_launch_options_alone_keep_gemm_then_rows():
    """softmax(X @ W.T + b) with only num_warps given: still the GEMM kernel plus one row kernel, both at the
    user's warps."""
    args = (torch.empty(4096, 4096, dtype=torch.float16), torch.empty(4096, 4096, dtype=torch.float16),
            torch.empty(4096, dtype=torch.float16))
    full = _gpu_complete(linear_softmax, None, args)
    s = _gpu_complete(linear_softmax, dt.Schedule(num_warps=4), args)
    assert s.stage("sum0").place == "materialize" and s.grid == ("i",) and s.strategy["j"] == "whole"
    assert s.num_warps == 4 and s.stage("sum0").num_warps == 4
    assert s.stage("sum0").num_stages == full.stage("sum0").num_stages > 2 and s.num_stages == full.num_stages


# ----------------------------------------------------------------------------------------------
# GEMM + row statistics
# ----------------------------------------------------------------------------------------------
def _launches(alg, sched, args) -> int:
    return len(_program(alg, sched, args).kernels)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_cross_entropy_target_joins_the_row_kernel(dtype, gen):
    M, K, N = 4096, 4096, 8192
    big = (torch.empty(M, K, dtype=dtype), torch.empty(N, K, dtype=dtype), torch.empty(N, dtype=dtype),
           torch.zeros(M, dtype=torch.int64))
    s = _gpu_complete(linear_cross_entropy, None, big)
    # the GEMM materialised on 128-row tiles, every statistic and the target fused in one row kernel
    assert s.stage("sum0").place == "materialize" and s.stage("sum0").tile["i"] == 128
    assert s.grid == ("i",) and s.strategy["j"] == "whole" and s.tile["i"] == 1
    assert all(s.stage(n).place == "fuse" for n in ("max0", "sum1", "sum2")) and s.tile["k"] == 1024
    # the same plan on the interpreter, odd sizes (tiles shrunk to the shape), against float64
    X, W, b = _args(37, 48, 67, dtype, gen)
    labels = torch.randint(0, 67, (37,), generator=gen)
    small = s.replace(access="pointer", tile={"i": 1, "j": 128, "k": 32},
                      stages={**s.stages, "sum0": s.stage("sum0").replace(tile={"i": 16, "j": 16, "k": 16})})
    assert _launches(linear_cross_entropy, small, (X, W, b, labels)) == 2
    check(linear_cross_entropy, (X, W, b, labels), small)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_row_statistics_between_two_gemms_get_row_kernels(dtype, gen):
    big = (torch.empty(4096, 4096, dtype=dtype), torch.empty(4096, 4096, dtype=dtype), torch.empty(4096, dtype=dtype),
           torch.empty(4096, 4096, dtype=dtype))
    s = _gpu_complete(softmax_linear, None, big)
    g = s.stage("sum0")
    assert g.place == "materialize" and g.grid == ("i", "j") and g.tile["j"] >= 64 and g.group == {"i": 8}
    for st in ("max0", "sum1"):   # one row kernel each, the whole row per program
        assert s.stage(st).place == "materialize" and s.stage(st).grid == ("i",) and s.stage(st).strategy["j"] == "whole"
    assert s.grid == ("i", "p")   # the second GEMM keeps its output tiles
    # no rule without a second GEMM, or with a layout given
    assert _gpu_complete(softmax_linear, dt.Schedule(tile={"i": 64}), big).stage("max0").place == "auto"
    X, W, b = _args(37, 48, 61, dtype, gen)
    W2 = randn(29, 61, dtype=dtype, gen=gen, scale=61 ** -0.5)
    small = s.replace(access="pointer", tile={"i": 16, "j": 16, "k": 16, "p": 16},
                      stages={**s.stages, "sum0": g.replace(tile={"i": 16, "j": 16, "k": 16}),
                              "max0": s.stage("max0").replace(tile={"i": 2}),
                              "sum1": s.stage("sum1").replace(tile={"i": 2})})
    assert _launches(softmax_linear, small, (X, W, b, W2)) == 4
    check(softmax_linear, (X, W, b, W2), small, tol=2 * TOL[dtype] if dtype != torch.float32 else 1e-4)


# ----------------------------------------------------------------------------------------------
# grouped weights
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("C", [4, 16])
def test_grouped_weight_gemm_runs_in_grouped_order(dtype, C, gen):
    """max over blocks of C output columns of X @ W.T + b: the kernel computing the GEMM (fused into the pooling,
    tests/test_chains_pool.py) runs over (rows, groups) tiles grouped against the rows (it streamed the whole
    weight per row tile once)."""
    N = 4096 if C == 4 else 8192
    big = (torch.empty(4096, 4096, dtype=dtype), torch.empty(N // C, C, 4096, dtype=dtype),
           torch.empty(N // C, C, dtype=dtype))
    s = _gpu_complete(linear_max_pool, None, big)
    assert s.grid == ("i", "g") and s.group == {"i": 8} and s.stage("sum0").place == "fuse"
    # the GEMM materialised instead (a kernel of its own, c on its grid) still computes the same values
    G, C = 5, 4
    X = randn(37, 48, dtype=dtype, gen=gen)
    W = randn(G, C, 48, dtype=dtype, gen=gen, scale=48 ** -0.5)
    b = randn(G, C, dtype=dtype, gen=gen, scale=0.1)
    small = s.replace(access="pointer", tile={**s.tile, "i": 16, "g": 16, "k": 16},
                      stages={"sum0": dt.StageSchedule(place="materialize", grid=("c", "i", "g"), group={"i": 8},
                                                       tile={"c": 1, "i": 16, "g": 16, "k": 16})})
    assert _launches(linear_max_pool, small, (X, W, b)) == 2
    check(linear_max_pool, (X, W, b), small)


# ----------------------------------------------------------------------------------------------
# fp32 TN: a K-major copy of one operand
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def matmul_tn(A: T["K", "M"], B: T["K", "N"]):
    i, j, k = dt.axes("i j k")
    return dt.sum(A[k, i] * B[k, j], over=k)[i, j]


def test_tn_fp32_copies_the_smaller_operand_k_major():
    from dtriton.ir import tensor_core_sides
    from dtriton.plan.staging import kmajor_copies, stage_inputs
    e = torch.empty
    tn = (e(4096, 4096), e(4096, 2048))
    b = matmul_tn.bind(tn)
    assert kmajor_copies(matmul_tn, b, "auto", gpu=True) == {"B": 0}     # B is the smaller one
    assert kmajor_copies(matmul_tn, b, "tf32", gpu=True) == {"B": 0}
    # not with FMA asked for, on the interpreter, in 16 bits, for small products, or where a side is K-major
    assert kmajor_copies(matmul_tn, b, "ieee", gpu=True) == {}
    assert kmajor_copies(matmul_tn, b, "auto", gpu=False) == {}
    assert kmajor_copies(matmul_tn, matmul_tn.bind((e(4096, 4096).half(), e(4096, 4096).half())), "auto", True) == {}
    assert kmajor_copies(matmul_tn, matmul_tn.bind((e(256, 256), e(256, 256))), "auto", True) == {}
    assert kmajor_copies(matmul, matmul.bind((e(4096, 4096), e(4096, 4096))), "auto", True) == {}
    staged = stage_inputs(matmul_tn, tn, {"B": 0})
    assert staged[0] is tn[0] and staged[1].shape == tn[1].shape and staged[1].stride() == (1, 4096)
    r = matmul_tn.stages["sum0"].node
    assert not tensor_core_sides(r, b.unit_dims) and tensor_core_sides(r, matmul_tn.bind(staged).unit_dims)


def test_staged_call_runs_and_is_correct(monkeypatch, gen):
    """The runtime copies the operand before it binds the call (forced here on the interpreter)."""
    import dtriton.plan.staging as staging
    import dtriton.runtime.kernel as rk
    real = staging.kmajor_copies
    seen = []

    def forced(alg, b, precision, gpu):
        got = real(alg, b, precision, True)
        seen.append(got)
        return got
    monkeypatch.setattr(staging, "MIN_STAGED_WORK", 1)
    monkeypatch.setattr(rk, "kmajor_copies", forced)
    A, B = randn(37, 29, gen=gen), randn(37, 61, gen=gen)
    check(matmul_tn, (A, B), dt.Schedule(tile={"i": 16, "j": 16, "k": 16}))
    assert seen and seen[-1] == {"A": 0}


# ----------------------------------------------------------------------------------------------
# column statistics
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_column_statistics_of_a_gemm_get_narrow_column_kernels(dtype, gen):
    big = (torch.empty(4096, 4096, dtype=dtype), torch.empty(4096, 4096, dtype=dtype))
    s = _gpu_complete(linear_batch_norm, None, big)
    for st in ("mean0", "mean1"):   # the GEMM's 256-column tiles before: 16 programs
        assert s.stage(st).grid == ("j",) and s.stage(st).tile == {"i": 64, "j": 32}
        # rows looped: the variance is one Welford pass beside the mean, one kernel for both statistics
        assert s.stage(st).strategy == {"i": "loop"}
    assert _launches(linear_batch_norm, s.replace(access="pointer"), big) == 3
    assert s.stage("sum0").tile == {} and s.tile["j"] >= 128   # the GEMM keeps its tiles
    # few columns: the rows are split across programs (per-split partials)
    narrow = _gpu_complete(linear_batch_norm, None, (torch.empty(4096, 4096, dtype=dtype),
                                                     torch.empty(512, 4096, dtype=dtype)))
    assert narrow.split.get("i", 1) > 1
    X, W = randn(67, 48, dtype=dtype, gen=gen), randn(40, 48, dtype=dtype, gen=gen, scale=48 ** -0.5)
    small = narrow.replace(access="pointer", tile={"i": 16, "j": 16, "k": 16}, split={"i": 2},
                           stages={st: narrow.stage(st).replace(tile={"i": 8, "j": 8}) for st in ("mean0", "mean1")})
    check(linear_batch_norm, (X, W), small)


# ----------------------------------------------------------------------------------------------
# a materialised GEMM stores its epilogue
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def silu_mlp(X: T["M", "K"], W: T["N", "K"], b: T["N"], W2: T["P", "N"]):
    i, j, k, p = dt.axes("i j k p")
    y = dt.sum(X[i, k] * W[j, k], over=k) + b[j]
    return dt.sum(y * dt.sigmoid(y) * W2[p, j], over=j)[i, p]


MLP_SCHED = dt.Schedule(grid=("i", "p"), tile={"i": 16, "p": 16, "j": 16},
                        stages={"sum0": dt.StageSchedule(place="materialize", grid=("i", "j"),
                                                         tile={"i": 16, "j": 16, "k": 16})})


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_second_gemm_reads_the_stored_activation(dtype, gen):
    """silu(X @ W.T + b) @ W2.T: y is used twice inside the activation; the whole activation is stored once
    (the second GEMM's kernel reads it instead of recomputing sigmoid per output tile)."""
    X, W, b = _args(37, 48, 61, dtype, gen)
    W2 = randn(29, 61, dtype=dtype, gen=gen, scale=61 ** -0.5)
    prog = _program(silu_mlp, MLP_SCHED, (X, W, b, W2))
    buf = prog.buffers["buf_sum0"]
    assert "holds" in buf.reason and "sigmoid" in buf.reason and buf.dtype == str(dtype)[6:]
    src = dt.compile(silu_mlp, MLP_SCHED).source_for(X, W, b, W2)
    out_kernel = src[src.index("def silu_mlp_out"):]
    assert "tl.exp" not in out_kernel and "tl.sigmoid" not in out_kernel and "b_ptr" not in out_kernel
    check(silu_mlp, (X, W, b, W2), MLP_SCHED, tol=2 * TOL[dtype] if dtype != torch.float32 else None)


def test_epilogue_stops_at_statistics_and_materialised_readers(gen):
    args = _args(37, 48, 64, torch.float16, gen)
    W2 = randn(29, 64, dtype=torch.float16, gen=gen, scale=0.125)
    # softmax between two GEMMs: only y = sum0 + b moves (exp(y - max) reads a statistic)
    sched = dt.Schedule(grid=("i", "p"), tile={"i": 16, "p": 16, "j": 16},
                        stages={"sum0": dt.StageSchedule(place="materialize", grid=("i", "j"),
                                                         tile={"i": 16, "j": 16, "k": 16})})
    reason = _program(softmax_linear, sched, (*args, W2)).buffers["buf_sum0"].reason
    assert "holds" in reason and "exp" not in reason.split("holds")[1].split(", the")[0]
    check(softmax_linear, (*args, W2), sched, tol=2 * TOL[torch.float16])
    # a statistic in a kernel of its own reads the GEMM: nothing moves (it would rebuild a stage others read)
    prog = _program(linear_layer_norm, STATS_APART, args[:2])
    assert "holds" not in prog.buffers["buf_sum0"].reason
    check(linear_layer_norm, args[:2], STATS_APART)


@pytest.mark.parametrize("V,K,C", [(1, 1, 1), (37, 5, 3)])
def test_epilogue_shared_by_an_output_and_a_direct_split_reader(V, K, C, gen):
    """The diffusion layer: out1 = exp(-evals t) * (basis^T x mass) is also the factor out0's split-K sum reads
    (a kernel whose map still names the split sum after it became a direct output): the buffer holds it once,
    both readers read it (found by the random-schedule test of test_multistage)."""
    from conftest import spatial_diffusion
    args = [randn(V, K, gen=gen), randn(V, C, gen=gen), torch.rand(V, generator=gen), torch.rand(K, generator=gen),
            torch.rand(C, generator=gen)]
    s = dt.Schedule(tile={"c": 1, "k": 1, "v": 1}, grid=("v", "c"), split={"k": 2}, split_mode="atomic")
    assert "holds" in _program(spatial_diffusion, s, args).buffers["buf_sum0"].reason
    check(spatial_diffusion, args, s)


def test_pooled_chain_is_not_taken_for_an_attention_backward():
    """max over 16 pooled columns of a GEMM with two long free axes (i, g) is no attention score: the flash
    backward rule took it for one (k tiles of 1, FMA loops) before scores had to be sums."""
    big = (torch.empty(4096, 4096, dtype=torch.float16), torch.empty(512, 16, 4096, dtype=torch.float16),
           torch.empty(512, 16, dtype=torch.float16))
    s = _gpu_complete(linear_max_pool_sum, None, big)
    assert s.tile["k"] == 64 and s.stage("sum0").place == "fuse" and s.stage("max0").grid == ("i", "g")


def test_chains_stages_dry_run(tmp_path):
    """bench/chains_stages.py (the GEMM stage's pipeline depth A/B for the lead's H200 run) runs and checks."""
    from conftest import run_bench
    out = run_bench(["bench/chains_stages.py", "--dry-run", "--cases", "logsumexp"], tmp_path)
    assert "sum0 num_stages=3" in out and "WRONG" not in out
