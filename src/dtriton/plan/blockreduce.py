"""How each kind of reduction folds a block on Triton's interpreter.

The interpreter runs ``tl.reduce`` as one numpy call when its combine function is one of Triton's
standard ones (``tl.standard._sum_combine``, ``_elementwise_max``, ``_elementwise_min`` and the
arg-reductions' ``_argmax_combine_tie_break_left``, ``_argmin_combine_tie_break_left``), and one
element at a time in Python for any other (a 256x256 row sum: seconds instead of milliseconds).
So interpreter kernels fold blocks with the standard combine where its numpy call has the kind's
semantics, made exact where it is not:

- ``sum`` (and ``mean``, its base): ``np.sum``.
- ``max`` / ``min``: ``np.nanmax`` / ``np.nanmin``, which skip NaN; the printer counts NaN lanes
  with a sum and puts NaN back (``torch.amax`` propagates NaN).
- ``argmax`` / ``argmin``: ``np.max`` with ``np.argmax`` (``min``, ``argmin``) over (value, lane)
  pairs: the first lane of the extremum, the first NaN's lane where there is one (torch's rule).
- any other kind (``prod``, user kinds): the kind's own combine helper.

GPU kernels keep every kind's own combine helper (Triton's standard max skips NaN there too, and
its index combine lets NaN lose), so their reductions are unchanged.
"""

from __future__ import annotations

from ..ir import COMBINERS, Combiner, Reduce, walk
from .kernel import BlockReduce, KernelPlan

__all__ = ["block_reduce_of", "plan_block_reduce"]

#: kind name -> its fold on the interpreter
_INTERPRETER: dict[str, BlockReduce] = {
    "sum": BlockReduce("tl.standard._sum_combine"),
    "max": BlockReduce("tl.standard._elementwise_max", propagate_nan=True),
    "min": BlockReduce("tl.standard._elementwise_min", propagate_nan=True),
    "argmax": BlockReduce("tl.standard._argmax_combine_tie_break_left"),
    "argmin": BlockReduce("tl.standard._argmin_combine_tie_break_left"),
}


def block_reduce_of(c: Combiner, interpret: bool) -> BlockReduce | None:
    """How kind ``c`` (its ``base``) folds a block on the interpreter (``interpret``) or the GPU;
    None: with ``tl.reduce`` and ``c``'s own combine helper. A kind whose combine text differs
    from the registered kind of that name keeps its own helper."""
    known = COMBINERS.get(c.base)
    if not interpret or known is None or known.combine != c.combine or known.results != c.results:
        return None
    return _INTERPRETER.get(c.base)


def plan_block_reduce(k: KernelPlan) -> dict[str, BlockReduce]:
    """For each kind of reduction kernel ``k`` computes (by combiner base), how it folds a block
    when not with its own combine helper (see :func:`block_reduce_of`). Reads ``k.interpret``."""
    out: dict[str, BlockReduce] = {}
    for n in walk([st.expr for st in k.stores]):
        if isinstance(n, Reduce):
            br = block_reduce_of(n.combiner, k.interpret)
            if br is not None:
                out[n.combiner.base] = br
    return out
