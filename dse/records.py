"""Records: dataclasses read from and written to JSON, each field declared once, by its type.

A record is a dataclass whose field annotations are its file format. :func:`read` builds one
from parsed JSON, checking every field by its type and constraints, and names the first field
that is wrong in one line (``plan.json: ranks[0].steps[3].tag: expected an integer, not
text (deploy the mapping again)``); :func:`to_json` gives its JSON form. Nothing a file says
is ever run: values are only checked and copied.

The types a field may have:

- ``bool``, ``int`` (not a bool; within :data:`MAX_INT` unless a :class:`Range` says),
  ``float`` (an int or float, finite, not a bool; NaN too where :class:`Undefined` says),
  ``str``, ``None``, ``Any`` (a JSON value as it is); a document built in memory may hold
  their subclasses (numpy's ``float64`` and ``str_``), read as the plain type;
- ``Literal["a", "b"]``; ``list[T]``, ``tuple[T, ...]``, ``tuple[A, B]`` (a JSON list),
  ``dict[K, T]`` (a JSON object; ``K`` a ``str`` type); ``T | None``;
- a record, and a union of records told apart by a tag key:
  ``Annotated[A | B, Tag("op")]`` where each member declares ``op: ClassVar[str] = "a"``;
- a ``TypedDict``: a JSON object with these keys (those of a ``total=False`` one may be absent),
  read as a plain dict: a table of fixed rows, such as one figure per class of operation.

Constraints ride on ``typing.Annotated``: :class:`Range` for numbers, :class:`Text` for strings
(without NUL, at most ``max`` characters, non-empty unless ``empty``), :class:`Items` for a
list's length; on ``T | None`` they hold for ``T``. :class:`Doc` says what a field means and its
unit: :func:`dse.record_tables.reference` renders a record's fields as the manual's table, and
a number out of its range is named with its unit. A field's JSON key is its name, or
``field(metadata=key("from"))``. A field with a default may be absent from the JSON (it takes
its default), and is left out of the JSON written when its value is None or an empty list or
dict; a field whose default is an empty list or dict takes it also when given empty. A field
without a default is always read and written. Keys a record does not declare are ignored, or
refused naming the closest declared key (``read(..., unknown="refuse")``: files users write by
hand). ``read(..., text_numbers=True)`` takes a float written as text in YAML 1.2's syntax
(``5.0e9``, which PyYAML reads as text).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from dse.errors import DseError

#: JSON integers beyond this are not exact in every reader (IEEE doubles).
MAX_INT = 2**53

T = TypeVar("T")


@dataclass(frozen=True)
class Range:
    """A number within [``lo``, ``hi``] (an end excluded where ``lo_open``, ``hi_open``)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def __str__(self) -> str:
        """``[0, 3600]``, ``(0, 100]``, ``[0, 1)``; an end not given is infinite: ``[0, inf)``."""
        lo = "-inf" if self.lo is None else f"{self.lo:g}"
        hi = "inf" if self.hi is None else f"{self.hi:g}"
        opening = "(["[self.lo is not None and not self.lo_open]
        closing = ")]"[self.hi is not None and not self.hi_open]
        return f"{opening}{lo}, {hi}{closing}"


@dataclass(frozen=True)
class Text:
    """A string without NUL, of at most ``max`` characters, non-empty unless ``empty``."""

    max: int = 4096
    empty: bool = False


@dataclass(frozen=True)
class Undefined:
    """A float that may be NaN: a figure not defined (the best of no feasible mapping)."""


@dataclass(frozen=True)
class Doc:
    """What a field means and its unit (``""``: none), for the manual and the messages."""

    what: str
    unit: str = ""


@dataclass(frozen=True)
class Items:
    """A list of at most ``max`` items."""

    max: int


@dataclass(frozen=True)
class Tag:
    """A union of records told apart by the JSON key ``key`` (each member's ClassVar)."""

    key: str


def key(name: str) -> dict[str, str]:
    """A field's metadata naming its JSON key: ``field(metadata=key("from"))``."""
    return {"json": name}


#: Where a value is in the document: None (the document) or (parent, key or index).
At = tuple[Any, "str | int"] | None
Reader = Callable[[Any, At], Any]
Writer = Callable[[Any], Any]


