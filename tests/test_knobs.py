"""The knob registry: a knob registered in one place is a Schedule keyword and attribute, checked,
compared, hashed, serialised, suggested for misspellings, passed through by the heuristic, listed
in the docs' knob table (docs/knobs.md) (which must equal the generated one), a Space field, searched by derived
spaces and exploration, and deduplicated by what it changes (the source, or the launch)."""
from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import pytest
import torch

import dtriton as dt
from dtriton.library import add_one, layer_norm, matmul, softmax
from dtriton.schedule import Knob, complete_schedule, knobs, markdown_table, register, unregister
from dtriton.schedule.knobs import flat_knobs, launch_knobs, readme_table, stage_knobs, with_table
from dtriton.tune import ExploreResult, Limits, Space
from dtriton.tune.explorer import src_hash
from dtriton.tune.samplers import base_point, neighbour_order, neighbours
from dtriton.tune.space import derive_fields

KNOB_PAGE = Path(__file__).resolve().parents[1] / "docs" / "knobs.md"
MM = (torch.randn(8, 16), torch.randn(16, 4))


@pytest.fixture
def test_knob():
    """A flat knob that only tests know: domain (0, 1, 2), default 0, searched over (0, 1)."""
    k = register(Knob("test_only_knob", 0, (0, 1, 2), "a knob for tests only", search=(0, 1)))
    yield k
    unregister("test_only_knob")


@pytest.fixture
def stage_knob():
    """A flat launch option that a StageSchedule may override."""
    k = register(Knob("test_stage_knob", 1, (1, 2, 4), "a per-stage launch option for tests", scope="stage",
                      launch=True, search=(1, 2)))
    yield k
    unregister("test_stage_knob")


def gpu_binding(alg, args):
    return dataclasses.replace(alg.bind(args), device=torch.device("cuda"))


def test_docs_knob_table_is_the_generated_one():
    text = KNOB_PAGE.read_text(encoding="utf-8")
    assert readme_table(text) == markdown_table(), \
        "docs/knobs.md's knob table is stale: run `PYTHONPATH=src python -m dtriton.schedule --write docs/knobs.md`"
    assert with_table(text) == text


def test_builtin_knobs_are_the_schedule_fields_in_order():
    assert dt.Schedule.field_names() == ("tile", "grid", "group", "split", "strategy", "num_warps", "num_stages",
                                         "acc_dtype", "precision", "split_mode", "stages", "eviction", "persistent",
                                         "access", "warp_specialize", "mask_bounds", "tile_order",
                                         "fuse_outputs", "descriptors", "unroll", "store_pieces", "rolling",
                                         "window_loads", "narrow_minmax", "flat_axes", "split_order",
                                         "dependent_launch")
    assert dt.StageSchedule.field_names() == ("place", "tile", "grid", "group", "strategy", "num_warps", "num_stages",
                                              "precision", "persistent", "flat_axes")
    assert [k.name for k in launch_knobs()] == ["num_warps", "num_stages"]
    assert [k.name for k in stage_knobs()] == ["tile", "grid", "group", "strategy", "num_warps", "num_stages", "precision", "persistent",
                                               "flat_axes"]
    # positional arguments keep the old dataclass order
    s = dt.Schedule({"i": 16}, ("i", "j"), {}, {}, {}, 8)
    assert s.tile == {"i": 16} and s.grid == ("i", "j") and s.num_warps == 8
    assert dt.StageSchedule("fuse").place == "fuse"


def test_registered_knob_is_a_schedule_field(test_knob):
    s = dt.Schedule(test_only_knob=1)
    assert s.test_only_knob == 1 and dt.Schedule().test_only_knob == 0
    assert "test_only_knob" in dt.Schedule.field_names()
    # compared and hashed
    assert s == dt.Schedule(test_only_knob=1) and hash(s) == hash(dt.Schedule(test_only_knob=1))
    assert s != dt.Schedule() and dt.Schedule(test_only_knob=0) == dt.Schedule()
    # JSON: the default is left out (existing JSON and tuning records are unchanged)
    assert dt.Schedule().to_json() == "{}" and dt.Schedule(test_only_knob=0).to_json() == "{}"
    assert s.to_dict() == {"test_only_knob": 1}
    assert dt.Schedule.from_json(s.to_json()) == s
    assert dt.Schedule.from_dict({"test_only_knob": 2}).test_only_knob == 2
    # replace, repr, flat values, pickling
    assert s.replace(test_only_knob=2).test_only_knob == 2 and s.replace(num_warps=8).test_only_knob == 1
    assert repr(s) == "Schedule(test_only_knob=1)"
    assert s.flat_values()["test_only_knob"] == 1
    assert s.launch_key() == dt.Schedule().launch_key()    # not a launch option
    assert pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.test_only_knob = 2


