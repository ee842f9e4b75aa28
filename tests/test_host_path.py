"""The host path of forward+backward steps (issue 15): once a call signature has run, a
differentiable step's forward and backward go through the fast launchers (no re-planning, no
Triton re-binding), and the forward's per-signature decisions are cached.

The GPU code path runs here on CPU tensors with launches made no-ops (as ``bench/host_overhead.py
--host-only`` does): the backend choice says "gpu", the backend's slow-path ``launch`` returns a
compiled-kernel stand-in whose ``run`` counts fast launches, and Triton's driver reports stream 0."""

import ctypes
import json

import pytest
import torch

import dtriton as dt
import dtriton.runtime.kernel as runtime_kernel
from dtriton.library import cross_entropy, layer_norm, softmax


class Launches:
    """Counts slow-path launches (Triton binds the arguments) and fast ones (``CompiledKernel.run``)."""

    def __init__(self):
        self.slow = self.fast = 0
        counter = self

        class Compiled:
            function = packed_metadata = None

            def run(self, *args):
                counter.fast += 1

        self.compiled = Compiled

    def launch(self, fn, programs, args, meta, interpret):
        self.slow += 1
        return self.compiled()


@pytest.fixture
def null_gpu(monkeypatch):
    pytest.importorskip("triton")
    from triton.runtime import driver

    class Driver:
        def get_current_stream(self, index):
            return 0
    counts = Launches()
    monkeypatch.setattr(runtime_kernel, "backend_for", lambda device: "gpu")
    monkeypatch.setattr(dt.backends.default_backend(), "launch", counts.launch)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    # set_active's undo (reset_active) would create the default driver, which fails without a GPU:
    # restore the unset state instead
    monkeypatch.setattr(driver, "_active", Driver())
    return counts


CASES = [
    (softmax, lambda: (torch.randn(5, 37, dtype=torch.float16),), (0,)),
    (layer_norm, lambda: (torch.randn(3, 29), torch.randn(29), torch.randn(29)), (0, 1, 2)),
    (cross_entropy, lambda: (torch.randn(7, 13, dtype=torch.float64), torch.randint(0, 13, (7,))), (0,)),
]


@pytest.mark.parametrize("alg,make,gidx", CASES, ids=[c[0].name for c in CASES])
def test_steady_steps_launch_fast_only(null_gpu, alg, make, gidx):
    dk = dt.compile_autograd(alg)
    ins = [t.requires_grad_(k in gidx) for k, t in enumerate(make())]

    def step():
        for k in gidx:
            ins[k].grad = None
        out = dk(*ins)
        (out.float() * 2).sum().backward()
        return [ins[k].grad for k in gidx]

    step()   # plans and compiles: slow-path launches
    assert null_gpu.slow > 0
    slow, fast = null_gpu.slow, null_gpu.fast
    for _ in range(3):
        grads = step()
    counts = dk.launch_counts()
    assert null_gpu.slow == slow, "a steady-state step re-planned a forward or backward call"
    assert null_gpu.fast - fast == 3 * (counts["forward"] + counts["backward"])
    for g, k in zip(grads, gidx):
        assert g.dtype == ins[k].dtype and g.shape == ins[k].shape


# ----------------------------------------------------------------------------------------------
# the steady-state step path, run for real: the GPU code path on CPU tensors, every launch (the
# slow path's and the fast launchers' CompiledKernel.run) executed by Triton's interpreter
# ----------------------------------------------------------------------------------------------
class Interpreted:
    """Runs the GPU code path's launches on the interpreter: the slow path's ``launch`` loads the
    interpreted twin of the kernel's module and returns a compiled-kernel stand-in whose launcher's
    C entry point (``run.launch``, the fast launchers' call) launches that twin with the same
    arguments. (The counting stand-in of ``null_gpu`` has only ``run``: the other entry.)"""

    def __init__(self):
        self.slow = self.fast = self.allocations = 0

    def launch(self, fn, programs, args, meta, interpret):
        import sys
        from pathlib import Path
        from dtriton.backends.triton.launch import launch, load_module
        path = Path(sys.modules[fn.fn.__module__].__file__)
        twin = getattr(load_module(path.read_text(), True, path.parent), meta.name)
        counter = self
        self.slow += 1
        launch(twin, programs, args, meta.consts, meta.ir.num_warps, meta.ir.num_stages, True)

        class Launcher:
            """Triton 3.6's ``CudaLauncher``: the fast launchers call its C ``launch`` with this
            argument order when the kernel needs no scratch memory."""
            global_scratch_size = profile_scratch_size = 0
            launch_cooperative_grid = launch_pdl = False

            def launch(self, nprog, gy, gz, stream, function, coop, pdl, scratch, pscratch, packed, lmeta,
                       enter_hook, exit_hook, *call):
                assert (scratch, pscratch, enter_hook, exit_hook) == (None, None, None, None)
                assert (gy, gz) == tuple(programs[1:3]) + (1,) * (3 - len(programs)), (gy, gz, programs)
                counter.fast += 1
                n = len(call) - len(meta.consts)
                launch(twin, (nprog, gy, gz), _at_addresses(call[:n], args), meta.consts, meta.ir.num_warps,
                       meta.ir.num_stages, True)

        class Compiled:
            function = packed_metadata = None
            run = Launcher()
        return Compiled()


