"""The steady-state path of differentiable calls: one cached step per call signature (issue 15).

The first differentiable call of a signature takes the general path of
:class:`~dtriton.integrations.autograd.DifferentiableKernel`: the kernel binds and checks the
arguments (shapes, dtypes, strides, devices, index ranges), plans, compiles, launches, and leaves
a fast launcher for the signature. The differentiable kernel then keeps a :class:`ForwardStep`
holding that launcher, keyed by the call's cheap key (:func:`~dtriton.runtime.args.signature_key`:
shapes, strides, dtypes, devices and 16-byte alignment of the tensors, the values Triton
specialises ints on, and the ints that size axes). Later calls with the same key run
:class:`StepFunction`: one ``torch.autograd.Function`` whose forward launches the kernels through the
launcher, saves the inputs and the forward's statistics, and returns the outputs; nothing is bound,
planned or re-checked beyond the key.

A step enters autograd through the C ``_FunctionBase.apply`` (:data:`ENTER_STEP`; not
``Function.apply``'s Python wrapper, which functorch transforms still get), its node's ``apply`` is
the step's backward, and the statistics it saves share one buffer (the launcher's ``packed``
layout, :attr:`ForwardStep.layout`): every Python frame and allocation on this path costs host
time, which is what a training step on a fast GPU waits for.

Its backward looks up a :class:`BackwardStep` by which inputs need a gradient and the cheap key
of the incoming gradients (``None`` for an output that receives none). The first backward of a key
runs the general ``run_backward`` (which plans and compiles the derived backward kernels) and the
differentiable kernel builds the step from the fast launchers it left; a key without fast
launchers (the interpreter, staged operands, ``check_indices``, a launch hook such as a
profiler's) keeps the general path.
"""

from __future__ import annotations

import sys
import warnings
from operator import itemgetter
from typing import Any, Callable, Sequence

import torch

from ..backends.triton import native
from ..runtime.args import refuse_batched_gradients
from ..runtime.kernel import fast_path_ok

__all__ = ["ENTER_STEP", "BackwardStep", "zero_gradient", "ForwardStep", "StepFunction", "apply_step", "functorch_active",
           "refuse_double_backward", "gradient_key", "learn_backward", "adopt_native", "native_fallback"]


def refuse_double_backward(name: str, grads: Sequence[Any] = ()) -> None:
    """Raise ``NotImplementedError`` when a backward runs with ``create_graph=True`` (grad mode on
    inside backward): the derived backward kernels are not differentiable themselves, and a silently
    constant gradient would be wrong."""
    if torch.is_grad_enabled():
        raise NotImplementedError(
            f"double backward through the dtriton kernel {name!r} is not supported "
            "(create_graph=True); differentiate the backward algorithms from dt.grad explicitly instead")
    refuse_batched_gradients(name, grads)


