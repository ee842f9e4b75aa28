"""Flat 1-D lowerings of the two issue-16 kernels that trail torch.compile (H200 s11: batch norm fp16's output
kernel 1031.9 us vs inductor's 995.6; Frobenius fp16's statistics kernel 37.0 vs 33.9), timed side by side.

    PYTHONPATH=src python3 bench/probe_flat.py [--cases bn,fro] [--dtypes float16] [--out DIR] [--budget 240]
                                               [--explore SECONDS] [--no-compile] [--no-graph] [--dry-run]

Per case, every row is first checked against float64 torch on the bench shape (outputs poisoned with NaN), then
timed with ``triton.testing.do_bench`` (median, L2 flushed between calls) and, unless ``--no-graph``, as a CUDA-graph
replay of 5 calls (``bench/run.py``'s ``graph_time_us``: the unit of the s11 totals). Rows:

- ``dtriton <label> (call)``: the whole dtriton call (``dt.compile(alg)``, the default schedule, or it with the
  fields of :data:`BN_SCHEDULES` / :data:`FRO_SCHEDULES` merged in: ``h4``, tile h 4, s11's best batch norm
  variant; ``last``: the statistics finished by the last split program of each tile (``split_mode="last"``: no
  finishing kernel) where the default finishes them in a kernel of their own; ``flatF hH``: the ``flat_axes``
  lowering of this branch, F innermost axes as one flat axis;
  ``explored``: ``dt.explore`` for ``--explore`` seconds), and ``dtriton <label> <kernel>``: each of its kernels
  launched alone (the launch recorded on the first call, replayed with the same arguments). The generated source
  goes to ``<out>/dtriton_<case>_<shape>_<dtype>_<label>.py``.
- batch norm (64x64x512x512, statistics given: fp32 mean and biased variance, ``w``/``b`` of X's dtype) output,
  hand-written: ``gather B wW [mask] [ce] [i64] [rsqrt|affine]`` programs of B contiguous elements of the flat tensor,
  the channel of each element ``(i // HW) % C`` in int32 (``i64``: int64), per-channel loads ``evict_last``; ``mask``:
  masked loads/stores (else only where B divides the size), ``ce``: HW and C as constexprs (else run-time ints);
  the scale ``1/sqrt_rn(var + eps)`` per element (dtriton's form), ``rsqrt``: ``tl.math.rsqrt``, ``affine``: a
  per-channel scale and shift computed beforehand (two loads, one FMA). ``plane B wW``: B divides HW, so one program
  has one channel (scalar loads). ``torch.compile out``: the same output expression compiled (given the
  statistics); ``torch.compile F.batch_norm``: the whole training batch norm; ``torch copy``: ``y.copy_(x)``.
- Frobenius statistics (16x64x256x256; the sum of squares of all elements in fp32): ``split P x R wW [ef]``: the
  flat tensor in at most P contiguous runs (a whole number of R-element chunks each), a program per run looping
  over its chunks with an fp32 [R] accumulator, then a one-program finishing kernel over the partials (``ef``:
  loads ``evict_first``); the row times both kernels, ``...partials`` the first alone. ``torch.compile sumsq``:
  ``(x.float() * x.float()).sum()`` compiled; ``torch.compile frobenius``: the whole normalisation; ``torch
  sum(fp32)``: eager ``x.sum(dtype=float32)`` (a read-only rate) and ``torch copy``.

Writes ``<out>/probe_flat.json``; prints a table last. ``--dry-run``: the CPU interpreter (``TRITON_INTERPRET=1``)
on tiny shapes (2x3x5x7 and one that the blocks divide), every row checked against float64, nothing timed and no
torch.compile (``--dry-compile``: with CPU inductor's rows). On the H200 the rows run in the order torch
references, dtriton, hand-written; past ``--budget`` seconds (default 240) the remaining rows are recorded as
skipped, so a run ends in about 4-5 minutes at most.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback

if "--dry-run" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R  # noqa: E402
import dtriton as dt  # noqa: E402
from dtriton.library import batch_norm, frobenius_normalize  # noqa: E402

F = torch.nn.functional
EPS = 1e-5
ROWS: list[dict] = []
SHAPE = [""]   # the shape of the rows being added, as "AxBxCxD"
OPTS = argparse.Namespace(dry=False, graph=True, out="", deadline=float("inf"), explore=0.0, compile=False)
RTOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-5}


# ----------------------------------------------------------------------------------------------------------------
# hand-written kernels
@triton.jit
def bn_flat(x, y, mean, var, w, b, numel, HW, C, HWC: tl.constexpr, CC: tl.constexpr, XBLOCK: tl.constexpr,
            MASK: tl.constexpr, I64: tl.constexpr, FORM: tl.constexpr, PLANE: tl.constexpr):
    """Batch norm's output over the flat NCHW tensor: ``XBLOCK`` elements a program. FORM 0: scale
    1/sqrt_rn(var + eps) per element; 1: tl.math.rsqrt; 2: ``mean``/``var`` hold a per-channel scale/shift."""
    pid = tl.program_id(0)
    if I64:
        base = pid.to(tl.int64) * XBLOCK
    else:
        base = pid * XBLOCK
    idx = base + tl.arange(0, XBLOCK)
    if HWC > 0:
        hw = HWC
        cc = CC
    else:
        hw = HW
        cc = C
    if PLANE:
        c = (base // hw) % cc           # one channel a program (XBLOCK divides HW)
    else:
        c = (idx // hw) % cc            # always in [0, C): the per-channel loads need no mask
    if MASK:
        v = tl.load(x + idx, mask=idx < numel, other=0.0).to(tl.float32)
    else:
        v = tl.load(x + idx).to(tl.float32)
    p = tl.load(mean + c, eviction_policy="evict_last")
    q = tl.load(var + c, eviction_policy="evict_last")
    if FORM == 2:
        o = v * p + q
    else:
        if FORM == 1:
            r = tl.math.rsqrt(q + 1e-5)
        else:
            r = 1.0 / tl.sqrt_rn(q + 1e-5)
        ww = tl.load(w + c, eviction_policy="evict_last").to(tl.float32)
        bb = tl.load(b + c, eviction_policy="evict_last").to(tl.float32)
        o = (v - p) * r * ww + bb
    if MASK:
        tl.store(y + idx, o.to(y.dtype.element_ty), mask=idx < numel)
    else:
        tl.store(y + idx, o.to(y.dtype.element_ty))


@triton.jit
def sq_partials(x, part, numel, run, RB: tl.constexpr, MASK: tl.constexpr, I64: tl.constexpr,
                EVICT: tl.constexpr):
    """partial[pid] = sum of x^2 over the contiguous run [pid * run, pid * run + run) (``run`` a multiple of RB)."""
    pid = tl.program_id(0)
    if I64:
        start = pid.to(tl.int64) * run
    else:
        start = pid * run
    acc = tl.zeros([RB], dtype=tl.float32)
    for off in range(0, run, RB):
        idx = start + off + tl.arange(0, RB)
        if MASK:
            v = tl.load(x + idx, mask=idx < numel, other=0.0, eviction_policy=EVICT).to(tl.float32)
        else:
            v = tl.load(x + idx, eviction_policy=EVICT).to(tl.float32)
        acc += v * v
    tl.store(part + pid, tl.sum(acc, 0))


@triton.jit
def sum_finish(part, out, n, PB: tl.constexpr):
    """out[0] = sum of part[:n] (one program)."""
    i = tl.arange(0, PB)
    tl.store(out, tl.sum(tl.load(part + i, mask=i < n, other=0.0), 0))


# ----------------------------------------------------------------------------------------------------------------
# timing, checking, rows
def sync():
    if not OPTS.dry:
        torch.cuda.synchronize()


def times(fn) -> tuple[float, float]:
    """(do_bench median us, CUDA-graph replay us per call); NaN on the dry run."""
    if OPTS.dry:
        return float("nan"), float("nan")
    db = triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e3
    gr = R.graph_time_us(fn, reps=5, iters=5) if OPTS.graph else float("nan")
    return db, gr


def add(case, dtype, impl, err, ok, fn=None, nbytes=0.0, note="", params=None):
    """Time ``fn`` when the check passed, record and print a row."""
    db = gr = float("nan")
    if ok and fn is not None:
        try:
            db, gr = times(fn)
        except Exception as e:  # noqa: BLE001 - recorded
            note = f"timing failed: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    elif not ok and not note:
        note = "WRONG: not timed"
    best = db if db == db else gr
    row = {"case": case, "shape": SHAPE[0], "dtype": dtype, "impl": impl, "do_bench_us": db, "graph_us": gr, "err": err, "ok": ok,
           "tbs": nbytes / best / 1e6 if best == best and best > 0 else float("nan"), "note": note,
           "params": params or {}}
    ROWS.append(row)
    print(f"{case:4s} {SHAPE[0]:13s} {dtype:8s} {impl:44s} {db:9.2f} {gr:9.2f} us  err {err:.2e} {'ok' if ok else 'FAIL'} {note}",
          flush=True)


def skipped(case, dtype, impl) -> bool:
    """Past ``--budget``: record ``impl`` as skipped (not failed) and return True."""
    if time.time() <= OPTS.deadline:
        return False
    ROWS.append({"case": case, "shape": SHAPE[0], "dtype": dtype, "impl": impl, "do_bench_us": float("nan"),
                 "graph_us": float("nan"), "err": float("nan"), "ok": None, "tbs": float("nan"),
                 "note": "skipped: past --budget", "params": {}})
    print(f"{case:4s} {SHAPE[0]:13s} {dtype:8s} {impl:44s} skipped (past --budget)", flush=True)
    return True


def failed(case, dtype, impl, e):
    msg = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    if OPTS.dry:
        traceback.print_exc()
    add(case, dtype, impl, float("nan"), False, note=msg)


def chunk_err(got, ref_of, n0: int, step: int) -> float:
    """max |got - ref| / (1 + |ref|) over chunks of dim 0 (``ref_of(i, j)``: float64 reference of got[i:j]); NaN
    if any element of ``got`` is not finite."""
    worst = 0.0
    for i in range(0, n0, step):
        g = got[i:i + step].double()
        if not torch.isfinite(g).all():
            return float("nan")
        r = ref_of(i, i + step)
        worst = max(worst, float(((g - r).abs() / (1 + r.abs())).max()))
    return worst


def replayed_launches(kernel, args, y):
    """Run ``kernel(*args, out=y)`` once (a fresh kernel: its first call takes the planned path), recording each
    launch; returns [(name, replay fn)] that launch one kernel alone with the same arguments."""
    rec, orig = R.recorded_launches(kernel, args, y)
    sync()
    return [(m.name, (lambda f=f, p=p, c=c, m=m, i=i: orig(f, p, c, m, i))) for f, p, c, m, i in rec]


def dtriton_rows(case, dname, alg, args, y, ref_of, step, rtol, schedules, nbytes_of):
    """Rows of dtriton's call and of each of its kernels for every (label, schedule) in ``schedules``."""
    for label, sched in schedules:
        impl = f"dtriton {label}"
        if skipped(case, dname, impl):
            continue
        try:
            k = dt.compile(alg, sched) if sched is not None else dt.compile(alg)
            y.fill_(float("nan"))
            launches = replayed_launches(k, args, y)
            err = chunk_err(y, ref_of, y.shape[0], step)
            ok = err <= rtol
            js = k.schedule_for(*args).to_json()
            if OPTS.out:
                shape = "x".join(map(str, y.shape))
                with open(os.path.join(OPTS.out, f"dtriton_{case}_{shape}_{dname}_{label.replace(' ', '-')}.py"), "w") as f:
                    f.write(k.source)
            add(case, dname, impl + " (call)", err, ok, lambda k=k: k(*args, out=y), nbytes_of("call"),
                note=js if ok else "", params={"schedule": js})
            for name, fn in launches:
                add(case, dname, f"{impl} {name}", err, ok, fn, nbytes_of(name))
        except Exception as e:  # noqa: BLE001 - recorded
            failed(case, dname, impl, e)


