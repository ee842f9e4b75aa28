"""Fused GEMM chains (issue 14's catalogue): each chain is ONE dtriton algorithm and the same torch code.

    PYTHONPATH=src python3 bench/chains.py [--dtypes float32,float16] [--cases relu,softmax] [--budget S]
                                           [--no-compile] [--deadline 540] [--append] [--out bench/results]
    PYTHONPATH=src python3 bench/chains.py --dry-run      # CPU interpreter, tiny shapes: correctness only
    PYTHONPATH=src python3 bench/chains.py --list         # the chains and their shapes (no run)
    PYTHONPATH=src python3 bench/chains.py --plans [DIR]  # H200 heuristic schedule + kernels per chain, on a CPU
    PYTHONPATH=src python3 bench/chains.py --variant hand --append --no-compile   # hand schedules (see below)

A chain is a Linear (``X @ W.T + b``, W in nn.Linear's (out, in) layout) followed by an epilogue: scaling,
bias, activations, residual adds, clamps, row reductions (softmax, logsumexp, layer / group / RMS norm
statistics, max pooling over blocks of output columns, means), batch statistics, or a second GEMM.
Grouped chains (group norm, pooling) pass W, b, gamma, beta to dtriton as free views ``(G, C, ...)`` of the
same tensors, and read the (M, G, C) output as (M, N).

Per chain and dtype: (1) dtriton's default schedule (or ``--budget`` seconds of exploration) is checked
against float64 on a small odd shape, then (2) at the benchmark shape against float64 too; only then (3) the
kernel time (CUDA-graph replay, ``bench/run.py``'s timer, short warmup) of dtriton, torch eager and
torch.compile (default mode) is taken. The printed kernels are counted (``kernels``: how many launches the
chain takes, with the first docstring line of each). Ratios are torch's time / dtriton's; geomeans per dtype.

``--variant hand`` runs the GEMM + row-reduction chains under the schedule eager torch runs, written with
dtriton's knobs (``hand_schedule``: the GEMM materialised, then one row kernel for every other stage), so the
gap between the heuristic's plan and a plan the compiler already supports is measured in the same table.

Writes ``<out>/chains_h200.json`` and ``.md`` after every row (``--append``: keep the rows of another
dtype / chain from an earlier run of the file). ``--deadline``: seconds after which no new row starts
(the device call limit is 600 s; the remaining rows are listed as skipped).
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import math
import os
import re
import sys
import time
import traceback
import zlib
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
import run as timing  # noqa: E402  (bench/run.py: graph_time_us, relerr, tuned_kernel, maybe_compile)
from fp32 import git_commit  # noqa: E402
from dtriton.ir.analysis import contractions, reduction_stages  # noqa: E402

T = dt.Tensor
GELU_C = math.sqrt(2 / math.pi)


# ---------------------------------------------------------------------------------------------
# epilogue building blocks on dtriton expressions (traced inside the algorithms below)
def linear(X, W, b, i, j, k):
    """``X @ W.T + b`` at (i, j): the chains' first GEMM."""
    return dt.sum(X[i, k] * W[j, k], over=k) + b[j]


def gelu_tanh(y):
    """GELU, tanh approximation (torch's ``approximate="tanh"``)."""
    return 0.5 * y * (1.0 + dt.tanh(GELU_C * (y + 0.044715 * y * y * y)))


def silu(y):
    return y * dt.sigmoid(y)


def clamp(y, lo, hi):
    return dt.minimum(dt.maximum(y, lo), hi)


def layer_normed(y, over, eps=1e-5):
    """``(y - mean) * rsqrt(var + eps)`` over ``over`` (biased variance, as torch's norms)."""
    yc = y - dt.mean(y, over=over)
    return yc * dt.rsqrt(dt.mean(yc * yc, over=over) + eps)


