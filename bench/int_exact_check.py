"""Exact integer reductions, gather range errors and acc_dtype="float64" on the GPU (issue 17).

    PYTHONPATH=src python3 bench/int_exact_check.py [--dry-run]

Runs on CUDA (``--dry-run``: CPU tensors on Triton's interpreter, the same cases) every path an
integer reduction folds through in int64: whole and loop strategies, split partials, int64
atomics, a whole-tensor split read back as one block, an integer sum beside fp32 values, an
integer sum read by a later stage and an integer matmul; values near 2**53 and +-2**62, compared
bit for bit with torch's own int64 reductions (which a float64 fold cannot match). Then an
out-of-range gather under ``check_indices=True`` (expects ``dt.IndexRangeError``) and an fp32 row
sum with ``acc_dtype="float64"`` whose float32 accumulation loses every small term.

Prints one line per case (``ok`` or ``FAIL``) and ``INT-EXACT PASS n/n`` or
``INT-EXACT FAIL k/n``; exits 1 on a failure.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton.library import cross_entropy  # noqa: E402
from int_cases import BIG, big_ints, centred, imm, masked_count, rowmax, rowmin, rowsum, schedules, total  # noqa: E402

S = schedules(16)
WHOLE, LOOP, PARTIALS, ATOMIC = S["whole"], S["loop"], S["partials"], S["atomic"]


def cases(dev: str, m: int, n: int):
    """(name, thunk returning (got, want)) for every case on device ``dev``, rows ``m`` x ``n``."""
    g = torch.Generator().manual_seed(0)

    def big(base):
        return big_ints(m, n, int(torch.randint(0, 2**31, (1,), generator=g)), base).to(dev)

    out = []
    for base in BIG:
        X = big(base)
        for name, sched in (("whole", WHOLE), ("loop", LOOP), ("partials", PARTIALS), ("atomic", ATOMIC)):
            out.append((f"sum {name} near {base:.3g}", lambda X=X, s=sched: (dt.compile(rowsum, s)(X), X.sum(1))))
        for name, sched in (("whole", WHOLE), ("loop", LOOP)):
            out.append((f"max {name} near {base:.3g}", lambda X=X, s=sched: (dt.compile(rowmax, s)(X), X.amax(1))))
            out.append((f"min {name} near {base:.3g}", lambda X=X, s=sched: (dt.compile(rowmin, s)(X), X.amin(1))))
    T = big(2**55)
    out.append(("whole-tensor sum, 19 partials", lambda: (
        dt.compile(total, dt.Schedule(tile={"i": 1, "j": 1}, split={"j": 19}, split_mode="partials"))(T), T.sum())))
    out.append(("whole-tensor sum, default", lambda: (dt.compile(total)(T), T.sum())))
    F = torch.randn(m, n, generator=g).to(dev)
    C = big(2**40)
    for name, sched in (("loop", LOOP), ("atomic", ATOMIC)):
        out.append((f"int sum beside fp32 ({name})", lambda s=sched: (dt.compile(masked_count, s)(F, C),
                                                                      torch.where(F > 0, C, 0).sum(1))))
    out.append(("int sum read by a later stage", lambda: (dt.compile(centred)(C), C.sum(1, keepdim=True) - C)))
    A = torch.randint(-2**27, 2**27, (m, 40), generator=g).to(dev)
    B = torch.randint(-2**27, 2**27, (40, 24), generator=g).to(dev)
    out.append(("int64 matmul past 2**53", lambda: (dt.compile(imm)(A, B), (A.cpu() @ B.cpu()).to(dev))))
    row = torch.cat([torch.tensor([1e8, 1.0, -1e8, 1.0]).repeat(n // 4), torch.ones(1)])
    Fc = row.repeat(m, 1).to(dev)
    for name, sched in (("whole", WHOLE), ("loop", LOOP), ("atomic", ATOMIC)):
        out.append((f"acc_dtype float64 ({name})", lambda s=sched: (
            dt.compile(rowsum, s.replace(acc_dtype="float64"))(Fc), Fc.double().sum(1).float())))
    return out


def gather_check(dev: str) -> str | None:
    """None when an out-of-range label raises dt.IndexRangeError under check_indices=True."""
    X = torch.randn(5, 10, device=dev)
    labels = torch.tensor([0, 1, 10, 3, 4], device=dev)
    try:
        dt.compile(cross_entropy, check_indices=True)(X, labels)
    except dt.IndexRangeError as e:
        return None if "labels[i] is 10 at i = 2" in str(e) else f"message: {e}"
    except Exception as e:  # noqa: BLE001 - reported as the failure
        return f"{type(e).__name__}: {e}"
    return "no error"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU tensors on Triton's interpreter, small rows")
    a = ap.parse_args()
    dev = "cpu" if a.dry_run or not torch.cuda.is_available() else "cuda"
    m, n = (3, 37) if dev == "cpu" else (67, 4099)
    fails = total_n = 0
    for name, thunk in cases(dev, m, n):
        total_n += 1
        try:
            got, want = thunk()
            ok = got.dtype == want.dtype and torch.equal(got.cpu(), want.cpu())
            why = "" if ok else f"dtype {got.dtype} vs {want.dtype}, max |diff| " \
                f"{(got.cpu().double() - want.cpu().double()).abs().max().item():.3g}"
        except Exception as e:  # noqa: BLE001 - every case is reported
            ok, why = False, f"{type(e).__name__}: {str(e)[:200]}"
        fails += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name} {why}", flush=True)
    total_n += 1
    err = gather_check(dev)
    fails += err is not None
    print(f"{'ok  ' if err is None else 'FAIL'} gather out of range -> IndexRangeError {err or ''}")
    print(f"INT-EXACT {'PASS' if not fails else 'FAIL'} {total_n - fails}/{total_n} on {dev}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
