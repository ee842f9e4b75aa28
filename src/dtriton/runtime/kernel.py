"""Runtime: the Kernel (bind -> complete the schedule -> CallSpec -> plan -> backend render/load ->
launch), its caches, and the backend choice (GPU or Triton interpreter).

``dt.compile(alg, schedule)`` returns a :class:`Kernel`. Calling it binds and checks the
arguments, completes the schedule for the call's shapes (the heuristic fills what the schedule
leaves open), lowers and generates Triton source once per *specialisation* (which axes divide
their tile, the block of "whole" axes, dtypes, int64 offsets, backend), loads it as a module,
allocates outputs and intermediate buffers, and launches the kernels in order.

Backend: CUDA tensors run on the GPU; CPU tensors run through Triton's interpreter. The
environment variable ``DTRITON_BACKEND=interpreter`` forces the interpreter (inputs are moved to
the CPU and results moved back), ``DTRITON_BACKEND=gpu`` refuses to fall back.
"""

from __future__ import annotations

import math
import os
import tempfile
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..backends.base import KernelMeta
from ..backends import default_backend
from ..errors import CompileError, ResourceError, ScheduleWarning, ShapeError
from ..schedule import Schedule, complete_schedule, fits_smem, operand_itemsize, shrink
from ..ir import Algorithm, Binding, InputTensor, check_reads, contraction_operands
from ..plan import CallSpec, KernelPlan, Program, call_spec, plan_program, tma_addressable, unused_knobs
from ..plan.callspec import I32_MAX
from ..plan.launch_grid import MAX_GRID_YZ
from ..plan.smem import program_fits
from ..plan.staging import kmajor_copies, stage_inputs
from ..plan.split_work import idle_split_slices
from .args import (call_key, check_given_out, merge_named, normalise_out, outside_graph, overlap, plain_numbers,
                   refuse_transforms, signature_key_for, spec_key, tracing, transforms_active)

__all__ = ["Kernel", "backend_for", "cache_dir", "fast_path_ok"]

_BACKEND = default_backend()
_fast_ok = _BACKEND.fast_path_ok   # no launch hooks: the fast path may run (looked up once)
#: ``fast_path_ok() -> bool``: whether fast launchers may run now (no launch hook, such as a
#: profiler's, is installed; those need the slow path). Checked on every fast call.
fast_path_ok = _fast_ok


def cache_dir() -> Path:
    """Where generated sources live: ``$DTRITON_CACHE_DIR`` or ``~/.cache/dtriton``."""
    d = os.environ.get("DTRITON_CACHE_DIR")
    p = Path(d) if d else Path.home() / ".cache" / "dtriton"
    try:
        (p / "kernels").mkdir(parents=True, exist_ok=True)
    except OSError:
        p = Path(tempfile.gettempdir()) / "dtriton"
        (p / "kernels").mkdir(parents=True, exist_ok=True)
    return p


def backend_for(device: torch.device) -> str:
    """"gpu" for CUDA tensors, else "interpreter"; ``DTRITON_BACKEND`` overrides."""
    force = os.environ.get("DTRITON_BACKEND", "").lower()
    if force not in ("", "interpreter", "interpret", "cpu", "gpu", "auto"):
        raise ShapeError(f"DTRITON_BACKEND={force!r} is not understood; use 'interpreter', 'gpu', or leave it unset")
    if force in ("interpreter", "interpret", "cpu"):
        return "interpreter"
    if device.type == "cuda":
        return "gpu"
    if force == "gpu":
        raise ShapeError("DTRITON_BACKEND=gpu but the inputs are on the CPU; move them to CUDA or unset it")
    return "interpreter"


