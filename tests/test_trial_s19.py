"""Session 19 fixes from the s18 user trial: ``dt.as_torch_op`` results pickle, the out-of-range label
error of ``library.cross_entropy_ignore`` names its ignore_index, ``launch_counts`` after a forward
that records no backward."""

import copy
import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dtriton as dt
import dtriton.library  # noqa: F401  (dt.library)

ROOT = Path(__file__).resolve().parents[1]


# -- 1. a dt.as_torch_op result pickles as what built it --------------------------------------------
@pytest.fixture(scope="module")
def softmax_op():
    return dt.as_torch_op(dt.compile(dt.library.softmax), "dtriton_s19::softmax")


class _Holder(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op
        self.scale = torch.nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return self.op(x * self.scale)


def test_torch_op_survives_torch_save_and_deepcopy_in_this_process(softmax_op):
    model = _Holder(softmax_op)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert loaded.op is softmax_op   # an op is registered once per process: loading returns it
    assert copy.deepcopy(model).op is softmax_op
    assert pickle.loads(pickle.dumps(softmax_op)) is softmax_op
    x = torch.randn(3, 7)
    torch.testing.assert_close(loaded(x).double(), torch.softmax(x.double() * 1.5, -1), rtol=1e-5, atol=1e-6)


def test_torch_op_pickle_loads_in_a_fresh_process(softmax_op):
    """The pickle names the kernel (its algorithm by reference) and the op's name: a process without that op
    registers it again, and its forward and backward (the derived kernels) run."""
    blob = pickle.dumps(softmax_op)
    code = ("import pickle, sys, torch\n"
            "op = pickle.loads(sys.stdin.buffer.read())\n"
            "assert op is not None and torch.ops.dtriton_s19.softmax is not None\n"
            "x = torch.randn(3, 7, dtype=torch.float64).float().requires_grad_()\n"
            "w = torch.randn(3, 7)\n"
            "(op(x) * w).sum().backward()\n"
            "xd = x.detach().double().requires_grad_()\n"
            "ref = torch.softmax(xd, -1)\n"
            "(ref * w.double()).sum().backward()\n"
            "torch.testing.assert_close(op(x).double(), ref, rtol=1e-5, atol=1e-6)\n"
            "torch.testing.assert_close(x.grad.double(), xd.grad, rtol=1e-4, atol=1e-6)\n"
            "print('loaded', type(op).__name__)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], input=blob, cwd=ROOT, env=env, capture_output=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    assert b"loaded TorchOp" in r.stdout


def test_loading_an_op_whose_name_this_process_registered_for_another_kernel_says_so(softmax_op):
    from dtriton.integrations.custom_op import torch_op_named   # what a pickled op's load calls
    other = dt.compile(dt.library.log_softmax)
    with pytest.raises(pickle.UnpicklingError, match=r"'dtriton_s19::softmax'.*another kernel.*log_softmax"):
        torch_op_named("dtriton_s19::softmax", other)
    with pytest.raises(pickle.UnpicklingError, match=r"group"):
        torch_op_named("dtriton_s19::softmax", dt.compile(dt.library.softmax), group="none")


# -- 2. cross_entropy_ignore: a label out of range that is not the ignore_index ----------------------
@pytest.mark.parametrize("ignore, bad", [(-100, -1), (-100, 5), (3, -100)])
def test_cross_entropy_ignore_names_its_ignore_index_for_a_label_out_of_range(ignore, bad):
    from dtriton.library import cross_entropy_ignore
    X = torch.randn(4, 5, generator=torch.Generator().manual_seed(3))
    labels = torch.tensor([0, bad, ignore, 4])
    for call in (lambda: cross_entropy_ignore.reference(X, labels, ignore),
                 lambda: dt.compile(cross_entropy_ignore)(X, labels, ignore),
                 lambda: dt.compile(cross_entropy_ignore, check_indices=True)(X, labels, ignore),
                 # the training forward is a derived algorithm (saving statistics): it keeps the hint
                 lambda: dt.compile_autograd(cross_entropy_ignore)(X.clone().requires_grad_(), labels, ignore)):
        with pytest.raises(dt.IndexRangeError) as e:
            call()
        msg = str(e.value)
        assert f"labels[i] is {bad} at i = 1" in msg and "indices 0..4" in msg, msg
        assert "out of range" in msg and "Is it your ignore_index?" in msg, msg
        assert f"ignores labels equal to {ignore} " in msg, msg
        assert "Pad the tensor" not in msg, msg   # the generic fixes do not apply to a library kernel's user


def test_index_hints_of_an_algorithm_replace_the_generic_fixes_and_survive_dt_grad():
    X, W = torch.randn(3, 4), torch.randn(6)
    idx = torch.tensor([1, 9, 2])
    ok = idx.clamp(max=5)
    got = dt.compile(_weighted)(X, W, ok, 2.0, out=torch.full((3,), float("nan")))
    torch.testing.assert_close(got.double(), X.double().sum(1) * W.double()[ok] * 2.0)
    try:
        _weighted.index_hints = {"idx": "idx must be a row of W, below {K} (scale {scale})"}
        # the backward wrt X reads W[idx[i]] too: dt.grad's algorithms keep the hint
        for call in (lambda: dt.compile(_weighted)(X, W, idx, 2.0),
                     lambda: dt.compile(dt.grad(_weighted)["X"])(X, W, idx, 2.0, torch.ones(3))):
            with pytest.raises(dt.IndexRangeError, match=r"idx\[i\] is 9 at i = 1\. idx must be a row of W, below 6 "
                                                         r"\(scale 2\.0\)$"):
                call()
        back = dt.grad(_weighted)["X"]
        assert pickle.loads(pickle.dumps(back)).index_hints == _weighted.index_hints   # a by-value algorithm
    finally:
        del _weighted.index_hints
    with pytest.raises(dt.IndexRangeError, match=r"is 9 at i = 1\. Pad the tensor"):
        dt.compile(_weighted)(X, W, idx, 2.0)


@dt.algorithm
def _weighted(X: dt.Tensor["M", "N"], W: dt.Tensor["K"], idx: dt.Tensor["M"], scale: float):
    i, j = dt.axes("i j")
    return (dt.sum(X[i, j], over=j) * W[idx[i]] * scale)[i]


# -- 3. launch_counts after a forward that records no backward --------------------------------------
_SPLIT = dt.Schedule(tile={"i": 2, "j": 4}, grid=("i", "j"))   # softmax's row reductions in kernels of their own


@pytest.mark.filterwarnings("ignore::dtriton.ScheduleWarning")
def test_launch_counts_after_a_forward_without_autograd():
    """The saving forward of the split schedule takes 4 kernels, the plain kernel 3: each call without autograd
    reports its own forward and no backward; gradients() keeps to the differentiable call before it."""
    import ctypes
    dk = dt.compile_autograd(dt.library.softmax, _SPLIT, save="lse_max0_sum0")
    X = torch.randn(4, 16, dtype=torch.float64).float()
    G = torch.randn(4, 16)

    def train():
        x = X.clone().requires_grad_()
        dk(x).backward(G)
        xd = X.double().requires_grad_()
        torch.softmax(xd, -1).backward(G.double())
        torch.testing.assert_close(x.grad.double(), xd.grad, rtol=1e-5, atol=1e-6)

    def plain(call):
        out = call()
        torch.testing.assert_close(out.double(), torch.softmax(X.double(), -1), rtol=1e-5, atol=1e-6)
        assert dk.launch_counts() == {"forward": 3, "backward": 0}, dk.launch_counts()
        assert dk.gradients().saved == ("lse_max0_sum0",)   # the differentiable call's, not the plain one's

    train()
    assert dk.launch_counts() == {"forward": 4, "backward": 1}
    with torch.no_grad():
        plain(lambda: dk(X.clone().requires_grad_()))
    train()
    plain(lambda: dk(X))   # no input requires grad
    train()
    plain(lambda: dk(X, out=torch.full((4, 16), float("nan"))))
    # a native backward writes its variant's tag (what the C++ node does, native_record's address): reported,
    # until a call without autograd, after which a native backward that runs is reported again
    train()
    runners = list(dk.last_runs["backward"])
    address, tag = dk.native_record(runners)
    ctypes.c_int64.from_address(address).value = tag
    assert dk.launch_counts() == {"forward": 4, "backward": 1}
    plain(lambda: dk(X))
    ctypes.c_int64.from_address(address).value = tag
    assert dk.launch_counts() == {"forward": 3, "backward": 1}


@pytest.mark.filterwarnings("ignore::dtriton.ScheduleWarning")
def test_gradients_keep_to_the_differentiable_call_before_a_plain_one():
    dk = dt.compile_autograd(dt.library.softmax, _SPLIT)   # save="auto": this schedule saves nothing
    X = torch.randn(4, 16)
    dk(X.clone().requires_grad_()).sum().backward()
    assert dk.gradients().saved == ()
    with torch.no_grad():
        dk(X)
    assert dk.gradients().saved == () and dk.launch_counts() == {"forward": 3, "backward": 0}
