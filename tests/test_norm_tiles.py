"""Output tiles and statistics splits of multi-stage normalisations (issue 16, session 9).

- the output rule (:data:`heuristics.OUTPUT_BYTES`): outputs reading finished or unsplit
  statistics hold 2 KB a program (1024 fp16 or 512 fp32 elements; session 13); readers of split
  partials keep 4096 elements;
- whole-tensor statistics split over their rows (an outer-slab split measured slower on the H200);
- exploration's output tile seeds (:func:`~dtriton.tune.samplers.output_tile_seeds`) first in the
  warm start;
- candidate checks in bounded memory (:data:`~dtriton.tune.check.CHECK_CHUNK`) and the worker count.

Schedules are the GPU heuristic's (the binding told it is on CUDA; small shapes with the budgets
shrunk) and run on the interpreter against float64 references, outputs poisoned with NaN.
"""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, strategies as st

import dtriton as dt
from conftest import check, dims
from dtriton.library import batch_norm, frobenius_normalize, group_norm, instance_norm, layer_norm_chw, matmul, softmax
from dtriton.schedule import complete_schedule, draft, heuristics, split_rules
from dtriton.tune import check as tcheck
from dtriton.tune import samplers
from dtriton.tune.measure import Bench, workers_for_memory
from dtriton.tune.space import Space

F = torch.nn.functional


def gpu_binding(alg, args):
    return dataclasses.replace(alg.bind(args), device=torch.device("cuda"))


def gpu_schedule(alg, args) -> dt.Schedule:
    return complete_schedule(alg, None, gpu_binding(alg, args))


def bench_args(name, dtype):
    """Arguments (meta tensors) of the H200 bench shapes of bench/reductions.py."""
    e = dict(device="meta", dtype=dtype)
    if name == "batch_norm":
        return batch_norm, (torch.empty(64, 64, 512, 512, **e), torch.empty(64, **e), torch.empty(64, **e))
    if name == "group_norm":
        return group_norm, (torch.empty(16, 8, 8, 256, 256, **e),)
    alg = {"instance_norm": instance_norm, "layer_norm_chw": layer_norm_chw, "frobenius": frobenius_normalize}[name]
    return alg, (torch.empty(16, 64, 256, 256, **e),)


def _bn(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True, eps=1e-5)


#: name -> (algorithm, arguments from x (N, C, H, W), float64 torch oracle of those arguments)
NORMS = {
    "batch_norm": (batch_norm, lambda x: (x, torch.randn(x.shape[1]).to(x.dtype), torch.randn(x.shape[1]).to(x.dtype)),
                   _bn),
    "instance_norm": (instance_norm, lambda x: (x,), lambda x: F.instance_norm(x, eps=1e-5)),
    "layer_norm_chw": (layer_norm_chw, lambda x: (x,), lambda x: F.layer_norm(x, x.shape[1:], eps=1e-5)),
    "frobenius": (frobenius_normalize, lambda x: (x,), lambda x: x / torch.linalg.vector_norm(x)),
}
TOL16 = 3e-3


@pytest.fixture
def small_gpu(monkeypatch):
    """The GPU heuristic at small shapes: block budgets shrunk (statistics get kernels of their own
    and split) and a 4-SM device (two waves are 8 programs)."""
    monkeypatch.setitem(heuristics.ROW_BLOCK, True, 64)
    monkeypatch.setitem(heuristics.STEP_BLOCK, True, 16)
    monkeypatch.setattr(draft, "sm_count", lambda device: 4)


def run_checked(name, x, sched):
    alg, make, oracle = NORMS[name]
    args = make(x)
    check(alg, args, sched, torch_ref=oracle, tol=TOL16 if x.dtype == torch.float16 else 1e-5)


# -- the output rule -----------------------------------------------------------------------------
def _out_elems(s: dt.Schedule) -> int:
    return math.prod(s.tile.get(a, 1) for a in s.grid)


@pytest.mark.parametrize("name, tile", [("batch_norm", {"h": 2, "q": 512}), ("instance_norm", {"h": 4, "q": 256}),
                                       ("frobenius", {"h": 4, "q": 256}), ("layer_norm_chw", {"h": 4, "q": 256})])