def kernel_bytes(kernel: str, xbytes: int) -> int:
    """The least bytes a dtriton kernel of a statistics-then-normalise call moves ("call": all of them)."""
    if kernel == "call":
        return 3 * xbytes
    return 2 * xbytes if kernel.endswith("_out") else (0 if "finish" in kernel else xbytes)


#: the dry run's split schedules (the bench shape's default on the H200, tiles cut to the dry shape): the
#: statistics, finishing and output kernels of the GPU's plan run through the interpreter
DRY_SPLIT = {
    "bn": {"grid": ["n", "c", "h", "q"], "split": {"n": 2}, "split_mode": "finish",
           "stages": {m: {"strategy": {"h": "loop", "n": "loop", "q": "whole"}, "tile": {"c": 1, "h": 4, "n": 1}}
                      for m in ("mean0", "mean1")},
           "tile": {"c": 1, "h": 8, "n": 1, "q": 64}},
    "fro": {"grid": ["n", "c", "h", "q"], "split": {"h": 4, "n": 2}, "split_mode": "finish",
            "stages": {"sum0": {"strategy": {"c": "loop", "h": "loop", "n": "loop", "q": "whole"},
                                "tile": {"c": 2, "h": 1, "n": 1}}},
            "tile": {"c": 1, "h": 16, "n": 1, "q": 64}},
}


