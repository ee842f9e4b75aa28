"""Tests of dt.explore: derived spaces, pruning, safety checks, strategies, reports.

Everything runs on the Triton interpreter (CPU), so shapes and spaces are tiny; timings there
mean nothing, only statuses and correctness are asserted.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch

import dtriton as dt
from dtriton.tune import (STATUSES, ExploreResult, Limits, Space, TuningDB, TuningWarning, check_outputs,
                          check_resources, default_tolerance, measure, samplers)

from dtriton.library import matmul, softmax, spatial_diffusion  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# ----------------------------------------------------------------------------------------------
# algorithms
# ----------------------------------------------------------------------------------------------


@dt.algorithm
def diffusion(x: dt.Tensor["V", "C"], mass: dt.Tensor["V"], evals: dt.Tensor["K"], basis: dt.Tensor["V", "K"],
              times: dt.Tensor["C"]):
    v, k, c = dt.axes("v k c")
    spectral = dt.exp(-evals[k] * times[c]) * dt.sum(basis[v, k] * x[v, c] * mass[v], over=v)
    out = dt.sum(basis[v, k] * spectral, over=k)
    return out[v, c], spectral[k, c]


@dt.algorithm
def axpb(x: dt.Tensor["N"], a: float):
    i, = dt.axes("i")
    return (x[i] * a + 1.0)[i]


def lazy(*shape, dtype=torch.float32):
    """A tensor of this shape that owns one element (binding only looks at shapes/dtypes)."""
    return torch.zeros((), dtype=dtype).expand(*shape)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DTRITON_TUNING_DB", raising=False)
    yield


@pytest.fixture
def mm_args():
    g = torch.Generator().manual_seed(0)
    return torch.randn(40, 32, generator=g), torch.randn(32, 24, generator=g)


def dims(space):
    return dict(space.dimensions())


SMALL_MM = Space(tile={"i": [16, 32], "j": [16]}, strategy={"k": ["loop"]})


# ----------------------------------------------------------------------------------------------
# derived spaces
# ----------------------------------------------------------------------------------------------
def test_derived_space_matmul_gpu_and_interpreter(mm_args):
    d = dims(Space.derive(matmul, mm_args, target="gpu"))
    # dot axes: powers of two from 16, pruned above the padded axis (M=40 -> 64, N=24 -> 32)
    assert d["tile.i"] == (16, 32, 64)
    assert d["tile.j"] == (16, 32)
    assert d["tile.k"] == (16, 32)
    assert set(d["grid"]) == {("i", "j"), ("j", "i")}
    assert d["grid"][0] == ("i", "j")  # the heuristic's grid first
    assert 1 in d["group"] and 8 in d["group"]
    assert d["strategy.k"] == ("whole", "loop")  # no max over k: no online
    assert d["place.sum0"] == ("auto", "fuse", "materialize")
    assert set(d["num_warps"]) >= {4, 8} and set(d["num_stages"]) >= {3, 4}
    assert "strategy.i" not in d and "strategy.j" not in d  # grid axes that are never reduced
    # the interpreter ignores warps and pipelining: not explored there
    di = dims(Space.derive(matmul, mm_args))
    assert "num_warps" not in di and "num_stages" not in di
    assert di["tile.i"] == (16, 32, 64)


def test_derived_space_large_and_skinny_matmul():
    big = dims(Space.derive(matmul, (lazy(4096, 4096, dtype=torch.float16), lazy(4096, 4096, dtype=torch.float16)),
                            target="gpu"))
    assert big["tile.i"] == (16, 32, 64, 128, 256) and big["tile.k"] == (16, 32, 64, 128)
    assert "split.k" not in big  # plenty of output tiles: no split-K
    skinny = dims(Space.derive(matmul, (lazy(64, 65536), lazy(65536, 64)), target="gpu"))
    assert "split.k" in skinny and skinny["split.k"][0] == 1 and max(skinny["split.k"]) >= 8
    assert skinny["tile.i"] == (16, 32, 64)


def test_derived_space_softmax():
    d = dims(Space.derive(softmax, (torch.randn(8, 24),)))
    assert "grid" not in d and "group" not in d  # a one-axis grid has no order to explore
    assert d["strategy.j"] == ("whole", "loop", "online")
    assert set(d) >= {"place.max0", "place.sum0", "tile.i", "tile.j"}
    assert d["tile.i"] == (1, 2, 4, 8)
    assert "split.j" not in d  # j is also reduced by a max: cannot be split
    g = dims(Space.derive(softmax, (lazy(4096, 32768),), target="gpu"))
    assert "whole" in g["strategy.j"]  # 32768 fits a whole row on the GPU (16 warps)
    assert 16 in g["num_warps"]
    g = dims(Space.derive(softmax, (lazy(64, 65536),), target="gpu"))
    assert g["strategy.j"] == ("loop", "online")  # 65536 > 32768: no whole row


def test_derived_space_multi_kernel_diffusion():
    V, K, C = 24, 16, 8
    args = (torch.randn(V, C), torch.rand(V), torch.rand(K), torch.randn(V, K), torch.rand(C))
    sp = Space.derive(diffusion, args)
    d = dims(sp)
    assert set(d) >= {"place.sum0", "place.sum1", "strategy.v", "strategy.k", "grid"}
    assert set(d["grid"]) == {("v", "c"), ("c", "v")}
    assert "strategy.c" not in d
    # every point gives a schedule that validates (or is rejected as illegal by validation)
    base = dt.compile(diffusion).schedule_for(*args)
    seen = set()
    for point in _sample_points(sp, 40):
        s = sp.schedule_for(point, base, diffusion)
        s.validate(diffusion)
        seen.add(s.to_json())
    assert len(seen) > 10


def _sample_points(space, n):
    import random
    rng = random.Random(1)
    for _ in range(n):
        yield {name: rng.choice(vals) for name, vals in space.dimensions()}


def test_schedule_for_canonicalises_whole_tiles_and_regroups(mm_args):
    sp = Space.derive(matmul, mm_args, target="gpu")
    base = dt.compile(matmul).schedule_for(*mm_args)
    a = sp.schedule_for({"strategy.k": "whole", "tile.k": 16}, base, matmul)
    b = sp.schedule_for({"strategy.k": "whole", "tile.k": 32}, base, matmul)
    assert a == b  # a whole axis needs no tile
    s = sp.schedule_for({"grid": ("j", "i"), "group": 4}, base, matmul)
    assert s.grid == ("j", "i") and dict(s.group) == {"j": 4}
    s = sp.schedule_for({"grid": ("j", "i"), "group": 1}, base, matmul)
    assert dict(s.group) == {}
    s = sp.schedule_for({"place.sum0": "auto"}, base, matmul)
    assert len(s.stages) == 0  # a default stage schedule is dropped


def test_resource_rules():
    lim = Limits()
    A, B = lazy(4096, 4096, dtype=torch.float16), lazy(4096, 4096, dtype=torch.float16)
    b = matmul.bind((A, B))
    ok = dt.Schedule(tile={"i": 128, "j": 128, "k": 64}, grid=("i", "j"), num_stages=4)
    assert check_resources(matmul, ok, b, lim) is None  # (128*64 + 64*128) * 2 B * 4 = 128 KB
    big = ok.replace(tile={"i": 256, "j": 256, "k": 128}, num_stages=5)
    why = check_resources(matmul, big, b, lim)
    assert why and "shared memory" in why
    X = lazy(64, 16384)
    bx = softmax.bind((X,))
    wide = dt.Schedule(tile={"i": 16}, grid=("i",), strategy={"j": "whole"})
    why = check_resources(softmax, wide, bx, lim)
    assert why and "elements per program" in why
    assert check_resources(softmax, wide.replace(tile={"i": 4}), bx, lim) is None
    assert "whole" in check_resources(softmax, wide.replace(tile={"i": 1}), softmax.bind((lazy(4, 65536),)), lim)


def test_space_validation_and_editing():
    with pytest.raises(dt.ScheduleError):
        Space(tile={"i": [48]})
    with pytest.raises(dt.ScheduleError):
        Space(strategy={"j": ["sideways"]})
    with pytest.raises(dt.ScheduleError):
        Space(num_warps=[64])
    s = Space(tile={"i": [64, 128]}, num_warps=4, grid=["i,j", ("j", "i")])
    assert s.num_warps == (4,) and s.grid == (("i", "j"), ("j", "i"))
    assert s.size == 2 * 1 * 2
    w = s.widen(tile={"i": [256], "j": [32]}, num_warps=[8])
    assert w.tile == {"i": (64, 128, 256), "j": (32,)} and w.num_warps == (4, 8)
    n = w.narrow(tile=None)
    assert n.tile is None and n.num_warps == (4, 8)
    assert Space(grid=("i", "j")).grid == (("i", "j"),)
    assert Space(**s.to_dict()) == s


def test_space_naming_unknown_axis_is_an_error(mm_args):
    with pytest.raises(dt.ScheduleError, match="axis 'q'"):
        dt.explore(matmul, mm_args, space=Space(tile={"q": [16]}), store=False, progress=False)


# ----------------------------------------------------------------------------------------------
# tolerances and the output check
# ----------------------------------------------------------------------------------------------
def test_tolerances_and_check_outputs():
    b32 = matmul.bind((torch.randn(4, 4), torch.randn(4, 4)))
    b16 = matmul.bind((torch.randn(4, 4).half(), torch.randn(4, 4).half()))
    assert default_tolerance(b32) == 1e-4
    assert default_tolerance(b32, dt.Schedule(precision="tf32")) == 3e-3
    assert default_tolerance(b16) == 1e-2
    r = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    assert check_outputs([r.clone()], [r], 1e-4)[0]
    g = r.clone()
    g[0] = float("nan")
    ok, _, why = check_outputs([g], [r], 1e-4)
    assert not ok and "NaN" in why
    g = r.clone()
    g[2] = 5.0
    assert not check_outputs([g], [r], 1e-4)[0]
    g = r.clone()
    g[3] = 2.01
    ok, err, why = check_outputs([g], [r], 1e-4)
    assert not ok and err > 1e-4 and "relative error" in why
    assert check_outputs([g], [r], 1e-2)[0]


# ----------------------------------------------------------------------------------------------
# exploring
# ----------------------------------------------------------------------------------------------
def test_explore_small_matmul(mm_args, tmp_path):
    A, B = mm_args
    with pytest.warns(TuningWarning, match="interpreter"):
        res = dt.explore(matmul, mm_args, space=SMALL_MM, strategy="exhaustive", budget=60, progress=False,
                         db=tmp_path / "t.sqlite", store=True)   # the interpreter stores only when asked
    assert isinstance(res, dt.ExploreResult)
    assert res.strategy == "exhaustive" and res.stop_reason == "exhausted"
    assert res.table[0]["origin"] == "heuristic"
    statuses = [r["status"] for r in res.table]
    assert statuses.count("ok") >= 2 and set(statuses) <= set(STATUSES)
    for r in res.table:
        if r["status"] == "ok":
            assert r["median_us"] > 0 and r["p20_us"] <= r["median_us"] <= r["p80_us"]
            assert r["rel_err"] <= 1e-4
    assert isinstance(res.best, dt.Schedule)
    res.best.validate(matmul)
    out = dt.compile(matmul, res.best)(A, B)
    torch.testing.assert_close(out, A @ B, rtol=1e-4, atol=1e-4)
    assert not res.timings_meaningful and res.device == "interpreter"
    text = res.summary()
    assert "interpreter" in text and "best:" in text and "(heuristic)" in text
    png = res.plot(tmp_path / "explore.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # stored for dt.compile(alg, "tuned")
    rec = TuningDB(tmp_path / "t.sqlite").lookup(res.key)
    assert rec is not None and rec.schedule == res.best


def test_result_json_round_trip_picks_same_winner(mm_args):
    res = dt.explore(matmul, mm_args, space=SMALL_MM, progress=False, store=False)
    back = ExploreResult.from_json(res.to_json())
    assert back.best == res.best
    assert [r["status"] for r in back.table] == [r["status"] for r in res.table]
    # deterministic tie-break: equal medians resolve by p80 then by schedule JSON
    rows = [{"status": "ok", "median_us": 5.0, "p80_us": 6.0, "schedule_json": "b"},
            {"status": "ok", "median_us": 5.0, "p80_us": 6.0, "schedule_json": "a"},
            {"status": "wrong", "median_us": 1.0, "p80_us": 1.0, "schedule_json": "c"}]
    assert ExploreResult.pick_best(rows)["schedule_json"] == "a"
    assert ExploreResult.pick_best(list(reversed(rows)))["schedule_json"] == "a"


class _Broken(dt.Kernel):
    """A kernel that is wrong in a chosen way whenever its schedule tiles i by 16."""
    mode = "corrupt"

    def _bad(self):
        return self.schedule is not None and self.schedule.tile.get("i") == 16

    def __call__(self, *args, out=None):
        if not self._bad():
            return super().__call__(*args, out=out)
        if self.mode == "raise":
            raise dt.CompileError("injected compile failure")
        if self.mode == "unwritten":  # compute elsewhere, copy all but the last row into out=
            r = super().__call__(*args)
            if out is not None:
                out[:-1].copy_(r[:-1])
                return out
            return r
        if self.mode == "input":
            args[0].mul_(2.0)
            return super().__call__(*args, out=out)
        r = super().__call__(*args, out=out)
        r.add_(0.5)
        return r


@pytest.mark.parametrize("mode,why", [("corrupt", "relative error"), ("unwritten", "NaN"),
                                      ("input", "modified input 'A'"), ("raise", "injected")])
def test_wrong_candidates_are_rejected(mm_args, mode, why, monkeypatch):
    A, B = mm_args
    A0, B0 = A.clone(), B.clone()
    monkeypatch.setattr(_Broken, "mode", mode)
    res = dt.explore(matmul, mm_args, space=Space(tile={"i": [16, 32]}, strategy={"k": ["loop"]}),
                     strategy="exhaustive", progress=False, store=False, _candidate_factory=_Broken)
    bad = [r for r in res.table if r["schedule"] is not None and r["schedule"].tile.get("i") == 16]
    assert bad and all(r["status"] == ("failed" if mode == "raise" else "wrong") for r in bad)
    assert why in bad[0]["reason"]
    assert res.best is not None and res.best.tile["i"] != 16
    assert "rejected after running" in res.summary()
    assert torch.equal(A, A0) and torch.equal(B, B0)  # the caller's tensors were never handed out


def test_nothing_correct_gives_no_best(mm_args, monkeypatch):
    class AllWrong(dt.Kernel):
        def __call__(self, *args, out=None):
            r = super().__call__(*args, out=out)
            r.neg_()
            return r
    with pytest.warns(TuningWarning, match="no candidate passed"):
        res = dt.explore(matmul, mm_args, space=Space(tile={"i": [16]}), progress=False, store=False,
                         _candidate_factory=AllWrong)
    assert res.best is None and "best: none" in res.summary()
    assert all(r["status"] in ("wrong", "duplicate") for r in res.table)


def test_inputs_bitwise_unchanged(mm_args):
    A, B = mm_args
    A[0, 0] = float("nan")  # NaN payloads must survive too
    bits = [t.view(torch.int32).clone() for t in (A, B)]
    dt.explore(matmul, (A, B), space=SMALL_MM, progress=False, store=False)
    assert all(torch.equal(t.view(torch.int32), b0) for t, b0 in zip((A, B), bits))


def test_in_place_algorithm_is_not_corrupted_by_tuning():
    x = torch.linspace(-1, 1, 40)
    x0 = x.clone()
    # the call being tuned writes its result into its own input: kernel(x, 3.0, out=x)
    res = dt.explore(axpb, (x, 3.0), out=x, space=Space(tile={"i": [8, 16, 32, 64]}), strategy="exhaustive",
                     progress=False, store=False)
    assert torch.equal(x, x0)
    ran = [r for r in res.table if r["status"] not in ("duplicate", "illegal", "pruned")]
    # every trial saw the pristine input: without a restore between trials, the 2nd would see x*3+1
    assert len(ran) >= 3 and all(r["status"] == "ok" for r in ran)
    # and it really runs in place
    y = x.clone()
    dt.compile(axpb, res.best)(y, 3.0, out=y)
    torch.testing.assert_close(y, x0 * 3 + 1)


def test_in_place_trials_are_checked_not_trusted():
    class Twice(dt.Kernel):  # applies itself twice when in place: wrong
        def __call__(self, *args, out=None):
            r = super().__call__(*args, out=out)
            if self.schedule is not None and self.schedule.tile.get("i") == 8 and out is args[0]:
                r = super().__call__(*args, out=out)
            return r
    x = torch.linspace(-1, 1, 40)
    res = dt.explore(axpb, (x, 3.0), out=x, space=Space(tile={"i": [8, 16]}), progress=False, store=False,
                     _candidate_factory=Twice)
    by_tile = {r["schedule"].tile["i"]: r["status"] for r in res.table if r["origin"] != "heuristic"}
    assert by_tile[8] == "wrong" and by_tile[16] == "ok"


def test_multi_output_algorithm_explores():
    V, K, C = 24, 16, 8
    g = torch.Generator().manual_seed(3)
    args = (torch.randn(V, C, generator=g), torch.rand(V, generator=g), torch.rand(K, generator=g),
            torch.randn(V, K, generator=g), torch.rand(C, generator=g))
    sp = Space(place={"sum0": ["auto", "materialize"]}, strategy={"v": ["whole", "loop"]})
    res = dt.explore(diffusion, args, space=sp, strategy="exhaustive", progress=False, store=False)
    assert res.best is not None
    outs = dt.compile(diffusion, res.best)(*args)
    for o, r in zip(outs, diffusion.reference(*args)):
        torch.testing.assert_close(o, r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("strategy", ["random", "tpe"])
def test_sampling_strategies_respect_max_trials(mm_args, strategy):
    res = dt.explore(matmul, mm_args, strategy=strategy, max_trials=3, seed=1, progress=False, store=False)
    assert res.strategy == strategy and res.stop_reason == "max_trials"
    compiled = [r for r in res.table if r["origin"] != "heuristic" and r["status"] in ("ok", "wrong", "failed")]
    assert len(compiled) == 3
    assert res.best is not None


def test_tpe_without_optuna_falls_back_to_random(mm_args, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.warns(TuningWarning, match="optuna"):
        res = dt.explore(matmul, mm_args, strategy="tpe", max_trials=1, progress=False, store=False)
    assert res.strategy == "random"


def test_auto_strategy_and_budget_stop(mm_args):
    res = dt.explore(matmul, mm_args, space=SMALL_MM, progress=False, store=False)
    assert res.strategy == "exhaustive"
    res = dt.explore(matmul, mm_args, budget=0, progress=False, store=False)
    assert res.stop_reason == "budget"
    assert [r["origin"] for r in res.table] == ["heuristic"]  # the baseline is always measured
    assert res.best == dt.compile(matmul).schedule_for(*mm_args)


def test_patience_stops_early(mm_args):
    res = dt.explore(matmul, mm_args, strategy="random", patience=1, max_trials=20, progress=False, store=False)
    assert res.stop_reason in ("converged", "exhausted")
    assert sum(r["status"] == "ok" for r in res.table) < 20


def test_deterministic_mode_reuses_stored_timings(mm_args, tmp_path):
    db = tmp_path / "det.sqlite"
    kw = dict(strategy="random", max_trials=3, seed=5, progress=False, db=db, deterministic=True)
    r1 = dt.explore(matmul, mm_args, **kw)
    r2 = dt.explore(matmul, mm_args, **kw)
    assert r1.best == r2.best
    assert r2.best_row["median_us"] == r1.best_row["median_us"]  # picked from stored timings
    assert all(r["stored"] for r in r2.table if r["status"] in ("ok", "wrong", "failed"))
    assert any(r["origin"] == "stored" for r in r2.table)


def test_progress_bar_runs(mm_args, capsys):
    res = dt.explore(matmul, mm_args, space=Space(tile={"i": [16]}), progress=True, store=False)
    assert res.best is not None


def test_explore_rejects_bad_arguments(mm_args):
    with pytest.raises(TypeError):
        dt.explore(lambda a: a, mm_args)
    with pytest.raises(ValueError):
        dt.explore(matmul, mm_args, strategy="genetic")
    with pytest.raises(dt.ShapeError):
        dt.explore(matmul, (torch.randn(4, 5), torch.randn(6, 4)))


def test_run_parallel_timeout_and_deadline():
    import time
    run = measure.run_parallel
    slow = lambda: (time.sleep(1.5), {"status": "ok"})[1]  # noqa: E731
    res = run([lambda: {"status": "ok"}, slow, lambda: {"status": "ok"}], 2, timeout=0.2)
    assert [r["status"] for r in res] == ["ok", "timeout", "ok"]
    res = run([slow, slow, slow], 1, timeout=10, deadline=time.perf_counter() + 0.1)
    assert [r["status"] for r in res] == ["skipped"] * 3
    res = run([lambda: 1 / 0], 1, timeout=10)
    assert res[0]["status"] == "failed" and "ZeroDivisionError" in res[0]["reason"]


def test_warm_start_neighbours(mm_args):
    sp = Space.derive(matmul, mm_args, target="gpu")
    base = dt.compile(matmul).schedule_for(*mm_args)
    dims_ = sp.dimensions()
    bp = samplers.base_point(dims_, base)
    assert bp["tile.i"] == base.tile["i"] and bp["strategy.k"] == "loop" and bp["grid"] == ("i", "j")
    nb = samplers.neighbours(dims_, bp)
    assert nb and all(sum(p[n] != bp[n] for n, _ in dims_ if bp[n] is not None) == 1 for p in nb)
    # access first (searched: an fp32 "auto" matmul with a K-major operand runs tensor cores), then the
    # precision, then tiles
    assert nb[0]["access"] != bp["access"]
    assert nb[1]["precision"] != bp["precision"]
    assert next(p for p in nb if p["access"] == bp["access"] and p["precision"] == bp["precision"])["tile.i"] \
        != bp["tile.i"]


def test_reference_memory_estimate():
    peak = measure.reference_peak
    # a matmul's reference is one einsum: never the M x K x N product
    assert peak(matmul, {"i": 4096, "j": 4096, "k": 4096}) == 4096 * 4096
    # softmax holds M x N
    assert peak(softmax, {"i": 64, "j": 128}) == 64 * 128
    # basis[v,k] * x[v,c] * mass[v] summed over v: the pairwise contraction keeps v, k, c
    assert peak(diffusion, {"v": 1000, "k": 16, "c": 8}) == 1000 * 16 * 8


def test_oracle_falls_back_to_heuristic_when_reference_is_too_big(mm_args, monkeypatch):
    monkeypatch.setattr(measure.Bench, "reference_feasible", lambda self: False)
    with pytest.warns(TuningWarning, match="would not fit in memory"):
        res = dt.explore(matmul, mm_args, space=Space(tile={"i": [16, 32]}), progress=False, store=False)
    assert res.oracle == "heuristic" and "heuristic schedule's output" in res.summary()
    assert res.best is not None


def test_no_compile_thread_outlives_explore_past_its_deadline():
    """Tasks cut off by the budget are reported as skipped, and _drain_workers waits for the ones
    still running, so none of them launches GPU work after explore returns."""
    import importlib
    import time as _t
    ex = importlib.import_module("dtriton.tune.measure")
    finished = []

    def slow(k):
        def f():
            _t.sleep(0.3)
            finished.append(k)
            return {"status": "ok", "reason": ""}
        return f
    res = ex.run_parallel([slow(k) for k in range(4)], workers=2, timeout=60, deadline=_t.perf_counter() + 0.05)
    assert all(r["status"] == "skipped" for r in res)
    assert len(finished) < 4
    assert ex.drain_workers(5.0) == 0
    assert sorted(finished) == [0, 1]   # the two running tasks finished; the queued two never started


def test_derived_space_access_and_split_neighbours():
    """GPU spaces of 16-bit contractions on Hopper-class limits offer TMA loads, and so do fp32
    ones whose precision runs tensor cores ("auto" where an operand reads the reduced axis at unit
    stride, or is staged so: tests/test_tune_precision.py); "ieee" fp32 (FMA dots) and devices
    without TMA do not.
    Warp specialisation is never derived. Split values include the heuristic's and its
    neighbours (64 for a V=100000 diffusion reduction, where the old fixed list stopped at 16)."""
    h = (lazy(1024, 1024, dtype=torch.float16), lazy(1024, 1024, dtype=torch.float16))
    d = dims(Space.derive(matmul, h, target="gpu"))
    assert d["access"] == ("pointer", "tma") and "warp_specialize" not in d
    assert "access" not in dims(Space.derive(matmul, h, target="gpu", limits=Limits(tma=False)))
    assert "access" not in dims(Space.derive(matmul, h))  # interpreter: not explored
    # stride-0 operands read no axis at unit stride, and 512^3 is too small to stage: "auto" runs FMA
    f32 = (lazy(512, 512), lazy(512, 512))
    b32 = dataclasses.replace(matmul.bind(f32), device=torch.device("cuda"))
    assert "access" not in dims(Space.derive(matmul, f32, target="gpu"))
    from dtriton.tune.space import derive_fields
    base = dt.compile(matmul).complete(b32)
    assert derive_fields(matmul, b32, base.replace(precision="tf32x3"), True, Limits())["access"] == ["pointer", "tma"]
    assert derive_fields(matmul, b32, base.replace(precision="ieee"), True, Limits())["access"] is None
    assert derive_fields(matmul, b32, base, True, Limits())["access"] is None
    V, K, C = 100000, 128, 128
    args = (lazy(V, C), lazy(V, K), lazy(V), lazy(K), lazy(C))
    sp = Space.derive(spatial_diffusion, args, target="gpu")
    base = sp_base = dt.compile(spatial_diffusion).complete(
        dataclasses.replace(spatial_diffusion.bind(args), device=torch.device("cuda")))
    bs = sp_base.split["v"]
    assert bs >= 32 and {bs // 2, bs, bs * 2} <= set(dims(sp)["split.v"])
    # fp32: access is explored only where the heuristic's precision runs tensor cores (bf16x6 from
    # the long_reduction rule), as for matmul above
    assert ("access" in dims(sp)) == (sp_base.precision in dt.schedule.TENSOR_CORE_FP32)
    # a user space may still ask for both knobs; they reach the schedule
    s = Space(access=["tma"], warp_specialize=[True]).schedule_for({"access": "tma", "warp_specialize": True},
                                                                   base, spatial_diffusion)
    assert s.access == "tma" and s.warp_specialize is True


def test_timing_mode_is_checked(mm_args):
    with pytest.raises(ValueError, match="timing must be 'cold' or 'warm'"):
        dt.explore(matmul, mm_args, budget=1, timing="hot", progress=False, store=False)
    # on the interpreter both modes fall back to one wall-clock sample and still find a winner
    res = dt.explore(matmul, mm_args, space=SMALL_MM, budget=30, max_trials=2, timing="warm", progress=False, store=False)
    assert res.best is not None


def test_stage_tile_dimensions_for_a_split_stage_with_its_own_kernel():
    """The diffusion layer's V-reduction (stage sum0, split over v) runs in a kernel of its own and
    gets tile dimensions of its own; matmul's split stage is the output itself and gets none."""
    V, K, C = 100000, 128, 128
    args = (lazy(V, C), lazy(V, K), lazy(V), lazy(K), lazy(C))
    d = dims(Space.derive(spatial_diffusion, args, target="gpu"))
    assert {"stage_tile.sum0.k", "stage_tile.sum0.c", "stage_tile.sum0.v"} <= set(d)
    assert not [n for n in dims(Space.derive(matmul, (lazy(16, 4096), lazy(4096, 4096)), target="gpu"))
                if n.startswith("stage_tile")]
    # a point's stage tiles reach the sum0 kernel, and the schedule runs right on the interpreter
    x, basis, mass = torch.randn(300, 16), torch.randn(300, 32), torch.rand(300) + 0.5
    evals, times = torch.rand(32), torch.rand(16)
    small = (x, basis, mass, evals, times)
    base = dt.compile(spatial_diffusion, dt.Schedule(split={"v": 4})).schedule_for(*small)
    sp = Space(stage_tile={"sum0.k": [32], "sum0.c": [16], "sum0.v": [16]}, tile={"v": [32]})
    s = sp.schedule_for({"stage_tile.sum0.k": 32, "stage_tile.sum0.c": 16, "stage_tile.sum0.v": 16, "tile.v": 32},
                        base, spatial_diffusion)
    assert dict(s.stage("sum0").tile) == {"k": 32, "c": 16, "v": 16} and s.tile["v"] == 32
    k = dt.compile(spatial_diffusion, s)
    out, spec = k(*small)
    assert "split of v into 4" in k.source and "axis v: loop, block 16" in k.source
    ref = spatial_diffusion.reference(*(a.double() for a in small))
    assert ((out.double() - ref[0]).norm() / ref[0].norm()) < 1e-5
    # resource rules read the stage's own tiles: a 128x128x256 fp32 sum0 tile does not fit
    big = s.replace(stages={"sum0": {"tile": {"k": 128, "c": 128, "v": 256}}}, num_stages=3)
    why = check_resources(spatial_diffusion, big, spatial_diffusion.bind(args), Limits())
    assert why and "stage 'sum0'" in why and "shared memory" in why
    # and explore accepts such a user space (bad names are refused)
    with pytest.raises(dt.ScheduleError, match="stage_tile 'sum0.q' names axis 'q'"):
        dt.explore(spatial_diffusion, small, space=Space(stage_tile={"sum0.q": [16]}), budget=5, progress=False, store=False)
    with pytest.raises(dt.ScheduleError, match="must be 'stage.axis'"):
        Space(stage_tile={"sum0": [16]})