# ---------------------------------------------------------------------------------------------
# elementwise epilogues: output (M, N)
@dt.algorithm
def bias(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    return linear(X, W, b, i, j, k)[i, j]


@dt.algorithm
def relu(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    return dt.maximum(linear(X, W, b, i, j, k), 0.0)[i, j]


@dt.algorithm
def gelu(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    return gelu_tanh(linear(X, W, b, i, j, k))[i, j]


@dt.algorithm
def swish(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    return silu(linear(X, W, b, i, j, k))[i, j]


@dt.algorithm
def sigmoid(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    return dt.sigmoid(linear(X, W, b, i, j, k))[i, j]


@dt.algorithm
def tanh(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    return dt.tanh(linear(X, W, b, i, j, k))[i, j]


@dt.algorithm
def hardswish(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    y = linear(X, W, b, i, j, k)
    return (y * clamp(y + 3.0, 0.0, 6.0) / 6.0)[i, j]


@dt.algorithm
def leaky_relu(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    y = linear(X, W, b, i, j, k)
    return dt.where(y > 0.0, y, 0.01 * y)[i, j]


@dt.algorithm
def mish(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    y = linear(X, W, b, i, j, k)
    softplus = dt.where(y > 20.0, y, dt.log(1.0 + dt.exp(dt.minimum(y, 20.0))))
    return (y * dt.tanh(softplus))[i, j]


@dt.algorithm
def scale_shift_relu(X: T["M", "K"], W: T["N", "K"], b: T["N"], s: T["N"]):
    i, j, k = dt.axes("i j k")
    return dt.maximum(linear(X, W, b, i, j, k) * s[j] - 0.25, 0.0)[i, j]


@dt.algorithm
def scale_clamp(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    return clamp(linear(X, W, b, i, j, k) * 0.5, -1.0, 1.0)[i, j]


@dt.algorithm
def residual(X: T["M", "K"], W: T["N", "K"], b: T["N"], R: T["M", "N"]):
    i, j, k = dt.axes("i j k")
    return (linear(X, W, b, i, j, k) + R[i, j])[i, j]


@dt.algorithm
def gelu_residual(X: T["M", "K"], W: T["N", "K"], b: T["N"], R: T["M", "N"]):
    i, j, k = dt.axes("i j k")
    return (gelu_tanh(linear(X, W, b, i, j, k)) + R[i, j])[i, j]


@dt.algorithm
def sigmoid_scale_residual(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    y = linear(X, W, b, i, j, k)
    return (dt.sigmoid(y) * 2.0 + y)[i, j]


@dt.algorithm
def swish_div_clamp_tanh(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    return clamp(dt.tanh(clamp(silu(linear(X, W, b, i, j, k)) / 2.0, -1.0, 1.0)), -1.0, 1.0)[i, j]


# ---------------------------------------------------------------------------------------------
# row reductions over the GEMM's output
@dt.algorithm
def softmax(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    y = linear(X, W, b, i, j, k)
    e = dt.exp(y - dt.max(y, over=j))
    return (e / dt.sum(e, over=j))[i, j]


@dt.algorithm
def log_softmax(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    y = linear(X, W, b, i, j, k)
    m = dt.max(y, over=j)
    return (y - m - dt.log(dt.sum(dt.exp(y - m), over=j)))[i, j]


@dt.algorithm
def logsumexp(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    y = linear(X, W, b, i, j, k)
    m = dt.max(y, over=j)
    return (m + dt.log(dt.sum(dt.exp(y - m), over=j)))[i]


@dt.algorithm
def max_sub_gelu(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    y = linear(X, W, b, i, j, k)
    return gelu_tanh(y - dt.max(y, over=j))[i, j]


@dt.algorithm
def row_mean(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    return dt.mean(linear(X, W, b, i, j, k), over=j)[i]


@dt.algorithm
def sigmoid_sum(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    return dt.sum(dt.sigmoid(linear(X, W, b, i, j, k)), over=j)[i]


@dt.algorithm
def min_tanh_tanh(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    return dt.tanh(dt.tanh(dt.min(linear(X, W, b, i, j, k), over=j)))[i]


@dt.algorithm
def l2_normalize(X: T["M", "K"], W: T["N", "K"], b: T["N"]):
    i, j, k = dt.axes("i j k")
    y = linear(X, W, b, i, j, k)
    return (y / dt.maximum(dt.sqrt(dt.sum(y * y, over=j)), 1e-12))[i, j]


@dt.algorithm
def layer_norm(X: T["M", "K"], W: T["N", "K"], b: T["N"], gamma: T["N"], beta: T["N"]):
    i, j, k = dt.axes("i j k")
    return (layer_normed(linear(X, W, b, i, j, k), j) * gamma[j] + beta[j])[i, j]


@dt.algorithm
def rms_norm(X: T["M", "K"], W: T["N", "K"], b: T["N"], gamma: T["N"]):
    i, j, k = dt.axes("i j k")
    y = linear(X, W, b, i, j, k)
    return (y * dt.rsqrt(dt.mean(y * y, over=j) + 1e-6) * gamma[j])[i, j]


@dt.algorithm
def residual_layer_norm(X: T["M", "K"], W: T["N", "K"], b: T["N"], R: T["M", "N"], gamma: T["N"], beta: T["N"]):
    i, j, k = dt.axes("i j k")
    return (layer_normed(linear(X, W, b, i, j, k) + R[i, j], j) * gamma[j] + beta[j])[i, j]


@dt.algorithm
def cross_entropy(X: T["M", "K"], W: T["N", "K"], b: T["N"], labels: T["M"]):
    """Per-row loss of the logits X @ W.T + b; the label's logit is a gather of W's row (no logits read)."""
    i, j, k = dt.axes("i j k")
    y = linear(X, W, b, i, j, k)
    m = dt.max(y, over=j)
    target = dt.sum(X[i, k] * W[labels[i], k], over=k) + b[labels[i]]
    return (m + dt.log(dt.sum(dt.exp(y - m), over=j)) - target)[i]


# grouped output columns: W_g (G, C, K), b_g / gamma_g / beta_g (G, C) are views of W, b, gamma, beta
@dt.algorithm
def group_norm(X: T["M", "K"], W_g: T["G", "C", "K"], b_g: T["G", "C"], gamma_g: T["G", "C"], beta_g: T["G", "C"]):
    i, g, c, k = dt.axes("i g c k")
    y = dt.sum(X[i, k] * W_g[g, c, k], over=k) + b_g[g, c]
    return (layer_normed(y, (c,)) * gamma_g[g, c] + beta_g[g, c])[i, g, c]


@dt.algorithm
def group_norm_hardtanh(X: T["M", "K"], W_g: T["G", "C", "K"], b_g: T["G", "C"], gamma_g: T["G", "C"],
                        beta_g: T["G", "C"]):
    i, g, c, k = dt.axes("i g c k")
    y = dt.sum(X[i, k] * W_g[g, c, k], over=k) + b_g[g, c]
    return clamp(layer_normed(y, (c,)) * gamma_g[g, c] + beta_g[g, c], -2.0, 2.0)[i, g, c]


@dt.algorithm
def max_pool(X: T["M", "K"], W_g: T["G", "C", "K"], b_g: T["G", "C"]):
    i, g, c, k = dt.axes("i g c k")
    return dt.max(dt.sum(X[i, k] * W_g[g, c, k], over=k) + b_g[g, c], over=c)[i, g]


@dt.algorithm
def max_pool_sum_scale(X: T["M", "K"], W_g: T["G", "C", "K"], b_g: T["G", "C"]):
    i, g, c, k = dt.axes("i g c k")
    pooled = dt.max(dt.sum(X[i, k] * W_g[g, c, k], over=k) + b_g[g, c], over=c)
    return (dt.sum(pooled, over=g) * 0.5)[i]


# column (batch) statistics
@dt.algorithm
def batch_norm(X: T["M", "K"], W: T["N", "K"], b: T["N"], gamma: T["N"], beta: T["N"]):
    i, j, k = dt.axes("i j k")
    return (layer_normed(linear(X, W, b, i, j, k), i) * gamma[j] + beta[j])[i, j]


# ---------------------------------------------------------------------------------------------
# second GEMMs
@dt.algorithm
def swiglu(X: T["M", "K"], W: T["N", "K"], W3: T["N", "K"]):
    i, j, k = dt.axes("i j k")
    return (silu(dt.sum(X[i, k] * W[j, k], over=k)) * dt.sum(X[i, k] * W3[j, k], over=k))[i, j]


@dt.algorithm
def mlp_relu(X: T["M", "K"], W: T["N", "K"], b: T["N"], W2: T["P", "N"], b2: T["P"]):
    i, j, k, p = dt.axes("i j k p")
    h = dt.maximum(linear(X, W, b, i, j, k), 0.0)
    return (dt.sum(h * W2[p, j], over=j) + b2[p])[i, p]


@dt.algorithm
def swiglu_mlp(X: T["M", "K"], W: T["N", "K"], W3: T["N", "K"], W2: T["P", "N"]):
    i, j, k, p = dt.axes("i j k p")
    h = silu(dt.sum(X[i, k] * W[j, k], over=k)) * dt.sum(X[i, k] * W3[j, k], over=k)
    return dt.sum(h * W2[p, j], over=j)[i, p]


@dt.algorithm
def softmax_linear(X: T["M", "K"], W: T["N", "K"], b: T["N"], W2: T["P", "N"]):
    i, j, k, p = dt.axes("i j k p")
    y = linear(X, W, b, i, j, k)
    e = dt.exp(y - dt.max(y, over=j))
    return dt.sum(e / dt.sum(e, over=j) * W2[p, j], over=j)[i, p]


@dt.algorithm
def gelu_mlp_residual(X: T["M", "K"], W: T["N", "K"], b: T["N"], W2: T["K", "N"]):
    """X + gelu(X @ W.T + b) @ W2.T: a transformer MLP block (W2 maps back to K features)."""
    i, j, k, p = dt.axes("i j k p")
    h = gelu_tanh(linear(X, W, b, i, j, k))
    return (X[i, p] + dt.sum(h * W2[p, j], over=j))[i, p]


# ---------------------------------------------------------------------------------------------
# the same chains in torch (keyword arguments named as the algorithms' parameters, before grouping)
def _lin(X, W, b):
    return F.linear(X, W, b)


def _layer_norm_rows(y, gamma, beta):
    return F.layer_norm(y, (y.shape[-1],), gamma, beta, 1e-5)


TORCH: dict[str, Callable] = {
    "bias": lambda X, W, b: _lin(X, W, b),
    "relu": lambda X, W, b: torch.relu(_lin(X, W, b)),
    "gelu": lambda X, W, b: F.gelu(_lin(X, W, b), approximate="tanh"),
    "swish": lambda X, W, b: F.silu(_lin(X, W, b)),
    "sigmoid": lambda X, W, b: torch.sigmoid(_lin(X, W, b)),
    "tanh": lambda X, W, b: torch.tanh(_lin(X, W, b)),
    "hardswish": lambda X, W, b: F.hardswish(_lin(X, W, b)),
    "leaky_relu": lambda X, W, b: F.leaky_relu(_lin(X, W, b), 0.01),
    "mish": lambda X, W, b: F.mish(_lin(X, W, b)),
    "scale_shift_relu": lambda X, W, b, s: torch.relu(_lin(X, W, b) * s - 0.25),
    "scale_clamp": lambda X, W, b: torch.clamp(_lin(X, W, b) * 0.5, -1.0, 1.0),
    "residual": lambda X, W, b, R: _lin(X, W, b) + R,
    "gelu_residual": lambda X, W, b, R: F.gelu(_lin(X, W, b), approximate="tanh") + R,
    "sigmoid_scale_residual": lambda X, W, b: (lambda y: torch.sigmoid(y) * 2.0 + y)(_lin(X, W, b)),
    "swish_div_clamp_tanh": lambda X, W, b: torch.clamp(torch.tanh(torch.clamp(F.silu(_lin(X, W, b)) / 2.0, -1, 1)),
                                                        -1, 1),
    "softmax": lambda X, W, b: torch.softmax(_lin(X, W, b), -1),
    "log_softmax": lambda X, W, b: torch.log_softmax(_lin(X, W, b), -1),
    "logsumexp": lambda X, W, b: torch.logsumexp(_lin(X, W, b), -1),
    "max_sub_gelu": lambda X, W, b: (lambda y: F.gelu(y - y.amax(-1, keepdim=True), approximate="tanh"))(
        _lin(X, W, b)),
    "row_mean": lambda X, W, b: _lin(X, W, b).mean(-1),
    "sigmoid_sum": lambda X, W, b: torch.sigmoid(_lin(X, W, b)).sum(-1),
    "min_tanh_tanh": lambda X, W, b: torch.tanh(torch.tanh(_lin(X, W, b).amin(-1))),
    "l2_normalize": lambda X, W, b: F.normalize(_lin(X, W, b), dim=-1),
    "layer_norm": lambda X, W, b, gamma, beta: _layer_norm_rows(_lin(X, W, b), gamma, beta),
    "rms_norm": lambda X, W, b, gamma: F.rms_norm(_lin(X, W, b), (W.shape[0],), gamma, 1e-6),
    "residual_layer_norm": lambda X, W, b, R, gamma, beta: _layer_norm_rows(_lin(X, W, b) + R, gamma, beta),
    "cross_entropy": lambda X, W, b, labels: F.cross_entropy(_lin(X, W, b), labels, reduction="none"),
    "group_norm": lambda X, W, b, gamma, beta, G: F.group_norm(_lin(X, W, b), G, gamma, beta, 1e-5),
    "group_norm_hardtanh": lambda X, W, b, gamma, beta, G: F.hardtanh(F.group_norm(_lin(X, W, b), G, gamma, beta,
                                                                                   1e-5), -2.0, 2.0),
    "max_pool": lambda X, W, b, G: F.max_pool1d(_lin(X, W, b)[:, None], W.shape[0] // G)[:, 0],
    "max_pool_sum_scale": lambda X, W, b, G: F.max_pool1d(_lin(X, W, b)[:, None], W.shape[0] // G)[:, 0].sum(-1) * 0.5,
    "batch_norm": lambda X, W, b, gamma, beta: F.batch_norm(_lin(X, W, b), None, None, gamma, beta, True, 0.0, 1e-5),
    "swiglu": lambda X, W, W3: F.silu(X @ W.T) * (X @ W3.T),
    "mlp_relu": lambda X, W, b, W2, b2: F.linear(torch.relu(_lin(X, W, b)), W2, b2),
    "swiglu_mlp": lambda X, W, W3, W2: (F.silu(X @ W.T) * (X @ W3.T)) @ W2.T,
    "softmax_linear": lambda X, W, b, W2: torch.softmax(_lin(X, W, b), -1) @ W2.T,
    "gelu_mlp_residual": lambda X, W, b, W2: X + F.gelu(_lin(X, W, b), approximate="tanh") @ W2.T,
}


@dataclass
class Chain:
    """One catalogue entry: the algorithm, its benchmark shape (M batch rows, K in-features, N out-features,
    P second-GEMM outputs, C output columns per group for grouped chains) and the dtypes it runs in."""
    alg: object
    M: int
    K: int
    N: int
    P: int = 0
    C: int = 0
    dtypes: tuple = ("float32", "float16")
    name: str = field(init=False)

    def __post_init__(self):
        self.name = self.alg.name

    def flops(self, M, K, N, P) -> float:
        """Multiply-adds x 2 of the chain's GEMMs (swiglu chains do two first GEMMs)."""
        first = 2 * M * N * K * (2 if "swiglu" in self.name else 1)
        second = 2 * M * N * (K if self.name == "gelu_mlp_residual" else P) if "W2" in self.params() else 0
        return first + second

    def params(self) -> list[str]:
        return [p.name for p in self.alg.params]


CHAINS = [
    Chain(bias, 4096, 4096, 4096), Chain(relu, 4096, 4096, 4096), Chain(gelu, 8192, 4096, 4096),
    Chain(swish, 4096, 4096, 8192), Chain(sigmoid, 4096, 4096, 4096), Chain(tanh, 2048, 8192, 4096),
    Chain(hardswish, 4096, 4096, 4096), Chain(leaky_relu, 16384, 4096, 4096), Chain(mish, 4096, 4096, 4096),
    Chain(scale_shift_relu, 4096, 4096, 4096), Chain(scale_clamp, 8192, 4096, 4096),
    Chain(residual, 4096, 4096, 4096), Chain(gelu_residual, 4096, 8192, 4096),
    Chain(sigmoid_scale_residual, 4096, 4096, 4096), Chain(swish_div_clamp_tanh, 4096, 4096, 4096),
    Chain(softmax, 4096, 4096, 4096), Chain(log_softmax, 2048, 4096, 8192), Chain(logsumexp, 4096, 4096, 8192),
    Chain(max_sub_gelu, 4096, 4096, 4096), Chain(row_mean, 4096, 4096, 4096), Chain(sigmoid_sum, 8192, 4096, 4096),
    Chain(min_tanh_tanh, 4096, 4096, 4096), Chain(l2_normalize, 4096, 4096, 4096),
    Chain(layer_norm, 4096, 4096, 4096), Chain(rms_norm, 4096, 4096, 8192),
    Chain(residual_layer_norm, 4096, 4096, 4096), Chain(cross_entropy, 4096, 4096, 8192),
    Chain(group_norm, 4096, 4096, 4096, C=128), Chain(group_norm_hardtanh, 8192, 4096, 4096, C=256),
    Chain(max_pool, 4096, 4096, 4096, C=4), Chain(max_pool_sum_scale, 4096, 4096, 8192, C=16),
    Chain(batch_norm, 4096, 4096, 4096), Chain(swiglu, 4096, 4096, 4096),
    Chain(mlp_relu, 4096, 4096, 8192, P=4096), Chain(swiglu_mlp, 2048, 4096, 8192, P=4096),
    Chain(softmax_linear, 4096, 4096, 4096, P=4096), Chain(gelu_mlp_residual, 1024, 4096, 8192),
]
#: the correctness shape (odd batch; C shrunk to fit), and the dry run's (the interpreter is slow) benchmark and
#: correctness shapes
CHECK_SHAPE = dict(M=67, K=96, N=128, P=80)
DRY_SHAPE = dict(M=24, K=32, N=64, P=48)
DRY_CHECK_SHAPE = dict(M=19, K=40, N=32, P=24)


# ---------------------------------------------------------------------------------------------
def make_inputs(chain: Chain, M: int, K: int, N: int, P: int, C: int, dtype: torch.dtype, dev: str,
                empty: bool = False):
    """Random inputs of one call: (torch keyword arguments, dtriton positional arguments). Weights are scaled by
    1/sqrt(fan-in) so activations see values of order 1; grouped parameters are (G, C, ...) views. ``empty``:
    uninitialised tensors of the same shapes (for planning only)."""
    P = K if chain.name == "gelu_mlp_residual" else P
    g = torch.Generator(device="cpu").manual_seed(zlib.crc32(chain.name.encode()))

    def rnd(*shape, scale=1.0, shift=0.0):
        if empty:
            return torch.empty(*shape, dtype=dtype, device=dev)
        return (torch.randn(*shape, generator=g) * scale + shift).to(dev, dtype)
    base = dict(X=rnd(M, K), W=rnd(N, K, scale=K ** -0.5), b=rnd(N, scale=0.1), R=rnd(M, N), s=rnd(N, scale=0.3, shift=1.0),
                gamma=rnd(N, scale=0.3, shift=1.0), beta=rnd(N, scale=0.1), W2=rnd(P, N, scale=N ** -0.5),
                b2=rnd(P, scale=0.1), W3=rnd(N, K, scale=K ** -0.5),
                labels=torch.zeros(M, dtype=torch.int64, device=dev) if empty else
                torch.randint(0, N, (M,), generator=g).to(dev), G=N // C if C else 0)
    tkw = {p: base[p] for p in inspect.signature(TORCH[chain.name]).parameters}
    args = []
    for p in chain.params():
        if p.endswith("_g"):
            t = base[p[:-2]]
            args.append(t.view(N // C, C, *t.shape[1:]))
        else:
            args.append(base[p])
    return tkw, tuple(args)


def as_float64(kw: dict) -> dict:
    """The floating-point tensors of ``kw`` in float64 (integer labels and sizes unchanged)."""
    return {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in kw.items()}


def shape_of(chain: Chain, which: dict) -> tuple[int, int, int, int, int]:
    """(M, K, N, P, C) for the benchmark shape (``which`` None) or a small one (CHECK_SHAPE / DRY_SHAPE)."""
    if which is None:
        return chain.M, chain.K, chain.N, chain.P, chain.C
    C = min(chain.C, which["N"] // 4) if chain.C else 0
    return which["M"], which["K"], which["N"], which["P"] if chain.P else 0, C


def kernels_of(source: str) -> list[str]:
    """The first docstring line of every kernel in a printed module (``Kernel x: stores y.``)."""
    return re.findall(r'"""(Kernel [^\n]*)', source)


def dtriton_error(k, chain, shape, dtype) -> float:
    """Relative error of the compiled chain against float64 torch at ``shape``."""
    tkw, args = make_inputs(chain, *shape, dtype, timing.DEV)
    ref = TORCH[chain.name](**as_float64(tkw))
    return timing.relerr(k(*args).reshape(ref.shape), ref)


TOL = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 5e-2}


def hand_schedule(chain: Chain, args) -> dt.Schedule | None:
    """The schedule eager torch runs, written with dtriton's knobs, for chains whose GEMM is followed by row
    reductions over its output (None for the others): the GEMM stage (``sum0``) materialised with the heuristic's
    GEMM tiles, and one row kernel (grid ``i``, 2 rows per program, the whole row in one block) that computes
    every other reduction in registers and writes the output. It measures how far the heuristic's plan (each
    reduction a kernel of its own, row tiles of the GEMM's size) is from the plan the knobs already allow."""
    gemms = contractions(chain.alg)
    others = [s.name for s in reduction_stages(chain.alg) if s.name not in gemms]
    outs = [s for s in chain.alg.stages.values() if s.is_output]
    if list(gemms) != ["sum0"] or not others or any(set(s.free_axes) - {"i", "j"} for s in outs) \
            or any(set(s.node.over) - {"j", "k"} for s in reduction_stages(chain.alg) if s.name in others):
        return None
    base = json.loads(dt.compile(chain.alg).schedule_for(*args).to_json())
    gemm = {"place": "materialize", "grid": ["i", "j"], "group": base.get("group", {"i": 8}),
            "tile": {a: t for a, t in base["tile"].items() if a in ("i", "j", "k")},
            **{k: base[k] for k in ("num_warps", "num_stages") if k in base}}
    n = args[chain.params().index("W")].shape[0]
    return dt.Schedule.from_json(json.dumps({
        "grid": ["i"], "tile": {"i": 2, "j": 1 << (n - 1).bit_length()}, "strategy": {"j": "whole"}, "num_warps": 8,
        "stages": {"sum0": gemm, **{o: {"place": "fuse"} for o in others}}}))


def dtriton_kernel(chain: Chain, args, budget: float, variant: str):
    """(kernel, origin) of a variant: "heuristic" (or explored for ``budget`` seconds) or "hand"."""
    if variant == "hand":
        sched = hand_schedule(chain, args)
        if sched is None:
            raise ValueError(f"{chain.name} has no hand schedule (only GEMM + row-reduction chains have one)")
        return dt.compile(chain.alg, sched), "hand: " + sched.to_json()
    if budget > 0:
        return timing.tuned_kernel(chain.alg, args, budget)
    return dt.compile(chain.alg), "heuristic"


def run_chain(chain: Chain, dtype_name: str, budget: float, use_compile: bool, variant: str = "heuristic") -> dict:
    """Check and time one chain in one dtype; returns its row (failures recorded in ``note``)."""
    dtype = getattr(torch, dtype_name)
    M, K, N, P, C = shape = shape_of(chain, DRY_SHAPE if timing.DRY else None)
    row = dict(chain=chain.name, dtype=dtype_name, shape=dict(M=M, K=K, N=N, P=P, C=C), flops=chain.flops(M, K, N, P),
               err_check=None, err=None, dtriton_us=None, eager_us=None, compile_us=None, kernels=[], schedule=None,
               origin=None, note="", variant=variant if budget <= 0 or variant == "hand" else f"explored {budget:g}s")
    tkw, args = make_inputs(chain, *shape, dtype, timing.DEV)
    fn = TORCH[chain.name]
    ref = fn(**as_float64(tkw))
    try:
        k, row["origin"] = dtriton_kernel(chain, args, budget, variant)
        row["err_check"] = dtriton_error(k, chain, shape_of(chain, DRY_CHECK_SHAPE if timing.DRY else CHECK_SHAPE), dtype)
        out = k(*args)
        row["err"] = timing.relerr(out.reshape(ref.shape), ref)
        row["kernels"] = kernels_of(k.source)
        row["schedule"] = k.schedule_for(*args).to_json()
        if not (row["err_check"] <= TOL[dtype_name] and row["err"] <= TOL[dtype_name]):
            row["note"] = f"WRONG: error above {TOL[dtype_name]}, not timed"
        else:
            row["dtriton_us"] = timing.graph_time_us(lambda: k(*args), reps=5, iters=5)
    except Exception as e:  # noqa: BLE001 - a refused or failing chain is a finding: record it
        row["note"] = f"dtriton failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
    row["err_eager"] = timing.relerr(fn(**tkw), ref)
    row["eager_us"] = timing.graph_time_us(lambda: fn(**tkw), reps=5, iters=5)
    c = timing.maybe_compile(fn, use_compile)
    if c is not None:
        try:
            c(**tkw)
            row["compile_us"] = timing.graph_time_us(lambda: c(**tkw), reps=5, iters=5)
        except Exception as e:  # noqa: BLE001
            row["note"] += f" torch.compile failed: {type(e).__name__}: {str(e)[:120]}"
    for base in ("eager", "compile"):
        ok = row["dtriton_us"] and row[f"{base}_us"]
        row[f"vs_{base}"] = row[f"{base}_us"] / row["dtriton_us"] if ok else None
    return row


def gpu_plan(chain: Chain, dtype: torch.dtype, folder: str | None = None, schedule: dt.Schedule | None = None) -> dict:
    """What the H200 would run for the chain at its benchmark shape, derived on this machine (no GPU needed):
    the heuristic's schedule for a CUDA binding (as on an H200), the plan's kernels and the printed source
    (written to ``folder/<chain>_<dtype>.py`` when given); ``schedule``: a partial schedule the heuristic
    completes (default: none). Inputs are uninitialised CPU tensors of the real
    sizes. Returns dict(schedule, kernels, lines) or dict(error) when the compiler refuses the chain."""
    from dtriton.backends import default_backend
    from dtriton.plan import call_spec, plan_program, tma_addressable
    _, args = make_inputs(chain, *shape_of(chain, None), dtype, "cpu", empty=True)
    try:
        b = chain.alg.bind(args)
        b.device = torch.device("cuda")
        sched = dt.compile(chain.alg, schedule).complete(b)
        tma = tma_addressable(chain.alg, b, args) if sched.access == "tma" else frozenset()
        tiles = [p for p, a in zip(chain.params(), args) if a.dim() >= 2]
        if sched.access == "tma" and not all(t in tma for t in tiles):   # the runtime's rule (Kernel._auto_access)
            sched, tma = sched.replace(access="pointer"), frozenset()
        prog = plan_program(chain.alg, sched, b, call_spec(chain.alg, b, args, False, None, tma))
        source, _ = default_backend().render(prog)
    except Exception as e:  # noqa: BLE001 - a refused chain is a finding
        return dict(error=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{chain.name}_{str(dtype)[6:]}.py"), "w") as f:
            f.write(source)
    return dict(schedule=sched.to_json(), kernels=kernels_of(source), lines=source.count("\n"))


def print_plans(chains: list[Chain], dtypes: list[str], folder: str | None) -> None:
    """``--plans``: per chain and dtype, the H200 heuristic schedule and its kernels (derived on the CPU)."""
    for d in dtypes:
        for c in chains:
            p = gpu_plan(c, getattr(torch, d), folder)
            if "error" in p:
                print(f"{c.name:24s} {d:8s} REFUSED {p['error']}")
                continue
            print(f"{c.name:24s} {d:8s} {len(p['kernels'])} kernel(s)  {p['schedule']}")
            for k in p["kernels"]:
                print(f"{'':34s}{k}")


# ---------------------------------------------------------------------------------------------
def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def summary(rows: list[dict]) -> list[str]:
    """Geomean lines per dtype and overall (rows with both times), and the chains below 0.9x torch.compile."""
    lines = []
    for var in sorted({r.get("variant", "heuristic") for r in rows}):
        lines += summary_of(var, [r for r in rows if r.get("variant", "heuristic") == var])
    bad = [r for r in rows if r["note"]]
    if bad:
        lines.append(f"- not timed or failed: {', '.join(r['chain'] + ' ' + r['dtype'] for r in bad)}")
    return lines


def summary_of(variant: str, rows: list[dict]) -> list[str]:
    """The geomean lines of one variant's rows."""
    lines = []
    for dt_name in sorted({r["dtype"] for r in rows}) + ["all"]:
        rs = [r for r in rows if dt_name in ("all", r["dtype"]) and r.get("vs_eager")]
        if not rs:
            continue
        ge, gc = geomean([r["vs_eager"] for r in rs]), geomean([r.get("vs_compile") for r in rs])
        low = sorted((r for r in rs if r.get("vs_compile") and r["vs_compile"] < 0.9), key=lambda r: r["vs_compile"])
        lines.append(f"- {variant}, {dt_name}: {len(rs)} chains timed; geomean {ge:.3f}x eager"
                     + (f", {gc:.3f}x torch.compile" if gc else "")
                     + ("; below 0.9x torch.compile: " + ", ".join(f"{r['chain']} {r['vs_compile']:.2f}" for r in low)
                        if low else ""))
    return lines


def write_results(out_dir: str, meta: dict, rows: list[dict]) -> None:
    """``chains_h200.json`` (meta, rows, summary) and ``chains_h200.md`` (summary and one table)."""
    os.makedirs(out_dir, exist_ok=True)
    lines = summary(rows)
    with open(os.path.join(out_dir, "chains_h200.json"), "w") as f:
        json.dump({"meta": meta, "summary": lines, "rows": rows}, f, indent=1, default=str)

    def num(v, f="{:.1f}"):
        return "" if v is None else f.format(v)
    md = [f"# Fused GEMM chains (issue 14) — {meta['gpu']}", "",
          f"{meta['date']}; torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}; dtriton "
          f"{'explored ' + str(meta['budget_s']) + ' s per chain' if meta['budget_s'] else 'default schedule'}. "
          "Kernel time by CUDA-graph replay (5 calls per replay, median of 5). err: relative error against float64 "
          "at the benchmark shape (check: at M=67 K=96 N=128, same algorithm; eager: torch eager's error). vs: torch's "
          "time / dtriton's. "
          "kernels: launches of the dtriton chain.", ""] + lines + ["",
          "| chain | dtype | variant | M×K×N (P, C) | dtriton µs | eager µs | compile µs | vs eager | vs compile | TFLOP/s | "
          "err | err check | err eager | kernels | note / schedule |",
          "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        s = r["shape"]
        extra = ", ".join(f"{k}={s[k]}" for k in ("P", "C") if s[k])
        tf = r["flops"] / r["dtriton_us"] / 1e6 if r["dtriton_us"] else None
        note = " — ".join(x for x in (r["note"], r["schedule"] or "") if x).replace("|", "/")
        md.append(f"| {r['chain']} | {r['dtype']} | {r.get('variant', 'heuristic')} | {s['M']}×{s['K']}×{s['N']}{' (' + extra + ')' if extra else ''} | "
                  f"{num(r['dtriton_us'])} | {num(r['eager_us'])} | {num(r['compile_us'])} | "
                  f"{num(r['vs_eager'], '{:.2f}')} | {num(r['vs_compile'], '{:.2f}')} | {num(tf, '{:.0f}')} | "
                  f"{num(r['err'], '{:.1e}')} | {num(r['err_check'], '{:.1e}')} | {num(r.get('err_eager'), '{:.1e}')} | "
                  f"{len(r['kernels'])} | {note} |")
    with open(os.path.join(out_dir, "chains_h200.md"), "w") as f:
        f.write("\n".join(md) + "\n")


def main(argv=None) -> None:
    """Parse the options and run the selected chains x dtypes, rewriting the results after every row."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="float32,float16", help="comma-separated: float32, float16, bfloat16")
    ap.add_argument("--cases", default="", help="comma-separated substrings of chain names (default: all)")
    ap.add_argument("--budget", type=float, default=0.0, help="exploration seconds per chain (0: default schedule)")
    ap.add_argument("--variant", choices=("heuristic", "hand"), default="heuristic",
                    help="hand: the chains with a hand schedule (GEMM + one row kernel, see hand_schedule) only")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds after which no new chain starts (default 540 on the GPU, none in a dry run)")
    ap.add_argument("--append", action="store_true", help="keep rows of other chains/dtypes from <out>/chains_h200.json")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--list", action="store_true", help="print the chains and their shapes, run nothing")
    ap.add_argument("--plans", nargs="?", const="", default=None, metavar="FOLDER",
                    help="print the H200 heuristic's schedule and kernels per chain, derived on this machine (no run); "
                         "with FOLDER, write each printed module there")
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes (timings meaningless)")
    a = ap.parse_args(argv)
    cases = [c for c in a.cases.split(",") if c]
    chains = [c for c in CHAINS if not cases or any(s in c.name for s in cases)]
    dtypes = [d for d in a.dtypes.split(",") if d]
    for d in dtypes:
        if d not in TOL:
            raise SystemExit(f"--dtypes: unknown dtype {d!r}; use {', '.join(TOL)}")
    if a.plans is not None:
        return print_plans(chains, dtypes, a.plans or None)
    if a.list:
        for c in chains:
            print(f"{c.name:24s} M={c.M:6d} K={c.K} N={c.N}" + (f" P={c.P}" if c.P else "") + (f" C={c.C}" if c.C else ""))
        print(f"{len(chains)} chains")
        return
    if a.dry_run:
        timing.DEV, timing.DRY = "cpu", True
        a.budget = 0
    a.deadline = a.deadline if a.deadline is not None else (float("inf") if a.dry_run else 540.0)
    meta = dict(gpu="cpu (dry run: interpreter, tiny shapes)" if timing.DRY else torch.cuda.get_device_name(),
                torch=torch.__version__, triton=__import__("triton").__version__, commit=git_commit(),
                date=datetime.datetime.now().isoformat(timespec="seconds"), budget_s=a.budget)
    print(f"# {meta}", flush=True)
    path = os.path.join(a.out, "chains_h200.json")
    old = json.load(open(path))["rows"] if a.append and os.path.exists(path) else []
    if a.variant == "hand":
        chains = [c for c in chains if hand_schedule(c, make_inputs(c, *shape_of(c, DRY_SHAPE), torch.float32, "cpu",
                                                                    empty=True)[1]) is not None]
    variant = a.variant if a.budget <= 0 or a.variant == "hand" else f"explored {a.budget:g}s"
    todo = [(c, d) for d in dtypes for c in chains]
    keys = {(c.name, d, variant) for c, d in todo}
    rows = [r for r in old if (r["chain"], r["dtype"], r.get("variant", "heuristic")) not in keys]
    t0 = time.time()
    for c, d in todo:
        if time.time() - t0 > a.deadline:
            rows.append(dict(chain=c.name, dtype=d, shape=dict(M=c.M, K=c.K, N=c.N, P=c.P, C=c.C), flops=0,
                             err=None, err_check=None, dtriton_us=None, eager_us=None, compile_us=None, vs_eager=None,
                             vs_compile=None, kernels=[], schedule=None, variant=variant,
                             note=f"skipped: --deadline {a.deadline:.0f}s"))
            continue
        try:
            r = run_chain(c, d, a.budget, not a.no_compile, a.variant)
        except Exception:  # noqa: BLE001 - the torch side failed: keep going
            traceback.print_exc()
            continue
        rows.append(r)
        print(f"  {c.name:24s} {d:8s} {variant[:9]:9s} dtriton {r['dtriton_us'] or float('nan'):9.1f} us  eager "
              f"{r['eager_us'] or float('nan'):9.1f}  compile {r['compile_us'] or float('nan'):9.1f}  err {r['err']}  "
              f"kernels {len(r['kernels'])}  ({time.time() - t0:.0f}s) {r['note']}", flush=True)
        write_results(a.out, meta, rows)
    write_results(a.out, meta, rows)
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
