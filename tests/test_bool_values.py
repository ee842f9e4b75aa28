"""Bool values and Python bool literals follow torch (session 10 fixes).

A Python ``True``/``False`` in an algorithm is a bool literal, the lowest category of torch's
promotion (``B[i] + True`` is bool, ``X_int8[i] + True`` int8, ``X[i] * True`` keeps X's float
dtype), and arithmetic of two bools is torch's: ``+`` and ``dt.maximum`` a logical or, ``*`` and
``dt.minimum`` a logical and (``B * B + B * B + B * 1`` is 2, not 3). Every case compares the
kernel (on the interpreter), the reference evaluator and torch on the same fresh data, dtype and
values, with the output poisoned first.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import dtriton as dt
from dtriton.ir import fmt

N = 13   # an odd size: the tile's last lanes are masked


def _algorithm(fn, name: str):
    """The algorithm ``out[i] = fn(A[i], B[i], I[i], F[i])`` (A, B bool; I int8; F float32)."""
    def alg(A: dt.Tensor["N"], B: dt.Tensor["N"], I: dt.Tensor["N"], F: dt.Tensor["N"]):
        i, = dt.axes("i")
        return fn(A[i], B[i], I[i], F[i])[i]
    alg.__name__ = alg.__qualname__ = name
    return dt.algorithm(alg)


def _inputs(seed: int, small: bool = False):
    """Fresh A, B (bool, every pair of values in the first four), I (int8; in [-1, 1] when
    ``small``, so that products never wrap: torch wraps int8 at each operation, dtriton where the
    value is stored) and F (float32)."""
    g = torch.Generator().manual_seed(seed)
    A = torch.rand(N, generator=g) < 0.5
    B = torch.rand(N, generator=g) < 0.5
    A[:4] = torch.tensor([True, True, False, False])
    B[:4] = torch.tensor([True, False, True, False])   # every pair of bools
    I = torch.randint(-1, 2, (N,), generator=g, dtype=torch.int8) if small else \
        torch.randint(-100, 100, (N,), generator=g, dtype=torch.int8)
    F = torch.randn(N, generator=g)
    return A, B, I, F


def _poison(like: torch.Tensor) -> torch.Tensor:
    if like.dtype == torch.bool:
        return torch.full_like(like, True) if not bool(like.all()) else torch.full_like(like, False)
    if like.dtype.is_floating_point:
        return torch.full_like(like, float("nan"))
    return torch.full_like(like, 77)


def check_three_ways(fn, name: str, seed: int = 0, small: bool = False):
    """The kernel, the reference and torch agree on ``fn`` (dtype and values)."""
    args = _inputs(seed, small)
    want = fn(*args)
    alg = _algorithm(fn, name)
    ref = alg.reference(*args)
    got = dt.compile(alg)(*args, out=_poison(want))
    for what, t in (("reference", ref), ("kernel", got)):
        assert t.dtype == want.dtype, f"{name}: {what} dtype {t.dtype}, torch {want.dtype}"
        torch.testing.assert_close(t, want, rtol=1e-6, atol=1e-6, equal_nan=True,
                                   msg=lambda m: f"{name}: {what} differs from torch: {m}")


CASES = {
    "bool_plus_true": lambda A, B, I, F: A + True,
    "bool_plus_false": lambda A, B, I, F: A + False,
    "true_plus_bool": lambda A, B, I, F: True + A,
    "bool_times_true": lambda A, B, I, F: A * True,
    "bool_times_false": lambda A, B, I, F: False * A,
    "bool_pow_true": lambda A, B, I, F: A ** True,
    "bool_pow_false": lambda A, B, I, F: A ** False,
    "float_times_true": lambda A, B, I, F: F * True,
    "float_plus_false": lambda A, B, I, F: F + False,
    "float_pow_true": lambda A, B, I, F: F ** True,
    "int8_plus_true": lambda A, B, I, F: I + True,
    "int8_pow_true": lambda A, B, I, F: I ** True,
    "bool_plus_bool": lambda A, B, I, F: A + B,
    "bool_times_bool": lambda A, B, I, F: A * B,
    "bool_sums_then_int": lambda A, B, I, F: A * A + A * A + A * 1,
    "bool_or_chain": lambda A, B, I, F: (A + B) + (A * B),
    "bool_sum_plus_int": lambda A, B, I, F: (A + B) + 1,
    "bool_sum_times_float": lambda A, B, I, F: (A + B + B) * F,
    "bool_maximum": lambda A, B, I, F: dt.maximum(A, B) if isinstance(A, dt.Expr) else torch.maximum(A, B),
    "bool_minimum": lambda A, B, I, F: dt.minimum(A, B) if isinstance(A, dt.Expr) else torch.minimum(A, B),
    "bool_maximum_true": lambda A, B, I, F: (dt.maximum(A, True) if isinstance(A, dt.Expr)
                                             else torch.maximum(A, torch.tensor(True))),
    "compare_sum": lambda A, B, I, F: (A > 0) + (B > 0) + (I > 0),
    "where_true_false": lambda A, B, I, F: (dt.where(A, True, False) if isinstance(A, dt.Expr)
                                            else torch.where(A, True, False)) + B,
    "where_true_int8": lambda A, B, I, F: (dt.where(A, I, True) if isinstance(A, dt.Expr)
                                           else torch.where(A, I, torch.tensor(True))),
    "bool_div_true": lambda A, B, I, F: A / True,
    "bool_eq_true": lambda A, B, I, F: (A + B) == True,  # noqa: E712 (an expression, not a test)
    "bool_sum_gt_zero": lambda A, B, I, F: (A + B) > 0,
}


@pytest.mark.parametrize("name", list(CASES))
def test_bool_expressions_match_torch(name):
    check_three_ways(CASES[name], name)


def test_bool_literal_types():
    """The literal's type as torch's: the lowest category, so it never widens a tensor's dtype."""
    cases = {"A + True": (lambda A, B, I, F: A + True, torch.bool),
             "I + True": (lambda A, B, I, F: I + True, torch.int8),
             "F * True": (lambda A, B, I, F: F * True, torch.float32),
             "A * 1": (lambda A, B, I, F: A * 1, torch.int64),
             "A ** True": (lambda A, B, I, F: A ** True, torch.bool),
             "A ** 1": (lambda A, B, I, F: A ** 1, torch.int64)}
    args = _inputs(1)
    for name, (fn, dtype) in cases.items():
        assert fn(*args).dtype == dtype   # torch's own rule, so the test can fail
        assert _algorithm(fn, "t").reference(*args).dtype == dtype, name


