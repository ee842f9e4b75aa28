"""Generated Triton source of every library algorithm under its heuristic schedule, one file per case.

    PYTHONPATH=src python3 bench/dump_sources.py --out DIR [--dry-run]

Used to check that a refactoring leaves generated kernels unchanged: run it before and after (on the
GPU for GPU sources, or with --dry-run for the interpreter's sources on the CPU) and compare the two
folders (``diff -r``). Each case is compiled with ``dt.compile(alg)`` (heuristic schedule) and its
source taken with ``kernel.source_for(*args)``; nothing is launched. Writes ``<case>.py`` files and
``index.json`` (case -> schedule JSON, or the error text).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton.library import (add_one, attention, causal_attention, column_sum, cross_entropy, layer_norm,  # noqa: E402
                             linear_relu, log_softmax, matmul, rms_norm, softmax, spatial_diffusion)


def cases(dev: str, small: bool):
    """(name, algorithm, args) for each case; ``small`` keeps interpreter-sized shapes."""
    s = (lambda big, little: little) if small else (lambda big, little: big)
    for dt_ in (torch.float16, torch.bfloat16, torch.float32):
        t = str(dt_).replace("torch.", "")
        for m, n, k in ((s(1024, 64), s(1024, 48), s(1024, 32)), (s(4096, 33), s(4096, 17), s(11008, 40)),
                        (s(16, 1), s(4096, 64), s(4096, 64)), (s(1000, 30), s(1000, 30), s(1000, 30))):
            yield f"matmul_{t}_{m}x{n}x{k}", matmul, (torch.randn(m, k, dtype=dt_, device=dev),
                                                      torch.randn(k, n, dtype=dt_, device=dev))
        m, n, k = s(1024, 40), s(4096, 24), s(4096, 32)
        yield f"linear_relu_{t}", linear_relu, (torch.randn(m, k, dtype=dt_, device=dev),
                                                torch.randn(n, k, dtype=dt_, device=dev),
                                                torch.randn(n, dtype=dt_, device=dev))
        for m, n in ((s(4096, 8), s(1024, 100)), (s(4096, 4), s(32768, 1000)), (s(32768, 3), s(1000, 37))):
            x = torch.randn(m, n, dtype=dt_, device=dev)
            w, b = torch.randn(n, dtype=dt_, device=dev), torch.randn(n, dtype=dt_, device=dev)
            yield f"softmax_{t}_{m}x{n}", softmax, (x,)
            yield f"log_softmax_{t}_{m}x{n}", log_softmax, (x,)
            yield f"layer_norm_{t}_{m}x{n}", layer_norm, (x, w, b)
            yield f"rms_norm_{t}_{m}x{n}", rms_norm, (x, w)
            yield f"column_sum_{t}_{m}x{n}", column_sum, (x,)
            yield f"cross_entropy_{t}_{m}x{n}", cross_entropy, (x, torch.randint(0, n, (m,), device=dev))
        b_, h, sq, d = (4, 32, s(4096, 40), s(128, 16))
        q = torch.randn(b_ if not small else 1, h if not small else 2, sq, d, dtype=dt_, device=dev)
        yield f"attention_{t}", attention, (q, q.clone(), q.clone(), 0.125)
        yield f"causal_attention_{t}", causal_attention, (q, q.clone(), q.clone(), 0.125)
    for v, c in ((s(6000, 50), s(64, 8)), (s(100000, 70), s(256, 16))):
        kk = s(128, 16)
        yield (f"spatial_diffusion_float32_V{v}_C{c}", spatial_diffusion,
               (torch.randn(v, c, device=dev), torch.randn(v, kk, device=dev), torch.rand(v, device=dev) + 0.5,
                torch.rand(kk, device=dev), torch.rand(c, device=dev)))
    yield "add_one_float32", add_one, (torch.randn(s(1000, 100), device=dev),)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, small shapes")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run or not torch.cuda.is_available() else "cuda"
    os.makedirs(a.out, exist_ok=True)
    index = {}
    torch.manual_seed(0)
    for name, alg, args in cases(dev, dev == "cpu"):
        try:
            k = dt.compile(alg)
            src = k.source_for(*args)
            index[name] = k.schedule_for(*args).to_json()
            with open(os.path.join(a.out, name + ".py"), "w") as f:
                f.write(src)
        except Exception as e:  # a case that fails to compile is recorded, not fatal
            index[name] = f"ERROR {type(e).__name__}: {e}"
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
    bad = [n for n, v in index.items() if v.startswith("ERROR")]
    print(f"{len(index)} cases, {len(bad)} errors: {bad}")


if __name__ == "__main__":
    main()
