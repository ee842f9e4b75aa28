"""Native steps (issue 15): the Python side of the C++ autograd node.

What runs on the CPU: the packing of each kernel's parameters into the plan the C++ side carries
out (checked byte for byte against ``struct``), the refusals (per-call scalars, descriptors, scratch
memory, tuple parameters), when a differentiable kernel's step becomes native and what it registers
(the forward launcher, the saved values, one backward variant per gradient layout, the gradient
picks), the switches (``native=``, ``dt.native_steps``), the Python fallback the node calls, and
that the C++ extension compiles against this torch. The node itself launches through the CUDA driver
and is checked on the GPU by ``bench/native_check.py`` (bit-for-bit against the Python node).
"""

from __future__ import annotations

import ctypes
import shutil
import struct

import pytest
import torch

import dtriton as dt
from dtriton.backends.triton import native
from dtriton.backends.triton.fast import C_ENTRY_MIDDLE
from dtriton.integrations import steps as steps_mod
from dtriton.library import attention, conv1d, layer_norm, spatial_diffusion
from test_host_path import interp_gpu  # noqa: F401  (the fixture)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")


def _mid(num_warps=4, ctas=1, shared=1024, coop=False, pdl=False):
    return (1234, coop, pdl, None, None, (num_warps, ctas, shared), None, None, None)


def test_kernel_plan_packs_every_parameter_as_tritons_launcher_does():
    types = ("*fp32", "*fp16", "i32", "i64", "fp32", "constexpr", "bf16", "fp16", "u8", "i1", "fp64")
    srcs = ((0, 0), (2, 256))
    tail = (-7, 2 ** 40 + 3, 1.5, 64, 3.140625, -2.5, 200, 1, 0.1)
    assert C_ENTRY_MIDDLE == len(_mid())
    plan = native._kernel_plan((None, (5, 3, 1), _mid(8, 1, 4096, pdl=True), srcs, tail, ()), types)
    assert plan["grid"] == [5, 3, 1] and plan["block"] == 256 and plan["shared"] == 4096 and plan["pdl"]
    arena, off = plan["arena"], plan["offsets"]
    assert len(off) == len(types) - 1 + 2   # no constexpr, two scratch pointers last
    assert all(o % 8 == 0 for o in off)
    assert plan["ptrs"] == [(0, 0, 0), (1, 2, 256)]
    assert arena[off[0]:off[0] + 8] == bytes(8) and arena[off[1]:off[1] + 8] == bytes(8)
    assert struct.unpack_from("<i", arena, off[2])[0] == -7
    assert struct.unpack_from("<q", arena, off[3])[0] == 2 ** 40 + 3
    assert struct.unpack_from("<f", arena, off[4])[0] == 1.5
    # the constexpr (64) takes no slot: the next parameter is bf16 3.140625, truncated to its high half
    bf = struct.unpack_from("<H", arena, off[5])[0]
    assert struct.unpack("<f", struct.pack("<I", bf << 16))[0] == 3.140625
    assert struct.unpack_from("<e", arena, off[6])[0] == -2.5
    assert struct.unpack_from("<B", arena, off[7])[0] == 200
    assert struct.unpack_from("<b", arena, off[8])[0] == 1
    assert struct.unpack_from("<d", arena, off[9])[0] == 0.1
    assert arena[off[-2]:off[-2] + 8] == bytes(8) and arena[off[-1]:off[-1] + 8] == bytes(8)


@pytest.mark.parametrize("case", ["scalar per call", "python entry", "tuple parameter", "pointer among constants",
                                  "count mismatch", "tensor descriptor"])
