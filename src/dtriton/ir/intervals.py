"""Integer intervals of index expressions, and the reads of a call that may fall outside a dim.

:func:`interval` bounds an integer expression of axes, integer literals and integer arguments
(``i + 1``, ``h * s + r * d - p``, ``h // G``, ``i % W``) over given axis ranges. An interval is
*exact* when both ends are values the expression takes for some axis values in their ranges: every
axis occurs once (interval arithmetic is then tight) and the ranges are exactly the values the axes
take. :func:`guard_ranges` narrows axis ranges by the conditions of the ``dt.where`` branches above a
load (``where(d < half, X[d + half], X[d - half])`` reads ``X[d + half]`` only for ``d < half``).

:func:`analyse_reads` classifies every computed index of an algorithm for one call's sizes:
``inside`` (always inside its dim, whatever the branches), ``guarded`` (inside wherever its branch
is taken), ``outside`` (provably outside for some element where it is read: an error before
anything runs, unless the load is padded) or ``unknown`` (data-dependent: checked when the call
runs, see :func:`dtriton.ir.reference.check_reads`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from .expr import INT_OPS, Axis, Binary, Cast, Const, Expr, Load, Reduce, ScalarParam, Unary, Where
from .walk import topo_order

__all__ = ["Interval", "Read", "analyse_reads", "guard_ranges", "int_magnitude", "integer_valued", "interval", "kernel_reads",
           "never_negative", "point"]

#: the operations of an affine integer expression (what loop bounds solved from a mask are made of)
AFFINE_OPS = frozenset({"neg", "add", "sub", "mul"})

#: comparison with its operands swapped (``a < b`` is ``b > a``) and negated (``not a < b`` is ``a >= b``)
_SWAP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
_NEG = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


@dataclass(frozen=True)
class Interval:
    """The integers ``lo..hi`` (empty when ``lo > hi``). ``exact``: both ends are attained;
    ``axes``: the axes the value depends on (exactness of sums needs disjoint ones)."""
    lo: int
    hi: int
    exact: bool = True
    axes: frozenset = frozenset()

    @property
    def empty(self) -> bool:
        """No value at all (an axis of size 0, or branch conditions no value satisfies)."""
        return self.lo > self.hi

    def within(self, lo: int, hi: int) -> bool:
        """Every value lies in ``lo..hi``."""
        return self.empty or (lo <= self.lo and self.hi <= hi)


def point(v: int) -> Interval:
    """The single value ``v`` (exact)."""
    return Interval(v, v)


def _join(a: Interval, b: Interval, lo: int, hi: int, exact: bool = True) -> Interval:
    return Interval(lo, hi, exact and a.exact and b.exact and not (a.axes & b.axes), a.axes | b.axes)


def _floordiv(a: Interval, b: Interval) -> Interval | None:
    if b.lo <= 0 <= b.hi:
        return None   # a divisor that may be zero (or of both signs)
    q = [x // y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return _join(a, b, min(q), max(q))


def _mod(a: Interval, b: Interval) -> Interval | None:
    if b.lo != b.hi:   # Python's % takes the sign of the divisor
        if b.lo > 0:
            return Interval(0, b.hi - 1 if a.lo < 0 else min(a.hi, b.hi - 1), False, a.axes | b.axes)
        if b.hi < 0:
            return Interval(b.lo + 1, 0, False, a.axes | b.axes)
        return None
    if b.lo == 0:
        return None
    c = b.lo
    if a.lo // c == a.hi // c and c > 0:
        return Interval(a.lo % c, a.hi % c, a.exact, a.axes)
    full = a.hi - a.lo + 1 >= abs(c) and len(a.axes) == 1 and a.exact
    return Interval(0, c - 1, full, a.axes) if c > 0 else Interval(c + 1, 0, full, a.axes)


def _binary(op: str, a: Interval, b: Interval) -> Interval | None:
    if op == "add":
        return _join(a, b, a.lo + b.lo, a.hi + b.hi)
    if op == "sub":
        return _join(a, b, a.lo - b.hi, a.hi - b.lo)
    if op == "mul":
        c = [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
        return _join(a, b, min(c), max(c))
    if op == "floordiv":
        return _floordiv(a, b)
    if op == "mod":
        return _mod(a, b)
    if op == "maximum":
        return _join(a, b, max(a.lo, b.lo), max(a.hi, b.hi))
    if op == "minimum":
        return _join(a, b, min(a.lo, b.lo), min(a.hi, b.hi))
    if op in _NEG or op in ("and", "or"):
        return Interval(0, 1, False, a.axes | b.axes)
    return None


def interval(e: Expr, ranges: Mapping[str, Interval], scalars: Mapping[str, int] | None = None,
             memo: dict | None = None) -> Interval | None:
    """The values of integer expression ``e`` when each axis ``a`` ranges over ``ranges[a]``;
    None when they are not known from sizes alone (a float, a value read from a tensor, an integer
    argument missing from ``scalars``, a division by a divisor that may be zero). An axis absent
    from ``ranges`` is unknown too. An arg-reduction's index is its axis's range (not exact)."""
    memo = {} if memo is None else memo
    if e.uid in memo:
        return memo[e.uid]
    r: Interval | None = None
    if isinstance(e, Axis):
        r = ranges.get(e.name)
    elif isinstance(e, Const):
        r = point(int(e.value)) if e.integer and e.value.is_integer() else None
    elif isinstance(e, ScalarParam):
        v = (scalars or {}).get(e.name)
        r = point(int(v)) if e.pytype is int and v is not None else None
    elif isinstance(e, Reduce) and e.combiner.results == 2 and e.over[0] in ranges:
        full = ranges[e.over[0]]
        r = Interval(full.lo, full.hi, False, frozenset(e.axes))
    elif isinstance(e, Cast) and not e.dtype.is_floating_point:
        r = interval(e.x, ranges, scalars, memo)
    elif isinstance(e, Unary) and e.op in ("neg", "abs", "not"):
        x = interval(e.x, ranges, scalars, memo)
        if x is not None and e.op == "neg":
            r = Interval(-x.hi, -x.lo, x.exact, x.axes)
        elif x is not None and e.op == "abs":
            r = x if x.lo >= 0 else Interval(-x.hi, -x.lo, x.exact, x.axes) if x.hi <= 0 else \
                Interval(0, max(-x.lo, x.hi), x.exact, x.axes)
        elif e.op == "not":
            r = Interval(0, 1, False, frozenset(e.axes))
    elif isinstance(e, Binary):
        a, b = interval(e.a, ranges, scalars, memo), interval(e.b, ranges, scalars, memo)
        if a is not None and b is not None and not a.empty and not b.empty:
            r = _binary(e.op, a, b)
        elif e.op in _NEG or e.op in ("and", "or"):
            r = Interval(0, 1, False, frozenset(e.axes))
    elif isinstance(e, Where):
        a, b = interval(e.a, ranges, scalars, memo), interval(e.b, ranges, scalars, memo)
        if a is not None and b is not None:
            r = Interval(min(a.lo, b.lo), max(a.hi, b.hi), False, a.axes | b.axes)
    memo[e.uid] = r
    return r


def _narrow(ranges: dict, axis: str, op: str, bound: Interval, exact: bool) -> None:
    """Narrow ``ranges[axis]`` by ``axis <op> bound`` (``exact``: the bound is one known value)."""
    cur = ranges[axis]
    lo, hi = cur.lo, cur.hi
    if op == "lt":
        hi = min(hi, bound.hi - 1)
    elif op == "le":
        hi = min(hi, bound.hi)
    elif op == "gt":
        lo = max(lo, bound.lo + 1)
    elif op == "ge":
        lo = max(lo, bound.lo)
    elif op == "eq":
        lo, hi = max(lo, bound.lo), min(hi, bound.hi)
    else:
        exact = False   # != removes one value at most: the range stays, no longer exact
    ranges[axis] = Interval(lo, hi, cur.exact and exact, cur.axes)


def _refine(cond: Expr, positive: bool, ranges: dict, scalars) -> bool:
    """Narrow ``ranges`` (in place) to the axis values where ``cond`` is ``positive``; False when
    the condition is not a conjunction of comparisons of a bare axis with a bounded value (the
    ranges then keep values the condition excludes)."""
    if isinstance(cond, Unary) and cond.op == "not":
        return _refine(cond.x, not positive, ranges, scalars)
    if isinstance(cond, Binary) and cond.op in ("and", "or"):
        if (cond.op == "and") != positive:
            return False   # a disjunction: no box describes it
        return _refine(cond.a, positive, ranges, scalars) & _refine(cond.b, positive, ranges, scalars)
    if not (isinstance(cond, Binary) and cond.op in _NEG):
        return False
    op = cond.op if positive else _NEG[cond.op]
    done = False
    for x, other, o in ((cond.a, cond.b, op), (cond.b, cond.a, _SWAP[op])):
        bound = interval(other, ranges, scalars)
        x, shift = _peel(x, ranges, scalars)
        if isinstance(x, Axis) and x.name in ranges and bound is not None and not bound.empty:
            bound = Interval(bound.lo - shift, bound.hi - shift, bound.exact, bound.axes)
            _narrow(ranges, x.name, o, bound, bound.lo == bound.hi and not bound.axes)
            done = done or (bound.lo == bound.hi and not bound.axes and o != "ne")
    return done


def _peel(x: Expr, ranges, scalars) -> tuple[Expr, int]:
    """``x`` as ``axis + shift`` where it is an axis plus or minus known integers (``j + 1`` in
    ``j + 1 < n``): the axis node and the shift; else ``(x, 0)``."""
    shift = 0
    while isinstance(x, Binary) and x.op in ("add", "sub"):
        for e, other, sign in ((x.a, x.b, 1 if x.op == "add" else -1), (x.b, x.a, 1)):
            iv = interval(other, ranges, scalars) if not other.axes else None
            if iv is not None and iv.lo == iv.hi and (e is x.a or x.op == "add"):
                shift += sign * iv.lo
                x = e
                break
        else:
            return x, shift
    return x, shift


def guard_ranges(guards: tuple, ranges: Mapping[str, Interval], scalars=None) -> dict[str, Interval]:
    """The axis ranges where every ``(condition, polarity)`` of ``guards`` holds. Conditions that
    cannot be described as a box of axis ranges leave every range inexact (a value outside the
    dim may then be one no branch reads)."""
    out = dict(ranges)
    for cond, pos in guards:
        if not _refine(cond, pos, out, scalars):
            out = {a: Interval(r.lo, r.hi, False, r.axes) for a, r in out.items()}
    return out


@dataclass
class Read:
    """One computed index of one load: ``load.index[dim]``, reading dim ``dim`` (``size``
    elements) of ``load.tensor``. ``verdict``: "inside", "guarded", "outside" or "unknown" (see
    the module docstring); ``guards``: the branch conditions it is read under, one tuple of
    ``(condition, polarity)`` per path from an output; ``span``: the values it takes where it is
    read (exact when ``verdict`` is "outside")."""
    load: Load
    dim: int
    size: int
    verdict: str
    guards: list
    span: Interval | None

    @property
    def expr(self) -> Expr:
        """The index expression."""
        return self.load.index[self.dim]


def _computed(roots) -> set[int]:
    """The nodes below which some load has a computed (non-axis) index."""
    has: set[int] = set()
    for n in topo_order(roots):
        if any(c.uid in has for c in n.children()) or (
                isinstance(n, Load) and not all(isinstance(e, Axis) for e in n.index)):
            has.add(n.uid)
    return has


def _contexts(roots) -> dict[int, tuple[Load, list]]:
    """Every load with a computed index reached from ``roots``, with the branch conditions above
    it, one tuple per distinct path (subgraphs without such loads are not walked)."""
    out: dict[int, tuple[Load, list]] = {}
    seen: set = set()
    live = _computed(roots)
    stack = [(r, ()) for r in roots]
    while stack:
        n, ctx = stack.pop()
        key = (n.uid, tuple((c.uid, p) for c, p in ctx))
        if key in seen or n.uid not in live:
            continue
        seen.add(key)
        if isinstance(n, Load):
            out.setdefault(n.uid, (n, []))[1].append(ctx)
        if isinstance(n, Where):
            stack += [(n.cond, ctx), (n.a, ctx + ((n.cond, True),)), (n.b, ctx + ((n.cond, False),))]
        else:
            stack += [(c, ctx) for c in n.children()]
    return out


def _verdict(r: Read, full: Interval | None, ranges, scalars) -> tuple[str, Interval | None]:
    if full is not None and full.within(0, r.size - 1):
        return "inside", full
    verdicts, span = [], None
    for ctx in r.guards:
        rg = guard_ranges(ctx, ranges, scalars)
        live = set(r.load.axes).union(*(c.axes for c, _ in ctx))
        if any(rg[a].empty for a in live if a in rg):
            continue   # this branch is never taken
        iv = interval(r.expr, rg, scalars)
        if iv is not None and iv.within(0, r.size - 1):
            verdicts.append("guarded")
        elif iv is not None and iv.exact:
            return "outside", iv
        else:
            verdicts.append("unknown")
            span = iv
    return ("unknown" if "unknown" in verdicts else "guarded"), span


def analyse_reads(roots, axis_sizes: Mapping[str, int], dim_sizes: Mapping[str, int],
                  scalars: Mapping[str, int] | None = None) -> list[Read]:
    """Classify every computed (non-axis) index of the loads reached from ``roots`` for a call with
    ``axis_sizes`` (axis -> size) and ``dim_sizes`` (size symbol -> size); ``scalars``: the integer
    arguments' values (None: unknown, as when deciding what a kernel compiled for many calls masks).
    Loads of materialised stages are not tensors and are skipped by the caller's choice of roots."""
    ranges = {a: Interval(0, n - 1, True, frozenset((a,))) for a, n in axis_sizes.items()}
    reads = []
    for load, ctxs in _contexts(roots).values():
        for d, e in enumerate(load.index):
            if isinstance(e, Axis):
                continue
            r = Read(load, d, dim_sizes[load.tensor.dims[d]], "unknown", ctxs, None)
            r.verdict, r.span = _verdict(r, interval(e, ranges, scalars), ranges, scalars)
            reads.append(r)
    return reads


