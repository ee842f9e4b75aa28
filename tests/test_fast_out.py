"""Routing of ``out=`` calls to a signature's fast launcher (``Kernel.__call__``, ``FastLauncher.takes``).

Fast launchers exist only for GPU calls (``bench/gpu_check.py`` runs every case's ``out=`` call through them on
the H200); here a recording stand-in takes the launcher's place in a CPU kernel's table, so the test checks
which calls may use it: ``out=`` tensors laid out as fresh allocations, overlapping no input. An in-place call,
a strided ``out=`` or one the launcher does not take goes the slow path, which checks and plans it.
"""

from __future__ import annotations

import pytest
import torch

import dtriton as dt
from dtriton.backends.triton.fast import FastLauncher
from dtriton.runtime import kernel as kernel_mod


@dt.algorithm
def scale(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X[i, j] * 2.0)[i, j]


def launcher_shape(shape, dtype=torch.float32):
    """A FastLauncher's state that ``FastLauncher.takes`` reads (one plain output of ``shape``), without the
    compiled kernels a real one holds (GPU only)."""
    fl = object.__new__(FastLauncher)
    fl.offsets, fl.remap, fl.n_out, fl.device = None, {}, 1, torch.device("cpu")
    fl.allocs = [(tuple(shape), dtype, False)]
    return fl


class Recorder:
    """Stands in for a fast launcher: records how it was called; ``takes`` is FastLauncher's own."""

    def __init__(self, takes=True):
        self.calls, self._takes, self._shape = [], takes, launcher_shape((5, 7))

    def __call__(self, args):
        self.calls.append("plain")
        return torch.zeros(1)

    def takes(self, outs):
        return self._takes and FastLauncher.takes(self._shape, outs)

    def into(self, args, outs):
        self.calls.append("into")
        return outs[0]


@pytest.fixture
def kernel_with_recorder(monkeypatch):
    monkeypatch.setattr(kernel_mod, "_fast_ok", lambda: True)
    X = torch.randn(5, 7)
    k = dt.compile(scale)
    k(X)                                   # the slow path (the interpreter builds no launcher)
    key, _ = k._key((X,))
    rec = Recorder()
    k._fast[key] = rec
    return k, X, rec


def test_fresh_out_goes_to_the_launcher(kernel_with_recorder):
    k, X, rec = kernel_with_recorder
    o = torch.empty(5, 7)
    assert k(X, out=o) is o and rec.calls == ["into"]
    k(X)
    assert rec.calls == ["into", "plain"]


@pytest.mark.parametrize("case", ["in-place", "strided", "not taken", "unaligned"])
def test_other_outs_take_the_slow_path(kernel_with_recorder, case):
    k, X, rec = kernel_with_recorder
    if case == "in-place":
        o = X
    elif case == "strided":
        o = torch.empty(7, 5).t()
    elif case == "unaligned":
        o = torch.empty(5 * 7 + 1)[1:].view(5, 7)    # 4 bytes past an aligned address
    else:
        rec._takes = False
        o = torch.empty(5, 7)
    want = X * 2.0
    if case != "in-place":
        o.fill_(float("nan"))
    got = k(X, out=o)
    assert rec.calls == [] and got is o
    torch.testing.assert_close(o, want)
