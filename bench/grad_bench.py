"""Issue 6 timings (H200): forward + backward through dtriton's derived gradients, side by side with
eager PyTorch and torch.compile, in one run.

    PYTHONPATH=src python3 bench/grad_bench.py [--out bench/results]

Cases: spatial diffusion (V=20000, K=128, C=128, fp32; gradients for x and times) and layer norm
(fp16, 4096x8192; gradients for X, w, b). Time = median ms of do_bench over forward, a sum-of-
outputs loss and backward. Every implementation's gradients are checked against eager fp64 first.
"""
import argparse
import json
import os
import sys
import time

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from algorithms import layer_norm, spatial_diffusion  # noqa: E402


def diffusion_eager(x, basis, mass, evals, times):
    spectral = torch.exp(-evals[:, None] * times[None, :]) * (basis.t() @ (x * mass[:, None]))
    return basis @ spectral, spectral


def ln_eager(X, w, b):
    return torch.nn.functional.layer_norm(X, (X.shape[-1],), w, b, 1e-5)


DEV = "cuda"


def _bench(f):
    """Median ms: do_bench on the GPU; one wall-clock call in a dry run."""
    if DEV == "cpu":
        t0 = time.perf_counter()
        f()
        return (time.perf_counter() - t0) * 1e3
    return do_bench(f, warmup=10, rep=50)


def run_case(name, fns, make_inputs, grad_idx, rows):
    base = make_inputs()
    ref_in = [t.detach().double().requires_grad_(k in grad_idx) for k, t in enumerate(base)]
    fns["eager fp64"] = fns["eager"]
    out = fns["eager fp64"](*ref_in)
    outs = out if isinstance(out, tuple) else (out,)
    sum(o.sum() * (n + 1) for n, o in enumerate(outs)).backward()
    ref_g = [ref_in[k].grad for k in grad_idx]
    del fns["eager fp64"]
    for impl, f in fns.items():
        ins = [t.detach().clone().requires_grad_(k in grad_idx) for k, t in enumerate(base)]

        def step():
            for k in grad_idx:
                ins[k].grad = None
            o = f(*ins)
            oo = o if isinstance(o, tuple) else (o,)
            sum(x.float().sum() * (n + 1) for n, x in enumerate(oo)).backward()
        try:
            step()
            errs = [((ins[k].grad.double() - g).norm() / g.norm()).item() for k, g in zip(grad_idx, ref_g)]
            fwd = lambda: f(*[t.detach() for t in ins])  # noqa: E731
            t_f = _bench(fwd)
            t_fb = _bench(step)
            rows.append(dict(case=name, impl=impl, fwd_ms=round(t_f, 4), fwd_bwd_ms=round(t_fb, 4), max_grad_rel_err=max(errs)))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(case=name, impl=impl, fwd_ms=None, fwd_bwd_ms=None, max_grad_rel_err=None,
                             note=f"failed: {type(e).__name__}: {str(e)[:200]}"))
        print(rows[-1], flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU interpreter (checks the script)")
    a = ap.parse_args(argv)
    global DEV
    dry = a.dry_run
    if dry:
        DEV = "cpu"
    torch.manual_seed(0)
    rows = []
    V, K, C = (20000, 128, 128) if not dry else (64, 16, 8)

    def mk_diff():
        return (torch.randn(V, C, device=DEV), torch.randn(V, K, device=DEV) / V ** 0.5,
                torch.rand(V, device=DEV) + 0.5, torch.rand(K, device=DEV) * 10, torch.rand(C, device=DEV))
    kd = dt.compile(spatial_diffusion)
    run_case(f"diffusion fp32 V={V} K={K} C={C} (grads x, times)",
             {"dtriton": kd, "eager": diffusion_eager, **({} if dry else {"torch.compile": torch.compile(diffusion_eager)})},
             mk_diff, [0, 4], rows)

    def mk_ln():
        M, N = (4096, 8192) if not dry else (8, 40)
        return (torch.randn(M, N, device=DEV, dtype=torch.float16), torch.randn(N, device=DEV, dtype=torch.float16),
                torch.randn(N, device=DEV, dtype=torch.float16))
    kl = dt.compile(layer_norm)
    run_case("layer_norm fp16 4096x8192 (grads X, w, b)",
             {"dtriton": kl, "eager": ln_eager, **({} if dry else {"torch.compile": torch.compile(ln_eager)})},
             mk_ln, [0, 1, 2], rows)
    os.makedirs(a.out, exist_ok=True)
    meta = dict(gpu=torch.cuda.get_device_name() if not dry else "cpu (dry run)", torch=torch.__version__, triton=__import__("triton").__version__,
                date=time.strftime("%Y-%m-%dT%H:%M:%S"))
    with open(os.path.join(a.out, "grad.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    lines = [f"# Forward + backward (H200)", "", f"{meta}", "", "| case | impl | fwd ms | fwd+bwd ms | max grad rel err |", "|---|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['impl']} | {r['fwd_ms']} | {r['fwd_bwd_ms']} | {r['max_grad_rel_err']} |")
    with open(os.path.join(a.out, "grad.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
