"""The fused GEMM chain catalogue of issue 14 (used by ``bench/chains.py``): 37 chains, each ONE dtriton algorithm
and the same torch code, their benchmark shapes, and their random inputs.

A chain is a Linear (``X @ W.T + b``, W in nn.Linear's (out, in) layout) followed by an epilogue: scaling, bias,
activations, residual adds, clamps, row reductions (softmax, logsumexp, layer / group / RMS norm statistics, max
pooling over blocks of output columns, means), batch statistics, or a second GEMM. Grouped chains (group norm,
pooling) take W, b, gamma, beta as free views ``(G, C, ...)`` of the same tensors and write (M, G, C) = (M, N).
"""

from __future__ import annotations

import inspect
import math
import zlib
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

import dtriton as dt


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
    base = dict(X=rnd(M, K), W=rnd(N, K, scale=K ** -0.5), b=rnd(N, scale=0.1), R=rnd(M, N),
                s=rnd(N, scale=0.3, shift=1.0),
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
