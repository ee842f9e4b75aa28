"""Shared fixtures and helpers for the dtriton core-compiler tests.

Everything runs on the CPU through Triton's interpreter, so shapes are small.

The central helper is :func:`check`: it compiles (or reuses) a kernel, runs it on the given
inputs with NaN-poisoned ``out=`` tensors (an element the kernel never writes stays NaN and fails
the comparison), and compares every output with the algorithm's reference evaluated on float64
copies of the inputs (and, when given, with a plain-torch float64 oracle). Tolerances depend on
the output dtype (:data:`TOL`); NaN and +-inf must match position by position.

Hypothesis profiles: ``ci`` (default; few examples, derandomised so CI runs are reproducible),
``dev`` (more examples) and ``quick``. Pick one with ``HYPOTHESIS_PROFILE=dev``.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest
import torch
from hypothesis import HealthCheck, assume, note, settings, strategies as st

try:
    import dtriton as dt
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import dtriton as dt

# ----------------------------------------------------------------------------------------------
# environment: never touch the user's kernel cache or tuning database (even when the shell sets
# DTRITON_CACHE_DIR or DTRITON_TUNING_DB to them); always use the interpreter on this CPU box
# ----------------------------------------------------------------------------------------------
import atexit
import shutil
_cache = tempfile.mkdtemp(prefix="dtriton-test-cache-")
os.environ["DTRITON_CACHE_DIR"] = _cache
os.environ.pop("DTRITON_TUNING_DB", None)
atexit.register(shutil.rmtree, _cache, ignore_errors=True)

_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much])
settings.register_profile("ci", max_examples=20, derandomize=True, **_COMMON)
settings.register_profile("quick", max_examples=4, derandomize=True, **_COMMON)
settings.register_profile("dev", max_examples=60, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# ----------------------------------------------------------------------------------------------
# tolerances and comparison
# ----------------------------------------------------------------------------------------------
#: maximum relative-norm error ||out - ref|| / ||ref|| per output dtype
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float64: 1e-12}


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_bench(args: Sequence[str], tmp_path: Path) -> str:
    """Run ``python3 <args> --out <tmp_path>/out`` from the repository root (``src`` first on the
    path, a private kernel cache) and return its stdout; it must exit 0 without a Traceback
    (bench groups catch their exceptions so one failure keeps the other rows: none may be hidden)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               DTRITON_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, *args, "--out", str(tmp_path / "out")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-3000:]
    return r.stdout


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative-norm error over the entries where ``ref`` is finite (float64)."""
    o, r = out.detach().double().cpu(), ref.detach().double().cpu()
    fin = torch.isfinite(r)
    if not fin.any():
        return 0.0
    d = torch.linalg.vector_norm((o - r)[fin])
    n = torch.linalg.vector_norm(r[fin])
    return float(d / n) if n > 0 else float(d)


def assert_close(out: torch.Tensor, ref: torch.Tensor, tol: float, what: str = "output") -> None:
    """``out`` equals ``ref`` up to relative-norm ``tol``; NaN and +-inf positions must match
    exactly (a NaN where the reference is finite never passes)."""
    assert isinstance(out, torch.Tensor), f"{what}: expected a tensor, got {type(out).__name__}"
    assert tuple(out.shape) == tuple(ref.shape), f"{what}: shape {tuple(out.shape)} != expected {tuple(ref.shape)}"
    o, r = out.detach().double().cpu(), ref.detach().double().cpu()
    nan_o, nan_r = torch.isnan(o), torch.isnan(r)
    if not torch.equal(nan_o, nan_r):
        bad = (nan_o != nan_r).nonzero()[:5].tolist()
        raise AssertionError(f"{what}: NaN pattern differs from the reference at {bad} "
                             f"({int(nan_o.sum())} NaN in output, {int(nan_r.sum())} in reference)")
    inf_r = torch.isinf(r)
    if not torch.equal(torch.isinf(o), inf_r) or not torch.equal(o[inf_r], r[inf_r]):
        bad = ((torch.isinf(o) != inf_r) | (torch.isinf(o) & (o != r))).nonzero()[:5].tolist()
        raise AssertionError(f"{what}: +-inf pattern differs from the reference at {bad}")
    e = rel_err(o, r)
    if not e <= tol:
        fin = torch.isfinite(r)
        worst = ((o - r).abs() * fin).flatten().argmax().item() if o.numel() else 0
        raise AssertionError(f"{what}: relative-norm error {e:.3e} > {tol:.1e} "
                             f"(worst flat index {worst}: got {o.flatten()[worst].item()!r}, "
                             f"expected {r.flatten()[worst].item()!r})")


def as64(args: Sequence[Any]) -> list[Any]:
    """float64 copies of floating tensors (index tensors and scalars unchanged)."""
    return [a.detach().double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


def poisoned_outputs(alg: dt.Algorithm, args: Sequence[Any]) -> list[torch.Tensor]:
    """NaN-filled output tensors of the right shapes and dtypes for a call with ``args``."""
    b = alg.bind(args)
    outs = []
    for o, odt in zip(alg.outputs, b.out_dtypes):
        shape = [b.axis_sizes[a] for a in o.layout]
        outs.append(torch.full(shape, float("nan"), dtype=odt))
    return outs


def as_tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


@contextlib.contextmanager
def numpy_warnings_raise():
    """Numpy's RuntimeWarnings (an invalid value, a division by zero, an overflow) raised inside the
    block, the interpreter's among them: its launch hides them once per process (launch.quiet_interpreter),
    so that filter is installed first and this one put before it."""
    from dtriton.backends.triton.launch import quiet_interpreter
    with warnings.catch_warnings():
        quiet_interpreter()
        warnings.simplefilter("error", RuntimeWarning)
        yield


def check(alg: dt.Algorithm, args: Sequence[Any], sched: dt.Schedule | None = None, *,
          kernel: dt.Kernel | None = None, torch_ref: Callable | None = None,
          expected: Any = None, tol: float | None = None, poison: bool = True) -> tuple[dt.Kernel, tuple]:
    """Run ``alg`` under ``sched`` on ``args`` and compare with float64 oracles.

    - outputs are NaN-poisoned ``out=`` tensors (``poison=False`` lets the kernel allocate);
    - the reference is ``alg.reference`` on float64 copies of the inputs;
    - ``torch_ref(*float64_args)`` (optional) is a plain-torch oracle, compared too;
    - ``expected`` (optional) replaces both oracles (used to show the helper can fail).
    Returns (kernel, outputs)."""
    if kernel is None:
        kernel = dt.compile(alg, sched)
    if poison:
        outs = poisoned_outputs(alg, args)
        got = as_tuple(kernel(*args, out=tuple(outs) if len(outs) > 1 else outs[0]))
        assert len(got) == len(outs)
        for g, o in zip(got, outs):
            assert g is o, "kernel(out=...) must return the tensors it was given"
    else:
        got = as_tuple(kernel(*args))
    out_dtypes = alg.bind(args).out_dtypes
    for g, odt in zip(got, out_dtypes):
        assert g.dtype == odt, f"output dtype {g.dtype} != {odt}"
    refs = []
    if expected is not None:
        refs.append(("expected", as_tuple(expected)))
    else:
        a64 = as64(args)
        refs.append(("alg.reference(float64)", as_tuple(alg.reference(*a64))))
        if torch_ref is not None:
            refs.append(("torch(float64)", as_tuple(torch_ref(*a64))))
    for label, ref in refs:
        assert len(ref) == len(got), f"{label}: {len(ref)} outputs, kernel gave {len(got)}"
        for n, (g, r) in enumerate(zip(got, ref)):
            t = tol if tol is not None else TOL[g.dtype]
            assert_close(g, r, t, what=f"{alg.name} output {n} vs {label} (schedule {sched!r})")
    return kernel, got


def randn(*shape, dtype=torch.float32, gen: torch.Generator | None = None, scale: float = 1.0) -> torch.Tensor:
    """Random normal data (never all zeros), computed in fp32 then cast."""
    t = torch.randn(*shape, generator=gen, dtype=torch.float32) * scale
    return t.to(dtype)


def launches(kernel: dt.Kernel) -> int:
    """Number of kernel launches of the last call."""
    return len(kernel._last.launches)


def n_plans(kernel: dt.Kernel) -> int:
    """Number of compiled specialisations held by the kernel."""
    return len(kernel._plans)


# ----------------------------------------------------------------------------------------------
# algorithms under test (module level, so every test file shares them)
# ----------------------------------------------------------------------------------------------
@dt.algorithm
def matmul(A: dt.Tensor["M", "K"], B: dt.Tensor["K", "N"]):
    i, j, k = dt.axes("i j k")
    C = dt.sum(A[i, k] * B[k, j], over=k)
    return C[i, j]


# the shared algorithms come from dtriton.library (one definition for tests, bench and docs);
# the variants below differ on purpose: matmul written exactly as the README, attention with a
# value dim E != D, spatial diffusion with basis first, cross-entropy over an axis c, and rowmax
from dtriton.library import layer_norm, linear_relu, log_softmax, rms_norm, softmax  # noqa: E402
from dtriton.library import column_sum as colsum  # noqa: E402


@dt.algorithm
def cross_entropy(X: dt.Tensor["M", "C"], labels: dt.Tensor["M"]):
    # the library's cross-entropy with its class axis named c (schedules in the tests address c)
    i, c = dt.axes("i c")
    m = dt.max(X[i, c], over=c)
    lse = m + dt.log(dt.sum(dt.exp(X[i, c] - m), over=c))
    return (lse - X[i, labels[i]])[i]


@dt.algorithm
def rowmax(X: dt.Tensor["M", "N"]):
    i, j = dt.axes("i j")
    return dt.max(X[i, j], over=j)[i]


@dt.algorithm
def spatial_diffusion(basis: dt.Tensor["V", "K"], x: dt.Tensor["V", "C"], mass: dt.Tensor["V"],
                      evals: dt.Tensor["K"], times: dt.Tensor["C"]):
    v, k, c = dt.axes("v k c")
    spectral = dt.exp(-evals[k] * times[c]) * dt.sum(basis[v, k] * x[v, c] * mass[v], over=v)
    out = dt.sum(basis[v, k] * spectral, over=k)
    return out[v, c], spectral[k, c]


@dt.algorithm
def attention(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "T", "D"],
              V: dt.Tensor["B", "H", "T", "E"], scale: float):
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * scale
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


@dt.algorithm
def causal_attention(Q: dt.Tensor["B", "H", "S", "D"], K: dt.Tensor["B", "H", "S", "D"],
                     V: dt.Tensor["B", "H", "S", "E"], scale: float):
    b, h, i, j, d, e = dt.axes("b h i j d e")
    s = dt.sum(Q[b, h, i, d] * K[b, h, j, d], over=d) * scale
    s = dt.where(j <= i, s, -float("inf"))
    p = dt.exp(s - dt.max(s, over=j))
    return (dt.sum(p * V[b, h, j, e], over=j) / dt.sum(p, over=j))[b, h, i, e]


# ----------------------------------------------------------------------------------------------
# plain-torch float64 oracles (independent of dtriton's reference evaluator)
# ----------------------------------------------------------------------------------------------
def t_layer_norm(X, w, b):
    return torch.nn.functional.layer_norm(X, (X.shape[-1],), w, b, eps=1e-5)


def t_rms_norm(X, w):
    return X * torch.rsqrt((X * X).mean(-1, keepdim=True) + 1e-6) * w


def t_cross_entropy(X, labels):
    return torch.nn.functional.cross_entropy(X, labels.long(), reduction="none")


def t_spatial_diffusion(basis, x, mass, evals, times):
    spectral = torch.exp(-evals[:, None] * times[None, :]) * (basis.t() @ (x * mass[:, None]))
    return basis @ spectral, spectral


def t_attention(Q, K, V, scale, causal=False):
    s = Q @ K.transpose(-1, -2) * scale
    if causal:
        S, T = s.shape[-2:]
        s = s.masked_fill(~torch.ones(S, T, dtype=torch.bool).tril(), -float("inf"))
    return torch.softmax(s, -1) @ V


TORCH_REFS = {
    "matmul": lambda A, B: A @ B,
    "linear_relu": lambda X, W, b: torch.relu(X @ W.t() + b),
    "softmax": lambda X: torch.softmax(X, -1),
    "log_softmax": lambda X: torch.log_softmax(X, -1),
    "layer_norm": t_layer_norm,
    "rms_norm": t_rms_norm,
    "cross_entropy": t_cross_entropy,
    "column_sum": lambda X: X.sum(0),
    "rowmax": lambda X: X.amax(-1),
    "spatial_diffusion": t_spatial_diffusion,
    "attention": t_attention,
    "causal_attention": lambda Q, K, V, s: t_attention(Q, K, V, s, causal=True),
}


def torch_ref(alg: dt.Algorithm) -> Callable:
    return TORCH_REFS[alg.name]


# ----------------------------------------------------------------------------------------------
# fixtures
# ----------------------------------------------------------------------------------------------
@pytest.fixture
def gen() -> torch.Generator:
    """A seeded generator: fresh, reproducible random data per test."""
    g = torch.Generator()
    g.manual_seed(1234)
    return g


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


# ----------------------------------------------------------------------------------------------
# input layouts: same values, different strides / offsets
# ----------------------------------------------------------------------------------------------
LAYOUTS = ("contiguous", "transposed", "offset", "expanded")


def relayout(t: torch.Tensor, kind: str) -> torch.Tensor:
    """A tensor with ``t``'s shape in another memory layout.

    - ``transposed``: dims stored in reverse order (``x.t()`` of a contiguous tensor);
    - ``offset``: a slice of a bigger tensor (non-zero storage offset, padded strides); the
      padding is NaN for floats, so an out-of-bounds read shows up in the result;
    - ``expanded``: the first dim has stride 0 (``x[:1].expand(...)``): values repeat along it.
    """
    if kind == "contiguous" or t.dim() == 0:
        return t.contiguous()
    if kind == "transposed":
        rev = list(reversed(range(t.dim())))
        return t.permute(*rev).contiguous().permute(*rev)
    if kind == "offset":
        pad = float("nan") if t.is_floating_point() else 0
        big = torch.full([s + 3 for s in t.shape], pad, dtype=t.dtype)
        sl = tuple(slice(1, 1 + s) for s in t.shape)
        big[sl] = t
        out = big[sl]
        assert out.storage_offset() > 0 or t.numel() == 0
        return out
    if kind == "expanded":
        if t.shape[0] == 0:
            return t
        return t[:1].expand(t.shape)
    raise ValueError(kind)


# ----------------------------------------------------------------------------------------------
# random shapes and schedules (hypothesis)
# ----------------------------------------------------------------------------------------------
P2 = (1, 2, 4, 8, 16, 32, 64)
#: sizes worth hitting: 1, primes, powers of two and their neighbours (non-multiples of tiles)
SPECIAL_DIMS = (1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 32, 33, 37, 40)


def dims(lo: int = 1, hi: int = 40) -> st.SearchStrategy[int]:
    special = [d for d in SPECIAL_DIMS if lo <= d <= hi]
    return st.one_of(st.sampled_from(special), st.integers(lo, hi)) if special else st.integers(lo, hi)


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _only_sum_reduced(alg: dt.Algorithm) -> list[str]:
    """Reduction axes that only sum (mean) stages reduce: the axes a split may legally name."""
    red = [a for a in alg.reduction_axes]
    bad = {a for s in alg.stages.values() if not s.is_output and s.node.combiner.base != "sum" for a in s.node.over}
    return [a for a in red if a not in bad]


@st.composite
def schedules(draw, alg: dt.Algorithm, sizes: dict[str, int], *, max_tiles: int = 8, split: bool = True,
              places: bool = True, max_block: int = 1 << 12) -> dt.Schedule:
    """A random schedule for ``alg`` at axis sizes ``sizes``.

    Every axis gets a power-of-two tile in 1..64, at least size/max_tiles (so the interpreter runs
    few programs), except "whole" axes that no kernel can map to programs; the grid is a random
    ordered subset of the output axes (or left to the heuristic); off-grid axes get a random
    strategy ("online" only for reduced axes); sum-only reduction axes may be split 1..4 (atomic
    or partials when something is split); reduction stages get a random placement; plus group
    and num_warps.
    The draw may still be illegal: the compiler must then raise dt.ScheduleError."""
    axes = list(alg.axis_names)
    out_axes = list(dict.fromkeys(a for o in alg.outputs for a in o.layout))
    tile = {}
    for a in axes:
        lo = min(64, max(1, _next_pow2(sizes[a]) // max_tiles))
        tile[a] = draw(st.sampled_from([t for t in P2 if t >= lo]), label=f"tile[{a}]")
    grid = None
    if draw(st.booleans(), label="explicit grid"):
        perm = draw(st.permutations(out_axes), label="grid order")
        n = draw(st.integers(0, len(perm)), label="grid length")
        grid = tuple(perm[:n])
    strategy = {}
    reduced = set(alg.reduction_axes)
    for a in axes:
        if grid is not None and a in grid:
            continue
        s = draw(st.sampled_from(["auto", "auto", "whole", "loop", "online" if a in reduced else "loop"]),
                 label=f"strategy[{a}]")
        if s != "auto":
            strategy[a] = s
    # keep register blocks bounded: whole axes count with their padded size
    block = 1
    for a in axes:
        block *= _next_pow2(sizes[a]) if strategy.get(a) == "whole" else tile[a]
    if block > max_block:
        # shrink the largest tiles until the product fits (still a legal, random schedule)
        for a in sorted(axes, key=lambda x: -tile[x]):
            while block > max_block and tile[a] > 1 and strategy.get(a) != "whole":
                tile[a] //= 2
                block //= 2
    splits = {}
    if split:
        for a in _only_sum_reduced(alg):
            f = draw(st.sampled_from([1, 1, 2, 3, 4]), label=f"split[{a}]")
            if f > 1 or draw(st.booleans(), label=f"explicit split 1 [{a}]"):
                splits[a] = f
    # a "whole" axis that no kernel can put on a grid takes no tile (validation rejects one): keep
    # tiles of grid axes, of reductions' free axes (their kernels' grids) and of split axes; with
    # the grid left to the heuristic, it fills the tile of any grid axis that has none
    maybe_grid = set(grid or ()) | {a for s in alg.stages.values() if not s.is_output for a in s.node.axes}
    for a, s in strategy.items():
        if s == "whole" and a not in maybe_grid and splits.get(a, 1) == 1:
            tile.pop(a, None)
    stages = {}
    if places:
        for s in alg.stages.values():
            if not s.is_output:
                p = draw(st.sampled_from(["auto", "auto", "materialize", "fuse"]), label=f"place[{s.name}]")
                if p != "auto":
                    stages[s.name] = {"place": p}
    group = {}
    if grid is not None and len(grid) >= 2 and draw(st.booleans(), label="grouped"):
        group = {grid[-2]: draw(st.integers(1, 8), label="group")}
    return dt.Schedule(tile=tile, grid=grid, group=group, split=splits, strategy=strategy, stages=stages,
                       num_warps=draw(st.sampled_from([1, 2, 4, 8]), label="num_warps"),
                       num_stages=draw(st.integers(1, 3), label="num_stages"),
                       split_mode=draw(st.sampled_from(["atomic", "partials"]), label="split_mode")
                       if any(f > 1 for f in splits.values()) else "atomic")


# ----------------------------------------------------------------------------------------------
# known compiler bugs (none open: BUG-1..10 are fixed and their repros are regression tests)
# ----------------------------------------------------------------------------------------------
def known_bug(kernel: dt.Kernel, exc: BaseException) -> str | None:
    """If a failure ``exc`` of ``kernel``'s last call matches a known, pinned bug, name it.

    Only consulted *after* a failure, so a fixed bug never hides a passing run; random-schedule
    tests reject (hypothesis.assume) such examples, and the strict xfail tests keep the bug in view.
    Remove an entry when its bug is fixed."""
    # every bug pinned here so far (BUG-7, BUG-8, BUG-9) has been fixed; add new entries as they are found
    return None


def run_random(alg: dt.Algorithm, args: Sequence[Any], sched: dt.Schedule, **kw):
    """``check`` for a random schedule: dt.ScheduleError rejects the example; a failure that
    matches a known bug (:func:`known_bug`) is rejected too; anything else fails the test."""
    note(f"schedule: {sched!r}")
    note(f"args: {[tuple(a.shape) + (a.dtype, a.stride()) if isinstance(a, torch.Tensor) else a for a in args]}")
    try:
        kernel = dt.compile(alg, sched)
    except dt.ScheduleError as e:
        note(f"rejected at compile: {e}")
        assume(False)
    try:
        return check(alg, args, sched, kernel=kernel, **kw)
    except dt.ScheduleError as e:
        note(f"rejected at call: {e}")
        assume(False)
    except Exception as e:  # noqa: BLE001 - classify, then re-raise
        bug = known_bug(kernel, e)
        if bug is None:
            raise
        note(f"known bug: {bug}")
        assume(False)
