"""The schedule knobs: one table that says what a :class:`~dtriton.Schedule` can hold.

Each :class:`Knob` record gives a knob's name, kind (a flat value, a per-axis or per-tensor map,
the grid's axis tuple, the per-stage overrides), scope (whether a
:class:`~dtriton.StageSchedule` may override it), allowed values (:class:`Domain`, with the error
text a wrong value gets), default, the values exploration tries, whether it is a launch option,
and a one-line description. ``Schedule`` and ``StageSchedule`` take their fields, defaults, value
checks, JSON form and ``repr`` from this table; the heuristic passes every knob it does not decide
through unchanged; exploration (:mod:`dtriton.tune`) takes every flat knob as a ``Space`` field,
derives its ``search`` values and keeps candidates apart by their source and launch options; the
knob table of the docs (``docs/knobs.md``) is :func:`markdown_table`.

Adding a flat knob: append a :class:`Knob` to :data:`BUILTIN` (or :func:`register` one at run
time, as tests do), then read ``schedule.<name>`` where it takes effect. Map knobs (``tile``,
``eviction``, ...) are built in only: their names are also checked against an algorithm by
``Schedule.validate`` and read by lowering.

Run ``python -m dtriton.schedule --write docs/knobs.md`` to refresh the docs' table (a test
fails while it differs).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

__all__ = ["Knob", "Domain", "FrozenMap", "one_of", "is_pow2", "register", "unregister", "knob", "knobs", "names",
           "flat_knobs", "stage_knobs", "launch_knobs", "reserve_names", "markdown_table", "BUILTIN",
           "KINDS", "SCOPES", "STRATEGIES", "PLACES", "STAGE_PLACES", "SPLIT_MODES", "SPLIT_ORDERS", "ACCESS", "EVICTIONS", "PRECISIONS",
           "TENSOR_CORE_FP32", "AUTO_TENSOR_CORE", "TILE_ORDERS", "DESCRIPTOR_SITES",
           "ACC_DTYPES"]

#: Reduction / non-grid-axis strategies.
#: whole: the tile covers the axis (one pass in registers); loop: tiles over the axis in a loop,
#: one pass per dependent reduction; online: one running pass with rescaling (Milakov &
#: Gimelshein 2018, "Online normalizer calculation for softmax"); auto: the compiler picks.
STRATEGIES = ("auto", "whole", "loop", "online")
#: Where a reduction stage is computed: auto; fuse (in its consumer's kernel, in registers, or
#: recomputed inside the consumer's loops); materialize (a kernel of its own, result in memory).
PLACES = ("auto", "fuse", "materialize")
#: Every place a stage takes: those of :data:`PLACES` (explored) and atomic (a sum materialised by
#: fp32 atomic partial sums that the kernel holding its operands adds inside its loop over the
#: stage's kept axes, :mod:`dtriton.plan.loop_stores`: the attention backward's dQ in the dK/dV
#: kernel; chosen by the derived backward's rule, not explored on every stage).
STAGE_PLACES = PLACES + ("atomic",)
#: How the partial results of a reduction split across programs combine: atomic (fp32 atomics into a
#: zeroed buffer; sums only), partials (per-split buffers, each reader folds them in split order:
#: deterministic) or finish (per-split buffers that a small finishing kernel folds once, in split order,
#: into the final values every reader then reads: deterministic, one more launch, worth it when many
#: programs read the statistic, as batch norm's output pass of 262144 programs does) or last (finish's
#: fold run by the last program of each tile of the split kernel, found by an int32 arrival counter:
#: the same values, one launch less; :mod:`dtriton.plan.last_finish`).
SPLIT_MODES = ("atomic", "partials", "finish", "last")
#: Which tiles of a split axis each slice's program visits: blocked (slice j covers one contiguous run
#: of tiles) or interleaved (slice j covers tiles j, j + split, j + 2 * split, ...: at every moment the
#: programs read one contiguous region, and their last steps cover the end of the axis, which a reader
#: launched next in reverse order finds in L2; :func:`dtriton.schedule.split_rules.split_rows`).
SPLIT_ORDERS = ("blocked", "interleaved")
#: Memory-access style of tile loads and stores: pointer (a block of addresses, masked), block_ptr
#: (``tl.make_block_ptr``, bounds checked by the hardware path) or tma (Hopper tensor-memory
#: accelerator through host-side descriptors, ``TensorDescriptor`` kernel arguments; needs a
#: contiguous last dim and 16-byte aligned rows, and falls back to pointers per tensor where a
#: call's tensor does not qualify).
ACCESS = ("pointer", "block_ptr", "tma")
#: L2 hints of ``tl.load`` (``Schedule.eviction``); "evict_normal" is Triton's default.
EVICTIONS = ("evict_first", "evict_last", "evict_normal")
#: Dot precision of fp32 operands (``Schedule.precision``). "auto" (the default): "tf32x3" where
#: the call's operand layouts suit tensor cores (the side on the right reads the reduced axis at
#: unit stride), else "ieee"; both keep fp32 accuracy. "ieee": FMA units, as torch's default.
#: "tf32": one tensor-core pass on 10-bit mantissas (~1e-3 relative error). "tf32x3": each operand
#: split into a tf32 part and its remainder, three tensor-core passes (~2^-22 per product: fp32
#: accuracy). "bf16x6" (three-way bf16 split, six passes: fp32 accuracy) and "bf16x3" (~1e-5).
PRECISIONS = ("auto", "ieee", "tf32", "tf32x3", "bf16x3", "bf16x6")
#: The precisions that put fp32 dots on tensor cores.
TENSOR_CORE_FP32 = ("tf32", "tf32x3", "bf16x3", "bf16x6")
#: What "auto" becomes for an fp32 dot whose operand layout suits tensor cores (:mod:`dtriton.plan.dots`,
#: and :func:`dtriton.plan.staging.call_precision` for a whole call); "ieee" otherwise.
AUTO_TENSOR_CORE = "tf32x3"
#: Launch order of a kernel's tiles (``Schedule.tile_order``): forward (program id order),
#: reverse (the last tile first; causal load balancing puts the heaviest tiles first), or auto
#: (the plan's choice: reverse for an output pass re-reading the input of a statistics kernel, whose last
#: tiles are still in L2; else program-id order, which measured at least as fast for causal attention).
TILE_ORDERS = ("auto", "forward", "reverse")
#: Where the TMA descriptors of ``access="tma"`` tiles are built (``Schedule.descriptors``): host
#: (encoded once per call, passed as kernel arguments), device (``tl.make_tensor_descriptor`` at
#: the start of each program: 128 bytes of global scratch and a fence per program), or auto (the
#: plan's choice: device in kernels with a warp-specialised loop, where Triton 3.6 partitions the
#: consumer warp groups' tiles on Hopper only with in-kernel descriptors; host elsewhere).
DESCRIPTOR_SITES = ("auto", "host", "device")
#: Accumulation dtypes (``Schedule.acc_dtype``).
ACC_DTYPES = ("float32", "float64")

#: flat: one value; per_axis / per_tensor: a map from axis / input tensor name to a value (each
#: value checked against the domain); axes: a tuple of axis names or None (the grid); per_stage:
#: stage name -> StageSchedule (``stages``).
KINDS = ("flat", "per_axis", "per_tensor", "axes", "per_stage")
#: schedule: a Schedule field only; stage: a StageSchedule may override it for a stage's kernel.
SCOPES = ("schedule", "stage")


class FrozenMap(Mapping):
    """An immutable, hashable mapping (sorted by key): the value of a map knob (``tile``, ...)."""

    __slots__ = ("_items", "_d")

    def __init__(self, data: Mapping | None = None, **kw):
        d = dict(data or {}, **kw)
        self._d = d
        self._items = tuple(sorted(d.items(), key=lambda kv: str(kv[0])))

    def __getitem__(self, k):
        return self._d[k]

    def __iter__(self) -> Iterator:
        return iter(k for k, _ in self._items)

    def __len__(self):
        return len(self._items)

    def __hash__(self):
        return hash(self._items)

    def __eq__(self, o):
        if isinstance(o, FrozenMap):
            return self._items == o._items
        if isinstance(o, Mapping):
            return dict(self._items) == dict(o)
        return NotImplemented

    def __repr__(self):
        return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in self._items) + "}"


def is_pow2(n) -> bool:
    """``n`` is an int (not a bool) and a power of two."""
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1 and (n & (n - 1)) == 0


@dataclass(frozen=True)
class Domain:
    """The values a knob allows.

    ``problem(value)`` says what is wrong with a value (the text after ``"<knob> = <value> "`` in
    the error, e.g. ``"must be an integer from 1 to 8"``), or returns None for an allowed value.
    ``text`` describes the allowed values for the docs; ``values`` is the finite set, when there
    is one."""
    text: str
    problem: Callable[[Any], "str | None"]
    values: tuple | None = None

    def __repr__(self):
        return f"Domain({self.text!r})"


def _member(v, values: tuple) -> bool:
    # 1 == True in Python: a bool is allowed only where the domain lists that bool, and the
    # other way round
    try:
        return any(v == x and isinstance(v, bool) == isinstance(x, bool) for x in values)
    except Exception:  # noqa: BLE001 - a value whose == raises is not allowed
        return False


def _listing(values: tuple) -> str:
    """``'a', 'b' or 'c'``."""
    r = [repr(v) for v in values]
    return r[0] if len(r) == 1 else ", ".join(r[:-1]) + " or " + r[-1]


def one_of(values: Iterable, expect: str | None = None) -> Domain:
    """A domain of finitely many values; a wrong value reads ``"<knob> = 'x' must be 'a', 'b' or
    'c'"`` (or ``"<knob> = 'x' " + expect``)."""
    values = tuple(values)
    if not values:
        raise ValueError("one_of() needs at least one value")
    why = expect or f"must be {_listing(values)}"
    return Domain(", ".join(repr(v) for v in values), lambda v: None if _member(v, values) else why, values)


