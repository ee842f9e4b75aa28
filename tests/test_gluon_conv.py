"""The Gluon conv2d as a lowering (plan.gluon_conv, backends/triton/gluon_conv*.py).

The decision is taken in planning from the algorithm's structure and the call's facts: a channels-last
2-d convolution ``out[n, h, w, o] = sum over (c, r, q) of X.pad(0)[n, h*s + r*d - p, w*s + q*d - p, c] *
Wt[o, r, q, c]`` at stride 1 on an sm_90 GPU, 16-bit X/Wt/output of one dtype, C a multiple of 64, O of
128, contiguous 16-byte aligned tensors. Here (no GPU) the plan is taken with the call's facts set to an
sm_90 GPU, the printed module is checked, the packaged kernel is compiled for sm_90 in a subprocess, the
runtime's launch is recorded and what it addresses replayed (the kernel's own coordinate code, run as
Python) against float64 torch; on the CPU the call runs the Triton kernel.
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
from dtriton.library import conv2d, conv2d_nhwc, depthwise_conv2d_nhwc, grouped_conv2d_nhwc, matmul
from dtriton.plan.gluon_conv import BY_DEFAULT
from dtriton.plan import call_spec, match_conv2d, plan_program

F16 = torch.float16


@dt.algorithm
def conv_lit(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["O", "R", "Q", "C"], Ho: int, Wo: int):
    """Literals: stride 1 written out, dilation 2, padding 2; the weight first in the product."""
    n, o, c, h, w, r, q = dt.axes("n o c h:Ho w:Wo r q")
    return dt.sum(Wt[o, r, q, c] * X.pad(0.0)[n, h * 1 + r * 2 - 2, w + q * 2 - 2, c], over=(c, r, q))[n, h, w, o]


@dt.algorithm
def conv_valid(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["O", "R", "Q", "C"], Ho: int, Wo: int):
    """Padding 0, X not padded (every read in bounds)."""
    n, o, c, h, w, r, q = dt.axes("n o c h:Ho w:Wo r q")
    return dt.sum(X[n, h + r, w + q, c] * Wt[o, r, q, c], over=(c, r, q))[n, h, w, o]


@dt.algorithm
def conv_oqrc(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["O", "Q", "R", "C"], Ho: int, Wo: int):
    """The weight read (O, Q, R, C): not the kernel's layout."""
    n, o, c, h, w, r, q = dt.axes("n o c h:Ho w:Wo r q")
    return dt.sum(X.pad(0.0)[n, h + r - 1, w + q - 1, c] * Wt[o, q, r, c], over=(c, r, q))[n, h, w, o]


@dt.algorithm
def conv_pad1(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["O", "R", "Q", "C"], Ho: int, Wo: int):
    """Padded with ones: not the zero fill of TMA."""
    n, o, c, h, w, r, q = dt.axes("n o c h:Ho w:Wo r q")
    return dt.sum(X.pad(1.0)[n, h + r - 1, w + q - 1, c] * Wt[o, r, q, c], over=(c, r, q))[n, h, w, o]


def gpu_plan(alg, args, sched=None, arch=90, out=None):
    """The program of a call planned as on a GPU of compute capability ``arch`` (CPU tensors standing in)."""
    b = dataclasses.replace(alg.bind(args), device=torch.device("cuda"))
    full = dt.compile(alg, sched or dt.Schedule(warp_specialize=True)).complete(b)
    spec = dataclasses.replace(call_spec(alg, b, args, False, out), arch=arch)
    return plan_program(alg, full, b, spec)


def osize(n, k, p, d=1):
    return n + 2 * p - d * (k - 1)


