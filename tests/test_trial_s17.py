"""Findings of session 17's fresh-user trial (the CPU interpreter): transforms that would silently
lose their meaning are refused, misused entry points name the fix, and interpreted launches from
several threads do not interfere."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import dtriton as dt
from dtriton.library import layer_norm, softmax


def test_a_dual_tensor_is_refused_not_stripped_of_its_tangent():
    k, dk = dt.compile(softmax), dt.compile_autograd(softmax)
    with fwAD.dual_level():
        x = fwAD.make_dual(torch.randn(2, 3), torch.ones(2, 3))
        for f in (k, dk):
            with pytest.raises(NotImplementedError, match="forward-mode AD"):
                f(x)
        y = torch.randn(2, 3)   # a dual level open, a plain tensor: runs
        torch.testing.assert_close(k(y), torch.softmax(y, -1))


@pytest.mark.parametrize("transform", ["grad", "vmap"])
def test_torch_func_transforms_are_refused_by_name(transform):
    k = dt.compile_autograd(softmax)
    x = torch.randn(2, 3)
    with pytest.raises(NotImplementedError, match="torch.func transforms"):
        if transform == "grad":
            torch.func.grad(lambda t: k(t)[0, 0])(x)
        else:
            torch.func.vmap(k)(x.unsqueeze(0).expand(2, 2, 3))


def test_misused_autograd_entry_points_name_the_fix():
    with pytest.raises(TypeError, match="differentiable already"):
        dt.differentiable(dt.compile_autograd(softmax))
    with pytest.raises(TypeError, match=r"dt.differentiable\(kernel\)"):
        dt.compile_autograd(dt.compile(softmax))
    with pytest.raises(TypeError, match="did you mean 'native'"):
        dt.compile_autograd(softmax, nativ=True)
    with pytest.raises(TypeError, match="did you mean 'backward_schedules'"):
        dt.compile_autograd(layer_norm, backward_schedule=None)


def test_interpreted_launches_from_several_threads():
    k = dt.compile(softmax)
    errors = []

    def work(m):
        for _ in range(3):
            x = torch.randn(m, 9)
            try:
                torch.testing.assert_close(k(x), torch.softmax(x, -1))
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e)[:200])
    threads = [threading.Thread(target=work, args=(m,)) for m in (3, 5, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
