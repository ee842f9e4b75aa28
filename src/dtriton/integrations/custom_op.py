"""``torch.library`` custom ops of dtriton kernels (:func:`as_torch_op`), so that models calling
them compile with ``torch.compile(fullgraph=True)`` and train."""

from __future__ import annotations

import pickle
from typing import Any

import torch

from ..grad import grad_param_names
from ..ir import Algorithm, InputTensor
from .autograd import DifferentiableKernel
from .backward_schedules import check_backward_schedules
from .output_specs import output_specs

__all__ = ["TorchOp", "as_torch_op", "torch_op_named"]

#: qualname -> (kernel, forward op, backward op, DifferentiableKernel) of this process's registrations
_ops: dict[str, Any] = {}


class TorchOp(torch.library.CustomOpDef):
    """The op :func:`as_torch_op` returns: torch's ``CustomOpDef`` (``torch.library.custom_op`` builds it and
    :func:`as_torch_op` re-classes it; no state of its own) that pickles as what built it, the kernel, the op's
    name and the options, so ``torch.save`` of a module holding it works (its implementation is closures, which
    pickle cannot save). Loading registers the op again from the kernel (:func:`torch_op_named`). Copies
    (``copy.copy``, ``copy.deepcopy`` of a module holding it) are the op itself: an op is registered once per
    process, under its name."""

    def __reduce__(self):
        qualname, (kernel, _, _, dk) = next((q, hit) for q, hit in _ops.items() if hit[1] is self)
        return torch_op_named, (qualname, kernel, dk.backward_schedules, dk.group)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def torch_op_named(qualname: str, kernel, backward_schedules=None, group: str = "auto") -> TorchOp:
    """The op ``qualname`` of ``kernel`` (how a pickled :func:`as_torch_op` result is loaded): registered by
    :func:`as_torch_op` when this process has no op of that name, else the existing one, when it was built
    the same way (a kernel of the same type, algorithm (fingerprint), schedule and ``check_indices``, and the same
    ``backward_schedules`` and ``group``; a loaded kernel is a new object, so the identity rule of
    :func:`as_torch_op` cannot apply). Raises ``pickle.UnpicklingError`` when the registered op differs."""
    hit = _ops.get(qualname)
    if hit is None:
        return as_torch_op(kernel, qualname, backward_schedules=backward_schedules, group=group)
    diff = _registered_difference(hit, kernel, backward_schedules, group, loaded=True)
    if diff is not None:
        raise pickle.UnpicklingError(
            f"cannot load the dt.as_torch_op op {qualname!r}: this process registered that name already for another "
            f"kernel ({diff}), and torch cannot replace an op; load it in a fresh process, or register the pickled "
            f"kernel under a new name with dt.as_torch_op")
    return hit[1]


def _registered_difference(hit, kernel, backward_schedules, group: str, *, loaded: bool) -> str | None:
    """How ``kernel`` with these options differs from the registration ``hit`` (an entry of ``_ops``), or None
    when the registered op runs it the same way: the same type, algorithm, schedule and ``check_indices``, and
    the same ``backward_schedules`` and ``group``. The algorithm must be the same object, or, for a ``loaded``
    kernel (a new object, its algorithm by reference or by value), one of the same fingerprint."""
    have, _, _, dk = hit
    if have is not kernel:
        if type(have) is not type(kernel):
            return f"a {type(kernel).__name__} against a {type(have).__name__}"
        a, b = have.algorithm, kernel.algorithm
        if a.fingerprint != b.fingerprint:
            return f"algorithm {b.name} against {a.name} (another definition)"
        if a is not b and not loaded:
            return (f"algorithm {b.name}: another object than the registered one, of the same definition (e.g. the "
                    f"cell or module defining it run again)")
        for attr in ("schedule", "check_indices"):
            x, y = getattr(have, attr, None), getattr(kernel, attr, None)
            if x != y:
                return f"{attr} {y!r:.120} against {x!r:.120}"
    want = check_backward_schedules(kernel.algorithm, backward_schedules, group)
    if (dk.backward_schedules, dk.group) != (want, group):
        return (f"backward_schedules/group {want!r:.80}/{group!r} against the registered "
                f"{dk.backward_schedules!r:.80}/{dk.group!r}")
    return None


