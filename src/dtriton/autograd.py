"""PyTorch integration: differentiable dtriton kernels and ``torch.library`` custom ops.

Three entry points:

- :func:`differentiable` wraps a compiled kernel (``dt.compile(alg, sched)``) so that calling it
  with inputs that require grad returns outputs attached to torch's autograd graph; backward runs
  kernels compiled from the derived backward algorithms (:func:`dtriton.grad`). ``compile_autograd``
  is ``differentiable(dt.compile(alg, sched))``.
- :func:`apply` is the hook for ``Kernel.__call__``: ``kernel(*args)`` becomes differentiable when
  any input requires grad (see the module's ``HOOK`` string for the three lines to add).
- :func:`as_torch_op` registers a kernel as a ``torch.library`` custom op with a fake (meta)
  implementation and an autograd formula, so models calling it compile with
  ``torch.compile(fullgraph=True)`` and train.

Only inputs that require grad get gradients: the backward algorithms are derived for exactly that
set (and cached per set). Saved state is the inputs (the forward reductions the backward needs are
recomputed) unless ``save=`` names forward stages to keep, in which case the forward runs the
algorithm with those stages as extra outputs (:func:`dtriton.grad.augmented_forward`).

Workarounds (see the report of issue 6): backward kernels compiled without a schedule get
``acc_dtype="float64"`` when an input is float64 (materialised buffers default to fp32), and an
algorithm whose lowered program would read a reduction that no kernel computes (reductions nested
inside a materialised reduction) runs as a chain of one-level algorithms (:func:`dtriton.grad.staged`).
"""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any, Callable, Mapping, Sequence

import torch

from .errors import ShapeError
from .grad import GradientAlgorithms, augmented_forward, grad, staged
from .language import Algorithm, InputTensor, Reduce
from .schedule import Schedule

__all__ = ["DifferentiableKernel", "differentiable", "compile_autograd", "apply", "as_torch_op", "HOOK"]

#: The lines ``runtime.Kernel.__call__`` should start with to make every kernel differentiable.
HOOK = """\
if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
    from .autograd import apply
    return apply(self, args, out=out)
"""

#: Safety net from before the lowering fix (6d651e7) for reductions nested in materialised ones:
#: when True, each backward call checks its lowered program and runs a staged chain if a
#: reduction would be dropped. Off by default: the check costs a bind and a schedule completion
#: per call, and the lowering no longer drops reductions (tests assert it).
STAGE_WHEN_LOWERING_DROPS_REDUCTIONS = False

_lock = threading.Lock()


# ----------------------------------------------------------------------------------------------
# running one algorithm (with the workarounds)
# ----------------------------------------------------------------------------------------------
def _program_ok(prog) -> bool:
    """True when every reduction a kernel of ``prog`` reads is computed in that kernel (fused) or
    written to a buffer by an earlier kernel."""
    produced: set[str] = set()
    for k in prog.kernels:
        fused = set(k.fused)
        for st in k.stores:
            top = st.target in prog.buffers and isinstance(st.expr, Reduce)
            if top and st.expr.name not in fused:
                return False
            stack = [st.expr.x] if top else [st.expr]
            seen: set[int] = set()
            while stack:
                n = stack.pop()
                if n._id in seen:
                    continue
                seen.add(n._id)
                if isinstance(n, Reduce):
                    b = k.materialized.get(n._id)
                    if b is not None:
                        if b.name not in produced:
                            return False
                        continue
                    if n.name not in fused:
                        return False
                stack.extend(n.children())
        for st in k.stores:
            if st.target in prog.buffers:
                produced.add(st.target)
    return True


