"""The plan records: what one kernel computes and how, decided before any source is printed.

A :class:`Program` is the kernels of one (algorithm, complete schedule, call signature) in launch
order, plus the intermediate buffers they exchange. Each :class:`KernelPlan` carries every decision
a backend needs: the axes and their tiles (:class:`AxisPlan`), the stores, which fused reductions
become dots (:class:`DotPlan`), how reductions are grouped into passes (:class:`PassPlan`), the
access style and eviction hint per tensor tile (:class:`TileAccess`), the compute dtype, 64-bit
offsets, divisibility hints and the interpreter-only choices. A backend prints these; it decides
nothing and never reads the :class:`~dtriton.schedule.Schedule`.

:meth:`Program.verify` checks a program in the spirit of an IR verifier.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import torch

from ..ir import Expr, Reduce, walk
from ..schedule import next_pow2
from .gluon_attention import GluonAttention
from .gluon_attention_bwd import GluonAttentionBwd
from .gluon_conv import GluonConv
from .gluon_depthwise import GluonDepthwise

__all__ = ["AxisPlan", "BlockReduce", "BufferSpec", "DotPlan", "KernelPlan", "LastFinish", "LoopBounds", "PairTaps",
           "PassPlan", "Program", "StoreSpec", "TileAccess", "next_pow2"]


def is_pow2(n: int) -> bool:
    """Whether ``n`` is a positive power of two."""
    return n >= 1 and n & (n - 1) == 0


@dataclass(frozen=True)
class AxisPlan:
    """How one axis is covered inside one kernel.

    role: "grid" (program id; ``block`` elements per program, a scalar when block == 1),
    "whole" (one block covers it: block = next_pow2(size)), "loop" (tiles in a loop; a scalar
    index per step when block == 1) or
    "online" (a loop whose reductions run in one pass with rescaling) or "flat" (a member of a
    flat axis of :attr:`KernelPlan.flat`: its index is decomposed from the flat axis's).
    ``divisible``: size % block == 0, so no mask is needed.
    """
    name: str
    role: str
    block: int
    divisible: bool
    group: int = 1

    @property
    def scalar(self) -> bool:
        """A grid or loop axis with tile 1: a scalar index, never a block dim (a loop over an
        axis one index at a time keeps its values and a contraction inside it 2-d: max pooling's
        columns of a group, each a GEMM tile)."""
        return self.role in ("grid", "loop") and self.block == 1


@dataclass
class BufferSpec:
    """An intermediate tensor written by one kernel and read by later ones (fp32 by default;
    ``reason``: why :func:`dtriton.plan.buffers.plan_buffers` chose another dtype)."""
    name: str
    axes: tuple[str, ...]
    dtype: str = "float32"
    reason: str = ""
    zero: bool = False
    partials: int = 0         # >0: a leading dim of this many split partials
    scale_count: tuple[str, ...] = ()   # divide by the product of these axis sizes when read (mean)
    rescale: str = ""         # partials of an online sum: the max buffer whose partials rescale them when merged
    rescale_exp: str = "exp"  # the rescaling's exponential: "exp", or "exp2" for base-2 maxima
    state: int = 0            # >0: split partials of a state (the variance's), one slot per value first
    counter: bool = False     # int32 arrival counters (one per element of ``axes``, at least one per grid tile)
                              # of a kernel absorbing its finishing pass (LastFinish): the runtime's zeroed
                              # counter memory, kept zero between launches (the last program resets its slot)

    @property
    def lead(self) -> list[int]:
        """The sizes of the dims before the buffer's axes: state values, then split partials."""
        return ([self.state] if self.state else []) + ([self.partials] if self.partials else [])

    @property
    def torch_dtype(self) -> torch.dtype:
        """The buffer's torch dtype (``torch.int64`` for the indices of an arg-reduction)."""
        return getattr(torch, self.dtype)


@dataclass
class StoreSpec:
    """One store of a kernel: ``target[layout] = expr`` (atomic add for split reductions)."""
    target: str               # output name ("out", "out0", ...) or buffer name
    expr: Expr
    layout: tuple[str, ...]
    atomic: bool = False
    partial_axis: bool = False  # store into the split-partials dim of a buffer
    state: int = 0            # >0: store each value of the reduction's state (the buffer's first dim)
    dtype: str | None = None  # a buffer stored in a 16-bit dtype (plan.buffers), else None
    in_loop: bool = False     # atomic partial sums added inside the loop of a pass (KernelPlan.loop_stores)


@dataclass
class LastFinish:
    """The finishing pass of ``split_mode="last"`` folded into the split statistics kernel
    (:func:`dtriton.plan.last_finish.absorb_finishes`): each program stores its partials, then
    (after a CTA barrier) adds 1 to its grid tile's int32 arrival counter (``counter``, a
    :attr:`BufferSpec.counter` buffer indexed by the program ids of the kernel's grid axes) with
    acq_rel semantics at gpu scope; the program that sees ``split_factor - 1`` arrived before it is
    the last of its tile: it folds every split's partials of its tile in split order, exactly as
    the finishing kernel ``finish`` it replaces would (the same combines, ``reads``: stage id ->
    the partials buffer; ``block_folds``: the stages whose partials that kernel reads as one block,
    its :attr:`KernelPlan.block_folds`), stores the final values (``stores``: ``buf_<stage>_final``) and resets
    its counter to 0. Its partial loads bypass L1 (``cache_modifier=".cg"``): other SMs wrote them.
    ``finish``: the names of the finishing kernels it replaces (one per set of kept axes: an online
    group's max and sums keep different axes). ``outputs``: the stores of the output kernels it also
    replaces (``absorbed``, :func:`dtriton.plan.last_finish.absorb_outputs`: outputs that are functions of
    the final values alone, such as layer norm's dw and db cast to their dtype), printed after the
    fold with the final values in registers; ``unstored``: the ``buf_<stage>_final`` buffers no other
    kernel reads once those are absorbed (their stores are not printed)."""
    finish: tuple[str, ...]
    counter: str
    stores: tuple[StoreSpec, ...]
    reads: dict
    block_folds: frozenset = frozenset()
    outputs: tuple[StoreSpec, ...] = ()
    absorbed: tuple[str, ...] = ()
    unstored: frozenset = frozenset()


@dataclass(frozen=True)
class DotPlan:
    """A fused sum lowered to ``tl.dot``: ``sum over r of (left(m, r) * right(r, n)) * hoist``.

    ``operand_dtype``: the 16-bit storage dtype both operands are cast to ("float16" or
    "bfloat16"), None for an fp32 dot. ``operand_cast``: the dtype operands are actually cast to
    (``operand_dtype``, or the compute dtype on the interpreter, whose 16-bit dots are wrong).
    ``raw_left``/``raw_right``: that side is one plain load in the storage dtype, fed to the dot
    without a round trip through the compute dtype. ``precision``: ``input_precision`` of an fp32
    dot on the GPU (None: not printed). ``acc_dtype``: the accumulator's dtype ("float64" only
    for a float64 kernel on the interpreter). ``k``: the axis the dot loops over (the sum's one
    reduced axis, or the flat axis of its reduced axes: an implicit GEMM)."""
    left: tuple[Expr, ...]
    right: tuple[Expr, ...]
    hoist: tuple[Expr, ...]
    m: str
    n: str
    operand_dtype: str | None
    operand_cast: str | None
    raw_left: bool
    raw_right: bool
    precision: str | None
    acc_dtype: str = "float32"
    k: str = ""
    tile_scale: tuple[Expr, ...] = ()   # factors constant over each tile of k (block scales): scale each tile's dot

    @property
    def fp32(self) -> bool:
        """Whether the dot has fp32 operands (where the schedule's ``precision`` applies)."""
        return self.operand_dtype is None


@dataclass(frozen=True)
class BlockReduce:
    """How a kind of reduction folds a block along one dim on Triton's interpreter: ``tl.reduce``
    with one of Triton's standard combine functions (``combine``, as Triton text such as
    ``"tl.standard._sum_combine"``), which the interpreter runs as one numpy call, where any
    other combine runs one element at a time in Python.

    An arg-reduction passes (value, lane index) pairs and gets numpy's ``argmax``/``argmin``
    back: the first lane of the extremum, the first NaN's lane where there is one (torch's rule).
    ``propagate_nan``: the combine skips NaN (numpy's ``nanmax``), so the printer also sums the
    NaN lanes and puts NaN back where there is one (``torch.amax`` propagates NaN)."""
    combine: str
    propagate_nan: bool = False


@dataclass(frozen=True)
class PassPlan:
    """Reductions computed together by one pass (one loop over ``loop_axes``, or in registers).

    ``online``: a max and the sums using it as ``exp(x - max)`` in one rescaled pass
    (``online_maxes``: the maxes other reductions of the pass use).
    ``warp_specialize``: the loop is emitted with Triton's automatic warp specialisation;
    ``ws_requested``: the schedule asked for it on this contraction loop (it is dropped when a
    load in the loop is not TMA).
    ``block_acc``: the reductions of a loop that accumulate element-wise in a block of the loop's
    shape and fold it once after the loop (no cross-warp reduction inside the loop).
    ``base2_maxes``: the online maxes whose sums use them as ``exp2(x - max)`` (the exponent in
    base 2: their rescaling factors are ``exp2`` too).
    ``pipeline``: the loop is emitted as ``tl.range(..., num_stages=pipeline)``, so Triton's
    pipeliner prefetches its loads that many steps ahead (through shared memory); 0: a plain
    ``range``.
    ``state_means``: ``(mean id, variance id)`` pairs of block-accumulated reductions of the same
    values over the same axes: the mean is read off the variance's folded state (count times
    shift plus mean deviation) instead of accumulating a block of its own.
    ``unroll``: the innermost loop is emitted with ``tl.range``'s ``loop_unroll_factor=unroll``
    (its steps' loads issue together: more bytes in flight per program); 0 or 1: not unrolled.
    ``shifted``: block-accumulated variances whose lanes share one shift per program (the mean of
    the body over the program's first tile, computed before the loop): each step adds ``x - k``
    and its square to two sums per lane (and counts), the lanes fold by plain sums."""
    reductions: tuple[int, ...]
    loop_axes: tuple[str, ...]
    online: bool = False
    warp_specialize: bool = False
    ws_requested: bool = False
    online_maxes: tuple[int, ...] = ()     # online: the maxes whose updates rescale the pass's sums
    block_acc: tuple[int, ...] = ()
    base2_maxes: tuple[int, ...] = ()
    pipeline: int = 0
    state_means: tuple[tuple[int, int], ...] = ()
    unroll: int = 0
    shifted: tuple[int, ...] = ()


@dataclass(frozen=True)
class LoopBounds:
    """The range of a pass's loop axis that a mask condition leaves (:mod:`dtriton.plan.bounds`).

    Lanes outside ``axis >= t`` for each ``t`` of ``lower`` and ``axis < t`` for each ``t`` of
    ``upper`` hold the identity of every reduction of the pass (integer-valued expressions over
    the program's axes). Each program evaluates them over its tile (the least and the largest
    value over its valid lanes) and loops only over the tiles holding some lane in range.
    ``unmasked``: the tiles whose every lane is in range run in a loop of their own without the
    conditions ``guards`` (condition node ids, true there) and without the axis's size mask.
    ``edge_stages``: when not 0, the masked loops beside the unmasked one are emitted as
    ``tl.range(..., num_stages=edge_stages)`` (1: not software-pipelined)."""
    axis: str
    lower: tuple[Expr, ...]
    upper: tuple[Expr, ...]
    guards: tuple[int, ...] = ()
    unmasked: bool = False
    edge_stages: int = 0


@dataclass(frozen=True)
class RollingWindow:
    """A window sum computed by rolling rows (:func:`dtriton.plan.taps.plan_rolling`): the program walks
    the input rows of its tile of output axis ``row``; input row ``i`` feeds output row ``i - t - base``
    through tap ``t`` of window axis ``tap`` (``taps`` of them), so each input row is loaded once per
    value of the other window axes (``others``: axis -> exact size) and added into ``taps`` rolling
    accumulators, the oldest stored complete after each row.

    ``reduce``: the Reduce id; ``load``: its input Load id, whose dim ``dim`` is indexed by
    ``row + tap + base``; ``weight``: the Load id of the other factor (indexed by window axes and
    axes of the output, not ``row``)."""
    reduce: int
    row: str
    tap: str
    taps: int
    base: Expr
    load: int
    dim: int
    weight: int
    others: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class PairTaps:
    """A strided window's taps read as contiguous runs (:func:`dtriton.plan.pairs.plan_pair_taps`):
    dim ``dim`` of input Load ``load`` is indexed ``grid * stride + tap + offset`` (``tap`` an
    unrolled window axis of ``taps`` values). Tap ``q`` reads column ``stride * (grid + a) + b`` with
    ``q + offset = stride * a + b`` (``0 <= b < stride``); the taps sharing ``a`` (``groups``:
    ``(a, ((tap, b), ...))``) come from one load of ``stride * block`` contiguous columns starting at
    ``stride * (tile start + a)``, reshaped to (..., block, stride) and split into its parts ``b``
    (masked to ``0 <= column < dim``, ``low``: the ``0 <=`` test is needed, ``a < 0``); the
    ``lone`` taps are read one at a time as before."""
    load: int
    dim: int
    grid: str
    tap: str
    taps: int
    stride: int
    groups: tuple[tuple[int, tuple[tuple[int, int], ...]], ...]
    lone: tuple[int, ...]


@dataclass(frozen=True)
class TileAccess:
    """How a tile of one tensor is read or written: "block_ptr", "tma" (with the TMA ``box``,
    elements per dim), or "pointer" for a tile the schedule asked TMA for but TMA cannot address
    on this call; tiles without an entry use plain pointers. ``perm``: for "tma", the order of the
    tensor's dims the descriptor is built on (its unit-stride dim last: a transposed operand is
    read through a descriptor of the transposed view, and ``box`` is in that order); None keeps
    the tensor's own order. ``pieces``: for a "tma" output store, the tile is stored in this many
    pieces along its last dim, ``box`` being one piece (epilogue subtiling,
    :func:`dtriton.plan.persistent.plan_store_pieces`)."""
    kind: str
    box: tuple[int, ...] = ()
    perm: tuple[int, ...] | None = None
    pieces: int = 1


@dataclass
class KernelPlan:
    """One kernel: what it stores, its grid, how each axis is covered, and every decision on how
    its values are computed (filled by :func:`dtriton.plan.decide.decide`)."""
    name: str
    stores: list[StoreSpec]
    grid: list[str]                                   # grid axes, outermost first
    axes: dict[str, AxisPlan]
    split: tuple[str, int] | None = None              # (reduction axis, factor): the outermost split axis
    materialized: dict[int, BufferSpec] = field(default_factory=dict)  # Reduce node id -> buffer
    num_warps: int = 4
    num_stages: int = 2
    stage_names: list[str] = field(default_factory=list)
    fused: list[str] = field(default_factory=list)    # reduction stages computed inside
    persistent: int = 0                               # k > 0: k programs per SM, each looping over tiles
    split_more: tuple[tuple[str, int], ...] = ()      # further split axes and factors, outermost first (a
                                                      # whole-tensor sum split over n and h: split_axes)
    max_registers: int = 0                            # ptxas's register cap per thread (launch option
                                                      # maxnreg; 0: none; plan.passes.register_cap)
    # -- decisions (filled by plan.decide) --
    compute_dtype: str = "float32"                    # "float32" or "float64"
    int_acc: frozenset = frozenset()                  # Reduce ids folded in int64 (sums, products,
                                                      # extrema of integers: ir.integer_reductions)
    bool_ops: frozenset = frozenset()                 # Binary ids of bools computed as a logical or / and
                                                      # (True + True is True, as torch: ir.boolean_ops)
    i64: bool = False                                 # 64-bit offsets
    interpret: bool = False                           # the kernel runs on Triton's interpreter
    round_bf16: bool = False                          # explicit bf16 rounding (the interpreter truncates)
    block_reduce: dict[str, BlockReduce] = field(default_factory=dict)  # combiner base -> standard combine
                                                      # (else the kind's own combine helper)
    hints: dict[str, int] = field(default_factory=dict)   # integer argument -> power of two it is a multiple of
    unit_dims: dict[str, int] = field(default_factory=dict)  # input tensor -> its unit-stride dim (-1: none)
    size_buckets: dict[str, int] = field(default_factory=dict)  # axis -> a power of two its size is at most
    dtypes: dict[str, torch.dtype] = field(default_factory=dict)      # input tensor -> storage dtype
    out_dtypes: dict[str, torch.dtype] = field(default_factory=dict)  # output -> dtype
    dots: dict[int, DotPlan] = field(default_factory=dict)            # fused Reduce id -> its dot
    dot_only: frozenset = frozenset()                 # whole axes used only inside dot operands
    trans_loads: frozenset = frozenset()              # Load ids two dots read raw in both orientations:
                                                      # loaded once, the other orientation a tl.trans of it
    passes: list[PassPlan] = field(default_factory=list)              # the passes of the program scope
    single: dict[int, PassPlan] = field(default_factory=dict)         # a fused reduction computed on its own
    access: dict[tuple, TileAccess] = field(default_factory=dict)     # (tensor, axes) -> non-pointer access
    device_descs: bool = False                        # TMA descriptors built in the kernel (tl.make_tensor_descriptor)
    row_vectors: frozenset = frozenset()              # online-pass Reduce ids accumulated as vectors of their kept
                                                      # axes (no size-1 dims: plan.online_split.plan_row_vectors)
    eviction: dict[str, str] = field(default_factory=dict)            # input -> L2 eviction hint
    evicted: frozenset = frozenset()                  # inputs some non-TMA load of which carries its hint
    bounds: dict[tuple[int, ...], LoopBounds] = field(default_factory=dict)  # a pass's reductions -> its loop range
    reverse_order: bool = False                       # programs take their tiles in reverse launch order
    flatten: bool = False                             # the persistent tile loop and its one contraction loop
                                                      # pipelined as one loop (plan.persistent.plan_flatten)
    read_masks: dict[int, tuple[int, ...]] = field(default_factory=dict)  # Load id -> dims whose computed index
                                                      # is masked to the dim (reading the load's pad, or 0)
    poisoned_reads: frozenset = frozenset()           # Load ids whose elements outside read NaN (a wrong index)
    floor_ops: frozenset = frozenset()                # // and % nodes whose operands may be negative (Triton
                                                      # rounds toward zero: printed with Python's floor rounding)
    flat: dict[str, tuple[str, ...]] = field(default_factory=dict)  # flat axis -> its member axes, outermost
                                                      # first (plan.implicit_gemm: a conv's K and M sides)
    flat_scalar_outer: frozenset = frozenset()        # flat axes each tile of which lies in one index of every
                                                      # member but the innermost (whose size the block divides)
    flat_box: dict[str, tuple[int, ...]] = field(default_factory=dict)  # flat grid axis -> its members' tiles:
                                                      # each tile is a box of the members (a conv's output rows
                                                      # (n, h, w) read by TMA), not a run of the flat index
    flat_direct: dict = field(default_factory=dict)   # load id or output name -> the flat axis whose index is its
                                                      # address past its other dims (plan.flat: a contiguous
                                                      # tensor whose last dims are the flat axis's members)
    static_loops: dict[str, int] = field(default_factory=dict)  # loop axis -> its exact size: emitted as
                                                      # tl.static_range (a depthwise conv's taps: plan.taps)
    rolling: RollingWindow | None = None              # a window sum computed by rolling rows (plan.taps)
    rolling_why: str = ""                              # why rolling=True does not apply (plan.taps)
    pair_taps: dict[int, PairTaps] = field(default_factory=dict)  # a window reduction's id -> its taps read as
                                                      # contiguous runs split in registers (plan.pairs)
    literal_scalars: dict[str, int] = field(default_factory=dict)  # int scalar argument -> the call's value,
                                                      # printed as a literal (a pooling window's stride and
                                                      # padding: plan.pairs.plan_literal_scalars)
    native_folds: frozenset = frozenset()             # ids of max/min reductions folded in their input's 16-bit
                                                      # dtype (exact), whose input loads stay in it (raw_loads)
    raw_loads: frozenset = frozenset()                # Load ids printed without the conversion to the compute dtype
    window_knobs: frozenset = frozenset()             # the window knobs set off their default (window_loads,
                                                      # narrow_minmax) that change this kernel: the others warn
    exact_counts: dict[int, int] = field(default_factory=dict)  # a mean's id -> the count it divides by, pinned
                                                      # by the call (plan.passes.plan_exact_counts)
    tile_stages: int = 0                              # >1: the persistent tile loop is software-pipelined
                                                      # over this many stages (its body has no runtime loop:
                                                      # the next tile's loads fly while this one computes)
    shifted_reads: dict[int, dict[int, tuple[str, Expr]]] = field(default_factory=dict)  # Load id -> dim ->
                                                      # (member of a flat_box axis, the index at that member 0):
                                                      # the index is the member plus that, a TMA box shifted by it
    loop_stores: dict[str, tuple[int, ...]] = field(default_factory=dict)  # in-loop store target -> the reductions
                                                      # of the pass it is printed in, after each step
                                                      # (plan.loop_stores: dQ in the dK/dV kernel)
    launch_dims: tuple[tuple[str, ...], ...] | None = None  # grid axes per launch-grid dimension (x first; each
                                                      # group outermost first): tile indices read from
                                                      # tl.program_id(d); None: the linear form
                                                      # (plan.launch_grid)
    gluon: GluonAttention | GluonAttentionBwd | GluonConv | GluonDepthwise | None = None   # the kernel is
                                                      # printed as that Gluon attention forward
                                                      # (plan.gluon_attention), backward (plan.gluon_attention_bwd),
                                                      # conv2d (plan.gluon_conv) or depthwise conv2d
                                                      # (plan.gluon_depthwise), not from the rest
    finishes: str = ""                                # a finishing kernel: the name of the split kernel whose
                                                      # partials it folds (split_mode "finish" or "last")
    last_finish: LastFinish | None = None             # the finishing pass this split kernel's last program of
                                                      # each tile runs (split_mode="last": plan.last_finish)
    split_interleaved: bool = False                   # each split slice visits tiles j, j + split, ... of its
                                                      # axis instead of one contiguous run (split_order)
    block_folds: frozenset = frozenset()              # ids of materialised reductions whose split partials this
                                                      # kernel reads as one block folded by a tree, the others
                                                      # in split order by a loop (plan.last_finish.block_fold)
    dependent_launch: bool = False                    # launched with programmatic dependent launch: waits for
                                                      # the kernel before it first (plan.dependent_launch)
    launch_dependents: bool = False                   # lets the next kernel launch once all its programs started

    @property
    def splits(self) -> tuple[tuple[str, int], ...]:
        """Every split axis and its factor, outermost first (empty: no split)."""
        return ((self.split,) if self.split else ()) + tuple(self.split_more)

    @property
    def split_axes(self) -> tuple[str, ...]:
        """The axes split across programs, outermost first."""
        return tuple(a for a, _ in self.splits)

    @property
    def split_factor(self) -> int:
        """Programs per grid tile: the product of the split factors (1 without a split); the
        split-partials dim of the buffers this kernel stores has this many entries, the flat
        index ``pid_split`` of the program's slice of every split axis."""
        n = 1
        for _, f in self.splits:
            n *= f
        return n

    def flat_of(self, a: str) -> str:
        """The flat axis whose index gives member axis ``a`` its index (``a`` itself when it is no member)."""
        for f, members in self.flat.items():
            if a in members:
                return f
        return a

    def flat_size(self, a: str, sizes) -> int:
        """The extent of axis ``a`` given the axis sizes ``sizes`` (a flat axis: the product of its members')."""
        n = 1
        for m in self.flat.get(a, (a,)):
            n *= sizes[m]
        return n

    def grid_tiles(self, a: str) -> list[tuple[tuple[str, ...], int]]:
        """The tile counts of grid axis ``a`` as ``(axes, block)`` pairs, their product the programs
        along ``a``: one pair for a plain or flat axis (the product of its members' sizes in tiles of
        its block), one per member for a box (:attr:`flat_box`)."""
        if a in self.flat_box:
            return [((m,), b) for m, b in zip(self.flat[a], self.flat_box[a])]
        return [(self.flat.get(a, (a,)), self.axes[a].block)]

    @staticmethod
    def tile_programs(tiles, extents: Mapping[str, int]) -> int | None:
        """Programs along ``tiles``, ``(axes, block)`` pairs (:meth:`grid_tiles`, a dimension of
        :meth:`launch_counts`), over ``extents`` (axis -> its size on a call, or a bound on it such
        as :attr:`size_buckets`): each pair the product of its axes' extents in tiles of its block
        (rounded up), the pairs multiplied (0: an empty axis). None when an axis has no extent."""
        n = 1
        for axes, blk in tiles:
            ext = 1
            for a in axes:
                if a not in extents:
                    return None
                ext *= extents[a]
            n *= -(-ext // blk)
        return n

    def launch_programs(self, extents: Mapping[str, int]) -> int | None:
        """Programs this kernel launches over ``extents`` (axis -> its size on a call, or a bound on it
        such as :attr:`size_buckets`): every launch-grid dimension's :meth:`tile_programs` times the
        split factor (a persistent kernel's cap not counted); None when an axis has no extent."""
        n = self.split_factor
        for dim in self.launch_counts():
            t = self.tile_programs(dim, extents)
            if t is None:
                return None
            n *= t
        return n

    @property
    def grouped(self) -> bool:
        """Programs take the tiles of the last two grid axes in a grouped (swizzled) order: the
        next-to-last axis's ``group`` is above 1."""
        return len(self.grid) >= 2 and self.axes[self.grid[-2]].group > 1

    def launch_counts(self) -> list[list[tuple[tuple[str, ...], int]]]:
        """Per launch-grid dimension (x first), the ``(axes, block)`` tile counts whose product is
        that dimension's programs (:meth:`grid_tiles`; before a split's factor and a persistent
        kernel's cap): one dimension of every grid axis in the linear form, else the groups of
        :attr:`launch_dims`, dimension 0 also counting the axes one program covers (1 program, or
        0 on an empty axis: nothing is launched)."""
        if self.launch_dims is None:
            return [[g for a in self.grid for g in self.grid_tiles(a)]]
        placed = {a for dim in self.launch_dims for a in dim}
        dims = [[g for a in dim for g in self.grid_tiles(a)] for dim in self.launch_dims] or [[]]
        dims[0] += [g for a in self.grid if a not in placed for g in self.grid_tiles(a)]
        return dims

    def scalar_axis(self, a: str) -> bool:
        """A grid or loop axis with tile 1: a scalar index, never a block dim (a flat axis keeps its
        dim: its members' indices are decomposed from its block)."""
        p = self.axes.get(a)
        return p is not None and p.scalar and a not in self.flat

    @property
    def ws_loop(self) -> bool:
        """Some contraction loop asked for warp specialisation."""
        return any(p.ws_requested for p in self.all_passes())

    @property
    def ws_dropped(self) -> bool:
        """A warp-specialisation request was dropped (a loop has loads that are not TMA)."""
        return any(p.ws_requested and not p.warp_specialize for p in self.all_passes())

    @property
    def fp32_dot(self) -> bool:
        """Some tl.dot has fp32 operands (the schedule's ``precision`` applies)."""
        return any(d.fp32 for d in self.dots.values())

    def all_passes(self) -> list[PassPlan]:
        """The program-scope passes and the passes of reductions computed on their own."""
        return list(self.passes) + list(self.single.values())


@dataclass
class Program:
    """The kernels of one (algorithm, schedule, specialisation), in launch order."""
    kernels: list[KernelPlan]
    buffers: dict[str, BufferSpec]
    output_direct: dict[str, str] = field(default_factory=dict)  # output name -> "zero": split-K atomics into it
    name: str = ""                                    # the algorithm's name
    schedule_json: str = ""                           # the complete schedule, for the header comment
    note: str = ""                                    # the specialisation note of the header comment
    stage_labels: dict[int, str] = field(default_factory=dict)   # Reduce id -> stage name (printing)
    gluon_note: str = ""                              # why a requested Gluon kernel does not apply
    launch_note: str = ""                             # why a requested dependent launch does not apply

    def verify(self) -> list[str]:
        """Problems of this program (empty when it is well formed): every reduction a kernel reads
        is computed in that kernel (fused) or written to a buffer by an earlier kernel; a grid
        names only axes of its kernel; split axes are axes of the kernel; blocks of tiled axes are
        powers of two; dots reduce a fused sum; every store covers the grid axes (else programs
        along a missing one would all write it)."""
        return self._problems(axes=True)

    def read_problems(self) -> list[str]:
        """The reductions a kernel reads that neither it (fused) nor an earlier kernel (a buffer)
        computes: the first part of :meth:`verify`."""
        return self._problems(axes=False)

    def _problems(self, axes: bool) -> list[str]:
        problems: list[str] = []
        produced: set[str] = set()
        for k in self.kernels:
            problems.extend(_reads_problems(k, self.buffers, produced))
            if axes:
                problems.extend(_axes_problems(k))
            for st in list(k.stores) + list(k.last_finish.stores if k.last_finish else ()):
                if st.target in self.buffers:
                    produced.add(st.target)
        return problems

    def ok(self) -> bool:
        """True when :meth:`verify` finds nothing."""
        return not self.verify()


def _reads_problems(k: KernelPlan, buffers: dict[str, BufferSpec], produced: set[str]) -> list[str]:
    """Reductions kernel ``k`` reads that neither it nor an earlier kernel computes."""
    out: list[str] = []
    fused = set(k.fused)
    for st in k.stores:
        # (a finishing kernel stores a stage it reads from its split partials: not a top)
        top = st.target in buffers and isinstance(st.expr, Reduce) and st.expr.uid not in k.materialized
        if top and st.expr.name not in fused:
            out.append(f"kernel {k.name} stores stage {st.expr.name} without computing it")
            continue
        for n in walk([st.expr.x if top else st.expr], stop=lambda n: n.uid in k.materialized):
            if not isinstance(n, Reduce):
                continue
            b = k.materialized.get(n.uid)
            if b is not None:
                if b.name not in produced:
                    out.append(f"kernel {k.name} reads buffer {b.name} before a kernel writes it")
            elif n.name not in fused:
                out.append(f"kernel {k.name} reads stage {n.name}, which it does not compute")
    return out


def _axes_problems(k: KernelPlan) -> list[str]:
    """Grid, split and block problems of one kernel."""
    out = [f"kernel {k.name}: grid axis {a!r} is not an axis of the kernel" for a in k.grid if a not in k.axes]
    out += [f"kernel {k.name}: split axis {a!r} is not an axis of the kernel" for a in k.split_axes if a not in k.axes]
    for a, p in k.axes.items():
        if not is_pow2(p.block):
            out.append(f"kernel {k.name}: axis {a!r} ({p.role}) has block {p.block}, not a power of two")
        if p.role == "grid" and a not in k.grid:
            out.append(f"kernel {k.name}: axis {a!r} has role grid but is not on the grid")
    if k.launch_dims is not None:   # each grid axis on at most one launch-grid dimension, at most three of them
        placed = [a for dim in k.launch_dims for a in dim]
        if len(k.launch_dims) > 3 or len(set(placed)) != len(placed) or not set(placed) <= set(k.grid):
            out.append(f"kernel {k.name}: launch dims {k.launch_dims} are not at most three groups of distinct grid "
                       f"axes of {k.grid}")
    for rid in k.dots:
        if rid in k.materialized:
            out.append(f"kernel {k.name}: a dot reduces a materialised stage")
    for st in k.stores:   # a store without a grid axis would be written by every program along it
        missing = [a for a in k.grid if not set(k.flat.get(a, (a,))) <= set(st.layout)]
        if st.atomic and isinstance(st.expr, Reduce) and set(missing) <= set(st.expr.over):
            continue   # partial sums over the program's tile of a reduced axis, added by atomics
        if missing:
            out.append(f"kernel {k.name}: store {st.target}[{', '.join(st.layout)}] lacks grid axes {missing}")
    return out
