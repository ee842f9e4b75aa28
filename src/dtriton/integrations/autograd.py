"""PyTorch autograd for dtriton kernels.

- :func:`differentiable` wraps a compiled kernel (``dt.compile(alg, sched)``) so that calling it
  with inputs that require grad returns outputs attached to torch's autograd graph; backward runs
  kernels compiled from the derived backward algorithms (:func:`dtriton.grad`).
  ``dt.compile_autograd`` is ``differentiable(dt.compile(alg, sched))``.
- Importing this module installs :func:`apply` as ``Kernel.grad_call``: the runtime calls it for a
  ``kernel(*args)`` whose inputs require grad (grad mode on), so every kernel is differentiable.
  ``import dtriton`` imports it; the runtime itself never imports this module.
- :func:`output_specs` (defined in :mod:`.output_specs`) gives the shape and dtype of each output
  without running anything (fake tensors and symbolic sizes work): what ``as_torch_op``'s fake
  implementation returns.

Only inputs that require grad get gradients: the backward algorithms are derived for exactly that
set (and cached per set). By default (``save="auto"``) the forward saves the forward reductions
the backward reads (layer norm's mean and variance, softmax's row max and sum) as extra outputs of
the same algorithm (:func:`dtriton.grad.augmented_forward`; with the schedule's ``fuse_outputs``
they are stored by the forward's own kernel), so the backward reads them instead of recomputing
them; ``save=None`` recomputes them in the backward, and a list of stage names saves those. A saved
output stage is the output tensor itself where the call's output already has the saved value's
dtype (float32 or float64: the forward writes it once), else a float32 copy the forward writes too.

Workaround (see the report of issue 6): backward kernels compiled without a schedule get
``acc_dtype="float64"`` when an input is float64 (materialised buffers default to fp32).
"""

from __future__ import annotations

import ctypes
import difflib
import functools
import threading
import weakref
from typing import Any, Callable, Mapping, Sequence

import torch

from ..errors import ScheduleError, ShapeError
from ..grad import GradientAlgorithms, check_group, check_save, grad
from ..ir import Algorithm, InputTensor, output_dtypes
from ..plan.lower import lower
from ..runtime import Kernel
from ..runtime.args import (merge_named, outside_graph, plain_numbers, refuse_transforms, signature_key,
                            signature_key_for, tracing, transforms_active)
from ..runtime.kernel import fast_path_ok
from ..schedule import Schedule
from ..backends.triton import native as native_backend
from .backward_schedules import check_backward_schedules
from .output_specs import output_specs
from .runners import Runner, has_fp64, lean_forward, saving_forward, seeded_outputs
from .steps import (ENTER_STEP, BackwardStep, ForwardStep, apply_step, functorch_active, refuse_double_backward,
                    zero_gradient)

__all__ = ["DifferentiableKernel", "differentiable", "apply", "output_specs", "check_backward_schedules"]

_lock = threading.Lock()