class BackwardStep:
    """The backward of one forward step for one set of inputs needing gradients and one signature
    of the incoming gradients: the derived backward kernels' fast launchers, in order.

    Args:
        launches: per backward algorithm ``(launcher, single, picks)``: ``launcher(bargs)`` runs its
            kernels on ``(*forward args, *output gradients, *saved statistics)`` and returns its
            outputs (one tensor when ``single``, else a tuple); ``picks`` lists ``(output index,
            parameter position, dtype)``: that output is the gradient of that parameter, converted
            to ``dtype`` (the input's) when it differs.
        zeros: output index -> the read-only zero (a 0-d zero expanded to the output's shape)
            standing for the gradient of an output that receives none.
        n_params: the algorithm's parameters (the length of the returned gradients, plus one).
        runners: the backward algorithms' runners (recorded for ``launch_counts``).
        out_dtypes: with one launcher, the dtypes of its outputs (gradients already of their
            input's dtype are returned as they come).
        zero_params: positions of the parameters that need a gradient no output depends on: each
            gets :func:`zero_gradient` of its argument.
    """

    __slots__ = ("launches", "zeros", "n_params", "runners", "direct", "zero_params")

    def __init__(self, launches: list[tuple[Callable, bool, list[tuple[int, int, torch.dtype]]]],
                 zeros: dict[int, torch.Tensor], n_params: int, runners: list, out_dtypes: Sequence[torch.dtype] = (),
                 zero_params: tuple[int, ...] = ()):
        self.launches = launches
        self.zeros = zeros
        self.n_params = n_params
        self.runners = runners
        self.zero_params = zero_params
        #: (launcher, picker) for one launcher whose outputs need no conversion and no zeros: the
        #: returned tuple is ``picker((*outputs, None))`` (None at -1 for parameters without gradient)
        self.direct = None
        if len(launches) == 1 and not zeros and not zero_params:
            launch, single, picks = launches[0]
            if all(out_dtypes[oi] == dt for oi, _, dt in picks if oi < len(out_dtypes)) and len(out_dtypes) > 0:
                where = dict.fromkeys(range(n_params + 1), -1)
                where.update({pos + 1: oi for oi, pos, _ in picks})
                self.direct = (getattr(launch, "call", None) or launch, single, itemgetter(*where.values()))

    def native_picks(self) -> list[tuple[int, int, int]] | None:
        """``(parameter position, launcher index, output index)`` per gradient, where every gradient is
        a launcher's output as it is (no dtype conversion, no zero gradient of an input no output
        depends on): what a native backward variant returns; None otherwise."""
        if self.zero_params:
            return None
        out = []
        for li, (launch, _, picks) in enumerate(self.launches):
            dts = getattr(launch, "out_dtypes", ())
            for oi, pos, dt in picks:
                if oi >= len(dts) or dts[oi] != dt:
                    return None
                out.append((pos, li, oi))
        return out

    def __call__(self, args: Sequence[Any], grads: Sequence[torch.Tensor | None],
                 saved: Sequence[torch.Tensor]) -> tuple:
        """``(None, gradient per parameter or None)``: what ``StepFunction.backward`` returns."""
        if self.direct is not None:
            launch, single, pick = self.direct
            vals = launch((*args, *grads, *saved))
            return pick((vals, None) if single else (*vals, None))
        if self.zeros:
            grads = [self.zeros.get(k, g) if g is None else g for k, g in enumerate(grads)]
        bargs = (*args, *grads, *saved)
        res: list = [None] * (self.n_params + 1)
        for launch, single, picks in self.launches:
            vals = launch(bargs)
            if single:
                vals = (vals,)
            for oi, pos, dt in picks:
                v = vals[oi]
                res[pos + 1] = v if v.dtype == dt else v.to(dt)
        for pos in self.zero_params:
            res[pos + 1] = zero_gradient(args[pos])
        return tuple(res)


def zero_gradient(x: torch.Tensor) -> torch.Tensor:
    """The gradient of an input ``x`` that no output depends on: zeros of its shape, dtype and
    device, as torch gives an input its operation used (not None). A fresh 0-d zero expanded to the
    shape (no fill of the whole tensor; a ``.grad`` accumulated from it is materialised by autograd,
    as for the expanded gradients of ``sum``)."""
    return torch.zeros((), dtype=x.dtype, device=x.device).expand(x.shape)


