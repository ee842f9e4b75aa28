"""The DiffusionNet spatial diffusion layer through dtriton, end to end, on Triton's interpreter.

A small-mesh version of ``dtriton demo --quick``: the dtriton layer (forward and backward in
dtriton kernels) equals the eager PyTorch layer of Sharp et al. 2022 (DiffusionNet); its
gradients for x and the diffusion times match torch autograd on the eager layer (float32
tolerance); heat-diffusion facts hold; learning the times back reduces the loss; the demo writes
its report.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

import dtriton as dt

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("scipy", "robust_laplacian")),
    reason="needs the mesh extra (pip install 'dtriton[mesh]')")

from dtriton.examples.diffusionnet import layer as L  # noqa: E402
from dtriton.examples.diffusionnet.task import (check_gradients, check_heat_properties,  # noqa: E402
                                                make_problem, recover_times)

F32 = 1e-5  # relative tolerance for float32 results (errors relative to the largest entry)


@pytest.fixture(scope="module")
def ops():
    from dtriton.examples.diffusionnet.operators import spectral_operators, synthetic_mesh
    v, f = synthetic_mesh(300, "sphere")
    d = spectral_operators(v, f, k=16).as_torch()
    return d["basis"], d["mass"], d["evals"]


@pytest.fixture(scope="module")
def problem(ops):
    return make_problem(*ops, 8, seed=3)


def backends():
    names = ["dtriton-manual"]
    if L.available_backend(None)[0] == "auto":
        names.append("auto")
    return names


def rel(a, b):
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max()) / float(b.abs().max())


def test_algorithm_outputs_match_reference(ops, problem):
    basis, mass, evals = ops
    out, spectral = L.default_kernels().forward(problem.x, basis, mass, evals, problem.true_times)
    ref_out, ref_spec = L.spatial_diffusion.reference(problem.x, basis, mass, evals, problem.true_times)
    assert rel(out, ref_out) < F32 and rel(spectral, ref_spec) < F32
    assert rel(out, L.torch_spatial_diffusion(problem.x, basis, mass, evals, problem.true_times)) < F32


@pytest.mark.parametrize("backend", backends())
def test_layer_equals_eager(ops, problem, backend):
    basis, mass, evals = ops
    layer = L.SpatialDiffusion(basis, mass, evals, 8, init_time=problem.true_times, backend=backend)
    assert layer.backend == backend
    out = layer(problem.x)
    assert out.shape == problem.x.shape and out.dtype == torch.float32
    assert rel(out, L.torch_spatial_diffusion(problem.x, basis, mass, evals, problem.true_times)) < F32
    assert rel(out, problem.target) < 1e-5  # the target was made in float64 with the same times


@pytest.mark.parametrize("backend", backends())
def test_gradients_match_torch_autograd(ops, problem, backend):
    g = check_gradients(*ops, problem.x, problem.true_times, backend=backend)
    assert g.grad_x_rel < F32 and g.grad_t_rel < F32 and g.times_only_rel < F32


def test_derived_backward_reads_no_absent_gradient(ops, problem):
    """The layer returns ``out`` only: the derived backward is derived from ``out`` alone (dt.grad's
    outputs=[0]): its kernels never read the spectral output's (absent) gradient, and the gradients
    still equal float64 autograd's, twice in a row (the second call takes the cached step)."""
    basis, mass, evals = ops
    kern = L.DiffusionKernels(None)
    w = torch.randn(problem.x.shape, generator=torch.Generator().manual_seed(2))
    x64, t64 = problem.x.double().requires_grad_(), problem.true_times.double().requires_grad_()
    (L.torch_spatial_diffusion(x64, basis.double(), mass.double(), evals.double(), t64) * w.double()).sum().backward()
    for _ in range(2):
        x, t = problem.x.clone().requires_grad_(), problem.true_times.clone().requires_grad_()
        (L.spatial_diffusion_fn(x, basis, mass, evals, t, backend="auto", kernels=kern) * w).sum().backward()
        assert rel(x.grad, x64.grad) < F32 and rel(t.grad, t64.grad) < F32
    runners = kern.auto.last_runs["backward"]
    assert runners, "no derived backward ran"
    for r in runners:
        loads = {n.tensor.name for n in dt.ir.walk([o.expr for o in r.alg.outputs]) if isinstance(n, dt.ir.Load)}
        assert "grad_out0" in loads and "grad_out1" not in loads, (r.alg.name, loads)


