"""Complete a lowered :class:`Program`: every decision a backend needs, per kernel.

The named steps, in order (each reads what the ones before decided): call facts (compute dtype,
64-bit offsets, divisibility hints, interpreter-only choices: bf16 rounding and block folds), the
flat axes of implicit GEMMs (convolutions), the flat axes of ``flat_axes`` (:mod:`dtriton.plan.flat`), dots,
dot-only axes, access per tensor tile, eviction hints, passes (grouping, online merging, warp
specialisation), loop bounds from masks (the loops they split are not warp-specialised), the pass
whose loop adds each in-loop atomic store (:mod:`dtriton.plan.loop_stores`), a persistent GEMM's
flattened tile loop and output stores in pieces (:mod:`dtriton.plan.persistent`), where TMA
descriptors are built, the split partials each kernel folds as one block
(:func:`dtriton.plan.last_finish.plan_block_folds`), the launch order, the launch-grid dimensions
(:mod:`dtriton.plan.launch_grid`). Then :func:`unused_knobs` reads the decisions back: the
knobs that had no effect.
"""

from __future__ import annotations

import math
from typing import Mapping

import torch

from ..ir import (Algorithm, Binding, InputTensor, Reduce, base2_exponents, boolean_ops, base2_shifted_exponents, common_divisors, folded_literals,
                  integer_reductions, kernel_f64, reciprocal_divisors, single_pass_variance)
from ..grad import shift_only
from ..errors import ResourceError
from ..schedule import Schedule
from ..schedule.heuristics import MAX_BLOCK
from .access import plan_access, plan_descriptor_site, plan_eviction, plan_ws_stores, plan_floor_ops, plan_read_masks
from .blockreduce import plan_block_reduce
from .bounds import input_tensors, plan_bounds, plan_reverse_order, ws_off_split_loops
from .buffers import plan_buffers, plan_int_buffers
from .epilogues import move_epilogues, store_operands
from .callspec import CallSpec
from .dependent_launch import plan_dependent_launch
from .dots import dot_only_axes, plan_dots, transposed_operands
from .gluon_attention import plan_gluon_attention
from .gluon_attention_bwd import plan_gluon_attention_bwd
from .gluon_conv import plan_gluon_conv
from .flat import plan_flat
from .gluon_depthwise import plan_gluon_depthwise
from .implicit_gemm import plan_implicit_gemm
from .kernel import KernelPlan, Program, StoreSpec
from .last_finish import absorb_finishes, absorb_outputs, plan_block_folds
from .launch_grid import plan_launch_dims
from .lower import lower
from .loop_stores import loop_store_bounds, plan_loop_stores
from .online_split import plan_row_vectors
from .pairs import plan_literal_scalars, plan_native_folds, plan_pair_taps
from .passes import fp8_dots, plan_exact_counts, plan_passes, register_cap
from .persistent import plan_epilogue_reads, plan_flatten, plan_store_pieces
from .taps import plan_rolling, plan_static_loops, plan_tap_shifts, plan_tile_stages

__all__ = ["decide", "gluon_program", "one_pass_statistics", "plan_program", "sixteen_bit_terms", "unused_knobs"]


