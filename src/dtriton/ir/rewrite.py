"""Named algebraic rewrites of an algorithm (IR to IR), applied by the plan before lowering.

:func:`single_pass_variance` recognises the two-pass variance of a statistics-then-normalise
algorithm, ``mean((X - mean(X))**2)`` over the same axes (``**2`` traces to ``d * d``), and puts
a one-pass variance stage (the ``var`` combiner: shifted running sums per lane, Chan's merge across
lanes) in its place. The variance then no longer waits for the mean: both statistics are ready
together and share one loop over X, so the statistics read X once instead of twice. The stage
keeps its name, so schedules given for it still apply. Numerically the one-pass variance is close
to the two-pass one: each lane's sums are taken about one of its own values, so their cancellation
is bounded by the lane's own spread, and the lanes' states merge exactly (Chan, Golub & LeVeque
1983); the plan reads the mean beside it off the same state. The textbook one-pass formula
``mean(X * X) - mean(X)**2``, where written, becomes the same stage (named after the
``mean(X * X)`` stage with ``_var``): the same one read, without its cancellation.

:func:`base2_exponents` writes a max-shifted exponential ``exp(X - max(X))`` in base 2,
``exp2((X - max(X)) * log2(e))``: the hardware's base-2 exponential, where ``exp`` costs a further
multiply before it. The max stays the natural ``max(X)``: the difference is exact at the row max
(whatever FMA contraction the backend's compiler applies, since the multiply comes after it), so
the row max's term is exactly 1, and the max's other uses (a saving forward's ``lse = m + log(sum)``
or saved max, log-softmax's ``X - m``, cross-entropy's ``m + log(sum) - X[label]``) read the exact
``m``: a log-probability stays <= 0, a cross-entropy >= 0. (Two earlier forms failed that: a
stand-in ``max(X * log2(e)) * ln(2)``, up to an ulp below ``m``, gave -1e-6 losses on the
interpreter, s18 user trial; ``exp2(X * log2(e) - m * log2(e))`` is exact only where the compiler
rounds ``X * log2(e)`` before the subtraction, and on the H200 its FMA gave -6e-5 losses, s18
call 4.) Where ``X`` has a scalar factor, attention's ``s * scale``, the factor takes ``log2(e)``
instead (``s * (scale * log2(e))``, no multiply per element: in floating point ``X'`` then rounds
to its own magnitude rather than to that of ``X - max``, a relative error of about
``|X| * 2**-24`` in each term, so the plan uses it where the terms are consumed in 16-bit
precision) and the max becomes the base-2 ``max(X')``; its other uses then read
``max(X') * ln(2)``, once per row, only when the plan says its outputs take it as a shift alone
(:func:`dtriton.grad.shift_only`) and none of them also reads a tensor element outside a reduction
(a scaled cross-entropy's ``X[label] * t``: the exact form then): a saved log-sum-exp keeps its
natural-log value (to an ulp), and the online loop (max, sums, rescaling factors) runs in base 2
as for the plain forward.

:func:`reciprocal_divisors` writes ``X / y``, where ``y`` has fewer axes than ``X`` (a per-row
statistic dividing a tile), as ``X * (1 / y)``: one division per row and a multiply per element,
where a division per element costs about ten instructions on the GPU (an attention backward
divides its score tiles by the saved row sums twice per step). One more rounding (half an ulp of
the reciprocal): the plan uses it where the results are consumed in 16-bit precision.

:func:`base2_shifted_exponents` does for ``exp(X - m)`` with ``m`` a per-row value other than a
max stage (a derived backward's saved row max) what :func:`base2_exponents` does for the
max-shifted form: ``exp2(X' - m * log2(e))``, ``X'`` as there (the factor folded into a scalar
of ``X``, also through a ``where`` whose other branch is a constant), ``m * log2(e)`` computed per
row. Only where the factor folds, so no multiply per element is added.

:func:`folded_literals` replaces each elementwise function of a literal (``log(3.0)``, ``exp(2)``,
``sqrt(abs(-5.0))``) by its value computed in float64 by torch (its special values: ``log(0) = -inf``,
``log(-1) = NaN``, ``exp(1000) = inf``): Triton evaluates a printed ``tl.log(3.0)`` in float32, 1e-8
relative off in a float64 kernel. A literal is a Python number, typed as one (float64 until it meets
a tensor), so its value in double is what the reference computes; a float32 kernel rounds it once.

:func:`common_divisors` writes ``(A / y - B / (y * y)) * E`` (or with ``+``) as ``(A - B / y) * (E / y)``:
the form a quotient's derivative takes in a derived softmax backward (``A`` the probabilities' upstream
dot, ``B`` the row sum of ``dO * O``-like terms, ``y`` the saved row sum, ``E`` the unnormalised
exponential). With ``y`` per row, ``B / y`` is one value per row and ``E / y`` is the normalised
probability the same kernel already computes for another dot (dV's operand): per element a
subtraction and a multiply instead of a multiply, a subtraction and a multiply, and one division
per row instead of two. Exact in real arithmetic for ``y != 0`` (both forms are infinite or NaN
at 0); the plan applies it to the outputs whose kernels loop over ``y``'s axes, where the per-row
values are computed once per step rather than once per program.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from .algorithm import Algorithm
from .combiners import VAR
from .expr import Binary, Const, Expr, Load, Reduce, Unary, Where
from .walk import topo_order, walk

__all__ = ["base2_exponents", "base2_shifted_exponents", "common_divisors", "folded_literals", "naive_variance_of", "reciprocal_divisors",
           "shift_exponential", "single_pass_variance", "variance_of"]

#: log2(e), the factor of an exponent in base 2
_LOG2E = math.log2(math.e)


def variance_of(r: Reduce) -> Expr | None:
    """``X`` when ``r`` is ``mean((X - m) * (X - m))`` (or ``(m - X)`` squared) over the axes
    ``m = mean(X)`` reduces, else None."""
    if r.combiner.name != "mean":
        return None
    sq = r.x
    if not (isinstance(sq, Binary) and sq.op == "mul" and sq.a is sq.b):
        return None
    d = sq.a
    if not (isinstance(d, Binary) and d.op == "sub"):
        return None
    for x, m in ((d.a, d.b), (d.b, d.a)):
        if (isinstance(m, Reduce) and m.combiner.name == "mean" and m.x is x
                and set(m.over) == set(r.over) and len(m.over) == len(r.over)):
            return x
    return None


def _mean_of(n: Expr, x: Expr | None = None) -> Reduce | None:
    """``n`` when it is a mean stage (of ``x``, when given), else None."""
    if isinstance(n, Reduce) and n.combiner.name == "mean" and (x is None or n.x is x):
        return n
    return None


def naive_variance_of(n: Expr) -> tuple[Expr, Reduce] | None:
    """``(X, mean(X * X))`` when ``n`` is ``mean(X * X) - mean(X) * mean(X)`` over the same axes
    (the textbook formula, which loses every digit when the mean is large against the spread),
    else None."""
    if not (isinstance(n, Binary) and n.op == "sub"):
        return None
    sq, mm = _mean_of(n.a), n.b
    if sq is None or not (isinstance(sq.x, Binary) and sq.x.op == "mul" and sq.x.a is sq.x.b):
        return None
    x = sq.x.a
    m = _mean_of(mm.a, x) if isinstance(mm, Binary) and mm.op == "mul" and mm.a is mm.b else None
    if m is None or set(m.over) != set(sq.over) or len(m.over) != len(sq.over):
        return None
    return x, sq


def single_pass_variance(alg: Algorithm, want: Callable[[Reduce], bool]) -> Algorithm:
    """``alg`` with each two-pass variance stage ``r`` for which ``want(r)`` holds replaced by a
    one-pass ``var`` stage of the same name over the same axes, and each ``mean(X * X) -
    mean(X)**2`` whose ``mean(X * X)`` stage ``want`` accepts by a ``var`` stage named after that
    stage with ``_var`` (``alg`` itself when there is none). The replacement computes the same
    value, the biased variance (the second without its cancellation); the mean stages stay for
    their other uses."""
    swap: dict[int, Expr] = {}
    names = set(alg.stages)
    for n in alg.nodes:
        if isinstance(n, Reduce) and want(n):
            x = variance_of(n)
            if x is not None:
                swap[n.uid] = Reduce(VAR, x, n.over, n.name)
        naive = naive_variance_of(n)
        if naive is not None and want(naive[1]):
            x, sq = naive
            name = f"{sq.name}_var"
            while name in names:
                name += "_"
            names.add(name)
            swap[n.uid] = Reduce(VAR, x, sq.over, name)
    return _rebuilt(alg, swap)


#: the functions :func:`folded_literals` folds, as float64 torch computes them (``not`` stays: its value is a bool)
_LITERAL_FUNCTIONS = {"neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
                      "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "tanh": torch.tanh, "sigmoid": torch.sigmoid}


def folded_literals(alg: Algorithm) -> Algorithm:
    """``alg`` with each :class:`Unary` of a literal (a :class:`Const`, or a function of one, folded
    first) replaced by the literal of its value, computed in float64 by torch (``alg`` itself when
    there is none). ``neg`` and ``abs`` of an integer literal stay integer literals (``X_int * abs(-2)``
    stays integer arithmetic); the others are float literals, as their types were (a literal's function
    is a Python scalar's: it takes the dtype of the tensors it meets)."""
    swap: dict[int, Expr] = {}
    for n in alg.nodes:
        if not (isinstance(n, Unary) and n.op in _LITERAL_FUNCTIONS):
            continue
        x = swap.get(n.x.uid, n.x)
        if isinstance(x, Const):
            v = _LITERAL_FUNCTIONS[n.op](torch.tensor(x.value, dtype=torch.float64)).item()
            swap[n.uid] = Const(v, integer=x.integer and n.op in ("neg", "abs"))
    return _rebuilt(alg, swap)


def _remade(alg: Algorithm, outs) -> Algorithm:
    """``alg`` rebuilt with the outputs ``outs``: its name, parameters, docstring, provenance (what
    derived it, :attr:`Algorithm.provenance`) and index hints kept."""
    new = Algorithm.build(alg.name, alg.params, outs, alg.__doc__)
    new.provenance = alg.provenance
    return new.take_index_hints(alg)


def _rebuilt(alg: Algorithm, swap: dict[int, Expr]) -> Algorithm:
    """``alg`` with the nodes of uid in ``swap`` replaced (``alg`` itself when ``swap`` is empty)."""
    if not swap:
        return alg
    new: dict[int, Expr] = {}
    for n in topo_order([o.expr for o in alg.outputs]):
        if n.uid in swap:
            new[n.uid] = swap[n.uid]
            continue
        kids = n.children()
        moved = [new.get(c.uid, c) for c in kids]
        new[n.uid] = n if all(a is b for a, b in zip(moved, kids)) else n.rebuild(moved)
    outs = [o.rebuild([new[o.expr.uid]]) for o in alg.outputs]
    return _remade(alg, outs)


def _common_divisor(n: Expr) -> tuple[Expr, Expr] | None:
    """``((E / y) * (A - B / y), y)`` when ``n`` is ``(A / y - B / (y * y)) * E`` (``+`` alike, either factor
    order, ``y`` one shared node), else None."""
    if not (isinstance(n, Binary) and n.op == "mul"):
        return None
    for x, e in ((n.a, n.b), (n.b, n.a)):
        if not (isinstance(x, Binary) and x.op in ("sub", "add")):
            continue
        p, q = x.a, x.b
        if not (isinstance(p, Binary) and p.op == "div" and isinstance(q, Binary) and q.op == "div"):
            continue
        y, yy = p.b, q.b
        if isinstance(yy, Binary) and yy.op == "mul" and yy.a is y and yy.b is y:
            return Binary("mul", Binary("div", e, y), Binary(x.op, p.a, Binary("div", q.a, y))), y
    return None


def common_divisors(alg: Algorithm, want: Callable[[str, Expr], bool]) -> Algorithm:
    """``alg`` with each ``(A / y - B / (y * y)) * E`` (:func:`_common_divisor`) in an output ``o`` for
    which ``want(o.name, y)`` holds written ``(A - B / y) * (E / y)``; the other outputs keep their
    nodes (a node shared by outputs of both kinds is rebuilt only where wanted). ``alg`` itself when
    nothing changes."""
    outs = []
    for o in alg.outputs:
        new: dict[int, Expr] = {}
        for n in topo_order([o.expr]):
            kids = n.children()
            moved = [new.get(c.uid, c) for c in kids]
            m = n if all(a is b for a, b in zip(moved, kids)) else n.rebuild(moved)
            got = _common_divisor(m)
            new[n.uid] = got[0] if got is not None and want(o.name, got[1]) else m
        outs.append(o if new[o.expr.uid] is o.expr else o.rebuild([new[o.expr.uid]]))
    if all(a is b for a, b in zip(outs, alg.outputs)):
        return alg
    return _remade(alg, outs)


def _uses(alg: Algorithm) -> dict[int, list[Expr]]:
    """Node uid -> the nodes that take it as an operand."""
    out: dict[int, list[Expr]] = {}
    for n in topo_order([o.expr for o in alg.outputs]):
        for c in n.children():
            out.setdefault(c.uid, []).append(n)
    return out


def base2_exponents(alg: Algorithm, want: Callable[[Reduce], bool],
                    shift_only: Callable[[Reduce], bool] = lambda m: False) -> Algorithm:
    """``alg`` with each ``exp(X - m)``, ``m = max(X)`` a stage for which ``want(m)`` holds,
    written in base 2 (``alg`` itself when there is none), in one of two forms:

    - exact (the default): ``m`` stays the stage ``max(X)`` and the exponential reads
      ``exp2((X - m) * log2(e))``, the difference exact at the row max whatever FMA the compiler
      forms (the row max's term is exactly 1); ``m``'s other uses (an output, a saved
      ``m + log(sum)``, log-softmax's ``X - m``, cross-entropy's ``m + log(sum) - X[label]``) read
      ``m`` itself, so a log-probability stays <= 0 and a cross-entropy >= 0. The online rescaling
      factors are natural ``exp`` (:func:`shift_exponential`).
    - folded: where ``X`` has a scalar factor (attention's ``s * scale``; :func:`_folded_log2e`)
      the factor takes ``log2(e)``, ``exp2(X' - m')`` with ``X' = s * (scale * log2(e))`` and
      ``m' = max(X')`` a stage of the same name: no multiply per element. ``m``'s other uses then
      read ``m' * ln(2)``, once per row, equal to ``m`` in real arithmetic only (up to an ulp
      below it), so this form is taken only when there are none, or when ``shift_only(m)`` (the
      outputs take ``m`` as a shift alone, e.g. :func:`dtriton.grad.shift_only`) and no output
      that reads ``m`` outside an ``exp`` also reads a tensor element outside a reduction (a
      saved log-sum-exp may be an ulp low; a scaled cross-entropy's ``m + log(sum) - X[label]``
      may not: it takes the exact form, a subtraction and a multiply per element).

    Raises nothing; ``want`` and ``shift_only`` take the max stage's :class:`Reduce` node."""
    uses = _uses(alg)
    outputs = {o.expr.uid for o in alg.outputs}   # an output (a saved statistic) is a use of its own
    swap: dict[int, Expr] = {}
    for m in alg.nodes:
        if not (isinstance(m, Reduce) and m.combiner.name == "max" and want(m)):
            continue
        subs = [d for d in uses.get(m.uid, []) if _shift_of(d, m)]
        d_uses = [e for d in subs for e in uses.get(d.uid, [])]
        exps = [e for e in d_uses if isinstance(e, Unary) and e.op == "exp"]
        if not exps:
            continue
        others = (m.uid in outputs or any(d.uid in outputs for d in subs) or len(exps) < len(d_uses)
                  or len(subs) < len(uses.get(m.uid, [])))
        x2 = _folded_log2e(m.x)   # (through a causal mask's where when it folds)
        if x2 is not None and (not others or (shift_only(m) and not _element_beside(alg, m))):
            m2 = Reduce(m.combiner, x2, m.over, m.name)
            if others:
                swap[m.uid] = Binary("mul", m2, Const(math.log(2.0)))
            for e in exps:
                swap[e.uid] = Unary("exp2", Binary("sub", x2, m2))
        else:   # exact: exp2((X - m) * log2(e)), the difference exact at the row max (no FMA can fold it)
            for e in exps:
                swap[e.uid] = Unary("exp2", Binary("mul", e.x, Const(_LOG2E)))
    return _rebuilt(alg, swap)


def shift_exponential(f: Expr, m: Reduce) -> tuple[Expr, str] | None:
    """``(a, exp)`` when ``f`` is an exponential shifted by the max stage ``m``: ``exp(a - m)``
    (``exp`` "exp"), ``exp2(a - m)`` (a base-2 max: "exp2") or ``exp2((a - m) * log2(e))`` (the
    exact form of :func:`base2_exponents`, a natural max: "exp"); ``exp`` is the exponential
    that rescales sums of ``f`` when ``m`` moves from ``m0`` to ``m1`` (``exp(m0 - m1)``).
    None otherwise (``a`` may still read ``m``: the caller checks)."""
    if not (isinstance(f, Unary) and f.op in ("exp", "exp2") and isinstance(f.x, Binary)):
        return None
    d, kind = f.x, f.op
    if (f.op == "exp2" and d.op == "mul" and isinstance(d.b, Const) and d.b.value == _LOG2E
            and isinstance(d.a, Binary)):
        d, kind = d.a, "exp"
    if d.op == "sub" and d.b is m:
        return d.a, kind
    return None


def _element_beside(alg: Algorithm, m: Reduce) -> bool:
    """Whether an output of ``alg`` reads max stage ``m`` outside an ``exp`` and a tensor element
    outside every reduction (cross-entropy's ``m + log(sum) - X[label]``)."""
    reads_m: dict[int, bool] = {}
    reads_element: dict[int, bool] = {}
    for n in topo_order([o.expr for o in alg.outputs]):   # (operands first: one visit per node)
        kids = n.children()
        stop = isinstance(n, Reduce)
        reads_m[n.uid] = n is m or (not stop and not (isinstance(n, Unary) and n.op == "exp")
                                    and any(reads_m[c.uid] for c in kids))
        reads_element[n.uid] = isinstance(n, Load) or (not stop and any(reads_element[c.uid] for c in kids))
    return any(reads_m[o.expr.uid] and reads_element[o.expr.uid] for o in alg.outputs)


def _shift_of(d: Expr, m: Reduce) -> bool:
    """Whether ``d`` is ``X - m`` with ``X`` the operand of the max stage ``m``."""
    return isinstance(d, Binary) and d.op == "sub" and d.a is m.x and d.b is m


def reciprocal_divisors(alg: Algorithm, floating: Callable[[str], bool]) -> Algorithm:
    """``alg`` with each ``X / y`` whose divisor ``y`` has fewer axes than ``X`` (all of them axes
    of ``X``) and reads tensors, every one floating (``floating(tensor name)``; integer divisions
    keep their exact quotients), written ``X * (1 / y)`` with one ``1 / y`` node per divisor (so
    it is computed once, over ``y``'s axes); ``alg`` itself when there is none."""
    def wanted(n: Expr) -> bool:
        if not (isinstance(n, Binary) and n.op == "div") or isinstance(n.b, Const):
            return False
        if not set(n.b.axes) < set(n.a.axes):
            return False
        loads = [x for x in walk([n.b]) if isinstance(x, Load)]
        return bool(loads) and all(floating(x.tensor.name) for x in loads)
    order = topo_order([o.expr for o in alg.outputs])
    if not any(wanted(n) for n in order):
        return alg
    new: dict[int, Expr] = {}
    recips: dict[int, Expr] = {}
    for n in order:
        kids = n.children()
        moved = [new.get(c.uid, c) for c in kids]
        m = n if all(a is b for a, b in zip(moved, kids)) else n.rebuild(moved)
        if wanted(n):
            y = moved[1]
            inv = recips.setdefault(y.uid, Binary("div", Const(1.0), y))
            m = Binary("mul", moved[0], inv)
        new[n.uid] = m
    outs = [o.rebuild([new[o.expr.uid]]) for o in alg.outputs]
    return _remade(alg, outs)


def _folded_log2e(x: Expr) -> Expr | None:
    """``x * log2(e)`` with the constant folded into a scalar (0-d) factor of ``x`` (through a
    ``where`` whose other branch is a constant: the causal mask's -inf), or None when it does not
    fold (the multiply would be per element)."""
    if isinstance(x, Where) and isinstance(x.b, Const):
        a = _folded_log2e(x.a)
        return None if a is None else Where(x.cond, a, Const(x.b.value * _LOG2E))
    if isinstance(x, Binary) and x.op == "mul":
        for a, c in ((x.a, x.b), (x.b, x.a)):
            if not c.axes and a.axes:
                return Binary("mul", a, Binary("mul", c, Const(_LOG2E)))
    return None


def base2_shifted_exponents(alg: Algorithm) -> Algorithm:
    """``alg`` with each ``exp(X - m)`` whose shift ``m`` is no max stage, has fewer axes than
    ``X`` and whose ``X`` takes the factor ``log2(e)`` into a scalar (:func:`_folded_log2e`)
    written ``exp2(X' - m * log2(e))``; ``alg`` itself when there is none."""
    swap: dict[int, Expr] = {}
    for e in alg.nodes:
        if not (isinstance(e, Unary) and e.op == "exp" and isinstance(e.x, Binary) and e.x.op == "sub"):
            continue
        x, m = e.x.a, e.x.b
        if (isinstance(m, Reduce) and m.combiner.name == "max") or not set(m.axes) < set(x.axes):
            continue
        x2 = _folded_log2e(x)
        if x2 is not None:
            swap[e.uid] = Unary("exp2", Binary("sub", x2, Binary("mul", m, Const(_LOG2E))))
    return _rebuilt(alg, swap)
