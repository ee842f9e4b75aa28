"""Online groups split across programs (issue 18: split-KV / flash-decoding): one kernel runs the
online pass (max, rescaled sums) over each slice of the split axis and stores per-split partials;
the reader merges them, rescaled by each split's max. On the interpreter against float64 and
against the unsplit kernel."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import dtriton as dt
from dtriton.library import attention, causal_attention, softmax
from dtriton.plan import call_spec, plan_program
from dtriton.schedule import complete_schedule

from conftest import check, randn


@dt.algorithm
def length_attention(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "T", "D"],
                     V: dt.Tensor["B", "H", "T", "D"], L: dt.Tensor["B"]):
    """Attention over the first ``L[b]`` keys of each batch entry."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.where(j < L[b], dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * 0.25, -float("inf"))
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


def _split(n, ti=16, tj=16, **kw) -> dt.Schedule:
    return dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": ti, "j": tj}, split={"j": n} if n > 1 else {},
                       strategy={"j": "online", "d": "whole", "e": "whole"}, stages={"sum0": {"place": "fuse"}}, **kw)


def _sdpa(scale, mask=None):
    return lambda q, k, v, *_: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def _program(alg, args, sched):
    b = alg.bind(args)
    return plan_program(alg, complete_schedule(alg, sched, b), b, call_spec(alg, b, args, interpret=True))


@pytest.mark.parametrize("T, n", [(200, 4), (200, 3), (53, 8), (16, 2), (200, 20)])
def test_decode_split_matches_unsplit_and_float64(T, n):
    Q, K, V = randn(2, 2, 1, 16), randn(2, 2, T, 16), randn(2, 2, T, 16)
    args = (Q, K, V, 0.25)
    _, (split,) = check(attention, args, _split(n), torch_ref=_sdpa(0.25))
    _, (whole,) = check(attention, args, _split(1), torch_ref=_sdpa(0.25))
    torch.testing.assert_close(split, whole, rtol=1e-5, atol=1e-6)


def test_split_group_is_one_kernel_with_rescaled_partials():
    Q, K, V = randn(1, 2, 1, 16), randn(1, 2, 70, 16), randn(1, 2, 70, 16)
    prog = _program(attention, (Q, K, V, 0.25), _split(4))
    assert [k.name for k in prog.kernels] == ["attention_max0_sum1_sum2", "attention_out"]
    group = prog.kernels[0]
    assert sorted(st.target for st in group.stores) == ["buf_max0", "buf_sum1", "buf_sum2"]
    assert all(st.partial_axis for st in group.stores) and group.axes["j"].role == "online"
    assert group.passes[0].online and group.split == ("j", 4)
    assert prog.buffers["buf_sum1"].rescale == prog.buffers["buf_sum2"].rescale == "buf_max0"
    assert prog.buffers["buf_sum1"].partials == 4 and not prog.buffers["buf_sum1"].zero


def test_prefill_split_odd_sizes():
    Q, K, V = randn(1, 2, 37, 16), randn(1, 2, 53, 16), randn(1, 2, 53, 16)
    check(attention, (Q, K, V, 0.25), _split(3, ti=16, tj=8), torch_ref=_sdpa(0.25))


def test_causal_split_with_bounds_skips_whole_slices():
    """Early query tiles see none of the last slices: those store (-inf, 0) partials, weight 0."""
    Q, K, V = (randn(1, 2, 45, 16) for _ in range(3))
    mask = torch.ones(45, 45, dtype=torch.bool).tril()
    check(causal_attention, (Q, K, V, 0.25), _split(4, ti=16, tj=8), torch_ref=_sdpa(0.25, mask))


def test_length_split_with_empty_slices():
    Q, K, V = randn(3, 1, 4, 16), randn(3, 1, 61, 16), randn(3, 1, 61, 16)
    L = torch.tensor([61, 5, 30])
    mask = (torch.arange(61)[None, :] < L[:, None])[:, None, None, :]
    check(length_attention, (Q, K, V, L), _split(4, ti=16, tj=8), torch_ref=_sdpa(0.25, mask))


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")   # the NaN rows: 0 / 0
def test_split_merges_compute_no_invalid_values():
    """Masked query rows (37 in tiles of 16) read the split partials' masked lanes, and rows whose every
    slice is empty (L = 0) merge only -inf maxima: the merged sums were 0 there (0 / 0 in the output's
    division) and the shift -inf - -inf; now masked lanes read 1.0 and the shift is 0 where every split is
    empty. Values against float64 torch; the rows of no visible key stay NaN (0 / 0 as torch's: that warns)."""
    from conftest import numpy_warnings_raise
    Q, K, V = randn(3, 1, 37, 16), randn(3, 1, 61, 16), randn(3, 1, 61, 16)
    L = torch.tensor([61, 5, 30])
    mask = (torch.arange(61)[None, :] < L[:, None])[:, None, None, :]
    with numpy_warnings_raise():
        check(length_attention, (Q, K, V, L), _split(4, ti=16, tj=8), torch_ref=_sdpa(0.25, mask))
        for sched in (_split(3, ti=16, tj=8), _split(2, ti=16, tj=8, split_mode="finish")):
            check(attention, (Q, K, V, 0.25), sched, torch_ref=_sdpa(0.25))
    L0 = torch.tensor([0, 40, 7])
    with warnings.catch_warnings():   # the shift of a row with no visible key (its output is 0 / 0: NaN, as torch's)
        warnings.filterwarnings("error", message="invalid value encountered in subtract", category=RuntimeWarning)
        out = dt.compile(length_attention, _split(4, tj=8))(Q, K, V, L0)
    ref = length_attention.reference(Q.double(), K.double(), V.double(), L0)
    assert torch.isnan(out[0]).all() and torch.isnan(ref[0]).all()
    torch.testing.assert_close(out[1:].double(), ref[1:], rtol=1e-5, atol=1e-5)