def conv_args(N=2, H=13, W=24, C=64, O=256, R=3, Q=3, pad=1, dil=1, stride=1, dtype=F16, seed=0, lit=False):
    """(X, Wt, [stride, padding, dilation,] Ho, Wo) of conv2d_nhwc (``lit``: of the literal algorithms)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, H, W, C, generator=g).to(dtype)
    w = (torch.randn(O, R, Q, C, generator=g) / (R * Q * C) ** 0.5).to(dtype)
    ho, wo = (osize(H, R, pad, dil) - 1) // stride + 1, (osize(W, Q, pad, dil) - 1) // stride + 1
    return (x, w, ho, wo) if lit else (x, w, stride, pad, dil, ho, wo)


def torch_ref(x, w, stride=1, pad=1, dil=1):
    """float64 torch conv2d of NHWC ``x`` and (O, R, Q, C) ``w``, NHWC."""
    y = F.conv2d(x.double().permute(0, 3, 1, 2), w.double().permute(0, 3, 1, 2), stride=stride, padding=pad,
                 dilation=dil)
    return y.permute(0, 2, 3, 1)


def test_match_channels_last_conv2d():
    m, why = match_conv2d(conv2d_nhwc)
    assert why == "" and (m.x, m.w, m.out, m.rows, m.o, m.taps, m.c) == ("X", "Wt", "out", ("n", "h", "w"), "o",
                                                                          ("r", "q"), "c")
    assert m.stride == ((((("stride",), 1),),) * 2) and m.dilation == ((((("dilation",), 1),),) * 2)
    assert m.offset == ((((("padding",), -1),),) * 2) and m.params == ("dilation", "padding", "stride")
    lit, why = match_conv2d(conv_lit)
    assert why == "" and lit.stride == (((((), 1),),) * 2) and lit.dilation == (((((), 2),),) * 2)
    assert lit.offset == (((((), -2),),) * 2) and lit.params == () and lit.x == "X" and lit.w == "Wt"
    valid, _ = match_conv2d(conv_valid)
    assert valid.offset == ((), ()) and valid.dilation == (((((), 1),),) * 2)


def test_affine_index_keeps_the_arguments_symbolic():
    """``ir.affine_index``: the coefficients and constant of an affine index as polynomials in int
    arguments and literals (``poly_value`` evaluates them); a product of axes, ``//`` or a float: None."""
    from dtriton.ir import Axis, Binary, Const, ScalarParam, affine_index, poly_value
    h, r = Axis("h"), Axis("r")
    s, t, d, p = (ScalarParam(n, int) for n in "stdp")
    one = Const(1, integer=True)
    e = Binary("sub", Binary("add", Binary("mul", h, Binary("mul", s, t)), Binary("mul", Binary("sub", d, one), r)),
               Binary("add", p, one))
    got = affine_index(e)
    assert got == {"h": ((("s", "t"), 1),), "r": (((), -1), (("d",), 1)), "": (((), -1), (("p",), -1))}
    assert [poly_value(got[k], dict(s=2, t=3, d=4, p=5)) for k in ("h", "r", "")] == [6, 3, -6]
    assert poly_value(got["h"], {"s": 1}) is None
    assert affine_index(Binary("mul", h, r)) is None and affine_index(Binary("floordiv", h, s)) is None
    assert affine_index(Binary("add", h, Const(0.5))) is None and affine_index(Binary("sub", h, h)) == {}


def test_match_other_convolutions_say_why():
    assert match_conv2d(matmul) == (None, "")                                  # not a convolution
    for alg, words in ((depthwise_conv2d_nhwc, "depthwise"), (grouped_conv2d_nhwc, "4-d input"),
                       (conv2d, "channels-last"), (conv_oqrc, "Wt[o, r, q, c]")):
        m, why = match_conv2d(alg)
        assert m is None and why.startswith("the Gluon conv2d does not apply") and words in why, (alg.name, why)


def reason(alg, args, sched=None, arch=90, out=None) -> str:
    prog = gpu_plan(alg, args, sched, arch, out)
    assert all(k.gluon is None for k in prog.kernels)
    return prog.gluon_note


@pytest.mark.parametrize("alg,kw,bn", [
    (conv2d_nhwc, {}, 256),                                        # the bench's form, odd sizes
    (conv2d_nhwc, dict(O=128, dtype=torch.bfloat16), 128),
    (conv2d_nhwc, dict(pad=2, dil=2), 256),
    (conv2d_nhwc, dict(pad=0, R=1, Q=1, C=128, O=384), 128),
    (conv_lit, dict(pad=2, dil=2, lit=True), 256),
    (conv_valid, dict(pad=0, lit=True, dtype=torch.bfloat16), 256)])
