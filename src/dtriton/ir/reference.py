"""Call facts and the eager torch evaluator: the oracle of every test and explored schedule.

:class:`Binding` checks call arguments against an algorithm's signature and records sizes and
dtypes; :func:`kernel_f64` and :func:`compute_dtype` are the compute-dtype rules (the result dtypes
are :mod:`dtriton.ir.dtypes`'s, re-exported here);
:func:`evaluate` computes every output in torch, reductions through their combiner's torch
reference and finishing step.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch

from ..errors import DTypeError, IndexRangeError, IntegerOpError, ShapeError, ZeroDivisorError
from .expr import (Axis, Binary, Cast, COMPARE_OPS, Const, Expr, FP8_DTYPES, INT_OPS, Load, Reduce,
                   ScalarParam, Unary, Where, fmt)
from .dtypes import (BOOL_OPS, boolean_ops, check_bool_arithmetic, check_pad_values, pad_value, check_powers, integer_reductions,
                     output_dtype, output_dtypes)
from .intervals import Read, analyse_reads, int_magnitude, integer_valued
from .layouts import layout_hint
from .requires import check_requires
from .walk import mul_factors, topo_order

#: the largest int64: index arithmetic and int arguments beyond it would wrap around
I64_MAX = 2**63 - 1

__all__ = ["FLOAT_DTYPES", "INDEX_DTYPES", "BOOL_OPS", "Binding", "saturate", "check_reads", "integer_reductions", "boolean_ops", "is_index", "output_dtype", "output_dtypes", "kernel_f64", "compute_dtype", "evaluate",
           "numpy_item"]

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INDEX_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


def _int_tensor(dtypes: dict[str, torch.dtype]):
    """The predicate "tensor ``name`` holds integers" of a binding's dtypes."""
    return lambda name: not dtypes[name].is_floating_point


def is_index(n: Expr) -> bool:
    """Whether ``n`` is an arg-reduction (a combiner with two results): its value is an index along
    the reduced axis, an output of it is ``torch.int64`` (as ``torch.argmax``)."""
    return isinstance(n, Reduce) and n.combiner.results == 2


def check_computed_indices(alg, sizes: dict[str, int], axis_sizes: dict[str, int],
                           dtypes: dict[str, torch.dtype]) -> None:
    """Call-time checks of computed indices, each a :class:`ShapeError` naming the stage or index:
    a max, min or arg-reduction over an empty axis whose result an output with elements uses (no
    value, no index; torch raises too; a softmax of rows of no elements is an empty output, as
    ``torch.softmax``'s), an index expression
    that is not integer-valued (``X[i, dt.argmax(...)[i] * 0.5]``), and an arg-reduction used
    directly as the index of a dim shorter than the axis it ranges over (it could read outside)."""
    seen = None   # the nodes of the outputs that have elements (computed at the first empty extremum)
    for n in alg.nodes:
        if isinstance(n, Binary) and n.op in INT_OPS and not all(integer_valued(c, _int_tensor(dtypes)) for c in (n.a, n.b)):
            sym = "//" if n.op == "floordiv" else "%"
            raise IntegerOpError(f"{alg.name}: {fmt(n)}: {sym} is integer arithmetic (indices such as h // G, i % W); "
                                 f"both operands must be integers (axes, integer literals, int arguments, integer "
                                 f"tensors); convert with dt.cast(..., torch.int64), or use / for a float division")
        if isinstance(n, Reduce) and n.combiner.empty == "error":
            empty = [a for a in n.over if axis_sizes[a] == 0]
            if empty and seen is None:
                seen = {m.uid for m in topo_order([o.expr for o in alg.outputs
                                                   if all(axis_sizes[a] > 0 for a in o.layout)])}
            if empty and n.uid in seen:
                why = ("an arg-reduction of an empty axis has no index" if n.combiner.results == 2 else
                       f"a {n.combiner.name} of no elements has no value")
                raise ShapeError(f"stage {n.name!r} ({n.combiner.name}) reduces axis {empty[0]!r} of size 0: {why} "
                                 f"(torch raises too); give the axis at least one element")
        if not isinstance(n, Load):
            continue
        for d, e in enumerate(n.index):
            if isinstance(e, Axis):
                continue
            where = f"index {d} of {n.tensor.name} ({fmt(e)})"
            if not integer_valued(e, _int_tensor(dtypes)):
                raise ShapeError(f"{where} is not integer-valued; an index must be an integer (an integer tensor, "
                                 f"an axis, an arg-reduction, or sums and products of them), e.g. dt.cast(..., torch.int64)")
            if isinstance(e, Reduce) and e.combiner.results == 2:
                span, dim = axis_sizes[e.over[0]], sizes[n.tensor.dims[d]]
                if span > dim:
                    raise ShapeError(f"{where}: stage {e.name!r} ranges over [0, {span - 1}] (axis {e.over[0]!r}) but "
                                     f"dim {d} of {n.tensor.name} has {dim} elements ({n.tensor.dims[d]} = {dim}); "
                                     f"the index could read outside it")


