"""Checking a call's arguments: named arguments, ``out=`` normalisation and memory overlap,
in-place calls, gather indices, and the key of a call signature (the fast launch path's)."""

from __future__ import annotations

import math
import numbers
from typing import Callable

import torch
import torch.autograd.forward_ad as _fwad

from ..errors import DTypeError, ShapeError
from ..ir import Algorithm, Axis, InputTensor, Load, Reduce, merge_named, numpy_item, topo_order, walk
from ..plan.callspec import max_offset
from ..schedule import Schedule

__all__ = ["call_key", "check_given_out", "check_out_memory", "inplace_problem", "merge_named",
           "normalise_out", "overlap", "plain_numbers", "scalar_key", "signature_key", "signature_key_for", "spec_key",
           "transforms_active", "refuse_transforms"]


def span(t: torch.Tensor) -> tuple[int, int]:
    """Byte range [lo, hi) of the memory ``t`` can touch (non-negative strides)."""
    lo = t.data_ptr()
    return lo, lo + (max_offset(t) - t.storage_offset() + 1) * t.element_size()


#: the most elements (of both tensors) :func:`overlap` lists to decide exactly; beyond, two views whose
#: byte ranges intersect and whose strides do not keep them apart count as overlapping
EXACT_OVERLAP_LIMIT = 1 << 22


