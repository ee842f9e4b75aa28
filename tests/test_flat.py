"""Flat axes over contiguous tensors (schedule knob ``flat_axes``, :mod:`dtriton.plan.flat`), issue 16.

Element-wise output kernels (batch norm's normalise pass) take one flat grid axis, the whole-tensor sum
of the Frobenius norm one flat loop axis split in contiguous runs; a tensor whose last dims are the
members in order and that is contiguous is addressed by the flat index, broadcast operands by the
members' indices decomposed from it. Every case runs on the interpreter against float64 with the
outputs poisoned; the refusals (a non-contiguous tensor, members out of order, a computed index, an
extent past 32-bit arithmetic) keep the ordinary plan and the right values.
"""
from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

import dtriton as dt
from conftest import check
from dtriton.errors import ScheduleError, ScheduleWarning
from dtriton.library import batch_norm, frobenius_normalize, instance_norm, matmul
from dtriton.plan import flat as flatmod
from dtriton.schedule import complete_schedule, draft, heuristics
from dtriton.tune import space_rules

F = torch.nn.functional
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


@pytest.fixture
def small_gpu(monkeypatch):
    """The GPU heuristic at small shapes (statistics get kernels of their own and split), as in
    test_norm_tiles."""
    monkeypatch.setitem(heuristics.ROW_BLOCK, True, 64)
    monkeypatch.setitem(heuristics.STEP_BLOCK, True, 16)
    monkeypatch.setattr(draft, "sm_count", lambda device: 4)


def gpu_schedule(alg, args, **kw) -> dt.Schedule:
    """The GPU heuristic's schedule for ``args`` (bound as if on CUDA) with ``kw`` replaced."""
    b = dataclasses.replace(alg.bind(args), device=torch.device("cuda"))
    return complete_schedule(alg, None, b).replace(**kw)


def bn_args(shape, dtype):
    x = torch.randn(shape).to(dtype)
    return x, torch.randn(shape[1]).to(dtype), torch.randn(shape[1]).to(dtype)


def _bn(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True, eps=1e-5)


def _fro(x):
    return x / torch.linalg.vector_norm(x)


def kernel_source(k: dt.Kernel, name: str) -> str:
    """The printed kernel ``name`` of ``k``'s most recent call."""
    src = k.source
    i = src.index(f"def {name}(")
    j = src.find("\n@_jit", i)
    return src[i:] if j < 0 else src[i:j]


# -- batch norm's output pass: one flat grid axis ---------------------------------------------------
def split_bn(flat: int, h: int = 4, q: int = 8) -> dt.Schedule:
    """Batch norm as the H200 runs it (statistics split over n, finished; output tiles h x q) at small sizes."""
    return dt.Schedule(grid=("n", "c", "h", "q"), tile={"n": 1, "c": 1, "h": h, "q": q}, split={"n": 2},
                       split_mode="finish", flat_axes=flat,
                       stages={m: dt.StageSchedule(strategy={"h": "loop", "n": "loop", "q": "whole"},
                                                   tile={"c": 1, "h": 2, "n": 1}) for m in ("mean0", "mean1")})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 3, 8, 16), (3, 5, 7, 9), (1, 3, 1, 16), (2, 3, 4, 1), (1, 1, 5, 3)])
@pytest.mark.parametrize("flat", [2, 4])
@pytest.mark.parametrize("heuristic", [True, False])
def test_batch_norm_flat_output_matches_float64(small_gpu, dtype, shape, flat, heuristic):
    """The GPU heuristic's schedule (small budgets) or the H200's split plan, with flat_axes."""
    args = bn_args(shape, dtype)
    sched = gpu_schedule(batch_norm, args, flat_axes=flat) if heuristic else split_bn(flat)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScheduleWarning)   # (the heuristic's fused kernel at some shapes)
        k, _ = check(batch_norm, args, sched, torch_ref=_bn, tol=TOL[dtype])
    if not heuristic:
        assert "flat over" in kernel_source(k, "batch_norm_out")
    out = kernel_source(k, "batch_norm_out")
    members = ["n", "c", "h", "q"][-flat:]
    fused = [a for a in sched.grid if a in members]
    if len(fused) >= 2:   # the innermost grid axes fused, X and out addressed by the flat index
        name = "".join(fused)
        assert f"flat over {', '.join(fused)}" in out, out
        dims = {"n": 0, "c": 1, "h": 2, "q": 3}
        load = next(ln for ln in out.splitlines() if "tl.load(X_ptr" in ln)
        store = next(ln for ln in out.splitlines() if "tl.store(out_ptr" in ln)
        for a in fused:   # no stride of a member: the flat index is the address
            assert f"X_s{dims[a]}" not in load and f"out_s{dims[a]}" not in store, out
        assert f"offs_{name}" in load and f"offs_{name}" in store, out


