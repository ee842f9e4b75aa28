"""The GPU benchmark scripts, run in their --dry-run mode (CPU interpreter, tiny shapes), so a broken
script is caught here rather than on the lent GPU, where device time is scarce."""

import json
import os

import pytest

from conftest import run_bench


def test_run_py_dry_run_checks_every_row(tmp_path):
    run_bench(["bench/run.py", "--dry-run", "--only", "matmul,norm,attention"], tmp_path)
    data = json.loads((tmp_path / "out" / "h200.json").read_text())
    rows = data["rows"]
    assert {r["group"] for r in rows} == {"matmul", "layernorm", "rmsnorm", "attention"}
    dt_rows = [r for r in rows if r["impl"].startswith("dtriton")]
    assert dt_rows and all(r["err"] is not None and r["err"] < 2e-2 for r in dt_rows), dt_rows
    assert not [r for r in rows if r["note"].startswith(("WRONG", "failed"))]
    assert (tmp_path / "out" / "h200.md").exists()


@pytest.mark.parametrize("script", ["bench/grad_bench.py", "bench/explore_check.py", "bench/tma_default_check.py",
                                    "bench/diag_explore_timing.py"])
def test_other_bench_scripts_dryrun_bench(script, tmp_path):
    extra = {"bench/explore_check.py": ["--only", "matmul"], "bench/diag_explore_timing.py": ["--budget", "2"]}
    out = run_bench([script, "--dry-run"] + extra.get(script, []), tmp_path)
    if "tma_default" in script:
        rows = json.loads((tmp_path / "out" / "tma_default_check.json").read_text())
        assert len(rows) == 4 and all(r["ok"] for r in rows), rows
        return
    if "diag" in script:
        assert out.count("== ") == 2 and "graph" in out
        return
    assert "|" in out
    if "grad" in script:
        rows = json.loads((tmp_path / "out" / "grad.json").read_text())["rows"]
        assert all(r["max_grad_rel_err"] is not None and r["max_grad_rel_err"] < 1e-2 for r in rows), rows


def test_gpu_check_dry_run_has_no_failures(tmp_path):
    """bench/gpu_check.py (issue 3's on-GPU correctness run) works and passes on the interpreter."""
    run_bench(["bench/gpu_check.py", "--dry-run"], tmp_path)
    rows = json.loads((tmp_path / "out" / "gpu_check.json").read_text())["rows"]
    assert len(rows) > 25 and all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]


def test_probe_schedules_dry_run_checks_every_candidate(tmp_path):
    run_bench(["bench/probe_schedules.py", "--dry-run", "--only", "matmul_small,diffusion"], tmp_path)
    rows = json.loads((tmp_path / "out" / "probe.json").read_text())["rows"]
    cands = [r for r in rows if r["schedule"]]
    assert len(cands) > 20 and all(r["status"] == "ok" and r["err"] < 1e-3 for r in cands), \
        [r for r in cands if r["status"] != "ok"]


def test_run_py_append_replaces_rows_of_the_same_case_only(tmp_path):
    run_bench(["bench/run.py", "--dry-run", "--only", "norm"], tmp_path)
    first = tmp_path / "first.json"
    os.replace(tmp_path / "out" / "h200.json", first)
    old = json.loads(first.read_text())["rows"]
    run_bench(["bench/run.py", "--dry-run", "--only", "matmul", "--cases", "16x40", "--append", str(first)], tmp_path)
    rows = json.loads((tmp_path / "out" / "h200.json").read_text())["rows"]
    assert [r for r in rows if r["group"] in ("layernorm", "rmsnorm")] == old
    assert {r["group"] for r in rows} == {"layernorm", "rmsnorm", "matmul"}


def test_run_py_isolate_runs_each_group_in_its_own_process(tmp_path):
    out = run_bench(["bench/run.py", "--dry-run", "--isolate", "--only", "matmul,attention", "--cases", "16x40"],
                    tmp_path)
    data = json.loads((tmp_path / "out" / "h200.json").read_text())
    assert "--isolate" in data["meta"]["isolated"] and "appended_to" not in data["meta"]
    assert {r["group"] for r in data["rows"]} == {"matmul", "attention"}
    assert out.count("== matmul") == 1 and out.count("== attention") == 1