# ----------------------------------------------------------------------------------------------
# differentiable kernels
# ----------------------------------------------------------------------------------------------
class DifferentiableKernel:
    """A compiled dtriton kernel whose calls are differentiable with torch autograd.

    Call it like the kernel: ``outs = dk(*args)``. When grad mode is on and a tensor argument
    requires grad, the call goes through a ``torch.autograd.Function``: forward runs the kernel,
    backward runs the kernels of the backward algorithms derived by :func:`dtriton.grad` for the
    inputs that require grad (cached per set of inputs). Otherwise it is the plain kernel call.

    Args:
        kernel: a :class:`~dtriton.Kernel` (anything with ``.algorithm`` that is callable).
        backward_schedules: schedules for the backward kernels: one :class:`Schedule` for all, a
            mapping from tensor input name (``"X"``: the algorithm computing dX) or backward
            algorithm name (``"softmax_grad_X"``, see ``dt.grad(alg)``) to a :class:`Schedule`,
            a schedule dict (:meth:`Schedule.from_dict`) or ``None``, or a callable
            ``(backward_algorithm) -> Schedule | None``. Missing entries use the heuristic
            (``dt.compile(grad_alg)``).
        save: ``"auto"`` (default): keep the statistics among the forward reductions the backward
            reads (:func:`~dtriton.grad.saved_statistics`: smaller than the input they summarise)
            from the forward pass (none when the backward reads none, or when the kernel's schedule does not
            apply to the forward with the extra outputs: then they are recomputed and the schedule
            kept); ``None``: recompute them in the backward; ``"all"`` or a list of forward
            reduction stage names: keep those. A listed output stage (``"out1"``) is kept as the
            output tensor itself when the call's output is float32 or float64 (an in-place change
            of that output before the backward is then an autograd error, as for torch's own ops
            that save their result), else as a float32 copy the forward also writes.
        group: grouping of gradients into algorithms, as :func:`dtriton.grad`.
        native: whether a call signature's steady-state step (after its first backward) runs as a
            C++ autograd node launching the kernels through the CUDA driver, with no Python in its
            backward (:mod:`dtriton.backends.triton.native`; GPU only; the extension builds on first
            use): ``None`` (default) follows :func:`dtriton.native_steps` (on unless
            ``DTRITON_NATIVE_STEPS=0``). Steps that cannot run natively (scalar parameters, TMA
            descriptors, gradients needing a conversion or a zero) keep the Python node; results
            are the same bits either way.

    Host path: the first differentiable call of a call signature takes the general path (the
    arguments are checked, the forward and later the backward planned and compiled); later calls
    with the same cheap key run a cached :class:`~dtriton.integrations.steps.ForwardStep` (see
    :mod:`dtriton.integrations.steps`). Steady-state calls neither synchronise nor allocate
    outside torch's allocator, so ``torch.cuda.make_graphed_callables(dk, sample_args)`` (tensor
    arguments only) is the opt-in way to replay one CUDA graph per forward and one per backward
    (``bench/grad_bench.py --cuda-graphs``).

    Gradients have the dtype and shape of their inputs. Raises :class:`~dtriton.errors.AlgorithmError`
    for a ``group`` or ``save`` that is none of their choices;
    :class:`~dtriton.errors.ScheduleError` for a ``backward_schedules`` of another type, a key
    that names neither a tensor input nor a backward algorithm, or a value that is not a schedule;
    calls raise what the kernel raises (:class:`~dtriton.errors.ShapeError` for mismatched arguments).
    """

    def __init__(self, kernel, *, backward_schedules: Schedule | Mapping[str, Schedule] | Callable | None = None,
                 save: Sequence[str] | str | None = "auto", group: str = "auto", native: bool | None = None):
        if not hasattr(kernel, "algorithm"):
            raise TypeError(f"differentiable() expects a compiled dtriton kernel, got {type(kernel).__name__}")
        if isinstance(kernel, DifferentiableKernel):
            raise TypeError(f"differentiable() got a kernel that is differentiable already "
                            f"({kernel.algorithm.name}): call it as it is, or pass its compiled kernel (.kernel)")
        self.kernel = kernel
        self.algorithm: Algorithm = kernel.algorithm
        check_group(group, f"differentiable / compile_autograd({self.algorithm.name})")
        self.backward_schedules = check_backward_schedules(self.algorithm, backward_schedules, group)
        check_save(self.algorithm, save, f"differentiable / compile_autograd({self.algorithm.name})")
        self.group = group
        self.save = save
        if native is not None and not isinstance(native, bool):
            raise TypeError(f"differentiable / compile_autograd({self.algorithm.name}): native must be True, False "
                            f"or None, got {native!r}")
        #: whether steady-state steps become C++ autograd nodes (None: :func:`dt.native_steps`'s setting)
        self.native = native
        self._bwd: dict[tuple, tuple[GradientAlgorithms, list[Runner], list]] = {}
        self._zeros: dict[tuple, torch.Tensor] = {}   # (dtype, device) -> a 0-d zero, expanded for absent gradients
        self._fwd_runner = Runner(self.algorithm, getattr(kernel, "schedule", None), kernel)
        # a tuned kernel (its schedule a name: the one it runs is chosen per call, see _saves)
        self._tuned = isinstance(getattr(kernel, "schedule", None), str)
        self._aug = saving_forward(self.algorithm, getattr(kernel, "schedule", None), save)
        # (runner, pick, copies): the forward without the copies of saved outputs (see lean_forward)
        self._lean = (lean_forward(self.algorithm, getattr(kernel, "schedule", None), self._aug[1], kernel)
                      if self._aug is not None else None)
        # call signature -> (saves, has float64 inputs, the forward's runner, pick: see _saves)
        self._save_ok: dict[tuple, tuple[bool, bool, Runner, tuple[int, ...] | None]] = {}
        self._tuned_runners: dict[tuple[str, str], Runner | None] = {}   # see _tuned_choice
        self.is_tensor = tuple(isinstance(p, InputTensor) for p in self.algorithm.params)
        #: the runners of the most recent forward and backward (:meth:`launch_counts`; :meth:`_ran_plain`)
        self.last_runs: dict[str, list[Runner]] = {"forward": [], "backward": []}
        self._plain_runs = [Runner(self.algorithm, getattr(kernel, "schedule", None), kernel)]   # the kernel
        self._plain_runs[0].last = kernel
        self._trained_forward: list[Runner] = []   # the differentiable forward before the latest plain call
        #: ``[backward tag, forward tag]``, written by the native steps' C++ code: the tag of the native
        #: backward variant that ran last (0: the most recent backward ran in Python,
        #: ``last_runs["backward"]``; ``native_runs[tag]``: its runners), and of the call cache entry
        #: whose forward ran last (0: the most recent forward ran in Python; ``native_fwd[tag]``)
        self.native_log = (ctypes.c_int64 * 2)()
        self.native_runs: list[list[Runner]] = [[]]
        self.native_fwd: list[list[Runner]] = [[]]
        #: the C++ call cache of the native steps whose arguments are all tensors (None until one is)
        self._entry = None
        # the steady-state path: call key -> ForwardStep (False: this signature keeps the general path)
        self._steps: dict[tuple, ForwardStep | bool] = {}
        self._size_pos = tuple(self.algorithm.size_args.values())   # int arguments that size axes
        self._req_pos = self.algorithm.requires_pos   # scalar arguments its constraints name
        #: the positions of the non-tensor arguments that are part of the call key (a step's constants)
        self.keyed_pos = (*self._size_pos, *self._req_pos)
        self._printed_key = signature_key_for(self.algorithm).printed   # signature_key, printed for the parameters

    def __reduce__(self):
        """Pickled as what built it (the compiled kernel and the options); backward algorithms,
        runners and steps are derived again on load."""
        return (functools.partial(DifferentiableKernel, backward_schedules=self.backward_schedules, save=self.save,
                                  group=self.group, native=self.native), (self.kernel,))

    def __repr__(self):
        return f"<dt.differentiable {self.algorithm.name} save={self.save!r} group={self.group!r}>"

    # -- backward algorithms ---------------------------------------------------------------------
    def _schedule_for(self, alg: Algorithm, inputs: Sequence[str]) -> Schedule | None:
        s = self.backward_schedules
        if s is None or isinstance(s, Schedule):
            return s
        if callable(s) and not isinstance(s, Mapping):
            got = s(alg)
            if got is not None and not isinstance(got, Schedule):
                raise ScheduleError(f"backward_schedules (a callable) returned {type(got).__name__} {got!r:.60} for the "
                                    f"backward algorithm {alg.name!r}: it must return a dt.Schedule, or None for the "
                                    f"heuristic's schedule")
            return got
        keys = ([alg.name] if alg.name in s else []) + [n for n in inputs if n in s]
        if len({repr(s[k]) for k in keys}) > 1:   # two different entries for one kernel: none may be dropped silently
            raise ScheduleError(f"backward_schedules: the keys {', '.join(map(repr, keys))} all name the backward "
                                f"algorithm {alg.name!r} (it computes the gradients of {', '.join(inputs)} together); "
                                f"give one entry, keyed {alg.name!r}")
        return s[keys[0]] if keys else None

    def gradients(self, wrt: Sequence[str] | None = None, args: Sequence[Any] | None = None) -> GradientAlgorithms:
        """The backward algorithms used for gradients wrt ``wrt`` (default: all inputs); their
        ``saved`` names the statistics the forward saves for them. Under ``save="auto"`` that is
        decided per call signature (a schedule whose saving forward takes more kernels, such as a
        grid over a reduced axis, saves none: the backward recomputes them). ``args``: a call's
        arguments (positional), whose signature is meant; None: the most recent differentiable
        call's (before any, the saving forward's when there is one). Raises ``TypeError`` for
        ``args`` that are not one per parameter of the algorithm."""
        if self._aug is None:
            saving = False
        elif args is not None:
            if not isinstance(args, (tuple, list)) or len(args) != len(self.algorithm.params):
                raise TypeError(f"gradients({self.algorithm.name}): args must be a call's arguments, a tuple of "
                                f"{len(self.algorithm.params)} (one per parameter: "
                                f"{', '.join(p.name for p in self.algorithm.params)}), got {args!r:.80}")
            saving = self._saves(tuple(args))[0]
        else:   # (the differentiable forward that ran last: the plain one saves nothing)
            fwd = self.forward_runs()
            if fwd is self._plain_runs:   # (a call without autograd since: the one before it)
                fwd = self._trained_forward
            saving = fwd[:1] != [self._fwd_runner]
        return self._backward(wrt, saving)[0]

    def _backward(self, wrt: Sequence[str] | None, saving: bool, seeded: tuple[int, ...] | None = None):
        """(gradient algorithms, their runners, per runner the (input name, output index) pairs it
        computes) for gradients wrt ``wrt`` from the outputs ``seeded`` (indices of the outputs
        with an upstream gradient; None: all; :func:`~dtriton.grad.grad`'s ``outputs``: an output
        that receives none is no term of the backward, not a zero it reads), cached per set
        (looked up without the lock first)."""
        key = (frozenset(wrt) if wrt is not None else None, saving, seeded)
        hit = self._bwd.get(key)
        if hit is not None:
            return hit
        with _lock:
            hit = self._bwd.get(key)
            if hit is None:
                saved = self._aug[1] if saving else None
                ga = grad(self.algorithm, wrt, save=saved, group=self.group, outputs=seeded)
                runners = []
                for k, a in enumerate(ga.algorithms):
                    ins = [n for n, (ai, _) in ga.locate.items() if ai == k]
                    own = self._schedule_for(a, ins)
                    origin = (f"backward_schedules, for the backward algorithm {a.name!r} (gradients of "
                              f"{', '.join(ins)})" if own is not None else "")
                    runners.append(Runner(a, own, origin=origin))
                picks = [[(n, oi) for n, (ai, oi) in ga.locate.items() if ai == k] for k in range(len(runners))]
                hit = self._bwd[key] = (ga, runners, picks)
        return hit

    # -- execution -------------------------------------------------------------------------------
    def launch_counts(self) -> dict[str, int]:
        """Kernels launched by the most recent forward and backward: ``{"forward": n, "backward": m}``
        (0 for a pass that has not run). A call without autograd (grad mode off, no input requiring
        grad, or ``out=``) is a forward that records no backward: ``"backward"`` is 0 after it, until
        a backward runs. A native step's backward (C++, no Python) writes which of its variants ran
        (:meth:`native_record`); a Python backward and a call without autograd clear that."""
        runs = {"forward": self.forward_runs(), "backward": self.last_runs["backward"]}
        if self.native_log[0]:
            runs["backward"] = self.native_runs[self.native_log[0]]
        return {k: sum(getattr(r.last, "launch_count", 0) for r in rs) for k, rs in runs.items()}

    def forward_runs(self) -> list[Runner]:
        """The runners of the most recent forward (the C++ call cache's, when its entry ran last)."""
        tag = self.native_log[1]
        return self.native_fwd[tag] if tag else self.last_runs["forward"]

    def ran_forward(self, runners: list[Runner]) -> None:
        """Record that a forward running ``runners`` ran in Python (:meth:`launch_counts`)."""
        self.last_runs["forward"] = runners
        self.native_log[1] = 0

    def enter_native(self, step: ForwardStep, args: Sequence[Any]) -> None:
        """Enter native step ``step`` (made for the call signature of ``args``) in the C++ call
        cache, which then runs calls of that signature with no Python frame after the cache's
        (``__call__``'s first lines); only steps whose arguments are all tensors (the cache keys
        tensors' layouts only) and only when ``args`` still have the signature the step was made
        for."""
        if step.tensor_pos is not None or step.native < 0:
            return
        try:
            same = self._printed_key(tuple(args))[0] == step.key
        except (AttributeError, TypeError, ValueError, RuntimeError):
            return
        if not same:
            return
        if self._entry is None:
            self._entry = native_backend.call_cache(ctypes.addressof(self.native_log) + ctypes.sizeof(ctypes.c_int64))
            if self._entry is None:
                return
        self.native_fwd.append(step.runners)
        self._entry.add(tuple(args), step.native, len(self.native_fwd) - 1)

    def _ran_plain(self) -> None:
        """Record a call without autograd: its forward, no backward (nor native tag); :meth:`gradients`
        keeps to the differentiable forward before it."""
        fwd = self.forward_runs()
        if fwd is not self._plain_runs:
            self._trained_forward = fwd
        self.ran_forward(self._plain_runs)
        self.last_runs["backward"] = []
        self.native_log[0] = 0

    def native_record(self, runners: list[Runner]) -> tuple[int, int]:
        """``(address, tag)`` for a native backward variant running ``runners`` (its backward
        algorithms' runners, whose kernels it launches): each run stores ``tag`` at ``address``
        (:attr:`native_log`), which :meth:`launch_counts` reads."""
        self.native_runs.append(runners)
        return ctypes.addressof(self.native_log), len(self.native_runs) - 1

    def _saves(self, args) -> tuple[bool, bool, Runner, tuple[int, ...] | None]:
        """(whether this call's forward saves the statistics, whether a tensor argument is
        float64, the runner of its forward, ``pick``), cached per call signature. It saves always
        for an explicit ``save=``; under ``"auto"``, when the saving forward runs in no more kernels
        than the plain one on this call signature (a forward whose schedule cannot store them beside
        its outputs, such as flash attention's, recomputes them in the backward instead). ``pick``:
        per saved value, its index among the runner's results, when saved outputs stand for
        themselves (the call's outputs already have the saved copies' dtypes: no copy is written);
        None: the results after the outputs, in order."""
        key = tuple((a.shape, a.dtype, a.device) if isinstance(a, torch.Tensor) else type(a) for a in args)
        hit = self._save_ok.get(key)
        if hit is None:
            fp64 = has_fp64(args)
            aug = self._tuned_choice(self._aug[0], args) if self._tuned else self._aug[0]
            saves = aug is not None
            if saves and self.save == "auto":
                counts = []
                for runner in (self._fwd_runner, aug):
                    k = runner.kernel(fp64)
                    counts.append(len(lower(runner.alg, k.schedule_for(*args), runner.alg.bind(args).axis_sizes).kernels))
                saves = counts[1] <= counts[0]
            runner, pick = (aug if saves else self._fwd_runner), None
            if saves and self._lean is not None and self._outputs_stand_for_copies(args):
                runner, pick = self._lean[0], self._lean[1]
                if self._tuned and runner.alg is not self.algorithm:   # (else the tuned kernel itself)
                    runner = self._tuned_choice(runner, args) or runner
            hit = self._save_ok[key] = (saves, fp64, runner, pick)
        return hit

    def _tuned_choice(self, runner: Runner, args) -> Runner | None:
        """For a tuned kernel: the saving forward ``runner`` (heuristic schedule) with the schedule the
        tuned kernel chose for ``args`` (cached per schedule); ``runner`` itself when it chose the
        heuristic. When the chosen schedule does not apply to the saving forward: None under
        ``save="auto"`` (the call runs the tuned forward and recomputes), else ``runner``."""
        sched = self.kernel.kernel_for(*args).schedule
        if sched is None:
            return runner
        key = (runner.alg.name, sched.to_json())
        if key not in self._tuned_runners:
            try:
                sched.validate(runner.alg)
                self._tuned_runners[key] = Runner(runner.alg, sched)
            except ScheduleError:
                self._tuned_runners[key] = None if self.save == "auto" else runner
        return self._tuned_runners[key]

    def _outputs_stand_for_copies(self, args) -> bool:
        """Whether every saved output of this call has the dtype of the copy the saving forward
        would write (float32 or float64 outputs: the output itself is the saved value)."""
        dtypes = {p.name: a.dtype for p, a in zip(self.algorithm.params, args) if isinstance(p, InputTensor)}
        full = output_dtypes(self._aug[0].alg, dtypes)
        outs = output_dtypes(self.algorithm, dtypes)
        n = len(outs)
        return all(full[n + k] == outs[j] for k, j in self._lean[2].items())

    def _training_forward(self, args, named):
        """The compiled kernel a differentiable call with these arguments runs as its forward."""
        if named:
            args = merge_named(self.algorithm, args, named)
        args = tuple(args)
        if self._aug is None:
            return self._fwd_runner.kernel(has_fp64(args)), args
        _, fp64, runner, _ = self._saves(args)
        return runner.kernel(fp64), args

    def source_for(self, *args, **named) -> str:
        """Generated Triton source of the forward a differentiable call with these arguments runs
        (an input requiring grad, grad mode on; arguments as the call takes them): the saving forward
        (``<name>_fwd_saving``, the statistics of :meth:`gradients` as extra outputs) where this call
        signature saves them (see ``save``), else the kernel's own. Compiles nothing on the GPU. A
        call without gradients runs ``.kernel`` (``dk.kernel.source_for(...)``). Raises what the
        kernel's ``source_for`` raises (:class:`~dtriton.errors.ShapeError` for mismatched arguments)."""
        kern, args = self._training_forward(args, named)
        return kern.source_for(*args)

    def schedule_for(self, *args, **named) -> Schedule:
        """The complete schedule of the forward a differentiable call with these arguments runs
        (the saving forward's or the kernel's own, as :meth:`source_for`); errors as there."""
        kern, args = self._training_forward(args, named)
        return kern.schedule_for(*args)

    def run_forward(self, args) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """Run the forward pass: ``(outputs, saved stage values)``."""
        if self._aug is None:
            self.ran_forward([self._fwd_runner])
            return self._fwd_runner(*args), ()
        saves, fp64, runner, pick = self._saves(args)
        self.ran_forward([runner])
        res = runner(*args, fp64=fp64)
        n = len(self.algorithm.outputs)
        if not saves:
            return res, ()
        return res[:n], (res[n:] if pick is None else tuple(res[i] for i in pick))

    def _make_step(self, args) -> ForwardStep | bool:
        """The :class:`~dtriton.integrations.steps.ForwardStep` repeating the forward that just ran
        on ``args``, or False when its kernel left no fast launcher for them (the interpreter,
        staged operands, ``check_indices``): that signature keeps the general path."""
        (runner,) = self.last_runs["forward"]
        launch = runner.last.fast_launcher_for(args) if runner.last is not None else None
        if launch is None:
            return False
        n_out, n_all = len(self.algorithm.outputs), len(runner.alg.outputs)
        pick = self._saves(args)[3] if self._aug is not None else None
        if pick is not None:   # saved outputs stand for themselves (with any statistics after them, unpacked)
            return ForwardStep(self, [runner], launch, n_out, n_all, self.is_tensor, pick=pick)
        if n_all > n_out:   # the saved statistics in one buffer (when each of them can be packed)
            packed = launch.packed(n_out, buffers=False)
            if packed is not None and packed.offsets and set(packed.offsets) == set(range(n_out, n_all)):
                layout = tuple(packed.offsets[k] for k in range(n_out, n_all))
                return ForwardStep(self, [runner], packed, n_out, n_out + 1, self.is_tensor, layout)
        return ForwardStep(self, [runner], launch, n_out, n_all, self.is_tensor)

    def _zero(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A cached 0-d zero of ``dtype`` on ``device`` (the gradient of an output that receives none,
        expanded to its shape: the backward kernels only read it)."""
        key = (dtype, device)
        z = self._zeros.get(key)
        if z is None:
            z = self._zeros[key] = torch.zeros((), dtype=dtype, device=device)
        return z

    def _backward_inputs(self, args, grads, saved) -> tuple[tuple, dict[int, torch.Tensor]]:
        """(the backward kernels' arguments: ``args``, one gradient per output, ``saved``; the
        read-only zeros standing for the outputs whose gradient is ``None``, by output index)."""
        outs = None
        fixed = []
        zeros = {}
        for k, g in enumerate(grads):
            if g is None:
                if outs is None:
                    outs = output_specs(self.algorithm, args)
                shape, dt = outs[k]
                dev = next(a.device for a in args if isinstance(a, torch.Tensor))
                g = zeros[k] = self._zero(dt, dev).expand(shape)   # read-only: no fill kernel per step
            fixed.append(g)
        return (*args, *fixed, *saved), zeros

    def wrt_of(self, args, needs: Sequence[bool]) -> list[str]:
        """The names of the inputs that get gradients: tensors flagged in ``needs`` (one flag per
        parameter: autograd's ``needs_input_grad``) with a floating dtype."""
        return [p.name for p, nd, a in zip(self.algorithm.params, needs, args)
                if nd and isinstance(p, InputTensor) and a.dtype.is_floating_point]

    def backward_step(self, args, grads, saved, needs: Sequence[bool],
                      layout: tuple | None = None) -> tuple[tuple, BackwardStep | None]:
        """Run a backward on the general path (:meth:`run_backward`) and build the
        :class:`~dtriton.integrations.steps.BackwardStep` that repeats it for the same forward
        signature, ``needs`` (per parameter) and gradient signature. ``layout``: the forward
        step's packed statistics (``(byte offset, shape, dtype)`` each; ``saved`` are then views
        of that buffer): the step's launchers read them from the one buffer it passes. Returns
        (``(None, gradient per parameter)``, the step or None when a kernel of it has no fast
        launcher, or cannot read the packed statistics)."""
        params = self.algorithm.params
        wrt = self.wrt_of(args, needs)
        res = self.run_backward(args, grads, saved, wrt)
        out = (None, *[res.get(p.name) for p in params])
        if not wrt or not fast_path_ok():
            return out, None
        _, runners, picks = self._backward(wrt, bool(saved), seeded_outputs(grads))
        bargs, zeros = self._backward_inputs(args, grads, saved)
        pos = {p.name: k for k, p in enumerate(params)}
        launches = []
        first = len(params) + len(self.algorithm.outputs)   # the saved statistics' positions among bargs
        remap = {first + k: (first, off) for k, (off, _, _) in enumerate(layout or ())}
        for runner, pick in zip(runners, picks):
            launch = runner.last.fast_launcher_for(bargs) if runner.last is not None else None
            n_res = len(runner.alg.outputs)
            if launch is not None:   # the step's buffers in one allocation, the statistics read from the forward's
                launch = launch.packed(n_res, remap)
            if launch is None:
                return out, None
            launches.append((launch, n_res == 1 and launch.offsets is None,
                             [(oi, pos[n], args[pos[n]].dtype) for n, oi in pick]))
        picked = {n for pick in picks for n, _ in pick}
        return out, BackwardStep(launches, zeros, len(params), runners,
                                 launches[0][0].out_dtypes if len(launches) == 1 else (),
                                 tuple(pos[n] for n in wrt if n not in picked))

    def run_backward(self, args, grads, saved, wrt: Sequence[str]) -> dict[str, torch.Tensor | None]:
        """Gradients wrt the inputs named ``wrt`` for upstream gradients ``grads`` (one per output,
        ``None`` for zero). Returns ``{name: gradient}``: an input no output depends on (or whose derived
        gradient is identically zero) gets :func:`~dtriton.integrations.steps.zero_gradient` of it."""
        alg = self.algorithm
        if not wrt:
            return {}
        ga, runners, picks = self._backward(wrt, bool(saved), seeded_outputs(grads))
        self.last_runs["backward"] = runners
        self.native_log[0] = 0
        bargs = self._backward_inputs(args, grads, saved)[0]
        res: dict[str, torch.Tensor | None] = dict.fromkeys(wrt)
        argmap = {p.name: a for p, a in zip(alg.params, args)}
        fp64 = has_fp64(bargs)
        for runner, pick in zip(runners, picks):
            vals = runner(*bargs, fp64=fp64)
            for n, oi in pick:
                x = argmap[n]
                v = vals[oi]
                res[n] = v if v.dtype == x.dtype else v.to(x.dtype)
        for n, v in res.items():
            if v is None:   # no output depends on it: zeros, as torch gives an input its op used
                res[n] = zero_gradient(argmap[n])
        return res

    def __call__(self, *args, out=None, **named):
        """Run the kernel, differentiably when an input requires grad (arguments by name as for
        :class:`~dtriton.Kernel`). A call signature seen before (same cheap key:
        :func:`~dtriton.runtime.args.signature_key`) runs its cached
        :class:`~dtriton.integrations.steps.ForwardStep`; a new one takes the general path, which
        checks the arguments, and leaves the step. Under ``torch.compile`` the call runs outside
        the graph (a graph break: ``dt.as_torch_op`` puts a kernel in it)."""
        entry = self._entry   # (the C++ call cache of native steps: None on a miss)
        if (entry is not None and out is None and not named and not tracing() and fast_path_ok()
                and (self.native or (self.native is None and native_backend.enabled()))):
            res = entry(args)
            if res is not None:
                return res
        if tracing():
            return outside_graph(self.__call__, args, dict(named, out=out))
        if named:
            args = merge_named(self.kernel.algorithm, args, named)
        if transforms_active():
            refuse_transforms(self.algorithm.name, args)
        if out is None and torch.is_grad_enabled():
            try:   # (the steady path is inlined: each Python frame counts on a slow host)
                key, needs_grad = self._printed_key(args)
            except (AttributeError, TypeError, ValueError, RuntimeError):   # (RuntimeError: a sparse tensor)
                key, needs_grad = signature_key(args)
            if needs_grad:
                if self._size_pos:
                    key += tuple(int(args[p]) for p in self._size_pos)
                if self._req_pos:   # the scalars dt.requires constraints name: a step runs checked values only
                    key += tuple(args[p] for p in self._req_pos)
                try:
                    step = self._steps.get(key)
                except TypeError:   # (an unhashable scalar, a 0-d numpy array: the general path, no step)
                    args, key, step = plain_numbers(args), None, None
                if step and fast_path_ok():
                    if ENTER_STEP is not None and not functorch_active():
                        if step.native >= 0 and (self.native or (self.native is None and native_backend.enabled())):
                            self.ran_forward(step.runners)   # a C++ autograd node (None: not on this
                            res = step.native_call(args)     # stream, or forward-mode AD inputs)
                            if res is not None:
                                return res
                        return ENTER_STEP(step, *args)
                    return apply_step(step, args)
                res = _DTFunction.apply(self, *args)
                if step is None and key is not None and fast_path_ok():
                    step = self._steps[key] = self._make_step(args)
                    if step:
                        step.key = key
                return res
        r = self.kernel(*args) if out is None else self.kernel(*args, out=out)
        self._ran_plain()
        return r


class _DTFunction(torch.autograd.Function):
    """forward: the dtriton kernel; backward: the derived backward kernels."""

    @staticmethod
    def forward(ctx, dk: DifferentiableKernel, *args):
        # an output without a gradient arrives as None (not a zero filled per step): the backward is
        # then derived without its term (DifferentiableKernel._backward's seeded outputs)
        ctx.set_materialize_grads(False)
        with torch.no_grad():
            outs, saved = dk.run_forward(args)
        is_t = dk.is_tensor
        ctx.dk = dk
        ctx.is_t = is_t
        ctx.scalars = [None if t else a for t, a in zip(is_t, args)]
        ctx.n_saved = len(saved)
        ctx.save_for_backward(*[a for t, a in zip(is_t, args) if t], *saved)
        return outs[0] if len(outs) == 1 else tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        refuse_double_backward(ctx.dk.algorithm.name, grads)
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
        wrt = dk.wrt_of(args, ctx.needs_input_grad[1:])
        res = dk.run_backward(args, list(grads), saved, wrt)
        return (None, *[res.get(p.name) for p in alg.params])


#: the options of :class:`DifferentiableKernel` (``dt.differentiable``, ``dt.compile_autograd``)
OPTIONS = ("backward_schedules", "save", "group", "native")


def check_options(where: str, kw: Mapping[str, Any]) -> None:
    """Raise ``TypeError`` for a keyword of ``kw`` that is none of :data:`OPTIONS` (naming ``where``,
    the closest option and all of them)."""
    for k in kw:
        if k not in OPTIONS:
            near = difflib.get_close_matches(k, OPTIONS, n=1)
            raise TypeError(f"{where}: unknown option {k!r}" + (f"; did you mean {near[0]!r}?" if near else "")
                            + f" (options: {', '.join(OPTIONS)})")


def differentiable(kernel, **kw) -> DifferentiableKernel:
    """Make a compiled kernel differentiable (see :class:`DifferentiableKernel` for options).

    ``dk = dt.differentiable(dt.compile(alg, sched)); y = dk(x, w); y.sum().backward()``.

    Raises:
        TypeError: an option is none of :data:`OPTIONS` (the message names the closest), or
            ``kernel`` is already differentiable."""
    check_options(f"dt.differentiable({getattr(getattr(kernel, 'algorithm', None), 'name', kernel)!s:.60})", kw)
    return DifferentiableKernel(kernel, **kw)


_hooked: "weakref.WeakKeyDictionary[Any, DifferentiableKernel]" = weakref.WeakKeyDictionary()


def apply(kernel, args: Sequence[Any], out=None):
    """The hook installed as ``Kernel.grad_call``: run ``kernel(*args)`` through autograd (default options:
    the forward saves the statistics the backward reads, heuristic backward schedules). Called only when an input requires grad and grad
    mode is on. ``out=`` is not supported for differentiable calls (torch forbids writing
    results that need grad into given tensors) and raises :class:`ShapeError`."""
    if out is not None:
        raise ShapeError("out= cannot be used when an input requires grad; call the kernel under "
                         "torch.no_grad() or drop out=")
    dk = _hooked.get(kernel)
    if dk is None:
        dk = _hooked[kernel] = DifferentiableKernel(kernel)
    return dk(*args)


# the runtime calls Kernel.grad_call for calls whose inputs require grad (see the module docstring)
Kernel.grad_call = apply
