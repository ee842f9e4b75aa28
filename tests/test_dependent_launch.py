"""Programmatic dependent launch (``plan.dependent_launch``): which kernels get it, where the printed
grid-dependency control goes, the launch option, the knob's note, and the printed kernels compiled for
sm_90 by Triton's own ptxas (no GPU here: the interpreter has no grid-dependency control, so every
interpreter call plans without it and the results below are checked against float64 as usual)."""
from __future__ import annotations

import dataclasses
import re
import warnings

import pytest
import torch

import dtriton as dt
from conftest import rel_err
from dtriton.backends.triton.kernel import render
from dtriton.backends.triton.launch import launch
from dtriton.library import attention, batch_norm, frobenius_normalize, matmul, softmax
from dtriton.plan.callspec import call_spec
from dtriton.plan.decide import plan_program

WAIT = "tl.extra.cuda.gdc_wait()"
SIGNAL = "tl.extra.cuda.gdc_launch_dependents()"


def gpu_plan(alg, args, sched=None, arch=90):
    """The program of a call planned as on a GPU of compute capability ``arch`` (CPU tensors standing in)."""
    b = dataclasses.replace(alg.bind(args), device=torch.device("cuda"))
    full = dt.compile(alg, sched).complete(b)
    spec = dataclasses.replace(call_spec(alg, b, args, False), arch=arch)
    return plan_program(alg, full, b, spec)


