"""The derived attention backward's per-score arithmetic with the saving forward's fp32 row
statistics (issue 15): fp32 row statistics do not turn off the 16-bit terms
(:func:`dtriton.plan.decide.sixteen_bit_terms`), a per-row factor of a dot joins the computed side
(:mod:`dtriton.plan.dots`: the probabilities stay a 16-bit operand), and the quotient derivative's
two divisions by the row sum share one (:func:`dtriton.ir.common_divisors`) in the kernel that loops
over the rows.

Numeric tests run on the interpreter against float64 (autograd of the reference, or the reference
evaluator) with NaN-poisoned outputs at odd sizes; GPU plans are made on this machine (nothing runs).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import dtriton as dt
from conftest import randn
from dtriton.backends import default_backend
from dtriton.grad import augmented_forward, saved_statistics
from dtriton.ir import Binary, common_divisors, walk
from dtriton.library import attention, causal_attention
from dtriton.plan.callspec import call_spec
from dtriton.plan.decide import plan_program, sixteen_bit_terms

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")


def _backward(causal: bool):
    alg = causal_attention if causal else attention
    names = saved_statistics(alg)
    (bwd,) = dt.grad(alg, save=names).algorithms
    aug, _ = augmented_forward(alg, names)
    return alg, aug, bwd, names


def _gpu_program(causal: bool, D: int, tiles=None):
    """(binding, program) of the backward planned for a CUDA call at B4 H16 S=T=2048, its saved
    row statistics in the dtypes the saving forward gives them (fp32 row max and sum)."""
    _, aug, bwd, names = _backward(causal)
    sizes = {"B": 4, "H": 16, "S": 2048, "T": 2048, "D": D}
    e = dict(dtype=torch.float16, device="meta")
    fwd = [torch.empty(*[sizes[d] for d in p.dims], **e) if hasattr(p, "dims") else 0.125 for p in aug.params]
    saved = {f"saved_{n}": d for n, d in zip(names, aug.bind(fwd).out_dtypes[1:])}
    args = [torch.empty(*[sizes[d] for d in p.dims], dtype=saved.get(p.name, torch.float16), device="meta")
            if hasattr(p, "dims") else 0.125 for p in bwd.params]
    b = dataclasses.replace(bwd.bind(args), device=torch.device("cuda"))
    sched = dt.compile(bwd).complete(b)
    if tiles is not None:
        st = dict(sched.stages)
        for o in ("out1", "out2"):
            st[o] = st[o].replace(tile={"i": tiles[0], "j": tiles[1]})
        sched = sched.replace(stages=st)
    return b, plan_program(bwd, sched, b, call_spec(bwd, b, args, False))


def test_fp32_row_statistics_keep_sixteen_bit_terms():
    """The saving forward keeps the row max and sum in fp32; the backward's 4-D inputs are fp16, so
    its terms are still consumed in 16 bits; an fp32 4-D input turns them off."""
    _, aug, bwd, names = _backward(False)
    b, _ = _gpu_program(False, 64)
    assert b.dtypes["saved_lse_max0_sum2"] == torch.float32 and b.dtypes["Q"] == torch.float16
    assert sixteen_bit_terms(bwd, b)
    b32 = dataclasses.replace(b, dtypes=dict(b.dtypes, V=torch.float32))
    assert not sixteen_bit_terms(bwd, b32)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("tiles", [None, (64, 64)], ids=["heuristic", "64x64"])
def test_gpu_dkdv_kernel_takes_sixteen_bit_probabilities(causal, tiles):
    """With the fp32 log-sum-exp statistic: base-2 exponentials, no fp32 (tf32) dot, every dot of the
    dK/dV kernel on 16-bit operands; its loop reads two row vectors a step (the statistic and the
    row sum of dO * O), divides nothing, multiplies no score by a per-row value (the probabilities
    are ``exp2(s * c - lse * log2(e))``); the dQ kernel (its rows the grid's) keeps 16-bit dots."""
    _, prog = _gpu_program(causal, 64, tiles)
    src, _ = default_backend().render(prog)
    assert "input_precision" not in src and "tl.exp(" not in src and "tl.exp2(" in src
    kv = [k for k in prog.kernels if k.grid[-1] == "j" and k.dots]
    assert len(kv) == 1
    assert all(d.operand_dtype == "float16" for d in kv[0].dots.values())
    body = src.split(f"def {kv[0].name}(")[1].split("\n@_jit")[0]
    loop = body.split("    for i0 in ")[1]
    loads = [ln for ln in loop.splitlines() if "tl.load(" in ln and "dot operand" not in ln]
    assert len(loads) == 2 and "saved_lse_max0_sum2_ptr" in "".join(loads), loads
    assert " / " not in loop and "saved_sum2" not in src and "saved_max0" not in src
    exp_arg = loop.split("tl.exp2(")[1].split(")")[0]
    assert " * " not in [ln for ln in loop.splitlines() if f"{exp_arg} = " in ln][0]
    dq = [k for k in prog.kernels if k.grid[-1] == "i" and k.dots]
    assert len(dq) == 1 and all(d.operand_dtype == "float16" for d in dq[0].dots.values())


def _quotient_alg():
    """``out[i, j] = (A[i, j] / y[i] - B[i] / (y[i] * y[i])) * E[i, j]`` summed over j, and the same
    term as a second output over (i, j)."""
    @dt.algorithm
    def quot(A: dt.Tensor["N", "M"], B: dt.Tensor["N"], y: dt.Tensor["N"], E: dt.Tensor["N", "M"]):
        i, j = dt.axes("i:N j:M")
        t = (A[i, j] / y[i] - B[i] / (y[i] * y[i])) * E[i, j]
        s = dt.sum(t, over=j)
        return s[i], t[i, j]
    return quot


def test_common_divisors_rewrites_only_wanted_outputs_and_keeps_values(gen):
    """The rewrite fires where wanted (one division by ``y`` per term instead of two), leaves the other
    output's nodes alone, and both algorithms evaluate to the same values in float64."""
    alg = _quotient_alg()
    new = common_divisors(alg, lambda out, y: out == alg.outputs[0].name)

    def divs(expr):
        return sum(isinstance(n, Binary) and n.op == "div" for n in walk([expr]))
    assert divs(new.outputs[0].expr) == 2 and divs(alg.outputs[0].expr) == 2
    assert not any(isinstance(n, Binary) and n.op == "mul" and n.a is n.b for n in walk([new.outputs[0].expr]))
    assert new.outputs[1].expr is alg.outputs[1].expr
    assert common_divisors(alg, lambda out, y: False) is alg
    N, M = 7, 13
    args = [randn(N, M, gen=gen, dtype=torch.float64), randn(N, gen=gen, dtype=torch.float64),
            randn(N, gen=gen, dtype=torch.float64) + 3.0, randn(N, M, gen=gen, dtype=torch.float64)]
    for a, b in zip(alg.reference(*args), new.reference(*args)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_common_divisors_compiled_matches_float64(gen):
    """The rewritten algorithm compiled (fp16 2-D inputs, fp32 per-row inputs: the 16-bit terms) at
    odd sizes against float64, outputs poisoned."""
    alg = _quotient_alg()
    N, M = 37, 29
    A, E = (randn(N, M, gen=gen, dtype=torch.float16) for _ in range(2))
    B = randn(N, gen=gen)
    y = randn(N, gen=gen).abs() + 1.0
    outs = (torch.full((N,), float("nan"), dtype=torch.float32), torch.full((N, M), float("nan"), dtype=torch.float32))
    got = dt.compile(alg)(A, B, y, E, out=outs)
    want = alg.reference(A.double(), B.double(), y.double(), E.double())
    for g, w in zip(got, want):
        assert not torch.isnan(g).any()
        torch.testing.assert_close(g.double(), w, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("causal,S,T,D", [(False, 37, 29, 16), (True, 41, 41, 24), (False, 1, 19, 16)])
def test_backward_with_fp32_statistics_matches_float64(causal, S, T, D, gen):
    """The derived backward on the interpreter, fp16 Q/K/V/dO, the saving forward's fp32 row
    statistics, odd S and T, a head dim that is no power of two, against float64 autograd."""
    alg, aug, bwd, _ = _backward(causal)
    Q = randn(1, 2, S, D, gen=gen, dtype=torch.float16)
    K, V = (randn(1, 2, T, D, gen=gen, dtype=torch.float16) for _ in range(2))
    dO = randn(1, 2, S, D, gen=gen, dtype=torch.float16)
    res = dt.compile(aug)(Q, K, V, 0.3)
    assert res[1].dtype == torch.float32
    outs = tuple(torch.full_like(t, float("nan")) for t in (Q, K, V))
    got = dt.compile(bwd)(Q, K, V, 0.3, dO, *res[1:], out=outs)
    x64 = [t.double().requires_grad_() for t in (Q, K, V)]
    want = torch.autograd.grad(alg.reference(*x64, 0.3), x64, dO.double())
    for g, w in zip(got, want):
        assert not torch.isnan(g).any()
        assert ((g.double() - w).norm() / w.norm()).item() < 3e-3