def test_grad_outputs_takes_the_others_as_zero(ops, problem):
    """dt.grad(outputs=[k]): the algorithms keep every gradient parameter but read only output k's;
    their values equal the full derivation's with the other gradients zero; bad indices are refused."""
    from dtriton.library import spatial_diffusion
    basis, mass, evals = ops
    full = dt.grad(spatial_diffusion, ["x", "times"])
    only = dt.grad(spatial_diffusion, ["x", "times"], outputs=[0])
    assert only.outputs == (0,) and full.outputs == (0, 1)
    assert [p.name for p in only.algorithms[0].params] == [p.name for p in full.algorithms[0].params]
    g0 = torch.randn(problem.x.shape, generator=torch.Generator().manual_seed(3))
    args = (problem.x, basis, mass, evals, problem.true_times, g0, torch.zeros(basis.shape[1], problem.x.shape[1]))
    for a, b in zip(only.reference(*args), full.reference(*args)):
        assert rel(a, b) < 1e-12
    got = dt.compile(only.algorithms[0])(*args)
    for a, b in zip(got, full.reference(*args)):
        assert rel(a, b) < F32
    with pytest.raises(dt.AlgorithmError, match=r"has 2 output\(s\), indices 0 to 1; \[2\] is out of range"):
        dt.grad(spatial_diffusion, ["x"], outputs=[0, 2])


def test_times_only_backward_kernel(ops, problem):
    """x without grad: only the backward_times kernel runs; its gradient equals eager autograd's."""
    basis, mass, evals = ops
    t = problem.true_times.clone().requires_grad_()
    w = torch.randn(problem.x.shape, generator=torch.Generator().manual_seed(1))
    (L.spatial_diffusion_fn(problem.x, basis, mass, evals, t, backend="dtriton-manual") * w).sum().backward()
    t2 = problem.true_times.clone().requires_grad_()
    (L.torch_spatial_diffusion(problem.x, basis, mass, evals, t2) * w).sum().backward()
    assert rel(t.grad, t2.grad) < F32


def test_split_over_v_is_exact(ops, problem):
    """The split of the V reduction (what large meshes get on the GPU) gives the same values and
    gradients, forward and backward, here on the interpreter."""
    basis, mass, evals = ops
    sched = dt.Schedule(split={"v": 4})
    kern = L.DiffusionKernels({"forward": sched, "backward": sched, "backward_times": sched})
    s = kern.schedules_for(problem.x, basis, mass, evals, problem.true_times)
    assert all(dict(v.split) == {"v": 4} for v in s.values())
    g = check_gradients(basis, mass, evals, problem.x, problem.true_times, backend="dtriton-manual", kernels=kern)
    assert g.grad_x_rel < F32 and g.grad_t_rel < F32
    out = L.spatial_diffusion_fn(problem.x, basis, mass, evals, problem.true_times, kernels=kern)
    assert rel(out, L.torch_spatial_diffusion(problem.x, basis, mass, evals, problem.true_times)) < F32


def test_heat_diffusion_properties(ops, problem):
    h = check_heat_properties(*ops, problem.x, problem.true_times)
    assert abs(h.evals0) < 1e-4
    assert h.rel_err < F32
    assert h.max_abs_err_f64 <= 10 * h.eager_max_abs_err_f64 + 1e-6
    assert h.conservation_err < 1e-5 and h.conservation_err_eager < 1e-5
    assert h.semigroup_err < 1e-5


def test_learning_reduces_loss_and_recovers_times(ops, problem):
    res = recover_times(*ops, problem, steps=20)
    assert len(res.losses) == 21
    assert res.losses[-1] < 0.02 * res.losses[0]
    assert res.median_rel_err < 0.05
    assert min(res.learned_times) >= L.MIN_TIME


def test_module_clamps_and_validates(ops):
    basis, mass, evals = ops
    layer = L.SpatialDiffusion(basis, mass, evals, 4, init_time=-1.0)
    assert torch.all(layer.times == L.MIN_TIME)  # the constructor clamps
    with torch.no_grad():
        layer.times.fill_(-3.0)
    layer(torch.randn(basis.shape[0], 4))
    assert torch.all(layer.times == L.MIN_TIME)  # forward clamps first, as DiffusionNet does
    assert {"basis", "mass", "evals"} <= {n for n, _ in layer.named_buffers()}
    assert [n for n, _ in layer.named_parameters()] == ["times"]
    with pytest.raises(ValueError, match="shape"):
        layer(torch.randn(basis.shape[0], 5))
    with pytest.raises(ValueError, match="unknown backend"):
        L.SpatialDiffusion(basis, mass, evals, 4, backend="cuda-magic")
    with pytest.raises(ValueError, match="requires grad"):
        L.spatial_diffusion_fn(torch.randn(basis.shape[0], 4), basis.clone().requires_grad_(), mass, evals,
                               torch.ones(4))