def kernel_f64(dtypes: Iterable[torch.dtype], out_dtypes: Iterable[torch.dtype]) -> bool:
    """Whether generated kernels compute (and keep intermediate buffers) in float64: a float64
    input, or integer-only inputs with an integer or bool output (float values computed on the way,
    such as a product with a float literal, are then exact to 2**53). Integer sums, products and
    extrema fold in int64 whatever this says (:func:`integer_reductions`). An algorithm that also
    has 16/32-bit floating inputs keeps their float32 compute."""
    dtypes = list(dtypes)
    if any(d == torch.float64 for d in dtypes):
        return True
    outs = list(out_dtypes)
    return not any(d.is_floating_point for d in dtypes) and any(d == torch.float64 or not d.is_floating_point
                                                                for d in outs)


def compute_dtype(dt: torch.dtype) -> torch.dtype:
    """Accumulation/compute dtype: fp32 for 16-bit floats and fp32, fp64 for fp64."""
    return torch.float64 if dt == torch.float64 else torch.float32


# ----------------------------------------------------------------------------------------------
# binding
# ----------------------------------------------------------------------------------------------
def numpy_item(a):
    """A numpy scalar (``np.float32(2)``, ``np.True_``) or 0-d numpy array as the Python number it
    holds (``.item()``), as torch takes them for a scalar argument; anything else as it is (a 1-element
    array stays an array: :class:`ShapeError` at the binding, as torch refuses it)."""
    if type(a).__module__ == "numpy" and getattr(a, "ndim", None) == 0 and hasattr(a, "item"):
        return a.item()
    return a


def _check_scalar(alg, p: ScalarParam, a) -> None:
    """A :class:`ShapeError` for a scalar argument ``a`` that ``p`` does not take: a tensor or array, a
    non-number; for an int parameter, as torch and numpy refuse them for an int argument, a bool
    (``True``, ``np.True_``) and a float, even an integral one (``2.0``, ``np.float32(2)``), and a value
    outside int64. A float parameter takes any real number (ints and bools too, as torch's float
    arguments do)."""
    # (a numpy integer or float is a number: the kernels and the evaluator take int(a) / float(a))
    a = numpy_item(a)   # (np.True_, a 0-d array: the Python number it holds, as the calls take it)
    if isinstance(a, torch.Tensor) or not isinstance(a, numbers.Real):
        hint = ""
        if isinstance(a, torch.Tensor):
            hint = (f" of shape {tuple(a.shape)}; pass a Python number (x.item() for a one-element tensor)" if a.numel() == 1
                    else f" of shape {tuple(a.shape)}; declare the argument dt.Tensor[...] to pass a tensor")
            if a.numel() == 1 and a.requires_grad:   # .item() would drop its gradient without a word
                hint = (f" of shape {tuple(a.shape)} that requires grad; a scalar argument takes a Python number "
                        f"(x.item()), which has no gradient. For a learnable scalar declare a tensor parameter "
                        f"({p.name}: dt.Tensor[\"one\"], read {p.name}[0] in the algorithm) and pass x.reshape(1), so "
                        f"it gets a gradient; for a constant pass x.item()")
        elif isinstance(getattr(a, "shape", None), tuple):   # (a numpy array; a 0-d one is taken as its number)
            hint = (f" of shape {a.shape}; pass a Python number (x.item() for a one-element array)"
                    if getattr(a, "size", 0) == 1 else f" of shape {a.shape}; pass torch.from_numpy(x) to an "
                    "argument declared dt.Tensor[...]")
        raise ShapeError(f"argument {p.name!r} of {alg.name} is a scalar ({p.pytype.__name__}); "
                         f"got {type(a).__name__}{hint}")
    if p.pytype is int and isinstance(a, bool):   # (np.True_ reaches here as True)
        raise ShapeError(f"argument {p.name!r} of {alg.name} is declared int but got the bool {a!r}; pass an int "
                         f"({p.name}={int(a)}: torch refuses a bool for an int argument too), or declare it `float`")
    if p.pytype is int and not isinstance(a, numbers.Integral):
        fix = (f"pass an int ({p.name}={int(a)}: torch and numpy refuse a float for an int argument too)"
               if math.isfinite(a) and float(a).is_integer() else "pass an integer")
        raise ShapeError(f"argument {p.name!r} of {alg.name} is declared int but got the {type(a).__name__} {a!r}; "
                         f"{fix}, or declare it `float`")
    if p.pytype is int and not -I64_MAX - 1 <= int(a) <= I64_MAX:
        raise ShapeError(f"argument {p.name!r} of {alg.name} is {int(a)}, outside int64 (kernels and the reference "
                         f"compute integers in int64 at most); pass a value of magnitude below 2**63")


