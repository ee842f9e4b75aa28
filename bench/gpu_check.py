"""Correctness of every library algorithm on the GPU (issue 3: "they also run correctly on the H200").

    PYTHONPATH=src python3 bench/gpu_check.py [--out bench/results] [--dry-run]
        [--only all|gluon|gluon-conv|gluon-depthwise]

Each case runs the heuristic schedule (and, for softmax and attention, explicit schedules covering
every reduction strategy and the unfused attention) on awkward shapes (primes, sizes that are not
multiples of any tile, size 1, a transposed input) in fp32, fp16 and bf16. Each kernel writes
into ``out=`` tensors poisoned with NaN first (an unwritten element shows as NaN), which are
compared against ``alg.reference`` evaluated in float64 on the CPU. Gradients of three algorithms
are compared against torch autograd in float64. Writes gpu_check.json and gpu_check.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton.library import (attention, causal_attention, column_sum, conv2d_nhwc, cross_entropy,  # noqa: E402
                             depthwise_conv2d_nhwc, gqa_attention, layer_norm, linear_relu, log_softmax, matmul, rms_norm, softmax,
                             spatial_diffusion)

TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}


@dt.algorithm
def row_prod(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.prod(X[i, j], over=j)[i]


@dt.algorithm
def row_argmax_argmin(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.argmax(X[i, j], over=j)[i], dt.argmin(X[i, j], over=j)[i]


@dt.algorithm
def gather_by_argmax(X: dt.Tensor["M", "N"], S: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    k = dt.argmax(S[i, j], over=j)
    return (X[i, k] + dt.prod(X[i, j], over=j))[i], k[i]


@dt.algorithm
def gqa_causal4(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "G", "T", "D"], V: dt.Tensor["B", "G", "T", "D"],
                scale: float):
    """Causal grouped-query attention, the group a literal: query head h reads K/V head h // 4."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.where(j <= i, dt.sum(Q[b, h, i, d] * K[b, h // 4, j, d], over=d) * scale, -float("inf"))
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h // 4, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def gqa_short(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "G", "T", "D"], V: dt.Tensor["B", "G", "T", "D"],
              scale: float, rep: int):
    """``library.gqa_attention`` without its ``H == G * rep`` requirement: the last group may be short
    (H = 5, G = 2, rep = 3: K/V head 1 serves query heads 3 and 4), which the Gluon kernel handles."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, h // rep, j, d], over=d) * scale
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h // rep, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def causal_st(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "T", "D"], V: dt.Tensor["B", "H", "T", "D"],
              scale: float):
    """Causal attention with the query and key lengths apart (top-left aligned: key j <= query i, as
    torch's is_causal)."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.where(j <= i, dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * scale, -float("inf"))
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


def reduction_cases(case, rnd, S, dev, dtype, g):
    """dt.prod, dt.argmax and dt.argmin: awkward shapes, whole/loop strategies, ties (small integer
    values), NaN and +-inf in some rows, a transposed input, argmax feeding a gather, materialised
    placement. Indices must match exactly."""
    nan, inf = float("nan"), float("inf")
    for (M, N) in [(S(333), S(1000)), (S(7), S(20011)), (1, S(1)), (S(129), 1)]:
        near1 = (1 + 0.01 * torch.randn(M, N, generator=g)).to(dev, dtype)
        case(f"prod {M}x{N}", row_prod, (near1,), dtype=dtype)
        ties = torch.randint(-3, 4, (M, N), generator=g).float()
        if N > 5:
            ties[0, 3], ties[0, N - 2] = nan, nan           # NaN wins both (the first NaN)
            ties[M // 2, :] = -inf
            ties[M - 1, N - 1] = inf
        case(f"argmax/argmin {M}x{N} (ties, NaN, inf)", row_argmax_argmin, (ties.to(dev, dtype),), dtype=dtype)
    X = torch.randint(-3, 4, (S(1000), S(333)), generator=g).to(dev, dtype)
    case("argmax/argmin transposed input", row_argmax_argmin, (X.t(),), dtype=dtype)
    X = rnd(S(300), S(2000), dtype=dtype)
    for strat, tile in (("whole", None), ("loop", 256)):
        sch = dt.Schedule(grid=("i",), tile={"i": 2, **({"j": tile} if tile else {})}, strategy={"j": strat})
        case(f"argmax/argmin 300x2000 strategy={strat}", row_argmax_argmin, (X,), sch, dtype=dtype)
        case(f"prod 300x2000 strategy={strat}", row_prod, ((1 + 0.01 * X.float()).to(dtype),), sch, dtype=dtype)
    Xg = (1 + 0.01 * torch.randn(S(257), S(999), generator=g)).to(dev, dtype)
    Sg = torch.randint(-5, 6, (S(257), S(999)), generator=g).to(dev, dtype)
    case("gather by argmax (fused)", gather_by_argmax, (Xg, Sg), dtype=dtype)
    case("gather by argmax (materialised)", gather_by_argmax, (Xg, Sg),
         dt.Schedule(stages={"argmax0": {"place": "materialize"}}), dtype=dtype)


def interr(o, r) -> float:
    """The fraction of integer outputs (indices) that differ from the reference."""
    return (o.cpu() != r.cpu()).double().mean().item() if o.numel() else 0.0


def relerr(o, r) -> float:
    o, r = o.double().cpu(), r.double().cpu()
    if not torch.isfinite(o).all():
        return float("nan")
    return ((o - r).norm() / r.norm().clamp_min(1e-30)).item()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, fp32 only, tiny shapes")
    ap.add_argument("--only", choices=("all", "gluon", "gluon-conv", "gluon-depthwise"), default="all",
                    help="gluon: only the Gluon cases (attention forward: warp_specialize=True on sm_90; "
                         "backward, conv2d and depthwise: the default schedule); gluon-conv: only the Gluon "
                         "conv2d cases; gluon-depthwise: only the Gluon depthwise conv2d cases")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    dtypes = [torch.float32] if a.dry_run else [torch.float32, torch.float16, torch.bfloat16]
    S = (lambda n: min(n, 37)) if a.dry_run else (lambda n: n)
    g = torch.Generator().manual_seed(0)
    rows = []

    def rnd(*shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dev, dtype)

    def case(name, alg, args, sched=None, dtype=torch.float32, gluon=None):
        ref_args = [x.detach().double().cpu() if isinstance(x, torch.Tensor) and x.is_floating_point()
                    else (x.cpu() if isinstance(x, torch.Tensor) else x) for x in args]
        t0 = time.time()
        try:
            k = dt.compile(alg, sched)
            out = k(*args)
            outs = tuple(torch.full_like(o, float("nan") if o.is_floating_point() else -1)
                         for o in (out if isinstance(out, tuple) else (out,)))
            k(*args, out=outs if len(outs) > 1 else outs[0])   # poisoned outputs, written in place
            ref = alg.reference(*ref_args)
            refs = ref if isinstance(ref, tuple) else (ref,)
            err = max(relerr(o, r) if o.is_floating_point() else interr(o, r) for o, r in zip(outs, refs))
            exact = all(interr(o, r) == 0 for o, r in zip(outs, refs) if not o.is_floating_point())
            status = "ok" if err <= TOL[dtype] and exact else "WRONG"
            note = ""
            if gluon is not None and gluon != ("gluon_kernels import" in k.source):   # the Gluon kernel ran or not
                status, note = "WRONG", f"expected the {'Gluon' if gluon else 'Triton'} kernel"
        except Exception as e:  # noqa: BLE001
            err, status, note = float("nan"), "FAILED", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        rows.append(dict(case=name, dtype=str(dtype)[6:], schedule=sched.to_json() if sched else "heuristic",
                         rel_err=err, status=status, seconds=round(time.time() - t0, 2), note=note))
        print(f"{status:6s} {name:48s} {str(dtype)[6:]:9s} err {err:.1e} {note}", flush=True)

    if a.only == "gluon-conv":
        gluon_conv_cases(rows, rnd, a.dry_run)
        return finish(a, rows)
    if a.only == "gluon-depthwise":
        gluon_depthwise_cases(rows, rnd, a.dry_run)
        return finish(a, rows)
    if a.only == "gluon":
        gluon_conv_cases(rows, rnd, a.dry_run)
        gluon_depthwise_cases(rows, rnd, a.dry_run)
        gluon_cases(case, rnd, a.dry_run)
        gluon_bwd_grads(rows, rnd, a.dry_run)
        gluon_grads(rows, rnd, a.dry_run)   # (last: its grouped-query row ran past 190 and 330 s on the H200, s12)
        return finish(a, rows)
    for dt_ in dtypes:
        for (M, K, N) in [(S(257), S(131), S(199)), (1, S(64), S(33)), (S(1000), S(4096), S(1))]:
            A, B = rnd(M, K, dtype=dt_), rnd(K, N, dtype=dt_)
            case(f"matmul {M}x{K}x{N}", matmul, (A, B), dtype=dt_)
        A, Bt = rnd(S(300), S(170), dtype=dt_), rnd(S(200), S(170), dtype=dt_)
        case("matmul B transposed view", matmul, (A, Bt.t()), dtype=dt_)
        # memory-access styles: TMA descriptors (odd sizes; a transposed view and a row stride that
        # is not 16-byte aligned fall back to pointers per tensor), block pointers, warp specialisation
        for acc, ws, pers in (("tma", False, 0), ("tma", True, 0), ("tma", False, 1), ("block_ptr", False, 0)):
            sch = dt.Schedule(tile={"i": 64, "j": 128, "k": 32}, access=acc, warp_specialize=ws, persistent=pers)
            A2, B2 = rnd(S(257), S(136), dtype=dt_), rnd(S(136), S(200), dtype=dt_)
            case(f"matmul 257x136x200 {acc}{' ws' if ws else ''}{' persistent' if pers else ''}", matmul, (A2, B2), sch, dtype=dt_)
            case(f"matmul B transposed, {acc}", matmul, (A, Bt.t()), sch, dtype=dt_)
            case(f"matmul K=131 (unaligned rows), {acc}", matmul, (rnd(S(65), S(131), dtype=dt_), rnd(S(131), S(33), dtype=dt_)),
                 sch, dtype=dt_)
        case("attention tma", attention, (rnd(2, 3, S(100), 64, dtype=dt_), rnd(2, 3, S(77), 64, dtype=dt_),
                                          rnd(2, 3, S(77), 64, dtype=dt_), 0.125), dt.Schedule(access="tma"), dtype=dt_)
        X, W, b = rnd(S(129), S(96), dtype=dt_), rnd(S(77), S(96), dtype=dt_), rnd(S(77), dtype=dt_)
        case("linear_relu 129x96 -> 77", linear_relu, (X, W, b), dtype=dt_)
        for (M, N) in [(S(333), S(1000)), (S(7), S(20011)), (1, S(1))]:
            X = rnd(M, N, dtype=dt_, scale=3)
            for name, alg in (("softmax", softmax), ("log_softmax", log_softmax)):
                case(f"{name} {M}x{N}", alg, (X,), dtype=dt_)
            w, bb = rnd(N, dtype=dt_), rnd(N, dtype=dt_)
            case(f"layer_norm {M}x{N}", layer_norm, (X, w, bb), dtype=dt_)
            case(f"rms_norm {M}x{N}", rms_norm, (X, w), dtype=dt_)
            labels = torch.randint(0, N, (M,), generator=g).to(dev)
            case(f"cross_entropy {M}x{N}", cross_entropy, (X, labels), dtype=dt_)
            case(f"column_sum {M}x{N}", column_sum, (X,), dtype=dt_)
        X = rnd(S(333), S(5000), dtype=dt_, scale=3)
        for strat, tile in (("whole", None), ("loop", 512), ("online", 512)):
            sch = dt.Schedule(grid=("i",), tile={"i": 1, **({"j": tile} if tile else {})}, strategy={"j": strat})
            case(f"softmax 333x5000 strategy={strat}", softmax, (X,), sch, dtype=dt_)
        V, Kk, C = S(5003), S(128), S(96)
        if dt_ == torch.float32:
            args = (rnd(V, C), rnd(V, Kk, scale=V ** -0.5), torch.rand(V, generator=g).to(dev) + 0.5,
                    torch.rand(Kk, generator=g).to(dev) * 10, torch.rand(C, generator=g).to(dev))
            case(f"spatial_diffusion V={V} K={Kk} C={C}", spatial_diffusion, args, dtype=dt_)
            case(f"spatial_diffusion tf32x3", spatial_diffusion, args, dt.Schedule(precision="tf32x3"), dtype=dt_)
        reduction_cases(case, rnd, S, dev, dt_, g)
        if dt_ != torch.float32:
            Bz, H, Sq, D = (2, 3, S(300), 64) if not a.dry_run else (1, 2, 37, 16)
            Q, Kt, Vt = (rnd(Bz, H, Sq, D, dtype=dt_) for _ in range(3))
            case(f"attention B{Bz} H{H} S={Sq} D{D} (heuristic: fused online)", attention, (Q, Kt, Vt, 0.125), dtype=dt_)
            unfused = dt.Schedule(stages={"sum0": {"place": "materialize"}, "max0": {"place": "materialize"}})
            case("attention unfused (s and max materialised)", attention, (Q, Kt, Vt, 0.125), unfused, dtype=dt_)
            case(f"causal_attention B{Bz} H{H} S={Sq} D{D}", causal_attention, (Q, Kt, Vt, 0.125), dtype=dt_)

    # gradients on the GPU, fp32 inputs, against torch autograd in float64
    def grad_case(name, alg, args, wrt):
        ins = [x.detach().clone().requires_grad_(k in wrt) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
               for k, x in enumerate(args)]
        refs = [x.detach().double().cpu().requires_grad_(k in wrt) if isinstance(x, torch.Tensor) and x.is_floating_point()
                else (x.cpu() if isinstance(x, torch.Tensor) else x) for k, x in enumerate(args)]
        try:
            out = dt.compile(alg)(*ins)
            outs = out if isinstance(out, tuple) else (out,)
            sum((o * (n + 1)).sum() for n, o in enumerate(outs)).backward()
            ro = alg.reference(*refs)
            ros = ro if isinstance(ro, tuple) else (ro,)
            sum((o * (n + 1)).sum() for n, o in enumerate(ros)).backward()
            err = max(relerr(ins[k].grad, refs[k].grad) for k in wrt)
            status, note = ("ok" if err <= 1e-4 else "WRONG"), ""
        except Exception as e:  # noqa: BLE001
            err, status, note = float("nan"), "FAILED", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        rows.append(dict(case=f"grad {name}", dtype="float32", schedule="heuristic", rel_err=err, status=status,
                         seconds=0, note=note))
        print(f"{status:6s} grad {name:43s} float32   err {err:.1e} {note}", flush=True)

    X = rnd(S(300), S(700), scale=2)
    grad_case("layer_norm 300x700 (X, w, b)", layer_norm, (X, rnd(S(700)), rnd(S(700))), [0, 1, 2])
    labels = torch.randint(0, S(700), (S(300),), generator=g).to(dev)
    grad_case("cross_entropy 300x700 (X)", cross_entropy, (X, labels), [0])
    V = S(3001)
    args = (rnd(V, S(64)), rnd(V, S(128), scale=V ** -0.5), torch.rand(V, generator=g).to(dev) + 0.5,
            torch.rand(S(128), generator=g).to(dev) * 10, torch.rand(S(64), generator=g).to(dev))
    grad_case("spatial_diffusion (x, times)", spatial_diffusion, args, [0, 4])
    gluon_cases(case, rnd, a.dry_run)
    gluon_grads(rows, rnd, a.dry_run)
    gluon_bwd_grads(rows, rnd, a.dry_run)
    gluon_conv_cases(rows, rnd, a.dry_run)
    gluon_depthwise_cases(rows, rnd, a.dry_run)
    return finish(a, rows)


def gluon_grads(rows, rnd, dry: bool) -> None:
    """Gradients through the Gluon saving forward (warp_specialize=True, inputs requiring grad: the
    forward stores the output, the row log-sum-exp and the output again; the derived backward reads
    them), fp16, against torch autograd of ``alg.reference`` in float64: attention D128, causal D64,
    grouped-query D128 (6 query heads over 2 K/V heads, rep 3)."""
    for alg, D in ((attention, 128), (causal_attention, 64), (gqa_attention, 128)):
        if True:
            B, H, S = ((3, 6, 256) if alg is gqa_attention else (3, 5, 256)) if not dry else (1, 2, 16)
            G = 2 if alg is gqa_attention and not dry else H   # (grouped-query: 6 query heads over 2 K/V heads, rep 3)
            extra = ((3,) if not dry else (1,)) if alg is gqa_attention else ()
            D_ = D if not dry else 16
            ins = [rnd(B, n, S, D_, dtype=torch.float16).requires_grad_() for n in (H, G, G)]
            refs = [x.detach().double().cpu().requires_grad_() for x in ins]
            name = f"grad gluon {alg.name} B{B} H{H}{f' G{G}' if G != H else ''} S{S} D{D_}"
            try:
                kern = dt.compile(alg, dt.Schedule(warp_specialize=True))
                if not dry:   # which kernels the saving forward launches (the Gluon kernel's name: attn_fwd_*)
                    from torch.profiler import ProfilerActivity, profile
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        kern(*ins, D_ ** -0.5, *extra)
                        torch.cuda.synchronize()
                    ran = [e.key for e in prof.key_averages()]
                out = kern(*ins, D_ ** -0.5, *extra)
                w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.device, torch.float16)
                (out.float() * w.float()).sum().backward()
                ro = alg.reference(*refs, D_ ** -0.5, *extra)
                (ro * w.double().cpu()).sum().backward()
                err = max([relerr(out.detach(), ro.detach())] + [relerr(x.grad, r.grad) for x, r in zip(ins, refs)])
                status, note = ("ok" if err <= 2e-2 else "WRONG"), "output and dQ, dK, dV"
                if not dry and not any("attn_fwd_" in n for n in ran):
                    status, note = "WRONG", f"the Gluon kernel did not run (kernels: {', '.join(ran)[:120]})"
            except Exception as e:  # noqa: BLE001
                err, status, note = float("nan"), "FAILED", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            rows.append(dict(case=name, dtype="float16", schedule='{"warp_specialize": true}', rel_err=err,
                             status=status, seconds=0, note=note))
            print(f"{status:6s} {name:48s} float16   err {err:.1e} {note}", flush=True)


def gluon_bwd_grads(rows, rnd, dry: bool) -> None:
    """The Gluon attention backward under the default schedules (warp_specialize None: the compiler picks):
    autograd through ``dt.compile(alg)`` on 16-bit inputs requiring grad, the saving forward and the derived
    backward both Gluon kernels on sm_90 at D128 (non-causal and causal, fp16 and bf16, S 256 and 384), D64
    keeping the derived Triton backward; output and dQ, dK, dV against torch autograd of ``alg.reference``
    in float64, twice (the slow path that plans, then the call signatures' fast paths). The kernels the
    second step ran (torch.profiler) must include the Gluon backward's ``bwd_dkdv`` exactly at D128 and the
    forward's ``attn_fwd_``."""
    cases = [(attention, 128, torch.float16, 2, 3, 256), (causal_attention, 128, torch.float16, 1, 4, 384),
             (attention, 128, torch.bfloat16, 1, 3, 384), (causal_attention, 128, torch.bfloat16, 2, 2, 256),
             (causal_attention, 64, torch.float16, 1, 2, 256)]
    for alg, D, dtype, B, H, S in cases:
        if dry:
            B, H, S, D = 1, 2, 16, 16
        name = f"grad gluon-bwd {alg.name} B{B} H{H} S{S} D{D}"
        tol = 2e-2 if dtype == torch.float16 else 4e-2
        ran = []
        try:
            kern = dt.compile(alg)
            errs = []
            for step in range(2):
                ins = [rnd(B, H, S, D, dtype=dtype).requires_grad_() for _ in range(3)]
                refs = [x.detach().double().cpu().requires_grad_() for x in ins]
                w = rnd(B, H, S, D, dtype=dtype)
                if step and not dry:
                    from torch.profiler import ProfilerActivity, profile
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        out = kern(*ins, D ** -0.5)
                        out.backward(w)
                        torch.cuda.synchronize()
                    ran = [e.key for e in prof.key_averages()]
                else:
                    out = kern(*ins, D ** -0.5)
                    out.backward(w)
                ro = alg.reference(*refs, D ** -0.5)
                ro.backward(w.double().cpu())
                errs += [relerr(out.detach(), ro.detach())] + [relerr(x.grad, r.grad) for x, r in zip(ins, refs)]
            err = max(errs)
            status, note = ("ok" if err <= tol else "WRONG"), "output and dQ, dK, dV"
            if not dry:
                bwd, fwd = any("bwd_dkdv" in n for n in ran), any("attn_fwd_" in n for n in ran)
                if bwd != (D == 128) or not fwd:
                    status = "WRONG"
                    note = (f"expected the Gluon forward and {'the Gluon' if D == 128 else 'the Triton'} backward "
                            f"(kernels: {', '.join(ran)[:160]})")
                else:
                    note += f"; {'Gluon' if bwd else 'Triton'} backward ran"
        except Exception as e:  # noqa: BLE001
            err, status, note = float("nan"), "FAILED", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        dts = str(dtype)[6:]
        rows.append(dict(case=name, dtype=dts, schedule="heuristic", rel_err=err, status=status, seconds=0, note=note))
        print(f"{status:6s} {name:48s} {dts:9s} err {err:.1e} {note}", flush=True)


def gluon_cases(case, rnd, dry: bool) -> None:
    """The Gluon attention forward (warp_specialize=True on sm_90): D64 (pipelined) and D128
    (warp-specialised, ping-pong), causal or not, fp16 and bf16, B3 H5 at S = 256 and 1024, a negative
    scale, B1 H1 S128; S = 200 (not a multiple of 128) and fp32 run the Triton kernel (a warning says
    why). Each checks which kernel ran (the printed module imports the Gluon kernel or not). On the
    interpreter (--dry-run) every call falls back."""
    ws = dt.Schedule(warp_specialize=True)
    for dtype in (torch.float16, torch.bfloat16):
        for D in (64, 128):
            for alg in (attention, causal_attention):
                for (B, H, S) in ((3, 5, 256), (3, 5, 1024)):
                    S_, D_ = (37, 16) if dry else (S, D)
                    q, k, v = (rnd(B, H, S_, D_, dtype=dtype) for _ in range(3))
                    case(f"gluon {alg.name} B{B} H{H} S{S_} D{D_}", alg, (q, k, v, D_ ** -0.5), ws, dtype=dtype,
                         gluon=not dry)
    for alg, scale in ((attention, -0.09), (causal_attention, -0.125)):
        q, k, v = (rnd(2, 3, 128 if not dry else 16, 128 if not dry else 16, dtype=torch.float16) for _ in range(3))
        case(f"gluon {alg.name} negative scale {scale}", alg, (q, k, v, scale), ws, dtype=torch.float16, gluon=not dry)
    q, k, v = (rnd(1, 1, 128 if not dry else 16, 64 if not dry else 16, dtype=torch.float16) for _ in range(3))
    case("gluon attention B1 H1 S128 D64", attention, (q, k, v, 0.125), ws, dtype=torch.float16, gluon=not dry)
    for alg in (attention, causal_attention):   # not a multiple of the tiles: the Triton kernel
        q, k, v = (rnd(3, 5, 200 if not dry else 20, 128 if not dry else 16, dtype=torch.float16) for _ in range(3))
        case(f"gluon fallback {alg.name} S200 D128", alg, (q, k, v, 0.088), ws, dtype=torch.float16, gluon=False)
    q, k, v = (rnd(2, 3, 256 if not dry else 16, 64 if not dry else 16) for _ in range(3))
    case("gluon fallback attention fp32 S256 D64", attention, (q, k, v, 0.125), ws, dtype=torch.float32, gluon=False)
    gluon_gqa_cases(case, rnd, dry)
    for alg, S, T in ((attention, 256, 640), (causal_st, 384, 128), (causal_st, 128, 384), (causal_st, 640, 1024)):
        for D in (64, 128):   # the query and key lengths apart (both multiples of 128)
            S_, T_, D_ = (37, 23, 16) if dry else (S, T, D)
            q, k, v = rnd(3, 5, S_, D_, dtype=torch.float16), rnd(3, 5, T_, D_, dtype=torch.float16), \
                rnd(3, 5, T_, D_, dtype=torch.float16)
            case(f"gluon {alg.name} B3 H5 S{S_} T{T_} D{D_}", alg, (q, k, v, D_ ** -0.5), ws, dtype=torch.float16,
                 gluon=not dry)


#: (N, H, W, C, O, R, padding, dilation, stride, dtype, the Gluon kernel expected): the bench's shape, odd ones
#: (partial patches and tiles), dilation 2, padding 0 and 2, bf16, O = 128 (the BN 128 variant), a 1x1
#: conv, an image smaller than a patch (5 x 6: TMA boxes past the tensor's dims); C = 48 and stride 2 fall
#: back to the Triton kernel.
F16, BF16 = torch.float16, torch.bfloat16
CONV_CASES = [(32, 56, 56, 256, 256, 3, 1, 1, 1, F16, True),
              (3, 13, 24, 64, 256, 3, 1, 1, 1, F16, True),
              (2, 17, 19, 128, 256, 3, 2, 2, 1, F16, True),
              (2, 15, 21, 64, 256, 3, 0, 1, 1, F16, True),
              (4, 28, 28, 128, 256, 3, 1, 1, 1, BF16, True),
              (3, 13, 24, 64, 128, 3, 1, 1, 1, F16, True),
              (2, 11, 9, 64, 384, 3, 3, 2, 1, BF16, True),
              (4, 14, 14, 256, 512, 1, 0, 1, 1, F16, True),
              (2, 5, 6, 64, 128, 3, 1, 1, 1, F16, True),
              (2, 13, 24, 48, 256, 3, 1, 1, 1, F16, False),
              (2, 13, 24, 64, 256, 3, 1, 1, 2, F16, False)]


def gluon_conv_cases(rows, rnd, dry: bool) -> None:
    """The Gluon conv2d (:data:`CONV_CASES`): ``conv2d_nhwc`` with the default schedule (the compiler
    picks the Gluon kernel where it applies), written into a NaN-poisoned ``out=`` (the signature's fast
    path) after a first call (the slow path), both against float64 torch ``conv2d`` computed on the same
    device; each checks which kernel ran (the printed module imports the Gluon conv kernel or not). On
    the interpreter (--dry-run, small shapes) every call falls back."""
    import torch.nn.functional as F
    from dtriton.plan.gluon_conv import BY_DEFAULT
    for N, H, W, C, O, R, p, d, s_, dtype, want in CONV_CASES:
        if dry:   # (the interpreter's cost grows with C * O: a quarter of C, O 24 = a tile of 16 and a partial one)
            N, H, W, C, O, dtype = 1, min(H, 7), min(W, 9), C // 4, 24, torch.float32
        ho, wo = (H + 2 * p - d * (R - 1) - 1) // s_ + 1, (W + 2 * p - d * (R - 1) - 1) // s_ + 1
        name = f"gluon conv2d_nhwc N{N} H{H} W{W} C{C} O{O} {R}x{R} p{p} d{d} s{s_}"
        t0 = time.time()
        try:
            x, w = rnd(N, H, W, C, dtype=dtype), rnd(O, R, R, C, dtype=dtype, scale=(R * R * C) ** -0.5)
            # (warp_specialize=True while the default does not pick the Gluon kernel: plan.gluon_conv.BY_DEFAULT)
            k = dt.compile(conv2d_nhwc, None if BY_DEFAULT else dt.Schedule(warp_specialize=True))
            args = (x, w, s_, p, d, ho, wo)
            first = k(*args)
            out = torch.full_like(first, float("nan"))
            k(*args, out=out)
            ref = F.conv2d(x.double().permute(0, 3, 1, 2), w.double().permute(0, 3, 1, 2), stride=s_, padding=p,
                           dilation=d).permute(0, 2, 3, 1)
            err = max(relerr(first, ref), relerr(out, ref))
            ran = "gluon_conv_kernels import" in k.source
            status = "ok" if err <= TOL[dtype] else "WRONG"
            note = f"{'Gluon' if ran else 'Triton'} kernel"
            if ran != (want and not dry):
                status, note = "WRONG", f"expected the {'Gluon' if want and not dry else 'Triton'} kernel"
        except Exception as e:  # noqa: BLE001
            err, status, note = float("nan"), "FAILED", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        rows.append(dict(case=name, dtype=str(dtype)[6:], schedule="heuristic", rel_err=err, status=status,
                         seconds=round(time.time() - t0, 2), note=note))
        print(f"{status:6s} {name:48s} {str(dtype)[6:]:9s} err {err:.1e} {note}", flush=True)


#: (N, H, W, C, R, padding, stride, dtype, how X is laid out, the Gluon kernel expected): the bench's shape in
#: fp16 and bf16; the probe's odd case (W 37: a partial column tile, C 40: a partial channel block);
#: padding 0 and 2 (Ho, Wo = H -+ 2); two column tiles (W 70); TW 32 and 16 (W 29, 7); C 8 and 24
#: (below a BC 32 block); an image smaller than a strip (5 x 6, N 1); MobileNet-like layers (112 x 112 x 32:
#: BC 32, 4 programs an SM over 2 column tiles; 7 x 7 x 960: 15 channel blocks); the weight a view of torch's
#: (C, 1, 3, 3) (``w[:, 0].permute(1, 2, 0)``: strides (3, 1, 9), read as such). Stride 2, a 5x5 filter,
#: C 12 (not a multiple of 8), X an NHWC view of NCHW memory and fp32 fall back to the Triton kernel.
DEPTHWISE_CASES = [(32, 56, 56, 256, 3, 1, 1, F16, "nhwc", True),
                   (32, 56, 56, 256, 3, 1, 1, BF16, "nhwc", True),
                   (3, 13, 37, 40, 3, 1, 1, F16, "nhwc", True),
                   (2, 17, 70, 64, 3, 0, 1, BF16, "nhwc", True),
                   (2, 30, 29, 96, 3, 2, 1, F16, "nhwc", True),
                   (1, 5, 6, 8, 3, 1, 1, F16, "nhwc", True),
                   (8, 28, 28, 24, 3, 1, 1, BF16, "nhwc", True),
                   (4, 112, 112, 32, 3, 1, 1, F16, "nhwc", True),
                   (16, 7, 7, 960, 3, 1, 1, F16, "nhwc", True),
                   (4, 28, 28, 64, 3, 1, 1, F16, "torch weight", True),
                   (2, 13, 24, 64, 3, 1, 2, F16, "nhwc", False),
                   (2, 13, 24, 64, 5, 2, 1, F16, "nhwc", False),
                   (2, 13, 24, 12, 3, 1, 1, F16, "nhwc", False),
                   (2, 13, 24, 64, 3, 1, 1, F16, "nchw view", False),
                   (2, 13, 24, 64, 3, 1, 1, torch.float32, "nhwc", False)]


def gluon_depthwise_cases(rows, rnd, dry: bool) -> None:
    """The Gluon depthwise conv2d (:data:`DEPTHWISE_CASES`): ``depthwise_conv2d_nhwc`` with the default
    schedule (the compiler picks the Gluon kernel where it applies), written into a NaN-poisoned ``out=``
    (the signature's fast path) after a first call (the slow path), both against float64 torch
    ``conv2d(groups=C)`` computed on the same device; each checks which kernel ran (the printed module
    imports the Gluon depthwise kernel or not). On the interpreter (--dry-run, small shapes, fp32) every
    call falls back."""
    import torch.nn.functional as F
    from dtriton.plan.gluon_depthwise import BY_DEFAULT
    for N, H, W, C, R, p, s_, dtype, lay, want in DEPTHWISE_CASES:
        if dry:
            N, H, W, C, dtype = 1, min(H, 7), min(W, 9), min(C, 24), torch.float32
        ho, wo = (H + 2 * p - R) // s_ + 1, (W + 2 * p - R) // s_ + 1
        name = f"gluon depthwise N{N} H{H} W{W} C{C} {R}x{R} p{p} s{s_}{' ' + lay if lay != 'nhwc' else ''}"
        t0 = time.time()
        try:
            x = rnd(N, C, H, W, dtype=dtype).permute(0, 2, 3, 1) if lay == "nchw view" else rnd(N, H, W, C, dtype=dtype)
            w = rnd(R, R, C, dtype=dtype, scale=1 / R) if lay != "torch weight" else \
                rnd(C, 1, R, R, dtype=dtype, scale=1 / R)[:, 0].permute(1, 2, 0)
            # (warp_specialize=True while the default does not pick the Gluon kernel: plan.gluon_depthwise.BY_DEFAULT)
            k = dt.compile(depthwise_conv2d_nhwc, None if BY_DEFAULT else dt.Schedule(warp_specialize=True))
            args = (x, w, s_, p, ho, wo)
            first = k(*args)
            out = torch.full_like(first, float("nan"))
            k(*args, out=out)
            ref = F.conv2d(x.double().permute(0, 3, 1, 2), w.double().permute(2, 0, 1)[:, None], stride=s_,
                           padding=p, groups=C).permute(0, 2, 3, 1)
            err = max(relerr(first, ref), relerr(out, ref))
            ran = "gluon_depthwise_kernels import" in k.source
            status = "ok" if err <= TOL[dtype] else "WRONG"
            note = f"{'Gluon' if ran else 'Triton'} kernel"
            if ran != (want and not dry):
                status, note = "WRONG", f"expected the {'Gluon' if want and not dry else 'Triton'} kernel"
        except Exception as e:  # noqa: BLE001
            err, status, note = float("nan"), "FAILED", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        rows.append(dict(case=name, dtype=str(dtype)[6:], schedule="heuristic", rel_err=err, status=status,
                         seconds=round(time.time() - t0, 2), note=note))
        print(f"{status:6s} {name:48s} {str(dtype)[6:]:9s} err {err:.1e} {note}", flush=True)


def gluon_gqa_cases(case, rnd, dry: bool) -> None:
    """Grouped-query attention as the Gluon forward: ``gqa_attention`` (K/V head h // rep, rep an
    argument) at H = G * rep (B3 H6 G2, B2 H32 G8) and at H = 5, G = 2, rep = 3 (the last group short),
    D64 and D128, fp16 and bf16, S 256 and 1024; ``gqa_causal4`` (causal, the group a literal 4, S 512,
    T 256)."""
    ws = dt.Schedule(warp_specialize=True)
    for dtype in (torch.float16, torch.bfloat16):
        for D in (64, 128):
            for (B, H, G, S) in ((3, 6, 2, 256), (2, 32, 8, 1024), (3, 5, 2, 256)):
                rep = 3 if H == 5 else H // G
                S_, D_ = (37, 16) if dry else (S, D)
                if dry and H == 32:   # (B2 H32 G8 on the interpreter: 4x the programs of B1 H8 G2, the same rep 4)
                    B, H, G = 1, 8, 2
                q = rnd(B, H, S_, D_, dtype=dtype)
                k, v = (rnd(B, G, S_, D_, dtype=dtype) for _ in range(2))
                alg = gqa_short if H % G else gqa_attention
                case(f"gluon {alg.name} B{B} H{H} G{G} rep{rep} S{S_} D{D_}", alg,
                     (q, k, v, D_ ** -0.5, rep), ws, dtype=dtype, gluon=not dry)
            q = rnd(2, 8, 512 if not dry else 37, D if not dry else 16, dtype=dtype)
            k, v = (rnd(2, 2, 256 if not dry else 29, D if not dry else 16, dtype=dtype) for _ in range(2))
            case(f"gluon gqa_causal4 B2 H8 G2 S{q.shape[2]} T{k.shape[2]} D{q.shape[3]}", gqa_causal4,
                 (q, k, v, q.shape[3] ** -0.5), ws, dtype=dtype, gluon=not dry)


def finish(a, rows) -> int:
    """Write gpu_check.json and gpu_check.md under ``a.out``; 1 when a case is not ok."""
    os.makedirs(a.out, exist_ok=True)
    meta = dict(gpu=torch.cuda.get_device_name() if not a.dry_run else "cpu (dry run)", torch=torch.__version__,
                triton=__import__("triton").__version__, date=time.strftime("%Y-%m-%dT%H:%M:%S"))
    with open(os.path.join(a.out, "gpu_check.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    bad = [r for r in rows if r["status"] != "ok"]
    lines = [f"# Correctness on the GPU: {meta['gpu']}", "", f"{meta}", "",
             f"{len(rows)} cases, {len(rows) - len(bad)} ok, {len(bad)} not ok. Reference: `alg.reference` in float64 on the CPU "
             "(gradients: torch autograd in float64). Tolerance: relative norm error 1e-4 fp32, 1e-2 fp16, 2e-2 bf16.", "",
             "| case | dtype | schedule | rel err | status | note |", "|---|---|---|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['dtype']} | {r['schedule'][:80]} | {r['rel_err']:.1e} | {r['status']} | {r['note']} |")
    with open(os.path.join(a.out, "gpu_check.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(rows)} cases, {len(bad)} not ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
