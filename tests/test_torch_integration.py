"""PyTorch integration of dtriton kernels: autograd, the hook installed as Kernel.grad_call,
torch.library ops (and output_specs, their fake implementation) and torch.compile(fullgraph=True).
CPU interpreter, tiny shapes."""

from __future__ import annotations

import pytest
import torch

import dtriton as dt
from dtriton.integrations.autograd import DifferentiableKernel, apply, output_specs

from dtriton.library import cross_entropy, layer_norm, linear_relu, softmax  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning",
                                        "ignore::DeprecationWarning")


@dt.algorithm
def spatial_diffusion(x: dt.Tensor["V", "C"], mass: dt.Tensor["V"], evals: dt.Tensor["K"],
                      basis: dt.Tensor["V", "K"], times: dt.Tensor["C"]):
    v, k, c = dt.axes("v k c")
    spectral = dt.exp(-evals[k] * times[c]) * dt.sum(basis[v, k] * x[v, c] * mass[v], over=v)
    out = dt.sum(basis[v, k] * spectral, over=k)
    return out[v, c], spectral[k, c]


def small_tiles(alg):
    return dt.Schedule(acc_dtype="float64", tile={a: 4 for a in alg.axis_names})


def t_linear_relu(X, W, b):
    return torch.relu(X @ W.t() + b)


def t_diffusion(x, mass, evals, basis, times):
    spectral = torch.exp(-evals[:, None] * times[None, :]) * (basis.t() @ (x * mass[:, None]))
    return basis @ spectral, spectral


