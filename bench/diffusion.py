"""Issue 15: the DiffusionNet spatial-diffusion layer (fp32, K = C = 128) against eager PyTorch and
torch.compile, forward and forward + backward, at V = 2000, 6000, 20000, 100000.

    PYTHONPATH=src python3 bench/diffusion.py [--V 2000 6000 20000 100000] [--budget 15]
        [--no-compile] [--no-backward] [--probe] [--plans] [--out bench/results/issue15] [--dry-run]

Forward rows: ``dtriton default`` (the heuristic's schedule), ``dtriton explored`` (``dt.explore``
for ``--budget`` seconds over the derived space widened with precision auto/tf32x3), ``eager``
(:func:`torch_spatial_diffusion`, as the authors' code) and ``torch.compile``; ``--probe`` adds a
few fixed schedules (rows named by their knobs) that show which knob moves the time. Forward +
backward rows (gradients for x and times, a weighted-sum loss): ``dtriton derived`` (the layer's
"auto" backend: backward derived by ``dt.grad``, projection saved by the forward), ``dtriton
manual`` (the hand-written backward algorithms), eager and torch.compile.

Every row is checked against float64 eager PyTorch first (relative norm error of ``out``, and of
both gradients for fwd+bwd). Times: ``kernel`` = CUDA-graph replay of 20 forward calls / 20 (launch
gaps hidden; fwd+bwd: GPU busy time, the sum of the step's kernel times from torch.profiler: a
step's host time exceeds its GPU time, so a timed replay measures the host), ``call`` = plain
Python calls synchronised at the end (host overhead included). ``kernels`` counts the CUDA
kernels a call launches (torch.profiler; for fwd+bwd: those of the backward, the loss's
``sum(out * w)`` backward included: a fill and a multiply). The floor column is bytes / 4.8 TB/s (x, basis twice, out).

``--plans`` prints the GPU plans of every V (kernels, grid, split, partials or atomics, dot
precision) without a GPU. ``--dry-run`` runs everything on the CPU interpreter at tiny shapes.
Writes ``<out>/diffusion.json`` and ``<out>/diffusion.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as suite  # noqa: E402  (graph_time_us, call_time_us, tuned_kernel: one timing method for all benches)

import dtriton as dt  # noqa: E402
from dtriton.examples.diffusionnet.layer import (DiffusionKernels, spatial_diffusion_fn,  # noqa: E402
                                                 torch_spatial_diffusion)
from dtriton.examples.diffusionnet.plans import format_plans, gpu_program, layer_plans  # noqa: E402
from dtriton.library import matmul, spatial_diffusion  # noqa: E402

HBM_TBPS = 4.8
ROWS: list[dict] = []

def probes(base: dt.Schedule) -> dict[str, dt.Schedule]:
    """--probe: the heuristic's schedule ``base`` with one change each, so the rows show which
    knob moves the forward time at this V: the first contraction (sum0, reduced over v) split
    half as much, with 4 pipeline stages, with 8 warps, in 32 x 32 tiles split a quarter as much (as
    many programs, a quarter of the atomic adds per element), in 128 x 64 tiles at 8 warps (the split
    x tile shared by all of K), in 128 x 128 tiles at 8 warps split twice as much; the output GEMM
    (out0) in 32 x 64 tiles
    where the default has 64 rows and the reverse (the default takes 32 below two waves of
    programs), with 4 pipeline stages; persistent kernels (one program per SM looping over tiles);
    the output GEMM at bf16x6
    (the default runs it at tf32x3 and the projection at bf16x6, the projection's stage
    precision); session 5's default (split half as much, bf16x6 for both: the A/B of this
    session's rule); and both GEMMs at tf32 (one pass, ~1e-3: what the MMAs alone cost).
    Empty when ``base`` has no sum0 stage."""
    ss = base.stages.get("sum0")
    split = base.split.get("v", 1)
    if ss is None or split < 2:
        return {}

    def sum0(**knobs) -> dt.Schedule:
        """``base`` with the projection's stage overrides ``knobs``."""
        return base.replace(stages={**dict(base.stages), "sum0": ss.replace(**knobs)})

    def everywhere(sched: dt.Schedule, precision: str) -> dt.Schedule:
        """``sched`` with ``precision`` for every dot (the projection's stage override too)."""
        stages = {**dict(sched.stages), "sum0": sched.stages["sum0"].replace(precision=precision)}
        return sched.replace(precision=precision, stages=stages)
    rows = 32 if base.tile.get("v") == 64 else 64    # the output GEMM's other row tile
    return {f"sum0 split {split // 2}": base.replace(split={"v": split // 2}),
            f"out0 {rows}x64": base.replace(tile={**dict(base.tile), "v": rows}),
            "out0 4 stages": base.replace(num_stages=4),
            "persistent 1": base.replace(persistent=1),
            "sum0 4 stages": sum0(num_stages=4),
            "sum0 8 warps": sum0(num_warps=8),
            f"sum0 32x32 split {max(2, split // 4)}": sum0(tile={**dict(ss.tile), "k": 32, "c": 32}).replace(
                split={"v": max(2, split // 4)}),
            "sum0 128x64 8 warps": sum0(tile={**dict(ss.tile), "k": 128, "c": 64}, num_warps=8),
            f"sum0 128x128 8 warps split {split * 2}": sum0(tile={**dict(ss.tile), "k": 128, "c": 128},
                                                            num_warps=8).replace(split={"v": split * 2}),
            "out0 bf16x6": base.replace(precision="bf16x6"),
            "s5 default (split/2, bf16x6 both)": everywhere(base.replace(split={"v": split // 2},
                                                                          tile={**dict(base.tile), "v": 64}), "bf16x6"),
            "tf32 (1e-3: MMA-time reference)": everywhere(base, "tf32"),
            **out0_probes(base)}


def out0_probes(base: dt.Schedule) -> dict[str, dt.Schedule]:
    """Session 7: the output GEMM (out0 = basis @ spectral) at the default tiles (3 or 2 stages) with at
    most 128 registers a thread (:func:`register_cap`), then :func:`sum0_probes`. (Measured slower in
    session 7 and dropped: the basis as the dot's left operand, wider or 8-warp tiles, channel tiles of
    32 or 16 on mma.sync, 2 stages without a cap; bench/results/issue15/s7/README.md.)"""
    return {"out0" + CAP128: base, "out0 2 stages" + CAP128: base.replace(num_stages=2), **sum0_probes(base)}


#: probes whose names end with this run the output GEMM's kernel with at most 128 registers a thread
#: (:func:`register_cap`)
CAP128 = " cap128"


def probe_context(name: str):
    """The context a probe row named ``name`` plans its first call in (:func:`register_cap`)."""
    return register_cap(128) if name.endswith(CAP128) else contextlib.nullcontext()


@contextlib.contextmanager
def register_cap(cap: int, kernels=("out0",)):
    """Experiment of the bench only (no knob sets it): while entered, the kernels whose names end with
    one of ``kernels`` are planned with ptxas's register cap ``cap`` a thread (``KernelPlan.max_registers``,
    the launch option ``maxnreg``). The output GEMM's 64 x 64 tf32x3 kernel takes 153 registers (three
    4-warp programs an SM); at 128 (sm_90 compile: no spill, with 3 or 2 stages) four fit. Plans are
    made at a kernel's first call."""
    decide = importlib.import_module("dtriton.plan.decide")   # (dtriton.plan.decide is also a function's name)
    orig = decide.register_cap

    def capped(k):
        return cap if k.name.endswith(tuple(kernels)) and not k.interpret else orig(k)
    decide.register_cap = capped
    try:
        yield
    finally:
        decide.register_cap = orig


def sum0_probes(base: dt.Schedule) -> dict[str, dt.Schedule]:
    """Session 7: the projection (sum0) in session 6's 64 x 64 tiles at 4 warps (the A/B of the long
    slices' 128 x 64 tiles at 8 warps: 139.08 against 135.16 us at V=100000, s7 call 2) and split twice
    as much (141.13)."""
    ss, split = base.stages.get("sum0"), base.split.get("v", 1)
    if ss is None:
        return {}
    s6 = base.replace(stages={**dict(base.stages), "sum0": ss.replace(tile={**dict(ss.tile), "k": 64, "c": 64},
                                                                      num_warps=4)})
    return {"sum0 64x64 4 warps (s6)": s6, f"sum0 split {2 * split}": base.replace(split={"v": 2 * split})}


def inputs(V: int, K: int, C: int, dev: str, seed: int = 0) -> tuple:
    """x (V, C), basis (V, K) (columns of norm ~1), mass (V,), evals (K,), times (C,): fp32."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(V, C, generator=g)
    basis = torch.randn(V, K, generator=g) / V ** 0.5
    mass = torch.rand(V, generator=g) + 0.5
    evals = torch.rand(K, generator=g) * 10
    times = torch.rand(C, generator=g) * 0.5 + 0.01
    return tuple(t.to(dev) for t in (x, basis, mass, evals, times))


def rel(a: torch.Tensor, r: torch.Tensor) -> float:
    return suite.relerr(a.detach().cpu(), r.detach().cpu())


def profile_kernels(fn, before=None, reps: int = 1) -> tuple[int | None, str, float | None]:
    """CUDA kernels launched by one ``fn()`` (after ``before()``, whose kernels are not counted;
    then ``fn(before())``), their GPU times: "name µs, ..." per kernel (mean over ``reps`` calls,
    names without the algorithm's prefix), and the GPU busy time of one call (the sum of its
    kernels' times: no launch gaps, no host time). (None, "", None) on the CPU."""
    if suite.DRY:
        return None, "", None
    from torch.profiler import ProfilerActivity, profile   # noqa: PLC0415
    states = [before() if before else None for _ in range(reps)]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for st in states:
            fn(st) if before else fn()
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    count = 0
    for e in prof.events():
        if e.device_type.name == "CUDA" and "Memcpy" not in e.name:
            count += 1
            short = e.name.replace("spatial_diffusion_", "")[:40]
            times[short] = times.get(short, 0.0) + e.time_range.elapsed_us() / reps
    text = ", ".join(f"{k} {v:.1f}" for k, v in sorted(times.items(), key=lambda kv: -kv[1]))
    return count // reps, text, sum(times.values())


def count_kernels(fn, before=None) -> int | None:
    """CUDA kernels launched by one ``fn()`` (see :func:`profile_kernels`); None on the CPU."""
    return profile_kernels(fn, before)[0]


def add(V, kind, impl, kernel_us, call_us, err, kernels=None, note=""):
    floor = 4 * (V * 128 * 3 + V * 128) / (HBM_TBPS * 1e6) if kind == "forward" else None
    ROWS.append(dict(V=V, kind=kind, impl=impl, kernel_us=round(kernel_us, 2) if kernel_us else kernel_us,
                     call_us=round(call_us, 2) if call_us else call_us, rel_err=err, kernels=kernels,
                     floor_us=round(floor, 1) if floor else None, note=note))
    r = ROWS[-1]
    print(f"  {kind:8s} V={V:<6d} {impl:28s} kernel {r['kernel_us']} us  call {r['call_us']} us  err {err:.1e}  "
          f"kernels {kernels}  {note}", flush=True)


def forward_rows(V, args, budget, use_compile, probe, only=None):
    ref = torch_spatial_diffusion(*(a.double() for a in args))
    impls = [("dtriton default", dt.compile(spatial_diffusion), "heuristic")]
    if budget > 0:
        space = dt.Space.derive(spatial_diffusion, args).widen(precision=["auto", "tf32x3"])
        k, note = suite.tuned_kernel(spatial_diffusion, args, budget, space)
        impls.append(("dtriton explored", k, note))
    if probe:
        # the GPU's schedule (computed for CUDA in a dry run, so the probes run on the interpreter too)
        base = gpu_program(spatial_diffusion, args)[0] if suite.DRY else impls[0][1].schedule_for(*args)
        impls += [(f"dtriton {name}", dt.compile(spatial_diffusion, sched), "probe")
                  for name, sched in probes(base).items() if not only or name.startswith(tuple(only))]
    for name, k, note in impls:
        try:
            with probe_context(name):
                out, spectral = k(*args)   # (plans the call)
            sched = k.schedule_for(*args).to_json()
            nk, per, _ = profile_kernels(lambda: k(*args), reps=10)
            add(V, "forward", name, suite.graph_time_us(lambda: k(*args)), suite.call_time_us(lambda: k(*args)),
                rel(out, ref), nk, f"{note}: {sched}" + (f" — per kernel µs: {per}" if per else ""))
        except Exception as e:  # noqa: BLE001 - one failing row must not hide the others
            traceback.print_exc()
            add(V, "forward", name, None, None, float("nan"), note=f"failed: {type(e).__name__}: {str(e)[:200]}")
    torch_impls = [("eager", torch_spatial_diffusion)]
    if use_compile:
        torch_impls.append(("torch.compile", torch.compile(torch_spatial_diffusion)))
    for name, f in torch_impls:
        out = f(*args)
        add(V, "forward", name, suite.graph_time_us(lambda: f(*args)), suite.call_time_us(lambda: f(*args)),
            rel(out, ref), count_kernels(lambda: f(*args)))


def gemm_rows(V, args):
    """``--only gemm``: the output GEMM alone, ``basis @ coefficients`` with the coefficients given
    (the library's matmul), in out0's default tiles at tf32x3. Against the out0 rows: what computing
    the coefficients (exp, the projection's loads) in every program of the output GEMM costs (s7 call
    2, V=100000: 63.5 us alone against 70.0 in the layer)."""
    x, basis, mass, evals, times = args
    proj = basis.double().T @ (x.double() * mass.double()[:, None])
    coef = (torch.exp(-evals.double()[:, None] * times.double()[None, :]) * proj).float()
    ref = basis.double() @ coef.double()
    base = dt.Schedule(tile={"i": 64, "j": 64, "k": 32}, grid=("i", "j"), group={"i": 8}, num_warps=4,
                       num_stages=3, precision="tf32x3", access="pointer")
    rows = {"gemm alone 64x64": base}
    for name, sched in rows.items():
        try:
            k = dt.compile(matmul, sched)
            out = k(basis, coef)
            nk, per, _ = profile_kernels(lambda: k(basis, coef), reps=10)
            add(V, "forward", f"dtriton {name}", suite.graph_time_us(lambda: k(basis, coef)),
                suite.call_time_us(lambda: k(basis, coef)), rel(out, ref), nk,
                f"probe: {sched.to_json()}" + (f" — per kernel µs: {per}" if per else ""))
        except Exception as e:  # noqa: BLE001 - one failing row must not hide the others
            traceback.print_exc()
            add(V, "forward", f"dtriton {name}", None, None, float("nan"), note=f"failed: {type(e).__name__}: {str(e)[:200]}")


def _step(f, args, w):
    """One training step's work: forward, loss sum(out * w), backward into x and times."""
    x, basis, mass, evals, times = args
    x, times = x.detach().requires_grad_(), times.detach().requires_grad_()
    (f(x, basis, mass, evals, times) * w).sum().backward()
    return x.grad, times.grad


def backward_rows(V, args, use_compile):
    w = torch.randn(args[0].shape, generator=torch.Generator().manual_seed(1)).to(args[0].device)
    gref = _step(torch_spatial_diffusion, tuple(a.double() for a in args), w.double())
    kernels = DiffusionKernels(None)     # heuristic schedules, no tuning database
    impls = [("dtriton derived", lambda *a: spatial_diffusion_fn(*a, backend="auto", kernels=kernels)),
             ("dtriton manual", lambda *a: spatial_diffusion_fn(*a, backend="dtriton-manual", kernels=kernels)),
             ("eager", torch_spatial_diffusion)]
    if use_compile:
        impls.append(("torch.compile", torch.compile(torch_spatial_diffusion)))
    for name, f in impls:
        try:
            g = _step(f, args, w)
            err = max(rel(a, r) for a, r in zip(g, gref))
            step = lambda: _step(f, args, w)  # noqa: E731
            busy = profile_kernels(step, reps=5)[2]     # the step's kernels, without host gaps

            def fwd_only():
                x, basis, mass, evals, times = args
                x, times = x.detach().requires_grad_(), times.detach().requires_grad_()
                return (f(x, basis, mass, evals, times) * w).sum(), x, times
            nb, per, _ = profile_kernels(lambda st: st[0].backward(), before=fwd_only, reps=5)
            add(V, "fwd+bwd", name, busy, suite.call_time_us(step, n=20), err, nb,
                f"backward per kernel µs: {per}" if per else "")
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            add(V, "fwd+bwd", name, None, None, float("nan"), note=f"failed: {type(e).__name__}: {str(e)[:200]}")


def table(meta) -> str:
    lines = ["# Spatial diffusion fp32 K=C=128 (issue 15)", "", f"{meta}", "",
             "kernel = CUDA-graph replay (fwd) / GPU busy time, the sum of the step's kernel times (fwd+bwd); call = plain synchronised calls; "
             "speed-up = best torch (eager or torch.compile) kernel time / this kernel time; kernels: launched "
             "per forward, per backward for fwd+bwd (with the loss's fill and multiply); floor: bytes (x, basis twice, out) / 4.8 TB/s", "",
             "| V | pass | impl | kernel µs | call µs | speed-up (kernel) | speed-up (call) | kernels | rel err | floor µs | schedule / note |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in ROWS:
        torch_rows = [q for q in ROWS if q["V"] == r["V"] and q["kind"] == r["kind"] and q["impl"] in ("eager", "torch.compile")
                      and q["kernel_us"]]
        best_k = min((q["kernel_us"] for q in torch_rows), default=None)
        best_c = min((q["call_us"] for q in torch_rows if q["call_us"]), default=None)
        sk = f"{best_k / r['kernel_us']:.2f}×" if best_k and r["kernel_us"] else ""
        sc = f"{best_c / r['call_us']:.2f}×" if best_c and r["call_us"] else ""
        lines.append(f"| {r['V']} | {r['kind']} | {r['impl']} | {r['kernel_us']} | {r['call_us']} | {sk} | {sc} | "
                     f"{r['kernels'] if r['kernels'] is not None else ''} | {r['rel_err']:.1e} | {r['floor_us'] or ''} | "
                     f"{r['note']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, nargs="+", default=[2000, 6000, 20000, 100000])
    ap.add_argument("--budget", type=float, default=15.0, help="dt.explore seconds per V (0: no explored row)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--probe", action="store_true", help="add the fixed schedules of probes()")
    ap.add_argument("--only", nargs="+", default=None, metavar="PROBE",
                    help="with --probe: only the probes whose names start with one of these (\"gemm\": also "
                         "the output GEMM alone, gemm_rows)")
    ap.add_argument("--plans", action="store_true", help="print the GPU plans of each V and exit (no GPU needed)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "issue15"))
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes (checks the script)")
    a = ap.parse_args(argv)
    K = C = 128
    if a.plans:
        for V in a.V:
            print(f"== V={V} K={K} C={C}\n{format_plans(layer_plans(V, K, C))}")
        return
    dev = "cuda"
    Vs = a.V
    if a.dry_run:
        suite.DRY, dev, K, C, Vs = True, "cpu", 16, 16, [37, 1100]
        a.budget = min(a.budget, 2.0)
    use_compile = not (a.no_compile or a.dry_run)
    for V in Vs:
        args = inputs(V, K, C, dev)
        print(f"== V={V} K={K} C={C}", flush=True)
        forward_rows(V, args, a.budget, use_compile, a.probe, a.only)
        if a.probe and a.only and "gemm" in a.only:
            gemm_rows(V, args)
        if not a.no_backward:
            backward_rows(V, args, use_compile)
    meta = dict(device=torch.cuda.get_device_name() if not a.dry_run else "cpu (dry run)", torch=torch.__version__,
                triton=__import__("triton").__version__, date=time.strftime("%Y-%m-%dT%H:%M:%S"), K=K, C=C)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "diffusion.json"), "w") as f:
        json.dump(dict(meta=meta, rows=ROWS), f, indent=1)
    text = table(meta)
    with open(os.path.join(a.out, "diffusion.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
