"""The GPU heuristic's schedules, run on the interpreter: every rule the heuristic applies on a GPU
(split-K, column reductions, flash attention) must give a legal schedule with correct results.
The binding is told it is on CUDA so the GPU branch of :func:`complete_schedule` is taken."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import dtriton as dt
from dtriton.schedule import complete_schedule
from dtriton.library import attention, column_sum, layer_norm, matmul, spatial_diffusion


def gpu_schedule(alg, args) -> dt.Schedule:
    b = alg.bind(args)
    b.device = torch.device("cuda")
    return complete_schedule(alg, None, b)


def run_and_compare(alg, sched, args, tol):
    k = dt.compile(alg, sched)
    got = k(*args)
    ref = alg.reference(*args)
    got, ref = (got if isinstance(got, tuple) else (got,)), (ref if isinstance(ref, tuple) else (ref,))
    for g, r in zip(got, ref):
        err = ((g.double() - r.double()).norm() / r.double().norm()).item()
        assert err < tol, (sched, err)


def test_column_sum_reads_rows_and_splits_on_the_gpu():
    X = torch.randn(1100, 300)
    s = gpu_schedule(column_sum, (X,))
    assert s.strategy["i"] == "loop" and s.tile["i"] == 32 and s.tile["j"] == 128
    assert s.split.get("i", 1) > 1          # 3 programs of 128 columns: split the rows
    run_and_compare(column_sum, s, (X,), 1e-6)


def test_layer_norm_backward_column_stages_on_the_gpu():
    g = dt.grad(layer_norm)
    args = (torch.randn(700, 96), torch.randn(96), torch.randn(96), torch.randn(700, 96))
    for alg in g.algorithms:
        s = gpu_schedule(alg, args)
        run_and_compare(alg, s, args, 1e-5)
    s = gpu_schedule(g.algorithms[0], args)
    assert any(ss.strategy.get("i") == "loop" for ss in s.stages.values())


def test_attention_heuristic_is_the_fused_online_schedule_without_split():
    Q, K, V = (torch.randn(2, 2, 130, 64) for _ in range(3))
    s = gpu_schedule(attention, (Q, K, V, 0.125))
    assert s.strategy["j"] == "online" and not s.split
    run_and_compare(attention, s, (Q, K, V, 0.125), 1e-5)


@pytest.mark.parametrize("V", [1500, 3000])
def test_diffusion_first_contraction_is_split_over_v(V):
    args = (torch.randn(V, 16), torch.randn(V, 32) / V ** 0.5, torch.rand(V) + 0.5, torch.rand(32), torch.rand(16))
    s = gpu_schedule(spatial_diffusion, args)
    assert s.split.get("v", 1) > 1
    run_and_compare(spatial_diffusion, s, args, 1e-5)


@pytest.mark.parametrize("M,N,tiles,split", [(1024, 1024, (64, 128), None), (2048, 2048, (128, 128), None),
                                             (16, 4096, (16, 128), 8), (1024, 64, (128, 64), 8)])
def test_fp16_matmul_fills_the_sms_with_smaller_tiles_before_split_k(M, N, tiles, split):
    """Fewer 128x128 output tiles than SMs (1024^3: 64 on 132 SMs): 64x128 tiles, 4 warps, no
    split-K (H200: 6.3 us against 12.9 us for 128x128 split 2); skinny M still splits K."""
    from dtriton.library import matmul
    args = (torch.zeros((), dtype=torch.float16).expand(M, 4096), torch.zeros((), dtype=torch.float16).expand(4096, N))
    s = gpu_schedule(matmul, args)
    assert (s.tile["i"], s.tile["j"]) == tiles
    assert s.split.get("k") == split
    if tiles == (64, 128):
        assert s.num_warps == 4
    a, b = torch.randn(70, 96, dtype=torch.float16), torch.randn(96, 150, dtype=torch.float16)
    run_and_compare(matmul, s, (a, b), 3e-3)


def test_batched_fp16_matmul_counts_its_batch_programs():
    """64 x 1024 x 1024 batched fp16 matmul has 4096 128x128 tiles: no shrink to 64x128."""
    @dt.algorithm
    def bmm(A: dt.Tensor["Z", "M", "K"], B: dt.Tensor["Z", "K", "N"]):
        z, i, j, k = dt.axes("z i j k")
        return dt.sum(A[z, i, k] * B[z, k, j], over=k)[z, i, j]
    h = torch.float16
    s = gpu_schedule(bmm, (torch.zeros((), dtype=h).expand(64, 1024, 1024), torch.zeros((), dtype=h).expand(64, 1024, 1024)))
    assert (s.tile["i"], s.tile["j"]) == (128, 128) and s.num_warps == 8
    a, b = torch.randn(2, 70, 40, dtype=h), torch.randn(2, 40, 150, dtype=h)
    got = dt.compile(bmm, s)(a, b)
    assert ((got.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm()) < 3e-3


def test_grouped_launch_order_only_where_the_swizzle_applies():
    """Grouped order swizzles the second-to-last grid axis; with the batch axis between the two
    output axes (out[i, b, j]) the heuristic's group 8 on i was silently ignored: now none is set."""
    @dt.algorithm
    def bmm_ibj(A: dt.Tensor["Z", "M", "K"], B: dt.Tensor["Z", "K", "N"]):
        z, i, j, k = dt.axes("z i j k")
        return dt.sum(A[z, i, k] * B[z, k, j], over=k)[i, z, j]
    a, b = torch.randn(2, 40, 24), torch.randn(2, 24, 36)
    s = gpu_schedule(bmm_ibj, (a, b))
    s.validate(bmm_ibj)
    assert s.grid == ("i", "z", "j") and dict(s.group) == {}
    run_and_compare(bmm_ibj, s, (a, b), 1e-5)
    s = gpu_schedule(matmul, (torch.randn(4096, 64), torch.randn(64, 4096)))
    assert s.grid == ("i", "j") and dict(s.group) == {"i": 8}