def decide(prog: Program, sched: Schedule, dtypes: Mapping[str, torch.dtype],
           out_dtypes: Mapping[str, torch.dtype], interpret: bool, i64: bool,
           tma_ok: frozenset = frozenset(), hints: Mapping[str, int] | None = None, note: str = "",
           unit_dims: Mapping[str, int] | None = None, masked_reads: frozenset = frozenset(),
           size_buckets: Mapping[str, int] | None = None, unit_scalars: frozenset = frozenset(),
           small_sizes: Mapping[str, int] | None = None, index_values: Mapping[str, int] | None = None,
           dense: frozenset = frozenset(), divisors: Mapping[str, int] | None = None) -> Program:
    """Fill every kernel's decisions in place (and return ``prog``). ``dtypes``: the input
    tensors' dtypes; ``out_dtypes``: each output's; ``tma_ok``: tensors a TMA descriptor may
    address on this call; ``hints``: integer argument -> a power of two it is a multiple of;
    ``unit_dims``: input tensor -> index of its unit-stride dim (-1: none); ``masked_reads``: the
    ``(load id, dim, poisoned)`` computed indices to mask to their dim (``poisoned``: an element
    outside is a wrong index, read as NaN: :func:`~dtriton.ir.kernel_reads`); ``size_buckets``: axis -> a power of
    two its size is at most on every call of this signature; ``unit_scalars``: the integer
    scalars equal to 1 on it; ``small_sizes``: axis -> its size, for the axes of at most 8;
    ``index_values``: int scalar -> its value, for those of pooling windows' indices; ``dense``: the
    tensors contiguous with an aligned base on this call; ``divisors``: axis -> the largest power of two
    up to 256 dividing its size."""
    any64 = kernel_f64(dtypes.values(), out_dtypes.values()) or sched.acc_dtype == "float64"
    read: frozenset = frozenset()   # the inputs the kernels before this one load
    for k in prog.kernels:
        k.size_buckets = dict(size_buckets or {})
        _decide_kernel(k, sched, dtypes, out_dtypes, "float64" if any64 else "float32", interpret, i64, tma_ok,
                       dict(hints or {}), dict(unit_dims or {}), masked_reads, unit_scalars, dict(small_sizes or {}),
                       dict(index_values or {}), dense, dict(divisors or {}))
        k.block_folds = plan_block_folds(k)
        k.reverse_order = plan_reverse_order(k, sched.tile_order, input_tensors(k) & read)
        k.launch_dims = plan_launch_dims(k)
        read |= input_tensors(k)
    prog.note = note
    return prog


def _decide_kernel(k: KernelPlan, sched: Schedule, dtypes, out_dtypes, cdt: str, interpret: bool, i64: bool,
                   tma_ok: frozenset, hints: dict, unit_dims: dict, masked_reads: frozenset,
                   unit_scalars: frozenset = frozenset(), small_sizes: dict | None = None,
                   index_values: dict | None = None, dense: frozenset = frozenset(),
                   divisors: dict | None = None) -> None:
    k.compute_dtype, k.i64, k.hints, k.unit_dims = cdt, i64, hints, unit_dims
    k.int_acc = integer_reductions([st.expr for st in k.stores], dtypes)
    k.bool_ops = boolean_ops([st.expr for st in k.stores], dtypes)
    k.interpret = k.round_bf16 = interpret
    k.block_reduce = plan_block_reduce(k)
    k.dtypes, k.out_dtypes = dict(dtypes), dict(out_dtypes)
    # a conv's reduced axes (and output rows) as flat axes, where that makes a dot
    plan_implicit_gemm(k, sched.access, tma_ok, unit_scalars)
    # innermost axes over contiguous tensors as one flat axis (schedule knob flat_axes; pointer access only)
    if sched.access in (None, "pointer"):
        plan_flat(k, _stage_knob(sched, k, "flat_axes"), dense, divisors or {})
    # a window sum's input read at the tile's address shifted by each tap (a depthwise conv's: one TMA
    # box per tap under TMA access), where no implicit GEMM is
    k.shifted_reads = k.shifted_reads or plan_tap_shifts(k, sched.access, tma_ok, unit_scalars)
    # a warp-specialised loop (it needs TMA loads) keeps the algorithm's operand order
    # (integer sums of products fold exactly, in int64, not on tensor cores, unless int8 dots)
    # a stage's own precision (its override) applies to the dots of the kernel it names
    precision = sched.stage(k.stage_names[0]).precision if k.stage_names else None
    k.dots = plan_dots(k, precision or sched.precision, swap_ok=not (sched.warp_specialize and sched.access == "tma"))
    k.dot_only = dot_only_axes(k)
    k.trans_loads = transposed_operands(k)
    k.access = plan_access(k, sched.access, tma_ok)
    k.eviction, k.evicted = plan_eviction(k, sched.eviction)
    k.passes, k.single = plan_passes(k, bool(sched.warp_specialize), sched.unroll)
    k.static_loops = plan_static_loops(k, small_sizes or {}, sched.unroll)
    k.tile_stages = plan_tile_stages(k)
    k.bounds = plan_bounds(k, sched.mask_bounds)
    k.loop_stores = plan_loop_stores(k)   # in-loop atomic stores: the pass each rides
    k.bounds = loop_store_bounds(k)
    # interleaved slices step over the tiles of the split axis; a loop whose range a mask bounds keeps
    # blocked slices (split_order_notes says so where the schedule asked for interleaved)
    k.split_interleaved = k.split_interleaved and not {lb.axis for lb in k.bounds.values()} & set(k.split_axes)
    k.passes, k.single = ws_off_split_loops(k)
    k.access = plan_ws_stores(k)
    k.flatten = plan_flatten(k)
    k.access = plan_store_pieces(k, sched.store_pieces)
    k.access = plan_epilogue_reads(k)
    k.device_descs = plan_descriptor_site(k, sched.descriptors)
    k.row_vectors = plan_row_vectors(k)
    (k.read_masks, k.poisoned_reads), k.floor_ops = plan_read_masks(k, masked_reads), plan_floor_ops(k)
    k.rolling, k.rolling_why = plan_rolling(k, bool(sched.rolling), unit_scalars)   # (needs the read masks)
    # a pooling window: its stride and padding literal, its taps read as contiguous runs, a 16-bit max in its dtype
    k.literal_scalars = plan_literal_scalars(k, index_values or {})
    k.pair_taps = plan_pair_taps(k, index_values or {}, sched.window_loads)
    k.native_folds, k.raw_loads = plan_native_folds(k, sched.narrow_minmax)
    k.window_knobs = frozenset(
        ([] if sched.window_loads == "pairs" or not plan_pair_taps(k, index_values or {}, "pairs") else ["window_loads"])
        + ([] if sched.narrow_minmax or not plan_native_folds(k, True)[0] else ["narrow_minmax"]))
    k.exact_counts = plan_exact_counts(k, small_sizes or {})
    k.max_registers = register_cap(k)