def test_kernel_plan_refuses_what_it_cannot_carry_out(case):
    types, srcs, tail, mid, extras = ("*fp32", "i32"), ((0, 0),), (3,), _mid(), ()
    if case == "scalar per call":
        extras = ((1, ("scalar", 0)),)
    elif case == "python entry":
        mid = (1234, None, None, None, None)
    elif case == "tuple parameter":
        types = ("*fp32", ("i32", "i32"))
    elif case == "pointer among constants":
        types = ("*fp32", "*fp32")
    elif case == "count mismatch":
        types = ("*fp32", "i32", "i32")
    else:
        types = ("*fp32", "nvTmaDesc")
    why = native._kernel_plan((None, (1, 1, 1), mid, srcs, tail, extras), types)
    assert isinstance(why, str) and why.startswith("a kernel"), why   # (the reason a step is not native)


def test_a_scalar_that_is_a_step_constant_fills_its_slot():
    """conv1d's stride on the GPU: a kernel takes it as a per-call scalar (an extra of the fast
    launcher), but it is part of the step's call key, so the plan packs its value."""
    types, srcs, tail = ("*fp32", "i32", "i32"), ((0, 0),), (7, None)
    call = (None, (1, 1, 1), _mid(), srcs, tail, ((2, ("scalar", 3)),))
    assert "position 3, passed per call" in native._kernel_plan(call, types)
    assert "position 3, passed per call" in native._kernel_plan(call, types, {4: 1})
    plan = native._kernel_plan(call, types, {3: 5})
    arena, off = plan["arena"], plan["offsets"]
    assert struct.unpack_from("<i", arena, off[1])[0] == 7 and struct.unpack_from("<i", arena, off[2])[0] == 5


def test_launcher_plan_refuses_other_objects_and_says_why():
    assert native.launcher_plan(lambda args: args) is None
    assert native.refusal(lambda args: args) == "its launcher (function) is not a fast launcher"


class Recorder:
    """Stands in for the extension's registration (the plans of the interpreter's stand-in kernels
    have no Triton signature): records what the steps register; ``native_call`` answers None (the
    step's plan cannot run on this stream), so every call takes the Python node afterwards."""

    def __init__(self, monkeypatch):
        self.registered, self.variants, self.records, self.calls = [], [], [], 0
        self.entries, self.cache_calls, self.logs = [], 0, []
        monkeypatch.setattr(native, "register", self.register)
        monkeypatch.setattr(native, "add_backward", self.add_backward)
        monkeypatch.setattr(native, "caller", self.caller)
        monkeypatch.setattr(native, "call_cache", self.call_cache)
        monkeypatch.setattr(native, "ready", lambda wait=False: True)

    def call_cache(self, log=0):
        rec = self
        self.logs.append(log)

        class Cache:   # the C++ call cache's stand-in: records its entries, misses every call
            def add(self, args, sid, tag):
                rec.entries.append((tuple(a.shape for a in args), sid, tag))

            def __call__(self, args):
                rec.cache_calls += 1
                return None
        return Cache()

    def register(self, name, fl, n_out, save, fallback, tensor_pos=None, constants=None):
        self.registered.append((name, fl, n_out, save, fallback))
        self.tensor_pos, self.constants = tensor_pos, constants
        return len(self.registered) - 1

    def add_backward(self, sid, needs, grads, fl, pick, zeros=None, tensor_pos=None, n_params=0, constants=None,
                     record=(0, 0)):
        self.variants.append((sid, needs, grads, fl, pick))
        self.zeros, self.backward_constants = zeros, constants
        self.records.append(record)
        return True

    def caller(self, sid, tensor_pos=None):
        def call(args):
            self.calls += 1
            return None
        return call


def _ln_step(dk, X, w, b, gy, need=(0, 1, 2)):
    ins = [t.clone().requires_grad_(k in need) for k, t in enumerate((X, w, b))]
    y = dk(*ins)
    y.backward(gy)
    return y, [ins[k].grad for k in need]


def _ln_reference(X, w, b, gy):
    ins = [t.double().requires_grad_() for t in (X, w, b)]
    y = torch.nn.functional.layer_norm(ins[0], (X.shape[-1],), ins[1], ins[2])
    y.backward(gy.double())
    return y, [t.grad for t in ins]