#: dtriton's schedule variants (fields merged into the default; bench/reductions.py's ``merged``): batch norm's
#: output tile (h rows of 512) and the flat lowering (``flat_axes``: 2, the (h, w) plane of one (n, c) a
#: program, the channel one scalar; 4, runs of the flat tensor, the channel decomposed per element)
#: ``last``: the statistics finished by the last split program of each tile (``split_mode="last"``, one launch
#: less than the default's finishing kernel: the A/B of issue 16's 3-4 us per call)
BN_SCHEDULES = [("last", {"split_mode": "last"}), ("h4", {"tile": {"h": 4}}), ("h4 last", {"tile": {"h": 4}, "split_mode": "last"}),
                ("h2", {"tile": {"h": 2}})] + [
    (f"flat{f} h{h}", {"flat_axes": f, "tile": {"h": h}}) for f in (2, 4) for h in (8, 4, 2)]
#: Frobenius: the whole-tensor sum (and the output) flat, runs of 512 programs in blocks of 16 x 256
#: (the default's stage tile c 16), 8 x 256 and 4 x 256; 1024 and 256 runs
FRO_SCHEDULES = [("last", {"split_mode": "last"}), ("flat4", {"flat_axes": 4}),
                 ("flat4 last", {"flat_axes": 4, "split_mode": "last"}), ("flat4 c8", {"flat_axes": 4, "stages": {"sum0": {"tile": {"c": 8}}}}),
                 ("flat4 c4", {"flat_axes": 4, "stages": {"sum0": {"tile": {"c": 4}}}}),
                 ("flat4 n4", {"flat_axes": 4, "split": {"n": 4}}), ("flat4 n1", {"flat_axes": 4, "split": {"n": None}}),
                 ("flat4 out", {"flat_axes": 4, "stages": {"sum0": {"flat_axes": 0}}})]


