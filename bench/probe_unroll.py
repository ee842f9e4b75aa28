"""Is a ``tl.range(lo, hi, STEP, loop_unroll_factor=F)`` loop with a run-time trip count that F does not
divide summed right on the GPU? (s16: a split fp16 column sum of 1031x997, 8 slices of 160 rows in steps of
32 rows, ``loop_unroll_factor=4``, was 3.8e-2 off in norm on the H200, in every split mode; 4096x8192, whose
slices are 16 steps, and fp32, unrolled 2 ways, were right.)

    PYTHONPATH=src python3 bench/probe_unroll.py [--dry-run]

Rows: (1) a hand-written kernel, one program per slice ``[lo, hi)`` of a vector of ones, summing it in steps
of ``STEP`` with ``loop_unroll_factor`` F in 1, 2, 3, 4, 8, for slices of 0-9 steps and a partial last step:
the sum against the slice's length (0 for the slices whose end is below their start: a split slice past
the axis's end, before dtriton printed its end at least its start); (2) dtriton's split column sum of 1031x997 fp16 and fp32 under the
s16 schedule with the ``unroll`` knob at 1, 2 and 4 (0: the plan's choice), against float64. Prints
``ok``/``WRONG`` per row (``triton``: a hand-written row summing a range whose end is below its start, which
Triton 3.6 runs when it unrolls: H200 s16 call 6, every factor from 2; shown, not counted) and a count of
dtriton's rows last; exit status 1 when one of dtriton's is wrong. ``--dry-run``: the CPU interpreter (unrolling is ignored there).
"""
from __future__ import annotations

import os
import sys
import warnings

if "--dry-run" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import dtriton as dt  # noqa: E402
from dtriton.library import column_sum  # noqa: E402


@triton.jit
def slice_sum(x, lo_ptr, hi_ptr, out, STEP: tl.constexpr, F: tl.constexpr):
    p = tl.program_id(0)
    lo = tl.load(lo_ptr + p)
    hi = tl.load(hi_ptr + p)
    acc = tl.zeros([STEP], dtype=tl.float32)
    for i0 in tl.range(lo, hi, STEP, loop_unroll_factor=F):
        offs = i0 + tl.arange(0, STEP)
        acc += tl.load(x + offs, mask=offs < hi, other=0.0)
    tl.store(out + p, tl.sum(acc, 0))


def main() -> int:
    dry = "--dry-run" in sys.argv
    dev = "cpu" if dry else "cuda"
    if dry:   # (the interpreter's scalar loads as range bounds: numpy 2's shim, as dtriton's own launches use)
        from dtriton.backends.triton.npcompat import install
        install()
    bad = 0
    rows = 0
    step = 32
    lengths = [n * step for n in range(10)] + [5 * step - 7, 3 * step - 1, 1, 4 * step + 1, -89, -1, -step, -7 * step]
    lo = torch.tensor([1000 * i for i in range(len(lengths))], dtype=torch.int32, device=dev)
    hi = lo + torch.tensor(lengths, dtype=torch.int32, device=dev)
    x = torch.ones(int(hi.max()) + step, device=dev)
    for f in (1, 2, 3, 4, 8):
        out = torch.full((len(lengths),), float("nan"), device=dev)
        slice_sum[(len(lengths),)](x, lo, hi, out, STEP=step, F=f)
        got = out.cpu().tolist()
        wrong = [(n, g) for n, g in zip(lengths, got) if g != max(n, 0)]   # (an empty range when hi < lo)
        print(f"{'triton' if wrong else 'ok    '} hand-written tl.range unroll {f}: "
              + (", ".join(f"length {n} summed {g:g}" for n, g in wrong) if wrong else f"{len(lengths)} slices right"),
              flush=True)
    shape = (37, 20) if dry else (1031, 997)
    for dtype in (torch.float16, torch.float32):
        torch.manual_seed(0)
        xx = (torch.randn(shape, device=dev) + 1.0).to(dtype)
        ref = xx.double().sum(0)
        for unroll in (0, 1, 2, 4):
            for mode in ("finish", "last"):
                s = dt.Schedule(grid=("j",), tile={"j": 64 if not dry else 8, "i": 32 if not dry else 4},
                                strategy={"i": "loop"}, split={"i": 8}, split_mode=mode, unroll=unroll)
                k = dt.compile(column_sum, s)
                out = torch.full(ref.shape, float("nan"), device=dev, dtype=dtype)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    k(xx, out=out)
                err = ((out.double() - ref).norm() / ref.norm()).item()
                ok = err < (3e-3 if dtype == torch.float16 else 1e-5)
                src = k.source_for(xx)
                f = src.split("loop_unroll_factor=")[1].split(")")[0] if "loop_unroll_factor=" in src else "1"
                rows += 1
                bad += not ok
                print(f"{'ok   ' if ok else 'WRONG'} dtriton column sum {'x'.join(map(str, shape))} {str(dtype)[6:]} "
                      f"split 8 {mode} unroll knob {unroll} (printed factor {f}): rel err {err:.2e}", flush=True)
    print(f"{rows} rows, {bad} wrong")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