def plan_program(alg: Algorithm, sched: Schedule, b: Binding, spec: CallSpec) -> Program:
    """Lower ``alg`` under the complete schedule ``sched`` for a call with binding ``b`` and facts
    ``spec``: a :class:`Program` whose kernels carry every decision (first what buffers hold,
    :func:`dtriton.plan.epilogues.move_epilogues`, and their dtypes, :mod:`dtriton.plan.buffers`). Two-pass variances the schedule loops over become
    one pass before lowering (:func:`one_pass_statistics`), functions of literals are folded in
    double (:func:`~dtriton.ir.folded_literals`); with 16-bit terms
    (:func:`sixteen_bit_terms`) exponentials are written in base 2 and per-row divisors become
    reciprocals (:func:`~dtriton.ir.reciprocal_divisors`)."""
    out_dtypes = {o.name: d for o, d in zip(alg.outputs, b.out_dtypes)}
    traced = alg
    # the call's masked reads name nodes by position in the algorithm as traced (the rewrite
    # keeps those nodes)
    masked = frozenset((alg.nodes[pos].uid, d, poisoned) for pos, d, poisoned in spec.masked_reads)
    alg = folded_literals(alg)   # log(3.0) in double (a printed tl.log(3.0) is float32)
    alg = single_pass_variance(alg, lambda r: one_pass_statistics(sched, r))
    if sixteen_bit_terms(alg, b):
        base = alg   # (the shift analysis reads the nodes of the algorithm being rewritten)
        alg = base2_shifted_exponents(base2_exponents(alg, lambda r: True, lambda r: shift_only(base, r)))
        alg = common_divisors(alg, lambda out, y: loops_over(sched, out, y.axes))
        alg = reciprocal_divisors(alg, lambda t: b.dtypes[t].is_floating_point)
    prog = lower(alg, sched, b.axis_sizes, {k: str(v).replace("torch.", "") for k, v in out_dtypes.items()},
                 f64=kernel_f64(b.dtypes.values(), b.out_dtypes))
    plan_int_buffers(prog, integer_reductions([o.expr for o in alg.outputs], b.dtypes))
    move_epilogues(prog, alg)   # (float buffers only: after the integer ones are marked)
    store_operands(prog, alg)
    plan_buffers(prog, alg, b.dtypes, out_dtypes)
    prog = decide(prog, sched, b.dtypes, out_dtypes, spec.interpret, spec.i64, spec.tma_ok, dict(spec.hints),
                  spec.note(alg, sched.access == "tma"), dict(spec.unit_dims), masked,
                  {f[0]: f[1] for f in spec.facts}, frozenset(spec.unit_scalars), dict(spec.small_sizes),
                  dict(spec.index_values), spec.dense, {f[0]: _divisor(f[2]) for f in spec.facts})
    if sched.split_mode == "last":   # each split kernel's last program per tile finishes its partials
        absorb_finishes(prog)
        absorb_outputs(prog)   # outputs of the final values alone: stored by the same last program
    prog = gluon_program(prog, traced, sched, b, spec, out_dtypes)
    plan_dependent_launch(prog, sched.dependent_launch, spec.arch, spec.interpret)
    check_store_blocks(prog, sched)
    return prog


