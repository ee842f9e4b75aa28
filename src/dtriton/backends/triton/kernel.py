"""Printing one kernel: program ids and the grid, the program scope, stores, the signature and the
docstring; :func:`render` prints a whole program as one module."""

from __future__ import annotations

import torch

from ...ir import Axis, Cast, Load, Reduce, fmt, walk
from ...plan.graph import fused_reduces, has
from ...plan.kernel import KernelPlan, Program, StoreSpec
from ..base import KernelMeta
from .bounds import BoundsPrinter
from .last import LastFinishPrinter
from .gluon_table import gluon_kind
from .memory import MemoryPrinter
from .narrow import ENCODE_FP8, FP8_FORMATS, ROUND_FP8
from .pairs import PairPrinter
from .prelude import ROUND_BF16, header
from .reduce import ReducePrinter
from .rolling import RollingPrinter
from .shifted import ShiftedPrinter
from .scope import Bind, Scope
from .values import ValuePrinter

__all__ = ["KernelPrinter", "KernelSource", "render"]

#: Why a split slice's end is printed at least its start: a slice past the axis's end (1031 rows split 8
#: ways in slices of 160: the eighth starts at 1120) must run no step, and Triton 3.6 unrolls a loop
#: (``loop_unroll_factor``) as if its trip count were unsigned: with start 1120, end 1031, steps of 32 and
#: factor 4 the remainder loop ran rows 992 and 1024 again (H200 s16 call 5, ``bench/probe_unroll.py``: a
#: split column sum 3.8e-2 off in norm; factor 2 happened to land past the end).
UNSIGNED_TRIPS = "at least its start: an unrolled loop takes a negative trip count as unsigned"


