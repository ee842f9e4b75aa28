"""The draft a default schedule is completed in (:class:`Draft`: the user's schedule, the call's
facts and the fields the rules of :mod:`.heuristics` fill in), and the small facts several rules
ask for: padded sizes, program counts, the SM count, the split-K rule."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..ir import FP8_DTYPES, Algorithm, Axis, Binding, Load, contractions, splittable, topo_order
from .schedule import Schedule

__all__ = ["Draft", "EIGHT_BIT", "contiguous_axes", "next_pow2", "programs", "sm_count", "split_for"]

#: input dtypes whose contractions are 8-bit tensor-core dots (fp8 x fp8 -> fp32, int8 x int8 -> int32)
EIGHT_BIT = FP8_DTYPES + (torch.int8,)

#: In-program block (elements) up to which the axes a program covers are all "whole": a
#: 32768-wide fp32 row is 64 registers per thread over 16 warps (4096 on the interpreter).
ROW_BLOCK = {True: 32768, False: 4096}
#: Elements one loop step covers when they do not fit (GPU: True; interpreter: False).
STEP_BLOCK = {True: 2048, False: 1024}

_SMS: dict[str, int] = {}


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def contiguous_axes(alg: Algorithm) -> set[str]:
    """Axes that index the last dimension of some input (contiguous in a row-major tensor). A
    vector's axis counts only when no load has two dims or more: a per-row statistic read as a
    vector (layer norm's saved mean) does not make the rows contiguous."""
    wide, vec = set(), set()
    for n in topo_order([o.expr for o in alg.outputs]):
        if isinstance(n, Load) and n.index and isinstance(n.index[-1], Axis):
            (wide if len(n.index) >= 2 else vec).add(n.index[-1].name)
    return wide or vec


def programs(axes, sizes, tiles) -> int:
    """Programs a grid over ``axes`` launches with ``tiles`` (an axis without a tile: one each)."""
    return math.prod(-(-sizes[a] // tiles.get(a, 1)) for a in axes)


def sm_count(device) -> int:
    """Streaming multiprocessors of the CUDA device ``device`` (132 on an H200; also the answer
    when no GPU is visible, e.g. a GPU schedule derived on a CPU machine)."""
    key = str(device)
    if key not in _SMS:
        n = 132
        try:
            if torch.cuda.is_available() and getattr(device, "type", "cuda") == "cuda":
                n = int(torch.cuda.get_device_properties(device).multi_processor_count)
        except Exception:  # noqa: BLE001 - an odd device string: keep the H200's count
            pass
        _SMS[key] = n
    return _SMS[key]


def split_for(split: dict, r: str, programs: int, size: int, tile: int, sms: int = 132):
    """Split-K rule: with fewer than half a wave of programs (66 on 132 SMs), split ``r`` so about
    two waves run, each program still looping over at least 8 tiles of ``r`` (the H200 sweep of
    the diffusion layer: best split 4 at V=1.4k, 8 at 5k, 64 at 28k-85k)."""
    want = next_pow2(-(-2 * sms // max(programs, 1)))
    most = size // (tile * 8)
    if programs < sms // 2 and most >= 2:
        split[r] = max(2, min(64, want, 1 << (most.bit_length() - 1)))


@dataclass
class Draft:
    """A schedule being completed: the user's schedule and the call's facts (read-only), and the
    fields the rules fill in (``tile``, ``grid``, ... start as the user's)."""
    alg: Algorithm
    user: Schedule
    given: bool            # a schedule was given (see layout_given; launch options it leaves None are
                           # the rules' like any other open knob)
    b: Binding
    gpu: bool
    sms: int
    half: bool             # some input is fp16/bf16, or an 8-bit tensor-core type (eight_bit)
    cons: dict             # contractions(alg)
    reduced: set           # axes some stage reduces
    row_axes: list         # reduced axes kept in some output
    contig: set            # axes that index an input's last dim
    tile: dict
    strategy: dict
    group: dict
    split: dict
    grid: tuple | None
    num_warps: int | None
    num_stages: int | None
    access: str | None
    split_mode: str | None
    split_order: str | None
    precision: str         # the dot precision of fp32 operands (the user's; a rule may pick one for "auto")
    persistent: int = 0    # programs per SM of a persistent kernel (the user's; 0: a program per tile)
    rolling: bool | None = None   # a window sum by rolling rows (the user's; None: the rules pick)
    stages: dict = field(default_factory=dict)
    dot_axes: set = field(default_factory=set)
    col_axes: list = field(default_factory=list)   # column reductions of the main kernel
    col_splits: set = field(default_factory=set)   # axes split as column reductions (main kernel or an output's)
    eight_bit: bool = False   # some input is fp8 or int8 (dots of them run on tensor cores: plan.dots)
    widest: int = 1        # in-program block of the off-grid axes (their product; the widest with dots)
    tc_fp32: bool = False  # an fp32 contraction got tensor-core tiles
    stats_kernels: bool = False   # statistics stages got kernels of their own (split_rules.split_rows)

    @staticmethod
    def start(alg: Algorithm, sched: Schedule | None, b: Binding) -> "Draft":
        """The draft before any rule: the user's fields (or none), the call's facts."""
        user = sched or Schedule()
        gpu = b.device.type == "cuda"
        reduced = set(alg.reduction_axes)
        return Draft(
            alg=alg, user=user, given=sched is not None, b=b, gpu=gpu, sms=sm_count(b.device) if gpu else 132,
            half=any(d in (torch.float16, torch.bfloat16) + EIGHT_BIT for d in b.dtypes.values()),
            eight_bit=any(d in EIGHT_BIT for d in b.dtypes.values()), cons=contractions(alg),
            reduced=reduced, row_axes=list(dict.fromkeys(a for o in alg.outputs for a in o.layout if a in reduced)),
            contig=contiguous_axes(alg), tile=dict(user.tile), strategy=dict(user.strategy), group=dict(user.group),
            split=dict(user.split), grid=user.grid, num_warps=user.num_warps, num_stages=user.num_stages,
            access=user.access, split_mode=user.split_mode, split_order=user.split_order, precision=user.precision, persistent=user.persistent,
            rolling=user.rolling)

    @property
    def sizes(self) -> dict[str, int]:
        return self.b.axis_sizes

    @property
    def layout_given(self) -> bool:
        """The user's schedule sets how the work is laid out (tiles, grid, group, split, strategy or
        stage overrides): the rules that re-plan the layout (attention's online loop, grouped
        order, the GEMM-then-rows placement) leave it alone. A schedule of other knobs only
        (``precision``, ``num_warps``, ``access``, ...) is completed with every rule."""
        u = self.user
        return bool(self.given and (u.tile or u.grid is not None or u.group or u.split or u.strategy or u.stages))

    def cap(self, a: str, t: int) -> int:
        """``t`` capped at the padded size of axis ``a``."""
        return max(1, min(t, next_pow2(self.sizes[a])))

    def split_ok(self, a: str) -> bool:
        """The heuristic may split ``a``: GPU, no user split, not split yet, not an online axis, and
        legal (:func:`~dtriton.ir.splittable`)."""
        return (self.gpu and not self.user.split and a not in self.split and self.strategy.get(a) != "online"
                and splittable(self.alg, a))


def axis_depths(alg: Algorithm) -> dict[str, int]:
    """How far from the last dim each axis indexes an input (0: the last, contiguous dim), the
    smallest over the algorithm's loads."""
    out: dict[str, int] = {}
    for n in topo_order([o.expr for o in alg.outputs]):
        if isinstance(n, Load):
            for k, e in enumerate(reversed(n.index)):
                if isinstance(e, Axis):
                    out[e.name] = min(out.get(e.name, k), k)
    return out