def test_a_step_becomes_native_after_its_first_backward(interp_gpu, monkeypatch):  # noqa: F811
    rec = Recorder(monkeypatch)
    g = torch.Generator().manual_seed(3)
    X, w, b = torch.randn(5, 37, generator=g), torch.randn(37, generator=g), torch.randn(37, generator=g)
    gy = torch.randn(5, 37, generator=g)
    dk = dt.compile_autograd(layer_norm, native=True)
    for it in range(4):
        y, grads = _ln_step(dk, X, w, b, gy)
        want_y, want = _ln_reference(X, w, b, gy)
        torch.testing.assert_close(y.double(), want_y, rtol=1e-4, atol=1e-4)
        for got, ref in zip(grads, want):
            torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-4)
    # step 1 plans (general path), step 2 is the Python step whose backward learns and registers,
    # steps 3 and 4 enter the native forward (which answers None here: the Python node runs)
    assert len(rec.registered) == 1 and rec.calls == 2
    # the step (all of whose arguments are tensors) is entered in the kernel's C++ call cache, which
    # steps 3 and 4 try first (it misses here too); it writes its tag to the forward's log slot
    assert rec.entries == [((X.shape, w.shape, b.shape), 0, 1)] and rec.cache_calls == 2
    assert rec.logs == [ctypes.addressof(dk.native_log) + 8]
    name, fl, n_out, save, fallback = rec.registered[0]
    assert name == "layer_norm" and n_out == 1 and callable(fallback)
    assert save and all(k >= n_out for k in save)   # the saved statistics (one packed buffer)
    (sid, needs, gkeys, bfl, pick), = rec.variants
    assert sid == 0 and needs == [True, True, True]
    assert gkeys == [([37, 1], gy.data_ptr() % 16 == 0)]
    assert sorted(pick) == sorted(set(pick)) and all(li >= 0 and oi >= 0 for li, oi in pick)
    # a transposed incoming gradient: one more variant (learned by its first backward)
    gt = torch.randn(37, 5, generator=g).t()
    for _ in range(2):
        _, grads = _ln_step(dk, X, w, b, gt)
    _, want = _ln_reference(X, w, b, gt)
    for got, ref in zip(grads, want):
        torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-4)
    assert len(rec.variants) == 2 and rec.variants[1][2] == [([1, 5], gt.data_ptr() % 16 == 0)]
    # only w needs a gradient: another variant, whose pick leaves X and b without one
    for _ in range(2):
        _, (gw,) = _ln_step(dk, X, w, b, gy, need=(1,))
    torch.testing.assert_close(gw.double(), _ln_reference(X, w, b, gy)[1][1], rtol=1e-4, atol=1e-4)
    assert rec.variants[2][1] == [False, True, False]
    assert rec.variants[2][4][0] == (-1, -1) and rec.variants[2][4][2] == (-1, -1) and rec.variants[2][4][1][0] >= 0


def test_the_fallback_gives_the_python_nodes_gradients_and_refuses_create_graph(interp_gpu, monkeypatch):  # noqa: F811
    rec = Recorder(monkeypatch)
    g = torch.Generator().manual_seed(4)
    X, w, b = torch.randn(6, 19, generator=g), torch.randn(19, generator=g), torch.randn(19, generator=g)
    gy = torch.randn(6, 19, generator=g)
    dk = dt.compile_autograd(layer_norm, native=True)
    for _ in range(2):
        _, want = _ln_step(dk, X, w, b, gy)
    _, _, _, save, fallback = rec.registered[0]
    step = next(s for s in dk._steps.values() if s)
    with torch.no_grad():
        res = step.launch((X, w, b))
    saved = [res[k] for k in save]
    with torch.no_grad():   # (autograd's engine runs a backward with grad mode off)
        got = fallback([X, w, b], saved, [gy], [True, True, True])
    assert len(got) == 3
    for a, r in zip(got, want):
        torch.testing.assert_close(a, r, rtol=0, atol=0)   # the same kernels on the same inputs
    with torch.no_grad():
        got = fallback([X, w, b], saved, [gy], [False, True, False])
    assert got[0] is None and got[2] is None
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    with torch.enable_grad(), pytest.raises(NotImplementedError, match="double backward"):
        fallback([X, w, b], saved, [gy], [True, True, True])


