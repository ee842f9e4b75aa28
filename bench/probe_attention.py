"""Probe: non-causal fp16 attention schedules beside SDPA (issue 18's shapes), to see which knobs
matter before they go into the heuristic: tile pairs, warps, stages, TMA and warp specialisation.

    PYTHONPATH=src python3 bench/probe_attention.py [--shapes 4096x128,1024x64] [--out DIR] [--dry-run]

B4 H32, S=T from ``--shapes`` (S x D). Every candidate is checked against SDPA in fp32 first (rel
err < 1e-2), then timed by CUDA-graph replay; SDPA's default backend is timed beside it. Prints one
table per shape (µs, TFLOP/s, x SDPA) and writes ``probe_attention.json`` under ``--out``.
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
from dtriton.library import attention  # noqa: E402

#: (label, schedule knobs) tried besides the heuristic's default
VARIANTS = [
    ("i128 j64 w8 s2", dict(tile={"i": 128, "j": 64}, num_warps=8, num_stages=2)),
    ("i128 j64 w8 s3", dict(tile={"i": 128, "j": 64}, num_warps=8, num_stages=3)),
    ("i128 j128 w8 s2", dict(tile={"i": 128, "j": 128}, num_warps=8, num_stages=2)),
    ("i128 j64 w4 s3", dict(tile={"i": 128, "j": 64}, num_warps=4, num_stages=3)),
    ("i64 j64 w4 s3", dict(tile={"i": 64, "j": 64}, num_warps=4, num_stages=3)),
    ("i128 j64 w8 s3 tma", dict(tile={"i": 128, "j": 64}, num_warps=8, num_stages=3, access="tma")),
    ("i128 j128 w8 s3 tma", dict(tile={"i": 128, "j": 128}, num_warps=8, num_stages=3, access="tma")),
    ("i128 j64 w8 s3 tma ws", dict(tile={"i": 128, "j": 64}, num_warps=8, num_stages=3, access="tma",
                                   warp_specialize=True)),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4096x128,1024x64")
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
    rows = []
    for shp in a.shapes.split(","):
        S, D = (int(v) for v in shp.split("x"))
        B, H = (4, 32) if not a.dry_run else (1, 2)
        if a.dry_run:
            S, D = 40, 16
        Q, K, V = (torch.randn(B, H, S, D, device=R.DEV, dtype=torch.float16) for _ in range(3))
        scale = D ** -0.5
        ref = F.scaled_dot_product_attention(Q.float(), K.float(), V.float(), scale=scale)
        flops = 4 * B * H * S * S * D
        cands = [("sdpa", None, lambda: F.scaled_dot_product_attention(Q, K, V, scale=scale)),
                 ("dtriton default", None, None)]
        for label, kw in VARIANTS:
            if a.dry_run:
                kw = dict(kw, tile={"i": 16, "j": 16}, access="pointer", warp_specialize=False)
            cands.append((label, dt.Schedule(strategy={"j": "online"}, **kw), None))
        print(f"== attention fp16 B{B} H{H} S=T={S} D{D}", flush=True)
        for label, sched, fn in cands:
            row = dict(shape=f"{S}x{D}", cand=label, schedule=sched.to_json() if sched else None)
            try:
                if fn is None:
                    k = dt.compile(attention, sched)
                    out = k(Q, K, V, scale)
                    row["err"] = R.relerr(out, ref)
                    if not row["err"] < 1e-2:
                        raise RuntimeError(f"wrong: rel err {row['err']:.1e}")
                    if sched is None:
                        row["schedule"] = k.schedule_for(Q, K, V, scale).to_json()
                    fn = (lambda k=k: k(Q, K, V, scale))
                row["us"] = R.graph_time_us(fn)
                row["tflops"] = flops / row["us"] / 1e6
            except Exception as e:  # noqa: BLE001
                row["error"] = " ".join(str(e).split())[:200]
            rows.append(row)
            sd = next((r["us"] for r in rows if r["cand"] == "sdpa" and r["shape"] == row["shape"] and "us" in r), None)
            rel = f"{sd / row['us']:.2f}x" if sd and row.get("us") else ""
            print(f"  {label:24s} {row.get('us', float('nan')):9.1f} us {row.get('tflops', float('nan')):7.1f} TFLOP/s "
                  f"{rel:>6s} {row.get('error', '')}", flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "probe_attention.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
