"""MLP chains (issue 14): ``act(X @ W.T) @ W2.T`` and SwiGLU's ``(silu(X @ W.T) * (X @ W3.T)) @ W2.T``.

- the epilogue stored with the first GEMMs (``plan/epilogues.py``) may combine two contractions one kernel
  stores: SwiGLU's gate and up GEMMs are stored once as their product (one buffer, in the chain's 16-bit
  dtype), and the second GEMM reads one buffer instead of two (0.67x torch.compile on the H200 before);
- ``gemm_then_gemm``: the first GEMMs get 128 x 128 output tiles of their own on the GPU (they took the second
  GEMM's reduction tile, 64, as their column tile).

Checked on the plan (CPU, an H200 binding) and on the interpreter against float64 at odd sizes.
"""

from __future__ import annotations

import pytest
import torch

import dtriton as dt

from conftest import TOL, check, randn
from test_chains import _gpu_complete, _program, relu_mlp

T = dt.Tensor


@dt.algorithm
def swiglu_mlp(X: T["M", "K"], W: T["N", "K"], W3: T["N", "K"], W2: T["P", "N"]):
    i, j, k, p = dt.axes("i j k p")
    a = dt.sum(X[i, k] * W[j, k], over=k)
    h = a * dt.sigmoid(a) * dt.sum(X[i, k] * W3[j, k], over=k)
    return dt.sum(h * W2[p, j], over=j)[i, p]


@dt.algorithm
def gate_and_up_apart(X: T["M", "K"], W: T["N", "K"], W3: T["N", "K"], W2: T["P", "N"]):
    """The up GEMM is also read on its own (added to the output's columns): its buffer must stay."""
    i, j, k, p = dt.axes("i j k p")
    a = dt.sum(X[i, k] * W[j, k], over=k)
    u = dt.sum(X[i, k] * W3[j, k], over=k)
    return (dt.sum(a * dt.sigmoid(a) * u * W2[p, j], over=j) + dt.sum(u, over=j))[i, p]


FIRST = dt.StageSchedule(place="materialize", grid=("i", "j"), tile={"i": 16, "j": 16, "k": 16})
SMALL = dt.Schedule(grid=("i", "p"), tile={"i": 16, "p": 16, "j": 16, "k": 16}, stages={"sum0": FIRST, "sum1": FIRST})


def _swiglu_args(M, K, N, P, dtype, gen):
    return (randn(M, K, dtype=dtype, gen=gen), randn(N, K, dtype=dtype, gen=gen, scale=K ** -0.5),
            randn(N, K, dtype=dtype, gen=gen, scale=K ** -0.5), randn(P, N, dtype=dtype, gen=gen, scale=N ** -0.5))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("M,K,N,P", [(37, 48, 61, 29), (1, 16, 17, 3)])
def test_swiglu_gate_times_up_is_stored_once(dtype, M, K, N, P, gen):
    args = _swiglu_args(M, K, N, P, dtype, gen)
    prog = _program(swiglu_mlp, SMALL, args)
    assert len(prog.kernels) == 2 and list(prog.buffers) == ["buf_sum0"]
    b = prog.buffers["buf_sum0"]
    assert b.dtype == (str(dtype)[6:] if dtype != torch.float32 else "float32") and "sigmoid" in b.reason
    (st,) = prog.kernels[0].stores
    assert st.target == "buf_sum0"
    check(swiglu_mlp, args, SMALL, tol=4 * TOL[dtype] if dtype != torch.float32 else 1e-4)


def test_a_sibling_read_on_its_own_keeps_its_buffer(gen):
    args = _swiglu_args(21, 32, 19, 17, torch.float32, gen)
    s = SMALL.replace(stages={**SMALL.stages, "sum3": dt.StageSchedule(place="fuse")})
    prog = _program(gate_and_up_apart, s, args)
    assert sorted(prog.buffers) == ["buf_sum0", "buf_sum1"]
    check(gate_and_up_apart, args, s, tol=1e-4)


@dt.algorithm
def shared_projections(basis: T["V", "K"], g: T["V", "C"], x: T["V", "C"], mass: T["V"], evals: T["K"],
                       times: T["C"], g1: T["K", "C"]):
    """Two contractions over v that one kernel stores, (k, c) both (the diffusion layer's backward with
    both outputs' gradients, its sums oriented alike): ``a`` is read as ``g1 + a`` by both outputs, the
    second also multiplies it with ``s``."""
    v, k, c = dt.axes("v k c")
    a = dt.sum(basis[v, k] * g[v, c], over=v)
    s = dt.sum(basis[v, k] * x[v, c] * mass[v], over=v)
    e = dt.exp(-evals[k] * times[c])
    return dt.sum(basis[v, k] * (g1[k, c] + a) * e, over=k)[v, c], dt.sum((g1[k, c] + a) * s * e * evals[k], over=k)[c]


