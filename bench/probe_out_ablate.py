"""What costs the last percent in the element-wise output kernels of issue 16's statistics-then-normalise calls:
dtriton's generated output kernel timed as printed and with one printing decision undone at a time.

    PYTHONPATH=src python3 bench/probe_out_ablate.py [--cases bn,fro,lnchw,in] [--dtypes float16,float32]
                                                     [--budget 300] [--no-compile] [--ablate] [--out DIR] [--dry-run]

For each case (batch norm 64x64x512x512; Frobenius normalisation, layer norm over (C, H, W) and instance norm
16x64x256x256) and dtype, and each schedule (the default and the variants of :data:`SCHEDULES`: output tiles of h
rows, ``last``: split statistics finished by the split kernel's last program, ``split_mode="last"``), the whole
call and every kernel it launches are timed alone (CUDA-graph replay, the unit of the s11/s12 totals; the launch
recorded on the first call and replayed with the same arguments); the default's output kernel also as planned with
every kernel in the linear form (``linear``, below). With ``--ablate`` (and on the dry run) the output kernel's
module source is then edited and the edited kernel launched with the same arguments (each checked against float64
first, the output poisoned with NaN):

- ``fwd``: programs take tiles in launch order (``tile = pid``) instead of the reverse order the plan chose;
- ``norestate``: without the ``size_x = size_x // 8 * 8`` lines (alignment facts restated for Triton);
- ``fwd norestate``: both;
- ``wW``: the kernel as printed with ``num_warps`` W instead of the plan's;
- ``printed``: the kernel as printed, launched by this script's path (the control of the rows above);
- ``grid3`` (``grid3 fwd``): the tile indices read from a 3-D launch grid, ``tl.program_id(0..2)`` with the
  innermost grid axis on dimension 0, in reverse (forward) order: no integer division per program;
- batch norm only, the per-channel part of ``(x - mean) * rsqrt(var + eps) * w + b`` computed beforehand (by
  torch, into the two statistics buffers the kernel reads, restored afterwards): ``affine`` ``x * s + t`` (two
  loads, one FMA: ``s = rsqrt(var + eps) * w``, ``t = b - mean * s``), ``scale`` ``(x - mean) * s + b``
  (three loads, a subtraction and an FMA); ``rsqrt``: ``tl.math.rsqrt`` (approximate) for ``1 / sqrt_rn``.

Every row's graph replays start after ``--warm-ms`` of untimed replays (after a float64 check the clocks are down).
- ``linear``: the call planned with every kernel in the linear form (``plan.launch_grid``'s decision undone:
  tile indices divided out of ``tl.program_id(0)`` on a one-dimensional grid instead of read from CUDA's three).

``torch.compile`` of the whole algorithm (its own statistics) is timed beside (``--no-compile``: not). The dry run
(``--dry-run``: the CPU interpreter, shapes 2x3x8x16) checks every row against float64 and times nothing.
Prints a table last; ``--out DIR`` writes ``probe_out_ablate.json`` and the edited sources there.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

if "--dry-run" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R  # noqa: E402
import dtriton as dt  # noqa: E402
from dtriton.backends.triton.launch import launch, load_module  # noqa: E402
from dtriton.library import batch_norm, frobenius_normalize, instance_norm, layer_norm_chw  # noqa: E402
from reductions import merged  # noqa: E402

ROWS: list[dict] = []
OPTS = argparse.Namespace(dry=False, out="", deadline=float("inf"), compile=True, ablate=False)
RTOL = {torch.float16: 2e-3, torch.float32: 2e-5}
EPS = 1e-5


def ref_bn(x, w, b):
    x = x.double()
    m = x.mean((0, 2, 3), keepdim=True)
    v = ((x - m) ** 2).mean((0, 2, 3), keepdim=True)
    return (x - m) * torch.rsqrt(v + EPS) * w.double().view(1, -1, 1, 1) + b.double().view(1, -1, 1, 1)


def ref_lnchw(x):
    x = x.double()
    m = x.mean((1, 2, 3), keepdim=True)
    v = ((x - m) ** 2).mean((1, 2, 3), keepdim=True)
    return (x - m) * torch.rsqrt(v + EPS)


def ref_in(x):
    x = x.double()
    m = x.mean((2, 3), keepdim=True)
    v = ((x - m) ** 2).mean((2, 3), keepdim=True)
    return (x - m) * torch.rsqrt(v + EPS)


def ref_fro(x):
    x = x.double()
    return x * torch.rsqrt((x * x).sum())


CASES = {  # name: (algorithm, GPU shape)
    "bn": (batch_norm, (64, 64, 512, 512)),
    "in": (instance_norm, (16, 64, 256, 256)),
    "fro": (frobenius_normalize, (16, 64, 256, 256)),
    "lnchw": (layer_norm_chw, (16, 64, 256, 256)),
}


#: (case, dtype) -> [(label, schedule fields merged into the default)]: the output tiles (rows h of the
#: contiguous width) and the ways of finishing split statistics timed beside the default (s13 call 4 timed
#: h2/h4/h8 and last beside the old defaults; these are the neighbours of the new ones)
SCHEDULES = {
    ("bn", "float16"): [("h4", {"tile": {"h": 4}}), ("finish", {"split_mode": "finish"})],
    ("bn", "float32"): [("h1", {"tile": {"h": 1}}), ("finish", {"split_mode": "finish"})],
    ("fro", "float16"): [("h8", {"tile": {"h": 8}}), ("finish", {"split_mode": "finish"})],
    ("fro", "float32"): [("h2", {"tile": {"h": 2}})],
    ("lnchw", "float32"): [("h2", {"tile": {"h": 2}}), ("partials h16", {"tile": {"h": 16}, "split_mode": "partials"})],
    ("lnchw", "float16"): [("partials h16", {"tile": {"h": 16}, "split_mode": "partials"})],
    ("in", "float16"): [("h16", {"tile": {"h": 16}})],
    ("in", "float32"): [("h2", {"tile": {"h": 2}})],
}


def torch_fn(case, args):
    F = torch.nn.functional
    if case == "bn":
        return lambda: F.batch_norm(args[0], None, None, args[1], args[2], training=True, eps=EPS)
    if case == "lnchw":
        return lambda: F.layer_norm(args[0], args[0].shape[1:], eps=EPS)
    if case == "in":
        return lambda: F.instance_norm(args[0], eps=EPS)
    return lambda: args[0] / torch.linalg.vector_norm(args[0].float()).to(args[0].dtype)   # (bench/probe_flat.py's)


def err_of(y, ref) -> float:
    g = y.double()
    if not torch.isfinite(g).all():
        return float("nan")
    return float(((g - ref).abs() / (1 + ref.abs())).max())


def timed(fn) -> float:
    if OPTS.dry:
        fn()
        return float("nan")
    return R.graph_time_us(fn, reps=5, iters=7)


def add(case, shape, dtype, impl, err, ok, fn=None, note=""):
    us = float("nan")
    if ok and fn is not None and time.time() <= OPTS.deadline:
        try:
            us = timed(fn)
        except Exception as e:  # noqa: BLE001 - recorded
            note = f"timing failed: {type(e).__name__}: {str(e)[:120]}"
    elif ok and fn is not None:
        note = "skipped: past --budget"
    row = dict(case=case, shape=shape, dtype=dtype, impl=impl, graph_us=us, err=err, ok=ok, note=note)
    ROWS.append(row)
    print(f"{case:5s} {shape:13s} {dtype:8s} {impl:52s} {us:9.2f} us  err {err:.2e} {'ok' if ok else 'FAIL'} {note}",
          flush=True)


def edits(src: str) -> dict[str, str]:
    """The output kernel's module source with one printing decision undone a variant."""
    fwd = re.sub(r"tile = .* - 1 - pid  # tiles in reverse launch order.*", "tile = pid", src)
    fwd = re.sub(r"num_pid_\w+ - 1 - tl\.program_id\((\d)\)", r"tl.program_id(\1)", fwd)   # (per launch-grid dim)
    nor = re.sub(r"\n\s+size_\w+ = size_\w+ // \d+ \* \d+(?=\n)", "", src)
    both = re.sub(r"\n\s+size_\w+ = size_\w+ // \d+ \* \d+(?=\n)", "", fwd)
    return {k: v for k, v in (("fwd", fwd), ("norestate", nor), ("fwd norestate", both)) if v != src}


