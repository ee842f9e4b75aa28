"""Printing reductions: passes (loops, online rescaling, warp specialisation as planned), masked
``tl.reduce`` bodies and ``tl.dot`` contractions with their operands."""

from __future__ import annotations

from typing import Any

import torch

from ...ir import Combiner, Load, Reduce, fmt, get_combiner
from ...plan.graph import fused_deps
from ...plan.kernel import DotPlan, PassPlan
from .prelude import (INDEX_SENTINEL, TL_DTYPES, close_helper, combine_helper, combine_text, identity_text, step_helper,
                      variance_text)
from .scope import Bind, Scope, pointer_loads

__all__ = ["ReducePrinter"]

SUM = get_combiner("sum")


class ReducePrinter:
    """Mixin of :class:`~dtriton.backends.triton.kernel.KernelPrinter`: passes and dots."""

    def compute_single(self, r: Reduce, scope: Scope):
        """Compute fused reduction ``r`` on its own in ``scope`` (its home: where it is first needed),
        looping over its reduction axes that ``scope`` does not bind."""
        key = tuple(a for a in r.over if scope.find_bind(a) is None)
        self.emit_pass([r], list(key), scope, self.k.single[r.uid])

    def helper(self, c: Combiner) -> str:
        """The name of ``c``'s combine helper, which the module header then defines."""
        return self.use_helper(c.helper, combine_helper(c))

    def acc_dtype(self, r: Reduce) -> str:
        """The Triton dtype ``r`` accumulates in: int64 for the integer reductions the plan names
        (``KernelPlan.int_acc``), its input's 16-bit dtype for the max/min folds it names
        (``KernelPlan.native_folds``: ``r.x`` is that load), else the compute dtype."""
        if r.uid in self.k.native_folds:
            return TL_DTYPES[self.dtypes[r.x.tensor.name]]
        return "tl.int64" if r.uid in self.k.int_acc else self.cdt

    def identity(self, r: Reduce) -> str:
        """The identity of ``r``'s kind in its accumulator's dtype (``0`` or ``0.0``, ...)."""
        return identity_text(r.combiner, torch.int64 if r.uid in self.k.int_acc else torch.float32)

    def fused_deps(self, r: Reduce) -> list[Reduce]:
        """The fused reductions ``r``'s body uses directly."""
        return fused_deps(r, self.k.materialized)

    def scalar_axis(self, a: str) -> bool:
        """A grid axis with tile 1: a scalar index, never a block dim."""
        return self.k.scalar_axis(a)

    def emit_pass(self, rs: list[Reduce], loop_axes: list[str], scope: Scope, pp: PassPlan):
        """One pass: open loops over ``loop_axes`` (if any) and reduce every stage of ``rs``, online
        and warp-specialised as the plan's pass ``pp`` says."""
        names = ", ".join(r.name for r in rs)
        strategy = "online (one pass, rescaled)" if pp.online else ("loop" if loop_axes else "whole (in registers)")
        scope.emit(f"# stages {names}: {strategy} over {', '.join(rs[0].over)}")
        for r in rs:
            scope.emit(f"#   {r.name} = {fmt(r, 0, self.names, limit=None)}")
        accs = self.accumulators(rs, loop_axes, scope, pp)
        lb = self.k.bounds.get(pp.reductions) if loop_axes else None
        segments = self.bound_segments(lb, scope) if lb is not None else [(None, False)]
        for rng, unmasked in segments:
            stages = lb.edge_stages if lb is not None and lb.unmasked and not unmasked else 0
            # a window whose taps are read as contiguous runs: its tap axis is not a loop (plan.pairs)
            pair = self.k.pair_taps.get(rs[0].uid) if len(rs) == 1 else None
            opened = [a for a in loop_axes if pair is None or a != pair.tap]
            inner, loops = self.open_loops(rs, opened, scope, pp, accs, rng, unmasked, stages)
            if unmasked:
                inner.assumed.update(lb.guards)
            if pair is not None:
                self.pair_steps(rs, pair, loop_axes, inner, scope, pp, accs)
            else:
                self.pass_body(rs, loop_axes, inner, scope, pp, accs)
            # the plan's in-loop atomic stores riding this pass, after the step's own reductions
            # (printing the partial sums first measured slower on the H200: 0.803 vs 0.734 ms)
            for st in self.k.stores:
                if loop_axes and self.k.loop_stores.get(st.target) == pp.reductions:
                    self.loop_add(st, inner, self.loop_partial(st, inner))
            for parent, child in reversed(loops):
                parent.close(child)
                if pp.warp_specialize and pointer_loads(child):
                    raise AssertionError(f"kernel {self.k.name}: the plan warp-specialises a loop with loads that are "
                                         "not TMA (plan and printer disagree)")
        if pp.online and loop_axes:
            self.nan_where_max_is_minus_inf(rs, set(pp.online_maxes), scope, accs)
        self.finish_pass(rs, loop_axes, scope, accs, dict(pp.state_means))

    def pass_body(self, rs: list[Reduce], loop_axes: list[str], inner: Scope, scope: Scope, pp: PassPlan, accs) -> None:
        """One step of every reduction of a pass in its innermost scope ``inner`` (online maxes
        first, then the rescaled sums), or the whole reduction when the pass has no loop. Block
        accumulators are declared by the first of the pass's loops (the plan's bounds may print
        several in a row)."""
        lin = inner.layout
        from_state = dict(pp.state_means)
        for r in rs:
            if r.uid in pp.block_acc and "acc" not in accs[r.uid] and r.uid not in from_state:
                if r.uid in pp.shifted:
                    masked = (self.mask_for(r.over, inner, inner.layout) is not None
                              or self.k.bounds.get(pp.reductions) is not None)
                    self.shifted_accumulator(r, accs[r.uid], inner, scope, loop_axes, masked)
                else:
                    self.block_accumulator(r, accs[r.uid], inner, scope)
        mstate = self.online_maxes(rs, inner, scope, pp, accs) if pp.online else {}
        for r in rs:
            if r.uid in mstate or r.uid in from_state:
                continue
            info = accs[r.uid]
            if r.uid in pp.block_acc:
                self.block_step(r, info, inner, lin)
                continue
            part = self.reduce_body(r, info, inner, lin, scope)
            if not loop_axes:
                info["result"] = part
                continue
            acc = info["acc"]
            if r.combiner.results == 2:
                inner.emit(f"{acc}, {info['acc_index']} = {self.helper(r.combiner)}({acc}, {info['acc_index']}, "
                           f"{part[0]}, {part[1]})")
                continue
            if info["dot"]:
                pre = self.rescaled(acc, r, mstate, scope, info["layout"], inner)
                if pre != acc:
                    inner.emit(f"{acc} = {pre}")
                inner.emit(f"{acc} = {part}")
            else:
                pre = self.rescaled(acc, r, mstate, scope, info["layout"], inner)
                inner.emit(f"{acc} = {combine_text(r.combiner, pre, part)}")
        for r in rs:
            if r.uid in mstate:
                inner.emit(f"{accs[r.uid]['acc']} = {mstate[r.uid][0]}")

    def block_accumulator(self, r: Reduce, info: dict, inner: Scope, scope: Scope) -> None:
        """Declare (before the pass's loops, in ``scope``) the accumulator of ``r`` in the shape of
        the loop's block (``inner``): the identity on every lane of ``r``'s body and reduced axes."""
        pres = self.present(r.x, inner) | self.present_of_axes(r.over, inner)
        info["layout"], info["block"] = inner.layout, True
        shape = self.shape(inner.layout, pres)
        if r.combiner.state:
            c = r.combiner
            info["acc"] = tuple(self.fresh(f"{v}_{r.name}") for v in c.loop_state)
            starts = c.lane_start or ("0.0",) * len(c.loop_state)
            scope.emit(f"{', '.join(info['acc'])} = " + ", ".join(f"tl.full({shape}, {v}, dtype={self.cdt})" for v in
                                                                   starts) + "  # state, merged after the loop")
            return
        info["acc"] = acc = self.fresh(f"acc_{r.name}")
        scope.emit(f"{acc} = tl.full({shape}, {self.identity(r)}, dtype={self.acc_dtype(r)})  # folded after the loop")

    def block_step(self, r: Reduce, info: dict, inner: Scope, lin) -> None:
        """Fold this step's values of ``r`` into its block accumulator, element-wise (masked lanes
        add the identity; a variance's running sums are left unchanged there)."""
        c = r.combiner
        if info.get("shift"):
            self.shifted_step(r, info, inner, lin)
            return
        if c.state:
            m = self.mask_for(r.over, inner, lin)
            valid = f"({m}).to({self.cdt})" if m is not None else "1.0"
            step = self.use_helper(c.step_helper, step_helper(c))
            acc = ", ".join(info["acc"])
            inner.emit(f"{acc} = {step}({acc}, {self.float_body(r, inner, lin)}, {valid})")
            return
        body = self.masked(self.float_body(r, inner, lin), r, inner, lin, self.identity(r))
        inner.emit(f"{info['acc']} = {combine_text(c, info['acc'], body)}")

    def fold_state(self, r: Reduce, info: dict, scope: Scope) -> str:
        """After the loop: close each lane's loop values into its state where the kind carries
        others through the loop (the variance's running sums), then merge the lanes' states (the
        variance's: Chan's formula) over its reduced dims; returns M2 over the count in
        ``scope``'s layout."""
        if info.get("shift"):
            return self.shifted_fold(r, info, scope)
        c, lay, names = r.combiner, info["layout"], info["acc"]
        if c.lane:
            new = tuple(self.fresh(v) for v in c.state)
            scope.emit(f"{', '.join(new)} = {self.use_helper(c.close_helper, close_helper(c))}({', '.join(names)})")
            names = new
        for a in r.over:
            if a in lay:
                new = tuple(self.fresh(v) for v in c.state)
                scope.emit(f"{', '.join(new)} = tl.reduce(({', '.join(names)}), {lay.index(a)}, "
                           f"{self.helper(c)}, keep_dims=True)")
                names = new
        if c.finalize != "variance":
            raise AssertionError(f"kind {c.name}: a state folds to a variance only")
        pres = self.present(r, scope)
        # a split's store writes the state itself (its readers merge the splits' states)
        self.state_values[r.uid] = [self.squeeze(v, lay, scope.layout, scope, pres) for v in names]
        var = variance_text(names[c.state.index('q')], names[c.state.index('n')])
        return self.squeeze(var, lay, scope.layout, scope, pres)

    def accumulators(self, rs: list[Reduce], loop_axes: list[str], scope: Scope, pp: PassPlan) -> dict[int, dict]:
        """Per reduction of a pass: its dot (or None) and, for a loop, its initialised accumulator
        and the accumulator's layout (block accumulators are declared once the loops are open,
        :meth:`block_accumulator`)."""
        accs: dict[int, dict] = {}
        for r in rs:
            info: dict[str, Any] = {"dot": self.k.dots.get(r.uid)}
            if loop_axes and r.uid not in pp.block_acc:
                acc = self.fresh(f"acc_{r.name}")
                if info["dot"]:
                    m, n = info["dot"].m, info["dot"].n
                    adt = "tl.int32" if info["dot"].acc_dtype == "int32" else self.cdt
                    scope.emit(f"{acc} = tl.full(({self.block(m)}, {self.block(n)}), 0, dtype={adt})")
                    info["layout"] = (m, n)
                else:
                    ident = self.identity(r)
                    pres = self.present(r, scope)
                    lay = self.row_layout(r, scope)
                    scope.emit(f"{acc} = tl.full({self.shape(lay, pres)}, {ident}, dtype={self.acc_dtype(r)})")
                    if r.combiner.results == 2:
                        info["acc_index"] = self.fresh(f"acc_{r.name}_index")
                        scope.emit(f"{info['acc_index']} = tl.full({self.shape(scope.layout, pres)}, {INDEX_SENTINEL}, "
                                   "dtype=tl.int32)")
                    info["layout"] = lay
                info["acc"] = acc
            accs[r.uid] = info
        return accs

    def row_layout(self, r: Reduce, scope: Scope) -> tuple[str, ...]:
        """The layout of ``r``'s accumulator: ``scope``'s, or only its axes that are block dims of
        ``r`` for the plan's row vectors (``KernelPlan.row_vectors``: no size-1 dims)."""
        if r.uid not in self.k.row_vectors:
            return scope.layout
        pres = self.present(r, scope)
        return tuple(a for a in scope.layout if a in pres)

    def row_reduce(self, body: str, r: Reduce, lin, inner: Scope, scope: Scope) -> tuple[str, tuple[str, ...]]:
        """``body`` (in ``lin``) reduced over ``r``'s axes, in ``r``'s accumulator layout: dims
        dropped by the reduction itself for a row vector (so the result takes the reduced tile's
        row layout, not the tile's), else kept and squeezed to ``scope``'s layout."""
        lay = self.row_layout(r, scope)
        if lay == scope.layout:
            red = self.reduce_code(body, r.combiner, r.over, lin, inner, r.uid in self.k.int_acc)
            return self.squeeze(red, lin, scope.layout, inner, self.present(r, scope)), lay
        red = self.reduce_code(body, r.combiner, r.over, lin, inner, r.uid in self.k.int_acc, keep=False)
        rl = tuple(a for a in lin if a not in r.over)
        return self.relayout(red, rl, lay, self.present(r, scope), inner), lay

    def open_loops(self, rs: list[Reduce], loop_axes: list[str], scope: Scope, pp: PassPlan, accs,
                   rng: tuple[str, str] | None = None, unmasked: bool = False,
                   stages: int = 0) -> tuple[Scope, list]:
        """Open the pass's loops; returns the innermost scope and the (parent, loop) pairs.
        ``rng``: the (start, end) of the one loop (its tiles from the plan's bounds); ``unmasked``:
        its tiles lie inside the axis, so the axis is bound without its size mask; ``stages``: the
        plan's ``num_stages`` for this loop (0: the kernel's)."""
        # the loop's layout keeps only the program axes its values use: contractions carry their
        # own 2-D layouts, so e.g. attention's head axis stays out of the score tiles (also of an
        # attention backward's, whose program layout holds the head axes of dK and dV)
        keep: set[str] = set()
        for r in rs:
            if not accs[r.uid]["dot"]:
                keep |= set(r.x.axes)
            for inner_r in self.fused_deps(r):   # reductions computed inside this loop keep their axes
                keep |= set(inner_r.axes) | (set() if inner_r.uid in self.k.dots else set(inner_r.x.axes))
        keep = tuple(a for a in scope.layout if a in keep)
        inner = scope
        loops = []
        factors = dict(self.k.splits)
        for a in loop_axes:
            v = f"{a}0"
            lo, hi = (f"{a}_lo", f"{a}_hi") if a in self.k.split_axes else ("0", self.size(a))
            step = (f"{factors[a]} * {self.block(a)}" if self.k.split_interleaved and a in factors
                    else self.block(a))
            if rng is not None:
                lo, hi = rng
            if a in self.k.static_loops:   # a window's taps, unrolled: their loads issue together
                head = f"for {v} in tl.static_range(0, {self.k.static_loops[a]}):  # the taps of axis {a}, unrolled"
            elif pp.warp_specialize:
                # producer warps issue the loads, consumer warps the MMAs (automatic warp specialisation)
                head = f"for {v} in tl.range({lo}, {hi}, {step}, warp_specialize=True):"
            elif pp.ws_requested:
                # Triton's Hopper warp specialisation handles TMA-fed loops only (the plan turned it off)
                head = (f"for {v} in range({lo}, {hi}, {step}):  # warp_specialize off: loads in this "
                        "loop that are not TMA")
            else:
                opts = [f"num_stages={stages or pp.pipeline}"] if stages or pp.pipeline else []
                if pp.unroll > 1 and a == loop_axes[-1]:   # the innermost loop's steps issue their loads together
                    opts.append(f"loop_unroll_factor={pp.unroll}")
                    if rng is not None:   # a masked segment's end may lie below its start: an unrolled loop
                        hi = f"tl.maximum({hi}, {lo})"   # would take that trip count as unsigned (UNSIGNED_TRIPS)
                head = (f"for {v} in tl.range({lo}, {hi}, {step}, {', '.join(opts)}):" if opts else
                        f"for {v} in range({lo}, {hi}, {step}):")
            # a loop one index at a time binds a scalar: no dim of its own in the layout
            child = inner.open(head, () if self.k.scalar_axis(a) else (a,), keep if inner is scope else None)
            loops.append((inner, child))
            inner = child
            self.bind_axis(inner, a, v, f"  # tile of axis {a}" + ("" if not unmasked else ", every lane visible"),
                           masked=not unmasked, loop=True)
        return inner, loops

    def online_maxes(self, rs: list[Reduce], inner: Scope, scope: Scope, pp: PassPlan, accs) -> dict[int, tuple[str, str]]:
        """In an online pass, update each rescaling max first: its new value and the factor that
        rescales the partial sums using it (``max id -> (new max, alpha)``)."""
        lin = inner.layout
        mstate: dict[int, tuple[str, str]] = {}
        for r in rs:
            if r.uid not in pp.online_maxes:
                continue
            body = self.val(r.x, inner, lin)
            body = self.masked(body, r, inner, lin, identity_text(r.combiner))
            t2, lay = self.row_reduce(body, r, lin, inner, scope)
            acc = accs[r.uid]["acc"]
            mn = self.fresh(f"{r.name}_new")
            inner.emit(f"{mn} = {combine_text(r.combiner, acc, t2)}")
            # the tiles are shifted by the running max, or by 0 while it is -inf (every value so far
            # -inf): their terms are then exp(-inf) = 0 rather than NaN, so no per-step select is
            # needed; a row whose max ends -inf is made NaN after the loop, as torch's is
            shift = self.fresh(f"{r.name}_shift")
            inner.emit(f"{shift} = tl.where({mn} == -float('inf'), 0.0, {mn})")
            alpha = self.fresh("alpha")
            exp = "tl.exp2" if r.uid in pp.base2_maxes else "tl.exp"
            inner.emit(f"{alpha} = {exp}({acc} - {shift})  # rescale earlier partial sums (0 while the max was -inf)")
            inner.overrides[r.uid] = (shift, lay)
            mstate[r.uid] = (mn, alpha, lay)
        return mstate

    def rescaled(self, acc: str, r: Reduce, mstate, scope: Scope, layout, inner: Scope) -> str:
        """``acc`` (in ``layout``) rescaled by each online max ``r`` uses: earlier partial sums
        times the max's factor (see :meth:`online_maxes`)."""
        for m in self.fused_deps(r):
            if m.uid not in mstate:
                continue
            al = self.relayout(mstate[m.uid][1], mstate[m.uid][2], layout, self.present_of_axes(m.axes, scope), inner)
            acc = f"{acc} * {al}"
        return acc

    def nan_where_max_is_minus_inf(self, rs: list[Reduce], maxes: set[int], scope: Scope, accs) -> None:
        """After an online pass: each sum shifted by an online max is NaN on the rows where that
        max ended -inf (every term exp(-inf - -inf) is NaN there, as in torch; the loop shifted
        them by 0 instead, see :meth:`online_maxes`)."""
        for r in rs:
            if r.uid in maxes or "acc" not in accs[r.uid]:
                continue
            info = accs[r.uid]
            for m in self.fused_deps(r):
                if m.uid not in maxes:
                    continue
                mx = self.relayout(accs[m.uid]["acc"], accs[m.uid]["layout"], info["layout"],
                                   self.present_of_axes(m.axes, scope), scope)
                scope.emit(f"{info['acc']} = tl.where({mx} == -float('inf'), float('nan'), {info['acc']})")

    def finish_pass(self, rs: list[Reduce], loop_axes: list[str], scope: Scope, accs,
                    from_state: dict[int, int] | None = None) -> None:
        """After the loops: each reduction's value in ``scope`` (dots relaid out and multiplied by
        their hoisted factors, means divided; a mean of ``from_state`` (mean id -> variance id)
        read off its variance's folded state), recorded as computed there."""
        from_state = from_state or {}
        for r in sorted(rs, key=lambda r: r.uid in from_state):   # the states first
            info = accs[r.uid]
            if r.uid in from_state:
                var = next(x for x in rs if x.uid == from_state[r.uid])
                st = dict(zip(var.combiner.state, self.state_values[var.uid]))
                # the sum of the values the state counts: count times (shift + mean deviation)
                v, vl = f"{st['n']} * ({st['k']} + {st['m']})", scope.layout
            elif not loop_axes:
                v = info["result"][1] if r.combiner.results == 2 else info["result"]
                vl = (info["dot"].m, info["dot"].n) if info["dot"] else scope.layout
            elif info.get("block") and r.combiner.state:
                v, vl = self.fold_state(r, info, scope), scope.layout
            elif info.get("block"):
                # the block accumulator folds over the reduced dims, then drops the loop's dims
                v = self.reduce_code(info["acc"], r.combiner, r.over, info["layout"], scope, r.uid in self.k.int_acc)
                v, vl = self.squeeze(v, info["layout"], scope.layout, scope, self.present(r, scope)), scope.layout
            else:
                v, vl = info["acc_index" if r.combiner.results == 2 else "acc"], info["layout"]
            if info["dot"]:
                v = self.relayout(v, vl, scope.layout, self.present(r, scope), scope)
                if info["dot"].acc_dtype == "int32":   # an int8 dot's exact int32 sum: int64 as torch's, or float
                    v = f"({v}).to({'tl.int64' if r.uid in self.k.int_acc else self.cdt})"
                for f in info["dot"].hoist:
                    v = f"{v} * {self.val(f, scope, scope.layout)}"
                vl = scope.layout
            if r.combiner.finalize == "count":
                n = self.k.exact_counts.get(r.uid)
                if n is not None and n & (n - 1) == 0:   # a count the call pins, a power of two: an exact multiply
                    v = f"{v} * {1.0 / n!r}"
                else:
                    v = f"{v} / ({n if n is not None else ' * '.join(self.size(a) for a in r.over)})"
            if r.uid in self.k.native_folds:   # folded in its input's 16-bit dtype: the value in the compute dtype
                v = f"({v}).to({self.cdt})"
            out = self.fresh(r.name)
            scope.emit(f"{out} = {v}  # stage {r.name}")
            scope.reduced[r.uid] = (out, vl)

    def present_of_axes(self, axes, scope) -> set[str]:
        """The axes of ``axes`` that are block dims (bound, not scalar) in ``scope`` (members of a
        flat axis: that axis)."""
        return {self.k.flat_of(a) for a in axes if scope.find_bind(a) is not None and not scope.find_bind(a)[0].scalar}

    def squeeze(self, t: str, lin, layout, scope, present) -> str:
        """Drop the trailing loop dims (all size 1 after the reduction) of ``t`` (a scalar of a loop
        one index at a time, whose layout has no dims, is broadcast to the outer shape instead)."""
        if lin == layout:
            return t
        if not tuple(lin):
            return f"tl.broadcast_to({t}, {self.shape(layout, present)})"
        return f"tl.reshape({t}, {self.shape(layout, present)})"

    def masked(self, body: str, r: Reduce, scope: Scope, layout, ident: str) -> str:
        """``body`` with lanes outside ``r``'s reduction axes replaced by the identity ``ident``."""
        m = self.mask_for(r.over, scope, layout)
        if m is None:
            return body
        return f"tl.where({m}, {body}, {ident})"

    def reduce_code(self, body: str, c: Combiner, over, layout, scope: Scope, integer: bool = False,
                    keep: bool = True) -> str:
        """Reduce ``body`` over the block dims of ``over`` (keeping dims, or dropping them with
        ``keep`` False) with ``c``'s combine helper, or with the standard combine the plan names
        (NaN put back where the plan says, unless the values are ``integer``: they have none)."""
        br = self.k.block_reduce.get(c.base)
        v = body
        kd = "True" if keep else "False"
        # a flat axis all of whose members are reduced: its dim (plan.flat)
        over = list(dict.fromkeys(f if set(self.k.flat.get(f, (f,))) <= set(over) else a
                                  for a, f in ((a, self.k.flat_of(a)) for a in over)))
        # dropped dims: the last first, so the indices of the others hold
        for a in sorted((a for a in over if a in layout), key=layout.index, reverse=not keep):
            ax = layout.index(a)
            if br is None:
                v = f"tl.reduce({v}, {ax}, {self.helper(c)}, keep_dims={kd})"
                continue
            if br.propagate_nan and not integer:
                x = self.fresh("fold")
                scope.emit(f"{x} = {v}  # {c.name}: the fold skips NaN, so NaN lanes are counted and put back")
                nans = f"tl.reduce(({x} != {x}).to(tl.int32), {ax}, tl.standard._sum_combine, keep_dims={kd})"
                v = f"tl.where({nans} > 0, float('nan'), tl.reduce({x}, {ax}, {br.combine}, keep_dims={kd}))"
            else:
                v = f"tl.reduce({v}, {ax}, {br.combine}, keep_dims={kd})"
        return v

    def reduce_body(self, r: Reduce, info, inner: Scope, lin, scope: Scope) -> str:
        """One step of reduction ``r`` in the pass's innermost scope: a dot or a masked reduce."""
        ident = self.identity(r)
        if info["dot"]:
            d: DotPlan = info["dot"]
            ra = d.k or r.over[0]
            a = self.operand(d.left, inner, (d.m, ra), ra, d, d.raw_left)
            b = self.operand(d.right, inner, (ra, d.n), ra, d, d.raw_right)
            prec = f", input_precision=\"{d.precision}\"" if d.precision else ""
            if d.acc_dtype != "float32":
                prec += f", out_dtype=tl.{d.acc_dtype}"
            if d.tile_scale:   # block scales: this tile's dot scaled, then added
                v = self.fresh("dot")
                inner.emit(f"{v} = tl.dot({a}, {b}{prec})")
                scaled = f"{v} * {self.tile_scale(d, ra, inner)}"
                return f"{info['acc']} + {scaled}" if "acc" in info else scaled
            if "acc" in info:
                return f"tl.dot({a}, {b}, {info['acc']}{prec})"
            v = self.fresh("dot")
            inner.emit(f"{v} = tl.dot({a}, {b}{prec})")
            return v
        if r.combiner.state:
            return self.variance_in_block(r, inner, lin, scope)
        body = self.masked(self.float_body(r, inner, lin), r, inner, lin, ident)
        if r.combiner.results == 2:
            return self.arg_reduce_body(r, body, inner, lin, scope)
        red, _ = self.row_reduce(body, r, lin, inner, scope)
        v = self.fresh(f"part_{r.name}")
        inner.emit(f"{v} = {red}")
        return v

    def tile_scale(self, d: DotPlan, ra: str, inner: Scope) -> str:
        """The product of dot ``d``'s block scales at this tile of ``ra`` (they are constant over
        it: the plan's rule), in the dot's ``(m, n)`` layout: evaluated in a scope that binds
        ``ra`` to the tile's first index as a scalar, whose lines then join ``inner``."""
        b, _ = inner.find_bind(ra)
        at = Scope(inner, None, tuple(a for a in inner.layout if a != ra))
        at.bound[ra] = Bind(ra, b.start, None, b.block, True, b.start)
        vals = [self.val(f, at, (d.m, d.n)) for f in d.tile_scale]
        for line in at.items:
            inner.emit(line)
        for key in [key for key in self.need_depth_memo if key[1] == id(at)]:
            del self.need_depth_memo[key]   # (the scope goes away; its id may be reused)
        v = self.fresh("scale")
        inner.emit(f"{v} = {' * '.join(vals)}  # block scales at this tile of {ra}")
        return v

    def variance_in_block(self, r: Reduce, inner: Scope, lin, scope: Scope) -> str:
        """The variance ``r`` of values that one block holds: mean, then the mean squared
        deviation from it, both in registers (the values are read once)."""
        x, m = self.float_body(r, inner, lin), self.mask_for(r.over, inner, lin)
        cnt = " * ".join(self.size(a) for a in r.over)
        xv = self.fresh(f"x_{r.name}")
        inner.emit(f"{xv} = {x}")
        mean = self.fresh(f"mean_{r.name}")
        inner.emit(f"{mean} = {self.reduce_code(self.masked(xv, r, inner, lin, '0.0'), SUM, r.over, lin, inner)} / ({cnt})")
        dev = self.fresh(f"dev_{r.name}")
        inner.emit(f"{dev} = " + (f"tl.where({m}, {xv} - {mean}, 0.0)" if m is not None else f"{xv} - {mean}"))
        red = self.reduce_code(f"{dev} * {dev}", SUM, r.over, lin, inner)
        if lin != scope.layout:
            red = self.squeeze(red, lin, scope.layout, inner, self.present(r, scope))
        v = self.fresh(f"part_{r.name}")
        inner.emit(f"{v} = {red} / ({cnt})")
        return v

    def float_body(self, r: Reduce, inner: Scope, lin) -> str:
        """The value ``r`` reduces, in layout ``lin``: in int64 for an integer reduction of the
        plan, else integers converted to the compute dtype."""
        body = self.val(r.x, inner, lin)
        if r.uid in self.k.int_acc:
            return f"({body}).to(tl.int64)"
        return f"({body}).to({self.cdt})" if self.is_int(r.x) else body

    def arg_reduce_body(self, r: Reduce, body: str, inner: Scope, lin, scope: Scope) -> tuple[str, str]:
        """One step of arg-reduction ``r`` over its one axis: ``(value, index)`` pairs (masked
        lanes: the identity and an index past every real one) reduced with the pair-combine
        helper, or with the standard index fold the plan names over (value, lane) pairs (the lane
        then offset by the block's start); returns the (value, index) variables in ``scope``'s
        layout."""
        a = r.over[0]
        b, _ = inner.find_bind(a)
        idx = b.offs if b.scalar else self.expand1d(b.offs, a, lin)
        m = self.mask_for(r.over, inner, lin)
        idx = f"tl.where({m}, {idx}, {INDEX_SENTINEL})" if m is not None else idx
        v, vi = self.fresh(f"part_{r.name}"), self.fresh(f"part_{r.name}_index")
        if a not in lin or b.scalar:
            # one index per step (a loop of tile 1: a scalar) beside a value with other axes: the
            # index takes the value's shape, as the reshapes below and the pair-combine expect
            held = self.present(r.x, inner) - {a}
            ix = f"({idx}).to(tl.int32)"
            if held and b.scalar:
                ix = f"tl.broadcast_to({ix}, {self.shape(lin, held)})"
            inner.emit(f"{v}, {vi} = {body}, {ix}")
        elif (br := self.k.block_reduce.get(r.combiner.base)) is not None:
            # the fold returns the first lane of the extremum; masked lanes (the identity) follow
            # every real one, so a real lane wins a tie with them
            full = self.shape(lin, self.present(r.x, inner) | {a})
            lane = self.expand1d(f"tl.arange(0, {b.block})", a, lin)
            inner.emit(f"{v}, {vi} = tl.reduce((tl.broadcast_to({body}, {full}), tl.broadcast_to({lane}, {full})), "
                       f"{lin.index(a)}, {br.combine}, keep_dims=True)")
            inner.emit(f"{vi} = ({vi} + {b.start}).to(tl.int32)  # lane -> index along {a}")
        else:
            full = self.shape(lin, self.present(r.x, inner) | {a})
            inner.emit(f"{v}, {vi} = tl.reduce((tl.broadcast_to({body}, {full}), "
                       f"tl.broadcast_to(({idx}).to(tl.int32), {full})), {lin.index(a)}, {self.helper(r.combiner)}, "
                       "keep_dims=True)")
        if lin != scope.layout:
            pres = self.present(r, scope)
            inner.emit(f"{v}, {vi} = {self.squeeze(v, lin, scope.layout, inner, pres)}, "
                       f"{self.squeeze(vi, lin, scope.layout, inner, pres)}")
        return v, vi

    def operand(self, factors, scope: Scope, layout, ra: str, d: DotPlan, raw: bool) -> str:
        """A dot operand in ``layout``, cast to the plan's operand dtype; ``raw``: the plan feeds
        this side's one load to the dot in its storage dtype."""
        direct = len(factors) == 1 and isinstance(factors[0], Load)
        if raw:
            # a plain 16-bit load feeds the dot in its storage dtype (no fp32 round trip); a
            # loop-invariant one (Q in attention) is loaded once, before the loop, still 16-bit
            home = self.ancestor(scope, self.need_depth(factors[0], scope))
            if all(home.find_bind(a) is not None for a in layout):
                key = (factors[0].uid, tuple(layout), "raw")
                other = home.memo.get((factors[0].uid, tuple(layout[::-1]), "raw"))
                if key not in home.memo and other is not None and factors[0].uid in self.k.trans_loads:
                    v = self.fresh("opnd")   # the plan reads this tile once, in the other orientation
                    home.emit(f"{v} = tl.trans({other})  # dot operand [{', '.join(layout)}]")
                    home.memo[key] = v
                elif key not in home.memo:
                    code, cm = self.load(factors[0], home, layout, raw=True)
                    v = self.fresh("opnd")
                    home.emit(f"{v} = {code}  # dot operand [{', '.join(layout)}]: {cm}")
                    home.memo[key] = v
                return home.memo[key]
        vals = []
        for f in factors:
            fp = self.present(f, scope)
            pres = [a for a in scope.layout if a in fp]
            if not isinstance(f, Load) and pres and len(pres) == len(fp) and [a for a in layout if a in pres] == pres:
                # computed in the program's layout (shared with other uses), then reshaped
                v = self.relayout(self.val(f, scope, scope.layout), scope.layout, layout, set(pres), scope)
            else:
                v = self.val(f, scope, layout)
            vals.append(self.as_float(f, v))
        code = " * ".join(vals)
        m = self.mask_for([ra], scope, layout)
        if m is not None and not direct:
            code = f"tl.where({m}, {code}, 0.0)"
        if d.operand_cast is not None:
            code = f"({code}).to(tl.{d.operand_cast})"
        v = self.fresh("opnd")
        scope.emit(f"{v} = {code}  # dot operand [{', '.join(layout)}]")
        return v

    # -- kernel --------------------------------------------------------------------------------
