import torch
import dtriton as dt


@dt.algorithm
def rms_norm(X: dt.Tensor["M", "N"], w: dt.Tensor["N"]):
    i, j = dt.axes("i j")
    ms = dt.mean(X[i, j] * X[i, j], over=j)
    return (X[i, j] * dt.rsqrt(ms + 1e-6) * w[j])[i, j]


print(dt.grad(rms_norm))            # the derived backward algorithms (each one schedulable by stage name)


class RMSNorm(torch.nn.Module):
    """An RMSNorm layer whose forward and backward run as dtriton kernels."""

    def __init__(self, n: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.kernel = dt.compile(rms_norm)          # dtriton kernels are differentiable with autograd

    def forward(self, x):
        return self.kernel(x, self.weight)


layer = RMSNorm(40)
x = torch.randn(7, 40, requires_grad=True)
layer(x).square().sum().backward()

# the same gradients from plain torch autograd, in float64
x64 = x.detach().double().requires_grad_()
w64 = layer.weight.detach().double().requires_grad_()
(x64 * torch.rsqrt(x64.square().mean(-1, keepdim=True) + 1e-6) * w64).square().sum().backward()
torch.testing.assert_close(x.grad, x64.grad.float())
torch.testing.assert_close(layer.weight.grad, w64.grad.float())

# backward kernels' schedules: keyed by tensor input name ("X": the kernel computing dX) or by a
# backward algorithm's name as dt.grad prints it; a value is a dt.Schedule, a schedule dict or None
kernel = dt.compile_autograd(rms_norm, backward_schedules={"X": dt.Schedule(tile={"i": 4})})
kernel(x, layer.weight).sum().backward()
try:
    dt.compile_autograd(rms_norm, backward_schedules={"ms": dt.Schedule()})   # a forward stage: not a key
except dt.ScheduleError as e:
    print(e)

# the forward saves the statistics the backward reads (save="auto", the default): the mean square
# of each row, stored by the forward's own kernel, so the backward runs one kernel here instead of
# recomputing it in a second; save=None recomputes
kernel = dt.compile_autograd(rms_norm)
kernel(x, layer.weight).sum().backward()
assert kernel.gradients().saved == ("mean0",)
assert kernel.launch_counts() == {"forward": 1, "backward": 1}
recompute = dt.compile_autograd(rms_norm, save=None)
recompute(x, layer.weight).sum().backward()
assert recompute.launch_counts() == {"forward": 1, "backward": 2}
