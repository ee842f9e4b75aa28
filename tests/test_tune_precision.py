"""Issue 14: the derived exploration space of an fp32 contraction on the GPU includes the dot
precision (the choices that keep fp32 accuracy) and, where the default precision "auto" runs tensor
cores, their TMA tilings. "auto" is resolved by the plan's rule (plan.staging.call_precision), not a
copy of it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import dtriton as dt
from dtriton.plan import call_spec, plan_program
from dtriton.plan.staging import call_precision
from dtriton.schedule.heuristics import complete_schedule
from dtriton.tune import Space
from dtriton.tune.check import Limits

from conftest import matmul

ACCURATE = {"ieee", "tf32x3", "bf16x6"}


def dims(space):
    return dict(space.dimensions())


def nn(M, K, N, dtype=torch.float32):
    return torch.empty(M, K, dtype=dtype), torch.empty(K, N, dtype=dtype)


def tn(M, K, N):
    """A.T @ B with A stored (K, M) row-major: neither operand reads k at unit stride."""
    return torch.empty(K, M).t(), torch.empty(K, N)


def test_auto_fp32_nn_gets_tensor_core_tma_tilings_and_the_precision():
    d = dims(Space.derive(matmul, nn(256, 256, 256), target="gpu"))
    assert d["access"] == ("pointer", "tma")
    assert set(d["precision"]) == ACCURATE | {"auto"}
    assert "tf32" not in d["precision"] and "bf16x3" not in d["precision"]   # they change results


def test_auto_resolves_as_the_plan_does():
    b = dataclasses.replace(matmul.bind(nn(64, 64, 64)), device=torch.device("cuda"))
    assert call_precision(matmul, b, "auto", True) == "tf32x3"
    assert call_precision(matmul, b, "bf16x6", True) == "bf16x6"
    small_tn = dataclasses.replace(matmul.bind(tn(64, 64, 64)), device=torch.device("cuda"))
    assert call_precision(matmul, small_tn, "auto", True) == "ieee"
    big_tn = dataclasses.replace(matmul.bind(tn(1024, 1024, 1024)), device=torch.device("cuda"))
    assert call_precision(matmul, big_tn, "auto", True) == "tf32x3"    # staged: one operand copied K-major


@pytest.mark.parametrize("lay", ["NN", "NT", "TN", "TT"])
def test_call_precision_agrees_with_the_planned_dot(lay):
    """The precision the GPU plan gives the dot (planned here without a GPU) is call_precision's."""
    A, B = torch.randn(64, 64), torch.randn(64, 64)
    a = A if lay[0] == "N" else A.T.contiguous().T
    b = B if lay[1] == "N" else B.T.contiguous().T
    bind = matmul.bind((a, b))
    bind.device = torch.device("cuda")
    full = complete_schedule(matmul, dt.Schedule(tile={"i": 32, "j": 32, "k": 32}), bind)
    prog = plan_program(matmul, full, bind, call_spec(matmul, bind, (a, b), interpret=False))
    (d,) = [d for k in prog.kernels for d in k.dots.values()]
    assert d.precision == call_precision(matmul, bind, "auto", True)


def test_small_tn_fp32_searches_precision_but_not_tma():
    """FMA by default (no operand reads k at unit stride, too small to stage): no TMA tilings, but the
    precisions are searched (bf16x6 reads MN-major operands on tensor cores)."""
    d = dims(Space.derive(matmul, tn(256, 256, 256), target="gpu"))
    assert "access" not in d
    assert set(d["precision"]) == ACCURATE | {"auto"}


def test_no_precision_dimension_where_it_has_no_effect():
    assert "precision" not in dims(Space.derive(matmul, nn(256, 256, 256)))      # interpreter
    assert "precision" not in dims(Space.derive(matmul, nn(256, 256, 256, torch.float16), target="gpu"))
    assert "precision" not in dims(Space.derive(matmul, nn(64, 64, 64, torch.float64), target="gpu"))
    no_tma = dims(Space.derive(matmul, nn(256, 256, 256), target="gpu", limits=Limits(tma=False)))
    assert "access" not in no_tma and set(no_tma["precision"]) == ACCURATE | {"auto"}


