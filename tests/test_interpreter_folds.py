"""Interpreter kernels fold blocks with Triton's standard combines (one numpy call each) and keep
dtriton's semantics: NaN propagates through max/min as in torch.amax, masked lanes hold the
identity, integer inputs, the first index wins argmax/argmin ties; float64 contractions run on
tl.dot; GPU kernels keep their own combines. Printed modules define only the helpers their
kernels call, and comments are not cut.

Outputs are poisoned (``out=`` filled with NaN) and compared with torch in float64.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dtriton as dt
from dtriton.library import matmul, softmax
from dtriton.plan import call_spec, plan_program

NAN, INF = float("nan"), float("inf")


@dt.algorithm
def row_max(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.max(X[i, j], over=j)[i]


@dt.algorithm
def row_min(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.min(X[i, j], over=j)[i]


@dt.algorithm
def all_max(X: dt.Tensor["M", "N"]):
    """A reduction over both axes: two folds in a row on the block."""
    i, j = dt.axes("i j")
    return dt.max(X[i, j] * 1.0, over=(i, j))


WHOLE = dt.Schedule(tile={"i": 4}, grid=("i",), strategy={"j": "whole"})
LOOP = dt.Schedule(tile={"i": 4, "j": 8}, grid=("i",), strategy={"j": "loop"})
SCHEDS = {"whole": WHOLE, "loop": LOOP, "heuristic": None}

ROWS = [[1, NAN, 3, -INF, INF, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],   # NaN wins
        [-INF] * 19,                                                     # only the identity's value
        [INF] * 19,
        [0] * 18 + [NAN],                                                # NaN in the last (masked-tile) lane
        [NAN] * 19,
        [5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12, -13]]


def _run(alg, sched, x):
    k = dt.compile(alg, sched)
    ref = alg.reference(x)
    out = torch.full_like(ref, NAN if ref.dtype.is_floating_point else -12345)
    return k(x, out=out), k.source_for(x)


@pytest.mark.parametrize("sched", list(SCHEDS), ids=list(SCHEDS))
@pytest.mark.parametrize("kind", ["max", "min"])
def test_max_min_propagate_nan_like_torch(kind, sched):
    x = torch.tensor(ROWS, dtype=torch.float32)
    alg, ref = (row_max, torch.amax) if kind == "max" else (row_min, torch.amin)
    y, src = _run(alg, SCHEDS[sched], x)
    torch.testing.assert_close(y.double(), ref(x.double(), 1), equal_nan=True)
    assert f"tl.standard._elementwise_{kind}" in src and f"_{kind}_combine" not in src


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (5, 1), (3, 17), (7, 64)])
def test_max_min_dtypes_and_sizes(dtype, shape):
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 50).to(dtype)
    for sched in (WHOLE, LOOP):
        for alg, ref in ((row_max, torch.amax), (row_min, torch.amin)):
            y, _ = _run(alg, sched, x)
            torch.testing.assert_close(y.double(), ref(x.double(), 1).to(y.dtype).double())


def test_reduction_over_two_axes_with_nan():
    g = torch.Generator().manual_seed(5)
    for m, n in ((3, 5), (9, 17)):
        x = torch.randn(m, n, generator=g)
        assert all_max(x).item() == pytest.approx(x.max().item())
        x[m // 2, n - 1] = NAN
        assert torch.isnan(all_max(x)).item()


def test_online_softmax_with_nan_and_masked_tiles():
    """The online pass's running max folds with the NaN-propagating max too."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(6, 37, generator=g)
    x[2, 5] = NAN
    sched = dt.Schedule(grid=("i",), tile={"i": 2, "j": 8}, strategy={"j": "online"})
    k = dt.compile(softmax, sched)
    y = k(x, out=torch.full_like(x, -7.0))
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), 1), equal_nan=True, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
def test_arg_reductions_use_the_standard_index_fold(kind):
    """Ties to the first index, the first NaN wins, indices offset by the loop tile's start."""
    builder = dt.argmax if kind == "argmax" else dt.argmin

    @dt.algorithm
    def arg(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return builder(X[i, j], over=j)[i]
    x = torch.tensor([[0, 1, 1, 0, 1, -1, 1, 0, 0, 1, 0, 0, 0, -1, 0, 1, 0, 0, 1],
                      [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NAN, 1, NAN, -1, 0, 0, 0],
                      [0] * 18 + [-2 if kind == "argmin" else 2]], dtype=torch.float32)
    for sched in (WHOLE, LOOP):
        k = dt.compile(arg, sched)
        y = k(x, out=torch.full((3,), -5, dtype=torch.int64))
        expect = x.double().argmax(1) if kind == "argmax" else x.double().argmin(1)
        assert torch.equal(y, expect), (y, expect)
        src = k.source_for(x)
        assert f"tl.standard._{kind}_combine_tie_break_left" in src
        # the loop merges its tiles' (value, index) pairs with the kind's own combine
        assert (f"def _{kind}_combine" in src) == (sched is LOOP)


def test_float64_matmul_runs_on_tl_dot_on_the_interpreter_only():
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(37, 45, generator=g, dtype=torch.float64), torch.randn(45, 29, generator=g, dtype=torch.float64)
    k = dt.compile(matmul, dt.Schedule(tile={"i": 16, "j": 16, "k": 16}, grid=("i", "j")))
    y = k(a, b, out=torch.full((37, 29), NAN, dtype=torch.float64))
    torch.testing.assert_close(y, a @ b, rtol=1e-12, atol=1e-12)
    assert "out_dtype=tl.float64" in k.source_for(a, b)
    assert "tl.dot" not in _gpu_source(matmul, k, (a, b))


def _gpu_source(alg, k, args) -> str:
    """The GPU module of ``k``'s call on ``args``, planned and printed on the CPU."""
    b = alg.bind(args)
    sched = k.complete(b)
    from dtriton.backends import default_backend
    return default_backend().render(plan_program(alg, sched, b, call_spec(alg, b, args, interpret=False)))[0]


def test_gpu_kernels_keep_their_own_combines_and_print_only_used_helpers():
    x = torch.randn(5, 37)
    k = dt.compile(softmax, WHOLE)
    gpu = _gpu_source(softmax, k, (x,))
    assert "_max_combine, keep_dims=True" in gpu and "tl.standard" not in gpu
    assert "def _min_combine" not in gpu and "def _round_bf16" not in gpu
    helpers = [n for n in re.findall(r"^def (\w+)\(", gpu, flags=re.M) if n.startswith("_")]
    assert helpers == ["_max_combine", "_sum_combine"]
    assert all(gpu.count(f"{n}") >= 2 for n in helpers)   # defined and called
    interp = k.source_for(x)
    assert "def _" not in interp   # no helper at all: every fold is a standard one
    assert "def _round_bf16" in k.source_for(x.bfloat16())


def test_printed_comments_are_not_cut():
    @dt.algorithm
    def deep(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        v = X[i, j]
        for _ in range(9):
            v = dt.exp(v * 0.5 + 1.0)
        return dt.sum(v, over=j)[i]
    src = dt.compile(deep).source_for(torch.randn(3, 5))
    assert "…" not in src and src.count("exp(") >= 18


def _gpu_schedule(alg, args) -> dt.Schedule:
    """The schedule the heuristic picks for ``args`` on a GPU (the binding is told it is on CUDA)."""
    from dtriton.schedule import complete_schedule
    b = alg.bind(args)
    b.device = torch.device("cuda")
    return complete_schedule(alg, None, b)


def test_interpreter_heuristic_gives_few_large_programs():
    from dtriton.schedule import complete_schedule
    x = torch.randn(64, 1000)
    s = complete_schedule(softmax, None, softmax.bind((x,)))
    assert s.tile["i"] == 64 and s.strategy["j"] == "whole"      # one program (the GPU: one row each)
    assert _gpu_schedule(softmax, (x,)).tile["i"] == 1
    g = torch.randn(300, 300)
    s = complete_schedule(gelu_like, None, gelu_like.bind((g,)))
    assert s.tile["i"] * s.tile["j"] == 65536


@dt.algorithm
def gelu_like(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X[i, j] * dt.sigmoid(1.702 * X[i, j]))[i, j]


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy"])
def test_gpu_row_schedules_still_run_on_the_interpreter(name):
    """The interpreter's own heuristic no longer takes one row per program, so the GPU's row
    schedules (scalar row index, whole row) are run here explicitly, at odd sizes."""
    from dtriton import library
    alg = getattr(library, name)
    g = torch.Generator().manual_seed(8)
    n = 1031   # wide enough for one row per program on the GPU
    x = torch.randn(5, n, generator=g)
    args = {"layer_norm": (x, torch.randn(n, generator=g), torch.randn(n, generator=g)),
            "rms_norm": (x, torch.randn(n, generator=g)),
            "cross_entropy": (x, torch.randint(0, n, (5,), generator=g))}.get(name, (x,))
    sched = _gpu_schedule(alg, args)
    assert sched.tile.get("i") == 1
    y = dt.compile(alg, sched)(*args)
    torch.testing.assert_close(y.double(), alg.reference(*args).double(), rtol=1e-5, atol=1e-5)


def test_cpu_speed_script_runs():
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "bench" / "cpu_speed.py"), "--only", "row_sum", "--repeat", "1"],
                         capture_output=True, text=True, timeout=300, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root / "src")})
    assert out.returncode == 0, out.stderr
    assert "row_sum 256x256 fp32" in out.stdout
