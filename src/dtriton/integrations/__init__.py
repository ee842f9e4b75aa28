"""Integrations with PyTorch: autograd for every kernel (:mod:`~dtriton.integrations.autograd`, which
installs ``Kernel.grad_call`` when imported) and ``torch.library`` custom ops
(:mod:`~dtriton.integrations.custom_op`)."""

from .autograd import DifferentiableKernel, apply, differentiable, output_specs
from .custom_op import as_torch_op

__all__ = ["DifferentiableKernel", "differentiable", "apply", "output_specs", "as_torch_op"]
