"""Tile indices read from CUDA's three launch-grid dimensions (:mod:`dtriton.plan.launch_grid`).

A kernel whose grid axes fit reads each tile index from ``tl.program_id(d)`` (no division); the
innermost axes on dimension 0, the outer ones on 1 and 2 where the call's size buckets keep them
within 65535 programs, axes one program covers on none. Every case runs on the interpreter (which
runs 3-d grids) against float64 with the outputs poisoned, at odd sizes (primes, 1, non-multiples of
the tiles); the reverse launch order is checked program by program against the linear form's
reversed order; kernels whose buckets could pass 65535 programs on dimension 1 or 2, persistent,
grouped and split kernels keep the linear form.
"""
from __future__ import annotations

import itertools
import re

import pytest
import torch

import dtriton as dt
from conftest import check, randn
from dtriton.library import batch_norm, frobenius_normalize, instance_norm, layer_norm_chw, matmul
from dtriton.library import attention as lib_attention
from dtriton.plan.kernel import AxisPlan, KernelPlan
from dtriton.plan.launch_grid import plan_launch_dims, program_bound

F = torch.nn.functional


@dt.algorithm
def scale_shift(X: dt.Tensor["A", "B", "C", "D"], w: dt.Tensor["B"], b: dt.Tensor["D"]):
    a, i, c, d = dt.axes("a i c d")
    return (X[a, i, c, d] * w[i] + b[d])[a, i, c, d]


def kernels_of(k: dt.Kernel) -> list:
    """The launches of ``k``'s most recent call: (kernel plan, launch object)."""
    return [(L.meta.ir, L) for L in k._last.launches]


def body(src: str, name: str) -> str:
    """The printed source of kernel ``name`` in module ``src``."""
    start = src.index(f"def {name}(")
    nxt = src.find("@_jit", start)
    return src[start:nxt if nxt > 0 else len(src)]


class _TL:
    """Enough of ``triton.language`` to run a kernel's program-id lines in Python."""
    int32 = "int32"

    def __init__(self, ids):
        self.ids = ids

    def program_id(self, d):
        return self.ids[d]

    @staticmethod
    def full(shape, value, dtype):
        return value


def tile_indices(src: str, kp: KernelPlan, sizes: dict, ids: tuple[int, int, int]) -> tuple:
    """The tile index per grid axis (outermost first) that the printed kernel ``kp`` gives the
    program at launch-grid position ``ids`` (x, y, z): its program-id lines run in Python."""
    lines = []
    for ln in body(src, kp.name).splitlines()[1:]:
        s = ln.strip()
        if "tl.arange" in s or s.startswith("offs_"):
            break
        if re.match(r"(num_pid_\w+|pid\w*|rem\w*|tile|size_\w+) = ", s):
            lines.append(s.split("  #")[0])
    env = {f"size_{a}": n for a, n in sizes.items()}
    env.update({f"BLOCK_{a.upper()}": p.block for a, p in kp.axes.items()})
    env["tl"] = _TL(ids)
    exec("\n".join(lines), env)   # noqa: S102 - the kernel's own index arithmetic
    return tuple(int(env[f"pid_{a}"]) for a in kp.grid)


def launch_order(src: str, kp: KernelPlan, L, sizes: dict) -> list[tuple]:
    """Every program's tiles in CUDA's launch order (x fastest, then y, then z)."""
    g = tuple(L.grid(sizes)) + (1,) * (3 - len(L.grid(sizes)))
    return [tile_indices(src, kp, sizes, (x, y, z)) for z in range(g[2]) for y in range(g[1]) for x in range(g[0])]