def test_outputs_of_finished_statistics_take_2_kb_at_the_bench_shapes(name, tile):
    """Batch norm, instance norm, Frobenius and layer norm over (C, H, W) (statistics finished by the
    split kernel's last programs, or never split): output tiles of 2 KB, 1024 fp16 elements (``tile``)
    or 512 fp32 (half the rows), the contiguous width kept; group norm (its output folds 4 split
    partials) keeps 4096 elements."""
    s32 = gpu_schedule(*bench_args(name, torch.float32))
    s16 = gpu_schedule(*bench_args(name, torch.float16))
    assert {a: s16.tile[a] for a in tile} == tile and _out_elems(s16) == 1024, s16
    assert s32.tile["q"] == tile["q"] and s32.tile["h"] == tile["h"] // 2 and _out_elems(s32) == 512, s32
    for s in (s32, s16):
        assert s.split_mode in (None, "last"), s
    # the same schedule but the output tile (and the 16-bit Frobenius statistics' interleaved split)
    assert s32.replace(tile=s16.tile, split_order=s16.split_order) == s16, (s32, s16)
    for dtype in (torch.float32, torch.float16):
        s = gpu_schedule(*bench_args("group_norm", dtype))
        assert s.split_mode == "partials" and _out_elems(s) == 4096, (dtype, s)


def test_the_output_rule_keeps_the_users_tiles():
    alg, args = bench_args("batch_norm", torch.float32)
    s = complete_schedule(alg, dt.Schedule(tile={"h": 8}), gpu_binding(alg, args))
    assert s.tile["h"] == 8, s


@given(name=st.sampled_from(["batch_norm", "instance_norm", "frobenius", "layer_norm_chw"]),
       n=dims(1, 4), c=dims(1, 5), h=dims(2, 13), q=dims(2, 11), elems=st.sampled_from([4, 16, 64]),
       finish=st.booleans())
def test_the_output_rule_on_odd_shapes_matches_float64(name, n, c, h, q, elems, finish):
    """With the byte target shrunk (the rule fires at interpreter sizes; split statistics finished
    or folded by the readers): outputs that fold no partials hold at most that many bytes a program
    (rows first, then the width), fp32 and fp16 alike; outputs folding partials keep the tiles they
    had; all compute the float64 result into poisoned outputs."""
    mp = pytest.MonkeyPatch()
    try:
        mp.setitem(heuristics.ROW_BLOCK, True, 64)
        mp.setitem(heuristics.STEP_BLOCK, True, 16)
        mp.setattr(draft, "sm_count", lambda device: 4)
        mp.setattr(split_rules, "FINISH_FOLDS", 1 if finish else 1 << 40)
        alg, make, _ = NORMS[name]
        x32 = torch.randn(n, c, h, q) + 1.5
        x16 = x32.half()
        before = {t: gpu_schedule(alg, make(x)) for t, x in (("32", x32), ("16", x16))}
        mp.setattr(heuristics, "OUTPUT_BYTES", elems * 4)
        for t, x in (("32", x32), ("16", x16)):
            s = gpu_schedule(alg, make(x))
            if s.stages and (not s.split or s.split_mode in ("finish", "last")):
                assert _out_elems(s) * x.element_size() <= elems * 4, s
            else:
                assert _out_elems(s) == _out_elems(before[t]), (s, before[t])
            run_checked(name, x, s)
    finally:
        mp.undo()


# -- whole-tensor statistics split over rows ----------------------------------------------------------
def test_outer_axes_too_small_keep_the_inner_split(small_gpu):
    """n and c of size 1 cannot reach two waves: the split falls back to the rows (h)."""
    x = torch.randn(1, 1, 29, 9)
    s = gpu_schedule(frobenius_normalize, (x,))
    assert set(s.split) == {"h"} and s.split["h"] >= 2, s
    run_checked("frobenius", x, s)


@given(n=dims(1, 9), c=dims(1, 9), h=dims(1, 17), q=dims(1, 11), sms=st.sampled_from([1, 2, 4, 8]),
       half=st.booleans())
def test_split_whole_tensor_sums_match_float64(n, c, h, q, sms, half):
    """Whatever axes the heuristic splits a Frobenius norm over, the poisoned
    output matches float64, in fp32 and fp16."""
    mp = pytest.MonkeyPatch()
    try:
        mp.setitem(heuristics.ROW_BLOCK, True, 64)
        mp.setitem(heuristics.STEP_BLOCK, True, 16)
        mp.setattr(draft, "sm_count", lambda device: sms)
        x = torch.randn(n, c, h, q) + 0.25
        x = x.half() if half else x
        run_checked("frobenius", x, gpu_schedule(frobenius_normalize, (x,)))
    finally:
        mp.undo()


