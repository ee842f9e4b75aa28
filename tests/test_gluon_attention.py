"""The Gluon attention forward as a lowering (plan.gluon_attention, backends/triton/gluon*.py).

The decision is taken in planning from the algorithm and the call's facts: the attention forward
(causal or not) with warp_specialize=True on an sm_90 GPU, 16-bit Q/K/V/output of one dtype, head
dim 64 or 128, S and T multiples of 128, contiguous 16-byte aligned tensors; grouped-query attention
(K and V read at head h // rep) too. Here (no GPU) the plan is
taken with the call's facts set to an sm_90 GPU, the printed module is checked, and its Gluon kernel
is compiled for sm_90; on the CPU the call falls back to the Triton kernel with a ScheduleWarning and
the default schedule's results.
"""
from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

import dtriton as dt
from dtriton.backends.triton.kernel import render
from dtriton.library import attention, causal_attention, gqa_attention, softmax
from dtriton.plan import call_spec, match_attention, plan_gluon_attention, plan_program

F16 = torch.float16


@dt.algorithm
def attention_lit(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "T", "D"], V: dt.Tensor["B", "H", "T", "D"]):
    """The scale a literal on the left, the causal mask written i >= j, V first in the product."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.where(i >= j, 0.125 * dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d), -float("inf"))
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(V[b, h, j, e] * p, over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def attention_strict(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "S", "D"], V: dt.Tensor["B", "H", "S", "D"],
                     scale: float):
    """A mask j < i (not the causal mask: the diagonal is masked too)."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.where(j < i, dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * scale, -float("inf"))
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def attention_lse(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "S", "D"], V: dt.Tensor["B", "H", "S", "D"],
                  scale: float):
    """Attention with a second output (the row sum): not the one-output forward."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * scale
    p = dt.exp(s - dt.max(s, over=j))
    den = dt.sum(p, over=j)
    return (dt.sum(p * V[b, h, j, e], over=j) / den)[b, h, i, e], den[b, h, i]


@dt.algorithm
def gqa_causal_lit(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "G", "T", "D"],
                   V: dt.Tensor["B", "G", "T", "D"]):
    """Grouped-query attention with the group a literal (3), causal, K first in the QK product."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.where(j <= i, dt.sum(K[b, h // 3, j, d] * Q[b, h, i, d], over=d) * 0.125, -float("inf"))
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h // 3, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def gqa_neg_lit(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "G", "T", "D"], V: dt.Tensor["B", "G", "T", "D"]):
    """K/V read at head h // -1 (a call with one query head binds: h = 0 reads head 0)."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, h // -1, j, d], over=d) * 0.125
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h // -1, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def gqa_v_plain(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "G", "T", "D"], V: dt.Tensor["B", "H", "T", "D"],
                rep: int):
    """K grouped, V not: not grouped-query attention."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, h // rep, j, d], over=d) * 0.125
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def gqa_two_groups(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "G", "T", "D"], V: dt.Tensor["B", "F", "T", "D"],
                   rep: int, rep2: int):
    """K and V grouped by different arguments."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, h // rep, j, d], over=d) * 0.125
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h // rep2, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def gqa_batch(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["C", "H", "T", "D"], V: dt.Tensor["C", "H", "T", "D"],
              rep: int):
    """The batch axis divided (not the last lead axis)."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b // rep, h, j, d], over=d) * 0.125
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b // rep, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def gqa_q_grouped(Q: dt.Tensor["B", "G", "S", "D"], K: dt.Tensor["B", "H", "T", "D"], V: dt.Tensor["B", "H", "T", "D"],
                  rep: int):
    """Q read at h // rep (each K/V head shares a query head): not grouped-query attention."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h // rep, i, d] * K[b, h, j, d], over=d) * 0.125
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


def test_match_grouped_query_attention():
    m = match_attention(gqa_attention)
    assert (m.q, m.k, m.v, m.lead, m.group, m.group_param, m.scale_param, m.causal) == \
        ("Q", "K", "V", ("b", "h"), 1, "rep", "scale", False) and m.grouped
    lit = match_attention(gqa_causal_lit)
    assert (lit.q, lit.k, lit.group, lit.group_param, lit.causal, lit.scale) == ("Q", "K", 3, "", True, 0.125)
    assert lit.grouped and not match_attention(attention).grouped
    for alg in (gqa_v_plain, gqa_two_groups, gqa_batch, gqa_q_grouped):
        assert match_attention(alg) is None, alg.name
    aug = match_attention(saving(gqa_attention))     # the saving forward of grouped-query attention
    assert (aug.lse, aug.copy, aug.group_param) == ("out1", "out2", "rep")


def test_match_attention_roles():
    m = match_attention(attention)
    assert (m.q, m.k, m.v, m.out, m.lead, m.i, m.j, m.d, m.e) == ("Q", "K", "V", "out", ("b", "h"), "i", "j", "d", "e")
    assert m.scale is None and m.scale_param == "scale" and not m.causal
    assert match_attention(causal_attention).causal
    lit = match_attention(attention_lit)
    assert lit.causal and lit.scale == 0.125 and lit.scale_param == ""
    for alg in (softmax, attention_strict, attention_lse):   # no attention, j < i, two outputs
        assert match_attention(alg) is None, alg.name
    for alg in (attention, causal_attention):   # the forward saving statistics for the backward
        aug = saving(alg)
        m = match_attention(aug)
        assert (m.out, m.lse, m.copy, m.causal) == ("out0", "out1", "out2", alg is causal_attention)


def saving(alg):
    """The forward autograd runs for ``alg``: the output, the row log-sum-exp, the normalised output."""
    from dtriton.grad import augmented_forward, saved_statistics
    aug, names = augmented_forward(alg, saved_statistics(alg))
    assert names == ("lse_max0_sum2", "sum1")
    return aug


def gpu_plan(alg, args, sched=None, arch=90, out=None):
    """The program of a call planned as on a GPU of compute capability ``arch`` (CPU tensors standing in)."""
    b = dataclasses.replace(alg.bind(args), device=torch.device("cuda"))
    full = dt.compile(alg, sched or dt.Schedule(warp_specialize=True)).complete(b)
    spec = dataclasses.replace(call_spec(alg, b, args, False, out), arch=arch)
    return plan_program(alg, full, b, spec)


def qkv(B, H, S, D, dtype=F16, T=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, n, D, generator=g).to(dtype) for n in (S, T or S, T or S))


def gqa(B, H, G, S, D, dtype=F16, T=None, seed=0):
    """Q (B, H, S, D) and K, V (B, G, T, D) of grouped-query attention."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, n_h, n, D, generator=g).to(dtype) for n_h, n in ((H, S), (G, T or S), (G, T or S)))