def test_heuristic_schedules_validate_and_carry_no_unused_tiles():
    """GPU and interpreter schedules of the library pass validation; the tile of an axis that ends
    up "whole" off every grid (which the kernel would ignore) is not filled in."""
    from dtriton import library as L
    X = torch.randn(6, 40)
    q = torch.randn(1, 2, 16, 8)
    cases = [(L.softmax, (X,)), (L.layer_norm, (X, X[0], X[0])), (L.cross_entropy, (X, torch.zeros(6, dtype=torch.long))),
             (L.column_sum, (X,)), (L.attention, (q, q, q, 0.1)), (L.matmul, (X, X.T))]
    for alg, args in cases:
        for sched in (gpu_schedule(alg, args), dt.compile(alg).schedule_for(*args)):
            sched.validate(alg)
            assert sched.unused_tiles(alg) == [], (alg.name, sched)
    s = gpu_schedule(L.softmax, (X,))
    assert s.strategy["j"] == "whole" and "j" not in s.tile


def test_tma_is_the_default_access_for_large_16_bit_contractions_on_the_gpu():
    """access=None lets the heuristic pick: TMA for 16-bit contractions of at least 2^35
    multiply-adds on a Hopper-class GPU (assumed when none is visible), pointers for smaller or
    fp32 ones, for attention (flash schedule), and on the interpreter; a user's choice stays."""
    def big(*shape, dtype=torch.float16):
        return torch.zeros((), dtype=dtype).expand(*shape)
    h = (big(4096, 2048), big(2048, 4096))
    assert gpu_schedule(matmul, h).access == "tma"
    assert gpu_schedule(matmul, (big(2048, 2048), big(2048, 2048))).access == "pointer"   # host cost > gain
    assert gpu_schedule(matmul, (big(4096, 4096, dtype=torch.bfloat16), big(4096, 11008, dtype=torch.bfloat16))).access == "tma"
    assert gpu_schedule(matmul, (big(1024, 1024), big(1024, 1024))).access == "pointer"
    assert gpu_schedule(matmul, (big(2048, 2048, dtype=torch.float32), big(2048, 2048, dtype=torch.float32))).access == "pointer"
    Q = big(4, 32, 4096, 128)
    assert gpu_schedule(attention, (Q, Q, Q, 0.1)).access == "pointer"
    b = matmul.bind(h)
    b.device = torch.device("cuda")
    assert complete_schedule(matmul, dt.Schedule(access="pointer"), b).access == "pointer"
    assert complete_schedule(matmul, dt.Schedule(num_warps=4), b).access == "tma"
    assert dt.compile(matmul).schedule_for(torch.randn(64, 64), torch.randn(64, 64)).access == "pointer"   # interpreter
    assert "access" not in dt.Schedule().to_dict() and dt.Schedule.from_json(dt.Schedule(access="tma").to_json()).access == "tma"


