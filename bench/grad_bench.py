"""Issue 6 and 15 timings (H200): forward + backward through dtriton's derived gradients, side by
side with eager PyTorch and torch.compile, in one run.

    PYTHONPATH=src python3 bench/grad_bench.py [--out bench/results] [--only NAME ...] [--dry-run]

The loss weights each output by a fixed random tensor. Cases: spatial diffusion (V=20000, K=128, C=128, fp32; gradients for x and times), layer norm and
RMSNorm (fp16, 4096x8192; gradients for X and the weights), softmax and log-softmax (fp16,
4096x4096), cross-entropy (fp32 4096x32768, integer labels) and attention, full and causal (fp16
B4 H16 S2048 D64 and B4 H32 S4096 D128; the eager row is torch's SDPA). Time = median ms of do_bench over
forward, a sum-of-outputs loss and backward. Every implementation's gradients are checked against
eager fp64 first. The dtriton rows also give the kernels the forward and the backward launched
("kernels fwd/bwd"), and the ratio of eager's time to dtriton's. ``--dry-run``: tiny shapes on
the CPU interpreter (checks the script). ``--variant LABEL=JSON`` (repeatable) adds a dtriton row
in each case whose backward algorithms ``JSON`` names: its backward kernels take ``JSON`` as
``backward_schedules`` (a dict keyed by input or backward-algorithm name, see ``dt.compile_autograd``), e.g. for layer norm's dw/db kernel at 8 warps:
``--only layer_norm --variant 'dwdb 8 warps={"layer_norm_grad_X_w_b": {"stages": {"out1": {"num_warps": 8},
"out2": {"num_warps": 8}}}}'``. ``--cuda-graphs`` adds a row per non-attention case: dtriton's kernel
captured by ``torch.cuda.make_graphed_callables`` on the step's inputs (see ``DifferentiableKernel``).
``--given-grad``: the step hands each output a fixed gradient in its dtype instead of the loss (so the step
is the forward and the backward alone). ``--graph-step``: every row's whole step is also captured in one
CUDA graph and replayed (its GPU time, no host launch path). ``--floor`` (with ``--given-grad``): a row timing the autograd floor (see ``_floor_row``). ``--rounds N``: every row timed N times,
the implementations in turn, the median reported (and each round printed).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from run import captured_graph  # noqa: E402
from algorithms import (attention, causal_attention, cross_entropy, layer_norm, log_softmax, rms_norm,  # noqa: E402
                        softmax, spatial_diffusion)


def diffusion_eager(x, basis, mass, evals, times):
    spectral = torch.exp(-evals[:, None] * times[None, :]) * (basis.t() @ (x * mass[:, None]))
    return basis @ spectral, spectral


def ln_eager(X, w, b):
    return torch.nn.functional.layer_norm(X, (X.shape[-1],), w, b, 1e-5)


def rms_eager(X, w):
    Xf = X.float()
    return (Xf * torch.rsqrt((Xf * Xf).mean(-1, keepdim=True) + 1e-6)).to(X.dtype) * w


def softmax_eager(X):
    return torch.softmax(X, -1)


def log_softmax_eager(X):
    return torch.log_softmax(X, -1)


def ce_eager(X, labels):
    return torch.nn.functional.cross_entropy(X, labels, reduction="none")


def sdpa(Q, K, V, scale):
    return torch.nn.functional.scaled_dot_product_attention(Q, K, V, scale=scale)


def sdpa_causal(Q, K, V, scale):
    return torch.nn.functional.scaled_dot_product_attention(Q, K, V, scale=scale, is_causal=True)


DEV = "cuda"


ROUNDS = [1]   # --rounds


def _bench(f):
    """Median ms: do_bench on the GPU; one wall-clock call in a dry run."""
    if DEV == "cpu":
        t0 = time.perf_counter()
        f()
        return (time.perf_counter() - t0) * 1e3
    return do_bench(f, warmup=10, rep=50)


def _graph_ms(step):
    """Median ms of one replay of ``step`` captured whole (forward, loss, backward) in a CUDA graph:
    the step's GPU time without the host's launch path. ``None`` in a dry run."""
    if DEV == "cpu":
        return None
    g = captured_graph(step, 1)   # (bench/run.py: warmed on a side stream, captured, replayed once)
    return do_bench(g.replay, warmup=10, rep=100)


def _floating(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


class CudaGraphed:
    """A dtriton differentiable kernel to be captured with ``torch.cuda.make_graphed_callables`` on
    the step's own input tensors (``run_case`` captures it): the opt-in CUDA-graph path, where the
    forward and the backward each replay one graph (the outputs and gradients are the graphs' static
    tensors, overwritten by the next replay)."""

    def __init__(self, dk):
        self.dk = dk

    def capture(self, ins):
        return torch.cuda.make_graphed_callables(self.dk, tuple(ins))


def _floor_row(name, X, g, rows):
    """The floor row of a case whose first output has its first input's shape and dtype: a step with
    one C++ autograd node that launches nothing in its forward (``X.view_as(X)``) and whose backward
    only copies the given gradient into ``X.grad`` (autograd's accumulation clones a gradient the
    caller still holds): less GPU work than any implementation's step (which must at least read the
    output gradient and write the input's) through the same autograd engine, timed alike. If eager's
    time / 1.2 is below this row's, no implementation with autograd's structure reaches 1.2x eager on
    this host. Its gradient is not the case's (not checked)."""
    x = X.detach().clone().requires_grad_()

    def step(x=x):
        x.grad = None
        torch.autograd.backward((x.view_as(x),), (g,))
    rows.append(dict(case=name, impl="floor (1 node, bwd = grad copy)", max_grad_rel_err=None, kernels="0/1",
                     note="not the case's gradient: the host and engine floor"))
    return rows[-1], (lambda x=x: x.detach().view_as(x)), step, False