def test_registered_knob_is_checked_and_suggested(test_knob):
    with pytest.raises(dt.ScheduleError, match=r"^test_only_knob = 3 must be 0, 1 or 2$"):
        dt.Schedule(test_only_knob=3)
    with pytest.raises(dt.ScheduleError, match=r"test_only_knob = True must be 0, 1 or 2"):
        dt.Schedule(test_only_knob=True)     # a bool is not the int 1
    with pytest.raises(dt.UnknownFieldError, match=r"Schedule has no field 'test_only_knb' \(did you mean "
                                                   r"'test_only_knob'\?\); its fields are .*, tile_order, fuse_outputs, descriptors, unroll, store_pieces, "
                                                   r"rolling, window_loads, narrow_minmax, flat_axes, split_order, dependent_launch, test_only_knob$"):
        dt.Schedule(test_only_knb=1)
    with pytest.raises(dt.UnknownFieldError, match=r"did you mean 'test_only_knob'"):
        dt.Schedule.from_dict({"test_only_knobs": 1})


def test_knob_registered_after_a_schedule_reads_its_default():
    s = dt.Schedule(num_warps=8)
    register(Knob("test_only_knob", 0, (0, 1, 2), "a knob for tests only"))
    try:
        assert s.test_only_knob == 0 and s == dt.Schedule(num_warps=8)
    finally:
        unregister("test_only_knob")
    with pytest.raises(dt.UnknownFieldError, match="has no field 'test_only_knob'"):
        dt.Schedule(test_only_knob=1)
    with pytest.raises(AttributeError):
        dt.Schedule().test_only_knob


def test_complete_schedule_passes_a_registered_knob_through(test_knob):
    for b in (matmul.bind(MM), gpu_binding(matmul, MM)):
        assert complete_schedule(matmul, dt.Schedule(test_only_knob=2), b).test_only_knob == 2
        assert complete_schedule(matmul, None, b).test_only_knob == 0
    X = torch.randn(6, 40)
    b = gpu_binding(layer_norm, (X, torch.randn(40), torch.randn(40)))
    assert complete_schedule(layer_norm, dt.Schedule(test_only_knob=1, precision="tf32"), b).test_only_knob == 1
    # and a kernel compiles and runs with it (lowering ignores a knob it does not read)
    k = dt.compile(matmul, dt.Schedule(test_only_knob=1))
    assert torch.allclose(k(*MM), MM[0] @ MM[1], atol=1e-5)
    assert k.schedule_for(*MM).test_only_knob == 1


def test_markdown_table_lists_a_registered_knob(test_knob):
    rows = [r for r in markdown_table().splitlines() if r.startswith("| `test_only_knob`")]
    assert rows == ["| `test_only_knob` | value | `0` | `0`, `1`, `2` | `0`, `1` | a knob for tests only |"]
    assert test_knob in flat_knobs() and [k.search for k in flat_knobs() if k.name == "test_only_knob"] == [(0, 1)]