class _Runner:
    """Runs one algorithm: compiled kernels per precision class, and the staged fallback."""

    def __init__(self, alg: Algorithm, schedule: Schedule | None, kernel=None):
        self.alg = alg
        self.schedule = schedule
        self._kernels: dict[bool, Any] = {}
        if kernel is not None:
            self._kernels[False] = kernel
            self._kernels[True] = kernel
        self._ok: dict[tuple, bool] = {}
        self._chain: list[tuple[_Runner, tuple[str, ...]]] | None = None

    def kernel(self, fp64: bool):
        from .runtime import compile as dt_compile
        k = self._kernels.get(fp64)
        if k is None:
            sched = self.schedule
            if sched is None and fp64:
                sched = Schedule(acc_dtype="float64")
            k = self._kernels[fp64] = dt_compile(self.alg, sched)
        return k

    def _lowering_ok(self, k, args) -> bool:
        if not STAGE_WHEN_LOWERING_DROPS_REDUCTIONS or not hasattr(k, "complete"):
            return True
        from .lowering import lower
        from .runtime import backend_for
        b = self.alg.bind(args)
        sched = k.complete(b)
        key = (sched, tuple(sorted(b.axis_sizes.items())), backend_for(b.device))
        ok = self._ok.get(key)
        if ok is None:
            try:
                prog = lower(self.alg, sched, b.axis_sizes, key[2] == "interpreter")
                ok = _program_ok(prog)
            except Exception:  # let the kernel report its own error
                ok = True
            self._ok[key] = ok
            if not ok:
                warnings.warn(
                    f"dtriton: the lowering of {self.alg.name} reads reductions no kernel computes "
                    "(reductions nested in a materialised reduction); running it as a chain of one-level "
                    "algorithms instead (dtriton.grad.staged). Performance workaround for a compiler bug.",
                    RuntimeWarning, stacklevel=3)
        return ok

    def __call__(self, *args) -> tuple[torch.Tensor, ...]:
        fp64 = any(isinstance(a, torch.Tensor) and a.dtype == torch.float64 for a in args)
        k = self.kernel(fp64)
        if self._lowering_ok(k, args):
            r = k(*args)
            return r if isinstance(r, tuple) else (r,)
        if self._chain is None:
            self._chain = [(_Runner(a, None), names) for a, names in staged(self.alg)]
        vals = list(args)
        res: tuple[torch.Tensor, ...] = ()
        for runner, names in self._chain:
            res = runner(*vals)
            if names:
                vals.extend(res)
        return res


# ----------------------------------------------------------------------------------------------
# differentiable kernels
# ----------------------------------------------------------------------------------------------
from .language import _float_inputs  # noqa: E402


def _sizes(alg: Algorithm, args) -> dict[str, Any]:
    sizes: dict[str, Any] = {}
    for p, a in zip(alg.params, args):
        if isinstance(p, InputTensor):
            for d, n in zip(p.dims, a.shape):
                sizes.setdefault(d, n)
    return sizes


def output_specs(alg: Algorithm, args) -> list[tuple[list[Any], torch.dtype]]:
    """Shape and dtype of each output of ``alg`` for a call with ``args`` (works on fake tensors
    and symbolic sizes: nothing is converted to int)."""
    sizes = _sizes(alg, args)
    dtypes = {p.name: a.dtype for p, a in zip(alg.params, args) if isinstance(p, InputTensor)}
    specs = []
    for o in alg.outputs:
        dt = None
        for t in _float_inputs(o.expr):   # the runtime's output dtype rule (torch promotion)
            d = dtypes[t]
            if d.is_floating_point:
                dt = d if dt is None else torch.promote_types(dt, d)
        specs.append(([sizes[alg.axis_size[a]] for a in o.layout], dt or torch.float32))
    return specs


