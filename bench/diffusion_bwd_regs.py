"""The diffusion layer's derived backward beside its hand-written one, compiled for sm_90 on a
machine without a GPU (issue 15): registers, spill stack and SASS instructions per kernel.

    PYTHONPATH=src python3 bench/diffusion_bwd_regs.py [--V 2000 6000 20000] [--K 128] [--C 128] [--check] [--out DIR]

The derived backward is the layer's "auto" backend's (``dt.grad`` for x and times, the spectral
output saved: :func:`diffusion_sm90.backward_algorithms`), the hand-written one
:data:`~dtriton.examples.diffusionnet.layer.spatial_diffusion_backward`; each is planned as a CUDA
call at (V, K, C) fp32 under the heuristic and every kernel compiled by Triton's own ptxas
(bench/sm90.py). Kernels pair up by position (the derived ``d_mul``, ``out0``, ``out1`` beside the
hand-written ``sum0``, ``out0``, ``out1``). A table row per (V, kernel): both kernels' registers,
stack (above 0: spills) and SASS count. ``--check``: exit 1 when a derived kernel takes more
registers, stack or SASS instructions than its hand-written partner. ``--out``: also writes the
table to ``<out>/diffusion_bwd_regs.md``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from diffusion_sm90 import backward_algorithms, report  # noqa: E402


def figures(line: str) -> tuple[str, int, int, int]:
    """(kernel name, registers, stack, SASS count) of one :func:`diffusion_sm90.report` line."""
    m = re.match(r"\s*(\w+): regs (\d+) stack (\d+) sass (\d+)", line)
    if m is None:
        raise ValueError(f"no figures in report line {line!r}")
    return m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--V", type=int, nargs="+", default=[2000, 6000, 20000])
    ap.add_argument("--K", type=int, default=128)
    ap.add_argument("--C", type=int, default=128)
    ap.add_argument("--check", action="store_true", help="exit 1 when a derived kernel is worse than its partner")
    ap.add_argument("--out", default=None, help="also write the table to <out>/diffusion_bwd_regs.md")
    a = ap.parse_args(argv)
    algs = backward_algorithms()
    derived, manual = algs["derived backward"], algs["manual backward"]
    worse = []
    table = ["| V | derived kernel | regs | stack | SASS | hand-written kernel | regs | stack | SASS |",
             "|---:|---|---:|---:|---:|---|---:|---:|---:|"]
    print("\n".join(table))
    for V in a.V:
        sizes = {"V": V, "K": a.K, "C": a.C}
        rows_d = [figures(x) for x in report(None, sizes, alg=derived)]
        rows_m = [figures(x) for x in report(None, sizes, alg=manual)]
        for d, m in zip(rows_d, rows_m):
            table.append(f"| {V} | {d[0]} | {d[1]} | {d[2]} | {d[3]} | {m[0]} | {m[1]} | {m[2]} | {m[3]} |")
            print(table[-1], flush=True)
            if any(x > y for x, y in zip(d[1:], m[1:])):
                worse.append(f"V={V} {d[0]} {d[1:]} vs {m[0]} {m[1:]}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "diffusion_bwd_regs.md"), "w") as f:
            f.write("\n".join(table) + "\n")
    if worse:
        print("derived kernels above their hand-written partners (regs, stack, SASS):\n  " + "\n  ".join(worse))
    return 1 if a.check and worse else 0


if __name__ == "__main__":
    sys.exit(main())
