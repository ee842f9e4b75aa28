"""Facts about contractions over several axes (convolutions): which free axes lie on which side
of the product, and in which order their reduced axes are best flattened.

``dt.sum(X.pad(0)[n, h*s + r - p, w*s + q - p, c] * W[o, r, q, c], over=(c, r, q))[n, h, w, o]``
reads the reduced axes (c, r, q) on both sides; its free axes fall into the input's side
(n, h, w: the GEMM's M) and the weight's (o: its N). The schedule's conv rules
(:mod:`dtriton.schedule.dot_rules`) and the plan's flat axes (:mod:`dtriton.plan.implicit_gemm`)
both read these facts.
"""

from __future__ import annotations

from typing import AbstractSet, Callable, Mapping

from .analysis import is_sum, reduction_stages
from .algorithm import Algorithm
from .expr import Axis, Binary, Const, Expr, Load, Reduce, ScalarParam, Unary
from .walk import mul_factors, walk

__all__ = ["Affine", "Poly", "affine_index", "contraction_sides", "convolutions", "poly_value", "reduced_order", "shift_of"]

#: A polynomial over the integer scalar arguments with integer coefficients: ``((names, coefficient), ...)``,
#: one term per distinct sorted tuple of argument names (``()`` the constant), sorted, no zero terms.
Poly = tuple
#: An integer index affine in its axes: ``((axis or "", Poly), ...)`` sorted by axis, ``""`` the constant
#: term, no zero coefficients.
Affine = tuple


def contraction_sides(r: Reduce, scalar: Callable[[str], bool] = lambda a: False) -> list[list[str]] | None:
    """The free axes of sum ``r`` on each side of its product, in ``r.axes`` order: the axes that
    only one side's factors read (axes for which ``scalar`` holds, tile-1 grid axes, do not join
    the sides, but count for the side that alone reads them; an axis both sides read, a group or
    batch axis, is on neither). None when the factors reading a reduced axis do not fall into
    exactly two sides."""
    over = set(r.over)
    rest = [f for f in mul_factors(r.x) if over & set(f.axes)]
    groups: list[set[str]] = []
    for f in rest:
        ax = {a for a in f.axes if a not in over and not scalar(a)}
        hit = [g for g in groups if g & ax]
        groups = [g for g in groups if not g & ax] + [set(ax).union(*hit)]
    groups = [g for g in groups if g]
    if len(groups) != 2:
        return None
    users: dict[str, set[int]] = {}
    for f in rest:
        side = next((i for i, g in enumerate(groups) if g & set(f.axes)), None)
        for a in (set(f.axes) - over) if side is not None else ():
            users.setdefault(a, set()).add(side)
    return [[a for a in r.axes if users.get(a) == {i}] for i in range(2)]


def reduced_order(r: Reduce, unit_dims: Mapping[str, int]) -> tuple[str, ...]:
    """The reduced axes of ``r``, outermost first, for one flat index over them: sorted by the
    innermost tensor dim each is read at (``unit_dims``' unit-stride dim innermost, then dims from
    the last), in ``r.over`` order on ties. Channels-last ``X[n, h, w, c] * W[o, r, q, c]`` gives
    (r, q, c): each step of the flat index reads contiguous channels."""
    loads = [x for x in walk([r.x], stop=lambda x: isinstance(x, Reduce)) if isinstance(x, Load)]

    def rank(a: str) -> int:
        best = 1 << 30
        for ld in loads:
            unit = unit_dims.get(ld.tensor.name, len(ld.index) - 1)
            for d, e in enumerate(ld.index):
                if a in e.axes:
                    best = min(best, 0 if d == unit else len(ld.index) - d)
        return best
    return tuple(sorted(r.over, key=lambda a: (-rank(a), r.over.index(a))))


def convolutions(alg: Algorithm) -> dict[str, tuple[list[str], list[str]]]:
    """Sum stages over two or more axes whose product has two sides (see
    :func:`contraction_sides`; free axes every factor reads, the groups of a grouped conv, are
    batch axes on neither side): stage name -> (the side with more free axes, the other side)."""
    out = {}
    for s in reduction_stages(alg):
        r = s.node
        if not is_sum(r) or r.combiner.base != "sum" or len(r.over) < 2:
            continue
        reads = [set(f.axes) - set(r.over) for f in mul_factors(r.x) if set(r.over) & set(f.axes)]
        shared = set.intersection(*reads) if reads else set()
        sides = contraction_sides(r, shared.__contains__)
        if sides is not None and all(sides):
            out[r.name] = tuple(sorted(sides, key=len, reverse=True))
    return out


def shift_of(e: Expr, a: str, ones: AbstractSet[str]) -> Expr | None:
    """Where integer index ``e`` is ``a`` plus an expression free of ``a`` on a call whose integer
    scalars named in ``ones`` are 1 (``h * stride + r * dilation - padding`` at stride 1): that
    expression, ``e`` at ``a = 0``; None where ``a``'s coefficient is not exactly 1 or ``e`` is not
    affine in ``a`` (a stride of 2, ``h // 2``, ``h * h``)."""
    return _at_zero(e, a) if _coefficient(e, a, ones) == 1 else None


