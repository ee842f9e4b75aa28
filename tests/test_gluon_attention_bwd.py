"""The Gluon attention backward as a lowering (plan.gluon_attention_bwd, backends/triton/gluon_bwd*.py).

The derived backward of an attention forward with its statistics saved (``dt.grad(attention,
save=saved_statistics(attention))``: dQ, dK, dV from Q, K, V, scale, dO, the row log-sum-exp and the
normalised output) is recognised from the provenance ``dt.grad`` records, and planned on an sm_90 GPU
(head dim 128, 16-bit, S = T multiple of 128, contiguous 16-byte aligned tensors) as the Gluon
backward. Here (no GPU) the plan is taken with the call's facts set to an sm_90 GPU, the printed
module is checked, the dK/dV kernel compiled for sm_90 (in a subprocess), and the launch recorded with
stand-in kernels computing in float64 what the real ones compute; on the CPU the derived Triton
kernels run.
"""
from __future__ import annotations

import dataclasses
import pickle
import warnings

import pytest
import torch

import dtriton as dt
from dtriton.backends.triton.kernel import render
from dtriton.grad import augmented_forward, saved_statistics
from dtriton.library import attention, causal_attention, gqa_attention, softmax
from dtriton.plan import call_spec, match_attention_bwd, plan_program

F16 = torch.float16