def test_stage_scope_knob(stage_knob):
    ss = dt.StageSchedule(test_stage_knob=2)
    assert ss.test_stage_knob == 2 and dt.StageSchedule().test_stage_knob is None   # None: inherit
    assert ss.to_dict() == {"test_stage_knob": 2}
    s = dt.Schedule(stages={"max0": {"test_stage_knob": 4}})
    assert s.stage("max0").test_stage_knob == 4 and s.test_stage_knob == 1
    assert dt.Schedule.from_json(s.to_json()) == s
    with pytest.raises(dt.ScheduleError, match=r"^stages\['max0'\]\.test_stage_knob = 3 must be 1, 2 or 4$"):
        dt.Schedule(stages={"max0": {"test_stage_knob": 3}})
    # a launch option: in the launch options of the stage's kernel and in the launch key
    # (num_warps / num_stages left None: the heuristic picks them when it completes the schedule)
    assert s.launch_options("max0") == {"num_warps": None, "num_stages": None, "test_stage_knob": 4}
    assert s.launch_options() == {"num_warps": None, "num_stages": None, "test_stage_knob": 1}
    assert s.launch_key() != dt.Schedule(stages={"max0": {"test_stage_knob": 2}}).launch_key()
    # the heuristic keeps a user's stage override when it gives an output a grid of its own
    bw = dt.grad(layer_norm).algorithms[0]     # outputs out0 (dX) and out1 (dw)
    args = (torch.randn(100, 40), torch.randn(40), torch.randn(40), torch.randn(100, 40))
    for b in (bw.bind(args), gpu_binding(bw, args)):
        full = complete_schedule(bw, dt.Schedule(stages={"out1": {"test_stage_knob": 2}}), b)
        assert full.stage("out1").test_stage_knob == 2 and full.stage("out1").grid is not None


def test_register_refuses_bad_knobs():
    with pytest.raises(ValueError, match="already registered"):
        register(Knob("num_warps", 4, (4,), "again"))
    with pytest.raises(ValueError, match="Schedule or StageSchedule uses it"):
        register(Knob("replace", 0, (0,), "a method name"))
    with pytest.raises(ValueError, match="cannot be a knob name"):
        register(Knob("place", "auto", ("auto",), "StageSchedule's own field"))
    with pytest.raises(ValueError, match="only flat knobs can be registered"):
        register(Knob("test_map", dt.FrozenMap(), (1, 2), "a map", kind="per_axis"))
    with pytest.raises(ValueError, match="default 5 must be 0 or 1"):
        Knob("test_bad_default", 5, (0, 1), "bad default")
    with pytest.raises(ValueError, match="search value 7 must be 0 or 1"):
        Knob("test_bad_search", 0, (0, 1), "bad search", search=(0, 7))
    with pytest.raises(ValueError, match="built-in"):
        unregister("num_warps")
    with pytest.raises(KeyError):
        unregister("no_such_knob")
    assert [k.name for k in knobs()][-1] == "dependent_launch"


def test_stage_overrides_are_checked_against_their_knob():
    with pytest.raises(dt.ScheduleError,
                       match=r"^stages\['sum0'\]\.num_warps = 3 must be a power of two between 1 and 32$"):
        dt.Schedule(stages={"sum0": {"num_warps": 3}})
    with pytest.raises(dt.ScheduleError, match=r"^stages\['sum0'\]\.group\['i'\] = 0 must be a positive integer$"):
        dt.Schedule(stages={"sum0": {"group": {"i": 0}}})
    dt.Schedule(stages={"sum0": {"num_warps": 8, "num_stages": 3}})
    s = dt.Schedule(num_warps=8, stages={"sum0": {"num_stages": 3}})
    assert s.launch_options("sum0") == {"num_warps": 8, "num_stages": 3}
    assert s.launch_key() == (8, None, ("sum0", None, 3))   # num_stages None: the heuristic picks it


