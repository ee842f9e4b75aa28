"""Walks over one kernel's expressions that the plan's decisions share.

A kernel computes its *fused* reductions itself and reads *materialised* ones from buffers
(``materialized``: Reduce node id -> buffer), so every walk here stops at a materialised reduction.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ..ir import Axis, Expr, Load, Reduce, walk
from ..ir import contains as ir_contains

__all__ = ["contains", "fused_deps", "fused_reduces", "has", "need_axes"]


def has(seq: Iterable[Expr], x: Expr) -> bool:
    """Identity membership (``==`` on expressions builds a comparison node)."""
    return any(e is x for e in seq)


def fused_deps(r: Reduce, materialized: Mapping[int, object]) -> list[Reduce]:
    """The fused reductions ``r``'s body uses directly (not those nested inside them)."""
    return [n for n in walk(list(r.x.children()) + [r.x], stop=lambda n: isinstance(n, Reduce))
            if isinstance(n, Reduce) and n.uid not in materialized]


def fused_reduces(roots: Iterable[Expr], materialized: Mapping[int, object]) -> list[Reduce]:
    """Every fused reduction reachable from ``roots`` (outermost last, as the printer walks them)."""
    post = [n for n in walk(list(roots), stop=lambda n: isinstance(n, Reduce) and n.uid in materialized)
            if isinstance(n, Reduce) and n.uid not in materialized]
    return post[::-1]


def contains(n: Expr, target: Expr, materialized: Mapping[int, object]) -> bool:
    """Whether ``target`` occurs in ``n`` (not looking inside other materialised reductions)."""
    return ir_contains(n, target, stop=lambda x: isinstance(x, Reduce) and x is not target and x.uid in materialized)


def need_axes(n: Expr, materialized: Mapping[int, object], ignore: frozenset = frozenset(),
              memo: dict | None = None) -> frozenset:
    """The axes whose bindings place ``n``: the axes it reads that are not reduced inside it
    (a fused reduction also needs its own free axes). A value is computed in the innermost scope
    that binds one of them."""
    memo = {} if memo is None else memo
    key = (n.uid, ignore)
    if key in memo:
        return memo[key]
    if isinstance(n, Axis):
        out = frozenset() if n.name in ignore else frozenset((n.name,))
    elif isinstance(n, Reduce) and n.uid in materialized:
        out = frozenset(a for a in n.axes if a not in ignore)
    elif isinstance(n, Reduce):
        out = need_axes(n.x, materialized, ignore | frozenset(n.over), memo) | frozenset(n.axes)
    else:
        acc: set[str] = set()
        for c in n.children():
            acc |= need_axes(c, materialized, ignore, memo)
        if isinstance(n, Load):
            acc |= {e.name for e in n.index if isinstance(e, Axis) and e.name not in ignore}
        out = frozenset(acc)
    memo[key] = out
    return out
