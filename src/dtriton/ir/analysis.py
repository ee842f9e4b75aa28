"""Facts about an algorithm that several layers ask for, each computed in one place.

- :func:`contractions`: the reduction stages that look like a matrix product (``tl.dot`` candidates);
- :func:`sum_of_products`: the factors of a sum of a product (one ``einsum`` in the evaluator);
- :func:`online_candidate`: axes a one-pass online strategy can cover (a running maximum);
- :func:`can_split`, :func:`split_blockers`, :func:`splittable`: whether a reduction, or an axis,
  may be split across programs (read from :attr:`Combiner.splittable`);
- :func:`stage_grid`: the axes the kernel of a stage maps to program ids under a schedule's grid
  values; :func:`grid_candidates`: every axis some kernel may map to program ids;
- :func:`reads_unit_stride`, :func:`tensor_core_sides`: which operands of a contraction read the
  reduced axis at unit stride on a call (fp32 tensor-core dots want that for their right operand);
  :func:`contraction_operands`: the tensors a contraction reads along its reduced axis.

This module is part of the IR layer: it takes algorithms and plain values (grids as tuples of axis
names), never a :class:`~dtriton.Schedule`.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from ..errors import ScheduleError
from .algorithm import Algorithm, Stage
from .expr import Axis, Binary, Expr, Load, Reduce
from .walk import mul_factors, walk

__all__ = ["can_split", "contractions", "sum_of_products", "online_candidate", "split_blockers", "splittable", "stage_grid",
           "grid_candidates", "reduction_stages", "is_sum", "reads_unit_stride", "tensor_core_sides",
           "contraction_operands"]


def reduction_stages(alg: Algorithm, axis: str | None = None) -> list[Stage]:
    """The reduction (non-output) stages of ``alg`` in stage order; with ``axis``, those reducing it."""
    return [s for s in alg.stages.values() if not s.is_output and (axis is None or axis in s.node.over)]


def is_sum(r: Reduce) -> bool:
    """``r`` accumulates a sum (``dt.sum`` or ``dt.mean``)."""
    return r.combiner.base == "sum"


def contractions(alg: Algorithm) -> dict[str, tuple[str, str, str]]:
    """Reduction stages that look like a matrix product: stage name -> (m axis, n axis, r axis).

    A contraction is a sum (or mean) over one axis ``r`` of a product whose factors that use ``r``
    split into a side with ``m`` (and not ``n``) and a side with ``n`` (and not ``m``); ``(m, n)``
    is the first such pair in the order of the stage's free axes."""
    out = {}
    for s in reduction_stages(alg):
        r = s.node
        if not is_sum(r) or len(r.over) != 1:
            continue
        ra = r.over[0]
        sides = [set(f.axes) - {ra} for f in mul_factors(r.x) if ra in f.axes]
        sides = [sd for sd in sides if sd]
        free = set(r.axes)
        for m in r.axes:
            for n in r.axes:
                if m == n:
                    continue
                if all(sd <= (free - {n}) or sd <= (free - {m}) for sd in sides) and \
                        any(m in sd for sd in sides) and any(n in sd for sd in sides) and \
                        not any(m in sd and n in sd for sd in sides):
                    out[r.name] = (m, n, ra)
                    break
            if r.name in out:
                break
    return out


def sum_of_products(n: Expr) -> list[Expr] | None:
    """The factors (left to right) when ``n`` is a sum (or mean) of a product, which the evaluator
    computes as one ``einsum``; None otherwise."""
    if isinstance(n, Reduce) and is_sum(n) and isinstance(n.x, Binary) and n.x.op == "mul":
        return mul_factors(n.x)
    return None


def online_candidate(alg: Algorithm, axis: str) -> bool:
    """Whether a stage reduces ``axis`` with a running maximum (``Combiner.online ==
    "running_max"``), so the online strategy can merge the passes over ``axis`` into one."""
    return any(s.node.combiner.online == "running_max" for s in reduction_stages(alg, axis))


def can_split(r: Reduce) -> bool:
    """Whether partial results of ``r`` from several programs can be combined (split-K): its
    combiner's :attr:`~dtriton.ir.Combiner.splittable` (sum, mean, max, min, prod: yes; an
    arg-reduction: no)."""
    return r.combiner.splittable


