"""Wrong results and unclear errors a fresh user found (session-6 trial), each checked against
torch in float64 and the reference evaluator on the interpreter, outputs poisoned first: integer
``//`` and ``%`` by zero, the gradient of ``dt.maximum`` and ``dt.minimum`` at ties, ``x ** p`` at
``x = 0``, and the messages for a repeated axis name, a float index and a backward schedule key.
"""

from __future__ import annotations

import pytest
import torch

import dtriton as dt


# ----------------------------------------------------------------------------------------------
# integer // and % by zero
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def int_div_mod(A: dt.Tensor["N"], B: dt.Tensor["N"]):
    i, = dt.axes("i")
    return (A[i] // B[i])[i], (A[i] % B[i])[i]


@dt.algorithm
def grouped_rows(X: dt.Tensor["M", "N"], Y: dt.Tensor["G", "N"], g: int):
    i, j = dt.axes("i j")
    return (X[i, j] * Y[i // g, j])[i, j]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16])
def test_integer_floor_division_and_modulo_of_negative_operands_match_torch(dtype):
    """``//`` floors and ``%`` takes the divisor's sign (Python's and torch's rounding), for every
    sign pair, in the kernel (poisoned outputs) and the reference."""
    a = torch.tensor([7, -7, 7, -7, 0, 5, -1, 1, 13, -13, 6], dtype=dtype)
    b = torch.tensor([2, 2, -2, -2, 3, -5, 4, -4, 1, 7, -6], dtype=dtype)
    want = (a // b, a % b)
    ref = int_div_mod.reference(a, b)
    outs = tuple(torch.full_like(w, -99) for w in want)
    got = dt.compile(int_div_mod)(a, b, out=outs)
    for w, r, g in zip(want, ref, got):
        assert torch.equal(r.long(), w.long()) and torch.equal(g.long(), w.long())


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_division_by_a_zero_in_the_data_raises_as_torch(dtype):
    """Found by a fresh user: ``A // B`` and ``A % B`` with a 0 in ``B`` gave 0 and ``A`` in the
    kernel while the reference raised torch's bare "ZeroDivisionError" RuntimeError. Both raise
    dt.ZeroDivisorError (a ZeroDivisionError and a ShapeError) naming the expression and where."""
    a = torch.tensor([7, -7, 5, 4, 1, 2, 3], dtype=dtype)
    b = torch.tensor([2, 3, 1, 0, 5, 0, 1], dtype=dtype)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        a // b
    for fn in (dt.compile(int_div_mod), int_div_mod.reference):
        with pytest.raises(dt.ZeroDivisorError, match=r"\(A\[i\] // B\[i\]\): the divisor B\[i\] is 0 at i = 3 "
                                                      r"\(2 elements\).*torch raises ZeroDivisionError.*"
                                                      r"dt.where\(B\[i\] == 0, 1, B\[i\]\)") as info:
            fn(a, b)
        assert isinstance(info.value, ZeroDivisionError) and isinstance(info.value, dt.ShapeError)


def test_integer_division_by_a_zero_argument_raises_naming_it():
    """``X[i // g]`` called with ``g = 0`` raised torch's bare RuntimeError from the reference."""
    X, Y = torch.randn(6, 5), torch.randn(3, 5)
    for fn in (dt.compile(grouped_rows), grouped_rows.reference):
        with pytest.raises(dt.ZeroDivisorError, match=r"\(i // g\): the divisor g is 0;"):
            fn(X, Y, 0)
    out = torch.full((6, 5), float("nan"))
    got = dt.compile(grouped_rows)(X, Y, 2, out=out)
    torch.testing.assert_close(got.double(), X.double() * Y.double()[torch.arange(6) // 2])


@pytest.mark.parametrize("op", ["//", "%"])
def test_a_literal_zero_divisor_is_an_algorithm_error(op):
    with pytest.raises(dt.AlgorithmError, match=rf"\(A\[i\] {op} 0\): an integer {op} by the literal 0 has no value"):
        @dt.algorithm
        def by_zero(A: dt.Tensor["N"]):
            i, = dt.axes("i")
            return (A[i] // 0 if op == "//" else A[i] % 0)[i]


# ----------------------------------------------------------------------------------------------
# maximum / minimum at ties, and ReLU
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def max_min(X: dt.Tensor["M", "N"], Y: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (dt.maximum(X[i, j], Y[i, j]) * 2.0 + dt.minimum(X[i, j], 0.0) * 3.0)[i, j]


@dt.algorithm
def relu(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.where(X[i, j] <= 0.0, 0.0, X[i, j])[i, j]


def _ties(m: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """float64 values drawn from a few, so that ties with each other and with 0 are frequent."""
    pool = torch.tensor([0.0, -0.0, 1.5, -2.0, 0.25], dtype=torch.float64)
    return pool[torch.randint(0, len(pool), (m, n), generator=gen)]


def test_maximum_and_minimum_split_the_gradient_of_a_tie_as_torch():
    """dt.maximum and dt.minimum are torch.maximum and torch.minimum, gradient included: each side
    of a tie gets half (``dt.maximum(x, 0.0)`` at ``x == 0``: 0.5, where F.relu gives 0 and
    torch.clamp(x, min=0) gives 1). Compared with torch's autograd in float64, reference and kernel."""
    g = torch.Generator().manual_seed(3)
    x, y = _ties(5, 7, g), _ties(5, 7, g)
    gy = torch.randn(5, 7, generator=g, dtype=torch.float64)
    xt, yt = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
    ((torch.maximum(xt, yt) * 2.0 + torch.minimum(xt, torch.zeros_like(xt)) * 3.0) * gy).sum().backward()
    ga = dt.grad(max_min)
    ref = ga.reference(x, y, gy)
    torch.testing.assert_close(ref[0], xt.grad)
    torch.testing.assert_close(ref[1], yt.grad)
    assert bool((xt.grad[(x == 0) & (y != 0)] != 0).any())   # ties with the literal 0 do occur
    xk, yk = x.float().requires_grad_(True), y.float().requires_grad_(True)
    (dt.compile(max_min)(xk, yk) * gy.float()).sum().backward()
    torch.testing.assert_close(xk.grad.double(), xt.grad)
    torch.testing.assert_close(yk.grad.double(), yt.grad)


def test_maximum_and_minimum_with_a_nan_give_both_sides_the_gradient_as_torch():
    """Found by the gradient fuzz (seed 3199): where a NaN makes the two sides unordered, torch's
    maximum/minimum pass the whole gradient to both (only a side that loses a true comparison gets
    none); dtriton passed none. Reference and kernel (poisoned) against torch in float64."""
    nan = float("nan")
    a = torch.tensor([nan, 1.0, 2.0, 3.0, nan, -1.0, 0.0], dtype=torch.float64)
    b = torch.tensor([1.0, nan, 2.0, 1.0, nan, 4.0, -0.0], dtype=torch.float64)
    gy = torch.linspace(0.5, 2.0, 7, dtype=torch.float64)
    at, bt = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    ((torch.maximum(at, bt) * 2.0 + torch.minimum(at, torch.zeros_like(at)) * 3.0) * gy).sum().backward()
    ga = dt.grad(max_min)
    args = (a[None], b[None], gy[None])
    ref = ga.reference(*args)
    torch.testing.assert_close(ref[0][0], at.grad)
    torch.testing.assert_close(ref[1][0], bt.grad)
    for name, want in (("X", at.grad), ("Y", bt.grad)):
        ai, oi = ga.locate[name]
        bwd = ga.algorithms[ai]
        outs = tuple(torch.full((1, 7), -9.0, dtype=torch.float64) for _ in bwd.outputs)
        got = dt.compile(bwd)(*args, out=outs if len(outs) > 1 else outs[0])
        torch.testing.assert_close((got if isinstance(got, tuple) else (got,))[oi][0], want)


def test_relu_written_as_a_where_is_f_relu_in_value_and_gradient():
    """``dt.where(x <= 0, 0.0, x)`` is F.relu: 0 gradient at 0, NaN kept, -inf to 0; so is
    ``dtriton.library.linear_relu`` (it was dt.maximum(y, 0.0): gradient 0.5 at y == 0)."""
    from dtriton.library import linear_relu
    g = torch.Generator().manual_seed(4)
    x = _ties(6, 5, g)
    x[0, :3] = torch.tensor([float("nan"), float("-inf"), float("inf")], dtype=torch.float64)
    out = torch.full((6, 5), -5.0)
    got = dt.compile(relu)(x.float(), out=out)
    torch.testing.assert_close(got.double(), torch.relu(x), equal_nan=True)
    torch.testing.assert_close(relu.reference(x), torch.relu(x), equal_nan=True)
    gy = torch.randn(6, 5, generator=g, dtype=torch.float64)
    xt = x.clone().requires_grad_(True)
    (torch.relu(xt) * gy).sum().backward()
    xk = x.float().requires_grad_(True)
    (dt.compile(relu)(xk) * gy.float()).sum().backward()
    torch.testing.assert_close(xk.grad.double(), xt.grad, equal_nan=True)
    # linear_relu with exact zero pre-activations (rows of zeros, zero bias entries)
    X, W, b = torch.randn(5, 6, generator=g), torch.randn(7, 6, generator=g), torch.randn(7, generator=g)
    X[1], b[2] = 0.0, 0.0
    want = [t.double().clone().requires_grad_(True) for t in (X, W, b)]
    (torch.relu(want[0] @ want[1].T + want[2]) * 1.0).sum().backward()
    got = [t.clone().requires_grad_(True) for t in (X, W, b)]
    dt.compile(linear_relu)(*got).sum().backward()
    for w, t in zip(want, got):
        torch.testing.assert_close(t.grad.double(), w.grad, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# messages
# ----------------------------------------------------------------------------------------------
def test_an_axis_named_twice_in_one_axes_call_is_an_error():
    """``dt.axes("i i")`` gave two axes of one name, silently one axis."""
    with pytest.raises(dt.AlgorithmError, match=r"dt.axes\('i j i'\) names axis 'i' twice; .*dt.axes\('i i2'\)"):
        dt.axes("i j i")
    with pytest.raises(dt.AlgorithmError, match=r"names axis 'd' twice"):
        dt.axes("d:N, d")
    assert [a.name for a in dt.axes("i j")] == ["i", "j"]


@pytest.mark.parametrize("builder", [dt.sum, dt.mean, dt.max, dt.prod])
def test_a_reduction_over_an_axis_named_twice_is_an_error(builder):
    """``dt.sum(x, over=(j, j))`` was accepted and then raised torch's "dim 1 appears multiple
    times in the list of dims" RuntimeError from the kernel call and the reference."""
    with pytest.raises(dt.AlgorithmError, match=r"over=\('j', 'j'\)\) names axis 'j' twice.*over=\('j',\)"):
        @dt.algorithm
        def twice(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            return builder(X[i, j], over=(j, j))[i]


def test_a_float_index_is_an_error_naming_the_index_when_the_algorithm_is_defined():
    """``X[i * 0.5]`` said "axis 'i' appears only inside an index expression ... its size is
    unknown" (the axis was not the fault); the index is named now, with the integer spelling."""
    for index in (lambda i: i * 0.5, lambda i: i / 2, lambda i: dt.exp(i), lambda i: i + 0.5):
        with pytest.raises(dt.AlgorithmError, match=r"index 0 of X\[.*\] is not an integer.*i // 2 for half of i"):
            @dt.algorithm
            def half(X: dt.Tensor["N"]):
                i, = dt.axes("i")
                return X[index(i)][i]

    @dt.algorithm
    def halves(X: dt.Tensor["N"], Y: dt.Tensor["M"]):   # the integer spelling works
        i, = dt.axes("i:M")
        return X[i // 2][i]
    X, Y = torch.randn(5), torch.randn(9)
    torch.testing.assert_close(dt.compile(halves)(X, Y, out=torch.full((9,), float("nan"))), X[torch.arange(9) // 2])


def test_a_float_tensor_as_an_index_says_how_to_cast_it():
    """``X[i, X[i, j]]``: a gather by a float tensor is refused at the call, as torch refuses float
    indices; the message gives both fixes (.long() before, dt.cast inside)."""
    @dt.algorithm
    def self_gather(X: dt.Tensor["N", "N"]):
        i, j = dt.axes("i j")
        return X[i, X[i, j]][i, j]

    @dt.algorithm
    def cast_gather(X: dt.Tensor["N", "N"]):
        i, j = dt.axes("i j")
        return X[i, dt.cast(X[i, j], torch.int64)][i, j]

    X = torch.tensor([[0.0, 2.0, 1.0], [1.9, 0.2, 2.0], [2.0, 1.0, 0.0]])
    with pytest.raises(dt.ShapeError, match=r"argument 'X' indexes dim 1 of X \(a gather\) and must be an integer "
                                            r"tensor, got torch.float32; convert it with .long\(\).*dt.cast"):
        dt.compile(self_gather)(X)
    want = X.gather(1, X.long())
    torch.testing.assert_close(dt.compile(cast_gather)(X, out=torch.full((3, 3), float("nan"))), want)
    torch.testing.assert_close(cast_gather.reference(X), want)


@dt.algorithm
def rms(X: dt.Tensor["M", "N"], w: dt.Tensor["N"]):
    i, j = dt.axes("i j")
    ms = dt.mean(X[i, j] * X[i, j], over=j)
    return (X[i, j] * dt.rsqrt(ms + 1e-6) * w[j])[i, j]


def test_an_unknown_backward_schedule_key_lists_the_names_dt_grad_prints():
    """The hint named 'rms_grad_X' and 'rms_grad_w' where dt.grad(rms) prints one algorithm,
    'rms_grad_X_w'; a key in the wrong case had no suggestion; a bad schedule dict did not say
    which entry it was."""
    assert [a.name for a in dt.grad(rms).algorithms] == ["rms_grad_X_w"]
    with pytest.raises(dt.ScheduleError, match=r"unknown key 'ms'\. Valid keys are the tensor input names \['X', 'w'\]"
                                               r".*dt.grad\(rms\) prints \('rms_grad_X_w'; with fewer inputs"):
        dt.compile_autograd(rms, backward_schedules={"ms": dt.Schedule()})
    with pytest.raises(dt.ScheduleError, match=r"unknown key 'x'\. Did you mean 'X'\?"):
        dt.compile_autograd(rms, backward_schedules={"x": dt.Schedule()})
    with pytest.raises(dt.ScheduleError, match=r"unknown key 'rms_grad_X_W'\. Did you mean 'rms_grad_X_w'\?"):
        dt.compile_autograd(rms, backward_schedules={"rms_grad_X_W": dt.Schedule()})
    with pytest.raises(dt.UnknownFieldError, match=r"backward_schedules\['w'\] of rms: .*no field 'tiles'"):
        dt.compile_autograd(rms, backward_schedules={"w": {"tiles": {"i": 4}}})
    for key in ("X", "rms_grad_X_w", "rms_grad_X", "rms_grad_w_X"):
        dt.compile_autograd(rms, backward_schedules={key: dt.Schedule(tile={"i": 2})})


# ----------------------------------------------------------------------------------------------
# gradients of x ** p (a run-time exponent)
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def pow_arg(X: dt.Tensor["M"], p: float):
    i, = dt.axes("i:M")
    return (X[i] ** p)[i]


#: bases whose gradient matches torch's for every finite exponent (x = 0 only for p >= 1, where
#: both give 0, or 1 for p == 1; x = +-inf, NaN and x = 0 with p < 1 differ: see the tutorial)
POW_X = [1.0, -1.0, 1.5, -2.0, 0.25, -0.75, 3.0, -7.0, 2.0]


@pytest.mark.parametrize("p", [2.5, 3.0, 2.0, 1.0, 0.5, -1.0, -0.5, 1.5, -2.0, 7.25])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gradient_of_a_runtime_power_matches_torch(p, dtype):
    """Found checking the x = 0 report: at x == 1 the gradient of ``x ** p`` was 0 (torch: p; the
    value's special case for ``1 ** NaN`` took the gradient too), at a negative base with a
    non-integer p 0 (torch: NaN, the value is NaN). Reference and kernel (poisoned backward output, autograd) against torch.pow's autograd."""
    xs = list(POW_X) + ([0.0, -0.0] if p >= 1 else [])
    x = torch.tensor(xs, dtype=torch.float64)
    gy = torch.linspace(0.5, 1.5, len(xs), dtype=torch.float64)
    xt = x.clone().requires_grad_(True)
    torch.pow(xt, p).backward(gy)
    want = xt.grad
    bwd = dt.grad(pow_arg, "X")
    (ref,) = bwd.reference(x.to(dtype), p, gy.to(dtype))
    tol = dict(rtol=1e-12, atol=0.0) if dtype == torch.float64 else dict(rtol=3e-6, atol=1e-30)
    torch.testing.assert_close(ref.double(), want, equal_nan=True, **tol)
    out = torch.full((len(xs),), -3.0, dtype=dtype)
    dt.compile(bwd["X"])(x.to(dtype), p, gy.to(dtype), out=out)
    torch.testing.assert_close(out.double(), want, equal_nan=True, **tol)
    xk = x.to(dtype).requires_grad_(True)
    dt.compile(pow_arg)(xk, p).backward(gy.to(dtype))
    torch.testing.assert_close(xk.grad.double(), want, equal_nan=True, **tol)


# ----------------------------------------------------------------------------------------------
# the tutorial's claim about partial schedules
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def mm(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    i, j, k = dt.axes("i j k")
    return dt.sum(A[i, k] * B[k, j], over=k)[i, j]


def test_the_tutorials_partial_schedules_do_what_it_says():
    """The tutorial said "the heuristic fills the rest" of any schedule; a grid that leaves an
    output axis off is an error instead (by design: tests/test_errors.py), and the text says so."""
    import pathlib
    text = " ".join((pathlib.Path(__file__).resolve().parents[1] / "docs" / "tutorial.md").read_text().split())
    assert "A grid you give is kept as given, so it must cover every output axis" in text
    A, B = torch.randn(30, 17), torch.randn(17, 20)
    full = dt.compile(mm, dt.Schedule(tile={"i": 16})).schedule_for(A, B)
    assert full.tile["i"] == 16 and {"j", "k"} <= set(full.tile) and full.grid and full.num_warps
    with pytest.raises(dt.ScheduleError, match=r"axis 'j' is neither on the grid \('i',\) nor tiled"):
        dt.compile(mm, dt.Schedule(grid=("i",)))
    for fix in (dict(grid=("i",), tile={"j": 8}), dict(grid=("i",), strategy={"j": "whole"})):
        k = dt.compile(mm, dt.Schedule(**fix))
        torch.testing.assert_close(k(A, B, out=torch.full((30, 20), float("nan"))), A @ B)
        assert k.schedule_for(A, B).grid == ("i",)


@dt.algorithm
def pow_tensor(X: dt.Tensor["M"], P: dt.Tensor["M"]):
    i, = dt.axes("i:M")
    return (X[i] ** P[i])[i]


def test_gradient_of_a_tensor_exponent_at_zero_exponent_and_zero_base_matches_torch():
    """A learnable exponent: at p == 0 its gradient was 0 (torch: log x; the value's x ** 0 == 1
    constant took the gradient), and one x == 0 made it NaN (0 * log 0; torch: 0 for p >= 0),
    which a sum over a channel spreads to the whole channel. Exponents 0, 0.5, 1, 2.5, 3 at bases
    0, 1, 2, 0.5 (and the base gradient beside), reference and kernel against torch.pow."""
    xs, ps = [], []
    for xv in (0.0, 1.0, 2.0, 0.5, 3.0):
        for pv in (0.0, 0.5, 1.0, 2.5, 3.0, -1.5):
            if xv == 0.0 and pv < 0:
                continue   # inf ** ... : torch's gradient in p is -inf there, dtriton's 0 (documented)
            xs.append(xv)
            ps.append(pv)
    x, p = torch.tensor(xs, dtype=torch.float64), torch.tensor(ps, dtype=torch.float64)
    gy = torch.linspace(0.5, 1.5, len(xs), dtype=torch.float64)
    xt, pt = x.clone().requires_grad_(True), p.clone().requires_grad_(True)
    (torch.pow(xt, pt) * gy).sum().backward()
    keep_x = ~((x == 0) & (p < 1))   # dX at x == 0 for p < 1: torch inf, dtriton 0 (documented)
    gx, gp = dt.grad(pow_tensor).reference(x, p, gy)
    torch.testing.assert_close(gp, pt.grad, equal_nan=True)
    torch.testing.assert_close(gx[keep_x], xt.grad[keep_x], equal_nan=True)
    xk, pk = x.float().requires_grad_(True), p.float().requires_grad_(True)
    (dt.compile(pow_tensor)(xk, pk) * gy.float()).sum().backward()
    torch.testing.assert_close(pk.grad.double(), pt.grad, equal_nan=True, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xk.grad.double()[keep_x], xt.grad[keep_x], equal_nan=True, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# a gradient through a sum to a value broadcast along the summed axis
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def row_sum_plus(X: dt.Tensor["M", "N"], b: dt.Tensor["M"], c: dt.Tensor["N"]):
    i, j = dt.axes("i j")
    return dt.sum(X[i, j] + b[i] - 2.0 * c[j], over=j)[i]


@dt.algorithm
def mean_then_sum(X0: dt.Tensor["A"], X3: dt.Tensor["A", "B"]):
    j, l = dt.axes("j l")
    m = dt.mean(X0[l], over=l)
    return m, dt.sum(dt.where(X3[l, j] > 0.0, m, -m) + X3[l, j], over=(l, j))


def test_gradient_of_a_value_broadcast_along_a_summed_axis_counts_every_term():
    """Found by a gradient fuzz (session 7; seed 1004): in ``sum over j of (X[i, j] + b[i])`` the
    gradient of ``b`` was ``bar`` where it is ``N * bar`` (b[i] is one term of each of the N
    summands): the adjoint of a sum's operand is free of the summed axis, and a child that is free
    of it too received one term instead of N. Sizes 3 x 7, 5 x 1; reference, poisoned backward
    kernels and autograd against torch in float64."""
    g = torch.Generator().manual_seed(9)
    for m, n in ((3, 7), (5, 1)):
        X, b, c = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((m, n), (m,), (n,)))
        gy = torch.randn(m, generator=g, dtype=torch.float64)
        ts = [t.clone().requires_grad_(True) for t in (X, b, c)]
        ((ts[0] + ts[1][:, None] - 2.0 * ts[2]).sum(1) * gy).sum().backward()
        ga = dt.grad(row_sum_plus)
        for name, t in zip(("X", "b", "c"), ts):
            ai, oi = ga.locate[name]
            torch.testing.assert_close(_grad_of(ga, name, (X, b, c, gy)), t.grad)
            bwd = ga.algorithms[ai]
            ref = bwd.reference(X, b, c, gy)
            outs = tuple(torch.full_like(r, float("nan")) for r in (ref if isinstance(ref, (list, tuple)) else (ref,)))
            got = dt.compile(bwd)(X, b, c, gy, out=outs if len(outs) > 1 else outs[0])
            got = got if isinstance(got, tuple) else (got,)
            torch.testing.assert_close(got[oi], t.grad)
        dk = [t.float().requires_grad_(True) for t in (X, b, c)]
        (dt.compile(row_sum_plus)(*dk) * gy.float()).sum().backward()
        for d, t in zip(dk, ts):
            torch.testing.assert_close(d.grad.double(), t.grad, rtol=1e-5, atol=1e-5)



def test_a_gradient_constant_along_its_output_axis_builds_and_matches_torch():
    """The fuzz case of seed 1004 reduced: ``m = mean over l of X0[l]`` summed, through a where,
    with ``X3[l, j]`` over (l, j). dX0 is the same for every l; dt.grad raised "returns its output
    indexed [l], but its value ... does not depend on axis 'l'" (the zero carrier term was added
    only when no tensor sized l). Reference against torch (with the fix above, the right value)."""
    g = torch.Generator().manual_seed(10)
    x0, x3 = torch.randn(3, generator=g, dtype=torch.float64), torch.randn(3, 2, generator=g, dtype=torch.float64)
    g0, g1 = torch.tensor(0.7, dtype=torch.float64), torch.tensor(-1.3, dtype=torch.float64)
    a, b3 = x0.clone().requires_grad_(True), x3.clone().requires_grad_(True)
    mm = a.mean()
    o1 = (torch.where(b3 > 0, mm, -mm) + b3).sum()
    (mm * g0 + o1 * g1).backward()
    ga = dt.grad(mean_then_sum)
    args = (x0, x3, g0, g1)
    torch.testing.assert_close(_grad_of(ga, "X0", args), a.grad)
    torch.testing.assert_close(_grad_of(ga, "X3", args), b3.grad)
    for name, want in (("X0", a.grad), ("X3", b3.grad)):
        ai, oi = ga.locate[name]
        got = dt.compile(ga.algorithms[ai])(*args)
        torch.testing.assert_close((got if isinstance(got, tuple) else (got,))[oi], want)


def _grad_of(ga, name, args):
    """The gradient of input ``name`` from the reference of its backward algorithm."""
    ai, oi = ga.locate[name]
    res = ga.algorithms[ai].reference(*args)
    return (res if isinstance(res, (list, tuple)) else (res,))[oi]


@dt.algorithm
def sqrt_abs(X: dt.Tensor["M"], Y: dt.Tensor["M"]):
    i, = dt.axes("i:M")
    return (dt.sqrt(dt.abs(X[i])) + dt.abs(Y[i]) * 2.0)[i]


def test_gradient_of_abs_is_the_upstream_gradient_times_sgn_as_torch():
    """Found by the gradient fuzz (seeds 6529, 6681): torch's abs backward multiplies by sgn(x), so
    an infinite upstream gradient at x == 0 (``sqrt(abs(x))``) gives NaN; dtriton selected 0. At a
    NaN x with a finite upstream gradient both give 0 (sgn(NaN) = 0). Reference and kernel."""
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([0.0, -0.0, 2.0, -3.0, nan, inf, -inf], dtype=torch.float64)
    y = torch.tensor([0.0, -0.0, 2.0, -3.0, nan, inf, -inf], dtype=torch.float64)
    gy = torch.linspace(0.5, 2.0, 7, dtype=torch.float64)
    xt, yt = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
    ((torch.sqrt(torch.abs(xt)) + torch.abs(yt) * 2.0) * gy).sum().backward()
    ga = dt.grad(sqrt_abs)
    for name, want in (("X", xt.grad), ("Y", yt.grad)):
        torch.testing.assert_close(_grad_of(ga, name, (x, y, gy)), want, equal_nan=True)
        ai, oi = ga.locate[name]
        got = dt.compile(ga.algorithms[ai])(x, y, gy)
        torch.testing.assert_close((got if isinstance(got, tuple) else (got,))[oi], want, equal_nan=True)



# ----------------------------------------------------------------------------------------------
# session-7 trial: the gradient of max/min over a slice holding a NaN is NaN for the slice (torch.amax's
# 0 / 0), not 0: a NaN in training must not be hidden in the gradients
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def row_max_min(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.max(X[i, j], over=j)[i], dt.min(X[i, j], over=j)[i]


def test_max_min_gradient_over_a_nan_slice_is_torchs():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(5, 7, generator=g)
    x[1, 3] = float("nan")
    x[3, 0] = x[3, 5] = float("nan")
    x[4, 2] = x[4, 6] = 9.0                       # a tie: split evenly, as torch.amax
    w1, w2 = torch.randn(5, generator=g), torch.randn(5, generator=g)
    X = x.clone().requires_grad_(True)
    mx, mn = dt.compile_autograd(row_max_min)(X)
    (gx,) = torch.autograd.grad((mx * w1).sum() + (mn * w2).sum(), X)
    x64 = x.double().requires_grad_(True)
    (g64,) = torch.autograd.grad((x64.amax(1) * w1.double()).sum() + (x64.amin(1) * w2.double()).sum(), x64)
    assert gx[1].isnan().all() and gx[3].isnan().all()
    torch.testing.assert_close(gx.double(), g64, rtol=1e-6, atol=1e-7, equal_nan=True)