@pytest.mark.parametrize("precision", ["tf32x3", "bf16x6", "ieee"])
def test_every_derived_precision_keeps_fp32_accuracy_on_odd_shapes(precision):
    """A point of the derived space per precision runs (interpreter) and matches float64 torch."""
    A, B = torch.randn(37, 19), torch.randn(19, 23)
    sp = Space.derive(matmul, (A, B), target="gpu")
    assert precision in dims(sp)["precision"]
    k = dt.compile(matmul, schedule=dt.Schedule(precision=precision))
    out = torch.full((37, 23), float("nan"))
    k(A, B, out=out)
    torch.testing.assert_close(out.double(), A.double() @ B.double(), rtol=1e-5, atol=1e-5)


def test_fp32_tma_dot_tiles_count_the_output_staging_buffer():
    """Triton 3.6 keeps an fp32 TMA loop's output tile beside its stages-1 operand buffers (sm_90 compiles:
    256x128x32 at 4 stages 278,584 B, over the H200's 227 KB: OutOfResources in the session-6 explore);
    the pruner counts it, pointer loads not."""
    from dtriton.tune.check import check_resources
    args = (torch.empty(1024, 8192), torch.empty(8192, 8192))
    b = dataclasses.replace(matmul.bind(args), device=torch.device("cuda"))
    base = dt.compile(matmul).complete(b)
    big = base.replace(tile={"i": 256, "j": 128, "k": 32}, num_stages=4, num_warps=8)
    assert check_resources(matmul, big.replace(access="pointer"), b, Limits()) is None     # 192 KB
    why = check_resources(matmul, big.replace(access="tma"), b, Limits())
    assert why is not None and "272 KB of shared memory > 227 KB" in why
    assert check_resources(matmul, big.replace(access="tma", num_stages=3), b, Limits()) is None   # 224 KB
    ok = base.replace(tile={"i": 128, "j": 128, "k": 32}, num_stages=4, num_warps=8, access="tma")
    assert check_resources(matmul, ok, b, Limits()) is None                                 # 160 KB
    half = dataclasses.replace(matmul.bind((args[0].half(), args[1].half())), device=torch.device("cuda"))
    h = big.replace(tile={"i": 256, "j": 128, "k": 64}, access="tma")
    assert check_resources(matmul, h, half, Limits()) is None    # 16-bit: the pipeline's buffers take the store


@pytest.mark.parametrize("layout", ["NT", "TN"])
def test_explore_fp32_bench_dry_run(tmp_path, layout):
    """bench/explore_fp32.py (the lead's GPU check of the derived precision space) runs on the interpreter."""
    from conftest import run_bench
    out = run_bench(["bench/explore_fp32.py", "--dry-run", "--layout", layout], tmp_path)
    assert "precision ('auto', 'bf16x6', 'ieee', 'tf32x3')" in out and "accuracy: ok" in out
    assert (tmp_path / "out" / f"explore_fp32_{layout}.json").exists()


def test_warm_start_tries_every_other_precision_early():
    """The local search before sampling steps the precision to each other accurate choice, right after access."""
    from dtriton.tune import samplers
    args = nn(256, 256, 256)
    sp = Space.derive(matmul, args, target="gpu")
    b = dataclasses.replace(matmul.bind(args), device=torch.device("cuda"))
    base = dt.compile(matmul).complete(b)
    dims_ = sp.dimensions()
    bp = samplers.base_point(dims_, base)
    assert bp["precision"] == "auto"
    nb = samplers.neighbours(dims_, bp)
    precs = [p["precision"] for p in nb if p["precision"] != "auto"]
    assert sorted(precs) == ["bf16x6", "ieee", "tf32x3"]
    first = [i for i, p in enumerate(nb) if p["precision"] != "auto"]
    tiles = [i for i, p in enumerate(nb) if p.get("tile.i") != bp.get("tile.i")]
    assert max(first) < min(tiles)