def _at_addresses(call, like) -> list:
    """The fast launchers pass pointer arguments as addresses (ints): the interpreter needs tensors,
    rebuilt here at those addresses with the shape, strides and dtype of the slow call's tensor in
    the same position (the signature fixes them)."""
    call = list(call)
    for k, t in enumerate(like):
        if isinstance(t, torch.Tensor) and isinstance(call[k], int) and t.numel():
            span = (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()
            mem = (ctypes.c_char * span).from_address(call[k])
            call[k] = torch.frombuffer(mem, dtype=t.dtype).as_strided(t.shape, t.stride())
    return call


@pytest.fixture
def interp_gpu(monkeypatch):
    """The GPU code path (plans, fast launchers, steps) on CPU tensors, launches interpreted; every
    output and buffer the fast launchers allocate (``torch.empty``, ``torch.empty_like``) starts as
    NaN (poisoned) and is counted (zero-filled ones, ``torch.zeros(_like)``, are counted)."""
    pytest.importorskip("triton")
    from triton.runtime import driver

    class Driver:
        def get_current_stream(self, index):
            return 0
    runs = Interpreted()
    monkeypatch.setattr(runtime_kernel, "backend_for", lambda device: "gpu")
    monkeypatch.setattr(dt.backends.default_backend(), "launch", runs.launch)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(driver, "_active", Driver())

    def poisoning(alloc):
        def poisoned(*a, **k):
            runs.allocations += 1
            t = alloc(*a, **k)
            return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)
        return poisoned
    def counting(alloc):   # zero-filled allocations: counted, not poisoned
        def counted(*a, **k):
            runs.allocations += 1
            return alloc(*a, **k)
        return counted
    monkeypatch.setattr(torch, "empty", poisoning(torch.empty))
    monkeypatch.setattr(torch, "empty_like", poisoning(torch.empty_like))
    monkeypatch.setattr(torch, "zeros", counting(torch.zeros))
    monkeypatch.setattr(torch, "zeros_like", counting(torch.zeros_like))
    return runs


def _reference_grads(eager, args, gidx, weights):
    """Gradients of sum(out * weight) through float64 torch autograd."""
    ref = [a.detach().double().requires_grad_(k in gidx) if a.is_floating_point() else a for k, a in enumerate(args)]
    out = eager(*ref)
    (out * weights.double()).sum().backward()
    return out.detach(), [ref[k].grad for k in gidx]


def _ln(X, w, b):
    return torch.nn.functional.layer_norm(X, (X.shape[-1],), w, b, 1e-5)


def _ce(X, labels):
    return torch.nn.functional.cross_entropy(X, labels, reduction="none")


STEP_CASES = [
    (softmax, lambda X: torch.softmax(X, -1), lambda m, n, dt_: (torch.randn(m, n, dtype=dt_),), (0,)),
    (layer_norm, _ln, lambda m, n, dt_: (torch.randn(m, n, dtype=dt_), torch.randn(n, dtype=dt_),
                                         torch.randn(n, dtype=dt_)), (0, 1, 2)),
    (cross_entropy, _ce, lambda m, n, dt_: (torch.randn(m, n, dtype=dt_), torch.randint(0, n, (m,))), (0,)),
]


