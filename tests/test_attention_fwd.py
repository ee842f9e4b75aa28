"""Attention forward (issue 18) on Triton's interpreter: warp-specialised TMA loops with descriptors
built in the kernel (``Schedule.descriptors``), grouped-query attention (``K[b, h // rep, j, d]``),
and the causal mask with tiles straddling the diagonal under those schedules.

Outputs are NaN-poisoned ``out=`` tensors compared with the float64 reference and plain torch
(``scaled_dot_product_attention`` in float64); sizes are odd (primes, 1, not multiples of the
tiles) so masked edges and partial TMA boxes are exercised.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import dtriton as dt
from dtriton.library import attention, causal_attention, gqa_attention

from conftest import TOL, check, randn

#: the fused online kernel of the GPU's default (the interpreter's heuristic materialises the scores)
FUSED = dict(grid=["b", "h", "i"], strategy={"j": "online", "d": "whole", "e": "whole"},
             stages={"sum0": {"place": "fuse"}}, tile={"i": 16, "j": 16})
WS = dict(FUSED, access="tma", warp_specialize=True, num_warps=4)


def sdpa(Q, K, V, scale, causal=False):
    return F.scaled_dot_product_attention(Q, K, V, scale=scale, is_causal=causal)


def source(alg, sched, args) -> str:
    k = dt.compile(alg, sched)
    k(*args)
    return k.source


def qkv(B, H, S, T, D, hk=None, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (randn(B, H, S, D, dtype=dtype, gen=g), randn(B, hk or H, T, D, dtype=dtype, gen=g),
            randn(B, hk or H, T, D, dtype=dtype, gen=g))


def test_warp_specialised_loop_builds_descriptors_in_the_kernel():
    Q, K, V = qkv(1, 2, 37, 45, 16)
    src = source(attention, dt.Schedule(**WS), (Q, K, V, 0.25))
    assert "tl.range(0, size_j, BLOCK_J, warp_specialize=True)" in src
    for t in ("Q", "K", "V"):
        assert f"desc_{t} = tl.make_tensor_descriptor({t}_ptr, shape=[" in src
    assert "(built on the host)" not in src and ", desc_Q" not in src      # no descriptor arguments
    # the output tile (a [1, 1, i, e] box) is stored through pointers: Hopper's partitioning of
    # the consumer warp groups stops at the reshape before a TMA store
    assert "desc_out" not in src and "tl.store(out_ptr" in src
    # host descriptors asked for explicitly; without warp specialisation the default stays on the host
    host = source(attention, dt.Schedule(**WS, descriptors="host"), (Q, K, V, 0.25))
    assert "make_tensor_descriptor" not in host and "desc_K: TMA descriptor of K[b, h, j, d]" in host
    plain = source(attention, dt.Schedule(**FUSED, access="tma"), (Q, K, V, 0.25))
    assert "make_tensor_descriptor" not in plain and "desc_out.store(" in plain
    dev = source(attention, dt.Schedule(**FUSED, access="tma", descriptors="device"), (Q, K, V, 0.25))
    assert "desc_out = tl.make_tensor_descriptor(out_ptr" in dev and "desc_out.store(" in dev


@pytest.mark.filterwarnings("ignore:.*no kernel has a contraction:dtriton.ScheduleWarning")   # S=1: no dot
@pytest.mark.parametrize("descriptors", ["auto", "host", "device"])
@pytest.mark.parametrize("S,T,D", [(37, 45, 16), (1, 17, 16), (16, 16, 32)])
def test_attention_descriptor_sites_match_float64(descriptors, S, T, D):
    Q, K, V = qkv(2, 3, S, T, D, seed=S + T)
    for sched in (dt.Schedule(**WS, descriptors=descriptors),
                  dt.Schedule(**FUSED, access="tma", descriptors=descriptors)):
        check(attention, (Q, K, V, 0.3), sched, torch_ref=lambda q, k, v, s: sdpa(q, k, v, s),
              tol=TOL[torch.float16])


@pytest.mark.filterwarnings("ignore:.*no kernel has a contraction:dtriton.ScheduleWarning")   # S=1: no dot
@pytest.mark.parametrize("S", [33, 48, 1])
def test_causal_tiles_straddling_the_diagonal_under_warp_specialisation(S):
    """Causal attention asked for warp specialisation: the mask bounds split the key loop into
    fully visible tiles and boundary tiles, a pair Triton 3.6 cannot specialise on Hopper, so both
    loops run without it (with a warning) and the result is right."""
    Q, K, V = qkv(1, 2, S, S, 16, seed=S)
    # tiles of 16 queries by 16 keys: the diagonal crosses tiles at 16, 32 (and a partial last tile)
    for tile in ({"i": 16, "j": 16}, {"i": 32, "j": 16}):
        sched = dt.Schedule(**dict(WS, tile=tile))
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            k, _ = check(causal_attention, (Q, K, V, 0.25), sched,
                         torch_ref=lambda q, k, v, s: sdpa(q, k, v, s, causal=True), tol=TOL[torch.float16])
        assert "warp_specialize=True)" not in k.source and "tl.make_tensor_descriptor" not in k.source
        # (on the interpreter the Gluon kernel's reason is the one warp_specialize warning: no loop is
        # specialised there, so the note on the split loops is not printed beside it; s13)
        ws = [str(w.message) for w in got if "warp_specialize=True" in str(w.message)]
        if S > 1:
            assert len(ws) == 1 and "Gluon" in ws[0] and "interpreter" in ws[0], ws


def gqa_ref(Q, K, V, scale, rep):
    return sdpa(Q, K.repeat_interleave(rep, 1), V.repeat_interleave(rep, 1), scale)


@pytest.mark.parametrize("H,rep,S,T", [(6, 3, 23, 29), (4, 4, 1, 17), (8, 2, 16, 40), (3, 1, 19, 5)])
def test_grouped_query_attention_matches_float64(H, rep, S, T):
    Q, K, V = qkv(2, H, S, T, 16, hk=H // rep, seed=H * rep + S)
    for sched in (None, dt.Schedule(tile={"i": 16, "j": 16}), dt.Schedule(**FUSED, access="tma")):
        check(gqa_attention, (Q, K, V, 0.25, rep), sched, torch_ref=gqa_ref, tol=TOL[torch.float16])
    if H > 1:
        g = torch.Generator().manual_seed(1)
        F64 = [t.double() for t in (Q, K, V)]
        assert torch.allclose(gqa_ref(*F64, 0.25, rep), torch.nn.functional.scaled_dot_product_attention(
            *F64, scale=0.25, enable_gqa=True)), "the oracle agrees with torch's enable_gqa"
        del g


def test_grouped_query_attention_can_fail():
    """The oracle tells heads apart: K/V head h % G instead of h // rep is caught."""
    Q, K, V = qkv(1, 4, 9, 11, 16, hk=2, seed=5)
    wrong = sdpa(Q.double(), K.double()[:, [0, 1, 0, 1]], V.double()[:, [0, 1, 0, 1]], 0.25)
    with pytest.raises(AssertionError):
        check(gqa_attention, (Q, K, V, 0.25, 2), None, expected=wrong.half(), tol=TOL[torch.float16])


