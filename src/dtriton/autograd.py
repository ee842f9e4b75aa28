"""TEMPORARY shim, to delete when the runtime calls ``self.grad_call`` (see the tune helper's report).

``runtime.Kernel.__call__`` still imports :func:`apply` from here for calls whose inputs require
grad. It routes them through the hook :mod:`dtriton.integrations.autograd` installs on the kernel's
class (``Kernel.grad_call``), as the edited runtime will. Use :mod:`dtriton.integrations`.
"""

from . import integrations  # noqa: F401 - importing it installs Kernel.grad_call

__all__ = ["apply"]


def apply(kernel, args, out=None):
    """``kernel.grad_call(args, out=out)``: the installed autograd hook."""
    return type(kernel).grad_call(kernel, args, out=out)
