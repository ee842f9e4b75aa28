import torch
import dtriton as dt
from dtriton.library import softmax

X = torch.randn(8, 40)
res = dt.benchmark(softmax, (X,), compile=False, seconds=0.2)   # compile=True adds torch.compile
print(res)                                       # dtriton beside eager PyTorch, checked against float64
print(res.row("dtriton").call_us)                # (median, q1, q3) in microseconds
res.plot("bench.png")