def test_an_output_without_gradient_reads_the_registered_zero(interp_gpu, monkeypatch):  # noqa: F811
    """The diffusion layer's training use: a loss on the first of two outputs. The backward reads a
    0-d zero expanded to the second output's shape; the native variant expects no gradient there and
    carries that zero."""
    rec = Recorder(monkeypatch)
    g = torch.Generator().manual_seed(5)
    V, K, C = 13, 4, 3
    args = (torch.randn(V, C, generator=g), torch.randn(V, K, generator=g) / V ** 0.5, torch.rand(V, generator=g) + 0.5,
            torch.rand(K, generator=g) * 3, torch.rand(C, generator=g))
    w = torch.randn(V, C, generator=g)
    dk = dt.compile_autograd(spatial_diffusion, native=True)

    def grads(f):
        x, t = args[0].clone().requires_grad_(), args[4].clone().requires_grad_()
        out = f(x, args[1], args[2], args[3], t)[0]
        (out * w).sum().backward()
        return x.grad, t.grad

    def reference(x, basis, mass, evals, times):
        spec = torch.exp(-evals[:, None] * times[None, :]) * (basis.t() @ (x * mass[:, None]))
        return (basis @ spec, spec)
    x64, t64 = args[0].double().requires_grad_(), args[4].double().requires_grad_()
    (reference(x64, args[1].double(), args[2].double(), args[3].double(), t64)[0] * w.double()).sum().backward()
    for _ in range(3):
        gx, gt = grads(dk)
        torch.testing.assert_close(gx.double(), x64.grad, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(gt.double(), t64.grad, rtol=1e-4, atol=1e-5)
    (sid, needs, gkeys, _, pick), = rec.variants
    assert needs == [True, False, False, False, True] and gkeys[1] is None and gkeys[0] is not None
    assert set(rec.zeros) == {1}
    z = rec.zeros[1]
    assert z.shape == (K, C) and z.stride() == (0, 0) and not z.any()
    assert pick[0][0] >= 0 and pick[4][0] >= 0 and pick[1:4] == [(-1, -1)] * 3


def test_tensor_index_places_launcher_arguments_among_the_nodes_tensors():
    assert native._tensor_index(None) is None
    fwd = native._tensor_index((0, 3))   # X at 0, Y at 3; ints at 1, 2
    assert [fwd(p) for p in range(4)] == [0, None, None, 1]
    bwd = native._tensor_index((0, 3), n_params=4)   # backward args: 4 params, then grads and saved values
    assert [bwd(p) for p in range(7)] == [0, None, None, 1, 2, 3, 4]


def test_a_step_with_keyed_int_parameters_becomes_native(interp_gpu, monkeypatch):  # noqa: F811
    """conv1d(X, Wt, stride, padding, dilation, Lo): every int is part of the call key, so a step's
    ints are its constants; the node takes X and Wt alone, its backward variant runs two launchers
    (dX's and dW's), and the fallback puts the ints back."""
    rec = Recorder(monkeypatch)
    g = torch.Generator().manual_seed(6)
    X, Wt = torch.randn(2, 3, 13, generator=g), torch.randn(4, 3, 3, generator=g)
    st, pd, dl = 2, 1, 1
    Lo = (13 + 2 * pd - dl * 2 - 1) // st + 1
    gy = torch.randn(2, 4, Lo, generator=g)
    dk = dt.compile_autograd(conv1d, native=True)
    x64, w64 = X.double().requires_grad_(), Wt.double().requires_grad_()
    torch.nn.functional.conv1d(x64, w64, stride=st, padding=pd, dilation=dl).backward(gy.double())
    for _ in range(3):
        x, w = X.clone().requires_grad_(), Wt.clone().requires_grad_()
        dk(x, w, st, pd, dl, Lo).backward(gy)
        torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-5, atol=1e-5)
    assert len(rec.registered) == 1 and rec.calls == 1 and rec.tensor_pos == (0, 1)
    # the ints are the step's constants: the plans hold them (the kernels take them as scalars)
    assert rec.constants == rec.backward_constants == {2: st, 3: pd, 4: dl, 5: Lo}
    (sid, needs, gkeys, launchers, pick), = rec.variants
    assert needs == [True, True] and len(launchers) == 2 and sorted(p[0] for p in pick) == [0, 1]
    _, _, _, save, fallback = rec.registered[0]
    step = next(s for s in dk._steps.values() if s)
    with torch.no_grad():
        res = step.launch((X, Wt, st, pd, dl, Lo))
        saved = [res[k] for k in save] if isinstance(res, tuple) else []
        gx, gw = fallback([X, Wt], saved, [gy], [True, True])
    torch.testing.assert_close(gx.double(), x64.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw.double(), w64.grad, rtol=1e-5, atol=1e-5)


