"""Probe: fp16 attention schedules beside SDPA (issue 18's shapes), to see which knobs matter before
they go into the heuristic: tile pairs, warps, stages, TMA, warp specialisation, launch order.

    PYTHONPATH=src python3 bench/probe_attention.py [--cases n4096x128,c4096x128,g4096x128]
                                                    [--only LABEL,...] [--out DIR] [--dry-run]

A case is ``<kind><S>x<D>`` at B4 H32, S=T: kind ``n`` non-causal (``library.attention`` against
SDPA's default backend), ``c`` causal (``library.causal_attention``, ``where(j <= i, s, -inf)``,
against SDPA ``is_causal=True``), ``g`` grouped heads (``library.gqa_attention``: 32 query heads
over 8 K/V heads, against SDPA ``enable_gqa=True``), ``d`` decoding (B1 H8, one query row over
``<S>`` keys: split-KV variants). Each case times dtriton's default schedule
and the ``VARIANTS`` (fields merged into the default schedule; ``--only`` keeps the labels
given). Every candidate is checked against fp32 SDPA first (relative error < 1e-2), then timed
by CUDA-graph replay. Prints per case µs, TFLOP/s (visible work: half the scores for causal) and
× SDPA, and writes ``probe_attention.json`` under ``--out``. ``--dry-run`` runs the interpreter on
tiny shapes (checks the script).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as R  # noqa: E402
from dtriton.library import attention, causal_attention, gqa_attention  # noqa: E402


def _v(tile, warps, stages, **kw):
    return dict(tile={"i": tile[0], "j": tile[1]}, num_warps=warps, num_stages=stages, **kw)


#: (label, kinds it applies to, schedule fields merged into the default schedule)
VARIANTS = [
    ("128x64 w8 s3", "ncg", _v((128, 64), 8, 3)),
    ("128x128 w8 s2", "ncg", _v((128, 128), 8, 2)),
    ("128x64 w4 s3", "ncg", _v((128, 64), 4, 3)),
    ("64x64 w4 s3", "ncg", _v((64, 64), 4, 3)),
    ("tma 128x64 w8 s3", "ncg", _v((128, 64), 8, 3, access="tma")),
    ("tma 128x128 w8 s2", "ncg", _v((128, 128), 8, 2, access="tma")),
    ("tma ws 128x64 w4 s2", "ng", _v((128, 64), 4, 2, access="tma", warp_specialize=True)),
    ("tma ws 128x64 w4 s3", "ng", _v((128, 64), 4, 3, access="tma", warp_specialize=True)),
    ("tma ws 128x128 w4 s2", "ng", _v((128, 128), 4, 2, access="tma", warp_specialize=True)),
    # the Gluon attention forward (plan.gluon_attention: warp_specialize=True on sm_90 prints the hand-written
    # Gluon kernel; its own tiles); the row's "gluon" says whether it ran
    ("gluon", "ncg", dict(warp_specialize=True)),
    ("reverse", "c", dict(tile_order="reverse")),
    ("tma 128x64 w8 s3 reverse", "c", _v((128, 64), 8, 3, access="tma", tile_order="reverse")),
    ("heavy first", "c", dict(grid=["i", "b", "h"], tile_order="reverse")),
    ("split 16", "d", dict(split={"j": 16})),
    ("split 32", "d", dict(split={"j": 32})),
    ("split 32 s3", "d", dict(split={"j": 32}, num_stages=3)),
    ("split 32 s4", "d", dict(split={"j": 32}, num_stages=4)),
    ("split 16 j128 s3", "d", dict(split={"j": 16}, tile={"j": 128}, num_stages=3)),
    ("split 32 j128 s3", "d", dict(split={"j": 32}, tile={"j": 128}, num_stages=3)),
    ("split 64 s4", "d", dict(split={"j": 64}, num_stages=4)),
    ("split 32 w8 s3", "d", dict(split={"j": 32}, num_warps=8, num_stages=3)),
]


def inputs(kind: str, S: int, D: int, B: int, H: int, dtype: torch.dtype = torch.float16):
    """(algorithm, dtriton args, SDPA callable on those tensors, fp32 reference, visible FLOPs);
    ``dtype``: Q, K, V (fp16 or bf16)."""
    hk = H // 4 if kind == "g" else H
    T, S = (S, 1) if kind == "d" else (S, S)   # decoding: one query row per head, S keys
    Q = torch.randn(B, H, S, D, device=R.DEV, dtype=dtype)
    K, V = (torch.randn(B, hk, T, D, device=R.DEV, dtype=dtype) for _ in range(2))
    scale = D ** -0.5
    kw = dict(scale=scale, is_causal=kind == "c", enable_gqa=kind == "g")
    ref = F.scaled_dot_product_attention(Q.float(), K.float(), V.float(), **kw)
    alg = {"n": attention, "d": attention, "c": causal_attention, "g": gqa_attention}[kind]
    args = (Q, K, V, scale) + ((H // hk,) if kind == "g" else ())
    flops = 4 * B * H * S * T * D * (0.5 if kind == "c" else 1.0)
    return alg, args, (lambda: F.scaled_dot_product_attention(Q, K, V, **kw)), ref, flops


def merged(default: dt.Schedule, fields: dict) -> dt.Schedule:
    """``default`` with ``fields`` merged in (per-axis maps key by key)."""
    base = json.loads(default.to_json())
    for k, v in fields.items():
        base[k] = dict(base.get(k) or {}, **v) if isinstance(v, dict) else v
    return dt.Schedule.from_json(json.dumps(base))


def run_case(spec: str, only: set, dry: bool) -> list[dict]:
    kind, (S, D) = spec[0], (int(v) for v in spec[1:].split("x"))
    B, H = ((1, 8) if kind == "d" else (4, 32)) if not dry else (1, 4)
    if dry:
        S, D = 40, 16
    alg, args, sdpa, ref, flops = inputs(kind, S, D, B, H)
    k = dt.compile(alg)
    default = k.schedule_for(*args)
    cands = [("sdpa", None), ("dtriton default", default)]
    for label, kinds, fields in VARIANTS:
        if kind in kinds and (not only or label in only):
            if dry:
                fields = dict(fields, tile={"i": 16, "j": 16})   # (TMA and warp specialisation print as on the GPU)
            cands.append((label, merged(default, fields)))
    print(f"== {spec}: attention fp16 B{B} H{H} " + (f"S=1 T={S}" if kind == "d" else f"S=T={S}") + f" D{D}"
          + (" (K/V heads H/4)" if kind == "g" else ""), flush=True)
    rows, sd = [], None
    for label, sched in cands:
        row = dict(case=spec, cand=label, schedule=sched.to_json() if sched else None)
        try:
            fn = sdpa
            if sched is not None:
                kk = dt.compile(alg, sched)
                row["err"] = R.relerr(kk(*args), ref)
                if not row["err"] < 1e-2:
                    raise RuntimeError(f"wrong: rel err {row['err']:.1e}")
                fn = (lambda kk=kk: kk(*args))
                row["gluon"] = "gluon_kernels import" in kk.source
            else:
                row["err"] = R.relerr(sdpa(), ref)
            row["us"] = R.graph_time_us(fn)
            row["tflops"] = flops / row["us"] / 1e6
        except Exception as e:  # noqa: BLE001 - a failing candidate is a result
            row["error"] = " ".join(str(e).split())[:200]
        sd = row.get("us") if label == "sdpa" else sd
        rel = f"{sd / row['us']:.2f}x" if sd and row.get("us") else ""
        print(f"  {label:26s} {row.get('us', float('nan')):9.1f} us {row.get('tflops', float('nan')):7.1f} TFLOP/s "
              f"{rel:>6s} {'(Gluon) ' if row.get('gluon') else ''}{row.get('error', '')}", flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="n4096x128,n1024x64,c4096x128,c1024x64,g4096x128")
    ap.add_argument("--only", default="", help="comma-separated variant labels to keep (default: all)")
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    rows = []
    for spec in a.cases.split(","):
        rows += run_case(spec, only, a.dry_run)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "probe_attention.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