def schedule_list(alg, args, extra: list[tuple[str, dict]], case: str):
    """[(label, Schedule or None)]: the default, each of ``extra`` merged into it, and ``--explore``'s best
    (on the dry run, where the blocks divide the shape, the GPU's split plan as well)."""
    out = [("default", None)]
    from reductions import merged
    if OPTS.dry and args[0].shape[-1] % 64 == 0:
        split = dt.Schedule.from_json(json.dumps(DRY_SPLIT[case]))
        out.append(("split", split))
        out.append(("split last", merged(split, {"split_mode": "last"})))
        out += [(f"split {label}", merged(split, fields)) for label, fields in extra if "flat_axes" in fields]
    if extra or OPTS.explore > 0:
        base = dt.compile(alg).schedule_for(*args)
        for label, fields in extra:
            try:
                s = merged(base, fields)
                s.validate(alg)
                out.append((label, s))
            except Exception as e:  # noqa: BLE001 - a variant that does not apply to this shape's default
                print(f"schedule {label} does not apply here: {type(e).__name__}: {str(e)[:120]}", flush=True)
    if OPTS.explore > 0 and not OPTS.dry:
        try:
            res = dt.explore(alg, args, budget=OPTS.explore, progress=False, store=False)
            if res.best is not None:
                out.append(("explored", res.best))
        except Exception as e:  # noqa: BLE001 - the other rows still run
            print(f"explore failed: {type(e).__name__}: {e}", flush=True)
    return out