class ForwardStep:
    """One call signature of a differentiable kernel, seen before: the forward's fast launcher and
    the backward steps built so far (:class:`BackwardStep` per key).

    Args:
        owner: the differentiable kernel; its ``backward_step(args, grads, saved, needs, layout)``
            runs a backward on the general path and builds the step for it, and its ``last_runs``
            dict records the runners of the latest forward and backward (``launch_counts``).
        runners: the forward's runner (``last_runs["forward"]``).
        launch: the forward kernels' fast launcher: ``launch(args)`` returns the outputs followed by
            the saved statistics, or by one buffer holding them all when ``layout`` is given (one
            tensor when it returns one in all).
        n_out: the algorithm's outputs (the outputs returned); the rest are saved.
        n_ret: values the launcher returns.
        is_tensor: per parameter, whether it is a tensor (the others are saved on the context).
        layout: per saved statistic ``(byte offset, shape, dtype)`` in the launcher's packed buffer
            (the backward's launchers read them there); None: they are separate tensors.
        pick: per saved value, its index among the launcher's results (a saved output is the
            returned output itself); None: the results after the outputs, in order.
    """

    __slots__ = ("owner", "runners", "launch", "n_out", "n_ret", "tensor_pos", "backward_steps", "name", "layout",
                 "pick", "n_saved", "native", "native_call", "native_keys", "native_why", "key")

    def __init__(self, owner, runners: list, launch: Callable, n_out: int, n_ret: int, is_tensor: Sequence[bool],
                 layout: tuple | None = None, pick: tuple[int, ...] | None = None):
        self.owner = owner
        self.runners = runners
        self.launch = launch
        self.n_out = n_out
        self.n_ret = n_ret
        self.pick = pick
        #: the saved values among the context's saved tensors (after the forward's tensor arguments)
        self.n_saved = n_ret - n_out if pick is None else len(pick)
        # None: every parameter is a tensor (the forward's args are saved as they are)
        self.tensor_pos = None if all(is_tensor) else tuple(k for k, t in enumerate(is_tensor) if t)
        self.backward_steps: dict[tuple, BackwardStep | None] = {}
        self.name = owner.algorithm.name
        self.layout = layout
        #: the native step's id (:mod:`dtriton.backends.triton.native`): -1 not (yet) native, -2 never
        self.native = -1
        #: ``native_call(args)``: the native step's forward (:func:`dtriton.backends.triton.native.caller`)
        self.native_call = None
        #: the gradient keys registered as native backward variants
        self.native_keys: set = set()
        #: why the step or one of its backward variants keeps the Python node ("" while none is known)
        self.native_why = ""
        #: the owner's call key this step was made for (set by the owner; None: not known)
        self.key = None

    def args_of(self, tensors: Sequence[torch.Tensor], scalars: Sequence[Any] | None) -> tuple:
        """The forward's arguments from its saved tensors and (when some parameters are not
        tensors) its arguments as given, whose tensors are replaced by the saved ones."""
        if self.tensor_pos is None:
            return tuple(tensors)
        args = list(scalars)
        for k, t in zip(self.tensor_pos, tensors):
            args[k] = t
        return tuple(args)

    def unpacked(self, saved: Sequence[torch.Tensor]) -> tuple:
        """The saved statistics as separate tensors (views of the packed buffer when there is one):
        what the general backward path takes."""
        if self.layout is None:
            return tuple(saved)
        (buf,) = saved
        views = []
        for off, shape, dt in self.layout:
            n = dt.itemsize
            for d in shape:
                n *= d
            views.append(buf[off:off + n].view(dt).view(shape))
        return tuple(views)