def split_blockers(alg: Algorithm, axis: str) -> list[Stage]:
    """The reduction stages over ``axis`` that cannot be split (:func:`can_split`); empty when
    ``axis`` may be split across programs."""
    return [s for s in reduction_stages(alg, axis) if not can_split(s.node)]


def splittable(alg: Algorithm, axis: str) -> bool:
    """Whether split-K over ``axis`` is legal: every stage reducing it can combine partial results
    (true when no stage reduces it)."""
    return not split_blockers(alg, axis)


def stage_grid(alg: Algorithm, name: str, grid: Sequence[str] | None,
               own: Sequence[str] | None = None, strict: bool = False) -> tuple[str, ...] | None:
    """The axes the kernel of stage ``name`` maps to program ids, outermost first: its own grid
    ``own`` (a stage's ``grid`` override; each must be a free axis of the stage), else for a
    reduction stage all its free axes (a materialised reduction's kernel), else the schedule's
    ``grid`` restricted to the output's axes, or None while ``grid`` is not chosen yet.

    With ``strict`` (lowering), raises :class:`ScheduleError` when ``own`` names an axis that is
    not a free axis of the stage."""
    st = alg.stages[name]
    free = st.free_axes
    if own is not None:
        bad = [a for a in own if a not in free] if strict else []
        if bad:
            raise ScheduleError(f"stages[{name!r}].grid names {bad}, which are not free axes of stage {name!r} "
                                f"(its free axes: {list(free)})")
        return tuple(own)
    if not st.is_output:
        return tuple(free)
    if grid is None:
        return None
    return tuple(a for a in grid if a in free)


def grid_candidates(alg: Algorithm, grid: Sequence[str] | None, own_grids: Iterable[Sequence[str] | None]) -> set[str]:
    """Axes that some kernel may map to program ids: the schedule's ``grid`` (while it is not
    chosen, None: the output axes that a stage reduces), every stage's own grid (``own_grids``), and
    the free axes of every reduction stage (its kernel's grid when it is materialised)."""
    if grid is not None:
        out = set(grid)
    else:
        red = set(alg.reduction_axes)
        out = {a for o in alg.outputs for a in o.layout if a in red}
    for g in own_grids:
        out |= set(g or ())
    for s in reduction_stages(alg):
        out |= set(s.node.axes)
    return out


def reads_unit_stride(fs: Sequence[Expr], axis: str, unit_dims: Mapping[str, int]) -> bool:
    """Every tensor load of the factors ``fs`` (outside nested reductions) reads ``axis`` at its
    tensor's unit-stride dim on this call. ``unit_dims``: input tensor name -> index of its dim of
    stride 1 (a tensor absent from it, e.g. a materialised stage, counts as not known: False)."""
    loads = [x for x in walk(list(fs), stop=lambda x: isinstance(x, (Load, Reduce))) if isinstance(x, Load)]
    if not loads:
        return False
    for ld in loads:
        u = unit_dims.get(ld.tensor.name, -1)
        if u < 0 or u >= len(ld.index) or not (isinstance(ld.index[u], Axis) and ld.index[u].name == axis):
            return False
    return True


def tensor_core_sides(r: Reduce, unit_dims: Mapping[str, int]) -> list[str]:
    """For a contraction ``r`` (a sum over one axis of a product): the free axes ``n`` whose side
    of the product (the factors using ``n`` and the reduced axis) reads the reduced axis at unit
    stride. An fp32 tensor-core dot (wgmma) takes its right operand (r, n) from shared memory
    K-major only, so the side put on the right must be one of these; 16-bit dots take either."""
    if len(r.over) != 1:
        return []
    ra = r.over[0]
    out = []
    for n in r.axes:
        side = [f for f in mul_factors(r.x) if ra in f.axes and n in f.axes]
        if side and reads_unit_stride(side, ra, unit_dims):
            out.append(n)
    return out


def contraction_operands(alg: Algorithm) -> set[str]:
    """The names of the tensors some contraction of ``alg`` (:func:`contractions`) reads along its
    reduced axis: the operands its dot loop streams (a bias added after the sum is not one)."""
    out = set()
    for name, (_, _, ra) in contractions(alg).items():
        for x in walk([alg.stages[name].node.x], stop=lambda x: isinstance(x, Reduce)):
            if isinstance(x, Load) and ra in x.axes:
                out.add(x.tensor.name)
    return out
