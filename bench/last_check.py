"""GPU check of ``split_mode="last"`` (the split statistics finished by the last program of each tile).

    PYTHONPATH=src python3 bench/last_check.py [--cases bn,fro,ln,in,col] [--dtypes float16,float32] [--calls 50]
                                               [--no-graph] [--dry-run]

Per case (batch norm 64x64x512x512 and Frobenius 16x64x256x256 under the heuristic's split schedule, which
finishes them; layer norm over (C, H, W) and instance norm 16x64x256x256 with their statistics split over
``h`` by a forced schedule; a column sum of 4096x8192 split 8 ways over rows, whose last programs store the
output too (one kernel); plus a small odd shape of each: splits that do not divide, prime sizes) and
dtype, ``split_mode="finish"`` against ``"last"``:

- both against float64 torch (outputs poisoned with NaN first);
- ``last`` against ``finish``: the same bits, or the largest difference in units of the output's last place
  (a fold of more than 16 partials of a scalar, Frobenius's, is a ``tl.reduce`` tree that follows the kernel's
  warps: deterministic, not always the finishing kernel's bits);
- ``--calls`` calls of the same compiled kernel on the same input: every output the first's bits (the counters
  reset: a counter left non-zero would skip the fold of the next call, whose output would read stale or
  uninitialised statistics), then the runtime's counter memory all zero;
- on two streams at once (each stream its own counters): both outputs the first's bits;
- in a CUDA graph (unless ``--no-graph``): 5 captured calls replayed twice, the output the first's bits.

Prints one line per check and ``N checks, F failed`` last; exit status 1 when any failed. ``--dry-run``: the
CPU interpreter on tiny shapes (the graph and stream checks skipped).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton.backends.triton import counters  # noqa: E402
from dtriton.library import batch_norm, column_sum, frobenius_normalize, instance_norm, layer_norm_chw  # noqa: E402

F = torch.nn.functional

#: case -> (algorithm, bench shape, odd shape, dry shape, float64 reference, args from x, forced split or None)
CASES = {
    "bn": (batch_norm, (64, 64, 512, 512), (7, 5, 37, 41), (3, 3, 5, 7),
           lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-5),
           lambda x: (x, torch.randn(x.shape[1], device=x.device, dtype=x.dtype),
                      torch.randn(x.shape[1], device=x.device, dtype=x.dtype)), {"n": 3, "h": 4}),
    "fro": (frobenius_normalize, (16, 64, 256, 256), (5, 7, 37, 41), (3, 3, 5, 7),
            lambda x: x / torch.linalg.vector_norm(x), lambda x: (x,), {"n": 5, "h": 8}),
    "ln": (layer_norm_chw, (16, 64, 256, 256), (5, 7, 37, 41), (3, 3, 5, 7),
           lambda x: F.layer_norm(x, x.shape[1:], eps=1e-5), lambda x: (x,), {"h": 6}),
    "in": (instance_norm, (16, 64, 256, 256), (5, 7, 37, 41), (3, 3, 5, 7),
           lambda x: F.instance_norm(x, eps=1e-5), lambda x: (x,), {"h": 6}),
    # a column sum split over rows: its last programs also store the output (plan.last_finish.absorb_outputs)
    "col": (column_sum, (4096, 8192), (1031, 997), (13, 9), lambda x: x.sum(0), lambda x: (x,),
            lambda mode: dt.Schedule(grid=("j",), tile={"j": 64, "i": 32}, strategy={"i": "loop"}, split={"i": 8},
                                     split_mode=mode)),
}
RESULTS: list[tuple[str, bool, str]] = []


def record(name: str, ok: bool, detail: str = "") -> None:
    RESULTS.append((name, ok, detail))
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}", flush=True)


def forced(alg, split: dict, mode: str) -> dt.Schedule:
    """The statistics stages split over ``split``, their kept axes on the grid (tile 1), reduced axes
    looped (tile 8 of h, 64 of q), the output in tiles of 4 x 64."""
    stages = {}
    for st in alg.stages.values():
        if not st.is_output:
            r = st.node
            stages[st.name] = dt.StageSchedule(
                grid=tuple(r.axes), tile=dict({a: 1 for a in r.axes}, **{a: {"h": 8, "q": 64}.get(a, 1) for a in r.over}),
                strategy={a: "loop" for a in r.over})
    return dt.Schedule(grid=("n", "c", "h", "q"), tile={"n": 1, "c": 1, "h": 4, "q": 64}, split=split,
                       split_mode=mode, stages=stages)


def ulps(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest |a - b| in units of a's last place (its dtype's eps times its magnitude, at least the
    smallest normal)."""
    fi = torch.finfo(a.dtype)
    scale = a.float().abs().clamp_min(fi.tiny) * fi.eps
    return ((a.float() - b.float()).abs() / scale).max().item()


