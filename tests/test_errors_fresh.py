"""Messages for the mistakes a new user makes (session-4 fresh-user trial and a round of wrong
inputs): each names the argument, axis or field, says what was expected and how to fix it, and is
raised by dtriton (never a raw AttributeError, TypeError from a comparison or JSONDecodeError).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import dtriton as dt

from conftest import matmul, softmax


def test_output_indexed_by_an_axis_its_value_does_not_depend_on():
    i, j = dt.axes("i j")
    with pytest.raises(dt.AlgorithmError) as info:
        @dt.algorithm
        def free_axis(X: dt.Tensor["M", "N"]):
            return dt.sum(X[i, j], over=j)[i, j]
    msg = str(info.value)
    assert msg.startswith("free_axis returns its output indexed [i, j], but its value, `sum over j of X[i, j]`, "
                          "does not depend on axis 'j', and outputs are not broadcast. Index it [i] instead")
    assert "output out " not in msg   # a name the user never gave
    with pytest.raises(dt.AlgorithmError, match=r"two returns output number 2 \(of 2\) indexed \[i, j\].* "
                                                r"does not depend on axis 'j'.*Index it \[i\] instead"):
        @dt.algorithm
        def two(X: dt.Tensor["M", "N"]):
            return X[i, j][i, j], dt.max(X[i, j], over=j)[i, j]


@pytest.mark.parametrize("t", [0, -4])
def test_tile_below_one_says_so(t):
    with pytest.raises(dt.ScheduleError, match=rf"^tile\['i'\] = {t} must be at least 1 \(a power of two"):
        dt.Schedule(tile={"i": t})
    with pytest.raises(dt.ScheduleError, match=rf"stages\['sum0'\]\.tile\['k'\] = {t} must be at least 1"):
        dt.Schedule(stages={"sum0": {"tile": {"k": t}}})


def test_reduced_axis_on_the_grid_warns_and_still_computes():
    """softmax with j on the grid: the row statistics cannot be fused (no program sees a whole
    row), so they run as kernels of their own. Right, but probably not meant: a warning."""
    X = torch.randn(5, 24)
    with pytest.warns(dt.ScheduleWarning, match=r"softmax: the grid \('i', 'j'\) of output out maps axis 'j' to "
                                                r"program ids, but stages 'max0', 'sum0' reduce over it.*"
                                                r"Take 'j' off the grid \(grid=\('i',\)\)"):
        k = dt.compile(softmax, dt.Schedule(grid=("i", "j"), tile={"i": 4, "j": 8}))
    torch.testing.assert_close(k(X), torch.softmax(X.double(), -1).float())
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        dt.compile(softmax, dt.Schedule(grid=("i",), strategy={"j": "whole"}))   # the fused plan
        dt.compile(softmax)                                         # the heuristic's
        dt.compile(matmul, dt.Schedule(grid=("i", "j")))          # k is not on the grid
        dt.compile(softmax, dt.Schedule(grid=("i", "j"), tile={"i": 4, "j": 8},    # said so: no warning
                                        stages={"max0": {"place": "materialize"}, "sum0": {"place": "materialize"}}))
        dt.compile(softmax, k.schedule_for(X))                      # a complete schedule: chosen, not guessed


def test_schedule_given_as_a_dict_or_text():
    with pytest.raises(TypeError, match=r"got a dict; build one with dt.Schedule\(\*\*\{'tile': \{'i': 4\}\}\)"):
        dt.compile(softmax, {"tile": {"i": 4}})
    with pytest.raises(TypeError, match=r"use dt.Schedule.from_json\(text\)"):
        dt.compile(softmax, '{"tile": {"i": 4}}')
    with pytest.raises(TypeError, match=r"got 'heuristic'; leave it out \(or None\) for the heuristic's schedule"):
        dt.compile(softmax, "heuristic")
    with pytest.raises(dt.ScheduleError, match=r"a schedule's JSON does not parse .*expected an object such as"):
        dt.Schedule.from_json("{tile: 4}")
    with pytest.raises(dt.ScheduleError, match=r"must be an object of fields .*got list \[1, 2\]"):
        dt.Schedule.from_json("[1, 2]")
    assert dt.Schedule.from_json('{"tile": {"i": 4}}') == dt.Schedule(tile={"i": 4})


def test_axes_takes_a_string():
    with pytest.raises(dt.AlgorithmError, match=r"dt.axes takes one string of axis names, e.g. dt.axes\('i j k'\), "
                                                r"got int 3"):
        dt.axes(3)
    with pytest.raises(dt.AlgorithmError, match=r"got list \['i', 'j'\]"):
        dt.axes(["i", "j"])


def test_missing_or_torch_annotation():
    i, j = dt.axes("i j")
    with pytest.raises(dt.AlgorithmError, match=r"argument 'X' of f needs an annotation: dt.Tensor\['M', 'N'\] for a "
                                                r"tensor \(one size name per dim\), or float / int for a scalar; it "
                                                r"has none$"):
        @dt.algorithm
        def f(X):
            return X[i, j][i, j]
    with pytest.raises(dt.AlgorithmError, match=r"it has torch.Tensor, which does not name its dims$"):
        @dt.algorithm
        def g(X: torch.Tensor):
            return X[i, j][i, j]


def test_tensor_passed_for_a_scalar_argument():
    i, j = dt.axes("i j")

    @dt.algorithm
    def scale(X: dt.Tensor["M", "N"], s: float):
        return (X[i, j] * s)[i, j]
    k = dt.compile(scale)
    X = torch.randn(3, 5)
    with pytest.raises(dt.ShapeError, match=r"argument 's' of scale is a scalar \(float\); got Tensor of shape \(\); "
                                            r"pass a Python number \(x.item\(\) for a one-element tensor\)"):
        k(X, torch.tensor(2.0))
    with pytest.raises(dt.ShapeError, match=r"got Tensor of shape \(2,\); declare the argument dt.Tensor\[...\]"):
        k(X, torch.tensor([1.0, 2.0]))
    with pytest.raises(dt.ShapeError, match=r"is a scalar \(float\); got str$"):
        k(X, "2")
    torch.testing.assert_close(k(X, 2.0), X * 2)


def test_tensor_requiring_grad_passed_for_a_scalar_argument_names_the_tensor_parameter_fix():
    i, j = dt.axes("i j")

    @dt.algorithm
    def scaled(X: dt.Tensor["M", "N"], alpha: float):
        return dt.tanh(X[i, j] * alpha)[i, j]
    X = torch.randn(3, 4, dtype=torch.float64)
    a = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    for k in (dt.compile(scaled), dt.compile_autograd(scaled)):
        with pytest.raises(dt.ShapeError, match=r"got Tensor of shape \(\) that requires grad; .*x\.item\(\)\), which "
                                                r"has no gradient\. For a learnable scalar declare a tensor parameter "
                                                r"\(alpha: dt\.Tensor\[\"one\"\], read alpha\[0\]"):
            k(X.float(), a)

    @dt.algorithm
    def scaled_t(X: dt.Tensor["M", "N"], alpha: dt.Tensor["one"]):   # the fix the message gives
        return dt.tanh(X[i, j] * alpha[0])[i, j]
    up = torch.randn(3, 4, dtype=torch.float64)
    (dt.compile_autograd(scaled_t)(X.float(), a.float().reshape(1)) * up.float()).sum().backward()
    want = torch.autograd.grad((torch.tanh(X * a) * up).sum(), a)[0]
    assert a.grad is not None and abs(a.grad.item() - want.item()) < 1e-4 * max(1.0, abs(want.item()))


def test_argument_count_in_words():
    with pytest.raises(dt.ShapeError, match=r"softmax takes 1 argument \['X'\], got 2"):
        dt.compile(softmax)(torch.randn(2, 3), torch.randn(2, 3))


def test_budget_that_is_not_a_number():
    X = torch.randn(2, 3)
    for bad in ("a", None, -1, True):
        with pytest.raises(ValueError, match=rf"budget must be a number of seconds >= 0, got {bad!r}"):
            dt.explore(softmax, (X,), budget=bad, store=False, progress=False)


def test_algorithm_errors_show_the_users_frames(monkeypatch):
    """An AlgorithmError's traceback runs from the decorated line to the line of the function at
    fault, not through dtriton's tracer (one frame of dt.algorithm re-raising it stays)."""
    import os
    import traceback
    i, j = dt.axes("i j")

    def trace():
        @dt.algorithm
        def f(X: dt.Tensor["M", "N"]):
            y = X[i]
            return y[i]

    pkg = os.path.dirname(os.path.abspath(dt.__file__))
    with pytest.raises(dt.AlgorithmError, match=r"X has 2 dims \['M', 'N'\] but is indexed with 1") as info:
        trace()
    frames = traceback.extract_tb(info.value.__traceback__)
    ours = [fr for fr in frames if os.path.abspath(fr.filename).startswith(pkg)]
    assert [(os.path.basename(fr.filename), fr.name) for fr in ours] == [("dsl.py", "algorithm")]
    assert frames[-1].line == "y = X[i]"
    monkeypatch.setenv("DTRITON_FULL_TRACEBACKS", "1")
    with pytest.raises(dt.AlgorithmError) as info:
        trace()
    assert len([fr for fr in traceback.extract_tb(info.value.__traceback__)
                if os.path.abspath(fr.filename).startswith(pkg)]) > 2