def _check_tensor(alg, p, a) -> None:
    if not isinstance(a, torch.Tensor):
        raise ShapeError(f"argument {p.name!r} of {alg.name} must be a torch.Tensor with dims "
                         f"{list(p.dims)}, got {type(a).__name__}")
    if a.layout != torch.strided:
        raise ShapeError(f"argument {p.name!r} of {alg.name} is a {a.layout} tensor; dtriton reads dense (strided) "
                         f"tensors: pass {p.name}.to_dense()")
    if a.is_nested:   # (strided layout, but no sizes)
        raise ShapeError(f"argument {p.name!r} of {alg.name} is a nested tensor; dtriton reads dense tensors of one "
                         f"shape: pass {p.name}.to_padded_tensor(0.0) (and mask the padding in the algorithm)")
    if a.dim() != len(p.dims):
        ones = [d for d, n in enumerate(a.shape) if n == 1]
        hint = (f"; it has {a.dim() - len(p.dims)} more, of size 1: {p.name}.squeeze({ones[0]}) drops one"
                if a.dim() > len(p.dims) and len(ones) >= a.dim() - len(p.dims) else "")
        doc = " ".join((getattr(alg, "__doc__", None) or "").split())
        if doc and (p.name in doc or "view" in doc):   # the algorithm's own words on how it reads its inputs
            hint += f". {alg.name}: {doc.split('. ')[0].rstrip('.')}"
        raise ShapeError(f"argument {p.name!r} of {alg.name} must have {len(p.dims)} dims {list(p.dims)}, "
                         f"got {a.dim()} (shape {tuple(a.shape)}){hint}")
    if a.dtype not in FLOAT_DTYPES + INDEX_DTYPES + FP8_DTYPES:
        ints = ", ".join(str(d).removeprefix("torch.") for d in INDEX_DTYPES if d is not torch.bool)
        hint = (f" ({p.name}.to(torch.int64) converts it, where its values fit)"
                if not a.dtype.is_floating_point and not a.dtype.is_complex else "")
        raise DTypeError(f"argument {p.name!r} of {alg.name} has unsupported dtype {a.dtype}; use float16, bfloat16, "
                         f"float32, float64, float8_e4m3fn, float8_e5m2, one of the integer dtypes {ints}, or bool{hint}")


