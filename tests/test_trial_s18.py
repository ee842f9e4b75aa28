"""Session 18's fresh-user trial: torch.compile around a kernel call (a graph break, not a misleading
CompileError), batched gradients refused by name, dt.differentiable's options checked."""
import pytest
import torch

import dtriton as dt
from dtriton import library as L


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_around_a_differentiable_kernel_breaks_the_graph(backend):
    k = dt.compile_autograd(L.softmax)

    def f(x):
        return k(torch.tanh(x)).pow(2).sum()
    x = torch.randn(4, 8, requires_grad=True)
    ref = f(x)
    ref.backward()
    g0, x.grad = x.grad.clone(), None
    torch._dynamo.reset()
    y = torch.compile(f, backend=backend)(x)
    y.backward()
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(x.grad, g0)


def test_torch_compile_around_plain_and_tuned_kernels():
    X = torch.randn(3, 5)
    for k in (dt.compile(L.softmax), dt.compile(L.softmax, "tuned")):
        torch._dynamo.reset()
        got = torch.compile(lambda x, k=k: k(x) * 2, backend="eager")(X)
        torch.testing.assert_close(got, torch.softmax(X, -1) * 2)


def test_fullgraph_names_as_torch_op():
    k = dt.compile(L.softmax)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="as_torch_op"):
        torch.compile(lambda x: k(x) * 2, backend="eager", fullgraph=True)(torch.randn(3, 5))


def test_batched_gradients_are_refused_by_name():
    k = dt.compile_autograd(L.softmax)
    x = torch.randn(2, 3)
    for _ in range(2):   # the first call plans, the second runs the cached step
        with pytest.raises(NotImplementedError, match="batched gradients"):
            torch.autograd.functional.jacobian(k, x, vectorize=True)
    J = torch.autograd.functional.jacobian(k, x.double(), vectorize=False)
    torch.testing.assert_close(J, torch.autograd.functional.jacobian(lambda t: torch.softmax(t, -1), x.double()))


def test_differentiable_checks_its_options_as_compile_autograd_does():
    for make in (lambda **kw: dt.differentiable(dt.compile(L.softmax), **kw),
                 lambda **kw: dt.compile_autograd(L.softmax, **kw)):
        with pytest.raises(TypeError, match="unknown option 'sav'; did you mean 'save'"):
            make(sav="auto")
