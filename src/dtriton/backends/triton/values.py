"""Printing values: axes, bindings, layouts, hoisting and elementwise expressions.

Loads and elementwise work are emitted in the shallowest scope whose axes they use (loop-invariant
hoisting) and memoised per scope. Masks appear only for axes whose size is not a multiple of their
block.
"""

from __future__ import annotations

import math

import torch

from ...errors import ResourceError, ScheduleError
from ...ir import BOOL_OPS, Axis, Binary, COMPARE_OPS, Cast, Const, Expr, Load, Reduce, ScalarParam, Unary, Where, fmt, walk
from ...plan.kernel import AxisPlan
from .limits import MAX_BLOCK_NUMEL
from .narrow import FP8_FORMATS, ROUND_FP8, SATURATE_INT, saturate_float_bounds, saturate_int_text
from .prelude import OPSYM, POW_GPU, POW_INT, POW_INTERPRETER, ROUND_BF16, TL_DTYPES
from .scope import Bind, Scope

__all__ = ["ValuePrinter", "float_literal"]


def float_literal(v: float) -> str:
    """A Python float as Triton kernel source: ``float('inf')``, ``-float('inf')`` and
    ``float('nan')`` for the non-finite values (``repr`` gives a bare ``inf``, an undefined name
    in the kernel), ``repr(v)`` otherwise."""
    if math.isinf(v):
        return "float('inf')" if v > 0 else "-float('inf')"
    if math.isnan(v):
        return "float('nan')"
    return repr(v)


