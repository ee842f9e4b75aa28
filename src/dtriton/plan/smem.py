"""Shared memory a planned kernel holds on sm_90 (Triton 3.6), estimated from its plan (issue 15).

A kernel holds in shared memory, as Triton 3.6 compiles it for sm_90 (checked against
``metadata.shared`` and the ``ttg.local_alloc`` ops of the compiled kernels by
``bench/smem_check.py``):

- **the rings of each pipelined loop**: a loop with a contraction (pipelined by the launch's
  ``num_stages``, S) or a loop the plan marks ``tl.range(num_stages=S)`` (:func:`~dtriton.plan.passes.pipelined`)
  prefetches every tile it loads (inputs and buffers, in their storage dtype) into a ring in shared
  memory: S slots for a 16-bit (or 8-bit) tile a dot reads as it is loaded (the dot reads its
  operand there), S - 1 for any other tile (it is copied to registers). A loop without either keeps
  its loads in registers. Loops run one after the other, so the kernel needs its largest loop's rings;
- **the dot operands that are not such a ring slot**, once each: a tile loaded outside the loop (the
  query tile of attention), a 16-bit operand computed in registers, and an fp32 operand's split
  pieces (``bf16x6``: three bf16 copies; ``tf32x3``: two fp32 copies; one copy otherwise);
- **the tile staged for a TMA store** (one piece of the output tile);
- barriers and the scratch of layout conversions and cross-warp reductions
  (:data:`SCRATCH_BYTES`).

Counted as all live at once, except that a kernel that is not persistent stages its stores after
its loops, in their space (an upper estimate: Triton also reuses the rings' space for other
epilogue values). The figures, estimate against compiled, are in ``bench/smem_check.py``'s table
(every estimate at or above the compiled figure; 1.0-1.6x for kernels with dots). The estimate is
what the runtime shrinks a default schedule by before its first launch (``Kernel._fitted``: after
the rough :func:`~dtriton.schedule.fits_smem`, :func:`program_fits`), and what exploration and the
tuned kernel's revalidation prune schedules by, after code generation.
"""

from __future__ import annotations

import torch

from ..ir import Expr, Load, Reduce, walk
from .graph import need_axes
from .kernel import BufferSpec, DotPlan, KernelPlan, PassPlan, Program

__all__ = ["SCRATCH_BYTES", "SCRATCH_PER_WARP", "kernel_smem", "program_fits", "program_smem", "smem_parts"]

#: Bytes for barriers and the scratch of layout conversions and cross-warp reductions in a kernel
#: with a dot or a pipelined loop (the GEMM of ``linear_relu`` 4096^3 fp16, 128x256x64 at 4 stages
#: with a TMA store: 230,432 bytes compiled, 229,376 of rings and staging)
SCRATCH_BYTES = 2048

#: Bytes per warp of a kernel without dots or pipelined loops: the scratch of its cross-warp
#: reductions and layout conversions, up to 16 four-byte values a thread (compiled: 32 to 512 bytes
#: for softmax, layer norm, batch norm and attention's row sums; 8192 at 8 warps for the GQA
#: backward's sum over the heads of a group, converting a 128 x 8 x 64 fp16 tile for its store)
SCRATCH_PER_WARP = 2048

#: bytes per element of an fp32 dot operand's copies for the dot, by ``input_precision``
_FP32_PIECES = {"bf16x6": 6, "bf16x3": 4, "tf32x3": 8}


def _itemsize(dtype: str | None, default: int = 4) -> int:
    """Bytes of an element of the dtype named ``dtype`` ("float32", "bfloat16"; None: ``default``)."""
    return default if dtype is None else getattr(torch, dtype).itemsize


def _tile(k: KernelPlan, axes) -> int:
    """Elements of a tile over ``axes`` in kernel ``k`` (a flat axis's members counted once, scalar
    axes as 1)."""
    n = 1
    for a in dict.fromkeys(k.flat_of(a) for a in axes):
        p = k.axes.get(a)
        if p is not None and not k.scalar_axis(a):
            n *= p.block
    return n