def bodies(source: str, names) -> dict[str, list[str]]:
    """The statements after the docstring of each kernel ``names`` of printed module ``source``."""
    out = {}
    for name in names:
        chunk = source.split(f"\ndef {name}(", 1)[1].split("\n@_jit", 1)[0]
        after = chunk.split('"""', 2)[2]
        out[name] = [ln.strip() for ln in after.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return out


CASES = {
    "frobenius": (frobenius_normalize, lambda: (torch.randn(8, 16, 64, 67),)),
    "batch norm": (batch_norm, lambda: (torch.randn(33, 4, 64, 65), torch.randn(4), torch.randn(4))),
    "softmax": (softmax, lambda: (torch.randn(5, 300),)),
    "split-K matmul": (matmul, lambda: (torch.randn(8, 96), torch.randn(96, 16))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_kernel_waits_first_then_signals_on_sm90(case):
    alg, make = CASES[case]
    sched = dt.Schedule(split={"k": 3}, split_mode="partials") if case == "split-K matmul" else None
    prog = gpu_plan(alg, make(), sched)
    assert len(prog.kernels) >= (1 if case == "softmax" else 2), [k.name for k in prog.kernels]
    assert all(k.dependent_launch and k.launch_dependents for k in prog.kernels)
    src, metas = render(prog)
    body = bodies(src, [m.name for m in metas])
    for name, lines in body.items():
        # the wait before anything that touches memory (loads, stores, atomics, descriptors); then the signal
        # (only the restated sizes, integer arithmetic on arguments, may come first)
        w = next(i for i, ln in enumerate(lines) if WAIT in ln)
        assert all(re.fullmatch(r"(\w+) = \1 // \d+ \* \d+", ln) for ln in lines[:w]), (name, lines[:w])
        assert SIGNAL in lines[w + 1], (name, lines[w:w + 2])   # (small shapes: every kernel signals)
        touches = [i for i, ln in enumerate(lines) if re.search(r"tl\.(load|store|atomic_\w+|make_tensor_descriptor)\(", ln)]
        assert touches and min(touches) > w + 1, name
        assert sum(WAIT in ln for ln in lines) == 1 and sum(SIGNAL in ln for ln in lines) == 1, name


@pytest.mark.parametrize("arch, interpret, asked", [(80, False, None), (90, True, None), (90, False, False),
                                                    (0, True, True)])
def test_off_before_sm90_on_the_interpreter_and_when_asked_off(arch, interpret, asked):
    x = torch.randn(2, 3, 5, 7)
    b = frobenius_normalize.bind((x,))
    if not interpret:
        b = dataclasses.replace(b, device=torch.device("cuda"))
    full = dt.compile(frobenius_normalize, dt.Schedule(dependent_launch=asked)).complete(b)
    spec = dataclasses.replace(call_spec(frobenius_normalize, b, (x,), interpret), arch=arch)
    prog = plan_program(frobenius_normalize, full, b, spec)
    assert not any(k.dependent_launch or k.launch_dependents for k in prog.kernels)
    src, _ = render(prog)
    assert "gdc_" not in src
    assert bool(prog.launch_note) == (asked is True)


def test_asking_for_it_on_the_interpreter_warns_and_computes_the_same():
    x = torch.randn(3, 4, 9, 5, dtype=torch.float32)
    ref = x.double() / x.double().pow(2).sum().sqrt()
    with pytest.warns(dt.ScheduleWarning, match=r"dependent_launch=True has no effect: Triton's interpreter"):
        got = dt.compile(frobenius_normalize, dt.Schedule(dependent_launch=True))(x)
    assert rel_err(got, ref) < 1e-6
    with warnings.catch_warnings():   # the default (None) never warns
        warnings.simplefilter("error", dt.ScheduleWarning)
        assert rel_err(dt.compile(frobenius_normalize)(x), ref) < 1e-6


@pytest.mark.parametrize("arch, why", [(80, r"compute capability is 8\.0; programmatic dependent launch needs 9\.0"),
                                       (90, r"Gluon kernels, launched without it")])
def test_the_note_names_why(arch, why):
    q = tuple(torch.randn(1, 2, 128, 64).half() for _ in range(3))
    prog = gpu_plan(attention, (*q, 0.125), dt.Schedule(dependent_launch=True, warp_specialize=True), arch=arch)
    if arch == 90:   # the forward is one Gluon kernel: launched plainly (the next kernel still waits)
        assert [k.gluon is not None for k in prog.kernels] == [True]
    assert re.search(why, prog.launch_note), prog.launch_note


def test_launch_asks_triton_for_the_attribute_only_on_the_gpu():
    seen = []

    class Fn:
        def __getitem__(self, grid):
            return lambda *a, **kw: seen.append((grid, kw))
    launch(Fn(), (4, 2), [], {"BLOCK": 8}, 4, 2, False, 0, True)
    launch(Fn(), 3, [], {}, 4, 2, False, 0, False)
    assert seen[0] == ((4, 2), {"BLOCK": 8, "num_warps": 4, "num_stages": 2, "launch_pdl": True})
    assert seen[1] == ((3,), {"num_warps": 4, "num_stages": 2})


def test_printed_control_compiles_for_sm90(tmp_path):
    """Triton 3.6 compiles the printed lines for sm_90: griddepcontrol.wait before the first global access of
    both Frobenius kernels; the statistics kernel (512 programs) signals, the output kernel (65536, over
    :data:`~dtriton.plan.dependent_launch.MAX_PROGRAMS`) does not."""
    pytest.importorskip("triton")
    from conftest import run_bench
    out = run_bench(["bench/sm90_compile.py", "--cases", "fro", "--dtypes", "float32"], tmp_path)
    ptx = {p.name: p.read_text() for p in (tmp_path / "out").glob("frobenius_normalize_*_fp32.ptx")}
    assert sorted(ptx) == ["frobenius_normalize_out_fp32.ptx", "frobenius_normalize_sum0_fp32.ptx"], out
    for name, text in ptx.items():
        assert text.count("griddepcontrol.wait") == 1, name
        assert text.index("griddepcontrol.wait") < min(text.index(op) for op in ("ld.global", "st.global") if op in text)
    assert ptx["frobenius_normalize_sum0_fp32.ptx"].count("griddepcontrol.launch_dependents") == 1
    assert "griddepcontrol.launch_dependents" not in ptx["frobenius_normalize_out_fp32.ptx"]


def test_only_kernels_of_few_programs_signal():
    """A signal in each program of a kernel that may launch more than MAX_PROGRAMS programs on a call it
    serves (its size buckets) costs more than it gains: such a kernel waits but does not signal."""
    from dtriton.plan.dependent_launch import MAX_PROGRAMS
    prog = gpu_plan(frobenius_normalize, (torch.randn(16, 64, 256, 256),))
    bounds = {k.name: k.launch_programs(k.size_buckets) for k in prog.kernels}
    assert [k.launch_dependents for k in prog.kernels] == [b <= MAX_PROGRAMS for b in bounds.values()] == [True, False], bounds
    assert all(k.dependent_launch for k in prog.kernels)


@pytest.mark.parametrize("hip, arch", [(None, 94), ("6.2", 0)])
def test_a_rocm_gpu_has_no_cuda_capability(monkeypatch, hip, arch):
    """ROCm reports AMD's architecture through torch's capability query (an MI300 is (9, 4)): the call
    spec records none there, so no NVIDIA-only choice (dependent launch, Gluon kernels) applies."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 4))
    monkeypatch.setattr(torch.version, "hip", hip)
    x = torch.randn(3, 4, 5, 6)
    b = dataclasses.replace(frobenius_normalize.bind((x,)), device=torch.device("cuda"))
    assert call_spec(frobenius_normalize, b, (x,), False).arch == arch
