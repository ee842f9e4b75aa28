import torch
import dtriton as dt


@dt.algorithm
def quantise(X: dt.Tensor["M", "K"]):   # per-token (row) scales, e4m3 values
    i, k = dt.axes("i k")
    scale = dt.maximum(dt.max(dt.abs(X[i, k]), over=k), 1e-12) / 448.0
    return dt.cast(X[i, k] / scale, torch.float8_e4m3fn, saturate=True)[i, k], scale[i]


@dt.algorithm
def fp8_linear(Q: dt.Tensor["M", "K"], W: dt.Tensor["N", "K"], sq: dt.Tensor["M"], sw: dt.Tensor["N"]):
    i, j, k = dt.axes("i j k")   # a tl.dot of the fp8 operands, the scales applied after the loop
    return dt.cast(sq[i] * sw[j] * dt.sum(Q[i, k] * W[j, k], over=k), torch.bfloat16)[i, j]


X, W = torch.randn(64, 256), torch.randn(32, 256)
(q, sq), (w, sw) = dt.compile(quantise)(X), dt.compile(quantise)(W)
Y = dt.compile(fp8_linear)(q, w, sq, sw)
print(f"fp8 linear: relative error {float((Y.float() - X @ W.T).norm() / (X @ W.T).norm()):.3f}")


@dt.algorithm
def int8_mm(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):   # int32 accumulator: exact
    i, j, k = dt.axes("i j k")
    return dt.cast(dt.sum(A[i, k] * B[k, j], over=k), torch.int32)[i, j]


A, B = torch.randint(-128, 128, (48, 80), dtype=torch.int8), torch.randint(-128, 128, (80, 40), dtype=torch.int8)
assert torch.equal(dt.compile(int8_mm)(A, B), torch._int_mm(A, B))


@dt.algorithm
def int4_linear(X: dt.Tensor["M", "K"], Wp: dt.Tensor["N", "Kh"], s: dt.Tensor["N"]):   # 2 int4 per byte
    i, j, k = dt.axes("i j k")
    byte = Wp[j, k // 2]                                     # low nibble: even k, high nibble: odd k
    nib = dt.where(k % 2 == 0, byte % 16, byte // 16)        # // and % round toward -inf, as torch's
    return (s[j] * dt.sum(X[i, k] * dt.where(nib >= 8, nib - 16, nib), over=k))[i, j]


Wq = torch.randint(-8, 8, (32, 256))
packed = ((Wq[:, 0::2] & 15) | ((Wq[:, 1::2] & 15) << 4)).to(torch.uint8)
s = torch.rand(32)
torch.testing.assert_close(dt.compile(int4_linear)(X.half(), packed, s), s * (X.half().float() @ Wq.float().T))
