"""One saved log-sum-exp statistic in place of a stabilising max and its sum of exponentials.

A softmax-weighted reduction (softmax, log-softmax, cross-entropy, attention) computes a row max
``m`` and a row sum ``l = sum over R of exp(y - m)``; its outputs do not change when ``m`` is
shifted (:mod:`.shift`), so the derived backward is the exact gradient whatever value ``m`` holds,
as long as every stage that depends on ``m`` is taken at that same value. At the value
``lse = m + log(l)`` the sum is exactly 1: ``l(lse) = l * exp(-(lse - m)) = 1``. Saving the one
statistic ``lse`` (per row, fp32) instead of the pair, the backward reads it in place of ``m`` and
the constant 1 in place of ``l``: ``exp(s - m) / l`` becomes ``exp(s - lse)``, and the quotient
derivative's divisions by ``l`` and ``l * l`` vanish (the graph builder folds them as it rebuilds
the backward, :meth:`~dtriton.grad.graph.Graph.substitute`).

Other saved stages that depend on ``m`` are saved at the shift ``lse``: a sum multiplied by
``exp(k * d)`` when ``m`` shifts by ``d`` is saved times ``l**k`` (attention's unnormalised
``sum1 = sum over j of exp(s - m) * V`` becomes ``sum1 / l``, the normalised output itself). Any
other dependence prevents the rule (:func:`~dtriton.grad.saved_statistics` keeps the pair then):
a max or min that moves with ``m`` is exact in real arithmetic at the shift, but the backward finds
its arg-extremum by comparing it for equality with values it recomputes, and ``max(y + lse)``
rounded is not ``max(y + m) + log(l)`` rounded.

The statistic is named ``lse_<max stage>_<sum stage>``; :func:`~dtriton.grad.grad` (``save=``) and
:func:`~dtriton.grad.augmented_forward` take the name like a stage name.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import AlgorithmError
from ..ir import Algorithm, Expr, Reduce, Unary, reduction_stages
from .graph import Graph
from .shift import shift_class

__all__ = ["lse_statistics", "stage_shifts", "at_lse", "lse_value", "rescalable"]


def _invariant(cls: dict[int, Any], roots: Sequence[Expr]) -> bool:
    """Whether no root changes under the shift (every root unchanged or independent)."""
    return all(r.uid not in cls or (cls[r.uid] is not None and cls[r.uid][1] == 0) for r in roots)


def lse_statistics(alg: Algorithm) -> dict[str, tuple[str, str]]:
    """The log-sum-exp statistics ``alg`` allows: name -> (max stage, sum stage), for each ``max``
    stage no output changes under shifting, paired with the first ``sum`` stage over an ``exp``
    whose free axes are the max's (in order) and which is multiplied by ``exp(-d)`` when the max
    shifts by ``d`` (``sum over R of exp(y - m)``, positive, so its log is defined)."""
    order = list(alg.nodes)
    roots = [o.expr for o in alg.outputs]
    stages = reduction_stages(alg)
    out: dict[str, tuple[str, str]] = {}
    for s in stages:
        m = s.node
        if m.combiner.name != "max":
            continue
        cls = shift_class(m, order)
        if not _invariant(cls, roots):
            continue
        for t in stages:
            ln = t.node
            if (ln.combiner.name == "sum" and tuple(ln.axes) == tuple(m.axes) and isinstance(ln.x, Unary)
                    and ln.x.op == "exp" and cls.get(ln.uid) == ("m", -1)):
                out[f"lse_{s.name}_{t.name}"] = (s.name, t.name)
                break
    return out


def stage_shifts(alg: Algorithm, max_stage: str) -> dict[str, Any]:
    """Per reduction stage of ``alg`` that depends on ``max_stage``, how it changes when that max
    shifts by ``d`` (:mod:`.shift`: ``("m", k)`` multiplied by ``exp(k * d)``, ``("a", k)`` moved
    by ``k * d``, ``None`` unknown). Stages independent of the max are absent."""
    cls = shift_class(alg.stages[max_stage].node, list(alg.nodes))
    return {s.name: cls[s.node.uid] for s in reduction_stages(alg) if s.node.uid in cls}


def lse_value(g: Graph, m: Expr, ln: Expr) -> Expr:
    """The graph expression ``m + log(l)`` (the statistic the saving forward stores)."""
    return g.add(m, g.raw_unary("log", ln))


def rescalable(node: Expr, shift: Any) -> bool:
    """Whether a saved stage (``node``) that changes by ``shift`` under a shift of the max
    (:func:`stage_shifts`) can be saved at the log-sum-exp shift: unchanged, or a sum multiplied by
    ``exp(k * d)``."""
    if shift is not None and shift[1] == 0:
        return True
    return (shift is not None and shift[0] == "m" and isinstance(node, Reduce)
            and node.combiner.grad == "sum")


def at_lse(g: Graph, stage: str, node: Expr, shift: Any, ln: Expr) -> Expr:
    """The graph expression of the saved stage ``stage`` (graph node ``node``) at the shift
    ``lse = m + log(l)`` (``ln``: the sum's graph node), given how it changes under a shift of the max
    (``shift``, :func:`stage_shifts`). Raises :class:`AlgorithmError` unless :func:`rescalable`."""
    if not rescalable(node, shift):
        raise AlgorithmError(f"the saved stage {stage!r} depends on the max of a log-sum-exp statistic other than as "
                             "a sum scaled by exp(-max) (see dtriton.grad.logsumexp); save the max and sum stages "
                             "instead of the statistic")
    k = shift[1]
    if k == 0:
        return node
    if k == -1:
        return g.div(node, ln)
    if k == 1:
        return g.mul(node, ln)
    return g.mul(node, g.raw_unary("exp", g.mul(g.const(k), g.raw_unary("log", ln))))