def as_torch_op(kernel, qualname: str, *, backward_schedules=None, group: str = "auto"):
    """Register ``kernel`` as the torch custom op ``qualname`` (``"namespace::name"``).

    The op takes the algorithm's arguments in order (``Tensor`` for tensors, ``float``/``int``
    for scalars) and returns one ``Tensor`` per output (a tuple for several). It has a fake
    (meta) implementation that computes output shapes from the dims' size symbols and dtypes by the
    runtime's rule (torch promotion of the floating inputs feeding each output; float64 for
    integer-only values), :func:`~dtriton.integrations.autograd.output_specs`, and an autograd formula
    (``register_autograd``) that calls a second op, ``qualname + "_backward"``, running the
    backward kernels derived by :func:`dtriton.grad` for the inputs that require grad. Both ops are
    opaque to ``torch.compile``, so models calling them compile with ``fullgraph=True``.

    Returns the op (a :class:`TorchOp`, torch's ``CustomOpDef``; also reachable as
    ``torch.ops.namespace.name``). It pickles as what built it (the kernel, by reference to its algorithm, the
    name and the options): loading registers it again, or, in a process that has it, returns the existing
    op (:func:`torch_op_named`); ``torch.save`` of a module holding it works. Registering the
    same name twice returns the existing op when the kernel is equivalent (the same kernel object, or one of the
    same type built from the same algorithm object with an equal schedule and the same ``check_indices``, with
    the same ``backward_schedules`` and ``group``: e.g. ``dt.as_torch_op(dt.compile(alg), name)`` in a module's
    ``__init__``, built twice), else raises ``ValueError`` naming what differs (torch cannot replace an op in a
    running process: register the other kernel under another name).

    Raises ``TypeError`` for anything but a compiled kernel (a differentiable one included: pass its
    ``.kernel``), ``ValueError`` for a ``qualname`` without ``"::"``.

    Source: the torch.library custom-op tutorial ("Python Custom Operators", PyTorch docs).
    """
    if isinstance(kernel, DifferentiableKernel):
        raise TypeError(f"as_torch_op takes the compiled kernel (dt.compile({kernel.algorithm.name}), or .kernel of "
                        f"this differentiable one), got a differentiable kernel; the op is differentiable itself (its "
                        f"autograd formula runs the backward kernels): pass backward_schedules= and group= to "
                        f"as_torch_op")
    if not hasattr(kernel, "algorithm"):
        raise TypeError(f"as_torch_op takes a compiled kernel (dt.compile(alg)), got {type(kernel).__name__}")
    if "::" not in qualname:
        raise ValueError(f"qualname must be 'namespace::name', got {qualname!r}")
    hit = _ops.get(qualname)
    if hit is not None:
        diff = _registered_difference(hit, kernel, backward_schedules, group, loaded=False)
        if diff is None:
            return hit[1]
        raise ValueError(f"a torch op named {qualname!r} is already registered for another kernel: {diff}; torch cannot "
                         f"replace an op in a running process. Register this kernel under another name (e.g. "
                         f"{qualname + '_2'!r}), or reuse the registered op (torch.ops.{qualname.replace('::', '.')})")
    # the op's schema carries the arguments only: the backward recomputes the forward's statistics
    dk = DifferentiableKernel(kernel, backward_schedules=backward_schedules, group=group, save=None)
    schema, bschema = _schemas(dk.algorithm)
    op = _forward_op(qualname, schema, dk)
    bop = _backward_op(qualname + "_backward", bschema, dk)
    _register_autograd(op, bop, dk.algorithm)
    op.__class__ = TorchOp   # adds pickling and copying only (torch.library.custom_op builds a CustomOpDef)
    _ops[qualname] = (kernel, op, bop, dk)
    return op


def _schemas(alg: Algorithm) -> tuple[str, str]:
    """The schemas of the forward op (the algorithm's arguments -> its outputs) and of the
    backward op (the arguments, one upstream gradient per output and ``needs`` -> gradients)."""
    names = [p.name for p in alg.params]
    types = []
    for p in alg.params:
        if isinstance(p, InputTensor):
            types.append("Tensor")
        else:
            types.append("float" if p.pytype is float else "int")
    nout = len(alg.outputs)
    ret = "Tensor" if nout == 1 else "(" + ", ".join(["Tensor"] * nout) + ")"
    schema = "(" + ", ".join(f"{t} {n}" for t, n in zip(types, names)) + ") -> " + ret
    gnames = grad_param_names(alg)
    bschema = ("(" + ", ".join([f"{t} {n}" for t, n in zip(types, names)] + [f"Tensor {g}" for g in gnames] +
                               ["bool[] needs"]) + ") -> Tensor[]")
    return schema, bschema


