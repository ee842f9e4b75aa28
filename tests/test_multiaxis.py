"""Reductions over several axes (issue 16): default schedules that run and match float64 torch.

The GPU heuristic is exercised on the interpreter (the binding is told it is on CUDA) with its
block budgets shrunk (``ROW_BLOCK``, ``STEP_BLOCK``), so the shapes the interpreter can reach take
the paths that large GPU shapes take: rows that do not fit one program, statistics split across
programs with per-split partials.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, note, strategies as st

import dtriton as dt
from dtriton.library import (avg_pool2d, batch_norm, frobenius_normalize, group_norm, instance_norm, layer_norm_chw,
                             max_pool2d)
from dtriton.schedule import complete_schedule, heuristics

F = torch.nn.functional


@pytest.fixture
def small_budgets(monkeypatch):
    """The GPU heuristic's budgets shrunk 512-fold and 128-fold: tiny shapes take the large paths."""
    monkeypatch.setitem(heuristics.ROW_BLOCK, True, 64)
    monkeypatch.setitem(heuristics.STEP_BLOCK, True, 16)


def schedule_for(alg, args, gpu: bool) -> dt.Schedule:
    b = alg.bind(args)
    if gpu:
        b.device = torch.device("cuda")
    return complete_schedule(alg, None, b)


