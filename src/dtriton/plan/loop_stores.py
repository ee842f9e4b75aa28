"""In-loop atomic outputs: a sum whose partial sums another kernel adds inside its loop.

The derived attention backward computes ``dQ[b, h, i, d] = sum over j of dS[b, h, i, j] * K[b, h, j, d]``
from the same score tiles ``dS`` as ``dK`` and ``dV``, which the kernel over key tiles (grid
``(b, h, j)``, looping over the queries ``i``) recomputes anyway. A second kernel over query tiles
recomputes them again for dQ (FlashAttention-2's Triton form: 7 products of S x T x D per
backward). A sum stage placed ``"atomic"`` (``StageSchedule(place="atomic")``) is instead
materialised by that kernel: after each step of its loop over ``i``, the program's partial sum over
its tile of ``j`` (one ``tl.dot``) is added with fp32 atomics into a zeroed buffer, which the
stage's readers (the output kernel: ``scale * dQ`` cast to the output's dtype) read as any
materialised stage (5 products; FlashAttention-2's own CUDA backward). The order in which the
programs' atomics add up varies from run to run: the result is not bit-reproducible (the two-kernel
form is).

Two decisions, both here:

- :func:`host_group` (lowering): the output group whose kernel hosts the stage ``r``: its grid axes
  are ``r``'s kept or reduced axes (some reduced: each program adds a partial sum), its program
  binds every reduced axis of ``r`` (grid or whole), the kept axes it does not bind are exactly
  the looped axes of one of its reductions (the loop the store rides), it touches every axis of
  ``r``'s body and does not read ``r`` itself;
- :func:`plan_loop_stores` (per kernel, after passes and bounds): the pass whose loop each such
  store is printed in (``KernelPlan.loop_stores``); the stage must be a contraction there (a
  ``tl.dot``, whose result is the partial sum). Loop bounds from a mask (causal attention) stay
  only where the stage is guarded by the same condition as the pass (tiles the bounds skip add
  nothing to it): :func:`loop_store_bounds`.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..errors import ScheduleError
from ..ir import Expr, Output, Reduce, reduces_in, reduction_guard
from .kernel import KernelPlan, LoopBounds
from .passes import top_bound

__all__ = ["host_group", "loop_store_bounds", "plan_loop_stores"]


def host_group(r: Reduce, groups: Sequence[list[Output]], grid_of: Callable[[str], list[str]],
               top_of: Callable[[str, Sequence[Expr]], set[str]],
               axes_of: Callable[[Sequence[Expr], Sequence[Reduce]], list[str]], mat: set[int]) -> int:
    """The index in ``groups`` of the output group whose kernel adds the partial sums of the sum
    stage ``r`` inside its loop (module docstring). ``grid_of(stage)``: the grid of the kernel
    scheduled by that output stage; ``top_of(stage, exprs)``: the axes its program binds;
    ``axes_of(exprs, tops)``: every axis a kernel computing ``exprs`` (and the materialised
    ``tops`` itself) touches; ``mat``: the materialised reductions' ids.

    Raises:
        ScheduleError: no group's kernel can host it, naming the stage, what a host needs, and
            the fix (place "materialize" or "auto").
    """
    for n, g in enumerate(groups):
        hexprs = [o.expr for o in g]
        grid, top = grid_of(g[0].name), top_of(g[0].name, hexprs)
        if not set(grid) <= set(r.axes) | set(r.over) or not set(grid) & set(r.over) or not set(r.over) <= top:
            continue
        missing = {a for a in r.axes if a not in top}
        fused = [q for q in reduces_in(hexprs, mat) if q.uid not in mat]
        if not missing or not any({a for a in q.over if a not in top} == missing for q in fused):
            continue
        if any(q is r for q in reduces_in(hexprs, mat)):
            continue
        if set(axes_of([r], [r])) <= set(axes_of(hexprs, ())):
            return n
    raise ScheduleError(
        f"stage {r.name!r} (place='atomic') needs a kernel that adds its partial sums inside a loop: one whose grid "
        f"holds some of its reduced axes {list(r.over)} and only axes of {r.name!r}, whose program binds all of "
        f"{list(r.over)}, and which loops over the rest of {list(r.axes)} for a reduction of its own (the attention "
        f"backward's dK/dV kernel for dQ); no output's kernel does here. Use place='materialize' (a kernel of its "
        "own) or 'auto'")


def plan_loop_stores(k: KernelPlan) -> dict[str, tuple[int, ...]]:
    """In-loop store target -> the reduction ids of the pass of ``k``'s program scope in whose loop
    it is printed (after each step). Needs the kernel's dots and passes decided.

    Raises:
        ScheduleError: the stage is not a contraction in ``k`` (its partial sum is one ``tl.dot``:
            a sum of products of two operands, each with one of its kept axes, tiles >= 16).
    """
    bound = top_bound(k)
    out: dict[str, tuple[int, ...]] = {}
    for st in k.stores:
        if not st.in_loop:
            continue
        r = st.expr
        if r.uid not in k.dots:
            raise ScheduleError(
                f"stage {r.name!r} (place='atomic') is not a contraction (tl.dot) in kernel {k.name}, which adds its "
                f"partial sums in its loop: it must be a sum of products of two operands, the tiles of its axes "
                f"{list(r.axes)} and {list(r.over)} at least 16. Use place='materialize' or 'auto'")
        loop = {a for a in st.layout if a not in bound}
        p = next((p for p in k.passes if set(p.loop_axes) == loop), None)
        if p is None:
            raise AssertionError(f"kernel {k.name}: no pass loops over {sorted(loop)} for the store of {st.target}")
        if p.online:
            raise ScheduleError(
                f"stage {r.name!r} (place='atomic') would ride the online loop over {sorted(loop)} of kernel {k.name}, "
                "whose running maxima rescale its values at every step; use place='materialize' or 'auto'")
        out[st.target] = p.reductions
    return out


def loop_store_bounds(k: KernelPlan) -> dict[tuple[int, ...], LoopBounds]:
    """``k``'s loop bounds without those of a pass hosting an in-loop store whose sum another
    condition guards (or none): the tiles the bounds skip would hold lanes of it. Needs
    ``k.loop_stores`` and ``k.bounds`` decided."""
    out = dict(k.bounds)
    by_target = {st.target: st for st in k.stores}
    by_id = {r.uid: r for st in k.stores for r in reduces_in([st.expr], k.materialized)}
    for target, key in k.loop_stores.items():
        if key not in out or not key or key[0] not in by_id:
            out.pop(key, None)
            continue
        cond = reduction_guard(by_id[key[0]])
        if cond is None or reduction_guard(by_target[target].expr) is not cond:
            out.pop(key, None)
    return out