# -- exploration: output tile seeds ------------------------------------------------------------------
def _seeded(alg, args):
    sp = Space.derive(alg, args, target="gpu")
    dims_ = sp.dimensions()
    b = gpu_binding(alg, args)
    base = dt.compile(alg).complete(b)
    start = samplers.base_point(dims_, base)
    return sp, dims_, b, base, start


FIN = "finish"
LAST = "last"


@pytest.mark.parametrize("name, dtype, heights", [
    ("batch_norm", torch.float16, [1, 4, 8, (2, FIN)]), ("batch_norm", torch.float32, [2, 4, 8, (1, FIN)]),
    ("instance_norm", torch.float16, [2, 8, 16]), ("instance_norm", torch.float32, [4, 8, 16]),
    ("layer_norm_chw", torch.float16, [2, 8, 16, (4, FIN)]),
    ("group_norm", torch.float32, [8, 4, 2, (16, FIN), (8, FIN), (4, FIN), (2, FIN), (16, LAST)]),
    ("frobenius", torch.float32, [4, 8, 16, (2, FIN)])])
def test_output_tile_seeds_come_first_in_the_warm_start(name, dtype, heights):
    """At the bench shapes the warm start begins with the output tiles of 512, 1024, 2048 and 4096
    elements other than the heuristic's (nearest first, fewer on a tie: layer norm fp32's 1024, the
    H200's best for it in s13, first), each changing only the output's row tile, the statistics
    kernels as the heuristic's; outputs folding split partials (group norm) then take the same
    tiles, the heuristic's first, with the partials finished, and the heuristic's tile finished by
    the last programs; statistics the heuristic finishes by the last programs (batch norm, layer
    norm over (C, H, W), Frobenius) then take its tile finished by a kernel of their own."""
    alg, args = bench_args(name, dtype)
    sp, dims_, b, base, start = _seeded(alg, args)
    seeds = samplers.output_tile_seeds(alg, dims_, start, base, b)
    got = [p["tile.h"] if p.get("split_mode") == start.get("split_mode") else (p["tile.h"], p["split_mode"])
           for p in seeds]
    assert got == heights, seeds
    for p in seeds:
        assert {k for k in p if p[k] != start[k]} <= {"tile.h", "split_mode"}, p
        s = sp.schedule_for(p, base, alg)
        assert s.stages == base.stages and s.split == base.split and s.tile["q"] == base.tile["q"], s
        assert s.split_mode == p.get("split_mode", base.split_mode), s
    ws = samplers.warm_start(alg, dims_, start, base, b)
    assert ws[:len(seeds)] == seeds and len(ws) > len(seeds)


def test_no_output_tile_seeds_off_the_gpu_or_for_row_kernels_and_contractions():
    alg, args = bench_args("batch_norm", torch.float16)
    sp, dims_, b, base, start = _seeded(alg, args)
    assert samplers.output_tile_seeds(alg, dims_, start, base, alg.bind(args)) == []   # the interpreter
    for a, xs in ((softmax, (torch.empty(4096, 8192, device="meta", dtype=torch.float16),)),
                  (matmul, (torch.empty(1024, 1024, device="meta"),) * 2)):
        _, d2, b2, base2, s2 = _seeded(a, xs)
        assert samplers.output_tile_seeds(a, d2, s2, base2, b2) == []


#: (name, n, c, h, q, half) of the examples run so far (hypothesis may draw one twice)
_SEED_EXAMPLES_RUN: set[tuple] = set()


@given(name=st.sampled_from(["batch_norm", "instance_norm", "frobenius", "layer_norm_chw"]),
       n=dims(1, 4), c=dims(1, 4), h=dims(2, 19), q=dims(2, 13), half=st.booleans())
