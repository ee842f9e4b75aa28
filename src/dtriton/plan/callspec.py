"""CallSpec: the facts of one call signature that a compiled kernel is specialised on.

Computed once per call signature (the runtime caches plans by ``(schedule, CallSpec)``): which
power of two each axis size is a multiple of and its size bucket, the dtypes, whether offsets
need 64 bits, the backend (interpreter or not), which tensors a TMA descriptor can address, and
the divisibility hints of the integer arguments. Two calls with equal CallSpecs run the same
kernels; a call whose hints or TMA facts differ gets its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..ir import Algorithm, Binding, InputTensor, Load, Reduce, ScalarParam, contractions, kernel_reads, unit_dim, walk
from .access import unit_last
from .gluon_attention import match_attention
from .gluon_attention_bwd import match_attention_bwd
from .gluon_conv import match_conv2d
from .gluon_depthwise import match_depthwise
from .kernel import next_pow2

__all__ = ["CallSpec", "I32_MAX", "call_spec", "max_offset", "tma_addressable", "window_index_values"]

I32_MAX = 2**31 - 1
SMALL_SIZE = 8   # axes up to this size are part of a call's specialisation (CallSpec.small_sizes)
_DIVISORS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class CallSpec:
    """Facts of one call signature.

    facts: per axis ``(name, size bucket, (size % d == 0 for d in 1, 2, ..., 256))``.
    dtypes: ``(tensor parameter, dtype)`` sorted by name. i64: offsets need 64 bits.
    interpret: the kernels run on Triton's interpreter. tma_ok: tensors (inputs and outputs) a TMA
    descriptor can address on this call (empty unless the schedule's access is "tma").
    hints: ``(integer argument, power of two it is a multiple of)``; see :func:`divisibility_hints`.
    unit_dims: ``(input tensor, index of its unit-stride dim or -1)`` sorted by name (the operand
    order and precision of fp32 dots depend on it).
    masked_reads: ``(position of the load in alg.nodes, dim, poisoned)`` of the computed indices the
    kernels mask to their dim (not provably inside it on this call), and whether an element outside
    reads NaN (see :func:`~dtriton.ir.kernel_reads`).
    unit_scalars: the integer scalar arguments equal to 1 on this call, sorted (a convolution's
    stride of 1 makes its input's window a plain shift, read in TMA boxes: ``plan.implicit_gemm``).
    small_sizes: ``(axis, size)`` of the axes of at most 8 elements, sorted (a depthwise
    convolution's window loops unroll over them: ``plan.taps``).
    index_values: ``(int scalar argument, value)`` of the arguments read by the computed indices of
    pooling windows (reductions of one load: a stride, a padding), values 0 to 64, sorted (the plan
    prints them as literals and reads a strided window's taps as contiguous runs: ``plan.pairs``).
    arch: the GPU's compute capability as 10 * major + minor (0 on the interpreter). dense: the tensors
    (inputs, outputs) contiguous with a 16-byte aligned base (an output allocated by the runtime is):
    for :mod:`dtriton.plan.gluon_attention`, :mod:`dtriton.plan.gluon_attention_bwd` and
    :mod:`dtriton.plan.gluon_conv`, :mod:`dtriton.plan.gluon_depthwise` (on the GPU), and
    :mod:`dtriton.plan.flat` (a tensor addressed by a flat index)."""
    facts: tuple
    dtypes: tuple
    i64: bool
    interpret: bool
    tma_ok: frozenset
    hints: tuple
    unit_dims: tuple = ()
    masked_reads: tuple = ()
    unit_scalars: tuple = ()
    small_sizes: tuple = ()
    index_values: tuple = ()
    arch: int = 0
    dense: frozenset = frozenset()

    def note(self, alg: Algorithm, tma: bool) -> str:
        """The specialisation note of the generated module's header comment."""
        text = ("Specialisation (axis: size bucket, largest power-of-two divisor up to 256; masks only "
                "where a tile does not divide): " + ", ".join(
                    f"{a}: <={f[1]}, /{max(t for t, ok in zip(_DIVISORS, f[2]) if ok)}"
                    for a, f in zip(alg.axis_names, self.facts)))
        if tma:
            text += ("\nTMA-addressable on this call: " + (", ".join(sorted(self.tma_ok)) or "none") +
                     " (the others' strides or alignment do not suit TMA: pointers; vectors keep pointers too)")
        return text


def call_spec(alg: Algorithm, b: Binding, args: Sequence[Any], interpret: bool, out=None,
              tma_ok: frozenset = frozenset(), flat: bool = False) -> CallSpec:
    """The :class:`CallSpec` of a call with binding ``b`` (``tma_ok`` from :func:`tma_addressable`
    when the schedule's access is "tma", else empty). The :attr:`CallSpec.dense` facts only where a
    plan reads them: a call that may run a Gluon kernel, or ``flat`` (the schedule asks for
    ``flat_axes``); elsewhere a view with other strides reuses the same compiled kernel."""
    facts = []
    for a in alg.axis_names:
        n = b.axis_sizes[a]
        facts.append((a, next_pow2(n) if n <= 1 << 20 else n, tuple(n % t == 0 for t in _DIVISORS)))
    i64 = any(isinstance(x, torch.Tensor) and max_offset(x) > I32_MAX for x in args)
    if not i64:
        i64 = any(n > I32_MAX // 2 for n in b.axis_sizes.values())
    masked = ()
    if b.reads:   # computed indices: their arithmetic needs 64 bits where a value passes 2**31
        masked = kernel_reads(alg, b.axis_sizes, b.sizes)
        i64 = i64 or b.index_magnitude > I32_MAX   # (Binding.make bounded it with the call's int arguments)
    ones = tuple(sorted(p.name for p, a in zip(alg.params, args)
                        if isinstance(p, ScalarParam) and p.pytype is int and not isinstance(a, bool) and a == 1))
    values = window_index_values(alg, args) if b.reads else ()
    return CallSpec(tuple(facts), tuple(sorted(b.dtypes.items())), i64, interpret, tma_ok,
                    divisibility_hints(alg, b, args, out),
                    tuple(sorted(b.unit_dims.items())) if contractions(alg) or tma_ok or values else (), masked, ones,
                    tuple(sorted((a, n) for a, n in b.axis_sizes.items() if n <= SMALL_SIZE)), values,
                    _arch(b.device, interpret),
                    _dense(alg, args, out) if flat or (not interpret and _gluon_candidate(alg)) else frozenset())


def _gluon_candidate(alg: Algorithm) -> bool:
    """Whether ``alg`` is an attention forward, a derived attention backward or a channels-last 2-d
    convolution, depthwise or not (the calls :mod:`dtriton.plan.gluon_attention`,
    :mod:`dtriton.plan.gluon_attention_bwd`, :mod:`dtriton.plan.gluon_conv` and
    :mod:`dtriton.plan.gluon_depthwise` may plan as Gluon kernels, which need the dense facts)."""
    return (match_attention(alg) is not None or match_attention_bwd(alg)[0] is not None
            or match_conv2d(alg)[0] is not None or match_depthwise(alg)[0] is not None)


def _arch(device: torch.device, interpret: bool) -> int:
    """The compute capability of ``device`` as 10 * major + minor (0: the interpreter, no CUDA device, or
    a ROCm one: its "capability" is AMD's architecture number, which no NVIDIA-only choice may read)."""
    if interpret or device.type != "cuda" or not torch.cuda.is_available() or torch.version.hip is not None:
        return 0
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def _dense(alg: Algorithm, args: Sequence[Any], out=None) -> frozenset:
    """The tensors of a call (inputs, and outputs: allocated contiguous unless ``out=`` is given)
    that are contiguous with a 16-byte aligned base."""
    def ok(t) -> bool:
        return isinstance(t, torch.Tensor) and t.is_contiguous() and t.data_ptr() % 16 == 0
    names = {p.name for p, a in zip(alg.params, args) if isinstance(p, InputTensor) and ok(a)}
    names |= {o.name for k, o in enumerate(alg.outputs) if _given_out(out, k) is None or ok(_given_out(out, k))}
    return frozenset(names)


def window_index_values(alg: Algorithm, args: Sequence[Any]) -> tuple:
    """``(int scalar argument, value)``, sorted, of the arguments read by the computed indices of the
    pooling windows of ``alg`` (reductions whose body reads one load and no other reduction: a max
    pool's ``X.pad(-inf)[n, h * s + r - p, w * s + q - p]``) with values from 0 to 64 on this call
    (:attr:`CallSpec.index_values`)."""
    given = {p.name: a for p, a in zip(alg.params, args)
             if isinstance(p, ScalarParam) and p.pytype is int and isinstance(a, int) and not isinstance(a, bool)}
    found = {}
    for r in walk([o.expr for o in alg.outputs]):
        if not isinstance(r, Reduce):
            continue
        inner = list(walk([r.x]))
        loads = [n for n in inner if isinstance(n, Load)]
        if len(loads) != 1 or any(isinstance(n, Reduce) for n in inner):
            continue
        for e in loads[0].index:
            for s in walk([e]):
                if isinstance(s, ScalarParam) and s.name in given and 0 <= given[s.name] <= 64:
                    found[s.name] = given[s.name]
    return tuple(sorted(found.items()))


def max_offset(t: torch.Tensor) -> int:
    """The largest element offset ``t`` can address (0 for an empty tensor)."""
    if t.numel() == 0:
        return 0
    return sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride())) + t.storage_offset()


def _given_out(out, k: int):
    """The ``out=`` tensor given for output ``k`` (None when it is allocated by the runtime)."""
    return None if out is None else (out[k] if isinstance(out, (tuple, list)) else out)


def tma_addressable(alg: Algorithm, b: Binding, args: Sequence[Any], out=None, views: bool = True) -> frozenset:
    """Tensors of this call a TMA descriptor can address (on the view with the unit-stride dim
    last, :func:`~dtriton.plan.access.unit_last`): at most 5 dims, last stride 1, every
    other stride a positive multiple of 16 bytes (no stride-0 expanded dims), base address
    16-byte aligned (CUDA's ``cuTensorMapEncodeTiled`` rules), not empty, not bool (Triton counts
    bool elements as 1 bit). Outputs are allocated contiguous unless ``out=`` is given. ``views``
    False: inputs in their own dim order only (no transposed view)."""
    def ok(t: torch.Tensor, view: bool = False) -> bool:
        perm = unit_last(t.dim(), unit_dim(t)) if view else None
        t = t.permute(perm) if perm else t   # a transposed input: the view with its unit-stride dim last
        es = t.element_size()
        return (1 <= t.dim() <= 5 and t.dtype != torch.bool and t.numel() > 0 and t.stride(-1) == 1
                and t.data_ptr() % 16 == 0 and all((st * es) % 16 == 0 for st in t.stride()[:-1])
                and all(st > 0 for st, n in zip(t.stride(), t.shape) if n > 1))
    names = set()
    for p, a in zip(alg.params, args):
        if isinstance(p, InputTensor) and isinstance(a, torch.Tensor) and ok(a, view=views):
            names.add(p.name)
    for k, (o, odt) in enumerate(zip(alg.outputs, b.out_dtypes)):
        given = _given_out(out, k)
        if given is not None:
            good = ok(given)
        else:
            shape = [b.axis_sizes[a] for a in o.layout]
            es = torch.empty((), dtype=odt).element_size()
            row = 1
            good = 1 <= len(shape) <= 5 and all(n > 0 for n in shape) and odt != torch.bool
            for n in reversed(shape[1:]):
                row *= n
                good = good and (row * es) % 16 == 0
        if good:
            names.add(o.name)
    return frozenset(names)


def pow2_divisor(n: int, cap: int = 8) -> int:
    """Largest power of two up to ``cap`` that divides ``n`` (1 for 0 and odd numbers)."""
    d = 1
    while n and d < cap and n % (2 * d) == 0:
        d *= 2
    return d


def divisibility_hints(alg: Algorithm, b: Binding, args: Sequence[Any], out=None) -> tuple:
    """``(argument, divisor)`` for the kernel's integer arguments (axis sizes ``size_<axis>``,
    strides ``<tensor>_s<dim>`` of inputs and outputs) that are multiples of 2, 4 or 8, but not of
    16, on this call.

    Triton specialises an integer argument only on "multiple of 16" (and "equals 1"), so a row
    stride or size of 1000 looks unaligned: masked loads of such rows cannot use 16-byte vectors.
    Codegen re-states each hinted argument as ``x // d * d`` (the same value), from which Triton's
    alignment analysis derives the divisibility. The H200 probe of session 4: a 1000^3 fp16 matmul
    with pointer loads took 21.5 us, with TMA (which needs no such analysis) 9.6 us."""
    hints = []
    for a in alg.axis_names:
        d = pow2_divisor(b.axis_sizes[a]) if b.axis_sizes[a] % 16 else 1
        if d > 1:
            hints.append((f"size_{a}", d))
    tens = [(p.name, a) for p, a in zip(alg.params, args) if isinstance(p, InputTensor) and isinstance(a, torch.Tensor)]
    for k, o in enumerate(alg.outputs):
        given = _given_out(out, k)
        strides = given.stride() if given is not None else torch.empty([b.axis_sizes[a] for a in o.layout], device="meta").stride()
        tens.append((o.name, strides))
    for name, t in tens:
        for d_, st in enumerate(t.stride() if isinstance(t, torch.Tensor) else t):
            d = pow2_divisor(st) if st % 16 else 1
            if d > 1:
                hints.append((f"{name}_s{d_}", d))
    return tuple(hints)
