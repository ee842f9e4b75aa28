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