@pytest.mark.parametrize("alg", [attention, causal_attention])
@pytest.mark.parametrize("D", [64, 128])
def test_plan_eligible_picks_the_measured_variant(alg, D):
    prog = gpu_plan(alg, (*qkv(3, 5, 256, D), D ** -0.5))
    assert len(prog.kernels) == 1 and prog.gluon_note == "" and not prog.buffers
    g = prog.kernels[0].gluon
    assert g is not None and g.d == D and g.dtype == "float16" and g.match.causal == (alg is causal_attention)
    causal = alg is causal_attention
    want = ("pipe", 128, 128, 2, 1, 8, False, False, False) if D == 64 else \
        ("ws", 64, 128, 3 if causal else 2, 2, 4, True, True, not causal)
    assert (g.kernel, g.bmc, g.bn, g.stages, g.nc, g.nw, g.overlap, g.pingpong, g.persist) == want
    src, metas = render(prog)
    name = "attn_fwd_ws" if D == 128 else "attn_fwd_pipe"
    assert f"from dtriton.backends.triton.gluon_kernels import {name} as {metas[0].name}" in src
    assert metas[0].tensors == ["Q", "K", "V", "out"] and metas[0].scalars == ["s_scale"]
    assert metas[0].consts["CAUSAL"] == causal and metas[0].consts["D"] == D


