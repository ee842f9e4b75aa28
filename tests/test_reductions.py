"""dt.prod, dt.argmax and dt.argmin on the interpreter, against torch in float64.

Each kind over fp32/fp16/bf16 and integer inputs, sizes that are not multiples of the tile (primes,
size 1), whole and loop strategies, fused and materialised placement, transposed and expanded
inputs, NaN and +-inf, ties (the first index wins, as torch), argmax feeding a gather, argmax as an
int64 output, and the schedule/algorithm errors. Outputs are poisoned first (``out=``) so a lane the
kernel forgets to write fails the comparison.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

import dtriton as dt

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32]
WHOLE = dt.Schedule(tile={"i": 4}, grid=("i",), strategy={"j": "whole"})
LOOP = dt.Schedule(tile={"i": 4, "j": 16}, grid=("i",), strategy={"j": "loop"})


@dt.algorithm
def row_prod(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.prod(X[i, j], over=j)[i]


@dt.algorithm
def row_argmax(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.argmax(X[i, j], over=j)[i]


@dt.algorithm
def row_argmin(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.argmin(X[i, j], over=j)[i]


KINDS = {"prod": (row_prod, lambda x: x.double().prod(1)),
         "argmax": (row_argmax, lambda x: x.double().argmax(1)),
         "argmin": (row_argmin, lambda x: x.double().argmin(1))}


def poisoned(alg, *args):
    """Output tensors of the right dtype filled with garbage."""
    ref = alg.reference(*args)
    ref = ref if isinstance(ref, (list, tuple)) else [ref]
    outs = []
    for r in ref:
        o = torch.empty_like(r)
        o.fill_(-12345 if not r.dtype.is_floating_point else float("nan"))
        outs.append(o)
    return outs[0] if len(outs) == 1 else tuple(outs)


def run(alg, sched, *args):
    k = dt.compile(alg, sched)
    out = poisoned(alg, *args)
    res = k(*args, out=out)
    return res


def data(kind: str, shape, dtype, gen):
    """Values the kind can reduce exactly: near 1 for a product, small integers (with ties) for
    the arg-reductions."""
    if kind == "prod":
        if dtype == torch.int32:
            return torch.randint(1, 3, shape, generator=gen).to(dtype) * (1 - 2 * torch.randint(0, 2, shape, generator=gen)).to(dtype)
        return (1 + 0.05 * torch.randn(shape, generator=gen)).to(dtype)
    return torch.randint(-4, 5, shape, generator=gen).to(dtype)


def check(kind, y, x):
    expect = KINDS[kind][1](x)
    if kind == "prod":
        tol = {torch.float16: 2e-2, torch.bfloat16: 5e-2}.get(x.dtype, 1e-5)
        torch.testing.assert_close(y.double(), expect.to(y.dtype).double(), rtol=tol, atol=tol)
    else:
        assert y.dtype == torch.int64
        assert torch.equal(y, expect), (y, expect)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sched", [WHOLE, LOOP, None], ids=["whole", "loop", "heuristic"])
def test_kinds_dtypes_strategies(kind, dtype, sched):
    gen = torch.Generator().manual_seed(0)
    x = data(kind, (37, 53), dtype, gen)
    check(kind, run(KINDS[kind][0], sched, x), x)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (5, 1), (3, 64), (13, 31)])
def test_sizes(kind, shape):
    gen = torch.Generator().manual_seed(1)
    x = data(kind, shape, torch.float32, gen)
    for sched in (WHOLE, LOOP):
        check(kind, run(KINDS[kind][0], sched, x), x)


@pytest.mark.parametrize("kind", list(KINDS))
def test_transposed_and_expanded_inputs(kind):
    gen = torch.Generator().manual_seed(2)
    xt = data(kind, (29, 11), torch.float32, gen).t()          # strides (1, 29)
    xe = data(kind, (1, 19), torch.float32, gen).expand(6, 19)  # stride 0 on the rows
    for x in (xt, xe):
        for sched in (WHOLE, LOOP):
            check(kind, run(KINDS[kind][0], sched, x), x)


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
@pytest.mark.parametrize("sched", [WHOLE, LOOP], ids=["whole", "loop"])
def test_nan_inf_and_ties(kind, sched):
    nan, inf = float("nan"), float("inf")
    rows = [[1, 3, 3, 0, 0, 3, 0, 1, 2, 2, 2, 2, 1, 3, 0, 0, 0, 3, 1, 1, 0],  # ties: the first wins
            [1, nan, 3, nan, -inf, inf, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],  # NaN wins (first NaN)
            [-inf] * 21,                                  # all -inf
            [inf] * 21,                                   # all +inf
            [0] * 20 + [inf],                             # +inf in the last (masked-tile) lane
            [0] * 20 + [-inf],
            [nan] * 21]
    x = torch.tensor(rows, dtype=torch.float32)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        check(kind, run(KINDS[kind][0], sched, x.to(dtype)), x.to(dtype))


def test_prod_nan_inf_zero():
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.0, 2.0, inf], [0.0, inf, 1.0], [nan, 1.0, 1.0], [-inf, -1.0, 2.0], [0.0, 5.0, -3.0]])
    for sched in (WHOLE, LOOP):
        y = run(row_prod, sched, x)
        torch.testing.assert_close(y.double(), x.double().prod(1), equal_nan=True)


@dt.algorithm
def argmax_and_value(X: dt.Tensor["M", "N"], S: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    k = dt.argmax(S[i, j], over=j)
    return X[i, k][i], k[i], (k * 2.0 + dt.prod(X[i, j], over=j))[i]


def _argmax_and_value_ref(x, s):
    k = s.double().argmax(1)
    return x.double()[torch.arange(x.shape[0]), k], k, k * 2.0 + x.double().prod(1)


@pytest.mark.parametrize("place", ["fuse", "materialize"])
@pytest.mark.parametrize("strategy", ["whole", "loop"])
def test_gather_by_argmax_and_placement(place, strategy):
    gen = torch.Generator().manual_seed(3)
    x = 1 + 0.05 * torch.randn(19, 41, generator=gen)
    s = torch.randint(-3, 4, (19, 41), generator=gen).float()
    tiles = {"i": 4, "j": 16} if strategy == "loop" else {"i": 4}
    sched = dt.Schedule(tile=tiles, grid=("i",), strategy={"j": strategy}, stages={"argmax0": {"place": place}})
    g, k, v = run(argmax_and_value, sched, x, s)
    eg, ek, ev = _argmax_and_value_ref(x, s)
    assert k.dtype == torch.int64 and torch.equal(k, ek)
    torch.testing.assert_close(g.double(), eg, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(v.double(), ev, rtol=1e-5, atol=1e-5)
    if place == "materialize":
        assert "buf_argmax0" in dt.compile(argmax_and_value, sched).source_for(x, s)


def test_reference_evaluator():
    gen = torch.Generator().manual_seed(4)
    x = torch.randint(-3, 4, (7, 9), generator=gen).float()
    s = torch.randint(-3, 4, (7, 9), generator=gen).float()
    g, k, v = argmax_and_value.reference(x, s)
    eg, ek, ev = _argmax_and_value_ref(x, s)
    assert k.dtype == torch.int64 and torch.equal(k, ek)
    torch.testing.assert_close(g.double(), eg)


@pytest.mark.parametrize("kind", list(KINDS))
def test_split_of_a_product_combines_partials_and_an_arg_reduction_is_a_schedule_error(kind):
    alg, ref = KINDS[kind]
    x = torch.rand(8, 61) + 0.5
    sched = dt.Schedule(tile={"i": 4, "j": 16}, grid=("i",), split={"j": 2}, stages={f"{kind}0": {"place": "materialize"}})
    if kind == "prod":
        k = dt.compile(alg, sched)
        torch.testing.assert_close(k(x).double(), ref(x), rtol=1e-5, atol=0)
        with pytest.raises(dt.ScheduleError, match=r"stage 'prod0' is a prod split over \['j'\] with split_mode='atomic'"):
            dt.compile(alg, sched.replace(split_mode="atomic"))(x)
        return
    with pytest.raises(dt.ScheduleError, match=rf"stage '{kind}0' is an? {kind} over \['j'\]; an arg-reduction's"):
        dt.compile(alg, sched)(x)


@pytest.mark.parametrize("builder", [dt.argmax, dt.argmin])
def test_arg_reduction_over_two_axes_is_an_algorithm_error(builder):
    with pytest.raises(dt.AlgorithmError, match=r"reduces over exactly one axis"):
        @dt.algorithm
        def bad(X: dt.Tensor["M", "N", "K"]):
            i, j, k = dt.axes("i j k")
            return builder(X[i, j, k], over=(j, k))[i]


@pytest.mark.parametrize("zeros", [0, 1, 2])
def test_grad_of_prod_matches_torch_with_zeros(zeros):
    """The derived gradient of a row product equals torch's in float64, also on rows with one
    zero (the product of the others at the zero) and with two (zero); a column of 1 element too."""
    g = torch.Generator().manual_seed(11 + zeros)
    for m, n in ((5, 7), (3, 1), (4, 13)):
        x = (torch.rand(m, n, generator=g, dtype=torch.float64) + 0.5) * torch.where(
            torch.rand(m, n, generator=g) < 0.5, -1.0, 1.0).double()
        for r in range(m):
            x[r, torch.randperm(n, generator=g)[: min(zeros, n)]] = 0.0
        gy = torch.randn(m, generator=g, dtype=torch.float64)
        xt = x.clone().requires_grad_(True)
        (xt.prod(1) * gy).sum().backward()
        ga = dt.grad(row_prod, ["X"])
        got = ga.reference(x, gy)[0]
        torch.testing.assert_close(got, xt.grad)
        xk = x.clone().requires_grad_(True)
        k = dt.compile(row_prod)
        (k(xk) * gy).sum().backward()
        torch.testing.assert_close(xk.grad, xt.grad)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_grad_of_prod_at_zeros_infinities_and_nans_is_the_product_of_the_others(dtype):
    """Found by a fresh user: the gradient of a product at an infinite factor was NaN (``prod / x``
    is inf / inf there); at a zero beside an infinity, 0 (0 * inf is NaN). Each element's gradient
    is now the product of the other elements, torch's value on a tensor with a zero (its exclusive
    prefix and suffix products; without any zero torch divides and gives NaN at inf too). Rows of
    the small cases and random rows with 0, +-inf and NaN; the backward kernel's output poisoned."""
    inf, nan = float("inf"), float("nan")
    cases = [[2.0, inf, 3.0], [2.0, -inf, 3.0], [-inf, -inf, 2.0], [inf, -inf, -0.5], [0.0, inf, 3.0],
             [0.0, 0.0, inf], [inf, 0.0, 0.0], [2.0, nan, 3.0], [0.0, nan, 3.0], [nan, inf, 2.0],
             [0.0, 2.0, 3.0], [0.0, 0.0, 3.0], [2.0, 3.0, 4.0], [-0.0, -inf, 5.0]]
    g = torch.Generator().manual_seed(5)
    pool = torch.tensor([0.0, inf, -inf, nan, 1.5, -0.75, 2.0, -3.0], dtype=torch.float64)
    rand = pool[torch.randint(0, len(pool), (9, 3), generator=g)]
    x = torch.cat([torch.tensor(cases, dtype=torch.float64), rand])
    x = torch.cat([x, torch.full((x.shape[0], 4), 1.25, dtype=torch.float64)], 1)   # N = 7, padded by 1.25s
    x = x[:, torch.randperm(7, generator=g)].to(dtype)
    gy = torch.randn(x.shape[0], generator=g, dtype=torch.float64)
    xt = x.double().clone().requires_grad_(True)
    (xt.prod(1) * gy).sum().backward()
    want = xt.grad
    ga = dt.grad(row_prod, ["X"])
    torch.testing.assert_close(ga.reference(x, gy.to(dtype))[0].double(), want, equal_nan=True)
    bwd = ga["X"]
    out = torch.full_like(x, -777.0)
    dt.compile(bwd)(x, gy.to(dtype), out=out)
    torch.testing.assert_close(out.double(), want, equal_nan=True, rtol=1e-6, atol=0)
    xk = x.clone().requires_grad_(True)
    (dt.compile(row_prod)(xk) * gy.to(dtype)).sum().backward()
    torch.testing.assert_close(xk.grad.double(), want, equal_nan=True, rtol=1e-6, atol=0)


