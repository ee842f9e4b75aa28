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
