"""What torch.compile runs for bench/reductions.py's norms (issue 16): the Triton source inductor
generates and each of its kernels' device time, beside dtriton's default kernels' times.

    PYTHONPATH=src python3 bench/inductor_dump.py [--cases batchnorm,frobenius] [--dtypes float32,float16]
                                                  [--out DIR] [--dry-run]

Per case and dtype (the shapes of bench/reductions.py): torch.compile of the eager function is run once
through ``torch._inductor.utils.run_and_get_code``; its generated source goes to
``<out>/inductor_<dtype>.txt`` (one file per dtype, the cases one after another), and the per-kernel
device times (torch.profiler, 5 calls) of inductor's and dtriton's default kernels are printed in a table
last. ``--dry-run``: tiny shapes on the CPU (inductor's C++ code; checks the script).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from reductions import NORMS, kernel_times  # noqa: E402


def dump_case(name: str, dtype: torch.dtype, dry: bool, dev: str) -> tuple[str, list[str]]:
    """(the generated source, table rows) of one norm case."""
    from torch._inductor.utils import run_and_get_code
    alg, shape, _check, dry_shape, eager, make, _bytes = NORMS[name]
    x = torch.randn(dry_shape if dry else shape, device=dev, dtype=dtype)
    args = make(x)
    eager_args = (x,) + tuple(a for a in args[1:])
    compiled = torch.compile(eager)
    _out, codes = run_and_get_code(compiled, *eager_args)
    rows = []
    if dev == "cuda":
        rows.append(f"{name:14s} {str(dtype)[6:]:8s} torch.compile  {kernel_times(lambda: compiled(*eager_args), 5)}")
        fn = dt.compile(alg)
        rows.append(f"{name:14s} {str(dtype)[6:]:8s} dtriton        {kernel_times(lambda: fn(*args), 5)}")
    return "\n\n".join(codes), rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="batchnorm,layernorm_chw,frobenius,instancenorm")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "inductor"))
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run or not torch.cuda.is_available() else "cuda"
    os.makedirs(a.out, exist_ok=True)
    table = []
    for dname in a.dtypes.split(","):
        dtype = getattr(torch, dname)
        texts = []
        for name in a.cases.split(","):
            try:
                src, rows = dump_case(name, dtype, a.dry_run, dev)
                texts.append(f"######## {name} {dname}\n{src}")
                table += rows
            except Exception as e:  # noqa: BLE001 - one case's failure is reported, the others run
                table.append(f"{name:14s} {dname:8s} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            torch._dynamo.reset()
        with open(os.path.join(a.out, f"inductor_{dname}.txt"), "w") as f:
            f.write("\n\n".join(texts))
    print("\ncase           dtype    impl           kernels (us per call, longest first)")
    for r in table:
        print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