def _divisor(flags: tuple) -> int:
    """The largest power of two up to 256 dividing a size, from its :class:`CallSpec` facts (size % d == 0
    for d = 1, 2, 4, ..., 256)."""
    return max((1 << i for i, ok in enumerate(flags) if ok), default=1)


def _stage_knob(sched: Schedule, k: KernelPlan, name: str):
    """Knob ``name`` for kernel ``k``: its stage's override where set, else the schedule's."""
    v = getattr(sched.stage(k.stage_names[0]), name, None) if k.stage_names else None
    return getattr(sched, name) if v is None else v


def check_store_blocks(prog: Program, sched: Schedule) -> None:
    """Refuse a program that stores a block over Triton's 2**20 elements (:data:`MAX_BLOCK`): each
    store of a kernel writes a block of its layout's tiles (a contraction's accumulator too, which
    the printer's per-value check does not see), so ``tile={"i": 4096, "j": 4096}`` of a matmul is
    refused before Triton is asked. Raises :class:`~dtriton.errors.ResourceError` (a
    :class:`~dtriton.errors.ScheduleError`) naming the kernel, the stage, the tiles and the fix; a
    default schedule shrinks and retries on it."""
    for k in prog.kernels:
        if k.gluon is not None:
            continue
        for st in k.stores:
            axes = [a for a in dict.fromkeys(k.flat_of(a) for a in st.layout) if a in k.axes and not k.scalar_axis(a)]
            blocks = {a: k.axes[a].block for a in axes}
            numel = math.prod(blocks.values())
            if numel > MAX_BLOCK:
                whole = [a for a in axes if k.axes[a].role == "whole"]
                fit = dict(blocks)   # the tiles halved, the largest first, until the block fits
                while math.prod(fit.values()) > MAX_BLOCK and any(fit[a] > 1 for a in fit if a not in whole):
                    big = max((a for a in fit if a not in whole), key=lambda a: fit[a])
                    fit[big] //= 2
                fix = [f"tiles whose product is at most {MAX_BLOCK}"
                       + (f" (tile={ {a: v for a, v in fit.items() if a not in whole} })"
                          if math.prod(fit.values()) <= MAX_BLOCK else "")]
                fix += [f"strategy 'loop'/'online' instead of 'whole' for the long axis {whole[0]!r}"] if whole else []
                raise ResourceError(
                    f"the kernel for stage {', '.join(repr(x) for x in k.stage_names)} ({k.name}): its store "
                    f"{st.target}[{', '.join(st.layout)}] would be a block of {numel} elements "
                    f"({' x '.join(str(v) for v in blocks.values())}: blocks {blocks}; the schedule's "
                    f"tile={dict(sched.tile)}); Triton allows at most {MAX_BLOCK}. Use {', or '.join(fix)}")


