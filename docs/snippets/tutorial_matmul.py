import torch
import dtriton as dt


@dt.algorithm
def matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    i, j, k = dt.axes("i j k")               # index axes: i, j, k
    C = dt.sum(A[i, k] * B[k, j], over=k)    # A[i, k] binds i to M and k to K; C's free axes: i, j
    return C[i, j]                           # the output's layout: rows i, columns j


A, B = torch.randn(30, 17), torch.randn(17, 20)     # odd sizes: tiles are masked at the edges

# 1. the heuristic's schedule
kernel = dt.compile(matmul)
torch.testing.assert_close(kernel(A, B), A @ B)
print(kernel.schedule_for(A, B))             # the complete schedule it picked for these shapes

# 2. a schedule of our own: 16x16 output tiles, k covered 8 at a time, grouped launch order
sched = dt.Schedule(tile={"i": 16, "j": 16, "k": 8}, grid=("i", "j"), group={"i": 4})
kernel = dt.compile(matmul, sched)
C = kernel(A, B)
torch.testing.assert_close(C, matmul.reference(A, B))    # alg.reference: the eager torch evaluator

# 3. split-K: the k reduction divided between 2 programs per tile, combined deterministically
split = dt.compile(matmul, sched.replace(split={"k": 2}, split_mode="partials"))
torch.testing.assert_close(split(A, B), A @ B)

print(kernel.source_for(A, B).splitlines()[0])           # the generated Triton, commented