def test_reductions_dry_run_checks_the_default_schedules(tmp_path):
    """bench/reductions.py (issue 16's marks): default schedules checked against float64, every timed
    row correct, on a few cases (the full dry run takes minutes on the interpreter)."""
    run_bench(["bench/reductions.py", "--dry-run", "--only", "norm,pool,dims", "--dtypes", "float32",
          "--cases", "batchnorm,groupnorm,maxpool2d,max_mid"], tmp_path)
    rows = json.loads((tmp_path / "out" / "h200.json").read_text())["rows"]
    checks = [r for r in rows if r["impl"] == "check"]
    assert len(checks) == 4 and all(r["note"].endswith(": ok") for r in checks), checks
    assert {r["impl"] for r in rows} >= {"dtriton", "torch", "check"}
    assert not [r for r in rows if r["note"].startswith(("WRONG", "failed"))]


def test_reductions_variants_by_case_null_keys_and_case_budgets(tmp_path):
    """bench/reductions.py's A/B options: a variant only for the cases it names (none for the others),
    a JSON null removing a key, a variant equal to the default giving no row, and a per-case budget
    (an exploration on the interpreter, its timed candidates printed)."""
    import sys
    sys.path.insert(0, "bench")
    import dtriton as dt
    from reductions import merged, parse_variants
    v = parse_variants('a[batchnorm float32,frobenius]={"split": {"c": null, "h": 4}};b={"num_warps": 2}')
    assert v == {"a": (["batchnorm float32", "frobenius"], {"split": {"c": None, "h": 4}}), "b": ([], {"num_warps": 2})}
    s = merged(dt.Schedule(split={"c": 32, "n": 16}, tile={"h": 2}), v["a"][1])
    assert s.split == {"n": 16, "h": 4} and s.tile == {"h": 2}, s
    with pytest.raises(SystemExit, match="'bad'"):
        parse_variants("bad={nope")
    out = run_bench(["bench/reductions.py", "--dry-run", "--only", "norm", "--dtypes", "float32", "--cases",
                     "instancenorm,layernorm_chw", "--budget", "0", "--budget-for", "instancenorm=1",
                     "--variants", 'w2[instancenorm]={"num_warps": 2};same[layernorm]={"access": "pointer"}'], tmp_path)
    rows = json.loads((tmp_path / "out" / "h200.json").read_text())["rows"]
    impls = {(r["case"].split()[0], r["impl"]) for r in rows}
    assert ("instancenorm", "dtriton w2") in impls and ("layernorm_chw", "dtriton w2") not in impls, impls
    assert ("layernorm_chw", "dtriton same") not in impls and "variant same: the default schedule (no row)" in out
    assert ("instancenorm", "dtriton explored") in impls and ("layernorm_chw", "dtriton explored") not in impls
    assert "explore instance_norm" in out and "(the heuristic's)" in out, out[-3000:]
    assert not [r for r in rows if r["note"].startswith(("WRONG", "failed"))]


def test_probe_gluon_attention_compiles_for_sm90(tmp_path):
    """bench/probe_gluon_attention.py --compile-only: the step-1 (pipelined) and the warp-specialised
    ping-pong Gluon kernels compile for sm_90 here (no GPU), without register spills, within the
    H100/H200 shared-memory limit, the warp-specialised one with its worker register requests."""
    only = "pipe m128n128 s2 w8 ovl,ws 2x(m64 w4) n128 s2 ovl pp"
    run_bench(["bench/probe_gluon_attention.py", "--compile-only", "--cases", "n1024x64,c1024x128g8", "--only", only],
              tmp_path)
    rows = json.loads((tmp_path / "out" / "probe_gluon_attention.json").read_text())["rows"]
    assert len(rows) == 4 and not [r for r in rows if "error" in r], rows
    assert all(r["stack"] == 0 and 0 < r["smem"] <= 232448 and r["wgmma"] > 0 for r in rows), rows
    ws = [r for r in rows if r["variant"].startswith("ws")]
    assert all(r["warps"] == 12 and r["worker_regs"] == [240, 24] for r in ws), ws


def test_probe_flat_dry_run_checks_every_row(tmp_path):
    """bench/probe_flat.py (issue 16's flat lowerings): every hand-written variant and dtriton schedule (the
    flat_axes ones included, on the H200's split plans) computes the float64 values on the interpreter."""
    run_bench(["bench/probe_flat.py", "--dry-run"], tmp_path)
    rows = json.loads((tmp_path / "out" / "probe_flat.json").read_text())["rows"]
    assert len(rows) > 150 and all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    impls = {r["impl"] for r in rows}
    assert {"dtriton split flat4 h2 batch_norm_out", "dtriton split flat4 frobenius_normalize_sum0", "plane 2048 w8",
            "gather 1024 w4 mask", "split 512 x 4096 w8 ef partials"} <= impls, sorted(impls)
    assert (tmp_path / "out" / "dtriton_bn_2x3x32x64_float16_split-flat2-h4.py").exists()
