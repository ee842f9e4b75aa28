"""Reading a saved forward output where the backward recomputes it (a rewrite of the derived graph).

A forward output named in ``save=`` (:func:`~dtriton.grad.grad`) is a parameter of the backward
(``saved_<stage>``, laid out as the output). The derivation itself recomputes the forward values
it needs from the inputs and the saved reduction stages; :func:`read_saved_values` then replaces,
in the derived expressions, every product whose factors include all the factors of a saved value
by a load of that value times the remaining factors. Products are compared as flattened
``sign * prod(num) / prod(den)`` (:meth:`Graph.factors`) with the factors as multisets of graph
nodes; the graph hash-conses, so one node is one expression over the same indices. A value that is
no product (a reduction, an exponential, a cast) matches where it occurs as a node.

The diffusion layer's ``spectral = exp(-evals t) * proj`` is the example: the derived gradient of
the times is ``sum over k of -(gs * proj * exp(-evals t) * evals)``, which becomes
``sum over k of -(gs * saved_spectral * evals)``, the hand-written backward's expression.

Only exact factor matches are rewritten: a product holding some of the factors (``exp(-evals t)``
alone, in the layer's gradient of x) is left as it is, and so is a value over other axes (a renamed
copy of a factor is another node). The results equal the recomputation up to rounding.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from ..ir import Binary, Expr, topo_order
from .graph import Graph

__all__ = ["read_saved_values"]


def _uids(xs: Sequence[Expr]) -> Counter:
    return Counter(x.uid for x in xs)


def _without(xs: Sequence[Expr], drop: Counter) -> list[Expr]:
    """``xs`` less one occurrence per count in ``drop`` (by node id), in order."""
    left = Counter(drop)
    out = []
    for x in xs:
        if left[x.uid] > 0:
            left[x.uid] -= 1
        else:
            out.append(x)
    return out


def _reads_of(g: Graph, roots: Sequence[Expr], value: Expr, load: Expr) -> dict[int, Expr]:
    """Node id -> replacement for the nodes under ``roots`` that equal ``value`` (the node itself) or
    are products holding all of its factors (``load``: the saved value)."""
    repl = {value.uid: load}
    sign0, num0, den0 = g.factors(value)
    if len(num0) + len(den0) < 2:
        return repl
    need_n, need_d = _uids(num0), _uids(den0)
    for x in topo_order(list(roots)):
        if x.uid in repl or not (isinstance(x, Binary) and x.op in ("mul", "div")):
            continue
        sign, num, den = g.factors(x)
        have_n, have_d = _uids(num), _uids(den)
        if all(have_n[u] >= c for u, c in need_n.items()) and all(have_d[u] >= c for u, c in need_d.items()):
            # x = sign * P * rest with P = sign0 * prod(num0) / prod(den0) (sign0 * sign0 = 1)
            # the saved value last: the rest keeps the derived order (compiled for sm_90, the
            # diffusion layer's gradient of the times is 176 SASS instructions and 512 bytes of
            # shared memory so, 392 and 2048 with the value first, as the kernel loads it first)
            rest = g.product(1, _without(num, need_n), _without(den, need_d))
            r = g.mul(rest, load)
            repl[x.uid] = g.neg(r) if sign * sign0 < 0 else r
    return repl


def read_saved_values(g: Graph, grads: dict[str, tuple[Expr, tuple[str, ...]]],
                      saved: Sequence[tuple[Expr, Expr]]) -> dict[str, tuple[Expr, tuple[str, ...]]]:
    """``grads`` (input name -> (expression, layout), nodes of ``g``) with each saved value read where
    the expressions recompute it: ``saved`` lists ``(value, load)``, the forward value (a node of ``g``,
    cloned from the forward) and the load of the parameter holding it, along its axes. Values are
    taken in order; a product holding the factors of two of them reads the first. Returns the
    rewritten dict (same keys and layouts)."""
    for value, load in saved:
        roots = [e for e, _ in grads.values()]
        new = g.substitute(roots, _reads_of(g, roots, value, load))
        grads = {n: (new[e.uid], lay) for n, (e, lay) in grads.items()}
    return grads