def check_case(case: str, shape, dtype, split, calls: int, graph: bool, dev: str) -> None:
    alg, _, _, _, ref_fn, make, _ = CASES[case]
    tag = f"{case} {'x'.join(map(str, shape))} {str(dtype)[6:]}"
    x = (torch.randn(shape, device=dev) + 1.0).to(dtype)
    args = make(x)
    ref = ref_fn(*[a.double() for a in args])
    base = dt.compile(alg).schedule_for(*args)
    if split is None and not (base.split and base.split_mode in ("finish", "last")):
        record(f"{tag} heuristic", False, f"the heuristic does not finish split statistics here: {base.to_json()}")
        return
    outs = {}
    kernels = {}
    for mode in ("finish", "last"):
        s = (base.replace(split_mode=mode) if split is None else split(mode) if callable(split)
             else forced(alg, split, mode))
        k = kernels[mode] = dt.compile(alg, s)
        out = torch.full(ref.shape, float("nan"), device=dev, dtype=dtype)
        k(*args, out=out)
        err = ((out.double() - ref).norm() / ref.norm()).item()
        tol = 1e-5 if dtype == torch.float32 else 3e-3
        record(f"{tag} {mode} vs float64", err < tol and not out.isnan().any().item(), f"rel err {err:.2e}")
        outs[mode] = out
        names = [n.split("(")[0] for n in k.source_for(*args).split("\ndef ")[1:] if n.startswith(alg.name)]
        if mode == "last":
            record(f"{tag} last kernels", not any("_finish_" in n for n in names), ", ".join(names))
    same = torch.equal(outs["finish"], outs["last"])
    record(f"{tag} last == finish", same or case == "fro", "bitwise" if same else f"max {ulps(outs['finish'], outs['last']):.1f} ulp")
    k, first = kernels["last"], outs["last"]
    bad = 0
    for _ in range(calls):
        bad += not torch.equal(k(*args), first)
    if dev == "cuda":
        torch.cuda.synchronize()
    record(f"{tag} {calls} calls deterministic", bad == 0, f"{bad} differ")
    left = sum(int(t.count_nonzero()) for t in counters._POOL.values())   # noqa: SLF001 (the check reads the pool)
    record(f"{tag} counters zero", left == 0, f"{left} non-zero")
    if dev != "cuda":
        return
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    res = []
    for st in (s1, s2, s1, s2):
        with torch.cuda.stream(st):
            res.append(k(*args))
    torch.cuda.synchronize()
    record(f"{tag} two streams", all(torch.equal(r, first) for r in res))
    if graph:
        o = torch.empty_like(first)
        st = torch.cuda.Stream()
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):
            for _ in range(3):
                k(*args, out=o)
        torch.cuda.current_stream().wait_stream(st)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(5):
                k(*args, out=o)
        o.fill_(float("nan"))
        g.replay()
        g.replay()
        torch.cuda.synchronize()
        record(f"{tag} CUDA graph", torch.equal(o, first))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="bn,fro,ln,in,col")
    ap.add_argument("--dtypes", default="float16,float32")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--no-graph", action="store_true")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    for case in a.cases.split(","):
        alg, bench, odd, dry, _, _, split = CASES[case]
        for d in a.dtypes.split(","):
            dtype = getattr(torch, d)
            runs = [(dry, split)] if a.dry_run else [(odd, split), (bench, split if case in ("ln", "in", "col") else None)]
            for shape, sp in runs:
                try:
                    check_case(case, shape, dtype, sp, 2 if a.dry_run else a.calls, not a.no_graph, dev)
                except Exception as e:  # noqa: BLE001 - the other cases still run
                    record(f"{case} {shape} {d}", False, f"{type(e).__name__}: {str(e)[:300]}")
    failed = [r for r in RESULTS if not r[1]]
    print(f"{len(RESULTS)} checks, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