def _int_note(v) -> str:
    """What a value that is no plain int reads as in a knob's message: a bool (numpy's too) is named, a
    numpy integer with the ``int()`` that passes it where that would be valid; empty for an int or None."""
    if v is None or (isinstance(v, int) and not isinstance(v, bool)):
        return ""
    if isinstance(v, bool) or type(v).__name__ == "bool":
        return f" (got the bool {v})"
    if not hasattr(v, "__index__"):
        return ""
    return f" (got {type(v).__module__}.{type(v).__name__} {v}" + (f": pass int({v}))" if int(v) >= 1 else ")")


def _tile_problem(t) -> str | None:
    if not isinstance(t, int) or isinstance(t, bool):
        return "must be an int (a power of two such as 16, 32, 64)" + _int_note(t)
    if t < 1:
        return "must be at least 1 (a power of two such as 1, 16, 32, 64)"
    if not is_pow2(t):
        lo = 1 << (max(t, 1).bit_length() - 1) if t > 0 else 1
        return f"is not a power of two; Triton blocks must be powers of two (try {lo} or {lo * 2})"
    return None


def _positive(v) -> str | None:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return None
    return "must be a positive integer" + _int_note(v)


def _warps(v) -> str | None:
    ok = v is None or (isinstance(v, int) and not isinstance(v, bool) and is_pow2(v) and v <= 32)
    return None if ok else "must be a power of two between 1 and 32" + _int_note(v)