class _Failure(Exception):
    """A value that is wrong, where it is; :func:`read` turns it into one line."""

    def __init__(self, at: At, problem: str) -> None:
        self.at, self.problem = at, problem


def read(
    cls: type[T],
    doc: Any,
    where: str,
    fix: str = "",
    unknown: Literal["ignore", "refuse"] = "ignore",
    text_numbers: bool = False,
) -> T:
    """The record ``cls`` of parsed JSON ``doc``; a :class:`DseError` ``"{where}: {field}:
    {problem} ({fix})"`` naming the first field that is wrong. ``text_numbers``: a number may
    be given as text in YAML 1.2's syntax (a YAML file read by PyYAML, which reads ``5.0e9`` as
    text: YAML 1.1 wants ``5.0e+9``)."""
    try:
        return _reader(cls, _Mode(unknown == "refuse", text_numbers))(doc, None)
    except _Failure as failure:
        at = path(failure.at)
        text = f"{where}: {at}: {failure.problem}" if at else f"{where}: {failure.problem}"
        raise DseError(f"{text} ({fix})" if fix else text) from None


def to_json(record: Any, tp: Any = None) -> Any:
    """The JSON form (dicts, lists, numbers, strings) of a record, or of a value of type
    ``tp`` (a tagged union's member with its tag)."""
    return _writer(type(record) if tp is None else tp)(record)


def path(at: At) -> str:
    """``at`` as a reader sees it: ``ranks[0].steps[3].tag``."""
    parts: list[str] = []
    while at is not None:
        at, k = at
        parts.append(f"[{k}]" if isinstance(k, int) else f".{k}")
    return "".join(reversed(parts)).lstrip(".")


def kind(value: Any) -> str:
    """What a JSON value is, as a message says it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    names = {int: "an integer", float: "a number", str: "text", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


# --- readers, built once per type ---------------------------------------------------------


class _Mode(typing.NamedTuple):
    refuse: bool = False  # keys a record does not declare
    text_numbers: bool = False


_PLAIN = _Mode()

_READERS: dict[tuple[Any, _Mode], Reader] = {}


def _reader(tp: Any, mode: _Mode = _PLAIN) -> Reader:
    cache = (tp, mode)
    if cache not in _READERS:
        made: list[Reader] = []
        _READERS[cache] = lambda value, at: made[0](value, at)  # a record may hold itself
        made.append(_make_reader(tp, mode))
        _READERS[cache] = made[0]
    return _READERS[cache]


def _parts(tp: Any) -> tuple[Any, tuple[Any, ...], Any, tuple[Any, ...], Tag | None]:
    """A type taken apart: the type without its ``Annotated`` markers, the markers, its origin
    (``list``, a union...), its arguments, and its :class:`Tag` if it has one."""
    meta: tuple[Any, ...] = ()
    if typing.get_origin(tp) is typing.Annotated:
        tp, *rest = typing.get_args(tp)
        meta = tuple(rest)
    tag = next((m for m in meta if isinstance(m, Tag)), None)
    return tp, meta, typing.get_origin(tp), typing.get_args(tp), tag


def _make_reader(tp: Any, mode: _Mode) -> Reader:  # noqa: C901 - one branch per kind of type
    tp, meta, origin, args, tag = _parts(tp)
    if tag is not None:
        return _tagged(args, tag.key, mode)
    bounds = next((m for m in meta if isinstance(m, Range)), None)
    unit = next((m.unit for m in meta if isinstance(m, Doc)), "")
    if tp is Any:
        return lambda value, at: value
    if tp is bool:
        return _plain(bool, "true or false")
    if tp is int:
        return _integer(bounds, unit)
    if tp is float:
        nan = any(isinstance(m, Undefined) for m in meta)
        return _number(bounds, unit, mode.text_numbers, nan)
    if tp is str:
        return _string(next((m for m in meta if isinstance(m, Text)), None))
    if tp is type(None):
        return _plain(type(None), "null")
    if origin is Literal:
        return _literal(args)
    if origin in (types.UnionType, typing.Union):  # constraints hold for each member
        kept = [m for m in meta if not isinstance(m, Doc)]
        return _union(tuple(_annotated(a, kept) for a in args), mode)
    most = next((m for m in meta if isinstance(m, Items)), None)
    item = _annotated(args[0], [Doc("", unit)]) if unit and args else None  # items' unit
    if origin is list:
        return _list(_reader(item or args[0], mode), most)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            each = _list(_reader(item or args[0], mode), most)
            return lambda value, at: tuple(each(value, at))
        return _fixed_tuple([_reader(a, mode) for a in args])
    if origin is dict:
        named = next((m.what for m in unwrap(args[0])[1] if isinstance(m, Doc)), "key")
        return _dict(_reader(args[0], mode), _reader(args[1], mode), named)
    if dataclasses.is_dataclass(tp) or typing.is_typeddict(tp):
        return _record(tp, mode)
    raise TypeError(f"records: no reader for {tp!r}")


def _annotated(tp: Any, meta: list[Any]) -> Any:
    if tp is type(None) or not meta:
        return tp
    args = (tp, *meta)
    return typing.Annotated[args]


def _plain(cls: type, expected: str) -> Reader:
    def read_plain(value: Any, at: At) -> Any:
        if type(value) is not cls:
            raise _Failure(at, f"expected {expected}, not {kind(value)}")
        return value

    return read_plain


def _within(value: float, bounds: Range | None, at: At, unit: str, exact: bool = False) -> None:
    """``value`` within ``bounds``; ``exact``: an integer's, its figures written in full."""
    if bounds is None:
        return
    lo, hi, unit = bounds.lo, bounds.hi, f" {unit}" if unit else ""

    def shown(x: float) -> str:
        return str(int(x)) if exact and float(x).is_integer() else f"{x:g}"

    if lo is not None and (value <= lo if bounds.lo_open else value < lo):
        above = "above" if bounds.lo_open else "at least"
        raise _Failure(at, f"{shown(value)} is out of range: expected {above} {shown(lo)}{unit}")
    if hi is not None and (value >= hi if bounds.hi_open else value > hi):
        below = "below" if bounds.hi_open else "at most"
        raise _Failure(at, f"{shown(value)} is out of range: expected {below} {shown(hi)}{unit}")


