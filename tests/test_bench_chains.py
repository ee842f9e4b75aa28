"""bench/chains.py and bench/fp32.py (issue 14's benchmarks) in their --dry-run mode: CPU interpreter, tiny
shapes, every row checked against float64. A script broken here would waste a GPU call."""

import json
import os

from conftest import run_bench


def test_chains_dry_run_checks_against_float64(tmp_path):
    chains = ("bias", "logsumexp", "swiglu_mlp", "max_pool_sum_scale")   # epilogue, row stats, 2 GEMMs, views
    run_bench(["bench/chains.py", "--dry-run", "--dtypes", "float32,float16", "--cases", ",".join(chains)], tmp_path)
    rows = json.loads((tmp_path / "out" / "chains_h200.json").read_text())["rows"]
    assert {(r["chain"], r["dtype"]) for r in rows} == {(c, d) for c in chains for d in ("float32", "float16")}
    for r in rows:
        tol = 1e-3 if r["dtype"] == "float32" else 2e-2
        assert not r["note"] and r["err"] < tol and r["err_check"] < tol and r["kernels"], r
        assert r["dtriton_us"] and r["eager_us"] and r["vs_eager"], r
    assert "geomean" in (tmp_path / "out" / "chains_h200.md").read_text()


def test_chains_plans_and_list_run_nothing(tmp_path):
    out = run_bench(["bench/chains.py", "--list"], tmp_path)
    assert int(out.split()[-2]) >= 30
    # every chain's hand schedule is built
    out = run_bench(["bench/chains.py", "--list", "--variant", "hand"], tmp_path)
    assert 12 <= int(out.split()[-2]) < 30 and "group_norm " in out and "max_pool " not in out
    out = run_bench(["bench/chains.py", "--plans", str(tmp_path / "plans"), "--dtypes", "float16",
                     "--cases", "swiglu,"], tmp_path)
    assert "kernel(s)" in out and os.listdir(tmp_path / "plans")


def test_fp32_dry_run_rows(tmp_path):
    run_bench(["bench/fp32.py", "--dry-run", "--only", "precision,matvec"], tmp_path)
    rows = json.loads((tmp_path / "out" / "fp32_h200.json").read_text())["rows"]
    from dtriton.schedule.knobs import PRECISIONS
    assert len(rows) == 2 * len(PRECISIONS) + 4 + 3 and not [r for r in rows if r["note"].startswith(("WRONG", "failed"))], rows
    assert all(r["err"] < 1e-5 for r in rows), rows
    mv = [r for r in rows if r["group"] == "matvec" and r["impl"] == "dtriton"]
    assert mv and "pct_copy_bw" in mv[0]


def test_chains_hand_variant_appends_rows(tmp_path):
    """--variant hand: GEMM + one row kernel (2 launches), correct, kept beside the heuristic's rows."""
    run_bench(["bench/chains.py", "--dry-run", "--dtypes", "float32", "--cases", "layer_norm,bias"], tmp_path)
    run_bench(["bench/chains.py", "--dry-run", "--dtypes", "float32", "--cases", "layer_norm,bias", "--variant", "hand",
          "--append"], tmp_path)
    rows = json.loads((tmp_path / "out" / "chains_h200.json").read_text())["rows"]
    got = {(r["chain"], r["variant"]): r for r in rows}
    assert set(got) == {("bias", "heuristic"), ("layer_norm", "heuristic"), ("residual_layer_norm", "heuristic"),
                        ("layer_norm", "hand"), ("residual_layer_norm", "hand")}, set(got)
    assert len(got["layer_norm", "hand"]["kernels"]) == 2 < len(got["layer_norm", "heuristic"]["kernels"])
    assert all(r["err"] < 1e-3 and not r["note"] for r in rows), rows