def _read_bytes(k: KernelPlan, n, memo: dict) -> int:
    """Bytes of one tile of load or buffer read ``n`` in kernel ``k`` (a :class:`BufferSpec`: the maxima
    rescaling a buffer's split partials, read twice per partial: for their maximum and as weights)."""
    if isinstance(n, BufferSpec):
        return _tile(k, n.axes) * _itemsize(n.dtype) * max(n.partials, 1) * 2
    axes = need_axes(n, k.materialized, frozenset(), memo)
    if isinstance(n, Load):
        size = k.dtypes[n.tensor.name].itemsize if n.tensor.name in k.dtypes else 4
        return _tile(k, axes) * size
    spec = k.materialized[n.uid]   # a buffer: each split partial (and state value) is a tile of its own
    return _tile(k, axes) * _itemsize(spec.dtype) * max(spec.partials, 1) * max(spec.state, 1)


def _loop_reads(k: KernelPlan, p: PassPlan, nodes: dict[int, Reduce], memo: dict) -> list[Expr]:
    """The loads and buffer reads inside the loop of pass ``p`` (placed by a loop axis of it, or of a
    loop nested in it), each once."""
    looped = frozenset(p.loop_axes) | {m for a in p.loop_axes for m in k.flat.get(a, ())}
    bound = set(k.grid) | {m for g in k.grid for m in k.flat.get(g, ())} | {a for a, q in k.axes.items() if q.role == "whole"}
    stack = [(nodes[r].x, looped) for r in p.reductions if r in nodes]
    seen, out = set(), {}
    while stack:
        n, inner = stack.pop()
        if (n.uid, inner) in seen:
            continue
        seen.add((n.uid, inner))
        if isinstance(n, Reduce) and n.uid in k.materialized:
            if set(n.axes) & inner:
                out[n.uid] = n
                spec = k.materialized[n.uid]
                scale = next((b for b in k.materialized.values() if b.name == spec.rescale), None)
                if scale is not None and set(scale.axes) & inner:   # its split partials' maxima, read twice each
                    out[-n.uid] = scale
            continue
        if isinstance(n, Reduce):   # computed inside this loop only when placed by one of its axes
            if need_axes(n, k.materialized, frozenset(), memo) & inner:
                stack.append((n.x, inner | {a for a in n.over if a not in bound}))
            continue
        if isinstance(n, Load) and need_axes(n, k.materialized, frozenset(), memo) & inner:
            out[n.uid] = n
        stack.extend((c, inner) for c in n.children())
    return list(out.values())


def _direct(d: DotPlan) -> set[int]:
    """Ids of the loads dot ``d`` reads as loaded, in a 16-bit or 8-bit dtype (the dot reads them in
    their ring slot)."""
    if d.operand_dtype is None:
        return set()
    return {side[0].uid for side, raw in ((d.left, d.raw_left), (d.right, d.raw_right)) if raw and side}


def _operand_bytes(k: KernelPlan, d: DotPlan, ringed: set[int], memo: dict) -> int:
    """Bytes of the copies dot ``d`` reads its operands from, beside the rings (see the module)."""
    bk = k.axes[d.k].block if d.k in k.axes else 1
    total = 0
    for side, raw, elems in ((d.left, d.raw_left, k.axes[d.m].block * bk), (d.right, d.raw_right, bk * k.axes[d.n].block)):
        if d.operand_dtype is None:   # fp32: its pieces for the dot
            total += elems * _FP32_PIECES.get(d.precision or "", 4)
        elif not raw:                  # computed in registers, stored for the dot
            total += elems * _itemsize(d.operand_dtype)
        elif side and side[0].uid not in ringed:   # loaded outside the loop
            total += _read_bytes(k, side[0], memo)
    return total