def test_plan_eligible_names_the_gluon_kernel(alg, kw, bn):
    prog = gpu_plan(alg, conv_args(**kw))
    assert len(prog.kernels) == 1 and prog.gluon_note == "" and not prog.buffers and not prog.output_direct
    g = prog.kernels[0].gluon
    assert g is not None and g.bn == bn and (g.mb, g.nc, g.stages, g.persist) == ((2, 2, 3, True) if bn == 256 else
                                                                                  (4, 2, 3, True))
    assert g.dtype == str(kw.get("dtype", F16)).replace("torch.", "")
    src, metas = render(prog)
    assert f"from dtriton.backends.triton.gluon_conv_kernels import conv2d_ws as {metas[0].name}" in src
    assert metas[0].tensors == ["X", "Wt", "out"] and metas[0].tensor_ndim == {"X": 4, "Wt": 4, "out": 4}
    assert metas[0].scalars == ([] if alg is not conv2d_nhwc else ["s_dilation", "s_padding", "s_stride"])
    assert metas[0].consts["BN"] == bn and metas[0].consts["NC"] == 2
    # the default schedule too (warp_specialize left to the compiler)
    assert gpu_plan(alg, conv_args(**kw), dt.Schedule()).kernels[0].gluon == (g if BY_DEFAULT else None)


def test_plan_ineligible_says_why():
    a = conv_args()
    assert reason(conv2d_nhwc, a, dt.Schedule(warp_specialize=False)) == ""   # turned off
    assert "stride 1" in reason(conv2d_nhwc, conv_args(stride=2))
    # (a depthwise conv is plan.gluon_depthwise's: at stride 2 its reason, tests/test_gluon_depthwise.py)
    assert "depthwise" in reason(depthwise_conv2d_nhwc, (a[0], torch.randn(3, 3, 64).half(), 2, 1, 7, 12))
    xg = torch.randn(2, 13, 24, 2, 64).half()
    assert "4-d input" in reason(grouped_conv2d_nhwc, (xg, torch.randn(2, 128, 3, 3, 64).half(), 1, 1, 1, 13, 24))
    assert "multiple of 64 (c=48)" in reason(conv2d_nhwc, conv_args(C=48))
    assert "positive multiple of 128 (o=96)" in reason(conv2d_nhwc, conv_args(O=96))
    assert "16-bit dtype" in reason(conv2d_nhwc, conv_args(dtype=torch.float32))
    assert "16-bit dtype" in reason(conv2d_nhwc, (a[0], a[1].bfloat16(), *a[2:]))
    xt = torch.randn(2, 64, 13, 24).half().permute(0, 2, 3, 1)                 # NHWC view of NCHW memory
    assert "X not contiguous" in reason(conv2d_nhwc, (xt, *a[1:]))
    strided = torch.empty(2, 13, 24, 512, dtype=F16)[..., :256]
    assert "out not contiguous" in reason(conv2d_nhwc, a, out=strided)
    assert "sm_90" in reason(conv2d_nhwc, a, arch=80) and "sm_90" in reason(conv2d_nhwc, a, arch=100)
    assert "padded with 1.0, not with zeros" in reason(conv_pad1, conv_args(lit=True))
    with warnings.catch_warnings(record=True) as got:                           # the interpreter
        warnings.simplefilter("always")
        x, w, *rest = conv_args(N=1, H=5, W=6, C=64, O=128, seed=2)
        out = dt.compile(conv2d_nhwc, dt.Schedule(warp_specialize=True))(x.float(), w.float(), *rest)
    assert out.shape == (1, 5, 6, 128)
    told = [str(w_.message) for w_ in got if "warp_specialize" in str(w_.message)]
    assert any("Gluon has no interpreter" in str(w_.message) and issubclass(w_.category, dt.ScheduleWarning)
               for w_ in got), [str(w_.message) for w_ in got]
    assert len(told) == 1 and "CUDA tensors" in told[0], told   # that reason alone (no "needs access='tma'" beside it)


