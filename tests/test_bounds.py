"""Loop bounds derived from masks (issue 18): the IR facts (ir/bounds.py), the plan's decision
(plan/bounds.py) and the printed loops, on the interpreter against float64.

Causal, sliding-window and per-row-length attention, a lower-triangular and a banded matrix
product, on odd sizes with tiles that straddle the diagonal; a test that tiles are really
skipped (an inf the skipped tiles hold never reaches the output), and the launch-order knob."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import dtriton as dt
from dtriton.ir import Axis, Binary, Const, Reduce, ScalarParam, axis_bounds, guard, reduction_guard
from dtriton.library import causal_attention, softmax
from dtriton.plan import call_spec, plan_program
from dtriton.backends import default_backend
from dtriton.schedule import complete_schedule

from conftest import check, randn, run_bench


@dt.algorithm
def window_attention(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "S", "D"],
                     V: dt.Tensor["B", "H", "S", "D"], W: int):
    """Causal attention over the last W keys: ``where((j <= i) & (j > i - W), s, -inf)``."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.where((j <= i) & (j > i - W), dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * 0.25, -float("inf"))
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def length_attention(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "T", "D"],
                     V: dt.Tensor["B", "H", "T", "D"], L: dt.Tensor["B"]):
    """Attention over the first ``L[b]`` keys of each batch entry."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.where(j < L[b], dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * 0.25, -float("inf"))
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def tril_matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    """``tril(A) @ B`` written with a mask on the reduced axis."""
    i, j, k = dt.axes("i j k")
    return dt.sum(dt.where(k <= i, A[i, k], 0.0) * B[k, j], over=k)[i, j]


@dt.algorithm
def banded_matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"], W: int):
    """The band ``|k - i| <= W`` of ``A`` times ``B``."""
    i, j, k = dt.axes("i j k")
    return dt.sum(dt.where((k >= i - W) & (k <= i + W), A[i, k], 0.0) * B[k, j], over=k)[i, j]


@dt.algorithm
def tril_rowsum(A: dt.Tensor["M", "K"]):
    """Row sums of the lower triangle, the mask as a factor: ``A * (k <= i)``."""
    i, k = dt.axes("i k")
    return dt.sum(A[i, k] * (k <= i), over=k)[i]


def _flash(ti=16, tj=8, **kw) -> dt.Schedule:
    return dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": ti, "j": tj},
                       strategy={"j": "online", "d": "whole", "e": "whole"}, stages={"sum0": {"place": "fuse"}}, **kw)


def _mm(tm=16, tk=16, **kw) -> dt.Schedule:
    return dt.Schedule(grid=("i", "j"), tile={"i": tm, "j": 16, "k": tk}, **kw)


def _sdpa(Q, K, V, mask):
    return torch.nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=mask, scale=0.25)


def _plan(alg, args, sched):
    b = alg.bind(args)
    full = complete_schedule(alg, sched, b)
    return plan_program(alg, full, b, call_spec(alg, b, args, interpret=True))


def _bounds(prog):
    return [lb for k in prog.kernels for lb in k.bounds.values()]


# -- the IR facts --------------------------------------------------------------------------------
def test_guard_finds_the_condition_through_exp_sub_and_products():
    i, j = Axis("i"), Axis("j")
    c = Binary("le", j, i)
    s = dt.where(c, Axis("x"), -math.inf)
    assert guard(s, -math.inf) is c
    assert guard(dt.exp(s - Axis("m")), 0.0) is c
    assert guard(dt.exp(s - Axis("m")) * Axis("v"), 0.0) is c
    assert guard(Axis("v") * c, 0.0) is c
    assert guard(dt.exp(s - Axis("m")) * Axis("v") / Axis("l"), 0.0) is c      # attention's dV term
    assert guard(Axis("x") + dt.where(c, 0.0, -math.inf), -math.inf) is c     # an additive mask (bias)
    assert axis_bounds(guard(dt.where(j > i, -math.inf, Axis("x")), -math.inf), "j").upper   # where(not c, -inf, x)
    assert guard(s, 0.0) is None                 # -inf outside c, not 0
    assert guard(dt.exp(s * Axis("scale")), 0.0) is None   # a scale of unknown sign


def test_axis_bounds_solve_comparisons_of_the_axis():
    i, j, w = Axis("i"), Axis("j"), ScalarParam("W", int)
    ab = axis_bounds((j <= i) & (j > i - w), "j")
    assert ab.exact and len(ab.lower) == 1 and len(ab.upper) == 1
    ab = axis_bounds(i >= j, "j")                # the axis on the right
    assert ab.exact and not ab.lower and len(ab.upper) == 1
    ab = axis_bounds((j * 2 <= i) & (j < i), "j")   # j * 2 is not solved: not exact
    assert not ab.exact and len(ab.upper) == 1
    assert axis_bounds(j != i, "j").empty
    assert axis_bounds(-j + i >= Const(0.0, integer=True), "j").upper   # -j + i >= 0: j < i + 1


def test_reduction_guard_needs_the_identity_of_the_kind():
    i, j, x = Axis("i"), Axis("j"), Axis("x")
    c = Binary("le", j, i)
    zero_outside = dt.where(c, x, 0.0)
    assert reduction_guard(Reduce("sum", zero_outside, ("j",), "s")) is c
    assert reduction_guard(Reduce("max", zero_outside, ("j",), "m")) is None      # max's identity is -inf
    assert reduction_guard(Reduce("argmax", dt.where(c, x, -math.inf), ("j",), "a")) is None   # index pairs


# -- the plan ------------------------------------------------------------------------------------
def test_plan_bounds_causal_attention_and_the_knob_turns_them_off():
    Q, K, V = (randn(1, 2, 37, 16) for _ in range(3))
    (lb,) = _bounds(_plan(causal_attention, (Q, K, V, 0.25), _flash()))
    assert lb.axis == "j" and not lb.lower and len(lb.upper) == 1 and lb.unmasked
    assert _bounds(_plan(causal_attention, (Q, K, V, 0.25), _flash(mask_bounds=False))) == []
    src = dt.compile(causal_attention, _flash()).source_for(Q, K, V, 0.25)
    assert "loop bounds of j from the mask" in src and "every lane visible" in src


def test_plan_has_no_bounds_for_a_float_bound_or_an_unmasked_reduction():
    @dt.algorithm
    def float_cut(A: dt.Tensor["M", "K"], c: float):
        i, k = dt.axes("i k")
        return dt.sum(dt.where(k < c, A[i, k], 0.0), over=k)[i]

    A = randn(9, 40)
    assert _bounds(_plan(float_cut, (A, 3.5), dt.Schedule(tile={"i": 4, "k": 8}))) == []
    check(float_cut, (A, 3.5), dt.Schedule(tile={"i": 4, "k": 8}))


# -- correctness against float64 -----------------------------------------------------------------
@pytest.mark.parametrize("S, ti, tj", [(37, 16, 8), (40, 16, 16), (1, 16, 16), (23, 8, 16)])
def test_causal_attention_odd_sizes(S, ti, tj):
    Q, K, V = (randn(1, 2, S, 16) for _ in range(3))
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    check(causal_attention, (Q, K, V, 0.25), _flash(ti, tj), torch_ref=lambda q, k, v, s: _sdpa(q, k, v, mask))


def test_causal_attention_default_schedule():
    Q, K, V = (randn(2, 1, 29, 16) for _ in range(3))
    check(causal_attention, (Q, K, V, 0.25))


@pytest.mark.parametrize("S, W", [(45, 7), (45, 16), (20, 1), (33, 64)])
def test_sliding_window_attention(S, W):
    Q, K, V = (randn(1, 1, S, 16) for _ in range(3))
    idx = torch.arange(S)
    mask = (idx[None, :] <= idx[:, None]) & (idx[None, :] > idx[:, None] - W)
    k, _ = check(window_attention, (Q, K, V, W), _flash(8, 8), torch_ref=lambda q, kk, v, w: _sdpa(q, kk, v, mask))
    (lb,) = _bounds(_plan(window_attention, (Q, K, V, W), _flash(8, 8)))
    assert len(lb.lower) == 1 and len(lb.upper) == 1 and lb.unmasked


def test_length_attention_per_batch_entry():
    Q = randn(3, 2, 5, 16)
    K, V = randn(3, 2, 41, 16), randn(3, 2, 41, 16)
    L = torch.tensor([41, 1, 17], dtype=torch.int64)
    mask = (torch.arange(41)[None, :] < L[:, None])[:, None, None, :]
    check(length_attention, (Q, K, V, L), _flash(8, 16), torch_ref=lambda q, k, v, lens: _sdpa(q, k, v, mask))
    (lb,) = _bounds(_plan(length_attention, (Q, K, V, L), _flash(8, 16)))
    assert len(lb.upper) == 1 and lb.unmasked


@pytest.mark.parametrize("M, K, N, tm, tk", [(37, 37, 19, 16, 16), (40, 53, 8, 16, 8), (1, 5, 3, 16, 16)])
def test_lower_triangular_matmul(M, K, N, tm, tk):
    A, B = randn(M, K), randn(K, N)
    check(tril_matmul, (A, B), _mm(tm, tk), torch_ref=lambda a, b: torch.tril(a) @ b)
    (lb,) = _bounds(_plan(tril_matmul, (A, B), _mm(tm, tk)))
    assert lb.axis == "k" and lb.unmasked


@pytest.mark.parametrize("W", [0, 3, 20])
def test_banded_matmul(W):
    A, B = randn(45, 45), randn(45, 11)
    band = torch.ones(45, 45, dtype=torch.bool).tril(W) & torch.ones(45, 45, dtype=torch.bool).triu(-W)
    check(banded_matmul, (A, B, W), _mm(16, 8), torch_ref=lambda a, b, w: torch.where(band, a, 0.0) @ b)


def test_mask_as_a_factor():
    A = randn(21, 37)
    check(tril_rowsum, (A,), dt.Schedule(tile={"i": 8, "k": 8}), torch_ref=lambda a: torch.tril(a).sum(1))
    assert len(_bounds(_plan(tril_rowsum, (A,), dt.Schedule(tile={"i": 8, "k": 8})))) == 1


def test_skipped_tiles_are_not_visited():
    """B's last row is inf: torch (and a loop over every tile) gives NaN (0 * inf) in every row;
    with the bounds, the rows whose tiles end before that row never read it."""
    A, B = randn(40, 40), randn(40, 8)
    B[39] = math.inf
    k = dt.compile(tril_matmul, _mm(16, 16))
    out = k(A, B)
    assert torch.isfinite(out[:32]).all() and not torch.isfinite(out[39]).all()
    off = dt.compile(tril_matmul, _mm(16, 16, mask_bounds=False))(A, B)
    assert torch.isnan(off[:32]).all()


def test_reverse_tile_order_same_result():
    Q, K, V = (randn(2, 2, 37, 16) for _ in range(3))
    sched = dt.Schedule(grid=("i", "b", "h"), tile={"b": 1, "h": 1, "i": 16, "j": 8},
                        strategy={"j": "online", "d": "whole", "e": "whole"}, stages={"sum0": {"place": "fuse"}},
                        tile_order="reverse")
    k, _ = check(causal_attention, (Q, K, V, 0.25), sched)
    assert "reverse launch order" in k.source_for(Q, K, V, 0.25)


@dt.algorithm
def tril_rowmax(A: dt.Tensor["M", "K"]):
    """Row maxima of the lower triangle: ``max over k of where(k <= i, A, -inf)``."""
    i, k = dt.axes("i k")
    return dt.max(dt.where(k <= i, A[i, k], -float("inf")), over=k)[i]


@pytest.mark.parametrize("tk", [8, 16])
def test_masked_row_max(tk):
    A = randn(21, 37)
    check(tril_rowmax, (A,), dt.Schedule(tile={"i": 8, "k": tk}),
          torch_ref=lambda a: torch.where(torch.ones(21, 37, dtype=torch.bool).tril(), a, -math.inf).amax(1))


def test_attention_bounds_bench_dry_run(tmp_path):
    out = run_bench(["bench/attention_bounds.py", "--dry-run"], tmp_path)
    assert "WRONG" not in out and "failed" not in out
    assert "heavy first" in out and "default, no bounds" in out and "decode" in out


@dt.algorithm
def document_attention(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "S", "D"],
                       V: dt.Tensor["B", "H", "S", "D"], first: dt.Tensor["S"], last: dt.Tensor["S"]):
    """Packed documents: query i sees the keys of its own document, ``first[i] <= j <= last[i]``
    (per-row bounds read from index tensors, as varlen attention's cumulative lengths give them)."""
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.where((j >= first[i]) & (j <= last[i]), dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * 0.25,
                 -float("inf"))
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


def test_block_diagonal_documents_from_index_tensors():
    lengths = [7, 20, 1, 13]
    S = sum(lengths)
    doc = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    starts = torch.tensor([0] + lengths).cumsum(0)[:-1]
    first, last = starts[doc], starts[doc] + torch.tensor(lengths)[doc] - 1
    Q, K, V = (randn(1, 2, S, 16) for _ in range(3))
    mask = doc[:, None] == doc[None, :]
    check(document_attention, (Q, K, V, first, last), _flash(8, 8), torch_ref=lambda q, k, v, *_: _sdpa(q, k, v, mask))
    (lb,) = _bounds(_plan(document_attention, (Q, K, V, first, last), _flash(8, 8)))
    assert len(lb.lower) == 1 and len(lb.upper) == 1 and lb.unmasked


def test_causal_attention_backward_is_bounded_and_correct():
    """dt.grad of causal attention: dQ loops over j <= i, dK and dV over i >= j (bounds from the
    same mask), against torch autograd in float64."""
    g = dt.grad(causal_attention)
    (alg,) = g.algorithms
    Q, K, V, dO = (randn(1, 2, 37, 16) for _ in range(4))
    args = (Q, K, V, 0.25, dO)
    prog = _plan(alg, args, None)
    axes = sorted(lb.axis for lb in _bounds(prog))
    # at this size (no FlashAttention-2 plan: tests/test_flash_backward.py checks that one's bounds) the
    # probabilities are stored once by their row kernel (plan/epilogues.store_operands, since 1fde65d), so
    # dV's loop reads them unguarded; dK's query loop and the key loops stay bounded
    assert axes.count("i") >= 1 and axes.count("j") >= 1

    def torch_grads(q, k, v, scale, do):
        q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        return torch.autograd.grad(out, (q, k, v), do)

    check(alg, args, None, torch_ref=torch_grads)


def test_mask_bounds_off_warns_where_nothing_is_masked():
    A = randn(9, 20)
    with pytest.warns(dt.ScheduleWarning, match="mask_bounds=False has no effect"):
        dt.compile(softmax, dt.Schedule(mask_bounds=False))(A)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleWarning)
        dt.compile(tril_rowsum, dt.Schedule(tile={"i": 8, "k": 8}, mask_bounds=False))(A)