def _known(e: Expr, ones: AbstractSet[str]) -> int | None:
    """The value of ``e`` where it is an integer literal, a scalar of ``ones`` (1), or a sum,
    difference or product of those; None otherwise."""
    if isinstance(e, Const) and e.integer:
        return int(e.value)
    if isinstance(e, ScalarParam) and e.name in ones:
        return 1
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
        x, y = _known(e.a, ones), _known(e.b, ones)
        if x is None or y is None:
            return None
        return x + y if e.op == "add" else (x - y if e.op == "sub" else x * y)
    return None


def _coefficient(e: Expr, a: str, ones: AbstractSet[str]) -> int | None:
    """The coefficient of axis ``a`` in ``e`` where ``e`` is affine in ``a`` with a coefficient
    known on the call (:func:`_known`); 0 where ``e`` does not read ``a``; None otherwise."""
    if a not in e.axes:
        return 0
    if isinstance(e, Axis):
        return 1
    if isinstance(e, Unary) and e.op == "neg":
        c = _coefficient(e.x, a, ones)
        return None if c is None else -c
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        x, y = _coefficient(e.a, a, ones), _coefficient(e.b, a, ones)
        if x is None or y is None:
            return None
        return x + y if e.op == "add" else x - y
    if isinstance(e, Binary) and e.op == "mul":
        for f, g in ((e.a, e.b), (e.b, e.a)):
            if a not in g.axes:
                c, v = _coefficient(f, a, ones), _known(g, ones)
                return None if c is None or v is None else c * v
    return None


def _at_zero(e: Expr, a: str) -> Expr:
    """``e`` with axis ``a`` replaced by the integer 0 (new nodes where ``a`` is read)."""
    if isinstance(e, Axis) and e.name == a:
        return Const(0, integer=True)
    if a not in e.axes:
        return e
    return e.rebuild([_at_zero(c, a) for c in e.children()])


def _poly(terms: Mapping[tuple, int]) -> Poly:
    return tuple(sorted((k, v) for k, v in terms.items() if v))


def _poly_add(x: Poly, y: Poly, sign: int = 1) -> Poly:
    out = dict(x)
    for k, v in y:
        out[k] = out.get(k, 0) + sign * v
    return _poly(out)


def _poly_mul(x: Poly, y: Poly) -> Poly:
    out: dict[tuple, int] = {}
    for kx, vx in x:
        for ky, vy in y:
            k = tuple(sorted(kx + ky))
            out[k] = out.get(k, 0) + vx * vy
    return _poly(out)


def poly_value(p: Poly, values: Mapping[str, int]) -> int | None:
    """The value of polynomial ``p`` (see :data:`Poly`) with the integer arguments ``values``; None
    where an argument it reads is not in ``values``."""
    total = 0
    for names, c in p:
        for n in names:
            if n not in values:
                return None
            c *= int(values[n])
        total += c
    return total


def affine_index(e: Expr) -> dict[str, Poly] | None:
    """``{axis: coefficient, "": constant}`` of integer index ``e`` where it is affine in its axes with
    coefficients and constant that are polynomials (:data:`Poly`) in integer literals and integer
    scalar arguments (``h * stride + r * dilation - padding``: ``{"h": stride, "r": dilation, "":
    -padding}``), zero terms left out; None otherwise (a product of two axes, ``//``, ``%``, a float,
    a tensor read). Unlike :func:`shift_of` it needs no argument's value: the plan of a call whose
    index arguments vary reads the coefficients symbolically and the launch evaluates them
    (:func:`poly_value`)."""
    if isinstance(e, Axis):
        return {e.name: (((), 1),)}
    if isinstance(e, Const):
        if not (e.integer and e.value.is_integer()):
            return None
        return {"": _poly({(): int(e.value)})} if e.value else {}
    if isinstance(e, ScalarParam):
        return {"": (((e.name,), 1),)} if e.pytype is int else None
    if isinstance(e, Unary) and e.op == "neg":
        x = affine_index(e.x)
        return None if x is None else {a: _poly_add((), c, -1) for a, c in x.items()}
    if not (isinstance(e, Binary) and e.op in ("add", "sub", "mul")):
        return None
    x, y = affine_index(e.a), affine_index(e.b)
    if x is None or y is None:
        return None
    if e.op == "mul":
        if set(x) - {""}:
            x, y = y, x
        if set(x) - {""}:
            return None   # a product of two axes
        f = x.get("", ())
        out = {a: _poly_mul(c, f) for a, c in y.items()}
    else:
        out = dict(x)
        for a, c in y.items():
            out[a] = _poly_add(out.get(a, ()), c, 1 if e.op == "add" else -1)
    return {a: c for a, c in out.items() if c}
