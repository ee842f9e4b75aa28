"""Issue 19: index arithmetic, padding, guarded reads and index errors on the GPU (triton 3.6).

    PYTHONPATH=src python3 bench/index_check.py [--out DIR]   # on the H200
    PYTHONPATH=src python3 bench/index_check.py --dry-run     # here, interpreter, tiny shapes

Each case compiles an algorithm with computed indices under the default schedule, runs it and
compares it with plain torch in float64: a padded shift (fp32 and fp16), rotate-half through
guarded reads, a padded strided and dilated conv1d (output length an int argument),
a 3x3 stride-2 max pool 2-d, grouped rows (``i // g``), ``//`` and ``%`` of
negative values, ``X[i + 1]`` past 2**24 elements (exact only in integer arithmetic), and a gather
guarded by a condition on its labels. Error cases: the unpadded shift ``X[i, j + 1]`` must raise
``dt.IndexRangeError`` before launching, and a gather label out of range must raise it with
``check_indices=True``. One line per case (``PASS``/``FAIL``, relative error; on the GPU the
kernel's median time, torch's on the same inputs and dtype, and the bytes of inputs and output per
second: the max pool's is its bandwidth); ``--out DIR``
writes ``index_check.json``. Exit status 1 when a case fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import dtriton as dt  # noqa: E402


@dt.algorithm
def shift(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X.pad(0.0)[i, j + 1] - X[i, j])[i, j]


@dt.algorithm
def shift_unpadded(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X[i, j + 1] - X[i, j])[i, j]


@dt.algorithm
def rotate_half(X: dt.Tensor["M", "D"], half: int):
    i, d = dt.axes("i d:D")
    return dt.where(d < half, -X[i, d + half], X[i, d - half])[i, d]


@dt.algorithm
def conv1d(X: dt.Tensor["B", "C", "H"], W: dt.Tensor["O", "C", "R"], s: int, d: int, p: int, Ho: int):
    n, o, c, h, r = dt.axes("n o c h:Ho r")
    return dt.sum(X.pad(0.0)[n, c, h * s + r * d - p] * W[o, c, r], over=(c, r))[n, o, h]


@dt.algorithm
def maxpool2d(X: dt.Tensor["B", "H", "W"], K: int, s: int, p: int, Ho: int, Wo: int):
    n, h, w, r, q = dt.axes("n h:Ho w:Wo r:K q:K")
    return dt.max(X.pad(float("-inf"))[n, h * s + r - p, w * s + q - p], over=(r, q))[n, h, w]


@dt.algorithm
def grouped(X: dt.Tensor["M", "N"], Y: dt.Tensor["G", "N"], g: int):
    i, j = dt.axes("i j")
    return (X[i, j] * Y[i // g, j])[i, j]


@dt.algorithm
def floor_ops(X: dt.Tensor["M", "N"], a: int, b: int):
    i, j = dt.axes("i j")
    return (X[i, j] + (i - a) // b + (j - a) % b)[i, j]


@dt.algorithm
def next_elem(X: dt.Tensor["L"]):
    i, = dt.axes("i:L")
    return X.pad(-1.0)[i + 1][i]


@dt.algorithm
def guarded_gather(X: dt.Tensor["M", "N"], L: dt.Tensor["M"]):
    i, j = dt.axes("i j")
    return dt.where(L[i] >= 0, X[i, L[i]], 0.0)[i]


def cases(dev: str, small: bool):
    """(name, algorithm, args, float64 torch oracle of the args)."""
    M, N = (5, 9) if small else (1000, 4097)
    g = torch.Generator().manual_seed(0)

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype).to(dev)
    ii = lambda n: torch.arange(n, device=dev)  # noqa: E731
    L = 2**24 + 64 if not small else 40
    labels = torch.randint(-2, N, (M,), generator=g).to(dev)
    B, C, H = (2, 3, 11) if small else (8, 64, 4096)
    yield "shift fp32", shift, [rnd(M, N)], lambda X: F.pad(X, (0, 1))[:, 1:] - X
    yield "shift fp16", shift, [rnd(M, N, dtype=torch.float16)], lambda X: F.pad(X, (0, 1))[:, 1:] - X
    D = 8 if small else 128
    yield "rotate_half fp16", rotate_half, [rnd(M, D, dtype=torch.float16), D // 2], \
        lambda X, h: torch.cat([-X[:, h:], X[:, :h]], 1)
    for s, d, p in ((1, 1, 1), (2, 2, 3)):
        ho = (H + 2 * p - d * 2 - 1) // s + 1
        yield f"conv1d s{s} d{d} p{p}", conv1d, [rnd(B, C, H), rnd(16 if not small else 2, C, 3), s, d, p, ho], \
            lambda X, W, s, d, p, ho: F.conv1d(X, W, stride=s, padding=p, dilation=d)
    P = 9 if small else 224
    yield "maxpool2d 3x3 s2 p1 fp16", maxpool2d, [rnd(4 if small else 256, P, P, dtype=torch.float16), 3, 2, 1, (P - 1) // 2 + 1,
                                                  (P - 1) // 2 + 1], \
        lambda X, k, s, p, ho, wo: F.max_pool2d(X[:, None], k, stride=s, padding=p)[:, 0]
    yield "grouped i // 4", grouped, [rnd(M, N), rnd(-(-M // 4), N), 4], lambda X, Y, q: X * Y[ii(M) // q]
    yield "floor ops a=3 b=-4", floor_ops, [rnd(M, N), 3, -4], lambda X, a, b: (
        X + torch.div(ii(M)[:, None] - a, b, rounding_mode="floor") + torch.remainder(ii(N)[None, :] - a, b))
    yield f"X[i + 1] over {L} elements", next_elem, [rnd(L)], lambda X: F.pad(X, (0, 1), value=-1.0)[1:]
    yield "guarded gather", guarded_gather, [rnd(M, N), labels], lambda X, L: torch.where(
        L >= 0, X[ii(M), L.clamp(min=0)], torch.zeros((), dtype=X.dtype, device=X.device))


def rel(out, ref) -> float:
    o, r = out.double(), ref.double()
    return float((o - r).norm() / max(float(r.norm()), 1e-30))


def timed(fn) -> float:
    """Median microseconds of ``fn()`` on the GPU (triton.testing.do_bench)."""
    from triton.testing import do_bench
    return 1e3 * do_bench(fn, warmup=25, rep=100, return_mode="median")


def run_case(name, alg, args, oracle) -> dict:
    """Compile under the default schedule, run, compare with the float64 oracle; on the GPU also
    the kernel's time, torch's on the same inputs, and the bytes moved per microsecond."""
    tol = 3e-3 if any(isinstance(a, torch.Tensor) and a.dtype == torch.float16 for a in args) else 1e-5
    try:
        k = dt.compile(alg)
        out = k(*args)
        ref = oracle(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
        err = rel(out, ref)
        row = {"case": name, "status": "PASS" if err <= tol else "FAIL", "rel_err": err}
        if out.is_cuda:
            row["us"], row["torch_us"] = timed(lambda: k(*args)), timed(lambda: oracle(*args))
            moved = out.numel() * out.element_size() + sum(a.numel() * a.element_size() for a in args
                                                          if isinstance(a, torch.Tensor))
            row["GB_s"] = moved / row["us"] / 1e3
        return row
    except Exception as e:  # noqa: BLE001 - every failure is reported, the other cases still run
        return {"case": name, "status": "FAIL", "error": f"{type(e).__name__}: {str(e)[:300]}"}


def error_cases(dev: str) -> list[dict]:
    """The errors a user must see: an unpadded shift, an out-of-range label under check_indices."""
    out = []
    X = torch.randn(4, 6, device=dev)
    for name, call in (("unpadded X[i, j + 1] raises", lambda: dt.compile(shift_unpadded)(X)),
                       ("label 6 of 6 raises with check_indices",
                        lambda: dt.compile(guarded_gather, check_indices=True)(X, torch.tensor([0, 6, -1, 2], device=dev)))):
        try:
            call()
            if dev == "cuda":
                torch.cuda.synchronize()
            out.append({"case": name, "status": "FAIL", "error": "no error raised"})
        except dt.IndexRangeError as e:
            out.append({"case": name, "status": "PASS", "message": str(e)[:160]})
        except Exception as e:  # noqa: BLE001
            out.append({"case": name, "status": "FAIL", "error": f"{type(e).__name__}: {str(e)[:300]}"})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="interpreter, tiny shapes")
    ap.add_argument("--out", default=None, help="directory for index_check.json")
    args = ap.parse_args()
    dev = "cpu" if args.dry_run or not torch.cuda.is_available() else "cuda"
    rows = [run_case(*c) for c in cases(dev, args.dry_run)] + error_cases(dev)
    for r in rows:
        detail = f"rel err {r['rel_err']:.2e}" if "rel_err" in r else r.get("error", r.get("message", ""))
        if "us" in r:
            detail += f"  {r['us']:.1f} us (torch {r['torch_us']:.1f} us), {r['GB_s']:.0f} GB/s"
        print(f"{r['status']}  {r['case']:<36} {detail}", flush=True)
    bad = [r for r in rows if r["status"] != "PASS"]
    print(f"{len(rows) - len(bad)}/{len(rows)} passed on {dev}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "index_check.json").write_text(json.dumps({"device": dev, "rows": rows}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
