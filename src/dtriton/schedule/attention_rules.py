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

__all__ = ["decode_split", "flash_forward_space"]


def flash_forward_space(alg: Algorithm, sizes: Mapping[str, int], base: Schedule, masked: bool) -> dict | None:
    """The fields of a ``dt.Space`` exploring a fused attention forward around the heuristic's
    complete schedule ``base`` (sizes ``sizes``; ``masked``: a mask bounds the online loop), or
    None when ``base`` is not that layout (an online strategy over a contraction's axis, the query
    axis last on the grid). ``tile``: the query axis 64 or 128, the key axis 32, 64 or 128 (capped
    at the padded sizes, always with the heuristic's); ``grid``: the heuristic's, and with the query
    axis first where ``masked``; ``split``: for a split key axis (decoding), half, the same, twice
    and four times the heuristic's split (:func:`decode_split`, one wave of long slices)."""
    online = [a for a, s in base.strategy.items() if s == "online"]
    if len(online) != 1 or not base.grid or not contractions(alg):
        return None
    q, k = base.grid[-1], online[0]
    if base.tile.get(q) is None or base.tile.get(k) is None:
        return None

    def tiles(a: str, vals) -> list[int]:
        return sorted({min(v, max(16, next_pow2(sizes[a]))) for v in vals} | {base.tile[a]})

    grid = tuple(base.grid)
    # 256 query rows where the head dim is at most 64 (the accumulator then takes 64 registers per
    # thread at 8 warps): half the K/V tiles streamed per query row
    whole = [sizes[a] for a, st in base.strategy.items() if st == "whole"]
    qt = (64, 128, 256) if whole and max(whole) <= 64 else (64, 128)
    out: dict = {"tile": {q: tiles(q, qt), k: tiles(k, (32, 64, 128))}}
    if masked and len(grid) > 1:
        out["grid"] = [grid, (q,) + tuple(a for a in grid if a != q)]
    s = base.split.get(k, 1)
    if s > 1:
        out["split"] = {k: sorted({max(2, s // 2), s, s * 2, s * 4})}
    return out


def decode_split(programs: int, size: int, tile: int, sms: int) -> int:
    """How many slices the online key axis (``size`` keys in tiles of ``tile``) is split into when
    a fused attention launches only ``programs`` programs (decoding: one query tile per head), 1
    when it launches half a wave (``sms // 2``) or more. The largest power of two that keeps the
    split programs within one wave of ``sms``, each slice at least 512 keys and 4 tiles, at most 64.
    On the H200, B1 H8 T32768 D128 fp16 (8 programs, 64-key tiles): 16 slices ran 61.6 us, 64
    slices 68.0, 8 slices 104.4 (session 4, call 1): long slices in one wave beat short ones over four."""
    most = size // max(512, 4 * tile)
    if programs >= sms // 2 or most < 2:
        return 1
    s = 2
    while s * 2 <= min(64, most) and programs * s * 2 <= sms:
        s *= 2
    return s
