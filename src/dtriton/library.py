"""Ready-made algorithms: the kernels the issues, tests, benchmarks and demo share.

Each is an ordinary ``@dt.algorithm``; compile any of them with ``dt.compile(alg, schedule)``.
Stage names (for schedules) are printed by ``repr(alg)``.
"""

from __future__ import annotations

from . import dsl as dt
from .dsl import Tensor

__all__ = ["matmul", "linear_relu", "softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy",
           "cross_entropy_ignore",
           "column_sum", "spatial_diffusion", "attention", "causal_attention", "add_one", "batch_norm", "instance_norm",
           "group_norm", "layer_norm_chw", "frobenius_normalize", "avg_pool2d", "max_pool2d", "max_pool2d_window",
           "avg_pool2d_window",
           "conv1d", "conv2d", "conv2d_nhwc", "grouped_conv2d_nhwc", "depthwise_conv2d_nhwc", "conv3d", "conv_transpose2d",
           "conv_transpose2d_phases"]


# the constraints of the library's torch ops (dt.requires): torch refuses the other arguments, or
# computes another output size
_STEP = ("stride >= 1", "dilation >= 1", "padding >= 0")
_TORCH = "pass torch's output size"
_FITS = "the window is larger than the padded input (torch refuses it too): pad more or use a smaller window"
_TRANSPOSED = "pass torch's output size (H - 1) s - 2p + d (R - 1) + 1 plus an output_padding below max(s, d)"
_PHASES = "pass Hh with Hh * stride torch's output size (H - 1) s - 2p + R plus an output_padding below s"


@dt.algorithm
def matmul(A: Tensor["M", "K"], B: Tensor["K", "N"]):
    """C (M, N) = A (M, K) @ B (K, N)."""
    i, j, k = dt.axes("i j k")
    return dt.sum(A[i, k] * B[k, j], over=k)[i, j]


@dt.algorithm
def linear_relu(X: Tensor["M", "K"], W: Tensor["N", "K"], b: Tensor["N"]):
    """relu(X @ W^T + b): a contraction with a bias-and-ReLU epilogue. Written ``where(y <= 0, 0, y)``
    to be ``F.relu`` also in its gradient (0 where ``y == 0``; ``dt.maximum(y, 0.0)`` is
    ``torch.maximum``, which gives each side of a tie half) and at NaN (kept)."""
    i, j, k = dt.axes("i j k")
    y = dt.sum(X[i, k] * W[j, k], over=k) + b[j]
    return dt.where(y <= 0.0, 0.0, y)[i, j]


@dt.algorithm
def softmax(X: Tensor["M", "N"]):
    """Row softmax (stages max0, sum0, out)."""
    i, j = dt.axes("i j")
    m = dt.max(X[i, j], over=j)
    e = dt.exp(X[i, j] - m)
    return (e / dt.sum(e, over=j))[i, j]


@dt.algorithm
def log_softmax(X: Tensor["M", "N"]):
    """Row log-softmax: x - max - log(sum(exp(x - max)))."""
    i, j = dt.axes("i j")
    m = dt.max(X[i, j], over=j)
    return (X[i, j] - m - dt.log(dt.sum(dt.exp(X[i, j] - m), over=j)))[i, j]


@dt.algorithm
def layer_norm(X: Tensor["M", "N"], w: Tensor["N"], b: Tensor["N"]):
    """Layer norm over the last dim, eps 1e-5 (stages mean0, mean1, out)."""
    i, j = dt.axes("i j")
    mean = dt.mean(X[i, j], over=j)
    xc = X[i, j] - mean
    var = dt.mean(xc * xc, over=j)
    return (xc * dt.rsqrt(var + 1e-5) * w[j] + b[j])[i, j]