def test_derived_gpu_space_explores_the_tile_order_of_masked_loops():
    from dtriton.tune import Space
    h = tuple(torch.empty(s, dtype=torch.float16, device="meta") for s in [(1, 2, 256, 64)] * 3) + (0.125,)
    assert tuple(Space.derive(causal_attention, h, target="gpu").tile_order) == ("forward", "reverse")
    assert Space.derive(dt.library.attention, h, target="gpu").tile_order is None
    assert Space.derive(causal_attention, h, target="interpreter").tile_order is None


def test_tile_order_is_the_schedule_s_and_auto_keeps_program_order():
    Q, K, V = (randn(1, 2, 37, 16) for _ in range(3))
    assert [k.reverse_order for k in _plan(causal_attention, (Q, K, V, 0.25), _flash()).kernels] == [False]
    assert [k.reverse_order for k in _plan(causal_attention, (Q, K, V, 0.25), _flash(tile_order="reverse")).kernels] \
        == [True]


@dt.algorithm
def prefix_sum_rows(A: dt.Tensor["M", "K"], n: int):
    """Row sums of the first ``min(n, 29)`` columns: bounds from an int argument and a literal."""
    i, k = dt.axes("i k")
    return dt.sum(dt.where((k < n) & (k < 29), A[i, k], 0.0), over=k)[i]