@dataclass
class _Launch:
    fn: Any
    meta: KernelMeta
    dims: list[list[tuple[tuple[str, ...], int]]]   # per launch-grid dimension (x first): (the axes of a grid
                                                    # axis, several for a flat one, tile) (KernelPlan.launch_counts)
    split: int
    persistent: int = 0   # >0: at most this many programs, each looping over tiles

    def grid(self, sizes: dict[str, int]) -> tuple[int, ...]:
        """The launch grid, dimension 0 first: each dimension's output tiles, dimension 0's times the
        split; one dimension of at most ``persistent`` programs for a persistent kernel. A product
        of 0: nothing to do."""
        counts = []
        for pairs in self.dims:
            n = KernelPlan.tile_programs(pairs, sizes)
            if n is None:
                missing = [a for axes, _ in pairs for a in axes if a not in sizes]
                raise CompileError(f"kernel {self.meta.name}: grid axes {missing} have no size on this call (a dtriton bug)")
            counts.append(n)
        counts[0] *= self.split
        if self.persistent:
            return (min(counts[0], self.persistent) if counts[0] else 0,)
        return tuple(counts)

    def programs(self, sizes: dict[str, int]) -> int:
        """Programs to launch: the product of :meth:`grid` (0: nothing to do)."""
        return math.prod(self.grid(sizes))


def _persistent_programs(per_sm: int, device: torch.device) -> int:
    """Programs of a persistent launch: ``per_sm`` per multiprocessor (4 in all on the interpreter)."""
    if device.type != "cuda":
        return 4
    return per_sm * torch.cuda.get_device_properties(device).multi_processor_count


@dataclass
class _Plan:
    """Everything needed to run one specialisation: program, module, launches."""
    schedule: Schedule
    program: Program
    source: str
    launches: list[_Launch]
    interpret: bool


def _overlaps_input(args, outs) -> bool:
    """Some ``out=`` tensor shares memory with an input (an in-place call, ``out=X``, or a partial overlap)."""
    return any(isinstance(a, torch.Tensor) and overlap(a, t) for a in args for t in outs)


def _fresh_outs(args, outs) -> bool:
    """``out=`` tensors that a signature's fast launcher may be built from and write (its
    :meth:`FastLauncher.takes` also checks shapes and dtypes): contiguous, 16-byte aligned as a fresh
    allocation is, overlapping no input."""
    return all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in outs) and not _overlaps_input(args, outs)