def test_builtin_messages_come_from_the_domains():
    cases = [(dict(tile={"i": 48}), r"^tile\['i'\] = 48 is not a power of two; Triton blocks must be powers of two "
                                    r"\(try 32 or 64\)$"),
             (dict(tile={"i": 16.0}), r"^tile\['i'\] = 16.0 must be an int"),
             (dict(strategy={"j": "rows"}), r"^strategy\['j'\] = 'rows' is not one of \('auto', 'whole', 'loop', "
                                            r"'online'\)$"),
             (dict(num_stages=9), r"^num_stages = 9 must be an integer from 1 to 8$"),
             (dict(acc_dtype="float16"), r"^acc_dtype = 'float16' must be 'float32' or 'float64'$"),
             (dict(precision="tf64"), r"^precision = 'tf64' must be 'auto', 'ieee', 'tf32', 'tf32x3', 'bf16x3' or 'bf16x6'$"),
             (dict(split_mode="x"), r"^split_mode = 'x' must be one of \('atomic', 'partials', 'finish', 'last'\) \(or None: the compiler picks\)$"),
             (dict(eviction={"X": "keep"}), r"^eviction\['X'\] = 'keep' must be 'evict_first', 'evict_last' or "
                                            r"'evict_normal'$"),
             (dict(persistent=True), r"^persistent = True must be 0 \(off\) or programs per SM from 1 to 32 \(got the bool "
                                       r"True\)$"),
             (dict(access="tmx"), r"^access = 'tmx' must be one of \('pointer', 'block_ptr', 'tma'\) \(or None"),
             (dict(warp_specialize=1), r"^warp_specialize = 1 must be True, False or None \(the compiler picks\)$"),
             (dict(stages={"s": {"tile": {"i": 3}}}), r"^stages\['s'\]\.tile\['i'\] = 3 is not a power of two")]
    for kw, pattern in cases:
        with pytest.raises(dt.ScheduleError, match=pattern):
            dt.Schedule(**kw)


def test_schedule_is_immutable_and_compares_like_the_old_dataclass():
    s = dt.Schedule(tile={"i": 16}, grid="i")
    assert s.grid == ("i",) and isinstance(s.tile, dt.FrozenMap)
    assert {s: 1}[dt.Schedule(tile={"i": 16}, grid=("i",))] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.num_warps = 8
    assert dt.StageSchedule(tile={"j": 8}) == dt.StageSchedule(tile={"j": 8}) != dt.StageSchedule()
    assert repr(dt.StageSchedule(place="fuse")) == ("StageSchedule(place='fuse', tile={}, grid=None, group={}, "
                                                    "strategy={}, num_warps=None, num_stages=None, precision=None, "
                                                    "persistent=None, flat_axes=None)")
    assert dt.StageSchedule(place="fuse").replace(tile={"j": 8}).place == "fuse"
    full = dt.compile(softmax).schedule_for(torch.randn(4, 8))
    assert dt.Schedule.from_json(full.to_json()) == full and eval(repr(full), {"Schedule": dt.Schedule,
                                                                             "StageSchedule": dt.StageSchedule}) == full


# ----------------------------------------------------------------------------------------------
# exploration reads the registry: a registered knob is searched and deduplicated
# ----------------------------------------------------------------------------------------------
def test_space_takes_a_registered_knob(test_knob):
    sp = Space(tile={"i": [16]}, test_only_knob=[0, 1])
    assert sp.test_only_knob == (0, 1) and Space().test_only_knob is None
    assert sp.dimensions() == [("tile.i", (16,)), ("test_only_knob", (0, 1))] and sp.size == 2
    assert Space.field_names()[-3:] == ("test_only_knob", "stage_tile", "eviction")
    # to_dict, JSON, equality and repr include it
    assert sp.to_dict() == {"tile": {"i": [16]}, "test_only_knob": [0, 1]}
    assert Space(**json.loads(json.dumps(sp.to_dict()))) == sp != Space(tile={"i": [16]}, test_only_knob=[0])
    assert repr(sp) == "Space(tile={'i': [16]}, test_only_knob=[0, 1])  # 2 points"
    assert sp.widen(test_only_knob=[2]).test_only_knob == (0, 1, 2) and sp.narrow(test_only_knob=None).size == 1
    # values are checked against the knob's domain, with the Schedule's wording
    with pytest.raises(dt.ScheduleError, match=r"^Space test_only_knob value 3 must be 0, 1 or 2$"):
        Space(test_only_knob=[0, 3])
    with pytest.raises(dt.ScheduleError, match=r"^Space test_only_knob value None is not a value"):
        Space(test_only_knob=[None])
    with pytest.raises(dt.UnknownFieldError, match=r"^Space has no field 'test_only_knb' \(did you mean "
                                                   r"'test_only_knob'\?\)"):
        Space(test_only_knb=[1])
    with pytest.raises(dt.UnknownFieldError, match=r"did you mean 'test_only_knob'"):
        sp.narrow(test_only_knobs=[1])


def test_unregistered_knob_is_not_a_space_field():
    with pytest.raises(dt.UnknownFieldError, match="Space has no field 'test_only_knob'"):
        Space(test_only_knob=[0, 1])
    assert "test_only_knob" not in Space.field_names()


