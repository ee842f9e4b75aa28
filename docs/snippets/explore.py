import torch
import dtriton as dt
from dtriton.library import softmax              # ready-made algorithms

X = torch.randn(8, 40)
# budget in seconds; on a CPU every candidate runs on the interpreter (checked, but timed as Python)
res = dt.explore(softmax, (X,), budget=20, max_trials=4)
print(res.summary())                             # one line per candidate: status, time, schedule
print(res.best)                                  # the winner (None if no candidate passed)
res.plot("explore.png")                          # time per candidate
kernel = dt.compile(softmax, "tuned")            # the stored winner for these shapes, else the heuristic
torch.testing.assert_close(kernel(X), torch.softmax(X, -1))

# search your own space: a dt.Space lists the values to try for each field, always as lists;
# tile/strategy are keyed by axis, place= (stage placement) by reduction stage name
space = dt.Space(tile={"i": [1, 2]}, strategy={"j": ["whole", "online"]},
                 place={"sum0": ["fuse", "materialize"]})
res = dt.explore(softmax, (X,), space=space, budget=20, max_trials=2, store=False)
print(res.summary())                             # 3 candidates: max_trials does not count the heuristic

# dt.cast takes a torch dtype (the output follows it: float16 here)
@dt.algorithm
def half_rowsum(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.sum(dt.cast(X[i, j], torch.float16), over=j)[i]


y = dt.compile(half_rowsum)(X)
assert y.dtype == torch.float16
torch.testing.assert_close(y.float(), X.half().float().sum(-1), atol=2e-2, rtol=2e-3)