@pytest.mark.parametrize("V,K,C", [(37, 19, 23), (6, 4, 3)])
def test_a_sibling_that_stores_its_own_epilogue_keeps_its_buffer(V, K, C, gen):
    """``a``'s buffer takes its epilogue ``g1 + a`` first; ``s``'s epilogue then may not take ``a`` as a
    sibling (the writer's ``a`` is the bare sum, the readers' the stored ``g1 + a``): before, ``s``'s buffer
    stored ``a * s * ...`` without ``g1`` and ``a``'s buffer was dropped though the first output reads it
    (KeyError 'buf_sum0' at the launch)."""
    args = (randn(V, K, gen=gen), randn(V, C, gen=gen), randn(V, C, gen=gen), torch.rand(V, generator=gen) + 0.5,
            torch.rand(K, generator=gen), torch.rand(C, generator=gen), randn(K, C, gen=gen))
    prog = _program(shared_projections, None, args)
    read = {n for k in prog.kernels for bs in k.materialized.values() for n in [bs.name]}
    assert read <= set(prog.buffers), (read, list(prog.buffers))
    check(shared_projections, args, tol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_first_gemms_get_their_own_output_tiles(dtype):
    e = dict(dtype=dtype)
    big = (torch.empty(2048, 4096, **e), torch.empty(8192, 4096, **e), torch.empty(8192, 4096, **e),
           torch.empty(4096, 8192, **e))
    s = _gpu_complete(swiglu_mlp, None, big)
    # fp16: each first GEMM a wide persistent kernel of its own (128 x 256; schedule.chain_rules: SwiGLU's two
    # GEMMs apart, H200 s7: swiglu_mlp 648.3 -> 581.2 us); fp32: 64 x 64, one kernel for both
    half = dtype == torch.float16
    want_i, want = (128, 256) if half else (64, 64)
    for name in ("sum0", "sum1"):
        st = s.stage(name)
        assert st.place == "materialize" and st.grid == ("i", "j") and st.group == {"i": 8}
        assert (st.tile["i"], st.tile["j"]) == (want_i, want) and (st.persistent or 0) == (1 if half else 0)
    if not half:
        assert s.stage("sum0") == s.stage("sum1")    # one kernel for both (the multi-output partition)
    # relu MLP: its first GEMM too; a layout given: no rule
    r = _gpu_complete(relu_mlp, None, big[:2] + big[3:])
    assert r.stage("sum0").tile["j"] == want
    assert _gpu_complete(swiglu_mlp, dt.Schedule(tile={"i": 64}), big).stage("sum0").place == "auto"
    # an output that adds to the second GEMM (X + relu(X @ W.T) @ W2.T): the first GEMM is found inside it
    res = _gpu_complete(residual_mlp, None, (big[0], big[1], torch.empty(4096, 8192, **e)))
    assert res.stage("sum0").place == "materialize" and res.stage("sum0").tile["j"] == want


@dt.algorithm
def residual_mlp(X: T["M", "K"], W: T["N", "K"], W2: T["K", "N"]):
    i, j, k, p = dt.axes("i j k p")
    h = dt.maximum(dt.sum(X[i, k] * W[j, k], over=k), 0.0)
    return (X[i, p] + dt.sum(h * W2[p, j], over=j))[i, p]


# ----------------------------------------------------------------------------------------------
# softmax between two GEMMs: the row kernel stores the softmax over the GEMM's buffer (plan/epilogues.store_operands)
# ----------------------------------------------------------------------------------------------
def _softmax_linear_schedule(rows_apart: bool) -> dt.Schedule:
    row = dt.StageSchedule(place="materialize", grid=("i",), tile={"i": 2}, strategy={"j": "whole"})
    stages = {"sum0": FIRST, "max0": row, "sum1": row if rows_apart else dt.StageSchedule(place="fuse")}
    return dt.Schedule(grid=("i", "p"), tile={"i": 16, "p": 16, "j": 16, "k": 16}, stages=stages)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("M,K,N,P", [(37, 48, 61, 29), (2, 16, 16, 17)])
def test_softmax_is_stored_once_for_the_second_gemm(dtype, M, K, N, P, gen):
    from test_chains import softmax_linear
    X, W, b = randn(M, K, dtype=dtype, gen=gen), randn(N, K, dtype=dtype, gen=gen, scale=K ** -0.5), \
        randn(N, dtype=dtype, gen=gen, scale=0.1)
    args = (X, W, b, randn(P, N, dtype=dtype, gen=gen, scale=N ** -0.5))
    s = _softmax_linear_schedule(True)
    prog = _program(softmax_linear, s, args)
    names = [k.name for k in prog.kernels]
    rows = prog.kernels[names.index("softmax_linear_sum1")]
    assert [st.target for st in rows.stores] == ["buf_sum1", "buf_sum0"]     # the softmax written back in place
    assert "rewritten in place" in prog.buffers["buf_sum0"].reason
    out = prog.kernels[-1]
    assert not any(getattr(x, "op", None) in ("exp", "exp2") for st in out.stores for x in _walk(st.expr))
    check(softmax_linear, args, s, tol=4 * TOL[dtype] if dtype != torch.float32 else 1e-4)


def test_a_sum_fused_in_the_second_gemm_reads_the_stored_exponentials(gen):
    """The sum fused in the second GEMM's kernel (recomputed per tile): the max's row kernel stores exp(y - max)
    over the buffer, and the second GEMM's kernel sums and multiplies what it reads."""
    from test_chains import softmax_linear
    args = (randn(19, 32, gen=gen), randn(23, 32, gen=gen), randn(23, gen=gen), randn(17, 23, gen=gen))
    s = _softmax_linear_schedule(False)
    prog = _program(softmax_linear, s, args)
    assert [st.target for st in prog.kernels[1].stores] == ["buf_max0", "buf_sum0"]
    assert not any(getattr(x, "op", None) in ("exp", "exp2") for st in prog.kernels[-1].stores for x in _walk(st.expr))
    check(softmax_linear, args, s, tol=1e-4)


def _walk(e):
    from dtriton.ir import Reduce, walk
    return walk([e], stop=lambda x: isinstance(x, Reduce) and x is not e)
