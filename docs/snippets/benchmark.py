import torch
import dtriton as dt
from dtriton.library import softmax


def torch_softmax(X):                            # the torch code you would otherwise write
    return torch.softmax(X, dim=-1)


X = torch.randn(8, 40)
res = dt.benchmark(softmax, (X,), baseline=torch_softmax, compile=False, seconds=0.2)  # compile=True adds torch.compile
print(res)                                       # dtriton, your baseline and alg.reference, checked against float64
print(res.row("dtriton").call_us)                # (median, q1, q3) in microseconds
print(res.row("baseline").status)                # "ok": torch_softmax matches float64 too
res.plot("bench.png")
