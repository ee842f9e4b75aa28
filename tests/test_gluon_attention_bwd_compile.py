"""The hand-written Gluon attention backward of bench/gluon_attention_bwd_kernels.py compiles for sm_90.

No GPU here (and Gluon has no interpreter): the kernels are compiled by Triton's own toolchain (ptxas included)
for sm_90 in a subprocess (in Triton 3.6 a Gluon compile after an interpreted launch in the same process can fail
to resolve Gluon's builtins), and the compiled code is checked: registers within the limit, shared memory within
the H100/H200 limit, wgmma used, and dQ leaving the dK/dV kernel the way the variant says (a TMA bulk
reduce-add, global atomics, or not at all). The numerics need a GPU: bench/gluon_attention_bwd.py checks them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(HERE), "bench")

COMPILE = r"""
import json, re, sys
sys.path.insert(0, {bench!r})
from gluon_attention_bwd_kernels import compile_sm90, kv_cfg, q_cfg
from gluon_attention_bwd import resources
rows = []
for kern, cfg, D, causal in {cases!r}:
    ck = compile_sm90(kern, cfg, D, causal)
    ptx = ck.asm["ptx"]
    rows.append(dict(kern=kern, D=D, causal=causal, **resources(ck),
                     reduce=len(re.findall(r"cp\.reduce\.async\.bulk\.tensor", ptx)),
                     atomics=len(re.findall(r"(?:red|atom)\.global\.[a-z0-9.]*f32", ptx))))