def _integer(bounds: Range | None, unit: str) -> Reader:
    def read_integer(value: Any, at: At) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Failure(at, f"expected an integer, not {kind(value)}")
        if not -MAX_INT <= value <= MAX_INT:
            raise _Failure(at, f"{value} is beyond the integers JSON holds exactly")
        _within(value, bounds, at, unit, exact=True)
        return int(value)

    return read_integer


#: A number as YAML 1.2 writes it.
YAML_NUMBER = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


def _number(bounds: Range | None, unit: str, text: bool, nan: bool = False) -> Reader:
    def read_number(value: Any, at: At) -> float:
        if text and type(value) is str and YAML_NUMBER.fullmatch(value):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, int | float):  # numpy's float64 is
            raise _Failure(at, f"expected a number, not {kind(value)}")  # a float
        if nan and isinstance(value, float) and math.isnan(value):
            return float(value)
        if isinstance(value, int) and abs(value) > MAX_INT or not math.isfinite(value):
            shown = _short(value) if isinstance(value, int) else value  # an int of 400 digits
            raise _Failure(at, f"expected a finite number, not {shown}")
        _within(value, bounds, at, unit)
        return float(value)

    return read_number


def _string(text: Text | None) -> Reader:
    def read_string(value: Any, at: At) -> str:
        if not isinstance(value, str):  # numpy's str_ is a str
            raise _Failure(at, f"expected text, not {kind(value)}")
        value = str(value)
        if text is not None and (
            (not value and not text.empty) or len(value) > text.max or "\0" in value
        ):
            some = "a" if text.empty else "a non-empty"
            raise _Failure(at, f"expected {some} text of at most {text.max} characters")
        return value

    return read_string


def _literal(choices: tuple[Any, ...]) -> Reader:
    allowed = set(choices)
    names = [str(c) for c in choices]
    shown = " or ".join(names) if len(names) < 3 else "one of " + ", ".join(names)

    def read_literal(value: Any, at: At) -> Any:
        if isinstance(value, list | dict) or value not in allowed or type(value) is bool:
            raise _Failure(at, f"expected {shown}, not {_short(value)}")
        return value

    return read_literal