def _check_step(dk, eager, args, gidx, tol):
    ins = [a.detach().clone().requires_grad_(k in gidx) for k, a in enumerate(args)]
    out = dk(*ins)
    w = torch.randn(out.shape, dtype=torch.float64)
    (out.double() * w).sum().backward()
    ref_out, ref_g = _reference_grads(eager, args, gidx, w)
    torch.testing.assert_close(out.double(), ref_out, atol=tol, rtol=tol)
    for k, g in zip(gidx, ref_g):
        assert ins[k].grad.dtype == ins[k].dtype and ins[k].grad.shape == ins[k].shape
        torch.testing.assert_close(ins[k].grad.double(), g, atol=tol * 10, rtol=tol * 10)


@pytest.mark.parametrize("alg,eager,make,gidx", STEP_CASES, ids=[c[0].name for c in STEP_CASES])
def test_steady_steps_are_correct_and_skip_the_general_path(interp_gpu, monkeypatch, alg, eager, make, gidx):
    """Steps after the first run through the cached ForwardStep / BackwardStep (no Kernel call, no
    run_backward), on fresh data each time, with poisoned outputs, against float64 autograd."""
    dk = dt.compile_autograd(alg)
    _check_step(dk, eager, make(5, 37, torch.float32), gidx, 1e-4)   # first: the general path
    _check_step(dk, eager, make(5, 37, torch.float32), gidx, 1e-4)   # second: forward step, first backward step
    general = []
    monkeypatch.setattr(runtime_kernel.Kernel, "__call__", lambda *a, **k: general.append(a))
    monkeypatch.setattr(type(dk), "run_backward", lambda *a, **k: general.append(a))
    slow = interp_gpu.slow
    for _ in range(2):
        _check_step(dk, eager, make(5, 37, torch.float32), gidx, 1e-4)
    assert not general and interp_gpu.slow == slow, "a steady-state step took the general path"
    assert len(dk._steps) == 1


@pytest.mark.parametrize("alg,eager,make,gidx", STEP_CASES, ids=[c[0].name for c in STEP_CASES])
def test_a_new_signature_is_validated_and_gets_its_own_step(interp_gpu, alg, eager, make, gidx):
    """After a steady state, a changed shape (odd sizes, 1 row), dtype or stride takes the general
    path (checked, planned) and is right; a wrong one is still refused."""
    dk = dt.compile_autograd(alg)
    for _ in range(3):
        _check_step(dk, eager, make(5, 37, torch.float32), gidx, 1e-4)
    _check_step(dk, eager, make(1, 13, torch.float32), gidx, 1e-4)          # shape
    _check_step(dk, eager, make(7, 37, torch.float64), gidx, 1e-9)          # dtype
    args = make(5, 37, torch.float32)
    _check_step(dk, eager, (torch.randn(37, 5).t(), *args[1:]), gidx, 1e-4)   # strides: a transposed X
    assert len(dk._steps) == 4
    bad = list(make(5, 37, torch.float32))
    if alg is layer_norm:
        bad[1] = torch.randn(36)          # w does not match X's last dim
    elif alg is cross_entropy:
        bad[1] = torch.randint(0, 37, (4,))   # one label short
    else:
        bad[0] = torch.randn(5, 37, 2)    # a 3-dim X
    bad[0].requires_grad_()
    with pytest.raises(dt.ShapeError):
        dk(*bad)


@dt.algorithm
def scaled_softmax_and_max(X: dt.Tensor["M", "N"], scale: float):
    """Two outputs (a softmax of scale * X and the row max) and a float parameter."""
    i, j = dt.axes("i j")
    s = X[i, j] * scale
    m = dt.max(s, over=j)
    e = dt.exp(s - m)
    return (e / dt.sum(e, over=j))[i, j], m[i]


def _scaled_softmax_and_max(X, scale):
    s = X * scale
    return torch.softmax(s, -1), s.max(-1).values


