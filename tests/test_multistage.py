"""Multi-stage algorithms: reductions feeding reductions (softmax, log-softmax, layer norm,
RMSNorm, cross-entropy with a gather, spatial diffusion with two outputs, attention, causal
attention), under every reduction strategy (whole, loop, online, split) and stage placement
(fuse, materialize), against float64 torch, with NaN-poisoned outputs.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import dtriton as dt

from conftest import (LAYOUTS, TOL, assert_close, attention, causal_attention, check, cross_entropy, dims,
                      launches, layer_norm, log_softmax, n_plans, randn, relayout, rms_norm, rowmax, run_random,
                      schedules, softmax, spatial_diffusion, t_attention, t_cross_entropy, t_layer_norm,
                      t_rms_norm, t_spatial_diffusion, torch_ref)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]

#: row-wise schedules (rows on the grid, the reduced axis j covered in-program)
ROW_SCHEDULES = {
    "whole": dt.Schedule(grid=("i",), tile={"i": 2}, strategy={"j": "whole"}),
    "loop": dt.Schedule(grid=("i",), tile={"i": 4, "j": 8}, strategy={"j": "loop"}),
    "online": dt.Schedule(grid=("i",), tile={"i": 4, "j": 8}, strategy={"j": "online"}),
    "loop-tile1": dt.Schedule(grid=("i",), tile={"i": 1, "j": 4}, strategy={"j": "loop"}),
    "online-tile16": dt.Schedule(grid=("i",), tile={"i": 2, "j": 16}, strategy={"j": "online"}),
    "heuristic": None,
}
STRATS = list(ROW_SCHEDULES)


def _rows(M, N, dtype=torch.float32, gen=None, scale=3.0):
    return randn(M, N, dtype=dtype, gen=gen, scale=scale)


# ----------------------------------------------------------------------------------------------
# softmax family
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", STRATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_strategies(strategy, dtype, gen):
    X = _rows(13, 37, dtype, gen)
    check(softmax, [X], ROW_SCHEDULES[strategy], torch_ref=torch_ref(softmax))


@pytest.mark.parametrize("strategy", STRATS)
def test_log_softmax_strategies(strategy, gen):
    X = _rows(11, 29, gen=gen)
    check(log_softmax, [X], ROW_SCHEDULES[strategy], torch_ref=torch_ref(log_softmax))


def test_online_is_one_pass_and_loop_is_two(gen):
    X = _rows(6, 40, gen=gen)
    k_on, _ = check(softmax, [X], ROW_SCHEDULES["online"])
    k_loop, _ = check(softmax, [X], ROW_SCHEDULES["loop"])
    assert "online (one pass, rescaled)" in k_on.source
    assert k_on.source.count("for j0 in range") == 2      # one reduction pass + the output loop
    assert k_loop.source.count("for j0 in range") == 3    # max pass, sum pass, output loop
    assert launches(k_on) == launches(k_loop) == 1


def test_softmax_split_combines_max_partials():
    X = torch.randn(4, 37)
    k = dt.compile(softmax, dt.Schedule(grid=("i",), tile={"i": 2, "j": 8}, split={"j": 2}))
    torch.testing.assert_close(k(X), torch.softmax(X, -1))
    assert "tl.maximum(parts" in k.source          # the max partials are combined by the max
    with pytest.raises(dt.ScheduleError, match=r"stage 'max0' is a max split over \['j'\] with split_mode='atomic'"):
        dt.compile(softmax, dt.Schedule(grid=("i",), tile={"i": 2, "j": 8}, split={"j": 2}, split_mode="atomic"))(X)


@pytest.mark.parametrize("strategy", STRATS)
def test_softmax_rows_with_minus_inf(strategy, gen):
    X = _rows(6, 21, gen=gen)
    X[0, :5] = -float("inf")                 # some -inf
    X[1, :] = -float("inf")
    X[1, 7] = 0.5                            # a single finite entry: out = one-hot
    X[2, ::2] = -float("inf")
    X[3, 20] = -float("inf")                 # -inf in the last (masked) tile
    X[4, :] = -float("inf")
    X[4, 16] = -3.0                          # single finite entry in the second tile
    _, (Y,) = check(softmax, [X], ROW_SCHEDULES[strategy], torch_ref=torch_ref(softmax))
    assert torch.isfinite(Y).all()           # every row has a finite entry: finite output
    assert Y[1, 7] == 1 and Y[4, 16] == 1
    check(log_softmax, [X], ROW_SCHEDULES[strategy], torch_ref=torch_ref(log_softmax))


@pytest.mark.parametrize("strategy", STRATS)
def test_softmax_all_minus_inf_row_is_nan_like_torch(strategy, gen):
    X = _rows(3, 9, gen=gen)
    X[1, :] = -float("inf")
    _, (Y,) = check(softmax, [X], ROW_SCHEDULES[strategy], torch_ref=torch_ref(softmax))
    assert torch.isnan(Y[1]).all() and torch.isfinite(Y[[0, 2]]).all()


@pytest.mark.parametrize("strategy", STRATS)
def test_nan_propagates_like_torch(strategy, gen):
    X = _rows(5, 19, gen=gen)
    X[1, 3] = float("nan")
    X[3, 18] = float("nan")                  # in the last, masked tile
    X[4, 0] = float("nan")
    X[4, 1] = float("inf")
    _, (Y,) = check(softmax, [X], ROW_SCHEDULES[strategy], torch_ref=torch_ref(softmax))
    assert torch.isnan(Y[[1, 3, 4]]).all() and torch.isfinite(Y[[0, 2]]).all()
    check(log_softmax, [X], ROW_SCHEDULES[strategy], torch_ref=torch_ref(log_softmax))
    w, b = randn(19, gen=gen), randn(19, gen=gen)
    _, (Z,) = check(layer_norm, [X, w, b], ROW_SCHEDULES[strategy], torch_ref=t_layer_norm)
    assert torch.isnan(Z[[1, 3, 4]]).all()


@pytest.mark.parametrize("strategy", ["whole", "loop", "heuristic"])
def test_rowmax_with_nan_is_nan(strategy, gen):
    X = _rows(4, 19, gen=gen)
    X[0, 0] = float("nan")
    X[2, 18] = float("nan")
    X[3, 5] = float("inf")
    sched = {"whole": dt.Schedule(grid=("i",), tile={"i": 2}, strategy={"j": "whole"}),
             "loop": dt.Schedule(grid=("i",), tile={"i": 2, "j": 4}, strategy={"j": "loop"}),
             "heuristic": None}[strategy]
    _, (m,) = check(rowmax, [X], sched, torch_ref=torch_ref(rowmax))
    assert math.isnan(m[0]) and math.isnan(m[2]) and m[3] == float("inf") and math.isfinite(m[1])


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0, 0)])
def test_empty_rows_and_columns(shape):
    X = torch.randn(*shape)
    for alg, args in ((softmax, [X]), (log_softmax, [X]), (layer_norm, [X, torch.randn(shape[1]), torch.randn(shape[1])])):
        for s in (None, ROW_SCHEDULES["loop"], ROW_SCHEDULES["online"]):
            y = dt.compile(alg, s)(*args)
            assert y.shape == shape and y.dtype == torch.float32


@given(M=dims(1, 24), N=dims(1, 40), dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       strategy=st.sampled_from(STRATS), seed=st.integers(0, 2**16))
def test_softmax_random_shapes(M, N, dtype, layout, strategy, seed):
    g = torch.Generator().manual_seed(seed)
    X = relayout(_rows(M, N, dtype, g), layout)
    run_random(softmax, [X], ROW_SCHEDULES[strategy], torch_ref=torch_ref(softmax))


@given(data=st.data(), M=dims(1, 24), N=dims(1, 40), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_softmax_random_schedules(data, M, N, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    X = _rows(M, N, dtype, g)
    alg = data.draw(st.sampled_from([softmax, log_softmax]), label="algorithm")
    sched = data.draw(schedules(alg, {"i": M, "j": N}), label="schedule")
    run_random(alg, [X], sched, torch_ref=torch_ref(alg))


# ----------------------------------------------------------------------------------------------
# normalisations: means over widths that are not powers of two
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", STRATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_width_17(strategy, dtype, gen):
    """17 columns pad to 32 (whole) or to whole tiles (loop): padding must not count."""
    X = randn(9, 17, dtype=dtype, gen=gen, scale=2.0) + 1.5
    w, b = randn(17, dtype=dtype, gen=gen), randn(17, dtype=dtype, gen=gen)
    check(layer_norm, [X, w, b], ROW_SCHEDULES[strategy], torch_ref=t_layer_norm)


@pytest.mark.parametrize("N", [1, 2, 3, 5, 31, 33])
def test_layer_norm_odd_widths(N, gen):
    X = randn(4, N, gen=gen) + 0.5
    w, b = randn(N, gen=gen), randn(N, gen=gen)
    for s in (ROW_SCHEDULES["whole"], ROW_SCHEDULES["loop"]):
        check(layer_norm, [X, w, b], s, torch_ref=t_layer_norm)


@pytest.mark.parametrize("strategy", STRATS)
def test_rms_norm(strategy, gen):
    X, w = randn(7, 23, gen=gen), randn(23, gen=gen)
    check(rms_norm, [X, w], ROW_SCHEDULES[strategy], torch_ref=t_rms_norm)


@pytest.mark.parametrize("kind", ["transposed", "offset", "expanded"])
def test_layer_norm_input_layouts(kind, gen):
    X = relayout(randn(6, 17, gen=gen), kind)
    w, b = relayout(randn(17, gen=gen), kind), relayout(randn(17, gen=gen), kind)
    for s in (None, ROW_SCHEDULES["loop"]):
        check(layer_norm, [X, w, b], s, torch_ref=t_layer_norm)


@given(M=dims(1, 24), N=dims(1, 40), dtype=st.sampled_from(DTYPES), strategy=st.sampled_from(STRATS),
       seed=st.integers(0, 2**16))
def test_layer_norm_random_shapes(M, N, dtype, strategy, seed):
    g = torch.Generator().manual_seed(seed)
    X = randn(M, N, dtype=dtype, gen=g, scale=2.0) + 1.0
    w, b = randn(N, dtype=dtype, gen=g), randn(N, dtype=dtype, gen=g)
    run_random(layer_norm, [X, w, b], ROW_SCHEDULES[strategy], torch_ref=t_layer_norm)


@given(data=st.data(), M=dims(1, 24), N=dims(1, 40), seed=st.integers(0, 2**16))
def test_norm_random_schedules(data, M, N, seed):
    g = torch.Generator().manual_seed(seed)
    X, w, b = randn(M, N, gen=g) + 0.5, randn(N, gen=g), randn(N, gen=g)
    alg = data.draw(st.sampled_from([layer_norm, rms_norm]), label="algorithm")
    args = [X, w, b] if alg is layer_norm else [X, w]
    sched = data.draw(schedules(alg, {"i": M, "j": N}), label="schedule")
    run_random(alg, args, sched, torch_ref=torch_ref(alg))


@pytest.mark.parametrize("how", ["materialize", "split", "split-partials"])
def test_materialised_mean(how, gen):
    """Regression (BUG-3, fixed in 6d651e7): a materialised mean was divided by the count twice
    (once in its own kernel, once by the consumer reading the buffer)."""
    X, w = randn(6, 17, gen=gen), randn(17, gen=gen)
    s = {"materialize": dt.Schedule(stages={"mean0": {"place": "materialize"}}),
         "split": dt.Schedule(grid=("i",), tile={"i": 2, "j": 4}, split={"j": 2}),
         "split-partials": dt.Schedule(grid=("i",), tile={"i": 2, "j": 4}, split={"j": 3},
                                       split_mode="partials")}[how]
    kernel, _ = check(rms_norm, [X, w], s, torch_ref=t_rms_norm)
    check(rms_norm, [X, w], s, kernel=kernel, torch_ref=t_rms_norm)  # again: split buffers re-zeroed


@pytest.mark.parametrize("mode", ["atomic", "partials"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_split_strategy(mode, dtype, gen):
    """split: both means are summed by 2 programs per row, then combined (atomics or partials)."""
    s = dt.Schedule(grid=("i",), tile={"i": 2, "j": 4}, split={"j": 2}, split_mode=mode)
    X, w, b = randn(6, 17, dtype=dtype, gen=gen) + 1.0, randn(17, dtype=dtype, gen=gen), randn(17, dtype=dtype, gen=gen)
    kernel, _ = check(layer_norm, [X, w, b], s, torch_ref=t_layer_norm)
    # atomics: each split stage runs in a kernel of its own; partials: the mean and the one-pass
    # variance share one (issue 16), then the output's
    assert launches(kernel) >= (3 if mode == "atomic" else 2)
    check(layer_norm, [X, w, b], s, kernel=kernel, torch_ref=t_layer_norm)


# ----------------------------------------------------------------------------------------------
# cross-entropy: a gather X[i, labels[i]]
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("idt", [torch.int64, torch.int32, torch.int16, torch.uint8])
@pytest.mark.parametrize("strategy", ["whole", "loop", "online", "heuristic"])
def test_cross_entropy_gather(idt, strategy, gen):
    X = _rows(11, 37, gen=gen)
    labels = torch.randint(0, 37, (11,), generator=gen).to(idt)
    labels[0], labels[1] = 0, 36                        # first and last column
    sched = ROW_SCHEDULES[strategy]
    if sched is not None:
        sched = dt.Schedule.from_json(sched.to_json().replace('"j"', '"c"'))
    check(cross_entropy, [X, labels], sched, torch_ref=t_cross_entropy)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cross_entropy_16bit_and_layouts(dtype, gen):
    X = relayout(_rows(9, 13, dtype, gen), "transposed")
    labels = relayout(torch.randint(0, 13, (9,), generator=gen), "offset")
    check(cross_entropy, [X, labels], None, torch_ref=t_cross_entropy)


@given(data=st.data(), M=dims(1, 24), C=dims(1, 40), seed=st.integers(0, 2**16))
def test_cross_entropy_random_schedules(data, M, C, seed):
    g = torch.Generator().manual_seed(seed)
    X, labels = _rows(M, C, gen=g), torch.randint(0, C, (M,), generator=g)
    sched = data.draw(schedules(cross_entropy, {"i": M, "c": C}), label="schedule")
    run_random(cross_entropy, [X, labels], sched, torch_ref=t_cross_entropy)


# ----------------------------------------------------------------------------------------------
# spatial diffusion: two outputs, one feeding the other
# ----------------------------------------------------------------------------------------------
def _diffusion_args(V, K, C, dtype=torch.float32, gen=None):
    return [randn(V, K, dtype=dtype, gen=gen), randn(V, C, dtype=dtype, gen=gen),
            (randn(V, gen=gen).abs() + 0.1).to(dtype), randn(K, gen=gen).abs().to(dtype),
            randn(C, gen=gen).abs().to(dtype)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("V,K,C", [(37, 7, 5), (1, 1, 1), (16, 16, 3), (40, 3, 17)])
def test_spatial_diffusion_two_outputs(V, K, C, dtype, gen):
    args = _diffusion_args(V, K, C, dtype, gen)
    kernel, (out, spectral) = check(spatial_diffusion, args, torch_ref=t_spatial_diffusion)
    assert out.shape == (V, C) and spectral.shape == (K, C)


@pytest.mark.parametrize("sched", [
    dt.Schedule(tile={"v": 8, "k": 4, "c": 4}),
    dt.Schedule(tile={"v": 16, "k": 8, "c": 8}, grid=("v", "c"), strategy={"k": "loop"}),
    dt.Schedule(tile={"v": 4, "k": 16, "c": 2}, strategy={"v": "loop"}),
    dt.Schedule(tile={"v": 8, "k": 2, "c": 4}, split={"v": 3}),
])
def test_spatial_diffusion_schedules(sched, gen):
    check(spatial_diffusion, _diffusion_args(29, 11, 6, gen=gen), sched, torch_ref=t_spatial_diffusion)


@given(data=st.data(), V=dims(1, 40), K=dims(1, 12), C=dims(1, 8), seed=st.integers(0, 2**16))
def test_spatial_diffusion_random_schedules(data, V, K, C, seed):
    g = torch.Generator().manual_seed(seed)
    args = _diffusion_args(V, K, C, gen=g)
    sched = data.draw(schedules(spatial_diffusion, {"v": V, "k": K, "c": C}), label="schedule")
    run_random(spatial_diffusion, args, sched, torch_ref=t_spatial_diffusion)


# ----------------------------------------------------------------------------------------------
# attention
# ----------------------------------------------------------------------------------------------
FUSED = dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": 16, "j": 16},
                    strategy={"j": "online", "d": "whole", "e": "whole"}, stages={"sum0": {"place": "fuse"}})


def _qkv(B, H, S, T, D, E, dtype=torch.float32, gen=None):
    return [randn(B, H, S, D, dtype=dtype, gen=gen), randn(B, H, T, D, dtype=dtype, gen=gen),
            randn(B, H, T, E, dtype=dtype, gen=gen)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_fused_is_one_kernel(dtype, gen):
    Q, K, V = _qkv(2, 3, 19, 37, 16, 5, dtype, gen)
    kernel, _ = check(attention, [Q, K, V, 0.3], FUSED, torch_ref=t_attention)
    assert launches(kernel) == 1
    assert not kernel._last.program.buffers        # no S x T intermediate in memory
    assert "online (one pass, rescaled)" in kernel.source


UNFUSED = dt.Schedule(stages={"sum0": {"place": "materialize"}})


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_unfused_is_two_kernels(dtype, gen):
    """The score stage materialised: an S x T buffer, then softmax and P @ V in a second kernel."""
    Q, K, V = _qkv(1, 2, 11, 13, 16, 5, dtype, gen)
    kernel, _ = check(attention, [Q, K, V, 0.35], UNFUSED, torch_ref=t_attention)
    assert launches(kernel) == 2
    assert any(b.axes == ("b", "h", "i", "j") for b in kernel._last.program.buffers.values())


def test_attention_default_schedule(gen):
    """The heuristic's choice (fused online since 'Heuristic: attention-like algorithms default to the
    fused online schedule'; two kernels before) is correct, with at most two launches."""
    Q, K, V = _qkv(2, 1, 19, 21, 16, 8, gen=gen)
    kernel, _ = check(attention, [Q, K, V, 0.35], torch_ref=t_attention)
    assert launches(kernel) in (1, 2)


