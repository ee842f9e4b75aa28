"""Result dtypes by torch's promotion rules, and the call-time refusals of what torch raises for.

:func:`output_dtype` types an expression as ``torch.result_type`` would (Python numbers as weak
scalars: bool < integer < float); :func:`integer_reductions` and :func:`boolean_ops` name the
nodes that compute in int64 and as logical or/and; :func:`check_powers` and
:func:`check_bool_arithmetic` refuse, with an :class:`AlgorithmError` at the call, the powers and
bool arithmetic torch raises for; :func:`check_pad_values` the padding values a tensor's dtype
cannot hold.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import torch

from ..errors import AlgorithmError
from .expr import (Axis, Binary, Cast, COMPARE_OPS, Const, Expr, FP8_DTYPES, INT_OPS, Load, Reduce, ScalarParam, Unary,
                   Where, fmt)
from .walk import topo_order

__all__ = ["BOOL_OPS", "boolean_ops", "check_bool_arithmetic", "check_pad_values", "pad_value", "check_powers", "integer_reductions", "output_dtype",
           "output_dtypes"]


def output_dtypes(alg, dtypes: dict[str, torch.dtype]) -> list[torch.dtype]:
    """The dtype of each output of ``alg`` for inputs of ``dtypes`` (:func:`output_dtype` of its
    expression, promoted with the output's ``floor`` where it has one)."""
    return [output_dtype(o.expr, dtypes) if o.floor is None else torch.promote_types(output_dtype(o.expr, dtypes), o.floor)
            for o in alg.outputs]


def output_dtype(root: Expr, dtypes: dict[str, torch.dtype]) -> torch.dtype:
    """The dtype of an output computing ``root`` (``dtypes``: input tensor -> dtype), by torch's
    promotion rules (``torch.result_type``): tensors, axis values (int64, as ``torch.arange``),
    casts and reductions are typed operands; literals and scalar parameters are Python scalars,
    which only raise the category (bool < integer < float) and then give torch's default dtype
    (float32, or int64; a bool literal ``True`` is the lowest, bool: ``B[i] + True`` is bool,
    ``X_int8[i] + True`` int8). Division and float functions of integers give float32; comparisons
    bool; ``where`` promotes its two branches only; sums and products of bool or integer values
    are int64, an arg-reduction int64. An expression of scalars only is float32 (int64 when every
    scalar is an integer); so is a reduction of scalars only (``dt.sum(dt.where(c, 1.0, 0.0), over=j)``, a
    count): inside an expression it promotes as a Python number (``X[i] / count`` keeps X's dtype), as
    an output it is float32 (int64 for integers). The fp8 dtypes (:data:`~dtriton.ir.FP8_DTYPES`) are storage types: a
    load or cast keeps them, any arithmetic, function or reduction of them is float32 (torch has
    no promotion rules for them)."""
    typed: dict[int, tuple[torch.dtype, bool]] = {}
    for n in topo_order([root]):
        typed[n.uid] = _node_dtype(n, dtypes, typed)
    dt, weak = typed[root.uid]
    if weak:
        return torch.float32 if dt.is_floating_point else torch.bool if dt == torch.bool else torch.int64
    return dt


def integer_reductions(roots: Iterable[Expr], dtypes: dict[str, torch.dtype]) -> frozenset[int]:
    """The ids of the reductions under ``roots`` that accumulate in ``torch.int64``: sums,
    products, maxima and minima (not means, variances or arg-reductions) of bool or integer
    values (``dtypes``: input tensor -> dtype), as torch's ``sum``/``prod`` of integers give
    int64. Their kernels fold with integer arithmetic, exact for every int64 value (a float64
    accumulator is exact only to 2**53, a float32 one to 2**24), beside float values or not."""
    typed: dict[int, tuple[torch.dtype, bool]] = {}
    out = set()
    for n in topo_order(list(roots)):
        typed[n.uid] = _node_dtype(n, dtypes, typed)
        if (isinstance(n, Reduce) and n.combiner.results == 1 and not n.combiner.state and n.combiner.finalize is None
                and n.combiner.base in ("sum", "prod", "max", "min") and not typed[n.x.uid][0].is_floating_point):
            out.add(n.uid)
    return frozenset(out)


#: the arithmetic of two bools, as torch computes it on bool tensors: a sum or maximum is a logical or
#: (``True + True`` is ``True``), a product or minimum a logical and
BOOL_OPS = {"add": "or", "maximum": "or", "mul": "and", "minimum": "and"}


def boolean_ops(roots: Iterable[Expr], dtypes: dict[str, torch.dtype]) -> frozenset[int]:
    """The ids of the :class:`Binary` nodes under ``roots`` (of :data:`BOOL_OPS`) whose result is
    ``torch.bool`` by torch's promotion (both operands bool tensors, comparisons, casts to bool or
    bool literals; ``dtypes``: input tensor -> dtype): torch computes them as a logical or (``+``,
    ``dt.maximum``) or and (``*``, ``dt.minimum``), so ``B[i] + B[i]`` is ``True``, not 2, and
    ``(B[i] + B[i]) + B[i] * 1`` is 2. The reference and the kernels compute these nodes so."""
    typed: dict[int, tuple[torch.dtype, bool]] = {}
    out = set()
    for n in topo_order(list(roots)):
        typed[n.uid] = _node_dtype(n, dtypes, typed)
        if isinstance(n, Binary) and n.op in BOOL_OPS and n.lift is None and typed[n.uid][0] == torch.bool:
            out.add(n.uid)
    return frozenset(out)


def _category(dt: torch.dtype) -> int:
    return 2 if dt.is_floating_point else 0 if dt == torch.bool else 1


def _promote(a: tuple[torch.dtype, bool], b: tuple[torch.dtype, bool]) -> tuple[torch.dtype, bool]:
    """Torch's promotion of two operands, each (dtype, weak: a Python scalar)."""
    (da, wa), (db, wb) = a, b
    if wa == wb:
        return torch.promote_types(da, db), wa
    strong, weak = (da, db) if wb else (db, da)
    if _category(strong) >= _category(weak):
        return strong, False
    return (torch.float32 if weak.is_floating_point else torch.int64), False


def _as_float(t: tuple[torch.dtype, bool]) -> tuple[torch.dtype, bool]:
    return t if t[0].is_floating_point else (torch.float32 if not t[1] else torch.float64, t[1])


def _arith(t: tuple[torch.dtype, bool]) -> tuple[torch.dtype, bool]:
    """An operand's type as arithmetic sees it: fp8 values compute in float32."""
    return (torch.float32, t[1]) if t[0] in FP8_DTYPES else t


def _node_dtype(n: Expr, dtypes: dict[str, torch.dtype], typed: dict) -> tuple[torch.dtype, bool]:
    """(dtype, weak) of one node from its children's (see :func:`output_dtype`)."""
    if not isinstance(n, (Load, Cast)):
        typed = {c.uid: _arith(typed[c.uid]) for c in n.children()}
    if isinstance(n, Const):
        return (torch.bool if n.boolean else torch.int64 if n.integer else torch.float64), True
    if isinstance(n, ScalarParam):
        return (torch.int64 if n.pytype is int else torch.float64), True
    if isinstance(n, Axis):
        return torch.int64, False
    if isinstance(n, Load):
        return dtypes[n.tensor.name], getattr(n.tensor, "weak", False)
    if isinstance(n, Cast):
        return n.dtype, False
    if isinstance(n, Reduce):
        # a reduction of Python numbers only (``sum over r of where(c, 1.0, 0.0)``, the window size a mean's
        # gradient divides by) is a Python number too: it stays weak, as the literals it reduces
        x, weak = typed[n.x.uid]
        if n.combiner.results == 2:
            return torch.int64, False
        if n.combiner.finalize == "count":
            return _as_float((x, weak))
        if n.combiner.base in ("sum", "prod") and not x.is_floating_point:
            return torch.int64, weak
        return x, weak
    if isinstance(n, Unary):
        x = typed[n.x.uid]
        if n.op == "not":
            return torch.bool, False
        return x if n.op in ("neg", "abs") else _as_float(x)
    if isinstance(n, Binary):
        if n.op in COMPARE_OPS:
            return torch.bool, False
        t = _promote(typed[n.a.uid], typed[n.b.uid])
        if n.lift == "float":   # a product of x ** 2.0: floating, as torch.pow of a float exponent
            return _as_float(t)
        if n.lift == "int" and t[0] == torch.bool:   # a product of bool ** 2: int64, as torch.pow
            return torch.int64, t[1]
        if n.op == "pow" and not t[0].is_floating_point:   # integer ** integer: an integer, as torch.pow
            # (a bool to a bool literal stays bool: torch.pow(B, True); to any other integer, int64)
            return (torch.int64, t[1]) if t[0] == torch.bool and typed[n.b.uid] != (torch.bool, True) else t
        return _as_float(t) if n.op in ("div", "pow") else t
    if isinstance(n, Where):
        return _promote(typed[n.a.uid], typed[n.b.uid])
    raise AssertionError(n)


def check_powers(alg, dtypes: dict[str, torch.dtype], scalars: dict[str, Any]) -> None:
    """Refuse, with an :class:`AlgorithmError`, the powers torch raises for: an integer base to a
    negative integer power known at the call (a literal ``X[i] ** -1`` or an ``int`` argument ``q < 0``
    in ``X[i] ** q``; ``scalars``: argument name -> value): "Integers to negative integer powers are
    not allowed" (a negative integer *tensor* exponent gives C's integer pow, 0, 1 or -1, as torch's);
    and a bool base to a bool exponent (bool tensors, comparisons, casts to bool): "pow" is not
    implemented for 'Bool'."""
    typed: dict[int, tuple[torch.dtype, bool]] = {}
    for n in alg.nodes:
        typed[n.uid] = _node_dtype(n, dtypes, typed)
        if (isinstance(n, Binary) and n.op == "pow"
                and all(typed[c.uid] == (torch.bool, False) for c in (n.a, n.b))):
            raise AlgorithmError(f"{alg.name}: {fmt(n)}: the base {fmt(n.a)} and the exponent {fmt(n.b)} are both "
                                 f"torch.bool, and torch raises \"'pow' not implemented for 'Bool'\"; cast one of "
                                 f"them first, e.g. dt.cast({fmt(n.b)}, torch.int64)")
        if isinstance(n, Binary) and n.power is not None:   # x ** -n traced as (1 / x) ** n
            base, k = n.b, n.power
        elif isinstance(n, Binary) and n.op == "pow":
            base, e = n.a, n.b
            k = (int(e.value) if isinstance(e, Const) and e.integer else scalars.get(e.name) if isinstance(e, ScalarParam)
                 else None)
            if not isinstance(k, int) or k >= 0 or typed[e.uid][0].is_floating_point:
                continue
        else:
            continue
        if not typed[base.uid][0].is_floating_point:
            raise AlgorithmError(f"{alg.name}: {fmt(base)} ** {k}: {fmt(base)} is an integer ({typed[base.uid][0]}) and "
                                 f"torch raises \"Integers to negative integer powers are not allowed\"; cast the base "
                                 f"to float first, dt.cast({fmt(base)}, torch.float32) ** {k} (or pass a float tensor)")


def check_pad_values(alg, dtypes: dict[str, torch.dtype]) -> None:
    """Refuse, with an :class:`AlgorithmError` naming the tensor, the value and the fix, a padding
    value (``X.pad(v)[...]``) that the dtype of ``X`` (``dtypes``: input tensor -> dtype) does not
    hold exactly: for an integer tensor a value that is not an integer (``1.5``, ``nan``) or
    lies outside the dtype's range (``-1`` for uint8), for a bool tensor anything but 0, 1, False
    and True. A kernel reads the padding in the tensor's dtype (Triton converts ``other=``, 1.5 to
    1, as ``torch.nn.functional.pad`` truncates), so the value written would not be the value read.
    ``-inf`` / ``inf`` on an integer tensor read as its dtype's lowest / highest value
    (:func:`pad_value`: the identity of a max / min, integer max pooling). Float tensors take any
    number (it rounds to the compute dtype)."""
    for n in alg.nodes:
        if not isinstance(n, Load) or n.pad is None or n.tensor.name not in dtypes:
            continue
        dt, v = dtypes[n.tensor.name], n.pad
        if dt.is_floating_point:
            continue
        name = n.tensor.name
        if dt == torch.bool:
            if v in (0, 1):
                continue
            want, fix = "bool values (0, 1, False or True)", f"write {name}.pad(False) or {name}.pad(True)"
        else:
            info = torch.iinfo(dt)
            exact = v == v and abs(v) != float("inf") and float(v).is_integer() and info.min <= int(v) <= info.max
            if exact or abs(v) == float("inf"):   # (infinities: the dtype's extreme, pad_value)
                continue
            want = f"integers from {info.min} to {info.max}"
            if v != v:
                near = [0]
            elif abs(v) == float("inf"):   # (max pooling of integers: the dtype's least value)
                near = [info.min if v < 0 else info.max]
            else:
                near = [k for k in (math.floor(v), math.ceil(v)) if info.min <= k <= info.max] or \
                    [info.min if v < 0 else info.max]
            fix = "write " + " or ".join(f"{name}.pad({k})" for k in dict.fromkeys(near))
        raise AlgorithmError(f"{alg.name}: {name}.pad({_fmt_value(v)}): {name} is {dt}, which does not hold "
                             f"{_fmt_value(v)} ({want}), and the padding is read in {name}'s dtype, so the value "
                             f"read would not be {_fmt_value(v)}; {fix}, or pass {name} as a float tensor "
                             f"({name}.double() or .float()) to pad with {_fmt_value(v)}")


def pad_value(v, dtype: torch.dtype):
    """The value a masked read of a tensor of ``dtype`` padded with ``v`` (``X.pad(v)``) reads: ``v``,
    except ``-inf`` / ``inf`` on an integer tensor, its dtype's lowest / highest value (the identity of
    a max / min: integer max pooling written with ``X.pad(-inf)``). The reference evaluator and the
    kernels both read this value; :func:`check_pad_values` refuses the values a dtype cannot hold."""
    if not dtype.is_floating_point and dtype != torch.bool and isinstance(v, float) and abs(v) == float("inf"):
        info = torch.iinfo(dtype)
        return info.min if v < 0 else info.max
    return v


def _fmt_value(v) -> str:
    """A padding value as Python source (``float('-inf')``, ``float('nan')``, ``1.5``, ``-3``)."""
    if isinstance(v, float) and v != v:
        return "float('nan')"
    if isinstance(v, float) and abs(v) == float("inf"):
        return "float('inf')" if v > 0 else "-float('inf')"
    return repr(v)


def check_bool_arithmetic(alg, dtypes: dict[str, torch.dtype]) -> None:
    """Refuse, with an :class:`AlgorithmError` naming the expression and the fix, the arithmetic torch
    raises for on bool values (bool tensors, comparisons, casts to bool; ``dtypes``: input tensor ->
    dtype): a negation ``-b`` ("Negation, the `-` operator, on a bool tensor is not supported"), a
    subtraction with a bool operand ``b - c``, ``1 - b``, ``x - b`` ("Subtraction, the `-` operator,
    with a bool tensor is not supported"; a bool literal counts: ``x - True``), ``dt.abs(b)`` ("abs" is
    not implemented for 'Bool') and an integer ``b // c`` or ``b % c`` of bools (``B[i] // True``:
    "div_floor" is not implemented for 'Bool'); and ``&``, ``|``, ``~`` of a value that is not a bool
    (logical here, bitwise on integers in torch)."""
    typed: dict[int, tuple[torch.dtype, bool]] = {}
    for n in alg.nodes:
        typed[n.uid] = _node_dtype(n, dtypes, typed)
        _check_logical(alg, n, typed)
        if isinstance(n, Binary) and n.op in INT_OPS and typed[n.uid][0] == torch.bool:
            sym, name = ("//", "div_floor") if n.op == "floordiv" else ("%", "remainder")
            raise AlgorithmError(f"{alg.name}: {fmt(n)}: {sym} of two bools, and torch raises \"{name}\" not "
                                 f"implemented for 'Bool'; cast to an integer first: dt.cast({fmt(n.a)}, torch.int64) "
                                 f"{sym} {fmt(n.b)}")
        if isinstance(n, Unary) and n.op in ("neg", "abs") and typed[n.x.uid] == (torch.bool, False):
            x = fmt(n.x)
            what = ("negates" if n.op == "neg" else "takes the absolute value of")
            torch_says = ("\"Negation, the `-` operator, on a bool tensor is not supported\"" if n.op == "neg"
                          else "\"abs\" not implemented for 'Bool'")
            fix = f"to invert a mask write ~{x}" if n.op == "neg" else "a bool is its own absolute value: drop dt.abs"
            raise AlgorithmError(f"{alg.name}: {fmt(n)} {what} {x}, which is torch.bool, and torch raises {torch_says}; "
                                 f"{fix}, or cast to an integer first, e.g. "
                                 f"{'-' if n.op == 'neg' else 'dt.abs('}dt.cast({x}, torch.int64){'' if n.op == 'neg' else ')'}")
        if isinstance(n, Binary) and n.op == "sub":
            bools = [c for c in (n.a, n.b) if typed[c.uid][0] == torch.bool]   # a bool literal too, as torch
            if not bools:
                continue
            if any(isinstance(c, Const) for c in bools):
                fix = "write the bool literal as an int (1 for True, 0 for False)"
            elif len(bools) == 2:
                fix = (f"for the elements where exactly one holds write ({fmt(n.a)} != {fmt(n.b)}) (torch's ^), for "
                       f"the first and not the second {fmt(n.a)} & ~{fmt(n.b)}")
            else:
                fix = f"to invert a mask write ~{fmt(bools[0])} (1 - mask)"
            which = (f"{fmt(n.a)} and {fmt(n.b)} are both torch.bool" if len(bools) == 2
                     else f"{fmt(bools[0])} is torch.bool")
            raise AlgorithmError(f"{alg.name}: {fmt(n)}: {which}, and torch "
                                 f"raises \"Subtraction, the `-` operator, with a bool tensor is not supported\"; {fix}, "
                                 f"or cast to an integer first: "
                                 + " - ".join(f"dt.cast({fmt(c)}, torch.int64)" if any(c is d for d in bools) else fmt(c)
                                            for c in (n.a, n.b)))


def _check_logical(alg, n: Expr, typed: dict) -> None:
    """Refuse ``a & b``, ``a | b`` and ``~a`` of a value that is not a bool (:func:`check_bool_arithmetic`):
    they are logical operations on bools here, where torch's are bitwise on integers (``X_int & 1``)
    and raise on floats, so the result would differ from torch's without a word."""
    if isinstance(n, Binary) and n.op in ("and", "or"):
        kids, sym = (n.a, n.b), "&" if n.op == "and" else "|"
    elif isinstance(n, Unary) and n.op == "not":
        kids, sym = (n.x,), "~"
    else:
        return
    bad = [c for c in kids if typed[c.uid][0] != torch.bool]
    if not bad:
        return
    c, dt = bad[0], typed[bad[0].uid][0]
    kind = "a float, where torch raises" if dt.is_floating_point else "an integer, where torch's is a bitwise operation"
    fix = " & ".join(f"({fmt(k)} != 0)" for k in kids) if sym == "&" else \
        " | ".join(f"({fmt(k)} != 0)" for k in kids) if sym == "|" else f"({fmt(c)} == 0)"
    raise AlgorithmError(f"{alg.name}: {fmt(n)}: {sym} is a logical operation on bools in dtriton (comparisons, bool "
                         f"tensors, True/False), and {fmt(c)} is {dt if not typed[c.uid][1] else 'a Python number'}: "
                         f"{kind}, which dtriton does not compute; for the logical value write {fix}")
