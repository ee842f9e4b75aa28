"""Multi-output kernels: which outputs and materialised reductions share one kernel.

:func:`dtriton.plan.lower.lower` first places every reduction (fused or materialised) and groups
outputs with the same axes and the same stage schedule. With the schedule's ``fuse_outputs`` on
(the default), two more groupings follow, decided here before any kernel is built:

- :func:`reduction_groups`: materialised reductions over the same axes with the same kept axes, the
  same kernel schedule (grid, stage overrides) and the same kind of buffer (atomic, per-split
  partials) are computed by one kernel: one pass over the reduced axes with one accumulator each,
  and one store each (layer norm's dw and db: two column sums of the same rows; a sum beside a sum
  of squares). A member never depends on another (directly or through other materialised
  reductions), and no two groups depend on each other, so the kernels still run in data-flow order.
- :func:`merge_output_groups`: an output group joins the kernel of a group with as many axes or
  more (the larger first, then the earlier) when the host's program computes it without extra
  loops: the host's grid axes are all among its axes, its axes are all bound by the host's program
  (grid or "whole"), and each reduction it reads directly is computed once per host program (its
  kept axes bound there, none of its reduced axes on the host's grid; reductions nested in those
  run inside their loops, as in the host). A layer norm returning ``y[i, j]``, ``mean[i]`` and
  ``rstd[i]`` is then one kernel storing the row statistics once per row; the attention
  backward's ``dK[b, h, j, d]`` and ``dV[b, h, j, e]`` on a grid over (b, h, j) with the head dims
  whole are one kernel looping once over the queries with two accumulators (FlashAttention-2's).
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..ir import Expr, Output, Reduce, walk

__all__ = ["merge_output_groups", "reduction_groups"]


def _closure(rid: int, direct: dict[int, list[int]]) -> set[int]:
    """The materialised reductions ``rid`` reads, directly or through others."""
    seen: set[int] = set()
    stack = list(direct.get(rid, ()))
    while stack:
        d = stack.pop()
        if d not in seen:
            seen.add(d)
            stack.extend(direct.get(d, ()))
    return seen


def _acyclic(groups: list[list[int]], reach: dict[int, set[int]]) -> bool:
    """Whether the groups (lists of reduction ids) can run in some order: no group reads, through
    the materialised reductions, a result of a group that reads one of its own."""
    owner = {r: k for k, g in enumerate(groups) for r in g}
    after = {k: {owner[d] for r in g for d in reach[r] if d in owner} - {k} for k, g in enumerate(groups)}
    state: dict[int, int] = {}

    def visit(k: int) -> bool:
        if state.get(k) == 1:
            return False
        if state.get(k) == 2:
            return True
        state[k] = 1
        ok = all(visit(j) for j in after[k])
        state[k] = 2
        return ok
    return all(visit(k) for k in range(len(groups)))


def reduction_groups(order: Sequence[Reduce], key: Callable[[Reduce], object],
                     direct: dict[int, list[int]]) -> dict[int, list[int]]:
    """Group the materialised reductions ``order`` (in algorithm order) that one kernel computes.

    ``key(r)``: what members of a group share (kept and reduced axes, kernel schedule, buffer
    kind); ``direct``: reduction id -> the materialised reductions its kernel reads. Returns
    reduction id -> the ids of its group in order (every id of ``order`` is a key; a reduction
    alone maps to ``[its id]``)."""
    reach = {r.uid: _closure(r.uid, direct) for r in order}
    groups: list[list[int]] = []
    keys: list[object] = []
    for r in order:
        placed = False
        for k, g in enumerate(groups):
            if keys[k] != key(r) or any(r.uid in reach[m] or m in reach[r.uid] for m in g):
                continue
            trial = [list(x) for x in groups]
            trial[k].append(r.uid)
            if _acyclic(trial, reach):
                g.append(r.uid)
                placed = True
                break
        if not placed:
            groups.append([r.uid])
            keys.append(key(r))
    return {rid: g for g in groups for rid in g}


def merge_output_groups(groups: list[list[Output]], grid_of: Callable[[str], list[str]],
                        top_of: Callable[[str, Sequence[Expr]], set[str]],
                        axes_of: Callable[[Sequence[Expr]], list[str]], mat: set[int]) -> list[list[Output]]:
    """Merge each output group into a host group's kernel where that is legal (see the module
    docstring); returns the groups left, each host followed by the outputs that joined it.

    ``grid_of(stage)``: the grid of the kernel scheduled by that output stage; ``top_of(stage,
    exprs)``: the axes its program binds (grid and "whole"); ``axes_of(exprs)``: every axis a kernel
    computing ``exprs`` touches; ``mat``: the ids of the materialised reductions."""
    joined = {id(g): list(g) for g in groups}
    merged: set[int] = set()
    pos = {id(g): k for k, g in enumerate(groups)}
    # the largest layouts first: a group has settled whether it joins another before it hosts any
    order = sorted(groups, key=lambda x: (-len(x[0].layout), pos[id(x)]))
    for n, g in enumerate(order):
        for h in order[:n]:
            if id(h) not in merged and _joins(g, h, grid_of, top_of, axes_of, mat):
                joined[id(h)].extend(joined[id(g)])
                merged.add(id(g))
                break
    return [joined[id(g)] for g in groups if id(g) not in merged]


def _joins(g: list[Output], h: list[Output], grid_of, top_of, axes_of, mat: set[int]) -> bool:
    """Whether output group ``g`` can be computed in host ``h``'s kernel once per host program."""
    hname = h[0].name
    hexprs = [o.expr for o in h]
    grid = grid_of(hname)
    top = top_of(hname, hexprs)
    lay = set(g[0].layout)
    gexprs = [o.expr for o in g]
    if not set(grid) <= lay or not lay <= top:
        return False
    if not set(axes_of(gexprs)) <= set(axes_of(hexprs)):
        return False
    # the reductions the outputs read directly (those nested in them run inside their loops)
    outer = [n for n in walk(gexprs, stop=lambda n: isinstance(n, Reduce)) if isinstance(n, Reduce)]
    for r in outer:
        if r.uid in mat:
            continue
        if not set(r.axes) <= top or set(r.over) & set(grid):
            return False
    return True
