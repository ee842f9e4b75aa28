import torch
import torch.nn.functional as F
import dtriton as dt


@dt.algorithm
def conv2d(X: dt.Tensor["N", "H", "W", "C"], Wt: dt.Tensor["O", "R", "Q", "C"], b: dt.Tensor["O"],
           s: int, p: int, Ho: int, Wo: int):   # channels-last; stride s, zero padding p; bias and ReLU
    n, o, c, h, w, r, q = dt.axes("n o c h:Ho w:Wo r q")
    y = dt.sum(X.pad(0.0)[n, h * s + r - p, w * s + q - p, c] * Wt[o, r, q, c], over=(c, r, q))
    # one implicit GEMM on tl.dot, the epilogue fused; dt.maximum is torch.maximum, gradient included (half
    # at a tie, where F.relu gives 0): dt.where(y + b[o] > 0, y + b[o], 0.0) is ReLU's gradient too
    return dt.maximum(y + b[o], 0.0)[n, h, w, o]


X, W, b = torch.randn(2, 9, 9, 16), torch.randn(32, 3, 3, 16), torch.randn(32)
Y = dt.compile(conv2d)(X, W, b, 2, 1, 5, 5)      # Ho = (9 + 2*1 - 3) // 2 + 1 = 5
ref = F.relu(F.conv2d(X.permute(0, 3, 1, 2), W.permute(0, 3, 1, 2), b, stride=2, padding=1)).permute(0, 2, 3, 1)
print(f"conv2d: relative error {float((Y - ref).norm() / ref.norm()):.1e}")

# ready-made: dtriton.library.conv1d, conv2d (NCHW), conv2d_nhwc, grouped_conv2d_nhwc,
# depthwise_conv2d_nhwc, conv3d, conv_transpose2d (gather form), conv_transpose2d_phases
from dtriton import library as L

# groups: a batch axis of views of the channels (here 4 groups of 4 input and 8 output channels)
G, Wg = 4, torch.randn(32, 3, 3, 4)                # torch's grouped weight (O, R, Q, C // G), channels-last
Yg = dt.compile(L.grouped_conv2d_nhwc)(X.view(2, 9, 9, G, 4), Wg.view(G, 8, 3, 3, 4), 1, 1, 1, 9, 9)
ref = F.conv2d(X.permute(0, 3, 1, 2), Wg.permute(0, 3, 1, 2), padding=1, groups=G).permute(0, 2, 3, 1)
print(f"grouped: relative error {float((Yg.reshape(ref.shape) - ref).norm() / ref.norm()):.1e}")

# transposed, stride 2: one implicit GEMM per output phase (Ho = 2 * Hh), viewed back
Xt, Wt = torch.randn(2, 8, 5, 5), torch.randn(8, 16, 3, 3)
Yt = dt.compile(L.conv_transpose2d_phases)(Xt, Wt, 2, 1, 5, 5, 2).view(2, 16, 10, 10)
ref = F.conv_transpose2d(Xt, Wt, stride=2, padding=1, output_padding=1)
print(f"conv_transpose2d: relative error {float((Yt - ref).norm() / ref.norm()):.1e}")