def _union(members: tuple[Any, ...], mode: _Mode) -> Reader:
    optional = type(None) in members
    rest = [_reader(m, mode) for m in members if m is not type(None)]
    if len(rest) == 1:
        inner = rest[0]

        def read_optional(value: Any, at: At) -> Any:
            return None if value is None and optional else inner(value, at)

        return read_optional
    names = [_name(m) for m in members]
    shown = ", ".join(names[:-1]) + " or " + names[-1]

    def read_any_of(value: Any, at: At) -> Any:  # the first member that takes it
        if value is None and optional:
            return None
        for member in rest:
            try:
                return member(value, at)
            except _Failure:
                continue
        raise _Failure(at, f"expected {shown}, not {kind(value)}")

    return read_any_of


def _name(tp: Any) -> str:
    origin = typing.get_origin(tp) or tp
    names = {list: "a list", dict: "an object", str: "text", int: "an integer", float: "a number"}
    return names.get(origin, "null" if tp is type(None) else getattr(tp, "__name__", str(tp)))


def _list(each: Reader, most: Items | None) -> Reader:
    def read_list(value: Any, at: At) -> list[Any]:
        if type(value) is not list:
            raise _Failure(at, f"expected a list, not {kind(value)}")
        if most is not None and len(value) > most.max:
            raise _Failure(at, f"{len(value)} items, more than {most.max}")
        return [each(v, (at, i)) for i, v in enumerate(value)]

    return read_list


def _fixed_tuple(each: list[Reader]) -> Reader:
    def read_tuple(value: Any, at: At) -> tuple[Any, ...]:
        if type(value) is not list or len(value) != len(each):
            raise _Failure(at, f"expected a list of {len(each)}, not {_short(value)}")
        return tuple(r(v, (at, i)) for i, (r, v) in enumerate(zip(each, value, strict=True)))

    return read_tuple


def _dict(keys: Reader, values: Reader, named: str) -> Reader:
    def read_key(k: Any, at: At) -> Any:
        try:
            return keys(k, at)
        except _Failure as failure:  # named as its Doc says: a layer key, a device type...
            raise _Failure(at, f"{named} {_short(k)}: {failure.problem}") from None

    def read_dict(value: Any, at: At) -> dict[Any, Any]:
        if type(value) is not dict:
            raise _Failure(at, f"expected an object, not {kind(value)}")
        return {read_key(k, at): values(v, (at, k)) for k, v in value.items()}

    return read_dict


#: The default of a field without one.
REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()


@dataclass(frozen=True)
class _Field:
    name: str
    key: str
    tp: Any
    required: bool
    default: Any = REQUIRED  # a default factory's value; a TypedDict's keys have none

    @property
    def empty_default(self) -> bool:
        return type(self.default) in (list, dict) and not self.default


def fields_of(cls: type) -> list[_Field]:
    """A record's (or TypedDict's) fields: name, JSON key, resolved type, whether the JSON
    must hold it, default."""
    hints = typing.get_type_hints(cls, include_extras=True)
    if typing.is_typeddict(cls):
        required: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
        return [_Field(k, k, tp, k in required) for k, tp in hints.items()]
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        default = REQUIRED if default is dataclasses.MISSING else default
        key_ = f.metadata.get("json", f.name)
        out.append(_Field(f.name, key_, hints[f.name], default is REQUIRED, default))
    return out


def _record(cls: type, mode: _Mode, tag: str | None = None) -> Reader:
    fields = [(f, _reader(f.tp, mode)) for f in fields_of(cls)]
    known = {f.key for f, _ in fields} | ({tag} if tag else set())

    def read_record(value: Any, at: At) -> Any:
        if type(value) is not dict:
            raise _Failure(at, f"expected an object, not {kind(value)}")
        given = {}
        for f, read_field in fields:
            if f.key in value:
                v = value[f.key]
                if not (f.empty_default and type(v) in (list, dict) and not v):
                    given[f.name] = read_field(v, (at, f.key))
            elif f.required:
                raise _Failure(at, f"'{f.key}' is missing")
        if mode.refuse:
            for k in value:
                if k not in known:
                    close = difflib.get_close_matches(str(k), sorted(known), n=1)
                    hint = f" (did you mean '{close[0]}'?)" if close else ""
                    raise _Failure(at, f"unknown key '{str(k)[:40]}'{hint}")
        return cls(**given)

    return read_record


