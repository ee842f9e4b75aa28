"""The storage dtype of each intermediate buffer (a materialised reduction), decided per buffer.

Buffers are fp32 by default (float64 in a float64 call, int64 for an arg-reduction's indices).
One kind is narrowed: in a call whose inputs and outputs are all one 16-bit dtype, a
materialised *contraction* (a sum of products, the GEMM of a chain such as ``softmax(X @ W.T)``)
whose factors read only tensors of that dtype is stored in it (also when the buffer holds the
GEMM's epilogue over tensors of that dtype, :mod:`dtriton.plan.epilogues`), as torch stores a Linear's output
before the next operator reads it. The buffer holds an activation-sized tile (rows x columns),
so this halves the bytes the chain writes and reads back; its value is rounded once to the
precision the result is delivered in anyway (relative 2**-11 for fp16, 2**-8 for bf16), and
the consumers compute in fp32 from there.

Everything else stays fp32, with its reason: statistics (sums of one tensor, means, max/min,
sums of squares: their rounding would compound in what is derived from them), split reductions
(fp32 atomics, and per-split partials combined later), buffers of a call with an fp32 (or
mixed) input or output, and contractions that read a materialised buffer or another dtype.
"""

from __future__ import annotations

from typing import Mapping

import torch

from ..ir import Algorithm, Load, Reduce, contractions, walk
from .kernel import Program

__all__ = ["NARROW_DTYPES", "narrow_dtype", "plan_buffers", "plan_int_buffers"]

#: the 16-bit dtypes a buffer may be stored in
NARROW_DTYPES = ("float16", "bfloat16")


def narrow_dtype(dtypes: Mapping[str, torch.dtype], out_dtypes: Mapping[str, torch.dtype]) -> str | None:
    """The 16-bit dtype of a call whose floating inputs and every output share it ("float16",
    "bfloat16"), else None (integer inputs such as gather indices do not count)."""
    fl = {d for d in dtypes.values() if d.is_floating_point} | set(out_dtypes.values())
    if len(fl) != 1:
        return None
    name = str(next(iter(fl))).replace("torch.", "")
    return name if name in NARROW_DTYPES else None


def _reads_only(e, dtypes: Mapping[str, torch.dtype], dtype: str) -> bool:
    """Every tensor the value ``e`` reads is of ``dtype`` and no reduction is inside it (index
    expressions such as ``W[labels[i], k]`` are not values: not visited)."""
    want = getattr(torch, dtype)
    seen = False
    for n in walk([e], stop=lambda x: isinstance(x, (Load, Reduce))):
        if isinstance(n, Reduce):
            return False
        if isinstance(n, Load):
            if dtypes[n.tensor.name] != want:
                return False
            seen = True
    return seen


def _stored_gemm(e, gemms, dtypes: Mapping[str, torch.dtype], dtype: str) -> bool:
    """``e`` (a buffer's stored value) is a contraction of ``dtype`` tensors, or an elementwise
    expression of such contractions (their epilogue, :mod:`dtriton.plan.epilogues`: SwiGLU's
    ``silu(X @ W.T) * (X @ W3.T)``) over ``dtype`` tensors."""
    rs = [n for n in walk([e], stop=lambda x: isinstance(x, Reduce)) if isinstance(n, Reduce)]
    if not rs or any(r.name not in gemms or not _reads_only(r.x, dtypes, dtype) for r in rs):
        return False
    return e is rs[0] or all(dtypes[n.tensor.name] == getattr(torch, dtype)
                             for n in walk([e], stop=lambda x: isinstance(x, (Load, Reduce))) if isinstance(n, Load))


def plan_buffers(prog: Program, alg: Algorithm, dtypes: Mapping[str, torch.dtype],
                 out_dtypes: Mapping[str, torch.dtype]) -> dict[str, str]:
    """Decide the storage dtype of every buffer of ``prog`` (in place: ``BufferSpec.dtype``,
    ``BufferSpec.reason`` and the writing ``StoreSpec.dtype``). ``dtypes``: the call's input
    tensors' dtypes; ``out_dtypes``: each output's. Returns buffer name -> the reason of each
    narrowed buffer (empty when none is)."""
    dtype = narrow_dtype(dtypes, out_dtypes)
    if dtype is None:
        return {}
    gemms = contractions(alg)
    out: dict[str, str] = {}
    for k in prog.kernels:
        for st in k.stores:
            b = prog.buffers.get(st.target)
            r = st.expr
            if b is None or b.dtype != "float32" or b.zero or b.partials or not _stored_gemm(r, gemms, dtypes, dtype):
                continue
            b.dtype = st.dtype = dtype
            why = (f"a contraction of {dtype} tensors in a call whose outputs are {dtype} (rounded once, as torch "
                   "stores a Linear's output)")
            b.reason = f"{why}; {b.reason}" if b.reason else why
            out[b.name] = b.reason
    return out


def plan_int_buffers(prog: Program, ints: frozenset[int]) -> None:
    """Store the buffer (split partials, atomic sums) of every materialised reduction of ``ints``
    (the ids :func:`~dtriton.ir.integer_reductions` names: integer sums, products and extrema)
    in int64, in place: their values are exact integers, which fp32 or fp64 would round."""
    for k in prog.kernels:
        for st in k.stores:
            b = prog.buffers.get(st.target)
            if b is not None and isinstance(st.expr, Reduce) and st.expr.uid in ints:
                b.dtype = "int64"
                b.reason = "an integer sum, product or extremum (exact in int64)"