def test_eviction_dimensions_for_streaming_kernels():
    """Memory-bound GPU spaces search an L2 hint for their large inputs (not for w and b, not for
    contractions); "evict_normal" is no hint, so that point is the heuristic's schedule."""
    from dtriton.library import layer_norm
    h = torch.float16
    d = dims(Space.derive(layer_norm, (lazy(4096, 8192, dtype=h), lazy(8192, dtype=h), lazy(8192, dtype=h)), target="gpu"))
    assert d["eviction.X"] == ("evict_normal", "evict_first") and "eviction.w" not in d
    assert not [n for n in dims(Space.derive(matmul, (lazy(512, 512), lazy(512, 512)), target="gpu")) if n.startswith("eviction")]
    assert not [n for n in dims(Space.derive(layer_norm, (lazy(4096, 8192), lazy(8192), lazy(8192)))) if n.startswith("eviction")]
    X, w, b = torch.randn(9, 40), torch.randn(40), torch.randn(40)
    base = dt.compile(layer_norm).schedule_for(X, w, b)
    sp = Space(eviction={"X": ["evict_normal", "evict_first"]})
    s = sp.schedule_for({"eviction.X": "evict_first"}, base, layer_norm)
    assert dict(s.eviction) == {"X": "evict_first"}
    assert sp.schedule_for({"eviction.X": "evict_normal"}, base, layer_norm) == base
    res = dt.explore(layer_norm, (X, w, b), space=sp, budget=60, progress=False, store=False)
    assert res.best is not None and res.counts().get("wrong", 0) == 0
    assert 'eviction_policy="evict_first"' in dt.compile(layer_norm, s).source_for(X, w, b)
    # a user's own "evict_normal" is Triton's default policy (Triton itself refuses that name)
    k = dt.compile(layer_norm, base.replace(eviction={"X": "evict_normal"}))
    torch.testing.assert_close(k(X, w, b), torch.nn.functional.layer_norm(X, (40,), w, b), rtol=1e-4, atol=1e-4)
    assert "eviction_policy" not in k.source
    with pytest.raises(dt.ScheduleError, match="space names tensor 'Q' in eviction"):
        dt.explore(layer_norm, (X, w, b), space=Space(eviction={"Q": ["evict_first"]}), budget=5, progress=False, store=False)