@dt.algorithm
def attention_lit(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "T", "D"], V: dt.Tensor["B", "H", "T", "D"]):
    """The scale a literal (negative), causal written i >= j, V first in the product."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.where(i >= j, -0.09 * dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d), -float("inf"))
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(V[b, h, j, e] * p, over=j) / dt.sum(p, over=j))[b, h, i, e]


def backward(alg, **kw):
    """The derived backward of ``alg`` reading its saved statistics (one algorithm: dQ, dK, dV)."""
    ga = dt.grad(alg, save=saved_statistics(alg), **kw)
    return ga.algorithms[0]


def call(alg, B, H, S, D, dtype=F16, T=None, scale=0.1, seed=0):
    """Arguments of ``backward(alg)`` (Q, K, V[, scale], dO, the saved statistics as the saving forward
    computes them, in float64 then in the dtypes it stores: LSE fp32, the output in ``dtype``)."""
    g = torch.Generator().manual_seed(seed)
    sizes = dict(B=B, H=H, G=H, S=S, T=T or S, D=D)
    bwd = backward(alg)
    fwd_args = {}
    for p in alg.params:
        fwd_args[p.name] = (torch.randn(*[sizes[d] for d in p.dims], generator=g).to(dtype) if hasattr(p, "dims")
                            else scale if p.pytype is float else 1)   # (grouped-query: rep 1)
    aug, names = augmented_forward(alg, saved_statistics(alg))
    saved = aug.reference(*[a.double() if isinstance(a, torch.Tensor) else a for a in fwd_args.values()])[1:]
    saved = {f"saved_{n}": s for n, s in zip(names, saved)}
    args = []
    for p in bwd.params:
        if p.name in fwd_args:
            args.append(fwd_args[p.name])
        elif p.name in saved:
            args.append(saved[p.name].to(torch.float32 if "lse" in p.name else dtype))
        else:   # the upstream gradient
            args.append(torch.randn(*[sizes[d] for d in p.dims], generator=g).to(dtype))
    return bwd, tuple(args)


def gpu_plan(alg, args, sched=None, arch=90, out=None):
    """The program of a call planned as on a GPU of compute capability ``arch`` (CPU tensors standing in)."""
    b = dataclasses.replace(alg.bind(args), device=torch.device("cuda"))
    full = dt.compile(alg, sched or dt.Schedule()).complete(b)
    spec = dataclasses.replace(call_spec(alg, b, args, False, out), arch=arch)
    return plan_program(alg, full, b, spec)


def reason(bwd, args, sched=None, arch=90, out=None) -> str:
    prog = gpu_plan(bwd, args, sched or dt.Schedule(warp_specialize=True), arch, out)
    assert all(k.gluon is None for k in prog.kernels)
    return prog.gluon_note


def test_grad_records_provenance_and_the_plan_matches_it():
    ga = dt.grad(attention, save=saved_statistics(attention))
    (bwd,) = ga.algorithms
    p = bwd.provenance
    assert p.forward is attention and p.wrt == ("Q", "K", "V") and p.grad_params == ("grad_out",)
    assert p.saved == ("lse_max0_sum2", "sum1") and p.saved_params == ("saved_lse_max0_sum2", "saved_sum1")
    assert p.seeded == (0,) and attention.provenance is None
    m, why = match_attention_bwd(bwd)
    assert why == "" and (m.fwd.q, m.do, m.lse, m.o, m.dq, m.dk, m.dv) == \
        ("Q", "grad_out", "saved_lse_max0_sum2", "saved_sum1", "out0", "out1", "out2")
    assert m.dq_perm == m.dk_perm == m.dv_perm == (0, 1, 2, 3) and m.lse_perm == (0, 1, 2)
    c, _ = match_attention_bwd(backward(causal_attention))
    assert c.fwd.causal and c.lse_perm == (1, 2, 0) and c.o_perm == (1, 2, 0, 3)   # (query axis first: the mask)
    # the provenance survives pickling (a spawned worker gets the algorithm by value) and the plan still matches
    again = pickle.loads(pickle.dumps(bwd))
    assert again.provenance.forward.fingerprint == attention.fingerprint and match_attention_bwd(again)[0] == m
    # the planner's rewrites (base-2 exponentials for 16-bit terms) keep it too
    from dtriton.grad import shift_only
    from dtriton.ir import base2_exponents, base2_shifted_exponents
    b2 = base2_shifted_exponents(base2_exponents(bwd, lambda r: True, lambda r: shift_only(bwd, r)))
    assert b2 is not bwd and b2.fingerprint != bwd.fingerprint and b2.provenance is p
    # not the Gluon backward's: other gradient sets, other saved statistics, grouped-query attention
    assert match_attention_bwd(attention) == (None, "") and match_attention_bwd(softmax) == (None, "")
    assert match_attention_bwd(dt.grad(softmax).algorithms[0]) == (None, "")
    q_only = dt.grad(attention, "Q", save=saved_statistics(attention)).algorithms[0]
    assert "computes those of Q" in match_attention_bwd(q_only)[1]
    split = dt.grad(attention, save=saved_statistics(attention), group="none").algorithms
    assert len(split) == 3 and all("in one algorithm" in match_attention_bwd(a)[1] for a in split)
    assert "saves nothing" in match_attention_bwd(dt.grad(attention).algorithms[0])[1]
    assert "saves ['sum0'" in match_attention_bwd(dt.grad(attention, save="all").algorithms[0])[1]
    assert "grouped-query" in match_attention_bwd(backward(gqa_attention))[1]


def test_autograd_backward_algorithm_carries_the_provenance():
    """The backward autograd runs (dt.compile_autograd's own derivation, the saving forward's names) is
    recognised too: its plan on an sm_90 GPU is the Gluon backward."""
    dk = dt.compile_autograd(attention)
    (bwd,) = dk.gradients().algorithms
    assert bwd.provenance is not None and match_attention_bwd(bwd)[0] is not None
    _, args = call(attention, 1, 2, 128, 128)
    prog = gpu_plan(bwd, args)
    assert len(prog.kernels) == 1 and prog.kernels[0].gluon is not None


@pytest.mark.parametrize("alg,dtype", [(attention, F16), (causal_attention, torch.bfloat16), (attention_lit, F16)])
def test_plan_eligible(alg, dtype):
    bwd, args = call(alg, 2, 3, 256, 128, dtype)
    prog = gpu_plan(bwd, args)
    assert len(prog.kernels) == 1 and prog.gluon_note == "" and not prog.buffers
    g = prog.kernels[0].gluon
    assert (g.d, g.dtype, g.causal) == (128, str(dtype)[6:], alg is not attention)
    assert (g.bn, g.bm, g.stages, g.nw, g.qsplit, g.lse_tma) == (128, 64, 3, 8, 2, True)
    src, metas = render(prog)
    assert f"from dtriton.backends.triton.gluon_bwd_kernels import ATTENTION_BWD as {metas[0].name}" in src
    assert "the Gluon attention backward (Hopper), decided by dtriton.plan.gluon_attention_bwd" in src
    m = g.match
    assert metas[0].tensors == ["Q", "K", "V", m.do, m.lse, m.o, "out0", "out1", "out2"]
    assert metas[0].scalars == ([] if alg is attention_lit else ["s_scale"])
    assert metas[0].consts["CAUSAL"] == g.causal and metas[0].consts["DQ"] == 2
    assert ("the output read through its strides" in src) == (alg is not attention)   # (or copied: attention_lit)


def test_plan_ineligible_says_why():
    bwd, args = call(attention, 1, 2, 256, 128)
    q, k, v, scale, do, lse, o = args
    assert reason(bwd, args, dt.Schedule(warp_specialize=False)) == ""            # turned off
    assert "sm_90" in reason(bwd, args, arch=80) and "sm_90" in reason(bwd, args, arch=100)
    b64, a64 = call(attention, 1, 2, 256, 64)
    assert "head dim 128" in reason(b64, a64)
    assert "16-bit dtype" in reason(*call(attention, 1, 2, 256, 128, torch.float32))
    assert "16-bit dtype" in reason(bwd, (q, k, v.bfloat16(), scale, do, lse, o))
    assert "in float32" in reason(bwd, (q, k, v, scale, do, lse.half(), o))
    assert "multiple of 128" in reason(*call(attention, 1, 2, 200, 128))
    assert "lengths equal" in reason(*call(attention, 1, 2, 256, 128, T=384))
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)                 # (B, H, S, D) view of (B, S, H, D)
    assert "Q not contiguous" in reason(bwd, (qt, k, v, scale, do, lse, o))
    strided = torch.empty(1, 2, 256, 256, dtype=F16)[..., :128]
    assert "out1 not contiguous" in reason(bwd, args, out=(torch.empty_like(q), strided, torch.empty_like(v)))
    gq, gargs = call(gqa_attention, 1, 2, 256, 128)
    assert "grouped-query" in reason(gq, gargs)
    with warnings.catch_warnings(record=True) as got:                  # the interpreter: the Triton kernels
        warnings.simplefilter("always")
        dt.compile(bwd, dt.Schedule(warp_specialize=True))(*call(attention, 1, 1, 16, 16)[1])
    assert any("Gluon attention backward does not apply: Gluon has no interpreter" in str(w.message)
               and issubclass(w.category, dt.ScheduleWarning) for w in got), [str(w.message) for w in got]


def test_default_is_silent_and_false_turns_it_off():
    bwd, args = call(attention, 1, 2, 256, 128)
    assert gpu_plan(bwd, args).kernels[0].gluon is not None
    for b, a in (call(attention, 1, 2, 256, 64), call(attention, 1, 2, 200, 128), call(gqa_attention, 1, 2, 256, 128)):
        assert reason(b, a, dt.Schedule()) == ""
    assert reason(bwd, args, dt.Schedule(), arch=80) == ""
    off = gpu_plan(bwd, args, dt.Schedule(warp_specialize=False))
    assert len(off.kernels) > 1 and all(k.gluon is None for k in off.kernels)


COMPILE = """
import json, sys
sys.path.insert(0, {tests!r})
import torch
import test_gluon_attention_bwd as T
from dtriton.backends.triton.gluon_bwd_kernels import compile_sm90
rows = []
for name, dtype in {cases!r}:
    bwd, args = T.call(getattr(T, name), 1, 2, 256, 128, getattr(torch, dtype))
    g = T.gpu_plan(bwd, args).kernels[0].gluon
    ck = compile_sm90(g)
    ptx = ck.asm["ptx"]
    rows.append(dict(name=name, dtype=dtype, smem=ck.metadata.shared, warps=ck.metadata.num_warps,
                     wgmma="wgmma.mma_async" in ptx, bf16="bf16" in ptx, causal=g.causal,
                     reduce=ptx.count("cp.reduce.async.bulk.tensor")))