class Kernel:
    """A compiled algorithm + schedule. Call it like the algorithm: ``C = kernel(A, B)``.

    Attributes:
        algorithm: the :class:`~dtriton.ir.Algorithm`.
        schedule: the schedule as given (``None`` fields are completed per call shape).
        source: generated Triton source of the most recent specialisation (compiles one for the
            algorithm's example shapes if nothing ran yet; see :meth:`source_for`).
    """

    #: ``grad_call(kernel, args, out=None)`` runs a call whose inputs require grad through torch
    #: autograd; installed by :mod:`dtriton.integrations.autograd` when imported (``import dtriton``
    #: does). ``None``: no integration, such calls run as plain calls.
    grad_call = None

    def __init__(self, alg: Algorithm, schedule: Schedule | None, check_indices: bool | None = None):
        if not isinstance(alg, Algorithm):
            raise TypeError(f"dt.compile expects an @dt.algorithm, got {type(alg).__name__}")
        if schedule is not None and not isinstance(schedule, Schedule):
            raise TypeError(f"schedule must be a dt.Schedule, got {type(schedule).__name__}")
        if schedule is not None:
            schedule.validate(alg)
        self.algorithm = alg
        self.schedule = schedule
        # check computed and gathered indices on the call's data before launching (the interpreter
        # always does); None: DTRITON_CHECK_INDICES=1 turns it on
        self.check_indices = os.environ.get("DTRITON_CHECK_INDICES") == "1" if check_indices is None else bool(check_indices)
        self._plans: dict[tuple, _Plan] = {}
        self._specs: dict[tuple, list] = {}   # call signature -> [CallSpec without TMA facts, TMA facts or None]
        self.quiet = False   # True: no ScheduleWarning for knobs a call cannot use (explore's candidates)
        self._fast: dict[tuple, tuple[_Plan, Any]] = {}
        self._shrunk: dict[Schedule, Schedule] = {}   # a default schedule -> the smaller one that fits
        self._fits: dict[tuple, Schedule] = {}   # (default schedule, call spec) -> the one whose kernels fit
        self._last: _Plan | None = None
        self._key = signature_key_for(alg)   # signature_key, printed for the algorithm's parameters
        self._size_pos = tuple(alg.size_args.values())   # the int arguments that size axes
        # the scalar arguments the algorithm's constraints (dt.requires) name: their values key the
        # fast launchers and call specs, so only the slow path (whose binding checks) meets new ones
        self._req_pos = alg.requires_pos

    def __reduce__(self):
        """Pickled as what built it (algorithm, schedule, ``check_indices``): compiled code and
        caches are made again on load. The algorithm pickles by reference (see ``Algorithm``)."""
        return Kernel, (self.algorithm, self.schedule, self.check_indices)

    # ------------------------------------------------------------------------------------------
    def complete(self, binding: Binding) -> Schedule:
        """The full schedule used for a call with this binding (heuristic fills the gaps)."""
        return complete_schedule(self.algorithm, self.schedule, binding)

    def _auto_access(self, sched: Schedule, b: Binding, args, out=None, own: frozenset | None = None,
                     viewed: frozenset | None = None) -> Schedule:
        """The heuristic's TMA pick (``access`` left None) only where every input tile TMA would
        read is TMA-addressable on this call: mixing TMA and pointer operands in one dot loop was
        slower than pointers alone on the H200 (2048^3 fp16 with a transposed B: 39.1 against
        29.6 us). A user's explicit ``access="tma"`` is kept (the tensors TMA cannot address
        fall back one by one). ``own``: the tensors TMA can address in their own dim order on
        this call, and ``viewed`` those it can address through a transposed view, when already known."""
        if sched.access != "tma" or (self.schedule is not None and self.schedule.access is not None):
            return sched
        # ... and in their own dim order: on the H200 a transposed fp16 operand read through TMA of
        # its transposed view took 293 us at 4096^3 with 128x128x64 tiles against 225 us through
        # pointers (bench/results/probe_fp32.json); explicit access="tma" still reads it so. With
        # 16-bit 128x256 tiles (the heuristic's wide GEMM tile) the view wins: NT fp16 4096^3 221.6 us
        # through TMA against 243.3 through pointers (bench/results/issue14/probe_nt_call2.json)
        if max(sched.tile.values(), default=0) >= 256:
            own = tma_addressable(self.algorithm, b, args, out) if viewed is None else viewed
        ok = tma_addressable(self.algorithm, b, args, out, views=False) if own is None else own
        tiles = [p.name for p, a in zip(self.algorithm.params, args)
                 if isinstance(p, InputTensor) and isinstance(a, torch.Tensor) and sum(n > 1 for n in a.shape) >= 2]
        # where there are dot loops, their operands decide (a grouped bias b[g, c] of 8-byte rows, read
        # once per tile after the loop, is no reason to stream the GEMM's operands through pointers)
        operands = contraction_operands(self.algorithm)
        tiles = [t for t in tiles if t in operands] if operands else tiles
        return sched if all(t in ok for t in tiles) else sched.replace(access="pointer")

    def _schedule_and_spec(self, b: Binding, args, interpret: bool, out=None) -> tuple[Schedule, CallSpec]:
        """The complete schedule of a call and its :class:`CallSpec`. The CallSpec (and the TMA
        facts, computed once where the schedule asks for TMA) is cached per call signature: the
        tensors' call keys and storage offsets (64-bit offsets depend on them), ``out=``'s, and
        the backend."""
        key = spec_key(args, out, interpret)
        key = key if key is None else key + self._sized(args)
        hit = self._specs.get(key) if key is not None else None
        if hit is None:
            # the spec without TMA facts; the TMA-addressable tensors (transposed views allowed); the
            # TMA-addressable tensors in their own dim order (the heuristic's TMA pick)
            hit = [call_spec(self.algorithm, b, args, interpret, out, flat=self._asks_flat()), None, None]
            if key is not None:
                self._specs[key] = hit
        sched = self.complete(b)
        tma = frozenset()
        if sched.access == "tma":
            if hit[1] is None:
                hit[1] = tma_addressable(self.algorithm, b, args, out)
                hit[2] = tma_addressable(self.algorithm, b, args, out, views=False)
            tma = hit[1]
        sched = self._auto_access(sched, b, args, out, hit[2], hit[1])
        spec = hit[0]
        if sched.access == "tma":
            # TMA reads a transposed tensor through the view with its unit-stride dim last: the plan
            # needs every tensor's unit-stride dim then
            spec = replace(hit[0], tma_ok=tma, unit_dims=tuple(sorted(b.unit_dims.items())) if tma else
                           hit[0].unit_dims)
        return self._fitted(sched, b, interpret, spec), spec

    def _fitted(self, sched: Schedule, b: Binding, interpret: bool, spec: CallSpec) -> Schedule:
        """A default schedule checked against the backend's resources before it is used: on the
        GPU, shrunk (:func:`~dtriton.schedule.shrink`) until every kernel of its plan for this call
        (``spec``) fits in shared memory by :func:`~dtriton.plan.smem.program_fits` (each pipelined
        loop's rings of loaded tiles, the dot operands' copies, TMA store staging), and plans
        without a block over Triton's limit; then the smaller schedule an earlier call of this
        signature fell back to, if any. Decided once per (schedule, call spec)."""
        if self.schedule is not None:
            return sched
        first = sched
        key = (first, spec)
        if key not in self._fits and not interpret:
            limit = _BACKEND.limits.smem_bytes
            size = operand_itemsize(self.algorithm, b.dtypes)   # (the dot operands': not fp8's fp32 scales)
            while not (fits_smem(self.algorithm, sched, size, limit) and self._plan_fits(sched, b, spec, limit)):
                smaller = shrink(sched, b.axis_sizes)
                if smaller is None:
                    break
                sched = smaller
            self._fits[key] = sched
        fitted = self._fits.get(key, sched)
        return self._shrunk.get(fitted, fitted)   # (a launch of it that failed on a resource: its fallback)

    def _plan_fits(self, sched: Schedule, b: Binding, spec: CallSpec, limit: int) -> bool:
        """Whether ``sched`` plans and prints for this call with every kernel within ``limit`` bytes
        of shared memory and no block over Triton's limit (another planning error: True, the call
        raises it as before)."""
        try:
            prog = plan_program(self.algorithm, sched, b, spec)
            if program_fits(prog, limit) is not None:
                return False
            _BACKEND.render(prog)   # (the printer refuses a value's block over Triton's limit)
        except ResourceError:
            return False
        except Exception:  # noqa: BLE001 - not a resource: the call plans again and raises it
            return True
        return True

    def _asks_flat(self) -> bool:
        """Whether the schedule asks for ``flat_axes`` (anywhere): its plans read the dense facts."""
        s = self.schedule
        return s is not None and bool(s.flat_axes or any(st.flat_axes for st in s.stages.values()))

    def _plan(self, sched: Schedule, b: Binding, args, interpret: bool, out=None, spec: CallSpec | None = None,
              warn_level: int = 3) -> _Plan:
        if spec is None:
            tma = tma_addressable(self.algorithm, b, args, out) if sched.access == "tma" else frozenset()
            spec = call_spec(self.algorithm, b, args, interpret, out, tma, flat=self._asks_flat())
        key = (sched, spec)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        alg = self.algorithm
        sched.validate(alg)
        prog = plan_program(alg, sched, b, spec)
        source, metas = _BACKEND.render(prog)
        try:
            mod = _BACKEND.load(source, interpret, cache_dir() / "kernels")
        except Exception as e:  # pragma: no cover - generator bug
            raise CompileError(f"generated source for {alg.name} failed to load: {e}") from e
        launches = []
        for m in metas:
            fn = getattr(mod, m.name)
            launches.append(_Launch(fn, m, m.ir.launch_counts(), m.ir.split_factor,
                                    _persistent_programs(m.ir.persistent, b.device) if m.ir.persistent else 0))
        if not self.quiet:
            for note in unused_knobs(alg, sched, prog) + idle_split_slices(
                    prog, b.axis_sizes, self.schedule.split if self.schedule is not None else ()):
                # warn_level: the frames up to the user's call (3 from source_for, 4 through _plan_and_run)
                warnings.warn(f"{alg.name}: {note}", ScheduleWarning, stacklevel=warn_level)
        plan = _Plan(sched, prog, source, launches, interpret)
        self._plans[key] = plan
        return plan

    @property
    def source(self) -> str:
        if self._last is None:
            raise AttributeError("kernel.source is available after the first call, or use kernel.source_for(*args)")
        return self._last.source

    @property
    def launch_count(self) -> int:
        """Kernels the most recent call launched (0 before the first call)."""
        return len(self._last.launches) if self._last is not None else 0

    def _staged(self, args, b: Binding, interpret: bool) -> tuple[tuple, Binding, bool]:
        """The call's arguments after operand staging (:mod:`dtriton.plan.staging`: an fp32 contraction
        whose operands are both MN-major gets one copied K-major, on the GPU), their binding, and
        whether a copy was made."""
        precision = self.schedule.precision if self.schedule is not None else "auto"
        copies = kmajor_copies(self.algorithm, b, precision, not interpret)
        if not copies:
            return tuple(args), b, False
        args = stage_inputs(self.algorithm, args, copies)
        return args, self.algorithm.bind(args), True

    def source_for(self, *args, **named) -> str:
        """Generated Triton source for a call with these arguments (compiles nothing on the GPU),
        positional or by parameter name as the call takes them (a :class:`ShapeError` for a missing,
        repeated or unknown one)."""
        if named:
            args = merge_named(self.algorithm, args, named)
        args = plain_numbers(args)
        b = self.algorithm.bind(args)
        interpret = backend_for(b.device) == "interpreter"
        args, b, _ = self._staged(args, b, interpret)
        sched, spec = self._schedule_and_spec(b, args, interpret)
        return self._plan(sched, b, args, interpret, spec=spec).source

    def program_for(self, *args, **named) -> Program:
        """The planned :class:`~dtriton.plan.Program` a call with these arguments runs (its kernels
        and every decision; compiles nothing on the GPU), arguments as :meth:`source_for` takes them."""
        if named:
            args = merge_named(self.algorithm, args, named)
        b = self.algorithm.bind(args)
        interpret = backend_for(b.device) == "interpreter"
        args, b, _ = self._staged(args, b, interpret)
        sched, spec = self._schedule_and_spec(b, args, interpret)
        return self._plan(sched, b, args, interpret, spec=spec).program

    def schedule_for(self, *args, **named) -> Schedule:
        """The complete schedule a call with these arguments runs (given positionally or by parameter
        name, as the call takes them)."""
        if named:
            args = merge_named(self.algorithm, args, named)
        b = self.algorithm.bind(args)
        interpret = backend_for(b.device) == "interpreter"
        args, b, _ = self._staged(args, b, interpret)
        return self._schedule_and_spec(b, args, interpret)[0]

    # ------------------------------------------------------------------------------------------
    def __call__(self, *args, out=None, **named):
        """Run the kernel(s) on the algorithm's arguments, positionally or by parameter name
        (``kernel(A, B)`` or ``kernel(A=A, B=B)``). Inputs that require grad route the call
        through autograd (``Kernel.grad_call``, installed by :mod:`dtriton.integrations.autograd`), whose backward runs the derived backward
        kernels. Raises :class:`ShapeError` for missing, repeated or unknown arguments. Under
        ``torch.compile`` the call runs outside the graph (a graph break; ``dt.as_torch_op`` puts a
        kernel in it)."""
        if tracing():
            return outside_graph(self.__call__, args, dict(named, out=out))
        if named:
            args = merge_named(self.algorithm, args, named)
        if transforms_active():
            refuse_transforms(self.algorithm.name, args)
        if out is not None:
            out = normalise_out(self.algorithm, out)
        key, grad = self._key(args)
        if grad and self.grad_call is not None and torch.is_grad_enabled():
            return self.grad_call(args, out=out)
        if self._fast and not self.check_indices:
            try:
                fast = self._fast.get(key + self._sized(args) if self._size_pos or self._req_pos else key)
            except TypeError:   # (an unhashable scalar, a 0-d numpy array: the slow path reads its number)
                fast = None
            if fast is not None and _fast_ok():
                if out is None:
                    return fast(args)
                # out= tensors laid out as the launcher's own allocations, overlapping no input (an in-place
                # call, out=X, takes the slow path, which decides whether the plan allows it)
                if fast.takes(out) and not _overlaps_input(args, out):   # (takes: laid out as its allocations)
                    return fast.into(args, out)
        alg = self.algorithm
        args = plain_numbers(args)   # numpy scalars as Python numbers (same signature key)
        b = alg.bind(args)
        if b.device.type not in ("cuda", "cpu"):
            raise ShapeError(f"{alg.name}: the inputs are on {b.device}; dtriton runs kernels on CUDA tensors, or on "
                             f"CPU tensors through Triton's interpreter (for shape-only tracing use "
                             f"dt.as_torch_op, whose fake implementation handles meta tensors)")
        backend = backend_for(b.device)
        interpret = backend == "interpreter"
        orig_dev = b.device
        if interpret and b.device.type != "cpu":
            args = tuple(a.cpu() if isinstance(a, torch.Tensor) else a for a in args)
            b.device = torch.device("cpu")
        if interpret or self.check_indices:   # gathers and data-guarded reads: an IndexRangeError
            check_reads(alg, b, args)
        args, b, staged = self._staged(args, b, interpret)
        sched, spec = self._schedule_and_spec(b, args, interpret, out)
        plan, outs, compiled = self._plan_and_run(sched, b, args, interpret, out, spec)
        # (a staged call keeps the slow path: the fast launcher would pass the tensors as given)
        fresh = out is None or _fresh_outs(args, out)
        if fresh and not interpret and not staged and len(compiled) == len(plan.launches) and _fast_ok():
            self._fast[call_key(args) + self._sized(args)] = _BACKEND.fast_launcher(alg, plan, b, compiled, args)
        if interpret and orig_dev.type != "cpu":
            outs = [o.to(orig_dev) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def fast_launcher_for(self, args):
        """The fast launcher an earlier call of this signature left (``args`` positional, as that
        call passed them, whether or not they require grad), or None: the signature has not run on
        the GPU, its arguments were staged, or ``check_indices`` is on (those calls take the slow
        path). Calling it with ``args`` of that signature returns the outputs as the kernel does."""
        if self.check_indices or not self._fast:
            return None
        try:
            return self._fast.get(self._key(args)[0] + self._sized(args))
        except TypeError:   # (an unhashable scalar, a 0-d numpy array: its calls take the slow path)
            return None

    def _sized(self, args) -> tuple:
        """The values of the int arguments that size axes (``dt.axes("h:Ho")``): part of the keys
        of call specs and fast launchers, as tensor shapes are; then the values of the scalars the
        algorithm's constraints name (a launcher runs only values a binding has checked)."""
        if self._req_pos:
            return tuple(int(args[pos]) for pos in self._size_pos) + tuple(args[pos] for pos in self._req_pos)
        return tuple(int(args[pos]) for pos in self._size_pos)

    def _plan_and_run(self, sched: Schedule, b: Binding, args, interpret: bool, out, spec: CallSpec):
        """Plan and run ``sched``; returns (plan, outputs, compiled kernels). For a default
        schedule (none given) a resource failure (a :class:`ResourceError` while printing, or
        the backend's resource error when Triton compiles) takes the next smaller schedule
        (:func:`~dtriton.schedule.shrink`) and retries, with a :class:`ScheduleWarning`; later
        calls of this signature start from the schedule that ran."""
        first, why = sched, None
        while True:
            try:
                plan = self._plan(sched, b, args, interpret, out, spec, warn_level=4)
                self._last = plan
                compiled: list = []
                outs = self._run(plan, b, args, out, compiled)
                break
            except CompileError as e:   # ResourceError is one too
                smaller = shrink(sched, b.axis_sizes) if self._may_shrink(e) else None
                if smaller is None:
                    raise
                why = why or str(e).splitlines()[0][:200]
                self._shrunk[first] = sched = smaller
        if why is not None:
            warnings.warn(f"{self.algorithm.name}: the default schedule {first.to_json()} exceeds a resource limit "
                          f"({why}); it runs with the smaller {sched.to_json()}. Pass a schedule to choose the tiles "
                          "yourself", ScheduleWarning, stacklevel=3)
        return plan, outs, compiled

    def _may_shrink(self, e: CompileError) -> bool:
        """Whether failure ``e`` of a call may be retried with a smaller schedule: no schedule was
        given and it is a resource limit (a block too large, shared memory, registers)."""
        if self.schedule is not None:
            return False
        return isinstance(e, ResourceError) or (e.__cause__ is not None and _BACKEND.is_resource_error(e.__cause__))

    def _run(self, plan: _Plan, b: Binding, args, out=None, compiled: list | None = None) -> list[torch.Tensor]:
        alg = self.algorithm
        dev = b.device
        sizes = b.axis_sizes
        tensors: dict[str, torch.Tensor] = {}
        scalars: dict[str, float] = {}
        for p, a in zip(alg.params, args):
            if isinstance(p, InputTensor):
                tensors[p.name] = a
            else:
                scalars[f"s_{p.name}"] = float(a) if p.pytype is float else int(a)
        outs = []
        for k, (o, odt) in enumerate(zip(alg.outputs, b.out_dtypes)):
            shape = [sizes[a] for a in o.layout]
            given = None if out is None else (out[k] if isinstance(out, (tuple, list)) else out)
            if given is not None:
                check_given_out(alg, plan.schedule, o.name, given, shape, odt, dev, tensors,
                                frozenset(rid for km in plan.program.kernels for rid in km.materialized))
                t = given
            else:
                t = torch.empty(shape, dtype=odt, device=dev)
            if o.name in plan.program.output_direct:
                t.zero_()  # split-K atomics accumulate into it
            tensors[o.name] = t
            outs.append(t)
        if any(t.numel() == 0 for t in outs):
            if all(t.numel() == 0 for t in outs):
                return outs
        for name, bs in plan.program.buffers.items():
            shape = bs.lead + [sizes[a] for a in bs.axes]
            if bs.counter:   # arrival counters: zero memory the kernels leave zero (split_mode="last")
                n = math.prod(shape)
                tensors[name] = _BACKEND.counters(dev, n)[:n].view(shape)
                continue
            tensors[name] = (torch.zeros if bs.zero else torch.empty)(shape, dtype=bs.torch_dtype, device=dev)
        for L in plan.launches:
            m = L.meta
            grid = L.grid(sizes)
            nprog = math.prod(grid)
            if nprog == 0:
                continue
            if nprog > I32_MAX:
                raise ShapeError(f"kernel {m.name} needs {nprog} programs, more than a grid allows; use larger tiles")
            if any(n > MAX_GRID_YZ for n in grid[1:]):   # (plan.launch_grid bounds them by the size buckets)
                raise CompileError(f"kernel {m.name}: launch grid {grid} passes {MAX_GRID_YZ} programs on dimension 1 "
                                   "or 2, which its size buckets should exclude (a dtriton bug)")
            call = [tensors[t] for t in m.tensors]
            for t in m.tensors:
                call.extend(tensors[t].stride())
            call.extend(b.sizes[s[4:]] if s.startswith("dim_") else sizes[s[5:]] for s in m.sizes)  # dim_<symbol>: a tensor dim
            call.extend(scalars[s] for s in m.scalars)
            call.extend(_BACKEND.descriptor(tensors[t], box, perm) for _, t, box, perm in m.descs)
            try:
                ck = _BACKEND.launch(L.fn, grid, call, m, plan.interpret)
                if compiled is not None:
                    compiled.append(ck)
            except Exception as e:
                detail = "\n".join(str(e).strip().splitlines()[-12:])
                raise CompileError(f"kernel {m.name} failed to compile or launch ({type(e).__name__}); this is a resource "
                                   f"limit of the schedule or a dtriton bug. Schedule: {plan.schedule.to_json()}\n"
                                   f"Triton said:\n{detail}") from e
        return outs
