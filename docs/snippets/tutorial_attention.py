import math

import torch
import dtriton as dt


@dt.algorithm
def attention(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "T", "D"],
              V: dt.Tensor["B", "H", "T", "D"], scale: float):
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * scale      # scores: stage "sum0"
    s = dt.where(j <= i, s, -float("inf"))                         # a causal mask: axes are values too
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


Q, K, V = (torch.randn(1, 2, 24, 16) for _ in range(3))
scale = 1 / math.sqrt(16)
expected = torch.nn.functional.scaled_dot_product_attention(Q, K, V, is_causal=True)

# flash attention: the scores fused into an online loop over j (no S x T buffer), one kernel
flash = dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": 16, "j": 8},
                    strategy={"j": "online", "d": "whole", "e": "whole"}, stages={"sum0": {"place": "fuse"}})
torch.testing.assert_close(dt.compile(attention, flash)(Q, K, V, scale), expected)

# the same algorithm, the scores materialised in memory first (two kernels)
unfused = dt.compile(attention, dt.Schedule(stages={"sum0": {"place": "materialize"}}))
torch.testing.assert_close(unfused(Q, K, V, scale), expected)

# the causal mask bounds the loop over j: each program visits only the key tiles at or below its diagonal
assert "loop bounds of j from the mask" in dt.compile(attention, flash).source_for(Q, K, V, scale)

# split-KV (flash-decoding, long prefill): 3 slices of the keys in parallel programs, partials merged in order
split = dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": 16, "j": 8}, split={"j": 3},
                    strategy={"j": "online", "d": "whole", "e": "whole"}, stages={"sum0": {"place": "fuse"}})
torch.testing.assert_close(dt.compile(attention, split)(Q, K, V, scale), expected)