@dataclass
class Binding:
    """Call-time facts: the size of each size symbol and each axis, input dtypes, output dtypes."""
    sizes: dict[str, int]            # size symbol -> int
    axis_sizes: dict[str, int]       # axis name -> int
    dtypes: dict[str, torch.dtype]   # tensor param name -> dtype
    out_dtypes: list[torch.dtype]
    device: torch.device
    #: input tensor name -> index of its dim of stride 1 (the last one of size > 1), -1 when none
    unit_dims: dict[str, int] = field(default_factory=dict)
    #: the computed indices of the call (see :func:`~dtriton.ir.intervals.analyse_reads`)
    reads: list = field(default_factory=list)
    #: the largest magnitude the call's index arithmetic reaches (:func:`~dtriton.ir.intervals.int_magnitude`
    #: with its int arguments; 0 where no index is computed): 64-bit offsets past 2**31, an error past int64
    index_magnitude: int = 0

    @staticmethod
    def make(alg, args: Sequence[Any]) -> "Binding":
        """Check ``args`` against the signature of ``alg`` (an :class:`~dtriton.ir.Algorithm`) and
        collect sizes and dtypes; a :class:`ShapeError` names the argument and size on a mismatch."""
        if len(args) != len(alg.params):
            names = [p.name for p in alg.params]
            raise ShapeError(f"{alg.name} takes {len(names)} argument{'' if len(names) == 1 else 's'} {names}, "
                             f"got {len(args)}")
        sizes: dict[str, int] = {}
        src: dict[str, str] = {}
        dtypes: dict[str, torch.dtype] = {}
        unit: dict[str, int] = {}
        device = None
        for p, a in zip(alg.params, args):
            if isinstance(p, ScalarParam):
                _check_scalar(alg, p, a)
                continue
            _check_tensor(alg, p, a)
            if device is None:
                device = a.device
            elif a.device != device:
                raise ShapeError(f"argument {p.name!r} is on {a.device} but earlier arguments are on {device}")
            for k, (d, n) in enumerate(zip(p.dims, a.shape)):
                if d in sizes and sizes[d] != n:
                    raise ShapeError(f"{alg.name}: {d} is {sizes[d]} from {src[d]} but {n} from {p.name}.shape[{k}]"
                                     + layout_hint(alg, args, (src[d].split(".")[0], p.name)))
                sizes.setdefault(d, int(n))
                src.setdefault(d, f"{p.name}.shape[{k}]")
            dtypes[p.name] = a.dtype
            unit[p.name] = unit_dim(a)
        for sym, pos in alg.size_args.items():   # an axis sized by an int argument (dt.axes("h:Ho"), Ho: int)
            n = int(args[pos])
            if n < 0:
                raise ShapeError(f"argument {sym!r} of {alg.name} sizes an axis and must be >= 0, got {n}")
            sizes[sym] = n
        check_requires(alg, args)   # the algorithm's own constraints (dt.requires), before any size analysis
        for idx_name, tname, d, _ in alg.gathers:
            if dtypes[idx_name].is_floating_point:
                raise DTypeError(f"argument {idx_name!r} indexes dim {d} of {tname} (a gather) and must be an integer "
                                 f"tensor, got {dtypes[idx_name]}; convert it with .long() before the call, or cast "
                                 f"the index inside the algorithm, {tname}[..., dt.cast({idx_name}[...], torch.int64)] "
                                 f"(it rounds toward zero, as .long() does)")
        axis_sizes = {ax: sizes[sym] for ax, sym in alg.axis_size.items()}
        check_computed_indices(alg, sizes, axis_sizes, dtypes)
        check_powers(alg, dtypes, {p.name: a for p, a in zip(alg.params, args) if isinstance(p, ScalarParam)})
        check_bool_arithmetic(alg, dtypes)
        check_pad_values(alg, dtypes)
        out_dtypes = output_dtypes(alg, dtypes)
        reads: list[Read] = []
        big = 0
        if any(isinstance(n, Load) and not all(isinstance(e, Axis) for e in n.index) for n in alg.nodes):
            ints = {p.name: int(a) for p, a in zip(alg.params, args) if isinstance(p, ScalarParam) and p.pytype is int}
            big = int_magnitude(alg.nodes, axis_sizes, ints)
            if big > I64_MAX:
                named = ", ".join(f"{k}={v}" for k, v in ints.items()) or "none"
                raise ShapeError(f"the index arithmetic of {alg.name} reaches magnitude {big} on this call (int "
                                 f"arguments: {named}; axis sizes {axis_sizes}), past int64, where it would wrap "
                                 f"around and read wrong elements; pass smaller int arguments")
            reads = analyse_reads([o.expr for o in alg.outputs], axis_sizes, sizes, ints)
            for r in reads:
                if r.verdict == "outside" and r.load.pad is None:
                    raise IndexRangeError(outside_message(r, f"takes the values {r.span.lo}..{r.span.hi}",
                                                          index_hint(alg, r, sizes, args)))
        return Binding(sizes, axis_sizes, dtypes, out_dtypes, device or torch.device("cpu"), unit, reads, big)


