"""Which fused reductions of a kernel share a loop (a *pass*), which passes run online, and which
contraction loops are warp-specialised.

The reductions whose free axes are all bound by the program (grid and whole axes) are computed
once per program, before the stores, in passes: in dependency order, the ready reductions that loop
over the same axes share one loop. The *online* strategy merges a max stage with the sums that use
it as ``exp(x - max)`` into one pass with rescaling (Milakov & Gimelshein 2018; the trick
FlashAttention builds on). Every other fused reduction is computed on its own where it is first
needed (a pass of one; which scope that is, is the printer's business).

Warp specialisation (the schedule's ``warp_specialize``) applies to loops of passes with a
contraction. Triton's Hopper warp specialisation handles TMA-fed loops only (pointer loads in the
loop crash its WSLowerToken pass on the H200), so a loop in which any read is not a TMA load runs
plain (loads through block pointers are not TMA either).
"""

from __future__ import annotations

from ..ir import Load, Reduce, Unary, mul_factors, shift_exponential, walk
from .access import tile_key
from .graph import contains, fused_deps, fused_reduces, has, need_axes
from .kernel import KernelPlan, PassPlan

__all__ = ["block_accumulated", "fp8_dots", "online_ok", "pipelined", "plan_exact_counts", "plan_passes", "program_shifted",
           "register_cap",
           "shift_factor", "state_means", "top_bound", "unrolled", "UNROLL_BYTES", "REGISTERS_PER_SM", "PROGRAMS_PER_SM"]

#: Bytes a program's statistics loop should load per iteration (``unroll`` 0: the plan's choice).
#: Triton issues one step's loads and waits for them before the next step's (the loop state
#: depends on them), so a program keeps one step in flight; a variance's state (four fp32 values per
#: element) holds a program to 2048-element steps at four programs an SM: 16 KB an SM in fp16.
#: sm_90 wants ~32-64 KB in flight an SM (H200, s4: layer-norm statistics 84 us for 134 MB fp16
#: and 81 us for 268 MB fp32, the same ~1.3 us per step). Unrolling the innermost loop issues its
#: steps' loads together (sm_90 SASS: 4 LDG.128 back to back, registers unchanged at 64).
UNROLL_BYTES = 16 * 1024
#: Registers a thread's accumulators of a loop may take for the plan to unroll it (a variance's
#: per-lane state counts four values an element, its program-shifted sums two).
UNROLL_ACC_REGISTERS = 32
#: Registers of an SM (sm_80 / sm_90: 64K 32-bit registers).
REGISTERS_PER_SM = 65536
#: Programs an SM should hold of a kernel whose statistics loops the plan unrolled
#: (:func:`register_cap`): the split rules size its grid for four 8-warp programs an SM.
PROGRAMS_PER_SM = 4


def top_bound(k: KernelPlan) -> set[str]:
    """Axes the program scope binds: the grid axes (and the members of flat ones) and the whole axes."""
    return set(k.grid) | {a for g in k.grid for a in k.flat.get(g, ())} | {a for a, p in k.axes.items() if p.role == "whole"}


def _loop_axes(k: KernelPlan, r: Reduce, bound: set[str]) -> tuple[str, ...]:
    """The axes a pass computing ``r`` loops over, outermost first: its reduced axes the program
    does not bind (members of a flat axis: that axis, once), in the order ``r`` reduces them,
    except that the split axes go first (in split order): a program's slice of it is a few steps (layer norm's h
    split 32 ways: one step of 8 rows), so the other axes form the innermost loop that the plan
    unrolls (:func:`unrolled`)."""
    axes = tuple(dict.fromkeys(k.flat_of(a) for a in r.over if a not in bound))
    split = k.split_axes
    return tuple(sorted(axes, key=lambda a: split.index(a) if a in split else len(split)))


def shift_factor(s: Reduce, m: Reduce, k: KernelPlan) -> Unary | None:
    """The one factor ``exp(a - m)``, ``exp2(a - m)`` or ``exp2((a - m) * log2(e))``
    (:func:`~dtriton.ir.shift_exponential`) of sum ``s``'s body through which it uses max stage
    ``m`` (``a`` free of ``m``), or None when ``s`` uses ``m`` otherwise or more than once."""
    hits = [f for f in mul_factors(s.x) if contains(f, m, k.materialized)]
    if len(hits) != 1:
        return None
    got = shift_exponential(hits[0], m)
    return hits[0] if got is not None and not contains(got[0], m, k.materialized) else None


