"""fp32 operator benchmarks of issue 14 (H200, one device call): precision, operand layouts, matvec, odd shapes.

    PYTHONPATH=src python3 bench/fp32.py [--only precision,layouts,matvec,irregular] [--out bench/results]
    PYTHONPATH=src python3 bench/fp32.py --dry-run          # CPU interpreter, tiny shapes: checks the script

Groups (every row checked against float64 first; kernel time by CUDA-graph replay, ``bench/run.py``'s timer):

- ``precision``: fp32 ``X (1024x8192) @ W.T`` (W 8192x8192 in nn.Linear layout) with dtriton's default
  precision and with every precision of the knob (ieee, tf32, tf32x3, ...), each twice: as
  ``Schedule(precision=p)`` (the heuristic completes it for that precision) and as the default schedule with
  only its precision replaced; against torch fp32 (TF32 off, cuBLAS) and torch with TF32 allowed; relative error
  of each against float64.
- ``layouts``: NN, NT, TN and TT products at 4096^3 in fp32, fp16 and bf16 (operands stored contiguous in the
  named layout); each dtriton row against dtriton's NN row and against torch on the same layout.
- ``matvec``: fp32 ``A (8192x65536) @ x``: bandwidth as a share of a torch device copy of the same bytes,
  measured in the same run.
- ``irregular``: fp32 and fp16 products with prime / off-by-one sizes.

Writes ``<out>/fp32_h200.json`` and ``<out>/fp32_h200.md`` (rewritten after every row, so a run cut short keeps
what it measured).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as timing  # noqa: E402  (bench/run.py: graph_time_us, relerr, DRY/DEV switches)
from dtriton.schedule.knobs import PRECISIONS  # noqa: E402  (every fp32 dot precision the knob allows)

ROWS: list[dict] = []
OUT: list = []   # [out_dir, meta] once main() has them


# ---------------------------------------------------------------------------------------------
# the algorithms: one per operand layout (A is M x K or K x M, B is K x N or N x K, C is M x N)
@dt.algorithm
def mm_nn(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    """C = A @ B."""
    i, j, k = dt.axes("i j k")
    return dt.sum(A[i, k] * B[k, j], over=k)[i, j]


@dt.algorithm
def mm_nt(A: dt.Tensor["M", "K"], B: dt.Tensor["N", "K"]):
    """C = A @ B.T (nn.Linear without bias: B is the weight, out x in)."""
    i, j, k = dt.axes("i j k")
    return dt.sum(A[i, k] * B[j, k], over=k)[i, j]


@dt.algorithm
def mm_tn(A: dt.Tensor["K", "M"], B: dt.Tensor["K", "N"]):
    """C = A.T @ B."""
    i, j, k = dt.axes("i j k")
    return dt.sum(A[k, i] * B[k, j], over=k)[i, j]


@dt.algorithm
def mm_tt(A: dt.Tensor["K", "M"], B: dt.Tensor["N", "K"]):
    """C = A.T @ B.T."""
    i, j, k = dt.axes("i j k")
    return dt.sum(A[k, i] * B[j, k], over=k)[i, j]


@dt.algorithm
def matvec(A: dt.Tensor["M", "K"], x: dt.Tensor["K"]):
    """y = A @ x."""
    i, k = dt.axes("i k")
    return dt.sum(A[i, k] * x[k], over=k)[i]


LAYOUTS = {"NN": (mm_nn, False, False), "NT": (mm_nt, False, True), "TN": (mm_tn, True, False),
           "TT": (mm_tt, True, True)}


def operands(layout: str, M: int, K: int, N: int, dtype: torch.dtype):
    """Contiguous operands stored in ``layout`` and the torch product of the same meaning."""
    _, ta, tb = LAYOUTS[layout]
    A = torch.randn(*((K, M) if ta else (M, K)), device=timing.DEV, dtype=dtype)
    B = torch.randn(*((N, K) if tb else (K, N)), device=timing.DEV, dtype=dtype)

    def torch_fn(a=A, b=B):
        return (a.T if ta else a) @ (b.T if tb else b)
    return A, B, torch_fn


# ---------------------------------------------------------------------------------------------
def S(n: int) -> int:
    """A benchmark size; a dry run shrinks it to at most 48 (odd sizes stay odd)."""
    return n if not timing.DRY or n <= 48 else 48 - n % 2


def reference(fn, *args):
    """``fn`` of the float64 copies of ``args`` (the accuracy reference)."""
    return fn(*(a.double() for a in args))


def measure(group: str, case: str, impl: str, fn, ref, work: float, unit: str, tf32: bool = False,
            schedule: str | None = None, note: str = "", tol: float = 5e-2) -> dict:
    """Check ``fn()`` against ``ref`` (relative Frobenius error), then time it (kernel µs). ``tf32``: torch's
    TF32 switch during the call and the capture. The row is appended to ROWS and the results rewritten."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    row = dict(group=group, case=case, impl=impl, us=float("nan"), rate=float("nan"), unit=unit, err=None,
               schedule=schedule, note=note)
    try:
        row["err"] = timing.relerr(fn(), ref)
        if not row["err"] <= tol:
            row["note"] = f"WRONG (err > {tol}): not timed"
        else:
            row["us"] = timing.graph_time_us(fn)
            row["rate"] = work / row["us"]
    except Exception as e:  # noqa: BLE001 - record the failure, go on with the next row
        row["note"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    ROWS.append(row)
    print(f"  {group:9s} {case:30s} {impl:24s} {row['us']:10.1f} us {row['rate']:9.3f} {unit}"
          + (f"  err {row['err']:.1e}" if row["err"] is not None else "") + (f"  {row['note']}" if row["note"] else ""),
          flush=True)
    write_results()
    return row


def dtriton_row(group, case, impl, alg, args, ref, work, unit, schedule=None, tol=5e-2):
    """Compile ``alg`` under ``schedule`` (unset fields from the heuristic) and measure it; the schedule used is
    recorded. Returns the row."""
    k = dt.compile(alg, schedule)
    try:
        sched = k.schedule_for(*args).to_json()
    except Exception as e:  # noqa: BLE001 - the measurement records the same error
        sched = f"(no schedule: {type(e).__name__})"
    return measure(group, case, impl, lambda: k(*args), ref, work, unit, schedule=sched, tol=tol)


# ---------------------------------------------------------------------------------------------
def run_precision() -> None:
    """fp32 X @ W.T, 1024 x 8192 x 8192: dtriton per precision against torch fp32 and torch TF32."""
    M, K, N = S(1024), S(8192), S(8192)
    X = torch.randn(M, K, device=timing.DEV)
    W = torch.randn(N, K, device=timing.DEV) / math.sqrt(K)
    ref = reference(lambda x, w: x @ w.T, X, W)
    case, work = "fp32 X@W.T 1024x8192x8192", 2 * M * N * K / 1e6
    default = dt.Schedule().precision if hasattr(dt.Schedule(), "precision") else "?"
    dtriton_row("precision", case, f"dtriton default ({default})", mm_nt, (X, W), ref, work, "TFLOP/s")
    # two rows per precision: Schedule(precision=p) (completed by the heuristic around the precision: its tiles,
    # launch options and grouped order for that precision), and the default schedule with only its precision
    # replaced (the default precision's launch options)
    default_sched = dt.compile(mm_nt).schedule_for(X, W)
    for p in PRECISIONS:
        dtriton_row("precision", case, f"dtriton {p}", mm_nt, (X, W), ref, work, "TFLOP/s", dt.Schedule(precision=p))
        dtriton_row("precision", case, f"dtriton {p} (default schedule)", mm_nt, (X, W), ref, work, "TFLOP/s",
                    default_sched.replace(precision=p))
    dtriton_row("precision", case + " (W pre-transposed)", "dtriton default", mm_nn, (X, W.T.contiguous()), ref,
                work, "TFLOP/s")
    measure("precision", case, "torch fp32", lambda: X @ W.T, ref, work, "TFLOP/s", note="allow_tf32=False")
    measure("precision", case, "torch tf32", lambda: X @ W.T, ref, work, "TFLOP/s", tf32=True, note="allow_tf32=True")


def run_layouts() -> None:
    """NN / NT / TN / TT at 4096^3 in fp32, fp16, bf16: dtriton (default schedule) and torch per layout."""
    n = S(4096)   # cases are named by the H200 sizes; a dry run's shrunk shape is in the row's "shape"
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        name = str(dtype).split(".")[1]
        for layout, (alg, _, _) in LAYOUTS.items():
            A, B, torch_fn = operands(layout, n, n, n, dtype)
            ref = reference(torch_fn, A, B)
            case, work = f"{name} {layout} 4096^3", 2 * n ** 3 / 1e6
            dtriton_row("layouts", case, "dtriton", alg, (A, B), ref, work, "TFLOP/s")
            measure("layouts", case, "torch", torch_fn, ref, work, "TFLOP/s",
                    note="allow_tf32=False" if dtype == torch.float32 else "")


def run_matvec() -> None:
    """fp32 A (8192 x 65536) @ x against a device copy of the same bytes (the bandwidth ceiling)."""
    M, K = S(8192), S(65536)
    A = torch.randn(M, K, device=timing.DEV)
    x = torch.randn(K, device=timing.DEV)
    ref = reference(lambda a, v: a @ v, A, x)
    mb = A.numel() * 4 / 1e6
    case = "fp32 matvec 8192x65536"
    dst = torch.empty_like(A)
    measure("matvec", case, "torch copy (ceiling)", lambda: dst.copy_(A), A, 2 * mb, "TB/s",
            note="read + write of A's bytes: the bandwidth ceiling")
    dtriton_row("matvec", case, "dtriton", matvec, (A, x), ref, mb, "TB/s")
    measure("matvec", case, "torch", lambda: A @ x, ref, mb, "TB/s")


IRREGULAR = [(1000, 999, 1001), (4097, 4095, 1023), (33, 8191, 4097), (8193, 513, 2049), (127, 127, 16383)]


def run_irregular() -> None:
    """Products with prime and off-by-one sizes, NN and NT, fp32 (default precision) and fp16."""
    for dtype in (torch.float32, torch.float16):
        name = str(dtype).split(".")[1]
        for shape in IRREGULAR:
            M, K, N = map(S, shape)
            for layout in ("NN", "NT"):
                A, B, torch_fn = operands(layout, M, K, N, dtype)
                ref = reference(torch_fn, A, B)
                case, work = f"{name} {layout} {'x'.join(map(str, shape))}", 2 * M * N * K / 1e6
                dtriton_row("irregular", case, "dtriton", LAYOUTS[layout][0], (A, B), ref, work, "TFLOP/s")
                measure("irregular", case, "torch", torch_fn, ref, work, "TFLOP/s")


# ---------------------------------------------------------------------------------------------
def ratios(rows: list[dict]) -> None:
    """Adds ``vs_torch`` (torch's time / this row's, same group and case; the fp32 torch row for precision) and,
    for layout rows, ``vs_nn`` (dtriton's NN time for the dtype / this row's)."""
    def find(group, case, impl):
        return next((r for r in rows if r["group"] == group and r["case"] == case and r["impl"] == impl), None)
    for r in rows:
        if r["group"] == "matvec":
            copy = find("matvec", r["case"], "torch copy (ceiling)")
            if copy and r is not copy:
                r["pct_copy_bw"] = 100 * r["rate"] / copy["rate"]
            continue
        base_case = r["case"].replace(" (W pre-transposed)", "")
        base = find(r["group"], base_case, "torch fp32" if r["group"] == "precision" else "torch")
        if base and r is not base and r["us"] == r["us"]:
            r["vs_torch"] = base["us"] / r["us"]
        if r["group"] == "precision":
            tf = find("precision", base_case, "torch tf32")
            if tf and r is not tf and r["us"] == r["us"]:
                r["vs_torch_tf32"] = tf["us"] / r["us"]
        if r["group"] == "layouts":
            dtype, _, size = r["case"].split(" ")
            nn = find("layouts", f"{dtype} NN {size}", r["impl"])
            if nn and r["us"] == r["us"]:
                r["vs_nn"] = nn["us"] / r["us"]


def write_results() -> None:
    """``fp32_h200.json`` (meta and rows) and ``fp32_h200.md`` (one table) under the output folder."""
    if not OUT:
        return
    out_dir, meta = OUT
    os.makedirs(out_dir, exist_ok=True)
    ratios(ROWS)
    with open(os.path.join(out_dir, "fp32_h200.json"), "w") as f:
        json.dump({"meta": meta, "rows": ROWS}, f, indent=1, default=str)

    def num(v, f="{:.2f}"):
        return "" if v is None or v != v else f.format(v)
    lines = [f"# fp32 operators (issue 14) — {meta['gpu']}", "",
             f"{meta['date']}; torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}. Kernel time by "
             "CUDA-graph replay; err: relative Frobenius error against float64. vs torch: torch's time / this row's "
             "(precision rows: torch fp32 with TF32 off; vs tf32: torch with TF32 allowed). vs NN: dtriton's NN time "
             "of the dtype / this row's. Matvec: % of the bandwidth of a torch copy of the same bytes.", "",
             "| group | case | impl | µs | rate | vs torch | vs torch tf32 | vs NN | % copy bw | rel err | note / schedule |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in ROWS:
        note = " — ".join(x for x in (r["note"], r["schedule"] or "") if x).replace("|", "/")
        lines.append(f"| {r['group']} | {r['case']} | {r['impl']} | {num(r['us'], '{:.1f}')} | "
                     f"{num(r['rate'], '{:.3g}')} {r['unit']} | {num(r.get('vs_torch'))} | {num(r.get('vs_torch_tf32'))} "
                     f"| {num(r.get('vs_nn'))} | {num(r.get('pct_copy_bw'), '{:.0f}%')} | {num(r['err'], '{:.1e}')} "
                     f"| {note} |")
    with open(os.path.join(out_dir, "fp32_h200.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def git_commit() -> str:
    """The short commit of the checkout (``?`` outside git)."""
    import subprocess
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "?"
    except OSError:
        return "?"


GROUPS = {"precision": run_precision, "layouts": run_layouts, "matvec": run_matvec, "irregular": run_irregular}


def main(argv=None) -> None:
    """Parse the options, run the groups in order (a group's exception is printed, the next group runs)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups: " + ", ".join(GROUPS))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes (timings meaningless)")
    a = ap.parse_args(argv)
    if a.dry_run:
        timing.DEV, timing.DRY = "cpu", True
    torch.manual_seed(0)
    meta = dict(gpu="cpu (dry run: interpreter, tiny shapes)" if timing.DRY else torch.cuda.get_device_name(),
                torch=torch.__version__, triton=__import__("triton").__version__, commit=git_commit(),
                date=datetime.datetime.now().isoformat(timespec="seconds"))
    print(f"# {meta}", flush=True)
    OUT[:] = [a.out, meta]
    for g in a.only.split(","):
        if g not in GROUPS:
            raise SystemExit(f"--only: unknown group {g!r}; the groups are {', '.join(GROUPS)}")
        print(f"== {g}", flush=True)
        try:
            GROUPS[g]()
        except Exception:  # noqa: BLE001 - keep the other groups' rows
            traceback.print_exc()
    write_results()
    print(open(os.path.join(a.out, "fp32_h200.md")).read())


if __name__ == "__main__":
    main()
