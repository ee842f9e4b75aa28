"""The algorithm language: tracing into IR, stages, axis sizes, and the reference evaluator.

Nothing here launches a kernel: the reference evaluator (``alg.reference``) is the oracle of every
other test, so it is itself checked against plain torch in float64.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, strategies as st

import dtriton as dt
from dtriton.ir import Binary, Const, Load, Reduce, Unary

from conftest import (TORCH_REFS, as64, assert_close, attention, causal_attention, colsum, cross_entropy,
                      layer_norm, linear_relu, log_softmax, matmul, randn, rms_norm, rowmax, softmax,
                      spatial_diffusion)


# ----------------------------------------------------------------------------------------------
# tracing
# ----------------------------------------------------------------------------------------------
def test_axes_are_named_and_split_on_spaces_and_commas():
    i, j, k = dt.axes("i j k")
    assert (i.name, j.name, k.name) == ("i", "j", "k")
    a, b = dt.axes("a, b")
    assert (a.name, b.name) == ("a", "b")
    (x,) = dt.axes("x")
    assert isinstance(x, dt.Axis) and x.axes == ("x",)


@pytest.mark.parametrize("bad", ["", "   ", "1i", "i-j"])
def test_axes_reject_bad_names(bad):
    with pytest.raises(dt.AlgorithmError):
        dt.axes(bad)


def test_matmul_trace_structure():
    assert [p.name for p in matmul.params] == ["A", "B"]
    assert matmul.params[0].dims == ("M", "K")
    assert set(matmul.axis_names) == {"i", "j", "k"}
    assert matmul.axis_size == {"i": "M", "k": "K", "j": "N"}
    assert matmul.reduction_axes == ("k",)
    assert list(matmul.stages) == ["sum0", "out"]
    assert [o.name for o in matmul.outputs] == ["out"]
    assert matmul.outputs[0].layout == ("i", "j")
    assert matmul.stages["out"].is_output and not matmul.stages["sum0"].is_output
    assert matmul.stages["sum0"].free_axes == ("i", "j")


def test_multi_output_names_and_stage_order():
    assert [o.name for o in spatial_diffusion.outputs] == ["out0", "out1"]
    assert spatial_diffusion.outputs[0].layout == ("v", "c")
    assert spatial_diffusion.outputs[1].layout == ("k", "c")
    assert set(spatial_diffusion.reduction_axes) == {"v", "k"}
    assert list(spatial_diffusion.stages)[-2:] == ["out0", "out1"]


def test_auto_stage_names_count_per_op():
    assert list(softmax.stages) == ["max0", "sum0", "out"]
    assert list(layer_norm.stages) == ["mean0", "mean1", "out"]
    assert list(attention.stages) == ["sum0", "max0", "sum1", "sum2", "out"]


def test_named_stage_and_scalar_params():
    @dt.algorithm
    def scaled_rowsum(X: dt.Tensor["M", "N"], alpha: float):
        i, j = dt.axes("i j")
        return (alpha * dt.sum(X[i, j], over=j, name="rowsum"))[i]

    assert "rowsum" in scaled_rowsum.stages
    assert scaled_rowsum.params[1].name == "alpha"
    X = randn(4, 6)
    torch.testing.assert_close(scaled_rowsum.reference(X, 2.5), 2.5 * X.sum(1))
    # calling the algorithm is the reference
    torch.testing.assert_close(scaled_rowsum(X, 2.5), scaled_rowsum.reference(X, 2.5))


def test_string_annotations_are_resolved():
    ns: dict = {}
    exec("from __future__ import annotations\nimport dtriton as dt\n"
         "@dt.algorithm\ndef f(X: dt.Tensor['M'], s: float):\n"
         "    i, = dt.axes('i')\n    return (X[i] * s)[i]\n", ns)
    f = ns["f"]
    x = randn(5)
    torch.testing.assert_close(f.reference(x, 3.0), x * 3.0)


def test_cse_merges_identical_loads():
    @dt.algorithm
    def square(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return (X[i, j] * X[i, j])[i, j]

    loads = [n for n in square.nodes if isinstance(n, Load)]
    assert len(loads) == 1
    mul = [n for n in square.nodes if isinstance(n, Binary)][0]
    assert mul.a is mul.b


def test_small_integer_powers_are_products_and_other_powers_are_pow_nodes():
    @dt.algorithm
    def powers(X: dt.Tensor["M"]):
        (i,) = dt.axes("i")
        return (X[i] ** 2 + X[i] ** 3 + X[i] ** 1.5)[i]

    ops = [(type(n).__name__, getattr(n, "op", None)) for n in powers.nodes]
    assert ("Binary", "mul") in ops and ("Unary", "exp") not in ops
    assert sum(1 for o in ops if o == ("Binary", "pow")) == 1   # only the 1.5 power is a pow node (C's pow)
    x = torch.rand(7, dtype=torch.float64) + 0.5
    torch.testing.assert_close(powers.reference(x), x ** 2 + x ** 3 + x ** 1.5)


def test_integer_power_of_a_negative_base():
    @dt.algorithm
    def cube(X: dt.Tensor["M"]):
        (i,) = dt.axes("i")
        return (X[i] ** 3)[i]

    x = torch.tensor([-2.0, -0.5, 0.0, 1.5], dtype=torch.float64)
    torch.testing.assert_close(cube.reference(x), x ** 3)


def test_fingerprint_is_structural():
    def make():
        @dt.algorithm
        def matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
            i, j, k = dt.axes("i j k")
            return dt.sum(A[i, k] * B[k, j], over=k)[i, j]
        return matmul

    a, b = make(), make()
    assert a.fingerprint == b.fingerprint == matmul.fingerprint

    @dt.algorithm
    def matmul2(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):  # different name and body
        i, j, k = dt.axes("i j k")
        return dt.max(A[i, k] * B[k, j], over=k)[i, j]

    assert matmul2.fingerprint != matmul.fingerprint


def test_scalar_output_without_layout():
    @dt.algorithm
    def total(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.sum(X[i, j], over=(i, j))

    X = randn(3, 5, dtype=torch.float64)
    r = total.reference(X)
    assert r.shape == ()
    torch.testing.assert_close(r, X.sum())


# ----------------------------------------------------------------------------------------------
# algorithm errors
# ----------------------------------------------------------------------------------------------
def test_output_leaving_an_axis_free_is_an_error():
    with pytest.raises(dt.AlgorithmError, match=r"leaves axis \['k'\] free"):
        @dt.algorithm
        def bad(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
            i, j, k = dt.axes("i j k")
            return (A[i, k] * B[k, j])[i, j]


def test_returning_an_expression_with_free_axes_and_no_layout_is_an_error():
    with pytest.raises(dt.AlgorithmError, match=r"must return outputs with a layout"):
        @dt.algorithm
        def bad(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            return X[i, j] * 2
    # an input returned unchanged: the message shows the copy (the read, then the output's layout)
    with pytest.raises(dt.AlgorithmError, match=r"Write `return X\[i, j\]\[i, j\]` \(a copy of the input"):
        @dt.algorithm
        def ident(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            return X[i, j]
    with pytest.raises(dt.AlgorithmError, match=r"must return outputs with a layout, e\.g\..*got str 'C'"):
        @dt.algorithm
        def text(X: dt.Tensor["M", "N"]):
            return "C"


def test_axis_indexing_two_differently_named_dims_is_an_error():
    with pytest.raises(dt.AlgorithmError, match=r"axis 'i' indexes dim 'N' of B but dim 'M' of A"):
        @dt.algorithm
        def bad(A: dt.Tensor["M", "K"], B: dt.Tensor["N", "K"]):
            i, k = dt.axes("i k")
            return dt.sum(A[i, k] * B[i, k], over=k)[i]


def test_wrong_number_of_indices_is_an_error():
    with pytest.raises(dt.AlgorithmError, match=r"A has 2 dims \['M', 'K'\] but is indexed with 3"):
        @dt.algorithm
        def bad(A: dt.Tensor["M", "K"]):
            i, j, k = dt.axes("i j k")
            return A[i, j, k][i, j, k]


def test_reduction_over_an_axis_the_operand_does_not_use():
    with pytest.raises(dt.AlgorithmError, match=r"over axis 'k', which its operand does not use"):
        @dt.algorithm
        def bad(X: dt.Tensor["M", "N"]):
            i, j, k = dt.axes("i j k")
            return dt.sum(X[i, j], over=k)[i, j]


def test_output_layout_repeating_an_axis():
    with pytest.raises(dt.AlgorithmError, match="repeats an axis"):
        @dt.algorithm
        def bad(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            return X[i, j][i, j, i]


def test_output_layout_needs_axes():
    with pytest.raises(dt.AlgorithmError, match="indexed by axes only"):
        @dt.algorithm
        def bad(X: dt.Tensor["M"]):
            (i,) = dt.axes("i")
            return X[i][0]


def test_python_truth_value_of_expression_is_an_error():
    with pytest.raises(dt.AlgorithmError, match=r"dt.where"):
        @dt.algorithm
        def bad(X: dt.Tensor["M"]):
            (i,) = dt.axes("i")
            return (X[i] if X[i] > 0 else -X[i])[i]


def test_missing_annotation_is_an_error():
    with pytest.raises(dt.AlgorithmError, match=r"argument 'X' of bad needs an annotation"):
        @dt.algorithm
        def bad(X):
            (i,) = dt.axes("i")
            return X[i][i]


def test_axis_that_never_indexes_an_input():
    with pytest.raises(dt.AlgorithmError, match=r"axis 'j' never indexes an input dim"):
        @dt.algorithm
        def bad(X: dt.Tensor["M"]):
            i, j = dt.axes("i j")
            return (X[i] + j)[i, j]


def test_duplicate_stage_names():
    with pytest.raises(dt.AlgorithmError, match=r"two stages are named 's'"):
        @dt.algorithm
        def bad(X: dt.Tensor["M", "N"]):
            i, j = dt.axes("i j")
            return (dt.sum(X[i, j], over=j, name="s") + dt.max(X[i, j], over=j, name="s"))[i]


def test_tensor_used_without_indices():
    with pytest.raises(dt.AlgorithmError, match="without indices"):
        @dt.algorithm
        def bad(X: dt.Tensor["M"], Y: dt.Tensor["M"]):
            (i,) = dt.axes("i")
            return (Y[i] + X)[i]


def test_bad_tensor_annotation_and_cast():
    with pytest.raises(dt.AlgorithmError, match="size names"):
        dt.Tensor[3, "N"]
    with pytest.raises(dt.AlgorithmError, match="torch dtype"):
        dt.cast(dt.axes("i")[0], "float16")


def test_algorithm_errors_are_dtriton_errors():
    assert issubclass(dt.AlgorithmError, dt.DTritonError)
    assert issubclass(dt.ShapeError, dt.DTritonError)
    assert issubclass(dt.ScheduleError, dt.DTritonError)
    assert issubclass(dt.CompileError, dt.DTritonError)


# ----------------------------------------------------------------------------------------------
# the reference evaluator against plain torch (float64)
# ----------------------------------------------------------------------------------------------
def _args_for(name: str, gen: torch.Generator, dtype=torch.float64):
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64).to(dtype)  # noqa: E731
    return {
        "matmul": lambda: [r(7, 5), r(5, 3)],
        "linear_relu": lambda: [r(7, 5), r(4, 5), r(4)],
        "softmax": lambda: [r(6, 9)],
        "log_softmax": lambda: [r(6, 9)],
        "layer_norm": lambda: [r(6, 17), r(17), r(17)],
        "rms_norm": lambda: [r(6, 17), r(17)],
        "cross_entropy": lambda: [r(6, 9), torch.randint(0, 9, (6,), generator=gen)],
        "column_sum": lambda: [r(6, 9)],
        "rowmax": lambda: [r(6, 9)],
        "spatial_diffusion": lambda: [r(11, 4), r(11, 3), r(11).abs() + 0.1, r(4).abs(), r(3).abs()],
        "attention": lambda: [r(2, 3, 5, 4), r(2, 3, 7, 4), r(2, 3, 7, 6), 0.4],
        "causal_attention": lambda: [r(2, 3, 5, 4), r(2, 3, 5, 4), r(2, 3, 5, 6), 0.4],
    }[name]()


ALGS = {a.name: a for a in (matmul, linear_relu, softmax, log_softmax, layer_norm, rms_norm, cross_entropy,
                            colsum, rowmax, spatial_diffusion, attention, causal_attention)}


@pytest.mark.parametrize("name", sorted(ALGS))
def test_reference_matches_plain_torch_float64(name, gen):
    alg = ALGS[name]
    args = _args_for(name, gen)
    got = alg.reference(*args)
    want = TORCH_REFS[name](*args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert g.dtype == torch.float64
        assert_close(g, w, 1e-12, what=name)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_reference_output_dtype_follows_inputs(dtype, gen):
    X = randn(4, 6, dtype=dtype, gen=gen)
    assert softmax.reference(X).dtype == dtype
    labels = torch.randint(0, 6, (4,), generator=gen)
    assert cross_entropy.reference(X, labels).dtype == dtype  # integer labels do not promote
    # fp16/bf16 are computed in fp32 and rounded once at the end: at most one rounding off
    want = torch.softmax(X.double(), -1)
    assert_close(softmax.reference(X), want, {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-6}[dtype])


def test_reference_mean_counts_true_extent():
    X = torch.arange(17.0, dtype=torch.float64).reshape(1, 17)
    w, b = torch.ones(17, dtype=torch.float64), torch.zeros(17, dtype=torch.float64)
    y = layer_norm.reference(X, w, b)
    assert_close(y, torch.nn.functional.layer_norm(X, (17,), eps=1e-5), 1e-12)


def test_reference_nan_and_inf_semantics():
    X = torch.randn(3, 5, dtype=torch.float64)
    X[1, 2] = float("nan")
    X[2, :] = -float("inf")
    X[2, 4] = 1.0
    m = rowmax.reference(X)
    assert math.isnan(m[1]) and m[2] == 1.0
    s = softmax.reference(X)
    assert torch.isnan(s[1]).all() and torch.isfinite(s[0]).all()
    assert torch.equal(s[2], torch.tensor([0, 0, 0, 0, 1.0], dtype=torch.float64))


def test_reference_gather_with_integer_labels(gen):
    X = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    for idt in (torch.int64, torch.int32, torch.int16, torch.uint8):
        labels = torch.randint(0, 7, (5,), generator=gen).to(idt)
        assert_close(cross_entropy.reference(X, labels), torch.nn.functional.cross_entropy(X, labels.long(), reduction="none"), 1e-12)


def test_reference_axis_values_mask():
    @dt.algorithm
    def tril(X: dt.Tensor["N", "N"]):
        i, j = dt.axes("i j")
        return dt.where(j <= i, X[i, j], 0.0)[i, j]

    X = torch.randn(6, 6, dtype=torch.float64)
    torch.testing.assert_close(tril.reference(X), X.tril())


def test_reference_empty_dims():
    X = torch.randn(0, 5, dtype=torch.float64)
    assert softmax.reference(X).shape == (0, 5)
    torch.testing.assert_close(colsum.reference(X), torch.zeros(5, dtype=torch.float64))
    assert rowmax.reference(X).shape == (0,)


@given(m=st.integers(1, 9), n=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_reference_softmax_and_layer_norm_property(m, n, seed):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(m, n, generator=g, dtype=torch.float64) * 3
    w, b = torch.randn(n, generator=g, dtype=torch.float64), torch.randn(n, generator=g, dtype=torch.float64)
    assert_close(softmax.reference(X), torch.softmax(X, -1), 1e-12)
    assert_close(log_softmax.reference(X), torch.log_softmax(X, -1), 1e-12)
    assert_close(layer_norm.reference(X, w, b), torch.nn.functional.layer_norm(X, (n,), w, b, eps=1e-5), 1e-12)
    assert_close(as64([colsum.reference(X)])[0], X.sum(0), 1e-12)


def test_binding_reports_sizes_and_dtypes():
    A, B = randn(4, 3), randn(3, 5, dtype=torch.float16)
    b = matmul.bind([A, B])
    assert b.sizes == {"M": 4, "K": 3, "N": 5}
    assert b.axis_sizes == {"i": 4, "k": 3, "j": 5}
    assert b.out_dtypes == [torch.float32]  # fp16 x fp32 promotes to fp32


# ----------------------------------------------------------------------------------------------
# the IR package: rebuild, combiners, walks, CSE, layering
# ----------------------------------------------------------------------------------------------
def _every_node_kind():
    """One node of each kind with the children a rebuild should receive instead of its own."""
    from dtriton.ir import Axis, Cast, InputTensor, ScalarParam, Where
    i, j = Axis("i"), Axis("j")
    X = InputTensor("X", ("M", "N"), 0)
    x, y = X[i, j], X[j, i]
    return [
        (Const(2.5), ()), (Axis("k"), ()), (ScalarParam("alpha", float), ()),
        (Load(X, (i, j)), (Axis("i"), Axis("j"))),
        (Unary("exp", x), (y,)), (Binary("sub", x, y), (y, x)), (Where(x > 0, x, y), (y > 0, y, x)),
        (Cast(x, torch.float16), (y,)),
        (Reduce("max", x, ("j",), "m"), (y,)), (Reduce("sum", x, ("j",), None, mean=True), (y,)),
    ]


@pytest.mark.parametrize("k", range(10))
def test_rebuild_keeps_kind_and_attributes_over_new_children(k):
    node, kids = _every_node_kind()[k]
    new = node.rebuild(kids)
    assert type(new) is type(node) and new is not node
    assert new.signature() == node.signature()
    assert len(new.children()) == len(node.children()) == len(kids)
    assert all(a is b for a, b in zip(new.children(), kids))
    for attr in ("op", "value", "name", "pytype", "tensor", "over", "dtype", "combiner", "mean"):
        if hasattr(node, attr):
            assert getattr(new, attr) == getattr(node, attr) if attr != "tensor" else new.tensor is node.tensor
    if node.children():
        with pytest.raises((ValueError, TypeError)):
            node.rebuild(tuple(kids) + (Const(0.0),))


def test_output_rebuild_keeps_layout_and_name():
    from dtriton.ir import Output
    i, j = dt.axes("i j")
    o = Output(i + j, ("i", "j"), "out")
    e = j + i
    new = o.rebuild((e,))
    assert isinstance(new, Output) and new.children()[0] is e and (new.layout, new.name) == (o.layout, o.name)


def test_combiner_identities_per_dtype():
    from dtriton.ir import get_combiner
    s, mx, mn = get_combiner("sum"), get_combiner("max"), get_combiner("min")
    for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        assert s.identity(d) == 0 and mx.identity(d) == -math.inf and mn.identity(d) == math.inf
    for d in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        assert s.identity(d) == 0 and isinstance(s.identity(d), int)
        assert mx.identity(d) == torch.iinfo(d).min and mn.identity(d) == torch.iinfo(d).max
        x = torch.tensor([3, 1, 2], dtype=d)
        # the identity is neutral for the reference reduction
        assert mx.reference(torch.cat([x, torch.tensor([mx.identity(d)], dtype=d)]), [0]) == 3
        assert mn.reference(torch.cat([x, torch.tensor([mn.identity(d)], dtype=d)]), [0]) == 1
    assert (s.identity(torch.bool), mx.identity(torch.bool), mn.identity(torch.bool)) == (False, False, True)
    assert get_combiner("mean").identity(torch.float32) == 0


def test_combiner_records():
    from dtriton.ir import COMBINERS, Combiner, get_combiner, register_combiner
    assert set(COMBINERS) >= {"sum", "mean", "max", "min"}
    s, m = get_combiner("sum"), get_combiner("mean")
    assert [c for c in ("sum", "mean", "max", "min", "prod", "argmax") if get_combiner(c).splittable] == \
        ["sum", "mean", "max", "min", "prod"]
    assert get_combiner("max").online == "running_max" and s.online == m.online == "rescaled"
    assert get_combiner("min").online is None
    assert (s.grad, m.grad, get_combiner("max").grad, get_combiner("min").grad) == ("sum", "sum", "extremum", "extremum")
    assert {c.name for c in COMBINERS.values() if c.results != 1} == {"argmax", "argmin"}
    assert all(c.results in (1, 2) for c in COMBINERS.values())
    assert s.combine == "a + b" and "tl.maximum(a, b" in get_combiner("max").combine
    assert (s.helper, m.helper, get_combiner("min").helper) == ("_sum_combine", "_sum_combine", "_min_combine")
    assert (s.finalize, m.finalize, m.base) == (None, "count", "sum")
    assert m.combine == s.combine and m.reference is s.reference  # mean is the sum plus a division
    with pytest.raises(KeyError, match="unknown reduction kind 'nope'"):
        get_combiner("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_combiner(Combiner("sum", s.identity, s.combine, s.reference, True, None, "sum"))
    # empty extents reduce to the identity
    e = torch.empty(2, 0, dtype=torch.float64)
    assert torch.equal(get_combiner("max").reference(e, [1]), torch.full((2,), -math.inf, dtype=torch.float64))
    assert torch.equal(get_combiner("min").reference(e, [1]), torch.full((2,), math.inf, dtype=torch.float64))
    assert torch.equal(s.reference(e, [1]), torch.zeros(2, dtype=torch.float64))


def test_mean_is_the_sum_combiner_with_a_count_finalize():
    from dtriton.ir import get_combiner

    @dt.algorithm
    def rowmean(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.mean(X[i, j], over=j)[i]

    assert list(rowmean.stages) == ["mean0", "out"]
    r = rowmean.stages["mean0"].node
    assert r.combiner is get_combiner("mean") and r.combiner.finalize == "count"
    assert r.combiner.base == "sum" and r.combiner.finalize == "count"  # a sum, then the division
    X = randn(5, 7, dtype=torch.float64)
    torch.testing.assert_close(rowmean.reference(X), torch.mean(X, 1))
    # the old constructor spelling builds the same record; a combiner object is accepted too
    i, j = dt.axes("i j")
    T = dt.ir.InputTensor("T", ("M", "N"), 0)
    assert Reduce("sum", T[i, j], ("j",), None, mean=True).combiner is get_combiner("mean")
    assert Reduce(get_combiner("max"), T[i, j], ("j",), None).combiner is get_combiner("max")
    assert Reduce("min", T[i, j], ("j",), None).combiner.finalize is None
    assert not hasattr(Reduce("min", T[i, j], ("j",), None), "op")  # the kind is read from the record only
    with pytest.raises(ValueError, match="mean=True"):
        Reduce("max", T[i, j], ("j",), None, mean=True)


def test_walks():
    from dtriton.ir import (InputTensor, contains, expr_axes, float_inputs, mul_factors, reduces_in, topo_order,
                            walk)
    i, j, k = dt.axes("i j k")
    A, B, lab = InputTensor("A", ("M", "K"), 0), InputTensor("B", ("K", "N"), 1), InputTensor("L", ("M",), 2)
    a, b = A[i, k], B[k, j]
    s = dt.sum(a * b * 2.0, over=k)
    m = dt.max(s + A[i, lab[i]], over=j)
    order = topo_order([m])
    pos = {n.uid: p for p, n in enumerate(order)}
    assert all(pos[c.uid] < pos[n.uid] for n in order for c in n.children())
    assert order[-1] is m and len({n.uid for n in order}) == len(order)
    # walk: a parent before its children, each node once; stop visits but does not enter
    w = list(walk([m]))
    assert w[0] is m and {n.uid for n in w} == set(pos)
    w2 = list(walk([m], stop=lambda n: n is s))
    assert any(n is s for n in w2) and not any(n is a for n in w2)
    assert [r.name for r in reduces_in([m], set())] == [None, None] and reduces_in([m], {s.uid}) == [m, s]
    assert reduces_in([s, m], {s.uid}) == [s, m]  # a materialised root is entered
    assert mul_factors(s.x)[:2] == [a, b] and len(mul_factors(s.x)) == 3 and mul_factors(a) == [a]
    assert contains(m, b) and not contains(m, b, stop=lambda n: n is s) and not contains(s, m)
    assert expr_axes(m) == ["i", "k", "j"]  # first seen, children first
    assert sorted(float_inputs(m)) == ["A", "A", "B"]  # the gather index L does not set the dtype
    assert float_inputs(dt.cast(A[i, k], torch.float16)) == []


def test_cse_rebuilds_parents_of_merged_nodes_and_keeps_the_rest():
    from dtriton.ir import InputTensor, cse, fmt
    i, j = dt.axes("i j")
    X = InputTensor("X", ("M", "N"), 0)
    left, right = dt.exp(X[i, j]), dt.exp(X[i, j])
    root = left + right
    remap = cse([root])
    new = remap[root.uid]
    assert new is not root and new.a is new.b and new.a is left   # the second exp merged into the first
    assert left.uid not in remap and root.a is left                # untouched nodes keep identity
    assert fmt(new) == "(exp(X[i, j]) + exp(X[i, j]))"
    assert cse([left]) == {}


def test_ir_layering():
    """The IR imports only errors and torch, never triton or a later layer; no compiler module
    imports the DSL (only the package facade and the temporary language shim do)."""
    import ast
    import pathlib
    src = pathlib.Path(dt.__file__).parent
    for f in sorted((src / "ir").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 or node.module == "errors", (f.name, node.module)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(n.split(".")[0] in ("triton", "dtriton") for n in names), (f.name, names)
    for f in sorted(src.rglob("*.py")):
        if f.name in ("__init__.py", "language.py", "dsl.py", "library.py") and f.parent == src:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}"] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any(n in ("dsl", "None.dsl", "dtriton.dsl") for n in names), (f, names)
