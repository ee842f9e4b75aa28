"""Candidate isolation on the GPU: one candidate of an exploration faults, the exploration finishes.

    PYTHONPATH=src python3 bench/fault_check.py [--mode wild|hang|abort] [--budget 60] [--out DIR] [--dry-run]

Explores a 1024^3 fp16 matmul over three tilings (``tile i`` in 32, 64, 128, exhaustively) with a
kernel factory whose ``tile i == 32`` candidate misbehaves before running:

- ``wild``: launches a hand-written Triton kernel that stores through a wild pointer (an illegal
  memory access: the CUDA context of the process is lost);
- ``hang``: launches a Triton kernel that spins for about 10^12 iterations (``compile_timeout`` 20 s);
- ``abort``: calls ``os.abort()`` (the CPU stand-in used by ``--dry-run``, with 64x64 inputs on
  the interpreter).

The dry run starts its workers with ``spawn``, as on a GPU (``--fork`` for the CPU's default), so
the GPU's path (the kernel factory below, defined in this ``__main__`` script, imported again by each
worker) is checked on the CPU too.

Expected: the exploration returns; its candidates ran in worker processes (``res.isolated``; the
summary's "isolation:" line); the faulting candidate is "failed" (``wild``: a CUDA error and "the
CUDA context was lost"; ``abort``: ``WorkerDied ... SIGABRT``) or "timeout" (``hang``); the other
candidates are "ok" and one of them is the best; this process still computes. Prints the summary,
the warnings, and one line ``FAULT-CHECK PASS`` or ``FAULT-CHECK FAIL: <why>``; writes
``fault_check.json`` under ``--out``. Exits 1 on a failure.
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
    ap.add_argument("--fork", action="store_true", help="dry run: fork the workers (the CPU's default), not spawn")
    a = ap.parse_args(argv)
    mode = a.mode or ("abort" if a.dry_run else "wild")
    os.environ["DTRITON_FAULT_MODE"] = mode
    os.environ["DTRITON_WORKER_START"] = "fork" if a.fork else "spawn"   # the GPU always spawns
    global MODE
    MODE = mode
    dev, dtype, n = ("cpu", torch.float32, 64) if a.dry_run else ("cuda", torch.float16, 1024)
    A = torch.randn(n, n, device=dev, dtype=dtype)
    B = torch.randn(n, n, device=dev, dtype=dtype)
    space = dt.Space(tile={"i": [32, 64, 128]})
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:   # shown below, not hidden: a fallback to
        warnings.simplefilter("always")                     # in-process running is a failure here
        res = dt.explore(matmul, (A, B), space=space, strategy="exhaustive", budget=a.budget, store=False,
                         progress=False, compile_timeout=20.0, _candidate_factory=FaultyKernel)
    wall = time.perf_counter() - t
    print(res.summary())
    for w in caught:
        print(f"warning: {w.category.__name__}: {w.message}")
    why = _verdict(res, mode)
    # the process that ran explore is healthy: a fresh call works
    try:
        C = dt.compile(matmul, res.best)(A, B) if res.best is not None else None
        healthy = C is not None and torch.allclose(C.float(), (A.float() @ B.float()), rtol=2e-2, atol=2e-1)
    except Exception as e:  # noqa: BLE001 - reported as the failure it is
        healthy = False
        why.append(f"this process cannot compute any more ({type(e).__name__}: {str(e).splitlines()[0]})")
    if not healthy and not any("this process" in w for w in why):
        why.append("this process computes a wrong matmul after the exploration")
    bad = _faulting(res)
    print(f"mode {mode}: wall {wall:.1f} s, isolation: {res.isolation}; faulting candidate: "
          f"{(bad[0]['status'] + ' / ' + bad[0]['reason']) if bad else 'not run'}; "
          f"best {res.best_row and res.best_row['id']}; this process still computes correctly: {healthy}")
    print("FAULT-CHECK " + ("PASS" if not why else "FAIL: " + "; ".join(why)), flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "fault_check.json"), "w") as f:
            json.dump(dict(mode=mode, wall_s=wall, passed=not why, why=why, result=json.loads(res.to_json())), f,
                      indent=1)
    return 1 if why else 0


def _faulting(res) -> list[dict]:
    """The rows of the faulting (``tile i == 32``) candidate."""
    return [r for r in res.table if r["schedule"] is not None and r["schedule"].tile.get("i") == 32
            and r["origin"] != "heuristic"]


def _verdict(res, mode: str) -> list[str]:
    """Why the check fails (empty when it passes, this process's health aside)."""
    why = []
    if not res.isolated:
        why.append(f"candidates were NOT isolated in worker processes ({res.isolation})")
    bad = _faulting(res)
    want = "timeout" if mode == "hang" else "failed"
    if not bad:
        why.append("the faulting candidate did not run")
    elif bad[0]["status"] != want:
        why.append(f"the faulting candidate is {bad[0]['status']!r}, expected {want!r}")
    elif mode == "wild" and "CUDA context was lost" not in (bad[0]["reason"] or ""):
        why.append("the faulting candidate's reason does not say its worker's CUDA context was lost")
    if res.best is None or res.best.tile.get("i") == 32:
        why.append("no other candidate was chosen as the best")
    return why


if __name__ == "__main__":
    sys.exit(main())
