"""Split statistics finished by the last program of each tile (``split_mode="last"``,
:mod:`dtriton.plan.last_finish`).

On the interpreter (programs run one after another) against float64 torch, outputs poisoned with
NaN first, at odd sizes (splits that do not divide, size 1, primes), fp32 and fp16: the same values
as ``split_mode="finish"`` bit for bit (the same fold in the same order), one kernel fewer launched,
the counters left zero (a second call with fresh data computes its own statistics), the plan's
refusals, the schedule space and the heuristic's one-line switch.
"""
from __future__ import annotations

import pytest
import torch

import dtriton as dt
import dtriton.runtime.kernel as runtime_kernel
from dtriton.backends.triton.counters import counter_memory
from dtriton.library import batch_norm, frobenius_normalize, instance_norm, layer_norm_chw
from dtriton.plan.callspec import call_spec
from dtriton.plan.decide import plan_program
from dtriton.plan.last_finish import absorb_finishes
from dtriton.schedule import complete_schedule, heuristics, split_rules

F = torch.nn.functional


from test_finish_split import NORMS  # noqa: E402  (name -> algorithm, arguments, float64 oracle)


def split_schedule(alg, split, mode, kept_tile=1):
    """The statistics stages split over ``split``, their kept axes on the grid in tiles of
    ``kept_tile``, reduced axes looped in small tiles; the output in tiles of 4 x 8 (a partial tile
    at the odd sizes; the statistics kernels do not depend on them)."""
    stages = {}
    for st in alg.stages.values():
        if st.is_output:
            continue
        r = st.node
        stages[st.name] = dt.StageSchedule(grid=tuple(r.axes), tile=dict({a: kept_tile for a in r.axes},
                                                                           **{a: 2 for a in r.over}),
                                           strategy={a: "loop" for a in r.over})
    return dt.Schedule(grid=("n", "c", "h", "q"), tile={"n": 1, "c": 1, "h": 4, "q": 8}, split=split,
                       split_mode=mode, stages=stages)


def poisoned_call(k, args):
    x = args[0]
    out = torch.full(x.shape, float("nan"), dtype=x.dtype)
    k(*args, out=out)
    return out