# ----------------------------------------------------------------------------------------------------------------
# batch norm output
def bn_variants(numel: int, hw: int) -> list[dict]:
    """The hand-written output variants: dicts of bn_flat's knobs (those that cannot run unmasked here are left out)."""
    vs = []
    for xb in (1024, 2048, 4096):
        for nw in (4, 8):
            for mask in (True, False):
                vs.append(dict(XBLOCK=xb, num_warps=nw, MASK=mask))
    for xb in (1024, 2048):
        vs.append(dict(XBLOCK=xb, num_warps=4, MASK=False, CE=True))
        vs.append(dict(XBLOCK=xb, num_warps=4, MASK=False, FORM=1))
        vs.append(dict(XBLOCK=xb, num_warps=4, MASK=False, FORM=2))
        vs.append(dict(XBLOCK=xb, num_warps=4, MASK=False, FORM=2, CE=True))
    vs.append(dict(XBLOCK=1024, num_warps=4, MASK=False, I64=True))
    vs.append(dict(XBLOCK=1024, num_warps=4, MASK=True, I64=True))
    for xb in (1024, 2048, 4096):
        for nw in (4, 8):
            vs.append(dict(XBLOCK=xb, num_warps=nw, MASK=False, PLANE=True))
    out = []
    for v in vs:
        if not v["MASK"] and numel % v["XBLOCK"]:
            continue
        if v.get("PLANE") and hw % v["XBLOCK"]:
            continue
        out.append(v)
    return out


def bn_name(v: dict) -> str:
    kind = "plane" if v.get("PLANE") else "gather"
    extra = [t for t, on in (("mask", v["MASK"]), ("ce", v.get("CE")), ("i64", v.get("I64")),
                             ("rsqrt", v.get("FORM") == 1), ("affine", v.get("FORM") == 2)) if on]
    return " ".join([f"{kind} {v['XBLOCK']} w{v['num_warps']}"] + extra)


