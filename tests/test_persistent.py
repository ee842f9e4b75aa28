"""Persistent GEMM kernels whose tile loop is flattened with the contraction loop
(``tl.range(..., flatten=True)``, :mod:`dtriton.plan.persistent`) and whose TMA output tiles are
stored in pieces (``Schedule.store_pieces``), on Triton's interpreter.

Every kernel writes NaN-poisoned ``out=`` tensors and is compared with float64 references; sizes
are primes and non-multiples of the tiles (the edge tiles' TMA stores are clipped), with more
tiles than programs (4 per SM on the interpreter: each program loops over several tiles), in the
NT layout of ``nn.Linear`` (``X @ W.T``) and NN, fp16 and bf16, with fused epilogues.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import dtriton as dt
from dtriton import Tensor
from dtriton.library import linear_relu, matmul

from conftest import TOL, check


def rnd(*shape, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def source(alg, sched, args) -> str:
    """The printed module of ``alg`` under ``sched`` for these arguments (planned, not run: each test
    runs the kernel once, in ``check``)."""
    return dt.compile(alg, sched).source_for(*args)


@dt.algorithm
def linear_softmax(X: Tensor["M", "K"], W: Tensor["N", "K"]):
    """softmax over j of X @ W.T: the GEMM, then row statistics."""
    i, j, k = dt.axes("i j k")
    s = dt.sum(X[i, k] * W[j, k], over=k)
    e = dt.exp(s[i, j] - dt.max(s[i, j], over=j))
    return (e / dt.sum(e, over=j))[i, j]


SCHED = dt.Schedule(tile={"i": 16, "j": 32, "k": 16}, access="tma", persistent=1, group={"i": 2}, num_warps=4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["NT", "NN"])
@pytest.mark.parametrize("pieces", [0, 1, 2])
def test_flattened_persistent_matmul_equals_float64(dtype, layout, pieces):
    # 67 x 40 x 88: 5 x 3 = 15 tiles of 16 x 32 (edges clipped) over 4 programs; rows 16-byte aligned (TMA)
    M, K, N = 67, 40, 88
    X = rnd(M, K, dtype=dtype)
    W = rnd(N, K, dtype=dtype, seed=1) if layout == "NT" else rnd(K, N, dtype=dtype, seed=1)
    Y = W.T if layout == "NT" else W
    sched = SCHED.replace(store_pieces=pieces)
    src = source(matmul, sched, (X, Y))
    assert "flatten=True" in src and "desc_out" in src
    # two pieces only when asked (0: the plan splits last dims of 128 or more; here 32)
    assert ("tl.split(" in src) == (pieces == 2)
    assert ("out[i, j] in boxes of [16, 16]" in src) == (pieces == 2)
    check(matmul, (X, Y), sched, torch_ref=lambda a, b: a @ b, tol=TOL[dtype])


def test_auto_pieces_halve_wide_tiles():
    X, W = rnd(40, 32), rnd(256, 32, seed=1)
    sched = dt.Schedule(tile={"i": 16, "j": 128, "k": 16}, access="tma", persistent=1, num_warps=4)
    src = source(matmul, sched, (X, W.T))
    assert "flatten=True" in src and "tl.split(" in src and "out[i, j] in boxes of [16, 64]" in src
    check(matmul, (X, W.T), sched, torch_ref=lambda a, b: a @ b, tol=TOL[torch.float16])


def test_linear_relu_epilogue_in_flattened_loop():
    # bias + ReLU fused after the contraction, inside the flattened loop; 53 rows, 72 features
    X, W, b = rnd(53, 24), rnd(72, 24, seed=1), rnd(72, seed=2)
    sched = SCHED.replace(store_pieces=2)
    src = source(linear_relu, sched, (X, W, b))
    assert "flatten=True" in src and "tl.split(" in src
    check(linear_relu, (X, W, b), sched, tol=TOL[torch.float16])


def test_pointer_stores_and_odd_rows_keep_pointers():
    # 33 x 37 fp16 rows are not 16-byte aligned: pointer loads and stores, still flattened and right
    X, W = rnd(29, 37), rnd(33, 37, seed=1)
    with pytest.warns(dt.ScheduleWarning, match="store_pieces=2 has no effect"):
        src = source(matmul, SCHED.replace(store_pieces=2), (X, W.T))
    assert "flatten=True" in src and "tl.split(" not in src
    with pytest.warns(dt.ScheduleWarning, match="store_pieces=2 has no effect"):
        check(matmul, (X, W.T), SCHED.replace(store_pieces=2), torch_ref=lambda a, b: a @ b, tol=TOL[torch.float16])


def test_not_flattened_without_persistence_or_with_warp_specialisation():
    X, W = rnd(32, 32), rnd(64, 32, seed=1)
    assert "flatten=True" not in source(matmul, SCHED.replace(persistent=0), (X, W.T))
    src = source(matmul, SCHED.replace(warp_specialize=True), (X, W.T))
    assert "flatten=True" not in src and "warp_specialize=True" in src
    # a split-K slice per program: not flattened either
    src = source(matmul, SCHED.replace(split={"k": 2}), (X, W.T))
    assert "flatten=True" not in src


def test_store_pieces_is_a_checked_knob():
    with pytest.raises(dt.ScheduleError, match="store_pieces = 3 must be 0"):
        dt.Schedule(store_pieces=3)
    s = dt.Schedule(store_pieces=2, persistent=1)
    assert dt.Schedule.from_json(s.to_json()) == s


# -- the heuristic: wide 16-bit GEMMs on the GPU run persistent (schedule.dot_rules._persistent_wide) ----------
def gpu_schedule(alg, args) -> dt.Schedule:
    """The complete schedule of a CUDA call with these (meta) arguments, derived on this machine."""
    b = dataclasses.replace(alg.bind(args), device=torch.device("cuda"))
    return dt.compile(alg).complete(b)


def meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


@dt.algorithm
def linear_residual(X: Tensor["M", "K"], W: Tensor["N", "K"], R: Tensor["M", "N"]):
    """X @ W.T + R: a residual tile read in the epilogue."""
    i, j, k = dt.axes("i j k")
    return (dt.sum(X[i, k] * W[j, k], over=k) + R[i, j])[i, j]


def test_wide_16bit_gemms_default_to_persistent():
    X, W = meta(4096, 4096), meta(4096, 4096)
    nt = gpu_schedule(matmul, (X, W.T))
    assert nt.persistent == 1 and nt.num_stages == 4 and nt.tile == {"i": 128, "j": 256, "k": 64}
    assert gpu_schedule(matmul, (X, W)).persistent == 1
    assert gpu_schedule(linear_relu, (X, W, meta(4096))).persistent == 1
    # a residual tile read after the GEMM: persistent too (the flattened kernel reads it through pointers,
    # plan_epilogue_reads), at 3 stages (the tile's layout conversion takes a buffer beside the pipeline's)
    res = gpu_schedule(linear_residual, (X, W, meta(4096, 4096)))
    assert res.persistent == 1 and res.num_stages == 3 and res.tile == {"i": 128, "j": 256, "k": 64}


def test_persistent_default_left_alone():
    X, W = meta(4096, 4096), meta(4096, 4096)
    # not wide (1024 rows: 128x128 tiles and pointers), fp32, the user's own tiles, warp specialisation,
    # pointer access, a second reduction over the GEMM's output (softmax of X @ W.T)
    assert gpu_schedule(matmul, (meta(1024, 4096), W.T)).persistent == 0
    assert gpu_schedule(matmul, (meta(4096, 4096, dtype=torch.float32), meta(4096, 4096, dtype=torch.float32).T)).persistent == 0
    b = dataclasses.replace(matmul.bind((X, W.T)), device=torch.device("cuda"))
    for user in (dt.Schedule(tile={"i": 128, "j": 256}), dt.Schedule(warp_specialize=True), dt.Schedule(access="pointer")):
        assert dt.compile(matmul, user).complete(b).persistent == 0, user
    assert dt.compile(matmul, dt.Schedule(persistent=2)).complete(b).persistent == 2

    sm = gpu_schedule(linear_softmax, (X, W))   # (the GEMM stage of its own: below)
    assert sm.persistent == 0

    @dt.algorithm
    def linear_mish(X: Tensor["M", "K"], W: Tensor["N", "K"]):
        """x * tanh(log(1 + exp(x))): three transcendentals after the GEMM (sm_90: the flattened persistent
        kernel spills 88 bytes, the plain grid's 624)."""
        i, j, k = dt.axes("i j k")
        s = dt.sum(X[i, k] * W[j, k], over=k)
        return (s * dt.tanh(dt.log(1 + dt.exp(s))))[i, j]
    mish = gpu_schedule(linear_mish, (X, W))
    assert (mish.persistent, mish.num_stages, mish.tile) == (2, 3, {"i": 128, "j": 128, "k": 64}), mish


def test_heavy_epilogues_run_two_programs_an_sm():
    """A wide GEMM whose epilogue weighs 4 or more (schedule.dot_rules._heavy_epilogue: tanh and sigmoid 2, exp
    and log 1) runs 128 x 128 tiles at 3 stages, two programs an SM; lighter epilogues and epilogues reading a
    residual tile keep 128 x 256, one program an SM. The two-programs plan equals float64 on the interpreter."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from chain_catalogue import CHAINS, TORCH, as_float64, make_inputs, shape_of
    want = {"mish": (2, 128), "swish_div_clamp_tanh": (2, 128), "gelu_residual": (1, 256), "tanh": (1, 256),
            "gelu": (1, 256), "sigmoid_scale_residual": (1, 256), "bias": (1, 256)}
    for name, (per_sm, j) in want.items():
        chain = next(c for c in CHAINS if c.name == name)
        _, big = make_inputs(chain, *shape_of(chain, None), torch.float16, "cpu", empty=True)
        sched = gpu_schedule(chain.alg, big)
        assert (sched.persistent, sched.tile["j"], sched.tile["i"]) == (per_sm, j, 128), (name, sched)
        if per_sm == 2:
            kw, args = make_inputs(chain, 37, 48, 136, 0, 0, torch.float16, "cpu")
            got = dt.compile(chain.alg, sched)(*args)
            ref = TORCH[name](**as_float64(kw))
            assert ((got.double() - ref).norm() / ref.norm()).item() < 2e-3, name


def test_gemm_stage_of_a_chain_is_persistent_alone():
    # the heuristic: the GEMM kernel persistent (a stage override), the row kernel not
    X, W = meta(4096, 4096), meta(4096, 4096)
    sched = gpu_schedule(linear_softmax, (X, W))
    gemm = [n for n, ss in sched.stages.items() if ss.place == "materialize"]
    assert sched.persistent == 0 and len(gemm) == 1 and sched.stages[gemm[0]].persistent == 1
    # on the interpreter: the stage's kernel loops over its tiles (flattened), the row kernel has a program per row
    Xs, Ws = rnd(37, 24), rnd(72, 24, seed=1)
    small = dt.Schedule(access="tma", tile={"i": 16, "j": 32, "k": 16},
                        stages={gemm[0]: {"place": "materialize", "persistent": 1, "tile": {"i": 16, "j": 32, "k": 16}}})
    src = source(linear_softmax, small, (Xs, Ws))
    assert src.count("flatten=True") == 1 and src.count("persistent tile loop") == 1 and src.count("@_jit") >= 2
    check(linear_softmax, (Xs, Ws), small, tol=TOL[torch.float16])


@pytest.mark.parametrize("name", ["bias", "residual_layer_norm", "swish_div_clamp_tanh", "rms_norm", "batch_norm",
                                  "row_mean", "cross_entropy", "residual", "mlp_relu", "softmax_linear",
                                  "gelu_mlp_residual", "swiglu", "swiglu_mlp"])
def test_h200_chain_plans_run_right_on_the_interpreter(name):
    """The heuristic's H200 schedule of a catalogue chain (persistent flattened GEMM kernel, or a persistent GEMM
    stage beside row / column statistics kernels), run on the interpreter at a small odd shape: float64 torch."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from chain_catalogue import CHAINS, TORCH, as_float64, make_inputs, shape_of
    chain = next(c for c in CHAINS if c.name == name)
    _, big = make_inputs(chain, *shape_of(chain, None), torch.float16, "cpu", empty=True)
    sched = gpu_schedule(chain.alg, big)
    assert sched.persistent >= 1 or any(ss.persistent == 1 for ss in sched.stages.values()), sched
    kw, args = make_inputs(chain, 37, 48, 136, 40 if chain.P else 0, 0, torch.float16, "cpu")
    got = dt.compile(chain.alg, sched)(*args)
    ref = TORCH[name](**as_float64(kw))
    err = ((got.double().reshape(ref.shape) - ref).norm() / ref.norm()).item()
    assert err < 2e-3, err