def relerr(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def _bn(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True, eps=1e-5)


NORMS = {
    "batch_norm": (batch_norm, (5, 3, 7, 9), lambda x: (x, torch.randn(3), torch.randn(3)), _bn),
    "instance_norm": (instance_norm, (2, 3, 11, 13), lambda x: (x,), lambda x: F.instance_norm(x, eps=1e-5)),
    "group_norm": (group_norm, (2, 6, 5, 7), lambda x: (x.view(2, 2, 3, 5, 7),), lambda x: F.group_norm(x, 2, eps=1e-5)),
    "layer_norm_chw": (layer_norm_chw, (2, 3, 5, 7), lambda x: (x,), lambda x: F.layer_norm(x, x.shape[1:], eps=1e-5)),
    "frobenius": (frobenius_normalize, (3, 4, 5, 7), lambda x: (x,), lambda x: x / torch.linalg.vector_norm(x)),
}


@pytest.mark.parametrize("name", list(NORMS))
def test_statistics_then_normalise_split_across_programs(name, small_budgets):
    alg, shape, make, eager = NORMS[name]
    x = torch.randn(shape) + 3.0
    args = make(x)
    s = schedule_for(alg, args, gpu=True)
    # the statistics do not fit one program: split, materialised, deterministic partials
    assert s.split and s.split_mode == "partials", s
    assert set(s.grid) == set(alg.outputs[0].layout)
    k = dt.compile(alg, s)
    ref = eager(*[a.double() for a in (x,) + tuple(args[1:])])
    assert relerr(k(*args).reshape(ref.shape), ref) < 1e-5
    assert "pid_split" in k.source
    # the output pass (and only it) starts on the tiles the statistics kernel read last (L2 reuse)
    assert k.source.count("reverse launch order") == 1 and "reverse launch order" in k.source.rsplit("@_jit", 1)[1]
    fwd = dt.compile(alg, s.replace(tile_order="forward"))
    assert relerr(fwd(*args).reshape(ref.shape), ref) < 1e-5
    assert "reverse launch order" not in fwd.source


@pytest.mark.parametrize("name", list(NORMS))
def test_statistics_that_fit_one_program_are_one_read(name):
    alg, shape, make, eager = NORMS[name]
    x = torch.randn(shape)
    args = make(x)
    s = schedule_for(alg, args, gpu=True)
    assert not s.split and all(v == "whole" for a, v in s.strategy.items() if a in alg.reduction_axes), s
    k = dt.compile(alg, s)
    ref = eager(*[a.double() for a in (x,) + tuple(args[1:])])
    assert relerr(k(*args).reshape(ref.shape), ref) < 1e-5
    assert k.source.count(f"def {alg.name}_") == 1   # one kernel: one read, one write


def test_the_issue_shapes_get_schedules_within_the_block_limit():
    """The shapes the issue quotes: no default is refused (the block of every value within 2**20)."""
    cases = [(batch_norm, [(64, 64, 512, 512), (64,), (64,)]), (instance_norm, [(16, 64, 256, 256)]),
             (group_norm, [(16, 8, 8, 256, 256)]), (layer_norm_chw, [(16, 64, 256, 256)]),
             (frobenius_normalize, [(16, 64, 256, 256)]), (avg_pool2d, [(16, 64, 256, 2, 256, 2)])]
    for alg, shapes in cases:
        args = [torch.empty(s, device="meta") for s in shapes]
        s = schedule_for(alg, args, gpu=True)
        sizes = alg.bind(args).axis_sizes
        for ss in [s] + [s.stage(n) for n in s.stages]:
            block = 1
            for a in alg.axis_names:
                strat = ss.strategy.get(a, s.strategy.get(a))
                block *= (1 << (sizes[a] - 1).bit_length()) if strat == "whole" else ss.tile.get(a, s.tile.get(a, 1))
            assert block <= 1 << 20, (alg.name, s)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_issue_shapes_read_their_contiguous_rows_whole(dtype):
    """Every kernel of the norms at the issue's shapes covers the contiguous axis q (256 or 512
    wide) in one block, on the grid in tiles of at least 128 or "whole" in its loops: a variance's
    ``mean(xc * xc)`` is no depthwise convolution (whose rule steps one tap at a time)."""
    cases = [(batch_norm, [(64, 64, 512, 512), (64,), (64,)]), (instance_norm, [(16, 64, 256, 256)]),
             (group_norm, [(16, 8, 8, 256, 256)]), (layer_norm_chw, [(16, 64, 256, 256)]),
             (frobenius_normalize, [(16, 64, 256, 256)])]
    for alg, shapes in cases:
        s = schedule_for(alg, [torch.empty(sh, device="meta", dtype=dtype) for sh in shapes], gpu=True)
        for ss in [s] + [s.stage(n) for n in s.stages]:
            grid = ss.grid if ss.grid is not None else s.grid
            if "q" in grid:
                assert ss.tile.get("q", s.tile.get("q", 1)) >= 128, (alg.name, s)
            else:
                assert ss.strategy.get("q", s.strategy.get("q")) == "whole", (alg.name, s)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_pooling_windows_take_2048_values_a_program_on_the_gpu(dtype):
    """A 2x2 window per output (4 values): 512 outputs a program, spread over the grid axes
    innermost first (256 columns, 2 rows); a one-dim sum over 16 values keeps its 256 rows."""
    x = torch.empty(16, 64, 256, 2, 256, 2, device="meta", dtype=dtype)
    s = schedule_for(max_pool2d, (x,), gpu=True)
    assert s.tile["q"] == 256 and s.tile["h"] == 2 and s.tile["n"] == s.tile["c"] == 1, s

    @dt.algorithm
    def sum_last(X: dt.Tensor["A", "B", "C"]):
        i, j, k = dt.axes("i j k")
        return dt.sum(X[i, j, k], over=k)[i, j]

    s = schedule_for(sum_last, (torch.empty(4096, 4096, 16, device="meta"),), gpu=True)
    assert s.tile["j"] == 256 and s.tile["i"] == 1, s


def test_rows_too_long_for_one_program_loop_innermost_whole():
    x = torch.randn(2, 3, 70, 130)   # rows of 9100 elements: above the interpreter's 4096
    s = schedule_for(instance_norm, (x,), gpu=False)
    assert s.strategy == {"h": "loop", "q": "whole"} and s.tile["h"] * 256 <= 1024, s
    torch.testing.assert_close(dt.compile(instance_norm, s)(x), F.instance_norm(x, eps=1e-5), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("alg,eager", [(avg_pool2d, lambda x: F.avg_pool2d(x, 2)), (max_pool2d, lambda x: F.max_pool2d(x, 2))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_pooling_over_a_block_view(alg, eager, dtype):
    x = torch.randn(2, 3, 10, 14).to(dtype)
    v = x.view(2, 3, 5, 2, 7, 2)
    for gpu in (False, True):
        k = dt.compile(alg, schedule_for(alg, (v,), gpu))
        torch.testing.assert_close(k(v).float(), eager(x.float()), rtol=2e-3, atol=2e-3)


def test_whole_tensor_max_and_sum_split_across_programs(small_budgets):
    @dt.algorithm
    def total_max(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        return dt.max(X[i, j], over=(i, j))[()]

    x = torch.randn(37, 29)
    s = schedule_for(total_max, (x,), gpu=True)
    assert s.split and s.split_mode == "partials", s
    assert dt.compile(total_max, s)(x).item() == x.max().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_whole_tensor_statistic_split_keeps_full_steps_and_wide_output_tiles(dtype):
    """Frobenius at the issue's shape: h split 256 ways leaves 256 programs (under two waves on
    132 SMs), so n is split too: 512 programs, each one row of h and 8 of n; the channel axis
    fills the step back to 4096 elements (16 rows of 256, over 8 warps: the plan unrolls the fp16
    loop), and the output's programs hold 2 KB (1024 fp16, 512 fp32 elements) and read the sum the
    split kernel's last program folded from the 512 partials. Batch norm's statistics (a variance's state) keep 2048.
    (Splitting the outer axes n and c instead, contiguous slabs a program, was slower on the H200,
    s9 call 5: statistics 39.7 against 37.9 us fp16, 71.5 against 68.5 fp32.)"""
    s = schedule_for(frobenius_normalize, (torch.empty(16, 64, 256, 256, device="meta", dtype=dtype),), gpu=True)
    st = s.stages["sum0"]
    assert s.split == {"h": 256, "n": 2} and st.tile["h"] == 1 and st.tile["c"] == 16 and st.num_warps == 8, s
    assert s.split_mode == "last", s
    # 2 KB (heuristics.OUTPUT_BYTES: a finished statistic, nothing folded a program)
    assert math.prod(s.tile[a] for a in ("n", "c", "h", "q")) == (1024 if dtype == torch.float16 else 512), s
    e = dict(device="meta", dtype=dtype)
    b = schedule_for(batch_norm, (torch.empty(64, 64, 512, 512, **e), torch.empty(64, **e), torch.empty(64, **e)),
                     gpu=True)
    assert math.prod(b.stages["mean1"].tile[a] for a in ("n", "h")) * 512 == 2048, b


@pytest.mark.parametrize("kind", ["sum", "max"])
@pytest.mark.parametrize("split", [17, 32])
def test_many_whole_tensor_partials_fold_as_one_block(kind, split):
    """More than 16 partials of a statistic without free axes are read as one (masked) block."""
    @dt.algorithm
    def scaled(X: dt.Tensor["M", "N"]):
        i, j = dt.axes("i j")
        red = dt.sum(X[i, j] * X[i, j], over=(i, j)) if kind == "sum" else dt.max(X[i, j], over=(i, j))
        return (X[i, j] / red)[i, j]

    x = torch.rand(70, 9) + 0.5
    s = dt.Schedule(grid=["i", "j"], tile={"i": 8, "j": 16}, split={"i": split}, split_mode="partials",
                    stages={"sum0" if kind == "sum" else "max0": dt.StageSchedule(tile={"i": 2},
                                                                                  strategy={"i": "loop", "j": "whole"})})
    k = dt.compile(scaled, s)
    assert "tl.arange(0, 32)  # the" in k.source_for(x)
    ref = x.double() / ((x.double() ** 2).sum() if kind == "sum" else x.double().max())
    assert relerr(k(x), ref) < 1e-6
    x[3, 4] = float("nan")
    assert k(x).isnan().all()


# ----------------------------------------------------------------------------------------------
# random multi-axis reductions (hypothesis)
# ----------------------------------------------------------------------------------------------
def _alg(ndim: int, red: tuple[int, ...], kind: str):
    """An algorithm over an ``ndim``-d X reducing the dims ``red`` with ``kind`` (sum, mean, max,
    min), or ("norm") normalising by the mean and variance over them."""
    names = "abcd"[:ndim]

    def fn(X):
        ax = dt.axes(" ".join(names))
        x = X[ax]
        over = tuple(ax[k] for k in red)
        if kind == "norm":
            xc = x - dt.mean(x, over=over)
            return (xc * dt.rsqrt(dt.mean(xc * xc, over=over) + 1e-5))[ax]
        return getattr(dt, kind)(x, over=over)[tuple(ax[k] for k in range(ndim) if k not in red)]

    fn.__annotations__ = {"X": dt.Tensor[tuple(f"S{n.upper()}" for n in names)]}
    fn.__name__ = f"{kind}_{ndim}d_over_{''.join(map(str, red))}"
    return dt.algorithm(fn)


def _torch(x: torch.Tensor, red: tuple[int, ...], kind: str) -> torch.Tensor:
    if kind == "norm":
        mu = x.mean(red, keepdim=True)
        return (x - mu) * torch.rsqrt(((x - mu) ** 2).mean(red, keepdim=True) + 1e-5)
    return {"sum": lambda: x.sum(red), "mean": lambda: x.mean(red), "max": lambda: x.amax(red),
            "min": lambda: x.amin(red)}[kind]()


@st.composite
def multiaxis_case(draw):
    ndim = draw(st.integers(2, 4), label="ndim")
    shape = tuple(draw(st.lists(st.integers(1, 13), min_size=ndim, max_size=ndim), label="shape"))
    red = tuple(sorted(draw(st.sets(st.integers(0, ndim - 1), min_size=1, max_size=ndim), label="reduced")))
    kind = draw(st.sampled_from(["sum", "mean", "max", "min", "norm"]), label="kind")
    gpu = draw(st.booleans(), label="gpu heuristic")
    half = draw(st.booleans(), label="float16 input")
    offset = draw(st.sampled_from([1.0, 300.0]), label="offset")
    return shape, red, kind, gpu, half, offset


@given(multiaxis_case())
def test_random_multiaxis_reductions_match_float64(case):
    """Random sizes, reduced dims, kinds (norms: mean and variance, one pass where looped), the
    interpreter's or the GPU's heuristic (budgets shrunk so loops and splits happen), fp32 or fp16
    inputs with a small or a large offset: the default schedule runs and matches float64 torch on
    the same (rounded) input."""
    shape, red, kind, gpu, half, offset = case
    heuristics.ROW_BLOCK[True], heuristics.STEP_BLOCK[True] = 64, 16
    try:
        alg = _alg(len(shape), red, kind)
        x = (torch.randn(shape) + offset).to(torch.float16 if half else torch.float32)
        s = schedule_for(alg, (x,), gpu)
        note(f"{alg.name} {shape} {x.dtype} {s.to_json()}")
        out = dt.compile(alg, s)(x)
    finally:
        heuristics.ROW_BLOCK[True], heuristics.STEP_BLOCK[True] = 32768, 2048
    ref = _torch(x.double(), red, kind)
    assert out.shape == ref.shape
    # fp16 outputs round to 2**-11 relative (sums of 300s: to their magnitude)
    tol = (2e-3 if half else 1e-4) if kind == "norm" else (1e-3 if half else 1e-5)
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol * (offset if kind != "norm" else 1.0))


def test_default_blocks_are_shrunk_within_the_triton_limit(monkeypatch):
    """With a row budget above Triton's 2**20 elements, the rules would pick whole rows too large
    for one block: the limit check turns the outer axis into a loop before the schedule is returned."""
    monkeypatch.setitem(heuristics.ROW_BLOCK, True, 1 << 24)
    args = [torch.empty(16, 64, 2048, 1024, device="meta")]
    s = schedule_for(instance_norm, args, gpu=True)
    assert s.strategy == {"h": "loop", "q": "whole"} and s.tile["h"] == 1, s
    x = torch.randn(2, 3, 5, 7)
    monkeypatch.setattr(heuristics, "MAX_BLOCK", 4)   # q (7, padded 8) no longer fits whole
    s = schedule_for(instance_norm, (x,), gpu=True)
    assert s.strategy == {"h": "loop", "q": "loop"}, s
    torch.testing.assert_close(dt.compile(instance_norm, s)(x), F.instance_norm(x, eps=1e-5), rtol=1e-4, atol=1e-4)


def test_a_column_reduction_over_short_rows_steps_in_longer_tiles():
    @dt.algorithm
    def sum_mid(X: dt.Tensor["A", "B", "C"]):
        i, j, k = dt.axes("i j k")
        return dt.sum(X[i, j, k], over=j)[i, k]

    s = schedule_for(sum_mid, [torch.empty(4096, 4096, 16, device="meta")], gpu=True)
    assert s.strategy == {"j": "loop"} and s.tile["j"] * s.tile["k"] == heuristics.COLUMN_STEP == 4096, s
    assert s.tile["i"] == 1, s
    x = torch.randn(3, 300, 5)
    torch.testing.assert_close(dt.compile(sum_mid, schedule_for(sum_mid, (x,), gpu=True))(x), x.sum(1),
                               rtol=1e-5, atol=1e-5)


def test_derived_space_of_split_statistics_holds_the_heuristic_split_and_stage_tiles():
    args = [torch.empty(16, 64, 256, 256, device="meta")]
    sp = dt.Space.derive(frobenius_normalize, args, target="gpu")
    base = schedule_for(frobenius_normalize, args, gpu=True)
    for a, f in base.split.items():
        assert f in sp.split[a] and f // 2 in sp.split[a] and 1 in sp.split[a]
    assert sorted(sp.split_mode) == ["finish", "last", "partials"], sp.split_mode
    assert "sum0.q" in sp.stage_tile and set(sp.strategy) == {"n", "c", "h", "q"}


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_loop_reductions_fold_once_after_the_loop(dtype):
    """Sums and maxes over a loop accumulate element-wise in the step's block and fold it once after
    the loop: no ``tl.reduce`` (a cross-warp reduction on the GPU) inside a reduction loop."""
    x = torch.randn(2, 3, 20, 9, dtype=dtype) + 2.0
    k = dt.compile(instance_norm, dt.Schedule(grid=["n", "c"], tile={"h": 4}, strategy={"h": "loop", "q": "whole"}))
    lines = k.source_for(x).splitlines()
    heads = [n for n, line in enumerate(lines) if line.lstrip().startswith("for h0 in range(")]
    assert len(heads) >= 2, lines
    for n in heads:
        pad = len(lines[n]) - len(lines[n].lstrip())
        body = [line for line in lines[n + 1:] if line.strip()]
        body = body[:next((j for j, line in enumerate(body) if len(line) - len(line.lstrip()) <= pad), len(body))]
        assert body and not any("tl.reduce(" in line for line in body), body
    ref = F.instance_norm(x.double(), eps=1e-5)
    assert relerr(k(x), ref) < (2e-3 if dtype == torch.float16 else 1e-6)


def _gpu_source(alg, sched, *args) -> str:
    """The Triton source dtriton would compile for a GPU (planned here, nothing compiled)."""
    from dtriton.backends.triton import render
    from dtriton.plan.callspec import call_spec
    from dtriton.plan.decide import plan_program
    b = alg.bind(args)
    return render(plan_program(alg, sched, b, call_spec(alg, b, args, False)))[0]


@pytest.mark.parametrize("stages,marked", [(None, False), (2, False), (3, True), (4, True)])
def test_reduction_loops_are_pipelined_from_three_stages_on_the_gpu(stages, marked):
    """num_stages >= 3 marks a reduction loop for Triton's pipeliner (tl.range(..., num_stages));
    the default (2) and the interpreter keep plain loops (unroll=1: not unrolled either)."""
    x = torch.randn(2, 3, 20, 9)
    s = dt.Schedule(grid=["n", "c"], tile={"h": 4}, strategy={"h": "loop", "q": "whole"}, num_stages=stages, unroll=1)
    src = _gpu_source(instance_norm, dt.compile(instance_norm, s).complete(instance_norm.bind((x,))), x)
    assert (f"tl.range(0, size_h, BLOCK_H, num_stages={stages})" in src) == marked, src
    assert src.count("for h0 in range(") == (1 if marked else 2)   # the output's loop stays plain
    assert "tl.range(" not in dt.compile(instance_norm, s).source_for(x)


def test_statistics_over_looping_rows_get_their_own_kernel_with_many_programs(small_budgets):
    """Instance norm with more programs than two waves (320 here; 1024 at 16x64x256x256) and rows that
    loop: the statistics are materialised all the same (a kernel per (n, c), unsplit) and the
    output runs as a grid kernel, not as a second loop in each program (H200 s5 call 1: 168.5 us
    as one kernel in 1.94 waves)."""
    x = torch.randn(4, 80, 11, 13) + 3.0
    s = schedule_for(instance_norm, (x,), gpu=True)
    assert not s.split and set(s.grid) == set(instance_norm.outputs[0].layout) and "mean1" in s.stages, s
    k = dt.compile(instance_norm, s)
    assert relerr(k(x), F.instance_norm(x.double(), eps=1e-5)) < 1e-5
    assert k.source.count("def instance_norm_") == 2


def test_statistics_split_the_outermost_axis_so_inner_loops_keep_their_steps():
    """Layer norm over (C, H, W) splits the channel axis (each program: 2 channels, 32 steps of h),
    batch norm the batch axis, so the innermost loop has steps to unroll (h split 32 ways left one
    step of 8 rows per channel)."""
    e = dict(device="meta", dtype=torch.float16)
    s = schedule_for(layer_norm_chw, (torch.empty(16, 64, 256, 256, **e),), gpu=True)
    assert s.split == {"c": 32} and s.stages["mean1"].tile["h"] == 8, s
    b = schedule_for(batch_norm, (torch.empty(64, 64, 512, 512, **e), torch.empty(64, **e), torch.empty(64, **e)),
                     gpu=True)
    assert b.split == {"n": 8}, b


@pytest.mark.parametrize("dtype,unroll", [(torch.float16, 4), (torch.float32, 2)])
def test_statistics_loops_are_unrolled_to_16_kb_an_iteration_on_the_gpu(dtype, unroll):
    """``unroll`` 0 (the default): a GPU statistics loop of 2048-value steps is unrolled 4 times in
    fp16 and twice in fp32 (about 16 KB of loads a program per iteration), its output loop and
    the interpreter's loops are not; the schedule's ``unroll`` is taken as given."""
    x = torch.randn(2, 3, 20, 9)
    s = dt.Schedule(grid=["n", "c"], tile={"n": 1, "c": 1, "h": 8}, strategy={"h": "loop", "q": "whole"})
    big = torch.empty(2, 3, 64, 256, dtype=dtype)
    src = _gpu_source(instance_norm, dt.compile(instance_norm, s).complete(instance_norm.bind((big,))), big)
    assert src.count(f"tl.range(0, size_h, BLOCK_H, loop_unroll_factor={unroll})") == 1, src
    assert src.count("for h0 in range(") == 1   # the output's loop
    src = _gpu_source(instance_norm, dt.compile(instance_norm, s.replace(unroll=3)).complete(instance_norm.bind((big,))),
                      big)
    assert "loop_unroll_factor=3" in src
    assert "loop_unroll_factor" not in dt.compile(instance_norm, s).source_for(x)
    k = dt.compile(instance_norm, s.replace(unroll=3))
    assert "loop_unroll_factor=3" in k.source_for(x)
    assert relerr(k(x), F.instance_norm(x.double(), eps=1e-5)) < 1e-5


def test_unrolled_statistics_kernels_cap_registers_for_four_programs_an_sm():
    """A GPU kernel whose statistics loop the plan unrolled launches with ``maxnreg`` 64 at 8 warps
    (four programs an SM, as its split was sized for); not on the interpreter, nor without the
    unroll, nor for the output kernel."""
    from dtriton.plan.callspec import call_spec
    from dtriton.plan.decide import plan_program
    x = torch.empty(16, 64, 256, 256, dtype=torch.float16, device="meta")

    def caps(sched, gpu=True):
        b = layer_norm_chw.bind((x,))
        if gpu:
            b.device = torch.device("cuda")
        prog = plan_program(layer_norm_chw, sched, b, call_spec(layer_norm_chw, b, (x,), not gpu))
        return {k.name: k.max_registers for k in prog.kernels}

    s = schedule_for(layer_norm_chw, (x,), gpu=True)
    assert caps(s) == {"layer_norm_chw_mean0_mean1": 64, "layer_norm_chw_out": 0}
    assert set(caps(s.replace(unroll=1)).values()) == {0}
    assert set(caps(s, gpu=False).values()) == {0}


def test_unroll_without_a_reduction_loop_warns():
    from dtriton.library import softmax
    with pytest.warns(dt.ScheduleWarning, match="unroll=4 has no effect: no kernel of this call has a reduction loop"):
        dt.compile(softmax, dt.Schedule(unroll=4))(torch.randn(8, 16))
    with pytest.raises(dt.ScheduleError, match="unroll = 9 must be 0 .* from 1 to 8"):
        dt.Schedule(unroll=9)


def test_derived_space_of_statistics_loops_searches_the_unroll_on_the_gpu():
    """Exploration can reach the unrolled statistics loops and the plain ones (GPU only: the
    interpreter's loops are never unrolled by the plan), around the heuristic's split."""
    args = [torch.empty(16, 64, 256, 256, device="meta", dtype=torch.float16)]
    sp = dt.Space.derive(layer_norm_chw, args, target="gpu")
    assert set(sp.unroll) == {0, 1, 2, 4} and 32 in sp.split["c"], sp
    assert dt.Space.derive(layer_norm_chw, [torch.randn(2, 3, 50, 70)]).unroll is None


def test_the_split_axis_loops_outermost_so_the_inner_loop_unrolls():
    """Layer norm with h split 32 ways (each program 8 rows: one step) loops over h outside and over
    the 64 channels inside, which the plan unrolls; the result is unchanged."""
    x = torch.empty(16, 64, 256, 256, device="meta", dtype=torch.float16)
    s = schedule_for(layer_norm_chw, (x,), gpu=True).replace(split={"h": 32})
    src = _gpu_source(layer_norm_chw, s, x)
    outer, inner = src.index("for h0 in range(h_lo, h_hi, BLOCK_H):"), src.index("for c0 in tl.range(0, size_c, BLOCK_C, "
                                                                                   "loop_unroll_factor=4):")
    assert outer < inner, src
    y = torch.randn(2, 3, 8, 5) + 2.0
    k = dt.compile(layer_norm_chw, dt.Schedule(grid=["n", "c", "h", "q"], split={"h": 4}, split_mode="partials",
                                               tile={"n": 1, "c": 1, "h": 2, "q": 8},
                                               stages={"mean0": {"strategy": {"c": "loop", "h": "loop", "q": "whole"},
                                                                 "tile": {"n": 1, "c": 1, "h": 2}},
                                                       "mean1": {"strategy": {"c": "loop", "h": "loop", "q": "whole"},
                                                                 "tile": {"n": 1, "c": 1, "h": 2}}}))
    src = k.source_for(y)
    assert src.index("for h0 in range(h_lo, h_hi, BLOCK_H):") < src.index("for c0 in range(0, size_c, BLOCK_C):"), src
    assert relerr(k(y), F.layer_norm(y.double(), y.shape[1:], eps=1e-5)) < 1e-6


def test_loops_with_many_accumulator_registers_are_not_unrolled():
    """Layer norm's backward at 4096x8192 fp16: its column-sum kernel holds three 32x128 blocks over 4
    warps (96 registers of accumulators); unrolled it spilled (sm_90: 176 bytes a thread, the H200
    step 0.595 -> 0.881 ms). The plan leaves it rolled and uncapped; statistics loops still unroll."""
    import dataclasses
    from dtriton.library import layer_norm
    from dtriton.plan.callspec import call_spec
    from dtriton.plan.decide import plan_program
    e = dict(device="meta", dtype=torch.float16)
    args = (torch.empty(4096, 8192, **e), torch.empty(8192, **e), torch.empty(8192, **e), torch.empty(4096, 8192, **e))
    alg = dt.grad(layer_norm).algorithms[0]
    b = dataclasses.replace(alg.bind(args), device=torch.device("cuda"))
    prog = plan_program(alg, complete_schedule(alg, None, b), b, call_spec(alg, b, args, False))
    cols = [k for k in prog.kernels if k.split]
    assert cols and all(p.unroll == 0 for k in cols for p in k.passes) and all(k.max_registers == 0 for k in cols)


def test_a_padded_pooling_window_loops_one_index_a_step_on_the_gpu():
    """3x3 windows (a 4x4 block, 7 lanes masked) loop over the window one index a step,
    heuristics.WINDOW_OUTPUTS (256) outputs a program; the result matches torch (schedule run here on the interpreter, odd sizes)."""
    from dtriton.library import max_pool2d_window
    from dtriton.schedule.heuristics import WINDOW_OUTPUTS
    e = dict(device="meta", dtype=torch.float16)
    s = schedule_for(max_pool2d_window, (torch.empty(1024, 512, 512, **e), 3, 2, 1, 256, 256), gpu=True)
    assert s.strategy == {"r": "loop", "q": "loop"} and s.tile["r"] == s.tile["q"] == 1, s
    assert s.tile["w"] * s.tile["h"] == WINDOW_OUTPUTS == 256, s
    x = torch.randn(3, 13, 17)
    ho, wo = (13 + 2 - 3) // 2 + 1, (17 + 2 - 3) // 2 + 1
    out = dt.compile(max_pool2d_window, s)(x, 3, 2, 1, ho, wo)
    torch.testing.assert_close(out, F.max_pool2d(x[None], 3, 2, 1)[0])
    s2 = schedule_for(max_pool2d, (torch.empty(16, 64, 256, 2, 256, 2, **e),), gpu=True)
    assert s2.strategy == {"a": "whole", "b": "whole"}, s2   # a 2x2 window fills its block: unchanged
