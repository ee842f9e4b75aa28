import torch
import dtriton as dt


@dt.algorithm
def softmax(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    e = dt.exp(X[i, j] - dt.max(X[i, j], over=j))
    return (e / dt.sum(e, over=j))[i, j]


X = torch.randn(8, 100)                 # a CPU tensor: the kernel runs on Triton's interpreter
kernel = dt.compile(softmax)            # no schedule given: the heuristic picks one from the shapes
torch.testing.assert_close(kernel(X), torch.softmax(X, -1))
print(kernel.source_for(X))             # the generated Triton