@pytest.mark.parametrize("case", ["head dim 8", "default schedule", "small i/j tiles"])
def test_attention_fused_small_head_dim(case, gen):
    D = 16 if case == "small i/j tiles" else 8
    Q, K, V = _qkv(1, 2, 11, 13, D, 5, gen=gen)
    s = {"head dim 8": FUSED, "default schedule": None,
         "small i/j tiles": FUSED.replace(tile={"b": 1, "h": 1, "i": 4, "j": 8})}[case]
    check(attention, [Q, K, V, 0.35], s, torch_ref=t_attention)


@pytest.mark.parametrize("strategy,blocks", [
    ("whole", "dot"), ("loop", "dot"), ("online", "dot"), ("whole", "small"),
    pytest.param("loop", "small"), pytest.param("online", "small")])
def test_attention_strategies(strategy, blocks, gen):
    """j covered whole (one block), in a loop (two passes: max, then sums) or online (one pass)."""
    D, ti, tj = (16, 16, 16) if blocks == "dot" else (4, 4, 8)
    Q, K, V = _qkv(1, 2, 9, 37, D, 6, gen=gen)
    tile_j = {"whole": {}, "loop": {"j": tj}, "online": {"j": tj}}[strategy]
    s = dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": ti, **tile_j},
                    strategy={"j": strategy, "d": "whole", "e": "whole"}, stages={"sum0": {"place": "fuse"}})
    kernel, _ = check(attention, [Q, K, V, 0.5], s, torch_ref=t_attention)
    assert launches(kernel) == 1