def _tagged(members: tuple[Any, ...], tag: str, mode: _Mode) -> Reader:
    by_tag = {getattr(m, tag): _record(m, mode, tag) for m in members}
    shown = ", ".join(by_tag)

    def read_tagged(value: Any, at: At) -> Any:
        if type(value) is not dict:
            raise _Failure(at, f"expected an object, not {kind(value)}")
        if tag not in value:
            raise _Failure(at, f"'{tag}' is missing")
        which = value[tag]
        if type(which) is not str or which not in by_tag:
            raise _Failure((at, tag), f"{_short(which)} is not one of {shown}")
        return by_tag[which](value, at)

    return read_tagged


def _short(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --- writers ------------------------------------------------------------------------------

_WRITERS: dict[Any, Writer] = {}


def _writer(tp: Any) -> Writer:
    if tp not in _WRITERS:
        made: list[Writer] = []
        _WRITERS[tp] = lambda value: made[0](value)
        made.append(_make_writer(tp))
        _WRITERS[tp] = made[0]
    return _WRITERS[tp]


def _same(value: Any) -> Any:
    return value


def _make_writer(tp: Any) -> Writer:
    tp, _meta, origin, args, tag = _parts(tp)
    if tag is not None:
        by_type = {m: _record_writer(m, tag.key) for m in args}
        return lambda value: by_type[type(value)](value)
    if tp in (float, int, bool, str):  # numpy's scalars become JSON's
        return tp
    if tp in (Any, type(None)) or origin is Literal:
        return _same
    if origin in (types.UnionType, typing.Union):
        members = [(typing.get_origin(a) or a, _writer(a)) for a in args if a is not type(None)]
        if len(members) == 1:
            inner = members[0][1]
            return lambda value: None if value is None else inner(value)

        def write_any_of(value: Any) -> Any:  # the member the value is an instance of
            if value is None:
                return None
            fits = (w for kind, w in members if isinstance(kind, type) and isinstance(value, kind))
            return next(fits, _same)(value)

        return write_any_of
    if origin in (list, tuple):
        each = _writer(args[0])
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            fixed = [_writer(a) for a in args]
            return lambda value: [w(v) for w, v in zip(fixed, value, strict=True)]
        return lambda value: [each(v) for v in value]
    if origin is dict:
        name, each = _writer(args[0]), _writer(args[1])
        return lambda value: {name(k): each(v) for k, v in value.items()}
    if dataclasses.is_dataclass(tp) or typing.is_typeddict(tp):
        return _record_writer(tp)
    raise TypeError(f"records: no writer for {tp!r}")


def _record_writer(cls: type, tag: str | None = None) -> Writer:
    fields = [(f.name, f.key, _writer(f.tp), f.required) for f in fields_of(cls)]
    head = {tag: getattr(cls, tag)} if tag else {}
    absent = object()
    get = dict.get if typing.is_typeddict(cls) else getattr

    def write_record(value: Any) -> dict[str, Any]:
        out = dict(head)
        for name, k, write, required in fields:
            v = get(value, name, absent)
            if v is absent:  # a key a TypedDict may lack
                continue
            if required or not (v is None or (isinstance(v, list | tuple | dict) and not v)):
                out[k] = write(v)
        return out

    return write_record


def unwrap(tp: Any) -> tuple[Any, list[Any], bool]:
    """``tp`` without ``Annotated`` and ``| None``: the type, its markers (outer first),
    whether it may be null."""
    meta: list[Any] = []
    optional = False
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp, *rest = typing.get_args(tp)
            meta += rest
        elif typing.get_origin(tp) in (types.UnionType, typing.Union) and type(None) in (
            args := typing.get_args(tp)
        ):
            rest = [a for a in args if a is not type(None)]
            if len(rest) != 1:
                return tp, meta, True
            tp, optional = rest[0], True
        else:
            return tp, meta, optional