def kernel_reads(alg, axis_sizes: Mapping[str, int], dim_sizes: Mapping[str, int]) -> tuple[tuple[int, int, bool], ...]:
    """The computed indices a kernel for these sizes must mask to their dim, whatever the integer
    arguments: ``(position of the load in alg.nodes, dim, poisoned)`` for every read not provably
    inside its dim, except an arg-reduction's index outside any branch (its values are its own
    axis's). ``poisoned``: the read is outside every branch and its tensor has no padding, so an
    element outside is a wrong index (a gather index out of range, an offset argument too large):
    the kernel reads NaN there where the tensor is floating point (on the GPU, where no host check
    runs unless ``check_indices``), rather than memory outside the tensor; elsewhere an element
    outside reads the padding, or is never used (a branch not taken)."""
    pos = {n.uid: k for k, n in enumerate(alg.nodes)}
    out = []
    for r in analyse_reads([o.expr for o in alg.outputs], axis_sizes, dim_sizes, None):
        unguarded = r.load.pad is None and all(not ctx for ctx in r.guards)
        arg = isinstance(r.expr, Reduce) and r.expr.combiner.results == 2
        if r.verdict == "inside" or (arg and unguarded):
            continue
        out.append((pos[r.load.uid], r.dim, unguarded))
    return tuple(sorted(out))