class KernelPrinter(ValuePrinter, MemoryPrinter, ReducePrinter, ShiftedPrinter, BoundsPrinter, RollingPrinter,
                    PairPrinter, LastFinishPrinter):
    """Prints the source of one :class:`~dtriton.plan.kernel.KernelPlan` (it decides nothing)."""

    def __init__(self, prog: Program, k: KernelPlan):
        self.prog, self.k = prog, k
        self.dtypes, self.out_dtypes = k.dtypes, k.out_dtypes
        self.hints = k.hints             # integer argument -> a power of two (2, 4, 8) it is a multiple of
        self.descs: dict[tuple, str] = {}  # (tensor, block shape) -> descriptor argument
        self.host_descs: list[tuple[str, str, tuple[int, ...]]] = []  # (argument, tensor, box) built by the runtime
        self.device_descs: list[str] = []  # tl.make_tensor_descriptor lines, printed first in the body
        self.desc_axes: dict[str, list[str]] = {}
        self.i64 = k.i64
        self.counter = 0
        self.names = prog.stage_labels
        self.cdt = f"tl.{k.compute_dtype}"
        self.reduce_by_id = {r.uid: r for r in fused_reduces([st.expr for st in k.stores], k.materialized)}
        self.state_values: dict[int, list[str]] = {}   # a folded state's values (split stores write them)
        self.tensors: list[str] = []     # pointer args in order
        self.tensor_ndim: dict[str, int] = {}
        self.sizes: list[str] = []
        self.scalars: list[str] = []
        self.consts: dict[str, int] = {}
        self.need_depth_memo: dict[tuple[int, int], int] = {}
        self.helpers: dict[str, str] = {}  # module-level @_jit helpers the kernel calls: name -> definition
        self.min_depth = 0   # the depth of the program's tile scope (1 inside a persistent loop)

    def generate(self) -> str:
        """The source of this kernel: decorator, signature, docstring and body."""
        k = self.k
        root = Scope(None)
        top, nums, layout = self.program_ids(root)
        self.min_depth = top.depth
        self.bind_program_axes(top, layout)
        # top-level reductions: computed once per program, before the outputs
        tops = []
        for st in k.stores:
            for r in fused_reduces([st.expr], k.materialized):
                if not has(tops, r) and self.need_depth(r, top) <= top.depth and all(top.find_bind(a) for a in r.axes):
                    tops.append(r)
        if {r.uid for r in tops} != {i for p in k.passes for i in p.reductions}:
            raise AssertionError(f"kernel {k.name}: the plan's program-scope passes differ from the printer's scopes")
        if k.rolling is not None:   # (its one pass and store printed together: plan.taps.plan_rolling)
            self.emit_rolling(top)
        for p in k.passes if k.rolling is None else ():
            self.emit_pass([self.reduce_by_id[i] for i in p.reductions], list(p.loop_axes), top, p)
        # stores, grouped by their loop axes
        by_loops: dict[tuple, list[StoreSpec]] = {}
        for st in k.stores:
            if st.target in k.loop_stores or k.rolling is not None:
                continue   # printed inside its pass's loop (emit_pass, emit_rolling)
            key = tuple(a for a in st.layout if top.find_bind(a) is None)
            by_loops.setdefault(key, []).append(st)
        for key, sts in by_loops.items():
            sc = top
            opened = []
            for a in key:
                child = sc.open(f"for {a}0 in range(0, {self.size(a)}, {self.block(a)}):",
                                () if self.k.scalar_axis(a) else (a,))
                opened.append((sc, child))
                sc = child
                self.bind_axis(sc, a, f"{a}0", f"  # output tile of axis {a}", loop=True)
            for st in sts:
                self.store(st, sc)
            for parent, child in reversed(opened):
                parent.close(child)
        if k.last_finish is not None:   # the last split program of each tile finishes the partials
            self.emit_last_finish(top)
        lines = self.signature()
        body: list[str] = []
        hinted = [(x, self.hints[x]) for x in self.sizes + [f"{t}_s{d}" for t in self.tensors for d in range(self.tensor_ndim[t])]
                  if self.hints.get(x, 1) > 1]
        if hinted:
            body.append("    # multiples of 2-8 on this specialisation (Triton only tracks 16): restated so its alignment")
            body.append("    # analysis can vectorise masked loads and stores")
            for x, d in hinted:
                body.append(f"    {x} = {x} // {d} * {d}")
        root.items[:0] = self.launch_control() + self.device_descs
        root.render(1, body)
        lines.extend(body)
        return "\n".join(lines) + "\n"

    def launch_control(self) -> list[str]:
        """The grid-dependency control lines that open the body (:mod:`dtriton.plan.dependent_launch`):
        the wait for the kernel launched before, then the signal that lets the next one launch."""
        lines = []
        if self.k.dependent_launch:
            lines.append("tl.extra.cuda.gdc_wait()  # dependent launch: wait for the kernel before this one to end")
        if self.k.launch_dependents:
            lines.append("tl.extra.cuda.gdc_launch_dependents()  # the next kernel may launch now")
        return lines

    def program_ids(self, root: Scope) -> tuple[Scope, dict[str, str], list[str]]:
        """Print the program-id arithmetic (grid, split-K slice, grouped order, persistent loop; or
        the tile indices read from the launch-grid dimensions of ``k.launch_dims``).
        Returns the program scope, the tile-count variables of the grid axes and the layout of the
        grid axes bound so far."""
        k = self.k
        grid = k.grid
        nums = {}
        placed = set(grid) if k.launch_dims is None else {a for dim in k.launch_dims for a in dim}
        for a in grid:
            nm = f"num_pid_{a}"
            nums[a] = nm
            if a not in placed:
                continue   # (one program covers it: its index is 0)
            if a in k.flat_box:   # a box of the flat axis's members per program: their tile counts' product
                counts = [f"(({self.size(m)} + {b - 1}) // {b})" for m, b in zip(k.flat[a], k.flat_box[a])]
                root.emit(f"{nm} = {' * '.join(counts)}  # boxes of {', '.join(k.flat[a])}")
            else:
                root.emit(f"{nm} = ({self.size(a)} + {self.block(a)} - 1) // {self.block(a)}")
        if k.launch_dims is not None:
            top = root
            self.launch_dim_ids(top, nums)
        else:
            top = self.linear_ids(root, nums)
        layout: list[str] = []
        for a in grid:
            p = self.plan(a)
            if p.block == 1 and a not in k.flat:   # (a flat axis: its members decompose its index)
                st = f"pid_{a}"
                if self.i64:
                    st = f"pid_{a}.to(tl.int64)"
                top.bound[a] = Bind(a, st, None, self.block(a), True, st)
            elif a in k.flat_box:
                self.bind_box(top, a, f"pid_{a}")
                layout.append(a)
            else:
                # (a flat axis's tile start may pass 2**31: in 64 bits before the multiply)
                pid = f"pid_{a}.to(tl.int64)" if self.i64 and a in k.flat else f"pid_{a}"
                self.bind_axis(top, a, f"{pid} * {self.block(a)}", f"  # program's tile of axis {a}")
                layout.append(a)
        return top, nums, layout

    def launch_dim_ids(self, top: Scope, nums: dict[str, str]) -> None:
        """Print each grid axis's tile index read from its launch-grid dimension (``k.launch_dims``:
        no division unless axes share one), reversed within each dimension under a reverse launch order."""
        k = self.k
        dims = k.launch_dims
        names = "xyz"
        parts = [f"{names[d]}: {', '.join(axes)}" for d, axes in enumerate(dims)]
        parts += [f"{a}: one program" for a in k.grid if not any(a in dim for dim in dims)]
        shared = "" if all(len(axes) == 1 for axes in dims) else " (one division where axes share a dimension)"
        top.emit(f"# tile indices from the launch grid{shared}: {'; '.join(parts)}")
        if k.reverse_order:
            top.emit("# tiles in reverse launch order (the last first), each index reversed in its dimension")
        for a in k.grid:
            if not any(a in dim for dim in dims):
                top.emit(f"pid_{a} = tl.full((), 0, tl.int32)")   # (a tensor: the bindings may widen it)
        for d, axes in enumerate(dims):
            count = " * ".join(nums[a] for a in axes)
            idx = f"{count} - 1 - tl.program_id({d})" if k.reverse_order else f"tl.program_id({d})"
            if len(axes) == 1:
                top.emit(f"pid_{axes[0]} = {idx}")
                continue
            rem = f"pid{d}"
            top.emit(f"{rem} = {idx}  # axes {', '.join(axes)} share dimension {d}")
            for i, a in enumerate(axes[:-1]):
                inner = " * ".join(nums[b] for b in axes[i + 1:])
                top.emit(f"pid_{a} = {rem} // ({inner})")
                top.emit(f"rem_{a} = {rem} % ({inner})")
                rem = f"rem_{a}"
            top.emit(f"pid_{axes[-1]} = {rem}")

    def linear_ids(self, root: Scope, nums: dict[str, str]) -> Scope:
        """Print the tile indices of the linear form (one launch-grid dimension): the persistent
        loop, reverse order, split slice and grouped order decomposed from the program id; returns
        the program scope."""
        k = self.k
        grid = k.grid
        if k.persistent:
            # persistent kernel: a fixed number of programs, each looping over output tiles
            total = " * ".join([nums[a] for a in grid] + ([str(k.split_factor)] if k.split else [])) or "1"
            root.emit(f"num_tiles = {total}")
            if k.tile_stages:   # (the body has no runtime loop: the tile loop itself is pipelined)
                top = root.open(f"for pid in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0), "
                                f"num_stages={k.tile_stages}):  # persistent tile loop, the next tiles' loads "
                                "in flight", ())
            elif k.flatten:   # the tile loop and its contraction loop pipelined as one (plan.persistent)
                top = root.open("for pid in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0), flatten=True):  "
                                "# persistent tile loop, flattened", ())
            else:
                top = root.open("for pid in range(tl.program_id(0), num_tiles, tl.num_programs(0)):  # persistent tile loop", ())
        else:
            root.emit("pid = tl.program_id(0)")
            top = root
        rem = "pid"
        if k.reverse_order:
            total = " * ".join([nums[a] for a in grid] + ([str(k.split_factor)] if k.split else [])) or "1"
            top.emit(f"tile = {total} - 1 - pid  # tiles in reverse launch order (the last first)")
            rem = "tile"
        if k.split:
            inner = " * ".join(nums[a] for a in grid) or "1"
            what = f"axis {k.split[0]}" if not k.split_more else f"each of the axes {', '.join(k.split_axes)}"
            top.emit(f"pid_split = {rem} // ({inner})  # split-K: which slice of {what} this program sums")
            top.emit(f"rem = {rem} % ({inner})")
            rem = "rem"
        grouped = k.grouped
        lead = grid[:-2] if grouped else grid[:-1]
        for idx, a in enumerate(lead):
            inner = " * ".join(nums[b] for b in grid[idx + 1:])
            top.emit(f"pid_{a} = {rem} // ({inner})")
            top.emit(f"rem_{a} = {rem} % ({inner})")
            rem = f"rem_{a}"
        if grouped:
            a, b = grid[-2], grid[-1]
            g = self.plan(a).group
            top.emit(f"# grouped launch order: {g} tiles of {a} share each sweep over {b} (L2 reuse)")
            top.emit(f"GROUP = {g}")
            top.emit(f"group_id = {rem} // (GROUP * {nums[b]})")
            top.emit(f"first_{a} = group_id * GROUP")
            top.emit(f"group_rows = tl.minimum({nums[a]} - first_{a}, GROUP)")
            top.emit(f"pid_{a} = first_{a} + ({rem} % (GROUP * {nums[b]})) % group_rows")
            top.emit(f"pid_{b} = ({rem} % (GROUP * {nums[b]})) // group_rows")
        elif grid:
            top.emit(f"pid_{grid[-1]} = {rem}")
        return top

    def bind_program_axes(self, top: Scope, layout: list[str]) -> None:
        """Bind the split slice and the whole axes in the program scope and set its layout (dot-only
        axes get offsets but no dim)."""
        k = self.k
        after = k.split_factor
        for sa, sf in k.splits:
            # the program's slice of split axis sa: its index in pid_split (the first split axis outermost)
            after //= sf
            idx = "pid_split" if not k.split_more else f"pid_split_{sa}"
            if k.split_more:
                top.emit(f"{idx} = pid_split" + (f" // {after}" if after > 1 else "") + (f" % {sf}" if sa != k.split[0]
                                                                                         else ""))
            if k.split_interleaved:   # the slice's tiles are idx, idx + sf, ... (a loop step of sf tiles)
                top.emit(f"{sa}_lo = {idx} * {self.block(sa)}  # interleaved slices: tiles {idx}, {idx} + {sf}, ... of {sa}")
                top.emit(f"{sa}_hi = tl.maximum({self.size(sa)}, {sa}_lo)  # {UNSIGNED_TRIPS}")
                continue
            chunk = f"(({self.size(sa)} + {sf} - 1) // {sf} + {self.block(sa)} - 1) // {self.block(sa)} * {self.block(sa)}"
            top.emit(f"{sa}_lo = {idx} * ({chunk})")
            end = f"tl.minimum({sa}_lo + ({chunk}), {self.size(sa)})"
            top.emit(f"{sa}_hi = tl.maximum({end}, {sa}_lo)  # {UNSIGNED_TRIPS}")
        for a, p in k.axes.items():
            if p.role == "whole" and a not in k.grid:
                self.bind_axis(top, a, "0", f"  # axis {a} whole: one block covers it")
                if a not in k.dot_only:
                    layout.append(a)
        top.layout = tuple(layout)

    def signature(self) -> list[str]:
        """The decorator, ``def`` line and docstring (call after the body is printed: the arguments
        are those the body used)."""
        k = self.k
        args = []
        for t in self.tensors:
            args.append(f"{t}_ptr")
        for t in self.tensors:
            args.extend(f"{t}_s{d}" for d in range(self.tensor_ndim[t]))
        args.extend(self.sizes)
        args.extend(self.scalars)
        args.extend(d[0] for d in self.host_descs)
        args.extend(f"{c}: tl.constexpr" for c in sorted(self.consts))
        lines = ["@_jit", f"def {k.name}({', '.join(args)}):"]
        doc = [f'    """Kernel {k.name}: stores {", ".join(s.target for s in k.stores)}.']
        doc.append(f"    grid: {', '.join(f'{a} (tile {self.plan(a).block})' for a in k.grid) or 'one program'}"
                   + (f"; split of {' and '.join(f'{a} into {f}' for a, f in k.splits)}" if k.split else "")
                   + ("; persistent (each program loops over tiles)" if k.persistent else ""))
        if k.max_registers:
            doc.append(f"    registers: at most {k.max_registers} a thread (launch option maxnreg)")
        for a, p in k.axes.items():
            if p.role == "flat":
                doc.append(f"    axis {a}: from flat axis {k.flat_of(a)}")
            elif p.role != "grid" or a in k.flat:
                doc.append(f"    axis {a}: {p.role}, block {p.block}" + ("" if p.divisible else " (masked)")
                           + (f", flat over {', '.join(k.flat[a])}" if a in k.flat else ""))
        for st in k.stores:
            b = self.prog.buffers.get(st.target)
            if b is not None and b.reason:
                doc.append(f"    {b.name} in {b.dtype}: {b.reason}")
        for d, t, box, perm in self.host_descs:
            axes = self.desc_axes[d]
            view = f"{t}.permute{perm}" if perm else t
            doc.append(f"    {d}: TMA descriptor of {view}[{', '.join(axes)}] in boxes of [{', '.join(map(str, box))}] "
                       "(built on the host)")
        doc.append('    """')
        lines.extend(doc)
        return lines

    def store(self, st: StoreSpec, scope: Scope):
        """Print one store (atomic, TMA, block pointer or pointer, as planned) in ``scope``."""
        layout = scope.layout
        expr = st.expr
        name = self.tensor_arg(st.target, len(st.layout) + (1 if st.partial_axis else 0) + (1 if st.state else 0))
        scope.emit(f"# {'output' if not st.target.startswith('buf_') else 'stage'} {st.target}[{', '.join(st.layout)}] = "
                   f"{fmt(expr, 0, {k: v for k, v in self.names.items() if k != expr.uid}, limit=None)}")
        if isinstance(expr, Reduce) and expr.uid not in self.k.materialized:
            for s in scope.chain():
                if expr.uid in s.reduced:
                    break
            else:
                self.compute_single(expr, self.ancestor(scope, self.need_depth(expr, scope)))
        v = self.val(expr, scope, layout)
        terms = []
        if st.partial_axis:
            terms.append("pid_split")
        flat = self.k.flat_direct.get(st.target)   # (its last dims addressed by the flat index: plan.flat)
        direct = set(self.k.flat[flat]) if flat is not None else set()
        for a in st.layout:
            b, _ = scope.find_bind(a)
            terms.append(None if a in direct else b.offs if b.scalar else self.expand1d(b.offs, a, layout))
        mask = self.mask_for(st.layout, scope, layout)
        pres = self.present_of_axes(st.layout, scope)
        if self.present(expr, scope) != pres and pres:
            v = f"tl.broadcast_to({v}, {self.shape(layout, pres)})"
        ptr = self.addr(name, terms) + (f" + {self.flat_offset(flat, scope, layout)}" if flat is not None else "")
        # of literals and scalar arguments only: a Python number in the interpreter (no .to())
        scalars_only = not any(isinstance(n, (Load, Reduce, Axis)) for n in walk([expr]))
        if not pres and layout:
            # nothing of the output is a block here, but the value is a (1, ..., 1) block: store
            # through a pointer block of the same shape
            ptr = f"{ptr} + tl.full({self.shape(layout, set())}, 0, tl.int32)"
            v = f"tl.reshape({v}, {self.shape(layout, set())})" if self.present(expr, scope) == set() and \
                not self.is_rank0(expr) else f"tl.full({self.shape(layout, set())}, 0.0, {self.cdt}) + {v}"
        elif not layout and scalars_only:
            v = f"tl.cast({v}, {self.cdt})"
        if st.state:
            # each value of this split's state into its slot (the reader merges the splits' states)
            pad = f" + tl.full({self.shape(layout, set())}, 0, tl.int32)" if not pres and layout else ""
            for j, sv in enumerate(self.state_values[expr.uid]):
                sv = f"tl.reshape({sv}, {self.shape(layout, set())})" if pad else sv
                scope.emit(f"tl.store({self.addr(name, [str(j)] + terms)}{pad}, {sv}" + (f", mask={mask}" if mask else "")
                           + ")")
            return
        if st.atomic:
            scope.emit(f"tl.atomic_add({ptr}, {v}" + (f", mask={mask}" if mask else "") + ", sem=\"relaxed\")")
        else:
            odt = self.out_dtypes.get(st.target) or (getattr(torch, st.dtype) if st.dtype else None)
            if self.k.round_bf16 and odt == torch.bfloat16:
                v = f"{self.use_helper('_round_bf16', ROUND_BF16)}(tl.cast({v}, tl.float32))"
            sat = isinstance(st.expr, Cast) and st.expr.saturate
            if odt in FP8_FORMATS and (self.k.interpret or not FP8_FORMATS[odt].native(sat)):
                # encoded bit by bit (see backends.triton.narrow); else the store's own conversion
                self.use_helper("_round_fp8", ROUND_FP8)
                self.use_helper("_encode_fp8", ENCODE_FP8)
                v = FP8_FORMATS[odt].encode_call(f"tl.cast({v}, tl.float32)", False)
            acc = None
            if odt is not None and not st.partial_axis and pres:
                acc = self.tile_access(name, list(st.layout), scope)
            if acc is not None:
                # the value in the output's dim order (size-1 dims for tile-1 grid axes)
                kind, h, extra = acc
                tv = self.fresh("tile")
                tiled = tuple(dict.fromkeys(self.k.flat_of(a) for a in st.layout if self.k.flat_of(a) in pres))
                tcode = f"({self.relayout(v, tuple(layout), tiled, pres, scope)}).to({name}_ptr.dtype.element_ty)"
                if any(self.k.flat_of(a) in self.k.flat_box for a in st.layout):   # box rows back to the box's dims
                    dims = [str(self.plan(a).block) if self.plan(a).role == "flat" else
                            (self.block(a) if a in pres else "1") for a in st.layout]
                    tcode = f"tl.reshape({tcode}, ({', '.join(dims)}))"
                elif len(tiled) < len(st.layout):  # size-1 dims for tile-1 grid axes
                    tcode = f"tl.reshape({tcode}, {self.shape(tuple(st.layout), pres)})"
                scope.emit(f"{tv} = {tcode}")
                if kind == "tma":   # outputs are never read through a transposed view
                    self.tma_store(h, extra[0], tv, self.k.access[(name, tuple(st.layout))], scope)
                else:
                    scope.emit(f"tl.store({h}, {tv}" + (f", boundary_check={extra}" if extra else "") + ")")
                return
            scope.emit(f"tl.store({ptr}, ({v}).to({name}_ptr.dtype.element_ty)" + (f", mask={mask}" if mask else "") + ")")


    def tma_store(self, h: str, offs: list[str], tv: str, acc, scope: Scope) -> None:
        """Print the TMA store of tile ``tv`` through descriptor ``h`` at ``offs``: whole, or in
        ``acc.pieces`` (2) halves of its last dim, each of the descriptor's box (epilogue
        subtiling: the tile's last dim split off as a pair and taken apart by ``tl.split``)."""
        if acc.pieces == 1:
            scope.emit(f"{h}.store([{', '.join(offs)}], {tv})  # TMA store (clipped at the edges)")
            return
        n = len(acc.box)
        half = acc.box[-1]
        pair = self.fresh("pair")
        lo, hi = self.fresh("lo"), self.fresh("hi")
        scope.emit(f"{pair} = tl.permute(tl.reshape({tv}, {acc.box[:-1] + (2, half)}), {tuple(range(n - 1)) + (n, n - 1)})")
        scope.emit(f"{lo}, {hi} = tl.split({pair})  # the tile's two halves along its last dim")
        scope.emit(f"{h}.store([{', '.join(offs)}], {lo})  # TMA store in two pieces (clipped at the edges)")
        scope.emit(f"{h}.store([{', '.join(offs[:-1] + [f'{offs[-1]} + {half}'])}], {hi})")

    def loop_partial(self, st: StoreSpec, scope: Scope) -> str:
        """Print the value of an in-loop store (``KernelPlan.loop_stores``) in ``scope``, the
        innermost scope of its pass's loop, and return it: the program's partial sum of the stage
        over its tile of the reduced axis (the plan's dot, in the dot's ``(m, n)`` layout, times its
        hoisted factors). Printed after the step of the pass's own reductions and added at once by
        :meth:`loop_add`."""
        r = st.expr
        d = self.k.dots[r.uid]
        ra = d.k or r.over[0]
        scope.emit(f"# stage {st.target}[{', '.join(st.layout)}] += this program's partial sum of {self.names.get(r.uid, r.name)} "
                   f"over its tile of {ra} (atomics)")
        a = self.operand(d.left, scope, (d.m, ra), ra, d, d.raw_left)
        b = self.operand(d.right, scope, (ra, d.n), ra, d, d.raw_right)
        prec = f", input_precision=\"{d.precision}\"" if d.precision else ""
        if d.acc_dtype != "float32":
            prec += f", out_dtype=tl.{d.acc_dtype}"
        lay = (d.m, d.n)
        v = self.fresh("part")
        scope.emit(f"{v} = tl.dot({a}, {b}{prec})")
        for f in d.hoist:
            scope.emit(f"{v} = {v} * {self.val(f, scope, lay)}")
        return v

    def loop_add(self, st: StoreSpec, scope: Scope, v: str) -> None:
        """Print the fp32 atomic add of :meth:`loop_partial`'s value ``v`` into the store's target
        (in the dot's ``(m, n)`` layout, masked to the axes' sizes)."""
        d = self.k.dots[st.expr.uid]
        lay = (d.m, d.n)
        name = self.tensor_arg(st.target, len(st.layout))
        terms = []
        for ax in st.layout:
            bnd, _ = scope.find_bind(ax)
            terms.append(bnd.offs if bnd.scalar else self.expand1d(bnd.offs, ax, lay))
        mask = self.mask_for(st.layout, scope, lay)
        scope.emit(f"tl.atomic_add({self.addr(name, terms)}, {v}" + (f", mask={mask}" if mask else "") + ", sem=\"relaxed\")")


#: A printed kernel's argument order (the backend-neutral record, under its former name).
KernelSource = KernelMeta


def render(prog: Program) -> tuple[str, list[KernelSource]]:
    """Print one module's source holding every kernel of the complete program ``prog``."""
    parts = []
    metas = []
    helpers: dict[str, str] = {}
    for k in prog.kernels:
        kind = gluon_kind(k.gluon)
        if kind is not None:   # a hand-written Gluon kernel the plan chose (attention, its backward, conv2d,
            # depthwise conv2d)
            text, meta = kind.render(k)
            parts.append("\n" + text)
            metas.append(meta)
            continue
        g = KernelPrinter(prog, k)
        src = g.generate()
        parts.append("\n" + src)
        helpers.update(g.helpers)
        metas.append(KernelSource(k.name, g.tensors, g.tensor_ndim, g.sizes, g.scalars, g.consts, k,
                                  descs=tuple(g.host_descs)))
    return "\n".join([header(prog, helpers)] + parts), metas

