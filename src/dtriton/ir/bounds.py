"""Iteration bounds implied by masks: the IR facts (which condition guards a reduction's operand,
and which ranges of an axis that condition allows).

A reduction whose operand is its identity wherever a condition ``c`` is false (``max over j of
where(c, s, -inf)``, ``sum over k of where(c, A, 0) * B``, ``sum over j of exp(where(c, s, -inf)
- m) * V``) needs only the lanes where ``c`` holds. When ``c`` is a conjunction of comparisons of
the reduced axis with values that do not depend on it (``j <= i``, ``j > i - W``, ``j <
lengths[b]``), a program knows before its loop which tiles of the axis can hold a lane where
``c`` holds, and which tiles hold only such lanes. This module finds the condition
(:func:`reduction_guard`) and solves it for the axis (:func:`axis_bounds`); the plan
(:mod:`dtriton.plan.bounds`) decides per kernel whether the loop uses them.

Skipping a lane whose operand is the identity is exact, with one caveat the mask forms accept: a
product guarded to 0 (``where(c, A, 0) * B``) is taken as 0 even where ``B`` is inf or NaN outside
``c`` (torch would give NaN there), as every masked-attention kernel does.

This module is part of the IR layer: it takes expressions and returns expressions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from .expr import Axis, Binary, Cast, Const, Expr, Reduce, Unary, Where
from .walk import walk

__all__ = ["AxisBounds", "axis_bounds", "guard", "reduction_guard"]

_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}      # a OP b == b FLIP[OP] a
_NEGATE = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}    # not (a OP b)


def _is_const(e: Expr, value: float) -> bool:
    return isinstance(e, Const) and (e.value == value or (math.isnan(value) and math.isnan(e.value)))


def _is_compare(e: Expr) -> bool:
    return isinstance(e, Binary) and e.op in _FLIP


def _is_condition(e: Expr) -> bool:
    """A bool-valued factor: a comparison, or ``&``, ``|``, ``~`` of conditions (``(k <= i) & (k > i - W)``)."""
    if _is_compare(e):
        return True
    if isinstance(e, Binary) and e.op in ("and", "or"):
        return _is_condition(e.a) and _is_condition(e.b)
    return isinstance(e, Unary) and e.op == "not" and _is_condition(e.x)


def _negated(cond: Expr) -> Expr:
    """``not cond`` as a comparison where ``cond`` is one (De Morgan is not applied: an ``and``
    negated stays a ``not``, which :func:`axis_bounds` does not solve)."""
    if _is_compare(cond):
        return Binary(_NEGATE[cond.op], cond.a, cond.b)
    if isinstance(cond, Unary) and cond.op == "not":
        return cond.x
    return Unary("not", cond)


def guard(x: Expr, value: float) -> Expr | None:
    """A boolean expression ``c`` such that ``x == value`` wherever ``c`` is false, or None when
    none is found. ``value`` is a float (0.0, -inf, inf, ...).

    Recognised forms: ``where(c, a, value)`` (and ``where(c, value, a)``: ``not c``); for 0, a
    product with a guarded factor or a condition factor (a comparison, or ``&``, ``|``, ``~`` of
    them: ``x * (j <= i)``, ``x * ((k <= i) & (k > i - W))``), a quotient with a guarded numerator
    and ``exp``/``exp2`` of an operand guarded to -inf; for +-inf, a sum or
    difference whose first operand is guarded (the other taken finite), a product or quotient by
    a positive literal, a float cast."""
    if isinstance(x, Where):
        if _is_const(x.b, value):
            return x.cond
        if _is_const(x.a, value):
            return _negated(x.cond)
        return None
    if isinstance(x, Cast):
        return guard(x.x, value) if x.dtype.is_floating_point else None
    if isinstance(x, Unary):
        if x.op in ("exp", "exp2") and value == 0.0:
            return guard(x.x, -math.inf)
        if x.op == "neg" and math.isinf(value):
            return guard(x.x, -value)
        return None
    if not isinstance(x, Binary):
        return None
    if x.op == "mul" and value == 0.0:
        for f in (x.a, x.b):
            if _is_condition(f):   # a bool factor is 0 where it is false
                return f
            g = guard(f, 0.0)
            if g is not None:
                return g
        return None
    if x.op == "div" and value == 0.0:   # 0 / b (b taken finite and nonzero, as a softmax's sum)
        return guard(x.a, 0.0)
    if math.isinf(value):
        if x.op in ("add", "sub"):
            g = guard(x.a, value)
            if g is None and x.op == "add":
                g = guard(x.b, value)
            return g
        if x.op in ("mul", "div") and isinstance(x.b, Const) and x.b.value > 0:
            return guard(x.a, value)
        if x.op == "mul" and isinstance(x.a, Const) and x.a.value > 0:
            return guard(x.b, value)
    return None


def reduction_guard(r: Reduce) -> Expr | None:
    """The condition outside which ``r``'s operand is its combiner's identity (so lanes where it
    is false may be skipped), or None. Arg-reductions (value, index pairs) have none."""
    if r.combiner.results != 1:
        return None
    ident = r.combiner.identity(torch.float32)
    if isinstance(ident, bool):
        return None
    return guard(r.x, float(ident))


@dataclass(frozen=True)
class AxisBounds:
    """The range of ``axis`` a condition allows: ``axis >= each of lower`` and ``axis < each of
    upper`` (integer-valued expressions that do not use ``axis``). ``exact``: the condition is
    exactly that conjunction (every part of it was solved), so where every lane of a tile is in
    range the condition holds on the whole tile and need not be evaluated there."""
    axis: str
    lower: tuple[Expr, ...]
    upper: tuple[Expr, ...]
    exact: bool

    @property
    def empty(self) -> bool:
        """No bound was found."""
        return not self.lower and not self.upper


def _solve(e: Expr, axis: str) -> tuple[int, Expr | None] | None:
    """``e == sign * axis + rest`` with ``sign`` +-1 and ``rest`` free of ``axis`` (None: 0)."""
    if isinstance(e, Axis) and e.name == axis:
        return 1, None
    if isinstance(e, Unary) and e.op == "neg":
        s = _solve(e.x, axis)
        return None if s is None else (-s[0], None if s[1] is None else Unary("neg", s[1]))
    if not (isinstance(e, Binary) and e.op in ("add", "sub")):
        return None
    in_a, in_b = axis in e.a.axes, axis in e.b.axes
    if in_a == in_b:
        return None
    if in_a:
        s = _solve(e.a, axis)
        if s is None:
            return None
        return s[0], (e.b if e.op == "add" else Unary("neg", e.b)) if s[1] is None else Binary(e.op, s[1], e.b)
    s = _solve(e.b, axis)
    if s is None:
        return None
    sign = s[0] if e.op == "add" else -s[0]
    rest = e.a if s[1] is None else Binary(e.op, e.a, s[1])
    return sign, rest


def _one(n: int) -> Expr:
    return Const(float(n), integer=True)


def _atom(cmp: Binary, axis: str) -> tuple[list[Expr], list[Expr]] | None:
    """Solve one comparison for ``axis``: (lower bounds, upper bounds), or None."""
    op, a, b = cmp.op, cmp.a, cmp.b
    if axis in b.axes and axis not in a.axes:
        op, a, b = _FLIP[op], b, a
    if axis in b.axes or axis not in a.axes or op == "ne":
        return None
    s = _solve(a, axis)
    if s is None:
        return None
    sign, rest = s
    t = b if rest is None else Binary("sub", b, rest)    # sign * axis OP t
    if sign < 0:
        op, t = _FLIP[op], Unary("neg", t)
    if any(isinstance(n, Reduce) for n in walk([t])):
        return None
    if op == "lt":
        return [], [t]
    if op == "le":
        return [], [Binary("add", t, _one(1))]
    if op == "gt":
        return [Binary("add", t, _one(1))], []
    if op == "ge":
        return [t], []
    return [t], [Binary("add", t, _one(1))]   # eq


def axis_bounds(cond: Expr, axis: str, usable: Callable[[Expr], bool] = lambda e: True) -> AxisBounds:
    """The bounds on ``axis`` that the boolean ``cond`` implies: ``cond`` split at ``&`` (and
    ``not`` of a comparison), each comparison of ``axis`` (``+-axis + u OP t``, ``OP`` one of
    ``< <= > >= ==``) solved for it. ``usable(t)`` says whether a bound expression may be used
    (the caller checks it is integer-valued and computable before the loop); parts that are not
    solved, or not usable, leave ``exact`` False."""
    lower: list[Expr] = []
    upper: list[Expr] = []
    exact = True
    stack = [cond]
    while stack:
        c = stack.pop()
        if isinstance(c, Binary) and c.op == "and":
            stack.extend((c.b, c.a))
            continue
        if isinstance(c, Unary) and c.op == "not" and _is_compare(c.x):
            c = _negated(c.x)
        got = _atom(c, axis) if _is_compare(c) else None
        if got is None or not all(usable(t) for t in got[0] + got[1]):
            exact = False
            continue
        lower.extend(got[0])
        upper.extend(got[1])
    return AxisBounds(axis, tuple(lower), tuple(upper), exact)