def test_default_schedule_falls_back_silently():
    """``warp_specialize`` None: an ineligible call plans the Triton kernel with no note; False never
    plans the Gluon kernel."""
    for args in (conv_args(stride=2), conv_args(C=48), conv_args(dtype=torch.float32), conv_args(O=64)):
        assert reason(conv2d_nhwc, args, dt.Schedule()) == ""
    assert reason(conv2d_nhwc, conv_args(), dt.Schedule(), arch=80) == ""
    assert reason(conv2d_nhwc, conv_args(), dt.Schedule(warp_specialize=False)) == ""


@pytest.mark.parametrize("dtype", [torch.float32, F16])
def test_cpu_call_runs_the_triton_kernel(dtype):
    """On the CPU (the interpreter) the default schedule runs the Triton kernel, every element of a
    poisoned out= written, matching float64 torch (padding 2, dilation 2, odd sizes)."""
    x, w, s, p, d, ho, wo = conv_args(N=2, H=7, W=9, C=64, O=128, pad=2, dil=2, dtype=dtype, seed=5)
    ref = torch_ref(x, w, s, p, d)
    out = torch.full(ref.shape, float("nan"), dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        kern = dt.compile(conv2d_nhwc)
        kern(x, w, s, p, d, ho, wo, out=out)
    assert "gluon_conv_kernels" not in kern.source_for(x, w, s, p, d, ho, wo)
    assert torch.isfinite(out).all()
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


COMPILE = """
import json, sys
sys.path.insert(0, {tests!r})
import torch
import test_gluon_conv as T
from dtriton.backends.triton.gluon_conv import conv_constants
from dtriton.backends.triton.gluon_conv_kernels import compile_sm90
rows = []
for O, dtype, dilated in {cases!r}:
    g = T.gpu_plan(T.conv2d_nhwc, T.conv_args(O=O, dtype=getattr(torch, dtype))).kernels[0].gluon
    ck = compile_sm90(conv_constants(g), g.dtype, dilated=dilated)
    ptx = ck.asm["ptx"]
    rows.append(dict(O=O, dtype=dtype, bn=g.bn, smem=ck.metadata.shared, warps=ck.metadata.num_warps,
                     wgmma="wgmma.mma_async" in ptx, bf16="bf16" in ptx, setmaxnreg="setmaxnreg" in ptx,
                     local_load=ck.asm["ttgir"].count("ttg.local_load"), tma="cp.async.bulk.tensor.4d" in ptx))
print(json.dumps(rows))
"""


def test_packaged_kernels_compile_for_sm90():
    """Both variants the plan picks compile for sm_90 (Triton's toolchain, no GPU), fp16 and bf16, the
    dilations run-time ints or constants 1: within the H100/H200 shared-memory limit, 12 warps with their
    register split, wgmma reading A from shared memory (no local_load), 4-d TMA boxes. (In a process of
    its own, as the attention kernels' compile test.)"""
    import json
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    cases = [(256, "float16", False), (256, "bfloat16", True), (128, "float16", True), (128, "bfloat16", False)]
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(here), "src"))
    res = subprocess.run([sys.executable, "-c", COMPILE.format(tests=here, cases=cases)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert [(r["O"], r["dtype"]) for r in rows] == [(o, d) for o, d, _ in cases]
    for r in rows:
        assert r["bn"] == r["O"] and 0 < r["smem"] <= 232448 and r["warps"] == 12 and r["setmaxnreg"], r
        assert r["wgmma"] and r["bf16"] == (r["dtype"] == "bfloat16") and r["local_load"] == 0 and r["tma"], r


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


def replay(monkeypatch, args, kw):
    """What the recorded launch of ``conv2d_ws`` computes, in float64 on the CPU: every tile (each once:
    the persistent loop visits t = pid, pid + grid, ...), each K step's TMA copies as the kernel's own
    ``_issue_step`` issues them (run as Python, its TMA and barrier calls recorded), the boxes read with
    zero fill, the wgmma products, and the clipped patch stores (``_patch``, ``_tile_of``)."""
    import dtriton.backends.triton.gluon_conv_kernels as K
    copies = []
    monkeypatch.setattr(K, "_BK", 64)
    monkeypatch.setattr(K, "_patch", K._patch.fn)
    monkeypatch.setattr(K, "gl", types.SimpleNamespace(static_range=range))
    monkeypatch.setattr(K, "mbarrier", types.SimpleNamespace(expect=lambda bar, n: None))
    monkeypatch.setattr(K, "tma", types.SimpleNamespace(
        async_copy_global_to_shared=lambda desc, coord, bar, dst: copies.append((desc, list(coord)))))
    x_desc, w_desc, y_desc = args[:3]
    C, Q, off_h, off_w, dil_h, dil_w, PH, PW, n_tiles, n_tiles_o, k_steps = args[3:14]
    BH, BW, MB, BN = kw["BH"], kw["BW"], kw["MB"], kw["BN"]
    x, w2 = x_desc.base.double(), w_desc.base.double()
    y = torch.full(y_desc.base.shape, float("nan"), dtype=torch.float64)
    stub = types.SimpleNamespace(block_type=types.SimpleNamespace(nbytes=0))
    ring = types.SimpleNamespace(index=lambda i: i)
    for t in range(n_tiles):
        m_tile, o0 = K._tile_of.fn(t, n_tiles_o, BN)
        acc = torch.zeros(MB * BH * BW, BN, dtype=torch.float64)
        for k in range(k_steps):
            copies.clear()
            K._issue_step.fn(stub, stub, ring, ring, None, 0, k, m_tile, o0, C, Q, off_h, off_w, dil_h, dil_w, PH, PW,
                             BH, BW, MB)
            assert len(copies) == MB + 1
            a = torch.cat([_box(x, c, [1, BH, BW, 64]).reshape(BH * BW, 64) for _, c in copies[:MB]])
            acc += a @ _box(w2, copies[MB][1], [BN, 64]).T
        for j in range(MB):
            n, h0, w0 = K._patch(m_tile * MB + j, PH, PW, BH, BW)
            if n < y.shape[0]:
                hh, ww = min(BH, y.shape[1] - h0), min(BW, y.shape[2] - w0)
                if hh > 0 and ww > 0:
                    y[n, h0:h0 + hh, w0:w0 + ww, o0:o0 + BN] = acc[j * BH * BW:(j + 1) * BH * BW].reshape(
                        BH, BW, BN)[:hh, :ww]
    return y


LAUNCH_CASES = [(conv2d_nhwc, dict(N=2, H=13, W=24, C=64, O=256)),
                (conv2d_nhwc, dict(N=1, H=9, W=11, C=128, O=128, pad=2, dil=2, dtype=torch.bfloat16)),
                (conv2d_nhwc, dict(N=3, H=10, W=9, C=64, O=256, pad=0)),
                (conv_lit, dict(N=1, H=12, W=10, C=64, O=128, pad=2, dil=2, lit=True))]


@pytest.mark.parametrize("alg,kw", LAUNCH_CASES)
def test_runtime_launches_the_gluon_kernel(monkeypatch, alg, kw):
    """The runtime's path on an sm_90 GPU, the launch recorded (no GPU here: the call is routed as on the
    GPU and the kernel object replaced by a recorder): the printed module binds the Gluon kernel; the
    launcher builds 4-d descriptors of X and the output and a 2-d one of the weight (O, R*Q*C) in the
    planned boxes, a persistent grid, the call's offsets (-padding) and dilations, the patch and tile
    counts; the fast path and out= launch the same; what the recorded arguments address is float64
    torch's conv2d."""
    import dtriton.backends.triton.gluon_conv as gc
    import dtriton.plan.callspec as cs
    import dtriton.runtime.kernel as rk
    monkeypatch.setattr(rk, "backend_for", lambda dev: "gpu")
    monkeypatch.setattr(cs, "_arch", lambda dev, interpret: 90)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: type("P", (), {"multi_processor_count": 5}))
    seen = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kw: seen.append((grid, args, kw))

    real = gc.launch_gluon_conv
    record = lambda fn, args, meta: real(Recorder(), args, meta)  # noqa: E731
    monkeypatch.setattr(gc, "launch_gluon_conv", record)   # (the slow path and the signature's fast path)
    call = conv_args(**kw, seed=len(kw))
    x, w = call[:2]
    kern = dt.compile(alg, None if BY_DEFAULT else dt.Schedule(warp_specialize=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        out = kern(*call)
    assert "gluon_conv_kernels import conv2d_ws" in kern.source
    assert kern.fast_launcher_for(call).kind is gc.KIND
    again = kern(*call)
    given = torch.empty_like(out)
    assert kern(*call, out=given) is given
    assert len(seen) == 3 and again is not out and again.shape == out.shape == given.shape
    for n, o_ in ((1, again), (2, given)):
        assert seen[n][0] == seen[0][0] and seen[n][1][3:] == seen[0][1][3:] and seen[n][2] == seen[0][2]
        assert seen[n][1][2].base is o_ and [d.base.data_ptr() for d in seen[n][1][:2]] == [x.data_ptr(),
                                                                                               w.data_ptr()]
    grid, args, kwargs = seen[0]
    pad, dil = kw.get("pad", 1), kw.get("dil", 1)
    N, Ho, Wo, O = out.shape
    O_, R, Q, C = w.shape
    bn = 256 if O % 256 == 0 else 128
    mb = 2 if bn == 256 else 4
    assert kwargs["BN"] == bn and kwargs["MB"] == mb and kwargs["num_warps"] == 4
    assert [list(d.block_shape) for d in args[:3]] == [[1, 8, 8, 64], [bn, 64], [1, 8, 8, 64]]
    assert [list(d.shape) for d in args[:3]] == [list(x.shape), [O, R * Q * C], list(out.shape)]
    PH, PW = -(-Ho // 8), -(-Wo // 8)
    n_tiles = -(-N * PH * PW // mb) * (O // bn)
    assert tuple(args[3:]) == (C, Q, -pad, -pad, dil, dil, PH, PW, n_tiles, O // bn, R * Q * C // 64)
    assert grid == (min(5, n_tiles),)
    got = replay(monkeypatch, args, kwargs)
    torch.testing.assert_close(got, torch_ref(x, w, 1, pad, dil), atol=1e-9, rtol=1e-9)


def test_space_searches_the_gluon_conv_on_a_tma_gpu():
    """A 16-bit channels-last conv2d on a TMA GPU: warp_specialize None (the heuristic's: the Gluon
    kernel) and False (the Triton kernel); exploration tries the heuristic's point, then with it False the
    heuristic's tiles and their neighbours (tiles do not change the Gluon kernel); fp32 and the interpreter
    do not search it."""
    from dtriton.tune.samplers import base_point, warm_start
    from dtriton.tune.space import Space
    args = conv_args(N=32, H=56, W=56, C=256, O=256)
    dims = Space.derive(conv2d_nhwc, args, target="gpu").dimensions()
    on = None if BY_DEFAULT else True    # (True while the default does not pick the Gluon kernel)
    assert dict(dims)["warp_specialize"] == (on, False)
    b = dataclasses.replace(conv2d_nhwc.bind(args), device=torch.device("cuda"))
    base = dt.compile(conv2d_nhwc).complete(b)
    start = base_point(dims, base)
    assert base.warp_specialize is None and start["warp_specialize"] is None
    seeds = warm_start(conv2d_nhwc, dims, start, base, b)
    assert seeds[:2] == [dict(start, warp_specialize=on), dict(start, warp_specialize=False)]
    assert len(seeds) > 2 and all(p["warp_specialize"] is False for p in seeds[1:])
    assert "warp_specialize" not in dict(Space.derive(conv2d_nhwc, conv_args(dtype=torch.float32),
                                                      target="gpu").dimensions())
    assert "warp_specialize" not in dict(Space.derive(conv2d_nhwc, args).dimensions())
