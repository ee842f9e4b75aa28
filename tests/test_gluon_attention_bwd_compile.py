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
    cases = [("dkdv", dict(BN=128, BM=64, STAGES=3, NW=8, DQ=2, OVERLAP=True, QSPLIT=2), 128, True),
             ("dkdv", dict(BN=128, BM=64, STAGES=2, NW=8, DQ=1, OVERLAP=False, QSPLIT=1), 64, False),
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
