"""Loop bounds from masks: per kernel, which passes loop over only part of their axis.

A pass over one axis ``j`` whose every reduction has the identity outside one condition (the
causal mask of attention, ``where(j <= i, s, -inf)``; a lower-triangular or banded matrix
``where(k <= i, A, 0)``; a length per row ``j < lengths[b]``) needs, in each program, only the
tiles of ``j`` holding a lane where the condition can hold. The facts come from
:mod:`dtriton.ir.bounds`; this module decides, per pass, whether the kernel uses them:

- every reduction of the pass is guarded by the same condition (``reduction_guard``);
- the bounds solved from it use only axes the program binds before the loop (grid and whole
  axes), no reductions, and have integer values;
- the pass loops over exactly that axis.

Where the condition is exactly the solved conjunction, the tiles whose every lane is in range
also run in a loop of their own without the condition and without the axis's size mask
(``LoopBounds.unmasked``). The schedule's ``mask_bounds=False`` turns the whole decision off.

On the GPU, the masked edge loops of a contraction beside its unmasked loop are not
software-pipelined (``LoopBounds.edge_stages`` 1): measured on the H200 with Triton 3.6
(bench/probe_tril.py, fp16 ``tril(A) @ B`` at 4096^3 under the heuristic's schedule: TMA loads,
128x256x64 tiles, 8 warps, 3 stages), the kernel with both loops pipelined gave wrong rows
(relative error 3.7e-2), while 2 stages, 4 warps, pointer loads, narrower tiles or no bounds
were all right. An edge loop runs a few tiles per program, so its pipelining gains little.
"""

from __future__ import annotations

import dataclasses

from ..ir import Expr, Load, Reduce, axis_bounds, integer_valued, reduction_guard, walk
from .graph import fused_reduces
from .kernel import KernelPlan, LoopBounds, PassPlan
from .passes import top_bound

__all__ = ["input_tensors", "plan_bounds", "plan_reverse_order"]


def plan_bounds(k: KernelPlan, enabled: bool = True) -> dict[tuple[int, ...], LoopBounds]:
    """The loop bounds of ``k``'s passes (keyed by the pass's reduction ids), for the passes
    whose reductions a mask condition guards (see the module docstring). Needs the kernel's
    passes decided; empty when ``enabled`` is False."""
    if not enabled:
        return {}
    by_id = {r.uid: r for r in fused_reduces([st.expr for st in k.stores], k.materialized)}
    out: dict[tuple[int, ...], LoopBounds] = {}
    in_top = {i for p in k.passes for i in p.reductions}
    for p in list(k.passes) + [p for i, p in k.single.items() if i not in in_top]:
        lb = _pass_bounds(k, p, by_id)
        if lb is not None:
            out[p.reductions] = lb
    return out


def ws_off_split_loops(k: KernelPlan) -> tuple[list[PassPlan], dict[int, PassPlan]]:
    """``k``'s passes with warp specialisation turned off on the passes whose loop the bounds
    split in two (the fully visible tiles unmasked, then the boundary tiles: causal attention),
    and on the passes looping over the same axis.
    Triton 3.6 cannot specialise such a pair on Hopper: compiled for sm_90 (bench/attention_sm90.py),
    any of the two loops specialised fails in its warp-specialisation pass (a dominance assertion),
    as its own fused-attention tutorial specialises only the non-causal kernel on Hopper."""
    split = {lb.axis for lb in k.bounds.values() if lb.unmasked}   # (and the passes nested in those loops)

    def off(p: PassPlan) -> PassPlan:
        return dataclasses.replace(p, warp_specialize=False) if p.warp_specialize and split & set(p.loop_axes) else p
    return [off(p) for p in k.passes], {i: off(p) for i, p in k.single.items()}


def plan_reverse_order(k: KernelPlan, order: str, reread: frozenset = frozenset()) -> bool:
    """Whether ``k``'s programs take their tiles in reverse launch order: the schedule's
    ``tile_order`` ("forward", "reverse"); "auto" reverses an output pass that reads statistics
    an earlier kernel materialised from an input it reads again (``reread``: the inputs of ``k``
    an earlier kernel of the program loads), so it starts on the part of that input the
    statistics kernel read last, still in L2 (the H200's 50 MB: a fraction of a 134 MB
    Frobenius or instance norm input read twice; H200 s6, output kernel us reversed / forward:
    Frobenius 126.5 / 130.0 fp32, 61.2 / 63.7 fp16; instance norm 128.5 / 129.8, 62.6 / 64.0;
    group and layer norm, whose split statistics end on every program's last rows at once, within
    noise; evict_first on its loads and stores made it slower); other kernels keep program-id order. Measured
    for causal attention on the H200 (bench/results/issue18, fp16 on the grid (b, h, i)):
    reversing, so each head's longest rows start first, gained nothing (S4096 D128: 1620 us
    reversed, 1582 forward; S1024 D64: 82.8 and 83.4); the query axis outermost and reversed
    (grid (i, b, h)) won at S1024 D64 (71.2 us, K and V of every head fit in L2) and lost at
    S4096 (1927 us), so that order is left to exploration (derived GPU spaces try both orders
    and the grid permutations)."""
    if order != "auto":
        return order == "reverse"
    return bool(reread and k.materialized and k.grid) and not (k.dots or k.persistent or k.split or k.bounds
                                                                or k.passes or k.single)


def input_tensors(k: KernelPlan) -> frozenset:
    """The names of the tensors kernel ``k`` loads (up to the reductions it reads materialised)."""
    return frozenset(n.tensor.name for n in walk([st.expr for st in k.stores], stop=lambda n: n.uid in k.materialized)
                     if isinstance(n, Load))


def _pass_bounds(k: KernelPlan, p: PassPlan, by_id: dict[int, Reduce]) -> LoopBounds | None:
    if len(p.loop_axes) != 1 or not all(i in by_id for i in p.reductions):
        return None
    axis = p.loop_axes[0]
    conds = [reduction_guard(by_id[i]) for i in p.reductions]
    if any(c is None for c in conds) or any(c is not conds[0] for c in conds):
        return None
    cond = conds[0]
    bound = top_bound(k) - {axis}

    def usable(t: Expr) -> bool:
        return (set(t.axes) <= bound and not any(isinstance(n, Reduce) for n in walk([t]))
                and integer_valued(t, lambda name: name in k.dtypes and not k.dtypes[name].is_floating_point, affine=True))

    ab = axis_bounds(cond, axis, usable)
    if ab.empty:
        return None
    edge = 1 if ab.exact and not k.interpret and any(i in k.dots for i in p.reductions) else 0
    return LoopBounds(axis, ab.lower, ab.upper, (cond.uid,) if ab.exact else (), ab.exact, edge)