def test_batch_norm_flat_prints_gathers_or_program_scalars():
    """Flat over (n, c, h, q): the channel is decomposed per element; over (h, q): one per program."""
    x, w, b = bn_args((2, 3, 8, 16), torch.float32)
    base = dict(grid=("n", "c", "h", "q"), tile={"n": 1, "c": 1, "h": 4, "q": 16}, split={"n": 2}, split_mode="finish",
                stages={m: dt.StageSchedule(strategy={"h": "loop", "n": "loop", "q": "whole"},
                                            tile={"c": 1, "h": 4, "n": 1}) for m in ("mean0", "mean1")})
    k4, _ = check(batch_norm, (x, w, b), dt.Schedule(**base, flat_axes=4), torch_ref=_bn)
    out4 = kernel_source(k4, "batch_norm_out")
    assert "offs_c = (offs_nchq // (size_h * size_q)) % size_c" in out4, out4
    assert "w_ptr + offs_c * w_s0" in out4 and "BLOCK_NCHQ" in out4, out4
    k2, _ = check(batch_norm, (x, w, b), dt.Schedule(**base, flat_axes=2), torch_ref=_bn)
    out2 = kernel_source(k2, "batch_norm_out")
    assert "X_ptr + pid_n * X_s0 + pid_c * X_s1 + (offs_hq)" in out2 and "w_ptr + pid_c * w_s0" in out2, out2
    # the statistics kernel (a variance state) is never flat
    assert "flat" not in kernel_source(k4, "batch_norm_mean0_mean1")


def test_non_contiguous_inputs_and_outputs_keep_the_ordinary_plan():
    """A transposed or strided X, or a strided out=, is not addressed flat: the kernel keeps its tiles
    (X[n, c, h, q] read through its strides) and computes the float64 values."""
    base = dict(grid=("n", "c", "h", "q"), tile={"n": 1, "c": 1, "h": 4, "q": 8}, split={"n": 2}, split_mode="finish",
                stages={m: dt.StageSchedule(strategy={"h": "loop", "n": "loop", "q": "whole"},
                                            tile={"c": 1, "h": 4, "n": 1}) for m in ("mean0", "mean1")}, flat_axes=4)
    w, b = torch.randn(3), torch.randn(3)
    for x in (torch.randn(2, 3, 8, 6).transpose(2, 3), torch.randn(2, 3, 6, 16)[:, :, :, ::2],
              torch.randn(3, 2, 6, 8).transpose(0, 1)):
        assert not x.is_contiguous()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ScheduleWarning)
            k, _ = check(batch_norm, (x, w, b), dt.Schedule(**base), torch_ref=_bn)
        assert "flat over" not in kernel_source(k, "batch_norm_out")
    x = torch.randn(2, 3, 6, 8)
    out = torch.full((2, 3, 6, 16), float("nan"))[:, :, :, ::2]
    k = dt.compile(batch_norm, dt.Schedule(**base))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScheduleWarning)
        got = k(x, w, b, out=out)
    torch.testing.assert_close(got.double(), _bn(x.double(), w.double(), b.double()), rtol=1e-5, atol=1e-5)
    assert "flat over" not in kernel_source(k, "batch_norm_out")
    got = k(x, w, b)   # the same schedule on a contiguous call: flat (its own specialisation)
    assert "flat over n, c, h, q" in kernel_source(k, "batch_norm_out")


@dt.algorithm
def add_transposed(X: dt.Tensor["I", "J", "K"], Y: dt.Tensor["K", "J"]):
    i, j, k = dt.axes("i j k")
    return (X[i, j, k] * 2.0 + Y[k, j])[i, j, k]


@dt.algorithm
def add_full_transposed(X: dt.Tensor["I", "J"], Z: dt.Tensor["J", "I"]):
    i, j = dt.axes("i j")
    return (X[i, j] - Z[j, i])[i, j]


@dt.algorithm
def shifted_sum(X: dt.Tensor["I", "J"], Y: dt.Tensor["I", "J"]):
    i, j = dt.axes("i j")
    return (X[i, j] + Y.pad(0.0)[i, j + 1])[i, j]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_broadcast_operand_in_another_order_reads_decomposed_indices(dtype):
    X, Y = torch.randn(3, 5, 7).to(dtype), torch.randn(7, 5).to(dtype)
    sched = dt.Schedule(grid=("i", "j", "k"), tile={"i": 1, "j": 2, "k": 8}, flat_axes=3)
    k, _ = check(add_transposed, (X, Y), sched, tol=TOL[dtype])
    src = kernel_source(k, "add_transposed_out")
    assert "flat over i, j, k" in src and "X_ptr + 0 + (offs_ijk)" in src, src
    assert "Y_ptr + offs_k * Y_s0 + offs_j * Y_s1" in src, src