class DifferentiableKernel:
    """A compiled dtriton kernel whose calls are differentiable with torch autograd.

    Call it like the kernel: ``outs = dk(*args)``. When grad mode is on and a tensor argument
    requires grad, the call goes through a ``torch.autograd.Function``: forward runs the kernel,
    backward runs the kernels of the backward algorithms derived by :func:`dtriton.grad` for the
    inputs that require grad (cached per set of inputs). Otherwise it is the plain kernel call.

    Args:
        kernel: a :class:`~dtriton.runtime.Kernel` (anything with ``.algorithm`` that is callable).
        backward_schedules: schedules for the backward kernels: one :class:`Schedule` for all, a
            mapping from backward algorithm name or input name (``"X"``: the algorithm computing
            dX) to a schedule, or a callable ``(backward_algorithm) -> Schedule | None``. Missing
            entries use the heuristic (``dt.compile(grad_alg)``).
        save: ``None`` (recompute forward reductions in backward), ``"all"`` or a list of forward
            reduction stage names to keep from the forward pass.
        group: grouping of gradients into algorithms, as :func:`dtriton.grad`.

    Gradients have the dtype and shape of their inputs. Raises what the kernel raises
    (:class:`~dtriton.errors.ShapeError` for mismatched arguments).
    """

    def __init__(self, kernel, *, backward_schedules: Schedule | Mapping[str, Schedule] | Callable | None = None,
                 save: Sequence[str] | str | None = None, group: str = "auto"):
        if not hasattr(kernel, "algorithm"):
            raise TypeError(f"differentiable() expects a compiled dtriton kernel, got {type(kernel).__name__}")
        self.kernel = kernel
        self.algorithm: Algorithm = kernel.algorithm
        self.backward_schedules = backward_schedules
        self.group = group
        self.save = save
        self._bwd: dict[frozenset, tuple[GradientAlgorithms, list[_Runner]]] = {}
        self._fwd_runner = _Runner(self.algorithm, getattr(kernel, "schedule", None), kernel)
        self._aug: tuple[_Runner, tuple[str, ...]] | None = None
        if save is not None:
            aug, names = augmented_forward(self.algorithm, save)
            sched = getattr(kernel, "schedule", None)
            try:
                if sched is not None:
                    sched.validate(aug)
            except Exception:
                sched = None
            self._aug = (_Runner(aug, sched), names)

    def __repr__(self):
        return f"<dt.differentiable {self.algorithm.name} save={self.save!r} group={self.group!r}>"

    # -- backward algorithms ---------------------------------------------------------------------
    def _schedule_for(self, alg: Algorithm, inputs: Sequence[str]) -> Schedule | None:
        s = self.backward_schedules
        if s is None or isinstance(s, Schedule):
            return s
        if callable(s) and not isinstance(s, Mapping):
            return s(alg)
        if alg.name in s:
            return s[alg.name]
        for n in inputs:
            if n in s:
                return s[n]
        return None

    def gradients(self, wrt: Sequence[str] | None = None) -> GradientAlgorithms:
        """The backward algorithms used for gradients wrt ``wrt`` (default: all inputs)."""
        return self._backward(wrt)[0]

    def _backward(self, wrt: Sequence[str] | None):
        key = frozenset(wrt) if wrt is not None else None
        with _lock:
            hit = self._bwd.get(key)
            if hit is None:
                saved = self._aug[1] if self._aug else None
                ga = grad(self.algorithm, wrt, save=saved, group=self.group)
                runners = []
                for k, a in enumerate(ga.algorithms):
                    ins = [n for n, (ai, _) in ga.locate.items() if ai == k]
                    runners.append(_Runner(a, self._schedule_for(a, ins)))
                hit = self._bwd[key] = (ga, runners)
        return hit

    # -- execution -------------------------------------------------------------------------------
    def run_forward(self, args) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """Run the forward pass: ``(outputs, saved stage values)``."""
        if self._aug is None:
            return self._fwd_runner(*args), ()
        res = self._aug[0](*args)
        n = len(self.algorithm.outputs)
        return res[:n], res[n:]

    def run_backward(self, args, grads, saved, wrt: Sequence[str]) -> dict[str, torch.Tensor | None]:
        """Gradients wrt the inputs named ``wrt`` for upstream gradients ``grads`` (one per output,
        ``None`` for zero). Returns ``{name: gradient or None}`` (None: structurally zero)."""
        alg = self.algorithm
        if not wrt:
            return {}
        ga, runners = self._backward(wrt)
        outs = None
        fixed = []
        for k, g in enumerate(grads):
            if g is None:
                if outs is None:
                    outs = output_specs(alg, args)
                shape, dt = outs[k]
                dev = next(a.device for a in args if isinstance(a, torch.Tensor))
                g = torch.zeros(shape, dtype=dt, device=dev)
            fixed.append(g)
        bargs = list(args) + fixed + list(saved)
        res: dict[str, torch.Tensor | None] = {n: None for n in wrt}
        argmap = {p.name: a for p, a in zip(alg.params, args)}
        for k, runner in enumerate(runners):
            vals = runner(*bargs)
            for n, (ai, oi) in ga.locate.items():
                if ai == k:
                    x = argmap[n]
                    v = vals[oi]
                    res[n] = v if v.dtype == x.dtype else v.to(x.dtype)
        return res

    def __call__(self, *args, out=None, **named):
        """Run the kernel, differentiably when an input requires grad (arguments by name as for
        :class:`~dtriton.Kernel`)."""
        if named:
            from .runtime import _merge_named
            args = _merge_named(self.kernel.algorithm, args, named)
        if out is None and torch.is_grad_enabled() and any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            res = _DTFunction.apply(self, *args)
            return res
        if out is not None:
            return self.kernel(*args, out=out)
        r = self.kernel(*args)
        return r


