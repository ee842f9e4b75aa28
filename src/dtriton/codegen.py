"""Triton code generation: KernelIR -> readable Triton source.

Every value is a Triton block whose dims follow a *layout*: an ordered tuple of the axes bound in
the current scope (size-1 dims for axes a value does not use), so broadcasting by axis name is
plain Triton broadcasting. Scopes nest: the program scope binds grid axes (offsets from the
program id) and "whole" axes (one block covers the axis); each loop over a reduction or output
axis opens a child scope that appends its axis to the layout.

- Contractions (a sum over one axis of a product whose factors split into an (m, r) and an
  (r, n) side) become ``tl.dot`` with an fp32 accumulator; factors free of the reduction axis are
  hoisted out of the sum. Other reductions are masked ``tl.sum``/``tl.reduce``.
- Reductions are grouped into passes (one loop computes every reduction that is ready). The
  *online* strategy merges a max stage with the sums that use it as ``exp(x - max)`` into one pass
  with rescaling (Milakov & Gimelshein 2018; the trick FlashAttention builds on).
- Loads and elementwise work are emitted in the shallowest scope whose axes they use (loop-
  invariant hoisting) and memoised per scope.
- Masks appear only for axes whose size is not a multiple of their block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .errors import ScheduleError
from .language import (Axis, Binary, Cast, Const, Expr, Load, Reduce, ScalarParam, Unary, Where,
                       COMPARE_OPS, _fmt_expr)
from .plan.decide import decide
from .plan.graph import fused_deps, fused_reduces, has as _has
from .plan.kernel import AxisPlan, DotPlan, KernelPlan, PassPlan, Program, StoreSpec

__all__ = ["generate", "fmt"]


TL_DTYPES = {torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16", torch.float32: "tl.float32",
             torch.float64: "tl.float64", torch.int8: "tl.int8", torch.int16: "tl.int16",
             torch.int32: "tl.int32", torch.int64: "tl.int64", torch.uint8: "tl.uint8", torch.bool: "tl.int1"}

_OPSYM = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
          "eq": "==", "ne": "!=", "and": "&", "or": "|"}


def fmt(n: Expr, depth: int = 0, names: dict[int, str] | None = None) -> str:
    """Readable infix text for an expression (stages print by name)."""
    return _fmt_expr(n, depth, names)


def _pointer_loads(scope: "_Scope") -> bool:
    """Whether ``scope`` or a scope inside it reads memory through pointers (``tl.load``)."""
    for it in scope.items:
        if isinstance(it, _Scope):
            if _pointer_loads(it):
                return True
        elif "tl.load(" in it:
            return True
    return False


@dataclass
class _Bind:
    axis: str
    offs: str            # offsets block var (1-D) or scalar var
    mask: str | None     # 1-D mask var, None when divisible
    block: str           # constexpr name
    scalar: bool         # tile-1 grid axis: a scalar index, not a block dim
    start: str = "0"     # first index of the tile (the scalar index itself when ``scalar``)


class _Scope:
    def __init__(self, parent: "_Scope | None", header: str | None = None, layout: tuple[str, ...] = ()):
        self.parent = parent
        self.depth = parent.depth + 1 if parent else 0
        self.items: list[Any] = []
        self.open_child: int | None = None
        self._open_stack: list = []
        self.header = header
        self.layout = layout
        self.bound: dict[str, _Bind] = {}
        self.memo: dict[tuple, str] = {}
        self.reduced: dict[int, tuple[str, tuple[str, ...]]] = {}
        self.overrides: dict[int, tuple[str, tuple[str, ...]]] = {}

    def emit(self, line: str):
        if self.open_child is not None:
            self.items.insert(self.open_child, line)
            self.open_child += 1
        else:
            self.items.append(line)

    def open(self, header: str, new_axes: tuple[str, ...], keep: tuple[str, ...] | None = None) -> "_Scope":
        """Open a child scope (a loop) at the current insertion point. Its layout is this scope's
        (or only the ``keep`` axes of it) followed by ``new_axes``. Until :meth:`close`, lines
        emitted into this scope go before the new child (hoisted code precedes its loop)."""
        base = self.layout if keep is None else tuple(a for a in self.layout if a in keep)
        child = _Scope(self, header, base + new_axes)
        prev = self.items[self.open_child] if self.open_child is not None else None
        pos = self.open_child if self.open_child is not None else len(self.items)
        self.items.insert(pos, child)
        self._open_stack.append(prev)
        self.open_child = pos
        return child

    def close(self, child: "_Scope"):
        """Close ``child``; the child that was open before it (if any) is the insertion point again."""
        assert self.items[self.open_child] is child, "scopes close in the reverse order they open"
        prev = self._open_stack.pop()
        self.open_child = None if prev is None else next(k for k, it in enumerate(self.items) if it is prev)

    def chain(self):
        s = self
        while s is not None:
            yield s
            s = s.parent

    def find_bind(self, a: str) -> tuple[_Bind, "_Scope"] | None:
        for s in self.chain():
            if a in s.bound:
                return s.bound[a], s
        return None

    def render(self, indent: int, out: list[str]):
        pad = "    " * indent
        for it in self.items:
            if isinstance(it, _Scope):
                out.append(pad + it.header)
                if not it.items:
                    out.append(pad + "    pass")
                it.render(indent + 1, out)
            else:
                out.append(pad + it)


class KernelGen:
    """Emits the source of one KernelIR."""

    def __init__(self, prog: Program, k: KernelPlan):
        self.prog, self.k = prog, k
        self.dtypes, self.out_dtypes = k.dtypes, k.out_dtypes
        self.hints = k.hints             # integer argument -> a power of two (2, 4, 8) it is a multiple of
        self.descs: dict[tuple, str] = {}  # (tensor, block shape) -> descriptor argument
        self.host_descs: list[tuple[str, str, tuple[int, ...]]] = []  # (argument, tensor, box) built by the runtime
        self._desc_axes: dict[str, list[str]] = {}
        self.i64 = k.i64
        self.counter = 0
        self.names = prog.stage_labels
        self.cdt = f"tl.{k.compute_dtype}"
        self.reduce_by_id = {r._id: r for r in fused_reduces([st.expr for st in k.stores], k.materialized)}
        self.tensors: list[str] = []     # pointer args in order
        self.tensor_ndim: dict[str, int] = {}
        self.sizes: list[str] = []
        self.scalars: list[str] = []
        self.consts: dict[str, int] = {}
        self.need_depth_memo: dict[tuple[int, int], int] = {}

    # -- helpers -----------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}_{self.counter}"

    def plan(self, a: str) -> AxisPlan:
        return self.k.axes[a]

    def size(self, a: str) -> str:
        nm = f"size_{a}"
        if nm not in self.sizes:
            self.sizes.append(nm)
        return nm

    def block(self, a: str) -> str:
        nm = f"BLOCK_{a.upper()}"
        self.consts[nm] = self.plan(a).block
        return nm

    def eviction(self, name: str) -> str | None:
        """The plan's L2 eviction hint for loads of input ``name`` (None: Triton's default policy)."""
        return self.k.eviction.get(name)

    def tensor_arg(self, name: str, ndim: int) -> str:
        if name not in self.tensor_ndim:
            self.tensors.append(name)
            self.tensor_ndim[name] = ndim
        return name

    def bind_axis(self, scope: _Scope, a: str, start: str | None, comment: str = ""):
        p = self.plan(a)
        blk = self.block(a)
        if p.role == "grid" and p.block == 1:
            scope.bound[a] = _Bind(a, start, None, blk, True, start)
            return
        offs = f"offs_{a}"
        if self.i64:
            scope.emit(f"{offs} = ({start}).to(tl.int64) + tl.arange(0, {blk}){comment}")
        else:
            scope.emit(f"{offs} = {start} + tl.arange(0, {blk}){comment}")
        mask = None
        if not p.divisible:
            mask = f"mask_{a}"
            scope.emit(f"{mask} = {offs} < {self.size(a)}")
        scope.bound[a] = _Bind(a, offs, mask, blk, False, start)

    def block_axes(self, scope: _Scope, axes) -> list[str]:
        out = []
        for a in axes:
            b = scope.find_bind(a)
            if b is None:
                raise ScheduleError(f"kernel {self.k.name}: axis {a!r} is used where it is not bound "
                                    "(a fused stage needs an axis the consumer does not cover); materialise that stage")
            if not b[0].scalar:
                out.append(a)
        return out

    def shape(self, layout, present) -> str:
        dims = [f"{self.block(a)}" if a in present else "1" for a in layout]
        return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"

    def expand1d(self, var: str, a: str, layout) -> str:
        if len(layout) == 1:
            return var
        idx = ", ".join(":" if b == a else "None" for b in layout)
        return f"{var}[{idx}]"

    def relayout(self, var: str, frm: tuple[str, ...], to: tuple[str, ...], present, scope: _Scope) -> str:
        """Re-express block ``var`` (layout ``frm``) in layout ``to``; ``present`` are its non-1 dims."""
        if frm == to:
            return var
        pres = [a for a in frm if a in present]
        missing = [a for a in pres if a not in to]
        if missing:
            raise AssertionError(f"relayout drops live axes {missing}")
        if not to:
            return f"tl.reshape({var}, ())" if frm else var
        if not frm:
            return var
        pto = [a for a in to if a in pres]
        if pres == pto:
            # pure insertion/removal of size-1 dims
            if all(a in to for a in frm) and [a for a in to if a in frm] == list(frm):
                idx = ", ".join(":" if a in frm else "None" for a in to)
                return f"{var}[{idx}]"
            return f"tl.reshape({var}, {self.shape(to, present)})"
        # reorder: permute frm so present axes follow `to`'s order, then reshape
        order = [frm.index(a) for a in pto] + [k for k, a in enumerate(frm) if a not in pto]
        v = self.fresh("perm")
        scope.emit(f"{v} = tl.permute({var}, {tuple(order)})")
        frm2 = tuple(frm[k] for k in order)
        return self.relayout(v, frm2, to, present, scope)

    def check_block(self, n: Expr, scope: _Scope):
        """Refuse a value whose block would exceed Triton's 2**20 elements (the real blocks the kernel
        builds: a contraction lowered to ``tl.dot`` never forms its [free x reduced] product).

        Raises:
            ScheduleError: naming the kernel, the axes and their blocks, and the fix.
        """
        pres = sorted(self.present(n, scope))
        numel = 1
        for a in pres:
            numel *= self.plan(a).block
        if numel > 1 << 20:
            big = {a: self.plan(a).block for a in pres}
            raise ScheduleError(
                f"the kernel for stage {', '.join(repr(x) for x in self.k.stage_names)} ({self.k.name}): the value "
                f"{fmt(n)[:60]} would be a block of {numel} elements ({big}); "
                f"Triton allows at most {1 << 20}. Use smaller tiles, or strategy 'loop'/'online' instead of "
                "'whole' for a long axis")

    def present(self, n: Expr, scope: _Scope) -> set[str]:
        out = set()
        for a in n.axes:
            b = scope.find_bind(a)
            if b is not None and not b[0].scalar:
                out.add(a)
        return out

    # -- dependency depth (for hoisting) -------------------------------------------------------
    def need_depth(self, n: Expr, scope: _Scope, ignore: frozenset = frozenset()) -> int:
        key = (n._id, id(scope), ignore)
        if key in self.need_depth_memo:
            return self.need_depth_memo[key]
        d = 0
        for s in scope.chain():
            if n._id in s.overrides:
                d = s.depth
                break
        else:
            if isinstance(n, Axis):
                if n.name not in ignore:
                    b = scope.find_bind(n.name)
                    d = b[1].depth if b else scope.depth
            elif isinstance(n, Reduce) and n._id in self.k.materialized:
                for a in n.axes:
                    if a in ignore:
                        continue  # reduced by an enclosing stage: not a dependency on its loop
                    b = scope.find_bind(a)
                    d = max(d, b[1].depth if b else scope.depth)
            elif isinstance(n, Reduce):
                found = None
                for s in scope.chain():
                    if n._id in s.reduced:
                        found = s
                        break
                if found is not None:
                    d = found.depth
                else:
                    d = self.need_depth(n.x, scope, ignore | frozenset(n.over))
                    for a in n.axes:
                        b = scope.find_bind(a)
                        d = max(d, b[1].depth if b else scope.depth)
            else:
                for c in n.children():
                    d = max(d, self.need_depth(c, scope, ignore))
                if isinstance(n, Load):
                    for e in n.index:
                        if isinstance(e, Axis) and e.name not in ignore:
                            b = scope.find_bind(e.name)
                            d = max(d, b[1].depth if b else scope.depth)
        self.need_depth_memo[key] = d
        return d

    def ancestor(self, scope: _Scope, depth: int) -> _Scope:
        s = scope
        while s.depth > depth:
            s = s.parent
        return s

    # -- values --------------------------------------------------------------------------------
    def val(self, n: Expr, scope: _Scope, layout: tuple[str, ...]) -> str:
        """A Triton expression for ``n`` evaluated in ``scope``, shaped by ``layout``."""
        for s in scope.chain():
            if n._id in s.overrides:
                v, vl = s.overrides[n._id]
                return self.relayout(v, vl, layout, self.present(n, scope), scope)
        if isinstance(n, Const):
            v = n.value
            if math.isinf(v):
                return "float('inf')" if v > 0 else "-float('inf')"
            if math.isnan(v):
                return "float('nan')"
            return repr(v)
        if isinstance(n, ScalarParam):
            nm = f"s_{n.name}"
            if nm not in self.scalars:
                self.scalars.append(nm)
            return nm
        if isinstance(n, Reduce) and n._id not in self.k.materialized:
            for s in scope.chain():
                if n._id in s.reduced:
                    v, vl = s.reduced[n._id]
                    return self.relayout(v, vl, layout, self.present(n, scope), scope)
            home = self.ancestor(scope, self.need_depth(n, scope))
            self.compute_single(n, home)
            return self.val(n, scope, layout)
        d = self.need_depth(n, scope)
        if d < scope.depth:
            home = self.ancestor(scope, d)
            hl = tuple(a for a in layout if home.find_bind(a) is not None)
            v = self.val(n, home, hl)
            if not self.present(n, scope) and self.is_rank0(n):
                return v  # a 0-d value (e.g. a load at scalar program indices) broadcasts as it is
            return self.relayout(v, hl, layout, self.present(n, scope), scope)
        key = (n._id, layout)
        if key in scope.memo:
            return scope.memo[key]
        code, comment = self._emit(n, scope, layout)
        if isinstance(n, Axis) and not self.present(n, scope):
            return code
        self.check_block(n, scope)
        var = self.fresh({Load: "ld", Reduce: "buf"}.get(type(n), "t"))
        scope.emit(f"{var} = {code}" + (f"  # {comment}" if comment else ""))
        scope.memo[key] = var
        return var

    def _emit(self, n: Expr, scope: _Scope, layout) -> tuple[str, str]:
        if isinstance(n, Axis):
            b, _ = scope.find_bind(n.name)
            if b.scalar:
                return b.offs, ""
            return self.expand1d(b.offs, n.name, layout), f"value of axis {n.name}"
        if isinstance(n, Load):
            return self.load(n, scope, layout)
        if isinstance(n, Reduce):  # materialised: read its buffer
            return self.load_buffer(n, scope, layout)
        if isinstance(n, Unary):
            x = self.val(n.x, scope, layout)
            if n.op == "neg":
                return f"-{x}", ""
            if n.op == "not":
                return f"{x} == 0", ""
            x = self.as_float(n.x, x)
            if n.op == "tanh":
                # tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|); below |x| = 0.1, where 1 - e
                # cancels, the Taylor series to x^11 (its next term is below 4e-15 relative there)
                ax = self.fresh("ax")
                scope.emit(f"{ax} = tl.abs({x})")
                e = self.fresh("e")
                scope.emit(f"{e} = tl.exp(-2.0 * {ax})")
                x2 = self.fresh("x2")
                scope.emit(f"{x2} = {ax} * {ax}")
                t = self.fresh("th")
                scope.emit(f"{t} = tl.where({ax} < 0.1, {ax} * (1.0 + {x2} * (-1.0 / 3.0 + {x2} * (2.0 / 15.0 + {x2} * "
                           f"(-17.0 / 315.0 + {x2} * (62.0 / 2835.0 - {x2} * 1382.0 / 155925.0))))), (1.0 - {e}) / (1.0 + {e}))")
                return f"tl.where({x} < 0, -{t}, {t})", "tanh"
            if n.op == "sigmoid":
                return f"1.0 / (1.0 + tl.exp(-{x}))", "sigmoid"
            if n.op == "rsqrt":
                return (f"1.0 / tl.sqrt_rn({x})" if self.cdt == "tl.float32" else f"1.0 / tl.sqrt({x})"), "rsqrt"
            fn = {"exp": "tl.exp", "log": "tl.log", "sqrt": "tl.sqrt_rn" if self.cdt == "tl.float32" else "tl.sqrt",
                  "abs": "tl.abs"}[n.op]
            return f"{fn}({x})", ""
        if isinstance(n, Binary):
            a = self.val(n.a, scope, layout)
            b = self.val(n.b, scope, layout)
            if n.op in ("maximum", "minimum"):
                return f"tl.{n.op}({self.as_float(n.a, a)}, {self.as_float(n.b, b)}, propagate_nan=tl.PropagateNan.ALL)", ""
            if n.op in ("and", "or"):
                return f"({a} != 0) {_OPSYM[n.op]} ({b} != 0)", ""
            if n.op == "div":
                return f"{self.as_float(n.a, a)} / {self.as_float(n.b, b)}", ""
            return f"{a} {_OPSYM[n.op]} {b}", ""
        if isinstance(n, Where):
            c = self.val(n.cond, scope, layout)
            a = self.val(n.a, scope, layout)
            b = self.val(n.b, scope, layout)
            if not self.is_bool(n.cond):
                c = f"{c} != 0"
            return f"tl.where({c}, {self.as_float(n.a, a)}, {self.as_float(n.b, b)})", ""
        if isinstance(n, Cast):
            x = self.val(n.x, scope, layout)
            tdt = TL_DTYPES[n.dtype]
            if n.dtype.is_floating_point:
                if self.is_bool(n.x):
                    x = f"{x}.to(tl.float32)"
                if self.k.round_bf16 and n.dtype == torch.bfloat16:
                    return f"_round_bf16(({x}).to(tl.float32)).to({self.cdt})", "cast to torch.bfloat16 (rounded to nearest)"
                return f"{x}.to({tdt}).to({self.cdt})", f"cast to {n.dtype}"
            return f"{x}.to({tdt})", f"cast to {n.dtype}"
        raise AssertionError(n)

    def is_rank0(self, n: Expr) -> bool:
        """True when ``n`` is emitted as a 0-d value: built only from constants, scalars, tile-1
        grid axes and loads at such indices (fused reductions always yield blocks)."""
        if isinstance(n, (Const, ScalarParam)):
            return True
        if isinstance(n, Axis):
            return self.scalar_axis(n.name)
        if isinstance(n, Reduce):
            return n._id in self.k.materialized and all(self.scalar_axis(a) for a in n.axes)
        if isinstance(n, Load):
            return all(self.scalar_axis(a) for a in n.axes) and all(self.is_rank0(c) for c in n.index)
        return all(self.is_rank0(c) for c in n.children())

    def is_bool(self, n: Expr) -> bool:
        return (isinstance(n, Binary) and n.op in COMPARE_OPS) or (isinstance(n, Unary) and n.op == "not")

    def as_float(self, n: Expr, code: str) -> str:
        """Integer-valued nodes (axis values, int loads, comparisons) become compute floats."""
        if self.is_int(n):
            return f"({code}).to({self.cdt})"
        return code

    def is_int(self, n: Expr) -> bool:
        if isinstance(n, Axis):
            return True
        if isinstance(n, Load):
            return not self.dtypes[n.tensor.name].is_floating_point
        if self.is_bool(n):
            return True
        if isinstance(n, Cast):
            return not n.dtype.is_floating_point
        if isinstance(n, Binary) and n.op in ("add", "sub", "mul"):
            return self.is_int(n.a) and self.is_int(n.b) and not any(isinstance(c, Const) and not c.value.is_integer() for c in (n.a, n.b))
        if isinstance(n, Unary) and n.op in ("neg", "abs"):
            return self.is_int(n.x)
        return False

    # -- memory --------------------------------------------------------------------------------
    def addr(self, name: str, index_terms: list[str]) -> str:
        terms = []
        for d, t in enumerate(index_terms):
            if t is None:
                continue
            st = f"{name}_s{d}"
            t = f"({t}).to(tl.int64)" if self.i64 else t
            terms.append(f"{t} * {st}")
        return f"{name}_ptr + " + (" + ".join(terms) if terms else "0")

    def mask_for(self, axes, scope: _Scope, layout) -> str | None:
        ms = []
        for a in dict.fromkeys(axes):
            b = scope.find_bind(a)
            if b and b[0].mask is not None:
                ms.append(self.expand1d(b[0].mask, a, layout))
        return " & ".join(ms) if ms else None

    def tile_access(self, name: str, axes, scope: _Scope):
        """The plan's access for a tile of tensor ``name`` indexed by ``axes``: ``("tma",
        descriptor, offsets)`` or ``("block_ptr", block pointer, boundary dims)``; None where plain
        pointers are used."""
        acc = self.k.access.get((name, tuple(axes)))
        if acc is None:
            return None
        binds = [scope.find_bind(a)[0] for a in axes]
        blocks = ["1" if b.scalar else b.block for b in binds]
        offs = [b.start for b in binds]
        shape = [self.size(a) for a in axes]   # size arguments in the order descriptors and block pointers use them
        if acc.kind == "pointer":
            return None
        if acc.kind == "tma":
            key = (name, tuple(blocks))
            if key not in self.descs:
                # a host-side descriptor (triton.tools.tensor_descriptor.TensorDescriptor): the runtime
                # encodes it once per call and passes it as a kernel argument, so programs start
                # loading at once (an in-kernel tl.make_tensor_descriptor writes 128 bytes to global
                # scratch and fences in every program: 8.6 against 6.2 us on a 1024^3 fp16 matmul)
                d = f"desc_{name}" + (f"_{len(self.descs)}" if any(k[0] == name for k in self.descs) else "")
                self.descs[key] = d
                self.host_descs.append((d, name, tuple(acc.box)))
                self._desc_axes[d] = list(axes)
            return "tma", self.descs[key], offs
        strides = [f"{name}_s{d}" for d in range(len(axes))]
        check = tuple(d for d, b in enumerate(binds) if not b.scalar and b.mask is not None)
        order = tuple(range(len(axes) - 1, -1, -1))
        bp = (f"tl.make_block_ptr({name}_ptr, shape=({', '.join(shape)},), strides=({', '.join(strides)},), "
              f"offsets=({', '.join(offs)},), block_shape=({', '.join(blocks)},), order={order})")
        return "block_ptr", bp, check

    def load(self, n: Load, scope: _Scope, layout, raw: bool = False) -> tuple[str, str]:
        """``tl.load`` of ``n`` in ``layout`` (masked where an axis does not divide its block),
        converted to the compute dtype unless ``raw`` (a dot operand in its storage dtype). With
        ``access`` "block_ptr" or "tma" the tile is read in the tensor's dim order through a block
        pointer or TMA descriptor (out-of-range rows read as zero) and then permuted to ``layout``."""
        name = self.tensor_arg(n.tensor.name, len(n.index))
        dt = self.dtypes[n.tensor.name]
        if all(isinstance(e, Axis) for e in n.index):
            axes = [e.name for e in n.index]
            acc = self.tile_access(name, axes, scope)
            if acc is not None:
                kind, h, extra = acc
                if kind == "tma":
                    code = f"{h}.load([{', '.join(extra)}])"
                else:
                    ev = self.eviction(n.tensor.name)
                    code = f"tl.load({h}" + (f", boundary_check={extra}, padding_option=\"zero\"" if extra else "") + \
                        (f", eviction_policy=\"{ev}\"" if ev else "") + ")"
                blk = self.fresh("tile")
                scope.emit(f"{blk} = {code}  # {fmt(n)}: {kind} tile")
                tiled = tuple(a for a in axes if not scope.find_bind(a)[0].scalar)
                if len(tiled) < len(axes):  # drop the size-1 dims of tile-1 grid axes first
                    blk2 = self.fresh("tile")
                    scope.emit(f"{blk2} = tl.reshape({blk}, {self.shape(tiled, set(tiled))})")
                    blk = blk2
                code = self.relayout(blk, tiled, tuple(layout), set(tiled), scope)
                return self._widen(code, dt, raw), f"{fmt(n)} ({kind})"
        terms, mask_axes = [], []
        for e in n.index:
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
        mask = self.mask_for(mask_axes, scope, layout)
        ev = self.eviction(n.tensor.name)
        code = f"tl.load({self.addr(name, terms)}" + (f", mask={mask}, other=0" if mask else "") + \
            (f", eviction_policy=\"{ev}\"" if ev else "") + ")"
        return self._widen(code, dt, raw), fmt(n)

    def _widen(self, code: str, dt: torch.dtype, raw: bool) -> str:
        """A loaded value in the compute dtype: floats in ``self.cdt`` (unless ``raw``), integers
        (values or gather indices) in int64, so products of small integer types (uint8 pixel
        values) do not wrap before they are summed."""
        if dt.is_floating_point:
            return f"{code}.to({self.cdt})" if TL_DTYPES[dt] != self.cdt and not raw else code
        if dt != torch.bool and dt != torch.int64:
            return f"{code}.to(tl.int64)"
        return code

    def load_buffer(self, r: Reduce, scope: _Scope, layout) -> tuple[str, str]:
        b = self.k.materialized[r._id]
        name = self.tensor_arg(b.name, len(b.axes) + (1 if b.partials else 0))
        terms = []
        for a in b.axes:
            bb, _ = scope.find_bind(a)
            terms.append(bb.offs if bb.scalar else self.expand1d(bb.offs, a, layout))
        mask = self.mask_for(b.axes, scope, layout)
        if b.partials:
            acc = self.fresh("parts")
            scope.emit(f"{acc} = tl.full({self.shape(layout, self.present(r, scope))}, 0.0, dtype={self.cdt})")
            p = self.fresh("p")
            it = _Scope(scope, f"for {p} in tl.static_range({b.partials}):", scope.layout)
            code = f"tl.load({self.addr(name, [p] + terms)}" + (f", mask={mask}, other=0" if mask else "") + ")"
            it.emit(f"{acc} += {code}")
            scope.emit(it)  # type: ignore[arg-type]
            code = acc
        else:
            code = f"tl.load({self.addr(name, [None] * 0 + terms)}" + (f", mask={mask}, other=0" if mask else "") + ")"
            if b.dtype == "float32" and self.cdt != "tl.float32":
                code += f".to({self.cdt})"
        if b.scale_count:
            code = f"{code} / ({' * '.join(self.size(a) for a in b.scale_count)})"
        return code, f"stage {r.name} (materialised)"

    # -- reductions ----------------------------------------------------------------------------
    def compute_single(self, r: Reduce, scope: _Scope):
        """Compute fused reduction ``r`` on its own in ``scope`` (its home: where it is first needed),
        looping over its reduction axes that ``scope`` does not bind."""
        key = tuple(a for a in r.over if scope.find_bind(a) is None)
        self.emit_pass([r], list(key), scope, self.k.single[r._id])

    def fused_deps(self, r: Reduce) -> list[Reduce]:
        """The fused reductions ``r``'s body uses directly."""
        return fused_deps(r, self.k.materialized)

    def scalar_axis(self, a: str) -> bool:
        """A grid axis with tile 1: a scalar index, never a block dim."""
        return self.k.scalar_axis(a)

    def emit_pass(self, rs: list[Reduce], loop_axes: list[str], scope: _Scope, pp: PassPlan):
        """One pass: open loops over ``loop_axes`` (if any) and reduce every stage of ``rs``, online
        and warp-specialised as the plan's pass ``pp`` says."""
        names = ", ".join(r.name for r in rs)
        online = pp.online
        strategy = "online (one pass, rescaled)" if online else ("loop" if loop_axes else "whole (in registers)")
        scope.emit(f"# stages {names}: {strategy} over {', '.join(rs[0].over)}")
        for r in rs:
            scope.emit(f"#   {r.name} = {fmt(r, 0, self.names)}")
        accs: dict[int, dict] = {}
        for r in rs:
            info: dict[str, Any] = {"dot": self.k.dots.get(r._id)}
            if loop_axes:
                acc = self.fresh(f"acc_{r.name}")
                if info["dot"]:
                    m, n = info["dot"].m, info["dot"].n
                    scope.emit(f"{acc} = tl.full(({self.block(m)}, {self.block(n)}), 0.0, dtype={self.cdt})")
                    info["layout"] = (m, n)
                else:
                    ident = {"sum": "0.0", "max": "-float('inf')", "min": "float('inf')"}[r.op]
                    pres = self.present(r, scope)
                    scope.emit(f"{acc} = tl.full({self.shape(scope.layout, pres)}, {ident}, dtype={self.cdt})")
                    info["layout"] = scope.layout
                info["acc"] = acc
            accs[r._id] = info
        # the loop's layout keeps only the program axes its values use: contractions carry their
        # own 2-D layouts, so e.g. attention's head axis stays out of the score tiles
        keep: set[str] = set()
        for r in rs:
            if not accs[r._id]["dot"]:
                keep |= set(r.x.axes)
            for inner_r in self.fused_deps(r):   # reductions computed inside this loop keep their axes
                keep |= set(inner_r.axes) | set(inner_r.x.axes)
        keep = tuple(a for a in scope.layout if a in keep)
        inner = scope
        loops = []
        for a in loop_axes:
            p = self.plan(a)
            v = f"{a}0"
            lo, hi = (f"{a}_lo", f"{a}_hi") if self.k.split and self.k.split[0] == a else ("0", self.size(a))
            if pp.warp_specialize:
                # producer warps issue the loads, consumer warps the MMAs (automatic warp specialisation)
                head = f"for {v} in tl.range({lo}, {hi}, {self.block(a)}, warp_specialize=True):"
            elif pp.ws_requested:
                # Triton's Hopper warp specialisation handles TMA-fed loops only (the plan turned it off)
                head = (f"for {v} in range({lo}, {hi}, {self.block(a)}):  # warp_specialize off: loads in this "
                        "loop that are not TMA")
            else:
                head = f"for {v} in range({lo}, {hi}, {self.block(a)}):"
            child = inner.open(head, (a,), keep if inner is scope else None)
            loops.append((inner, child))
            inner = child
            self.bind_axis(inner, a, v, f"  # tile of axis {a}")
        lin = inner.layout
        mstate: dict[int, tuple[str, str]] = {}
        if online:
            for r in rs:
                if r.op == "max" and any(_has(self.fused_deps(s), r) for s in rs if s is not r):
                    body = self.val(r.x, inner, lin)
                    body = self.masked(body, r, inner, lin, "-float('inf')")
                    t = self.reduce_code(body, "max", r.over, lin, inner)
                    t2 = self.squeeze(t, lin, scope.layout, inner, self.present(r, scope))
                    acc = accs[r._id]["acc"]
                    mn = self.fresh(f"{r.name}_new")
                    inner.emit(f"{mn} = tl.maximum({acc}, {t2}, propagate_nan=tl.PropagateNan.ALL)")
                    alpha = self.fresh("alpha")
                    inner.emit(f"{alpha} = tl.where({acc} == {mn}, 1.0, tl.exp({acc} - {mn}))  # rescale earlier partial sums")
                    safe = self.fresh(f"{r.name}_safe")
                    inner.emit(f"{safe} = tl.where({mn} == -float('inf'), 0.0, {mn})")
                    inner.overrides[r._id] = (safe, scope.layout)
                    mstate[r._id] = (mn, alpha)
        for r in rs:
            if r._id in mstate:
                continue
            info = accs[r._id]
            part = self.reduce_body(r, info, inner, lin, scope)
            if not loop_axes:
                accs[r._id]["result"] = part
                continue
            acc = info["acc"]
            rescale = [mstate[m._id][1] for m in self.fused_deps(r) if m._id in mstate]
            if info["dot"]:
                if rescale:
                    for al in rescale:
                        inner.emit(f"{acc} = {acc} * {self.relayout(al, scope.layout, info['layout'], self.present_of_axes(self.fused_deps(r)[0].axes, scope), inner)}")
                inner.emit(f"{acc} = {part}")
            else:
                pre = acc
                for al in rescale:
                    pre = f"{pre} * {al}"
                comb = {"sum": f"{pre} + {{p}}", "max": f"tl.maximum({acc}, {{p}}, propagate_nan=tl.PropagateNan.ALL)",
                        "min": f"tl.minimum({acc}, {{p}}, propagate_nan=tl.PropagateNan.ALL)"}[r.op]
                inner.emit(f"{acc} = " + comb.format(p=part))
        for r in rs:
            if r._id in mstate:
                inner.emit(f"{accs[r._id]['acc']} = {mstate[r._id][0]}")
        for parent, child in reversed(loops):
            parent.close(child)
            if pp.warp_specialize and _pointer_loads(child):
                raise AssertionError(f"kernel {self.k.name}: the plan warp-specialises a loop with loads that are "
                                     "not TMA (plan and printer disagree)")
        # finalise
        for r in rs:
            info = accs[r._id]
            if not loop_axes:
                v = info["result"]
                vl = (info["dot"].m, info["dot"].n) if info["dot"] else scope.layout
            else:
                v, vl = info["acc"], info["layout"]
            if info["dot"]:
                v = self.relayout(v, vl, scope.layout, self.present(r, scope), scope)
                for f in info["dot"].hoist:
                    v = f"{v} * {self.val(f, scope, scope.layout)}"
                vl = scope.layout
            if r.mean:
                cnt = " * ".join(self.size(a) for a in r.over)
                v = f"{v} / ({cnt})"
            out = self.fresh(r.name)
            scope.emit(f"{out} = {v}  # stage {r.name}")
            scope.reduced[r._id] = (out, vl)

    def present_of_axes(self, axes, scope) -> set[str]:
        return {a for a in axes if scope.find_bind(a) is not None and not scope.find_bind(a)[0].scalar}

    def squeeze(self, t: str, lin, layout, scope, present) -> str:
        """Drop the trailing loop dims (all size 1 after the reduction) of ``t``."""
        if lin == layout:
            return t
        return f"tl.reshape({t}, {self.shape(layout, present)})"

    def masked(self, body: str, r: Reduce, scope: _Scope, layout, ident: str) -> str:
        m = self.mask_for(r.over, scope, layout)
        if m is None:
            return body
        return f"tl.where({m}, {body}, {ident})"

    def reduce_code(self, body: str, op: str, over, layout, scope: _Scope) -> str:
        v = body
        for a in over:
            if a not in layout:
                continue  # a scalar or absent axis: nothing to reduce over in the block
            ax = layout.index(a)
            if op == "sum":
                v = f"tl.reduce({v}, {ax}, _sum_combine, keep_dims=True)"
            else:
                v = f"tl.reduce({v}, {ax}, _{op}_combine, keep_dims=True)"
        return v

    def reduce_body(self, r: Reduce, info, inner: _Scope, lin, scope: _Scope) -> str:
        ident = {"sum": "0.0", "max": "-float('inf')", "min": "float('inf')"}[r.op]
        if info["dot"]:
            d: DotPlan = info["dot"]
            ra = r.over[0]
            a = self.operand(d.left, inner, (d.m, ra), ra, d, d.raw_left)
            b = self.operand(d.right, inner, (ra, d.n), ra, d, d.raw_right)
            prec = f", input_precision=\"{d.precision}\"" if d.precision else ""
            if "acc" in info:
                return f"tl.dot({a}, {b}, {info['acc']}{prec})"
            v = self.fresh("dot")
            inner.emit(f"{v} = tl.dot({a}, {b}{prec})")
            return v
        body = self.val(r.x, inner, lin)
        if self.is_int(r.x):
            body = f"({body}).to({self.cdt})"
        body = self.masked(body, r, inner, lin, ident)
        red = self.reduce_code(body, r.op, r.over, lin, inner)
        if lin != scope.layout:
            red = self.squeeze(red, lin, scope.layout, inner, self.present(r, scope))
        v = self.fresh(f"part_{r.name}")
        inner.emit(f"{v} = {red}")
        return v

    def operand(self, factors, scope: _Scope, layout, ra: str, d: DotPlan, raw: bool) -> str:
        """A dot operand in ``layout``, cast to the plan's operand dtype; ``raw``: the plan feeds
        this side's one load to the dot in its storage dtype."""
        direct = len(factors) == 1 and isinstance(factors[0], Load)
        if raw:
            # a plain 16-bit load feeds the dot in its storage dtype (no fp32 round trip); a
            # loop-invariant one (Q in attention) is loaded once, before the loop, still 16-bit
            home = self.ancestor(scope, self.need_depth(factors[0], scope))
            if all(home.find_bind(a) is not None for a in layout):
                key = (factors[0]._id, tuple(layout), "raw")
                if key not in home.memo:
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
    def generate(self) -> str:
        k = self.k
        root = _Scope(None)
        grid = k.grid
        nums = {}
        for a in grid:
            nm = f"num_pid_{a}"
            root.emit(f"{nm} = ({self.size(a)} + {self.block(a)} - 1) // {self.block(a)}")
            nums[a] = nm
        if k.persistent:
            # persistent kernel: a fixed number of programs, each looping over output tiles
            total = " * ".join([nums[a] for a in grid] + ([str(k.split[1])] if k.split else [])) or "1"
            root.emit(f"num_tiles = {total}")
            top = root.open("for pid in range(tl.program_id(0), num_tiles, tl.num_programs(0)):  # persistent tile loop", ())
        else:
            root.emit("pid = tl.program_id(0)")
            top = root
        rem = "pid"
        if k.split:
            sa, sf = k.split
            inner = " * ".join(nums[a] for a in grid) or "1"
            top.emit(f"pid_split = {rem} // ({inner})  # split-K: which slice of axis {sa} this program sums")
            top.emit(f"rem = {rem} % ({inner})")
            rem = "rem"
        starts = {}
        grouped = len(grid) >= 2 and self.plan(grid[-2]).group > 1
        lead = grid[:-2] if grouped else grid[:-1]
        for idx, a in enumerate(lead):
            inner = " * ".join(nums[b] for b in grid[idx + 1:])
            top.emit(f"pid_{a} = {rem} // ({inner})")
            top.emit(f"rem_{a} = {rem} % ({inner})")
            rem = f"rem_{a}"
            starts[a] = f"pid_{a}"
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
            starts[a], starts[b] = f"pid_{a}", f"pid_{b}"
        elif grid:
            starts[grid[-1]] = rem if rem != "pid" or len(grid) == 1 else rem
            if len(grid) >= 1:
                top.emit(f"pid_{grid[-1]} = {rem}")
                starts[grid[-1]] = f"pid_{grid[-1]}"
        layout: list[str] = []
        for a in grid:
            p = self.plan(a)
            if p.block == 1:
                st = f"pid_{a}"
                if self.i64:
                    st = f"pid_{a}.to(tl.int64)"
                top.bound[a] = _Bind(a, st, None, self.block(a), True, st)
            else:
                self.bind_axis(top, a, f"pid_{a} * {self.block(a)}", f"  # program's tile of axis {a}")
                layout.append(a)
        if k.split:
            sa, sf = k.split
            chunk = f"(({self.size(sa)} + {sf} - 1) // {sf} + {self.block(sa)} - 1) // {self.block(sa)} * {self.block(sa)}"
            top.emit(f"{sa}_lo = pid_split * ({chunk})")
            top.emit(f"{sa}_hi = tl.minimum({sa}_lo + ({chunk}), {self.size(sa)})")
        dot_only = self.k.dot_only
        for a, p in k.axes.items():
            if p.role == "whole" and a not in grid:
                self.bind_axis(top, a, "0", f"  # axis {a} whole: one block covers it")
                if a not in dot_only:
                    layout.append(a)
        top.layout = tuple(layout)
        # top-level reductions: computed once per program, before the outputs
        tops = []
        for st in k.stores:
            for r in fused_reduces([st.expr], k.materialized):
                if not _has(tops, r) and self.need_depth(r, top) <= top.depth and all(top.find_bind(a) for a in r.axes):
                    tops.append(r)
        if {r._id for r in tops} != {i for p in k.passes for i in p.reductions}:
            raise AssertionError(f"kernel {k.name}: the plan's program-scope passes differ from the printer's scopes")
        for p in k.passes:
            self.emit_pass([self.reduce_by_id[i] for i in p.reductions], list(p.loop_axes), top, p)
        # stores, grouped by their loop axes
        by_loops: dict[tuple, list[StoreSpec]] = {}
        for st in k.stores:
            key = tuple(a for a in st.layout if top.find_bind(a) is None)
            by_loops.setdefault(key, []).append(st)
        for key, sts in by_loops.items():
            sc = top
            opened = []
            for a in key:
                child = sc.open(f"for {a}0 in range(0, {self.size(a)}, {self.block(a)}):", (a,))
                opened.append((sc, child))
                sc = child
                self.bind_axis(sc, a, f"{a}0", f"  # output tile of axis {a}")
            for st in sts:
                self.store(st, sc)
            for parent, child in reversed(opened):
                parent.close(child)
        # signature
        args = []
        for t in self.tensors:
            args.append(f"{t}_ptr")
        for t in self.tensors:
            args.extend(f"{t}_s{d}" for d in range(self.tensor_ndim[t]))
        args.extend(self.sizes)
        args.extend(self.scalars)
        args.extend(d for d, _, _ in self.host_descs)
        args.extend(f"{c}: tl.constexpr" for c in sorted(self.consts))
        lines = [f"@_jit", f"def {k.name}({', '.join(args)}):"]
        doc = [f'    """Kernel {k.name}: stores {", ".join(s.target for s in k.stores)}.']
        doc.append(f"    grid: {', '.join(f'{a} (tile {self.plan(a).block})' for a in grid) or 'one program'}"
                   + (f"; split of {k.split[0]} into {k.split[1]}" if k.split else "")
                   + ("; persistent (each program loops over tiles)" if k.persistent else ""))
        for a, p in k.axes.items():
            if p.role != "grid":
                doc.append(f"    axis {a}: {p.role}, block {p.block}" + ("" if p.divisible else " (masked)"))
        for d, t, box in self.host_descs:
            axes = self._desc_axes[d]
            doc.append(f"    {d}: TMA descriptor of {t}[{', '.join(axes)}] in boxes of [{', '.join(map(str, box))}] (built on the host)")
        doc.append('    """')
        lines.extend(doc)
        body: list[str] = []
        hinted = [(x, self.hints[x]) for x in self.sizes + [f"{t}_s{d}" for t in self.tensors for d in range(self.tensor_ndim[t])]
                  if self.hints.get(x, 1) > 1]
        if hinted:
            body.append("    # multiples of 2-8 on this specialisation (Triton only tracks 16): restated so its alignment")
            body.append("    # analysis can vectorise masked loads and stores")
            for x, d in hinted:
                body.append(f"    {x} = {x} // {d} * {d}")
        root.render(1, body)
        lines.extend(body)
        return "\n".join(lines) + "\n"

    def store(self, st: StoreSpec, scope: _Scope):
        layout = scope.layout
        expr = st.expr
        name = self.tensor_arg(st.target, len(st.layout) + (1 if st.partial_axis else 0))
        scope.emit(f"# {'output' if not st.target.startswith('buf_') else 'stage'} {st.target}[{', '.join(st.layout)}] = "
                   f"{fmt(expr, 0, {k: v for k, v in self.names.items() if k != expr._id})}")
        if isinstance(expr, Reduce) and expr._id not in self.k.materialized:
            for s in scope.chain():
                if expr._id in s.reduced:
                    break
            else:
                self.compute_single(expr, self.ancestor(scope, self.need_depth(expr, scope)))
        v = self.val(expr, scope, layout)
        terms = []
        if st.partial_axis:
            terms.append("pid_split")
        for a in st.layout:
            b, _ = scope.find_bind(a)
            terms.append(b.offs if b.scalar else self.expand1d(b.offs, a, layout))
        mask = self.mask_for(st.layout, scope, layout)
        pres = self.present_of_axes(st.layout, scope)
        if self.present(expr, scope) != pres and pres:
            v = f"tl.broadcast_to({v}, {self.shape(layout, pres)})"
        ptr = self.addr(name, terms)
        if not pres and layout:
            # nothing of the output is a block here, but the value is a (1, ..., 1) block: store
            # through a pointer block of the same shape
            ptr = f"{ptr} + tl.full({self.shape(layout, set())}, 0, tl.int32)"
            v = f"tl.reshape({v}, {self.shape(layout, set())})" if self.present(expr, scope) == set() and \
                not isinstance(expr, (Const, ScalarParam)) else f"tl.full({self.shape(layout, set())}, 0.0, {self.cdt}) + {v}"
        if st.atomic:
            scope.emit(f"tl.atomic_add({ptr}, {v}" + (f", mask={mask}" if mask else "") + ", sem=\"relaxed\")")
        else:
            odt = self.out_dtypes.get(st.target)
            if self.k.round_bf16 and odt == torch.bfloat16:
                v = f"_round_bf16(({v}).to(tl.float32))"
            acc = None
            if odt is not None and not st.partial_axis and pres:
                acc = self.tile_access(name, list(st.layout), scope)
            if acc is not None:
                # the value in the output's dim order (size-1 dims for tile-1 grid axes)
                kind, h, extra = acc
                tv = self.fresh("tile")
                tiled = tuple(a for a in st.layout if a in pres)
                tcode = f"({self.relayout(v, tuple(layout), tiled, pres, scope)}).to({name}_ptr.dtype.element_ty)"
                if len(tiled) < len(st.layout):  # size-1 dims for tile-1 grid axes
                    tcode = f"tl.reshape({tcode}, {self.shape(tuple(st.layout), pres)})"
                scope.emit(f"{tv} = {tcode}")
                if kind == "tma":
                    scope.emit(f"{h}.store([{', '.join(extra)}], {tv})  # TMA store (clipped at the edges)")
                else:
                    scope.emit(f"tl.store({h}, {tv}" + (f", boundary_check={extra}" if extra else "") + ")")
                return
            scope.emit(f"tl.store({ptr}, ({v}).to({name}_ptr.dtype.element_ty)" + (f", mask={mask}" if mask else "") + ")")


