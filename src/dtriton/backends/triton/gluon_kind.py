"""What every hand-written Gluon kernel the plan may choose shares: how a decision of one kind is
printed and launched (:class:`GluonKind`), and the one fast path of a call signature planned as a
single Gluon launch (:class:`GluonCallLauncher`).

Each Gluon module of this backend (``gluon``: the attention forward, ``gluon_bwd``: its backward,
``gluon_conv``: the channels-last conv2d, ``gluon_depthwise``: the channels-last depthwise conv2d) defines
its ``KIND``; :mod:`.gluon_table` maps the plan's
decision classes to them, so the renderer, the slow launch and the fast launcher dispatch through
one table. Nothing here decides: the plan's decision says which kernel runs and how.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ...plan.kernel import KernelPlan
from ..base import KernelMeta

__all__ = ["GluonCallLauncher", "GluonKind"]


@dataclass(frozen=True)
class GluonKind:
    """How the kernels of one Gluon decision class are printed and launched.

    Attributes:
        render: ``render(k)`` -> (module text, launch metadata) of kernel plan ``k`` (``k.gluon`` set).
        launch: ``launch(fn, call, meta)`` launches on the runtime's argument list ``call`` (the
            tensors of ``meta``, one zero stride per tensor dim, then the scalars of ``meta``).
        inputs: ``inputs(decision)`` -> the names of the tensor inputs, in ``meta.tensors``' order.
        outputs: ``outputs(decision)`` -> the output names in ``meta.tensors``' order after the
            inputs; None: the algorithm's outputs in their order."""
    render: Callable[[KernelPlan], tuple[str, KernelMeta]]
    launch: Callable[[Any, Sequence[Any], KernelMeta], None]
    inputs: Callable[[Any], Sequence[str]]
    outputs: Callable[[Any], Sequence[str]] | None = None


class GluonCallLauncher:
    """The fast path of a call signature whose plan is one Gluon launch: ``launcher(args)``
    allocates the outputs and launches (``kind.launch``: descriptors built per call), without
    re-binding or re-planning; ``into(args, outs)`` writes ``out=`` tensors :meth:`takes` accepted.

    Args:
        alg: the algorithm; plan: the runtime's plan of the call (one launch, a Gluon kernel);
        b: the call's binding (sizes, output dtypes, device); kind: the decision's :class:`GluonKind`."""

    def __init__(self, alg, plan, b, kind: GluonKind):
        (L,) = plan.launches
        self.fn, self.meta, self.kind = L.fn, L.meta, kind
        g = L.meta.ir.gluon
        pos = {p.name: i for i, p in enumerate(alg.params)}
        self.inputs = [pos[t] for t in kind.inputs(g)]
        names = [o.name for o in alg.outputs]
        self.order = [names.index(t) for t in kind.outputs(g)] if kind.outputs else list(range(len(names)))
        self.scalars = [pos[s[2:]] for s in L.meta.scalars]   # (as the metadata orders them)
        self.allocs = [(tuple(b.axis_sizes[a] for a in o.layout), dt) for o, dt in zip(alg.outputs, b.out_dtypes)]
        self.device = b.device
        self.strides = [0] * sum(L.meta.tensor_ndim.values())   # (the launcher reads none)

    def __call__(self, args):
        """Launch on ``args`` (positional, of the signature planned); returns the output, or the tuple
        of them."""
        return self.into(args, [torch.empty(shape, dtype=dt, device=self.device) for shape, dt in self.allocs])

    def takes(self, outs: Sequence[torch.Tensor]) -> bool:
        """Whether ``outs`` (one tensor per output) can be the outputs: their shapes and dtypes, on the
        device, contiguous and 16-byte aligned (descriptors are built on them)."""
        return len(outs) == len(self.allocs) and all(
            tuple(t.shape) == shape and t.dtype == dt and t.device == self.device and t.is_contiguous()
            and t.data_ptr() % 16 == 0 for t, (shape, dt) in zip(outs, self.allocs))

    def into(self, args, outs: Sequence[torch.Tensor]):
        """Launch on ``args`` writing ``outs`` (which :meth:`takes` accepted); returns the output, or the
        tuple of them."""
        call = ([args[p] for p in self.inputs] + [outs[i] for i in self.order] + self.strides
                + [args[p] for p in self.scalars])
        self.kind.launch(self.fn, call, self.meta)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def packed(self, keep: int, remap=None, buffers: bool = True) -> None:
        """No packed variant (an autograd step keeps saved values as separate tensors)."""
        return None
