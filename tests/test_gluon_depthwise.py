"""The Gluon depthwise conv2d as a lowering (plan.gluon_depthwise, backends/triton/gluon_depthwise*.py).

The decision is taken in planning from the algorithm's structure and the call's facts: a channels-last
depthwise convolution ``out[n, h, w, c] = sum over (r, q) of X.pad(0)[n, h*s + r*d - p, w*s + q*d - p, c] *
Wt[r, q, c]`` with a 3x3 filter at stride 1 and dilation 1 on an sm_90 GPU, 16-bit X/Wt/output of one
dtype, C a multiple of 8, contiguous 16-byte aligned tensors. Here (no GPU) the plan is taken with the
call's facts set to an sm_90 GPU, the printed module is checked, the packaged kernel is compiled for sm_90
in a subprocess, the runtime's launch is recorded and what it addresses replayed (the kernel's own strip
and TMA coordinate code, run as Python, with the ring, residue classes, rolling accumulators and clipped
stores of its body) against float64 torch; on the CPU the call runs the Triton kernel.
"""
from __future__ import annotations

import dataclasses
import types
import warnings

import pytest
import torch
import torch.nn.functional as F

import dtriton as dt
from dtriton.backends.triton.kernel import render
from dtriton.library import conv1d, conv2d_nhwc, depthwise_conv2d_nhwc, matmul
from dtriton.plan import call_spec, plan_program
from dtriton.plan.gluon_depthwise import BY_DEFAULT, CONFIGS, match_depthwise

F16, BF16 = torch.float16, torch.bfloat16


@dt.algorithm
def dw_lit(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["R", "Q", "C"], Ho: int, Wo: int):
    """Literals: stride 1 written out, padding 2 rows and 0 columns; the weight first in the product."""
    n, c, h, w, r, q = dt.axes("n c h:Ho w:Wo r q")
    return dt.sum(Wt[r, q, c] * X.pad(0.0)[n, h * 1 + r - 2, w + q, c], over=(r, q))[n, h, w, c]


@dt.algorithm
def dw_dilated(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["R", "Q", "C"], dilation: int, Ho: int, Wo: int):
    """A dilation argument: the kernel reads adjacent columns only (dilation 1 applies)."""
    n, c, h, w, r, q = dt.axes("n c h:Ho w:Wo r q")
    return dt.sum(X.pad(0.0)[n, h + r * dilation - dilation, w + q * dilation - dilation, c] * Wt[r, q, c],
                  over=(r, q))[n, h, w, c]


@dt.algorithm
def dw_nchw(X: dt.Tensor["N", "C", "H", "W"], Wt: dt.Tensor["C", "R", "Q"], Ho: int, Wo: int):
    """Depthwise in NCHW: not channels-last."""
    n, c, h, w, r, q = dt.axes("n c h:Ho w:Wo r q")
    return dt.sum(X.pad(0.0)[n, c, h + r - 1, w + q - 1] * Wt[c, r, q], over=(r, q))[n, c, h, w]


@dt.algorithm
def dw_qrc(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["Q", "R", "C"], Ho: int, Wo: int):
    """The weight read (Q, R, C): not the kernel's layout."""
    n, c, h, w, r, q = dt.axes("n c h:Ho w:Wo r q")
    return dt.sum(X.pad(0.0)[n, h + r - 1, w + q - 1, c] * Wt[q, r, c], over=(r, q))[n, h, w, c]


@dt.algorithm
def dw_pad1(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["R", "Q", "C"], Ho: int, Wo: int):
    """Padded with ones: not the zero fill of TMA."""
    n, c, h, w, r, q = dt.axes("n c h:Ho w:Wo r q")
    return dt.sum(X.pad(1.0)[n, h + r - 1, w + q - 1, c] * Wt[r, q, c], over=(r, q))[n, h, w, c]


