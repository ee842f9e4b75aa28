"""Candidate isolation on the GPU: one candidate of an exploration faults, the exploration finishes.

    PYTHONPATH=src python3 bench/fault_check.py [--mode wild|hang|abort] [--budget 60] [--out DIR] [--dry-run]

Explores a 1024^3 fp16 matmul over three tilings (``tile i`` in 32, 64, 128, exhaustively) with a
kernel factory whose ``tile i == 32`` candidate misbehaves before running:

- ``wild``: launches a hand-written Triton kernel that stores through a wild pointer (an illegal
  memory access: the CUDA context of the process is lost);
- ``hang``: launches a Triton kernel that spins for about 10^12 iterations (``compile_timeout`` 20 s);
- ``abort``: calls ``os.abort()`` (the CPU stand-in used by ``--dry-run``, with 64x64 inputs on
  the interpreter).

Expected: the exploration returns; the faulting candidate is "failed" (``wild``: a CUDA error and
"the CUDA context was lost"; ``abort``: ``WorkerDied ... SIGABRT``) or "timeout" (``hang``); the
other candidates are "ok" and one of them is the best. Prints the summary and one line
``FAULT-CHECK PASS`` or ``FAULT-CHECK FAIL``; writes ``fault_check.json`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import torch

import dtriton as dt
from dtriton.library import matmul

MODE = os.environ.get("DTRITON_FAULT_MODE", "wild")   # read by spawned workers too (they inherit the environment)


def _wild_store(device) -> None:
    """Store through a pointer 2^40 elements past a small tensor: an illegal memory access."""
    import triton
    import triton.language as tl

    @triton.jit
    def wild(X):
        offs = tl.arange(0, 16).to(tl.int64) + (1 << 40)
        tl.store(X + offs, tl.full([16], 1.0, tl.float32))

    x = torch.zeros(16, device=device)
    wild[(1,)](x)
    torch.cuda.synchronize(device)


def _spin(device) -> None:
    """A kernel that runs for hours (a hung candidate)."""
    import triton
    import triton.language as tl

    @triton.jit
    def spin(X, n):
        acc = tl.load(X)
        for _ in range(n):
            acc = acc * 1.0000001 + 1e-9
        tl.store(X, acc)

    x = torch.zeros(1, device=device)
    spin[(1,)](x, 1 << 40)
    torch.cuda.synchronize(device)


class FaultyKernel(dt.Kernel):
    """A dtriton kernel whose ``tile i == 32`` schedule faults before it runs (see the module docstring)."""

    def __call__(self, *args, out=None):
        if self.schedule is not None and self.schedule.tile.get("i") == 32:
            dev = args[0].device
            if MODE == "abort" or dev.type != "cuda":
                if MODE == "hang":
                    time.sleep(3600)
                os.abort()
            (_spin if MODE == "hang" else _wild_store)(dev)
        return super().__call__(*args, out=out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("wild", "hang", "abort"), default=None)
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, 64x64, os.abort() as the fault")
    a = ap.parse_args(argv)
    mode = a.mode or ("abort" if a.dry_run else "wild")
    os.environ["DTRITON_FAULT_MODE"] = mode
    global MODE
    MODE = mode
    dev, dtype, n = ("cpu", torch.float32, 64) if a.dry_run else ("cuda", torch.float16, 1024)
    A = torch.randn(n, n, device=dev, dtype=dtype)
    B = torch.randn(n, n, device=dev, dtype=dtype)
    space = dt.Space(tile={"i": [32, 64, 128]})
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dt.explore(matmul, (A, B), space=space, strategy="exhaustive", budget=a.budget, store=False,
                         progress=False, compile_timeout=20.0, _candidate_factory=FaultyKernel)
    wall = time.perf_counter() - t
    print(res.summary())
    bad = [r for r in res.table if r["schedule"] is not None and r["schedule"].tile.get("i") == 32
           and r["origin"] != "heuristic"]
    want = "timeout" if mode == "hang" else "failed"
    ok = bool(bad) and bad[0]["status"] == want and res.best is not None and res.best.tile.get("i") != 32
    # the process that ran explore is healthy: a fresh CUDA call works
    C = dt.compile(matmul, res.best)(A, B) if res.best is not None else None
    healthy = C is not None and torch.allclose(C.float(), (A.float() @ B.float()), rtol=2e-2, atol=2e-1)
    print(f"mode {mode}: wall {wall:.1f} s, faulting candidate: "
          f"{(bad[0]['status'] + ' / ' + bad[0]['reason']) if bad else 'not run'}; best {res.best_row and res.best_row['id']}; "
          f"this process still computes correctly: {healthy}")
    print("FAULT-CHECK " + ("PASS" if ok and healthy else "FAIL"), flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "fault_check.json"), "w") as f:
            json.dump(dict(mode=mode, wall_s=wall, passed=ok and healthy, result=json.loads(res.to_json())), f,
                      indent=1)
    return 0 if ok and healthy else 1


if __name__ == "__main__":
    sys.exit(main())
