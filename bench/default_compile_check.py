"""Issue 17 case 10: the default schedules of derived backward algorithms compile and run.

    PYTHONPATH=src python3 bench/default_compile_check.py            # on the H200
    PYTHONPATH=src python3 bench/default_compile_check.py --dry-run  # here, on the interpreter

Cases: attention's derived backward (fp16, B4 H16 S2048 D64) and grouped-query attention's dK
through a gather ``K[b, kvh[h], j, d]`` (fp16, B2 H16 G4 S2048 D64). For each backward algorithm
it prints the default schedule, whether it compiled and ran (``ok``, ``ok (shrunk)`` when the
runtime fell back to a smaller schedule, with the warning) or ``fail`` with the error, and the
largest relative error against the reference evaluator.

``--dry-run`` runs the same algorithms on the interpreter with tiny shapes, and also derives the
*GPU* default schedules of the full shapes and prints their kernels without launching them
(dtriton's own validator, e.g. a block over 2**20 elements, runs there).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import dtriton as dt  # noqa: E402
from dtriton.plan import call_spec, plan_program  # noqa: E402
from dtriton.runtime import Kernel  # noqa: E402


@dt.algorithm
def attention(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "T", "D"], V: dt.Tensor["B", "H", "T", "E"],
              scale: float):
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * scale
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def gqa(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "G", "T", "D"], V: dt.Tensor["B", "G", "T", "E"],
        kvh: dt.Tensor["H"], scale: float):
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, kvh[h], j, d], over=d) * scale
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, kvh[h], j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


def cases(full: bool, dev: str):
    """(name, gradient algorithms to check, forward arguments) per case."""
    B, H, G, S, D = (4, 16, 4, 2048, 64) if full else (1, 4, 2, 16, 16)
    dtype = torch.float16 if full else torch.float32
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(dtype).to(dev)
    att = dt.grad(attention)
    yield "attention backward", list(att), (r(B, H, S, D), r(B, H, S, D), r(B, H, S, D), D ** -0.5), att
    gq = dt.grad(gqa, wrt="K")
    kvh = (torch.arange(H) // (H // G)).to(dev)
    b2 = 2 if full else 1
    yield "GQA dK (gather)", list(gq), (r(b2, H, S, D), r(b2, G, S, D), r(b2, G, S, D), kvh, D ** -0.5), gq


def grad_args(ga, fwd_args):
    """The backward algorithms' arguments: the forward's, then an upstream gradient per output."""
    sizes = ga.forward.bind(fwd_args).axis_sizes
    like = next(a for a in fwd_args if isinstance(a, torch.Tensor) and a.is_floating_point())
    g = torch.Generator().manual_seed(1)
    ups = [torch.randn([sizes[a] for a in o.layout], generator=g).to(like.dtype).to(like.device)
           for o in ga.forward.outputs]
    return tuple(fwd_args) + tuple(ups)


def run_one(alg, args) -> str:
    """Compile ``alg`` without a schedule, run it and compare with its reference."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            k = dt.compile(alg)
            got = k(*args)
        except Exception as e:  # noqa: BLE001 - reported, the check goes on
            return f"fail: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
    got = got if isinstance(got, tuple) else (got,)
    ref = alg.reference(*args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    err = max(float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)) for a, b in zip(got, ref))
    shrunk = [str(w.message) for w in caught if "exceeds a resource limit" in str(w.message)]
    tag = "ok (shrunk)" if shrunk else "ok"
    note = f"\n      {shrunk[-1][:400]}" if shrunk else ""
    return f"{tag}  rel.err {err:.2e}  schedule {k.schedule_for(*args).to_json()}{note}"


def render_gpu_default(alg, args) -> str:
    """Derive the GPU default schedule of the full-size call and print its kernels (no launch)."""
    b = alg.bind(args)
    b.device = torch.device("cuda")   # the heuristic's GPU rules; nothing runs
    k = Kernel(alg, None)
    sched = k.complete(b)
    from dtriton.backends import default_backend
    try:
        prog = plan_program(alg, sched, b, call_spec(alg, b, args, False, None))
        default_backend().render(prog)
        return f"renders  schedule {sched.to_json()}"
    except Exception as e:  # noqa: BLE001
        return f"refused: {type(e).__name__}: {str(e).splitlines()[0][:300]}  schedule {sched.to_json()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the interpreter (and render the GPU defaults)")
    opt = ap.parse_args()
    dev = "cpu" if opt.dry_run else "cuda"
    fails = 0
    for name, algs, fwd, ga in cases(not opt.dry_run, dev):
        args = grad_args(ga, fwd)
        for alg in algs:
            res = run_one(alg, args)
            fails += res.startswith("fail")
            print(f"{name:20s} {alg.name:34s} {res}", flush=True)
    if opt.dry_run:
        for name, algs, fwd, ga in cases(True, "cpu"):
            args = grad_args(ga, fwd)
            for alg in algs:
                print(f"{name:20s} {alg.name:34s} GPU default at full size: {render_gpu_default(alg, args)}", flush=True)
    print("FAILURES:", fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