def test_plan_replaces_a_split_of_the_keys():
    """Few query tiles: the GPU heuristic splits the keys (two kernels); the Gluon kernel replaces both."""
    args = (*qkv(1, 2, 2048, 64), 0.125)
    triton_prog = gpu_plan(attention, args, dt.Schedule(warp_specialize=False))
    assert len(triton_prog.kernels) == 2 or triton_prog.kernels[0].splits
    prog = gpu_plan(attention, args)
    assert len(prog.kernels) == 1 and prog.kernels[0].gluon is not None and not prog.buffers


def reason(alg, args, sched=None, arch=90, out=None) -> str:
    prog = gpu_plan(alg, args, sched, arch, out)
    assert all(k.gluon is None for k in prog.kernels)
    return prog.gluon_note


def test_plan_ineligible_says_why():
    assert reason(attention, (*qkv(1, 2, 256, 64), 0.1), dt.Schedule(warp_specialize=False)) == ""   # turned off
    assert reason(softmax, (torch.randn(4, 8),)) == ""                                       # not attention
    assert "sm_90" in reason(attention, (*qkv(1, 2, 256, 64), 0.1), arch=100)
    assert "sm_90" in reason(attention, (*qkv(1, 2, 256, 64), 0.1), arch=80)
    assert "16-bit dtype" in reason(attention, (*qkv(1, 2, 256, 64, torch.float32), 0.1))
    q, k, v = qkv(1, 2, 256, 64)
    assert "16-bit dtype" in reason(attention, (q, k.bfloat16(), v, 0.1))
    assert "64 or 128" in reason(attention, (*qkv(1, 2, 256, 96), 0.1))
    assert "multiples of 128" in reason(attention, (*qkv(1, 2, 200, 64), 0.1))
    assert "multiples of 128" in reason(attention, (*qkv(1, 2, 256, 64, T=200), 0.1))
    qt = torch.randn(1, 256, 2, 64).to(F16).transpose(1, 2)            # (B, H, S, D) view of (B, S, H, D)
    assert "Q not contiguous" in reason(attention, (qt, k, v, 0.1))
    assert "further outputs" in reason(attention_lse, (q, k, v, 0.1))
    mat = dt.Schedule(warp_specialize=True, stages={"sum0": {"place": "materialize"}})
    assert "online pass" in reason(attention, (q, k, v, 0.1), mat)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out = dt.compile(attention, dt.Schedule(warp_specialize=True))(*qkv(1, 2, 16, 16), 0.25)
    assert out.shape == (1, 2, 16, 16)
    assert any("Gluon has no interpreter" in str(w.message) and issubclass(w.category, dt.ScheduleWarning)
               for w in got), [str(w.message) for w in got]


def test_default_schedule_runs_the_gluon_kernel_where_it_applies():
    """``warp_specialize`` left to the compiler (None, the default): an eligible call plans the Gluon
    kernel, an ineligible one the Triton kernels without a note (nothing was asked), with no Triton
    warp specialisation; False keeps the Triton kernels."""
    args = (*qkv(2, 3, 256, 128), 0.1)
    prog = gpu_plan(attention, args, dt.Schedule())
    assert len(prog.kernels) == 1 and prog.kernels[0].gluon is not None and prog.gluon_note == ""
    for bad in ((*qkv(1, 2, 200, 64), 0.1), (*qkv(1, 2, 256, 64, torch.float32), 0.1), (*qkv(1, 2, 256, 96), 0.1)):
        assert reason(attention, bad, dt.Schedule()) == ""
        assert not any(k.ws_loop for k in gpu_plan(attention, bad, dt.Schedule()).kernels)
    assert reason(attention, args, dt.Schedule(), arch=80) == ""
    off = gpu_plan(attention, args, dt.Schedule(warp_specialize=False))
    assert all(k.gluon is None and not k.ws_loop for k in off.kernels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # CPU tensors: the Triton kernel, silently
        q, k, v = qkv(1, 2, 16, 16, torch.float32, seed=3)
        got = dt.compile(attention)(q, k, v, 0.25)
    ref = torch.softmax(q.double() @ k.double().transpose(-1, -2) * 0.25, -1) @ v.double()
    torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5)


