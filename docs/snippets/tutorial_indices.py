"""Indices: shifted reads, padding, guarded reads, // and % (checked against torch in float64)."""
import torch
import torch.nn.functional as F

import dtriton as dt


@dt.algorithm
def forward_diff(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X.pad(0.0)[i, j + 1] - X[i, j])[i, j]      # X[i, N] reads the padding value 0.0


@dt.algorithm
def rotate_half(X: dt.Tensor["M", "D"], half: int):
    i, d = dt.axes("i d:D")                              # d is used only inside indices: sized by name
    return dt.where(d < half, -X[i, d + half], X[i, d - half])[i, d]   # each read only where its branch is taken


@dt.algorithm
def conv1d(X: dt.Tensor["B", "C", "H"], W: dt.Tensor["O", "C", "R"], s: int, p: int, Ho: int):
    n, o, c, h, r = dt.axes("n o c h:Ho r")              # the output length is the int argument Ho
    return dt.sum(X.pad(0.0)[n, c, h * s + r - p] * W[o, c, r], over=(c, r))[n, o, h]


@dt.algorithm
def grouped_rows(X: dt.Tensor["M", "N"], G: dt.Tensor["K", "N"], rows: int):
    i, j = dt.axes("i j")
    return (X[i, j] * G[i // rows, j])[i, j]            # // and % round as Python does (toward -inf)


X = torch.randn(6, 8, dtype=torch.float64)
torch.testing.assert_close(dt.compile(forward_diff)(X), F.pad(X, (0, 1))[:, 1:] - X)
torch.testing.assert_close(dt.compile(rotate_half)(X, 4), torch.cat([-X[:, 4:], X[:, :4]], 1))
Xc, W = torch.randn(2, 3, 9, dtype=torch.float64), torch.randn(4, 3, 3, dtype=torch.float64)
torch.testing.assert_close(dt.compile(conv1d)(Xc, W, 2, 1, 5), F.conv1d(Xc, W, stride=2, padding=1))
torch.testing.assert_close(dt.compile(grouped_rows)(X, X[:3], 2), X * X[:3][torch.arange(6) // 2])

# reading outside a dim without padding is an error, raised before anything runs when the sizes prove it
@dt.algorithm
def unpadded(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X[i, j + 1] - X[i, j])[i, j]


try:
    unpadded.reference(X)
except dt.IndexRangeError as e:
    print(e)