def outside_message(r: Read, how: str, hint: str | None = None) -> str:
    """The message of an :class:`IndexRangeError` for read ``r`` whose index ``how`` (e.g. "takes
    the values -1..6") reaches outside its dim: the tensor, the dim, the index and the fixes, or
    ``hint`` in place of the fixes (:func:`index_hint`)."""
    t, d = r.load.tensor, r.dim
    fixes = hint or (f"Pad the tensor to read a value there ({t.name}.pad(0.0)[...] or dt.pad({t.name}, 0.0)[...]), "
                     f"guard the read so it happens only where the index is inside "
                     f"(dt.where(cond, {t.name}[...], other)), or change the sizes")
    return (f"{fmt(r.load, limit=None)} reads outside dim {d} of {t.name} ({t.dims[d]} = {r.size}, indices "
            f"0..{r.size - 1}): the index {fmt(r.expr, limit=None)} {how}. {fixes}")


def index_hint(alg, r: Read, sizes: dict[str, int], args: Sequence[Any]) -> str | None:
    """The algorithm's own hint for read ``r`` out of range (``alg.index_hints`` of the first tensor
    argument its index reads, formatted with the call's scalar arguments and size symbols; as written
    when a field names none of them, so the IndexRangeError is still raised), or None."""
    hints = alg.index_hints
    if not hints:
        return None
    fields = dict(sizes)
    fields.update((p.name, a) for p, a in zip(alg.params, args) if isinstance(p, ScalarParam))
    for n in topo_order([r.expr]):
        if isinstance(n, Load) and n.tensor.name in hints:
            try:
                return hints[n.tensor.name].format(**fields)
            except (KeyError, IndexError, ValueError):
                return hints[n.tensor.name]
    return None


def check_reads(alg, b: "Binding", args: Sequence[Any], ev: "_Evaluator | None" = None) -> None:
    """Check, on the call's data, the computed indices the sizes alone do not prove inside their dims
    (a gather, an arg-reduction, a guard on data): each index is evaluated where its branch
    conditions hold. The reference evaluator always runs this; kernels on the interpreter too, and
    on the GPU with ``check_indices=True`` (it synchronises with the device).

    Integer divisors are checked first (:func:`check_divisors`): an index such as ``i // g`` is
    evaluated here.

    Raises:
        ZeroDivisorError: from :func:`check_divisors`.
        IndexRangeError: naming the tensor, the dim, the index, the first value outside and where.
    """
    ev = check_divisors(alg, b, args, ev)
    todo = [r for r in b.reads if r.verdict == "unknown" and r.load.pad is None]
    if not todo:
        return
    ev = ev or _Evaluator(alg, b, args)
    for r in todo:
        for ctx in r.guards:
            vals = [ev(r.expr)] + [ev(c) for c, _ in ctx]
            ax = tuple(dict.fromkeys(a for v in vals for a in v.axes))
            idx = _align(vals[0], ax).long()
            bad = (idx < 0) | (idx >= r.size)
            for (_, pos), v in zip(ctx, vals[1:]):
                c = _align(v, ax).bool()
                bad = bad & (c if pos else ~c)
            if bool(bad.any()):
                at = [int(x) for x in torch.nonzero(bad)[0]] if bad.dim() else []
                where = ", ".join(f"{a} = {x}" for a, x in zip(ax, at) if bad.shape[ax.index(a)] > 1)
                vals = idx.expand_as(bad)[bad]
                value = int(idx.expand_as(bad)[tuple(at)]) if at else int(idx)
                more = (f" ({vals.numel()} reads outside, values {int(vals.min())}..{int(vals.max())})"
                        if vals.numel() > 1 else "")
                raise IndexRangeError(outside_message(r, f"is {value}" + (f" at {where}" if where else "") + more,
                                                      index_hint(alg, r, b.sizes, args)))


def _first_at(bad: torch.Tensor, axes: tuple[str, ...]) -> str:
    """`` at a = 3, b = 0`` for the first true element of ``bad`` (dims named ``axes``; dims of
    size 1 left out), with the count when more than one is true; empty for a 0-d ``bad``."""
    if not bad.dim():
        return ""
    at = [int(x) for x in torch.nonzero(bad)[0]]
    where = ", ".join(f"{a} = {x}" for a, x in zip(axes, at) if bad.shape[axes.index(a)] > 1)
    count = int(bad.sum())
    return (f" at {where}" if where else "") + (f" ({count} elements)" if count > 1 else "")