def online_ok(s: Reduce, grp: list[Reduce], pending: list[Reduce], k: KernelPlan) -> bool:
    """Sum ``s`` can join a one-pass online group: every max stage of ``grp`` it uses appears
    once, as a factor ``exp(a - max)`` of its body (``s``'s combiner is ``"rescaled"`` online, the
    maxes' ``"running_max"``)."""
    if s.combiner.online != "rescaled":
        return False
    deps = fused_deps(s, k.materialized)
    maxes = [m for m in grp if m.combiner.online == "running_max" and has(deps, m)]
    if not maxes or any(not has(grp, d) and has(pending, d) for d in deps):
        return False
    return all(shift_factor(s, m, k) is not None for m in maxes)


def _top_groups(k: KernelPlan, tops: list[Reduce], bound: set[str]) -> list[tuple[list[Reduce], tuple[str, ...]]]:
    """The passes of the program scope: (reductions, loop axes), in emission order."""
    out = []
    pending = list(tops)
    while pending:
        ready = [r for r in pending if not any(has(pending, d) and d is not r for d in fused_deps(r, k.materialized))]
        if not ready:
            raise AssertionError("cyclic reductions")
        groups: dict[tuple, list[Reduce]] = {}
        for r in ready:
            groups.setdefault(_loop_axes(k, r, bound), []).append(r)
        for key, grp in groups.items():
            if key and all(k.axes[a].role == "online" for a in key):
                # pull in pending sums that depend on a max of this group via exp(x - max)
                extra = [p for p in pending if not has(grp, p) and _loop_axes(k, p, bound) == key
                         and all(has(grp, d) or not has(pending, d) for d in fused_deps(p, k.materialized))
                         and online_ok(p, grp, pending, k)]
                grp = grp + extra
                pending = [p for p in pending if not has(extra, p)]
            out.append((grp, key))
        pending = [p for p in pending if not has(ready, p)]
    return out


def _reads_in_loop(k: KernelPlan, rs: list[Reduce], loop_axes: tuple[str, ...], bound: set[str]) -> bool:
    """Whether a pass over ``loop_axes`` computing ``rs`` reads memory inside its loop other than
    through TMA: a load or buffer read placed by an axis bound in the loop (or in a loop nested in
    it, opened by a reduction computed inside)."""
    memo: dict = {}
    looped = frozenset(loop_axes) | {m for a in loop_axes for m in k.flat.get(a, ())}
    stack = [(r.x, looped) for r in rs]
    seen = set()
    while stack:
        n, inner = stack.pop()
        if (n.uid, inner) in seen:
            continue
        seen.add((n.uid, inner))
        if isinstance(n, Reduce) and n.uid in k.materialized:
            if set(n.axes) & inner:
                return True
            continue
        if isinstance(n, Reduce):
            if need_axes(n, k.materialized, frozenset(), memo) & inner:
                stack.append((n.x, inner | {a for a in n.over if a not in bound}))
            continue
        if isinstance(n, Load) and need_axes(n, k.materialized, frozenset(), memo) & inner:
            key = tile_key(k, n)
            acc = k.access.get((n.tensor.name, key)) if key is not None else None
            if acc is None or acc.kind != "tma":
                return True
        stack.extend((c, inner) for c in n.children())
    return False


def _pass(k: KernelPlan, rs: list[Reduce], loop_axes: tuple[str, ...], bound: set[str], ws: bool,
          unroll: int = 0) -> PassPlan:
    online = bool(loop_axes) and all(k.axes[a].role == "online" for a in loop_axes) and len(rs) > 1
    asked = ws and bool(loop_axes) and any(r.uid in k.dots for r in rs)
    on = asked and not _reads_in_loop(k, rs, loop_axes, bound) and not fp8_dots(k, rs)
    maxes = tuple(r.uid for r in rs if online and r.combiner.online == "running_max"
                  and any(has(fused_deps(s, k.materialized), r) for s in rs if s is not r))
    base2 = tuple(m for m in maxes if _shift_op(k, rs, m) == "exp2")
    block = block_accumulated(k, rs, loop_axes, online)
    return PassPlan(tuple(r.uid for r in rs), tuple(loop_axes), online, on, asked, maxes, block, base2,
                    pipelined(k, rs, loop_axes), state_means(k, [r for r in rs if r.uid in block]),
                    unrolled(k, rs, loop_axes, block, on, unroll, program_shifted(k, rs, block)),
                    program_shifted(k, rs, block))