@pytest.mark.parametrize("n", [0, 1, 17, 40])
def test_bounds_from_a_literal_and_an_int_argument(n):
    A = randn(9, 40)
    check(prefix_sum_rows, (A, n), dt.Schedule(tile={"i": 4, "k": 8}), torch_ref=lambda a, nn: a[:, :min(n, 29)].sum(1))
    (lb,) = _bounds(_plan(prefix_sum_rows, (A, n), dt.Schedule(tile={"i": 4, "k": 8})))
    assert len(lb.upper) == 2 and lb.unmasked


def test_gpu_edge_loops_of_a_bounded_contraction_are_not_pipelined():
    """On the GPU the masked edge loops beside the unmasked loop of a contraction are emitted
    with ``num_stages=1`` (Triton 3.6 gave wrong rows with both loops pipelined on the H200,
    bench/probe_tril.py); the unmasked loop keeps the kernel's pipelining; the interpreter's
    plan is unchanged."""
    A, B = torch.randn(64, 64), torch.randn(64, 64)
    sched = _mm(16, 16, num_stages=3)
    b = tril_matmul.bind((A, B))
    b.device = torch.device("cuda")
    full = complete_schedule(tril_matmul, sched, b)
    gpu = plan_program(tril_matmul, full, b, call_spec(tril_matmul, b, (A, B), interpret=False))
    (lb,) = _bounds(gpu)
    assert lb.unmasked and lb.edge_stages == 1
    src, _ = default_backend().render(gpu)
    loops = [ln.strip() for ln in src.splitlines() if ln.strip().startswith("for k0")]
    assert len(loops) == 2 and "num_stages" not in loops[0] and loops[1].endswith("num_stages=1):"), loops
    (lb_cpu,) = _bounds(_plan(tril_matmul, (A, B), sched))
    assert lb_cpu.edge_stages == 0