def test_descriptors_knob_is_checked():
    with pytest.raises(dt.ScheduleError, match="descriptors = 'gpu' must be 'auto', 'host' or 'device'"):
        dt.Schedule(descriptors="gpu")
    s = dt.Schedule(access="tma", warp_specialize=True, descriptors="device")
    assert dt.Schedule.from_json(s.to_json()) == s


def test_flash_seeds_start_exploration_at_the_attention_tilings():
    """Random/TPE exploration of a 16-bit GPU attention first tries the fused-attention tilings
    (query x key tiles, warps, stages, TMA) before the heuristic's neighbours; other algorithms
    get none. Warp specialisation is searched, and tried first: on Hopper it is the Gluon kernel (the
    H200's fastest, s9 call 8); Triton's own warp-specialised attention (which did not finish on the
    H200) is never printed for it."""
    import dataclasses

    from dtriton.library import matmul
    from dtriton.tune.samplers import base_point, flash_seeds
    from dtriton.tune.space import Space
    Q = torch.zeros((), dtype=torch.float16).expand(4, 32, 4096, 128)
    args = (Q, Q, Q, 0.1)
    dims = Space.derive(attention, args, target="gpu").dimensions()
    assert dict(dims)["warp_specialize"] == (None, False)
    gpu = dataclasses.replace(attention.bind(args), device=torch.device("cuda"))
    base = dt.compile(attention).complete(gpu)
    seeds = flash_seeds(dims, base_point(dims, base), base, gpu)
    assert seeds[0] == base_point(dims, base) and base.warp_specialize is None   # the Gluon kernel where it applies
    assert all(p["warp_specialize"] is False for p in seeds[1:])   # the Triton kernel's configurations
    seeds = seeds[1:]
    got = [(p["tile.i"], p["tile.j"], p["num_warps"], p["num_stages"], p["access"]) for p in seeds]
    assert got == [(128, 64, 8, 3, "pointer"), (128, 128, 8, 2, "tma"), (64, 64, 4, 3, "pointer"),
                   (128, 64, 8, 3, "tma"), (128, 128, 8, 2, "pointer")]     # (the first: the default's tiles)
    assert not any(n.startswith(("place.", "strategy.", "tile.b", "tile.h")) for n, _ in dims)   # the layout is kept
    sp = Space.derive(attention, args, target="gpu")
    for p in seeds:
        s = sp.schedule_for(p, base, attention)
        assert s.strategy["j"] == "online" and s.stage("sum0").place == "fuse" and s.grid == base.grid
    A = torch.zeros((), dtype=torch.float16).expand(1024, 1024)
    mdims = Space.derive(matmul, (A, A), target="gpu").dimensions()
    assert "warp_specialize" not in dict(mdims)   # only the attention forward (the Gluon kernel) searches it
    mb = dataclasses.replace(matmul.bind((A, A)), device=torch.device("cuda"))
    mbase = dt.compile(matmul).complete(mb)
    assert flash_seeds(mdims, base_point(mdims, mbase), mbase, mb) == []
    cpu = attention.bind(args)    # the interpreter: no seeds
    assert flash_seeds(dims, base_point(dims, base), base, cpu) == []