GRID_AXES = re.compile(r"\n    num_pid_(\w+) = \((size_\w+) \+ (BLOCK_\w+) - 1\) // \3")


def grid3(src: str, name: str, consts: dict, sizes: dict, reverse: bool) -> tuple[str, tuple] | None:
    """The output kernel with its tile indices read from a 3-D launch grid (``tl.program_id(0..2)``, the
    innermost grid axis on dimension 0, no division) and that grid; None where the source's grid is not a
    plain 4-axis one whose innermost axis has one program."""
    at = src.index(f"def {name}(")
    axes = GRID_AXES.findall(src[at:src.find("\ndef ", at + 1) if "\ndef " in src[at + 1:] else len(src)])
    if len(axes) != 4 or "tile = " not in src and "pid_" not in src:
        return None
    counts = {a: -(-sizes[sz] // consts[blk]) for a, sz, blk in axes}
    names = [a for a, _, _ in axes]
    if counts[names[-1]] != 1 or max(counts[a] for a in names[:2]) > 65535:
        return None
    if "    pid = tl.program_id(0)\n" not in src[at:]:
        return None   # (already read from the 3-D grid: plan.launch_grid)
    start = src.index("    pid = tl.program_id(0)\n", at)
    end = src.index(f"    pid_{names[-1]} = ", start)
    end = src.index("\n", end) + 1
    dims = {names[2]: 0, names[1]: 1, names[0]: 2}
    body = "".join(f"    pid_{a} = " + (f"num_pid_{a} - 1 - " if reverse else "") + f"tl.program_id({d})\n"
                   for a, d in dims.items()) + f"    pid_{names[-1]} = 0\n"
    return src[:start] + body + src[end:], (counts[names[2]], counts[names[1]], counts[names[0]])


BN_MATH = re.compile(r"\n    (buf_\d+) = tl\.load\((buf_mean0\w*_ptr) [^\n]*\n(?:.*\n)*?    (t_\d+) = t_\d+ \+ ld_\d+\n")


def bn_forms(src: str, name: str, call: list, params: list[str]) -> list[tuple[str, str, dict]]:
    """Batch norm's output kernel with the per-channel part computed beforehand: ``(label, source, {argument
    position: its contents for this variant})`` (the statistics buffers' positions); none where the source
    is not the printed ``(x - mean) * rsqrt(var + eps) * w + b`` chain."""
    m = BN_MATH.search(src, src.index(f"def {name}("))
    if m is None or "buf_mean1" not in src:
        return []
    x_name = re.search(r"\n    (ld_\d+) = tl\.load\(X_ptr", src[src.index(f"def {name}("):]).group(1)
    i0 = next(i for i, p in enumerate(params) if p.startswith("buf_mean0"))
    i1 = next(i for i, p in enumerate(params) if p.startswith("buf_mean1"))
    iw, ib = params.index("w_ptr"), params.index("b_ptr")
    mean, var, w, b = call[i0].double(), call[i1].double(), call[iw].double(), call[ib].double()
    s = torch.rsqrt(var + EPS) * w
    t = b - mean * s
    res = m.group(3)
    p0, p1 = m.group(2), re.search(r"(buf_mean1\w*_ptr)", src[src.index(f"def {name}("):]).group(1)
    def load(ptr):
        return f"tl.load({ptr} + pid_c * {ptr[:-4]}_s0)"
    affine = f"\n    {res} = {x_name} * {load(p1)} + {load(p0)}\n"
    scale = (f"\n    {res} = ({x_name} - {load(p0)}) * {load(p1)} + tl.load(b_ptr + pid_c * b_s0).to(tl.float32)\n")
    out = [("affine", src[:m.start()] + affine + src[m.end():], {i0: t, i1: s}),
           ("scale", src[:m.start()] + scale + src[m.end():], {i1: s})]
    if "1.0 / tl.sqrt_rn(" in src:
        out.append(("rsqrt", src.replace("1.0 / tl.sqrt_rn(", "tl.math.rsqrt("), {}))
    return out


def ablate(case, shape, dname, label, rec, orig, y, ref, tmp: Path):
    """Rows of the edited output kernels (the last launch that writes ``out``)."""
    fn, programs, call, meta, interpret = rec[-1]
    src = Path(fn.fn.__code__.co_filename).read_text()
    name = fn.fn.__name__
    variants = [("printed", fn, meta.ir.num_warps, programs, {})]
    variants += [(k, load_module(v, interpret, tmp).__dict__[name], meta.ir.num_warps, programs, {})
                 for k, v in edits(src).items()]
    variants += [(f"w{w}", fn, w, programs, {}) for w in (2, 8) if w != meta.ir.num_warps]
    if case == "bn":
        head = src[src.index(f"def {name}("):]
        params = [p.strip() for p in head[head.index("(") + 1:head.index(")")].split(",") if "constexpr" not in p]
        variants += [(k, load_module(v, interpret, tmp).__dict__[name], meta.ir.num_warps, programs, fill)
                     for k, v, fill in bn_forms(src, name, call, params)]
    sizes = {f"size_{a}": n for a, n in zip("nchq", y.shape)}
    for rev in (True, False):
        g = grid3(src, name, meta.consts, sizes, rev)
        if g is not None:
            variants.append(("grid3" + ("" if rev else " fwd"), load_module(g[0], interpret, tmp).__dict__[name],
                             meta.ir.num_warps, g[1], {}))
    for vname, f, nw, grid, fill in variants:
        impl = f"dtriton {label} {meta.name} {vname}"
        kept = {i: call[i].clone() for i in fill}
        for i, v in fill.items():
            call[i].copy_(v)
        try:
            def go(f=f, nw=nw, grid=grid):
                if isinstance(grid, tuple):
                    f[grid](*call, **meta.consts, num_warps=nw, num_stages=meta.ir.num_stages)
                else:
                    launch(f, grid, call, meta.consts, nw, meta.ir.num_stages, interpret, meta.ir.max_registers)
            y.fill_(float("nan"))
            go()
            if not OPTS.dry:
                torch.cuda.synchronize()
            e = err_of(y, ref)
            add(case, shape, dname, impl, e, e <= RTOL[y.dtype], go)
        except Exception as e:  # noqa: BLE001 - recorded
            add(case, shape, dname, impl, float("nan"), False, note=f"failed: {type(e).__name__}: {str(e)[:160]}")
        finally:
            for i, v in kept.items():
                call[i].copy_(v)
        if OPTS.out and vname == "grid3" and label == "default":
            (Path(OPTS.out) / f"{case}_{dname}_grid3.py").write_text(grid3(src, name, meta.consts, sizes, True)[0])


def linear(case, shape, dname, label, alg, sched, args, y, ref):
    """Rows of the output kernel of the same call planned with every kernel in the linear form (one
    launch-grid dimension): :func:`dtriton.plan.launch_grid.plan_launch_dims` undone."""
    decide = importlib.import_module("dtriton.plan.decide")   # (the package exports a function of that name)
    keep = decide.plan_launch_dims
    decide.plan_launch_dims = lambda k: None
    try:
        k = dt.compile(alg, sched)
        y.fill_(float("nan"))
        rec, orig = R.recorded_launches(k, args, y)
    finally:
        decide.plan_launch_dims = keep
    f, p, c, m, i = rec[-1]
    e = err_of(y, ref)
    add(case, shape, dname, f"dtriton {label} {m.name} linear", e, e <= RTOL[y.dtype],
        lambda: orig(f, p, c, m, i), note=f"grid {p}")


def run_case(case, dtype, dev, tmp: Path):
    alg, gpu_shape = CASES[case]
    shape = (2, 3, 8, 16) if OPTS.dry else gpu_shape
    sname, dname = "x".join(map(str, shape)), str(dtype)[6:]
    torch.manual_seed(0)
    x = torch.randn(shape, device=dev, dtype=dtype)
    args = (x,) if case != "bn" else (x, torch.randn(shape[1], device=dev, dtype=dtype),
                                      torch.randn(shape[1], device=dev, dtype=dtype))
    ref = (ref_bn(*args) if case == "bn" else ref_lnchw(x) if case == "lnchw" else ref_in(x) if case == "in"
           else ref_fro(x))
    y = torch.full_like(x, float("nan"))
    if OPTS.compile:
        try:
            comp = torch.compile(torch_fn(case, args))
            got = comp()
            e = err_of(got, ref)
            add(case, sname, dname, "torch.compile (call)", e, e <= RTOL[dtype], comp)
            del got
        except Exception as e:  # noqa: BLE001 - recorded
            add(case, sname, dname, "torch.compile (call)", float("nan"), False, note=f"failed: {e!s:.160}")
    tf = torch_fn(case, args)
    e = err_of(tf(), ref)
    add(case, sname, dname, "torch eager (call)", e, e <= RTOL[dtype], tf)
    add(case, sname, dname, "torch copy", 0.0, True, lambda: y.copy_(x))
    base = dt.compile(alg).schedule_for(*args)
    scheds = [("default", None)] + [(lb, f) for lb, f in SCHEDULES.get((case, dname), [])
                                    if not OPTS.dry and ("split_mode" not in f or base.split)]
    if OPTS.dry:   # a GPU-like grid on the dry shape: every axis on the grid, q whole (grid3 applies)
        scheds.append(("tiles", {"grid": ["n", "c", "h", "q"], "tile": {"n": 1, "c": 1, "h": 2, "q": 16}}))
    for label, fields in scheds:
        try:
            k = dt.compile(alg, merged(base, fields)) if fields else dt.compile(alg)
            y.fill_(float("nan"))
            rec, orig = R.recorded_launches(k, args, y)
            e = err_of(y, ref)
            ok = e <= RTOL[dtype]
            add(case, sname, dname, f"dtriton {label} (call)", e, ok, lambda k=k: k(*args, out=y),
                note=k.schedule_for(*args).to_json() if OPTS.dry else "")
            for f, p, c, m, i in rec:
                add(case, sname, dname, f"dtriton {label} {m.name}", e, ok,
                    lambda f=f, p=p, c=c, m=m, i=i: orig(f, p, c, m, i))
            if ok and (OPTS.ablate or OPTS.dry):
                ablate(case, sname, dname, label, rec, orig, y, ref, tmp)
            if ok and (OPTS.ablate or OPTS.dry or label == "default"):
                linear(case, sname, dname, label, alg, merged(base, fields) if fields else None, args, y, ref)
        except Exception as e:  # noqa: BLE001 - recorded
            add(case, sname, dname, f"dtriton {label}", float("nan"), False, note=f"failed: {type(e).__name__}: {e!s:.160}")
    del x, y, ref


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="bn,fro,lnchw,in")
    ap.add_argument("--ablate", action="store_true", help="the edited output kernels' rows (always on the dry run)")
    ap.add_argument("--dtypes", default="float16,float32")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds after which rows are no longer timed")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--warm-ms", type=float, default=40.0,
                    help="milliseconds of untimed graph replays before each row's timed ones (the clocks up)")
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    OPTS.dry, OPTS.out, OPTS.compile, OPTS.ablate = a.dry_run, a.out, not (a.no_compile or a.dry_run), a.ablate
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
    R.WARM_MS[0] = a.warm_ms
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    OPTS.deadline = t0 + a.budget
    dev = "cpu" if a.dry_run else "cuda"
    with tempfile.TemporaryDirectory() as tmp:
        for d in a.dtypes.split(","):
            for case in a.cases.split(","):
                run_case(case, getattr(torch, d), dev, Path(tmp))
                if not a.dry_run:
                    torch.cuda.empty_cache()
    print("\ncase  shape         dtype    impl                                                  graph us  ok")
    for r in ROWS:
        print(f"{r['case']:5s} {r['shape']:13s} {r['dtype']:8s} {r['impl']:52s} {r['graph_us']:9.2f}  "
              f"{'ok' if r['ok'] else 'FAIL ' + r['note'][:60]}")
    bad = [r["impl"] for r in ROWS if not r["ok"]]
    print(f"\n{len(ROWS)} rows, {len(bad)} failed; {time.time() - t0:.0f} s")
    if a.out:
        with open(os.path.join(a.out, "probe_out_ablate.json"), "w") as f:
            json.dump({"torch": torch.__version__, "rows": ROWS}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