def test_full_rank_operands_out_of_order_or_computed_are_not_flat():
    X, Z = torch.randn(5, 6), torch.randn(6, 5)
    sched = dt.Schedule(grid=("i", "j"), tile={"i": 2, "j": 4}, flat_axes=2)
    with pytest.warns(ScheduleWarning, match="flat_axes=2 has no effect"):
        k, _ = check(add_full_transposed, (X, Z), sched)
    assert "flat" not in kernel_source(k, "add_full_transposed_out")
    Y = torch.randn(5, 6)
    with pytest.warns(ScheduleWarning, match="flat_axes=2 has no effect"):
        k, _ = check(shifted_sum, (X, Y), sched)
    assert "flat" not in kernel_source(k, "shifted_sum_out")


def test_the_32_bit_extent_limit_refuses(monkeypatch):
    monkeypatch.setattr(flatmod, "FLAT_I32_EXTENT", 64)
    X, Y = torch.randn(3, 5, 7), torch.randn(7, 5)
    sched = dt.Schedule(grid=("i", "j", "k"), tile={"i": 1, "j": 2, "k": 8}, flat_axes=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScheduleWarning)
        k, _ = check(add_transposed, (X, Y), sched)
    # 3 x 5 x 7 (buckets 4 x 8 x 8 = 256) is past the limit; the two innermost (64) are not, but Y reads
    # both of them in the other order
    assert "flat" not in kernel_source(k, "add_transposed_out")
    monkeypatch.setattr(flatmod, "FLAT_I32_EXTENT", 256)
    k, _ = check(add_transposed, (X, Y), sched)
    assert "flat over i, j, k" in kernel_source(k, "add_transposed_out")


# -- whole-tensor sums: one flat loop axis split in contiguous runs ----------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 4, 8, 16), (3, 5, 7, 9), (1, 1, 3, 64), (2, 3, 1, 1)])
@pytest.mark.parametrize("flat", [2, 4])
def test_frobenius_flat_sum_matches_float64(small_gpu, dtype, shape, flat):
    x = torch.randn(shape).to(dtype)
    sched = gpu_schedule(frobenius_normalize, (x,), flat_axes=flat)
    k, _ = check(frobenius_normalize, (x,), sched, torch_ref=_fro, tol=TOL[dtype])
    if sched.split:
        src = kernel_source(k, "frobenius_normalize_sum0")
        assert "flat over" in src and "(offs_" in src, (sched, src)


def test_frobenius_flat_sum_splits_the_flat_index():
    """The members' splits multiply into one split of the flat axis: 2 x 4 = 8 contiguous runs, each a
    whole number of 16 x 8 = 128-element blocks."""
    x = torch.randn(2, 4, 8, 16)
    sched = dt.Schedule(grid=("n", "c", "h", "q"), tile={"n": 1, "c": 1, "h": 4, "q": 16}, split={"n": 2, "h": 4},
                        split_mode="finish", flat_axes=4,
                        stages={"sum0": dt.StageSchedule(strategy={"c": "loop", "h": "loop", "n": "loop", "q": "whole"},
                                                         tile={"c": 8, "h": 1, "n": 1})})
    k, _ = check(frobenius_normalize, (x,), sched, torch_ref=_fro)
    src = kernel_source(k, "frobenius_normalize_sum0")
    assert "split of nchq into 8" in src and "axis nchq: loop, block 128, flat over n, c, h, q" in src, src
    assert "tl.load(X_ptr + 0 + (offs_nchq))" in src, src
    # a stage may turn it off for its own kernel
    off = sched.replace(stages={"sum0": sched.stage("sum0").replace(flat_axes=0)})
    k, _ = check(frobenius_normalize, (x,), off, torch_ref=_fro)
    assert "flat" not in kernel_source(k, "frobenius_normalize_sum0")
    assert "flat over n, c, h, q" in kernel_source(k, "frobenius_normalize_out")


@dt.algorithm
def plane_sumsq(X: dt.Tensor["N", "C", "H", "W"]):
    n, c, h, q = dt.axes("n c h q")
    return dt.sum(X[n, c, h, q] * X[n, c, h, q], over=(h, q))[n, c]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (2, 2, 8, 16)])
