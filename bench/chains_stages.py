"""A/B of the materialised GEMM's pipeline depth in the GEMM + row-kernel chains (issue 14).

The 22:59 H200 run had softmax, layer_norm, rms_norm and l2_normalize 8-15% slower than at 20:30 while the
1-kernel chains got faster; between the two runs the GEMM stage of these chains went from 3 to 4 pipeline
stages (the NT wide-tile rule) and its buffer from fp32 to fp16 (plan/buffers.py). This times each chain with
the default schedule and with only the GEMM stage's ``num_stages`` changed (2, 3, 4), checked against float64.

    PYTHONPATH=src python3 bench/chains_stages.py [--cases softmax,layer_norm] [--out DIR] [--dry-run]

Prints one line per (chain, variant) and writes them to ``<out>/chains_stages_h200.md``.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as timing  # noqa: E402  (bench/run.py: graph_time_us, relerr, DRY/DEV switches)
from chain_catalogue import CHAINS, DRY_SHAPE, TORCH, as_float64, make_inputs, shape_of  # noqa: E402

DEFAULT_CASES = "softmax,layer_norm,rms_norm,l2_normalize,logsumexp"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES, help="comma-separated chain names")
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes (timings meaningless)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = ap.parse_args(argv)
    lines: list[str] = []
    if a.dry_run:
        timing.DEV, timing.DRY = "cpu", True
    names = a.cases.split(",")
    for c in [c for c in CHAINS if c.name in names]:
        tkw, args = make_inputs(c, *shape_of(c, DRY_SHAPE if a.dry_run else None), torch.float16, timing.DEV)
        ref = TORCH[c.name](**as_float64(tkw))
        base = dt.compile(c.alg).schedule_for(*args)
        variants = [("default", base)]
        if "sum0" in base.stages:
            for ns in (2, 3, 4):
                ss = base.stage("sum0").replace(num_stages=ns)
                variants.append((f"sum0 num_stages={ns}", base.replace(stages={**base.stages, "sum0": ss})))
        for label, s in variants:
            k = dt.compile(c.alg, s)
            err = timing.relerr(k(*args).reshape(ref.shape), ref)
            us = timing.graph_time_us(lambda: k(*args))
            lines.append(f"{c.name:16s} {label:20s} {us:9.1f} us  err {err:.1e}" + ("  WRONG" if not err < 2e-2 else ""))
            print(lines[-1], flush=True)
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, "chains_stages_h200.md"), "w") as f:
                f.write("# GEMM stage pipeline depth in GEMM + row-kernel chains (fp16)\n\n```\n" + "\n".join(lines)
                        + "\n```\n")


if __name__ == "__main__":
    main()
