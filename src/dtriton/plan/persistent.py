"""Persistent GEMM kernels: the flattened tile loop and the output store in pieces.

A persistent kernel (the schedule's ``persistent``: a fixed grid of programs, each looping over
output tiles) runs each tile as a prologue (tile offsets), the contraction loop over the reduced
axis, and an epilogue (the fused element-wise tail and the output store). Triton's software
pipeliner works on one loop at a time: without more, the loads of tile t+1 start only after the
epilogue of tile t has stored, and the store's latency is exposed once per tile. Printed as
``tl.range(..., flatten=True)``, Triton 3.6 fuses the tile loop and the contraction loop into one
loop before pipelining, so the next tile's first loads are in flight while a tile's epilogue runs
(the recipe of Triton's persistent-matmul tutorial for Hopper). :func:`plan_flatten` decides it.

In a flattened loop the epilogue's shared-memory store buffer lives beside the pipeline's
buffers (a plain kernel reuses the pipeline's for it): a 128x256 fp16 tile is 64 KiB, as much as
1.3 stages of 128x256x64 operand tiles. :func:`plan_store_pieces` stores such a tile in two
halves of its last dim (epilogue subtiling), each through a descriptor of half the box. A tile the
epilogue reads (a residual ``R[i, j]`` added after the GEMM) would take a TMA buffer of its own there
too (64 KiB more at 128x256 fp16: 294,952 B with 4 stages, beyond an H200 block's 232,448):
:func:`plan_epilogue_reads` reads it through pointers, straight into registers.
"""

from __future__ import annotations

import dataclasses

from ..ir import Load, Reduce, walk
from .access import tile_key
from .kernel import KernelPlan, TileAccess

__all__ = ["plan_epilogue_reads", "plan_flatten", "plan_store_pieces"]


def plan_flatten(k: KernelPlan) -> bool:
    """Whether kernel ``k``'s persistent tile loop is printed with ``flatten=True`` (see the
    module docstring). Needs the passes, bounds, loop stores and static loops decided. True for a
    persistent kernel whose program scope runs exactly one pass, a loop over one axis of
    contractions (``tl.dot``) only, not warp-specialised (Triton 3.6 does not flatten a
    warp-specialised loop on Hopper), not split, without mask bounds, in-loop stores or unrolled
    tap loops, whose flat grid axes (a convolution's output rows) are boxes, and whose outputs are all stored in the program scope (no loop over output tiles
    after the contraction: a third loop level)."""
    if not k.persistent or k.split or len(k.passes) != 1:
        return False
    p = k.passes[0]
    if set(k.single) - set(p.reductions):
        return False   # (a reduction computed on its own: a loop of its own)
    if len(p.loop_axes) != 1 or p.warp_specialize or not p.reductions:
        return False
    if not all(i in k.dots for i in p.reductions):
        return False
    if k.bounds or k.loop_stores or k.static_loops or any(a in k.flat and a not in k.flat_box for a in k.grid):
        return False   # (a conv's rows as boxes, plan.implicit_gemm, flatten: its K is the one loop)
    bound = set(k.grid) | {a for a, ax in k.axes.items() if ax.role == "whole"}
    bound |= {m for a in k.grid for m in k.flat.get(a, ())}
    return all(set(st.layout) <= bound for st in k.stores)


def plan_store_pieces(k: KernelPlan, pieces: int) -> dict[tuple, TileAccess]:
    """Kernel ``k``'s accesses with its TMA output stores split into ``pieces`` along their last
    dim (the schedule's ``store_pieces``; call after :func:`plan_flatten`). 0 (the plan picks):
    two pieces for the output tiles of a flattened kernel whose last dim is 128 elements or more,
    else one. A piece keeps at least 16 bytes along the last dim (TMA's minimum); a store that
    cannot be split so stays whole."""
    want = pieces or (2 if k.flatten else 1)
    if want == 1:
        return k.access
    out = dict(k.access)
    for st in k.stores:
        key = (st.target, tuple(st.layout))
        acc = k.access.get(key)
        odt = k.out_dtypes.get(st.target)
        if acc is None or acc.kind != "tma" or acc.perm or odt is None:
            continue
        last = acc.box[-1]
        if (not pieces and last < 128) or last % want or last // want * odt.itemsize < 16:
            continue
        out[key] = dataclasses.replace(acc, box=acc.box[:-1] + (last // want,), pieces=want)
    return out


def plan_epilogue_reads(k: KernelPlan) -> dict[tuple, TileAccess]:
    """Kernel ``k``'s accesses with the TMA loads of its epilogue moved to plain pointers when its tile
    loop is flattened (call after :func:`plan_flatten`): a tile read once per output tile, outside the
    contractions of the loop, such as a residual ``R[i, j]``. Through
    TMA it needs a shared-memory buffer beside the pipeline's and the store's (see the module
    docstring); a pointer load fills registers directly, and its latency overlaps the next tile's
    operand loads, already in flight. Other kernels keep their accesses."""
    if not k.flatten:
        return k.access
    looped = set(k.passes[0].reductions)
    stop = lambda x: x.uid in k.materialized   # noqa: E731 - (buffers are read, not walked into)
    reds = [x for x in walk([st.expr for st in k.stores], stop=stop) if isinstance(x, Reduce) and x.uid in looped]
    # the tiles the contraction loop reads (a convolution's boxes too, whose keys name no loop axis)
    inside = {(n.tensor.name, tile_key(k, n)) for r in reds for n in walk([r.x], stop=stop) if isinstance(n, Load)}
    stores = {(st.target, tuple(st.layout)) for st in k.stores}
    return {key: acc for key, acc in k.access.items() if key in stores or key in inside or acc.kind != "tma"}
