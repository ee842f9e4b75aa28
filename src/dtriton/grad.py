"""Gradients derived from the algorithm: reverse-mode differentiation of the expression graph.

``dt.grad(alg)`` returns ordinary dtriton algorithms (printable, schedulable by stage name,
explorable) that compute the vector-Jacobian product of ``alg``: given the forward inputs and one
upstream gradient per output, they produce the gradient of every requested input::

    bwd = dt.grad(softmax)              # a GradientAlgorithms
    print(bwd)                           # each backward algorithm, stage by stage
    dX, = bwd.reference(X, dY)           # eager torch oracle
    k = dt.compile(bwd["X"])             # the algorithm computing dX; heuristic schedule
    dX = k(X, dY)

The method is the reverse (adjoint) mode of algorithmic differentiation applied to the index-notation
graph (Griewank & Walther, "Evaluating Derivatives", 2nd ed., SIAM 2008, ch. 3-4; the index-notation
rules follow the usual tensor-calculus adjoints, e.g. Laue, Mitterreiter & Giesen, "Computing Higher
Order Derivatives of Matrix and Tensor Expressions", NeurIPS 2018):

- adjoints flow from the outputs to the inputs in reverse topological order; a node's adjoint is
  the sum of its parents' contributions;
- a contribution with axes the node lacks (the node was *broadcast*) is summed over those axes,
  and the adjoint of ``sum over R`` is broadcast back along ``R`` (implicit in index notation);
- ``max``/``min`` over ``R`` route the adjoint to the arg-extremum, split evenly among ties as
  ``torch.amax``/``torch.amin`` do: ``where(x == m, bar / count_ties, 0)``; ``maximum``/``minimum``
  give half to each side on ties, as ``torch.maximum``;
- a load ``T[e0, e1, ...]`` adds its adjoint to ``dT``: a bare axis index is renamed to the output
  axis, any other index (a gather such as ``X[i, labels[i]]``) becomes a one-hot comparison with
  the output axis, ``where(labels[i] == j, bar, 0)``, summed over the load's remaining axes (a
  scatter-add written in index notation).

The derived graph is simplified as it is built (hash-consing, constant folding, ``x*1``, ``x*0``,
``--x``, ``x * where(c, 1, 0) -> where(c, x, 0)``, factors free of a summed axis hoisted out of the
sum, contributions with the same summed axes merged into one reduction; the ``1/N`` of a mean's
adjoint folds into a mean of the adjoint's sum, or, while :data:`MEAN_AS_SUM_OVER_COUNT` is on, into
a division by the same per-row ``count`` stage the recomputed forward mean uses). Sums of
broadcasts never arise: a contribution is summed only over axes it actually has. One rule removes
whole reductions: a ``max``/``min`` stage whose outputs are invariant under shifting it (the
stabilising max of softmax, log-sum-exp and attention: ``exp(x - m) / sum exp(x - m)`` does not
depend on ``m``) has a zero adjoint exactly, so its tie-count and adjoint stages are not built.
Forward reductions the backward needs are recomputed (keeping their forward stage names, so a
schedule for them carries over) unless listed in ``save=`` (then they are inputs ``saved_<stage>``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch

from .errors import AlgorithmError
from .language import (Algorithm, Axis, Binary, Cast, Const, Expr, InputTensor, Load, Output, Reduce,
                       ScalarParam, Unary, Where, topo_order)

__all__ = ["grad", "GradientAlgorithms", "describe", "augmented_forward", "staged"]

#: Workaround for a compiler bug (materialised ``mean`` stages are divided by the extent twice:
#: once in their own kernel and again when read through ``BufferSpec.scale_count``). While True,
#: derived graphs never contain ``mean`` reductions: a mean becomes ``sum / count`` where
#: ``count = sum over R of 1`` is a cheap stage of its own. Set to False once the bug is fixed.
MEAN_AS_SUM_OVER_COUNT = False

_ARITH = ("add", "sub", "mul", "div", "maximum", "minimum")


# ----------------------------------------------------------------------------------------------
# a hash-consing, simplifying node factory
# ----------------------------------------------------------------------------------------------
class _Graph:
    """Builds IR nodes, returning an existing structurally identical node when there is one, and
    folding trivial algebra. ``None`` stands for a structurally zero value (no adjoint)."""

    def __init__(self, axis_size: dict[str, str]):
        self.table: dict[tuple, Expr] = {}
        self.hint: dict[int, str] = {}          # new Reduce id -> stage-name hint
        self.fwd: set[int] = set()              # ids of cloned forward nodes
        self.size = dict(axis_size)             # axis name -> size symbol
        self.tensors: dict[str, InputTensor] = {}
        self.scalars: dict[str, ScalarParam] = {}

    # -- raw interning -------------------------------------------------------------------------
    def _get(self, key, make):
        n = self.table.get(key)
        if n is None:
            n = make()
            self.table[key] = n
        return n

    def const(self, v: float) -> Expr:
        v = float(v)
        return self._get(("C", v if v == v else "nan"), lambda: Const(v))

    def axis(self, name: str) -> Axis:
        return self._get(("A", name), lambda: Axis(name))  # type: ignore[return-value]

    def scalar(self, p: ScalarParam) -> Expr:
        if p.name not in self.scalars:
            self.scalars[p.name] = ScalarParam(p.name, p.pytype)
        return self.scalars[p.name]

    def tensor(self, name: str, dims: tuple[str, ...]) -> InputTensor:
        if name not in self.tensors:
            self.tensors[name] = InputTensor(name, tuple(dims), len(self.tensors))
        return self.tensors[name]

    def load(self, t: InputTensor, index: Sequence[Expr]) -> Expr:
        index = tuple(index)
        return self._get(("L", t.name, tuple(e._id for e in index)), lambda: Load(t, index))

    def _un(self, op, x):
        return self._get(("U", op, x._id), lambda: Unary(op, x))

    def _bin(self, op, a, b):
        return self._get(("B", op, a._id, b._id), lambda: Binary(op, a, b))

    def _where(self, c, a, b):
        return self._get(("W", c._id, a._id, b._id), lambda: Where(c, a, b))

    def cast(self, x, dtype):
        return self._get(("K", str(dtype), x._id), lambda: Cast(x, dtype))

    def _reduce(self, op, x, over, mean=False, name=None, hint=None) -> Expr:
        over = tuple(over)
        key = ("R", op, over, bool(mean), x._id, name)
        n = self.table.get(key)
        if n is None:
            n = Reduce(op, x, over, name, mean)
            self.table[key] = n
            if name is None:
                self.hint[n._id] = hint or f"d_{op}"
        return n

    # -- queries -------------------------------------------------------------------------------
    @staticmethod
    def cval(n) -> float | None:
        return n.value if isinstance(n, Const) else None

    def is_zero(self, n) -> bool:
        return n is None or (isinstance(n, Const) and n.value == 0.0)

    # -- simplifying constructors --------------------------------------------------------------
    def neg(self, x):
        if x is None:
            return None
        if isinstance(x, Const):
            return self.const(-x.value)
        if isinstance(x, Unary) and x.op == "neg":
            return x.x
        return self._un("neg", x)

    def add(self, a, b):
        if self.is_zero(a):
            return b
        if self.is_zero(b):
            return a
        if isinstance(a, Const) and isinstance(b, Const):
            return self.const(a.value + b.value)
        if isinstance(b, Unary) and b.op == "neg":
            return self.sub(a, b.x)
        if isinstance(a, Unary) and a.op == "neg":
            return self.sub(b, a.x)
        return self._bin("add", a, b)

    def sub(self, a, b):
        if self.is_zero(b):
            return a
        if self.is_zero(a):
            return self.neg(b)
        if isinstance(a, Const) and isinstance(b, Const):
            return self.const(a.value - b.value)
        if isinstance(b, Unary) and b.op == "neg":
            return self.add(a, b.x)
        return self._bin("sub", a, b)

    def mul(self, a, b):
        if a is None or b is None:
            return None
        ca, cb = self.cval(a), self.cval(b)
        if ca is not None and cb is not None:
            return self.const(ca * cb)
        if ca == 0.0 or cb == 0.0:
            return None
        if ca == 1.0:
            return b
        if cb == 1.0:
            return a
        if ca == -1.0:
            return self.neg(b)
        if cb == -1.0:
            return self.neg(a)
        if isinstance(a, Unary) and a.op == "neg":
            return self.neg(self.mul(a.x, b))
        if isinstance(b, Unary) and b.op == "neg":
            return self.neg(self.mul(a, b.x))
        for x, y in ((a, b), (b, a)):  # x * where(c, 1, 0) -> where(c, x, 0)
            if isinstance(y, Where) and isinstance(y.a, Const) and isinstance(y.b, Const):
                if y.a.value == 1.0 and y.b.value == 0.0:
                    return self.where(y.cond, x, None)
                if y.a.value == 0.0 and y.b.value == 1.0:
                    return self.where(y.cond, None, x)
        if cb is not None and ca is None:  # constants first: 2 * x
            a, b, ca, cb = b, a, cb, ca
        if ca is not None and isinstance(b, Binary) and b.op == "mul" and isinstance(b.a, Const):
            return self.mul(self.const(ca * b.a.value), b.b)  # 2 * (-0.5 * x) -> -1 * x
        return self._bin("mul", a, b)

    def div(self, a, b):
        if a is None:
            return None
        ca, cb = self.cval(a), self.cval(b)
        if ca is not None and cb is not None and cb != 0.0:
            return self.const(ca / cb)
        if ca == 0.0:
            return None
        if cb == 1.0:
            return a
        if cb == -1.0:
            return self.neg(a)
        if isinstance(a, Unary) and a.op == "neg":
            return self.neg(self.div(a.x, b))
        if isinstance(b, Unary) and b.op == "neg":
            return self.neg(self.div(a, b.x))
        return self._bin("div", a, b)

    def where(self, c, a, b):
        """``where(c, a, b)``; ``None`` branches are zero."""
        if self.is_zero(a) and self.is_zero(b):
            return None
        if isinstance(c, Const):
            return a if c.value != 0.0 else b
        a = a if a is not None else self.const(0.0)
        b = b if b is not None else self.const(0.0)
        if a is b:
            return a
        # where(c, -x, 0) -> -where(c, x, 0): keeps signs outside, where they merge
        za, zb = self.is_zero(a), self.is_zero(b)
        if za and isinstance(b, Unary) and b.op == "neg":
            return self.neg(self.where(c, None, b.x))
        if zb and isinstance(a, Unary) and a.op == "neg":
            return self.neg(self.where(c, a.x, None))
        return self._where(c, a, b)

    def cmp(self, op, a, b):
        return self._bin(op, a, b)

    # -- products as factor lists ----------------------------------------------------------------
    def factors(self, x) -> tuple[int, list[Expr], list[Expr]]:
        """``x = sign * prod(num) / prod(den)`` through mul/div/neg chains."""
        if isinstance(x, Unary) and x.op == "neg":
            s, n, d = self.factors(x.x)
            return -s, n, d
        if isinstance(x, Binary) and x.op == "mul":
            s1, n1, d1 = self.factors(x.a)
            s2, n2, d2 = self.factors(x.b)
            return s1 * s2, n1 + n2, d1 + d2
        if isinstance(x, Binary) and x.op == "div":
            s1, n1, d1 = self.factors(x.a)
            s2, n2, d2 = self.factors(x.b)
            return s1 * s2, n1 + d2, d1 + n2
        return 1, [x], []

    def product(self, sign, num, den):
        r = self.const(1.0)
        for f in num:
            r = self.mul(r, f)
        d = None
        for f in den:
            d = f if d is None else self.mul(d, f)
        if d is not None:
            r = self.div(r, d)
        return self.neg(r) if sign < 0 else r

    def terms(self, x) -> list[tuple[int, Expr]]:
        """``x = sum(sign * term)`` through top-level add/sub/neg."""
        if isinstance(x, Binary) and x.op in ("add", "sub"):
            s = 1 if x.op == "add" else -1
            return self.terms(x.a) + [(s * sg, t) for sg, t in self.terms(x.b)]
        if isinstance(x, Unary) and x.op == "neg":
            return [(-s, t) for s, t in self.terms(x.x)]
        return [(1, x)]

    # -- reductions ----------------------------------------------------------------------------
    def rsum(self, x, over: Iterable[str], hint: str):
        """``sum over `over` of x`` with factors free of ``over`` hoisted out of the sum."""
        if x is None:
            return None
        over = tuple(dict.fromkeys(over))
        assert all(a in x.axes for a in over), (over, x.axes)  # a sum of a broadcast needs an extent
        if not over:
            return x
        sign, num, den = self.factors(x)
        ov = set(over)
        inner_n = [f for f in num if ov & set(f.axes)]
        inner_d = [f for f in den if ov & set(f.axes)]
        outer_n = [f for f in num if not ov & set(f.axes)]
        outer_d = [f for f in den if not ov & set(f.axes)]
        inner = self.product(1, inner_n, inner_d)
        r = self._reduce("sum", inner, over, hint=hint)
        return self.product(sign, outer_n + [r], outer_d)

    def count(self, over: Sequence[str], free: Sequence[str] = ()) -> Expr:
        """The number of elements of the axes ``over`` as a cheap reduction stage, ``sum over R of 1``
        (axis extents are not expressions in the IR). It is computed along the axes ``free`` too (one
        count per row, always equal), so that it lives next to the row reduction it divides and is
        never a 0-d stage (0-d materialised stages do not compile today)."""
        cond = None
        for a in tuple(free) + tuple(over):
            c = self.cmp("ge", self.axis(a), self.const(0.0))
            cond = c if cond is None else self._bin("and", cond, c)
        one = self._where(cond, self.const(1.0), self.const(0.0))
        return self._reduce("sum", one, tuple(over), hint="count_" + "_".join(over))

    def div_count(self, bar, over: Sequence[str], free: Sequence[str]):
        """``bar / N`` with ``N`` the extent of ``over`` (``free``: the axes of the mean node). Without
        the mean workaround, each term that is a product with a sum over axes of the same sizes
        becomes a mean (no extent needed); otherwise, and for the rest, divide by a count stage
        (the same one the recomputed forward mean uses)."""
        if bar is None:
            return None
        if MEAN_AS_SUM_OVER_COUNT:
            return self.div(bar, self.count(over, free))
        syms = sorted(self.size[a] for a in over)
        out = None
        for sg, t in self.terms(bar):
            s, num, den = self.factors(t)
            for k, f in enumerate(num):
                if isinstance(f, Reduce) and f.op == "sum" and not f.mean and \
                        sorted(self.size[a] for a in f.over) == syms:
                    hint = self.hint.get(f._id, f.name or "d_sum")
                    num[k] = self._reduce("sum", f.x, f.over, mean=True, hint=hint)
                    break
            else:
                den = den + [self.count(over, free)]
            out = self.add(out, self.product(s * sg, num, den))
        return out


# ----------------------------------------------------------------------------------------------
# shift invariance of max/min stages
# ----------------------------------------------------------------------------------------------
def _shift_class(m: Reduce, order: list[Expr]) -> dict[int, Any]:
    """How each node changes when the value of ``m`` is shifted by ``d`` (``d`` varying only along
    ``m``'s axes): ("a", k) means the node changes by ``k*d``, ("m", k) that it is multiplied by
    ``exp(k*d)``; k == 0 means unchanged. ``None``: unknown. Nodes absent do not depend on ``m``."""
    cls: dict[int, Any] = {}
    max_axes = set(m.axes)

    def get(n):
        return cls.get(n._id, ("a", 0))

    def as_kind(c, kind):
        if c is None:
            return None
        if c[1] == 0:
            return (kind, 0)
        return c if c[0] == kind else None

    def both(a, b, kind):
        x, y = as_kind(a, kind), as_kind(b, kind)
        return (x, y) if x is not None and y is not None else None

    for n in order:
        if n is m:
            cls[n._id] = ("a", 1)
            continue
        kids = n.children()
        if not any(c._id in cls for c in kids):
            continue
        r: Any = None
        if isinstance(n, Load):
            r = None
        elif isinstance(n, Unary):
            c = get(n.x)
            if c is None:
                r = None
            elif c[1] == 0:
                r = ("a", 0)
            elif n.op == "neg":
                r = ("a", -c[1]) if c[0] == "a" else c
            elif n.op == "exp" and c[0] == "a":
                r = ("m", c[1])
            elif n.op == "log" and c[0] == "m":
                r = ("a", c[1])
            elif n.op == "sqrt" and c[0] == "m":
                r = ("m", c[1] / 2)
            elif n.op == "rsqrt" and c[0] == "m":
                r = ("m", -c[1] / 2)
            elif n.op == "abs" and c[0] == "m":
                r = c
        elif isinstance(n, Binary):
            a, b = get(n.a), get(n.b)
            if n.op in ("add", "sub"):
                p = both(a, b, "a")
                if p:
                    r = ("a", p[0][1] + (p[1][1] if n.op == "add" else -p[1][1]))
                else:
                    q = both(a, b, "m")
                    r = q[0] if q and q[0][1] == q[1][1] else None
            elif n.op in ("mul", "div"):
                q = both(a, b, "m")
                r = ("m", q[0][1] + (q[1][1] if n.op == "mul" else -q[1][1])) if q else None
            elif n.op in ("maximum", "minimum"):
                for kind in ("a", "m"):
                    q = both(a, b, kind)
                    if q and q[0][1] == q[1][1]:
                        r = q[0]
                        break
            elif n.op in ("and", "or"):
                r = ("a", 0) if a is not None and b is not None and a[1] == 0 and b[1] == 0 else None
            else:  # comparisons: unchanged when both sides move together
                for kind in ("a", "m"):
                    q = both(a, b, kind)
                    if q and q[0][1] == q[1][1]:
                        r = ("a", 0)
                        break
        elif isinstance(n, Where):
            c, a, b = get(n.cond), get(n.a), get(n.b)
            if c is not None and c[1] == 0 and a is not None and b is not None:
                if a == b or (a[1] == 0 and b[1] == 0):
                    r = a
                elif a[0] == "m" and isinstance(n.b, Const) and n.b.value == 0.0:
                    r = a
                elif b[0] == "m" and isinstance(n.a, Const) and n.a.value == 0.0:
                    r = b
        elif isinstance(n, Cast):
            c = get(n.x)
            r = c if n.dtype.is_floating_point else (("a", 0) if c is not None and c[1] == 0 else None)
        elif isinstance(n, Reduce):
            c = get(n.x)
            if c is not None and c[1] == 0:
                r = ("a", 0)
            elif c is not None and not (set(n.over) & max_axes):
                if n.op == "sum":
                    r = c if c[0] == "m" else None
                else:
                    r = c
        cls[n._id] = r
    return cls


# ----------------------------------------------------------------------------------------------
# capture-avoiding axis renaming
# ----------------------------------------------------------------------------------------------
class _Renamer:
    def __init__(self, g: _Graph, taken: set[str]):
        self.g = g
        self.taken = taken
        self.memo: dict[tuple, Expr] = {}

    def fresh(self, base: str, size: str) -> str:
        k = 1
        while f"{base}{k}" in self.taken:
            k += 1
        nm = f"{base}{k}"
        self.taken.add(nm)
        self.g.size[nm] = size
        return nm

    def __call__(self, n: Expr, mapping: dict[str, str]) -> Expr:
        mapping = {a: b for a, b in mapping.items() if a != b and a in n.axes}
        if not mapping:
            return n
        key = (n._id, tuple(sorted(mapping.items())))
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        g = self.g
        if isinstance(n, Axis):
            r = g.axis(mapping[n.name])
        elif isinstance(n, Load):
            r = g.load(n.tensor, [self(e, mapping) for e in n.index])
        elif isinstance(n, Unary):
            r = g._un(n.op, self(n.x, mapping))
        elif isinstance(n, Binary):
            r = g._bin(n.op, self(n.a, mapping), self(n.b, mapping))
        elif isinstance(n, Where):
            r = g._where(self(n.cond, mapping), self(n.a, mapping), self(n.b, mapping))
        elif isinstance(n, Cast):
            r = g.cast(self(n.x, mapping), n.dtype)
        elif isinstance(n, Reduce):
            inner = {a: b for a, b in mapping.items() if a not in n.over}
            targets = set(inner.values())
            over = list(n.over)
            for k, a in enumerate(over):
                if a in targets:  # the bound axis would capture a renamed free axis
                    nb = self.fresh(a, g.size[a])
                    inner[a] = nb
                    over[k] = nb
            x = self(n.x, inner)
            hint = n.name if n.name is not None else g.hint.get(n._id)
            r = g._reduce(n.op, x, over, n.mean, hint=hint)
        else:
            r = n
        self.memo[key] = r
        return r


# ----------------------------------------------------------------------------------------------
# the result
# ----------------------------------------------------------------------------------------------
@dataclass
class GradientAlgorithms:
    """The backward algorithms of a forward algorithm (what :func:`grad` returns).

    Attributes:
        forward: the forward :class:`~dtriton.language.Algorithm`.
        wrt: names of the inputs whose gradients are computed (forward parameter order).
        algorithms: the backward algorithms. Each takes the *same* arguments, in this order: the
            forward arguments, one upstream gradient per forward output (``grad_out`` /
            ``grad_out0``, ``grad_out1``, ...; dims named after the output's axis sizes, same dtype
            as the output), then the saved forward stages (``saved_<stage>``, dims named after the
            stage's axis sizes, in :attr:`saved` order). Their outputs are the gradients (same shape
            as the input, dtype by the usual promotion of the floating inputs).
        locate: input name -> (index into ``algorithms``, output index of that algorithm).
        zero: requested inputs whose gradient is structurally zero (only used as gather indices or
            conditions); no algorithm computes them.
        grad_names: names of the upstream-gradient parameters, one per forward output.
        saved: forward stage names that are inputs instead of being recomputed.
    """
    forward: Algorithm
    wrt: tuple[str, ...]
    algorithms: tuple[Algorithm, ...]
    locate: dict[str, tuple[int, int]]
    zero: tuple[str, ...]
    grad_names: tuple[str, ...]
    saved: tuple[str, ...]
    stats: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Algorithm:
        """The backward algorithm that computes the gradient of input ``name``."""
        if name not in self.locate:
            raise KeyError(f"no backward algorithm computes d{name}; gradients are computed for "
                           f"{list(self.locate)} (structurally zero: {list(self.zero)})")
        return self.algorithms[self.locate[name][0]]

    def __iter__(self):
        return iter(self.algorithms)

    def __len__(self):
        return len(self.algorithms)

    @property
    def num_stages(self) -> int:
        """Total number of stages (reductions and outputs) over all backward algorithms."""
        return sum(len(a.stages) for a in self.algorithms)

    def reference(self, *args) -> tuple[torch.Tensor | None, ...]:
        """Evaluate the gradients in eager torch (the reference evaluator of each algorithm).

        ``args``: the backward arguments (forward args, upstream grads, saved stages). Returns one
        tensor per name in :attr:`wrt` (``None`` for structurally zero gradients)."""
        res: dict[str, torch.Tensor] = {}
        for k, a in enumerate(self.algorithms):
            outs = a.reference(*args)
            outs = outs if isinstance(outs, tuple) else (outs,)
            for name, (ai, oi) in self.locate.items():
                if ai == k:
                    res[name] = outs[oi]
        return tuple(res.get(n) for n in self.wrt)

    def __str__(self):
        head = (f"gradients of {self.forward.name} wrt {list(self.wrt)}: {len(self.algorithms)} algorithm(s), "
                f"{self.num_stages} stages" + (f"; zero: {list(self.zero)}" if self.zero else "") +
                (f"; saved: {list(self.saved)}" if self.saved else ""))
        parts = [head]
        for a in self.algorithms:
            outs = {o.name: n for n, (ai, oi) in self.locate.items() if self.algorithms[ai] is a
                    for o in [a.outputs[oi]]}
            parts.append(describe(a, {k: f"d{v}" for k, v in outs.items()}))
        return "\n".join(parts)

    __repr__ = __str__


def describe(alg: Algorithm, labels: dict[str, str] | None = None) -> str:
    """Readable listing of an algorithm, one line per stage (``name[axes] = expression``, nested
    stages printed by name). ``labels`` adds a note to output stages (e.g. ``{"out0": "dX"}``)."""
    from .codegen import fmt
    names = {s.node._id: s.name for s in alg.stages.values() if not s.is_output}
    lines = [repr(alg)]
    for s in alg.stages.values():
        if s.is_output:
            o = s.node
            e = o.expr
            body = names[e._id] if e._id in names else fmt(e, 0, names)
            note = f"  # {labels[s.name]}" if labels and s.name in labels else ""
            lines.append(f"    {s.name}[{', '.join(o.layout)}] = {body}{note}")
        else:
            lines.append(f"    {s.name}[{', '.join(s.node.axes)}] = {fmt(s.node, 0, names)}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# the derivation
# ----------------------------------------------------------------------------------------------
def _grad_param_names(alg: Algorithm) -> list[str]:
    taken = {p.name for p in alg.params}
    out = []
    for o in alg.outputs:
        nm = f"grad_{o.name}"
        while nm in taken:
            nm = "_" + nm
        taken.add(nm)
        out.append(nm)
    return out


def _saved_param_name(stage: str, taken: set[str]) -> str:
    nm = f"saved_{stage}"
    while nm in taken:
        nm = "_" + nm
    taken.add(nm)
    return nm


class _Deriver:
    def __init__(self, alg: Algorithm):
        self.alg = alg
        self.g = _Graph(alg.axis_size)
        self.clone: dict[int, Expr] = {}
        self.names: dict[int, str] = {}   # factory node id -> forward stage name it stands for

    # -- clone the forward graph into the factory ------------------------------------------------
    def clone_forward(self):
        g = self.g
        for p in self.alg.params:
            if isinstance(p, InputTensor):
                g.tensor(p.name, p.dims)
            else:
                g.scalar(p)
        cl = self.clone
        for n in self.alg.nodes:
            if isinstance(n, Const):
                r = g.const(n.value)
            elif isinstance(n, Axis):
                r = g.axis(n.name)
            elif isinstance(n, ScalarParam):
                r = g.scalar(n)
            elif isinstance(n, Load):
                r = g.load(g.tensors[n.tensor.name], [cl[e._id] for e in n.index])
            elif isinstance(n, Unary):
                r = g._un(n.op, cl[n.x._id])
            elif isinstance(n, Binary):
                r = g._bin(n.op, cl[n.a._id], cl[n.b._id])
            elif isinstance(n, Where):
                r = g._where(cl[n.cond._id], cl[n.a._id], cl[n.b._id])
            elif isinstance(n, Cast):
                r = g.cast(cl[n.x._id], n.dtype)
            elif isinstance(n, Reduce):
                if n.mean and MEAN_AS_SUM_OVER_COUNT:
                    s = g._reduce("sum", cl[n.x._id], n.over, name=n.name)
                    g.fwd.add(s._id)
                    r = g._bin("div", s, g.count(n.over, n.axes))
                    self.names[r._id] = n.name
                else:
                    r = g._reduce(n.op, cl[n.x._id], n.over, n.mean, name=n.name)
            else:  # pragma: no cover - new node kinds
                raise AlgorithmError(f"dt.grad does not know how to differentiate {type(n).__name__} nodes")
            g.fwd.add(r._id)
            cl[n._id] = r
        return [(cl[o.expr._id], o.layout) for o in self.alg.outputs]

    # -- adjoint propagation ---------------------------------------------------------------------
    def run(self, wrt: Sequence[str]):
        g = self.g
        outs = self.clone_forward()
        self.roots = outs
        order = topo_order([e for e, _ in outs])
        self.order = order
        wset = set(wrt)
        # active: nodes through which a wrt input influences an output arithmetically
        active: set[int] = set()
        for n in order:
            if isinstance(n, Load):
                if n.tensor.name in wset:
                    active.add(n._id)
            elif isinstance(n, Binary) and n.op not in _ARITH:
                continue
            elif isinstance(n, Unary) and n.op == "not":
                continue
            elif isinstance(n, Where):
                if n.a._id in active or n.b._id in active:
                    active.add(n._id)
            elif isinstance(n, Cast):
                if n.dtype.is_floating_point and n.x._id in active:
                    active.add(n._id)
            elif any(c._id in active for c in n.children()):
                active.add(n._id)
        self.active = active
        # max/min stages with a shift-invariant output: zero adjoint
        blocked: set[int] = set()
        for n in order:
            if isinstance(n, Reduce) and n.op in ("max", "min") and n._id in active:
                cls = _shift_class(n, order)
                if all(e._id not in cls or (cls[e._id] is not None and cls[e._id][1] == 0) for e, _ in outs):
                    blocked.add(n._id)
        self.blocked = blocked
        # upstream gradients
        gnames = _grad_param_names(self.alg)
        self.gnames = gnames
        contribs: dict[int, list[Expr]] = defaultdict(list)
        for (e, layout), gn in zip(outs, gnames):
            gt = g.tensor(gn, tuple(self.alg.axis_size[a] for a in layout))
            G = g.load(gt, [g.axis(a) for a in layout])
            if e._id in active:
                contribs[e._id].append(G)
        self.load_adj: list[tuple[Load, Expr]] = []
        for n in reversed(order):
            cs = contribs.pop(n._id, None)
            if not cs:
                continue
            bar = self.collect(n, cs)
            if bar is None:
                continue
            if isinstance(n, Load):
                self.load_adj.append((n, bar))
                continue
            if n._id in blocked:
                continue
            self.push(n, bar, contribs)
        return self.tensor_grads(wrt)

    def _hint(self, n: Expr) -> str:
        if n._id in self.names:
            return f"d_{self.names[n._id]}"
        if isinstance(n, Reduce) and n.name:
            return f"d_{n.name}"
        if isinstance(n, Load):
            return f"d_{n.tensor.name}"
        if isinstance(n, (Unary, Binary)):
            return f"d_{n.op}"
        return "d_" + type(n).__name__.lower()

    def collect(self, n: Expr, cs: list[Expr]):
        """Sum the contributions to ``n``'s adjoint; those with axes ``n`` lacks (``n`` was
        broadcast along them) are summed over them, one reduction per set of such axes."""
        g = self.g
        groups: dict[tuple[str, ...], Any] = {}
        for c in cs:
            if c is None:
                continue
            extra = tuple(sorted(a for a in c.axes if a not in n.axes))
            groups[extra] = g.add(groups.get(extra), c)
        bar = None
        for extra, s in groups.items():
            bar = g.add(bar, g.rsum(s, extra, self._hint(n)) if extra else s)
        return bar

    def push(self, n: Expr, bar: Expr, contribs):
        g = self.g
        act = self.active

        def to(child, v):
            if v is not None and child._id in act:
                contribs[child._id].append(v)

        if isinstance(n, Unary):
            x, op = n.x, n.op
            if op == "neg":
                to(x, g.neg(bar))
            elif op == "exp":
                to(x, g.mul(bar, n))
            elif op == "log":
                to(x, g.div(bar, x))
            elif op == "sqrt":
                to(x, g.div(g.mul(g.const(0.5), bar), n))
            elif op == "rsqrt":  # d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 rsqrt(x)^3
                to(x, g.mul(g.const(-0.5), g.mul(bar, g.mul(n, g.mul(n, n)))))
            elif op == "tanh":
                to(x, g.mul(bar, g.sub(g.const(1.0), g.mul(n, n))))
            elif op == "sigmoid":
                to(x, g.mul(bar, g.mul(n, g.sub(g.const(1.0), n))))
            elif op == "abs":  # torch: sgn(x), 0 at 0
                z = g.const(0.0)
                to(x, g.where(g.cmp("gt", x, z), bar, g.where(g.cmp("lt", x, z), g.neg(bar), None)))
        elif isinstance(n, Binary):
            a, b, op = n.a, n.b, n.op
            if op == "add":
                to(a, bar)
                to(b, bar)
            elif op == "sub":
                to(a, bar)
                to(b, g.neg(bar))
            elif op == "mul":
                if a is b:
                    to(a, g.mul(g.const(2.0), g.mul(bar, a)))
                else:
                    to(a, g.mul(bar, b))
                    to(b, g.mul(bar, a))
            elif op == "div":
                to(a, g.div(bar, b))
                to(b, g.neg(g.div(g.mul(bar, n), b)))  # -bar * (a/b) / b, as torch
            elif op in ("maximum", "minimum"):
                # torch.maximum: the larger side gets the gradient, ties split it in halves
                win = "gt" if op == "maximum" else "lt"
                half = g.mul(g.const(0.5), bar)
                tie = g.cmp("eq", a, b)
                to(a, g.where(g.cmp(win, a, b), bar, g.where(tie, half, None)))
                to(b, g.where(g.cmp(win, b, a), bar, g.where(tie, half, None)))
        elif isinstance(n, Where):
            to(n.a, g.where(n.cond, bar, None))
            to(n.b, g.where(n.cond, None, bar))
        elif isinstance(n, Cast):
            to(n.x, bar)
        elif isinstance(n, Reduce):
            if n.op == "sum":
                to(n.x, g.div_count(bar, n.over, n.axes) if n.mean else bar)
            else:  # max/min: split evenly among the elements equal to the extremum (torch.amax)
                tie = g.cmp("eq", n.x, n)
                cnt = g._reduce("sum", g.where(tie, g.const(1.0), None), n.over, hint=f"ties_{n.name}")
                to(n.x, g.where(tie, g.div(bar, cnt), None))

    # -- from load adjoints to tensor gradients ------------------------------------------------
    def tensor_grads(self, wrt: Sequence[str]) -> dict[str, tuple[Expr, tuple[str, ...]]]:
        g = self.g
        taken = set(self.alg.axis_names) | set(g.size)
        ren = _Renamer(g, taken)
        by_tensor: dict[str, list[tuple[Load, Expr]]] = defaultdict(list)
        for L, bar in self.load_adj:
            by_tensor[L.tensor.name].append((L, bar))
        result = {}
        for name in wrt:
            items = by_tensor.get(name)
            if not items:
                continue
            t = g.tensors[name]
            plain = [L for L, _ in items if L.is_plain()]
            if plain:
                out_axes = tuple(e.name for e in plain[0].index)
            else:
                out_axes = tuple(self._fresh_axis(d, taken) for d in t.dims)
            total = None
            for L, bar in items:
                mapping: dict[str, str] = {}
                conds: list[tuple[Expr, str]] = []
                for e, o in zip(L.index, out_axes):
                    if isinstance(e, Axis) and e.name not in mapping:
                        mapping[e.name] = o
                    else:
                        conds.append((e, o))
                rest = [a for a in L.axes if a not in mapping]
                for a in rest:
                    if a in out_axes:  # a summed axis that would collide with an output axis
                        mapping[a] = ren.fresh(a, g.size[a])
                full = {a: mapping.get(a, a) for a in L.axes}
                v = ren(bar, full)
                for e, o in conds:
                    v = g.where(g.cmp("eq", ren(e, full), g.axis(o)), v, None)
                v = g.rsum(v, [full[a] for a in rest], f"d_{name}")
                total = g.add(total, v)
            if total is not None:
                result[name] = (total, out_axes)
        return result

    def _fresh_axis(self, dim: str, taken: set[str]) -> str:
        base = dim.lower()
        nm, k = base, 1
        while nm in taken:
            nm = f"{base}{k}"
            k += 1
        taken.add(nm)
        self.g.size[nm] = dim
        return nm


def _group(grads: dict[str, tuple[Expr, tuple[str, ...]]], order: Sequence[str], mode: str) -> list[list[str]]:
    names = [n for n in order if n in grads]
    if mode in ("none", "separate"):
        return [[n] for n in names]
    if mode == "all":
        return [names] if names else []
    if mode != "auto":
        raise ValueError(f"group must be 'auto', 'all' or 'none', got {mode!r}")
    reds = {n: {x._id for x in topo_order([grads[n][0]]) if isinstance(x, Reduce)} for n in names}
    parent = {n: n for n in names}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x
    for k, a in enumerate(names):
        for b in names[k + 1:]:
            if reds[a] & reds[b]:
                parent[find(b)] = find(a)
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(find(n), []).append(n)
    return list(groups.values())


class _Finalizer:
    """Copies the reachable part of the factory graph into fresh nodes for one algorithm: fresh
    parameters, stage names, saved stages replaced by loads, size carriers where needed."""

    def __init__(self, d: _Deriver, params_spec, saved_map: dict[int, tuple[str, tuple[str, ...]]]):
        self.d = d
        self.params_spec = params_spec   # list of (kind, name, dims or pytype)
        self.saved_map = saved_map       # factory Reduce id -> (param name, axes)

    def build(self, name: str, outs: list[tuple[Expr, tuple[str, ...]]], doc: str,
              carriers: list[str | None]) -> Algorithm:
        g = self.d.g
        params: list[Any] = []
        tensors: dict[str, InputTensor] = {}
        scalars: dict[str, ScalarParam] = {}
        for k, (kind, pname, info) in enumerate(self.params_spec):
            if kind == "tensor":
                t = InputTensor(pname, tuple(info), k)
                tensors[pname] = t
                params.append(t)
            else:
                s = ScalarParam(pname, info)
                scalars[pname] = s
                params.append(s)
        used_names = {n for n in (["out"] + [f"out{k}" for k in range(len(outs))])}
        roots = [e for e, _ in outs]
        order = topo_order(roots)
        # forward reductions that stay keep their names; the rest get their hints
        for n in order:
            if isinstance(n, Reduce) and n.name and n._id not in self.saved_map:
                used_names.add(n.name)
        new: dict[int, Expr] = {}
        axes_sized: set[str] = set()

        def uniq(base: str) -> str:
            nm, k = base, 2
            while nm in used_names:
                nm = f"{base}_{k}"
                k += 1
            used_names.add(nm)
            return nm

        for n in order:
            if n._id in self.saved_map:
                pname, axes = self.saved_map[n._id]
                r: Expr = Load(tensors[pname], tuple(Axis(a) for a in axes))
                axes_sized.update(axes)
            elif isinstance(n, Const):
                r = Const(n.value)
            elif isinstance(n, Axis):
                r = Axis(n.name)
            elif isinstance(n, ScalarParam):
                r = scalars[n.name]
            elif isinstance(n, Load):
                idx = tuple(new[e._id] for e in n.index)
                r = Load(tensors[n.tensor.name], idx)
                axes_sized.update(e.name for e in n.index if isinstance(e, Axis))
            elif isinstance(n, Unary):
                r = Unary(n.op, new[n.x._id])
            elif isinstance(n, Binary):
                r = Binary(n.op, new[n.a._id], new[n.b._id])
            elif isinstance(n, Where):
                r = Where(new[n.cond._id], new[n.a._id], new[n.b._id])
            elif isinstance(n, Cast):
                r = Cast(new[n.x._id], n.dtype)
            elif isinstance(n, Reduce):
                nm = n.name if n.name else uniq(g.hint.get(n._id, "d_sum"))
                r = Reduce(n.op, new[n.x._id], n.over, nm, n.mean)
            else:  # pragma: no cover
                raise AssertionError(n)
            if n._id not in new:
                new[n._id] = r
        outputs = []
        for (e, layout), carrier in zip(outs, carriers):
            expr = new[e._id]
            missing = [a for a in layout if a not in axes_sized]
            if missing:
                # an output axis that indexes no tensor has no known size: add a term that is
                # exactly zero and loads the differentiated input along the output axes
                if carrier is None:
                    raise AlgorithmError(
                        f"dt.grad: output axes {missing} of a backward algorithm of {self.d.alg.name} index no "
                        "tensor, so their sizes are unknown")
                t = tensors[carrier]
                ld = Load(t, tuple(Axis(a) for a in layout))
                expr = Binary("add", expr, Where(Binary("ne", ld, ld), Const(0.0), Const(0.0)))
            outputs.append(Output(expr, tuple(layout)))
        return Algorithm.build(name, params, outputs, doc=doc)


def grad(alg: Algorithm, wrt: str | Sequence[str] | None = None, *, save: Sequence[str] | str | None = None,
         group: str = "auto") -> GradientAlgorithms:
    """Derive the backward algorithms of ``alg`` by reverse-mode differentiation.

    Args:
        alg: a forward ``@dt.algorithm``.
        wrt: input name(s) to differentiate with respect to; ``None`` for every tensor input that
            reaches an output arithmetically (inputs used only as gather indices or conditions,
            such as integer labels, are left out).
        save: forward reduction stages to take as inputs (``saved_<stage>``, laid out along the
            stage's free axes in order) instead of recomputing them; ``"all"`` for every forward
            reduction the backward uses. Compute them with :func:`augmented_forward`.
        group: ``"auto"`` puts gradients that share a reduction stage into one algorithm (so the
            shared stage runs once), ``"none"`` gives one algorithm per input, ``"all"`` one in total.

    Returns a :class:`GradientAlgorithms`. Its algorithms take ``(*forward_args, *upstream_grads,
    *saved)``; upstream gradient ``k`` has the shape of forward output ``k``. Computation dtype is
    the promotion of the floating inputs (fp32 for fp16/bf16 inputs, fp64 for fp64), as forward.

    Raises :class:`~dtriton.errors.AlgorithmError` for unknown input or stage names, or a node
    kind the differentiator does not know.

    Sources: Griewank & Walther, "Evaluating Derivatives" (SIAM 2008), reverse mode (ch. 3) and
    its adjoint rules for elementals (ch. 4); torch's derivatives.yaml conventions for ties
    (``amax``/``maximum``) and for ``abs`` at 0.
    """
    if not isinstance(alg, Algorithm):
        raise TypeError(f"dt.grad expects an @dt.algorithm, got {type(alg).__name__}")
    tnames = [p.name for p in alg.params if isinstance(p, InputTensor)]
    if isinstance(wrt, str):
        wrt = (wrt,)
    if wrt is not None:
        bad = [w for w in wrt if w not in tnames]
        if bad:
            raise AlgorithmError(f"dt.grad: {bad} are not tensor inputs of {alg.name}; its tensor inputs are {tnames}")
        wrt_l = [n for n in tnames if n in set(wrt)]
    else:
        wrt_l = list(tnames)
    d = _Deriver(alg)
    grads = d.run(wrt_l)
    if wrt is None:
        wrt_l = [n for n in wrt_l if n in grads]
    zero = tuple(n for n in wrt_l if n not in grads)
    # saved stages
    fwd_stage_names = [s.name for s in alg.stages.values() if not s.is_output]
    if save is None:
        save_l: list[str] = []
    elif save == "all":
        used = set()
        for e, _ in grads.values():
            for x in topo_order([e]):
                if isinstance(x, Reduce) and x._id in d.g.fwd and x.name:
                    used.add(x.name)
        save_l = [s for s in fwd_stage_names if s in used]
    else:
        save_l = [save] if isinstance(save, str) else list(save)
        bad = [s for s in save_l if s not in fwd_stage_names]
        if bad:
            raise AlgorithmError(f"dt.grad: save={bad} are not reduction stages of {alg.name}; its stages are "
                                 f"{fwd_stage_names}")
    taken = {p.name for p in alg.params} | set(d.gnames)
    saved_map: dict[int, tuple[str, tuple[str, ...]]] = {}
    saved_params = []
    for s in save_l:
        node = d.clone[alg.stages[s].node._id]   # for a mean (workaround): the sum / count node
        pn = _saved_param_name(s, taken)
        saved_map[node._id] = (pn, tuple(node.axes))
        saved_params.append(("tensor", pn, tuple(alg.axis_size[a] for a in node.axes)))
    spec = [("tensor", p.name, p.dims) if isinstance(p, InputTensor) else ("scalar", p.name, p.pytype)
            for p in alg.params]
    spec += [("tensor", gn, tuple(alg.axis_size[a] for a in o.layout)) for gn, o in zip(d.gnames, alg.outputs)]
    spec += saved_params
    fin = _Finalizer(d, spec, saved_map)
    algs = []
    locate: dict[str, tuple[int, int]] = {}
    for grp in _group(grads, wrt_l, group):
        name = f"{alg.name}_grad_{'_'.join(grp)}"
        outs = [grads[n] for n in grp]
        doc = (f"Backward of {alg.name}: gradient(s) wrt {', '.join(grp)} (derived by dt.grad). "
               f"Arguments: {', '.join(s[1] for s in spec)}.")
        algs.append(fin.build(name, outs, doc, list(grp)))
        for k, n in enumerate(grp):
            locate[n] = (len(algs) - 1, k)
    return GradientAlgorithms(alg, tuple(wrt_l), tuple(algs), locate, zero, tuple(d.gnames), tuple(save_l),
                              {"blocked_extrema": [x.name for x in d.order if x._id in d.blocked]})


def augmented_forward(alg: Algorithm, save: Sequence[str] | str) -> tuple[Algorithm, tuple[str, ...]]:
    """The forward algorithm with the reduction stages ``save`` as extra outputs (after the
    original ones, each laid out along the stage's free axes), for ``dt.grad(alg, save=...)``.
    ``"all"`` saves every reduction stage. Returns ``(algorithm, saved stage names)``."""
    names = [s.name for s in alg.stages.values() if not s.is_output]
    save_l = names if save == "all" else ([save] if isinstance(save, str) else list(save))
    bad = [s for s in save_l if s not in names]
    if bad:
        raise AlgorithmError(f"augmented_forward: {bad} are not reduction stages of {alg.name}; stages: {names}")
    d = _Deriver(alg)
    outs = d.clone_forward()
    extra = []
    for s in save_l:
        node = d.clone[alg.stages[s].node._id]
        extra.append((node, tuple(node.axes)))
    spec = [("tensor", p.name, p.dims) if isinstance(p, InputTensor) else ("scalar", p.name, p.pytype)
            for p in alg.params]
    fin = _Finalizer(d, spec, {})
    a = fin.build(f"{alg.name}_fwd_saving", list(outs) + extra,
                  f"{alg.name} with stages {save_l} as extra outputs (for dt.grad(save=...)).",
                  [None] * (len(outs) + len(extra)))
    return a, tuple(save_l)


# ----------------------------------------------------------------------------------------------
# staging: one reduction level per algorithm
# ----------------------------------------------------------------------------------------------
def _rebuild(roots: Sequence[Expr], params: dict[str, Any], replace: dict[int, tuple[str, tuple[str, ...]]]) -> list[Expr]:
    """Fresh copies of ``roots`` over the parameter objects ``params`` (by name); Reduce nodes in
    ``replace`` (id -> (tensor param name, axes)) become loads of that parameter."""
    new: dict[int, Expr] = {}
    for n in topo_order(list(roots)):
        if n._id in replace:
            pname, axes = replace[n._id]
            r: Expr = Load(params[pname], tuple(Axis(a) for a in axes))
            new[n._id] = r
            continue
        if isinstance(n, Const):
            r = Const(n.value)
        elif isinstance(n, Axis):
            r = Axis(n.name)
        elif isinstance(n, ScalarParam):
            r = params[n.name]
        elif isinstance(n, Load):
            r = Load(params[n.tensor.name], tuple(new[e._id] for e in n.index))
        elif isinstance(n, Unary):
            r = Unary(n.op, new[n.x._id])
        elif isinstance(n, Binary):
            r = Binary(n.op, new[n.a._id], new[n.b._id])
        elif isinstance(n, Where):
            r = Where(new[n.cond._id], new[n.a._id], new[n.b._id])
        elif isinstance(n, Cast):
            r = Cast(new[n.x._id], n.dtype)
        elif isinstance(n, Reduce):
            r = Reduce(n.op, new[n.x._id], n.over, n.name, n.mean)
        else:  # pragma: no cover
            raise AssertionError(n)
        new[n._id] = r
    return [new[r._id] for r in roots]


def staged(alg: Algorithm) -> list[tuple[Algorithm, tuple[str, ...]]]:
    """Split ``alg`` into a chain of algorithms in which no reduction contains another.

    Level ``k`` computes, as outputs laid out along their free axes, the reduction stages whose
    nesting depth is ``k``, reading deeper-nested results as inputs; the last algorithm computes
    ``alg``'s outputs from them. Every algorithm of the chain takes ``alg``'s arguments followed by
    the results of all earlier levels, in order (parameters ``stage_<name>``). Returns
    ``[(algorithm, names of the stages it outputs), ...]``; the last entry's names are ``()`` and
    its outputs are ``alg``'s. Used to run an algorithm whose nested reductions the lowering does
    not place correctly (see :mod:`dtriton.autograd`); each stage then costs a kernel and a write."""
    depth: dict[int, int] = {}
    for n in alg.nodes:
        d = max((depth[c._id] for c in n.children()), default=0)
        depth[n._id] = d + 1 if isinstance(n, Reduce) else d
    reds = [n for n in alg.nodes if isinstance(n, Reduce)]
    levels = sorted({depth[r._id] for r in reds})
    taken = {p.name for p in alg.params}
    pname: dict[int, str] = {}
    for r in reds:
        nm = f"stage_{r.name}"
        while nm in taken:
            nm = "_" + nm
        taken.add(nm)
        pname[r._id] = nm
    chain: list[tuple[Algorithm, tuple[str, ...]]] = []
    done: list[Reduce] = []

    def params_now():
        ps: list[Any] = []
        for k, p in enumerate(alg.params):
            ps.append(InputTensor(p.name, p.dims, k) if isinstance(p, InputTensor) else ScalarParam(p.name, p.pytype))
        for r in done:
            ps.append(InputTensor(pname[r._id], tuple(alg.axis_size[a] for a in r.axes), len(ps)))
        return ps

    for lv in levels:
        todo = [r for r in reds if depth[r._id] == lv]
        ps = params_now()
        pmap = {p.name: p for p in ps}
        repl = {r._id: (pname[r._id], tuple(r.axes)) for r in done}
        roots = _rebuild(todo, pmap, repl)
        outs = [Output(e, tuple(r.axes)) for e, r in zip(roots, todo)]
        chain.append((Algorithm.build(f"{alg.name}_level{lv}", ps, outs,
                                      doc=f"Stages {[r.name for r in todo]} of {alg.name}"),
                      tuple(r.name for r in todo)))
        done.extend(todo)
    ps = params_now()
    pmap = {p.name: p for p in ps}
    repl = {r._id: (pname[r._id], tuple(r.axes)) for r in done}
    roots = _rebuild([o.expr for o in alg.outputs], pmap, repl)
    outs = [Output(e, tuple(o.layout)) for e, o in zip(roots, alg.outputs)]
    chain.append((Algorithm.build(f"{alg.name}_final", ps, outs, doc=f"Outputs of {alg.name}"), ()))
    return chain