def test_derived_space_offers_a_registered_knob(test_knob, stage_knob):
    d = dict(Space.derive(matmul, MM).dimensions())             # the interpreter
    assert d["test_only_knob"] == (0, 1) and "test_stage_knob" not in d   # it ignores launch options
    g = dict(Space.derive(matmul, MM, target="gpu").dimensions())
    assert g["test_only_knob"] == (0, 1) and g["test_stage_knob"] == (1, 2)
    # the built-in knobs keep their own rules (not their registry search values)
    assert "num_warps" not in d and "persistent" not in d and g["num_warps"] == (2, 4, 8)
    # a point sets it; the heuristic's point and its neighbours know it
    base = dt.compile(matmul).schedule_for(*MM)
    dims = Space.derive(matmul, MM).dimensions()
    assert Space.derive(matmul, MM).schedule_for({"test_only_knob": 1}, base, matmul).test_only_knob == 1
    start = base_point(dims, base)
    assert start["test_only_knob"] == 0 and "test_only_knob" in neighbour_order()
    assert [p["test_only_knob"] for p in neighbours(dims, start, limit=100)].count(1) == 1


def test_registered_knob_search_values_gain_the_heuristic_value(test_knob):
    b = matmul.bind(MM)
    base = complete_schedule(matmul, dt.Schedule(test_only_knob=2), b)
    fields = derive_fields(matmul, b, base, False, Limits(whole_max=4096))
    assert fields["test_only_knob"] == [0, 1, 2]
    assert derive_fields(matmul, b, base.replace(test_only_knob=0), False, Limits())["test_only_knob"] == [0, 1]


def _rows_by_knob(res, name):
    return {(r["params"].get("tile.i"), r["params"].get(name)): r for r in res.table if r["origin"] == "space"}


def test_exploration_visits_a_registered_knob_and_dedups_it(test_knob):
    """test_only_knob is no launch option and lowering does not read it: candidates that differ only
    in it generate the same kernels, so the second is a duplicate (what src_hash decides with
    Schedule.launch_key(), not Schedule.flat_values())."""
    X = torch.randn(64)
    space = Space.derive(add_one, (X,)).narrow(tile={"i": [16, 32]})
    assert space.test_only_knob == (0, 1)
    res = dt.explore(add_one, (X,), space=space, strategy="exhaustive", progress=False, store=False)
    rows = _rows_by_knob(res, "test_only_knob")
    assert set(rows) == {(16, 0), (16, 1), (32, 0), (32, 1)}      # both values visited
    for t in (16, 32):
        first, second = rows[(t, 0)], rows[(t, 1)]
        assert first["status"] == "ok" and first["schedule"].test_only_knob == 0
        assert second["status"] == "duplicate" and second["schedule"].test_only_knob == 1
        assert second["reason"] == f"generates the same kernels as #{first['id']}"
    base = res.table[0]["schedule"]
    assert src_hash("x = 1", base) == src_hash("x = 1", base.replace(test_only_knob=1))
    assert ExploreResult.from_json(res.to_json()).space == space


def test_exploration_keeps_a_registered_launch_option_distinct(stage_knob):
    """A launch option is not in the source: the launch key keeps its candidates apart."""
    args = (torch.randn(40, 32), torch.randn(32, 24))         # the heuristic's tile i is 64
    res = dt.explore(matmul, args, space=Space(tile={"i": [16, 32]}, test_stage_knob=[1, 2]), strategy="exhaustive",
                     progress=False, store=False)
    rows = _rows_by_knob(res, "test_stage_knob")
    assert set(rows) == {(16, 1), (16, 2), (32, 1), (32, 2)}
    assert all(r["status"] == "ok" for r in rows.values())
    assert {r["schedule"].test_stage_knob for r in rows.values()} == {1, 2}
    base = res.table[0]["schedule"]
    assert src_hash("x = 1", base) != src_hash("x = 1", base.replace(test_stage_knob=2))
    assert src_hash("x = 1", base) != src_hash("x = 1", base.replace(stages={"sum0": {"test_stage_knob": 2}}))