def test_candidates_that_drop_a_knob_are_duplicates_and_do_not_warn(mm_args, recwarn):
    """warp_specialize=True without TMA generates the same kernel as False (only a comment
    differs): a duplicate, and explore's candidates raise no ScheduleWarning."""
    sp = Space(tile={"i": [16]}, warp_specialize=[False, True])
    res = dt.explore(matmul, mm_args, space=sp, strategy="exhaustive", budget=60, progress=False, store=False)
    assert res.counts().get("duplicate", 0) >= 1
    assert not [w for w in recwarn if issubclass(w.category, dt.ScheduleWarning)]
    with pytest.raises(dt.ScheduleError, match="must be True, False or None"):
        Space(warp_specialize=[0, 1])


def test_dot_seeds_put_tensor_core_tilings_first():
    """Random/TPE exploration of a 16-bit GPU contraction first tries the probe's best tilings
    (rows x columns of the output, with TMA), then the heuristic's one-step neighbours, access
    style first; algorithms without a contraction get no seeds."""
    from dtriton.tune.samplers import base_point, dot_seeds, neighbours
    A = lazy(1024, 1024, dtype=torch.float16)
    dims_ = Space.derive(matmul, (A, A), target="gpu").dimensions()
    gpu = dataclasses.replace(matmul.bind((A, A)), device=torch.device("cuda"))
    base = dt.compile(matmul).complete(gpu)
    bp = base_point(dims_, base)
    seeds = [(p["tile.i"], p["tile.j"], p["tile.k"], p["num_warps"], p["num_stages"], p["access"])
             for p in dot_seeds(matmul, dims_, bp, gpu)]
    assert seeds == [(128, 256, 64, 8, 3, "tma"), (128, 128, 64, 8, 3, "tma"), (64, 128, 64, 4, 4, "tma"),
                     (128, 128, 64, 8, 4, "tma")]
    assert neighbours(dims_, bp)[0]["access"] == "tma"
    X = lazy(4096, 4096, dtype=torch.float16)
    sdims = Space.derive(softmax, (X,), target="gpu").dimensions()
    sb = dataclasses.replace(softmax.bind((X,)), device=torch.device("cuda"))
    assert dot_seeds(softmax, sdims, base_point(sdims, dt.compile(softmax).complete(sb)), sb) == []
    # tensor-core tilings of the 16-bit probe only: not for fp32 ("ieee" FMA dots) on the GPU, nor
    # on the interpreter, whose few trials go to the heuristic's neighbours first
    F = lazy(1024, 1024)
    fdims = Space.derive(matmul, (F, F), target="gpu").dimensions()
    fb = dataclasses.replace(matmul.bind((F, F)), device=torch.device("cuda"))
    assert "tile.i" in dict(fdims) and dot_seeds(matmul, fdims, base_point(fdims, dt.compile(matmul).complete(fb)), fb) == []
    H = torch.randn(128, 128, dtype=torch.float16)
    sp = Space(tile={"i": [16, 64, 128], "j": [16, 64, 128], "k": [16, 64]})
    res = dt.explore(matmul, (H, H), space=sp, strategy="random", max_trials=1, budget=60, progress=False, store=False)
    first = neighbours(sp.dimensions(), base_point(sp.dimensions(), dt.compile(matmul).schedule_for(H, H)))[0]
    assert [r["params"] for r in res.table if r["origin"] != "heuristic"][0] == first   # not a 128x.. seed


def test_schedule_for_gives_a_tile_to_an_axis_moved_off_whole():
    """Complete schedules carry no tile for a "whole" axis that no kernel maps to programs; a point
    that moves it to loop/online gets the heuristic's default tile, so the candidate stays legal."""
    X = torch.randn(4, 32)
    base = dt.compile(softmax).schedule_for(X)
    assert base.strategy["j"] == "whole" and "j" not in base.tile
    sp = Space(strategy={"j": ["whole", "loop", "online"]})
    s = sp.schedule_for({"strategy.j": "loop"}, base, softmax, {"i": 4, "j": 32})
    assert s.tile["j"] == 32
    s.validate(softmax)
    assert sp.schedule_for({"strategy.j": "online"}, base, softmax).tile["j"] == 64   # no sizes: 64
    assert sp.schedule_for({"strategy.j": "whole", "tile.j": 8}, base, softmax) == base
    res = dt.explore(softmax, (X,), space=sp, budget=60, progress=False, store=False)
    assert {r["status"] for r in res.table} <= {"ok", "duplicate"}, res.table
