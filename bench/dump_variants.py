"""Generated sources of the library cases under many knob variants, for both backends, plus the
ScheduleWarnings each compile raises: a wider before/after check than ``dump_sources.py`` for a
refactoring of lowering, planning or printing.

    PYTHONPATH=src python3 bench/dump_variants.py --out DIR

Runs on the CPU (nothing is launched): for every case of ``dump_sources.cases`` (interpreter-sized
shapes) and every variant (heuristic, access pointer/block_ptr/tma, warp specialisation, precision,
eviction hints, persistent, float64 accumulation) it writes the GPU source (``__g``) and the
interpreter source (``__i``) of the complete schedule; ``index.json`` maps each file to the
warnings (or the error text). Compare two folders with ``diff -r``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dump_sources import cases  # noqa: E402
from dtriton.ir import ScalarParam  # noqa: E402

S = dt.Schedule
VARIANTS = {
    "heur": [None], "tma": [S(access="tma")], "bptr": [S(access="block_ptr")], "ptr": [S(access="pointer")],
    "tma_ws": [S(access="tma", warp_specialize=True)], "ws": [S(warp_specialize=True)], "tf32": [S(precision="tf32")],
    "evict": None, "persist": [S(persistent=2)], "f64acc": [S(acc_dtype="float64")],
}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    index = {}
    for name, alg, args in cases("cpu", True):
        first = [p.name for p in alg.params if not isinstance(p, ScalarParam)][0]
        for vname, scheds in VARIANTS.items():
            if scheds is None:
                scheds = [S(eviction={first: "evict_first"}), S(access="tma", eviction={first: "evict_last"})]
            for interp in (True, False):
                for si, sc in enumerate(scheds):
                    key = f"{name}__{vname}{si}__{'i' if interp else 'g'}"
                    try:
                        with warnings.catch_warnings(record=True) as w:
                            warnings.simplefilter("always")
                            k = dt.compile(alg, sc)
                            b = alg.bind(args)
                            full = k._auto_access(k.complete(b), b, args)
                            src = k._plan(full, b, args, interp).source
                        index[key] = {"warn": sorted(str(x.message) for x in w if issubclass(x.category, dt.ScheduleWarning))}
                        with open(os.path.join(a.out, key + ".py"), "w") as f:
                            f.write(src)
                    except Exception as e:  # recorded, not fatal
                        index[key] = f"ERROR {type(e).__name__}: {e}"
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
    print(f"{len(index)} sources, {sum(isinstance(v, str) for v in index.values())} errors")


if __name__ == "__main__":
    main()
