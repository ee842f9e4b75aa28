"""Probe: why 16-bit ``A @ B.T`` (NT: B stored (N, K), K contiguous) runs slower than NN at 4096^3.

    PYTHONPATH=src python3 bench/probe_nt.py [--out DIR] [--dry-run]

For fp16 and bf16, NN / NT / TN at 4096^3 (48^3 with --dry-run on the interpreter), times side by side:
cuBLAS (torch ``a @ b``), a hand-written Triton kernel with host TMA descriptors in the tensors' own
layout (``tl.dot(a, b.T)`` for K-major B, the way Triton's Hopper tutorials write it; GPU only), and
dtriton schedules with ``BLOCK_K`` 64 and 128 (a K-major tile row of 64 fp16 elements is one 128-byte
segment; 128 elements give 256-byte segments). Every candidate is checked against float64 first. With
``--out`` the generated dtriton source of the NN and NT 128x256x64 kernels is written there.

``--set wide`` (issue 14, session 4) probes NT only, with the tile's wide side on the rows: 256x128 tiles
(8 warps: two consumer warpgroups of 128 rows each) with ``BLOCK_K`` 64/128 and 3-5 stages, warp-specialised
or not, beside the default 128x256x64; and two hand-written forms: the same 256x128 tiles, and the swapped
product ``C^T = W @ X^T`` (the weight's rows as the wide A side, the activation as B) written back through a
transposed TMA store into C. If one closes the NT gap (211.7 us against NN 182 at 4096^3 fp16), it becomes
the heuristic's NT rule.

``--set persistent`` (issue 14, session 6) times NT and NN with dtriton's persistent kernels (one program per
SM, grouped tile order), whose tile loop the plan flattens with the K loop (``tl.range(..., flatten=True)``, so
the next tile's loads overlap this tile's epilogue; TMA stores of 128+ columns in two halves), beside the
heuristic's default, hand-written persistent Triton kernels (flattened or not, halves, the epilogue's own tile
counter) and torch NT / NN. Expected (written before the run): the exposed epilogue is ~10 us of the 31 us gap
to cuBLAS, so a persistent flattened NT near 200 us (NN ~193 on the same clocks).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import probe_schedules as P  # noqa: E402
import run as R  # noqa: E402


def hand_kernel():
    """A plain grouped TMA matmul in Triton (host descriptors, fp32 accumulator, one tile per program)."""
    import triton
    import triton.language as tl

    @triton.jit
    def mm(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
           A_T: tl.constexpr, B_T: tl.constexpr, C_T: tl.constexpr):
        pid = tl.program_id(0)
        npm = tl.cdiv(M, BM)
        npn = tl.cdiv(N, BN)
        width = 8 * npn
        gid = pid // width
        first = gid * 8
        rows = tl.minimum(npm - first, 8)
        pm = first + (pid % width) % rows
        pn = (pid % width) // rows
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, K, BK):
            if A_T:
                a = a_desc.load([k, pm * BM]).T
            else:
                a = a_desc.load([pm * BM, k])
            if B_T:
                b = b_desc.load([pn * BN, k]).T
            else:
                b = b_desc.load([k, pn * BN])
            acc = tl.dot(a, b, acc)
        if C_T:
            c_desc.store([pn * BN, pm * BM], acc.to(c_desc.dtype).T)
        else:
            c_desc.store([pm * BM, pn * BN], acc.to(c_desc.dtype))
    return mm


def hand_fn(a, b, bm, bn, bk, stages, warps=8, swapped=False):
    """``a @ b`` by :func:`hand_kernel`; ``a``/``b`` may be transposed views (read in storage order).
    ``swapped``: compute ``(b.T @ a.T)`` tiles (b's columns as the kernel's rows) and store each tile
    transposed into the (M, N) result."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    mm = hand_kernel()
    c = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
    if swapped:
        a, b = b.T, a.T
    M, K = a.shape
    N = b.shape[1]
    a_t, b_t = a.stride(0) == 1, b.stride(0) == 1
    ad = TensorDescriptor.from_tensor(a.T if a_t else a, [bk, bm] if a_t else [bm, bk])
    bd = TensorDescriptor.from_tensor(b.T if b_t else b, [bn, bk] if b_t else [bk, bn])
    cd = TensorDescriptor.from_tensor(c, [bn, bm] if swapped else [bm, bn])
    import triton
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)

    def run():
        mm[grid](ad, bd, cd, M, N, K, BM=bm, BN=bn, BK=bk, A_T=a_t, B_T=b_t, C_T=swapped, num_warps=warps,
                 num_stages=stages)
        return c
    return run