@pytest.mark.parametrize("use_max", [False, True], ids=["max-unused", "max-used"])
def test_steps_with_a_scalar_argument_and_an_output_without_gradient(interp_gpu, use_max):
    """A float argument is passed per call (not part of the key) and kept on the context; an
    output that receives no gradient (None: the step's read-only zero) gives the right dX."""
    dk = dt.compile_autograd(scaled_softmax_and_max)
    for step, scale in enumerate((0.5, 0.5, 2.0, -1.5)):
        X = torch.randn(6, 11)
        Xg = X.clone().requires_grad_()
        y, m = dk(Xg, scale)
        wy, wm = torch.randn(6, 11, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
        loss = (y.double() * wy).sum() + ((m.double() * wm).sum() if use_max else 0)
        loss.backward()
        Xr = X.double().requires_grad_()
        yr, mr = _scaled_softmax_and_max(Xr, scale)
        ((yr * wy).sum() + ((mr * wm).sum() if use_max else 0)).backward()
        torch.testing.assert_close(y.double(), yr.detach(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(m.double(), mr.detach(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(Xg.grad.double(), Xr.grad, atol=1e-5, rtol=1e-5)
    assert len(dk._steps) == 1


def test_steps_keep_autograd_checks(interp_gpu):
    """On the step path, an input modified in place between forward and backward is refused by
    autograd (its saved version changed), and double backward is refused loudly."""
    dk = dt.compile_autograd(softmax)
    X = torch.randn(4, 9, requires_grad=True)
    for _ in range(2):
        dk(X).sum().backward()
    assert len(dk._steps) == 1
    Y = X.detach().clone().requires_grad_()
    Z = Y * 1.0
    out = dk(Z)
    Z.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    with pytest.raises(NotImplementedError, match="double backward"):
        torch.autograd.grad((dk(X) * torch.randn(4, 9)).sum(), X, create_graph=True)


def test_grad_calls_of_a_plain_compiled_kernel_use_steps(interp_gpu, monkeypatch):
    """``dt.compile(alg)`` called on tensors that require grad (the hook installed as
    ``Kernel.grad_call``) reaches the same steady-state steps: no general backward and no slow
    launch after the first steps, and gradients right against float64."""
    from dtriton.integrations.autograd import DifferentiableKernel
    kernel = dt.compile(layer_norm)
    args = lambda: (torch.randn(3, 29), torch.randn(29), torch.randn(29))  # noqa: E731
    _check_step(kernel, _ln, args(), (0, 1, 2), 1e-4)
    _check_step(kernel, _ln, args(), (0, 1, 2), 1e-4)
    general = []
    monkeypatch.setattr(DifferentiableKernel, "run_backward", lambda *a, **k: general.append(a))
    slow = interp_gpu.slow
    for _ in range(2):
        _check_step(kernel, _ln, args(), (0, 1, 2), 1e-4)
    assert not general and interp_gpu.slow == slow and interp_gpu.fast > 0


@pytest.mark.parametrize("mode", [["--host-only"], ["--host-only", "--profile"], ["--enqueue", "--dry-run"]],
                         ids=["host-only", "profile", "enqueue"])
def test_host_overhead_script_cpu_modes(mode, tmp_path):
    """bench/host_overhead.py's CPU modes run (launches made no-ops) and time the steady backward
    (``StepFunction.backward``), not the general ``run_backward``, once warm."""
    from conftest import run_bench
    run_bench(["bench/host_overhead.py", *mode], tmp_path)
    rows = json.loads((tmp_path / "out" / "host_overhead.json").read_text())
    if "--enqueue" in mode:   # softmax and layer norm at two shapes; eager, dtriton, eager in a Python node, eager again
        assert len(rows) == 16 and all(r["step host_us"] > 0 and r["loss only total_us"] > 0 for r in rows), rows
        return
    assert len(rows) == (6 if "--profile" in mode else 3)
    if "--profile" in mode:
        dtr = [r for r in rows if r["impl"] == "dtriton"]
        assert all(any("steps.py" in f["fn"] for f in r["functions"]) for r in dtr), dtr
    else:
        assert all(r["dtriton backward (steady) us"] > 0 and "dtriton run_backward us" not in r for r in rows), rows


def test_steady_steps_never_synchronise(null_gpu, monkeypatch):
    """A steady-state step reads nothing back from the device (no ``.item()``, ``.tolist()``,
    ``.cpu()``, truth value of a tensor, device synchronisation): what CUDA-graph capture
    (``torch.cuda.make_graphed_callables``) and an asynchronous GPU queue need."""
    dk = dt.compile_autograd(layer_norm)
    ins = [torch.randn(3, 29, requires_grad=True), torch.randn(29, requires_grad=True),
           torch.randn(29, requires_grad=True)]

    def step():
        out = dk(*ins)
        torch.autograd.backward(out, torch.ones(3, 29))
    for _ in range(2):
        step()
    reads = []

    def refuse(name):
        def read(*a, **k):
            reads.append(name)
            raise AssertionError(f"{name} on the steady-state path")
        return read
    for name in ("item", "tolist", "cpu", "numpy", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, refuse(name))
    monkeypatch.setattr(torch.cuda, "synchronize", refuse("synchronize"))
    step()
    assert not reads


def test_saved_statistics_share_one_buffer(interp_gpu):
    """A steady softmax step saving its row max and sum (``save=``; by default it saves one
    log-sum-exp statistic) allocates its output, one buffer for both (each at an aligned offset: the
    pointers Triton specialised on 16-byte alignment) and dX: three allocations, not four; gradients
    right against float64 with every allocation poisoned."""
    from dtriton.backends.triton.fast import PACK_ALIGN
    dk = dt.compile_autograd(softmax, save=["max0", "sum0"])
    make = lambda: (torch.randn(5, 37),)  # noqa: E731
    for _ in range(3):
        _check_step(dk, lambda X: torch.softmax(X, -1), make(), (0,), 1e-4)
    (step,) = dk._steps.values()
    assert step.layout is not None and len(step.layout) == 2
    assert all(off % PACK_ALIGN == 0 for off, _, _ in step.layout)
    X = make()[0].requires_grad_()
    before = interp_gpu.allocations
    dk(X).backward(torch.randn(5, 37))
    assert interp_gpu.allocations - before == 3


@pytest.mark.parametrize("alg,eager,make,gidx", STEP_CASES[:2], ids=[c[0].name for c in STEP_CASES[:2]])
def test_new_gradient_or_expanded_input_signatures_on_a_packed_step(interp_gpu, alg, eager, make, gidx):
    """A steady forward step whose backward receives a gradient of a new signature (a transposed
    one) runs the general backward on views of its packed statistics and is right; an expanded
    input (stride 0) is a signature of its own, validated first, then stepped, and right."""
    dk = dt.compile_autograd(alg)
    for _ in range(3):
        _check_step(dk, eager, make(5, 37, torch.float32), gidx, 1e-4)
    for _ in range(2):   # general backward on the packed statistics' views, then its own backward step
        args = make(5, 37, torch.float32)
        ins = [a.detach().clone().requires_grad_(k in gidx) for k, a in enumerate(args)]
        w = torch.randn(37, 5, dtype=torch.float64).t()
        out = dk(*ins)
        out.backward(w.to(out.dtype))
        _, ref_g = _reference_grads(eager, args, gidx, w)
        for k, g in zip(gidx, ref_g):
            torch.testing.assert_close(ins[k].grad.double(), g, atol=1e-3, rtol=1e-3)
    (step,) = dk._steps.values()
    assert len(step.backward_steps) == 2
    for _ in range(3):
        row = torch.randn(1, 37)
        x0 = row.clone().requires_grad_()
        ins = [x0.expand(5, 37), *[a.requires_grad_() for a in make(5, 37, torch.float32)[1:]]]
        out = dk(*ins)
        w = torch.randn(5, 37, dtype=torch.float64)
        (out.double() * w).sum().backward()
        ref = [row.double().requires_grad_(), *[a.detach().double().requires_grad_() for a in ins[1:]]]
        (eager(ref[0].expand(5, 37), *ref[1:]) * w).sum().backward()
        torch.testing.assert_close(x0.grad.double(), ref[0].grad, atol=1e-3, rtol=1e-3)
        for a, r in zip(ins[1:], ref[1:]):
            torch.testing.assert_close(a.grad.double(), r.grad, atol=1e-3, rtol=1e-3)
    assert len(dk._steps) == 2
    for _ in range(3):   # an input 4 bytes past a 16-byte boundary: a signature of its own (Triton's alignment)
        args = make(5, 37, torch.float32)
        shifted = torch.empty(5 * 37 + 1)[1:].view(5, 37).copy_(args[0]).requires_grad_()
        ins = [shifted, *[a.detach().clone().requires_grad_(k + 1 in gidx) for k, a in enumerate(args[1:])]]
        assert shifted.data_ptr() % 16
        out = dk(*ins)
        w = torch.randn(5, 37, dtype=torch.float64)
        (out.double() * w).sum().backward()
        _, ref_g = _reference_grads(eager, args, gidx, w)
        for k, g in zip(gidx, ref_g):
            torch.testing.assert_close(ins[k].grad.double(), g, atol=1e-3, rtol=1e-3)
    assert len(dk._steps) == 3


@dt.algorithm
def _shifted_rows(X: dt.Tensor["M", "N"], shift: int, scale: float):
    """An int and a float parameter beside a tensor."""
    i, j = dt.axes("i j")
    return (X[i, j] * scale + shift)[i, j]


def test_printed_signature_key_matches_the_generic_one():
    """The key function printed per algorithm gives signature_key's keys for tensors (strided,
    expanded, other dtypes), ints (1, multiples of 16, others, bools) and floats, and falls back to
    it for arguments of another kind or count."""
    from dtriton.runtime.args import signature_key, signature_key_for
    key = signature_key_for(_shifted_rows)
    X = torch.randn(6, 32)
    calls = [(X, 1, 0.5), (X.t(), 16, 2.0), (X[:, :5].requires_grad_(), 7, -1.0), (torch.randn(1, 3).expand(4, 3), True, 1),
             (X.half(), 32, 0.0), (3.0, 1, 0.5), (X, 1), (X, 1, 0.5, 2)]
    for args in calls:
        assert key(args) == signature_key(args), args
    assert key((X.requires_grad_(), 1, 0.5))[1] is True


# the layer-norm backward's GPU default (dw and db split over rows into zero-initialised fp32 buffers,
# three kernels), with tiles for tiny shapes
_SPLIT_LN_BACKWARD = {
    "grid": ["i"], "split": {"i": 2}, "strategy": {"j": "whole"}, "tile": {"i": 1, "j": 64},
    "stages": {s: {"strategy": {"i": "loop"}, "tile": {"i": 2, "j": 16}, **({"grid": ["j"]} if s.startswith("out") else {})}
               for s in ("d_b", "d_w", "out1", "out2")}}


def test_split_backward_buffers_share_one_zero_fill(interp_gpu):
    """A backward whose dw and db are split over rows (atomics into two zero-initialised buffers)
    allocates them as one zero-filled buffer: right against float64 (outputs poisoned) on every
    steady step, with one allocation fewer than a buffer each."""
    sched = dt.Schedule.from_dict(_SPLIT_LN_BACKWARD)
    dk = dt.compile_autograd(layer_norm, backward_schedules=sched)
    h = torch.float16   # (fp32 outputs take the atomics directly: fp16 ones need the fp32 buffers)
    make = lambda: (torch.randn(7, 37, dtype=h), torch.randn(37, dtype=h), torch.randn(37, dtype=h))  # noqa: E731
    for _ in range(3):
        _check_step(dk, _ln, make(), (0, 1, 2), 2e-3)
    (step,) = dk._steps.values()
    (bstep,) = step.backward_steps.values()
    ((launch, _, _),) = bstep.launches
    zero_fills = [(shape, dt) for alloc, shape, dt in launch.separate if alloc is torch.zeros]
    assert len(zero_fills) == 1 and len(launch.calls) == 3
    assert zero_fills[0][1] == torch.int32   # filled in 4-byte words, as the float32 buffers it replaces
    ins = [t.requires_grad_() for t in make()]
    before = interp_gpu.allocations
    dk(*ins).backward(torch.randn(7, 37, dtype=h))
    # forward: Y and the statistics' buffer; backward: dX, dw, db and the one zero-filled buffer
    assert interp_gpu.allocations - before == 6


@dt.algorithm
def _scale_rows(X: dt.Tensor["A", "B", "C"], w: dt.Tensor["B"]):
    a, i, c = dt.axes("a i c")
    return (X[a, i, c] * w[i])[a, i, c]


def test_fast_launch_of_a_three_dimensional_grid(interp_gpu):
    """A kernel reading its tiles from three launch-grid dimensions (plan.launch_grid): the fast
    launcher replays the slow call's (x, y, z) grid (the stand-in checks it), right on fresh data."""
    k = dt.compile(_scale_rows, dt.Schedule(grid=["a", "i", "c"], tile={"a": 1, "i": 2, "c": 4}))
    for step in range(3):
        X, w = torch.randn(3, 5, 7), torch.randn(5)
        y = k(X, w)
        torch.testing.assert_close(y.double(), X.double() * w.double()[:, None], atol=1e-6, rtol=1e-6)
    assert "tl.program_id(2)" in k.source and interp_gpu.fast > 0
    (L,) = k._last.launches
    assert L.grid({"A": 3, "B": 5, "C": 7, "a": 3, "i": 5, "c": 7}) == (2, 3, 3)