def overlap(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Two non-empty tensors on one device share a byte. Exact for strided views: their byte ranges
    intersect (the fast test, and the answer for two contiguous tensors), and an element of one
    meets an element of the other: never when the element starts of both lie in residues modulo
    the gcd of their strides that keep them apart (interleaved views, ``buf[:, 0::2]`` and
    ``buf[:, 1::2]``), else as the listed element addresses say (up to :data:`EXACT_OVERLAP_LIMIT`
    elements together; beyond, True)."""
    if not x.numel() or not y.numel() or x.device != y.device:
        return False
    (xlo, xhi), (ylo, yhi) = span(x), span(y)
    if not (xlo < yhi and ylo < xhi):
        return False
    if x.is_contiguous() and y.is_contiguous():
        return True
    sx, sy = x.element_size(), y.element_size()
    g = 0
    for t in (x, y):
        for st, n in zip(t.stride(), t.shape):
            if n > 1:
                g = math.gcd(g, st * t.element_size())
    if g and (y.data_ptr() - x.data_ptr()) % g >= sx and (x.data_ptr() - y.data_ptr()) % g >= sy:
        return False   # x's elements start at x.data_ptr() + k * g, y's at y.data_ptr() + k' * g
    if x.numel() + y.numel() > EXACT_OVERLAP_LIMIT:
        return True
    ax, ay = element_addresses(x), element_addresses(y)
    first = torch.searchsorted(ay, ax - sy, right=True)   # per element of x, the first of y starting after a - sy
    inside = first < ay.numel()
    return bool((ay[first[inside]] < ax[inside] + sx).any())


def element_addresses(t: torch.Tensor) -> torch.Tensor:
    """The sorted byte addresses where the elements of ``t`` start (int64, on the CPU; repeated for
    a stride-0 dim)."""
    offs = torch.zeros((), dtype=torch.int64)
    for n, st in zip(t.shape, t.stride()):
        offs = offs.unsqueeze(-1) + torch.arange(n, dtype=torch.int64) * st
    return torch.sort(offs.reshape(-1) * t.element_size() + t.data_ptr()).values


def check_out_memory(name: str, out: torch.Tensor, inputs: dict[str, torch.Tensor],
                     inplace_why: Callable[[str], str | None] | None = None) -> list[str]:
    """Refuse an ``out=`` tensor whose elements share memory (a stride-0 expanded dim), or that
    overlaps an input without being exactly that input: programs would read values other
    programs already overwrote (torch refuses these too). Returns the names of the inputs
    ``out`` is exactly (an in-place call, ``out=X``, possibly for several parameters at once;
    :func:`inplace_problem` decides for each whether the algorithm allows it; ``inplace_why``, that
    function for this call, keeps the overlap message from suggesting an in-place call it refuses)."""
    found: list[str] = []
    if out.numel() == 0:
        return found
    if any(st == 0 for st, n in zip(out.stride(), out.shape) if n > 1):
        raise ShapeError(f"out= for output {name!r} has a stride-0 (expanded) dim (strides {tuple(out.stride())}): several "
                         "elements would be written to one memory location; pass a tensor with distinct elements")
    for pname, x in inputs.items():
        if not isinstance(x, torch.Tensor) or x.numel() == 0 or x.device != out.device:
            continue
        same = (x.data_ptr() == out.data_ptr() and x.shape == out.shape and x.stride() == out.stride()
                and x.dtype == out.dtype)
        if same:
            found.append(pname)
        elif overlap(x, out):
            why = inplace_why(pname) if inplace_why is not None else None
            alt = (f" (out={pname} itself, an in-place call, is refused too: {why})" if why else
                   f" (or pass out={pname} itself for an in-place call)")
            raise ShapeError(f"out= for output {name!r} overlaps input {pname!r} without being that same tensor: programs "
                             f"would read values already overwritten; write into a separate tensor{alt}")
    return found


def check_given_out(alg: Algorithm, sched: Schedule, name: str, given: torch.Tensor, shape: list[int],
                    dtype: torch.dtype, device: torch.device, inputs: dict[str, torch.Tensor],
                    materialised: frozenset[int] = frozenset()) -> None:
    """Refuse an ``out=`` tensor for output ``name`` of the wrong shape (:class:`ShapeError`), dtype
    (:class:`DTypeError`) or device, one
    overlapping an input without being it, or an in-place call (``out=X``) the algorithm and
    schedule cannot do (:func:`inplace_problem`; ``materialised``: ids of the reductions earlier
    kernels write to buffers)."""
    if tuple(given.shape) != tuple(shape):
        raise ShapeError(f"out= for output {name!r} must have shape {tuple(shape)} and dtype {dtype}, "
                         f"got {tuple(given.shape)} {given.dtype}")
    if given.dtype != dtype:
        raise DTypeError(f"out= for output {name!r} has dtype {given.dtype}, but {alg.name}'s output {name!r} is "
                         f"{dtype} for these inputs (torch's result dtype); pass an out= tensor of dtype {dtype} "
                         f"(torch.empty({tuple(shape)}, dtype={dtype})), or, for a {given.dtype} result, cast in the "
                         f"algorithm: dt.cast(expr, {given.dtype})[...]")
    if given.device != device:
        raise ShapeError(f"out= for output {name!r} is on {given.device} but the call runs on {device}; "
                         f"pass an out= tensor on {device}")
    for same in check_out_memory(name, given, inputs, lambda x: inplace_problem(alg, sched, x, materialised)):
        why = inplace_problem(alg, sched, same, materialised)
        if why:
            raise ShapeError(f"out= for output {name!r} is input {same!r} itself (an in-place call), which this "
                             f"algorithm and schedule cannot do: {why}; pass a separate out= tensor")


def normalise_out(alg: Algorithm, out) -> tuple[torch.Tensor, ...]:
    """``out=`` as one tensor per output: a tensor (single-output algorithms) or a tuple/list with
    one tensor per output, in the order the algorithm returns them. Raises :class:`ShapeError`
    for a wrong count, a non-tensor, or two outputs that share memory (each would overwrite the
    other's values)."""
    names = [o.name for o in alg.outputs]
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != len(names):
        raise ShapeError(f"out= must give {len(names)} tensor(s), one per output ({', '.join(names)}), "
                         f"got {len(outs)}" + ("; pass a tuple" if len(names) > 1 else ""))
    for n, t in zip(names, outs):
        if not isinstance(t, torch.Tensor):
            raise ShapeError(f"out= for output {n!r} must be a torch.Tensor, got {type(t).__name__}")
        if t.requires_grad and torch.is_grad_enabled():
            raise ShapeError(f"out= for output {n!r} requires grad: writing into it would overwrite a tensor autograd "
                             f"tracks (torch refuses this too); pass a tensor that does not require grad, or "
                             f"call under torch.no_grad()")
    for a in range(len(outs)):
        for c in range(a + 1, len(outs)):
            if overlap(outs[a], outs[c]):
                raise ShapeError(f"out= for outputs {names[a]!r} and {names[c]!r} share memory; pass a separate "
                                 f"tensor for each output")
    return outs


def inplace_problem(alg: Algorithm, sched: Schedule, x_name: str,
                    materialised: frozenset[int] = frozenset()) -> str | None:
    """Why writing the output over input ``x_name`` (``out=X``) could read values already
    overwritten, or None when it cannot: a single output that reads ``X`` only at its own
    element (``X[i, j]`` for ``out[i, j]``), inside reductions over axes that no program of the
    output's grid is tiled along (a row softmax reads its whole row before writing it), and no
    split-K (its atomics zero the output first). A matmul ``out=A`` or a transpose ``out=X``
    would read rows or columns other programs already wrote. Reads inside a reduction in
    ``materialised`` (ids of stages an earlier kernel writes to a buffer) all happen before the
    output's kernel writes, so they never count (``X[i] - mean(X)`` with ``mean0`` materialised)."""
    if len(alg.outputs) != 1:
        return "it has several outputs (a later output's kernel may still read the input)"
    if any(f > 1 for f in sched.split.values()):
        return "the schedule splits a reduction (split-K zeroes or accumulates into the output while it is read)"
    o = alg.outputs[0]
    layout = tuple(o.layout)
    grid = set(sched.grid or ())
    over: dict[int, set] = {}
    here = {n.uid for n in walk([o.expr], stop=lambda n: n.uid in materialised)}
    for n in reversed(topo_order([o.expr])):   # parents first: pass reduction axes down to the loads
        if n.uid not in here or n.uid in materialised:
            continue   # only inside materialised stages: read by an earlier kernel
        inner = over.get(n.uid, set()) | (set(n.over) if isinstance(n, Reduce) else set())
        for c in n.children():
            over[c.uid] = over.get(c.uid, set()) | inner
        if isinstance(n, Load) and n.tensor.name == x_name:
            idx = tuple(e.name if isinstance(e, Axis) else None for e in n.index)
            if idx != layout:
                shown = ", ".join(e if e else "..." for e in idx)
                return (f"it reads {x_name}[{shown}], not only the element it writes "
                        f"({o.name}[{', '.join(layout)}])")
            tiled = over.get(n.uid, set()) & grid
            if tiled:
                return (f"it reduces {x_name} over axis {sorted(tiled)[0]!r}, which is on the grid (other programs "
                        f"write parts of what this one reads)")
    return None


_FUNCTORCH_ACTIVE = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)

#: ``tracing()``: whether ``torch.compile`` (Dynamo) is tracing the code that calls now; a kernel
#: then runs through :func:`outside_graph` (one check per call, before the key)
tracing = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def _outside_graph(call: Callable, args: tuple, named: dict):
    """``call(*args, **named)`` run by Python, not traced."""
    return call(*args, **named)


def _disabled(fn: Callable) -> Callable:
    """``fn`` wrapped by ``torch.compiler.disable``, with the reason ``fullgraph=True`` reports."""
    why = ("a dtriton kernel runs outside torch.compile's graph; dt.as_torch_op(kernel) makes it a torch "
           "custom op that the graph can hold")
    try:
        return torch.compiler.disable(fn, reason=why)
    except TypeError:   # (a torch whose disable takes no reason)
        return torch.compiler.disable(fn)


#: ``outside_graph(call, args, named)``: ``call(*args, **named)`` outside ``torch.compile``'s graph (a
#: graph break: the kernel runs as it runs eagerly, its autograd node included). Dynamo would
#: otherwise trace into the launch path (fake tensors have no data pointers). Under
#: ``fullgraph=True`` torch.compile reports the break; ``dt.as_torch_op`` puts a kernel in the graph.
outside_graph = _disabled(_outside_graph) if hasattr(torch, "compiler") else _outside_graph


def transforms_active() -> bool:
    """Whether a ``torch.func`` transform (grad, vmap, jvp, ...) or a forward-mode AD level
    (``torch.autograd.forward_ad.dual_level``) is active: one check per call, before the key."""
    return getattr(_fwad, "_current_level", -1) >= 0 or _FUNCTORCH_ACTIVE()


def refuse_batched_gradients(name: str, grads=()) -> None:
    """Raise ``NotImplementedError`` in the backward of kernel ``name`` for batched incoming
    gradients (``torch.autograd.functional.jacobian(..., vectorize=True)``, ``torch.autograd.grad(...,
    is_grads_batched=True)``, a ``torch.func`` transform active there), which the derived backward
    kernels cannot take (they have no batching rule). Returns otherwise."""
    def batched(g) -> bool:   # (the legacy vmap's "Batched" key has no Python enum member: read by name)
        return "Batched" in str(torch._C._dispatch_keys(g))
    if _FUNCTORCH_ACTIVE() or any(isinstance(g, torch.Tensor) and batched(g) for g in grads):
        raise NotImplementedError(
            f"the backward of the dtriton kernel {name!r} got batched gradients (jacobian(..., vectorize=True), "
            "torch.autograd.grad(..., is_grads_batched=True) or a torch.func transform): its backward kernels have "
            "no batching rule; use vectorize=False / is_grads_batched=False (one backward per gradient)")


def refuse_transforms(name: str, args) -> None:
    """Raise ``NotImplementedError`` for a call of kernel ``name`` under a ``torch.func`` transform,
    or with a dual tensor (forward-mode AD) among ``args``: the kernels have no batching rule and
    no jvp, and a plain result would silently drop the transform. Returns when neither applies (a
    dual level is open but no argument carries a tangent)."""
    if _FUNCTORCH_ACTIVE():
        raise NotImplementedError(
            f"the dtriton kernel {name!r} does not support torch.func transforms (grad, vmap, jvp, jacrev, ...): "
            "call it outside the transform and differentiate with torch.autograd (loss.backward(), "
            "torch.autograd.grad), or run the backward algorithms from dt.grad explicitly")
    if getattr(_fwad, "_current_level", -1) >= 0:
        for a in args:
            if isinstance(a, torch.Tensor) and _fwad.unpack_dual(a).tangent is not None:
                raise NotImplementedError(
                    f"the dtriton kernel {name!r} does not support forward-mode AD (dual tensors): it has no jvp, "
                    "and its result would carry no tangent; use reverse mode (torch.autograd)")


def signature_key(args) -> tuple[tuple, bool]:
    """(the key of a call signature, whether a tensor argument requires grad). The key holds what
    decides a launch: shapes, strides, dtypes, devices, 16-byte alignment (Triton's own pointer
    specialisation) and, for ints, the values Triton specialises on (1, multiples of 16)."""
    key = []
    grad = False
    for a in args:
        if isinstance(a, torch.Tensor):
            grad = grad or a.requires_grad
            if a.layout != torch.strided or a.is_nested:   # sparse, mkldnn, nested: no strides, sizes or data
                key.append((a.layout, a.is_nested, a.dtype, a.device))   # pointer; the binding refuses it
                continue
            key.append((a.shape, a.stride(), a.dtype, a.device, a.data_ptr() % 16 == 0))
        else:
            key.append(scalar_key(a))
    return tuple(key), grad


def scalar_key(a) -> object:
    """The part of a signature key for a non-tensor argument: an integer's 1 and multiple-of-16
    facts (what Triton specialises an int argument on), a numpy integer's as a Python int's (the
    launchers pass ``int(a)``), any other value's type."""
    if type(a) is int or (isinstance(a, numbers.Integral) and not isinstance(a, bool)):
        return (a == 1, a % 16 == 0)
    return type(a)


def plain_numbers(args: tuple) -> tuple:
    """``args`` with numpy (or other ``numbers``) integers as Python ints and reals as Python
    floats (bools kept), a numpy bool (``np.True_``) and a 0-d numpy array as the Python number
    they hold (as torch takes them for a scalar), so planning reads a call's scalars as a Python
    call's; ``args`` itself when there are none."""
    if all(type(a) in (int, float, bool) or isinstance(a, torch.Tensor) for a in args):
        return args
    args = tuple(numpy_item(a) for a in args)
    return tuple(a if isinstance(a, (torch.Tensor, bool)) or not isinstance(a, numbers.Real) else
                 int(a) if isinstance(a, numbers.Integral) else float(a) for a in args)


def signature_key_for(alg: Algorithm):
    """A function ``key(args) -> (key, whether a tensor requires grad)`` for calls of ``alg``
    with one argument per parameter, printed for its parameters (a tensor's shape, strides, dtype,
    device and alignment; an int's 1 and multiple-of-16 facts; other values' types): half the
    time of :func:`signature_key`'s loop (CPU: 0.64 against 1.27 us for one tensor, 1.5 against
    2.6 for three), giving the same keys. Arguments of another kind (a number for a tensor parameter, a wrong count, a
    sparse tensor) fall back to
    :func:`signature_key`, so the general path reports them."""
    names = [f"a{k}" for k in range(len(alg.params))]
    parts, grads = [], []
    for n, p in zip(names, alg.params):
        if isinstance(p, InputTensor):
            parts.append(f"({n}.shape, {n}.stride(), {n}.dtype, {n}.device, {n}.data_ptr() % 16 == 0)")
            grads.append(f"{n}.requires_grad")
        else:
            parts.append(f"(({n} == 1, {n} % 16 == 0) if type({n}) is int else scalar_key({n}))")
    unpack = f"    {', '.join(names)}, = args\n" if names else ""
    src = (f"def key(args):\n{unpack}    return ({''.join(x + ', ' for x in parts)}), "
           f"{' or '.join(grads) or 'False'}\n")
    env: dict = {"scalar_key": scalar_key}
    exec(compile(src, f"<dtriton key of {alg.name}>", "exec"), env)   # noqa: S102
    printed = env["key"]

    def key(args) -> tuple[tuple, bool]:
        try:
            return printed(args)
        except (AttributeError, TypeError, ValueError, RuntimeError):   # (RuntimeError: a sparse tensor's data_ptr)
            return signature_key(args)
    key.printed = printed
    return key


def call_key(args) -> tuple:
    """The key of a plain call's signature (:func:`signature_key`); ``(None,)`` for a call that
    autograd must record (a tensor requires grad and grad mode is on): never the fast path."""
    key, grad = signature_key(args)
    return (None,) if grad and torch.is_grad_enabled() else key


def spec_key(args, out, interpret: bool) -> tuple | None:
    """The key a call's :class:`~dtriton.plan.callspec.CallSpec` is cached under: the call keys of
    the arguments and of ``out=`` (shapes, strides, dtypes, devices, alignment), the tensors'
    storage offsets (which decide 64-bit offsets) and the backend; None for an autograd call."""
    ck = call_key(args)
    if ck == (None,):
        return None
    offs = tuple(a.storage_offset() for a in args if isinstance(a, torch.Tensor))
    if out is None:
        return ck, offs, None, interpret
    return ck, offs, call_key(out), tuple(t.storage_offset() for t in out), interpret