def fp8_dots(k: KernelPlan, rs) -> bool:
    """Whether reductions ``rs`` (or the pass ``rs`` names, a :class:`PassPlan`) include a dot of
    fp8 operands: its loop is never warp-specialised, as Triton 3.6's warp-specialised fp8 dots
    were wrong on the H200 (bench/narrow.py --variants, 02:20 call: relative error 0.28 at
    128x256x128 s3 and 128x128x128 s4, 4 warps; the int8 and 16-bit ones were right)."""
    uids = rs.reductions if isinstance(rs, PassPlan) else [r.uid for r in rs]
    return any(u in k.dots and (k.dots[u].operand_dtype or "").startswith("float8") for u in uids)


def pipelined(k: KernelPlan, rs: list[Reduce], loop_axes: tuple[str, ...]) -> int:
    """The stages a reduction loop's loads are prefetched over (``tl.range``'s ``num_stages``):
    the kernel's ``num_stages`` when it is 3 or more, on the GPU, for a loop without contractions
    (whose loads the launch option pipelines already); else 0. Triton pipelines plain loads only
    in a loop marked so (for sm_90 they then go through ``cp.async``); the defaults
    (``num_stages`` 2) keep plain loops, exploration tries 3 and 4."""
    if k.interpret or not loop_axes or k.num_stages < 3 or any(r.uid in k.dots for r in rs):
        return 0
    # nor around a contraction's own loop inside it (max pooling's scalar loop over a group's columns)
    inside = fused_reduces([r.x for r in rs], k.materialized)
    if any(d.uid in k.dots and set(d.axes) & set(loop_axes) for d in inside):
        return 0
    return k.num_stages


def unrolled(k: KernelPlan, rs: list[Reduce], loop_axes: tuple[str, ...], block: tuple[int, ...], ws: bool,
             asked: int, shifted: tuple[int, ...] = ()) -> int:
    """The unroll factor of a pass's innermost loop (``tl.range``'s ``loop_unroll_factor``; 0: none):
    the schedule's ``unroll`` (``asked``) when it is 1 or more, on any loop that is not
    warp-specialised; else (0: the plan picks), on the GPU, for a loop whose reductions all
    accumulate element-wise (``block``: statistics loops, no dots) in at most
    :data:`UNROLL_ACC_REGISTERS` registers a thread, the power of two up to 4 that makes a program
    load about :data:`UNROLL_BYTES` per iteration. (Layer norm's backward column sums, three
    32x128 blocks over 4 warps: 96 registers of accumulators; unrolled, ptxas spilled 176 bytes a
    thread and the H200's fwd+bwd step went from 0.595 to 0.881 ms, s5 call 5.)"""
    if not loop_axes or ws:
        return 0
    if asked:
        return asked if asked > 1 else 0
    if k.interpret or not block or len(block) != len(rs):
        return 0
    elems = _step_bytes(k, rs, elements=True)
    values = sum(2 if r.uid in shifted else (len(r.combiner.loop_state) if r.combiner.state else 1) for r in rs)
    if values * elems > UNROLL_ACC_REGISTERS * k.num_warps * 32:
        return 0
    step = _step_bytes(k, rs)
    u = 1
    while u < 4 and step * u * 2 <= UNROLL_BYTES:
        u *= 2
    return u if u > 1 else 0


