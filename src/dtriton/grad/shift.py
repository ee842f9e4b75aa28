"""Shift invariance of max/min stages: which outputs do not change when a max/min stage is shifted.

The stabilising max of softmax, log-sum-exp and attention (``exp(x - m) / sum exp(x - m)`` does not
depend on ``m``) has an adjoint that is exactly zero; :func:`shift_class` finds such stages so that
the derivation builds neither their tie counts nor their adjoints.

A *class* says how a node changes when the value of the max/min stage ``m`` is shifted by ``d``
(``d`` varying only along ``m``'s axes): ``("a", k)``: the node changes by ``k*d``; ``("m", k)``: it
is multiplied by ``exp(k*d)``; ``k == 0``: unchanged; ``None``: unknown.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from ..ir import Algorithm, Binary, Cast, Const, Expr, Load, Reduce, Unary, Where

__all__ = ["shift_class", "shift_only"]

Shift = Optional[Tuple[str, float]]
_SAME = ("a", 0)


def _as_kind(c: Shift, kind: str) -> Shift:
    """``c`` as a shift of ``kind`` (an unchanged node is of every kind); ``None`` if it is not."""
    if c is None:
        return None
    if c[1] == 0:
        return (kind, 0)
    return c if c[0] == kind else None


def _both(a: Shift, b: Shift, kind: str):
    """``(a, b)`` as shifts of ``kind``, or ``None`` unless both are."""
    x, y = _as_kind(a, kind), _as_kind(b, kind)
    return (x, y) if x is not None and y is not None else None


def _same_shift(a: Shift, b: Shift) -> Shift:
    """The common shift of ``a`` and ``b`` (tried additive, then multiplicative), or ``None``."""
    for kind in ("a", "m"):
        q = _both(a, b, kind)
        if q and q[0][1] == q[1][1]:
            return q[0]
    return None


def _unary(op: str, c: Shift) -> Shift:
    if c is None:
        return None
    if c[1] == 0:
        return _SAME
    if op == "neg":
        return ("a", -c[1]) if c[0] == "a" else c
    if op == "exp" and c[0] == "a":
        return ("m", c[1])
    if op == "log" and c[0] == "m":
        return ("a", c[1])
    if op == "sqrt" and c[0] == "m":
        return ("m", c[1] / 2)
    if op == "rsqrt" and c[0] == "m":
        return ("m", -c[1] / 2)
    if op == "abs" and c[0] == "m":
        return c
    return None


def _binary(op: str, a: Shift, b: Shift) -> Shift:
    if op in ("add", "sub"):
        p = _both(a, b, "a")
        if p:
            return ("a", p[0][1] + (p[1][1] if op == "add" else -p[1][1]))
        q = _both(a, b, "m")
        return q[0] if q and q[0][1] == q[1][1] else None
    if op in ("mul", "div"):
        q = _both(a, b, "m")
        return ("m", q[0][1] + (q[1][1] if op == "mul" else -q[1][1])) if q else None
    if op in ("maximum", "minimum"):
        return _same_shift(a, b)
    if op in ("and", "or", "pow"):
        return _SAME if a is not None and b is not None and a[1] == 0 and b[1] == 0 else None
    # comparisons: unchanged when both sides move together
    return _SAME if _same_shift(a, b) is not None else None


def _where(n: Where, c: Shift, a: Shift, b: Shift) -> Shift:
    if c is None or c[1] != 0 or a is None or b is None:
        return None
    if a == b or (a[1] == 0 and b[1] == 0):
        return a
    if a[0] == "m" and isinstance(n.b, Const) and n.b.value == 0.0:
        return a
    if b[0] == "m" and isinstance(n.a, Const) and n.a.value == 0.0:
        return b
    return None


def _reduce(n: Reduce, c: Shift, max_axes: set[str]) -> Shift:
    if c is not None and c[1] == 0:
        return _SAME
    if c is not None and not (set(n.over) & max_axes):
        if n.combiner.grad == "sum":
            return c if c[0] == "m" else None
        return c if n.combiner.grad == "extremum" else None
    return None


def shift_class(m: Reduce, order: list[Expr]) -> dict[int, Any]:
    """How each node of ``order`` (children first) changes when the value of ``m`` is shifted (see
    the module docstring). Nodes absent from the result do not depend on ``m``."""
    cls: dict[int, Any] = {}
    max_axes = set(m.axes)

    def get(n):
        return cls.get(n.uid, _SAME)

    for n in order:
        if n is m:
            cls[n.uid] = ("a", 1)
            continue
        if not any(c.uid in cls for c in n.children()):
            continue
        r: Shift = None
        if isinstance(n, Load):
            r = None
        elif isinstance(n, Unary):
            r = _unary(n.op, get(n.x))
        elif isinstance(n, Binary):
            r = _binary(n.op, get(n.a), get(n.b))
        elif isinstance(n, Where):
            r = _where(n, get(n.cond), get(n.a), get(n.b))
        elif isinstance(n, Cast):
            c = get(n.x)
            r = c if n.dtype.is_floating_point else (_SAME if c is not None and c[1] == 0 else None)
        elif isinstance(n, Reduce):
            r = _reduce(n, get(n.x), max_axes)
        cls[n.uid] = r
    return cls


def _reads_outside_exp(e, m: Reduce, under_exp: bool = False) -> bool:
    """Whether expression ``e`` reads stage ``m`` other than inside an ``exp``."""
    if e is m:
        return not under_exp
    if isinstance(e, Reduce):
        return False   # another stage: its own uses are its own
    inside = under_exp or (isinstance(e, Unary) and e.op == "exp")
    return any(_reads_outside_exp(c, m, inside) for c in e.children())


def shift_only(alg: Algorithm, m: Reduce) -> bool:
    """Whether the max/min stage ``m`` of ``alg`` serves its outputs only as a shift: every output
    is unchanged when ``m`` shifts (:func:`shift_class`), or is a sum stage scaled by the shift (a
    saving forward's saved sum of exponentials), or is ``m`` itself, once (a saved row max, which
    the backward reads as the shift again). Then the outputs are exact whatever per-row value ``m``
    holds, as long as they are all taken at that value, and one equal to ``m`` in real arithmetic
    (``max(X * c) / c``, the folded base-2 form of :func:`~dtriton.ir.base2_exponents`) may stand in
    for it. Not so when ``m`` is returned twice (an output and its saved copy: the backward routes
    the output's gradient to the elements equal to the saved value), when an output moves with it
    (returns or compares it), or when another max/min stage moves with it and is returned. Nor when
    an output over ``m``'s reduced axes reads ``m`` outside an ``exp`` (log-softmax's ``X - m - log l``): ``X - m`` is exact
    (Sterbenz) near the true max only, and a stand-in off by an ulp of ``m`` would make a one-element
    row's log-probability nonzero (H200 s8 call 5: fp16/bf16 1x1 log-softmax)."""
    cls = shift_class(m, list(alg.nodes))
    bare = 0
    for o in alg.outputs:
        e = o.expr
        if set(e.axes) & set(m.over) and _reads_outside_exp(e, m):
            return False   # an output over m's own axes (log-softmax's X - m): exact only at the true max
        c = cls.get(e.uid, ("a", 0))
        if e is m:
            bare += 1
        elif c is None or (c[1] != 0 and not (isinstance(e, Reduce) and e.combiner.grad == "sum" and c[0] == "m")):
            return False
    return bare <= 1