def grads_of(fn, args, idx, gouts):
    targs = [a.detach().clone().requires_grad_(k in idx) if isinstance(a, torch.Tensor) else a
             for k, a in enumerate(args)]
    outs = fn(*targs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return torch.autograd.grad([o for o, g in zip(outs, gouts) if g is not None],
                               [targs[k] for k in idx], [g for g in gouts if g is not None])


@pytest.fixture(scope="module")
def lin_kernel():
    return dt.compile(linear_relu)


# ----------------------------------------------------------------------------------------------
# autograd.Function
# ----------------------------------------------------------------------------------------------
def test_only_inputs_that_require_grad_get_gradients(lin_kernel):
    dk = dt.differentiable(lin_kernel)
    g = torch.Generator().manual_seed(0)
    X, W, b = torch.randn(3, 4, generator=g), torch.randn(5, 4, generator=g), torch.randn(5, generator=g)
    W.requires_grad_()
    b.requires_grad_()
    y = dk(X, W, b)
    assert y.grad_fn is not None
    G = torch.randn(3, 5, generator=g)
    y.backward(G)
    assert X.grad is None
    eW, eb = grads_of(t_linear_relu, [X, W, b], [1, 2], [G])
    torch.testing.assert_close(W.grad, eW)
    torch.testing.assert_close(b.grad, eb)
    # the backward algorithms were derived for exactly {W, b}
    assert [k[0] for k in dk._bwd] == [frozenset({"W", "b"})]
    assert dk.gradients(["W", "b"]).wrt == ("W", "b")


def test_plain_call_without_grad(lin_kernel):
    dk = dt.differentiable(lin_kernel)
    X, W, b = torch.randn(3, 4), torch.randn(5, 4, requires_grad=True), torch.randn(5)
    assert dk(X, W.detach(), b).grad_fn is None
    with torch.no_grad():
        assert dk(X, W, b).grad_fn is None
    torch.testing.assert_close(dk(X, W.detach(), b), t_linear_relu(X, W.detach(), b))
    out = torch.empty(3, 5)
    assert dk(X, W.detach(), b, out=out) is out


def test_installed_hook_routes_grad_calls_through_autograd(monkeypatch):
    """Importing dtriton installs integrations.autograd.apply as Kernel.grad_call (the runtime does
    not import autograd); a kernel call whose input requires grad goes through that hook, and so
    through torch autograd; calls without grad (or under no_grad) do not."""
    assert dt.Kernel.grad_call is apply
    seen = []

    def spy(kernel, args, out=None):
        seen.append(kernel)
        return apply(kernel, args, out=out)

    monkeypatch.setattr(dt.Kernel, "grad_call", spy)
    k = dt.compile(linear_relu)
    g = torch.Generator().manual_seed(1)
    X = torch.randn(3, 4, generator=g, requires_grad=True)
    W, b = torch.randn(5, 4, generator=g), torch.randn(5, generator=g)
    y = k(X, W, b)
    assert seen == [k] and y.grad_fn is not None
    G = torch.randn(3, 5, generator=g)
    (gx,) = torch.autograd.grad(y, [X], G)
    torch.testing.assert_close(gx, grads_of(t_linear_relu, [X, W, b], [0], [G])[0])
    assert k(X.detach(), W, b).grad_fn is None
    with torch.no_grad():
        assert k(X, W, b).grad_fn is None
    assert seen == [k]
    with pytest.raises(dt.ShapeError, match="out="):
        k(X, W, b, out=torch.empty(3, 5))
    with pytest.raises(dt.ShapeError, match="out="):
        apply(k, (X, W, b), out=torch.empty(3, 5))


def test_multi_output_with_an_unused_output():
    dk = dt.compile_autograd(spatial_diffusion, small_tiles(spatial_diffusion), backward_schedules=small_tiles)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    mass = torch.rand(6, generator=g, dtype=torch.float64) + 0.5
    evals = torch.rand(4, generator=g, dtype=torch.float64)
    basis = torch.randn(6, 4, generator=g, dtype=torch.float64)
    times = (torch.rand(3, generator=g, dtype=torch.float64) + 0.1).requires_grad_()
    out, spectral = dk(x, mass, evals, basis, times)
    G = torch.randn(6, 3, generator=g, dtype=torch.float64)
    gx, gt = torch.autograd.grad(out, [x, times], G)  # spectral is unused: a zero upstream gradient
    ex, et = grads_of(t_diffusion, [x, mass, evals, basis, times], [0, 4], [G, None])
    torch.testing.assert_close(gx, ex)
    torch.testing.assert_close(gt, et)
    torch.testing.assert_close(spectral, t_diffusion(x, mass, evals, basis, times)[1])


@pytest.mark.parametrize("alg", [softmax, layer_norm], ids=["softmax", "layer_norm"])
def test_saved_stages_mode_gradcheck(alg):
    dk = dt.compile_autograd(alg, small_tiles(alg), save="all", backward_schedules=small_tiles)
    assert dk.gradients().saved  # forward stages come from the forward pass
    g = torch.Generator().manual_seed(3)
    args = [torch.randn(3, 6, generator=g, dtype=torch.float64, requires_grad=True)]
    if alg is layer_norm:
        args += [torch.randn(6, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    assert torch.autograd.gradcheck(lambda *xs: dk(*xs), args)


def test_backward_schedules_by_input_name_and_float32_dtypes():
    sched = dt.Schedule(tile={"i": 2}, grid=("i",), strategy={"j": "whole"})  # no tile for the whole j
    dk = dt.compile_autograd(softmax, backward_schedules={"X": sched}, save=None)   # the backward takes (X, G)
    g = torch.Generator().manual_seed(4)
    X = torch.randn(5, 7, generator=g, requires_grad=True)
    y = dk(X)
    G = torch.randn(5, 7, generator=g)
    (gx,) = torch.autograd.grad(y, [X], G)
    assert gx.dtype == torch.float32
    torch.testing.assert_close(gx, grads_of(lambda x: torch.softmax(x, -1), [X], [0], [G])[0])
    (runner,) = next(v for k, v in dk._bwd.items() if k[0] == frozenset({"X"}))[1]
    assert runner.schedule is sched
    assert runner.kernel(False).schedule_for(X.detach(), G).tile["i"] == 2


@pytest.mark.parametrize("spec, needle", [
    ({"nonsense": None}, "'nonsense'"),
    ({"d_A": None}, "'d_A'"),                          # a stage name, not a key
    ({"Y": None}, "'Y'"),                              # not an input of softmax
    ({"softmax_grad_Y": None}, "'softmax_grad_Y'"),
    ([dt.Schedule()], "list"),
    ("tile", "str"),
    ({"X": "tile"}, "backward_schedules['X']"),
    ({"X": [1, 2]}, "list"),
])
def test_backward_schedules_rejects_unknown_keys_and_types(spec, needle):
    with pytest.raises(dt.ScheduleError) as e:
        dt.compile_autograd(softmax, backward_schedules=spec)
    assert needle in str(e.value)
    if isinstance(spec, dict) and spec and list(spec.values())[0] is None:
        assert "['X']" in str(e.value) and "softmax_grad_X" in str(e.value)   # the valid keys


def test_backward_schedules_accepts_algorithm_names_and_dicts():
    sched = dt.Schedule(tile={"i": 2}, grid=("i",), strategy={"j": "whole"})
    dk = dt.compile_autograd(softmax, backward_schedules={"softmax_grad_X": sched.to_dict()})
    X = torch.randn(3, 5, requires_grad=True)
    dk(X).sum().backward()
    (runner,) = next(v for k, v in dk._bwd.items() if k[0] == frozenset({"X"}))[1]
    assert runner.schedule == sched
    dk2 = dt.compile_autograd(layer_norm, backward_schedules={"layer_norm_grad_X_w": None, "X": None})
    assert set(dk2.backward_schedules) == {"layer_norm_grad_X_w", "X"}


def test_integer_inputs_get_no_gradient():
    dk = dt.compile_autograd(cross_entropy)
    g = torch.Generator().manual_seed(5)
    X = torch.randn(4, 6, generator=g, requires_grad=True)
    labels = torch.randint(0, 6, (4,), generator=g)
    loss = dk(X, labels).mean()
    loss.backward()
    expect = grads_of(lambda x, lab: torch.nn.functional.cross_entropy(x, lab, reduction="none"),
                      [X, labels], [0], [torch.full((4,), 0.25)])[0]
    torch.testing.assert_close(X.grad, expect)


def test_differentiable_rejects_non_kernels():
    with pytest.raises(TypeError):
        DifferentiableKernel(softmax)


# ----------------------------------------------------------------------------------------------
# torch.library custom ops and torch.compile
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lin_op(lin_kernel):
    return dt.as_torch_op(lin_kernel, "dtriton_test::linear_relu")


@pytest.fixture(scope="module")
def ce_op():
    return dt.as_torch_op(dt.compile(cross_entropy), "dtriton_test::cross_entropy")


@pytest.fixture(scope="module")
def diffusion_op():
    return dt.as_torch_op(dt.compile(spatial_diffusion), "dtriton_test::spatial_diffusion")


class Tiny(torch.nn.Module):
    """A linear+relu layer (the dtriton op), a tanh, and a cross-entropy loss (the dtriton op)."""

    def __init__(self, lin, ce):
        super().__init__()
        g = torch.Generator().manual_seed(6)
        self.W = torch.nn.Parameter(torch.randn(5, 4, generator=g))
        self.b = torch.nn.Parameter(torch.randn(5, generator=g))
        self.lin, self.ce = lin, ce

    def forward(self, x, labels):
        h = self.lin(x, self.W, self.b)
        return self.ce(torch.tanh(h) * 2.0, labels).mean()


def eager_tiny(m, x, labels):
    h = torch.relu(x @ m.W.t() + m.b)
    return torch.nn.functional.cross_entropy(torch.tanh(h) * 2.0, labels)


def test_torch_op_eager_and_opcheck(lin_op):
    g = torch.Generator().manual_seed(7)
    args = (torch.randn(3, 4, generator=g, requires_grad=True), torch.randn(5, 4, generator=g, requires_grad=True),
            torch.randn(5, generator=g, requires_grad=True))
    y = lin_op(*args)
    torch.testing.assert_close(y, t_linear_relu(*args))
    assert y is not None and torch.ops.dtriton_test.linear_relu is not None
    G = torch.randn(3, 5, generator=g)
    for a, b in zip(torch.autograd.grad(y, args, G), grads_of(t_linear_relu, list(args), [0, 1, 2], [G])):
        torch.testing.assert_close(a, b)
    res = torch.library.opcheck(lin_op, args)
    assert all(v == "SUCCESS" for v in res.values()), res


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph_aot_eager(lin_op, ce_op, dynamic):
    torch._dynamo.reset()
    m = Tiny(lin_op, ce_op)
    cm = torch.compile(m, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    g = torch.Generator().manual_seed(8)
    for rows in ((3, 6) if dynamic else (3,)):
        x = torch.randn(rows, 4, generator=g, requires_grad=True)
        labels = torch.randint(0, 5, (rows,), generator=g)
        loss = cm(x, labels)
        params = [x, m.W, m.b]
        got = torch.autograd.grad(loss, params)
        ref = eager_tiny(m, x, labels)
        want = torch.autograd.grad(ref, params)
        torch.testing.assert_close(loss, ref)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)


def test_torch_compile_fullgraph_inductor(lin_op, ce_op):
    torch._dynamo.reset()
    m = Tiny(lin_op, ce_op)
    cm = torch.compile(m, fullgraph=True, backend="inductor")
    g = torch.Generator().manual_seed(9)
    x = torch.randn(3, 4, generator=g, requires_grad=True)
    labels = torch.randint(0, 5, (3,), generator=g)
    loss = cm(x, labels)
    loss.backward()
    ref = eager_tiny(m, x.detach().requires_grad_(), labels)
    torch.testing.assert_close(loss, ref)
    want = torch.autograd.grad(ref, [m.W, m.b])
    torch.testing.assert_close(m.W.grad, want[0])
    torch.testing.assert_close(m.b.grad, want[1])


def test_multi_output_op_under_compile(diffusion_op):
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(10)
    x = torch.randn(6, 3, generator=g, requires_grad=True)
    mass, evals = torch.rand(6, generator=g) + 0.5, torch.rand(4, generator=g)
    basis = torch.randn(6, 4, generator=g)
    times = (torch.rand(3, generator=g) + 0.1).requires_grad_()

    def f(x, times):
        out, spectral = diffusion_op(x, mass, evals, basis, times)
        return (out * out).sum() + spectral.sum()
    loss = torch.compile(f, fullgraph=True, backend="aot_eager")(x, times)
    got = torch.autograd.grad(loss, [x, times])

    def t(x, times):
        out, spectral = t_diffusion(x, mass, evals, basis, times)
        return (out * out).sum() + spectral.sum()
    xr, tr = x.detach().requires_grad_(), times.detach().requires_grad_()
    ref = t(xr, tr)
    torch.testing.assert_close(loss, ref, rtol=1e-4, atol=1e-5)
    for a, b in zip(got, torch.autograd.grad(ref, [xr, tr])):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_as_torch_op_names(lin_kernel, lin_op):
    assert dt.as_torch_op(lin_kernel, "dtriton_test::linear_relu") is lin_op
    # another kernel built the same way (as_torch_op in a module's __init__, the module built twice): the op
    assert dt.as_torch_op(dt.compile(linear_relu), "dtriton_test::linear_relu") is lin_op
    # one built differently: refused, naming what differs and the fix (another name)
    with pytest.raises(ValueError, match=r"already registered for another kernel: schedule .*another name"):
        dt.as_torch_op(dt.compile(linear_relu, dt.Schedule(num_warps=2)), "dtriton_test::linear_relu")
    with pytest.raises(ValueError, match=r"already registered for another kernel: check_indices True"):
        dt.as_torch_op(dt.compile(linear_relu, check_indices=True), "dtriton_test::linear_relu")
    with pytest.raises(ValueError, match=r"already registered for another kernel: backward_schedules/group"):
        dt.as_torch_op(dt.compile(linear_relu), "dtriton_test::linear_relu", group="none")
    with pytest.raises(ValueError, match=r"already registered for another kernel: algorithm cross_entropy"):
        dt.as_torch_op(dt.compile(cross_entropy), "dtriton_test::linear_relu")
    with pytest.raises(ValueError, match="namespace::name"):
        dt.as_torch_op(lin_kernel, "no_namespace")
    # a differentiable kernel: named as such, with the kernel to pass (the op is differentiable itself)
    with pytest.raises(TypeError, match=r"as_torch_op takes the compiled kernel \(dt.compile\(linear_relu\), or "
                                        r"\.kernel.*the op is differentiable itself"):
        dt.as_torch_op(dt.compile_autograd(linear_relu), "dtriton_test::linear_relu_dk")
    with pytest.raises(TypeError, match=r"as_torch_op takes a compiled kernel \(dt.compile\(alg\)\), got Algorithm"):
        dt.as_torch_op(linear_relu, "dtriton_test::linear_relu_alg")


class _OpLayer(torch.nn.Module):
    """A module registering its op in ``__init__`` (the README's pattern put in a layer)."""

    def __init__(self):
        super().__init__()
        self.op = dt.as_torch_op(dt.compile(softmax), "dtriton_test::softmax_in_init")

    def forward(self, x):
        return self.op(x)


def test_as_torch_op_in_init_builds_twice_and_loads_in_either_order():
    import io
    import pickle

    from dtriton.integrations.custom_op import torch_op_named   # what a pickled op's load calls
    a, b = _OpLayer(), _OpLayer()   # the second refused before: "already registered for another kernel object"
    assert a.op is b.op
    buf = io.BytesIO()
    torch.save(a, buf)
    buf.seek(0)
    c = torch.load(buf, weights_only=False)
    assert c.op is a.op and _OpLayer().op is a.op
    x = torch.randn(3, 6, dtype=torch.float64)
    got = c(x.float())
    torch.testing.assert_close(got.double(), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    # a load never reuses the registered op for a kernel built differently
    with pytest.raises(pickle.UnpicklingError, match=r"'dtriton_test::softmax_in_init'.*schedule"):
        torch_op_named("dtriton_test::softmax_in_init", dt.compile(softmax, dt.Schedule(num_warps=2)))
    with pytest.raises(pickle.UnpicklingError, match=r"check_indices"):
        torch_op_named("dtriton_test::softmax_in_init", dt.compile(softmax, check_indices=True))


def test_double_backward_is_refused_loudly():
    """create_graph=True would need the backward kernels to be differentiable; until they are, the
    call fails with a clear NotImplementedError instead of returning a silently constant gradient."""
    from dtriton.library import softmax as sm
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    y = dt.compile(sm)(x)
    with pytest.raises(NotImplementedError, match="double backward through the dtriton kernel 'softmax'"):
        torch.autograd.grad((y * torch.randn_like(y)).sum(), x, create_graph=True)


def _library_args(alg, dtype, seed=0):
    """Small arguments for a library algorithm: tensors of ``dtype`` (integer gather indices in
    range), scalars of the declared type."""
    g = torch.Generator().manual_seed(seed)
    size = {"R": 2, "Q": 2, "T": 2} if alg.requires else {}   # convolution windows smaller than the images
    args = []
    indices = {idx for idx, _, _, _ in alg.gathers}
    for p in alg.params:
        if not isinstance(p, dt.ir.InputTensor):
            args.append(0.25 if p.pytype is float else 2)
            continue
        shape = [size.setdefault(d, 3 + len(size)) for d in p.dims]
        if p.name in indices:
            _, _, _, sym = next(x for x in alg.gathers if x[0] == p.name)
            args.append(torch.randint(0, size.setdefault(sym, 3 + len(size)), shape, generator=g))
        elif dtype.is_floating_point:
            args.append(torch.randn(shape, generator=g).to(dtype))
        else:
            args.append(torch.randint(-3, 4, shape, generator=g).to(dtype))
    return _meet_requires(alg, args)


def _meet_requires(alg, args):
    """``args`` with the scalars an algorithm's constraints (``dt.requires``) bound set to the bound
    (``Ho == ...`` to torch's output size, ``p <= K // 2`` to half the window)."""
    import ast
    for _ in range(len(alg.requires) + 1):
        k = alg.requires_check(args) if alg.requires_check is not None else -1
        if k < 0:
            return args
        tree = ast.parse(alg.requires[k].cond, mode="eval").body
        env = {p.name: a for p, a in zip(alg.params, args) if not isinstance(p, dt.ir.InputTensor)}
        for p, a in zip(alg.params, args):
            if isinstance(p, dt.ir.InputTensor):
                for d, n in zip(p.dims, a.shape):
                    env.setdefault(d, n)
        pos = [p.name for p in alg.params].index(tree.left.id)
        args[pos] = eval(compile(ast.Expression(tree.comparators[0]), "<bound>", "eval"), {"max": max}, env)
    raise AssertionError(f"{alg.name}: no arguments meet its constraints from {args}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64],
                         ids=["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("name", dt.library.__all__)
def test_output_specs_agree_with_the_kernel(name, dtype):
    """output_specs (the fake implementation behind as_torch_op) gives the shapes and dtypes the
    kernel returns, for every library algorithm, with float and integer-only inputs (torch's
    result dtypes, as the reference's)."""
    alg = getattr(dt.library, name)
    args = _library_args(alg, dtype)
    got = dt.compile(alg)(*args)
    got = got if isinstance(got, tuple) else (got,)
    specs = output_specs(alg, args)
    assert [(list(t.shape), t.dtype) for t in got] == [(list(s), d) for s, d in specs]
    ref = alg.reference(*args)
    assert [d for _, d in specs] == [t.dtype for t in (ref if isinstance(ref, tuple) else (ref,))]
