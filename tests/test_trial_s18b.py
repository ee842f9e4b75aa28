"""Session 18 fresh-user trial (b): a scalar named like a tensor dim, pickling kernels and
algorithms, the training forward of a differentiable kernel, the unsupported integer dtype message."""

import pytest
import torch

import dtriton as dt
from dtriton.errors import AlgorithmError


# -- 1. a scalar parameter named like a size symbol ------------------------------------------------
def test_int_parameter_named_like_a_dim_is_refused():
    with pytest.raises(AlgorithmError, match=r"parameter 'N' \(int\) of pad_to .*tensor argument 'X'.*Rename"):
        @dt.algorithm
        def pad_to(X: dt.Tensor["M", "N"], N: int):
            i, j = dt.axes("i j:N")
            return (X.pad(0.0)[i, j] * 2.0)[i, j]


def test_float_parameter_named_like_a_dim_is_refused():
    with pytest.raises(AlgorithmError, match=r"parameter 'M' \(float\) of scaled .*'X'"):
        @dt.algorithm
        def scaled(X: dt.Tensor["M", "N"], M: float):
            i, j = dt.axes("i j")
            return (X[i, j] * M)[i, j]


def test_renamed_dim_keeps_the_argument():
    @dt.algorithm
    def scale_by(X: dt.Tensor["M", "K"], N: int):
        i, j = dt.axes("i j")
        return (X[i, j] * N)[i, j]

    X = torch.randn(2, 3)
    got = dt.compile(scale_by)(X, 5)
    torch.testing.assert_close(got.double(), X.double() * 5)


# -- 2. pickling algorithms and kernels -------------------------------------------------------------
@dt.algorithm
def scaled_rows(X: dt.Tensor["M", "N"], s: float):
    """``X * s`` row-normalised: ``X[i, j] * s / sum_j X[i, j]**2``."""
    i, j = dt.axes("i j")
    return (X[i, j] * s / dt.sum(X[i, j] * X[i, j], over=j))[i, j]


def _scaled_rows_ref(X, s):
    X = X.double()
    return X * s / (X * X).sum(1, keepdim=True)


class _Head(torch.nn.Module):
    """A linear map followed by a dtriton softmax (``dt.compile_autograd``)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 6)
        self.softmax = dt.compile_autograd(dt.library.softmax)

    def forward(self, x):
        return self.softmax(self.lin(x))


def test_algorithms_pickle_by_reference():
    import pickle
    assert pickle.loads(pickle.dumps(dt.library.softmax)) is dt.library.softmax
    assert pickle.loads(pickle.dumps(scaled_rows)) is scaled_rows


@pytest.mark.parametrize("make", [lambda: dt.compile(scaled_rows), lambda: dt.compile(scaled_rows, "tuned"),
                                  lambda: dt.compile(scaled_rows, dt.Schedule(tile={"i": 2})),
                                  lambda: dt.compile_autograd(scaled_rows, save=None)])
def test_kernels_pickle_and_run_after_load(make):
    import pickle
    kern = make()
    X = torch.randn(3, 5)
    kern(X, 2.0)   # compiled state and caches are not part of the pickle
    loaded = pickle.loads(pickle.dumps(kern))
    assert type(loaded) is type(kern) and loaded.algorithm is scaled_rows
    assert getattr(loaded, "kernel", loaded).schedule == getattr(kern, "kernel", kern).schedule
    torch.testing.assert_close(loaded(X, 2.0).double(), _scaled_rows_ref(X, 2.0))


def test_differentiable_kernel_keeps_its_options_when_pickled():
    import pickle
    dk = dt.compile_autograd(dt.library.softmax, save=None, group="none")
    loaded = pickle.loads(pickle.dumps(dk))
    assert (loaded.save, loaded.group, loaded.native) == (None, "none", None)


def test_deepcopy_of_kernels_and_algorithms():
    import copy
    dk = dt.compile_autograd(scaled_rows)
    twin = copy.deepcopy(dk)
    assert twin.algorithm.fingerprint == scaled_rows.fingerprint
    X = torch.randn(3, 5)
    torch.testing.assert_close(twin(X, 1.5).double(), _scaled_rows_ref(X, 1.5))


def test_torch_save_of_a_module_holding_a_kernel_then_a_training_step(tmp_path):
    torch.manual_seed(0)
    model = _Head()
    path = tmp_path / "head.pt"
    torch.save(model, path)
    loaded = torch.load(path, weights_only=False)
    x = torch.randn(4, 8)
    target = torch.softmax(torch.randn(4, 6), -1)
    # the same step in float64 torch, from the saved weights
    ref = torch.nn.Linear(8, 6).double()
    ref.load_state_dict({k: v.double() for k, v in model.lin.state_dict().items()})
    ((torch.softmax(ref(x.double()), -1) - target.double()) ** 2).sum().backward()
    for p in loaded.parameters():
        p.grad = torch.full_like(p, float("nan"))   # poisoned: the step must overwrite them
    opt = torch.optim.SGD(loaded.parameters(), lr=0.1)
    opt.zero_grad(set_to_none=True)
    ((loaded(x) - target) ** 2).sum().backward()
    torch.testing.assert_close(loaded.lin.weight.grad.double(), ref.weight.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loaded.lin.bias.grad.double(), ref.bias.grad, rtol=1e-4, atol=1e-5)
    before = loaded.lin.weight.detach().clone()
    opt.step()
    torch.testing.assert_close(loaded.lin.weight.detach().double(), before.double() - 0.1 * ref.weight.grad,
                               rtol=1e-4, atol=1e-5)


def test_a_locally_defined_algorithm_cannot_be_pickled_and_says_why():
    import pickle

    @dt.algorithm
    def local_double(X: dt.Tensor["M"]):
        i, = dt.axes("i")
        return (X[i] * 2.0)[i]

    with pytest.raises(pickle.PicklingError, match=r"local_double: it is defined inside a function.*state_dict"):
        pickle.dumps(dt.compile_autograd(local_double))


# -- 3. the forward a training call runs ------------------------------------------------------------
@pytest.mark.parametrize("save", ["auto", None])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_source_and_schedule_for_are_the_training_forward(save, dtype):
    dk = dt.compile_autograd(dt.library.softmax, save=save)
    X = torch.randn(4, 8, dtype=dtype)
    src, sched = dk.source_for(X), dk.schedule_for(X=X)   # (positional or by name)
    assert ("softmax_fwd_saving" in src) == (save == "auto")
    Xg = X.clone().requires_grad_()
    y = dk(Xg)
    (ran,) = dk.last_runs["forward"]
    assert ran.last.source == src and ran.last.schedule_for(X) == sched
    torch.testing.assert_close(y.double(), torch.softmax(X.double(), -1))
    assert bool(dk.gradients(args=(X,)).saved) == (save == "auto")
    assert "softmax_fwd_saving" not in dk.kernel.source_for(X)   # a call without gradients runs .kernel


# -- 4. unsupported integer dtypes -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.uint64, torch.uint32, torch.uint16])
def test_unsupported_integer_dtype_names_the_supported_ones(dtype):
    X = torch.ones(2, 3, dtype=dtype)
    with pytest.raises(dt.DTypeError) as e:
        dt.compile(dt.library.softmax)(X)
    msg = str(e.value)
    assert f"unsupported dtype {dtype}" in msg and "or an integer dtype" not in msg
    assert "integer dtypes int8, int16, int32, int64, uint8, or bool" in msg and "X.to(torch.int64)" in msg