def _pipeline(v) -> str | None:
    ok = v is None or (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 8)
    return None if ok else "must be an integer from 1 to 8" + _int_note(v)


def _per_sm(v) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 32
    return None if ok else "must be 0 (off) or programs per SM from 1 to 32" + _int_note(v)


def _unroll(v) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 8
    return None if ok else "must be 0 (the plan picks) or loop steps per iteration from 1 to 8" + _int_note(v)


def _pieces(v) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and v in (0, 1, 2)
    return None if ok else "must be 0 (the plan picks), 1 (the whole tile) or 2 (two halves of its last dim)" + _int_note(v)


def _flat_axes(v) -> str | None:
    ok = v is None or (isinstance(v, int) and not isinstance(v, bool) and (v == 0 or 2 <= v <= 8))
    return None if ok else "must be 0 (off) or the number of innermost axes to fuse, 2 to 8" + _int_note(v)


def _boolean(v) -> str | None:
    return None if isinstance(v, bool) else "must be True or False"


def _boolean_or_none(v) -> str | None:
    return None if v is None or isinstance(v, bool) else "must be True, False or None (the compiler picks)"


def _any(v) -> str | None:
    return None


@dataclass(frozen=True)
class Knob:
    """One schedule knob.

    Attributes:
        name: the ``Schedule`` keyword and attribute.
        default: the value of a schedule that does not set it (JSON omits values equal to it).
            Map kinds default to an empty :class:`FrozenMap`, ``axes`` to None.
        domain: a :class:`Domain`, or a tuple of allowed values (made :func:`one_of`). Map kinds
            check each value of the map.
        doc: one line for the knob table of the docs.
        kind: one of :data:`KINDS`.
        scope: one of :data:`SCOPES`; "stage" knobs are :class:`~dtriton.StageSchedule` fields
            too (unset there: None or empty, inheriting the schedule's value).
        search: the values exploration tries (for map kinds, per entry); ``()``: not searched.
            Derived spaces narrow the built-in knobs' values per call.
        launch: the value is a kernel launch option (``num_warps``, ``num_stages``), passed to the
            launch rather than read by the plan, so it is not visible in the generated source.
    """
    name: str
    default: Any
    domain: Any
    doc: str
    kind: str = "flat"
    scope: str = "schedule"
    search: tuple = ()
    launch: bool = False

    def __post_init__(self):
        if not (isinstance(self.name, str) and self.name.isidentifier() and not self.name.startswith("_")):
            raise ValueError(f"knob name {self.name!r} must be a Python identifier not starting with '_'")
        if self.kind not in KINDS:
            raise ValueError(f"knob {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        if self.scope not in SCOPES:
            raise ValueError(f"knob {self.name!r}: scope {self.scope!r} is not one of {SCOPES}")
        if isinstance(self.domain, (tuple, list)):
            object.__setattr__(self, "domain", one_of(self.domain))
        if not isinstance(self.domain, Domain):
            raise ValueError(f"knob {self.name!r}: domain must be a Domain or a tuple of values, "
                             f"got {type(self.domain).__name__}")
        object.__setattr__(self, "search", tuple(self.search))
        if self.launch and self.kind != "flat":
            raise ValueError(f"knob {self.name!r}: only flat knobs can be launch options")
        if self.kind == "flat" and self.problem(self.default) is not None:
            raise ValueError(f"knob {self.name!r}: default {self.default!r} {self.problem(self.default)}")
        for v in self.search:
            if self.problem(v) is not None:
                raise ValueError(f"knob {self.name!r}: search value {v!r} {self.problem(v)}")

    def problem(self, value) -> str | None:
        """What is wrong with ``value`` (one value; one entry's value for map kinds), or None."""
        return self.domain.problem(value)

    @property
    def stage_default(self):
        """A StageSchedule's value when the stage does not override this knob."""
        return FrozenMap() if self.kind in ("per_axis", "per_tensor", "per_stage") else None


#: The built-in knobs, in the order of ``Schedule``'s fields (its positional parameters).
BUILTIN: tuple[Knob, ...] = (
    Knob("tile", FrozenMap(), Domain("powers of two", _tile_problem), kind="per_axis", scope="stage",
         search=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
         doc="block size per axis"),
    Knob("grid", None, Domain("axis names", _any), kind="axes", scope="stage",
         doc="axes mapped to program ids, outermost first (the last varies fastest)"),
    Knob("group", FrozenMap(), Domain("positive integers", _positive), kind="per_axis", scope="stage",
         search=(1, 4, 8, 16), doc="grouped launch order (L2 swizzle) of the second-to-last grid axis"),
    Knob("split", FrozenMap(), Domain("positive integers", _positive), kind="per_axis",
         search=(1, 2, 4, 8, 16), doc="split-K: divide a summed axis across programs"),
    Knob("strategy", FrozenMap(), one_of(STRATEGIES, f"is not one of {STRATEGIES}"), kind="per_axis",
         scope="stage", search=("whole", "loop", "online"),
         doc="how an axis inside a program is covered: whole, loop or online (rescaled one pass)"),
    Knob("num_warps", None, Domain("power of two, 1 to 32", _warps), scope="stage", search=(2, 4, 8, 16),
         launch=True, doc="warps per program (None: the heuristic picks, also around a partial schedule)"),
    Knob("num_stages", None, Domain("1 to 8", _pipeline), scope="stage", search=(1, 2, 3, 4, 5), launch=True,
         doc="software-pipeline depth of loops (None: the heuristic picks)"),
    Knob("acc_dtype", "float32", one_of(ACC_DTYPES),
         doc="accumulation and compute dtype of float values: float64 computes the kernels in float64 (no "
             "tensor-core dots on the GPU); integer sums always fold in int64"),
    Knob("precision", "auto", one_of(PRECISIONS), scope="stage",
         doc="dot precision of fp32 operands: auto (tf32x3 where the layout suits tensor cores, else ieee; fp32 "
             "accuracy), ieee, tf32 (~1e-3 relative error), tf32x3 / bf16x6 (fp32 accuracy), bf16x3 (~1e-5)"),
    Knob("split_mode", None, one_of((None,) + SPLIT_MODES, f"must be one of {SPLIT_MODES} (or None: the compiler picks)"),
         doc="how split partial results combine: fp32 atomics, per-split buffers each reader folds (partials), or "
             "per-split buffers a finishing kernel folds once into the final values the readers read (finish), or the "
             "last program of each tile of the split kernel folds them so and stores the outputs that are functions "
             "of the final values alone (last: one launch less, two for a split column sum; all three "
             "deterministic); None: per-split buffers for the reductions the heuristic splits (finished by the last "
             "programs when many programs read them, and for column sums of 16-bit outputs) and for max/min, else "
             "atomics"),
    Knob("stages", FrozenMap(), Domain("StageSchedule per stage", _any), kind="per_stage",
         search=PLACES, doc="per-stage overrides (StageSchedule): place (auto, fuse, materialize; explored; atomic: a sum "
                              "whose partial sums another kernel adds inside its loop) and the stage overrides"),
    Knob("eviction", FrozenMap(), one_of(EVICTIONS), kind="per_tensor", search=("evict_normal", "evict_first"),
         doc="L2 eviction hint of an input's loads"),
    Knob("persistent", 0, Domain("0 to 32", _per_sm), scope="stage", search=(0, 1, 2),
         doc="0: a program per tile; k: k programs per SM, each looping over tiles"),
    Knob("access", None, one_of((None,) + ACCESS, f"must be one of {ACCESS} (or None: the compiler picks)"),
         search=("pointer", "tma"), doc="memory access of tile loads and stores (None: the heuristic picks)"),
    Knob("warp_specialize", None, Domain("None, True, False", _boolean_or_none, (None, False, True)),
         doc="producer/consumer warp groups: None (the compiler picks: a fused attention forward on sm_90 that "
             "the hand-written warp-specialised Gluon kernel covers runs as it, a derived attention backward at head "
             "dim 128 as the Gluon backward, no other loop is specialised), "
             "True (also Triton's warp specialisation of contraction loops; Hopper, with TMA loads; says why where "
             "the Gluon kernel does not apply), False (none: the Triton kernels as planned)"),
    Knob("mask_bounds", True, Domain("True, False", _boolean, (True, False)),
         doc="loops skip the tiles a mask condition leaves empty (where(j <= i, s, -inf): causal attention, "
             "triangular and banded products) and run the fully visible ones without the mask"),
    Knob("tile_order", "auto", one_of(TILE_ORDERS),
         doc="launch order of a kernel's tiles: forward, reverse (the last first; with the query axis outermost on "
             "the grid, causal attention's longest rows first), or auto (the plan's choice: an output pass re-reading "
             "an input a statistics kernel read starts on its last tiles, still in L2; else forward)"),
    Knob("fuse_outputs", True, Domain("True, False", _boolean, (False, True)),
         doc="multi-output kernels: materialised reductions over the same axes with the same schedule share a "
             "kernel, and outputs over fewer axes join a kernel whose programs compute them (False: one each)"),
    Knob("descriptors", "auto", one_of(DESCRIPTOR_SITES),
         doc="where TMA descriptors are built: host (kernel arguments), device (tl.make_tensor_descriptor in "
             "each program), auto (device in kernels with a warp-specialised loop, as Hopper's warp "
             "specialisation partitions consumer tiles only then; host elsewhere)"),
    Knob("unroll", 0, Domain("0 to 8", _unroll), search=(1, 2, 4),
         doc="tiles a reduction loop loads per iteration (Triton's loop_unroll_factor on the innermost loop: its "
             "loads issue together, more bytes in flight); 0: the plan picks (GPU statistics loops: about 16 KB a "
             "program per iteration), 1: one"),
    Knob("store_pieces", 0, Domain("0, 1, 2", _pieces, (0, 1, 2)),
         doc="pieces a persistent flattened GEMM's TMA output tile is stored in, along its last dim (epilogue "
             "subtiling: a smaller store buffer beside the pipeline's); 0: the plan picks (2 where the tile's last "
             "dim is 128 or more)"),
    Knob("rolling", None, one_of((None, False, True), "must be True, False or None (the heuristic picks)"),
         doc="a window sum over an output row axis (a depthwise convolution) computed by rolling rows: each input "
             "row loaded once per other tap and added into the accumulators of every output row it feeds; None: "
             "the heuristic picks"),
    Knob("window_loads", "pairs", one_of(("pairs", "taps")),
         doc="a strided pooling window's taps (X.pad(-inf)[n, h * s + r - p, w * s + q - p], s = 2, 4 or 8 on the "
             "call): pairs (the taps sharing a run of s contiguous columns read by one load and split in registers) "
             "or taps (each tap one strided load)"),
    Knob("narrow_minmax", True, Domain("True, False", _boolean, (True, False)),
         doc="a pooling window's max or min of one fp16/bf16 input folds in that dtype (exact; NaN propagates); "
             "False: in the compute dtype (float32)"),
    Knob("flat_axes", 0, Domain("0, or 2 to 8", _flat_axes, (0, 2, 3, 4, 5, 6, 7, 8)), scope="stage", search=(0, 2, 8),
         doc="fuse up to this many innermost axes of a kernel into one flat axis where every tensor reading or writing "
             "all of them is contiguous with them as its last dims in order (its address is then the flat index), under "
             "pointer access: an element-wise kernel's grid axes (a kernel computing no reduction; broadcast operands "
             "index by (flat // stride) % size), or the looped reduced axes of a kernel whose reductions are all plain "
             "dt.sum / dt.mean over the same axes, none of them stored over (split across programs in contiguous runs); "
             "max, min, prod, arg-reductions, variance, online (softmax) and dot (contraction) kernels are left as they "
             "are; the block is the product of the members' tiles; 0: off"),
    Knob("split_order", None, one_of((None,) + SPLIT_ORDERS,
                                     f"must be one of {SPLIT_ORDERS} (or None: the compiler picks)"),
         doc="which tiles of a split axis each slice's program visits: blocked (one contiguous run) or "
             "interleaved (tiles j, j + split, ...: the split programs finish on the end of the axis, which an "
             "output pass in reverse launch order then reads from L2); None: interleaved where the heuristic "
             "splits whole-tensor statistics of a 16-bit tensor itself (a split you give stays blocked unless you "
             "ask), else blocked; a split axis whose loop a mask bounds stays blocked (with a note)"),
    Knob("dependent_launch", None, Domain("None, True, False", _boolean_or_none, (None, False, True)),
         doc="launch each kernel of a call with programmatic dependent launch (sm_90 and later): it starts on the "
             "SMs the kernel before it leaves free and waits for that kernel's end before its first load or store; "
             "None: on where the GPU has it (never on Triton's interpreter nor for Gluon kernels); False: plain "
             "stream order"),
)

_REGISTRY: dict[str, Knob] = {k.name: k for k in BUILTIN}
_RESERVED: set[str] = set()
# views of the registry, rebuilt on every change (Schedule reads them on each construction and hash)
_VIEWS: dict[str, tuple] = {}


def _refresh() -> None:
    ks = tuple(_REGISTRY.values())
    stage = tuple(k for k in ks if k.scope == "stage")
    _VIEWS.update(all=ks, names=tuple(k.name for k in ks), flat=tuple(k for k in ks if k.kind == "flat"),
                  stage=stage, stage_names=tuple(k.name for k in stage), launch=tuple(k for k in ks if k.launch))


_refresh()


def reserve_names(names: Iterable[str]) -> None:
    """Names no knob may take (the methods and attributes of ``Schedule``/``StageSchedule``,
    which reserve theirs when defined)."""
    _RESERVED.update(names)


def register(k: Knob) -> Knob:
    """Add a flat knob: ``Schedule`` then accepts, checks, compares and serialises it, the heuristic
    passes it through, and :func:`markdown_table` lists it. Raises ValueError for a map kind, a
    name already taken or reserved."""
    if not isinstance(k, Knob):
        raise TypeError(f"register() takes a Knob, got {type(k).__name__}")
    if k.kind != "flat":
        raise ValueError(f"knob {k.name!r}: only flat knobs can be registered; a {k.kind} knob also needs "
                         f"rules in Schedule.validate and lowering (add it to BUILTIN with them)")
    if k.name in _REGISTRY:
        raise ValueError(f"a knob named {k.name!r} is already registered")
    if k.name in _RESERVED:
        raise ValueError(f"{k.name!r} cannot be a knob name: Schedule or StageSchedule uses it")
    _REGISTRY[k.name] = k
    _refresh()
    return k


def unregister(name: str) -> None:
    """Remove a knob added by :func:`register` (built-in knobs stay). Schedules made before keep
    the value but no longer show, compare or serialise it."""
    if any(k.name == name for k in BUILTIN):
        raise ValueError(f"{name!r} is a built-in knob and cannot be unregistered")
    if name not in _REGISTRY:
        raise KeyError(f"no knob named {name!r} is registered")
    del _REGISTRY[name]
    _refresh()


def knob(name: str) -> Knob:
    """The knob called ``name`` (KeyError when there is none)."""
    return _REGISTRY[name]


def knobs() -> tuple[Knob, ...]:
    """Every knob, in ``Schedule`` field order (built-ins first, then registered ones)."""
    return _VIEWS["all"]


def names(scope: str | None = None) -> tuple[str, ...]:
    """The knobs' names in field order: all of them, or those of scope "stage"."""
    return _VIEWS["stage_names"] if scope == "stage" else _VIEWS["names"]


def flat_knobs() -> tuple[Knob, ...]:
    """The knobs of kind "flat" (single values: ``num_warps``, ``precision``, ...)."""
    return _VIEWS["flat"]


def stage_knobs() -> tuple[Knob, ...]:
    """The knobs a :class:`~dtriton.StageSchedule` may override, in its field order."""
    return _VIEWS["stage"]


def launch_knobs() -> tuple[Knob, ...]:
    """The flat knobs that are kernel launch options (not visible in the generated source)."""
    return _VIEWS["launch"]


# ----------------------------------------------------------------------------------------------
# the knob table of the docs (docs/knobs.md)
# ----------------------------------------------------------------------------------------------
TABLE_BEGIN = "<!-- knob table: generated by `python -m dtriton.schedule --write docs/knobs.md` -->"
TABLE_END = "<!-- end of knob table -->"


_KIND_WORDS = {"flat": "value", "per_axis": "per axis", "per_tensor": "per input tensor", "axes": "axis tuple",
               "per_stage": "per stage name"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _values(vs: tuple) -> str:
    if len(vs) > 6:
        vs = vs[:3] + ("...",) + vs[-1:]
    return ", ".join("..." if v == "..." else f"`{v!r}`" for v in vs)


def markdown_table() -> str:
    """The docs' table of schedule knobs (one row per registered knob, in field order)."""
    rows = ["| knob | kind | default | allowed | explored | what it sets |", "|---|---|---|---|---|---|"]
    for k in knobs():
        kind = _KIND_WORDS[k.kind] + (", stage override" if k.scope == "stage" else "") + \
            (", launch option" if k.launch else "")
        default = "`{}`" if isinstance(k.default, FrozenMap) else f"`{k.default!r}`"
        allowed = _values(k.domain.values) if k.domain.values is not None else k.domain.text
        rows.append(f"| `{k.name}` | {kind} | {default} | {_cell(allowed)} | {_cell(_values(k.search)) or '-'} | "
                    f"{_cell(k.doc)} |")
    return "\n".join(rows)


def readme_table(readme_text: str) -> str | None:
    """The knob table found between the markers in a README's text, or None without markers."""
    if TABLE_BEGIN not in readme_text or TABLE_END not in readme_text:
        return None
    return readme_text.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0].strip("\n")


def with_table(readme_text: str) -> str:
    """``readme_text`` with the table between the markers replaced by :func:`markdown_table`."""
    if readme_table(readme_text) is None:
        raise ValueError(f"the page has no knob table markers ({TABLE_BEGIN} ... {TABLE_END})")
    head, rest = readme_text.split(TABLE_BEGIN, 1)
    tail = rest.split(TABLE_END, 1)[1]
    return f"{head}{TABLE_BEGIN}\n{markdown_table()}\n{TABLE_END}{tail}"


def main(argv=None) -> int:
    """Print the knob table, or rewrite it in place in a README (``--write README.md``)."""
    ap = argparse.ArgumentParser(prog="python -m dtriton.schedule", description=main.__doc__)
    ap.add_argument("--write", metavar="README", help="replace the table between the markers of this file")
    a = ap.parse_args(argv)
    if a.write is None:
        print(markdown_table())
        return 0
    with open(a.write, encoding="utf-8") as f:
        text = f.read()
    new = with_table(text)
    if new != text:
        with open(a.write, "w", encoding="utf-8") as f:
            f.write(new)
    return 0