def test_grouped_heads_read_through_tma_at_a_per_program_index():
    """K[b, h // rep, j, d] with the head axis a tile-1 grid axis: one K/V head per program, read
    through a TMA box of 1 at that head (so the warp-specialised loop keeps TMA loads); a computed
    index over a tiled axis keeps pointers."""
    Q, K, V = qkv(2, 6, 23, 29, 16, hk=2, seed=3)
    src = source(gqa_attention, dt.Schedule(**WS), (Q, K, V, 0.25, 3))
    assert "desc_K = tl.make_tensor_descriptor(K_ptr, shape=[size_b, dim_G, size_j, size_d]" in src
    assert "warp_specialize=True)" in src and "tl.load(K_ptr" not in src and "tl.load(V_ptr" not in src
    check(gqa_attention, (Q, K, V, 0.25, 3), dt.Schedule(**WS), torch_ref=gqa_ref, tol=TOL[torch.float16])
    check(gqa_attention, (Q, K, V, 0.25, 3), dt.Schedule(**WS, descriptors="host"), torch_ref=gqa_ref,
          tol=TOL[torch.float16])
    host = source(gqa_attention, dt.Schedule(**FUSED, access="tma"), (Q, K, V, 0.25, 3))
    assert "desc_K: TMA descriptor of K[b, (h // rep), j, d] in boxes of [1, 1, 16, 16] (built on the host)" in host
    # heads two to a program: h // rep varies inside the tile, so K and V keep pointer loads
    two = source(gqa_attention, dt.Schedule(**dict(FUSED, tile={"i": 16, "j": 16, "h": 2}), access="tma"),
                 (Q, K, V, 0.25, 3))
    assert "desc_K" not in two and "tl.load(K_ptr" in two


def test_gpu_default_pipelines_16_bit_attention_three_deep():
    """The heuristic's fused attention on the GPU: 128-row query tiles, 64-key tiles, 8 warps and
    3 pipeline stages for 16-bit inputs (2 for fp32, whose tiles would not fit three deep)."""
    import dataclasses

    from dtriton.schedule import complete_schedule
    for dtype, stages in ((torch.float16, 3), (torch.bfloat16, 3), (torch.float32, 2)):
        Q = torch.zeros((), dtype=dtype).expand(4, 32, 4096, 128)
        b = dataclasses.replace(attention.bind((Q, Q, Q, 0.1)), device=torch.device("cuda"))
        s = complete_schedule(attention, None, b)
        assert (s.tile["i"], s.tile["j"], s.num_warps, s.num_stages) == (128, 64, 8, stages), s


def test_online_row_statistics_are_vectors_of_the_rows():
    """The running max and row sum of attention's online pass are [BLOCK_I] vectors (one value per
    row a thread holds), broadcast where they meet [BLOCK_I, *] tiles; the softmax's online pass
    (no dot) keeps the program's layout."""
    from dtriton.library import softmax
    Q, K, V = qkv(1, 2, 37, 45, 16)
    src = source(attention, dt.Schedule(**FUSED), (Q, K, V, 0.25))
    assert "acc_max0_1 = tl.full((BLOCK_I,), -float('inf')" in src
    assert "keep_dims=False)" in src and "[:, None]" in src
    X = torch.randn(9, 300)
    soft = source(softmax, dt.Schedule(strategy={"j": "online"}, tile={"i": 4, "j": 64}), (X,))
    assert "keep_dims=False" not in soft
    check(softmax, (X,), dt.Schedule(strategy={"j": "online"}, tile={"i": 4, "j": 64}),
          torch_ref=lambda x: torch.softmax(x, -1))