def run_bn(shape, dtype, dev):
    n, c, h, q = shape
    dname = str(dtype)[6:]
    torch.manual_seed(0)
    x = torch.randn(shape, device=dev, dtype=dtype)
    w = torch.randn(c, device=dev, dtype=dtype)
    b = torch.randn(c, device=dev, dtype=dtype)
    step = max(1, n // 8)
    s1 = torch.zeros(c, dtype=torch.float64, device=dev)
    for i in range(0, n, step):
        s1 += x[i:i + step].double().sum((0, 2, 3))
    cnt = n * h * q
    mean64 = s1 / cnt
    s2 = torch.zeros_like(s1)
    for i in range(0, n, step):
        s2 += ((x[i:i + step].double() - mean64.view(1, c, 1, 1)) ** 2).sum((0, 2, 3))
    var64 = s2 / cnt
    view = (1, c, 1, 1)
    scale64 = torch.rsqrt(var64 + EPS) * w.double()
    shift64 = b.double() - mean64 * scale64

    def ref_of(i, j):
        return x[i:j].double() * scale64.view(view) + shift64.view(view)
    rtol = RTOL[dtype]
    y = torch.full_like(x, float("nan"))
    mean, var = mean64.float(), var64.float()
    scale, shift = scale64.float(), shift64.float()
    numel, hw = x.numel(), h * q
    nbytes = 2 * numel * x.element_size()

    def out_expr(x):
        return ((x.float() - mean.view(view)) * torch.rsqrt(var.view(view) + EPS) * w.float().view(view)
                + b.float().view(view)).to(x.dtype)
    refs = [("torch copy", lambda: y.copy_(x), nbytes)]
    if OPTS.compile:
        comp_out = torch.compile(out_expr)
        comp_bn = torch.compile(lambda x: F.batch_norm(x, None, None, w, b, training=True, eps=EPS))
        refs += [("torch.compile out", lambda: comp_out(x), nbytes),
                 ("torch.compile F.batch_norm", lambda: comp_bn(x), 3 * numel * x.element_size())]
    for name, fn, nb in refs:
        try:
            y.fill_(float("nan"))
            got = fn()
            sync()
            err = chunk_err(got, (lambda i, j: x[i:j].double()) if name == "torch copy" else ref_of, n, step)
            # (torch.compile's batch norm computes its own statistics: the same float64 reference)
            add("bn", dname, name, err, err <= rtol, fn, nb)
            del got
        except Exception as e:  # noqa: BLE001 - recorded
            failed("bn", dname, name, e)
    dtriton_rows("bn", dname, batch_norm, (x, w, b), y, ref_of, step, rtol,
                 schedule_list(batch_norm, (x, w, b), BN_SCHEDULES, "bn"),
                 lambda k: kernel_bytes(k, numel * x.element_size()))
    for v in bn_variants(numel, hw):
        name = bn_name(v)
        if skipped("bn", dname, name):
            continue
        try:
            form = v.get("FORM", 0)
            pm, pv = (scale, shift) if form == 2 else (mean, var)
            ce = bool(v.get("CE"))

            def fn(v=v, pm=pm, pv=pv, ce=ce, form=form):
                bn_flat[(triton.cdiv(numel, v["XBLOCK"]),)](
                    x, y, pm, pv, w, b, numel, hw, c, HWC=hw if ce else 0, CC=c if ce else 0, XBLOCK=v["XBLOCK"],
                    MASK=v["MASK"], I64=bool(v.get("I64")), FORM=form, PLANE=bool(v.get("PLANE")),
                    num_warps=v["num_warps"])
                return y
            y.fill_(float("nan"))
            fn()
            sync()
            err = chunk_err(y, ref_of, n, step)
            add("bn", dname, name, err, err <= rtol, fn, nbytes, params=v)
        except Exception as e:  # noqa: BLE001 - recorded
            failed("bn", dname, name, e)

    del x, y


# ----------------------------------------------------------------------------------------------------------------
# Frobenius statistics
def fro_variants(numel: int) -> list[dict]:
    vs = []
    for p in (256, 512, 1024):
        for rb in (1024, 2048, 4096):
            for nw in (4, 8):
                vs.append(dict(P=p, RB=rb, num_warps=nw, EVICT=""))
    for p, rb in ((512, 2048), (512, 4096), (1024, 2048)):
        vs.append(dict(P=p, RB=rb, num_warps=8, EVICT="evict_first"))
    for v in vs:
        run = triton.cdiv(triton.cdiv(numel, v["P"]), v["RB"]) * v["RB"]
        v.update(run=run, programs=triton.cdiv(numel, run), MASK=numel % run != 0, I64=numel + run >= 2 ** 31)
    return vs


def run_fro(shape, dtype, dev):
    n = shape[0]
    dname = str(dtype)[6:]
    torch.manual_seed(1)
    x = torch.randn(shape, device=dev, dtype=dtype)
    step = max(1, n // 4)
    ss64 = sum(float((x[i:i + step].double() ** 2).sum()) for i in range(0, n, step))
    rn64 = 1.0 / math.sqrt(ss64)
    numel = x.numel()
    rtol = RTOL[dtype]
    nb = numel * x.element_size()

    def ref_of(i, j):
        return x[i:j].double() * rn64
    y = torch.full_like(x, float("nan"))
    def scalar_err(got) -> float:
        g = float(got.reshape(()).double())
        return abs(g - ss64) / ss64 if math.isfinite(g) else float("nan")
    refs = [("torch sum(fp32)", lambda: x.sum(dtype=torch.float32), nb, "sum"),
            ("torch copy", lambda: y.copy_(x), 2 * nb, "copy")]
    if OPTS.compile:
        comp_ss = torch.compile(lambda x: (x.float() * x.float()).sum())
        comp_fro = torch.compile(lambda x: x / torch.linalg.vector_norm(x.float()).to(x.dtype))
        refs += [("torch.compile sumsq", lambda: comp_ss(x), nb, "sumsq"),
                 ("torch.compile frobenius", lambda: comp_fro(x), 3 * nb, "fro")]
    for name, fn, nbytes, kind in refs:
        try:
            y.fill_(float("nan"))
            got = fn()
            sync()
            if kind == "sumsq":
                err, tol = scalar_err(got), 1e-4
            elif kind == "sum":
                s64 = sum(float(x[i:i + step].double().sum()) for i in range(0, n, step))
                err, tol = abs(float(got) - s64) / math.sqrt(ss64), 1e-4   # (a sum near 0: relative to the norm)
            elif kind == "copy":
                err, tol = chunk_err(got, lambda i, j: x[i:j].double(), n, step), 0.0
            else:
                # torch divides by the norm rounded to x's dtype: one more rounding than the reference
                err, tol = chunk_err(got, ref_of, n, step), 2 * rtol
            add("fro", dname, name, err, err <= tol, fn, nbytes)
            del got
        except Exception as e:  # noqa: BLE001 - recorded
            failed("fro", dname, name, e)
    dtriton_rows("fro", dname, frobenius_normalize, (x,), y, ref_of, step, rtol,
                 schedule_list(frobenius_normalize, (x,), FRO_SCHEDULES, "fro"),
                 lambda k: kernel_bytes(k, nb))

    for v in fro_variants(numel):
        name = f"split {v['P']} x {v['RB']} w{v['num_warps']}{' ef' if v['EVICT'] else ''}"
        if skipped("fro", dname, name):
            continue
        try:
            part = torch.full((v["programs"],), float("nan"), device=dev, dtype=torch.float32)
            tot = torch.full((1,), float("nan"), device=dev, dtype=torch.float32)

            def first(v=v, part=part):
                sq_partials[(v["programs"],)](x, part, numel, v["run"], RB=v["RB"], MASK=v["MASK"], I64=v["I64"],
                                              EVICT=v["EVICT"], num_warps=v["num_warps"])

            def both(v=v, part=part, tot=tot, first=first):
                first()
                sum_finish[(1,)](part, tot, v["programs"], PB=max(16, triton.next_power_of_2(v["programs"])))
                return tot
            both()
            sync()
            err = scalar_err(tot)
            ok = err <= 1e-4
            params = {k: v[k] for k in ("P", "RB", "num_warps", "EVICT", "run", "programs", "MASK", "I64")}
            add("fro", dname, name, err, ok, both, nb, params=params)
            add("fro", dname, name + " partials", err, ok, first, nb, params=params)
        except Exception as e:  # noqa: BLE001 - recorded
            failed("fro", dname, name, e)
    del x, y


# ----------------------------------------------------------------------------------------------------------------
def print_table():
    print("\ncase shape         dtype    impl                                          do_bench us  graph us   TB/s  ok")
    for r in ROWS:
        print(f"{r['case']:4s} {r['shape']:13s} {r['dtype']:8s} {r['impl']:46s} {r['do_bench_us']:10.2f} {r['graph_us']:9.2f} "
              f"{r['tbs']:6.3f}  {'ok' if r['ok'] else 'skipped' if r['ok'] is None else 'FAIL ' + r['note'][:60]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="bn,fro")
    ap.add_argument("--dtypes", default="float16")
    ap.add_argument("--out", default="")
    ap.add_argument("--explore", type=float, default=0.0, help="seconds of dt.explore per case (0: none)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-graph", action="store_true")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds after which the remaining variants are skipped, recorded as skipped (default 240; "
                         "none on the dry run)")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--dry-compile", action="store_true", help="with --dry-run: torch.compile rows too (CPU inductor)")
    a = ap.parse_args(argv)
    OPTS.dry, OPTS.graph, OPTS.out, OPTS.explore = a.dry_run, not a.no_graph, a.out, a.explore
    OPTS.compile = not a.no_compile and (not a.dry_run or a.dry_compile)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    if a.dry_run:
        from dtriton.backends.triton.npcompat import install as install_numpy_shim
        R.DEV, R.DRY = "cpu", True
        install_numpy_shim()
    dev = "cpu" if a.dry_run else "cuda"
    t0 = time.time()
    budget = a.budget if a.budget is not None else (float("inf") if a.dry_run else 240.0)
    OPTS.deadline = t0 + budget
    for d in a.dtypes.split(","):
        dtype = getattr(torch, d)
        if "bn" in a.cases:
            for shape in ([(2, 3, 5, 7), (2, 3, 32, 64)] if a.dry_run else [(64, 64, 512, 512)]):
                SHAPE[0] = "x".join(map(str, shape))
                run_bn(shape, dtype, dev)
        if "fro" in a.cases:
            for shape in ([(2, 3, 5, 7), (2, 4, 32, 64)] if a.dry_run else [(16, 64, 256, 256)]):
                SHAPE[0] = "x".join(map(str, shape))
                run_fro(shape, dtype, dev)
        if not a.dry_run:
            torch.cuda.empty_cache()
    print_table()
    bad = [r["impl"] for r in ROWS if r["ok"] is False]
    print(f"\n{len(ROWS)} rows, {len(bad)} failed{': ' + ', '.join(bad) if bad else ''}; {time.time() - t0:.0f} s")
    if a.out:
        meta = {"torch": torch.__version__, "triton": triton.__version__,
                "device": torch.cuda.get_device_name() if dev == "cuda" else "interpreter", "dry_run": a.dry_run}
        with open(os.path.join(a.out, "probe_flat.json"), "w") as f:
            json.dump({"meta": meta, "rows": ROWS}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