def test_demo_quick_writes_report(tmp_path, monkeypatch, capsys):
    from dtriton.examples.diffusionnet import demo, demo_mesh
    bars = []
    real = demo_mesh.progress

    def spy(description, total=None):
        bars.append([description, total, 0])

        def count(advance):
            def inner(n=1, info=""):
                bars[-1][2] += n
                advance(n, info)
            return inner

        class Ctx:
            def __enter__(self):
                self.cm = real(description, total)
                return count(self.cm.__enter__())

            def __exit__(self, *exc):
                return self.cm.__exit__(*exc)
        return Ctx()
    monkeypatch.setattr(demo_mesh, "progress", spy)
    out = tmp_path / "demo"
    assert demo.main(["--quick", "--steps", "10", "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "Learning diffusion times back" in text and "synthetic-sphere-300" in text
    assert "interpreter" in text
    res = json.loads((out / "results.json").read_text())
    (r,) = res["results"]
    assert r["V"] > 0 and r["recovery"]["losses"][-1] < r["recovery"]["losses"][0]
    assert r["heat"]["rel_err"] < F32
    if importlib.util.find_spec("matplotlib"):
        assert (out / "time_vs_V.png").stat().st_size > 0
    # every long step has a progress bar; the learning bar advanced once per Adam step
    names = [b[0] for b in bars]
    assert any(n.startswith("learning 8 diffusion times back") for n in names), names
    assert [b[2] for b in bars if b[0].startswith("learning")] == [10]
    assert any("eigenbasis" in n for n in names) and any(n.startswith("timing") for n in names)
    assert any(n.startswith("checking") for n in names)
    # timings have a spread (quartiles) and the tables show it
    for key, med in r["times_us"].items():
        q1, q3 = r["spread_us"][key]
        assert q1 <= med <= q3, key
    log = capsys.readouterr().out
    assert "±" in text and "interquartile range" in text and "±" in log
    # a verdict on the checks with its tolerance, in the log and the report
    assert "checks: ok (max rel err" in log and "<= tol 1.0e-05" in log and "**Checks:** ok" in text
    # the report explains only columns its table has, and never calls the hand-written backward a schedule
    table_head = next(ln for ln in text.splitlines() if ln.startswith("| mesh | V | schedule"))
    assert "best S" not in table_head and "best split" not in text and "*best S*" not in text
    assert "*dt f+b*" in text and "hand-written backward" in text
    assert "chosen schedule" not in text
    # speed-ups over eager PyTorch, forward and forward plus backward, explained
    assert "fwd vs eager" in table_head and "f+b vs eager" in table_head and "*f+b vs eager*" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| synthetic-sphere-300"))
    assert row.count("n/a (interpreter)") == 2   # interpreter times against CPU PyTorch compare nothing
    assert "speed vs eager PyTorch: n/a (the dtriton kernels ran on Triton's interpreter" in log
    assert "**Speed vs eager PyTorch:** n/a" in text


def test_speed_verdict_summarises_the_meshes():
    """The demo's speed line on the GPU: geomean, lowest and highest mesh, meshes where dtriton is faster."""
    from dtriton.examples.diffusionnet.demo_mesh import MeshResult
    from dtriton.examples.diffusionnet.demo_report import speed_verdict

    def mesh(name, dt_f, dt_fb, eager_f, eager_fb):
        return MeshResult(name, "test", 100, 196, 16, 8, 0.0, False, {}, {}, dict(
            dtriton_fwd=dt_f, **{"dtriton-auto_fwdbwd": dt_fb}, eager_fwd=eager_f, eager_fwdbwd=eager_fb), {}, {})
    line = speed_verdict([mesh("a", 10.0, 40.0, 20.0, 40.0), mesh("b", 10.0, 50.0, 5.0, 100.0)])
    assert line == ("speed vs eager PyTorch: forward 1.00x geomean (0.50x b .. 2.00x a; faster on 1 of 2 meshes); "
                    "forward+backward 1.41x geomean (1.00x a .. 2.00x b; faster on 1 of 2 meshes)")
    assert "forward+backward n/a (not timed)" in speed_verdict([mesh("a", 10.0, None, 20.0, None)])


def test_demo_renders_results_of_an_older_run(tmp_path):
    """--render reads a results.json written before timings had a spread."""
    from dtriton.examples.diffusionnet import demo
    out = tmp_path / "demo"
    assert demo.main(["--quick", "--steps", "2", "--out", str(out), "--meshes", "synthetic-sphere-120"]) == 0
    data = json.loads((out / "results.json").read_text())
    for r in data["results"]:
        del r["spread_us"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    assert demo.main(["--render", str(old), "--out", str(tmp_path / "again")]) == 0
    assert "Learning diffusion times back" in (tmp_path / "again" / "report.md").read_text()