def int_magnitude(nodes, axis_sizes: Mapping[str, int], scalars: Mapping[str, int] | None = None) -> int:
    """The largest magnitude an integer value among ``nodes`` reaches for these axis sizes and
    ``int`` argument values ``scalars`` (axis values, index arithmetic), where they bound it (0 when
    none is known)."""
    ranges = {a: Interval(0, n - 1, True, frozenset((a,))) for a, n in axis_sizes.items()}
    memo: dict = {}
    big = 0
    for n in nodes:
        iv = interval(n, ranges, scalars, memo)
        if iv is not None and not iv.empty:
            big = max(big, abs(iv.lo), abs(iv.hi))
    return big


def never_negative(e: Expr) -> bool:
    """Whether integer expression ``e`` is never negative, whatever the sizes (axis values, their
    sums and products, non-negative literals; an integer argument may be anything)."""
    ranges = {a: Interval(0, 2**62, False, frozenset((a,))) for a in e.axes}
    iv = interval(e, ranges, None)
    return iv is not None and iv.lo >= 0


def integer_valued(n: Expr, int_tensor: Callable[[str], bool], affine: bool = False) -> bool:
    """Whether ``n`` only takes integer values: axis values, integer literals, ``int`` arguments and
    loads of the tensors ``int_tensor(name)`` says are integer, combined by sums, differences,
    products and negations; unless ``affine``, also the index of an arg-reduction, integer casts,
    ``abs``, extrema, ``//``, ``%`` and selections of them. ``affine=True`` is the set loop bounds
    solved from a mask may use (:mod:`dtriton.ir.bounds`)."""
    def rec(e: Expr) -> bool:
        if isinstance(e, Axis):
            return True
        if isinstance(e, Const):   # written as an int (or bool): 2.0 is a float, as in torch
            return e.integer and e.value.is_integer()
        if isinstance(e, ScalarParam):
            return e.pytype is int
        if isinstance(e, Load):
            return int_tensor(e.tensor.name)
        if isinstance(e, Unary):
            return (e.op in AFFINE_OPS or (not affine and e.op == "abs")) and rec(e.x)
        if isinstance(e, Binary):
            ok = e.op in AFFINE_OPS or (not affine and e.op in ("maximum", "minimum", *INT_OPS))
            return ok and rec(e.a) and rec(e.b)
        if affine:
            return False
        if isinstance(e, Reduce):
            return e.combiner.results == 2
        if isinstance(e, Cast):
            return not e.dtype.is_floating_point
        if isinstance(e, Where):
            return rec(e.a) and rec(e.b)
        return False
    return rec(n)