def test_launch_counts_follow_the_native_backward_that_ran(interp_gpu, monkeypatch):  # noqa: F811
    """A native variant's backward runs in C++ with no Python: each registered variant carries an
    (address, tag) the node writes when it runs, so launch_counts reports what that variant launched
    rather than the backward the Python path ran last; a Python backward takes over again."""
    rec = Recorder(monkeypatch)
    g = torch.Generator().manual_seed(8)
    X, Wt = torch.randn(2, 3, 11, generator=g), torch.randn(4, 3, 3, generator=g)
    gy = torch.randn(2, 4, 9, generator=g)
    dk = dt.compile_autograd(conv1d, native=True)
    x64, w64 = X.double().requires_grad_(), Wt.double().requires_grad_()
    torch.nn.functional.conv1d(x64, w64).backward(gy.double())

    def step(need_w):
        x, w = X.clone().requires_grad_(), Wt.clone().requires_grad_(need_w)
        dk(x, w, 1, 0, 1, 9).backward(gy)
        torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-5, atol=1e-5)
        if need_w:
            torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-5, atol=1e-5)
    for _ in range(2):
        step(True)     # dX's and dW's launchers (the second call registers the variant)
    both = dk.launch_counts()["backward"]
    for _ in range(2):
        step(False)    # dX's alone: a second variant
    alone = dk.launch_counts()["backward"]
    assert [len(v[3]) for v in rec.variants] == [2, 1] and both > alone > 0
    (addr0, tag0), (addr1, tag1) = rec.records
    assert addr0 == addr1 != 0 and len({0, tag0, tag1}) == 3
    ctypes.c_int64.from_address(addr0).value = tag0   # what the C++ node does when it runs variant 0
    assert dk.launch_counts() == {"forward": 1, "backward": both}
    ctypes.c_int64.from_address(addr1).value = tag1
    assert dk.launch_counts()["backward"] == alone
    ctypes.c_int64.from_address(addr0).value = tag0
    step(False)    # the Python node (the Recorder's native call declines): its backward is the latest
    assert dk.launch_counts()["backward"] == alone


def test_a_step_with_a_scalar_passed_per_call_keeps_the_python_node(interp_gpu, monkeypatch):  # noqa: F811
    rec = Recorder(monkeypatch)
    g = torch.Generator().manual_seed(7)
    Q, K, V = (torch.randn(1, 1, 5, 8, generator=g) for _ in range(3))
    dk = dt.compile_autograd(attention, native=True)
    for _ in range(3):
        ins = [t.clone().requires_grad_() for t in (Q, K, V)]
        dk(*ins, 0.35).sum().backward()
    assert rec.registered == []
    step = next(s for s in dk._steps.values() if s)
    assert step.native == -2 and "passed per call" in step.native_why