def test_attention_space_keeps_the_fused_layout_and_searches_what_matters():
    """The GPU space of a fused attention forward: query tiles 64/128, key tiles 32/64/128, 4 or 8
    warps, 2-4 stages, TMA, warp specialisation (the Gluon kernel); a causal one also the query axis first on the
    grid and both launch orders; decoding also the split of the keys around the heuristic's."""
    from dtriton.tune.space import Space
    Q = torch.zeros((), dtype=torch.float16).expand(4, 32, 4096, 128)
    dims = dict(Space.derive(attention, (Q, Q, Q, 0.1), target="gpu").dimensions())
    assert dims == {"tile.i": (64, 128), "tile.j": (32, 64, 128), "num_warps": (4, 8), "num_stages": (2, 3, 4),
                    "access": ("pointer", "tma"), "warp_specialize": (None, False)}   # (None: the Gluon kernel)
    Q64 = torch.zeros((), dtype=torch.float16).expand(4, 32, 1024, 64)
    assert dict(Space.derive(attention, (Q64, Q64, Q64, 0.1), target="gpu").dimensions())["tile.i"] == (64, 128, 256)
    cdims = dict(Space.derive(causal_attention, (Q, Q, Q, 0.1), target="gpu").dimensions())
    assert cdims["grid"] == (("b", "h", "i"), ("i", "b", "h")) and cdims["tile_order"] == ("forward", "reverse")
    d = torch.zeros((), dtype=torch.float16)
    dec = (d.expand(1, 8, 1, 128), d.expand(1, 8, 32768, 128), d.expand(1, 8, 32768, 128), 0.1)
    ddims = dict(Space.derive(attention, dec, target="gpu").dimensions())
    assert ddims["split.j"] == (8, 16, 32, 64) and "warp_specialize" not in ddims
    # the interpreter's space is the general one
    assert any(n.startswith("place.") for n, _ in Space.derive(attention, (Q, Q, Q, 0.1), target="interpreter").dimensions())


def test_decoding_splits_the_keys_into_one_wave_of_long_slices():
    """Few decoding programs split the keys so the split programs fill at most one wave of 132
    SMs, each slice at least 8 key tiles: B1 H8 T32768 into 16 (the H200's best: 61.6 us against
    68.0 at 64), B1 H32 into 4; B16 H32 (512 programs) not at all."""
    import dataclasses

    from dtriton.schedule import complete_schedule
    from dtriton.schedule.attention_rules import decode_split
    d = torch.zeros((), dtype=torch.float16)
    for B, H, T, want in ((1, 8, 32768, 16), (1, 32, 32768, 4), (16, 32, 32768, None), (1, 8, 1024, 2)):
        args = (d.expand(B, H, 1, 128), d.expand(B, H, T, 128), d.expand(B, H, T, 128), 0.1)
        b = dataclasses.replace(attention.bind(args), device=torch.device("cuda"))
        assert complete_schedule(attention, None, b).split.get("j") == want, (B, H, T)
    assert decode_split(8, 32768, 64, 132) == 16 and decode_split(66, 32768, 64, 132) == 1
    # 16-bit decoding streams the keys in 128-key TMA tiles (H200 s10: 473.5 us against 560.3 with 64-key
    # pointer tiles at B16 H32 T8192); fp32 and prefill keep theirs
    for dtype, S, want in ((torch.float16, 1, ("tma", 128)), (torch.bfloat16, 16, ("tma", 128)),
                           (torch.float32, 1, ("pointer", 64)), (torch.float16, 4096, (None, 64))):
        q, kv = torch.zeros((), dtype=dtype).expand(16, 32, S, 128), torch.zeros((), dtype=dtype).expand(16, 32, 8192, 128)
        b = dataclasses.replace(attention.bind((q, kv, kv, 0.1)), device=torch.device("cuda"))
        got = complete_schedule(attention, None, b)
        assert (got.access if want[0] else None, got.tile["j"]) == want, (dtype, S)
    assert decode_split(8, 64 * 15, 64, 132) == 1      # fewer than 16 tiles: no two slices of 8


def test_the_split_loop_note_for_a_gpu_plan():
    """Planned for the GPU (nothing launched): causal attention asked for warp specialisation with its
    key loop split at the diagonal tells why the loops run without it (the note the interpreter leaves out)."""
    from dtriton.plan.callspec import call_spec
    from dtriton.plan.decide import plan_program, unused_knobs
    from dtriton.schedule import complete_schedule
    Q, K, V = qkv(1, 2, 48, 48, 16, seed=3)
    b = causal_attention.bind((Q, K, V, 0.25))
    b.device = torch.device("cuda")
    sched = complete_schedule(causal_attention, dt.Schedule(**dict(WS, tile={"i": 16, "j": 16})), b)
    prog = plan_program(causal_attention, sched, b, call_spec(causal_attention, b, (Q, K, V, 0.25), False))
    notes = unused_knobs(causal_attention, sched, prog)
    assert any("split into fully visible and boundary tiles" in n for n in notes), notes
