"""From a derivation's graph to ordinary algorithms: fresh nodes, parameters and stage names.

The derivation's :class:`~dtriton.grad.graph.Graph` is shared by all gradients; each backward
algorithm is a fresh copy of the part its outputs reach (:class:`Finalizer`), with saved forward
stages replaced by loads of parameters. :func:`group_gradients` decides which gradients share an
algorithm. :func:`copy_nodes` is the plain fresh copy, also used to stage an algorithm.
"""

from __future__ import annotations

from itertools import chain, count
from typing import Any, Callable, Sequence

import torch

from ..errors import AlgorithmError
from ..ir import Algorithm, Axis, Binary, Const, Expr, InputTensor, Load, Output, Reduce, ScalarParam, Where, topo_order
from .derive import Deriver
from .naming import first_free

__all__ = ["Finalizer", "group_gradients", "copy_nodes", "param_spec", "make_params", "ParamEntry"]

#: one parameter: ("tensor", name, dims) or ("scalar", name, python type)
ParamEntry = tuple[str, str, Any]


def param_spec(alg: Algorithm) -> list[ParamEntry]:
    """The parameters of ``alg`` as specs, in order."""
    return [("tensor", p.name, p.dims) if isinstance(p, InputTensor) else ("scalar", p.name, p.pytype)
            for p in alg.params]


def make_params(spec: Sequence[ParamEntry], weak: frozenset = frozenset()) -> list[InputTensor | ScalarParam]:
    """Fresh parameter objects for ``spec`` (a tensor's position is its index in ``spec``); the
    tensors named in ``weak`` promote as scalars do (saved statistics)."""
    return [InputTensor(name, tuple(info), k, name in weak) if kind == "tensor" else ScalarParam(name, info)
            for k, (kind, name, info) in enumerate(spec)]


def copy_nodes(order: Sequence[Expr], params: dict[str, Any], replace: dict[int, tuple[str, tuple[str, ...]]],
               reduce_name: Callable[[Reduce], str | None] | None = None) -> dict[int, Expr]:
    """Fresh copies of the nodes of ``order`` (children first), by old node id. Loads and scalars
    use the parameter objects ``params`` (by name); a node whose id is in ``replace`` (id -> (tensor
    parameter name, axes)) becomes a load of that parameter along those axes. A copied reduction is
    named ``reduce_name(old node)`` (default: its own name), called in ``order``."""
    new: dict[int, Expr] = {}
    for n in order:
        if n.uid in replace:
            pname, axes = replace[n.uid]
            r: Expr = Load(params[pname], tuple(Axis(a) for a in axes))
        elif isinstance(n, ScalarParam):
            r = params[n.name]
        else:
            kids = [new[c.uid] for c in n.children()]
            if isinstance(n, Load):
                r = Load(params[n.tensor.name], tuple(kids), n.pad)
            elif isinstance(n, Reduce):
                r = Reduce(n.combiner, kids[0], n.over, n.name if reduce_name is None else reduce_name(n))
            else:
                r = n.rebuild(kids)
        new[n.uid] = r
    return new


def group_gradients(grads: dict[str, tuple[Expr, tuple[str, ...]]], order: Sequence[str],
                    mode: str) -> list[list[str]]:
    """Which gradients (names in ``order``, those in ``grads``) share a backward algorithm:
    ``"none"``/``"separate"`` one each, ``"all"`` one in total, ``"auto"`` together (transitively)
    those that share a reduction node, and those that are each one reduction over the same axes
    with the same layout (layer norm's dw and db: two column sums of the same rows, which one
    multi-output kernel computes in one pass)."""
    names = [n for n in order if n in grads]
    if mode in ("none", "separate"):
        return [[n] for n in names]
    if mode == "all":
        return [names] if names else []
    if mode != "auto":
        raise ValueError(f"group must be 'auto', 'all' or 'none', got {mode!r}")
    reds = {n: {x.uid for x in topo_order([grads[n][0]]) if isinstance(x, Reduce)} for n in names}
    for n in names:
        e, lay = grads[n]
        if isinstance(e, Reduce):   # a shared key joins same-shaped column reductions
            reds[n].add(("sum_of", tuple(lay), frozenset(e.over)))
    parent = {n: n for n in names}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x
    for k, a in enumerate(names):
        for b in names[k + 1:]:
            if reds[a] & reds[b]:
                parent[find(b)] = find(a)
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(find(n), []).append(n)
    return list(groups.values())