@pytest.mark.parametrize("kernel_flag,global_flag,expect", [(False, True, 0), (None, False, 0), (True, False, 1),
                                                            (None, True, 1)])
def test_switches(interp_gpu, monkeypatch, kernel_flag, global_flag, expect):  # noqa: F811
    rec = Recorder(monkeypatch)
    was = dt.native_steps()
    try:
        dt.native_steps(global_flag)
        dk = dt.compile_autograd(layer_norm, native=kernel_flag)
        X, w, b, gy = torch.randn(3, 11), torch.randn(11), torch.randn(11), torch.randn(3, 11)
        for _ in range(3):
            _ln_step(dk, X, w, b, gy)
    finally:
        dt.native_steps(was)
    assert len(rec.registered) == expect


def test_bad_switch_values_name_the_argument():
    with pytest.raises(TypeError, match="native must be True, False or None"):
        dt.compile_autograd(layer_norm, native="yes")
    with pytest.raises(TypeError, match="native must be True, False or None"):
        dt.compile_autograd(layer_norm, native=1)
    with pytest.raises(TypeError, match=r"native_steps\(flag\)"):
        dt.native_steps(1)


@pytest.mark.parametrize("value,on", [("0", False), ("false", False), ("OFF", False), ("no", False), ("1", True),
                                      ("", True), ("yes", True)])
def test_the_environment_switch(monkeypatch, value, on):
    monkeypatch.setenv("DTRITON_NATIVE_STEPS", value)
    assert native._env_flag() is on


def test_turning_native_steps_off_stops_native_calls(interp_gpu, monkeypatch):  # noqa: F811
    rec = Recorder(monkeypatch)
    was = dt.native_steps()
    dk = dt.compile_autograd(layer_norm)
    X, w, b, gy = torch.randn(3, 11), torch.randn(11), torch.randn(11), torch.randn(3, 11)
    try:
        dt.native_steps(True)
        for _ in range(3):
            _ln_step(dk, X, w, b, gy)
        assert rec.calls == 1
        dt.native_steps(False)
        for _ in range(2):
            _ln_step(dk, X, w, b, gy)
        assert rec.calls == 1   # the registered step is not entered any more
    finally:
        dt.native_steps(was)


def test_a_registration_error_warns_and_keeps_the_python_node(interp_gpu, monkeypatch):  # noqa: F811
    rec = Recorder(monkeypatch)

    def broken(*a, **k):
        raise struct.error("required argument is not a float")
    monkeypatch.setattr(native, "register", broken)
    dk = dt.compile_autograd(layer_norm, native=True)
    X, w, b, gy = torch.randn(3, 11), torch.randn(11), torch.randn(11), torch.randn(3, 11)
    with pytest.warns(RuntimeWarning, match="keeps the Python autograd node"):
        for _ in range(2):
            _ln_step(dk, X, w, b, gy)
    _, grads = _ln_step(dk, X, w, b, gy)
    torch.testing.assert_close(grads[0].double(), _ln_reference(X, w, b, gy)[1][0], rtol=1e-4, atol=1e-5)
    assert next(s for s in dk._steps.values() if s).native == -2 and rec.calls == 0


def test_a_step_waits_for_the_extension_then_becomes_native(interp_gpu, monkeypatch):  # noqa: F811
    rec = Recorder(monkeypatch)
    built = [False]
    monkeypatch.setattr(native, "ready", lambda wait=False: built[0])
    dk = dt.compile_autograd(layer_norm, native=True)
    X, w, b, gy = torch.randn(3, 11), torch.randn(11), torch.randn(11), torch.randn(3, 11)
    for _ in range(3):
        _ln_step(dk, X, w, b, gy)
    assert rec.registered == [] and next(s for s in dk._steps.values() if s).native == -1
    built[0] = True   # the background build finished: the next backward of the step adopts it
    _ln_step(dk, X, w, b, gy)
    assert len(rec.registered) == 1 and len(rec.variants) == 1
    _ln_step(dk, X, w, b, gy)
    assert rec.calls == 1


