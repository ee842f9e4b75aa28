"""The derived attention backward's kernels (issue 15): FlashAttention-2 shaped tiles, no
per-step transposes or per-element divisions, gradients against float64 autograd.

Plans for the GPU are made here (the H200 heuristic; nothing runs); numeric tests run on the
interpreter in fp16 (the backward's dots take fp16 operands) at odd sizes, causal masks
straddling tiles.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import dtriton as dt
from conftest import randn
from dtriton.backends import default_backend
from dtriton.grad import augmented_forward, saved_statistics
from dtriton.ir import Binary, Load, reciprocal_divisors, walk
from dtriton.library import attention, causal_attention, softmax
from dtriton.plan.callspec import call_spec
from dtriton.plan.decide import plan_program

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")


def _backward(causal: bool):
    alg = causal_attention if causal else attention
    ga = dt.grad(alg, save=saved_statistics(alg))
    (bwd,) = ga.algorithms
    return alg, bwd


def _gpu_program(bwd, D: int, S: int = 2048, user: dt.Schedule | None = None):
    """The backward's program as a CUDA call at B4 H16 S D (fp16, statistics saved in fp16) plans
    it under the heuristic completing ``user``."""
    e = dict(dtype=torch.float16, device="meta")
    sizes = {"B": 4, "H": 16, "S": S, "T": S, "D": D}
    args = [torch.empty(*[sizes[d] for d in p.dims], **e) if hasattr(p, "dims") else D ** -0.5 for p in bwd.params]
    b = dataclasses.replace(bwd.bind(args), device=torch.device("cuda"))
    sched = dt.compile(bwd, user).complete(b)
    return plan_program(bwd, sched, b, call_spec(bwd, b, args, False))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", [64, 128])
def test_backward_dots_follow_the_program_layout(causal, D):
    """dK/dV kernel (key tiles on the grid): every dot is [key, .] (the scores come out as
    [key, query] tiles, dV accumulates [key, e]); dQ kernel: every dot is [query, .]. The loops'
    values are 2-D (no head axis), nothing is transposed per step and no tile is divided. (The
    two-kernel form: dQ placed "fuse"; tests/test_attention_bwd_atomic.py has the atomic one.)"""
    _, bwd = _backward(causal)
    prog = _gpu_program(bwd, D, user=dt.Schedule(stages={"d_Q": dt.StageSchedule(place="fuse")}))
    (kv,) = [k for k in prog.kernels if len(k.stores) == 2]
    (dq,) = [k for k in prog.kernels if k.stores[0].target == "out0"]
    assert len(kv.dots) == 4 and {d.m for d in kv.dots.values()} == {"j"}
    assert len(dq.dots) == 3 and {d.m for d in dq.dots.values()} == {"i"}
    assert len(kv.trans_loads) == 2 and len(dq.trans_loads) == 1   # dO and Q; K: one load, one tl.trans
    # causal: dK/dV loop over the queries from the diagonal, dQ over the keys up to it (mask bounds)
    assert [lb.axis for lb in kv.bounds.values()] == (["i"] if causal else [])
    assert [lb.axis for lb in dq.bounds.values()] == (["j"] if causal else [])
    assert all(lb.unmasked for lb in list(kv.bounds.values()) + list(dq.bounds.values()))
    src, _ = default_backend().render(prog)
    for name in (kv.name, dq.name):
        body = src.split(f"def {name}(")[1].split("\n@_jit")[0]
        loop = body.split("    for ")[1].split("\n    d_")[0]
        assert "tl.permute" not in loop and "None, None" not in loop, loop
        assert loop.count("tl.trans(") == (2 if name == kv.name else 1)
        assert "tl.exp2(" in loop and "tl.exp(" not in loop   # the scale * log2(e) folded, the saved max per row
        divisions = [ln for ln in loop.splitlines() if " / " in ln]
        assert all("1.0 / " in ln or "buf_" in ln for ln in divisions), divisions   # per-row only


def test_reciprocal_divisors_rewrites_per_row_divisors_of_floats_only():
    X = torch.empty(3, 5, dtype=torch.float16)
    out = reciprocal_divisors(softmax, lambda t: True)
    divs = [n for n in walk([o.expr for o in out.outputs]) if isinstance(n, Binary) and n.op == "div"]
    assert divs and all(not n.a.axes or len(n.b.axes) < len(n.a.axes) for n in divs)
    assert all(isinstance(n.a, dt.ir.Const) for n in divs)   # only the 1 / row sum is left
    assert reciprocal_divisors(softmax, lambda t: False) is softmax   # an integer divisor keeps its quotient
    del X


@dt.algorithm
def int_ratio(A: dt.Tensor["M", "N"], n: dt.Tensor["M"]):
    i, j = dt.axes("i j")
    return (A[i, j] / n[i])[i, j]


def test_integer_division_keeps_exact_quotients_in_16_bit_calls():
    A = torch.randint(0, 50, (7, 9)) * 3
    n = torch.full((7,), 3)
    out = dt.compile(int_ratio)(A.to(torch.float16), n)   # n is an integer tensor: not rewritten
    torch.testing.assert_close(out.double(), (A / 3).double(), rtol=0, atol=0)
    loads = [x for x in walk([o.expr for o in int_ratio.outputs]) if isinstance(x, Load)]
    assert {x.tensor.name for x in loads} == {"A", "n"}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("S, T", [(263, 263), (300, 257)])
def test_flash_backward_gradients_match_float64(causal, S, T, gen):
    """The three kernels (per-query term, dK/dV, dQ) on odd sizes, fp16 as in training: the key
    and query tiles straddle the causal diagonal and the sequence ends."""
    if causal and S != T:
        pytest.skip("causal_attention takes one sequence length")
    alg, bwd = _backward(causal)
    aug, names = augmented_forward(alg, saved_statistics(alg))
    Q = randn(1, 2, S, 16, gen=gen, dtype=torch.float16)
    K, V = (randn(1, 2, T, 16, gen=gen, dtype=torch.float16) for _ in range(2))
    dO = randn(1, 2, S, 16, gen=gen, dtype=torch.float16)
    res = dt.compile(aug)(Q, K, V, 0.25)
    k = dt.compile(bwd)
    got = k(Q, K, V, 0.25, dO, *res[1:])
    assert k.launch_count == 3
    x64 = [t.double().requires_grad_() for t in (Q, K, V)]
    want = torch.autograd.grad(alg.reference(*x64, 0.25), x64, dO.double())
    for g, w in zip(got, want):
        assert torch.isfinite(g).all()
        assert ((g.double() - w).norm() / w.norm()).item() < 3e-3


def test_gpu_space_of_the_backward_searches_its_kernels_tiles_warps_and_stages():
    """Space.derive on the derived backward (GPU target): the two accumulating kernels' tiles (dK
    and dV tied by '+'), warps, stages, where dQ is added; nothing that would materialise a score
    stage."""
    from dtriton.tune import Space
    _, bwd = _backward(False)
    args = [torch.empty(2, 2, 512, 64, dtype=torch.float16) if hasattr(p, "dims") else 0.125 for p in bwd.params]
    args = [a[..., 0] if hasattr(p, "dims") and len(p.dims) == 3 else a for p, a in zip(bwd.params, args)]
    sp = Space.derive(bwd, args, target="gpu")
    dims = dict(sp.dimensions())
    assert set(dims) == {"stage_tile.out0.i", "stage_tile.out0.j", "stage_tile.out1+out2.i", "stage_tile.out1+out2.j",
                         "num_warps", "num_stages", "access", "place.d_Q"}   # access: pointer or TMA (a Hopper device)
    assert sorted(dims["place.d_Q"]) == ["atomic", "auto"]   # dQ in the dK/dV kernel's loop, or a second kernel
    b = dataclasses.replace(bwd.bind(args), device=torch.device("cuda"))
    base = dt.compile(bwd).complete(b)
    s = sp.schedule_for({"stage_tile.out1+out2.j": 64, "stage_tile.out1+out2.i": 16, "num_stages": 3}, base, bwd)
    assert s.stage("out1").tile == s.stage("out2").tile == {"i": 16, "j": 64} and s.num_stages == 3
    prog = plan_program(bwd, s, b, call_spec(bwd, b, args, False))
    assert len(prog.kernels) == 3


def test_explore_runs_tied_stage_tiles_of_the_backward(gen):
    """dt.explore over the backward's tied stage tiles on the interpreter: each candidate is
    checked against the reference and keeps 3 kernels."""
    from dtriton.tune import Space
    alg, bwd = _backward(False)
    aug, _ = augmented_forward(alg, saved_statistics(alg))
    Q, K, V, dO = (randn(1, 1, 260, 16, gen=gen, dtype=torch.float16) for _ in range(4))
    res = dt.compile(aug)(Q, K, V, 0.25)
    args = (Q, K, V, 0.25, dO, *res[1:])
    sp = Space(stage_tile={"out1+out2.i": [16, 32]})
    r = dt.explore(bwd, args, space=sp, strategy="exhaustive", store=False, progress=False, budget=600)
    ok = [c for c in r.table if c["status"] == "ok"]   # the heuristic (i: 64) and the new points
    assert r.best is not None and {c["schedule"].stage("out1").tile["i"] for c in ok} == {16, 32, 64}, r.table
    assert all(c["schedule"].stage("out1").tile == c["schedule"].stage("out2").tile for c in ok)


def test_bench_attention_bwd_explore_dry_run_feeds_grad_bench(tmp_path):
    """bench/attention_bwd.py explore --dry-run writes the best backward schedule under
    grad_bench's case name; it plans and runs as a backward schedule of compile_autograd."""
    import json
    from conftest import run_bench
    run_bench(["bench/attention_bwd.py", "explore", "--dry-run", "--only", "d16"], tmp_path)
    data = json.loads((tmp_path / "out" / "attention_bwd_explored.json").read_text())
    (row,) = data["rows"]
    assert row["ok"] >= 2 and set(data["schedules"]) == {"attention_d16"}
    dk = dt.compile_autograd(attention, backward_schedules=dt.Schedule.from_dict(data["schedules"]["attention_d16"]))
    q, k, v = (randn(1, 1, 260, 16).requires_grad_() for _ in range(3))
    g = torch.autograd.grad(dk(q, k, v, 0.25), [q, k, v], torch.ones(1, 1, 260, 16))
    x64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(attention.reference(*x64, 0.25), x64, torch.ones(1, 1, 260, 16, dtype=torch.float64))
    for a, b in zip(g, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-3, atol=1e-4)