def test_plan_grouped_query_attention():
    """Grouped-query attention plans the same variants (K/V of their own head count, any group that binds:
    H = 5 query heads over G = 2 K/V heads with rep 3 too); it says why not as attention does."""
    for alg, args, kernel in ((gqa_attention, (*gqa(2, 6, 2, 256, 128), 0.1, 3), "ws"),
                              (gqa_attention, (*gqa(2, 5, 2, 256, 128), 0.1, 3), "ws"),
                              (gqa_causal_lit, gqa(1, 6, 2, 128, 64, torch.bfloat16), "pipe")):
        prog = gpu_plan(alg, args)
        g = prog.kernels[0].gluon
        assert len(prog.kernels) == 1 and prog.gluon_note == "" and g.kernel == kernel and g.match.grouped
        src, metas = render(prog)
        assert metas[0].scalars == (["s_scale", "s_rep"] if alg is gqa_attention else []), metas[0].scalars
        assert "grouped-query: K and V read at head h // " + ("rep" if alg is gqa_attention else "3") in src
    q, k, v = gqa(1, 4, 2, 256, 64)
    assert "64 or 128" in reason(gqa_attention, (*gqa(1, 4, 2, 256, 96), 0.1, 2))
    assert "multiples of 128" in reason(gqa_attention, (*gqa(1, 4, 2, 256, 64, T=300), 0.1, 2))
    assert "16-bit dtype" in reason(gqa_attention, (q, k.float(), v.float(), 0.1, 2))
    kt = torch.randn(1, 256, 2, 64).to(F16).transpose(1, 2)            # (B, G, T, D) view of (B, T, G, D)
    assert "K not contiguous" in reason(gqa_attention, (q, kt, v, 0.1, 2))
    assert "sm_90" in reason(gqa_attention, (q, k, v, 0.1, 2), arch=80)
    assert "divisor below 1" in reason(gqa_neg_lit, gqa(1, 1, 1, 128, 64))   # (h // -1 binds with one head)


def test_plan_bf16_and_out_given():
    prog = gpu_plan(causal_attention, (*qkv(2, 3, 128, 128, torch.bfloat16), 0.09))
    assert prog.kernels[0].gluon.dtype == "bfloat16"
    strided = torch.empty(2, 3, 128, 256, dtype=F16)[..., :128]
    assert "out not contiguous" in reason(attention, (*qkv(2, 3, 128, 128), 0.1), out=strided)


COMPILE = """
import json, sys
sys.path.insert(0, {tests!r})
import torch
import test_gluon_attention as T
from dtriton.backends.triton.gluon_kernels import compile_sm90
import os, re, subprocess, tempfile, triton
def usage(ck):
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(ck.asm["cubin"])
    try:
        txt = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    m = re.search(r"REG:(\\d+).*?STACK:(\\d+)", txt)
    return dict(regs=int(m.group(1)), stack=int(m.group(2))) if m else dict(regs=None, stack=None)
rows = []
for name, D, dtype in {cases!r}:
    alg = T.saving(getattr(T, name[7:])) if name.startswith("saving ") else getattr(T, name)
    g = T.gpu_plan(alg, T.compile_args(alg, D, getattr(torch, dtype))).kernels[0].gluon
    ck = compile_sm90(g, neg_scale=name.endswith("causal_attention"))
    ptx = ck.asm["ptx"]
    rows.append(dict(name=name, D=D, dtype=dtype, kernel=g.kernel, smem=ck.metadata.shared,
                     warps=ck.metadata.num_warps, wgmma="wgmma.mma_async" in ptx, bf16="bf16" in ptx,
                     setmaxnreg="setmaxnreg" in ptx, lse=g.match.lse != "", grouped=g.match.grouped,
                     **usage(ck)))
print(json.dumps(rows))
"""


