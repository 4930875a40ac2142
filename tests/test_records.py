"""Records (:mod:`dse.records`): each kind of field read, refused in one line naming it, and
written back, on small records whose JSON is written out by hand."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, TypedDict

import numpy as np
import pytest

from dse.errors import DseError
from dse.record_tables import reference
from dse.records import Doc, Items, Range, Tag, Text, Undefined, key, read, to_json


@dataclass(frozen=True)
class Point:
    x: float
    y: float = 0.0


@dataclass(frozen=True)
class Move:
    op: ClassVar[str] = "move"
    to: Point


@dataclass(frozen=True)
class Wait:
    op: ClassVar[str] = "wait"
    seconds: Annotated[float, Range(0, 60, lo_open=True)]


@dataclass(frozen=True)
class Robot:
    name: Annotated[str, Text(8)]
    kind: Literal["arm", "cart"]
    legs: Annotated[int, Range(0, 8)]
    shape: Annotated[tuple[int, ...], Items(3)]
    steps: list[Annotated[Move | Wait, Tag("op")]]
    home: Point = field(metadata=key("from"))
    extent: tuple[int, int] = (0, 0)
    notes: dict[str, Any] = field(default_factory=dict)
    size: list[Any] | str | None = None
    owner: str | None = None


DOC = {
    "name": "r2",
    "kind": "cart",
    "legs": 4,
    "shape": [1, 2],
    "steps": [{"op": "move", "to": {"x": 1, "y": 2.5}}, {"op": "wait", "seconds": 0.5}],
    "from": {"x": 0},
    "extent": [3, 4],
    "size": "big",
}


def test_a_record_reads_every_kind_of_field_and_writes_the_same_json() -> None:
    r = read(Robot, DOC, "robot.json")
    assert r == Robot(
        "r2",
        "cart",
        4,
        (1, 2),
        [Move(Point(1.0, 2.5)), Wait(0.5)],
        Point(0.0, 0.0),
        (3, 4),
        {},
        "big",
    )
    assert type(r.steps[0].to.x) is float  # an integer where a float goes: a float
    # a field with a default written only where it holds something; the tag of a step first
    back = to_json(r)
    assert back == {**DOC, "from": {"x": 0.0, "y": 0.0}}
    assert list(back["steps"][1]) == ["op", "seconds"]
    assert read(Robot, json.loads(json.dumps(back)), "again") == r
    # numpy's scalars are written as JSON's numbers
    assert to_json(Point(np.float32(1.5), np.int64(2))) == {"x": 1.5, "y": 2}


BAD = {
    "missing key": ({"kind": "arm"}, "robot.json: 'name' is missing (fix it)"),
    "not an object": ([1], "robot.json: expected an object, not a list (fix it)"),
    "integer as text": ({"legs": "4"}, "robot.json: legs: expected an integer, not text (fix it)"),
    "a bool is no integer": ({"legs": True}, "legs: expected an integer, not true/false"),
    "out of range": ({"legs": 9}, "legs: 9 is out of range: expected at most 8"),
    "open range": (
        {"steps": [{"op": "wait", "seconds": 0}]},
        "steps[0].seconds: 0 is out of range: expected above 0",
    ),
    "too long": ({"name": "r2d2-r2d2"}, "name: expected a non-empty text of at most 8"),
    "empty text": ({"name": ""}, "name: expected a non-empty text of at most 8"),
    "literal": ({"kind": "boat"}, 'kind: expected arm or cart, not "boat"'),
    "too many items": ({"shape": [1, 2, 3, 4]}, "shape: 4 items, more than 3"),
    "pair": ({"extent": [1]}, "extent: expected a list of 2, not [1]"),
    "unknown tag": (
        {"steps": [{"op": "fly"}]},
        'steps[0].op: "fly" is not one of move, wait',
    ),
    "nested": (
        {"steps": [{"op": "move", "to": {"x": "far"}}]},
        "steps[0].to.x: expected a number, not text",
    ),
    "renamed key": ({"from": None}, "from: expected an object, not null"),
    "huge integer": ({"legs": 10**20}, "legs: 100000000000000000000 is beyond the integers"),
    "union": ({"size": 3}, "size: expected a list, text or null, not an integer"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_wrong_field_is_one_line_naming_it(case: str) -> None:
    edit, words = BAD[case]
    doc = edit if not isinstance(edit, dict) else {**DOC, **edit}
    if case == "missing key":
        doc = {k: v for k, v in DOC.items() if k != "name"}
    with pytest.raises(DseError) as err:
        read(Robot, doc, "robot.json", "fix it")
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_unknown_keys_are_ignored_or_refused_with_the_closest_name() -> None:
    assert read(Point, {"x": 1, "z": 2}, "p") == Point(1.0)
    with pytest.raises(DseError, match=r"^p: unknown key 'yy' \(did you mean 'y'\?\)$"):
        read(Point, {"x": 1, "yy": 2}, "p", unknown="refuse")
    with pytest.raises(DseError, match=r"steps\[0\]\.to: unknown key 'z'"):
        read(
            Robot, {**DOC, "steps": [{"op": "move", "to": {"x": 1, "z": 0}}]}, "r", unknown="refuse"
        )
    # a tagged member's tag is not an unknown key
    assert read(Robot, DOC, "r", unknown="refuse").steps[1] == Wait(0.5)


def test_non_finite_numbers_are_refused() -> None:
    for bad in (float("nan"), float("inf")):
        with pytest.raises(DseError, match="x: expected a finite number"):
            read(Point, {"x": bad}, "p")


def test_an_undefined_figure_may_be_nan_but_not_infinite_or_out_of_range() -> None:
    best = Annotated[float, Range(0), Undefined()]
    assert np.isnan(read(best, float("nan"), "best"))
    assert read(best, 2, "best") == 2.0
    with pytest.raises(DseError, match=r"^best: expected a finite number, not inf$"):
        read(best, float("inf"), "best")
    with pytest.raises(DseError, match=r"^best: -1 is out of range: expected at least 0$"):
        read(best, -1.0, "best")


class Rates(TypedDict):
    """A table of fixed rows: every key given."""

    up: Annotated[float, Range(0, 10), Doc("going up", "m/s")]
    down: Annotated[float, Range(0, 10), Doc("going down", "m/s")]


class Extras(TypedDict, total=False):
    colour: Annotated[str, Text(8), Doc("paint")]


Name = Annotated[str, Text(3), Doc("lift")]


@dataclass(frozen=True)
class Lift:
    speed: Annotated[Rates, Doc("speeds")]
    wait_s: Annotated[float, Range(0, 60, lo_open=True), Doc("longest wait", "s")]
    share: Annotated[float, Range(0, 1, hi_open=True), Doc("share of a day")] = 0.0
    load: Annotated[float | None, Range(0, 1), Doc("load; null: unknown")] = None
    floors: Annotated[tuple[
        Annotated[int, Range(0, 9), Doc("lowest")], Annotated[int, Range(0, 99), Doc("top")]
    ], Doc("floors served")] = (0, 1)  # fmt: skip
    marks: Annotated[list[Annotated[float, Range(0, 5)]], Items(4), Doc("marks", "m")] = field(
        default_factory=list
    )
    spare: Annotated[Rates, Doc("spare speeds; empty: none")] = field(
        default_factory=dict  # type: ignore[arg-type]
    )
    extras: Extras = field(default_factory=dict)  # type: ignore[arg-type]
    others: Annotated[dict[Name, Annotated[float, Range(0), Doc("its speed", "m/s")]], Doc(
        "other lifts")] = field(default_factory=dict)  # fmt: skip
    label: Annotated[str, Text(5, empty=True), Doc("label")] = ""


LIFT = {"speed": {"up": 2, "down": 1.5}, "wait_s": 30}


def test_a_typed_dict_is_a_table_of_fixed_rows_read_as_a_dict() -> None:
    lift = read(Lift, LIFT, "lift.json")
    assert lift.speed == {"up": 2.0, "down": 1.5} and type(lift.speed) is dict
    assert type(lift.speed["up"]) is float
    # a total=False one may lack keys; none written that it lacks
    lift = read(Lift, {**LIFT, "extras": {}, "spare": {}}, "lift.json")
    assert lift.extras == {} and lift.spare == {}  # an empty value of an empty default: it
    # defaults written but for None and empty lists and objects
    written = {"speed": {"up": 2.0, "down": 1.5}, "wait_s": 30.0, "share": 0.0, "floors": [0, 1]}
    assert to_json(lift) == {**written, "label": ""}
    full = {**LIFT, "extras": {"colour": "red"}, "spare": {"up": 1, "down": 1}, "label": "a"}
    assert to_json(read(Lift, full, "l")) == {
        **written,
        "spare": {"up": 1.0, "down": 1.0},
        "extras": {"colour": "red"},
        "label": "a",
    }


LIFT_BAD = {
    "a row missing": ({"speed": {"up": 1}}, "lift.json: speed: 'down' is missing (fix it)"),
    "a row unknown": (
        {"speed": {"up": 1, "down": 1, "dwn": 2}},
        "speed: unknown key 'dwn' (did you mean 'down'?)",
    ),
    "a partial table of an empty default": ({"spare": {"up": 1}}, "spare: 'down' is missing"),
    "the unit named": (
        {"speed": {"up": 11, "down": 1}},
        "speed.up: 11 is out of range: expected at most 10 m/s",
    ),  # fmt: skip
    "an open upper end": ({"share": 1}, "share: 1 is out of range: expected below 1"),
    "a range on T | None": ({"load": 1.5}, "load: 1.5 is out of range: expected at most 1"),
    "a wrong key of a table, named by its Doc": (
        {"others": {"west": 1}},
        'others: lift "west": expected a non-empty text of at most 3 characters',
    ),
    "an integer of 60 digits": (
        {"wait_s": 10**60},
        "wait_s: expected a finite number, not 1000000000000000000000000000000000000...",
    ),
    "a text that may be empty, too long": (
        {"label": "abcdef"},
        "label: expected a text of at most 5 characters",
    ),
}


@pytest.mark.parametrize("case", list(LIFT_BAD))
def test_tables_units_and_open_ends_are_refused_in_one_line(case: str) -> None:
    edit, words = LIFT_BAD[case]
    with pytest.raises(DseError) as err:
        read(Lift, {**LIFT, **edit}, "lift.json", "fix it", unknown="refuse")
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_within_range_ends_and_nulls_are_read() -> None:
    lift = read(Lift, {**LIFT, "share": 0.999, "load": None, "wait_s": 60}, "l")
    assert (lift.share, lift.load, lift.wait_s) == (0.999, None, 60.0)
    assert read(Lift, {**LIFT, "load": 1}, "l").load == 1.0


def test_the_reference_table_has_a_row_per_field_and_per_row_of_its_tables() -> None:
    """Written out by hand from Lift's declaration."""
    assert reference(Lift).splitlines() == [
        "| key | type | unit | range | default | meaning |",
        "|---|---|---|---|---|---|",
        "| `speed` | object |  |  | required | speeds |",
        "| `speed.up` | number | m/s | [0, 10] | required | going up |",
        "| `speed.down` | number | m/s | [0, 10] | required | going down |",
        "| `wait_s` | number | s | (0, 60] | required | longest wait |",
        "| `share` | number |  | [0, 1) | `0.0` | share of a day |",
        "| `load` | number or null |  | [0, 1] | `null` | load; null: unknown |",
        "| `floors` | list of 2 integers |  | lowest ([0, 9]), top ([0, 99]) | `[0, 1]` "
        "| floors served |",
        "| `marks` | list of numbers | m | [0, 5], at most 4 | empty | marks |",
        "| `spare` | object |  |  | empty | spare speeds; empty: none |",
        "| `spare.up` | number | m/s | [0, 10] | required | going up |",
        "| `spare.down` | number | m/s | [0, 10] | required | going down |",
        "| `extras` | object |  |  | empty |  |",
        "| `extras.colour` | string |  | at most 8 characters | required | paint |",
        "| `others` | object: lift → value |  |  | empty | other lifts |",
        "| `others.<lift>` | number | m/s | [0, inf) | required | its speed |",
        '| `label` | string |  | at most 5 characters | `""` | label |',
    ]