class _DTFunction(torch.autograd.Function):
    """forward: the dtriton kernel; backward: the derived backward kernels."""

    @staticmethod
    def forward(ctx, dk: DifferentiableKernel, *args):
        with torch.no_grad():
            outs, saved = dk.run_forward(args)
        alg = dk.algorithm
        is_t = [isinstance(p, InputTensor) for p in alg.params]
        ctx.dk = dk
        ctx.is_t = is_t
        ctx.scalars = [None if t else a for t, a in zip(is_t, args)]
        ctx.n_saved = len(saved)
        ctx.save_for_backward(*[a for t, a in zip(is_t, args) if t], *saved)
        return outs[0] if len(outs) == 1 else tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():
            # create_graph=True (double backward): the derived backward kernels are not themselves
            # differentiable yet; refuse loudly rather than return a gradient that is silently constant
            raise NotImplementedError(
                f"double backward through the dtriton kernel {ctx.dk.algorithm.name!r} is not supported "
                "(create_graph=True); differentiate the backward algorithms from dt.grad explicitly instead")
        with torch.no_grad():
            return _DTFunction._backward(ctx, *grads)

    @staticmethod
    def _backward(ctx, *grads):
        dk: DifferentiableKernel = ctx.dk
        alg = dk.algorithm
        st = ctx.saved_tensors
        nt = len(st) - ctx.n_saved
        tens, saved = list(st[:nt]), st[nt:]
        args = []
        it = iter(tens)
        for t, s in zip(ctx.is_t, ctx.scalars):
            args.append(next(it) if t else s)
        needs = ctx.needs_input_grad[1:]
        wrt = [p.name for p, nd, a in zip(alg.params, needs, args)
               if nd and isinstance(p, InputTensor) and a.dtype.is_floating_point]
        res = dk.run_backward(args, list(grads), saved, wrt)
        return (None, *[res.get(p.name) for p in alg.params])


def differentiable(kernel, **kw) -> DifferentiableKernel:
    """Make a compiled kernel differentiable (see :class:`DifferentiableKernel` for options).

    ``dk = dt.differentiable(dt.compile(alg, sched)); y = dk(x, w); y.sum().backward()``."""
    return DifferentiableKernel(kernel, **kw)


def compile_autograd(alg: Algorithm, schedule: Schedule | None = None, **kw) -> DifferentiableKernel:
    """``differentiable(dt.compile(alg, schedule), **kw)``: compile and make differentiable."""
    from .runtime import compile as dt_compile
    return DifferentiableKernel(dt_compile(alg, schedule), **kw)