def gluon_program(prog: Program, alg: Algorithm, sched: Schedule, b: Binding, spec: CallSpec,
                  out_dtypes: Mapping[str, torch.dtype]) -> Program:
    """``prog``, or where :func:`~dtriton.plan.gluon_attention.plan_gluon_attention` decides so for
    the traced algorithm ``alg`` (an attention forward whose program fuses the scores into an online
    pass, the schedule's ``warp_specialize`` None or True, on sm_90), one kernel printed as the Gluon
    attention forward in place of its kernels (a split of the keys and its merge included: the Gluon
    kernel's own grid covers the call); likewise a derived attention backward printed as the Gluon
    backward where :func:`~dtriton.plan.gluon_attention_bwd.plan_gluon_attention_bwd` decides so, and a
    channels-last 2-d convolution printed as the Gluon conv2d where
    :func:`~dtriton.plan.gluon_conv.plan_gluon_conv` decides so (a depthwise one as the Gluon depthwise
    kernel where :func:`~dtriton.plan.gluon_depthwise.plan_gluon_depthwise` does). ``prog.gluon_note`` says why a requested one does not apply."""
    online = [k for k in prog.kernels if any(p.online for p in k.all_passes())]
    g, prog.gluon_note = plan_gluon_attention(
        alg, b.axis_sizes, b.dtypes, out_dtypes, requested=sched.warp_specialize, interpret=spec.interpret,
        arch=spec.arch, dense=spec.dense, one_online_kernel=len(online) == 1, i64=spec.i64)
    if g is None and not prog.gluon_note:   # (not an attention forward: a derived attention backward?)
        g, prog.gluon_note = plan_gluon_attention_bwd(
            alg, b.axis_sizes, b.dtypes, out_dtypes, requested=sched.warp_specialize, interpret=spec.interpret,
            arch=spec.arch, dense=spec.dense, i64=spec.i64)
        online = prog.kernels[:1]   # (its kernels replaced by the three of the Gluon backward, printed as one)
    if g is None and not prog.gluon_note:   # (a channels-last depthwise convolution? before the conv2d's reason)
        g, prog.gluon_note = plan_gluon_depthwise(
            alg, b.axis_sizes, b.dtypes, out_dtypes, requested=sched.warp_specialize, interpret=spec.interpret,
            arch=spec.arch, dense=spec.dense, ones=frozenset(spec.unit_scalars), i64=spec.i64)
        online = prog.kernels[:1]   # (its kernel replaced by the one Gluon kernel)
    if g is None and not prog.gluon_note:   # (a channels-last 2-d convolution?)
        g, prog.gluon_note = plan_gluon_conv(
            alg, b.axis_sizes, b.dtypes, out_dtypes, requested=sched.warp_specialize, interpret=spec.interpret,
            arch=spec.arch, dense=spec.dense, ones=frozenset(spec.unit_scalars), i64=spec.i64)
        online = prog.kernels[:1]   # (its kernels, a split of the reduction included, replaced by the one Gluon kernel)
    if g is None:
        return prog
    k = online[0]
    k.gluon, k.split, k.split_more, k.persistent, k.launch_dims = g, None, (), 0, None
    k.stores, k.materialized = [StoreSpec(o.name, o.expr, tuple(o.layout)) for o in alg.outputs], {}
    prog.kernels, prog.buffers, prog.output_direct = [k], {}, {}
    return prog


def sixteen_bit_terms(alg: Algorithm, b: Binding) -> bool:
    """Whether max-shifted exponentials are written in base 2 for this call
    (:func:`~dtriton.ir.base2_exponents`) and per-row divisors become reciprocals: when every
    floating input of the highest rank among ``alg``'s floating inputs is fp16 or bf16, so the
    terms are consumed at 16-bit precision (attention's probabilities feed a 16-bit dot), far
    above the base-2 form's rounding (about ``|x| * 2**-24`` relative in each term). Floating inputs
    of lower rank (row statistics: a derived backward's saved row max and sum, kept in fp32 by
    the saving forward) do not decide: they are read per row, not as the 16-bit tiles."""
    ranks = {p.name: len(p.dims) for p in alg.params if isinstance(p, InputTensor)}
    fl = {n: d for n, d in b.dtypes.items() if d.is_floating_point}
    if not fl:
        return False
    top = max(ranks.get(n, 0) for n in fl)
    return all(d in (torch.float16, torch.bfloat16) for n, d in fl.items() if ranks.get(n, 0) == top)


def loops_over(sched: Schedule, stage: str, axes) -> bool:
    """Whether ``sched`` loops (strategy "loop") over one of ``axes`` in ``stage``'s kernel, so values
    over those axes are computed at each step of its loop rather than once per program."""
    strategy = dict(sched.strategy, **sched.stage(stage).strategy)
    return any(strategy.get(a) == "loop" for a in axes)


def one_pass_statistics(sched: Schedule, r: Reduce) -> bool:
    """Whether the two-pass variance stage ``r`` becomes one pass with its mean
    (:func:`~dtriton.ir.single_pass_variance`): when ``sched`` loops over one of its reduced axes
    (a "whole" row is read once anyway) or splits one across programs (not with atomics: they add
    sums only), and none of them is "online"."""
    strategy = dict(sched.strategy, **sched.stage(r.name).strategy)
    split = any(sched.split.get(a, 1) > 1 for a in r.over)
    return ((split or any(strategy.get(a) == "loop" for a in r.over)) and not (split and sched.split_mode == "atomic")
            and all(strategy.get(a) != "online" for a in r.over))