def test_grad_of_a_kind_without_a_rule_names_the_stage():
    import dataclasses

    from dtriton.dsl import reduce
    from dtriton.ir import get_combiner
    nograd = dataclasses.replace(get_combiner("prod"), name="prod_nograd", grad="no_rule_known")

    @dt.algorithm
    def odd(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return reduce(X[i, j], j, nograd, name="odd0")[i]

    with pytest.raises(dt.AlgorithmError, match=r"stage 'odd0'.*prod_nograd"):
        dt.grad(odd, ["X"])


@dt.algorithm
def pick_max_row(X: dt.Tensor["M", "N"], S: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (X[i, dt.argmax(S[i, j], over=j)] * 3.0)[i]


def test_grad_through_a_gather_by_argmax():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(6, 10, generator=gen, dtype=torch.float64)
    s = torch.randn(6, 10, generator=gen, dtype=torch.float64)
    bwd = dt.grad(pick_max_row, ["X", "S"])
    assert "X" in bwd.wrt
    xr = x.clone().requires_grad_()
    (xr[torch.arange(6), s.argmax(1)] * 3.0).sum().backward()
    xg = x.clone().requires_grad_()
    dt.compile_autograd(pick_max_row)(xg, s).sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad)


@settings(max_examples=12, deadline=None)
@given(kind=st.sampled_from(list(KINDS)), m=st.integers(1, 9), n=st.integers(1, 70),
       tile=st.sampled_from([1, 2, 4]), block=st.sampled_from([16, 32, 64]),
       strategy=st.sampled_from(["whole", "loop"]), seed=st.integers(0, 99))
def test_hypothesis_shapes_and_schedules(kind, m, n, tile, block, strategy, seed):
    gen = torch.Generator().manual_seed(seed)
    x = data(kind, (m, n), torch.float32, gen)
    tiles = {"i": tile} if strategy == "whole" else {"i": tile, "j": block}
    sched = dt.Schedule(tile=tiles, grid=("i",), strategy={"j": strategy})
    check(kind, run(KINDS[kind][0], sched, x), x)


def test_int64_values_beyond_float32_are_compared_exactly():
    x = torch.tensor([[2**40 + 1, 2**40 + 3, 2**40 + 2, 2**40 + 3]], dtype=torch.int64)
    for kind in ("argmax", "argmin"):
        check(kind, run(KINDS[kind][0], WHOLE, x), x)


@dt.algorithm
def softmax_stats(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    m = dt.max(X[i, j], over=j)
    s = dt.sum(dt.exp(X[i, j] - m), over=j)
    return s[i], dt.argmax(X[i, j], over=j)[i], dt.argmin(X[i, j], over=j)[i]


def test_arg_reductions_beside_an_online_group():
    gen = torch.Generator().manual_seed(6)
    x = torch.randint(-3, 4, (9, 45), generator=gen).float()
    sched = dt.Schedule(tile={"i": 2, "j": 16}, grid=("i",), strategy={"j": "online"})
    s, am, an = run(softmax_stats, sched, x)
    src = dt.compile(softmax_stats, sched).source_for(x)
    assert "online" in src
    torch.testing.assert_close(s.double(), torch.exp(x.double() - x.double().amax(1, keepdim=True)).sum(1), rtol=1e-5, atol=1e-6)
    assert torch.equal(am, x.argmax(1)) and torch.equal(an, x.argmin(1))


@dt.algorithm
def argmax_and_max(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.argmax(X[i, j], over=j)[i], dt.max(X[i, j], over=j)[i]


def test_output_specs_and_autograd_with_an_index_output():
    from dtriton.integrations.autograd import output_specs
    x = torch.randn(5, 7, requires_grad=True)
    assert [d for _, d in output_specs(argmax_and_max, (x,))] == [torch.int64, torch.float32]
    assert [d for _, d in output_specs(argmax_and_max, (x.detach().to(torch.int32),))] == [torch.int64, torch.int32]
    a, m = dt.compile_autograd(argmax_and_max)(x)
    assert a.dtype == torch.int64 and not a.requires_grad and torch.equal(a, x.detach().argmax(1))
    m.sum().backward()
    torch.testing.assert_close(x.grad, torch.nn.functional.one_hot(x.detach().argmax(1), 7).float())


@dt.algorithm
def argmax_arith(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return (dt.argmax(X[i, j], over=j) * 2.5 + 1)[i]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_index_arithmetic_does_not_take_the_compared_dtype(dtype):
    """An arg-reduction's index in arithmetic is an integer value: the output is not rounded to
    the 16-bit dtype of the values it compares (index 257 is not a bf16 number)."""
    x = torch.zeros(3, 331, dtype=dtype)
    x[0, 330], x[1, 257], x[2, 0] = 1, 1, 1
    out = torch.full((3,), float("nan"))
    got = dt.compile(argmax_arith)(x, out=out)
    want = x.argmax(1) * 2.5 + 1
    assert argmax_arith.reference(x).dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_explore_checks_an_index_output():
    """Exploration poisons integer outputs with -1 (NaN cannot be an int64) and checks them."""
    import warnings
    x = torch.randn(8, 40)
    x[3, 5] = x[3, 9] = 10.0   # a tie: the first index wins
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dt.explore(KINDS["argmax"][0], (x,), budget=20, max_trials=4, progress=False, store=False)
    ok = [r for r in res.table if r["status"] == "ok"]
    assert ok and res.best is not None
    torch.testing.assert_close(dt.compile(KINDS["argmax"][0], res.best)(x), x.argmax(1))


@dt.algorithm
def gather_by_argmax(S: dt.Tensor["M", "N"], V: dt.Tensor["M", "P"]):
    i, j = dt.axes("i j")
    return V[i, dt.argmax(S[i, j], over=j)][i]




def test_computed_index_errors_name_the_stage_and_index():
    """Found by a fresh user: an arg-reduction over an empty axis, an argmax over 50 columns
    indexing a 10-column tensor, and a non-integer index were silent; each is a ShapeError now,
    for the kernel and the reference alike."""
    for fn in (dt.compile(row_argmax), row_argmax.reference):
        with pytest.raises(dt.ShapeError, match=r"stage 'argmax0'.*axis 'j' of size 0"):
            fn(torch.randn(4, 0))
    with pytest.raises(dt.ShapeError, match=r"index 1 of V.*'argmax0' ranges over \[0, 49\].*10 elements"):
        dt.compile(gather_by_argmax)(torch.randn(3, 50), torch.randn(3, 10))
    with pytest.raises(dt.AlgorithmError, match=r"index 1 of X\[i, \(argmax over j of X\[i, j\] \* 0.5\)\] is not an integer"):
        @dt.algorithm
        def half_index(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            return X[i, dt.argmax(X[i, j], over=j) * 0.5][i]
    s, v = torch.randn(3, 10), torch.randn(3, 10)   # the same span fits
    torch.testing.assert_close(dt.compile(gather_by_argmax)(s, v), v.gather(1, s.argmax(1, keepdim=True))[:, 0])


EMPTY_TORCH = {"sum": lambda x: x.sum(1), "mean": lambda x: x.mean(1), "prod": lambda x: x.prod(1),
               "max": lambda x: x.amax(1), "min": lambda x: x.amin(1), "argmax": lambda x: x.argmax(1),
               "argmin": lambda x: x.argmin(1)}


@pytest.mark.parametrize("kind", list(EMPTY_TORCH))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_a_reduction_over_an_empty_axis_is_torchs_value_or_torchs_error(kind, dtype):
    """Found by a fresh user: a max or min over a size-0 axis gave -inf / +inf where torch raises.
    Now each kind does what torch does: the sum 0, the product 1, the mean NaN (kernel with a
    poisoned out= and reference alike); max, min, argmax and argmin raise a ShapeError naming the
    stage and the axis. With no rows the output is empty and nothing is computed: an empty result
    (torch's amax raises there too, but a softmax of empty rows must stay an empty tensor, as
    torch.softmax's: tests/test_multistage.py)."""
    if kind == "mean" and dtype == torch.int32:
        pytest.skip("torch.mean refuses integers")

    @dt.algorithm
    def red(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.reduce(X[i, j], j, kind)[i]

    for m in (3, 0):
        x = torch.zeros(m, 0, dtype=dtype)
        try:
            want = EMPTY_TORCH[kind](x.double() if dtype.is_floating_point else x)
        except (RuntimeError, IndexError):
            if m == 0:
                for fn in (dt.compile(red), red.reference):
                    assert fn(x).shape == (0,)
                continue
            for fn in (dt.compile(red), red.reference):
                with pytest.raises(dt.ShapeError, match=rf"stage '{kind}0' \({kind}\) reduces axis 'j' of size 0.*"
                                                        r"torch raises too.*at least one element"):
                    fn(x)
            continue
        assert kind in ("sum", "mean", "prod")
        ref = red.reference(x)
        out = torch.full_like(ref, -7)
        got = dt.compile(red)(x, out=out)
        for r in (ref, got):
            assert r.shape == (m,) and r.dtype == (torch.int64 if dtype == torch.int32 else dtype)
            torch.testing.assert_close(r.double(), want.double(), equal_nan=True)


@pytest.mark.parametrize("sched", [dict(strategy={"k": "loop"}), dict(tile={"i": 1, "k": 1}),
                                   dict(strategy={"k": "loop"}, tile={"k": 1})], ids=["loop", "tiles1", "loop1"])
@pytest.mark.parametrize("n", [1, 7])
def test_an_arg_reduction_looped_one_index_at_a_time_gathers_right(sched, n):
    """A reduction loop of tile 1 binds a scalar index (the loop variable, a Python int on the
    interpreter): the index an argmax carries must still be a tensor (the fuzzer's case
    ``X1[i, argmax(X0[k], over=k)]`` with sizes 1 failed to launch: ``int`` has no ``to``)."""
    @dt.algorithm
    def gather_argmax(X0: dt.Tensor["A"], X1: dt.Tensor["A", "A"]):
        i, k = dt.axes("i k")
        return X1[i, dt.argmax(X0[k], over=k)][i]

    X0, X1 = torch.randn(n), torch.randn(n, n)
    out = dt.compile(gather_argmax, dt.Schedule(**sched))(X0, X1)
    torch.testing.assert_close(out, X1[:, X0.argmax()], rtol=0, atol=0)


@pytest.mark.parametrize("builder,tfn", [(dt.argmax, torch.argmax), (dt.argmin, torch.argmin)])
@pytest.mark.parametrize("place", ["auto", "fuse"])
def test_an_arg_reduction_looped_one_index_at_a_time_beside_a_wider_value(builder, tfn, place):
    """Fuzz seeds 914376 and 915359 (session 7): an arg-reduction over k in a loop of tile 1 whose
    value has another axis (i, a block of 16) failed to launch on the interpreter ("'dtype' object
    has no attribute 'numel'"): the scalar index was reshaped to the value's block. The index now
    takes the value's shape. Sizes 7 and 31 (not multiples of the tiles); output poisoned."""
    @dt.algorithm
    def arg_plus(X0: dt.Tensor["C"], X1: dt.Tensor["C", "B"]):
        i, k, l = dt.axes("i k l")
        a = builder(X0[k] + X1[k, i], over=k)
        return (a + X1[l, i])[i, l]

    g = torch.Generator().manual_seed(7)
    X0, X1 = torch.randn(7, generator=g), torch.randn(7, 31, generator=g)
    X1[3, :4] = 9.0 if builder is dt.argmax else -9.0   # ties: the first index wins
    X1[5, :4] = 9.0 if builder is dt.argmax else -9.0
    want = (tfn(X0.double()[:, None] + X1.double(), 0)[:, None] + X1.double().T)
    sched = dt.Schedule(tile={"i": 16, "k": 1, "l": 4}, grid=("i", "l"),
                        stages={f"{builder.__name__}0": {"place": place}} if place != "auto" else {})
    out = torch.full((31, 7), float("nan"))
    torch.testing.assert_close(dt.compile(arg_plus, sched)(X0, X1, out=out).double(), want)
    torch.testing.assert_close(arg_plus.reference(X0, X1).double(), want)