def check_divisors(alg, b: "Binding", args: Sequence[Any], ev: "_Evaluator | None" = None) -> "_Evaluator | None":
    """Check, on the call's data and arguments, that no integer ``//`` or ``%`` of ``alg`` divides
    by 0 anywhere it is computed (torch raises ZeroDivisionError; a ``dt.where`` around it does not
    guard it, as in torch, where both branches are computed). Literal divisors are checked when the
    algorithm is defined. Returns the evaluator it used (``ev``, one it made, or None).

    Raises:
        ZeroDivisorError: naming the expression, the divisor, where it is 0 and the fix.
    """
    divs = [n for n in alg.nodes if isinstance(n, Binary) and n.op in INT_OPS and not isinstance(n.b, Const)]
    for n in divs:
        ev = ev or _Evaluator(alg, b, args)
        v = ev(n.b)
        bad = v.t == 0
        if bool(bad.any()):
            sym, d = "//" if n.op == "floordiv" else "%", fmt(n.b)
            raise ZeroDivisorError(
                f"{fmt(n, limit=None)}: the divisor {fmt(n.b, limit=None)} is 0{_first_at(bad, v.axes)}; an integer {sym} "
                f"by 0 has no value (torch raises ZeroDivisionError; on a GPU the result is undefined). Pass a nonzero "
                f"divisor, or replace it where it is 0: {fmt(n.a)} {sym} dt.where({d} == 0, 1, {d})")
    return ev


def unit_dim(t: torch.Tensor) -> int:
    """Index of the dim of ``t`` with stride 1 (the last such dim of size > 1), -1 when none."""
    dims = [k for k in range(t.dim()) if t.stride(k) == 1 and t.shape[k] > 1]
    return dims[-1] if dims else -1


# ----------------------------------------------------------------------------------------------
# the evaluator
# ----------------------------------------------------------------------------------------------
class _Val:
    """Reference-evaluator value: a tensor whose dims are named by ``axes``."""
    __slots__ = ("t", "axes")

    def __init__(self, t: torch.Tensor, axes: tuple[str, ...]):
        self.t, self.axes = t, axes


def _align(v: _Val, axes: tuple[str, ...]) -> torch.Tensor:
    """View ``v`` with dims ordered as ``axes`` (size-1 dims for absent axes)."""
    perm = [v.axes.index(a) for a in axes if a in v.axes]
    t = v.t.permute(perm) if perm != list(range(len(perm))) else v.t
    shape = [t.shape[[a for a in axes if a in v.axes].index(a)] if a in v.axes else 1 for a in axes]
    return t.reshape(shape)


_UNARY = {"neg": torch.neg, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
          "tanh": torch.tanh, "sigmoid": torch.sigmoid, "abs": torch.abs}
_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
           "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"), "mod": torch.remainder,
           "maximum": torch.maximum, "minimum": torch.minimum, "pow": torch.pow, "lt": torch.lt, "le": torch.le,
           "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}


