"""Saturating casts (round to nearest even, clamp, NaN) and per-token quantisation to int8 and fp8
as one algorithm, against torch on odd sizes (the interpreter)."""

import json
from pathlib import Path

import pytest
import torch

import dtriton as dt
from conftest import run_bench
from dtriton.backends import default_backend
from dtriton.plan import call_spec, plan_program
from dtriton.schedule.heuristics import complete_schedule

E4 = torch.float8_e4m3fn

EDGES = [0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -2.5, 3.49, 126.5, 127.49, 127.5, 128.0, -128.5, -129.0, 254.5, 255.5,
         1e10, -1e10, float("inf"), float("-inf"), float("nan"), 32767.5, -32768.5, 2.0 ** 31, -(2.0 ** 31),
         8388609.0, -8388607.5]


def saturated(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The saturating cast by its definition: NaN -> 0, round half to even, clamp."""
    info = torch.iinfo(dtype)
    return torch.nan_to_num(x.double(), nan=0.0).round().clamp(info.min, info.max).to(dtype)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32])
@pytest.mark.parametrize("src", [torch.float32, torch.float64])
def test_saturating_integer_cast(dtype, src):
    @dt.algorithm
    def q(X: dt.Tensor["M", "N"], s: float):
        i, j = dt.axes("i j")
        return dt.cast(X[i, j] * s, dtype, saturate=True)[i, j]
    g = torch.Generator().manual_seed(3)
    x = torch.cat([torch.tensor(EDGES), torch.randn(97, generator=g) * 300]).to(src).reshape(1, -1)
    y = dt.compile(q)(x, 1.0)
    exact = x.to(torch.float32).double() if src == torch.float32 else x   # what the kernel computes on
    assert y.dtype == dtype and torch.equal(y, saturated(exact, dtype))
    assert torch.equal(y, q.reference(x, 1.0))


def test_saturating_cast_of_integers_clamps():
    @dt.algorithm
    def q(X: dt.Tensor["N"]):
        i, = dt.axes("i")
        return dt.cast(X[i] * 3, torch.int8, saturate=True)[i]
    x = torch.tensor([-100, -43, -42, 0, 42, 43, 100], dtype=torch.int32)
    assert torch.equal(dt.compile(q)(x), (x.long() * 3).clamp(-128, 127).to(torch.int8))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_saturating_16bit_cast(dtype):
    @dt.algorithm
    def q(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.cast(X[i, j], dtype, saturate=True)[i, j]
    x = torch.tensor([[1e5, -1e5, 65504.0, 65519.0, 65520.0, float("inf"), float("-inf"), float("nan"), 1.0 / 3,
                       3e38, -3.4e38]])
    big = torch.finfo(dtype).max
    y = dt.compile(q)(x)
    ref = torch.where(x.isnan(), x, x.clamp(-big, big)).to(dtype)
    assert torch.equal(y.isnan(), ref.isnan()) and torch.equal(y[~y.isnan()], ref[~ref.isnan()])
    assert not y.isinf().any()


@pytest.mark.parametrize("m, n", [(1, 1), (5, 33), (17, 130)])
def test_per_token_int8_quantisation(m, n):
    """Row absmax -> scale -> int8 values and the scale, one algorithm."""
    @dt.algorithm
    def quantise(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        scale = dt.maximum(dt.max(dt.abs(X[i, j]), over=j), 1e-8) / 127.0
        return dt.cast(X[i, j] / scale, torch.int8, saturate=True)[i, j], scale[i]
    g = torch.Generator().manual_seed(m * n)
    x = torch.randn(m, n, generator=g) * torch.logspace(-3, 3, m)[:, None]
    x[0, 0] = 0.0
    q, s = dt.compile(quantise)(x)
    ref_s = (x.abs().amax(1).clamp(min=1e-8) / 127.0)
    assert q.dtype == torch.int8 and s.dtype == torch.float32
    assert torch.allclose(s, ref_s, rtol=1e-6)
    ref_q = saturated(x.double() / s.double()[:, None], torch.int8)
    # the kernel divides in fp32: a quotient may land on the other side of a .5 tie
    assert (q.long() - ref_q.long()).abs().max() <= 1 and (q != ref_q).float().mean() < 0.02
    assert torch.equal(q.abs().amax(1).long(), torch.full((m,), 127)) or m * n == 1
    dq = q.double() * s.double()[:, None]
    assert torch.allclose(dq, x.double(), atol=0, rtol=0) or (dq - x.double()).abs().max() <= s.max() * 0.5 + 1e-6


def test_per_token_fp8_quantisation_then_scaled_matmul():
    """Quantise X per row to e4m3 (scale so the row's absmax maps to 448), then an fp8 matmul with
    the row scales and a per-tensor weight scale: close to the float64 product."""
    @dt.algorithm
    def quantise(X: dt.Tensor["M", "K"]):
        i, k = dt.axes("i k")
        scale = dt.maximum(dt.max(dt.abs(X[i, k]), over=k), 1e-12) / 448.0
        return dt.cast(X[i, k] / scale, E4, saturate=True)[i, k], scale[i]

    @dt.algorithm
    def linear(Q: dt.Tensor["M", "K"], W: dt.Tensor["N", "K"], sq: dt.Tensor["M"], sw: float):
        i, j, k = dt.axes("i j k")
        return (sq[i] * sw * dt.sum(Q[i, k] * W[j, k], over=k))[i, j]
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(23, 96, generator=g), torch.randn(40, 96, generator=g)
    q, s = dt.compile(quantise)(x)
    assert q.dtype == E4 and q.float().abs().amax(1).eq(448).all()
    ref_q = (x.double() / s.double()[:, None]).clamp(-448, 448).to(E4)
    assert (q.float() != ref_q.float()).float().mean() < 0.02   # fp32 quotients near ties may differ
    sw = float(w.abs().max()) / 448.0
    wq = (w / sw).to(E4)
    y = dt.compile(linear)(q, wq, s, sw)
    ref = x.double() @ w.double().T
    assert (y.double() - ref).abs().max() < 0.1 * ref.abs().max()
    exact = s.double()[:, None] * sw * (q.double() @ wq.double().T)
    assert torch.allclose(y.double(), exact, rtol=1e-5, atol=1e-4)


def test_bench_narrow_dry_run(tmp_path):
    """bench/narrow.py on the interpreter: every row checked and correct, the table printed last."""
    out = run_bench(["bench/narrow.py", "--dry-run"], tmp_path)
    rows = json.loads((tmp_path / "out" / "narrow.json").read_text())["rows"]
    assert {r["case"] for r in rows} == {"fp8 rowwise", "fp8 tensorwise", "fp8 block", "int8", "int4", "quant fp8"}
    assert all(r["ok"] for r in rows if r["impl"] != "torch._scaled_mm blockwise"), rows
    assert out.rstrip().splitlines()[-1].startswith("quant fp8: dtriton is")


def test_readme_narrow_example_is_the_tested_snippet():
    """The README's narrow-types block is the start of docs/snippets/narrow.py (run by test_docs)."""
    root = Path(__file__).resolve().parents[1]
    block = (root / "README.md").read_text(encoding="utf-8").split("## Narrow types", 1)[1]
    block = block.split("```python\n", 1)[1].split("```", 1)[0]
    assert (root / "docs" / "snippets" / "narrow.py").read_text(encoding="utf-8").startswith(block)


def test_gradient_recomputes_the_saturating_cast():
    """A derived backward that recomputes a saturating cast keeps it saturating (dW = cast(X))."""
    @dt.algorithm
    def f(X: dt.Tensor["M", "N"], W: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.sum(dt.cast(X[i, j], torch.float16, saturate=True) * W[i, j], over=j)[i]
    x = torch.tensor([[1e5, -2.0, 3.0], [70000.0, 0.5, -1e6]])
    w, g = torch.randn(2, 3), torch.randn(2)
    bwd = dt.grad(f, "W")
    (dw,) = bwd.reference(x, w, g)
    expect = g[:, None] * x.clamp(-65504, 65504).half().float()
    assert torch.isfinite(dw).all() and torch.allclose(dw, expect)


def gpu_source(alg, args) -> str:
    """The module dtriton prints for ``args`` on the GPU (planned here, nothing launched)."""
    b = alg.bind(args)
    b.device = torch.device("cuda")
    sched = complete_schedule(alg, None, b)
    return default_backend().render(plan_program(alg, sched, b, call_spec(alg, b, args, interpret=False)))[0]


@pytest.mark.parametrize("dtype, saturate, native", [(E4, False, True), (E4, True, True),
                                                     (torch.float8_e5m2, True, True), (torch.float8_e5m2, False, False)])
def test_gpu_fp8_casts_use_the_hardware_conversion_where_it_is_the_cast(dtype, saturate, native):
    """cvt.rn.satfinite is e4m3fn's cast and every saturating one; e5m2's plain cast keeps infinities,
    so it keeps the helpers (the interpreter always does)."""
    @dt.algorithm
    def q(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.cast(X[i, j] * 2.0, dtype, saturate=saturate)[i, j]
    src = gpu_source(q, (torch.zeros(64, 64),))
    assert ("_round_fp8(" not in src and "_encode_fp8(" not in src) == native
    assert "_round_fp8(" in dt.compile(q).source_for(torch.zeros(4, 4))
