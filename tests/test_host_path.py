"""The host path of forward+backward steps (issue 15): once a call signature has run, a
differentiable step's forward and backward go through the fast launchers (no re-planning, no
Triton re-binding), and the forward's per-signature decisions are cached.

The GPU code path runs here on CPU tensors with launches made no-ops (as ``bench/host_overhead.py
--host-only`` does): the backend choice says "gpu", the backend's slow-path ``launch`` returns a
compiled-kernel stand-in whose ``run`` counts fast launches, and Triton's driver reports stream 0."""

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