class StepFunction(torch.autograd.Function):
    """The differentiable call of a :class:`ForwardStep`: ``StepFunction.apply(step, *args)``, or
    :func:`apply_step` (the same without ``Function.apply``'s Python wrapper). Autograd runs
    ``forward`` with grad mode off and ``backward`` with it off unless ``create_graph=True``
    (refused: :func:`refuse_double_backward`)."""

    @staticmethod
    def forward(ctx, step: ForwardStep, *args):
        ctx.materialize_grads = False   # ctx.set_materialize_grads(False): an output without a gradient arrives as None
        res = step.launch(args)
        if step.n_ret == 1:
            res = (res,)
        ctx.step = step
        step.owner.ran_forward(step.runners)
        n = step.n_out
        saved = res[n:] if step.pick is None else [res[k] for k in step.pick]
        # ctx.save_for_backward(...) is a Python method setting ctx.to_save: set it directly
        if step.tensor_pos is None:   # (ctx.scalars is read only when some parameter is not a tensor)
            ctx.to_save = (*args, *saved)
        else:
            ctx.scalars = [None if isinstance(a, torch.Tensor) else a for a in args]
            ctx.to_save = (*[args[k] for k in step.tensor_pos], *saved)
        return res[0] if n == 1 else res[:n]

    @staticmethod
    def backward(ctx, *grads):
        """The steady backward: autograd's engine hands each output's gradient with the output's
        shape, dtype and device (it checks and converts them), so the gradients' key holds only
        what it leaves open: strides and 16-byte alignment (None for an output without one)."""
        step: ForwardStep = ctx.step
        if torch.is_grad_enabled() or functorch_active():
            refuse_double_backward(step.name, grads)
        st = ctx.saved_tensors
        nt = len(st) - step.n_saved
        args = st[:nt] if step.tensor_pos is None else step.args_of(st[:nt], ctx.scalars)
        try:
            if len(grads) == 1 and grads[0] is not None:   # (gradient_key's common case, inlined)
                g = grads[0]
                key = (ctx.needs_input_grad, (g.stride(), g.data_ptr() % 16 == 0))
            else:
                key = gradient_key(ctx.needs_input_grad, grads)
        except RuntimeError:   # (a batched gradient has no data pointer: say so)
            refuse_batched_gradients(step.name, grads)
            raise
        bstep = step.backward_steps.get(key)
        if bstep is not None and fast_path_ok():
            if step.native == -1 and step.owner.native is not False:   # the extension was not ready yet
                adopt_native(step, key, bstep, ctx.needs_input_grad[1:], grads, args)
            step.owner.last_runs["backward"] = bstep.runners
            step.owner.native_log[0] = 0   # (the Python node ran it, not a native variant)
            direct = bstep.direct   # (BackwardStep.__call__'s common case, inlined)
            if direct is not None:
                vals = direct[0]((*args, *grads, *st[nt:]))
                return direct[2]((vals, None) if direct[1] else (*vals, None))
            return bstep(args, grads, st[nt:])
        return learn_backward(step, key, args, grads, st[nt:], ctx.needs_input_grad)


def gradient_key(needs_input_grad: tuple, grads: Sequence[torch.Tensor | None]) -> tuple:
    """The key of a :class:`BackwardStep`: which parameters need a gradient, and per output its
    incoming gradient's strides and 16-byte alignment (None: it receives none)."""
    return (needs_input_grad, *[None if g is None else (g.stride(), g.data_ptr() % 16 == 0) for g in grads])


def learn_backward(step: ForwardStep, key: tuple, args: tuple, grads: Sequence[torch.Tensor | None],
                   saved: Sequence[torch.Tensor], needs_input_grad: tuple) -> tuple:
    """The backward of a gradient key not seen before (or with a launch hook installed): the general
    path, whose :class:`BackwardStep` is kept for ``key`` (and, with native steps on, registered
    as a native variant, the forward step made native first). Returns ``(None, gradient per
    parameter)``."""
    res, bstep = step.owner.backward_step(args, grads, step.unpacked(saved), needs_input_grad[1:], step.layout)
    if bstep is not None:
        step.backward_steps[key] = bstep
        if step.native != -2:
            adopt_native(step, key, bstep, needs_input_grad[1:], grads, args)
    return res


def native_wanted(step: ForwardStep) -> bool:
    """Whether ``step``'s kernel runs native steps now: its ``native=`` argument, else
    :func:`dtriton.native_steps`; never under compiled autograd (``torch._dynamo.compiled_autograd``
    traces Python nodes, not this C++ one)."""
    want = step.owner.native
    if not (native.enabled() if want is None else want):
        return False
    ca = sys.modules.get("torch._dynamo.compiled_autograd")
    return not (ca is not None and getattr(ca, "compiled_autograd_enabled", False))