class ValuePrinter:
    """Mixin of :class:`~dtriton.backends.triton.kernel.KernelPrinter`: values and their scopes."""

    def use_helper(self, name: str, text: str) -> str:
        """Record that the kernel calls the module-level ``@_jit`` function ``name`` defined by
        ``text`` (the module header prints the helpers its kernels use); returns ``name``."""
        self.helpers[name] = text
        return name

    def fresh(self, base: str) -> str:
        """A new variable name."""
        self.counter += 1
        return f"{base}_{self.counter}"

    def plan(self, a: str) -> AxisPlan:
        """The plan of axis ``a`` in this kernel."""
        return self.k.axes[a]

    def size(self, a: str) -> str:
        """The size argument of axis ``a`` (declared on first use); of a flat axis, the product of
        its members' sizes."""
        if a in self.k.flat:
            ms = [self.size(m) for m in self.k.flat[a]]
            if self.i64:   # (the product may pass 2**31: in 64 bits from the first factor on)
                ms[0] = f"tl.cast({ms[0]}, tl.int64)"
            return "(" + " * ".join(ms) + ")"
        nm = f"size_{a}"
        if nm not in self.sizes:
            self.sizes.append(nm)
        return nm

    def block(self, a: str) -> str:
        """The block constant of axis ``a`` (declared on first use)."""
        nm = f"BLOCK_{a.upper()}"
        self.consts[nm] = self.plan(a).block
        return nm

    def tensor_arg(self, name: str, ndim: int) -> str:
        """Declare tensor ``name`` as an argument (pointer and ``ndim`` strides) on first use."""
        if name not in self.tensor_ndim:
            self.tensors.append(name)
            self.tensor_ndim[name] = ndim
        return name

    def bind_axis(self, scope: Scope, a: str, start: str | None, comment: str = "", masked: bool = True,
                  loop: bool = False):
        """Bind axis ``a`` in ``scope``: offsets from ``start`` and a mask unless it divides its block
        (or ``masked`` is False: the tile is known to lie inside the axis). ``loop``: ``start`` is a
        ``range`` loop's variable (a Python int on the interpreter, where a scalar index is made a
        tensor)."""
        p = self.plan(a)
        blk = self.block(a)
        if self.k.scalar_axis(a):
            if loop and self.k.interpret:   # on the GPU a loop variable is a tensor already
                idx = self.fresh(f"{a}_index")
                scope.emit(f"{idx} = tl.cast({start}, {'tl.int64' if self.i64 else 'tl.int32'})  # index of axis {a}")
                start = idx
            scope.bound[a] = Bind(a, start, None, blk, True, start)
            return
        offs = f"offs_{a}"
        if self.i64:
            # (tl.cast: a loop's variable is a Python int on the interpreter)
            scope.emit(f"{offs} = tl.cast({start}, tl.int64) + tl.arange(0, {blk}){comment}")
        else:
            scope.emit(f"{offs} = {start} + tl.arange(0, {blk}){comment}")
        mask = None
        if not p.divisible and masked:
            mask = f"mask_{a}"
            scope.emit(f"{mask} = {offs} < {self.size(a)}")
        scope.bound[a] = Bind(a, offs, mask, blk, False, start)
        members = self.k.flat.get(a, ())
        for i, m in enumerate(members):
            # a member of flat axis a: its index decomposed from the flat one (outermost first);
            # it shares a's dim, block and mask
            inner = " * ".join(self.size(x) for x in members[i + 1:])
            if a in self.k.flat_scalar_outer:
                # the tile lies in one index of each outer member (scalars) and runs along the innermost
                v = f"{start} // ({inner})" if inner else f"{start}"
                v = f"({v}) % {self.size(m)}" if i else v
                if i < len(members) - 1:
                    scope.emit(f"idx_{m} = {v}  # index of {m} in flat axis {a}: one per tile")
                    scope.bound[m] = Bind(m, f"idx_{m}", None, blk, True, f"idx_{m}")
                else:
                    # (a multiple of the block: the block divides the member's size and the flat start)
                    scope.emit(f"offs_{m} = tl.multiple_of({v}, {blk}) + tl.arange(0, {blk})  # tile of {m} in "
                               f"flat axis {a}")
                    scope.bound[m] = Bind(m, f"offs_{m}", mask, blk, False, v)
                continue
            v = f"{offs} // ({inner})" if inner else offs
            v = f"({v}) % {self.size(m)}" if i else v
            scope.emit(f"offs_{m} = {v}  # index of {m} in flat axis {a}")
            scope.bound[m] = Bind(m, f"offs_{m}", mask, blk, False, "0")

    def bind_box(self, scope: Scope, a: str, tile: str) -> None:
        """Bind flat grid axis ``a`` whose tiles are boxes of its members (``KernelPlan.flat_box``)
        in ``scope``: box number ``tile`` (the program's) decomposed into the members' tile indices
        (the innermost fastest), and each member's index decomposed from the box's rows (the
        innermost fastest: row-major in the members' order, as a TMA box of them reshaped to
        rows). The members share ``a``'s dim and a mask unless every tile divides its size."""
        members, box = self.k.flat[a], self.k.flat_box[a]
        blk = self.block(a)
        offs = f"offs_{a}"
        scope.emit(f"{offs} = tl.arange(0, {blk})  # the rows of the program's box of {', '.join(members)}")
        rest, masks, starts = tile, [], {}
        for i in range(len(members) - 1, -1, -1):
            m, b, inner = members[i], box[i], math.prod(box[i + 1:])
            tiles = f"(({self.size(m)} + {b - 1}) // {b})"
            starts[m] = f"start_{m}"
            idx = f"{rest} % {tiles}" if i else rest
            scope.emit(f"start_{m} = ({idx}) * {b}  # first index of {m} in the box")
            rest = f"({rest} // {tiles})"
            local = f"{offs} // {inner}" if inner > 1 else offs
            scope.emit(f"offs_{m} = start_{m} + " + (f"({local}) % {b}" if i else local))
            masks.append(f"(offs_{m} < {self.size(m)})")
        mask = None
        if not self.plan(a).divisible:
            mask = f"mask_{a}"
            scope.emit(f"{mask} = {' & '.join(reversed(masks))}")
        scope.bound[a] = Bind(a, offs, mask, blk, False, "0")
        for m in members:
            scope.bound[m] = Bind(m, f"offs_{m}", mask, blk, False, starts[m])

    def block_axes(self, scope: Scope, axes) -> list[str]:
        """The axes of ``axes`` that are block dims in ``scope`` (raises when one is not bound)."""
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
        """A shape tuple in ``layout``: the block of each ``present`` axis, 1 elsewhere."""
        dims = [f"{self.block(a)}" if a in present else "1" for a in layout]
        return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"

    def expand1d(self, var: str, a: str, layout) -> str:
        """A 1-d block of axis ``a`` expanded to ``layout`` (a member of a flat axis: along the
        flat axis's dim)."""
        if len(layout) == 1:
            return var
        a = self.k.flat_of(a)
        idx = ", ".join(":" if b == a else "None" for b in layout)
        return f"{var}[{idx}]"

    def relayout(self, var: str, frm: tuple[str, ...], to: tuple[str, ...], present, scope: Scope) -> str:
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

    def check_block(self, n: Expr, scope: Scope):
        """Refuse a value whose block would exceed Triton's 2**20 elements (the real blocks the kernel
        builds: a contraction lowered to ``tl.dot`` never forms its [free x reduced] product).

        Raises:
            ResourceError: naming the kernel, the axes and their blocks, and the fix.
        """
        pres = sorted(self.present(n, scope))
        numel = 1
        for a in pres:
            numel *= self.plan(a).block
        if numel > MAX_BLOCK_NUMEL:
            big = {a: self.plan(a).block for a in pres}
            raise ResourceError(
                f"the kernel for stage {', '.join(repr(x) for x in self.k.stage_names)} ({self.k.name}): the value "
                f"{fmt(n)[:60]} would be a block of {numel} elements ({big}); "
                f"Triton allows at most {MAX_BLOCK_NUMEL}. Use smaller tiles, or strategy 'loop'/'online' instead of "
                "'whole' for a long axis")

    def present(self, n: Expr, scope: Scope) -> set[str]:
        """The axes of ``n`` that are block dims in ``scope`` (members of a flat axis: that axis)."""
        out = set()
        for a in n.axes:
            b = scope.find_bind(a)
            if b is not None and not b[0].scalar:
                out.add(self.k.flat_of(a))
        return out

    # -- dependency depth (for hoisting) -------------------------------------------------------
    def need_depth(self, n: Expr, scope: Scope, ignore: frozenset = frozenset()) -> int:
        """The depth of the innermost scope whose bindings ``n`` needs (where it is computed)."""
        key = (n.uid, id(scope), ignore)
        if key in self.need_depth_memo:
            return self.need_depth_memo[key]
        d = 0
        for s in scope.chain():
            if n.uid in s.overrides:
                d = s.depth
                break
        else:
            if isinstance(n, Axis):
                if n.name not in ignore:
                    b = scope.find_bind(n.name)
                    d = b[1].depth if b else scope.depth
            elif isinstance(n, Reduce) and n.uid in self.k.materialized:
                for a in n.axes:
                    if a in ignore:
                        continue  # reduced by an enclosing stage: not a dependency on its loop
                    b = scope.find_bind(a)
                    d = max(d, b[1].depth if b else scope.depth)
            elif isinstance(n, Reduce):
                found = None
                for s in scope.chain():
                    if n.uid in s.reduced:
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
        # never above the program's tile scope: a persistent kernel's values are computed per tile
        # (one computed before the tile loop would be 0-d where the tile's blocks are expected)
        d = max(d, self.min_depth)
        self.need_depth_memo[key] = d
        return d

    def ancestor(self, scope: Scope, depth: int) -> Scope:
        """The ancestor of ``scope`` (or itself) at ``depth``."""
        s = scope
        while s.depth > depth:
            s = s.parent
        return s

    # -- values --------------------------------------------------------------------------------
    def val(self, n: Expr, scope: Scope, layout: tuple[str, ...]) -> str:
        """A Triton expression for ``n`` evaluated in ``scope``, shaped by ``layout``."""
        for s in scope.chain():
            if n.uid in s.overrides:
                v, vl = s.overrides[n.uid]
                return self.relayout(v, vl, layout, self.present(n, scope), scope)
        if isinstance(n, Const):
            v = n.value
            if not math.isfinite(v):
                return float_literal(v)
            if v == 0 and math.copysign(1.0, v) < 0:
                # Triton makes every zero literal +0.0; a product with a tensor keeps the sign
                return f"(tl.full((), -1.0, {self.cdt}) * 0.0)"
            if self.cdt == "tl.float64" and not float(v).is_integer():
                # a bare literal is float32 in Triton: X * 0.1 would multiply by 0.1 rounded to it
                return f"tl.full((), {v!r}, tl.float64)"
            if n.integer and v.is_integer():
                return repr(int(v))   # integer arithmetic stays integer (X[i, j + 1]); floats promote it
            return repr(v)
        if isinstance(n, ScalarParam) and n.name in self.k.literal_scalars:
            return repr(self.k.literal_scalars[n.name])   # pinned by the call (a pooling window's stride, padding)
        if isinstance(n, ScalarParam):
            nm = f"s_{n.name}"
            if nm not in self.scalars:
                self.scalars.append(nm)
            if self.cdt == "tl.float64" and n.pytype is float:
                # a float argument is a float32 (Python float in the interpreter): math on it in float64
                return f"tl.full((), {nm}, tl.float64)"
            return nm
        if isinstance(n, Reduce) and n.uid not in self.k.materialized:
            for s in scope.chain():
                if n.uid in s.reduced:
                    v, vl = s.reduced[n.uid]
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
        key = (n.uid, layout)
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

    def _emit(self, n: Expr, scope: Scope, layout) -> tuple[str, str]:
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
                # Triton lowers unary minus as 0 - x, which turns -0.0 into +0.0; a product keeps the sign
                return (f"-{x}", "") if self.is_int(n.x) else (f"{x} * -1.0", "")
            if n.op == "not":
                return f"{x} == 0", ""
            if n.op == "abs" and self.is_int(n.x):
                return f"tl.abs({x})", ""
            x = self.as_float(n.x, x)
            if n.op == "tanh":
                # tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|); below |x| = 0.1, where 1 - e
                # cancels, x times the Taylor series in x^2 to x^11 (its next term is below 4e-15
                # relative there; the product keeps the sign of a zero)
                ax = self.fresh("ax")
                scope.emit(f"{ax} = tl.abs({x})")
                e = self.fresh("e")
                scope.emit(f"{e} = tl.exp(-2.0 * {ax})")
                x2 = self.fresh("x2")
                scope.emit(f"{x2} = {ax} * {ax}")
                t = self.fresh("th")
                big = f"(1.0 - {e}) / (1.0 + {e})"
                scope.emit(f"{t} = {x} * (1.0 + {x2} * (-1.0 / 3.0 + {x2} * (2.0 / 15.0 + {x2} * "
                           f"(-17.0 / 315.0 + {x2} * (62.0 / 2835.0 - {x2} * 1382.0 / 155925.0)))))")
                return f"tl.where({ax} < 0.1, {t}, tl.where({x} < 0, -({big}), {big}))", "tanh"
            if n.op == "sigmoid":
                return f"1.0 / (1.0 + tl.exp(-{x}))", "sigmoid"
            if n.op == "rsqrt":
                return (f"1.0 / tl.sqrt_rn({x})" if self.cdt == "tl.float32" else f"1.0 / tl.sqrt({x})"), "rsqrt"
            fn = {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "sqrt": "tl.sqrt_rn" if self.cdt == "tl.float32" else "tl.sqrt",
                  "abs": "tl.abs"}[n.op]
            return f"{fn}({x})", ""
        if isinstance(n, Binary):
            a = self.val(n.a, scope, layout)
            b = self.val(n.b, scope, layout)
            if n.uid in self.k.bool_ops:   # of bools: torch's logical or (+, maximum) / and (*, minimum)
                op = BOOL_OPS[n.op]
                return f"({a} != 0) {OPSYM[op]} ({b} != 0)", f"bool {fmt(n)[:40]}: a logical {op}, as torch"
            if n.op in ("maximum", "minimum") and self.is_int(n.a) and self.is_int(n.b):
                return f"tl.{n.op}({a}, {b})", ""   # of integers (an index clamped into range)
            if n.op in ("maximum", "minimum"):
                return f"tl.{n.op}({self.as_float(n.a, a)}, {self.as_float(n.b, b)}, propagate_nan=tl.PropagateNan.ALL)", ""
            if n.op in ("and", "or"):
                return f"({a} != 0) {OPSYM[n.op]} ({b} != 0)", ""
            if n.op == "pow":
                return self.pow(n, a, b, scope)
            if n.op in ("floordiv", "mod") and n.uid in self.k.floor_ops:
                return self.floor_op(n.op, a, b, scope), "with Python's rounding toward -inf"
            if n.op == "div":
                if not any(isinstance(m, (Load, Reduce, Axis)) for m in walk([n])):
                    # of literals and scalar arguments only: Python would raise on x / 0.0, Triton gives inf
                    a = f"tl.full((), {a}, {self.cdt})"
                return f"{self.as_float(n.a, a)} / {self.as_float(n.b, b)}", ""
            if n.lift == "float":   # a product of x ** 2.0: in floats (an integer x too, as torch.pow)
                return f"{self.as_float(n.a, a)} * {self.as_float(n.b, b)}", "a power of a float literal"
            if n.lift == "int":   # a product of bool ** 2: int64 (as torch.pow), so a later sum counts
                a, b = (f"({v}).to(tl.int64)" if self.is_boolean(c) else v for c, v in ((n.a, a), (n.b, b)))
            return f"{a} {OPSYM[n.op]} {b}", ""
        if isinstance(n, Where):
            if any(n.cond.uid in s.assumed for s in scope.chain()):
                return self.val(n.a, scope, layout), "its condition holds on every lane of this tile"
            c = self.val(n.cond, scope, layout)
            a = self.val(n.a, scope, layout)
            b = self.val(n.b, scope, layout)
            if not self.is_bool(n.cond):
                c = f"{c} != 0"
            if self.is_int(n):   # a selection of integers stays integer (an index clamped at an edge)
                return f"tl.where({c}, {a}, {b})", ""
            return f"tl.where({c}, {self.as_float(n.a, a)}, {self.as_float(n.b, b)})", ""
        if isinstance(n, Cast):
            return self.cast(n, self.val(n.x, scope, layout))
        raise AssertionError(n)

    def cast(self, n: Cast, x: str) -> tuple[str, str]:
        """``n``'s cast of the printed operand ``x`` and a comment: to a float dtype the value stays
        in the compute dtype, rounded through the dtype (fp8 by the ``_round_fp8`` helper, bf16 on
        the interpreter by ``_round_bf16``); a saturating cast clamps first (to an integer dtype:
        the ``_saturate_int`` helper, which also rounds to nearest even)."""
        tdt, why = TL_DTYPES[n.dtype], f"cast to {n.dtype}" + (" (saturating)" if n.saturate else "")
        if not n.dtype.is_floating_point:
            if n.saturate:
                if not self.is_int(n.x):
                    self.use_helper("_saturate_int", SATURATE_INT)
                return saturate_int_text(x, n.dtype, self.cdt, self.is_int(n.x)), why
            return f"tl.cast({x}, {tdt})", why
        if self.is_bool(n.x):
            x = f"{x}.to(tl.float32)"
        if n.dtype in FP8_FORMATS:
            f8 = FP8_FORMATS[n.dtype]
            if not self.k.interpret and f8.native(n.saturate):
                return f"tl.cast(tl.cast({x}, tl.float32), {f8.tl}).to({self.cdt})", why + " (the GPU's cvt.rn.satfinite)"
            self.use_helper("_round_fp8", ROUND_FP8)
            return f"{f8.round_call(f'tl.cast({x}, tl.float32)', n.saturate)}.to({self.cdt})", why
        if n.saturate:
            x = saturate_float_bounds(self.as_float(n.x, x), n.dtype)
        if self.k.round_bf16 and n.dtype == torch.bfloat16:
            return f"{self.use_helper('_round_bf16', ROUND_BF16)}(tl.cast({x}, tl.float32)).to({self.cdt})", why + " (rounded to nearest)"
        return f"tl.cast({x}, {tdt}).to({self.cdt})", why

    def pow(self, n: Binary, a: str, b: str, scope: Scope) -> tuple[str, str]:
        """``n = a ** b`` (printed operands) with torch.pow's values: of integers, exact (``_pow_int``);
        else C's pow (``_pow_c``: libdevice's on the GPU, numpy's on the interpreter), and for an
        exponent without axes (a number: a literal or scalar argument) ``sqrt`` at ``b == 0.5`` and
        ``1 / sqrt`` at ``b == -0.5`` (torch's special cases of a number exponent; a literal picks its
        case here). A tensor exponent is C's pow alone, as torch's tensor pow."""
        if self.is_int(n):   # integer ** integer: exact, int64 (as torch's, in the promoted integer dtype)
            return f"{self.use_helper('_pow_int', POW_INT)}({a}, {b})", "integer pow (square and multiply)"
        sqrt = "tl.sqrt_rn" if self.cdt == "tl.float32" else "tl.sqrt"
        x = self.fresh("xp")
        scope.emit(f"{x} = tl.cast({self.as_float(n.a, a)}, {self.cdt})")
        if isinstance(n.b, Const) and abs(n.b.value) == 0.5:
            return (f"{sqrt}({x})" if n.b.value > 0 else f"1.0 / {sqrt}({x})"), "x ** 0.5 as torch: sqrt"
        fn = self.use_helper("_pow_c", POW_INTERPRETER if self.k.interpret else POW_GPU)
        if isinstance(n.b, Const):
            return f"{fn}({x}, tl.full((), {float_literal(float(n.b.value))}, {self.cdt}))", "C's pow"
        p = self.fresh("pp")
        scope.emit(f"{p} = tl.cast({self.as_float(n.b, b)}, {self.cdt})")
        if n.b.axes:   # a tensor exponent: torch's tensor pow is C's, with no sqrt cases (its gradient's x ** (p - 1) too)
            return f"{fn}({x}, {p})", "C's pow (a tensor exponent)"
        return (f"tl.where({p} == 0.5, {sqrt}({x}), tl.where({p} == -0.5, 1.0 / {sqrt}({x}), {fn}({x}, {p})))",
                "torch.pow of a number: C's pow, sqrt and 1 / sqrt at p = 0.5 and -0.5")

    def floor_op(self, op: str, a: str, b: str, scope: Scope) -> str:
        """``a // b`` or ``a % b`` of integers rounded as Python and torch do (toward -inf; the
        remainder takes the divisor's sign), from Triton's, which rounds toward zero."""
        q, r = self.fresh("q"), self.fresh("r")
        scope.emit(f"{q} = {a} // {b}")
        scope.emit(f"{r} = {a} - {q} * {b}")
        if b.lstrip("-").isdigit():   # a literal divisor: its sign is known here
            fix = f"({r} < 0)" if int(b) > 0 else f"({r} > 0)"
        else:
            fix = f"({r} != 0) & (({r} < 0) != ({b} < 0))"
        return f"tl.where({fix}, {q} - 1, {q})" if op == "floordiv" else f"tl.where({fix}, {r} + {b}, {r})"

    def is_rank0(self, n: Expr) -> bool:
        """True when ``n`` is emitted as a 0-d value: built only from constants, scalars, tile-1
        grid axes and loads at such indices (fused reductions always yield blocks)."""
        if isinstance(n, (Const, ScalarParam)):
            return True
        if isinstance(n, Axis):
            return self.scalar_axis(n.name)
        if isinstance(n, Reduce):
            return n.uid in self.k.materialized and all(self.scalar_axis(a) for a in n.axes)
        if isinstance(n, Load):
            return all(self.scalar_axis(a) for a in n.axes) and all(self.is_rank0(c) for c in n.index)
        return all(self.is_rank0(c) for c in n.children())

    def is_bool(self, n: Expr) -> bool:
        """Whether ``n`` is a comparison or logical value."""
        return (isinstance(n, Binary) and n.op in COMPARE_OPS) or (isinstance(n, Unary) and n.op == "not")

    def is_boolean(self, n: Expr) -> bool:
        """Whether ``n`` holds a bool (Triton's int1): a comparison or logical value, a load of a bool
        tensor, a cast to bool, or a selection of them."""
        if isinstance(n, Load):
            return self.dtypes.get(n.tensor.name) == torch.bool
        if isinstance(n, Cast):
            return n.dtype == torch.bool
        if isinstance(n, Where):
            return self.is_boolean(n.a) and self.is_boolean(n.b)
        return self.is_bool(n)

    def as_float(self, n: Expr, code: str) -> str:
        """Integer-valued nodes (axis values, int loads, comparisons) become compute floats."""
        if isinstance(n, ScalarParam) and n.pytype is int:
            # an int argument may arrive as a constexpr (Triton specialises 1), which has no .to()
            return f"({code} + tl.full((), 0.0, {self.cdt}))"
        if isinstance(n, Const):
            return repr(n.value) if n.integer and n.value.is_integer() else code
        if self.is_int(n):
            return f"({code}).to({self.cdt})"
        return code

    def is_int(self, n: Expr) -> bool:
        """Whether ``n`` has an integer value (axis values, integer loads, their sums and products)."""
        if isinstance(n, Axis):
            return True
        if isinstance(n, ScalarParam):
            return n.pytype is int
        if isinstance(n, Reduce):
            return n.combiner.results == 2 or n.uid in self.k.int_acc   # an index, or an integer sum
        if isinstance(n, Load):
            return not self.dtypes[n.tensor.name].is_floating_point
        if self.is_bool(n):
            return True
        if isinstance(n, Cast):
            return not n.dtype.is_floating_point
        if isinstance(n, Const):
            return n.integer and n.value.is_integer()
        if isinstance(n, Binary) and n.op in ("add", "sub", "mul", "floordiv", "mod", "maximum", "minimum", "pow"):
            return n.lift != "float" and self.is_int(n.a) and self.is_int(n.b)
        if isinstance(n, Unary) and n.op in ("neg", "abs"):
            return self.is_int(n.x)
        if isinstance(n, Where):
            return self.is_int(n.a) and self.is_int(n.b)
        return False

