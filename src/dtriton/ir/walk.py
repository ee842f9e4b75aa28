"""The graph walks of the IR, in one place.

Every walk visits each node once, by identity (``==`` on expressions builds a node, so nothing
here compares nodes with ``==``). Two orders exist:

- :func:`topo_order`: children before parents (first child first), for passes that build bottom-up;
- :func:`walk`: depth first with a stack, a parent before its children and the *last* child
  first; a node for which ``stop`` holds is visited but not entered (used for "do not cross a
  materialised stage").
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from .expr import Binary, Cast, Expr, Load, Reduce

__all__ = ["topo_order", "walk", "reduces_in", "mul_factors", "contains", "expr_axes", "float_inputs"]


def topo_order(roots: Sequence[Expr]) -> list[Expr]:
    """All nodes reachable from ``roots``, children before parents."""
    seen: set[int] = set()
    order: list[Expr] = []
    stack: list[tuple[Expr, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if n.uid in seen:
            continue
        seen.add(n.uid)
        stack.append((n, True))
        for c in reversed(n.children()):
            if c.uid not in seen:
                stack.append((c, False))
    return order


def walk(roots: Sequence[Expr], stop: Callable[[Expr], bool] | None = None,
         children: Callable[[Expr], Sequence[Expr]] | None = None) -> Iterator[Expr]:
    """Every node reachable from ``roots``, once each: a stack seeded with ``roots`` (the last root
    is taken first), a node before its children, the last child first. A node for which
    ``stop(node)`` is true is yielded but its children are not entered from it. ``children(node)``,
    when given, replaces ``node.children()`` as the nodes entered from it (e.g. a product's
    factors instead of its binary tree)."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n.uid in seen:
            continue
        seen.add(n.uid)
        yield n
        if stop is not None and stop(n):
            continue
        stack.extend(n.children() if children is None else children(n))


def reduces_in(roots: Sequence[Expr], stop_ids: set[int] | frozenset[int]) -> list[Reduce]:
    """Reduce nodes reachable from each root without crossing materialised reductions
    (``stop_ids``: their ids); a root that is itself materialised is entered (it is computed
    there). In walk order per root, each reduction once."""
    out: list[Reduce] = []
    found: set[int] = set()
    for root in roots:
        for n in walk([root], stop=lambda n, root=root: n.uid in stop_ids and n is not root):
            if isinstance(n, Reduce) and n.uid not in found:
                found.add(n.uid)
                out.append(n)
    return out


def mul_factors(n: Expr) -> list[Expr]:
    """The factors of a product tree ``a * b * ...`` from left to right (``[n]`` for a non-product)."""
    if isinstance(n, Binary) and n.op == "mul":
        return mul_factors(n.a) + mul_factors(n.b)
    return [n]


def contains(n: Expr, target: Expr, stop: Callable[[Expr], bool] | None = None) -> bool:
    """Whether ``target`` (by identity) is reachable from ``n``; nodes for which ``stop`` holds
    are not entered (but may be the target)."""
    return any(x is target for x in walk([n], stop=stop))


def expr_axes(root: Expr) -> list[str]:
    """Every axis an expression touches, reduced axes included, in first-seen order."""
    ax: list[str] = []
    for n in topo_order([root]):
        ax.extend(n.axes)
        if isinstance(n, Reduce):
            ax.extend(n.over)
    return list(dict.fromkeys(ax))


def float_inputs(root: Expr) -> list[str]:
    """Tensors whose values flow into ``root`` arithmetically, one entry per load, in walk order.
    Gather indices, cast operands and the operands of arg-reductions (whose value is an integer
    index, whatever the dtype of what they compare) do not."""
    def stop(n: Expr) -> bool:
        return isinstance(n, (Load, Cast)) or (isinstance(n, Reduce) and n.combiner.results == 2)
    return [n.tensor.name for n in walk([root], stop=stop) if isinstance(n, Load)]