def test_default_chain_schedules_fit_shared_memory():
    """Defaults whose kernels asked more than an H200 block's 232,448 B at sm_90 (the runtime then recompiled them
    smaller with a warning): residual (a persistent epilogue's extra tile: now read through pointers, 3 stages),
    mlp_relu (4 stages of 128^3 tiles: now 128x256x64, 230,432 B)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from chain_catalogue import CHAINS, make_inputs, shape_of
    for name, persistent, stages in (("residual", 1, 3), ("mlp_relu", 1, 4), ("bias", 1, 4)):
        chain = next(c for c in CHAINS if c.name == name)
        _, big = make_inputs(chain, *shape_of(chain, None), torch.float16, "cpu", empty=True)
        sched = gpu_schedule(chain.alg, big)
        assert (sched.persistent, sched.num_stages) == (persistent, stages), (name, sched)


@dt.algorithm
def linear_row_logsumexp(X: Tensor["M", "K"], W: Tensor["N", "K"]):
    """logsumexp over j of X @ W.T: an output over the rows only."""
    i, j, k = dt.axes("i j k")
    s = dt.sum(X[i, k] * W[j, k], over=k)
    m = dt.max(s[i, j], over=j)
    return (m + dt.log(dt.sum(dt.exp(s[i, j] - m), over=j)))[i]


def test_row_output_gemm_stage_is_wide():
    """An output over the rows only (logsumexp, a row mean of a Linear): the main grid is (i,), yet the GEMM
    stage's own kernel over (i, j) is a wide GEMM like softmax's (s6: 128 x 128 on the plain grid, 222 us
    against 202 for softmax's persistent 128 x 256 at 4096^3 on the H200)."""
    X, W = meta(4096, 4096), meta(4096, 4096)
    sched = gpu_schedule(linear_row_logsumexp, (X, W))
    gemm = [ss for ss in sched.stages.values() if ss.place == "materialize"]
    assert sched.grid == ("i",) and len(gemm) == 1
    assert gemm[0].tile == {"i": 128, "j": 256, "k": 64} and gemm[0].persistent == 1 and gemm[0].num_stages == 4
    # below the wide sizes: 128 x 128, a program per tile
    small = gpu_schedule(linear_row_logsumexp, (meta(1024, 4096), W))
    (g,) = [ss for ss in small.stages.values() if ss.place == "materialize"]
    assert g.tile["j"] == 128 and not g.persistent


@pytest.mark.parametrize("persistent", [0, 1])
def test_flattened_kernel_reads_its_residual_through_pointers(persistent):
    """The flattened persistent kernel reads the epilogue's residual tile through pointers (no TMA buffer beside
    the pipeline's, plan.persistent.plan_epilogue_reads); a program per tile keeps its TMA box. Both equal
    float64 (NaN-poisoned out=, prime sizes, more tiles than programs)."""
    M, K, N = 67, 40, 88
    X, W, R = rnd(M, K), rnd(N, K, seed=1), rnd(M, N, seed=2)
    sched = SCHED.replace(persistent=persistent)
    src = source(linear_residual, sched, (X, W, R))
    assert ("flatten=True" in src) == bool(persistent)
    assert ("desc_R" in src) == (not persistent) and "desc_X" in src and "desc_W" in src
    check(linear_residual, (X, W, R), sched, torch_ref=lambda x, w, r: x @ w.T + r, tol=TOL[torch.float16])


def test_two_gemm_chain_kernels_are_wide():
    """An MLP (relu(X @ W.T + b) @ W2.T): with the first GEMM materialised, each kernel holds one contraction,
    so each large 16-bit one is a wide persistent GEMM: the first over (i, j), the second over (i, p) with
    tiles of 64 along j, 4 stages (the hidden buffer is read along j at unit stride)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from chain_catalogue import CHAINS, make_inputs, shape_of
    for name in ("mlp_relu", "softmax_linear", "swiglu_mlp"):
        chain = next(c for c in CHAINS if c.name == name)
        _, big = make_inputs(chain, *shape_of(chain, None), torch.float16, "cpu", empty=True)
        sched = gpu_schedule(chain.alg, big)
        assert sched.persistent == 1 and sched.num_stages == 4, (name, sched)
        assert (sched.tile["i"], sched.tile["p"], sched.tile["j"]) == (128, 256, 64), (name, sched)
        firsts = {n: ss for n, ss in sched.stages.items() if ss.place == "materialize" and "k" in ss.tile}
        # each first GEMM wide and persistent in a kernel of its own (SwiGLU's two apart: different stages)
        for ss in firsts.values():
            assert ss.tile["j"] == 256 and ss.persistent == 1, (name, ss)
        assert len(set(firsts.values())) == len(firsts)
        # the row kernels between them keep a program per row
        assert all(not ss.persistent for n, ss in sched.stages.items() if n not in firsts and ss.place == "materialize")
    # X + gelu(X @ W.T + b) @ W2.T at 1024 rows (2^35 multiply-adds each): wide too, the second at 3 stages (its
    # epilogue reads X's tile through pointers)
    chain = next(c for c in CHAINS if c.name == "gelu_mlp_residual")
    _, big = make_inputs(chain, *shape_of(chain, None), torch.float16, "cpu", empty=True)
    sched = gpu_schedule(chain.alg, big)
    assert (sched.persistent, sched.num_stages, sched.tile["p"], sched.tile["j"]) == (1, 3, 256, 64), sched
    assert sched.stages["sum0"].tile["j"] == 256 and sched.stages["sum0"].persistent == 1, sched


def test_grouped_gemm_stage_is_persistent():
    """Group norm's GEMM stage (a weight viewed as groups, 128 x 128 tiles of its own) runs persistent, flattened;
    on the interpreter its H200 plan equals float64; fp32 keeps a program per tile."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from chain_catalogue import CHAINS, TORCH, as_float64, make_inputs, shape_of
    chain = next(c for c in CHAINS if c.name == "group_norm")
    _, big = make_inputs(chain, *shape_of(chain, None), torch.float16, "cpu", empty=True)
    sched = gpu_schedule(chain.alg, big)
    assert sched.stages["sum0"].persistent == 1 and not sched.persistent, sched
    assert sched.stages["sum0"].tile["c"] == 128, sched   # C = 128
    # groups of 256 columns (group_norm_hardtanh, C = 256, 8192 rows): the wide GEMM's 256 columns, 4 stages
    wide = next(c for c in CHAINS if c.name == "group_norm_hardtanh")
    _, bigw = make_inputs(wide, *shape_of(wide, None), torch.float16, "cpu", empty=True)
    sw = gpu_schedule(wide.alg, bigw).stages["sum0"]
    assert (sw.tile["c"], sw.tile["i"], sw.persistent, sw.num_stages) == (256, 128, 1, 4), sw
    _, big32 = make_inputs(chain, *shape_of(chain, None), torch.float32, "cpu", empty=True)
    assert not gpu_schedule(chain.alg, big32).stages["sum0"].persistent
    kw, args = make_inputs(chain, 37, 48, 136, 0, 8, torch.float16, "cpu")
    k = dt.compile(chain.alg, sched)
    assert k.source_for(*args).count("flatten=True") == 1
    got = k(*args)
    ref = TORCH["group_norm"](**as_float64(kw))
    err = ((got.double().reshape(ref.shape) - ref).norm() / ref.norm()).item()
    assert err < 2e-3, err


@dt.algorithm
def linear_swiglu(X: Tensor["M", "K"], W: Tensor["N", "K"], W3: Tensor["N", "K"]):
    """silu(X @ W.T) * (X @ W3.T): two GEMMs over the same axes combined element-wise."""
    i, j, k = dt.axes("i j k")
    a = dt.sum(X[i, k] * W[j, k], over=k)
    return (a * dt.sigmoid(a) * dt.sum(X[i, k] * W3[j, k], over=k))[i, j]


def test_two_gemms_combined_go_apart():
    """SwiGLU's two GEMMs (schedule.chain_rules.gemms_apart): the first a wide persistent kernel of its own, the
    second wide and persistent at 3 stages reading the first's buffer in its epilogue; small or fp32 calls keep
    one kernel. On the interpreter the H200 plan equals float64 (NaN-poisoned out=, prime sizes)."""
    X, W = meta(4096, 4096), meta(4096, 4096)
    sched = gpu_schedule(linear_swiglu, (X, W, W))
    (first,) = [n for n, ss in sched.stages.items() if ss.place == "materialize"]
    ss = sched.stages[first]
    assert ss.tile == {"i": 128, "j": 256, "k": 64} and ss.persistent == 1 and ss.num_stages == 4, sched
    assert sched.tile == {"i": 128, "j": 256, "k": 64} and sched.persistent == 1 and sched.num_stages == 3, sched
    assert not gpu_schedule(linear_swiglu, (meta(512, 4096), W, W)).stages
    f32 = meta(4096, 4096, dtype=torch.float32)
    assert not gpu_schedule(linear_swiglu, (f32, f32, f32)).stages
    Xs, Ws, W3s = rnd(37, 40), rnd(72, 40, seed=1), rnd(72, 40, seed=2)
    small = sched.replace(tile={"i": 16, "j": 32, "k": 16},
                          stages={first: ss.replace(tile={"i": 16, "j": 32, "k": 16})})
    src = source(linear_swiglu, small, (Xs, Ws, W3s))
    assert src.count("flatten=True") == 2 and src.count("@_jit") == 2
    check(linear_swiglu, (Xs, Ws, W3s), small,
          torch_ref=lambda x, w, w3: torch.nn.functional.silu(x @ w.T) * (x @ w3.T), tol=TOL[torch.float16])