def test_output_tile_seed_schedules_match_float64(name, n, c, h, q, half):
    """Every seed (element targets shrunk to interpreter sizes) is a legal schedule whose poisoned
    output matches float64. (An example drawn again, the same seeds at the same shape, is checked once.)"""
    if (name, n, c, h, q, half) in _SEED_EXAMPLES_RUN:
        return
    _SEED_EXAMPLES_RUN.add((name, n, c, h, q, half))
    mp = pytest.MonkeyPatch()
    try:
        mp.setitem(heuristics.ROW_BLOCK, True, 64)
        mp.setitem(heuristics.STEP_BLOCK, True, 16)
        mp.setattr(draft, "sm_count", lambda device: 4)
        mp.setattr(samplers, "OUTPUT_TILE_ELEMENTS", (4, 16, 32))
        alg, make, _ = NORMS[name]
        x = torch.randn(n, c, h, q) + 1.0
        x = x.half() if half else x
        args = make(x)
        sp, dims_, b, base, start = _seeded(alg, args)
        seeds = samplers.output_tile_seeds(alg, dims_, start, base, b)
        for p in seeds:
            run_checked(name, x, sp.schedule_for(p, base, alg, b.axis_sizes))
    finally:
        mp.undo()


# -- candidate checks in bounded memory -----------------------------------------------------------------
@given(n=st.integers(1, 60), nan_got=st.integers(-1, 59), nan_ref=st.integers(-1, 59), inf=st.integers(-1, 59),
       noise=st.sampled_from([0.0, 1e-7, 1e-3]), chunk=st.integers(1, 9))
def test_checks_in_chunks_give_the_whole_tensor_verdict(n, nan_got, nan_ref, inf, noise, chunk):
    """check_outputs compared CHECK_CHUNK elements at a time gives the verdict, reason and error of
    one whole comparison (computed here in float64 directly)."""
    ref = torch.randn(n, 3)
    got = (ref.double() + noise * torch.randn(n, 3, dtype=torch.float64)).float()
    for t, k, v in ((got, nan_got, float("nan")), (ref, nan_ref, float("nan")), (got, inf, float("inf")),
                    (ref, inf, float("inf"))):
        if 0 <= k < n:
            t[k, 1] = v
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(tcheck, "CHECK_CHUNK", chunk)
        ok, err, reason = tcheck.check_outputs([got], [ref], 1e-5)
    finally:
        mp.undo()
    g, r = got.double(), ref.double()
    nan_here = int((g.isnan() & ~r.isnan()).sum())
    nan_missing = int((r.isnan() & ~g.isnan()).sum())
    inf_bad = int((r.isinf() & (g != r)).sum()) + int((g.isinf() & ~r.isinf()).sum())
    if nan_here:
        assert not ok and reason == f"output 0: {nan_here} NaN where the reference is finite (elements left unwritten?)"
    elif nan_missing:
        assert not ok and reason == f"output 0: {nan_missing} values where the reference is NaN"
    elif inf_bad:
        assert not ok and reason == f"output 0: {inf_bad} infinities that differ from the reference"
    else:
        fin = torch.isfinite(r)
        want = float(torch.linalg.vector_norm((g - r)[fin]) / torch.linalg.vector_norm(r[fin]))
        assert err == pytest.approx(want, rel=1e-9, abs=1e-300) and ok == (want <= 1e-5), (err, want)


def test_input_changes_are_found_in_any_chunk(monkeypatch):
    """A candidate that wrote into its input is caught wherever the change lies (NaN equal to NaN)."""
    monkeypatch.setattr("dtriton.tune.measure.CHECK_CHUNK", 4)
    x = torch.randn(7, 3)
    x[2, 2] = float("nan")
    bench = Bench(frobenius_normalize, (x.view(1, 1, 7, 3),), None, True, 1.0, 1.0)
    work = bench.private()
    assert bench.changed_input(work) is None
    work[0].view(-1)[-1] += 1.0
    assert bench.changed_input(work) == "X"


def test_worker_count_leaves_half_the_free_memory_to_copies_of_the_call():
    gb = 1 << 30
    assert workers_for_memory(120 * gb, 2 * gb, 2 * gb, 8) == 6     # batch norm fp16 on an H200
    assert workers_for_memory(120 * gb, 4 * gb, 4 * gb, 8) == 3     # fp32
    assert workers_for_memory(120 * gb, 128 << 20, 128 << 20, 8) == 8
    assert workers_for_memory(1 * gb, 4 * gb, 4 * gb, 8) == 1
    assert workers_for_memory(None, 4 * gb, 4 * gb, 5) == 5
