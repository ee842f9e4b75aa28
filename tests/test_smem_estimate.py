"""Shared memory of planned kernels (issue 15): :mod:`dtriton.plan.smem` counts what a kernel holds on
sm_90 (every pipelined loop's rings of loaded tiles, the dots' operand copies, TMA store staging), and
the runtime shrinks a default schedule until every kernel of its plan fits, before its first launch.

The GQA backward's default grad_Q schedule (B3 H5 G2 S256 D128 fp16, gpu_check's case) held 448 KB in
its dQ kernel (fp32 score buffers and K, four stages deep) while the old estimate counted only the
largest contraction's operands; it fell back at its first launch with a ScheduleWarning. Its grad_K
and grad_V defaults put the batch axis alone on the grid in tiles of 16 (2**25-element values: the
printer refused them). Planned here as CUDA calls on meta tensors, as the H200 would run them; the
compile test checks the estimate against Triton's own sm_90 compile (``metadata.shared``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

import dtriton as dt
from dtriton.backends import default_backend
from dtriton.grad import augmented_forward, saved_statistics
from dtriton.ir import InputTensor
from dtriton.library import attention, gqa_attention, matmul
from dtriton.plan.decide import plan_program
from dtriton.plan.smem import kernel_smem, program_fits, program_smem
from dtriton.tune.check import Limits

LIMIT = Limits().smem_bytes   # 227 KB: the H100 / H200
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _cuda_call(alg, args):
    """(kernel, binding told it is on the GPU) of ``alg(*args)``."""
    b = alg.bind(tuple(args))
    b.device = torch.device("cuda")
    return dt.compile(alg), b


def _gqa_backward(B, H, G, rep, S, D):
    """(backward algorithm, meta arguments) of each derived GQA backward algorithm (saved statistics
    in the dtypes the saving forward gives them)."""
    aug, names = augmented_forward(gqa_attention, saved_statistics(gqa_attention))
    f16 = dict(dtype=torch.float16, device="meta")
    fwd = (torch.empty(B, H, S, D, dtype=torch.float16), torch.empty(B, G, S, D, dtype=torch.float16),
           torch.empty(B, G, S, D, dtype=torch.float16), D ** -0.5, rep)
    saved = dict(zip(names, aug.bind(fwd).out_dtypes[1:]))
    sizes = {"B": B, "H": H, "G": G, "S": S, "T": S, "D": D}
    out = []
    for bwd in dt.grad(gqa_attention, save=names).algorithms:
        args = [torch.empty(*[sizes[d] for d in p.dims], **dict(f16, dtype=saved.get(p.name.removeprefix("saved_"),
                                                                                       torch.float16)))
                if isinstance(p, InputTensor) else (D ** -0.5 if p.pytype is float else rep) for p in bwd.params]
        out.append((bwd, args))
    return out


@pytest.mark.parametrize("shape", [(3, 5, 2, 3, 256, 128), (2, 32, 8, 4, 1024, 64)], ids=["S256_D128", "S1024_D64"])
def test_gqa_backward_defaults_fit_without_a_schedule_warning(shape):
    """Every derived GQA backward algorithm's default schedule, as the H200 runtime completes it: no
    ScheduleWarning while it is fitted and planned, it prints (no block over 2**20), every kernel's
    estimate within 227 KB, the batch axis one per program."""
    for bwd, args in _gqa_backward(*shape):
        k, b = _cuda_call(bwd, args)
        with warnings.catch_warnings():
            warnings.simplefilter("error", dt.ScheduleWarning)
            sched, spec = k._schedule_and_spec(b, args, False)
            prog = plan_program(bwd, sched, b, spec)
            default_backend().render(prog)
        est = program_smem(prog)
        assert max(est.values()) <= LIMIT and program_fits(prog, LIMIT) is None, (bwd.name, est)
        batch = [a for a in sched.tile if a.startswith("b")]
        assert all(sched.tile[a] == 1 for a in batch), (bwd.name, sched.to_json())
        if bwd.name.endswith("grad_Q") and shape[4] == 256:   # the overflowing default: 4 stages then
            assert sched.num_stages == 2, sched.to_json()


def test_raw_gqa_grad_q_default_is_over_the_limit_and_fitted_below():
    """The dQ kernel of the heuristic's raw grad_Q default (4 stages) is estimated over 227 KB (Triton
    allocates 458,752 bytes for it); the runtime's fitted schedule is under it."""
    bwd, args = next((a, x) for a, x in _gqa_backward(3, 5, 2, 3, 256, 128) if a.name.endswith("grad_Q"))
    k, b = _cuda_call(bwd, args)
    raw = k.complete(b)
    sched, spec = k._schedule_and_spec(b, args, False)
    assert raw.num_stages == 4 and sched.num_stages == 2
    big = program_smem(plan_program(bwd, raw, b, spec))
    assert max(big.values()) >= 458752 and program_fits(plan_program(bwd, raw, b, spec), LIMIT) is not None
    assert "holds an estimated" in program_fits(plan_program(bwd, raw, b, spec), LIMIT)