def smem_parts(k: KernelPlan) -> dict[str, int]:
    """The terms of :func:`kernel_smem` for kernel ``k``: ``loop <axes>`` (each pipelined loop's rings),
    ``operands`` (the dot operands read from copies), ``staging`` (TMA store tiles)."""
    nodes = {}
    for st in k.stores:
        for n in walk([st.expr], stop=lambda x: isinstance(x, Reduce) and x.uid in k.materialized):
            if isinstance(n, Reduce) and n.uid not in k.materialized:
                nodes[n.uid] = n
    memo: dict = {}
    direct = set().union(*(_direct(d) for d in k.dots.values())) if k.dots else set()
    parts: dict[str, int] = {}
    ringed: set[int] = set()
    for p in list(k.passes) + list(k.single.values()):
        if not p.loop_axes:
            continue
        has_dot = any(r in k.dots for r in p.reductions) or any(r in k.dots for r in _nested(p, nodes, k))
        stages = p.pipeline or (k.num_stages if has_dot else 0)
        if stages < 2 and not has_dot:
            continue
        reads = _loop_reads(k, p, nodes, memo)
        ringed |= {n.uid for n in reads if isinstance(n, Expr)}
        key = f"loop {','.join(p.loop_axes)}"
        parts[key] = max(parts.get(key, 0), sum(
            _read_bytes(k, n, memo) * (max(stages, 1) if isinstance(n, Expr) and n.uid in direct else max(stages - 1, 1))
            for n in reads))
    parts["operands"] = sum(_operand_bytes(k, d, ringed, memo) for d in k.dots.values())
    staging = 0
    for st in k.stores:
        acc = k.access.get((st.target, tuple(st.layout)))
        if acc is not None and acc.kind == "tma":
            n = 1
            for b in acc.box:
                n *= b
            staging += n * (k.out_dtypes[st.target].itemsize if st.target in k.out_dtypes else _itemsize(st.dtype))
    parts["staging"] = staging
    return parts


def kernel_smem(k: KernelPlan) -> int:
    """Bytes of shared memory kernel ``k`` holds on sm_90, an upper estimate (see the module): its
    largest pipelined loop's rings, plus the dot operands read from copies, the TMA store staging
    and :data:`SCRATCH_BYTES`; :data:`SCRATCH_PER_WARP` a warp for a kernel without dots or
    pipelined loops; 0 for a Gluon kernel (which sizes its own buffers)."""
    if k.gluon is not None:
        return 0
    parts = smem_parts(k)
    loops = [v for n, v in parts.items() if n.startswith("loop ")]
    if not k.dots and not any(loops):
        return SCRATCH_PER_WARP * k.num_warps
    loop = max(loops, default=0)
    # a persistent kernel stages its stores inside the tile loop; another one after its loops, in their space
    body = loop + parts["staging"] if k.persistent else max(loop, parts["staging"])
    return body + parts["operands"] + SCRATCH_BYTES


def _nested(p: PassPlan, nodes: dict[int, Reduce], k: KernelPlan) -> list[int]:
    """Ids of the fused reductions computed inside the loop of pass ``p`` (nested in its reductions)."""
    out = []
    for r in p.reductions:
        if r not in nodes:
            continue
        out += [n.uid for n in walk([nodes[r].x], stop=lambda x: isinstance(x, Reduce) and x.uid in k.materialized)
                if isinstance(n, Reduce) and n.uid != r and n.uid not in k.materialized]
    return out


def program_smem(prog: Program) -> dict[str, int]:
    """:func:`kernel_smem` of every kernel of ``prog``, by kernel name."""
    return {k.name: kernel_smem(k) for k in prog.kernels}


def program_fits(prog: Program, limit: int) -> str | None:
    """None when every kernel of ``prog`` holds at most ``limit`` bytes of shared memory
    (:func:`kernel_smem`), else a sentence naming the largest kernel and its estimate."""
    est = program_smem(prog)
    if not est:
        return None
    name = max(est, key=est.get)
    if est[name] <= limit:
        return None
    return (f"kernel {name} holds an estimated {est[name] // 1024} KB of shared memory (pipelined loads, dot operands, "
            f"staging) > {limit // 1024} KB")
