"""Issue 17 case 10: the default schedules of derived backward algorithms compile and run.

    PYTHONPATH=src python3 bench/default_compile_check.py [--only TEXT] [--out DIR]   # on the H200
    PYTHONPATH=src python3 bench/default_compile_check.py --dry-run                   # here, interpreter

Cases: attention's derived backward (fp16, B4 H16 S2048 D64) and grouped-query attention's dK
through a gather ``K[b, kvh[h], j, d]`` (fp16, B2 H16 G4 S2048 D64). For each backward algorithm,
compiled without a schedule, it prints one line as soon as it is done (flushed): ``ok``, ``ok
(shrunk)`` when the runtime fell back to a smaller schedule (the warning follows), ``wrong`` or
``fail`` with the error; the seconds of the first call (compile and run), the milliseconds of a
second call, the largest relative error of its gradients against torch.autograd on a float32 copy
of the forward (an independent check: dtriton's own reference evaluator would materialise the
B x H x S x S x D products at full size), and the schedule. A line ``... NAME`` says what starts.
A table of every case ends the run; ``--out DIR`` also writes ``default_compile_check.json``.

``--dry-run`` runs the same algorithms on the interpreter with tiny shapes, and also derives the
*GPU* default schedules of the full shapes and prints their kernels without launching them
(dtriton's own validator, e.g. a block over 2**20 elements, runs there). ``--only TEXT`` keeps the
cases whose name or algorithm name contains TEXT. Exit status 1 when any case fails or is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import dtriton as dt  # noqa: E402
from dtriton.plan import call_spec, plan_program  # noqa: E402
from dtriton.runtime import Kernel  # noqa: E402

#: relative error allowed against torch.autograd in float32 (fp16 inputs; fp32 on the interpreter)
TOL = {torch.float16: 2e-2, torch.float32: 1e-4}


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


def torch_attention(Q, K, V, kvh, scale):
    """The forward in plain torch (``kvh``: the gather of K and V's heads, or None)."""
    if kvh is not None:
        K, V = K[:, kvh], V[:, kvh]
    p = torch.softmax(torch.einsum("bhid,bhjd->bhij", Q, K) * scale, dim=-1)
    return torch.einsum("bhij,bhje->bhie", p, V)


def cases(full: bool, dev: str):
    """``(name, gradient algorithms, forward arguments, gather index or None)`` per case."""
    B, H, G, S, D = (4, 16, 4, 2048, 64) if full else (1, 4, 2, 16, 16)
    dtype = torch.float16 if full else torch.float32
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(dtype).to(dev)
    yield "attention backward", dt.grad(attention), (r(B, H, S, D), r(B, H, S, D), r(B, H, S, D), D ** -0.5), None
    kvh = (torch.arange(H) // (H // G)).to(dev)
    b2 = 2 if full else 1
    fwd = (r(b2, H, S, D), r(b2, G, S, D), r(b2, G, S, D), kvh, D ** -0.5)
    yield "GQA dK (gather)", dt.grad(gqa, wrt="K"), fwd, kvh


def grad_args(ga, fwd_args):
    """The backward algorithms' arguments: the forward's, then an upstream gradient per output."""
    sizes = ga.forward.bind(fwd_args).axis_sizes
    like = next(a for a in fwd_args if isinstance(a, torch.Tensor) and a.is_floating_point())
    g = torch.Generator().manual_seed(1)
    ups = [torch.randn([sizes[a] for a in o.layout], generator=g).to(like.dtype).to(like.device)
           for o in ga.forward.outputs]
    return tuple(fwd_args) + tuple(ups)


def autograd_reference(ga, fwd, kvh, upstream) -> dict[str, torch.Tensor]:
    """Gradients of :func:`torch_attention` in float32 for every name in ``ga.wrt``."""
    Q, K, V = (t.detach().float().requires_grad_(n in ga.wrt) for t, n in zip(fwd[:3], "QKV"))
    out = torch_attention(Q, K, V, kvh, fwd[-1])
    want = [t for t, n in zip((Q, K, V), "QKV") if n in ga.wrt]
    got = torch.autograd.grad(out, want, upstream.float())
    return dict(zip([n for n in "QKV" if n in ga.wrt], got))


def _sync(dev) -> None:
    if torch.device(dev).type == "cuda":
        torch.cuda.synchronize()


def run_one(ga, alg, args, refs: dict, tol: float) -> dict:
    """Compile ``alg`` without a schedule, call it twice, compare its gradients with ``refs``;
    a dict with ``status``, seconds, the error, the schedule and any shrink warning."""
    row = {"algorithm": alg.name, "status": "fail", "first_s": None, "second_ms": None, "rel_err": None,
           "schedule": None, "note": ""}
    if len(alg.params) != len(args):
        row["note"] = (f"takes {len(alg.params)} arguments ({[p.name for p in alg.params]}), this check gives "
                       f"{len(args)} (saved stages are not supplied)")
        return row
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            k = dt.compile(alg)
            t = time.perf_counter()
            got = k(*args)
            _sync(args[0].device)
            row["first_s"] = time.perf_counter() - t
            t = time.perf_counter()
            got = k(*args)
            _sync(args[0].device)
            row["second_ms"] = (time.perf_counter() - t) * 1e3
            row["schedule"] = k.schedule_for(*args).to_json()
        except Exception as e:  # noqa: BLE001 - reported, the check goes on
            row["note"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            return row
    got = got if isinstance(got, tuple) else (got,)
    errs = []
    for name, (ai, oi) in ga.locate.items():
        if ga.algorithms[ai] is alg and name in refs:
            a, b = got[oi].double(), refs[name].double()
            errs.append(float((a - b).norm() / b.norm().clamp_min(1e-30)))
    row["rel_err"] = max(errs) if errs else None
    shrunk = [str(w.message) for w in caught if "exceeds a resource limit" in str(w.message)]
    wrong = row["rel_err"] is None or not row["rel_err"] <= tol
    row["status"] = "wrong" if wrong else ("ok (shrunk)" if shrunk else "ok")
    row["note"] = shrunk[-1][:400] if shrunk else ""
    return row


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


def _fmt(v, f: str) -> str:
    return "-" if v is None else format(v, f)


def _table(rows: list[dict]) -> str:
    head = f"{'case':20s} {'algorithm':28s} {'status':12s} {'first s':>8s} {'second ms':>10s} {'rel err':>8s} {'case s':>7s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['case']:20s} {r['algorithm']:28s} {r['status']:12s} {_fmt(r['first_s'], '8.1f')} "
                     f"{_fmt(r['second_ms'], '10.2f')} {_fmt(r['rel_err'], '8.1e')} {r['case_s']:7.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the interpreter (and render the GPU defaults)")
    ap.add_argument("--only", default="", help="keep cases whose name or algorithm name contains this text")
    ap.add_argument("--out", default="", help="directory for default_compile_check.json")
    opt = ap.parse_args(argv)
    dev = "cpu" if opt.dry_run else "cuda"
    t_all = time.perf_counter()
    rows = []
    for name, ga, fwd, kvh in cases(not opt.dry_run, dev):
        algs = [a for a in ga if not opt.only or opt.only in name or opt.only in a.name]
        if not algs:
            continue
        args = grad_args(ga, fwd)
        t = time.perf_counter()
        refs = autograd_reference(ga, fwd, kvh, args[len(fwd)])
        ref_s = time.perf_counter() - t
        for alg in algs:
            print(f"... {name}: {alg.name} (torch.autograd reference took {ref_s:.1f} s)", flush=True)
            t = time.perf_counter()
            row = run_one(ga, alg, args, refs, TOL[fwd[0].dtype])
            row.update(case=name, case_s=time.perf_counter() - t)
            rows.append(row)
            print(f"{name:20s} {alg.name:28s} {row['status']:12s} first call {_fmt(row['first_s'], '.1f')} s, "
                  f"second {_fmt(row['second_ms'], '.2f')} ms, rel.err {_fmt(row['rel_err'], '.1e')}, "
                  f"case {row['case_s']:.1f} s  schedule {row['schedule']}"
                  + (f"\n      {row['note']}" if row["note"] else ""), flush=True)
    if opt.dry_run:
        for name, ga, fwd, _ in cases(True, "cpu"):
            args = grad_args(ga, fwd)
            for alg in ga:
                if not opt.only or opt.only in name or opt.only in alg.name:
                    print(f"{name:20s} {alg.name:28s} GPU default at full size: {render_gpu_default(alg, args)}",
                          flush=True)
    fails = sum(not r["status"].startswith("ok") for r in rows)
    print(_table(rows))
    print(f"total {time.perf_counter() - t_all:.1f} s; FAILURES: {fails}", flush=True)
    if opt.out:
        os.makedirs(opt.out, exist_ok=True)
        with open(os.path.join(opt.out, "default_compile_check.json"), "w") as f:
            json.dump({"device": "interpreter" if opt.dry_run else torch.cuda.get_device_name(), "rows": rows}, f,
                      indent=1)
    return 1 if fails or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