def _meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


@pytest.mark.parametrize("case", ["matmul", "attention_d64", "attention_d128", "saving_d128"])
def test_gemm_and_attention_defaults_are_not_shrunk(case):
    """The fp16 4096^3 matmul default (128x256x64, 3 stages, TMA: 180,248 bytes compiled) and the
    attention forward defaults at D64 / D128 are what the heuristic gives: the estimate keeps them."""
    if case == "matmul":
        alg, args = matmul, (_meta(4096, 4096), _meta(4096, 4096))
    else:
        D = 64 if case == "attention_d64" else 128
        alg = attention if not case.startswith("saving") else augmented_forward(attention, saved_statistics(attention))[0]
        args = (_meta(4, 32, 4096, D), _meta(4, 32, 4096, D), _meta(4, 32, 4096, D), D ** -0.5)
    k, b = _cuda_call(alg, args)
    fitted, spec = k._schedule_and_spec(b, args, False)
    assert fitted == k._auto_access(k.complete(b), b, args), fitted.to_json()
    est = program_smem(plan_program(alg, fitted, b, spec))
    assert 0 < max(est.values()) <= LIMIT, est
    if case == "matmul":
        assert dict(fitted.tile) == {"i": 128, "j": 256, "k": 64} and fitted.num_stages == 3, fitted.to_json()


def test_kernels_without_dots_or_pipelines_hold_only_scratch():
    """A reduction kernel that pipelines nothing (softmax 4096 x 4096 fp16, 2 stages) is estimated at
    its scratch (2 KB a warp), not its tile."""
    X = _meta(4096, 4096)
    k, b = _cuda_call(dt.library.softmax, (X,))
    sched, spec = k._schedule_and_spec(b, (X,), False)
    (kp,) = plan_program(dt.library.softmax, sched, b, spec).kernels
    assert kernel_smem(kp) == 2048 * kp.num_warps


def _toolchain() -> bool:
    try:
        import triton
    except Exception:   # noqa: BLE001
        return False
    return os.path.exists(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas"))


@pytest.mark.skipif(not _toolchain(), reason="Triton's sm_90 toolchain (ptxas) is not installed")
def test_estimate_against_the_sm90_compile(tmp_path):
    """bench/smem_check.py compiles the GQA grad_Q kernels (raw default and fitted) and the fp16 matmul
    default for sm_90 (in a subprocess): every estimate at or above Triton's ``metadata.shared`` (the
    raw dQ kernel's compile asks for 458,752 bytes) and at most 1.6x it; the fitted kernels within 227 KB."""
    out = tmp_path / "rows.json"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    env.pop("TRITON_INTERPRET", None)
    res = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "smem_check.py"), "--cases",
                          "gqa B3 H5 G2 rep3 S256 D128 gqa_attention_grad_Q,matmul 4096^3 float16", "--json", str(out),
                          "--out", str(tmp_path / "src")], capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert len(rows) == 7, rows   # grad_Q: 3 kernels raw, 3 fitted; matmul: 1
    for r in rows:
        assert r["actual"] is not None and r["estimate"] >= r["actual"], r
        assert r["estimate"] <= 1.6 * r["actual"], r
        if r["schedule"] == "fitted" or r["case"].startswith("matmul"):
            assert r["actual"] <= LIMIT and r["estimate"] <= LIMIT, r
    assert max(r["actual"] for r in rows if r["schedule"] == "raw") == 458752