def test_bool_literal_prints_as_bool():
    alg = _algorithm(lambda A, B, I, F: A + True, "lit")
    assert fmt(alg.outputs[0].expr) == "(A[i] + True)"


@pytest.mark.parametrize("fn, what", [
    (lambda A, B, I, F: F - True, "Subtraction"),
    (lambda A, B, I, F: I - False, "Subtraction"),
    (lambda A, B, I, F: A // True, "div_floor"),
    (lambda A, B, I, F: A % B, "remainder"),
])
def test_bool_arithmetic_torch_refuses_is_refused(fn, what):
    args = _inputs(2)
    with pytest.raises((RuntimeError, NotImplementedError), match=what):
        fn(*args)   # torch raises ...
    alg = _algorithm(fn, "refused")
    with pytest.raises(dt.AlgorithmError, match=what):   # ... and so does dtriton, at the call
        dt.compile(alg)(*args)
    with pytest.raises(dt.AlgorithmError, match=what):
        alg.reference(*args)


def test_bool_sum_reduction_counts_or_not_sum():
    """``sum over j of (A + B)`` counts the elements where either holds (torch's ``(A + B).sum()``)."""
    @dt.algorithm
    def count(A: dt.Tensor["M", "N"], B: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.sum(A[i, j] + B[i, j], over=j)[i], (dt.max(A[i, j], over=j) + dt.max(B[i, j], over=j))[i]
    g = torch.Generator().manual_seed(3)
    A, B = torch.rand(5, 11, generator=g) < 0.5, torch.rand(5, 11, generator=g) < 0.5
    A[0], B[0] = True, True
    want = [(A + B).sum(1), A.amax(1) + B.amax(1)]
    for got in (count.reference(A, B), dt.compile(count)(A, B, out=(torch.full((5,), -1), torch.zeros(5, dtype=torch.bool)))):
        for g_, w in zip(got, want):
            assert g_.dtype == w.dtype and torch.equal(g_, w)


def test_grad_through_bool_literal():
    """A bool literal in a differentiated algorithm: the gradient is torch's (``X * True`` is X)."""
    @dt.algorithm
    def scaled(X: dt.Tensor["N"], B: dt.Tensor["N"]):
        i, = dt.axes("i")
        return (X[i] * True + X[i] ** True * (B[i] + True))[i]
    X = torch.randn(N, dtype=torch.float64, requires_grad=True)
    B = torch.rand(N) < 0.5
    y = dt.compile_autograd(scaled)(X, B)
    (y * torch.arange(N)).sum().backward()
    X2 = X.detach().clone().requires_grad_(True)
    ((X2 * True + X2 ** True * (B + True)) * torch.arange(N)).sum().backward()
    torch.testing.assert_close(y, X2 * True + X2 ** True * (B + True))
    torch.testing.assert_close(X.grad, X2.grad)


# -- random bool expressions --------------------------------------------------------------------
_LEAVES = ("A", "B", "I", "F", True, False, 1, 2)


@st.composite
def _trees(draw, depth=0):
    if depth >= 3 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(_LEAVES))
    op = draw(st.sampled_from(("add", "mul", "maximum", "minimum", "where", "eq", "gt", "and", "or")))
    return (op, draw(_trees(depth + 1)), draw(_trees(depth + 1)), draw(_trees(depth + 1)))


def _build(tree, env, is_dt):
    """The tree evaluated on ``env``'s leaves (dtriton expressions or torch tensors)."""
    if not isinstance(tree, tuple):
        return env[tree] if isinstance(tree, str) else tree
    op, a, b, c = tree
    x, y = _build(a, env, is_dt), _build(b, env, is_dt)
    if op in ("and", "or"):   # logical ops of bools only: comparisons of the operands with 0
        x, y = x != 0, y != 0
        if not isinstance(x, (torch.Tensor, dt.Expr)):
            x = env["A"] & x
        return (x & y) if op == "and" else (x | y)
    if op == "where":
        cond = _build(c, env, is_dt)
        cond = (cond != 0) if isinstance(cond, (torch.Tensor, dt.Expr)) else env["A"]
        return (dt.where if is_dt else torch.where)(cond, x, y)
    if not isinstance(x, (torch.Tensor, dt.Expr)) and not isinstance(y, (torch.Tensor, dt.Expr)):
        y = env["B"]   # two literals: Python would fold them; keep a tensor in every node
    if op in ("maximum", "minimum"):
        if is_dt:
            return getattr(dt, op)(x, y)
        x = x if isinstance(x, torch.Tensor) else torch.tensor(x)
        y = y if isinstance(y, torch.Tensor) else torch.tensor(y)
        return getattr(torch, op)(x, y)
    return {"add": lambda: x + y, "mul": lambda: x * y, "eq": lambda: x == y, "gt": lambda: x > y}[op]()


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(tree=_trees(), seed=st.integers(0, 2**16))
def test_random_bool_expressions_match_torch(tree, seed):
    """Random trees of bools, int8, floats and literals under + * maximum minimum where == > & |."""
    if not isinstance(tree, tuple):
        tree = ("add", tree, "A", 0)
    args = _inputs(seed, small=True)
    env = dict(zip("ABIF", args))
    want = _build(tree, env, False)
    if want.dtype in (torch.float32,) and not torch.isfinite(want).all():
        return
    def fn(A, B, I, F):
        return _build(tree, dict(A=A, B=B, I=I, F=F), isinstance(A, dt.Expr))
    check_three_ways(fn, "tree", seed, small=True)


@pytest.mark.parametrize("fn, sym, fix", [
    (lambda A, B, I, F: I & A, "&", r"\(I\[i\] != 0\) & \(A\[i\] != 0\)"),
    (lambda A, B, I, F: A | 1, r"\|", r"\(A\[i\] != 0\) \| \(1 != 0\)"),
    (lambda A, B, I, F: ~I, "~", r"\(I\[i\] == 0\)"),
    (lambda A, B, I, F: (F > 0) & F, "&", r"!= 0"),
])
def test_logical_ops_of_non_bools_are_refused(fn, sym, fix):
    """``&``, ``|``, ``~`` are logical on bools in dtriton; torch's are bitwise on integers (a
    different value: ``3 & 1`` is 1, not True) and raise on floats, so dtriton refuses them, saying
    what to write, rather than give another value."""
    args = _inputs(4)
    try:
        want = fn(*args)
    except (RuntimeError, TypeError):
        want = None   # torch raises (a float operand)
    alg = _algorithm(fn, "logical")
    if want is not None:   # torch's bitwise value is not the logical one: the refusal is needed
        logical = (args[2] != 0) & args[0] if sym == "&" else ~(args[2] != 0) if sym == "~" else args[0] | True
        assert want.dtype != torch.bool or not torch.equal(want, logical)
    for run in (lambda: dt.compile(alg)(*args), lambda: alg.reference(*args)):
        with pytest.raises(dt.AlgorithmError, match=rf"{sym} is a logical operation on bools.*{fix}"):
            run()


def test_logical_ops_of_bools_still_compute():
    check_three_ways(lambda A, B, I, F: (A & ~B) | ((I > 0) & True) | ((F < 0) & False), "logical_bools")


def test_grad_through_bool_arithmetic():
    """``X * (A + B)``: the backward multiplies by the logical or (1 where both hold, not 2)."""
    @dt.algorithm
    def masked(X: dt.Tensor["M", "N"], A: dt.Tensor["M", "N"], B: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.sum(X[i, j] * (A[i, j] + B[i, j]) + X[i, j] * dt.maximum(A[i, j], B[i, j]), over=j)[i]
    g = torch.Generator().manual_seed(6)
    A, B = torch.rand(4, 9, generator=g) < 0.5, torch.rand(4, 9, generator=g) < 0.5
    A[:, 0] = B[:, 0] = True
    X = torch.randn(4, 9, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(4, dtype=torch.float64, generator=g)
    y = dt.compile_autograd(masked)(X, A, B)
    (y * w).sum().backward()
    X2 = X.detach().clone().requires_grad_(True)
    y2 = (X2 * (A + B) + X2 * torch.maximum(A, B)).sum(1)
    (y2 * w).sum().backward()
    torch.testing.assert_close(y, y2)
    torch.testing.assert_close(X.grad, X2.grad)
    torch.testing.assert_close(masked.reference(X.detach(), A, B), y2.detach())
    grads = dt.grad(masked, wrt=["X"])   # the backward's own reference: the or, not 2
    if not grads.saved:
        torch.testing.assert_close(grads.reference(X.detach(), A, B, w)[0], X2.grad)
