"""What an exploration of a fused attention forward searches: the few knobs that matter.

The heuristic (:func:`~dtriton.schedule.heuristics.flash_attention`) lays an attention-like
algorithm out as FlashAttention does: the score stage fused into one online pass over the keys,
one query tile per program, the head dim whole. Exploring that layout's other fields (stage
placements that materialise the S x T scores, tiles of the batch and head axes, strategies) spends
a 60 s budget on schedules that cannot win; :func:`flash_forward_space` keeps the layout and
searches the query and key tiles (the other knobs: warps, stages, TMA, launch order, by the
space's flat-knob rules), the grid order with the query axis first where a
mask bounds the loop (causal: the longest rows of every head first), and the split of the keys
for decoding.
"""

from __future__ import annotations

from typing import Mapping

from ..ir import Algorithm, contractions
from .draft import next_pow2
from .schedule import Schedule

__all__ = ["flash_forward_space"]


def flash_forward_space(alg: Algorithm, sizes: Mapping[str, int], base: Schedule, masked: bool) -> dict | None:
    """The fields of a ``dt.Space`` exploring a fused attention forward around the heuristic's
    complete schedule ``base`` (sizes ``sizes``; ``masked``: a mask bounds the online loop), or
    None when ``base`` is not that layout (an online strategy over a contraction's axis, the query
    axis last on the grid). ``tile``: the query axis 64 or 128, the key axis 32, 64 or 128 (capped
    at the padded sizes, always with the heuristic's); ``grid``: the heuristic's, and with the query
    axis first where ``masked``; ``split``: for a split key axis (decoding), a quarter, half, the
    same and twice the heuristic's split (H200, B1 H8 T32768: split 16 ran 61.6 us, the heuristic's
    64 68.0)."""
    online = [a for a, s in base.strategy.items() if s == "online"]
    if len(online) != 1 or not base.grid or not contractions(alg):
        return None
    q, k = base.grid[-1], online[0]
    if base.tile.get(q) is None or base.tile.get(k) is None:
        return None

    def tiles(a: str, vals) -> list[int]:
        return sorted({min(v, max(16, next_pow2(sizes[a]))) for v in vals} | {base.tile[a]})

    grid = tuple(base.grid)
    out: dict = {"tile": {q: tiles(q, (64, 128)), k: tiles(k, (32, 64, 128))}}
    if masked and len(grid) > 1:
        out["grid"] = [grid, (q,) + tuple(a for a in grid if a != q)]
    s = base.split.get(k, 1)
    if s > 1:
        out["split"] = {k: sorted({max(2, s // 4), max(2, s // 2), s, s * 2})}
    return out
