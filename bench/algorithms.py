"""The algorithms the benchmark suite runs: the shared ones from :mod:`dtriton.library`."""

from dtriton.library import (add_one, attention, causal_attention, column_sum, cross_entropy, layer_norm,  # noqa: F401
                             linear_relu, log_softmax, matmul, rms_norm, softmax, spatial_diffusion)
