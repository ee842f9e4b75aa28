"""Shared memory: dtriton's estimate against what Triton allocates, per kernel, compiled for sm_90 on a
machine without a GPU (issue 15, the GQA backward's default overflowing shared memory).

    PYTHONPATH=src python3 bench/smem_check.py [--cases "gqa B3,matmul"] [--out DIR] [--json FILE]

Each case is an algorithm with call arguments on the meta device, planned as a CUDA call under the
heuristic's schedule as it comes, before the runtime checks it against the device (``raw``), and as
the runtime runs it (``fitted``: the runtime shrinks a default until the estimate of every kernel
fits 227 KB, :meth:`dtriton.Kernel.schedule_for`; shown only where it differs). Every kernel is compiled by Triton for sm_90; one line per kernel:
:func:`dtriton.plan.smem.kernel_smem`'s bytes, Triton's ``metadata.shared`` (or the bytes
its ``OutOfResources`` asks for), their ratio, and ``LOW`` where the estimate is below the compiler's
figure. Ends with a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton.grad import augmented_forward, saved_statistics  # noqa: E402
from dtriton.ir import InputTensor  # noqa: E402
from dtriton.library import (attention, batch_norm, causal_attention, conv2d_nhwc, cross_entropy, gqa_attention,  # noqa: E402
                              layer_norm, linear_relu, matmul, softmax, spatial_diffusion)
from dtriton.plan.smem import program_smem, smem_parts  # noqa: E402
from dtriton.tune.check import Limits  # noqa: E402
from dtriton.plan.decide import plan_program  # noqa: E402
from sm90 import compile_sm90, cuda_binding, load_kernels, ptr_types, render, signature  # noqa: E402

LIMIT = Limits().smem_bytes


def _meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _attn_args(alg, B, H, G, S, D, dtype=torch.float16, rep=None):
    rep = ((rep or H // G),) if alg is gqa_attention else ()
    return (_meta(B, H, S, D, dtype=dtype), _meta(B, G, S, D, dtype=dtype), _meta(B, G, S, D, dtype=dtype), D ** -0.5, *rep)


def _bwd_cases(alg, B, H, G, S, D, tag, rep=None):
    """The derived backward algorithms of ``alg`` (saved statistics as autograd saves them), with
    meta arguments in the dtypes the saving forward gives the statistics."""
    aug, names = augmented_forward(alg, saved_statistics(alg))
    fargs = _attn_args(alg, B, H, G, S, D, rep=rep)
    saved_dt = dict(zip(names, aug.bind(tuple(a if not isinstance(a, torch.Tensor) else torch.empty(a.shape, dtype=a.dtype)
                                              for a in fargs)).out_dtypes[len(alg.outputs):]))
    sizes = {"B": B, "H": H, "G": G, "S": S, "T": S, "D": D}
    out = {}
    for bwd in dt.grad(alg, save=names).algorithms:
        args = []
        for p in bwd.params:
            if isinstance(p, InputTensor):
                dtp = saved_dt.get(p.name.removeprefix("saved_"), torch.float16)
                args.append(_meta(*[sizes[d] for d in p.dims], dtype=dtp))
            else:
                args.append(D ** -0.5 if p.pytype is float else rep or H // G)
        out[f"{tag} {bwd.name}"] = (bwd, tuple(args))
    return out


def cases() -> dict[str, tuple]:
    """name -> (algorithm, meta arguments)."""
    c = {}
    c.update(_bwd_cases(gqa_attention, 3, 5, 2, 256, 128, "gqa B3 H5 G2 rep3 S256 D128", rep=3))   # (gpu_check's)
    c.update(_bwd_cases(gqa_attention, 2, 32, 8, 1024, 64, "gqa B2 H32 G8 S1024 D64"))
    c.update(_bwd_cases(attention, 4, 32, 32, 4096, 128, "attn B4 H32 S4096 D128"))
    c.update(_bwd_cases(attention, 4, 16, 16, 2048, 64, "attn B4 H16 S2048 D64"))
    c.update(_bwd_cases(causal_attention, 4, 16, 16, 2048, 64, "causal B4 H16 S2048 D64"))
    for D in (64, 128):
        c[f"attn fwd B4 H32 S4096 D{D}"] = (attention, _attn_args(attention, 4, 32, 32, 4096, D))
        c[f"gqa fwd B4 H32 G8 S4096 D{D}"] = (gqa_attention, _attn_args(gqa_attention, 4, 32, 8, 4096, D))
        aug = augmented_forward(attention, saved_statistics(attention))[0]
        c[f"attn saving fwd B4 H32 S4096 D{D}"] = (aug, _attn_args(attention, 4, 32, 32, 4096, D))
    for n, dtype in ((4096, torch.float16), (4096, torch.bfloat16), (4096, torch.float32), (1024, torch.float16)):
        c[f"matmul {n}^3 {str(dtype)[6:]}"] = (matmul, (_meta(n, n, dtype=dtype), _meta(n, n, dtype=dtype)))
    f16, f32 = torch.float16, torch.float32
    for M, N, dtype in ((4096, 4096, f16), (4096, 32768, f16), (8192, 8192, f32), (64, 131072, f32)):
        c[f"softmax {M}x{N} {str(dtype)[6:]}"] = (softmax, (_meta(M, N, dtype=dtype),))
        c[f"layer_norm {M}x{N} {str(dtype)[6:]}"] = (layer_norm, (_meta(M, N, dtype=dtype), _meta(N, dtype=dtype),
                                                                  _meta(N, dtype=dtype)))
    c["cross_entropy 4096x32768 f16"] = (cross_entropy, (_meta(4096, 32768, dtype=f16), _meta(4096, dtype=torch.int64)))
    c["batch_norm 64x64x128x128 f16"] = (batch_norm, (_meta(64, 64, 128, 128, dtype=f16), _meta(64, dtype=f16),
                                                     _meta(64, dtype=f16)))
    c["linear_relu 4096x4096x4096 f16"] = (linear_relu, (_meta(4096, 4096, dtype=f16), _meta(4096, 4096, dtype=f16),
                                                        _meta(4096, dtype=f16)))
    c["conv2d_nhwc N32 56x56 C64 O64 3x3 f16"] = (conv2d_nhwc, (_meta(32, 56, 56, 64, dtype=f16), _meta(64, 3, 3, 64, dtype=f16),
                                                                1, 1, 1, 56, 56))
    for V in (2000, 100000):
        c[f"diffusion fwd V{V}"] = (spatial_diffusion, (_meta(V, 128, dtype=torch.float32), _meta(V, 128, dtype=torch.float32),
                                                       _meta(V, dtype=torch.float32), _meta(128, dtype=torch.float32),
                                                       _meta(128, dtype=torch.float32)))
    return c


def ck_ok(note: str) -> bool:
    """Whether ``note`` lists allocations (a compiled kernel) rather than an error's name."""
    return not note.endswith(("Error", "Resources"))