@dt.algorithm
def rms_norm(X: Tensor["M", "N"], w: Tensor["N"]):
    """RMSNorm over the last dim, eps 1e-6."""
    i, j = dt.axes("i j")
    ms = dt.mean(X[i, j] * X[i, j], over=j)
    return (X[i, j] * dt.rsqrt(ms + 1e-6) * w[j])[i, j]


@dt.algorithm
def cross_entropy(X: Tensor["M", "N"], labels: Tensor["M"]):
    """Per-row cross-entropy of logits X (M, N) against integer labels (M,): a gather ``X[i, labels[i]]``;
    torch's ``cross_entropy(X, labels, reduction="none")`` when every label is a class, 0..N-1. A label
    outside (torch's ignore_index -100 marking padding) raises :class:`~dtriton.IndexRangeError` naming
    ``labels[i]``, the value and the row, on the interpreter, in ``reference`` and on the GPU with
    ``dt.compile(..., check_indices=True)`` (unchecked on the GPU otherwise, where that row's loss is
    NaN): use :func:`cross_entropy_ignore` for labels that mark rows to skip."""
    i, j = dt.axes("i j")
    m = dt.max(X[i, j], over=j)   # (m - X[label]) + log(sum), torch's order: no cancellation at large logits
    return ((m - X[i, labels[i]]) + dt.log(dt.sum(dt.exp(X[i, j] - m), over=j)))[i]


# a label outside the classes: the caller fixes the labels or skips those rows (no pad or guard to add)
cross_entropy.index_hints = {
    "labels": "That label is not a class: each label must be in 0..N-1 (an index of dim 1 of X). torch's "
              "ignore_index -100 marks padding rows: to give those rows loss 0, use "
              "dt.library.cross_entropy_ignore(X, labels, -100) (it takes the ignore_index), or fix the labels"}


@dt.algorithm
def cross_entropy_ignore(X: Tensor["M", "N"], labels: Tensor["M"], ignore_index: int):
    """:func:`cross_entropy` with torch's ``ignore_index`` (pass -100, torch's default): a row whose
    label is ``ignore_index`` has loss 0 and a zero gradient row, as ``cross_entropy(X, labels,
    ignore_index=ignore_index, reduction="none")``; the gather is guarded, so it never reads that
    row's label as a class. Every other label must be a class, 0..N-1 (else an
    :class:`~dtriton.IndexRangeError` naming ``labels[i]``, the value, the row and the ignore_index
    given, on the interpreter, in ``reference`` and on the GPU with ``check_indices=True``; unchecked
    on the GPU, that row's loss is NaN). The output (M,) has X's dtype."""
    i, j = dt.axes("i j")
    m = dt.max(X[i, j], over=j)
    loss = (m - X[i, labels[i]]) + dt.log(dt.sum(dt.exp(X[i, j] - m), over=j))
    return dt.where(labels[i] != ignore_index, loss, 0.0)[i]


# a label outside the classes that is not ignore_index: most often a padding value other than the one passed
cross_entropy_ignore.index_hints = {
    "labels": "That label is out of range: each label must be a class (an index of dim 1 of X) or equal to "
              "ignore_index. Is it your ignore_index? This kernel ignores labels equal to {ignore_index} (the "
              "ignore_index argument given): pass the value that marks the rows to skip (torch's default is -100), "
              "or fix the labels"}


@dt.algorithm
def column_sum(X: Tensor["M", "N"]):
    """Sum over rows: reduces the axis a row-major grid would split."""
    i, j = dt.axes("i j")
    return dt.sum(X[i, j], over=i)[j]


@dt.algorithm
def spatial_diffusion(x: Tensor["V", "C"], basis: Tensor["V", "K"], mass: Tensor["V"],
                      evals: Tensor["K"], times: Tensor["C"]):
    """DiffusionNet's spectral diffusion (Sharp et al. 2022): out (V, C), spectral (K, C)."""
    v, k, c = dt.axes("v k c")
    spectral = dt.exp(-evals[k] * times[c]) * dt.sum(basis[v, k] * x[v, c] * mass[v], over=v)
    out = dt.sum(basis[v, k] * spectral, over=k)
    return out[v, c], spectral[k, c]