def program_shifted(k: KernelPlan, rs: list[Reduce], block: tuple[int, ...]) -> tuple[int, ...]:
    """The block-accumulated variances of a loop pass whose lanes share one shift per program:
    those of kernels without flat axes whose free axes are all one index per program (statistics
    kernels: one variance a program), so a program's lanes hold values of one statistic. A step
    then costs a conversion, a subtraction, an add and a multiply-add per value (the per-lane shift,
    set at each lane's first value, cost a compare and a select more, and a count per lane:
    H200 s5 ncu, layer-norm statistics issue-bound at ~12 instructions a value). A variance with a
    block of its free axes in the program keeps a shift per lane: its rows' means may differ; one
    whose reduced axes are all one index a step (no block) keeps it too."""
    if k.flat:
        return ()
    return tuple(r.uid for r in rs if r.uid in block and r.combiner.state
                 and all(a not in k.axes or k.scalar_axis(a) for a in r.axes)
                 and any(a in k.axes and not k.scalar_axis(a) for a in r.over))


def register_cap(k: KernelPlan) -> int:
    """The register cap per thread (ptxas's ``maxnreg``) of a GPU kernel whose statistics loops the
    plan unrolled (``unroll`` 0): what keeps :data:`PROGRAMS_PER_SM` programs on an SM (64 at 8
    warps), so a grid sized for them runs in the waves it was sized for. ptxas allots such a
    loop 64 to 80 registers depending on its address arithmetic (sm_90: group norm's 73 left three
    programs an SM: its 512 programs in 1.3 waves); 0 (no cap) elsewhere, or where the cap would be
    under 64."""
    tops = {u for p in k.passes for u in p.reductions}
    used = list(k.passes) + [p for u, p in k.single.items() if u not in tops]   # (the printed passes)
    if k.interpret or not any(p.unroll > 1 and p.block_acc and not p.online for p in used):
        return split_dot_cap(k)
    cap = sm_share_cap(k.num_warps)
    return cap if 64 <= cap < 255 else 0


def sm_share_cap(num_warps: int) -> int:
    """The registers a thread may take (a multiple of 8) so that :data:`PROGRAMS_PER_SM` programs of
    ``num_warps`` warps fit an SM's register file together (128 at 4 warps, 64 at 8)."""
    return REGISTERS_PER_SM // (PROGRAMS_PER_SM * num_warps * 32) // 8 * 8


#: fp32 dot precisions Triton runs as several tensor-core passes over operands it splits in registers
SPLIT_PRECISIONS = ("tf32x3", "bf16x3", "bf16x6")


def split_dot_cap(k: KernelPlan) -> int:
    """The register cap of a GPU kernel of 4 warps whose dots are all fp32 at a split precision
    (:data:`SPLIT_PRECISIONS`) with output tiles of at most 64 x 64: 128 a thread, so
    :data:`PROGRAMS_PER_SM` programs share an SM. Triton 3.6 runs each step of such a dot as 3 or 6
    tensor-core passes over the operands' parts split in registers, waiting for each pass, so a
    program idles between them and the SM needs other programs to fill the gaps; ptxas gives the
    diffusion layer's 64 x 64 tf32x3 output GEMM 153 registers (three programs an SM) and, capped at
    128, spills nothing (sm_90 compile). H200, s8 call 1: the diffusion forward at V = 100000 133.2 us
    against 136.9 uncapped (out0 -3.7 us), V = 2000 within noise. 0 (no cap) elsewhere: larger tiles
    need their registers (a 64 x 128 accumulator alone takes 64 a thread)."""
    if k.interpret or k.num_warps != 4 or not k.dots:
        return 0
    dots = list(k.dots.values())
    if any(d.precision not in SPLIT_PRECISIONS or k.axes[d.m].block * k.axes[d.n].block > 64 * 64 for d in dots):
        return 0
    return sm_share_cap(k.num_warps)


def _step_bytes(k: KernelPlan, rs: list[Reduce], elements: bool = False) -> int:
    """Bytes one step of a pass computing ``rs`` loads: its block (the blocks of the axes its
    values use, scalar axes counting 1) times the widest dtype among the tensors they read (with
    ``elements``: the block's elements)."""
    axes = {k.flat_of(a) for r in rs for a in r.x.axes}
    elems = 1
    for a in axes:
        p = k.axes.get(a)
        if p is not None and not k.scalar_axis(a):
            elems *= p.block
    if elements:
        return elems
    sizes = [k.dtypes[n.tensor.name].itemsize for r in rs for n in walk([r.x])
             if isinstance(n, Load) and n.tensor.name in k.dtypes]
    return elems * max(sizes, default=4)