def _required(e: Exception) -> int | None:
    m = re.search(r"Required:\s*(\d+)", str(e))
    return int(m.group(1)) if m else None


def report(name: str, alg, args, out: str, rows: list, which: str, fitted: bool = False) -> dt.Schedule:
    """Compile every kernel of ``alg(*args)`` as a CUDA call under the heuristic's schedule, as it
    comes (after the runtime's TMA pick) or ``fitted`` as the runtime runs it, planned with the
    runtime's call spec; print a line each, append rows; returns the schedule."""
    kern = dt.compile(alg)
    b = cuda_binding(alg, args)
    if not fitted:   # the runtime's schedule and call spec, without its shared-memory fit
        kern._fitted = lambda s, *rest: s
    sched, spec = kern._schedule_and_spec(b, args, False)
    prog = plan_program(alg, sched, b, spec)
    est = program_smem(prog)
    parts = {k.name: smem_parts(k) for k in prog.kernels}
    src, metas = render(prog)
    mod = load_kernels(src, out, re.sub(r"\W", "_", f"{name}_{which}"))
    for m in metas:
        if m.ir.gluon is not None:
            continue
        fn = getattr(mod, m.name)
        try:
            ck = compile_sm90(fn, m, *signature(alg, fn, m, ptr_types(alg, b, prog)))
            actual, note = ck.metadata.shared, ""
            with open(os.path.join(out, re.sub(r"\W", "_", f"{name}_{which}_{m.name}") + ".ttgir"), "w") as f:
                f.write(ck.asm["ttgir"])
            note = " ".join(re.findall(r"ttg\.local_alloc.*?-> !ttg\.memdesc<([0-9a-z]+)", ck.asm["ttgir"]))
        except Exception as e:  # noqa: BLE001 - an overflow is a result
            actual, note = _required(e), f"{type(e).__name__}"
        e_k = est.get(m.name)
        low = actual is not None and e_k is not None and e_k < actual
        ratio = f"{e_k / actual:.2f}" if actual and e_k is not None else "-"
        print(f"{name} [{which}] {m.name} (stages {m.ir.num_stages}, {sched.access}): estimate {e_k} actual {actual} {note} ratio {ratio}{'  LOW' if low else ''}  "
              f"parts {parts.get(m.name)}",
              flush=True)
        rows.append((name, which, m.name, e_k, actual, note if not ck_ok(note) else "", ratio, low, m.ir.num_stages))
    return sched


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names (default: all)")
    ap.add_argument("--out", default="", help="keep the printed sources here")
    ap.add_argument("--json", default="", help="also write the rows to this file")
    a = ap.parse_args(argv)
    out = a.out or tempfile.mkdtemp(prefix="dt_smem_")
    rows: list = []
    want = [w for w in a.cases.split(",") if w]
    for name, (alg, args) in cases().items():
        if want and not any(w in name for w in want):
            continue
        try:
            try:
                raw = report(name, alg, args, out, rows, "raw")
            except dt.ResourceError as e:   # the default as it comes is refused before any compile
                print(f"{name} [raw]: refused: {str(e)[:160]}", flush=True)
                rows.append((name, "raw", "(refused by the printer: a block over 2**20)", None, None, "", "-", False, 0))
                raw = None
            fitted = dt.compile(alg)._schedule_and_spec(cuda_binding(alg, args), args, False)[0]
            if fitted != raw:
                print(f"  fitted: {fitted.to_json()}", flush=True)
                report(name, alg, args, out, rows, "fitted", fitted=True)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"{name}: failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
    if a.json:
        keys = ("case", "schedule", "kernel", "estimate", "actual", "note", "ratio", "low", "stages")
        with open(a.json, "w") as f:
            json.dump([dict(zip(keys, r)) for r in rows], f, indent=0)
    print("\n| case | schedule | kernel | stages | estimate B | actual B | est/actual |\n|---|---|---|---:|---:|---:|---:|")
    for name, which, k, e_k, actual, note, ratio, low, st in rows:
        print(f"| {name} | {which} | {k} | {st} | {e_k} | {actual}{' (' + note + ')' if note else ''} | {ratio}{' LOW' if low else ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