@dt.algorithm
def _bool_neg(B: dt.Tensor["M"], X: dt.Tensor["M"]):
    i, = dt.axes("i:M")
    return (-B[i])[i]


@dt.algorithm
def _bool_sub(B: dt.Tensor["M"], X: dt.Tensor["M"]):
    i, = dt.axes("i:M")
    return (B[i] - X[i])[i]


@dt.algorithm
def _one_minus(B: dt.Tensor["M"], X: dt.Tensor["M"]):
    i, = dt.axes("i:M")
    return (1 - B[i])[i]


@dt.algorithm
def _bool_abs(B: dt.Tensor["M"], X: dt.Tensor["M"]):
    i, = dt.axes("i:M")
    return dt.abs(B[i])[i]


@dt.algorithm
def _cmp_neg(B: dt.Tensor["M"], X: dt.Tensor["M"]):
    i, = dt.axes("i:M")
    return (-(X[i] > 0))[i]


@pytest.mark.parametrize("alg,x_bool,match", [
    (_bool_neg, False, r"-B\[i\] negates B\[i\], which is torch.bool.*Negation.*~B\[i\].*-dt.cast\(B\[i\], torch.int64\)"),
    (_cmp_neg, False, r"negates \(X\[i\] > 0\), which is torch.bool.*~\(X\[i\] > 0\)"),
    (_bool_sub, True, r"\(B\[i\] - X\[i\]\): B\[i\] and X\[i\] are both torch.bool.*Subtraction.*\(B\[i\] != X\[i\]\)"
                      r".*B\[i\] & ~X\[i\].*dt.cast\(B\[i\], torch.int64\) - dt.cast\(X\[i\], torch.int64\)"),
    (_bool_sub, False, r"\(B\[i\] - X\[i\]\): B\[i\] is torch.bool.*Subtraction.*~B\[i\]"),
    (_one_minus, False, r"\(1 - B\[i\]\): B\[i\] is torch.bool.*~B\[i\].*1 - dt.cast\(B\[i\], torch.int64\)"),
    (_bool_abs, False, r"abs\(B\[i\]\).*torch.bool.*\"abs\" not implemented for 'Bool'.*drop dt.abs"),
])
def test_bool_negation_subtraction_and_abs_raise_as_torch(alg, x_bool, match):
    # -B, B - C and abs(B) of bool values failed inside Triton (a CompileError blaming the schedule) and the
    # reference computed a value; torch raises for each
    g = torch.Generator().manual_seed(4)
    b = torch.rand(7, generator=g) > 0.5
    x = torch.rand(7, generator=g) > 0.5 if x_bool else torch.randint(-5, 5, (7,), generator=g)
    eager = {_bool_neg: lambda: -b, _cmp_neg: lambda: -(x > 0), _bool_sub: lambda: b - x, _one_minus: lambda: 1 - b,
             _bool_abs: lambda: torch.abs(b)}[alg]
    with pytest.raises(RuntimeError, match="not supported|Bool"):
        eager()
    with pytest.raises(dt.AlgorithmError, match=match):
        dt.compile(alg)(b, x)
    with pytest.raises(dt.AlgorithmError, match=match):
        alg.reference(b, x)