def adopt_native(step: ForwardStep, key: tuple, bstep: BackwardStep, needs: Sequence[bool],
                 grads: Sequence[torch.Tensor | None], args: Sequence[Any]) -> None:
    """Make ``step`` native (its first time, once the extension is ready: :func:`~dtriton.backends.
    triton.native.ready`) and add ``bstep`` as its backward variant for gradient key ``key``: ``needs``
    (per parameter) and the layout of ``grads``. A step or backward that cannot run natively keeps
    the Python node (``step.native`` -2: never native); an error while registering warns once and
    does the same. The native node takes the tensor arguments only: a step with other parameters
    is native only when each of them is part of its call key (an int sizing an axis, a scalar a
    constraint names), so their values, taken from ``args``, are the step's constants."""
    if key in step.native_keys or not native_wanted(step):
        return
    try:
        _adopt(step, key, bstep, needs, grads, args)
    except Exception as e:   # (a value the plan cannot pack, a warning raised as an error): the Python node
        step.native = -2
        step.native_why = f"its native plan failed ({type(e).__name__}: {e})"
        warnings.warn(f"dtriton: the step of {step.name!r} keeps the Python autograd node, its native plan "
                      f"failed ({type(e).__name__}: {e})", RuntimeWarning, stacklevel=3)


def _adopt(step: ForwardStep, key: tuple, bstep: BackwardStep, needs: Sequence[bool],
           grads: Sequence[torch.Tensor | None], args: Sequence[Any]) -> None:
    """:func:`adopt_native`'s work."""
    tpos = step.tensor_pos
    consts = _constants(step, args)
    if step.native == -1:
        if not native.ready():
            return   # (building: a later backward of this step adopts it)
        keyed = set(step.owner.keyed_pos)
        if tpos is not None and not set(range(len(args))) - set(tpos) <= keyed:
            step.native = -2   # (a scalar passed per call: the Python node passes it on)
            step.native_why = "a non-tensor argument is passed per call (not part of the call key)"
            return
        if not all(dt.is_floating_point for dt in getattr(step.launch, "out_dtypes", (torch.int32,))[:step.n_out]):
            step.native = -2   # (an integer output is not differentiable: the Python Function marks it so)
            step.native_why = "an output is not floating point"
            return
        save = list(range(step.n_out, step.n_ret)) if step.pick is None else list(step.pick)
        scalars = None if tpos is None else [None if k in tpos else a for k, a in enumerate(args)]
        sid = native.register(step.name, step.launch, step.n_out, save, native_fallback(step, scalars),
                              tensor_pos=tpos, constants=consts)
        step.native = -2 if sid is None else sid
        if sid is not None:
            step.native_call = native.caller(sid, tpos)
            step.owner.enter_native(step, args)
        else:
            why = native.refusal(step.launch, tpos, constants=consts)
            step.native_why = f"the forward: {why or 'no extension'}"
    if step.native < 0:
        return
    picks = bstep.native_picks()
    if picks is None:
        step.native_why = "a backward variant: a gradient needs a dtype conversion or is a zero no output depends on"
        return
    index = list(range(bstep.n_params)) if tpos is None else {p: i for i, p in enumerate(tpos)}
    where = [(-1, -1)] * (bstep.n_params if tpos is None else len(tpos))
    for pos, li, oi in picks:
        where[index[pos]] = (li, oi)
    keys = [None if k is None else (list(k[0]), k[1]) for k in key[1:]]   # (the layouts gradient_key holds)
    tneeds = list(needs) if tpos is None else [needs[p] for p in tpos]
    launchers = [launch for launch, _, _ in bstep.launches]
    if native.add_backward(step.native, tneeds, keys, launchers, where, dict(bstep.zeros), tensor_pos=tpos,
                           n_params=bstep.n_params, constants=consts, record=step.owner.native_record(bstep.runners)):
        step.native_keys.add(key)
    else:
        why = next(filter(None, (native.refusal(fl, tpos, bstep.n_params, consts) for fl in launchers)), "")
        step.native_why = f"a backward variant: {why}"


