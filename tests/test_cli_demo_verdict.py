"""The demo's closing verdict on its checks and its speed-up columns without a GPU (fresh-user findings of
session 5: checks printed as bare numbers, "0.00x" speed-ups of interpreter times)."""

import math

import pytest

from dtriton.examples.diffusionnet.demo_mesh import MeshResult
from dtriton.examples.diffusionnet.demo_report import TOLERANCES, check_verdict, results_table, speedups


def _result(name="m", **heat_overrides):
    heat = dict(rel_err=6.6e-7, max_abs_err=1e-7, max_abs_err_f64=3e-7, eager_max_abs_err_f64=5e-7,
                conservation_err=2e-8, conservation_err_eager=2e-8, semigroup_err=3e-7)
    heat.update(heat_overrides)
    grads = {"dtriton-manual": {"grad_x_rel": 6e-7, "grad_t_rel": 2e-7}}
    return MeshResult(name, "synthetic", 300, 596, 16, 8, 0.1, False, {"forward": "{}"}, {},
                      {"dtriton_fwd": 5000.0, "eager_fwd": 20.0}, heat, grads)


def test_verdict_ok_names_the_largest_error_and_the_tolerance():
    ok, line = check_verdict([_result()])
    assert ok and line.startswith("checks: ok")
    assert "6.6e-07" in line and f"tol {TOLERANCES['values'][0]:.1e}" in line


@pytest.mark.parametrize("key,value", [("rel_err", 3e-4), ("semigroup_err", math.nan),
                                       ("max_abs_err_f64", 1e-3), ("conservation_err", 1e-2)])
def test_verdict_fails_naming_mesh_check_and_numbers(key, value):
    ok, line = check_verdict([_result(), _result("bad", **{key: value})])
    assert not ok and line.startswith("checks: FAILED") and "bad:" in line and "> tol" in line
    assert "m:" not in line   # the good mesh is not listed


def test_verdict_fails_on_a_gradient():
    r = _result()
    r.grads["auto"] = {"grad_x_rel": 1e-6, "grad_t_rel": 2e-3}
    ok, line = check_verdict([r])
    assert not ok and "grad t (auto) 2.0e-03" in line


def test_speedups_read_na_on_the_interpreter():
    r = _result()
    assert speedups(r, gpu=False) == ("n/a (interpreter)", "n/a (interpreter)")
    assert speedups(r, gpu=True)[0] == "0.00×"
    head, row = results_table([r], gpu=False)
    assert row[head.index("fwd vs eager")] == "n/a (interpreter)"