@pytest.mark.skipif(shutil.which("ninja") is None or shutil.which("c++") is None,
                    reason="building the extension needs ninja and a C++ compiler")
def test_the_extension_compiles_against_this_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setitem(native._state, "module", None)
    monkeypatch.setitem(native._state, "failed", None)
    monkeypatch.setitem(native._state, "building", None)
    mod = native.module()
    assert mod is not None, native._state["failed"]
    assert {"register_step", "add_backward", "forward"} <= set(dir(mod))
    # add_backward takes the (address, tag) of launch_counts' record: the arguments parse, then the
    # variant is refused for having no launchers
    with pytest.raises(RuntimeError, match="without launchers"):
        mod.add_backward(0, [True], [None], [], [], [], 0, 0)
    _call_cache_keys(mod)


def _call_cache_keys(mod):
    """The C++ call cache: a hit runs the entered step's forward (here a plan with no kernels and
    no outputs: on a CPU build its device guard raises, on a GPU it returns an empty tuple); every
    other call signature, a call with grad mode off or with no tensor requiring grad, and a call
    with a non-tensor argument miss (None: the Python path takes them)."""
    plan = {"device": 0, "arg_reads": [0], "allocs": [], "kernels": [], "returns": [], "counter_stream": 0,
            "counters": None}
    sid = mod.register_step("probe", plan, 0, [], lambda *a: None)
    log = (ctypes.c_int64 * 1)()
    cache = mod.CallCache(ctypes.addressof(log))
    X = torch.randn(4, 6, requires_grad=True)
    cache.add((X, X[0]), sid, 7)

    def hit(*args):
        try:
            return cache(args) is not None
        except RuntimeError:   # (the device guard of a CPU-only torch: the hit reached the forward)
            return True
    Y = torch.randn(4, 6, requires_grad=True)
    assert hit(X, X[0]) and hit(Y, Y[2])   # the same layouts (and 16-byte alignment) hit
    base = torch.randn(40, requires_grad=True)
    odd = base[1:25].view(4, 6)   # misaligned by 4 bytes
    assert not hit(odd, Y[0])
    assert not hit(Y.t().contiguous().t(), Y[0])   # other strides
    assert not hit(torch.randn(4, 7, requires_grad=True), Y[0])   # another shape
    assert not hit(Y.double(), Y[0])   # another dtype
    assert not hit(Y)   # another argument count
    assert not hit(Y, 3.0)   # a non-tensor argument
    assert not hit(Y.detach(), Y[0].detach())   # no tensor requires grad
    with torch.no_grad():
        assert not hit(Y, Y[0])


def test_a_step_without_a_native_plan_says_why(interp_gpu, monkeypatch):  # noqa: F811
    """The interpreter's stand-in kernels have no Triton signature: the real registration finds no
    plan, and the step keeps the Python node with the reason (what bench/native_check prints)."""
    monkeypatch.setattr(native, "ready", lambda wait=False: True)
    g = torch.Generator().manual_seed(8)
    X, w, b = torch.randn(3, 20, generator=g), torch.randn(20, generator=g), torch.randn(20, generator=g)
    dk = dt.compile_autograd(layer_norm, native=True)
    for _ in range(3):
        _ln_step(dk, X, w, b, torch.randn(3, 20, generator=g))
    step = next(s for s in dk._steps.values() if s)
    assert step.native == -2
    assert step.native_why.startswith("the forward: ") and step.native_why != "the forward: no extension", step.native_why