class Finalizer:
    """Copies the reachable part of the derivation's graph into fresh nodes for one algorithm: fresh
    parameters, stage names, saved stages replaced by loads, size carriers where needed.

    ``spec``: the parameters of every algorithm built (:data:`ParamEntry` list); ``saved_map``: graph
    Reduce id -> (parameter name, axes) for the stages read from a parameter."""

    def __init__(self, d: Deriver, spec: Sequence[ParamEntry], saved_map: dict[int, tuple[str, tuple[str, ...]]]):
        self.d = d
        self.spec = list(spec)
        self.saved_map = saved_map

    def build(self, name: str, outs: list[tuple[Expr, tuple[str, ...]]], doc: str,
              carriers: Sequence[str | None], floors: Sequence[torch.dtype | None] = ()) -> Algorithm:
        """The algorithm ``name`` computing ``outs`` (``(graph expression, layout)`` each). An output
        axis is sized by a tensor it indexes or by its size symbol (the graph's axes carry the
        forward's, e.g. ``h:Ho`` of an axis only inside index expressions); one with neither, or
        no axis of its value, gets its size from the tensor ``carriers[k]`` (a zero term that loads
        it); ``None``: an :class:`AlgorithmError` naming ``name`` if needed. ``floors[k]``: the float
        dtype output ``k`` is stored in at least (:attr:`Output.floor`; missing or ``None``: its
        result dtype)."""
        g = self.d.g
        params = make_params(self.spec, frozenset(pn for pn, _ in self.saved_map.values()))
        by_name = {p.name: p for p in params}
        used_names = {"out"} | {f"out{k}" for k in range(len(outs))}
        order = topo_order([e for e, _ in outs])
        # forward reductions that stay keep their names; the rest get their hints
        for n in order:
            if isinstance(n, Reduce) and n.name and n.uid not in self.saved_map:
                used_names.add(n.name)

        def uniq(n: Reduce) -> str:
            if n.name:
                return n.name
            base = g.hint.get(n.uid, "d_sum")
            return first_free(chain([base], (f"{base}_{k}" for k in count(2))), used_names)

        new = copy_nodes(order, by_name, self.saved_map, uniq)
        axes_sized: set[str] = set()
        for n in order:
            if n.uid in self.saved_map:
                axes_sized.update(self.saved_map[n.uid][1])
            elif isinstance(n, Load):
                axes_sized.update(e.name for e in n.index if isinstance(e, Axis))
            elif isinstance(n, Axis) and n.size is not None:
                # an axis declared with its size symbol (``dt.axes("h:Ho")``, or the graph's size of
                # an axis that only appears inside index expressions): Algorithm.build sizes it
                axes_sized.add(n.name)
        floors = list(floors) + [None] * (len(outs) - len(floors))
        outputs = [self._output(name, new[e.uid], layout, carrier, axes_sized, by_name, floor)
                   for (e, layout), carrier, floor in zip(outs, carriers, floors)]
        return Algorithm.build(name, params, outputs, doc=doc)

    def _output(self, name: str, expr: Expr, layout: tuple[str, ...], carrier: str | None, axes_sized: set[str],
                params: dict[str, Any], floor: torch.dtype | None = None) -> Output:
        missing = [a for a in layout if a not in axes_sized or a not in expr.axes]
        if missing:
            # an output axis that indexes no tensor has no known size, and one the gradient does
            # not depend on (the gradient of a mean is the same for every element) is no axis of
            # the value: add a term that is exactly zero and loads the differentiated input along
            # the output axes
            if carrier is None:
                raise AlgorithmError(
                    f"dt.grad: output axes {missing} of {name} (derived from {self.d.alg.name}) index no tensor, "
                    "have no declared size, or are no axes of its value, and no input carries them")
            ld = Load(params[carrier], tuple(Axis(a) for a in layout))
            expr = Binary("add", expr, Where(Binary("ne", ld, ld), Const(0.0), Const(0.0)))
        return Output(expr, tuple(layout), floor=floor)