def test_numbers_as_text_are_read_only_where_asked_and_only_in_yaml_syntax() -> None:
    """PyYAML reads ``5.0e9`` as text (YAML 1.1 wants ``5.0e+9``); a YAML file's reader asks
    for such text to be a number, as YAML 1.2 and Hydra read it."""
    assert read(Point, {"x": "5.0e9", "y": "-.5"}, "p", text_numbers=True) == Point(5e9, -0.5)
    for bad in ("lots", "0x10", "1e", "nan", "inf", "1_000"):
        with pytest.raises(DseError, match="x: expected a number, not text"):
            read(Point, {"x": bad}, "p", text_numbers=True)
    with pytest.raises(DseError, match="x: expected a number, not text"):
        read(Point, {"x": "5.0e9"}, "p")
    with pytest.raises(DseError, match="legs: expected an integer, not text"):
        read(Robot, {**DOC, "legs": "4"}, "r", text_numbers=True)  # only numbers of a float


def test_numpy_texts_are_written_as_json_texts() -> None:
    """A table keyed by numpy's str_ (family names out of an array) is written with plain
    keys, which a reader takes again."""
    lift = Lift({"up": 1.0, "down": 1.0}, 1.0, others={np.str_("a"): np.float64(2.0)})
    out = to_json(lift)["others"]
    assert out == {"a": 2.0} and [type(k) for k in out] == [str]
    assert read(Lift, to_json(lift), "l").others == {"a": 2.0}
    # a document built in memory may hold them, read as plain ones (a float32 is no float)
    doc = {**LIFT, "wait_s": np.float64(2.5), "label": np.str_("x")}
    got = read(Lift, doc, "l")
    assert (got.wait_s, got.label) == (2.5, "x") and type(got.wait_s) is float
    assert type(got.label) is str
    with pytest.raises(DseError, match="floors\\[0\\]: expected an integer, not int64"):
        read(Lift, {**doc, "floors": [np.int64(1), 2]}, "l")  # numpy's int64 is no int
    with pytest.raises(DseError, match="wait_s: expected a number, not float32"):
        read(Lift, {**LIFT, "wait_s": np.float32(2.5)}, "l")