def test_bool_fixes_the_message_names_match_torch():
    # the rewrites the messages suggest run, with torch's values and dtypes
    @dt.algorithm
    def fixes(B: dt.Tensor["M"], C: dt.Tensor["M"]):
        i, = dt.axes("i:M")
        bi, ci = dt.cast(B[i], torch.int64), dt.cast(C[i], torch.int64)
        return (~B[i])[i], (B[i] != C[i])[i], (B[i] & ~C[i])[i], (bi - ci)[i], (-bi)[i], (1 - bi)[i]

    g = torch.Generator().manual_seed(6)
    b, c = torch.rand(9, generator=g) > 0.5, torch.rand(9, generator=g) > 0.5
    bi, ci = b.long(), c.long()
    wants = (~b, b ^ c, b & ~c, bi - ci, -bi, 1 - bi)
    outs = tuple(torch.full(w.shape, 3, dtype=w.dtype) for w in wants)   # poisoned
    for got in (dt.compile(fixes)(b, c, out=outs), fixes.reference(b, c)):
        for v, w in zip(got, wants):
            assert v.dtype == w.dtype and torch.equal(v, w), (v, w)


def test_xor_is_refused_with_what_to_write_instead():
    # the second fresh-user trial of s9: B[i] ^ C[i] was a raw TypeError from Python at definition
    for make in (lambda B, C, i: B[i] ^ C[i], lambda B, C, i: True ^ B[i], lambda B, C, i: B[i] ^ 1):
        with pytest.raises(dt.AlgorithmError, match=r"'\^' \(exclusive or\) is not supported.*\(a != b\)"):
            @dt.algorithm
            def g(B: dt.Tensor["N"], C: dt.Tensor["N"]):
                i, = dt.axes("i")
                return make(B, C, i)[i]
    # what the message suggests gives torch's bool xor
    @dt.algorithm
    def ne(B: dt.Tensor["N"], C: dt.Tensor["N"]):
        i, = dt.axes("i")
        return (B[i] != C[i])[i]
    b, c = torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False])
    got = dt.compile(ne)(b, c)
    assert got.dtype == torch.bool and torch.equal(got, b ^ c)


def test_an_algorithm_pickled_in_main_and_loaded_elsewhere_says_to_define_it_in_a_module():
    """A script's (or notebook's) algorithm pickles by reference to ``__main__``; a program whose
    ``__main__`` lacks it (here pytest's) cannot load it: the error says where it was defined and the fix."""
    import os
    import pathlib
    import pickle
    import subprocess
    import sys
    script = ("import pickle, sys, dtriton as dt\n"
              "@dt.algorithm\n"
              "def cell_alg(X: dt.Tensor['M']):\n"
              "    i = dt.axes('i')\n"
              "    return (X[i] * 2.0)[i]\n"
              "sys.stdout.buffer.write(pickle.dumps(dt.compile(cell_alg)))\n")
    src = str(pathlib.Path(dt.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    with pytest.raises(pickle.UnpicklingError, match=r"cannot load the algorithm cell_alg: it was defined in __main__ "
                                                     r"\(a script or notebook\).*Define it in an importable module"):
        pickle.loads(r.stdout)