class _Evaluator:
    """Eager evaluation of one algorithm's nodes on one call (memoised per node)."""

    def __init__(self, alg, b: Binding, args: Sequence[Any]):
        self.argmap = {p.name: a for p, a in zip(alg.params, args)}
        self.b = b
        # the oracle computes in float64 on the CPU (every test and example there); on a GPU in
        # float32 unless an input is float64, so exploring large shapes stays affordable
        any64 = (any(d == torch.float64 for d in list(b.dtypes.values()) + list(b.out_dtypes))
                 or b.device.type == "cpu")
        self.cdt = torch.float64 if any64 else torch.float32
        self.dev = b.device
        self.memo: dict[int, _Val] = {}
        #: reductions folded in int64 (exact, as the kernels fold them)
        self.ints = integer_reductions([o.expr for o in alg.outputs], b.dtypes)
        #: arithmetic of bools, a logical or / and as torch's
        self.bools = boolean_ops([o.expr for o in alg.outputs], b.dtypes)

    def __call__(self, n: Expr) -> _Val:
        if n.uid not in self.memo:
            self.memo[n.uid] = getattr(self, "ev_" + n.kind)(n)
        return self.memo[n.uid]

    def as_float(self, t: torch.Tensor) -> torch.Tensor:
        return t if t.dtype.is_floating_point else t.to(self.cdt)

    def ev_Const(self, n: Const) -> _Val:
        if n.boolean:
            return _Val(torch.tensor(bool(n.value), device=self.dev), ())
        if n.integer and n.value.is_integer():
            return _Val(torch.tensor(int(n.value), dtype=torch.int64, device=self.dev), ())
        return _Val(torch.tensor(n.value, dtype=self.cdt, device=self.dev), ())

    def ev_ScalarParam(self, n: ScalarParam) -> _Val:
        if n.pytype is int:
            return _Val(torch.tensor(int(self.argmap[n.name]), dtype=torch.int64, device=self.dev), ())
        return _Val(torch.tensor(float(self.argmap[n.name]), dtype=self.cdt, device=self.dev), ())

    def ev_Axis(self, n: Axis) -> _Val:
        return _Val(torch.arange(self.b.axis_sizes[n.name], device=self.dev, dtype=torch.int64), (n.name,))

    def ev_Load(self, n: Load) -> _Val:
        t = self.argmap[n.tensor.name]
        if t.dtype.is_floating_point:
            t = t.to(self.cdt)
        if n.is_plain():
            return _Val(t, tuple(e.name for e in n.index))
        idx_vals = [self(e) for e in n.index]
        ax = tuple(dict.fromkeys(a for v in idx_vals for a in v.axes))
        idx = list(torch.broadcast_tensors(*[_align(v, ax).long() for v in idx_vals]))
        valid = torch.ones(idx[0].shape if idx else (), dtype=torch.bool, device=self.dev)
        for d, e in enumerate(n.index):
            if not isinstance(e, Axis):
                valid = valid & (idx[d] >= 0) & (idx[d] < t.shape[d])
                idx[d] = idx[d].clamp(0, max(t.shape[d] - 1, 0))
        if t.numel() == 0:   # nothing to read: every element is padding (or unread: checked before)
            v = torch.zeros(valid.shape, dtype=t.dtype, device=self.dev)
        else:
            v = t[tuple(idx)]
        if n.pad is not None:
            # (the tensor's dtype holds the value exactly: refused at the bind otherwise, check_pad_values)
            pad = torch.tensor(pad_value(n.pad, v.dtype), dtype=v.dtype, device=self.dev)
            v = torch.where(valid, v, pad)
        return _Val(v, ax)

    def ev_Unary(self, n: Unary) -> _Val:
        v = self(n.x)
        if n.op == "not":
            return _Val(~v.t.bool(), v.axes)
        if n.op in ("neg", "abs") and not v.t.dtype.is_floating_point:
            return _Val(_UNARY[n.op](v.t.long()), v.axes)
        return _Val(_UNARY[n.op](self.as_float(v.t)), v.axes)

    def ev_Binary(self, n: Binary) -> _Val:
        va, vb = self(n.a), self(n.b)
        ax = tuple(dict.fromkeys(va.axes + vb.axes))
        x, y = _align(va, ax), _align(vb, ax)
        if n.op in ("and", "or") or n.uid in self.bools:
            f2 = torch.logical_and if BOOL_OPS.get(n.op, n.op) == "and" else torch.logical_or
            return _Val(f2(x.bool(), y.bool()), ax)
        ints = not x.dtype.is_floating_point and not y.dtype.is_floating_point
        if n.op in COMPARE_OPS:
            if not ints and x.dtype != y.dtype:
                x, y = self.as_float(x), self.as_float(y)
        elif ints and n.op != "div" and n.lift != "float":   # integer arithmetic stays exact (axis values, indices, integer powers)
            x, y = x.long(), y.long()
        else:
            x, y = self.as_float(x), self.as_float(y)
        # a number exponent: torch.pow(x, number), its sqrt cases at +-0.5 included; a tensor exponent, C's pow
        if n.op == "pow" and not vb.axes and not ints:
            return _Val(torch.pow(x, float(y.reshape(()))), ax)
        return _Val(_BINARY[n.op](x, y), ax)

    def ev_Where(self, n: Where) -> _Val:
        vc, va, vb = self(n.cond), self(n.a), self(n.b)
        ax = tuple(dict.fromkeys(vc.axes + va.axes + vb.axes))
        x, y = _align(va, ax), _align(vb, ax)
        if x.dtype.is_floating_point or y.dtype.is_floating_point:
            x, y = self.as_float(x), self.as_float(y)
        return _Val(torch.where(_align(vc, ax).bool(), x, y), ax)

    def ev_Cast(self, n: Cast) -> _Val:
        v = self(n.x)
        t = saturate(v.t, n.dtype) if n.saturate else v.t.to(n.dtype)
        if n.dtype.is_floating_point:
            t = t.to(self.cdt)  # round through the dtype, keep computing in cdt
        return _Val(t, v.axes)

    def ev_Reduce(self, n: Reduce) -> _Val:
        c = n.combiner
        if c.base == "sum" and isinstance(n.x, Binary) and n.x.op == "mul":
            r, rest = self.contraction(n)
        else:
            v = self(n.x)
            x = v.t.long() if n.uid in self.ints else self.as_float(v.t)
            r = c.reference(x, [v.axes.index(a) for a in n.over])
            rest = tuple(a for a in v.axes if a not in n.over)
        if c.finalize == "count":
            r = r / math.prod(self.b.axis_sizes[a] for a in n.over)
        return _Val(r, rest)

    def contraction(self, n: Reduce) -> tuple[torch.Tensor, tuple[str, ...]]:
        """A sum of products as one einsum, never the broadcast product (4096^3 would not fit)."""
        vals = [self(f) for f in mul_factors(n.x)]
        letters: dict[str, str] = {}
        for v in vals:
            for a in v.axes:
                letters.setdefault(a, chr(ord("a") + len(letters)) if len(letters) < 26
                                   else chr(ord("A") + len(letters) - 26))
        rest = tuple(a for a in n.x.axes if a not in n.over)
        eq = ",".join("".join(letters[a] for a in v.axes) for v in vals) + "->" + "".join(letters[a] for a in rest)
        if n.uid in self.ints:   # exact in int64 (on the CPU: CUDA has no integer matmul) ...
            if self.dev.type != "cpu" and _float64_exact(vals, math.prod(self.b.axis_sizes[a] for a in n.over)):
                # ... or in float64 on the device, exact for these values (int8 4096^3: 2 ms, not minutes)
                return torch.einsum(eq, *[v.t.double() for v in vals]).round().long(), rest
            return torch.einsum(eq, *[v.t.long().cpu() for v in vals]).to(self.dev), rest
        return torch.einsum(eq, *[self.as_float(v.t) for v in vals]), rest


