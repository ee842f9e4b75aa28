import torch
import dtriton as dt


@dt.algorithm
def softmax(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    m = dt.max(X[i, j], over=j)                  # stage "max0"
    e = dt.exp(X[i, j] - m)
    return (e / dt.sum(e, over=j))[i, j]         # stage "sum0", then the output


print(softmax)                                   # lists the stages by name
X = torch.randn(6, 50)
expected = torch.softmax(X.double(), -1).float()

# how the reduced axis j is covered inside one program (a row per program: grid=("i",), tile i=1):
for strategy in ("whole", "loop", "online"):     # one block / a loop of tiles / one rescaled pass
    tile = {"i": 1} if strategy == "whole" else {"i": 1, "j": 16}
    k = dt.compile(softmax, dt.Schedule(grid=("i",), tile=tile, strategy={"j": strategy}))
    torch.testing.assert_close(k(X), expected)

# a stage is addressed by name: compute the row maxima in a kernel of their own (two launches)
two = dt.compile(softmax, dt.Schedule(stages={"max0": {"place": "materialize"}}))
torch.testing.assert_close(two(X), expected)

# in place: each program reads only its own row, so out=X is allowed
Y = X.clone()
k(Y, out=Y)
torch.testing.assert_close(Y, expected)