def compile_args(alg, D, dtype):
    """A call of ``alg`` (attention, grouped-query attention or their saving forwards) the compile test plans."""
    if "gqa" not in alg.name:
        return (*qkv(2, 3, 256, D, dtype), D ** -0.5)
    q, k, v = gqa(2, 6, 2, 256, D, dtype)
    return (q, k, v) if "lit" in alg.name else (q, k, v, D ** -0.5, 3)


def test_rendered_gluon_kernel_compiles_for_sm90():
    """The kernels the plan names compile for sm_90 (Triton's toolchain, no GPU), D64/D128, causal or
    not, fp16 and bf16, within the H100/H200 shared-memory limit, with wgmma; the warp-specialised ones
    have 12 warps and their register split. (In a process of its own: in Triton 3.6 a Gluon compile
    after an interpreted launch in the same process can fail to resolve Gluon's builtins.)"""
    import json
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    cases = [("attention", 64, "float16"), ("causal_attention", 64, "float16"), ("attention", 128, "float16"),
             ("causal_attention", 128, "bfloat16"), ("saving attention", 128, "float16"),
             ("saving causal_attention", 64, "bfloat16"), ("gqa_attention", 128, "float16"),
             ("gqa_causal_lit", 128, "bfloat16"), ("gqa_attention", 64, "float16"), ("gqa_causal_lit", 64, "float16"),
             ("saving gqa_attention", 128, "bfloat16")]
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(here), "src"))
    res = subprocess.run([sys.executable, "-c", COMPILE.format(tests=here, cases=cases)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert [(r["name"], r["D"]) for r in rows] == [(n, d) for n, d, _ in cases]
    for r in rows:
        assert 0 < r["smem"] <= 232448 and r["wgmma"] and r["bf16"] == (r["dtype"] == "bfloat16"), r
        assert (r["warps"], r["setmaxnreg"]) == ((12, True) if r["kernel"] == "ws" else (8, False)), r
        assert r["lse"] == r["name"].startswith("saving") and r["grouped"] == ("gqa" in r["name"]), r
        assert r["stack"] in (0, None), r     # no spill stack (None: no cuobjdump to tell)
    print({(r["name"], r["D"], r["dtype"]): (r["kernel"], r["regs"], r["smem"]) for r in rows})


@pytest.mark.parametrize("alg", [attention, causal_attention])
def test_cpu_fallback_matches_default_and_float64(alg):
    """warp_specialize=True on the interpreter: the Triton kernel runs (a ScheduleWarning says why),
    writing every element of a poisoned out=, equal to the default schedule's result and within
    fp16 tolerance of float64."""
    q, k, v = qkv(3, 5, 23, 16, seed=7)
    scale = 0.3
    ref = alg.reference(q.double(), k.double(), v.double(), scale)
    out = torch.full(ref.shape, float("nan"), dtype=F16)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        dt.compile(alg, dt.Schedule(warp_specialize=True))(q, k, v, scale, out=out)
    assert any("Gluon has no interpreter" in str(w.message) for w in got)
    default = dt.compile(alg)(q, k, v, scale)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(out, default, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("alg,H,G,extra", [(gqa_attention, 6, 2, (0.3, 3)), (gqa_attention, 5, 2, (-0.7, 3)),
                                            (gqa_causal_lit, 6, 2, ())])
def test_cpu_fallback_grouped_query_attention(alg, H, G, extra):
    """Grouped-query attention with warp_specialize=True on the interpreter: the Triton kernel runs (the
    ScheduleWarning says why), every element of a poisoned out= written, within fp16 tolerance of
    float64 torch SDPA with enable_gqa (H = G * rep), else of K/V heads repeated by index (H = 5, rep 3)."""
    import torch.nn.functional as F
    q, k, v = gqa(2, H, G, 37, 16, seed=H)
    rep, scale = (extra[1], extra[0]) if extra else (3, 0.125)
    causal = alg is gqa_causal_lit
    heads = torch.arange(H) // rep
    ref = F.scaled_dot_product_attention(q.double(), k.double()[:, heads], v.double()[:, heads], is_causal=causal,
                                         scale=scale)
    if H == G * rep:
        sd = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, scale=scale,
                                            enable_gqa=True)
        torch.testing.assert_close(sd, ref)
    out = torch.full(ref.shape, float("nan"), dtype=F16)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        dt.compile(alg, dt.Schedule(warp_specialize=True))(q, k, v, *extra, out=out)
    assert any("Gluon has no interpreter" in str(w.message) for w in got)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, atol=1e-2, rtol=1e-2)


def emulate(args, kw, S, T):
    """What the recorded launch computes, in float64 on the CPU: for every flat query head ``bh``, its S
    query rows of the Q descriptor against the T key rows the kernel's own K/V head map
    (``gluon_kernels._kv_row``, run as Python) picks from the K and V descriptors, the recorded scale
    (log2 e times it) and causal flag (top-left: key j <= query i). Returns the output's (rows, D) view."""
    from dtriton.backends.triton.gluon import LOG2E
    from dtriton.backends.triton.gluon_kernels import _kv_row
    descs, qk_scale = args[:4], args[5]
    hq, hkv, group = args[-3:]
    q, k, v = (d.base.double() for d in descs[:3])
    out = torch.empty_like(q)
    for bh in range(q.shape[0] // S):
        kv = _kv_row.fn(bh, T, hq, hkv, group)
        s = q[bh * S:(bh + 1) * S] @ k[kv:kv + T].T * (qk_scale / LOG2E)
        if kw["CAUSAL"]:
            s = s.masked_fill(torch.ones(S, T, dtype=torch.bool).triu(1), -float("inf"))
        out[bh * S:(bh + 1) * S] = torch.softmax(s, -1) @ v[kv:kv + T]
    return out


LAUNCH_CASES = [(causal_attention, 64, 5, 5, (), 256, 256), (attention, 128, 5, 5, (), 256, 256),
                (gqa_attention, 128, 5, 2, (3,), 256, 256), (gqa_attention, 64, 4, 4, (1,), 256, 256),
                (gqa_causal_lit, 64, 6, 2, (), 256, 256), (gqa_causal_lit, 128, 3, 1, (), 256, 256),
                (attention_lit, 128, 2, 2, (), 384, 128), (attention_lit, 64, 2, 2, (), 128, 384),
                (attention, 64, 3, 3, (), 256, 640), (gqa_attention, 128, 4, 2, (2,), 128, 256)]


@pytest.mark.parametrize("alg,D,H,G,extra,S,T", LAUNCH_CASES)
def test_runtime_launches_the_gluon_kernel(monkeypatch, alg, D, H, G, extra, S, T):
    """The runtime's path on an sm_90 GPU, the launch itself recorded (no GPU here: the call is routed
    as on the GPU and the Gluon kernel object replaced by a recorder): the printed module binds the
    Gluon kernel, the launcher builds (rows, D) descriptors of Q, K, V (grouped-query: K and V of G
    heads, their own rows) and the output in the planned boxes, the grid (persistent: one program per
    SM), log2(e) times the scale, the K/V head map (HQ, HKV, GROUP), the constants; what the recorded
    arguments address (the kernel's head map run as Python) is the algorithm's float64 result; the query
    and key lengths apart (S != T, causal top-left aligned)."""
    import dtriton.plan.callspec as cs
    import dtriton.runtime.kernel as rk
    from dtriton.backends.triton.gluon import LOG2E
    monkeypatch.setattr(rk, "backend_for", lambda dev: "gpu")
    monkeypatch.setattr(cs, "_arch", lambda dev, interpret: 90)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: type("P", (), {"multi_processor_count": 7}))
    seen = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kw: seen.append((grid, args, kw))

    import dtriton.backends.triton.gluon as gm
    real = gm.launch_gluon
    record = lambda fn, args, meta: real(Recorder(), args, meta)  # noqa: E731
    monkeypatch.setattr(gm, "launch_gluon", record)        # (the slow path and the signature's fast path)
    B = 3
    q, k, v = gqa(B, H, G, S, D, T=T, seed=H + D)
    literal = alg in (gqa_causal_lit, attention_lit)
    grouped = alg in (gqa_attention, gqa_causal_lit)
    call = (q, k, v) + (() if literal else (-0.3,)) + extra
    kern = dt.compile(alg, dt.Schedule(warp_specialize=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)    # the Gluon kernel: no note about dropped knobs
        out = kern(*call)
    assert "gluon_kernels import attn_fwd_" in kern.source
    assert ("grouped-query" in kern.source) == grouped
    assert kern.fast_launcher_for(call).kind is gm.KIND
    again = kern(*call)                                           # the fast path
    given = torch.empty_like(out)
    assert kern(*call, out=given) is given                       # the fast path into out=
    assert len(seen) == 3 and again is not out and again.shape == out.shape
    for n, o_ in ((1, again), (2, given)):
        assert seen[n][0] == seen[0][0] and seen[n][1][4] is o_ and seen[n][1][5:] == seen[0][1][5:]
        assert seen[n][2] == seen[0][2]
        assert [d.base.data_ptr() for d in seen[n][1][:3]] == [t.data_ptr() for t in (q, k, v)]
    (grid, args, kw) = seen[0]
    descs, o, qk_scale, S_, T_ = args[:4], args[4], args[5], args[6], args[7]
    scale = 0.125 if literal else -0.3
    assert o is out and (S_, T_) == (S, T)
    assert qk_scale == pytest.approx(scale * LOG2E) and kw["NEG_SCALE"] == (scale < 0)
    rows = B * H * S
    assert [list(d.shape) for d in descs] == [[rows, D], [B * G * T, D], [B * G * T, D], [rows, D]]
    assert [d.base.data_ptr() for d in descs] == [t.data_ptr() for t in (q, k, v, out)]
    assert tuple(args[-3:]) == ((H, G, (extra or (3,))[0]) if grouped else (1, 1, 1))
    assert kw["CAUSAL"] == (alg in (causal_attention, gqa_causal_lit, attention_lit))
    if D == 64:
        assert grid == (S // 128, B * H) and [list(d.block_shape) for d in descs] == [[128, 64]] * 4
        assert kw["BM"] == 128 and kw["num_warps"] == 8 and len(args) == 11
    else:
        assert grid == ((min(7, rows // 128),) if not kw["CAUSAL"] else (rows // 128,)) and args[8] == rows // 128
        assert [list(d.block_shape) for d in descs] == [[64, 128], [128, 128], [128, 128], [64, 128]]
        assert kw["PINGPONG"] and kw["SEP_O"] == (not kw["CAUSAL"]) and kw["num_warps"] == 4 and len(args) == 12
    ref = alg.reference(q.double(), k.double(), v.double(), *call[3:])
    got = emulate(args, kw, S, T).view(ref.shape)
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-6)


def test_a_plan_reused_for_other_lengths_passes_them(monkeypatch):
    """A call signature planned at S = T = 640 serves a call at S = 640, T = 896 (the same size facts:
    bucket 1024, multiples of 128 not of 256): its launch passes the call's own T and K/V descriptors of
    T rows, and what it addresses is the float64 result (the kernel takes S and T apart)."""
    import dtriton.backends.triton.gluon as gm
    import dtriton.plan.callspec as cs
    import dtriton.runtime.kernel as rk
    monkeypatch.setattr(rk, "backend_for", lambda dev: "gpu")
    monkeypatch.setattr(cs, "_arch", lambda dev, interpret: 90)
    seen = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kw: seen.append((grid, args, kw))

    real = gm.launch_gluon
    record = lambda fn, args, meta: real(Recorder(), args, meta)  # noqa: E731
    monkeypatch.setattr(gm, "launch_gluon", record)
    kern = dt.compile(attention, dt.Schedule(warp_specialize=True))
    for S, T in ((640, 640), (640, 896)):
        q, k, v = qkv(1, 2, S, 64, T=T, seed=T)
        out = kern(q, k, v, 0.1)
        grid, args, kw = seen[-1]
        assert (args[6], args[7]) == (S, T) and list(args[1].shape) == [2 * T, 64]
        got = emulate(args, kw, S, T).view(out.shape)
        torch.testing.assert_close(got, attention.reference(q.double(), k.double(), v.double(), 0.1))
    assert len(seen) == 2


def test_gluon_launch_refuses_a_zero_group(monkeypatch):
    """rep = 0: h // rep has no value; the launcher raises (on the GPU the binding does not check it)."""
    import dtriton.backends.triton.gluon as gm
    g = gpu_plan(gqa_attention, (*gqa(1, 4, 2, 128, 64), 0.1, 2)).kernels[0].gluon
    with pytest.raises(dt.ZeroDivisorError, match="rep is 0"):
        gm.kv_heads(g, *gqa(1, 4, 2, 128, 64)[:2], {"s_scale": 0.1, "s_rep": 0})
    assert gm.kv_heads(g, *gqa(1, 4, 2, 128, 64)[:2], {"s_scale": 0.1, "s_rep": 2}) == (4, 2, 2)


@pytest.mark.parametrize("alg", [causal_attention, gqa_attention])
def test_runtime_saving_forward_stores_lse_and_the_copy(monkeypatch, alg):
    """The forward autograd runs (output, row log-sum-exp in fp32, the normalised output again) as
    the Gluon kernel: its LSE pointer is the fp32 output (STORE_LSE), the third output a copy of the
    first; the fast path returns the three (grouped-query: the head map passed as well)."""
    import dtriton.backends.triton.gluon as gm
    import dtriton.plan.callspec as cs
    import dtriton.runtime.kernel as rk
    monkeypatch.setattr(rk, "backend_for", lambda dev: "gpu")
    monkeypatch.setattr(cs, "_arch", lambda dev, interpret: 90)
    seen = []

    class Recorder:
        def __getitem__(self, grid):
            def run(*args, **kw):
                seen.append((grid, args, kw))
                args[3].base.copy_(torch.randn(args[3].base.shape).to(args[3].base.dtype))   # "the kernel writes O"
                args[4].copy_(torch.arange(args[4].numel(), dtype=torch.float32).view(args[4].shape))   # "... and LSE"
            return run

    real = gm.launch_gluon
    record = lambda fn, args, meta: real(Recorder(), args, meta)  # noqa: E731
    monkeypatch.setattr(gm, "launch_gluon", record)
    aug = saving(alg)
    m = match_attention(aug)
    grouped = alg is gqa_attention
    q, k, v = gqa(3, 5, 3 if grouped else 5, 128, 64)
    call = (q, k, v, 0.125) + ((2,) if grouped else ())
    kern = dt.compile(aug, dt.Schedule(warp_specialize=True))
    for _ in range(2):   # the slow path, then the signature's fast path
        o, lse, o2 = kern(*call)
        grid, args, kw = seen[-1]
        assert tuple(args[-3:]) == ((5, 3, 2) if grouped else (1, 1, 1))
        assert list(args[1].shape) == [3 * k.shape[1] * 128, 64]     # (K's own rows: G heads)
        assert lse.dtype == torch.float32 and kw["STORE_LSE"] and args[4].shape == (3, 5, 128)
        assert sorted(lse.shape) == [3, 5, 128]
        assert torch.equal(lse.permute(m.lse_perm), torch.arange(3 * 5 * 128, dtype=torch.float32).view(3, 5, 128))
        # (written in place where lse in the kernel's (lead, i) order is contiguous, else through a buffer)
        assert (args[4].data_ptr() == lse.data_ptr()) == lse.permute(m.lse_perm).is_contiguous()
        assert o.dtype == o2.dtype == F16 and torch.equal(o, o2.permute(m.copy_perm))
    assert kern.fast_launcher_for(call).kind is gm.KIND and len(seen) == 2