def gpu_plan(alg, args, sched=None, arch=90, out=None):
    """The program of a call planned as on a GPU of compute capability ``arch`` (CPU tensors standing in)."""
    b = dataclasses.replace(alg.bind(args), device=torch.device("cuda"))
    full = dt.compile(alg, sched or dt.Schedule(warp_specialize=True)).complete(b)
    spec = dataclasses.replace(call_spec(alg, b, args, False, out), arch=arch)
    return plan_program(alg, full, b, spec)


def dw_args(N=2, H=13, W=24, C=64, R=3, Q=3, pad=1, stride=1, dtype=F16, seed=0, ho=None, wo=None, torch_w=False):
    """(X, Wt, stride, padding, Ho, Wo) of depthwise_conv2d_nhwc (Ho, Wo: torch's sizes unless given;
    ``torch_w``: Wt a view of torch's (C, 1, R, Q) weight, ``w[:, 0].permute(1, 2, 0)``)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, H, W, C, generator=g).to(dtype)
    w = (torch.randn(R, Q, C, generator=g) / 3).to(dtype)
    if torch_w:
        w = w.permute(2, 0, 1)[:, None].contiguous()[:, 0].permute(1, 2, 0)
    ho = (H + 2 * pad - R) // stride + 1 if ho is None else ho
    wo = (W + 2 * pad - Q) // stride + 1 if wo is None else wo
    return x, w, stride, pad, ho, wo


def torch_ref(x, w, pad_h, pad_w, ho, wo):
    """float64 ``out[n, h, w, c] = sum of x.pad(0)[n, h + r - pad_h, w + q - pad_w, c] * w[r, q, c]`` for h <
    ho, w < wo (torch's depthwise conv2d on an input zero-padded to cover them), NHWC."""
    N, H, W, C = x.shape
    R, Q, _ = w.shape
    xp = torch.zeros(N, max(H, ho + R - 1 - pad_h) + pad_h, max(W, wo + Q - 1 - pad_w) + pad_w, C, dtype=torch.float64)
    xp[:, pad_h:pad_h + H, pad_w:pad_w + W] = x.double()
    y = F.conv2d(xp.permute(0, 3, 1, 2), w.double().permute(2, 0, 1)[:, None], groups=C)
    return y.permute(0, 2, 3, 1)[:, :ho, :wo]


def test_match_channels_last_depthwise():
    m, why = match_depthwise(depthwise_conv2d_nhwc)
    assert why == "" and (m.x, m.w, m.out, m.rows, m.c, m.taps) == ("X", "Wt", "out", ("n", "h", "w"), "c", ("r", "q"))
    assert m.stride == ((((("stride",), 1),),) * 2) and m.dilation == (((((), 1),),) * 2)
    assert m.offset == ((((("padding",), -1),),) * 2) and m.params == ("padding",)
    lit, why = match_depthwise(dw_lit)
    assert why == "" and lit.stride == (((((), 1),),) * 2) and lit.offset == ((((), -2),), ()) and lit.params == ()
    dil, why = match_depthwise(dw_dilated)
    assert why == "" and dil.dilation == ((((("dilation",), 1),),) * 2) and dil.params == ("dilation",)


def test_match_other_convolutions_say_why():
    for alg in (matmul, conv2d_nhwc):   # not a convolution; a sum over three axes: plan.gluon_conv's
        assert match_depthwise(alg) == (None, "")
    for alg, words in ((conv1d, "4-d input"), (dw_nchw, "channels-last"), (dw_qrc, "Wt[r, q, c]"),
                       (dw_pad1, "padded with 1.0, not with zeros")):
        m, why = match_depthwise(alg)
        assert m is None and why.startswith("the Gluon depthwise conv2d does not apply") and words in why, (alg.name, why)


def reason(alg, args, sched=None, arch=90, out=None) -> str:
    prog = gpu_plan(alg, args, sched, arch, out)
    assert all(k.gluon is None for k in prog.kernels)
    return prog.gluon_note


@pytest.mark.parametrize("alg,args,cfg", [
    (depthwise_conv2d_nhwc, dw_args(), (13, 32, 64)),                          # odd sizes: TW32, BH = Ho
    (depthwise_conv2d_nhwc, dw_args(N=32, H=56, W=56, C=256), (14, 64, 64)),   # the bench's shape
    (depthwise_conv2d_nhwc, dw_args(H=30, W=70, C=40, pad=2, dtype=BF16), (11, 64, 64)),
    (depthwise_conv2d_nhwc, dw_args(H=9, W=7, C=24, pad=0), (7, 16, 32)),
    (depthwise_conv2d_nhwc, dw_args(N=1, H=5, W=6, C=8), (5, 16, 32)),         # an image smaller than a strip
    (dw_lit, dw_args(H=20, W=40, C=32)[:2] + (20, 38), (10, 64, 32)),
    (dw_dilated, dw_args(C=128)[:2] + (1, 13, 24), (13, 32, 64))])
def test_plan_eligible_names_the_gluon_kernel(alg, args, cfg):
    prog = gpu_plan(alg, args)
    assert len(prog.kernels) == 1 and prog.gluon_note == "" and not prog.buffers and not prog.output_direct
    g = prog.kernels[0].gluon
    assert g is not None and (g.bh, g.tw, g.bc) == cfg
    assert (g.v, g.nw, g.stages, g.persist) == CONFIGS[(g.tw, g.bc)][:4]
    assert g.dtype == str(args[0].dtype).replace("torch.", "")
    src, metas = render(prog)
    assert f"from dtriton.backends.triton.gluon_depthwise_kernels import dw3x3_rows as {metas[0].name}" in src
    assert metas[0].tensors == ["X", "Wt", "out"] and metas[0].tensor_ndim == {"X": 4, "Wt": 3, "out": 4}
    assert metas[0].scalars == {depthwise_conv2d_nhwc: ["s_padding"], dw_lit: [], dw_dilated: ["s_dilation"]}[alg]
    assert metas[0].consts == dict(BH=g.bh, TW=g.tw, BC=g.bc, V=g.v, NW=g.nw, STAGES=g.stages)
    # the default schedule too (warp_specialize left to the compiler)
    assert gpu_plan(alg, args, dt.Schedule()).kernels[0].gluon == (g if BY_DEFAULT else None)


def test_plan_ineligible_says_why():
    a = dw_args()
    assert reason(depthwise_conv2d_nhwc, a, dt.Schedule(warp_specialize=False)) == ""   # turned off
    assert "stride 1" in reason(depthwise_conv2d_nhwc, dw_args(stride=2))
    assert "dilation 1" in reason(dw_dilated, a[:2] + (2, 9, 20))
    assert "3x3 filters (r=5, q=5)" in reason(depthwise_conv2d_nhwc, dw_args(R=5, Q=5, pad=2))
    assert "3x3 filters (r=3, q=1)" in reason(depthwise_conv2d_nhwc, dw_args(R=3, Q=1))
    assert "multiple of 8 (16-byte TMA row strides) (c=12)" in reason(depthwise_conv2d_nhwc, dw_args(C=12))
    assert "16-bit dtype" in reason(depthwise_conv2d_nhwc, dw_args(dtype=torch.float32))
    assert "16-bit dtype" in reason(depthwise_conv2d_nhwc, (a[0], a[1].bfloat16(), *a[2:]))
    xt = torch.randn(2, 64, 13, 24).half().permute(0, 2, 3, 1)                 # NHWC view of NCHW memory
    assert "X not contiguous" in reason(depthwise_conv2d_nhwc, (xt, *a[1:]))
    wt = torch.randn(64, 3, 3).half().permute(1, 2, 0)                          # torch's (C, 1, 3, 3) permuted:
    assert gpu_plan(depthwise_conv2d_nhwc, (a[0], wt, *a[2:])).kernels[0].gluon is not None   # any strides
    strided = torch.empty(2, 13, 24, 128, dtype=F16)[..., :64]
    assert "out not contiguous" in reason(depthwise_conv2d_nhwc, a, out=strided)
    assert "sm_90" in reason(depthwise_conv2d_nhwc, a, arch=80) and "sm_90" in reason(depthwise_conv2d_nhwc, a, arch=100)
    assert "padded with 1.0, not with zeros" in reason(dw_pad1, a[:2] + a[4:])
    with warnings.catch_warnings(record=True) as got:                           # the interpreter
        warnings.simplefilter("always")
        x, w, *rest = dw_args(N=1, H=5, W=6, C=16, seed=2)
        out = dt.compile(depthwise_conv2d_nhwc, dt.Schedule(warp_specialize=True))(x.float(), w.float(), *rest)
    assert out.shape == (1, 5, 6, 16)
    told = [str(w_.message) for w_ in got if "warp_specialize" in str(w_.message)]
    assert any("Gluon has no interpreter" in str(w_.message) and issubclass(w_.category, dt.ScheduleWarning)
               for w_ in got), [str(w_.message) for w_ in got]
    assert len(told) == 1 and "CUDA tensors" in told[0], told   # that reason alone (no "needs access='tma'" beside it)


def test_default_schedule_falls_back_silently():
    """``warp_specialize`` None: an ineligible call plans the Triton kernel with no note; False never
    plans the Gluon kernel."""
    for args in (dw_args(stride=2), dw_args(C=12), dw_args(dtype=torch.float32), dw_args(R=5, Q=5, pad=2)):
        assert reason(depthwise_conv2d_nhwc, args, dt.Schedule()) == ""
    assert reason(depthwise_conv2d_nhwc, dw_args(), dt.Schedule(), arch=80) == ""
    assert reason(depthwise_conv2d_nhwc, dw_args(), dt.Schedule(warp_specialize=False)) == ""


@pytest.mark.parametrize("dtype", [torch.float32, F16])
def test_cpu_call_runs_the_triton_kernel(dtype):
    """On the CPU (the interpreter) the default schedule runs the Triton kernel, every element of a
    poisoned out= written, matching float64 torch (padding 2, odd sizes)."""
    x, w, s, p, ho, wo = dw_args(N=2, H=7, W=9, C=24, pad=2, dtype=dtype, seed=5)
    ref = torch_ref(x, w, p, p, ho, wo)
    out = torch.full(ref.shape, float("nan"), dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        kern = dt.compile(depthwise_conv2d_nhwc)
        kern(x, w, s, p, ho, wo, out=out)
    assert "gluon_depthwise_kernels" not in kern.source_for(x, w, s, p, ho, wo)
    assert torch.isfinite(out).all()
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


COMPILE = """
import json, os, re, subprocess, sys, tempfile
import triton
from dtriton.plan.gluon_depthwise import CONFIGS
from dtriton.backends.triton.gluon_depthwise_kernels import compile_sm90
tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
rows = []
for (tw, bc), (v, nw, stages, persist, _) in CONFIGS.items():
    for dtype in ("float16", "bfloat16"):
        ck = compile_sm90(dict(BH=14, TW=tw, BC=bc, V=v, NW=nw, STAGES=stages), dtype)
        ptx = ck.asm["ptx"]
        regs = stack = None
        if os.path.exists(tool):
            with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
                f.write(ck.asm["cubin"])
            txt = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
            os.unlink(f.name)
            m = re.search(r"REG:(\\d+).*?STACK:(\\d+)", txt)
            regs, stack = (int(m.group(1)), int(m.group(2))) if m else (None, None)
        rows.append(dict(tw=tw, bc=bc, nw=nw, persist=persist, dtype=dtype, smem=ck.metadata.shared,
                         warps=ck.metadata.num_warps, regs=regs, stack=stack, bf16="bf16" in ptx,
                         tma="cp.async.bulk.tensor.4d" in ptx, mbarrier="mbarrier.try_wait" in ptx))
print(json.dumps(rows))
"""


def test_packaged_kernels_compile_for_sm90():
    """Every configuration the plan picks compiles for sm_90 (Triton's toolchain, no GPU), fp16 and bf16:
    its warps, 4-d TMA row boxes waited on through mbarriers, no register spills, and (where cuobjdump is
    there to read the registers) ``persist`` programs fitting an SM's 64K registers and 227 KB of shared
    memory at once. (In a process of its own, as the conv2d kernels' compile test.)"""
    import json
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(here), "src"))
    res = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(rows) == 2 * len(CONFIGS)
    for r in rows:
        assert r["warps"] == r["nw"] and r["tma"] and r["mbarrier"] and r["bf16"] == (r["dtype"] == "bfloat16"), r
        assert 0 < r["smem"] * max(1, r["persist"]) <= 232448, r
        if r["regs"] is not None:
            assert r["stack"] == 0 and r["regs"] * 32 * r["nw"] * max(1, r["persist"]) <= 65536, r


