"""How each tensor tile of a kernel is read or written, and the eviction hint of each input.

The schedule's ``access`` knob asks for "pointer" (plain ``tl.load``/``tl.store``), "block_ptr"
(``tl.make_block_ptr``) or "tma" (a host-built TMA descriptor). A tile may use block pointers or
TMA only when it is indexed by distinct plain axes, one per dim, with at least one tiled dim, and
offsets fit 32 bits. TMA eligibility is decided here only, from the call's facts
(:attr:`CallSpec.tma_ok <dtriton.plan.callspec.CallSpec.tma_ok>`: strides and alignment suit TMA)
and the box rules: the last dim tiled, at most 5 dims, boxes of at most 256 elements per dim and at
least 16 bytes along the last dim, and 2-d tiles at least. A tensor whose unit-stride dim is not
its last (a transposed operand, ``W.T``) is read through a descriptor of the view with that dim
last (:func:`unit_last`), and the tile is permuted back in registers (vectors keep pointers: TMA gains
nothing on them, and 1-d descriptors are the suspect in a fault met while exploring the fp32
diffusion layer on the H200).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from ..ir import INT_OPS, Axis, Binary, Const, Load, never_negative, walk
from .kernel import KernelPlan, TileAccess

__all__ = ["plan_access", "plan_descriptor_site", "plan_eviction", "plan_ws_stores", "plan_floor_ops", "plan_read_masks",
           "tile_access", "tile_key", "unit_last"]


def unit_last(ndim: int, unit: int) -> tuple[int, ...] | None:
    """The dim order that puts dim ``unit`` (a tensor's unit-stride dim) last, keeping the others
    in order; None when it is already last or there is none (-1)."""
    if unit < 0 or unit == ndim - 1:
        return None
    return tuple(d for d in range(ndim) if d != unit) + (unit,)


def tile_key(k: KernelPlan, n: Load) -> tuple[str, ...] | None:
    """The dims of load ``n`` as the key of its tile's access (``(tensor, key)`` in
    ``KernelPlan.access``): each dim's axis name, or ``"#<dim>"`` for a computed index whose value
    is one integer per program (an expression of tile-1 grid axes and scalars only, such as a
    grouped head ``h // rep``: a box of 1 at that offset; out of range it reads 0, as the pointer
    load masked to its dim does, so only loads without a padding value), or the member of a box
    the plan reads it in (:attr:`KernelPlan.shifted_reads`: a conv's input). None when some dim
    is neither (the tile keeps pointers)."""
    key = []
    shifted = k.shifted_reads.get(n.uid, {})
    for d, e in enumerate(n.index):
        if d in shifted:
            key.append(shifted[d][0])
        elif isinstance(e, Axis):
            key.append(e.name)
        elif not isinstance(e, Const) and n.pad is None and all(k.scalar_axis(a) for a in e.axes):
            key.append(f"#{d}")   # (an index is integer-valued: the language refuses others)
        else:
            return None
    return tuple(key)


def tile_access(k: KernelPlan, style: str, tma_ok: frozenset, name: str, axes: Sequence[str],
                elsize: int) -> TileAccess | None:
    """The access of a tile of tensor ``name`` indexed by ``axes`` under the schedule's ``style``;
    None where plain pointers are used (style "pointer", a repeated axis, no tiled dim, 64-bit
    offsets), ``TileAccess("pointer")`` for a tile considered for TMA that TMA cannot address on
    this call (pointers too; the printer declares its size arguments as for a descriptor)."""
    if style == "pointer" or k.i64 or len(set(axes)) != len(axes) or not axes:
        return None
    if any(a not in k.axes or (k.axes[a].role == "flat" and k.flat_of(a) not in k.flat_scalar_outer
                                and k.flat_of(a) not in k.flat_box) for a in axes if not a.startswith("#")):
        return None   # (a member of a flat axis has computed offsets: pointers; unless each tile of the flat
                      # axis is one index of its outer members and a block of its innermost, a conv's weight,
                      # or a box of its members, a conv's output rows)
    outer = {m for f in k.flat_scalar_outer for m in k.flat[f][:-1]}   # one index per tile
    scalar = [a.startswith("#") or k.scalar_axis(a) or a in outer for a in axes]   # "#d": a per-program index (tile_key)
    if all(scalar):
        return None
    if style != "tma":
        return TileAccess("block_ptr")
    perm = unit_last(len(axes), k.unit_dims.get(name, len(axes) - 1))
    order = perm or tuple(range(len(axes)))
    box = tuple(1 if scalar[d] else k.axes[axes[d]].block for d in order)
    if name not in tma_ok or scalar[order[-1]] or len(axes) > 5 or max(box) > 256 or box[-1] * elsize < 16:
        return TileAccess("pointer")
    if sum(not s for s in scalar) < 2:
        return TileAccess("pointer")
    return TileAccess("tma", box, perm)


def _loads(k: KernelPlan) -> list[Load]:
    """Every load of the kernel (stopping at materialised reductions), in a fixed order."""
    return [n for n in walk([st.expr for st in k.stores], stop=lambda n: n.uid in k.materialized)
            if isinstance(n, Load)]


def plan_access(k: KernelPlan, style: str | None, tma_ok: frozenset) -> dict[tuple, TileAccess]:
    """``(tensor, axes) -> TileAccess`` for every tile of kernel ``k`` that does not use plain
    pointers: loads indexed by plain axes, and stores of outputs (buffers and split partials are
    always written through pointers)."""
    style = style or "pointer"
    out: dict[tuple, TileAccess] = {}
    for n in _loads(k):
        axes = tile_key(k, n)
        if axes is not None:
            acc = tile_access(k, style, tma_ok, n.tensor.name, axes, k.dtypes[n.tensor.name].itemsize)
            if acc is not None:
                out[(n.tensor.name, axes)] = acc
    for st in k.stores:
        odt = k.out_dtypes.get(st.target)
        if odt is None or st.partial_axis or st.atomic or (not k.persistent and any(k.flat_of(a) in k.flat_box
                                                                                  for a in st.layout)):
            continue   # (a box of output rows is stored through pointers, but in a persistent kernel: there
                       # the TMA store drains while the program starts its next tile)
        acc = tile_access(k, style, tma_ok, st.target, tuple(st.layout), odt.itemsize)
        if acc is not None:
            out[(st.target, tuple(st.layout))] = acc
    return out


def plan_descriptor_site(k: KernelPlan, site: str) -> bool:
    """Whether kernel ``k`` builds its TMA descriptors in the kernel (``tl.make_tensor_descriptor``
    at the start of each program) rather than on the host, under the schedule's ``descriptors``
    knob ("auto", "host" or "device"; call after the passes are planned). False when no tile of
    ``k`` is read or written through TMA. "auto" builds them in the kernel when a loop of ``k``
    is warp-specialised: Triton 3.6 partitions the consumer warp groups' tiles of such a loop on
    Hopper only with in-kernel descriptors (with host ones, 4 warps fail in its data partitioning
    pass and 8 warps are not specialised: ``bench/attention_sm90.py``)."""
    if not any(acc.kind == "tma" for acc in k.access.values()):
        return False
    if site == "auto":
        return any(p.warp_specialize for p in k.all_passes())
    return site == "device"


def plan_ws_stores(k: KernelPlan) -> dict[tuple, TileAccess]:
    """Kernel ``k``'s accesses with the TMA stores whose box has unit dims (a tile stored through a
    descriptor of higher rank, ``tl.reshape`` to the box first) moved to plain pointers when a
    loop of ``k`` is warp-specialised: Triton 3.6's data partitioning of the consumer warp groups
    on Hopper stops at that reshape ("unsupported op type"), and the store runs once per program."""
    if not any(p.warp_specialize for p in k.all_passes()):
        return k.access
    stores = {(st.target, tuple(st.layout)) for st in k.stores}
    return {key: acc for key, acc in k.access.items()
            if not (key in stores and acc.kind == "tma" and 1 in acc.box)}


def plan_eviction(k: KernelPlan, eviction: Mapping[str, str]) -> tuple[dict[str, str], frozenset]:
    """The L2 eviction hint of each input's loads (None is Triton's default policy, which is what
    "evict_normal" asks for: Triton itself accepts only evict_first and evict_last), and the inputs
    some load of which carries it (TMA tile loads take none)."""
    hints = {t: ev for t, ev in eviction.items() if ev != "evict_normal" and ev}
    used = set()
    for n in _loads(k):
        t = n.tensor.name
        if t not in hints:
            continue
        key = tile_key(k, n)
        acc = k.access.get((t, key)) if key is not None else None
        if acc is None or acc.kind != "tma":
            used.add(t)
    return hints, frozenset(used)



#: the dtypes whose poisoned reads (:func:`plan_read_masks`) read NaN
_POISON_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def plan_read_masks(k: KernelPlan, masked: frozenset) -> tuple[dict[int, tuple[int, ...]], frozenset]:
    """``(read masks, poisoned reads)`` of kernel ``k``. Read masks: load id -> the dims of ``k``'s
    loads whose computed index is masked to its dim (``masked``: the ``(load id, dim, poisoned)``
    triples of the call spec, not provably inside): an element outside reads the load's padding
    value (0 without one, where a branch condition or the index check guarantees it is never
    used). Poisoned reads: the loads of a floating-point tensor every masked dim of which is
    poisoned (outside any branch, no padding: an index out of range is the caller's error, which
    only a host check reports): their elements outside read NaN instead (a wrong gather index
    gives a NaN result on the GPU, not a read of other memory)."""
    by_load: dict[int, dict[int, bool]] = {}
    for uid, d, p in masked:
        by_load.setdefault(uid, {})[d] = p
    out: dict[int, tuple[int, ...]] = {}
    poisoned = set()
    for n in _loads(k):
        marks = by_load.get(n.uid)
        if marks:
            out[n.uid] = tuple(sorted(marks))
            if all(marks.values()) and k.dtypes.get(n.tensor.name) in _POISON_DTYPES:
                poisoned.add(n.uid)
    return out, frozenset(poisoned)


def plan_floor_ops(k: KernelPlan) -> frozenset:
    """The integer ``//`` and ``%`` of kernel ``k`` whose operands may be negative: Triton rounds
    integer division toward zero, Python and torch toward minus infinity, so these are printed
    with the correction (those of never-negative operands, ``h // G``, are printed as they are)."""
    roots = [st.expr for st in k.stores]
    return frozenset(n.uid for n in walk(roots, stop=lambda n: n.uid in k.materialized)
                     if isinstance(n, Binary) and n.op in INT_OPS and not (never_negative(n.a) and never_negative(n.b)))