print(json.dumps(rows))
"""


def _toolchain() -> bool:
    try:
        import triton
        from triton.experimental import gluon  # noqa: F401
    except Exception:   # noqa: BLE001 - no Triton / no Gluon: nothing to compile with
        return False
    return os.path.exists(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas"))


@pytest.mark.skipif(not _toolchain(), reason="Triton's sm_90 toolchain (Gluon, ptxas) is not installed")
def test_backward_kernels_compile_for_sm90():
    cases = [("dkdv", dict(BN=128, BM=64, STAGES=3, NW=8, DQ=2, OVERLAP=True, QSPLIT=2, LSE_TMA=True, KEY_MAJOR=True),
              128, True),
             ("dkdv", dict(BN=128, BM=64, STAGES=2, NW=8, DQ=1, OVERLAP=False, QSPLIT=1, LSE_TMA=False,
                          KEY_MAJOR=False), 64, False),
             ("dq", dict(BM=128, BN=64, STAGES=2, NW=8), 64, True)]
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(HERE), "src"))
    env.pop("TRITON_INTERPRET", None)
    res = subprocess.run([sys.executable, "-c", COMPILE.format(bench=BENCH, cases=cases)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert [(r["kern"], r["D"]) for r in rows] == [(k, d) for k, _, d, _ in cases]
    for r, (_, cfg, _, _) in zip(rows, cases):
        assert r["regs"] is not None and r["regs"] <= 255 and r["warps"] == 8, r
        assert 0 < r["smem"] <= 232448 and r["wgmma"] > 0, r
        dq = cfg.get("DQ", 0) if r["kern"] == "dkdv" else 0
        assert (r["reduce"] > 0) == (dq == 2) and (r["atomics"] > 0) == (dq == 1), r
    assert rows[1]["stack"] == 0, rows[1]   # D64 fits without spilling


def test_backward_rejects_bad_inputs():
    """Shapes the kernels do not cover raise ValueError naming what is wrong (before any launch)."""
    sys.path.insert(0, BENCH)
    try:
        from gluon_attention_bwd_kernels import backward, kv_cfg
    except Exception as e:   # noqa: BLE001
        pytest.skip(f"Gluon not importable: {e}")
    finally:
        sys.path.remove(BENCH)
    var = dict(kv=kv_cfg(128, 64, 2, 8, 2))
    q = torch.randn(1, 2, 200, 64, dtype=torch.float16)   # S not a multiple of 128
    lse = torch.zeros(1, 2, 200)
    with pytest.raises(ValueError, match="multiple of"):
        backward(q, q, q, q, q, lse, var, False)
    q = torch.randn(1, 2, 256, 96, dtype=torch.float16)   # D 96
    with pytest.raises(ValueError, match="D 64 or 128"):
        backward(q, q, q, q, q, torch.zeros(1, 2, 256), var, False)
    q = torch.randn(1, 2, 256, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="lse fp32"):
        backward(q, q, q, q, q, torch.zeros(1, 2, 256, dtype=torch.float16), var, False)


def _blocked_backward(q, k, v, o, do, lse, causal, BN, BM, BMq, BNq, QSPLIT):
    """The kernels' algorithm step by step in float64 torch (their loop bounds, causal start / crossing tests, base-2
    exponent from the natural LSE, the scale on dK and dQ only, dQ added per query tile in QSPLIT column chunks):
    (dQ from the dK/dV kernel's tiles, dQ from the dQ kernel, dK, dV) of one head (S, D)."""
    S, D = q.shape
    sm, log2e = D ** -0.5, 1.4426950408889634
    qk_scale = sm * log2e
    delta = (do * o).sum(1)
    dk, dv, dq_fused, dq_sep = (torch.zeros_like(q) for _ in range(4))
    for k0 in range(0, S, BN):
        m_start = k0 // BM if causal else 0
        keys = torch.arange(k0, k0 + BN)
        acc_k = torch.zeros(BN, D, dtype=q.dtype)
        acc_v = torch.zeros(BN, D, dtype=q.dtype)
        for i in range(S // BM - m_start):
            q0 = (m_start + i) * BM
            cols = torch.arange(q0, q0 + BM)
            st = k[k0:k0 + BN] @ q[q0:q0 + BM].T
            if causal and q0 < k0 + BN:
                st = torch.where(keys[:, None] <= cols[None, :], st, -float("inf"))
            pt = torch.exp2(st * qk_scale - (lse[q0:q0 + BM] * log2e)[None, :])
            acc_v += pt @ do[q0:q0 + BM]
            dpt = v[k0:k0 + BN] @ do[q0:q0 + BM].T
            dst = pt * (dpt - delta[q0:q0 + BM][None, :])
            acc_k += dst @ q[q0:q0 + BM]
            DC = D // QSPLIT
            for c in range(QSPLIT):
                dq_fused[q0:q0 + BM, c * DC:(c + 1) * DC] += (dst.T @ k[k0:k0 + BN, c * DC:(c + 1) * DC]) * sm
        dk[k0:k0 + BN], dv[k0:k0 + BN] = acc_k * sm, acc_v
    for q0 in range(0, S, BMq):
        rows = torch.arange(q0, q0 + BMq)
        n_tiles = -(-(q0 + BMq) // BNq) if causal else S // BNq
        acc = torch.zeros(BMq, D, dtype=q.dtype)
        for j in range(n_tiles):
            s = q[q0:q0 + BMq] @ k[j * BNq:(j + 1) * BNq].T
            if causal and j * BNq + BNq > q0 + 1:
                s = torch.where(rows[:, None] >= torch.arange(j * BNq, (j + 1) * BNq)[None, :], s, -float("inf"))
            p = torch.exp2(s * qk_scale - (lse[q0:q0 + BMq] * log2e)[:, None])
            dp = do[q0:q0 + BMq] @ v[j * BNq:(j + 1) * BNq].T
            acc += (p * (dp - delta[q0:q0 + BMq][:, None])) @ k[j * BNq:(j + 1) * BNq]
        dq_sep[q0:q0 + BMq] = acc * sm
    return dq_fused, dq_sep, dk, dv


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tiles", [(128, 64, 128, 64, 2), (64, 128, 64, 128, 1), (32, 16, 16, 32, 4)])
def test_blocked_algorithm_matches_autograd(causal, tiles):
    """The kernels' blocked algorithm (bounds, masks, base-2 LSE, where the scale goes) against float64 autograd of
    softmax attention, on random data whose S is several tiles; tiles of both orders (BN > BM and BN < BM)."""
    g = torch.Generator().manual_seed(3 + causal)
    S, D = 384, 32
    q, k, v, do = (torch.randn(S, D, generator=g, dtype=torch.float64) for _ in range(4))
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    s = qr @ kr.T * D ** -0.5
    if causal:
        s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), -float("inf"))
    o = torch.softmax(s, -1) @ vr
    ref = torch.autograd.grad(o, (qr, kr, vr), do)
    lse = torch.logsumexp(s.detach(), -1)
    dq_fused, dq_sep, dk, dv = _blocked_backward(q, k, v, o.detach(), do, lse, causal, *tiles)
    for got, want in ((dq_fused, ref[0]), (dq_sep, ref[0]), (dk, ref[1]), (dv, ref[2])):
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-9), (got - want).abs().max()