# the plain Triton delta and cast kernels the launcher runs beside it
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from dtriton.backends.triton.gluon_bwd_kernels import bwd_cast, bwd_pre_strided
for fn, sig, cx in ((bwd_pre_strided, {{"o_ptr": "*bf16", "do_ptr": "*bf16", "delta_ptr": "*fp32", "S": "i32",
                                       "o_head": "i32", "o_row": "i32", "D": "constexpr", "BM": "constexpr"}},
                     {{"D": 128, "BM": 64}}),
                    (bwd_cast, {{"src": "*fp32", "dst": "*fp16", "BLOCK": "constexpr"}}, {{"BLOCK": 1024}})):
    ck = triton.compile(ASTSource(fn, sig, {{(fn.arg_names.index(k),): v for k, v in cx.items()}}),
                        target=GPUTarget("cuda", 90, 32))
    rows.append(dict(name=fn.__name__, ptx=len(ck.asm["ptx"])))
print(json.dumps(rows))
"""


def test_packaged_kernels_compile_for_sm90():
    """The dK/dV kernel the plan names compiles for sm_90 (Triton's toolchain, no GPU; in a process of its
    own: in Triton 3.6 a Gluon compile after an interpreted launch in one process can fail to resolve
    Gluon's builtins): fp16 and bf16, causal or not, 8 warps, wgmma, dQ by TMA reduce-adds, shared memory
    within the H100/H200 limit; the delta and cast kernels beside it too."""
    import json
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    cases = [("attention", "float16"), ("causal_attention", "bfloat16"), ("attention_lit", "float16")]
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(here), "src"))
    env.pop("TRITON_INTERPRET", None)
    res = subprocess.run([sys.executable, "-c", COMPILE.format(tests=here, cases=cases)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert [r["name"] for r in rows[-2:]] == ["bwd_pre_strided", "bwd_cast"] and all(r["ptx"] for r in rows[-2:])
    rows = rows[:-2]
    assert [(r["name"], r["dtype"]) for r in rows] == cases
    for r in rows:
        assert 0 < r["smem"] <= 232448 and r["warps"] == 8 and r["wgmma"] and r["reduce"] > 0, r
        assert r["bf16"] == (r["dtype"] == "bfloat16") and r["causal"] == (r["name"] != "attention"), r


class Emulated:
    """Stand-ins for the three kernels (``pre``, ``dkdv``, ``cast``), recording their launches and
    computing in float64 what the real ones compute from what they are given (descriptors' tensors,
    pointers, scales, the causal flag)."""

    def __init__(self):
        self.seen = []
        outer = self

        class K:
            def __init__(self, name, body):
                self.name, self.body = name, body

            def __getitem__(self, grid):
                def run(*args, **kw):
                    outer.seen.append((self.name, grid, args, kw))
                    self.body(*args, **kw)
                return run
        self.pre, self.dkdv, self.cast = K("pre", self._pre), K("dkdv", self._dkdv), K("cast", self._cast)

    @staticmethod
    def _pre(o, do, delta, S, o_head, o_row, D, BM):
        heads = delta.numel() // S
        o = torch.as_strided(o, (heads, S, D), (o_head, o_row, 1))
        delta.copy_((o.double().reshape(-1, D) * do.double().reshape(-1, D)).sum(1))

    @staticmethod
    def _cast(src, dst, BLOCK):
        dst.copy_(src.view(dst.shape))

    @staticmethod
    def _dkdv(qd, kd, vd, dod, dkd, dvd, dqd, lsed, deltad, dq32, lse_ptr, delta_ptr, qk_scale, sm_scale, S, **kw):
        from dtriton.backends.triton.gluon import LOG2E
        assert qk_scale == pytest.approx(sm_scale * LOG2E)
        assert lsed.base.data_ptr() == lse_ptr.data_ptr() and deltad.base.data_ptr() == delta_ptr.data_ptr()
        q, k, v, do = (d.base.double() for d in (qd, kd, vd, dod))
        lse, delta = lsed.base.double(), deltad.base.double()
        for bh in range(q.shape[0] // S):
            r = slice(bh * S, (bh + 1) * S)
            s = q[r] @ k[r].T * sm_scale
            if kw["CAUSAL"]:
                s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), -float("inf"))
            p = torch.exp(s - lse[r, None])
            ds = p * (do[r] @ v[r].T - delta[r, None])
            dvd.base[r] = (p.T @ do[r]).to(dvd.base.dtype)
            dkd.base[r] = (ds.T @ q[r] * sm_scale).to(dkd.base.dtype)
            dq32[r] += (ds @ k[r] * sm_scale).float()


@pytest.mark.parametrize("alg,dtype,S", [(attention, F16, 256), (causal_attention, torch.bfloat16, 384),
                                         (attention_lit, F16, 128)])
def test_runtime_launches_the_gluon_backward(monkeypatch, alg, dtype, S):
    """The runtime's path on an sm_90 GPU with the kernels replaced by float64 stand-ins (no GPU here):
    the module binds the Gluon backward; delta from the saved output and dO (a causal forward's saved
    statistics copied to the kernel's order), the dK/dV launch's grid (key tiles, heads), its (rows, D)
    descriptors of Q, K, V, dO, dK, dV in the planned boxes, dQ's zero-filled fp32 sum in (64, 64)
    boxes, the LSE and delta in 64-row boxes, log2(e) times the scale and the scale, the constants; the
    cast into dQ; the gradients written are float64 autograd's (slow path, fast path, out=)."""
    import dtriton.backends.triton.gluon_bwd as gb
    import dtriton.plan.callspec as cs
    import dtriton.runtime.kernel as rk
    monkeypatch.setattr(rk, "backend_for", lambda dev: "gpu")
    monkeypatch.setattr(cs, "_arch", lambda dev, interpret: 90)
    fake = Emulated()
    real = gb.launch_gluon_bwd
    record = lambda fn, args, meta: real(fake, args, meta)  # noqa: E731
    monkeypatch.setattr(gb, "launch_gluon_bwd", record)       # (the slow path and the signature's fast path)
    B, H, D = 2, 3, 128
    bwd, args = call(alg, B, H, S, D, dtype, scale=-0.3, seed=S)
    kern = dt.compile(bwd)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        got = kern(*args)
    assert "gluon_bwd_kernels import ATTENTION_BWD" in kern.source
    assert kern.fast_launcher_for(args).kind is gb.KIND
    again = kern(*args)
    given = tuple(torch.full_like(t, float("nan")) for t in got)
    assert all(a is b for a, b in zip(kern(*args, out=given), given))
    assert [n for n, *_ in fake.seen] == ["pre", "dkdv", "cast"] * 3
    rows = B * H * S
    (_, g_pre, a_pre, k_pre), (_, g_kv, a_kv, k_kv), (_, g_cast, a_cast, k_cast) = fake.seen[:3]
    names = [p.name for p in bwd.params]
    assert g_pre == (rows // 64,) and k_pre == dict(D=D, BM=64) and a_pre[1] is args[names.index("grad_out")]
    o_saved = args[names.index(bwd.provenance.saved_params[1])]
    # the saved output read in place (a causal forward's, query axis first, through its strides), copied where
    # the value axis is not its unit-stride one (attention_lit's saved output is laid out (b, h, e, i))
    assert (a_pre[0].data_ptr() == o_saved.data_ptr()) == (alg is not attention_lit)
    assert a_pre[3:] == ((S, D, B * H * D) if alg is causal_attention else (S, S * D, D))
    assert g_kv == (S // 128, B * H) and k_kv["num_warps"] == 8 and k_kv["CAUSAL"] == (alg is not attention)
    assert (k_kv["BM"], k_kv["BN"], k_kv["STAGES"], k_kv["DQ"], k_kv["QSPLIT"], k_kv["LSE_TMA"]) == \
        (64, 128, 3, 2, 2, True)
    descs = a_kv[:9]
    assert [list(d.block_shape) for d in descs] == [[64, D], [128, D], [128, D], [64, D], [128, D], [128, D],
                                                    [64, D // 2], [64], [64]]
    assert [d.base.data_ptr() for d in descs[:3]] == [t.data_ptr() for t in args[:3]]
    assert descs[6].base.dtype == torch.float32 and descs[6].base is a_kv[9] and a_cast[0] is a_kv[9]
    scale = -0.09 if alg is attention_lit else -0.3
    assert a_kv[13] == scale and a_kv[14] == S and g_cast == (rows * D // 1024,) and k_cast == dict(BLOCK=1024)
    assert descs[4].base.data_ptr() == got[1].data_ptr() and descs[5].base.data_ptr() == got[2].data_ptr()
    assert a_cast[1].data_ptr() == got[0].data_ptr()
    # the float64 result of autograd through the forward's reference
    fwd = bwd.provenance.forward
    x = [a.double().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args[:len(fwd.params)]]
    do = args[names.index("grad_out")].double()
    (fwd.reference(*x) * do).sum().backward()
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == F16 else dict(atol=6e-2, rtol=6e-2)
    for outs in (got, again, given):
        for t, r in zip(outs, x[:3]):
            assert t.dtype == dtype and torch.isfinite(t).all()
            torch.testing.assert_close(t.double(), r.grad, **tol)


@pytest.mark.parametrize("alg", [attention, causal_attention])
def test_cpu_fallback_matches_float64(alg):
    """On the interpreter the derived Triton backward runs (silently by default), within fp16 tolerance
    of float64 autograd, every element of a poisoned out= written."""
    bwd, args = call(alg, 2, 3, 23, 16, scale=0.3, seed=5)
    x = [a.double().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args[:4]]
    (alg.reference(*x) * args[4].double()).sum().backward()
    outs = tuple(torch.full_like(t, float("nan")) for t in args[:3])
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        dt.compile(bwd)(*args, out=outs)
    for t, r in zip(outs, x[:3]):
        assert torch.isfinite(t).all()
        torch.testing.assert_close(t.double(), r.grad, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("alg,dtype,B,H,S", [(attention, F16, 2, 3, 256), (causal_attention, F16, 1, 4, 384),
                                           (attention, torch.bfloat16, 1, 3, 384),
                                           (causal_attention, torch.bfloat16, 2, 2, 256)])   # (bench/gpu_check.py's)
def test_autograd_runs_the_gluon_forward_and_backward(monkeypatch, alg, dtype, B, H, S):
    """``dt.compile(alg)`` under autograd on an sm_90 GPU (routed as on the GPU, the Gluon kernels replaced
    by float64 stand-ins): the saving forward runs as the Gluon forward (its LSE and output copy), the
    derived backward, which reads them, as the Gluon backward; the gradients are float64 autograd's."""
    import dtriton.backends.triton.gluon as gm
    import dtriton.backends.triton.gluon_bwd as gb
    import dtriton.plan.callspec as cs
    import dtriton.runtime.kernel as rk
    monkeypatch.setattr(rk, "backend_for", lambda dev: "gpu")
    monkeypatch.setattr(cs, "_arch", lambda dev, interpret: 90)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: type("P", (), {"multi_processor_count": 7}))
    fwd_seen = []

    class Forward:   # the Gluon forward: O and the row LSE (natural log) of the descriptors' rows, per head
        def __getitem__(self, grid):
            def run(qd, kd, vd, od, lse, qk_scale, S, T, *rest, **kw):
                from dtriton.backends.triton.gluon import LOG2E
                fwd_seen.append(kw)
                q, k, v = (d.base.double() for d in (qd, kd, vd))
                for bh in range(q.shape[0] // S):
                    r = slice(bh * S, (bh + 1) * S)
                    s = q[r] @ k[r].T * (qk_scale / LOG2E)
                    if kw["CAUSAL"]:
                        s = s.masked_fill(torch.ones(S, T, dtype=torch.bool).triu(1), -float("inf"))
                    od.base[r] = (torch.softmax(s, -1) @ v[r]).to(od.base.dtype)
                    lse.view(-1)[r] = torch.logsumexp(s, -1).float()
            return run

    fake = Emulated()
    real_f, real_b = gm.launch_gluon, gb.launch_gluon_bwd
    monkeypatch.setattr(gm, "launch_gluon", lambda fn, args, meta: real_f(Forward(), args, meta))
    monkeypatch.setattr(gb, "launch_gluon_bwd", lambda fn, args, meta: real_b(fake, args, meta))
    g = torch.Generator().manual_seed(11)
    q, k, v, w = (torch.randn(B, H, S, 128, generator=g).to(dtype) for _ in range(4))
    ins = [t.clone().requires_grad_() for t in (q, k, v)]
    out = dt.compile(alg)(*ins, 0.09)
    out.backward(w)
    assert fwd_seen and fwd_seen[0]["STORE_LSE"] and [n for n, *_ in fake.seen] == ["pre", "dkdv", "cast"]
    assert fake.seen[1][3]["CAUSAL"] == (alg is causal_attention)
    refs = [t.double().requires_grad_() for t in (q, k, v)]
    (alg.reference(*refs, 0.09) * w.double()).sum().backward()
    tol = 1 if dtype == F16 else 8   # (bf16: 8 times fp16's tolerances)
    torch.testing.assert_close(out.double(), alg.reference(*[t.double() for t in (q, k, v)], 0.09), atol=2e-3 * tol,
                               rtol=2e-3 * tol)
    for x, r in zip(ins, refs):
        assert x.grad.dtype == dtype
        torch.testing.assert_close(x.grad.double(), r.grad, atol=2e-2 * tol, rtol=2e-2 * tol)


def test_derived_space_searches_the_gluon_backward_and_the_triton_kernels():
    """Exploring the derived backward on a TMA GPU: ``warp_specialize`` None (the Gluon backward where it
    applies) and False (the Triton kernels, whose tiles the rest of the space searches)."""
    from dtriton.tune import Limits, Space
    bwd, args = call(attention, 1, 2, 256, 128)
    assert Space.derive(bwd, args, target="gpu", limits=Limits(tma=True)).warp_specialize == (None, False)
    assert Space.derive(bwd, args, target="gpu", limits=Limits(tma=False)).warp_specialize != (None, False)


INTERPRET = """
import json
import torch
from dtriton.backends.triton.gluon_bwd_kernels import ATTENTION_BWD as K
S, D, B, H = 128, 128, 2, 3
g = torch.Generator().manual_seed(3)
o = torch.randn(S, B, H, D, generator=g).half()          # (query axis first, as a causal forward saves it)
ov = o.permute(1, 2, 0, 3).view(-1, S, D)
do = torch.randn(B, H, S, D, generator=g).half()
delta = torch.full((B * H * S,), float("nan"))
K.pre[(B * H * S // 64,)](ov, do, delta, S, ov.stride(0), ov.stride(1), D=D, BM=64)
ref = (o.permute(1, 2, 0, 3).double() * do.double()).sum(-1).reshape(-1)
src = torch.randn(B * H * S, D, generator=g)
rows = dict(pre=((delta.double() - ref).abs().max() / ref.abs().max()).item(), strides=list(ov.stride()))
for name, dt in (("half", torch.float16), ("bf16", torch.bfloat16)):
    dst = torch.full((B, H, S, D), float("nan")).to(dt)
    K.cast[(B * H * S * D // 1024,)](src, dst, BLOCK=1024)
    near = (dst.reshape(-1, D).double() - src.to(dt).double()).abs() / src.double().abs().clamp_min(1e-3)
    rows[name] = near.max().item()
print(json.dumps(rows))
"""


def test_delta_and_cast_kernels_on_the_interpreter():
    """The delta kernel the launcher runs (the saved output read through its strides: a causal forward's,
    query axis first) and the dQ cast, on Triton's interpreter (in a process of its own: the interpreter is
    chosen when the kernels are defined): delta within fp32 rounding of float64; fp16 torch's rounding, bf16
    within one unit in the last place of it (the interpreter truncates to bf16)."""
    import json
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(here), "src"), TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, "-c", INTERPRET], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(res.stdout.strip().splitlines()[-1])
    assert r["strides"] == [128, 768, 1] and r["pre"] < 1e-5 and r["half"] == 0 and r["bf16"] <= 2 ** -7, r