def test_default_tma_only_when_every_tile_input_is_tma_addressable():
    """The heuristic's TMA pick falls back to pointers for a call with an operand TMA cannot read
    (a transposed B: mixed TMA/pointer dot loops were slower on the H200); an explicit
    access="tma" is the user's and stays."""
    A, B = torch.randn(64, 64, dtype=torch.float16), torch.randn(64, 64, dtype=torch.float16)
    auto = dt.compile(matmul)
    tma = complete_schedule(matmul, dt.Schedule(access="tma"), matmul.bind((A, B)))
    b = matmul.bind((A, B))
    assert auto._auto_access(tma, b, (A, B)).access == "tma"
    assert auto._auto_access(tma, matmul.bind((A, B.t())), (A, B.t())).access == "pointer"
    assert auto._auto_access(tma, b, (A, torch.randn(64, 65, dtype=torch.float16)[:, :64])).access == "pointer"
    user = dt.compile(matmul, dt.Schedule(access="tma"))
    assert user._auto_access(tma, matmul.bind((A, B.t())), (A, B.t())).access == "tma"


def test_no_default_tma_where_the_user_gave_eviction_hints_for_tiles():
    """TMA loads take no L2 eviction hint: with the heuristic's TMA pick a user's
    eviction={"A": ...} on a large 16-bit matmul was dropped without a word (no eviction_policy in
    the kernel). Pointers stay then; a hint on a vector (pointer loads either way), or
    "evict_normal" (no hint), keeps the TMA pick."""
    from dtriton.library import linear_relu

    def big(*shape):
        return torch.zeros((), dtype=torch.float16).expand(*shape)
    A, B = big(4096, 2048), big(2048, 4096)
    b = matmul.bind((A, B))
    b.device = torch.device("cuda")
    s = complete_schedule(matmul, dt.Schedule(eviction={"A": "evict_last"}), b)
    assert s.access == "pointer" and dict(s.eviction) == {"A": "evict_last"}
    src = dt.compile(matmul, s).source_for(torch.zeros(4096, 2048, dtype=torch.float16),
                                          torch.zeros(2048, 4096, dtype=torch.float16))
    assert 'eviction_policy="evict_last"' in src
    assert complete_schedule(matmul, dt.Schedule(eviction={"A": "evict_normal"}), b).access == "tma"
    assert complete_schedule(matmul, dt.Schedule(eviction={"A": "evict_first"}, access="tma"), b).access == "tma"
    lb = linear_relu.bind((big(4096, 2048), big(4096, 2048), big(4096)))
    lb.device = torch.device("cuda")
    assert complete_schedule(linear_relu, dt.Schedule(eviction={"b": "evict_last"}), lb).access == "tma"
    assert complete_schedule(linear_relu, dt.Schedule(eviction={"W": "evict_first"}), lb).access == "pointer"