def relative_error(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def count_launches(monkeypatch) -> list[str]:
    """The names of the kernels the runtime launches from now on."""
    names: list[str] = []
    real = runtime_kernel._BACKEND.launch

    def launch(fn, programs, args, meta, interpret):
        names.append(meta.name)
        return real(fn, programs, args, meta, interpret)
    monkeypatch.setattr(runtime_kernel._BACKEND, "launch", launch)
    return names


CASES = [("batch_norm", (5, 3, 7, 9), {"n": 2, "h": 3}, 1), ("batch_norm", (3, 2, 1, 11), {"n": 3, "q": 2}, 1),
         ("batch_norm", (4, 3, 5, 6), {"h": 2}, 2),   # c = 3 in tiles of 2: a masked lane of the last tile
         ("frobenius", (5, 3, 7, 9), {"n": 2, "h": 3}, 1), ("frobenius", (1, 1, 13, 3), {"h": 2}, 1),
         ("frobenius", (5, 3, 7, 9), {"n": 5, "h": 4}, 1),   # 20 partials of a scalar: folded as one block
         ("layer_norm_chw", (5, 3, 7, 9), {"h": 2, "q": 3}, 1), ("layer_norm_chw", (3, 2, 1, 11), {"c": 2}, 1),
         ("instance_norm", (2, 3, 7, 9), {"h": 3}, 1), ("instance_norm", (3, 5, 11, 2), {"h": 4, "q": 2}, 2)]


@pytest.mark.parametrize("name, shape, split, kept_tile", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_last_program_finishes_as_the_finishing_kernel(name, shape, split, kept_tile, dtype, monkeypatch):
    alg, make, eager = NORMS[name]
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    launched = count_launches(monkeypatch)
    outs, counts = {}, {}
    x = (torch.randn(shape) + 3.0).to(dtype)
    args = tuple(a.to(dtype) for a in make(x))
    ref = eager(*[a.double() for a in args])
    for mode in ("finish", "last"):
        k = dt.compile(alg, split_schedule(alg, split, mode, kept_tile))
        del launched[:]
        outs[mode] = poisoned_call(k, args)
        counts[mode] = list(launched)
        assert not outs[mode].isnan().any(), mode
        assert relative_error(outs[mode], ref) < tol, mode
    assert len(counts["last"]) == len(counts["finish"]) - 1, counts
    assert [n for n in counts["finish"] if "_finish_" not in n] == counts["last"], counts
    # the same fold in the same order: the same bits
    assert torch.equal(outs["finish"], outs["last"])
    assert not counter_memory(torch.device("cpu"), 1).any()   # every counter back to 0
    # the same compiled kernel again, on fresh data: its own statistics (the counters started at 0)
    x2 = (torch.randn(shape) * 2.0 - 1.0).to(dtype)
    args2 = tuple(a.to(dtype) for a in make(x2))
    out2 = poisoned_call(k, args2)
    assert relative_error(out2, eager(*[a.double() for a in args2])) < tol
    assert not counter_memory(torch.device("cpu"), 1).any()


def test_the_printed_split_kernel_counts_arrivals_and_resets():
    x = torch.randn(5, 3, 7, 9)
    args = NORMS["batch_norm"][1](x)
    src = dt.compile(batch_norm, split_schedule(batch_norm, {"n": 2, "h": 3}, "last")).source_for(*args)
    kernels = [blk.split("(")[0] for blk in src.split("def ")[1:]]
    assert kernels == ["_var_combine", "batch_norm_mean0_mean1", "batch_norm_out"], kernels
    stats = src.split("def batch_norm_mean0_mean1")[1].split("@_jit")[0]
    barrier, atomic = stats.index("tl.debug_barrier()"), stats.index('sem="acq_rel", scope="gpu"')
    assert stats.rindex("tl.store(buf_mean1_ptr") < barrier < atomic
    assert "== 5:" in stats and 'cache_modifier=".cg"' in stats
    assert stats.rstrip().endswith("0)  # the counter back to 0: zero for the next launch")
    assert "buf_mean0_final_ptr" in stats and "buf_mean1_final_ptr" in stats


def plan(alg, args, sched):
    b = alg.bind(args)
    return plan_program(alg, sched, b, call_spec(alg, b, args, True))


def test_the_plan_absorbs_the_finishing_kernel_and_keeps_it_where_it_cannot():
    x = torch.randn(5, 3, 7, 9)
    args = NORMS["batch_norm"][1](x)
    prog = plan(batch_norm, args, split_schedule(batch_norm, {"n": 2, "h": 2}, "last"))
    assert prog.ok(), prog.verify()
    assert [k.name for k in prog.kernels] == ["batch_norm_mean0_mean1", "batch_norm_out"]
    lf = prog.kernels[0].last_finish
    assert lf.finish == ("batch_norm_finish_mean0_mean1",) and [st.target for st in lf.stores] == [
        "buf_mean0_final", "buf_mean1_final"]
    cnt = prog.buffers[lf.counter]
    assert cnt.counter and cnt.dtype == "int32" and cnt.axes == ("c",)
    # a persistent split kernel (a program covers several tiles) keeps its finishing kernel
    prog = plan(batch_norm, args, split_schedule(batch_norm, {"n": 2, "h": 2}, "finish"))
    assert prog.kernels[1].finishes == "batch_norm_mean0_mean1"
    prog.kernels[0].persistent = 1
    kept = absorb_finishes(prog)
    assert "persistent" in kept["batch_norm_finish_mean0_mean1"]
    assert len(prog.kernels) == 3 and prog.kernels[0].last_finish is None


@pytest.mark.parametrize("mode", ["partials", "finish", "last"])
def test_the_plan_says_which_kernels_fold_partials_as_one_block(mode):
    """More than 16 partials read where the buffer's axes are scalar fold as one block (the plan's
    ``block_folds``, which the printer reads); 6 partials, or channels in tiles of 4, fold by a loop."""
    x = torch.randn(5, 3, 7, 9)
    sched = split_schedule(frobenius_normalize, {"n": 5, "h": 4}, mode)
    fro = plan(frobenius_normalize, (x,), sched)
    readers = [(k, uid) for k in fro.kernels for uid, b in k.materialized.items() if b.partials == 20]
    assert len(readers) == (0 if mode == "last" else 1) and all(uid in k.block_folds for k, uid in readers)
    if mode == "last":
        assert len(fro.kernels[0].last_finish.block_folds) == 1
    assert "the 20 split partials of sum0" in dt.compile(frobenius_normalize, sched).source_for(x)
    few = plan(frobenius_normalize, (x,), split_schedule(frobenius_normalize, {"n": 2, "h": 3}, mode))
    assert not any(k.block_folds for k in few.kernels)
    # 40 partials of the channel statistics: the output kernel (a channel a program) folds each as one
    # block; the finishing kernel (channels in tiles of 4) and a split kernel's last program by a loop
    args = NORMS["batch_norm"][1](torch.randn(40, 3, 7, 9))
    sched = split_schedule(batch_norm, {"n": 20, "h": 2}, mode)
    bn = plan(batch_norm, args, sched)
    assert [len(k.block_folds) for k in bn.kernels] == {"partials": [0, 2], "finish": [0, 0, 0], "last": [0, 0]}[mode]
    assert not any(k.last_finish.block_folds for k in bn.kernels if k.last_finish)
    src = dt.compile(batch_norm, sched).source_for(*args)
    assert ("the 40 split partials of mean0" in src) == (mode == "partials")


def test_the_space_explores_every_deterministic_mode_and_the_heuristic_switches_in_one_line(monkeypatch):
    from dtriton.tune import Space
    # the H200 bench shape (meta tensors): the heuristic finishes the statistics, the space has all three modes
    e = dict(device="meta", dtype=torch.float16)
    space = dict(Space.derive(frobenius_normalize, (torch.empty(16, 64, 256, 256, **e),), target="gpu").dimensions())
    assert list(space["split_mode"]) == ["partials", "finish", "last"], space.get("split_mode")
    monkeypatch.setitem(heuristics.ROW_BLOCK, True, 64)
    monkeypatch.setitem(heuristics.STEP_BLOCK, True, 16)
    monkeypatch.setattr(split_rules, "FINISH_FOLDS", 1)
    x = torch.randn(5, 3, 7, 9) + 3.0
    b = frobenius_normalize.bind((x,))
    b.device = torch.device("cuda")
    assert complete_schedule(frobenius_normalize, None, b).split_mode == "last"   # the default (s13)
    monkeypatch.setattr(split_rules, "FINISHED_MODE", "finish")
    assert complete_schedule(frobenius_normalize, None, b).split_mode == "finish"
    monkeypatch.setattr(split_rules, "FINISHED_MODE", "last")
    s = complete_schedule(frobenius_normalize, None, b)
    assert s.split_mode == "last" and s.split
    out = poisoned_call(dt.compile(frobenius_normalize, s), (x,))
    assert relative_error(out, x.double() / torch.linalg.vector_norm(x.double())) < 1e-5


@pytest.mark.parametrize("name", ["batch_norm", "frobenius"])
def test_the_bench_shapes_plan_two_kernels_under_last(name):
    """At the H200 bench shapes (the heuristic's split statistics, nothing allocated) "last" plans the
    statistics and output kernels only: the split kernel absorbs its finishing kernel there."""
    e = dict(device="meta", dtype=torch.float16)
    alg, args = ((batch_norm, (torch.empty(64, 64, 512, 512, **e), torch.empty(64, **e), torch.empty(64, **e)))
                 if name == "batch_norm" else (frobenius_normalize, (torch.empty(16, 64, 256, 256, **e),)))
    b = alg.bind(args)
    b.device = torch.device("cuda")
    s = complete_schedule(alg, None, b)
    assert s.split_mode == "last"   # the heuristic's (split_rules.FINISHED_MODE)
    for mode, n in (("finish", 3), ("last", 2)):
        prog = plan_program(alg, s.replace(split_mode=mode), b, call_spec(alg, b, args, False))
        assert prog.ok() and len(prog.kernels) == n, [k.name for k in prog.kernels]
    assert prog.kernels[0].last_finish is not None and prog.kernels[0].split_factor > 1


@pytest.mark.parametrize("T, split", [(53, 3), (7, 2)])
def test_split_attention_finished_by_its_last_programs_matches_sdpa(T, split):
    """Split-KV attention (an online group: a max and sums rescaled by it, over different kept axes): both
    finishing kernels (one per set of kept axes) run in the split kernel's last program per tile."""
    from dtriton.library import attention
    Q, K, V = torch.randn(1, 2, 5, 16), torch.randn(1, 2, T, 16), torch.randn(1, 2, T, 16)
    outs = {}
    for mode in ("finish", "last"):
        s = dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": 16, "j": 8}, split={"j": split},
                        split_mode=mode, strategy={"j": "online", "d": "whole", "e": "whole"},
                        stages={"sum0": {"place": "fuse"}})
        k = dt.compile(attention, s)
        outs[mode] = out = torch.full((1, 2, 5, 16), float("nan"))
        k(Q, K, V, 0.25, out=out)
        ref = F.scaled_dot_product_attention(Q.double(), K.double(), V.double(), scale=0.25)
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
        finishing = k.source_for(Q, K, V, 0.25).count("def attention_finish_")
        assert finishing == (0 if mode == "last" else 2), finishing
    assert torch.equal(outs["finish"], outs["last"])
    assert not counter_memory(torch.device("cpu"), 1).any()
