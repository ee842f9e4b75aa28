"""Printing memory accesses: addresses, masks, loads (pointer, block pointer, TMA) and buffer reads,
as the plan's access decisions say."""

from __future__ import annotations

import torch

from ...ir import Axis, Const, Load, Reduce, fmt, pad_value
from ...plan.access import tile_key
from ...plan.kernel import TileAccess
from .narrow import DECODE_FP8, FP8_FORMATS
from .prelude import TL_DTYPES, combine_text, variance_text
from .scope import Bind, Scope

__all__ = ["MemoryPrinter"]


class MemoryPrinter:
    """Mixin of :class:`~dtriton.backends.triton.kernel.KernelPrinter`: loads and addresses."""

    def eviction(self, name: str) -> str | None:
        """The plan's L2 eviction hint for loads of input ``name`` (None: Triton's default policy)."""
        return self.k.eviction.get(name)


    def addr(self, name: str, index_terms: list[str]) -> str:
        """The address block of ``name`` at the given per-dim index terms (None: dim not indexed)."""
        terms = []
        for d, t in enumerate(index_terms):
            if t is None:
                continue
            st = f"{name}_s{d}"
            # (tl.cast: a literal, a static_range index or an interpreter loop variable is a Python int)
            t = f"tl.cast({t}, tl.int64)" if self.i64 else t
            terms.append(f"{t} * {st}")
        return f"{name}_ptr + " + (" + ".join(terms) if terms else "0")

    def flat_offset(self, f: str, scope: Scope, layout) -> str:
        """The index of flat axis ``f`` in ``layout``: the address, past its other dims, of a tensor the
        plan addresses by it (``KernelPlan.flat_direct``)."""
        b, _ = scope.find_bind(f)
        return b.offs if b.scalar else self.expand1d(b.offs, f, layout)

    def mask_for(self, axes, scope: Scope, layout) -> str | None:
        """The mask of a value using ``axes`` (None when every one divides its block; members of a
        flat axis share its mask)."""
        ms = []
        for a in dict.fromkeys(axes):
            b = scope.find_bind(a)
            if b and b[0].mask is not None and self.expand1d(b[0].mask, a, layout) not in ms:
                ms.append(self.expand1d(b[0].mask, a, layout))
        return " & ".join(ms) if ms else None

    def tile_access(self, name: str, axes, scope: Scope, computed: dict | None = None, shifts: dict | None = None):
        """The plan's access for a tile of tensor ``name`` indexed by ``axes``: ``("tma",
        descriptor, offsets)`` or ``("block_ptr", block pointer, boundary dims)``; None where plain
        pointers are used. ``computed``: for the plan's per-program index dims (``"#<dim>"`` keys,
        :func:`~dtriton.plan.access.tile_key`), ``(offset, dim size, label)`` printed values;
        ``shifts``: axis -> the printed shift of its box past the axis's tile start (a conv's
        input, ``KernelPlan.shifted_reads``)."""
        acc = self.k.access.get((name, tuple(axes)))
        if acc is None or acc.kind == "pointer":
            return None
        computed = computed or {}
        binds = [Bind(a, computed[a][0], None, "1", True, computed[a][0]) if a in computed else scope.find_bind(a)[0]
                 for a in axes]
        blocks = ["1" if b.scalar else b.block for b in binds]
        offs = [f"{b.start} + {shifts[a]}" if shifts and a in shifts else b.start for a, b in zip(axes, binds)]
        # size arguments in the order descriptors and block pointers use them
        shape = [computed[a][1] if a in computed else self.size(a) for a in axes]
        labels = [computed[a][2] if a in computed else a for a in axes]
        if acc.kind == "tma":
            if acc.perm:   # the descriptor of the transposed view: offsets and axes in its dim order
                axes, blocks, offs, shape, labels = ([x[d] for d in acc.perm] for x in (list(axes), blocks, offs, shape,
                                                                                         labels))
            key = (name, tuple(blocks), acc.perm)
            if key not in self.descs:
                # a host-side descriptor (triton.tools.tensor_descriptor.TensorDescriptor): the runtime
                # encodes it once per call and passes it as a kernel argument, so programs start
                # loading at once (an in-kernel tl.make_tensor_descriptor writes 128 bytes to global
                # scratch and fences in every program: 8.6 against 6.2 us on a 1024^3 fp16 matmul)
                d = f"desc_{name}" + (f"_{len(self.descs)}" if any(k[0] == name for k in self.descs) else "")
                self.descs[key] = d
                if self.k.device_descs:
                    self.device_descs.append(self.make_descriptor(d, name, shape, acc.box, acc.perm))
                else:
                    self.host_descs.append((d, name, tuple(acc.box), acc.perm))
                self.desc_axes[d] = labels
            return "tma", self.descs[key], (offs, list(axes))
        strides = [f"{name}_s{d}" for d in range(len(axes))]
        check = tuple(d for d, b in enumerate(binds) if not b.scalar and b.mask is not None)
        order = tuple(range(len(axes) - 1, -1, -1))
        bp = (f"tl.make_block_ptr({name}_ptr, shape=({', '.join(shape)},), strides=({', '.join(strides)},), "
              f"offsets=({', '.join(offs)},), block_shape=({', '.join(blocks)},), order={order})")
        return "block_ptr", bp, check

    def make_descriptor(self, d: str, name: str, shape, box, perm) -> str:
        """The in-kernel ``tl.make_tensor_descriptor`` line of descriptor ``d`` over tensor ``name``
        (``shape``: its dims' size arguments in the descriptor's order, already permuted by
        ``perm``): strides from the kernel's arguments, the unit-stride dim last with stride 1."""
        order = perm or tuple(range(len(shape)))
        strides = [f"{name}_s{dim}" for dim in order[:-1]] + ["1"]
        return (f"{d} = tl.make_tensor_descriptor({name}_ptr, shape=[{', '.join(shape)}], "
                f"strides=[{', '.join(strides)}], block_shape=[{', '.join(map(str, box))}])  # TMA descriptor "
                "built in the program")

    def load(self, n: Load, scope: Scope, layout, raw: bool = False) -> tuple[str, str]:
        """``tl.load`` of ``n`` in ``layout`` (masked where an axis does not divide its block),
        converted to the compute dtype unless ``raw`` (a dot operand in its storage dtype). With
        ``access`` "block_ptr" or "tma" the tile is read in the tensor's dim order through a block
        pointer or TMA descriptor (out-of-range rows read as zero) and then permuted to ``layout``."""
        name = self.tensor_arg(n.tensor.name, len(n.index))
        dt = self.dtypes[n.tensor.name]
        key = tile_key(self.k, n)
        if key is not None and self.k.access.get((name, key), TileAccess("pointer")).kind != "pointer":
            axes = list(key)
            computed = {a: self.program_index(n, int(a[1:]), scope, layout) for a in key if a.startswith("#")}
            shifts = {}
            for d, (a, at0) in self.k.shifted_reads.get(n.uid, {}).items():   # a box shifted past the tile start
                shifts[a] = self.fresh("shift")
                scope.emit(f"{shifts[a]} = {self.val(at0, scope, layout)}  # box of {n.tensor.name} dim {d}: "
                           f"{fmt(n.index[d], limit=None)} at {a} = its tile start, plus this")
            acc = self.tile_access(name, axes, scope, computed, shifts)
            if acc is not None:
                kind, h, extra = acc
                if kind == "tma":
                    extra, axes = extra   # the descriptor's dim order (a transposed view's, permuted)
                    code = f"{h}.load([{', '.join(extra)}])"
                else:
                    ev = self.eviction(n.tensor.name)
                    code = f"tl.load({h}" + (f", boundary_check={extra}, padding_option=\"zero\"" if extra else "") + \
                        (f", eviction_policy=\"{ev}\"" if ev else "") + ")"
                blk = self.fresh("tile")
                scope.emit(f"{blk} = {code}  # {fmt(n, limit=None)}: {kind} tile")
                # (a flat axis's innermost member is a tile along the flat axis's dim)
                # (the members of a box: one dim of it)
                tiled = tuple(dict.fromkeys(self.k.flat_of(a) for a in axes
                                            if a not in computed and not scope.find_bind(a)[0].scalar))
                if len(tiled) < len(axes):  # drop the size-1 dims of tile-1 grid axes first
                    blk2 = self.fresh("tile")
                    scope.emit(f"{blk2} = tl.reshape({blk}, {self.shape(tiled, set(tiled))})")
                    blk = blk2
                code = self.relayout(blk, tiled, tuple(layout), set(tiled), scope)
                return self._widen(code, dt, raw), f"{fmt(n, limit=None)} ({kind})"
        terms, mask_axes, inside, moves = self.pointer_index(n, scope, layout)
        tile = self.mask_for(mask_axes, scope, layout)
        mask = " & ".join(filter(None, [tile] + inside)) or None
        ev = self.eviction(n.tensor.name)
        bounded = self.k.read_masks.get(n.uid, ())
        other = self.pad_text(n, dt)
        ptr = self.addr(name, terms) + (f" + ({' + '.join(moves)})" if moves else "")
        code = f"tl.load({ptr}" + (f", mask={mask}, other={other}" if mask else "") + \
            (f", eviction_policy=\"{ev}\"" if ev else "") + ")"
        if n.uid in self.k.poisoned_reads and inside:   # (a wrong index reads NaN: plan.access.plan_read_masks)
            outside = f"~({' & '.join(inside)})" if tile is None else f"({tile}) & ~({' & '.join(inside)})"
            nan = f"tl.full([], float('nan'), tl.float32).to({TL_DTYPES[dt]})"   # (a NaN of the tensor's dtype)
            code = f"tl.where({outside}, {nan}, {code})"
        raw = raw or n.uid in self.k.raw_loads   # (a 16-bit max/min fold's input: plan.pairs)
        return self._widen(code, dt, raw), fmt(n, limit=None) + (" (masked to its dims)" if bounded else "")

    def pad_text(self, n: Load, dt: torch.dtype) -> str:
        """The value a masked lane of load ``n`` reads: its padding where the plan masks an index of it
        to its dim, else 0."""
        if n.pad is None or not self.k.read_masks.get(n.uid, ()):
            return "0.0" if dt in FP8_FORMATS else "0"
        return self.literal(pad_value(n.pad, dt))

    def pointer_index(self, n: Load, scope: Scope, layout, skip: int | None = None):
        """``(terms, mask axes, in-dim tests, moves)`` of a pointer load of ``n`` in ``layout``: per dim
        its index term (dim ``skip``: None, the caller's), the axes whose tile masks apply, the tests
        of the indices the plan masks to their dim, and the taps' scalar shifts times the strides."""
        name = n.tensor.name
        terms, mask_axes, inside, moves = [], [], [], []
        bounded = self.k.read_masks.get(n.uid, ())
        # dims at the tile's index shifted by a tap (plan.taps): the tile's address block, the same for
        # every tap, plus the tap's scalar shift times the stride
        shifted = {d: v for d, v in self.k.shifted_reads.get(n.uid, {}).items() if self.k.flat_of(v[0]) == v[0]}
        flat = self.k.flat_direct.get(n.uid)   # (its last dims addressed by the flat index: plan.flat)
        first = len(n.index) - len(self.k.flat[flat]) if flat is not None else len(n.index)
        if flat is not None:
            moves.append(self.flat_offset(flat, scope, layout))
        for d, e in enumerate(n.index):
            if d == skip or d >= first:
                terms.append(None)
                if d >= first:
                    mask_axes.append(e.name)
                continue
            if d in shifted:
                a, at0 = shifted[d]
                b, _ = scope.find_bind(a)
                terms.append(b.offs if b.scalar else self.expand1d(b.offs, a, layout))
                mask_axes.append(a)
                sh = self.fresh("shift")
                scope.emit(f"{sh} = {self.val(at0, scope, layout)}  # index {d} of {n.tensor.name}, "
                           f"{fmt(e, limit=None)}, past the tile's {a}")
                moves.append(f"{sh} * {name}_s{d}")
                if d in bounded:
                    ix = self.fresh("ix")
                    scope.emit(f"{ix} = {terms[-1]} + {sh}  # index {d} of {n.tensor.name}: {fmt(e, limit=None)}")
                    inside.append(f"({ix} >= 0) & ({ix} < {self.dim_size(n.tensor.dims[d])})")
                continue
            if isinstance(e, Axis):
                b, _ = scope.find_bind(e.name)
                terms.append(b.offs if b.scalar else self.expand1d(b.offs, e.name, layout))
                mask_axes.append(e.name)
            elif isinstance(e, Const):
                terms.append(str(int(e.value)))   # a literal index, X[i, 0]
            else:
                v = self.val(e, scope, layout)
                terms.append(f"({v}).to(tl.int32)" if not self.i64 else f"({v}).to(tl.int64)")
                mask_axes.extend(e.axes)
                if d in bounded:   # named once: the address and the mask both use it; the mask tests
                    # the value as computed (an int64 label or argument may pass 2**31), the address
                    # takes it narrowed, exact on the lanes the mask keeps
                    wide, ix = self.fresh("ixw"), self.fresh("ix")
                    scope.emit(f"{wide} = {v}  # index {d} of {n.tensor.name}: {fmt(e, limit=None)}")
                    scope.emit(f"{ix} = ({wide}).to({'tl.int64' if self.i64 else 'tl.int32'})")
                    terms[-1] = ix
                    inside.append(f"({wide} >= 0) & ({wide} < {self.dim_size(n.tensor.dims[d])})")
                    continue
            if d in bounded:   # the plan masks this index to its dim (padding, or a guarded read)
                inside.append(f"({terms[-1]} >= 0) & ({terms[-1]} < {self.dim_size(n.tensor.dims[d])})")
        return terms, mask_axes, inside, moves

    def program_index(self, n: Load, d: int, scope: Scope, layout) -> tuple[str, str, str]:
        """Index ``d`` of load ``n``, one integer per program (the plan's ``"#<dim>"`` key):
        ``(int32 value, the dim's size argument, its text)``."""
        e = n.index[d]
        ix = self.fresh("ix")
        scope.emit(f"{ix} = ({self.val(e, scope, layout)}).to(tl.int32)  # index {d} of {n.tensor.name}: "
                   f"{fmt(e, limit=None)}")
        return ix, self.dim_size(n.tensor.dims[d]), fmt(e, limit=None)

    def dim_size(self, sym: str) -> str:
        """The argument holding the size ``sym`` of a tensor dim (declared on first use)."""
        nm = f"dim_{sym}"
        if nm not in self.sizes:
            self.sizes.append(nm)
        return nm

    @staticmethod
    def literal(v: float) -> str:
        """A Python number as Triton source (``float('-inf')`` for infinities)."""
        if v != v:
            return "float('nan')"
        if v in (float("inf"), float("-inf")):
            return "float('inf')" if v > 0 else "-float('inf')"
        return repr(v)

    def _widen(self, code: str, dt: torch.dtype, raw: bool) -> str:
        """A loaded value in the compute dtype: floats in ``self.cdt`` (unless ``raw``: a dot operand
        in its storage dtype, integers too), fp8 on the interpreter through ``_decode_fp8`` (its
        conversion misreads NaN and infinities), integers (values or gather indices) in int64, so
        products of small integer types (uint8 pixel values) do not wrap before they are summed."""
        if raw:
            return code
        if dt in FP8_FORMATS and self.k.interpret:
            self.use_helper("_decode_fp8", DECODE_FP8)
            code = FP8_FORMATS[dt].decode_call(code)
            return code if self.cdt == "tl.float32" else f"{code}.to({self.cdt})"
        if dt.is_floating_point:
            return f"{code}.to({self.cdt})" if TL_DTYPES[dt] != self.cdt else code
        if dt != torch.bool and dt != torch.int64:
            return f"{code}.to(tl.int64)"
        return code

    def load_buffer(self, r: Reduce, scope: Scope, layout, b=None, block_fold: bool | None = None,
                    cache: str = "") -> tuple[str, str]:
        """Read materialised reduction ``r`` from its buffer (combining split partials with its
        combiner: a static loop over up to 16 partials, a loop above; as one block, :meth:`fold_partials`,
        where the plan says so). ``b``: the buffer (default the kernel's for ``r``); ``block_fold``:
        whether its partials are folded as one block (None: the kernel's choice,
        ``KernelPlan.block_folds``; a split kernel's last program passes the finishing kernel's,
        ``LastFinish.block_folds``); ``cache``: a ``cache_modifier`` of the partials' loads (``.cg``: past
        L1, as a split kernel's last program reads what other SMs wrote, ``KernelPlan.last_finish``)."""
        b = self.k.materialized[r.uid] if b is None else b
        cm = f", cache_modifier=\"{cache}\"" if cache else ""
        if block_fold is None:
            block_fold = r.uid in self.k.block_folds
        name = self.tensor_arg(b.name, len(b.axes) + len(b.lead))
        terms = []
        for a in b.axes:
            bb, _ = scope.find_bind(a)
            terms.append(bb.offs if bb.scalar else self.expand1d(bb.offs, a, layout))
        mask = self.mask_for(b.axes, scope, layout)
        # masked lanes (outside the buffer's axes: every store, reduction and computed dot operand discards
        # them) of a float stage read 1.0, so a quotient or log of them stays finite (0 / 0 there, a split
        # sum's masked rows, was an invalid value on the interpreter); integers (indices among them) read 0.
        # (sm_90 compiles of the norms' readers: the same SASS as with a fill of 0)
        fill = "1.0" if b.torch_dtype.is_floating_point else "0"
        if b.partials and b.rescale:
            code = self.merge_online_partials(r, b, name, terms, mask, scope, layout, cm)
        elif block_fold:
            code = self.fold_partials(r, b, name, terms, scope, layout, cm)
        elif b.state:
            code = self.merge_states(r, b.partials, name, terms, mask, scope, layout, cm)
        elif b.partials:
            acc = self.fresh("parts")
            summed = r.combiner.base == "sum"
            init = self.identity(r) if r.uid in self.k.int_acc or not summed else "0.0"
            scope.emit(f"{acc} = tl.full({self.shape(layout, self.present(r, scope))}, {init}, dtype={self.acc_dtype(r)})")
            p = self.fresh("p")
            loop = "tl.static_range" if b.partials <= 16 else "range"
            it = Scope(scope, f"for {p} in {loop}({b.partials}):", scope.layout)
            code = f"tl.load({self.addr(name, [p] + terms)}" + (f", mask={mask}, other={fill}" if mask else "") + cm + ")"
            it.emit(f"{acc} += {code}" if summed else f"{acc} = {combine_text(r.combiner, acc, code)}")
            scope.emit(it)  # type: ignore[arg-type]
            code = acc
        else:
            code = f"tl.load({self.addr(name, [None] * 0 + terms)}" + (f", mask={mask}, other={fill}" if mask else "") + ")"
            if b.dtype in ("float32", "float16", "bfloat16") and f"tl.{b.dtype}" != self.cdt:
                code += f".to({self.cdt})"
        if b.scale_count:
            code = f"{code} / ({' * '.join(self.size(a) for a in b.scale_count)})"
        return code, f"stage {r.name} (materialised)"

    def merge_online_partials(self, r: Reduce, b, name: str, terms: list[str], mask, scope: Scope, layout,
                              cm: str = "") -> str:
        """Merge the per-split partial sums of an online sum ``r`` (buffer ``b``) in split order,
        each rescaled by ``exp(m_p - m)`` (``exp2`` for base-2 maxima) with ``m_p`` its split's max (the buffer ``b.rescale``)
        and ``m`` the max over splits; a split whose max is -inf (no visible lane) adds 0."""
        mb = self.prog.buffers[b.rescale]
        mname = self.tensor_arg(mb.name, len(mb.axes) + 1)
        mterms = [t for a, t in zip(b.axes, terms) if a in mb.axes]
        mmask = self.mask_for(mb.axes, scope, layout)
        mshape = self.shape(layout, self.present_of_axes(mb.axes, scope))
        loop = "tl.static_range" if b.partials <= 16 else "range"
        acc, p, w = self.fresh("parts"), self.fresh("p"), self.fresh("w")
        mload = f"tl.load({self.addr(mname, [p] + mterms)}" + (f", mask={mmask}, other=0" if mmask else "") + cm + ")"
        key = ("split max", mb.name, tuple(layout))
        if key not in scope.memo:   # the max over splits, once per scope for every sum it rescales
            m = scope.memo[key] = self.fresh("split_max")
            scope.emit(f"{m} = tl.full({mshape}, -float('inf'), dtype={self.cdt})  # the maximum over the "
                       f"{b.partials} splits of {mb.name}")
            it = Scope(scope, f"for {p} in {loop}({b.partials}):", scope.layout)
            it.emit(f"{m} = tl.maximum({m}, {mload})")
            scope.emit(it)  # type: ignore[arg-type]
            # no split with a visible lane: every term below is 0 (its split's max is -inf too); a shift of 0
            # keeps w - m from -inf - -inf (NaN, discarded, but an invalid value on the interpreter)
            scope.emit(f"{m} = tl.where({m} == -float('inf'), 0.0, {m})")
        m = scope.memo[key]
        scope.emit(f"# stage {r.name}: its {b.partials} split partials, each rescaled by {b.rescale_exp}(its split's "
                   f"max - {m})")
        scope.emit(f"{acc} = tl.full({self.shape(layout, self.present(r, scope))}, 0.0, dtype={self.cdt})")
        it2 = Scope(scope, f"for {p} in {loop}({b.partials}):", scope.layout)
        it2.emit(f"{w} = {mload}")
        load = f"tl.load({self.addr(name, [p] + terms)}" + (f", mask={mask}, other=0" if mask else "") + cm + ")"
        # a split with no visible lane (its max -inf, its partial NaN or 0) adds nothing
        it2.emit(f"{acc} += tl.where({w} == -float('inf'), 0.0, tl.{b.rescale_exp}({w} - {m}) * {load})")
        scope.emit(it2)  # type: ignore[arg-type]
        if mask:   # masked lanes hold 1.0, as load_buffer's (once after the merge: a fill per load costs a select each)
            scope.emit(f"{acc} = tl.where({mask}, {acc}, 1.0)")
        return acc

    def fold_partials(self, r: Reduce, b, name: str, terms: list[str], scope: Scope, layout, cm: str = "") -> str:
        """The value of split reduction ``r`` (buffer ``b``) where this scope reads one value of
        it (its axes scalar here: a whole-tensor statistic, or one sample's): its many per-split
        values (each value of a state: the variance's) loaded as one block (the identity past the
        last) and folded once, instead of a loop of as many dependent scalar loads in every
        program that reads it."""
        c, width, partials = r.combiner, 1 << max(0, (b.partials - 1).bit_length()), b.partials
        ident = "0.0" if (c.base == "sum" and r.uid not in self.k.int_acc) or c.state else self.identity(r)
        p = self.fresh("p")
        scope.emit(f"{p} = tl.arange(0, {width})  # the {partials} split partials of {r.name}")
        lead = [[str(j), p] for j in range(len(c.state))] if c.state else [[p]]
        loads = [f"tl.load({self.addr(name, ld + terms)}" + (f", mask={p} < {partials}, other={ident}"
                                                            if width != partials else "") + cm + ")" for ld in lead]
        shape = self.shape(layout, set())
        if c.state:
            names = [self.fresh(f"{v}_{r.name}") for v in c.state]
            scope.emit(f"{', '.join(names)} = tl.reduce(({', '.join(loads)}), 0, {self.helper(c)})")
            return f"tl.full({shape}, 0.0, dtype={self.cdt}) + {variance_text(names[c.state.index('q')], names[c.state.index('n')])}"
        acc = self.fresh("parts")
        scope.emit(f"{acc} = tl.full({shape}, {ident}, dtype={self.acc_dtype(r)})")
        scope.emit(f"{acc} = {combine_text(c, acc, f'tl.reduce({loads[0]}, 0, {self.helper(c)})')}")
        return acc

    def merge_states(self, r: Reduce, partials: int, name: str, terms: list[str], mask, scope: Scope, layout,
                     cm: str = "") -> str:
        """The value of split reduction ``r`` whose buffer holds each split's state (value ``j`` of
        split ``p`` at ``[j, p, ...]``): the states merged in split order with the kind's combine
        helper (the variance's: Chan's formula), then M2 over the count."""
        c = r.combiner
        names = [self.fresh(f"{v}_{r.name}") for v in c.state]
        shape = self.shape(layout, self.present(r, scope))
        scope.emit(f"{', '.join(names)} = " + ", ".join(f"tl.full({shape}, 0.0, dtype={self.cdt})" for _ in names))
        p = self.fresh("p")
        it = Scope(scope, f"for {p} in {'tl.static_range' if partials <= 16 else 'range'}({partials}):", scope.layout)
        loads = [f"tl.load({self.addr(name, [str(j), p] + terms)}" + (f", mask={mask}, other=0" if mask else "") + cm + ")"
                 for j in range(len(names))]
        it.emit(f"{', '.join(names)} = {self.helper(c)}({', '.join(names)}, {', '.join(loads)})")
        scope.emit(it)  # type: ignore[arg-type]
        return variance_text(names[c.state.index('q')], names[c.state.index('n')])

    # -- reductions ----------------------------------------------------------------------------