@dt.algorithm
def shifted(X: dt.Tensor["M", "N"], m: dt.Tensor["M"], c: float):
    i, j = dt.axes("i j")
    return dt.exp(X[i, j] * c - m[i])[i, j], dt.exp(X[i, j] - m[i])[i, j]


def test_base2_shifted_exponents_only_where_the_factor_folds():
    from dtriton.ir import Unary, base2_shifted_exponents
    out = base2_shifted_exponents(shifted)
    ops = [[n.op for n in walk([o.expr]) if isinstance(n, Unary)] for o in out.outputs]
    assert ops == [["exp2"], ["exp"]]   # X * c takes log2(e) into c; a bare X would need a multiply per element
    X, m = randn(5, 7, dtype=torch.float16), randn(5, dtype=torch.float16)
    got = dt.compile(shifted)(X, m, 0.5)
    for g, w in zip(got, shifted.reference(X.double(), m.double(), 0.5)):
        torch.testing.assert_close(g.double(), w, rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", [64, 128])
def test_heuristic_defaults_measured_on_the_h200_and_launch_options_kept(causal, D):
    """64 x 64 tiles at D64, 4 warps, 3 stages (session 8's hand-written kernels on the H200, and the
    causal sweep of session 4); at D128 128 x 64 at 8 warps and 2 stages, under a causal mask 64 x 32
    at 4 warps and 3 stages. A schedule giving only launch options keeps that layout."""
    _, bwd = _backward(causal)
    e = dict(dtype=torch.float16, device="meta")
    sizes = {"B": 4, "H": 16, "S": 2048, "T": 2048, "D": D}
    args = [torch.empty(*[sizes[d] for d in p.dims], **e) if hasattr(p, "dims") else 0.125 for p in bwd.params]
    b = dataclasses.replace(bwd.bind(args), device=torch.device("cuda"))
    s = dt.compile(bwd).complete(b)
    big, small = (64, 64) if D == 64 else (64, 32) if causal else (128, 64)
    assert (s.num_warps, s.num_stages) == ((8, 2) if D == 128 and not causal else (4, 3))
    assert s.stage("out1").tile == {"j": big, "i": small} and s.stage("out0").tile == {"i": big, "j": small}
    w8 = dt.compile(bwd, dt.Schedule(num_warps=8)).complete(b)
    assert w8 == s.replace(num_warps=8)