def _shift_op(k: KernelPlan, rs: list[Reduce], m: int) -> str:
    """The exponential ("exp" or "exp2") that rescales the sums of an online pass when max ``m``
    moves: "exp2" for a base-2 max, "exp" for a natural one (also under ``exp2((a - m) * log2(e))``;
    each sum uses ``m`` through the one factor :func:`shift_factor` finds, as :func:`online_ok`
    admitted them)."""
    mx = next(r for r in rs if r.uid == m)
    for s in rs:
        f = shift_factor(s, mx, k) if s is not mx and s.combiner.online == "rescaled" else None
        if f is not None:
            return shift_exponential(f, mx)[1]
    return "exp"


def block_accumulated(k: KernelPlan, rs: list[Reduce], loop_axes: tuple[str, ...], online: bool) -> tuple[int, ...]:
    """The reductions of a loop pass that accumulate element-wise in a block of the loop's shape
    and fold that block once after the loop: every one-result reduction that is not a contraction,
    outside online passes. Folding each step's block inside the loop instead costs a cross-warp
    reduction per step (for sm_90, the fp16 instance norm's 2048-element steps compiled to
    shared-memory stores and two barriers per step; it ran at 0.33 TB/s on the H200)."""
    if not loop_axes or online:
        return ()
    return tuple(r.uid for r in rs if r.uid not in k.dots and r.combiner.results == 1)


def state_means(k: KernelPlan, rs: list[Reduce]) -> tuple[tuple[int, int], ...]:
    """``(mean, variance)`` id pairs among the block-accumulated reductions ``rs`` of one loop: a
    mean of the values a variance stage (a kind with a ``state``: count, shift, mean deviation)
    folds over the same axes, read off that state instead of accumulating its own block (one
    fp32 register and one add per element less; batch norm's statistics step over 2048 fp16
    elements with five). A mean the kernel stores as an output itself keeps its own sum: torch
    gives +-inf for a mean over an infinite value, the state NaN."""
    outputs = {st.expr.uid for st in k.stores if st.target in k.out_dtypes}
    pairs = []
    for m in rs:
        if m.combiner.name != "mean" or m.uid in outputs:
            continue
        v = next((v for v in rs if v.combiner.state and v.x is m.x and set(v.over) == set(m.over)), None)
        if v is not None:
            pairs.append((m.uid, v.uid))
    return tuple(pairs)


def plan_passes(k: KernelPlan, warp_specialize: bool, unroll: int = 0) -> tuple[list[PassPlan], dict[int, PassPlan]]:
    """The passes of the program scope, and the pass of each fused reduction computed on its own.
    ``unroll``: the schedule's (0: the plan picks, :func:`unrolled`). Needs the kernel's dots and
    access decided."""
    bound = top_bound(k)
    tops: list[Reduce] = []
    for st in k.stores:
        for r in fused_reduces([st.expr], k.materialized):
            if not has(tops, r) and all(a in bound for a in r.axes):
                tops.append(r)
    passes = [_pass(k, grp, key, bound, warp_specialize, unroll) for grp, key in _top_groups(k, tops, bound)]
    single = {}
    for r in fused_reduces([st.expr for st in k.stores], k.materialized):
        single[r.uid] = _pass(k, [r], _loop_axes(k, r, bound), bound, warp_specialize, unroll)
    return passes, single


def plan_exact_counts(k: KernelPlan, small: dict[str, int]) -> dict[int, int]:
    """``{reduction id: the number of values it averages}`` for the means (``finalize="count"``) kernel ``k``
    computes whose reduced axes all have sizes the call pins exactly (``small``: axes of at most 8
    elements, part of the call's specialisation): a 2x2 pooling window's mean divides by the literal 4,
    which the printer writes as a multiply by 0.25 (a power of two: exact), not a division by the
    product of two size arguments (sm_90: 16 instructions fewer a program of the fp16 2x2 average pool)."""
    out = {}
    for r in fused_reduces([st.expr for st in k.stores], k.materialized):
        if r.combiner.finalize == "count" and r.over and all(a in small for a in r.over):
            n = 1
            for a in r.over:
                n *= small[a]
            if n:   # (an empty window keeps the printed division: 0 / 0, NaN, as torch's mean of nothing)
                out[r.uid] = n
    return out
