"""The diffusion layer's GPU plans, computed on the CPU (issue 15): how many kernels the forward,
the derived backward and the hand-written backward launch, how the long V reduction is split,
and the precision of its dot; and bench/diffusion.py in its dry-run mode."""

from __future__ import annotations

import json
import os

import pytest
import triton

from conftest import run_bench
from dtriton.examples.diffusionnet.plans import layer_plans


@pytest.fixture(scope="module", params=[2000, 20000, 100000])
def plans(request):
    return request.param, layer_plans(request.param, 128, 128)


def test_derived_backward_plan_is_no_bigger_than_the_manual_one(plans):
    _, p = plans
    derived = [v for k, v in p.items() if k.startswith("derived backward")]
    assert len(derived) == 1, list(p)          # one algorithm for x and times
    assert len(derived[0][1]) <= len(p["manual backward"][1])
    assert len(p["saving forward"][1]) == len(p["forward"][1])   # saving the projection adds no kernel


def test_forward_splits_the_long_reduction(plans):
    V, p = plans
    first = p["forward"][1][0]
    assert first["split"] is not None and first["split"][0] == "v", first
    grid_programs = 1
    for a, blk in first["grid"].items():
        grid_programs *= -(-128 // blk)
    assert grid_programs * first["split"][1] >= 64, first   # at least half a wave of the 132 SMs


def test_bench_diffusion_dry_run(tmp_path):
    out = run_bench(["bench/diffusion.py", "--dry-run", "--probe", "--budget", "1"], tmp_path)
    assert "| V |" in out
    rows = json.loads((tmp_path / "out" / "diffusion.json").read_text())["rows"]
    assert {r["kind"] for r in rows} == {"forward", "fwd+bwd"}
    assert {"dtriton default", "dtriton explored", "eager"} <= {r["impl"] for r in rows if r["kind"] == "forward"}
    assert {"dtriton derived", "dtriton manual", "eager"} <= {r["impl"] for r in rows if r["kind"] == "fwd+bwd"}
    assert any(r["impl"].startswith("dtriton sum0 split") for r in rows)    # probes of the GPU schedule
    assert all(r["rel_err"] < 1e-5 for r in rows), rows
    assert not [r for r in rows if r["note"].startswith("failed")]


def test_bench_diffusion_plans_mode(tmp_path):
    out = run_bench(["bench/diffusion.py", "--plans", "--V", "6000"], tmp_path)
    assert "forward: 3 kernel(s)" in out and "derived backward" in out


def test_long_reduction_rule_tiles_split_and_precision():
    """The projection (sum over v into K x C) gets its own 64x64 tiles, a split giving about four
    waves of programs (fewer on a small mesh: >= 1 tile of v each), and bf16x6 as its own stage
    precision (its operands read v as rows: 16-bit wgmma takes them MN-major, tf32 does not); the
    output GEMM keeps "auto" (tf32x3: basis is read K-major). Where each program sums 8 tiles of v
    or more (V=100000: 781 rows), 128 x 64 tiles at 8 warps with the same split."""
    big = layer_plans(100_000)["forward"][0]
    assert big.precision == "auto" and big.split["v"] == 128
    ss = big.stages["sum0"]
    assert dict(ss.tile) == {"k": 128, "c": 64, "v": 32} and ss.num_warps == 8 and ss.num_stages == 3
    assert ss.precision == "bf16x6"
    mid = layer_plans(20_000)["forward"][0]   # 156 rows a program: 64 x 64 at 4 warps
    assert dict(mid.stages["sum0"].tile) == {"k": 64, "c": 64, "v": 32} and mid.stages["sum0"].num_warps == 4
    assert mid.split["v"] == 128
    small = layer_plans(2000)["forward"][0]
    assert dict(small.stages["sum0"].tile) == {"k": 64, "c": 64, "v": 32} and small.split["v"] == 32
    for name in ("forward", "manual backward", "derived backward"):   # basis^T G: the same pattern, the same rule
        sched, kernels = layer_plans(20_000)[name]
        assert sched.precision == "auto" and kernels[0]["split"] == ("v", 128), (name, kernels[0])
        assert [k["dots"][0][2] for k in kernels[:2]] == ["bf16x6", "tf32x3"], (name, kernels)


@pytest.mark.parametrize("V,rows", [(2000, 32), (6000, 32), (20000, 64), (100000, 64)])
def test_output_gemm_takes_32_rows_below_two_waves(V, rows):
    """The output GEMM reading the projection (forward and both backwards' grad_x) takes 32-row tiles
    when 64-row ones would make fewer than two waves of programs on the 132 SMs (V < ~8400)."""
    for name, (sched, kernels) in layer_plans(V).items():
        out0 = next(k for k in kernels if k["name"].endswith("_out0"))
        assert out0["grid"]["v"] == rows and out0["grid"]["c"] == 64, (name, out0)
    from dtriton.examples.diffusionnet.plans import empty_args, gpu_program
    from dtriton.library import spatial_diffusion
    import dtriton as dt
    s, _ = gpu_program(spatial_diffusion, empty_args(spatial_diffusion, {"V": V, "K": 128, "C": 128}),
                       dt.Schedule(tile={"v": 64}))
    assert s.tile["v"] == 64                       # a user's tile stays


@pytest.mark.parametrize("V", [2000, 100000])
def test_backward_times_kernel_takes_k_whole(V):
    """The backward's grad_times (a sum over k = 128 per channel) runs 8 programs of 16 channels with k in
    one block (no loop), in both backwards; the forward's spectral output keeps its (k, c) grid."""
    plans = layer_plans(V)
    for name in ("manual backward", "derived backward"):
        sched, kernels = plans[name]
        out1 = next(k for k in kernels if k["name"].endswith("_out1"))
        assert out1["grid"] == {"c": 16}, (name, out1)
        assert dict(sched.stages["out1"].strategy) == {"k": "whole"}, sched
    fwd = next(k for k in plans["forward"][1] if k["name"].endswith("_out1"))
    assert set(fwd["grid"]) == {"k", "c"}


def test_stage_precision_reaches_only_its_kernel():
    """A stage's precision override applies to the dots of that stage's kernel; the schedule's to the others."""
    import dtriton as dt
    from dtriton.examples.diffusionnet.plans import empty_args, gpu_program
    from dtriton.library import spatial_diffusion
    args = empty_args(spatial_diffusion, {"V": 20_000, "K": 128, "C": 128})
    sched = dt.Schedule(precision="tf32", stages={"sum0": dt.StageSchedule(place="materialize", precision="bf16x3")})
    _, prog = gpu_program(spatial_diffusion, args, sched)
    dots = {k.name.rsplit("_", 1)[-1]: [d.precision for d in k.dots.values()] for k in prog.kernels}
    assert dots["sum0"] == ["bf16x3"] and dots["out0"] == ["tf32"], dots
    with pytest.raises(dt.ScheduleError, match=r"stages\['sum0'\]\.precision"):
        dt.Schedule(stages={"sum0": dt.StageSchedule(precision="fp8")})


def test_long_reduction_rule_leaves_user_choices():
    import dtriton as dt
    from dtriton.examples.diffusionnet.plans import empty_args, gpu_program
    from dtriton.library import spatial_diffusion
    args = empty_args(spatial_diffusion, {"V": 100_000, "K": 128, "C": 128})
    s, _ = gpu_program(spatial_diffusion, args, dt.Schedule(precision="ieee"))
    assert s.precision == "ieee"
    s, _ = gpu_program(spatial_diffusion, args, dt.Schedule(split={"v": 4}))
    assert s.split["v"] == 4 and "sum0" not in s.stages and s.precision == "auto"


@pytest.mark.parametrize("V,K,C", [(1100, 16, 16), (1031, 32, 16)])
def test_long_reduction_schedule_runs_correctly(V, K, C):
    """The GPU schedule of the rule, run on the interpreter: against float64, outputs poisoned."""
    import torch
    import dtriton as dt
    from dtriton.examples.diffusionnet.layer import torch_spatial_diffusion
    from dtriton.examples.diffusionnet.plans import gpu_program
    from dtriton.library import spatial_diffusion
    g = torch.Generator().manual_seed(V)
    args = (torch.randn(V, C, generator=g), torch.randn(V, K, generator=g) / V ** 0.5, torch.rand(V, generator=g) + 0.5,
            torch.rand(K, generator=g) * 10, torch.rand(C, generator=g))
    sched, _ = gpu_program(spatial_diffusion, args)
    assert "sum0" in sched.stages and sched.split["v"] > 1 and sched.stages["sum0"].precision == "bf16x6", sched
    out = (torch.full((V, C), float("nan")), torch.full((K, C), float("nan")))
    got = dt.compile(spatial_diffusion, sched)(*args, out=out)
    ref = torch_spatial_diffusion(*(a.double() for a in args))
    err = ((got[0].double() - ref).norm() / ref.norm()).item()
    assert err < 1e-5, (sched, err)
    assert torch.isfinite(got[1]).all()


def test_derived_backward_gpu_schedule_runs_correctly():
    """The derived backward's GPU schedule (split projection, 32-row grad_x tiles, grad_times with k whole),
    run on the interpreter: against float64 autograd, outputs poisoned."""
    import torch
    import dtriton as dt
    from dtriton.examples.diffusionnet.layer import projection_stage, torch_spatial_diffusion
    from dtriton.examples.diffusionnet.plans import gpu_program
    from dtriton.library import spatial_diffusion
    V, K, C = 1100, 16, 32
    g = torch.Generator().manual_seed(5)
    args = (torch.randn(V, C, generator=g), torch.randn(V, K, generator=g) / V ** 0.5, torch.rand(V, generator=g) + 0.5,
            torch.rand(K, generator=g) * 10, torch.rand(C, generator=g))
    alg = dt.grad(spatial_diffusion, ["x", "times"], save=[projection_stage()], outputs=[0]).algorithms[0]
    gout = torch.randn(V, C, generator=g)
    saved = torch.einsum("vk,vc,v->kc", args[1], args[0], args[2])
    bargs = (*args, gout, torch.zeros(()).expand(K, C), saved)
    sched, _ = gpu_program(alg, bargs)
    assert sched.stages["out1"].strategy == {"k": "whole"} and sched.split["v"] > 1, sched
    got = dt.compile(alg, sched)(*bargs, out=(torch.full((V, C), float("nan")), torch.full((C,), float("nan"))))
    x, t = args[0].double().requires_grad_(), args[4].double().requires_grad_()
    (torch_spatial_diffusion(x, args[1].double(), args[2].double(), args[3].double(), t) * gout.double()).sum().backward()
    for a, r in zip(got, (x.grad, t.grad)):
        assert ((a.double() - r).norm() / r.norm()).item() < 1e-5


def test_long_reduction_rule_needs_dot_sized_outputs():
    """Fewer than 16 channels: no tl.dot, so no bf16x6 (it would have no effect) and no stage tiles."""
    from dtriton.examples.diffusionnet.plans import empty_args, gpu_program
    from dtriton.library import spatial_diffusion
    s, _ = gpu_program(spatial_diffusion, empty_args(spatial_diffusion, {"V": 50_000, "K": 128, "C": 8}))
    assert s.precision == "auto" and "sum0" not in s.stages


@pytest.mark.skipif(not os.path.exists(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                                                    "cuobjdump")), reason="needs Triton's CUDA backend tools")
def test_sm90_compile_of_the_projection_uses_tensor_cores_without_spills(tmp_path):
    """The heuristic's projection kernel, compiled for sm_90 on the CPU: wgmma, no spill stack."""
    run_bench(["bench/diffusion_sm90.py", "--V", "2000"], tmp_path)
    text = (tmp_path / "out" / "diffusion_sm90.txt").read_text()
    sum0 = next(ln for ln in text.splitlines() if "spatial_diffusion_sum0:" in ln)
    assert " stack 0 " in sum0 and " wgmma 0 " not in sum0, text