def test_softmax_split_reads_the_max_and_the_rescaled_sum():
    X = randn(5, 301, scale=4.0)
    sched = dt.Schedule(grid=("i",), tile={"i": 1, "j": 32}, split={"j": 4}, strategy={"j": "online"})
    prog = _program(softmax, (X,), sched)
    assert len(prog.kernels) == 2 and prog.buffers["buf_sum0"].rescale == "buf_max0"
    check(softmax, (X,), sched, torch_ref=lambda x: torch.softmax(x, 1))


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")   # the NaN rows: 0 / 0
def test_rows_with_no_visible_key_are_nan_as_in_torch():
    Q, K, V = randn(2, 1, 3, 16), randn(2, 1, 40, 16), randn(2, 1, 40, 16)
    L = torch.tensor([0, 40])
    out = dt.compile(length_attention, _split(4, tj=8))(Q, K, V, L)
    assert torch.isnan(out[0]).all() and torch.isfinite(out[1]).all()
    ref = length_attention.reference(Q.double(), K.double(), V.double(), L)
    assert torch.isnan(ref[0]).all() and math.isclose(0, (out[1] - ref[1]).abs().max().item(), abs_tol=1e-5)


def _gpu_plan(alg, args):
    import dataclasses
    b = dataclasses.replace(alg.bind(args), device=torch.device("cuda"))
    full = complete_schedule(alg, None, b)
    return full, plan_program(alg, full, b, call_spec(alg, b, args, interpret=False))


def test_gpu_heuristic_splits_the_keys_of_few_decoding_programs():
    """B1 H4 decoding at T=8192: 4 programs on 132 SMs, so the keys are split (each slice still 8+
    tiles); B16 H32 has 512 programs and keeps one pass."""
    few = tuple(torch.empty(s, dtype=torch.float16, device="meta") for s in [(1, 4, 1, 128), (1, 4, 8192, 128),
                                                                              (1, 4, 8192, 128)])
    full, prog = _gpu_plan(attention, few + (0.088,))
    assert full.split.get("j", 1) >= 8 and full.strategy["j"] == "online"
    assert [k.name for k in prog.kernels] == ["attention_max0_sum1_sum2", "attention_out"]
    many = tuple(torch.empty(s, dtype=torch.float16, device="meta") for s in [(16, 32, 1, 128), (16, 32, 8192, 128),
                                                                               (16, 32, 8192, 128)])
    full, prog = _gpu_plan(attention, many + (0.088,))
    assert not full.split and len(prog.kernels) == 1


def test_heuristic_split_schedule_runs_on_the_interpreter():
    """The GPU's split-KV schedule, run here: same result as SDPA."""
    Q, K, V = randn(1, 2, 1, 16), randn(1, 2, 1100, 16), randn(1, 2, 1100, 16)
    b = attention.bind((Q, K, V, 0.25))
    import dataclasses
    full = complete_schedule(attention, None, dataclasses.replace(b, device=torch.device("cuda")))
    assert full.split.get("j", 1) > 1
    check(attention, (Q, K, V, 0.25), full.replace(access="pointer"), torch_ref=_sdpa(0.25))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_split_of_base2_online_groups_in_16_bit(dtype):
    """16-bit calls write attention's exponentials in base 2 (exp2 of a max scaled by log2 e): the
    split partials are then rescaled by exp2 too."""
    Q, K, V = (randn(1, 2, n, 16, dtype=dtype) for n in (3, 90, 90))
    prog = _program(attention, (Q, K, V, 0.25), _split(4, tj=16))
    assert prog.buffers["buf_sum1"].rescale_exp == "exp2" and len(prog.kernels) == 2
    _, (split,) = check(attention, (Q, K, V, 0.25), _split(4, tj=16), torch_ref=_sdpa(0.25))
