# kernels.py: algorithms in a file of their own, for the dtriton command line
import dtriton as dt


@dt.algorithm
def row_rms(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.sqrt(dt.mean(X[i, j] * X[i, j], over=j))[i]


@dt.algorithm
def scaled_gelu(X: dt.Tensor["M", "N"], alpha: float):
    i, j = dt.axes("i j")
    x = X[i, j] * alpha
    return (0.5 * x * (1 + dt.tanh(0.7978845608 * (x + 0.044715 * x * x * x))))[i, j]