def _tensor_positions(alg: Algorithm) -> list[int]:
    """Positions of the tensor parameters among the algorithm's parameters."""
    return [k for k, p in enumerate(alg.params) if isinstance(p, InputTensor)]


def _forward_op(qualname: str, schema: str, dk: DifferentiableKernel):
    """The forward custom op: runs the kernel; its fake implementation allocates the outputs of
    :func:`~dtriton.integrations.autograd.output_specs`."""
    alg = dk.algorithm
    nout = len(alg.outputs)
    tensor_idx = _tensor_positions(alg)

    def fwd_impl(*args):
        with torch.no_grad():
            outs = dk.run_forward(args)[0]
        outs = tuple(o if o.is_contiguous() else o.contiguous() for o in outs)
        return outs[0] if nout == 1 else outs

    def fwd_fake(*args):
        specs = output_specs(alg, args)
        dev = args[tensor_idx[0]].device
        outs = tuple(torch.empty(shape, dtype=dt, device=dev) for shape, dt in specs)
        return outs[0] if nout == 1 else outs

    op = torch.library.custom_op(qualname, fwd_impl, mutates_args=(), schema=schema)
    op.register_fake(fwd_fake)
    return op


def _backward_op(qualname: str, schema: str, dk: DifferentiableKernel):
    """The backward custom op: gradients of the inputs flagged in ``needs`` (zeros for a
    structurally zero one); its fake implementation allocates them like the inputs."""
    params = dk.algorithm.params
    nout = len(dk.algorithm.outputs)
    tensor_idx = _tensor_positions(dk.algorithm)

    def bwd_impl(*all_args):
        args = all_args[:len(params)]
        grads = all_args[len(params):len(params) + nout]
        needs = all_args[-1]
        wrt = [params[k].name for k, nd in zip(tensor_idx, needs) if nd]
        with torch.no_grad():
            res = dk.run_backward(args, list(grads), (), wrt)
        out = []
        for k, nd in zip(tensor_idx, needs):
            if nd:
                g = res.get(params[k].name)
                out.append(torch.zeros_like(args[k]) if g is None else g.contiguous())
        return out

    def bwd_fake(*all_args):
        args = all_args[:len(params)]
        needs = all_args[-1]
        return [torch.empty_like(args[k]) for k, nd in zip(tensor_idx, needs) if nd]

    bop = torch.library.custom_op(qualname, bwd_impl, mutates_args=(), schema=schema)
    bop.register_fake(bwd_fake)
    return bop


def _register_autograd(op, bop, alg: Algorithm) -> None:
    """The autograd formula of ``op``: save the tensor inputs, call the backward op ``bop`` for
    the floating inputs that need a gradient (zero upstream gradients for unused outputs)."""
    params = alg.params
    tensor_idx = _tensor_positions(alg)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*[inputs[k] for k in tensor_idx])
        ctx.scalars = [None if isinstance(p, InputTensor) else inputs[k] for k, p in enumerate(params)]

    def backward(ctx, *grads):
        tens = list(ctx.saved_tensors)
        it = iter(tens)
        args = [next(it) if isinstance(p, InputTensor) else s for p, s in zip(params, ctx.scalars)]
        needs = [bool(ctx.needs_input_grad[k]) and args[k].dtype.is_floating_point for k in tensor_idx]
        if not any(needs):
            return tuple(None for _ in params)
        gl = []
        specs = None
        for k, g in enumerate(grads):
            if g is None:
                specs = specs or output_specs(alg, args)
                shape, dt = specs[k]
                g = torch.zeros(shape, dtype=dt, device=args[tensor_idx[0]].device)
            gl.append(g)
        res = bop(*args, *gl, needs)
        it2 = iter(res)
        out: list[Any] = [None] * len(params)
        for k, nd in zip(tensor_idx, needs):
            if nd:
                out[k] = next(it2)
        return tuple(out)

    op.register_autograd(backward, setup_context=setup_context)