def hand_persistent_kernel():
    """A persistent grouped TMA matmul in Triton: ``tl.num_programs(0)`` programs each take every
    ``num_programs``-th output tile; ``FLAT`` flattens the tile loop with the K loop (the loads of the
    next tile overlap this tile's epilogue), ``HALVES`` stores each tile as two halves of its columns,
    ``OWN_EPI`` gives the epilogue its own tile counter (its offsets are not carried from the prologue)."""
    import triton
    import triton.language as tl

    @triton.jit
    def mmp(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
            B_T: tl.constexpr, GROUP: tl.constexpr, FLAT: tl.constexpr, HALVES: tl.constexpr, OWN_EPI: tl.constexpr):
        first = tl.program_id(0)
        step = tl.num_programs(0)
        tiles_m = tl.cdiv(M, BM)
        tiles_n = tl.cdiv(N, BN)
        per_group = GROUP * tiles_n
        epi = first - step
        for t in tl.range(first, tiles_m * tiles_n, step, flatten=FLAT):
            m0 = (t // per_group) * GROUP
            rows = tl.minimum(tiles_m - m0, GROUP)
            pm = m0 + (t % per_group) % rows
            pn = (t % per_group) // rows
            acc = tl.zeros((BM, BN), tl.float32)
            for k in range(0, K, BK):
                a = a_desc.load([pm * BM, k])
                if B_T:
                    b = b_desc.load([pn * BN, k]).T
                else:
                    b = b_desc.load([k, pn * BN])
                acc = tl.dot(a, b, acc)
            if OWN_EPI:
                epi += step
                m0 = (epi // per_group) * GROUP
                rows = tl.minimum(tiles_m - m0, GROUP)
                pm = m0 + (epi % per_group) % rows
                pn = (epi % per_group) // rows
            c = acc.to(c_desc.dtype)
            if HALVES:
                lo, hi = tl.split(tl.permute(tl.reshape(c, (BM, 2, BN // 2)), (0, 2, 1)))
                c_desc.store([pm * BM, pn * BN], lo)
                c_desc.store([pm * BM, pn * BN + BN // 2], hi)
            else:
                c_desc.store([pm * BM, pn * BN], c)
    return mmp


def hand_persistent_fn(a, b, bm, bn, bk, stages, warps=8, flat=True, halves=True, own_epi=True, programs=0):
    """``a @ b`` by :func:`hand_persistent_kernel` (``a`` row-major; ``b`` row-major or a transposed view);
    ``programs``: 0 for one per SM."""
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor
    mm = hand_persistent_kernel()
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    b_t = b.stride(0) == 1
    ad = TensorDescriptor.from_tensor(a, [bm, bk])
    bd = TensorDescriptor.from_tensor(b.T if b_t else b, [bn, bk] if b_t else [bk, bn])
    cd = TensorDescriptor.from_tensor(c, [bm, bn // 2 if halves else bn])
    sms = programs or torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = (min(sms, triton.cdiv(M, bm) * triton.cdiv(N, bn)),)

    def run():
        mm[grid](ad, bd, cd, M, N, K, BM=bm, BN=bn, BK=bk, B_T=b_t, GROUP=8, FLAT=flat, HALVES=halves,
                 OWN_EPI=own_epi, num_warps=warps, num_stages=stages)
        return c
    return run


#: ``--set persistent`` (issue 14, session 6): dtriton's persistent kernels (one program per SM, grouped order),
#: whose tile loop the plan flattens with the K loop (plan/persistent.py): (tile, stages, extra knobs)
PERSISTENT = [((128, 256, 64), 3, {}), ((128, 256, 64), 4, {}), ((128, 256, 64), 3, {"store_pieces": 1}),
              ((128, 128, 64), 4, {}), ((128, 128, 64), 5, {}), ((256, 128, 64), 3, {}), ((256, 128, 64), 4, {})]
#: the hand-written persistent kernels: (tile, stages, flatten, halves, own epilogue counter)
PERSISTENT_HAND = [((128, 256, 64), 3, True, True, True), ((128, 256, 64), 3, True, True, False),
                   ((128, 256, 64), 4, True, True, True), ((128, 256, 64), 3, False, True, True),
                   ((128, 128, 64), 4, True, False, True)]

#: ``--set wide``: (tile i x j x k, stages, access, extra knobs) of the dtriton NT candidates, and the hand
#: kernels (tile, stages, swapped)
WIDE = [((128, 256, 64), 4, "tma", {}), ((256, 128, 64), 3, "tma", {}), ((256, 128, 64), 4, "tma", {}),
        ((256, 128, 64), 5, "tma", {}), ((256, 128, 128), 2, "tma", {}), ((256, 128, 64), 4, "tma",
                                                                          {"warp_specialize": True}),
        ((128, 256, 128), 2, "tma", {})]
# (BLOCK_K 128 fits 2 stages only: 256x128x128 at 3 stages asked 294,936 B of shared memory, H200 call of 01:15)
WIDE_HAND = [((128, 256, 64), 4, False), ((256, 128, 64), 4, False), ((256, 128, 128), 2, False),
             ((128, 256, 64), 4, True), ((256, 128, 64), 4, True)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--only", default="", help="indices of the dtriton configs to run, comma-separated")
    ap.add_argument("--hand", action="store_true", help="also time the hand-written Triton kernel")
    ap.add_argument("--layouts", default="NN,NT,TN", help="comma-separated from NN, NT, TN, TT")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--set", default="", choices=("", "wide", "persistent"),
                    help="wide: the NT probes of WIDE and WIDE_HAND; persistent: PERSISTENT and PERSISTENT_HAND")
    a = ap.parse_args()
    if a.dry_run:
        R.DEV, R.DRY = "cpu", True
    if a.set == "wide":
        return wide(a)
    if a.set == "persistent":
        return persistent(a)
    n = 48 if a.dry_run else 4096
    configs = [((128, 256, 64), 3, "tma", {}), ((128, 256, 64), 4, "tma", {}), ((128, 128, 128), 3, "tma", {}),
               ((128, 128, 128), 3, "pointer", {}), ((128, 128, 128), 3, "tma", {"warp_specialize": True}),
               ((128, 256, 64), 3, "tma", {"warp_specialize": True}), ((128, 128, 64), 5, "tma", {}),
               ((256, 128, 64), 3, "tma", {}), ((128, 256, 64), 4, "tma", {"group": {"i": 16}}),
               ((128, 256, 64), 4, "tma", {"grid": ["j", "i"], "group": {"j": 8}}), ((128, 256, 64), 4, "tma", {"persistent": 1}),
               ((128, 256, 64), 4, "tma", {"group": {"i": 4}})]
    if a.only:
        configs = [c for k, c in enumerate(configs) if str(k) in a.only.split(",")]
    for dtype in [getattr(torch, d) for d in a.dtypes.split(",")]:
        for lay in a.layouts.split(","):
            A = torch.randn(n, n, device=R.DEV, dtype=dtype)
            B = torch.randn(n, n, device=R.DEV, dtype=dtype)
            x = A if lay[0] == "N" else A.T
            y = B if lay[1] == "N" else B.T
            ref = [(x.double() @ y.double()).to(dtype)]
            base = [("torch", lambda x=x, y=y: x @ y)]
            cands = [("dtriton heuristic", None)]
            for (bm, bn, bk), ns, ac, extra in configs:
                if a.dry_run:
                    bm, bn, bk, ac = 16, 16, 16, "pointer"
                ws = "".join(f" {k}={v}" for k, v in extra.items())
                cands.append((f"dtriton {bm}x{bn}x{bk} s{ns} {ac}{ws}",
                              dt.Schedule(tile={"i": bm, "j": bn, "k": bk}, num_stages=ns, num_warps=8, access=ac,
                                          **{"group": {"i": 8}, **extra})))
                if not a.dry_run and ac == "tma" and not ws and a.hand:
                    base.append((f"hand triton {bm}x{bn}x{bk} s{ns}", hand_fn(x, y, bm, bn, bk, ns)))
            print(f"{lay} {str(dtype)[6:]} heuristic schedule:", dt.compile(dt.library.matmul).schedule_for(x, y).to_json(),
                  flush=True)
            if not a.dry_run:
                for name, fn in base[1:]:   # the hand kernel is checked too
                    err = R.relerr(fn(), ref[0])
                    print(f"  check {name}: rel err {err:.1e}" + ("" if err < 1e-2 else "  WRONG"), flush=True)
            P.probe(f"{str(dtype)[6:]} {lay} {n}^3", dt.library.matmul, (x, y), ref, 1e-2, cands, baselines=base)
            if a.out and dtype == torch.float16 and lay in ("NN", "NT"):
                os.makedirs(a.out, exist_ok=True)
                s = cands[-1][1]
                with open(os.path.join(a.out, f"dtriton_{lay}.py"), "w") as f:
                    f.write(dt.compile(dt.library.matmul, s).source_for(x, y))
    P.summary()
    if a.out:
        with open(os.path.join(a.out, "probe_nt.json"), "w") as f:
            json.dump(P.RESULTS, f, indent=1)


def wide(a) -> None:
    """``--set wide``: fp16 (``--dtypes``) NT at 4096^3 under :data:`WIDE` and :data:`WIDE_HAND`, against cuBLAS
    NT and NN."""
    n = 48 if a.dry_run else 4096
    for dtype in [getattr(torch, d) for d in a.dtypes.split(",")]:
        A = torch.randn(n, n, device=R.DEV, dtype=dtype)
        W = torch.randn(n, n, device=R.DEV, dtype=dtype)
        x, y = A, W.T
        ref = [(x.double() @ y.double()).to(dtype)]
        base = [("torch NT", lambda: x @ y), ("torch NN", lambda w=W.T.contiguous(): x @ w)]
        cands = [("dtriton heuristic", None)]
        for (bm, bn, bk), ns, ac, extra in WIDE:
            if a.dry_run:
                bm, bn, bk, ac = 16, 16, 16, "pointer"
            ws = "".join(f" {k}={v}" for k, v in extra.items())
            cands.append((f"dtriton {bm}x{bn}x{bk} s{ns} {ac}{ws}",
                          dt.Schedule(tile={"i": bm, "j": bn, "k": bk}, num_stages=ns, num_warps=8, access=ac,
                                      group={"i": 8}, **extra)))
        if not a.dry_run:
            for (bm, bn, bk), ns, sw in WIDE_HAND:
                name = f"hand triton {bm}x{bn}x{bk} s{ns}" + (" swapped C^T=W@X^T" if sw else "")
                fn = hand_fn(x, y, bm, bn, bk, ns, swapped=sw)
                try:
                    err = R.relerr(fn(), ref[0])
                except Exception as e:  # noqa: BLE001 - a kernel over a resource limit is a row, not the end
                    print(f"  check {name}: failed: {type(e).__name__}: {' '.join(str(e).split())[:160]}", flush=True)
                    continue
                print(f"  check {name}: rel err {err:.1e}" + ("" if err < 1e-2 else "  WRONG"), flush=True)
                base.append((name, fn))
        P.probe(f"{str(dtype)[6:]} NT {n}^3 (wide set)", dt.library.matmul, (x, y), ref, 1e-2, cands, baselines=base)
    P.summary()
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "probe_nt_wide.json"), "w") as f:
            json.dump(P.RESULTS, f, indent=1)


def persistent(a) -> None:
    """``--set persistent``: NN, NT and TN (``--layouts``) at 4096^3 in ``--dtypes``: dtriton's default, the
    persistent flattened schedules of :data:`PERSISTENT` (``--only``: their indices, ``-`` none; NN and TN: the
    first and the 256x128 ones), with ``--hand`` the hand-written persistent kernels of :data:`PERSISTENT_HAND`
    (GPU only; NN: the first, flattened, and the fourth, not), torch in the same layout."""
    n = 48 if a.dry_run else 4096
    for dtype in [getattr(torch, d) for d in a.dtypes.split(",")]:
        A = torch.randn(n, n, device=R.DEV, dtype=dtype)
        W = torch.randn(n, n, device=R.DEV, dtype=dtype)
        for lay in [x for x in a.layouts.split(",") if x in ("NT", "NN", "TN")]:
            x, y = (A.T if lay == "TN" else A), (W.T if lay == "NT" else W)
            ref = [(x.double() @ y.double()).to(dtype)]
            base = [("torch " + lay, lambda x=x, y=y: x @ y)]
            cands = [("dtriton heuristic", None)]
            for k, ((bm, bn, bk), ns, extra) in enumerate(PERSISTENT):
                if (lay != "NT" and k not in (0, 5)) or (a.only and str(k) not in a.only.split(",")):
                    continue
                if a.dry_run:
                    bm, bn, bk = 16, 32, 16
                ws = "".join(f" {key}={v}" for key, v in extra.items())
                cands.append((f"dtriton persistent {bm}x{bn}x{bk} s{ns}{ws}",
                              dt.Schedule(tile={"i": bm, "j": bn, "k": bk}, num_stages=ns, num_warps=8, access="tma",
                                          group={"i": 8}, persistent=1, **extra)))
            if not a.dry_run and a.hand and lay != "TN":
                for h, ((bm, bn, bk), ns, flat, halves, own) in enumerate(PERSISTENT_HAND):
                    if lay == "NN" and h not in (0, 3):
                        continue
                    name = (f"hand persistent {bm}x{bn}x{bk} s{ns}" + (" flat" if flat else "") + (" halves" if halves else "")
                            + (" own-epi" if own else ""))
                    fn = hand_persistent_fn(x, y, bm, bn, bk, ns, flat=flat, halves=halves, own_epi=own)
                    try:
                        err = R.relerr(fn(), ref[0])
                    except Exception as e:  # noqa: BLE001 - a kernel over a resource limit is a row, not the end
                        print(f"  check {name}: failed: {type(e).__name__}: {' '.join(str(e).split())[:160]}", flush=True)
                        continue
                    print(f"  check {name}: rel err {err:.1e}" + ("" if err < 1e-2 else "  WRONG"), flush=True)
                    base.append((name, fn))
            print(f"{lay} {str(dtype)[6:]} heuristic schedule:", dt.compile(dt.library.matmul).schedule_for(x, y).to_json(),
                  flush=True)
            P.probe(f"{str(dtype)[6:]} {lay} {n}^3 (persistent set)", dt.library.matmul, (x, y), ref, 1e-2, cands,
                    baselines=base)
    P.summary()
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "probe_nt_persistent.json"), "w") as f:
            json.dump(P.RESULTS, f, indent=1)


if __name__ == "__main__":
    main()