@pytest.mark.parametrize("mode", ["atomic", "partials"])
def test_attention_split_over_head_dim(mode, gen):
    """split: the S x T score stage is summed over d by 2 programs, then softmax and P @ V."""
    Q, K, V = _qkv(1, 2, 7, 10, 9, 3, gen=gen)
    s = dt.Schedule(tile={"b": 1, "h": 1, "i": 4, "j": 8, "d": 4, "e": 4}, split={"d": 2}, split_mode=mode)
    kernel, _ = check(attention, [Q, K, V, 0.4], s, torch_ref=t_attention)
    check(attention, [Q, K, V, 0.4], s, kernel=kernel, torch_ref=t_attention)  # second launch


def test_attention_shapes_and_scalar_param_reuse(gen):
    kernel = dt.compile(attention, FUSED)
    for (B, H, S, T, D, E), scale in [((1, 1, 1, 1, 16, 1), 1.0), ((2, 1, 17, 3, 17, 9), 0.25),
                                       ((1, 2, 16, 32, 32, 8), 0.125)]:
        check(attention, [*_qkv(B, H, S, T, D, E, gen=gen), scale], FUSED, kernel=kernel, torch_ref=t_attention)
    n = n_plans(kernel)
    Q, K, V = _qkv(1, 2, 16, 32, 32, 8, gen=gen)
    check(attention, [Q, K, V, 0.9], FUSED, kernel=kernel, torch_ref=t_attention)  # another scale: same plan
    assert n_plans(kernel) == n