def test_sum_over_trailing_axes_with_kept_axes(dtype, shape):
    x = torch.randn(shape).to(dtype)
    sched = dt.Schedule(grid=("n", "c"), tile={"n": 1, "c": 1, "h": 2}, strategy={"h": "loop", "q": "whole"},
                        flat_axes=2)
    k, _ = check(plane_sumsq, (x,), sched, torch_ref=lambda x: (x * x).sum((2, 3)), tol=TOL[dtype])
    src = kernel_source(k, "plane_sumsq_out")
    assert "flat over h, q" in src and "X_ptr + pid_n * X_s0 + pid_c * X_s1 + (offs_hq)" in src, src


def test_variance_statistics_and_dots_are_not_flat():
    x = torch.randn(2, 3, 8, 16)
    sched = dt.Schedule(grid=("n", "c"), tile={"n": 1, "c": 1}, strategy={"h": "whole", "q": "whole"}, flat_axes=4,
                        stages={"mean0": dt.StageSchedule(place="fuse"), "mean1": dt.StageSchedule(place="fuse")})
    with pytest.warns(ScheduleWarning, match="flat_axes=4 has no effect"):
        k, _ = check(instance_norm, (x,), sched, torch_ref=lambda x: F.instance_norm(x, eps=1e-5))
    a, b_ = torch.randn(16, 16), torch.randn(16, 16)
    with pytest.warns(ScheduleWarning, match="flat_axes=8 has no effect"):
        check(matmul, (a, b_), dt.Schedule(flat_axes=8))


# -- the knob and its exploration -----------------------------------------------------------------
def test_flat_axes_values():
    assert dt.Schedule().flat_axes == 0
    s = dt.Schedule(flat_axes=4, stages={"sum0": {"flat_axes": 0}})
    assert dt.Schedule.from_json(s.to_json()) == s and s.stage("sum0").flat_axes == 0
    for bad in (1, 9, -1, True, 2.0):
        with pytest.raises(ScheduleError, match="flat_axes"):
            dt.Schedule(flat_axes=bad)


def test_exploration_tries_flat_axes_on_the_gpu_for_element_wise_and_sums():
    x = torch.randn(2, 3, 8, 16)
    for alg, args, want in ((frobenius_normalize, (x,), [0, 2, 8]), (matmul, (x[0, 0], x[0, 0].T), None)):
        b = alg.bind(args)
        d = space_rules.Derivation(alg, b, dt.compile(alg).schedule_for(*args), True, None,
                                   space_rules.contractions(alg))
        assert space_rules.RULES["flat_axes"](None, d) == want
        assert space_rules.RULES["flat_axes"](None, dataclasses.replace(d, gpu=False)) is None


def test_64_bit_offsets_make_the_flat_index_64_bit(monkeypatch):
    """With 64-bit offsets (forced: the 32-bit limit lowered to 100) the flat extent, tile starts, split
    chunks and the members' decomposition are int64, and the values still match float64."""
    from dtriton.plan import callspec
    monkeypatch.setattr(callspec, "I32_MAX", 100)
    X, Y = torch.randn(3, 5, 7), torch.randn(7, 5)
    sched = dt.Schedule(grid=("i", "j", "k"), tile={"i": 1, "j": 2, "k": 8}, flat_axes=3)
    k, _ = check(add_transposed, (X, Y), sched)
    out = kernel_source(k, "add_transposed_out")
    assert "(tl.cast(size_i, tl.int64) * size_j * size_k)" in out and "pid_ijk.to(tl.int64) *" in out, out
    x, w, b = bn_args((2, 3, 5, 16), torch.float32)
    k, _ = check(batch_norm, (x, w, b), split_bn(4), torch_ref=_bn)
    assert "(tl.cast(size_n, tl.int64) * size_c * size_h * size_q)" in kernel_source(k, "batch_norm_out")
    x = torch.randn(2, 4, 8, 16)
    sched = dt.Schedule(grid=("n", "c", "h", "q"), tile={"n": 1, "c": 1, "h": 4, "q": 16}, split={"n": 2, "h": 4},
                        split_mode="finish", flat_axes=4,
                        stages={"sum0": dt.StageSchedule(strategy={"c": "loop", "h": "loop", "n": "loop", "q": "whole"},
                                                         tile={"c": 8, "h": 1, "n": 1})})
    k, _ = check(frobenius_normalize, (x,), sched, torch_ref=_fro)
    src = kernel_source(k, "frobenius_normalize_sum0")
    assert "flat over n, c, h, q" in src and "tl.cast(size_n, tl.int64)" in src, src
