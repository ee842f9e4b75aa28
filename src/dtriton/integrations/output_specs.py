"""Shapes and dtypes of an algorithm's outputs for a call, without running anything:
:func:`output_specs` (what ``as_torch_op``'s fake implementation returns)."""

from __future__ import annotations

from typing import Any

import torch

from ..ir import Algorithm, InputTensor, output_dtypes

__all__ = ["output_specs"]


def _sizes(alg: Algorithm, args) -> dict[str, Any]:
    """Size symbol -> size (an int or a symbolic size) from the tensor arguments' shapes and the
    int arguments that size axes (``dt.axes("h:Ho")``: a convolution's or pooling's output)."""
    sizes: dict[str, Any] = {}
    for p, a in zip(alg.params, args):
        if isinstance(p, InputTensor):
            for d, n in zip(p.dims, a.shape):
                sizes.setdefault(d, n)
    for sym, pos in alg.size_args.items():
        sizes[sym] = args[pos]
    return sizes


def output_specs(alg: Algorithm, args) -> list[tuple[list[Any], torch.dtype]]:
    """Shape and dtype of each output of ``alg`` for a call with ``args`` (works on fake tensors
    and symbolic sizes: nothing is converted to int). The dtype follows the runtime's rule
    (:func:`~dtriton.ir.output_dtypes`): torch's promotion (int64 for an arg-reduction and for sums
    and products of integers, float32 for divisions, means and float functions of integers and for
    expressions of scalars only), at least float32 for the statistics a saving forward stores."""
    sizes = _sizes(alg, args)
    dtypes = {p.name: a.dtype for p, a in zip(alg.params, args) if isinstance(p, InputTensor)}
    return [([sizes[alg.axis_size[a]] for a in o.layout], dt_) for o, dt_ in zip(alg.outputs, output_dtypes(alg, dtypes))]