@dt.algorithm
def attention(Q: Tensor["B", "H", "S", "D"], K: Tensor["B", "H", "T", "D"],
              V: Tensor["B", "H", "T", "D"], scale: float):
    """Softmax attention (stages sum0 = scores, max0, sum1, sum2, out)."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * scale
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def causal_attention(Q: Tensor["B", "H", "S", "D"], K: Tensor["B", "H", "S", "D"],
                     V: Tensor["B", "H", "S", "D"], scale: float):
    """Attention with a causal mask written with axis values: ``where(j <= i, s, -inf)``."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.where(j <= i, dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * scale, -float("inf"))
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.requires("rep >= 1", ("(H - 1) // rep < G", "query head H - 1 reads K/V head (H - 1) // rep: pass rep = H // G "
                                                "(H query heads, G K/V heads)"))
@dt.algorithm
def gqa_attention(Q: Tensor["B", "H", "S", "D"], K: Tensor["B", "G", "T", "D"],
                  V: Tensor["B", "G", "T", "D"], scale: float, rep: int):
    """Grouped-query attention: query head ``h`` reads K/V head ``h // rep``; at ``H = G * rep`` torch's
    ``scaled_dot_product_attention(..., enable_gqa=True)`` (a last group may be short: every K/V head read
    must exist, ``(H - 1) // rep < G``)."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, h // rep, j, d], over=d) * scale
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h // rep, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def add_one(X: Tensor["N"]):
    """X + 1: the tiny kernel used to measure host overhead."""
    i, = dt.axes("i")
    return (X[i] + 1.0)[i]


# ----------------------------------------------------------------------------------------------
# reductions over several axes (NCHW tensors): statistics then normalise, pooling
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def batch_norm(X: Tensor["N", "C", "H", "W"], w: Tensor["C"], b: Tensor["C"]):
    """Training batch norm of NCHW ``X``: statistics per channel over (n, h, w), biased variance,
    eps 1e-5, then ``w``/``b`` (stages mean0, mean1, out)."""
    n, c, h, q = dt.axes("n c h q")
    mu = dt.mean(X[n, c, h, q], over=(n, h, q))
    xc = X[n, c, h, q] - mu
    var = dt.mean(xc * xc, over=(n, h, q))
    return (xc * dt.rsqrt(var + 1e-5) * w[c] + b[c])[n, c, h, q]


@dt.algorithm
def instance_norm(X: Tensor["N", "C", "H", "W"]):
    """Instance norm of NCHW ``X``: statistics per (n, c) over (h, w), eps 1e-5, no affine."""
    n, c, h, q = dt.axes("n c h q")
    mu = dt.mean(X[n, c, h, q], over=(h, q))
    xc = X[n, c, h, q] - mu
    var = dt.mean(xc * xc, over=(h, q))
    return (xc * dt.rsqrt(var + 1e-5))[n, c, h, q]


@dt.algorithm
def group_norm(X: Tensor["N", "G", "D", "H", "W"]):
    """Group norm of an NCHW tensor viewed as (N, groups, C // groups, H, W) (``x.view(n, g, -1,
    h, w)``): statistics per (n, group) over (channel in group, h, w), eps 1e-5, no affine."""
    n, g, c, h, q = dt.axes("n g c h q")
    mu = dt.mean(X[n, g, c, h, q], over=(c, h, q))
    xc = X[n, g, c, h, q] - mu
    var = dt.mean(xc * xc, over=(c, h, q))
    return (xc * dt.rsqrt(var + 1e-5))[n, g, c, h, q]


@dt.algorithm
def layer_norm_chw(X: Tensor["N", "C", "H", "W"]):
    """Layer norm of NCHW ``X`` over (c, h, w) per sample, eps 1e-5, no affine."""
    n, c, h, q = dt.axes("n c h q")
    mu = dt.mean(X[n, c, h, q], over=(c, h, q))
    xc = X[n, c, h, q] - mu
    var = dt.mean(xc * xc, over=(c, h, q))
    return (xc * dt.rsqrt(var + 1e-5))[n, c, h, q]


@dt.algorithm
def frobenius_normalize(X: Tensor["N", "C", "H", "W"]):
    """``X / ||X||_F``: one sum of squares over the whole tensor (a scalar), then a scale by its ``rsqrt``.

    The squares are summed in the compute dtype without rescaling (float32 for 16- and 32-bit inputs,
    float64 for float64), as torch's ``x / torch.linalg.vector_norm(x)`` does on the CPU, which gives
    the same values at the extremes (torch 2.13, float32): where ``||X||_F`` passes about 1.8e19 (the root
    of float32's largest, 3.4e38) the sum overflows to inf and the output is 0 (NaN where X holds inf
    or NaN); where every square underflows to 0 (every ``|x|`` below about 3.7e-23, the root of the
    smallest subnormal; 1.1e-19 where subnormals are flushed) the output is +-inf, NaN where X is 0,
    and squares partly underflowed lose precision (norms below about 1e-19). An all-zero X gives NaN
    (0 / 0, as torch). float64 inputs overflow past about 1.3e154; 16-bit inputs cannot (their squares,
    at most 2**32 for float16, sum in float32 up to about 1e29 elements; bfloat16 ones past 1.8e19 can).
    On the CPU ``alg.reference`` computes in float64, so it gives the finite values there. Scale
    X first (``x / x.abs().amax()``) where such norms can occur."""
    n, c, h, q = dt.axes("n c h q")
    s = dt.sum(X[n, c, h, q] * X[n, c, h, q], over=(n, c, h, q))
    return (X[n, c, h, q] * dt.rsqrt(s))[n, c, h, q]


@dt.algorithm
def avg_pool2d(X: Tensor["N", "C", "HO", "KH", "WO", "KW"]):
    """2-D average pooling written over a block view of NCHW ``x``: ``x.view(n, c, h // k, k, w // k,
    k)`` (k x k windows, stride k); the output is (N, C, H // k, W // k)."""
    n, c, h, a, q, b = dt.axes("n c h a q b")
    return dt.mean(X[n, c, h, a, q, b], over=(a, b))[n, c, h, q]


@dt.algorithm
def max_pool2d(X: Tensor["N", "C", "HO", "KH", "WO", "KW"]):
    """2-D max pooling over the same block view as :func:`avg_pool2d`."""
    n, c, h, a, q, b = dt.axes("n c h a q b")
    return dt.max(X[n, c, h, a, q, b], over=(a, b))[n, c, h, q]


@dt.requires("K >= 1", "s >= 1", "p >= 0", ("p <= K // 2", "torch's pooling pads at most half the window"),
             ("Ho == (H + 2 * p - K) // s + 1", _TORCH), ("Wo == (W + 2 * p - K) // s + 1", _TORCH))
@dt.algorithm
def max_pool2d_window(X: Tensor["N", "H", "W"], K: int, s: int, p: int, Ho: int, Wo: int):
    """2-D max pooling of (N, H, W) ``X`` (NCHW viewed as N*C images) over ``K`` x ``K`` windows of
    stride ``s`` with ``p`` rows and columns of -inf padding, as torch's ``max_pool2d(x, K, s, p)``;
    the output is (N, Ho, Wo) with ``Ho = (H + 2p - K) // s + 1`` (windows may overlap). Its
    gradient is ``dt.max``'s (``torch.amax``'s): a window whose maximum is tied splits it evenly
    among the tied elements, where ``max_pool2d`` gives it all to the first one (the values and the
    gradients of windows without ties agree)."""
    n, h, w, r, q = dt.axes("n h:Ho w:Wo r:K q:K")
    return dt.max(X.pad(float("-inf"))[n, h * s + r - p, w * s + q - p], over=(r, q))[n, h, w]


@dt.requires("K >= 1", "s >= 1", "p >= 0", ("p <= K // 2", "torch's pooling pads at most half the window"),
             ("Ho == (H + 2 * p - K) // s + 1", _TORCH), ("Wo == (W + 2 * p - K) // s + 1", _TORCH))
@dt.algorithm
def avg_pool2d_window(X: Tensor["N", "H", "W"], K: int, s: int, p: int, Ho: int, Wo: int):
    """2-D average pooling over the windows of :func:`max_pool2d_window`, zero padding counted (torch's
    ``avg_pool2d(x, K, s, p)``, ``count_include_pad=True``)."""
    n, h, w, r, q = dt.axes("n h:Ho w:Wo r:K q:K")
    return dt.mean(X.pad(0.0)[n, h * s + r - p, w * s + q - p], over=(r, q))[n, h, w]


# -- convolutions (index arithmetic; the output sizes are int arguments) ---------------------------
# A convolution is a sum over the input channels and the window of a padded read at
# ``out * stride + tap * dilation - padding``. The planner lowers it to an implicit GEMM on tensor
# cores (plan.implicit_gemm). Groups are a batch axis of views: ``x.view(N, G, C // G, H, W)``,
# ``w.view(G, O // G, C // G, R, Q)``, and the output (N, G, O // G, Ho, Wo) viewed back as
# (N, O, Ho, Wo). Size an output with torch's rule, ``(H + 2p - d (R - 1) - 1) // s + 1``: a call checks it
# (dt.requires) and raises a ShapeError with the expected size, as for a stride or dilation below 1 or a
# negative padding.

@dt.requires(*_STEP, ("L + 2 * padding >= dilation * (R - 1) + 1", _FITS),
             ("Lo == (L + 2 * padding - dilation * (R - 1) - 1) // stride + 1", _TORCH))
@dt.algorithm
def conv1d(X: Tensor["N", "C", "L"], Wt: Tensor["O", "C", "R"], stride: int, padding: int, dilation: int, Lo: int):
    """torch's ``conv1d`` (no bias): X (N, C, L), Wt (O, C, R) -> (N, O, Lo)."""
    n, o, c, t, r = dt.axes("n o c t:Lo r")
    return dt.sum(X.pad(0.0)[n, c, t * stride + r * dilation - padding] * Wt[o, c, r], over=(c, r))[n, o, t]


@dt.requires(*_STEP, ("H + 2 * padding >= dilation * (R - 1) + 1", _FITS),
             ("W + 2 * padding >= dilation * (Q - 1) + 1", _FITS),
             ("Ho == (H + 2 * padding - dilation * (R - 1) - 1) // stride + 1", _TORCH),
             ("Wo == (W + 2 * padding - dilation * (Q - 1) - 1) // stride + 1", _TORCH))
@dt.algorithm
def conv2d(X: Tensor["N", "C", "H", "W"], Wt: Tensor["O", "C", "R", "Q"], stride: int, padding: int, dilation: int,
           Ho: int, Wo: int):
    """torch's ``conv2d`` (no bias) in NCHW: X (N, C, H, W), Wt (O, C, R, Q) -> (N, O, Ho, Wo)."""
    n, o, c, h, w, r, q = dt.axes("n o c h:Ho w:Wo r q")
    x = X.pad(0.0)[n, c, h * stride + r * dilation - padding, w * stride + q * dilation - padding]
    return dt.sum(x * Wt[o, c, r, q], over=(c, r, q))[n, o, h, w]


@dt.requires(*_STEP, ("H + 2 * padding >= dilation * (R - 1) + 1", _FITS),
             ("W + 2 * padding >= dilation * (Q - 1) + 1", _FITS),
             ("Ho == (H + 2 * padding - dilation * (R - 1) - 1) // stride + 1", _TORCH),
             ("Wo == (W + 2 * padding - dilation * (Q - 1) - 1) // stride + 1", _TORCH))
@dt.algorithm
def conv2d_nhwc(X: Tensor["N", "H", "W", "C"], Wt: Tensor["O", "R", "Q", "C"], stride: int, padding: int,
                dilation: int, Ho: int, Wo: int):
    """``conv2d`` channels-last: X (N, H, W, C), Wt (O, R, Q, C) -> (N, Ho, Wo, O). Every tile of the
    flat reduction reads runs of contiguous channels."""
    n, o, c, h, w, r, q = dt.axes("n o c h:Ho w:Wo r q")
    x = X.pad(0.0)[n, h * stride + r * dilation - padding, w * stride + q * dilation - padding, c]
    return dt.sum(x * Wt[o, r, q, c], over=(c, r, q))[n, h, w, o]


@dt.requires(*_STEP, ("H + 2 * padding >= dilation * (R - 1) + 1", _FITS),
             ("W + 2 * padding >= dilation * (Q - 1) + 1", _FITS),
             ("Ho == (H + 2 * padding - dilation * (R - 1) - 1) // stride + 1", _TORCH),
             ("Wo == (W + 2 * padding - dilation * (Q - 1) - 1) // stride + 1", _TORCH))
@dt.algorithm
def grouped_conv2d_nhwc(X: Tensor["N", "H", "W", "G", "C"], Wt: Tensor["G", "O", "R", "Q", "C"], stride: int,
                        padding: int, dilation: int, Ho: int, Wo: int):
    """Grouped ``conv2d`` channels-last over group views: X (N, H, W, G, C // G), Wt (G, O // G, R, Q,
    C // G) -> (N, Ho, Wo, G, O // G)."""
    n, g, o, c, h, w, r, q = dt.axes("n g o c h:Ho w:Wo r q")
    x = X.pad(0.0)[n, h * stride + r * dilation - padding, w * stride + q * dilation - padding, g, c]
    return dt.sum(x * Wt[g, o, r, q, c], over=(c, r, q))[n, h, w, g, o]


@dt.requires("stride >= 1", "padding >= 0", ("H + 2 * padding >= R", _FITS), ("W + 2 * padding >= Q", _FITS),
             ("Ho == (H + 2 * padding - R) // stride + 1", _TORCH), ("Wo == (W + 2 * padding - Q) // stride + 1", _TORCH))
@dt.algorithm
def depthwise_conv2d_nhwc(X: Tensor["N", "H", "W", "C"], Wt: Tensor["R", "Q", "C"], stride: int, padding: int,
                          Ho: int, Wo: int):
    """Depthwise ``conv2d`` (groups = channels) channels-last: X (N, H, W, C), Wt (R, Q, C) -> (N, Ho,
    Wo, C); torch's weight (C, 1, R, Q) is ``w[:, 0].permute(1, 2, 0)``. Not a GEMM: a sum over the
    window per channel."""
    n, c, h, w, r, q = dt.axes("n c h:Ho w:Wo r q")
    return dt.sum(X.pad(0.0)[n, h * stride + r - padding, w * stride + q - padding, c] * Wt[r, q, c],
                  over=(r, q))[n, h, w, c]


@dt.requires("stride >= 1", "padding >= 0", ("Do == (D + 2 * padding - T) // stride + 1", _TORCH),
             ("Ho == (H + 2 * padding - R) // stride + 1", _TORCH), ("Wo == (W + 2 * padding - Q) // stride + 1", _TORCH))
@dt.algorithm
def conv3d(X: Tensor["N", "C", "D", "H", "W"], Wt: Tensor["O", "C", "T", "R", "Q"], stride: int, padding: int,
           Do: int, Ho: int, Wo: int):
    """torch's ``conv3d`` (no bias): X (N, C, D, H, W), Wt (O, C, T, R, Q) -> (N, O, Do, Ho, Wo)."""
    n, o, c, z, h, w, t, r, q = dt.axes("n o c z:Do h:Ho w:Wo t r q")
    x = X.pad(0.0)[n, c, z * stride + t - padding, h * stride + r - padding, w * stride + q - padding]
    return dt.sum(x * Wt[o, c, t, r, q], over=(c, t, r, q))[n, o, z, h, w]


@dt.requires(*_STEP, ("Ho >= (H - 1) * stride - 2 * padding + dilation * (R - 1) + 1", _TRANSPOSED),
             ("Ho < (H - 1) * stride - 2 * padding + dilation * (R - 1) + 1 + max(stride, dilation)", _TRANSPOSED),
             ("Wo >= (W - 1) * stride - 2 * padding + dilation * (Q - 1) + 1", _TRANSPOSED),
             ("Wo < (W - 1) * stride - 2 * padding + dilation * (Q - 1) + 1 + max(stride, dilation)", _TRANSPOSED))
@dt.algorithm
def conv_transpose2d(X: Tensor["N", "C", "H", "W"], Wt: Tensor["C", "O", "R", "Q"], stride: int, padding: int,
                     dilation: int, Ho: int, Wo: int):
    """torch's ``conv_transpose2d`` (no bias, groups 1) in gather form: output pixel (h, w) sums the
    inputs at ``((h + p - r d) / s, (w + p - q d) / s)`` where both divide exactly. X (N, C, H, W),
    Wt (C, O, R, Q) -> (N, O, Ho, Wo), ``Ho = (H - 1) s - 2p + d (R - 1) + 1`` (plus output_padding)."""
    n, o, c, h, w, r, q = dt.axes("n o c h:Ho w:Wo r q")
    y, x = h + padding - r * dilation, w + padding - q * dilation
    hit = (y % stride == 0) & (x % stride == 0)
    return dt.sum(dt.where(hit, X.pad(0.0)[n, c, y // stride, x // stride], 0.0) * Wt[c, o, r, q],
                  over=(c, r, q))[n, o, h, w]


@dt.requires("stride >= 1", "padding >= 0",
             ("J >= (max(R, Q) + stride - 1) // stride", "pass J = ceil(max(R, Q) / stride), the taps of a phase"),
             ("Hh == (H - 1) + (R - 2 * padding + stride - 1) // stride", _PHASES),
             ("Wh == (W - 1) + (Q - 2 * padding + stride - 1) // stride", _PHASES))
@dt.algorithm
def conv_transpose2d_phases(X: Tensor["N", "C", "H", "W"], Wt: Tensor["C", "O", "R", "Q"], stride: int, padding: int,
                            Hh: int, Wh: int, J: int):
    """torch's ``conv_transpose2d`` (no bias, dilation 1) by output phases: the output viewed as
    (N, O, Hh, stride, Wh, stride) (``Ho = Hh * stride``: pick ``output_padding`` so it divides; view
    the result back with ``.view(N, O, Ho, Wo)``). Output row ``h = a * stride + ph`` takes the taps
    ``r = (ph + padding) % stride + j * stride`` only (``J = ceil(R / stride)``; the weight reads 0
    past R), so no product with the stride's zeros is computed, unlike :func:`conv_transpose2d`'s
    gather form; each phase pair is one implicit GEMM."""
    n, o, c, a, b, j, i = dt.axes("n o c a:Hh b:Wh j:J i:J")
    ph, pw = dt.axes("ph:stride pw:stride")
    x = X.pad(0.0)[n, c, a + (ph + padding) // stride - j, b + (pw + padding) // stride - i]
    wt = Wt.pad(0.0)[c, o, (ph + padding) % stride + j * stride, (pw + padding) % stride + i * stride]
    return dt.sum(x * wt, over=(c, j, i))[n, o, a, ph, b, pw]
