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


def test_floor_column_and_render(tmp_path):
    """The floor of a 16-bit chain (its GEMMs at cuBLAS speed, or its extra bytes at copy bandwidth) and --render,
    which rewrites a results table with the floor columns from its JSON."""
    import sys
    sys.path.insert(0, "bench")
    from chains import CHAINS, floor_us
    c = {x.name: x for x in CHAINS}
    big = dict(M=4096, K=4096, N=4096, P=0, C=0)
    assert abs(floor_us(c["bias"], "float16", big) - 180.6) < 0.1     # GEMM-bound: cuBLAS fp16 NT 4096^3
    assert floor_us(c["bias"], "float32", big) is None
    # a GEMM too small for its output: the bytes bound it (4096 x 16 x 4096 fp16 writes 32 MiB)
    assert floor_us(c["bias"], "float16", dict(big, K=16)) > 12.0
    out = tmp_path / "out"     # (run_bench's --out)
    out.mkdir()
    row = dict(chain="bias", dtype="float16", variant="heuristic", shape=big, flops=2 * 4096 ** 3, err=1e-4,
               err_check=1e-4, err_eager=1e-4, dtriton_us=200.0, eager_us=190.0, compile_us=190.0, vs_eager=0.95,
               vs_compile=0.95, kernels=["k"], schedule="{}", note="")
    meta = dict(gpu="test", torch="x", triton="x", commit="x", date="x", budget_s=0)
    (out / "chains_h200.json").write_text(json.dumps({"meta": meta, "rows": [row], "summary": []}))
    run_bench(["bench/chains.py", "--render"], tmp_path)
    md = (out / "chains_h200.md").read_text()
    assert "compile/floor" in md and "| 180.6 | 1.05 |" in md and "at most 1.052x" in md


def test_probe_nt_wide_set_dry_run(tmp_path):
    """bench/probe_nt.py --set wide (the NT probes of 256x128 tiles for the lead's H200 run) runs and checks."""
    out = run_bench(["bench/probe_nt.py", "--set", "wide", "--dry-run", "--dtypes", "float16"], tmp_path)
    assert "NT 48^3 (wide set)" in out and "wrong" not in out and "failed" not in out
    assert out.count("dtriton 16x16x16") >= 7


def test_chains_sm90_compiles_without_spills(tmp_path):
    """bench/chains_sm90.py: the fused max-pooling chain's H200 plan, compiled for sm_90 on this machine, spills
    nothing (its 128-column fp32 tiles did: 304 bytes of stack)."""
    out = run_bench(["bench/chains_sm90.py", "--cases", "max_pool", "--dtypes", "float32"], tmp_path)
    assert "max_pool_out: regs" in out and "0 kernel(s) with a stack" in out