_hooked: "weakref.WeakKeyDictionary[Any, DifferentiableKernel]" = weakref.WeakKeyDictionary()


def apply(kernel, args: Sequence[Any], out=None):
    """The ``Kernel.__call__`` hook: run ``kernel(*args)`` through autograd (default options:
    recompute, heuristic backward schedules). Called only when an input requires grad and grad
    mode is on. ``out=`` is not supported for differentiable calls (torch forbids writing
    results that need grad into given tensors) and raises :class:`ShapeError`."""
    if out is not None:
        raise ShapeError("out= cannot be used when an input requires grad; call the kernel under "
                         "torch.no_grad() or drop out=")
    dk = _hooked.get(kernel)
    if dk is None:
        dk = _hooked[kernel] = DifferentiableKernel(kernel)
    return _DTFunction.apply(dk, *args)


# ----------------------------------------------------------------------------------------------
# torch.library custom ops
# ----------------------------------------------------------------------------------------------
_ops: dict[str, Any] = {}


def as_torch_op(kernel, qualname: str, *, backward_schedules=None, group: str = "auto"):
    """Register ``kernel`` as the torch custom op ``qualname`` (``"namespace::name"``).

    The op takes the algorithm's arguments in order (``Tensor`` for tensors, ``float``/``int``
    for scalars) and returns one ``Tensor`` per output (a tuple for several). It has a fake
    (meta) implementation that computes output shapes from the dims' size symbols and dtypes by
    torch promotion of the floating inputs feeding each output, and an autograd formula
    (``register_autograd``) that calls a second op, ``qualname + "_backward"``, running the
    backward kernels derived by :func:`dtriton.grad` for the inputs that require grad. Both ops are
    opaque to ``torch.compile``, so models calling them compile with ``fullgraph=True``.

    Returns the op (callable; also reachable as ``torch.ops.namespace.name``). Registering the
    same name twice returns the existing op when it wraps the same kernel, else raises
    ``ValueError`` (torch cannot replace an op in a running process).

    Source: the torch.library custom-op tutorial ("Python Custom Operators", PyTorch docs).
    """
    if "::" not in qualname:
        raise ValueError(f"qualname must be 'namespace::name', got {qualname!r}")
    hit = _ops.get(qualname)
    if hit is not None:
        if hit[0] is kernel:
            return hit[1]
        raise ValueError(f"a torch op named {qualname!r} is already registered for another kernel; pick a new name")
    dk = DifferentiableKernel(kernel, backward_schedules=backward_schedules, group=group)
    alg = dk.algorithm
    params = alg.params
    names = [p.name for p in params]
    types = []
    for p in params:
        if isinstance(p, InputTensor):
            types.append("Tensor")
        else:
            types.append("float" if p.pytype is float else "int")
    nout = len(alg.outputs)
    ret = "Tensor" if nout == 1 else "(" + ", ".join(["Tensor"] * nout) + ")"
    schema = "(" + ", ".join(f"{t} {n}" for t, n in zip(types, names)) + ") -> " + ret
    gnames = _grad_names(alg)
    bschema = ("(" + ", ".join([f"{t} {n}" for t, n in zip(types, names)] + [f"Tensor {g}" for g in gnames] +
                               ["bool[] needs"]) + ") -> Tensor[]")
    tensor_idx = [k for k, p in enumerate(params) if isinstance(p, InputTensor)]

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

    op = torch.library.custom_op(qualname, fwd_impl, mutates_args=(), schema=schema)
    op.register_fake(fwd_fake)
    bop = torch.library.custom_op(qualname + "_backward", bwd_impl, mutates_args=(), schema=bschema)
    bop.register_fake(bwd_fake)

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
    _ops[qualname] = (kernel, op, bop)
    return op


def _grad_names(alg: Algorithm) -> list[str]:
    from .grad import _grad_param_names
    return _grad_param_names(alg)
