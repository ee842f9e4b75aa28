"""Python operators and torch idioms an algorithm does not have raise a dt.AlgorithmError at
definition saying what to write (they were Python's raw TypeError / AttributeError: ``X[i] @ W[i]``,
``X[i].exp()``, ``X + 1`` of an unindexed input, ``X.shape``)."""
from __future__ import annotations

import pytest
import torch

import dtriton as dt


def _define(body):
    def alg(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return body(X, i, j)[i, j]
    return dt.algorithm(alg)


@pytest.mark.parametrize("body, says", [
    (lambda X, i, j: X[i, j] @ X[i, j], r"'@'.*dt\.sum\(A\[i, k\] \* B\[k, j\], over=k\)"),
    (lambda X, i, j: X[i, j] << 1, r"'<<'.*x \* 2 \*\* n"),
    (lambda X, i, j: 1 >> X[i, j], r"'>>'.*x // 2 \*\* n"),
    (lambda X, i, j: X[i, j] * int(X[i, j]), r"int\(\).*dt\.cast\(x, torch\.int64\)"),
    (lambda X, i, j: X[i, j].exp(), r"x\.exp\(\.\.\.\) is torch's tensor method.*dt\.exp\(x\)"),
    (lambda X, i, j: X[i, j].sum(), r"dt\.sum\(x, over=axis\)"),
    (lambda X, i, j: X[i, j].float(), r"dt\.cast\(x, torch\.<dtype>\)"),
    (lambda X, i, j: X[i, j].clamp(0, 1), r"dt\.maximum\(dt\.minimum\(x, hi\), lo\)"),
    (lambda X, i, j: X[i, j] * X[i, j].item(), r"x\.item: an expression has no values"),
    (lambda X, i, j: X + 1, r"input tensor 'X' is used without indices; write X\[i, j\] .*\['M', 'N'\]"),
    (lambda X, i, j: 2.0 * X, r"input tensor 'X' is used without indices"),
    (lambda X, i, j: abs(X), r"input tensor 'X' is used without indices"),
    (lambda X, i, j: X[i, j] * X.shape[0], r"X\.shape: .*the symbols \['M', 'N'\]"),
])
def test_misuse_is_an_algorithm_error(body, says):
    with pytest.raises(dt.AlgorithmError, match=says):
        _define(body)


def test_missing_attributes_stay_attribute_errors():
    """Only torch's method names get the AlgorithmError: hasattr and getattr with a default work."""
    i = dt.axes("i")
    e = i + 1
    assert not hasattr(e, "no_such_thing") and getattr(e, "lift", "default") is None
    assert not hasattr(e, "sum") and getattr(e, "dtype", "default") == "default"   # a MethodError is an AttributeError
    with pytest.raises(dt.AlgorithmError, match="dt.sum"):
        e.sum()
    with pytest.raises(AttributeError):
        e.no_such_thing


def test_legal_algorithm_still_runs():
    alg = _define(lambda X, i, j: dt.exp(X[i, j]) * 2 + abs(X[i, j]))
    X = torch.randn(3, 5)
    torch.testing.assert_close(dt.compile(alg)(X), torch.exp(X) * 2 + X.abs())
