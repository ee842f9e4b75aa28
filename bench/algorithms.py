"""The algorithms the benchmark suite runs (kept in one place so tests and bench agree)."""

import dtriton as dt


@dt.algorithm
def matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    i, j, k = dt.axes("i j k")
    return dt.sum(A[i, k] * B[k, j], over=k)[i, j]


@dt.algorithm
def softmax(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    m = dt.max(X[i, j], over=j)
    e = dt.exp(X[i, j] - m)
    return (e / dt.sum(e, over=j))[i, j]


@dt.algorithm
def layer_norm(X: dt.Tensor["M", "N"], w: dt.Tensor["N"], b: dt.Tensor["N"]):
    i, j = dt.axes("i j")
    mean = dt.mean(X[i, j], over=j)
    xc = X[i, j] - mean
    var = dt.mean(xc * xc, over=j)
    return (xc * dt.rsqrt(var + 1e-5) * w[j] + b[j])[i, j]


@dt.algorithm
def rms_norm(X: dt.Tensor["M", "N"], w: dt.Tensor["N"]):
    i, j = dt.axes("i j")
    ms = dt.mean(X[i, j] * X[i, j], over=j)
    return (X[i, j] * dt.rsqrt(ms + 1e-6) * w[j])[i, j]


@dt.algorithm
def spatial_diffusion(x: dt.Tensor["V", "C"], basis: dt.Tensor["V", "K"], mass: dt.Tensor["V"],
                      evals: dt.Tensor["K"], times: dt.Tensor["C"]):
    v, k, c = dt.axes("v k c")
    spectral = dt.exp(-evals[k] * times[c]) * dt.sum(basis[v, k] * x[v, c] * mass[v], over=v)
    out = dt.sum(basis[v, k] * spectral, over=k)
    return out[v, c], spectral[k, c]


@dt.algorithm
def attention(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "T", "D"],
              V: dt.Tensor["B", "H", "T", "D"], scale: float):
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * scale
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def add_one(X: dt.Tensor["N"]):
    i, = dt.axes("i")
    return (X[i] + 1.0)[i]
