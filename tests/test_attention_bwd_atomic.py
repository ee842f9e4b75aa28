"""dQ of the derived attention backward added with atomics inside the dK/dV kernel (issue 15):
``StageSchedule(place="atomic")`` on the dQ stage, planned by :mod:`dtriton.plan.loop_stores`.

Numeric tests run on the interpreter in fp16 against float64 autograd of the reference, with
NaN-poisoned outputs, at odd sizes whose key and query tiles straddle the sequence ends and the
causal diagonal, head dims 16 and 24 (a masked head block). Plans for the GPU are made on this
machine (nothing runs).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import dtriton as dt
from conftest import randn
from dtriton.backends import default_backend
from dtriton.errors import ScheduleError
from dtriton.grad import augmented_forward, saved_statistics
from dtriton.library import attention, causal_attention, softmax
from dtriton.plan.callspec import call_spec
from dtriton.plan.decide import plan_program

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")

ATOMIC = dt.Schedule(stages={"d_Q": dt.StageSchedule(place="atomic")})
TWO_KERNELS = dt.Schedule(stages={"d_Q": dt.StageSchedule(place="fuse")})


def _backward(causal: bool):
    alg = causal_attention if causal else attention
    (bwd,) = dt.grad(alg, save=saved_statistics(alg)).algorithms
    return alg, bwd


def _run(causal, S, T, D, sched, gen, tiles=None):
    """(gradients, float64 gradients, kernel) of the backward under ``sched`` (``tiles``: the dK/dV
    kernel's (query, key) tiles, set on the heuristic's complete schedule)."""
    alg, bwd = _backward(causal)
    aug, _ = augmented_forward(alg, saved_statistics(alg))
    Q = randn(1, 2, S, D, gen=gen, dtype=torch.float16)
    K, V = (randn(1, 2, T, D, gen=gen, dtype=torch.float16) for _ in range(2))
    dO = randn(1, 2, S, D, gen=gen, dtype=torch.float16)
    res = dt.compile(aug)(Q, K, V, 0.3)
    args = (Q, K, V, 0.3, dO, *res[1:])
    if tiles is not None:
        base = dt.compile(bwd, sched).complete(bwd.bind(args))
        st = dict(base.stages)
        for o in ("out1", "out2"):
            st[o] = st[o].replace(tile={"i": tiles[0], "j": tiles[1]})
        sched = base.replace(stages=st)
    k = dt.compile(bwd, sched)
    outs = tuple(torch.full_like(t, float("nan")) for t in (Q, K, V))
    got = k(*args, out=outs)
    x64 = [t.double().requires_grad_() for t in (Q, K, V)]
    want = torch.autograd.grad(alg.reference(*x64, 0.3), x64, dO.double())
    return got, want, k


def _errors(got, want):
    return [((g.double() - w).norm() / w.norm()).item() for g, w in zip(got, want)]


@pytest.mark.parametrize("causal, S, T, D, tiles", [
    (False, 263, 263, 16, None), (False, 300, 257, 24, None), (True, 263, 263, 16, None),
    (True, 263, 263, 24, (32, 64)), (True, 300, 300, 16, (64, 32)),
], ids=["full-263-d16", "full-300x257-d24", "causal-263-d16", "causal-263-d24-q32k64", "causal-300-d16-q64k32"])
def test_atomic_dq_matches_float64(causal, S, T, D, tiles, gen):
    """Three kernels (per-query term; dK, dV and dQ's atomic partial sums; dQ's finishing kernel)
    give the float64 gradients, every output written (poisoned with NaN first)."""
    got, want, k = _run(causal, S, T, D, ATOMIC, gen, tiles)
    assert k.launch_count == 3
    assert k.source.count("tl.atomic_add(") >= 1
    for g in got:
        assert torch.isfinite(g).all()
    assert max(_errors(got, want)) < 3e-3, _errors(got, want)


def test_two_kernel_dq_stays_available_and_agrees(gen):
    """A schedule setting only dQ's place keeps the rule's layout: "fuse" gives the second kernel
    over query tiles (no atomics) and the same gradients."""
    got, want, k = _run(True, 263, 263, 16, TWO_KERNELS, gen)
    assert k.launch_count == 3 and "tl.atomic_add(" not in k.source
    assert max(_errors(got, want)) < 3e-3


def _gpu_program(bwd, D, user=None):
    e = dict(dtype=torch.float16, device="meta")
    sizes = {"B": 4, "H": 16, "S": 2048, "T": 2048, "D": D}
    args = [torch.empty(*[sizes[d] for d in p.dims], **e) if hasattr(p, "dims") else D ** -0.5 for p in bwd.params]
    b = dataclasses.replace(bwd.bind(args), device=torch.device("cuda"))
    sched = dt.compile(bwd, user).complete(b)
    return sched, plan_program(bwd, sched, b, call_spec(bwd, b, args, False))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_plan_adds_dq_inside_the_dkdv_loop(causal):
    """At D64 under a schedule placing dQ "atomic" (and nothing else: the rule lays out the rest,
    64 x 64 tiles): the dK/dV kernel (grid b, h, key tiles) has a fifth dot whose partial sum is added with atomics into a zeroed fp32 buffer after each step of its
    loop over the queries, in every loop the causal bounds split it into; the dQ output's kernel
    only scales and casts (no dot, no loop)."""
    _, bwd = _backward(causal)
    sched, prog = _gpu_program(bwd, 64, ATOMIC)
    assert sched.stage("d_Q").place == "atomic" and sched.stage("out1").tile == {"i": 64, "j": 64}
    kv, fin = prog.kernels[1], prog.kernels[2]
    assert [st.target for st in kv.stores] == ["out1", "out2", "buf_d_Q"] and kv.grid == ["b", "h", "j"]
    (st,) = [st for st in kv.stores if st.in_loop]
    assert st.atomic and prog.buffers["buf_d_Q"].zero and prog.buffers["buf_d_Q"].dtype == "float32"
    (p,) = kv.passes
    assert kv.loop_stores == {"buf_d_Q": p.reductions} and p.loop_axes == ("i",)
    assert len(kv.dots) == 5 and not fin.dots and [s.target for s in fin.stores] == ["out0"]
    assert [lb.axis for lb in kv.bounds.values()] == (["i"] if causal else [])
    assert prog.verify() == []
    src, _ = default_backend().render(prog)
    body = src.split(f"def {kv.name}(")[1].split("\n@_jit")[0]
    loops = body.split("    for i0 in ")[1:]
    assert len(loops) == (2 if causal else 1)   # causal: the fully visible tiles, then the diagonal's
    for loop in loops:
        loop = loop.split("\n    d_")[0]
        assert loop.count("tl.atomic_add(buf_d_Q_ptr") == 1 and loop.count("tl.trans(") == 2   # dO, Q
    assert body.split("    for i0 in ")[0].count("tl.trans(") == 1   # K as [d, j]: once per program
    assert "tl.dot(" not in src.split(f"def {fin.name}(")[1].split("\n@_jit")[0]


@pytest.mark.parametrize("D", [64, 128])
def test_heuristic_keeps_the_second_kernel(D):
    """The rule keeps dQ in a kernel of its own by default (the atomic form measured no faster on
    the H200, schedule/grad_rules.py); a schedule placing it "atomic" gets it at every head dim."""
    _, bwd = _backward(False)
    sched, prog = _gpu_program(bwd, D)
    assert sched.stage("d_Q").place == "auto" and not any(k.loop_stores for k in prog.kernels)
    sched, prog = _gpu_program(bwd, D, ATOMIC)
    assert sched.stage("d_Q").place == "atomic" and prog.kernels[1].loop_stores


def test_atomic_place_is_refused_where_it_cannot_apply():
    """place="atomic" on a max stage, or on a sum no other kernel loops around, raises a
    ScheduleError naming the stage and the fix."""
    x = randn(5, 300)
    stages = {s.name: s for s in softmax.stages.values() if not s.is_output}
    mx = next(n for n, s in stages.items() if s.node.combiner.name == "max")
    sm = next(n for n, s in stages.items() if s.node.combiner.name == "sum")
    with pytest.raises(ScheduleError, match=rf"{mx}.*sums only.*materialize"):
        dt.compile(softmax, dt.Schedule(stages={mx: dt.StageSchedule(place="atomic")}))(x)
    with pytest.raises(ScheduleError, match=rf"{sm}.*place='atomic'.*no output's kernel.*materialize"):
        dt.compile(softmax, dt.Schedule(stages={sm: dt.StageSchedule(place="atomic")}))(x)


def test_repeated_training_steps_zero_the_dq_sums_each_time(gen):
    """dQ's fp32 sums start from zero at every call (the buffer is zeroed per call, also on the
    cached steady-state step of compile_autograd): three steps give the first step's gradients."""
    dk = dt.compile_autograd(attention, backward_schedules=ATOMIC)
    q, k, v = (randn(1, 2, 263, 16, gen=gen, dtype=torch.float16).requires_grad_() for _ in range(3))
    G = randn(1, 2, 263, 16, gen=gen, dtype=torch.float16)
    steps = [torch.autograd.grad(dk(q, k, v, 0.3), [q, k, v], G) for _ in range(3)]
    assert dk.launch_counts() == {"forward": 1, "backward": 3}
    x64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(attention.reference(*x64, 0.3), x64, G.double())
    assert max(_errors(steps[0], want)) < 3e-3
    for later in steps[1:]:
        for a, b in zip(later, steps[0]):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


def test_bench_time_dry_run_rows_of_both_dq_forms(tmp_path):
    """bench/attention_bwd.py time --dry-run --split: the heuristic (two kernels) and a dq-atomic
    variant each give a row checked against float64 (the interpreter: no kernel split)."""
    import json
    from conftest import run_bench
    run_bench(["bench/attention_bwd.py", "time", "--dry-run", "--split", "--only", "causal_d16", "--variants",
               "heuristic", "kv32x64 w4 s3 dq-atomic"], tmp_path)
    rows = json.loads((tmp_path / "out" / "attention_bwd.json").read_text())["rows"]
    got = {r["impl"]: r for r in rows if r["impl"].startswith("dtriton ") and "saving" not in r["impl"]}
    assert set(got) == {"dtriton heuristic", "dtriton kv32x64 w4 s3 dq-atomic"}, rows
    assert all(r["kernels"] == 3 and r["rel_err"] < 3e-3 for r in got.values())