def test_long_slice_schedule_runs_correctly():
    """The GPU schedule at V=100000 (the projection in 128 x 64 tiles at 8 warps, split 128) applied to a
    small odd problem on the interpreter (C=80: masked channel tiles; a few rows per split): against
    float64, outputs poisoned."""
    import torch
    import dtriton as dt
    from dtriton.examples.diffusionnet.layer import torch_spatial_diffusion
    from dtriton.examples.diffusionnet.plans import empty_args, gpu_program
    from dtriton.library import spatial_diffusion
    sched, _ = gpu_program(spatial_diffusion, empty_args(spatial_diffusion, {"V": 100_000, "K": 128, "C": 128}))
    assert dict(sched.stages["sum0"].tile)["k"] == 128 and sched.stages["sum0"].num_warps == 8
    V, K, C = 1031, 128, 80
    g = torch.Generator().manual_seed(7)
    args = (torch.randn(V, C, generator=g), torch.randn(V, K, generator=g) / V ** 0.5, torch.rand(V, generator=g) + 0.5,
            torch.rand(K, generator=g) * 10, torch.rand(C, generator=g))
    got = dt.compile(spatial_diffusion, sched)(*args, out=(torch.full((V, C), float("nan")), torch.full((K, C), float("nan"))))
    ref = torch_spatial_diffusion(*(a.double() for a in args))
    assert ((got[0].double() - ref).norm() / ref.norm()).item() < 1e-5
    spec = torch.exp(-args[3].double()[:, None] * args[4].double()[None, :]) * torch.einsum(
        "vk,vc,v->kc", *(a.double() for a in args[1:2] + args[0:1] + args[2:3]))
    assert ((got[1].double() - spec).norm() / spec.norm()).item() < 1e-5