@pytest.mark.parametrize("sched", ["fused", "default", "loop", "unfused",
                                   pytest.param("fused-small")])
def test_causal_attention_mask_from_axis_values(sched, gen):
    Q, K, V = _qkv(1, 2, 19, 19, 4 if sched == "fused-small" else 16, 5, gen=gen)
    s = {"fused": FUSED, "default": None, "unfused": UNFUSED, "fused-small": FUSED,
         "loop": dt.Schedule(grid=("b", "h", "i"), tile={"b": 1, "h": 1, "i": 16, "j": 16},
                             strategy={"j": "loop", "d": "whole", "e": "whole"},
                             stages={"sum0": {"place": "fuse"}})}[sched]
    _, (O,) = check(causal_attention, [Q, K, V, 0.5], s, torch_ref=torch_ref(causal_attention))
    # row 0 attends only to key 0
    torch.testing.assert_close(O[:, :, 0], V[:, :, 0])


@settings(max_examples=max(3, settings().max_examples // 2))
@given(data=st.data(), S=dims(1, 9), T=dims(1, 9), D=dims(1, 6), E=dims(1, 6), seed=st.integers(0, 2**16))
def test_attention_random_schedules(data, S, T, D, E, seed):
    g = torch.Generator().manual_seed(seed)
    B, H = data.draw(st.integers(1, 2), label="B"), data.draw(st.integers(1, 2), label="H")
    Q, K, V = _qkv(B, H, S, T, D, E, gen=g)
    sizes = {"b": B, "h": H, "i": S, "j": T, "d": D, "e": E}
    sched = data.draw(schedules(attention, sizes, max_tiles=4, max_block=1 << 10), label="schedule")
    run_random(attention, [Q, K, V, 0.4], sched, torch_ref=t_attention)


# ----------------------------------------------------------------------------------------------
# known bugs: materialised stages that use other stages
# ----------------------------------------------------------------------------------------------
def test_materialised_stage_chain_launch_order(gen):
    """Regression (BUG-2a, fixed in 6d651e7): kernels of materialised stages were launched in the wrong
    order (lowering never looked inside a materialised stage for the stages it uses), so softmax_sum0
    ran before softmax_max0."""
    X = _rows(4, 5, gen=gen)
    check(softmax, [X], dt.Schedule(tile={"i": 4, "j": 8}, grid=("i", "j")), torch_ref=torch_ref(softmax))


def test_materialised_stage_chain_missing_kernel(gen):
    """Regression (BUG-2b): a split (materialised) score stage used only by other materialised stages
    never got a kernel: its buffer was read uninitialised."""
    Q, K, V = _qkv(1, 2, 5, 3, 4, 2, gen=gen)
    s = dt.Schedule(tile={"d": 4, "e": 4, "h": 1, "i": 2, "j": 4}, grid=("b", "i"), split={"d": 2},
                    strategy={"e": "whole", "h": "loop"})
    check(attention, [Q, K, V, 0.4], s, torch_ref=t_attention)


@dt.algorithm
def x_dot_colsum(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    t = dt.sum(X[i, j], over=i)                 # column sums: reduces over i
    return dt.sum(X[i, j] * t, over=j)[i]       # out[i] = sum_j X[i, j] t[j]


def test_materialised_stage_chain_fused_over_grid_axis(gen):
    """Regression (BUG-2c): a stage used by a materialised stage was fused into that stage's kernel
    without the placement check although that kernel's grid tiles the axis it reduces over: each
    program summed only its own tile of i (silently wrong)."""
    X = randn(20, 3, gen=gen)
    check(x_dot_colsum, [X], dt.Schedule(tile={"i": 4}, stages={"sum1": {"place": "materialize"}}),
          torch_ref=lambda X: X @ X.sum(0))


def test_x_dot_colsum_default_schedule(gen):
    X = randn(20, 3, gen=gen)
    check(x_dot_colsum, [X], dt.Schedule(tile={"i": 4}), torch_ref=lambda X: X @ X.sum(0))


@dt.algorithm
def matmul_and_double(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    i, j, k = dt.axes("i j k")
    C = dt.sum(A[i, k] * B[k, j], over=k)
    return C[i, j], (2 * C)[i, j]


def test_split_sum_output_next_to_another_output(gen):
    A, B = randn(4, 8, gen=gen), randn(8, 3, gen=gen)
    check(matmul_and_double, [A, B], dt.Schedule(split={"k": 2}),
          torch_ref=lambda A, B: (A @ B, 2 * (A @ B)))


def test_two_outputs_sharing_a_stage(gen):
    A, B = randn(9, 13, gen=gen), randn(13, 5, gen=gen)
    check(matmul_and_double, [A, B], None, torch_ref=lambda A, B: (A @ B, 2 * (A @ B)))
    check(matmul_and_double, [A, B], dt.Schedule(tile={"i": 4, "j": 4, "k": 4}, grid=("j", "i")),
          torch_ref=lambda A, B: (A @ B, 2 * (A @ B)))


@dt.algorithm
def attention_2d(Q: dt.Tensor["S", "D"], K: dt.Tensor["T", "D"], V: dt.Tensor["T", "E"]):
    i, j, d, e = dt.axes("i j d e")
    s = dt.sum(Q[i, d] * K[j, d], over=d)
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[j, e], over=j) / dt.sum(p, over=j))[i, e]


def _t_attention_2d(Q, K, V):
    return torch.softmax(Q @ K.t(), -1) @ V


def test_fused_max_inside_the_loop_of_its_own_axis(gen):
    Q, K, V = randn(3, 4, gen=gen), randn(5, 4, gen=gen), randn(5, 3, gen=gen)
    s = dt.Schedule(grid=("e",), tile={"i": 4, "j": 4, "e": 4}, strategy={"d": "whole"},
                    stages={"max0": {"place": "fuse"}, "sum2": {"place": "fuse"}})
    check(attention_2d, [Q, K, V], s, torch_ref=_t_attention_2d)


@pytest.mark.parametrize("stages", [{}, {"max0": {"place": "fuse"}}, {"sum2": {"place": "fuse"}},
                                    {"sum0": {"place": "materialize"}, "max0": {"place": "materialize"}}])
def test_attention_2d_placements(stages, gen):
    Q, K, V = randn(3, 4, gen=gen), randn(5, 4, gen=gen), randn(5, 3, gen=gen)
    s = dt.Schedule(grid=("e",), tile={"i": 4, "j": 4, "e": 4}, strategy={"d": "whole"}, stages=stages)
    check(attention_2d, [Q, K, V], s, torch_ref=_t_attention_2d)


# ----------------------------------------------------------------------------------------------
# persistent kernels (a fixed grid of programs looping over output tiles)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["matmul", "split", "softmax", "diffusion"])
def test_persistent_schedules_equal_the_reference(case):
    """``persistent=k`` launches min(tiles, k * SMs) programs (4 on the interpreter) that loop
    over the output tiles; every tile must be written exactly once, also with split-K and with
    several kernels."""
    gen = torch.Generator().manual_seed(7)
    if case in ("matmul", "split"):
        A, B = torch.randn(70, 50, generator=gen), torch.randn(50, 90, generator=gen)
        sched = dt.Schedule(tile={"i": 16, "j": 32, "k": 16}, grid=("i", "j"), group={"i": 2}, persistent=1,
                            split={"k": 3} if case == "split" else {})
        from dtriton.library import matmul
        k = dt.compile(matmul, sched)
        out = k(A, B, out=torch.full((70, 90), float("nan")))
        assert "persistent tile loop" in k.source
        torch.testing.assert_close(out.double(), A.double() @ B.double(), rtol=1e-5, atol=1e-5)
    elif case == "softmax":
        X = torch.randn(13, 100, generator=gen)
        out = dt.compile(softmax, dt.Schedule(persistent=2))(X, out=torch.full((13, 100), float("nan")))
        torch.testing.assert_close(out.double(), torch.softmax(X.double(), -1), rtol=1e-5, atol=1e-6)
    else:
        from dtriton.library import spatial_diffusion as sd
        args = (torch.randn(300, 16, generator=gen), torch.randn(300, 32, generator=gen), torch.rand(300, generator=gen),
                torch.rand(32, generator=gen), torch.rand(16, generator=gen))
        outs = dt.compile(sd, dt.Schedule(persistent=1, split={"v": 4}))(*args)
        for o, r in zip(outs, sd.reference(*(a.double() for a in args))):
            assert torch.isfinite(o).all()
            assert ((o.double() - r).norm() / r.norm()).item() < 1e-5


def test_persistent_must_be_programs_per_sm():
    with pytest.raises(dt.ScheduleError, match=r"persistent = -1 must be 0 \(off\) or programs per SM"):
        dt.Schedule(persistent=-1)