def linear_order(kp: KernelPlan, sizes: dict, reverse: bool) -> list[tuple]:
    """The tiles of the grid axes in the linear form's order (row-major, the last axis fastest)."""
    counts = [-(-sizes[a] // kp.axes[a].block) for a in kp.grid]
    order = list(itertools.product(*[range(n) for n in counts]))
    return order[::-1] if reverse else order


# ------------------------------------------------------------------------------------------------
# element-wise kernels
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, tile", [
    ((3, 5, 7, 33), {"a": 1, "i": 2, "c": 4, "d": 16}),     # four axes of several programs: z shared
    ((1, 5, 1, 33), {"a": 1, "i": 1, "c": 1, "d": 16}),     # size-1 axes: no dimension
    ((2, 3, 5, 8), {"a": 1, "i": 2, "c": 2, "d": 8}),       # d one program: three dims for a, i, c
    ((7, 1, 3, 5), {"a": 4, "i": 1, "c": 4, "d": 8}),
])
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_elementwise_tiles_from_the_launch_grid(shape, tile, order):
    x = randn(*shape)
    w, b = randn(shape[1]), randn(shape[3])
    s = dt.Schedule(grid=["a", "i", "c", "d"], tile=tile, tile_order=order)
    k, _ = check(scale_shift, (x, w, b), s)
    src = k.source
    (kp, L), = kernels_of(k)
    assert kp.launch_dims is not None
    assert "tl.program_id(0)" in src and "pid = tl.program_id(0)" not in src
    sizes = dict(zip("aicd", shape))
    many = [a for a in kp.grid if -(-sizes[a] // tile[a]) > 1 or kp.size_buckets[a] > tile[a]]
    assert [a for dim in reversed(kp.launch_dims) for a in dim] == many   # (dimension 0 innermost)
    if len(many) > 3:   # the outermost share dimension 2: one division, no more
        assert kp.launch_dims[2] == tuple(many[:len(many) - 2])
        assert body(src, kp.name).count(" // (") == len(many) - 3
    else:
        assert " // (" not in body(src, kp.name).split("tl.arange")[0]
    assert ("reverse launch order" in src) == (order == "reverse")
    # program by program, CUDA's order (x fastest) is the linear form's order, reversed per dimension
    assert launch_order(src, kp, L, sizes) == linear_order(kp, sizes, order == "reverse")


def test_grid_dims_of_the_printed_source():
    x = randn(3, 5, 7, 33)
    s = dt.Schedule(grid=["a", "i", "c", "d"], tile={"a": 1, "i": 1, "c": 4, "d": 64}, tile_order="reverse")
    k, _ = check(scale_shift, (x, randn(5), randn(33)), s)
    src = k.source
    assert "pid_c = num_pid_c - 1 - tl.program_id(0)" in src
    assert "pid_i = num_pid_i - 1 - tl.program_id(1)" in src
    assert "pid_a = num_pid_a - 1 - tl.program_id(2)" in src
    assert "pid_d = tl.full((), 0, tl.int32)" in src   # one program covers d (bucket 64 <= its tile)
    ids = body(src, "scale_shift_out").split("tl.arange")[0]
    assert "tile = " not in ids and " // (" not in ids and " % " not in ids   # (no division by a tile count)
    (kp, L), = kernels_of(k)
    assert L.grid({"a": 3, "i": 5, "c": 7, "d": 33}) == (2, 5, 3)


def test_empty_axis_launches_nothing():
    x = randn(3, 0, 7, 5)
    s = dt.Schedule(grid=["a", "i", "c", "d"], tile={"a": 1, "i": 1, "c": 4, "d": 8})
    out = dt.compile(scale_shift, s)(x, randn(0), randn(5))
    assert out.shape == (3, 0, 7, 5)


# ------------------------------------------------------------------------------------------------
# which kernels keep the linear form
# ------------------------------------------------------------------------------------------------
def test_buckets_past_65535_programs_keep_the_linear_form():
    # a: 40000 rows in tiles of 1 (bucket 65536) cannot be bounded on dimension 1: a and d share x (linear)
    s = dt.Schedule(grid=["a", "i", "c", "d"], tile={"a": 1, "i": 1, "c": 1, "d": 1})
    x = randn(40000, 1, 1, 3)
    src = dt.compile(scale_shift, s).source_for(x, randn(1), randn(3))
    assert "pid = tl.program_id(0)" in src and "tl.program_id(1)" not in src
    assert "pid_a = pid // (" in src
    # the same rows in tiles of 2: bucket 65536 / 2 = 32768 programs fit dimension 1
    src2 = dt.compile(scale_shift, s.replace(tile={"a": 2, "i": 1, "c": 1, "d": 1})).source_for(x, randn(1), randn(3))
    assert "pid_a = tl.program_id(1)" in src2 and "pid_d = tl.program_id(0)" in src2
    # rows past 65535 in the middle: they share x with the inner axis (one division), the outer takes y
    x3 = randn(2, 40000, 1, 3)
    src3 = dt.compile(scale_shift, s).source_for(x3, randn(40000), randn(3))
    assert "pid_a = tl.program_id(1)" in src3 and "tl.program_id(2)" not in src3
    assert "pid0 = tl.program_id(0)" in src3 and "pid_i = pid0 // (num_pid_d)" in src3


def _kp(grid: dict, buckets: dict, **kw) -> KernelPlan:
    """A kernel plan over grid axes ``grid`` (axis -> tile) with size buckets ``buckets``."""
    axes = {a: AxisPlan(a, "grid", b, False) for a, b in grid.items()}
    k = KernelPlan("k", [], list(grid), axes, **kw)
    k.size_buckets = dict(buckets)
    return k


def test_plan_launch_dims_rules():
    big = 1 << 17
    # innermost on x, then y, then z; one-program axes nowhere
    assert plan_launch_dims(_kp({"n": 1, "c": 1, "h": 4, "q": 512}, {"n": 64, "c": 64, "h": 512, "q": 512})) == (
        ("h",), ("c",), ("n",))
    # more than three: the outermost share z
    assert plan_launch_dims(_kp({"a": 1, "b": 1, "c": 1, "d": 1}, dict.fromkeys("abcd", 8))) == (
        ("d",), ("c",), ("a", "b"))
    # an outer axis past 65535 programs: it cannot take y or z; it shares x with the inner one (linear)
    assert plan_launch_dims(_kp({"a": 1, "d": 1}, {"a": big, "d": 8})) is None
    # ... unless another grouping leaves fewer divisions than the linear form
    assert plan_launch_dims(_kp({"a": 1, "b": 1, "d": 1}, {"a": 4, "b": big, "d": 8})) == (("b", "d"), ("a",))
    # an inner axis past 65535 stays on x
    assert plan_launch_dims(_kp({"a": 1, "d": 1}, {"a": 8, "d": big})) == (("d",), ("a",))
    # a missing bucket: no bound
    assert plan_launch_dims(_kp({"a": 1, "d": 1}, {"d": 8})) is None
    # every axis one program: none needs a dimension
    assert plan_launch_dims(_kp({"a": 8, "d": 16}, {"a": 8, "d": 16})) == ()
    # persistent, split and grouped kernels keep the linear form
    assert plan_launch_dims(_kp({"a": 1, "d": 1}, {"a": 8, "d": 8}, persistent=1)) is None
    assert plan_launch_dims(_kp({"a": 1, "d": 1}, {"a": 8, "d": 8}, split=("k", 2))) is None
    g = _kp({"a": 1, "d": 1}, {"a": 8, "d": 8})
    g.axes["a"] = AxisPlan("a", "grid", 1, False, group=4)
    assert plan_launch_dims(g) is None
    # the verifier: launch dims name distinct grid axes
    from dtriton.plan.kernel import Program
    bad = _kp({"a": 1, "d": 1}, {"a": 8, "d": 8}, launch_dims=(("d",), ("d", "x")))
    assert any("launch dims" in p for p in Program([bad], {}).verify())
    good = _kp({"a": 1, "d": 1}, {"a": 8, "d": 8}, launch_dims=(("d",), ("a",)))
    assert not any("launch dims" in p for p in Program([good], {}).verify())


def test_tile_programs_over_sizes_and_buckets():
    """One count for the runtime's grid (call sizes) and the launch-grid bound (size buckets)."""
    k = _kp({"a": 3, "d": 16}, {"a": 8})
    assert KernelPlan.tile_programs(k.grid_tiles("a"), {"a": 7}) == 3
    assert KernelPlan.tile_programs([(("a",), 3), (("d",), 16)], {"a": 7, "d": 33}) == 9
    assert KernelPlan.tile_programs([(("a", "d"), 4)], {"a": 3, "d": 5}) == 4   # a flat axis: 15 in tiles of 4
    assert KernelPlan.tile_programs([(("a",), 3), (("d",), 16)], {"a": 0, "d": 33}) == 0
    assert KernelPlan.tile_programs(k.grid_tiles("d"), k.size_buckets) is None   # d has no bucket
    assert program_bound(k, "a") == 3 and program_bound(k, "d") is None


# ------------------------------------------------------------------------------------------------
# normalisations, matmul and attention defaults
# ------------------------------------------------------------------------------------------------
def _bn(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True, eps=1e-5)


NORMS = {
    "batch_norm": (batch_norm, lambda x: (x, randn(x.shape[1]), randn(x.shape[1])), _bn),
    "instance_norm": (instance_norm, lambda x: (x,), lambda x: F.instance_norm(x, eps=1e-5)),
    "layer_norm_chw": (layer_norm_chw, lambda x: (x,), lambda x: F.layer_norm(x, x.shape[1:], eps=1e-5)),
    "frobenius": (frobenius_normalize, lambda x: (x,), lambda x: x / torch.linalg.vector_norm(x)),
}


@pytest.mark.parametrize("name", list(NORMS))
@pytest.mark.parametrize("shape", [(3, 5, 7, 13), (1, 2, 1, 17), (2, 3, 11, 1)])
@pytest.mark.parametrize("gpu", [False, True])
def test_norms_match_float64(name, shape, gpu, monkeypatch):
    from dtriton.schedule import complete_schedule, heuristics
    alg, make, eager = NORMS[name]
    if gpu:   # the GPU heuristic's paths (split statistics, a separate output kernel) at small shapes
        monkeypatch.setitem(heuristics.ROW_BLOCK, True, 64)
        monkeypatch.setitem(heuristics.STEP_BLOCK, True, 16)
    x = randn(*shape) + 2.0
    args = make(x)
    b = alg.bind(args)
    if gpu:
        b.device = torch.device("cuda")
    s = complete_schedule(alg, None, b)
    # the output pass in small tiles: several programs on several axes (7 rows in tiles of 4, 13 columns in tiles of 8)
    out_tiles = {"n": 1, "c": 1, "h": 4, "q": 8} if s.grid and set(s.grid) == {"n", "c", "h", "q"} else None
    s = s.replace(tile=dict(s.tile, **out_tiles)) if out_tiles else s
    k, (y,) = check(alg, args, s, torch_ref=eager)
    if out_tiles:
        last, L = kernels_of(k)[-1]
        assert last.launch_dims is not None and "tl.program_id(1)" in body(k.source, last.name), k.source


def test_batch_norm_output_kernel_reads_its_tiles_without_division(monkeypatch):
    from dtriton.schedule import complete_schedule, heuristics
    monkeypatch.setitem(heuristics.ROW_BLOCK, True, 64)
    monkeypatch.setitem(heuristics.STEP_BLOCK, True, 16)
    x = randn(5, 3, 11, 13)
    args = (x, randn(3), randn(3))
    b = batch_norm.bind(args)
    b.device = torch.device("cuda")
    s = complete_schedule(batch_norm, None, b)
    s = s.replace(tile=dict(s.tile, n=1, c=1, h=4, q=16))
    k, _ = check(batch_norm, args, s, torch_ref=_bn)
    out = body(k.source, "batch_norm_out")
    assert re.search(r"pid_h = (num_pid_h - 1 - )?tl\.program_id\(0\)", out), out
    assert re.search(r"pid_c = (num_pid_c - 1 - )?tl\.program_id\(1\)", out), out
    assert re.search(r"pid_n = (num_pid_n - 1 - )?tl\.program_id\(2\)", out), out
    assert "pid_q = tl.full((), 0, tl.int32)" in out
    # the split statistics kernel keeps the linear form (its slice index rides the program id)
    for kp, _ in kernels_of(k):
        assert (kp.launch_dims is None) == bool(kp.split)


@pytest.mark.parametrize("M, K, N", [(37, 29, 41), (1, 7, 13), (67, 1, 3)])
def test_matmul_default_matches_float64(M, K, N):
    A, B = randn(M, K), randn(K, N)
    k, _ = check(matmul, (A, B))
    for kp, _ in kernels_of(k):
        assert kp.grouped or kp.persistent or kp.split or kp.launch_dims is not None


@pytest.mark.parametrize("B, H, S, T, D", [(2, 3, 17, 13, 8), (1, 1, 5, 1, 4), (3, 2, 1, 7, 16)])
def test_attention_default_matches_float64(B, H, S, T, D):
    q, kk, v = randn(B, H, S, D), randn(B, H, T, D), randn(B, H, T, D)

    def ref(q, kk, v, scale):
        return torch.softmax(q @ kk.transpose(-1, -2) * scale, -1) @ v
    check(lib_attention, (q, kk, v, 0.3), torch_ref=ref)