HEADER = '''"""Generated by dtriton from algorithm {alg}.

Schedule: {sched}
{spec}
"""
import triton
import triton.language as tl


@_jit
def _max_combine(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@_jit
def _round_bf16(x):
    # round-to-nearest-even to bfloat16, computed in fp32: Triton's interpreter truncates on a
    # downcast to bf16, so interpreter kernels round explicitly before storing or casting
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))


@_jit
def _sum_combine(a, b):
    return a + b


@_jit
def _min_combine(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)

'''


@dataclass
class KernelSource:
    """Generated kernel: its name, source, and the argument order the runtime must follow."""
    name: str
    tensors: list[str]
    tensor_ndim: dict[str, int]
    sizes: list[str]
    scalars: list[str]
    consts: dict[str, int]
    ir: KernelPlan
    descs: tuple = ()          # (argument, tensor, box): host-side TMA descriptors the runtime builds per call


def render(prog: Program) -> tuple[str, list[KernelSource]]:
    """Print one module's source holding every kernel of the complete program ``prog``."""
    parts = [HEADER.format(alg=prog.name, sched=prog.schedule_json, spec=prog.note)]
    metas = []
    for k in prog.kernels:
        g = KernelGen(prog, k)
        src = g.generate()
        parts.append("\n" + src)
        metas.append(KernelSource(k.name, g.tensors, g.tensor_ndim, g.sizes, g.scalars, g.consts, k,
                                  descs=tuple(g.host_descs)))
    return "\n".join(parts), metas


def generate(prog: Program, alg, sched, dtypes, out_dtypes, interpret: bool, i64: bool, spec_note: str = "",
             tma_ok: frozenset = frozenset(), hints: dict | None = None) -> tuple[str, list[KernelSource]]:
    """Decide (:func:`dtriton.plan.decide.decide`) and print a lowered program: the entry point
    before the plan was complete. ``tma_ok`` names the tensors (inputs and outputs) a TMA
    descriptor may address on this specialisation; ``hints`` maps integer arguments
    (``size_<axis>``, ``<tensor>_s<dim>``) to a power of two they are a multiple of."""
    decide(prog, sched, dtypes, out_dtypes, interpret, i64, tma_ok, hints, spec_note)
    return render(prog)