def test_user_given_flat_knobs_are_never_changed():
    """Every flat knob of the registry (the built-ins, and any registered later) passes through the
    heuristic with the user's value, on the interpreter and for the GPU: no hand-written list can
    forget one. The knobs the heuristic fills in are those of DECIDED."""
    from dtriton.schedule import DECIDED, flat_knobs
    assert {"tile", "grid", "num_warps", "access"} <= set(DECIDED)
    cases = [(matmul, (torch.randn(96, 40), torch.randn(40, 72))), (layer_norm, (torch.randn(6, 40), torch.randn(40),
                                                                               torch.randn(40)))]
    for k in flat_knobs():
        values = [v for v in (k.domain.values or ()) + k.search if v != k.default]
        assert values, k.name
        for v in values:
            for alg, args in cases:
                for b in (alg.bind(args), dataclasses.replace(alg.bind(args), device=torch.device("cuda"))):
                    got = complete_schedule(alg, dt.Schedule(**{k.name: v}), b)
                    assert getattr(got, k.name) == v, (k.name, v, alg.name, b.device)


def test_wide_16_bit_gemm_with_both_operands_k_major_takes_4_stages_and_tma_views():
    """X @ W.T at 4096^3 in fp16 (both operands read k at unit stride): the wide 128x256 tile with
    4 stages, and the heuristic's TMA pick reads W through its transposed view (H200: 211.7 us
    against 243.3 through pointers with 3 stages); NN keeps 3 stages; a 128x128 tile keeps the
    own-order rule (a transposed operand falls back to pointers)."""
    def big(*shape):
        return torch.zeros((), dtype=torch.float16).expand(*shape).contiguous()
    X, W, B = big(4096, 4096), big(4096, 4096), big(4096, 4096)
    nt, nn = gpu_schedule(matmul, (X, W.t())), gpu_schedule(matmul, (X, B))
    assert (nt.tile["i"], nt.tile["j"], nt.tile["k"], nt.num_stages) == (128, 256, 64, 4), nt
    assert nn.num_stages == 3 and nn.tile["j"] == 256, nn
    auto = dt.compile(matmul)
    b = matmul.bind((X, W.t()))
    assert auto._auto_access(nt, b, (X, W.t())).access == "tma"
    narrow = nt.replace(tile={"i": 128, "j": 128, "k": 64})
    assert auto._auto_access(narrow, b, (X, W.t())).access == "pointer"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_column_splits_of_16_bit_outputs_fold_in_the_last_program(dtype):
    """Layer norm's dw/db and a column sum split over rows on the GPU: 16-bit outputs take per-split
    partials that the last program of each column tile folds and stores cast into the outputs
    (``split_mode="last"``: no zero-filled fp32 buffer, no casting kernel); fp32 outputs keep atomics
    into the outputs themselves. The GPU schedules then run on the interpreter against float64."""
    M, N = 4096, 8192
    g = dt.grad(layer_norm, save="all").algorithms[0]
    meta = dict(dtype=dtype, device="meta")
    big = [torch.empty(M, N, **meta), torch.empty(N, **meta), torch.empty(N, **meta), torch.empty(M, N, **meta),
           torch.empty(M, device="meta"), torch.empty(M, device="meta")]
    for alg, args in ((g, big), (column_sum, [torch.empty(M, N, **meta)])):
        s = gpu_schedule(alg, args)
        assert s.split, (alg.name, s)
        assert s.split_mode == (None if dtype == torch.float32 else "last"), (alg.name, s.split_mode)
    # the same kind of schedule at a size the interpreter runs, against float64
    torch.manual_seed(3)
    x = torch.randn(37, 20, dtype=dtype)
    for mode in ("partials", "last"):
        s = dt.Schedule(grid=("j",), tile={"j": 8, "i": 4}, strategy={"i": "loop"}, split={"i": 3}, split_mode=mode)
        run_and_compare(column_sum, s, [x], 1e-2 if dtype != torch.float32 else 1e-6)