def saturate(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` cast to ``dtype`` with saturation (``dt.cast(x, dtype, saturate=True)``): to a float
    dtype, clamped to its finite range (infinities to its largest values) and rounded to nearest
    even, NaN kept; to an integer dtype, rounded to nearest even and clamped to its range, NaN
    becoming 0."""
    if dtype.is_floating_point:
        big = torch.finfo(dtype).max
        t = t if t.dtype.is_floating_point else t.double()
        return torch.where(t.isnan(), t, t.clamp(-big, big)).to(dtype)
    info = torch.iinfo(dtype)
    if t.dtype.is_floating_point:
        t = torch.nan_to_num(t.double(), nan=0.0, posinf=info.max, neginf=info.min).round()
    return t.clamp(info.min, info.max).to(dtype)


def _float64_exact(vals: list[_Val], count: int) -> bool:
    """Whether a sum of ``count`` products of the integer values ``vals`` stays below 2**53 (exact
    in float64)."""
    most = math.prod(float(v.t.long().abs().max()) if v.t.numel() else 0.0 for v in vals)
    return most * count < 2.0 ** 53


def evaluate(alg, b: Binding, args: Sequence[Any]) -> list[torch.Tensor]:
    """Evaluate every output of ``alg`` on ``args`` in eager torch (see :meth:`Algorithm.reference`):
    computed in float64 on the CPU (and wherever a float64 is involved), else float32, each output
    rounded to its dtype at the end."""
    ev = _Evaluator(alg, b, args)
    check_reads(alg, b, args, ev)
    outs = []
    for o, odt in zip(alg.outputs, b.out_dtypes):
        v = ev(o.expr)
        x = _align(v, o.layout) if o.layout else v.t.reshape(())
        shape = [b.axis_sizes[a] for a in o.layout]
        x = x.expand(shape)
        outs.append(x.to(odt).contiguous())
    return outs