def run_case(name, fns, make_inputs, grad_idx, rows, given_grad=False, graph_step=False, floor=False):
    base = make_inputs()
    ref_in = [t.detach().double().requires_grad_(k in grad_idx) if _floating(t) else t
              for k, t in enumerate(base)]
    fns["eager fp64"] = fns["eager"]
    out = fns["eager fp64"](*ref_in)
    outs = out if isinstance(out, tuple) else (out,)
    # a random weighting of the outputs (a plain sum of softmax rows has a zero gradient)
    weights = [torch.randn(o.shape, device=DEV, generator=torch.Generator(DEV).manual_seed(n)) for n, o in enumerate(outs)]
    cast = None
    if given_grad:   # the output gradients in the outputs' own dtypes; the reference takes them rounded alike
        low = fns["eager"](*base)
        cast = [w.to(o.dtype) for w, o in zip(weights, low if isinstance(low, tuple) else (low,))]
        weights = [c.float() for c in cast]
    sum((o * w.double()).sum() for o, w in zip(outs, weights)).backward()
    ref_g = [ref_in[k].grad for k in grad_idx]
    del fns["eager fp64"]
    timed = []   # (row, forward, step, time the graph) of each implementation that ran and checked
    for impl, f in fns.items():
        ins = [t.detach().clone().requires_grad_(k in grad_idx) if _floating(t) else t
               for k, t in enumerate(base)]
        if isinstance(f, CudaGraphed):
            try:
                f = f.capture(ins)
            except Exception as e:  # noqa: BLE001
                rows.append(dict(case=name, impl=impl, fwd_ms=None, fwd_bwd_ms=None, max_grad_rel_err=None,
                                 note=f"capture failed: {type(e).__name__}: {str(e)[:200]}"))
                print(rows[-1], flush=True)
                continue

        def step(f=f, ins=ins):
            for k in grad_idx:
                ins[k].grad = None
            o = f(*ins)
            oo = o if isinstance(o, tuple) else (o,)
            if given_grad:   # the output gradients given: no loss kernels in the step
                torch.autograd.backward(oo, cast)
            else:
                sum((x.float() * w).sum() for x, w in zip(oo, weights)).backward()
        try:
            step()
            errs = [((ins[k].grad.double() - g).norm() / g.norm()).item() for k, g in zip(grad_idx, ref_g)]
            counts = f.launch_counts() if hasattr(f, "launch_counts") else None
            fwd = lambda f=f, ins=ins: f(*[t.detach() if isinstance(t, torch.Tensor) else t for t in ins])  # noqa: E731
            rows.append(dict(case=name, impl=impl, max_grad_rel_err=max(errs),
                             kernels=f"{counts['forward']}/{counts['backward']}" if counts else ""))
            timed.append((rows[-1], fwd, step, graph_step and not isinstance(fns[impl], CudaGraphed)))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(case=name, impl=impl, fwd_ms=None, fwd_bwd_ms=None, max_grad_rel_err=None,
                             note=f"failed: {type(e).__name__}: {str(e)[:200]}"))
            print(rows[-1], flush=True)
    if floor and given_grad and tuple(cast[0].shape) == tuple(base[0].shape) and cast[0].dtype == base[0].dtype:
        timed.append(_floor_row(name, base[0], cast[0], rows))
    # every implementation timed once a round, in turn (the GPU's clocks and the host's state shared
    # alike); a row reports the median over the rounds
    runs = {id(r): {"fwd_ms": [], "fwd_bwd_ms": [], "graph_fwd_bwd_ms": []} for r, *_ in timed}
    for rnd in range(ROUNDS[0]):
        for r, fwd, step, graph in timed:
            got = runs[id(r)]
            got["fwd_ms"].append(_bench(fwd))
            got["fwd_bwd_ms"].append(_bench(step))
            if graph:
                try:
                    got["graph_fwd_bwd_ms"].append(_graph_ms(step))
                except Exception as e:  # noqa: BLE001
                    print(f"{r['impl']}: graph capture failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            if ROUNDS[0] > 1:
                print(f"  round {rnd + 1} {name} {r['impl']}: " + ", ".join(
                    f"{k} {v[-1]:.4f}" for k, v in got.items() if v and v[-1] is not None), flush=True)
    for r, *_ in timed:
        for k, v in runs[id(r)].items():
            v = [x for x in v if x is not None]
            r[k] = round(statistics.median(v), 4) if v else None
        if ROUNDS[0] > 1:
            r["rounds"] = {k: [round(x, 4) for x in v if x is not None] for k, v in runs[id(r)].items() if v}
        print(r, flush=True)


def _cases(dry: bool):
    """name -> (case label, algorithm, eager function, input maker, indices of the inputs with gradients)."""
    V, K, C = (20000, 128, 128) if not dry else (64, 16, 8)
    M, N = (4096, 8192) if not dry else (8, 40)
    S = 4096 if not dry else 24
    CM, CN = (4096, 32768) if not dry else (6, 50)
    h = torch.float16

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=DEV, dtype=dtype)
    cases = {
        "diffusion": (f"diffusion fp32 V={V} K={K} C={C} (grads x, times)", spatial_diffusion, diffusion_eager,
                      lambda: (rnd(V, C), rnd(V, K) / V ** 0.5, torch.rand(V, device=DEV) + 0.5,
                               torch.rand(K, device=DEV) * 10, torch.rand(C, device=DEV)), [0, 4]),
        "layer_norm": (f"layer_norm fp16 {M}x{N} (grads X, w, b)", layer_norm, ln_eager,
                       lambda: (rnd(M, N, dtype=h), rnd(N, dtype=h), rnd(N, dtype=h)), [0, 1, 2]),
        "rms_norm": (f"rms_norm fp16 {M}x{N} (grads X, w)", rms_norm, rms_eager,
                     lambda: (rnd(M, N, dtype=h), rnd(N, dtype=h)), [0, 1]),
        "softmax": (f"softmax fp16 {S}x{S}", softmax, softmax_eager, lambda: (rnd(S, S, dtype=h),), [0]),
        "log_softmax": (f"log_softmax fp16 {S}x{S}", log_softmax, log_softmax_eager, lambda: (rnd(S, S, dtype=h),), [0]),
        "cross_entropy": (f"cross_entropy fp32 {CM}x{CN} (integer labels)", cross_entropy, ce_eager,
                          lambda: (rnd(CM, CN), torch.randint(0, CN, (CM,), device=DEV)), [0]),
    }
    # attention: the eager row is SDPA (its default backend on the GPU); shapes of issue 15's marks
    for B, H, L, D in ((4, 16, 2048, 64), (4, 32, 4096, 128)) if not dry else ((1, 1, 260, 16),):
        for causal in (False, True):
            name = f"attention{'_causal' if causal else ''}_d{D}"
            cases[name] = (f"{'causal ' if causal else ''}attention fp16 B{B} H{H} S{L} D{D} (grads Q, K, V; eager = SDPA)",
                           causal_attention if causal else attention, sdpa_causal if causal else sdpa,
                           lambda B=B, H=H, L=L, D=D: (rnd(B, H, L, D, dtype=h), rnd(B, H, L, D, dtype=h),
                                                       rnd(B, H, L, D, dtype=h), D ** -0.5), [0, 1, 2])
    return cases


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU interpreter (checks the script)")
    ap.add_argument("--only", nargs="*", help="case names to run (default: all): diffusion layer_norm rms_norm "
                                              "softmax log_softmax cross_entropy attention_d64 attention_causal_d64 "
                                              "attention_d128 attention_causal_d128 (attention_d16 in a dry run)")
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile rows (their compile "
                                                               "takes most of a short GPU call)")
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="an extra row per case with tensor-only inputs: dtriton captured by "
                         "torch.cuda.make_graphed_callables (forward and backward replay one graph each)")
    ap.add_argument("--given-grad", action="store_true",
                    help="the step hands each output a given gradient in its own dtype (torch.autograd.backward) "
                         "instead of a weighted-sum loss: no loss kernels (their float copy and sum) in the step")
    ap.add_argument("--graph-step", action="store_true",
                    help="also time every row's whole step captured in one CUDA graph (its GPU time, without the "
                         "host's launch path): column 'graph fwd+bwd ms'")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=JSON",
                    help="an extra dtriton row whose backward_schedules are JSON, in "
                         "the cases whose backward it names (repeatable)")
    ap.add_argument("--backward-schedules", default=None,
                    help="attention rows: a JSON file from bench/attention_bwd.py explore ({'schedules': {case name: "
                         "backward schedule}}); those cases get a 'dtriton explored' row")
    ap.add_argument("--native", action="store_true",
                    help="add a 'dtriton native' row (compile_autograd(native=True): steady-state steps as C++ "
                         "autograd nodes); the 'dtriton' row is then native=False")
    ap.add_argument("--floor", action="store_true",
                    help="with --given-grad: a 'floor' row in the cases whose output has the input's shape (one C++ "
                         "autograd node, no forward kernel, a backward that copies the gradient: the host and "
                         "engine floor of any implementation's step, timed alike)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time every implementation of a case this many times, in turn (a round each), and report "
                         "each row's median over the rounds (the first rows of a run otherwise meet an idle GPU)")
    a = ap.parse_args(argv)
    ROUNDS[0] = max(1, a.rounds)
    variants = [(v.split("=", 1)[0], json.loads(v.split("=", 1)[1])) for v in a.variant]
    global DEV
    dry = a.dry_run
    if dry:
        DEV = "cpu"
    if not dry:   # load the native-step extension now (a process otherwise loads it in the background)
        from dtriton.backends.triton import native
        native.module()
    torch.manual_seed(0)
    rows = []
    cases = _cases(dry)
    explored = {}
    if a.backward_schedules:
        with open(a.backward_schedules) as f:
            explored = json.load(f)["schedules"]
    for name in a.only or list(cases):
        label, alg, eager, make, grad_idx = cases[name]
        fns = {"dtriton": dt.compile_autograd(alg, native=False if a.native else None), "eager": eager}
        if a.native:   # steady-state steps as C++ autograd nodes (dtriton.backends.triton.native)
            fns["dtriton native"] = dt.compile_autograd(alg, native=True)
        for vlabel, spec in variants:
            try:
                fns[f"dtriton {vlabel}"] = dt.compile_autograd(alg, backward_schedules=spec)
            except dt.ScheduleError:   # the variant names another algorithm's backward
                pass
        if a.cuda_graphs and not dry and not name.startswith("attention"):
            fns["dtriton cuda graph"] = CudaGraphed(dt.compile_autograd(alg))
        if name in explored:   # the backward schedule dt.explore found (bench/attention_bwd.py explore)
            fns["dtriton explored"] = dt.compile_autograd(alg, backward_schedules=dt.Schedule.from_dict(explored[name]))
        if not dry and not a.no_compile:
            fns["torch.compile"] = torch.compile(eager)
        run_case(label, fns, make, grad_idx, rows, given_grad=a.given_grad, graph_step=a.graph_step, floor=a.floor)
    os.makedirs(a.out, exist_ok=True)
    meta = dict(gpu=torch.cuda.get_device_name() if not dry else "cpu (dry run)", torch=torch.__version__, triton=__import__("triton").__version__,
                date=time.strftime("%Y-%m-%dT%H:%M:%S"))
    with open(os.path.join(a.out, "grad.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    meta["step"] = "given output gradients" if a.given_grad else "weighted-sum loss"
    eager_fb = {r["case"]: r["fwd_bwd_ms"] for r in rows if r["impl"] == "eager"}
    eager_g = {r["case"]: r.get("graph_fwd_bwd_ms") for r in rows if r["impl"] == "eager"}
    lines = ["# Forward + backward (H200)", "", f"{meta}", "",
             "| case | impl | kernels fwd/bwd | fwd ms | fwd+bwd ms | eager / this (fwd+bwd) | graph fwd+bwd ms | "
             "eager / this (graph) | max grad rel err |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        e, t = eager_fb.get(r["case"]), r["fwd_bwd_ms"]
        ratio = f"{e / t:.2f}x" if e and t else ""
        eg, g = eager_g.get(r["case"]), r.get("graph_fwd_bwd_ms")
        gratio = f"{eg / g:.2f}x" if eg and g else ""
        lines.append(f"| {r['case']} | {r['impl']} | {r.get('kernels', '')} | {r['fwd_ms']} | {t} | {ratio} | "
                     f"{g if g else ''} | {gratio} | {r['max_grad_rel_err']} |")
    with open(os.path.join(a.out, "grad.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