def _constants(step: ForwardStep, args: Sequence[Any]) -> dict[int, Any] | None:
    """The step's non-tensor arguments by position (each part of its call key: the step's
    constants, which a native plan holds), or None when every argument is a tensor."""
    if step.tensor_pos is None:
        return None
    tensors = set(step.tensor_pos)
    return {k: a for k, a in enumerate(args) if k not in tensors}


def native_fallback(step: ForwardStep, scalars: list | None = None) -> Callable:
    """The Python path a native step's C++ node calls when no native variant fits:
    ``fallback(inputs, saved, grads, needs)`` (the tensor arguments, and whether each needs a
    gradient) returns the gradient per tensor argument (None where none), as
    :meth:`StepFunction.backward` computes it. ``scalars``: the step's other arguments (None at
    the tensors' positions), when it has some."""
    tpos = step.tensor_pos

    def fallback(inputs, saved, grads, needs):
        refuse_double_backward(step.name, grads)
        args = tuple(inputs) if tpos is None else step.args_of(inputs, scalars)
        grads, saved = tuple(grads), tuple(saved)
        if tpos is not None:
            per_param = [False] * len(args)
            for k, p in enumerate(tpos):
                per_param[p] = needs[k]
            needs = per_param
        needs_input_grad = (False, *needs)
        key = gradient_key(needs_input_grad, grads)
        bstep = step.backward_steps.get(key)
        if bstep is not None and fast_path_ok():
            adopt_native(step, key, bstep, needs_input_grad[1:], grads, args)   # (a key learned before the step was native)
            step.owner.last_runs["backward"] = bstep.runners
            step.owner.native_log[0] = 0
            res = bstep(args, grads, saved)[1:]
        else:
            res = learn_backward(step, key, args, grads, saved, needs_input_grad)[1:]
        return res if tpos is None else [res[p] for p in tpos]
    return fallback


def _c_apply():
    """``torch.autograd.Function.apply`` is a Python wrapper (default-argument binding for
    ``setup_context``, functorch's dead-wrapper unwrapping) around the C ``_FunctionBase.apply``;
    :class:`StepFunction` defines no ``setup_context``, so outside functorch transforms the C
    function bound to it does the same work (None when this torch has no such function)."""
    base = getattr(torch._C, "_FunctionBase", None)
    c_apply = base.__dict__.get("apply") if base is not None else None
    if c_apply is None or not hasattr(c_apply, "__get__"):
        return None
    return c_apply.__get__(None, StepFunction)


#: ``ENTER_STEP(step, *args)``: ``StepFunction.apply`` without its Python wrapper (None when this
#: torch has no C entry point); only while ``functorch_active()`` is False
ENTER_STEP = _c_apply()
#: whether a functorch transform (vmap, grad, ...) is active: ``Function.apply``'s wrapper is needed then
functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: True)


def apply_step(step: ForwardStep, args: Sequence[Any]):
    """``StepFunction.apply(step, *args)``, through the C entry point when no functorch transform
    (vmap, grad, ...) is active (:func:`_c_apply`)."""
    if ENTER_STEP is not None and not functorch_active():
        return ENTER_STEP(step, *args)
    return StepFunction.apply(step, *args)


# The backward node's entry point: autograd's engine calls ``apply`` on the context (an instance of
# ``StepFunction._backward_cls``), whose Python default looks up the user's ``backward`` or ``vjp``
# on each call; the node calls StepFunction.backward directly instead.
if isinstance(getattr(StepFunction, "_backward_cls", None), type) and hasattr(StepFunction._backward_cls, "apply"):
    StepFunction._backward_cls.apply = StepFunction.backward
