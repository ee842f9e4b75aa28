"""Run one norm of bench/reductions.py a few times at its bench shape: a target for ``ncu``.

    PYTHONPATH=src python3 bench/norm_once.py ln [--dtype float16] [--schedule JSON] [--reps 2] [--dry-run]
    ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section Occupancy \\
        --section MemoryWorkloadAnalysis -k regex:mean0_mean1 --launch-skip 1 --launch-count 1 \\
        python3 bench/norm_once.py ln

Cases: ``bn`` (batch norm 64x64x512x512 with weight and bias), ``in`` (instance norm), ``gn`` (group norm,
8 groups), ``ln`` (layer norm over (C, H, W)), ``fro`` (Frobenius normalisation), each 16x64x256x256.
``--schedule`` merges JSON fields into the default schedule (as bench/reductions.py's ``--variants``). The
first call compiles; the kernels of the later calls are the ones to profile (``--launch-skip``).
``--dry-run``: tiny shapes on the CPU interpreter (checks the script).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from reductions import NORMS, merged  # noqa: E402

CASES = {"bn": "batchnorm", "in": "instancenorm", "gn": "groupnorm8", "ln": "layernorm_chw", "fro": "frobenius"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--schedule", default="", help="JSON fields merged into the default schedule")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    alg, shape, _, dshape, _, make, _ = NORMS[CASES[a.case]]
    dev = "cpu" if a.dry_run else "cuda"
    x = torch.randn(dshape if a.dry_run else shape, device=dev, dtype=getattr(torch, a.dtype))
    args = make(x)
    sched = dt.compile(alg).schedule_for(*args)
    if a.schedule:
        import json
        sched = merged(sched, json.loads(a.schedule))
    k = dt.compile(alg, sched)
    for _ in range(a.reps):
        k(*args)
    if not a.dry_run:
        torch.cuda.synchronize()
    print(f"ok {a.case} {tuple(x.shape)} {a.dtype}: {sched.to_json()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