# ------------------------------------------------------------------------------------------------------
# the runtime's launch, recorded, and what it addresses replayed with the kernel's own coordinate code
# ------------------------------------------------------------------------------------------------------

def _box(x, coord, box):
    """What a TMA box of shape ``box`` at ``coord`` of ``x`` reads: zeros outside ``x``."""
    out = torch.zeros(box, dtype=x.dtype)
    src, dst = [], []
    for c, b, n in zip(coord, box, x.shape):
        lo, hi = max(c, 0), min(c + b, n)
        if lo >= hi:
            return out
        src.append(slice(lo, hi))
        dst.append(slice(lo - c, hi - c))
    out[tuple(dst)] = x[tuple(src)]
    return out


def replay(monkeypatch, grid, args, kw):
    """What the recorded launch of ``dw3x3_rows`` computes, in float64 on the CPU: each program's strips
    (``_strip``, run as Python), the ring of its body (the prologue's STAGES - 1 rows, then each step
    refilling the slot STAGES - 1 rows ahead, from the next strip past the current one's end) with the
    kernel's own ``_issue`` (run as Python, its TMA and barrier calls recorded), the boxes read with zero
    fill, the pieces P(m) (stride-4 windows of box A or B), the residue classes with their rolling
    accumulators, and the clipped stores."""
    import dtriton.backends.triton.gluon_depthwise_kernels as K
    copies = []
    monkeypatch.setattr(K, "_G", K.G)
    monkeypatch.setattr(K, "mbarrier", types.SimpleNamespace(expect=lambda bar, n: None))
    monkeypatch.setattr(K, "tma", types.SimpleNamespace(
        async_copy_global_to_shared=lambda desc, coord, bar, dst: copies.append((dst, list(coord)))))
    x_desc, w, y_t, strips, Ho, Wo, C, off_h, off_w, HB, WB, CB, sw_r, sw_q, sw_c = args
    BH, TW, BC, ST, G = kw["BH"], kw["TW"], kw["BC"], kw["STAGES"], K.G
    R = BH + 2
    x, wd = x_desc.base.double(), torch.as_strided(w, (3, 3, C), (sw_r, sw_q, sw_c), w.storage_offset()).double()
    y = torch.full(y_t.shape, float("nan"), dtype=torch.float64)
    stub = types.SimpleNamespace(block_type=types.SimpleNamespace(nbytes=0))
    idx = types.SimpleNamespace(index=lambda i: i)
    (programs,) = grid
    assert programs % CB == 0 and programs <= strips * CB
    for pid in range(programs):
        cb, j0, jstep = pid % CB, pid // CB, programs // CB
        mine = (strips - j0 + jstep - 1) // jstep
        K_ = mine * R
        ring = {}

        def issue(k, n, hb, wb, r):
            copies.clear()
            K._issue.fn(stub, idx, idx, k, n, hb, wb, r, cb, off_h, off_w, BH, TW, BC, ST)
            assert [d for d, _ in copies] == [2 * (k % ST), 2 * (k % ST) + 1]
            ring[k % ST] = (k, [_box(x, c, [1, 1, TW, BC])[0, 0] for _, c in copies])

        n, hb, wb = K._strip.fn(j0, HB, WB)
        for s in range(ST - 1):
            if s < K_:
                issue(s, n, hb, wb, s)
        c0 = cb * BC
        wv = torch.zeros(3, 3, BC, dtype=torch.float64)
        wv[:, :, :max(0, min(BC, C - c0))] = wd[:, :, c0:c0 + BC]
        acc_i = [torch.zeros(TW // G, BC, dtype=torch.float64) for _ in range(G)]
        acc_p = [torch.zeros(TW // G, BC, dtype=torch.float64) for _ in range(G)]
        for i in range(mine):
            n, hb, wb = K._strip.fn(j0 + i * jstep, HB, WB)
            n_, hb_, wb_ = K._strip.fn(j0 + (i + 1) * jstep, HB, WB)
            for r in range(R):
                k = i * R + r
                if k + ST - 1 < K_:
                    if r + ST - 1 < R:
                        issue(k + ST - 1, n, hb, wb, r + ST - 1)
                    else:
                        issue(k + ST - 1, n_, hb_, wb_, r + ST - 1 - R)
                got, (A, B) = ring[k % ST]
                assert got == k
                P = [A.view(TW // G, G, BC)[:, m] if m < G else B.view(TW // G, G, BC)[:, m - G] for m in range(G + 2)]
                o = hb * BH + r - 2
                for b in range(G):
                    f = P[b:b + 3]
                    done = acc_p[b] + sum(f[q] * wv[2, q] for q in range(3))
                    acc_p[b] = acc_i[b] + sum(f[q] * wv[1, q] for q in range(3))
                    acc_i[b] = sum(f[q] * wv[0, q] for q in range(3))
                    cols = wb * TW + G * torch.arange(TW // G) + b
                    keep = cols < Wo
                    if r >= 2 and o < Ho:
                        y[n, o, cols[keep], c0:c0 + BC] = done[keep, :min(BC, C - c0)]
    return y


dw_free = dt.algorithm(depthwise_conv2d_nhwc.fn)   # the library's depthwise without its dt.requires
LAUNCH_CASES = [(depthwise_conv2d_nhwc, dict(N=2, H=13, W=24, C=64)),                 # TW32, a program a strip
                (depthwise_conv2d_nhwc, dict(N=3, H=20, W=37, C=256)),                # TW64 persistent, CB 4
                (depthwise_conv2d_nhwc, dict(N=2, H=9, W=70, C=40, pad=2, dtype=BF16)),   # 2 column tiles, C < 2 BC
                (depthwise_conv2d_nhwc, dict(N=12, H=30, W=40, C=24, pad=0)),         # BC32 persistent: 24 strips
                (depthwise_conv2d_nhwc, dict(N=1, H=5, W=6, C=8, torch_w=True)),      # an image smaller than a strip;
                #                                                                       torch's weight, a view
                (dw_free, dict(N=2, H=11, W=35, C=64, ho=7, wo=40)),    # Ho, Wo given: fewer / more (the
                #   library's checks torch's output size: its body, traced without the constraints)
                (dw_lit, dict(N=2, H=6, W=50, C=32, ho=8, wo=48))]


@pytest.mark.parametrize("alg,kw", LAUNCH_CASES)
def test_runtime_launches_the_gluon_kernel(monkeypatch, alg, kw):
    """The runtime's path on an sm_90 GPU, the launch recorded (no GPU here: the call is routed as on the
    GPU and the kernel object replaced by a recorder): the printed module binds the Gluon kernel; the
    launcher builds a 4-d descriptor of X in row boxes, the grid (persistent over 5 SMs where planned so),
    the call's offsets (-padding), the strip counts; the fast path and out= launch the same; what the
    recorded arguments address is float64 torch's depthwise conv2d."""
    import dtriton.backends.triton.gluon_depthwise as gd
    import dtriton.plan.callspec as cs
    import dtriton.runtime.kernel as rk
    monkeypatch.setattr(rk, "backend_for", lambda dev: "gpu")
    monkeypatch.setattr(cs, "_arch", lambda dev, interpret: 90)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: type("P", (), {"multi_processor_count": 5}))
    seen = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kw: seen.append((grid, args, kw))

    real = gd.launch_gluon_depthwise
    record = lambda fn, args, meta: real(Recorder(), args, meta)  # noqa: E731
    monkeypatch.setattr(gd, "launch_gluon_depthwise", record)   # (the slow path and the signature's fast path)
    x, w, s, pad, ho, wo = dw_args(**kw, seed=len(kw))
    pad_h, pad_w = (2, 0) if alg is dw_lit else (pad, pad)
    call = (x, w, ho, wo) if alg is dw_lit else (x, w, s, pad, ho, wo)
    kern = dt.compile(alg, None if BY_DEFAULT else dt.Schedule(warp_specialize=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        out = kern(*call)
    assert "gluon_depthwise_kernels import dw3x3_rows" in kern.source
    assert kern.fast_launcher_for(call).kind is gd.KIND
    again = kern(*call)
    given = torch.empty_like(out)
    assert kern(*call, out=given) is given
    assert len(seen) == 3 and again is not out and again.shape == out.shape == given.shape == (x.shape[0], ho, wo,
                                                                                                x.shape[3])
    for n, o_ in ((1, again), (2, given)):
        assert seen[n][0] == seen[0][0] and seen[n][1][3:] == seen[0][1][3:] and seen[n][2] == seen[0][2]
        assert seen[n][1][2] is o_ and [seen[n][1][0].base.data_ptr(), seen[n][1][1].data_ptr()] == [x.data_ptr(),
                                                                                                  w.data_ptr()]
    grid, args, kwargs = seen[0]
    N, _, _, C = x.shape
    BH, TW, BC = kwargs["BH"], kwargs["TW"], kwargs["BC"]
    assert kwargs["num_warps"] == kwargs["NW"] and list(args[0].block_shape) == [1, 1, TW, BC]
    assert list(args[0].shape) == list(x.shape)
    HB, WB, CB = -(-ho // BH), -(-wo // TW), -(-C // BC)
    assert tuple(args[3:]) == (N * HB * WB, ho, wo, C, -pad_h, -pad_w, HB, WB, CB, *w.stride())
    assert w.is_contiguous() != kw.get("torch_w", False)
    persist = CONFIGS[(TW, BC)][3]
    assert grid == ((min(N * HB * WB * CB, max(CB, 5 * persist // CB * CB)) if persist else N * HB * WB * CB),)
    got = replay(monkeypatch, grid, args, kwargs)
    torch.testing.assert_close(got, torch_ref(x, w, pad_h, pad_w, ho, wo), atol=1e-9, rtol=1e-9)


def test_space_searches_the_gluon_depthwise_on_a_tma_gpu():
    """A 16-bit channels-last depthwise conv on a TMA GPU: warp_specialize None (the heuristic's: the Gluon
    kernel) and False (the Triton kernel); exploration tries the heuristic's point, then with it False the
    heuristic's tiles and their neighbours (tiles do not change the Gluon kernel); fp32 and the interpreter
    do not search it."""
    from dtriton.tune.samplers import base_point, warm_start
    from dtriton.tune.space import Space
    args = dw_args(N=32, H=56, W=56, C=256)
    dims = Space.derive(depthwise_conv2d_nhwc, args, target="gpu").dimensions()
    on = None if BY_DEFAULT else True    # (True while the default does not pick the Gluon kernel)
    assert dict(dims)["warp_specialize"] == (on, False)
    b = dataclasses.replace(depthwise_conv2d_nhwc.bind(args), device=torch.device("cuda"))
    base = dt.compile(depthwise_conv2d_nhwc).complete(b)
    start = base_point(dims, base)
    assert base.warp_specialize is None and start["warp_specialize"] is None
    seeds = warm_start(depthwise_conv2d_nhwc, dims, start, base, b)
    assert seeds[:2] == [dict(start, warp_specialize=on), dict(start, warp_specialize=False)]
    assert len(seeds) > 2 and all(p["warp_specialize"] is False for p in seeds[1:])
    assert "warp_specialize" not in dict(Space.derive(depthwise_conv2d_nhwc, dw_args(dtype=torch.float32),
                                                      target="gpu").dimensions())
    assert "warp_specialize" not in dict(Space.derive(depthwise_conv2d_nhwc, args).dimensions())