def unused_knobs(alg: Algorithm, sched: Schedule, prog: Program) -> list[str]:
    """Knobs of the complete schedule ``sched`` that the planned program ``prog`` does not use (each becomes a ``ScheduleWarning``): a
    split mode without a split, warp specialisation dropped on loops whose loads are not
    all TMA or without a contraction loop, a dot precision without fp32 dots, eviction hints on
    inputs that no pointer or block-pointer load reads (TMA tile loads take none), ``mask_bounds=False``
    where no loop has bounds to turn off, an ``unroll`` of 2 or more without a reduction loop,
    ``rolling=True`` where no window sum is computed by rolling rows, ``window_loads="taps"`` or
    ``narrow_minmax=False`` where no pooling window would read pairs or fold in 16 bits."""
    # (a kernel printed as the Gluon attention forward has none of the Triton loops the notes are about)
    kernels = [k for k in prog.kernels if k.gluon is None]
    notes = [f"warp_specialize=True: {prog.gluon_note}; the Triton kernel runs"] if prog.gluon_note else []
    notes += [prog.launch_note] if prog.launch_note else []
    # (on the interpreter that reason is the whole story: no kernel is warp-specialised there, so the notes on
    # the Triton loops below, e.g. "needs access='tma'", would point at a fix that changes nothing)
    ws_told = bool(prog.gluon_note) and all(k.interpret for k in prog.kernels)
    if sched.split_mode is not None and not any(f > 1 for f in sched.split.values()):
        sums = [a for a in alg.reduction_axes
                if all(st.node.combiner.splittable for st in alg.stages.values() if not st.is_output and a in st.node.over)]
        how = (f"it applies to split-K, e.g. split={{{sums[0]!r}: 4}}" if sums else
               f"{alg.name} has no reduction to split")
        notes.append(f"split_mode={sched.split_mode!r} has no effect: this call splits no reduction axis (the "
                     f"complete schedule's split is {dict(sched.split)}); {how}. Give a split, or drop split_mode")
    if sched.split_order is not None and not any(f > 1 for f in sched.split.values()):
        notes.append(f"split_order={sched.split_order!r} has no effect: this call splits no reduction axis (the "
                     f"complete schedule's split is {dict(sched.split)}). Give a split, or drop split_order")
    looped = sorted({(a, k.axes[a].block) for k in kernels for a in k.split_axes
                     if a in k.axes and k.axes[a].role == "loop" and sched.strategy.get(a) == "whole"})
    for a, blk in looped:   # (a split slice is stepped over: one block per slice would leave programs idle)
        notes.append(f"strategy={{{a!r}: 'whole'}} has no effect on split axis {a!r}: each program steps over its "
                     f"slice of {a!r} in tiles of {blk}; give strategy {{{a!r}: 'loop'}} (with a tile), or drop the "
                     f"split of {a!r} to cover it whole")
    kept = [k.name for k in kernels if sched.split_order == "interleaved" and k.split_axes and not k.split_interleaved]
    if kept:
        notes.append(f"split_order='interleaved' is not applied to kernel(s) {', '.join(kept)}: a mask bounds the loop "
                     "over their split axis, so their slices stay blocked")
    split = [p for k in kernels for p in k.all_passes() if p.ws_requested and not p.warp_specialize and not ws_told
             and {lb.axis for lb in k.bounds.values() if lb.unmasked} & set(p.loop_axes)]
    if split:
        notes.append("warp_specialize=True has no effect on loops that mask bounds split into fully visible and "
                     "boundary tiles (causal attention): Triton 3.6 cannot warp-specialise that pair of loops on "
                     "Hopper; they run without it (mask_bounds=False keeps one masked loop over every tile)")
    fp8 = [p for k in kernels for p in k.all_passes()
           if p.ws_requested and not p.warp_specialize and not ws_told and fp8_dots(k, p)]
    if fp8:
        notes.append("warp_specialize=True has no effect on loops of fp8 dots: Triton 3.6's warp-specialised fp8 dots "
                     "gave wrong results on the H200; they run without it")
    if not ws_told and any(p.ws_requested and not p.warp_specialize for k in kernels for p in k.all_passes()
                           if p not in split and p not in fp8):
        notes.append("warp_specialize=True has no effect on loops whose loads are not all TMA "
                     "(needs access='tma' and TMA-addressable tensors: last stride 1, 16-byte aligned rows and "
                     "base); those loops run without it")
    if sched.descriptors != "auto" and not any(acc.kind == "tma" for k in kernels for acc in k.access.values()):
        notes.append(f"descriptors={sched.descriptors!r} has no effect: no tile of this call is read or written "
                     "through TMA (it needs access='tma' and TMA-addressable tensors)")
    if sched.store_pieces and not any(acc.pieces == sched.store_pieces or (acc.kind == "tma" and sched.store_pieces == 1)
                                      for k in kernels for acc in k.access.values()):
        notes.append(f"store_pieces={sched.store_pieces} has no effect: no output tile of this call is stored through "
                     "TMA in that many pieces (it needs access='tma', a TMA-addressable output and, for 2, a last "
                     "tile dim of 16 bytes a piece or more)")
    if sched.warp_specialize and not ws_told and not any(k.ws_loop or k.gluon is not None for k in prog.kernels):
        notes.append("warp_specialize=True has no effect: no kernel has a contraction (tl.dot) loop to specialise")
    if sched.precision not in ("auto", "ieee") and not any(k.fp32_dot for k in kernels):
        notes.append(f"precision={sched.precision!r} has no effect: no kernel has a tl.dot with fp32 operands "
                     f"(it sets how fp32 dots use tensor cores; 16-bit dots use them anyway)")
    if not sched.mask_bounds and not any(plan_bounds(k) for k in kernels):
        notes.append("mask_bounds=False has no effect: no loop of this call reduces an operand that a condition on "
                     "the loop's axis masks (e.g. where(j <= i, s, -inf)); drop it")
    if sched.unroll > 1 and not any(p.unroll > 1 for k in kernels for p in k.all_passes()):
        notes.append(f"unroll={sched.unroll} has no effect: no kernel of this call has a reduction loop to unroll (every "
                     "reduced axis is 'whole' in one block, or its loop is warp-specialised); drop it, or loop over "
                     "an axis (strategy='loop' with a tile)")
    if sched.rolling and not any(k.rolling for k in kernels):
        why = "; ".join(dict.fromkeys(k.rolling_why for k in kernels if k.rolling_why)) or (
            "no kernel of this call stores one window sum of two loads whose input row is an output row axis (tile 2 "
            "or more) plus an unrolled window axis (a depthwise convolution at stride 1 under pointer access, not "
            "persistent)")
        notes.append(f"rolling=True has no effect: {why}; or drop it")
    if sched.window_loads != "pairs" and not any("window_loads" in k.window_knobs for k in kernels):
        notes.append(f"window_loads={sched.window_loads!r} has no effect: no kernel of this call reads a pooling window's "
                     "taps as contiguous pairs (a window of stride 2, 4 or 8 on the unit-stride dim, pointer access, an "
                     "unrolled tap loop); drop it")
    if not sched.narrow_minmax and not any("narrow_minmax" in k.window_knobs for k in kernels):
        notes.append("narrow_minmax=False has no effect: no kernel of this call has a pooling window's max or min of one "
                     "float16 input (or bfloat16 on the GPU) to fold in that dtype; drop it")
    asked = [sched.flat_axes] + [st.flat_axes for st in sched.stages.values() if st.flat_axes is not None]
    if any(asked) and not any(k.flat_direct for k in kernels):
        atomic_split = bool(prog.output_direct) or any(bs.zero for bs in prog.buffers.values())
        notes.append(f"flat_axes={max(asked)} has no effect: no kernel of this call has a run of innermost axes over "
                     "contiguous tensors to fuse (an element-wise kernel's grid axes, or a plain sum's looped axes, "
                     "read and written as the last dims in order of dense tensors, pointer access; a sum fused into "
                     "an output's kernel is not one: stages={'<its stage>': {'place': 'materialize'}} gives it a kernel "
                     "of its own" + ("; nor is a sum split across programs by atomics, as here: split_mode='partials' "
                                     "keeps the split and lets it flatten" if atomic_split else "") + "); drop it")
    used = set().union(*(k.evicted for k in kernels)) if kernels else set()
    for t, ev in sched.eviction.items():
        if ev != "evict_normal" and t not in used:
            notes.append(f"eviction={{{t!r}: {ev!r}}} has no effect: no load of {t} takes the hint (TMA tile loads "
                         f"take none; use access='pointer' to keep it)")
    return notes
