"""The coefficients file's schema: every key, its type, unit, range and default, in one place.

:func:`check` runs on every coefficients document before it is read
(:meth:`models_analytical.coefficients.Coefficients.from_dict`: a file, and what calibration is
about to write), so a wrong one is one line naming the file, the key, what it must be and how
to fix it. :func:`reference` renders the schema as the manual's table
(``docs/reference/coefficients.md``; a test keeps the two equal).

A document is a JSON object. A top-level object with one of
:data:`~models_analytical.coefficients.TYPE_MARKERS` is a device type's section
(:data:`TYPE_SECTION`: unknown keys refused, so a misspelt key is not silently ignored);
``calibrated``, ``links``, ``speed_reference`` and ``memory_reference`` are checked as
:data:`TOP` says; every other key is a note (free JSON: description, provenance, ...). The
ranges are generous bounds on what any device could show, meant to catch a value in the wrong
unit, a typo and an overflow (a latency of 2.6e301 ms, or a clock of 1e-300 Hz that makes every
layer take forever), not to judge a calibration. Size, nesting and duplicate keys of a file
are bounded where it is read (:func:`dse.files.read_json`; :data:`MAX_BYTES`, :data:`MAX_DEPTH`).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dse.errors import DseError
from dse.values import number

#: The largest coefficients file read (a calibration of a few networks is ~10 kB).
MAX_BYTES = 16 * 2**20
#: The deepest nesting of a coefficients document (a calibration's provenance: 6).
MAX_DEPTH = 32
#: The longest key of a table keyed by layer or family (a layer key has 16 characters).
MAX_KEY = 64
#: No default: the key must be there.
REQUIRED = object()


@dataclass(frozen=True)
class Number:
    """A finite number in ``[low, high]`` (either end open: ``open_low``, ``open_high``), in
    ``unit``;
    ``integer``: a whole number; ``default`` when absent (:data:`REQUIRED`: none; None:
    null, meaning the text of ``what`` says)."""

    unit: str
    high: float
    what: str
    low: float = 0.0
    open_low: bool = False
    open_high: bool = False
    integer: bool = False
    default: Any = REQUIRED


@dataclass(frozen=True)
class Flag:
    """true or false."""

    what: str
    default: Any = REQUIRED


@dataclass(frozen=True)
class Text:
    """A string of at most ``longest`` characters."""

    what: str
    longest: int = 10_000
    default: Any = REQUIRED


@dataclass(frozen=True)
class Row:
    """A list of exactly one number per term, each as its :class:`Number` says."""

    terms: tuple[tuple[str, Number], ...]
    what: str


@dataclass(frozen=True)
class Curve:
    """``{"bytes": [...], "seconds": [...]}``: as many of each, bytes increasing."""

    bytes: Number
    seconds: Number
    what: str
    longest: int = 1000


@dataclass(frozen=True)
class Keyed:
    """An object whose keys are names (a layer key, a family, a network), each value
    ``item``; absent: empty (``default``), unless :data:`REQUIRED`."""

    key: str
    item: Number | Row | Curve | Text
    what: str
    default: Any = None


@dataclass(frozen=True)
class Section:
    """An object with these keys (others refused); ``default``: absent means empty."""

    keys: dict[str, Spec]
    what: str
    default: Any = REQUIRED


Spec = Number | Flag | Text | Row | Curve | Keyed | Section

S_MAX = 3600.0  # a duration: at most an hour
PER_UNIT_MAX = 1e-3  # seconds per MAC or byte: a device of 1 kMAC/s or 1 kB/s at the slowest


def _macs_per_cycle(name: str) -> Number:
    return Number("MAC/cycle", 1e6, f"{name}: MACs per clock cycle", low=1e-6)


def _watts(name: str) -> Number:
    return Number("W", 1e4, f"drawn {name}")


TYPE_SECTION = Section(
    {
        "frequency_hz": Number("Hz", 1e11, "clock frequency", low=1e3),
        "layer": Section(
            {
                "conv_winograd": _macs_per_cycle("3x3 stride-1 convolutions"),
                "conv": _macs_per_cycle("other convolutions"),
                "fc": _macs_per_cycle("fully connected layers"),
                "elementwise": _macs_per_cycle("every other layer"),
            },
            "Eq. 4.7: a layer takes MACs / (frequency_hz x layer[its class]) s",
        ),
        "layer_overhead_s": Number("s", S_MAX, "fixed cost of running one layer"),
        "memory": Section(
            {
                "coefficient": Number(
                    "", 1e3, "Eq. 4.9: memory = expected x coefficient + bias", open_low=True
                ),
                "bias_mb": Number("MB", 1e7, "runtime libraries and state of a device"),
                "per_layer_mb": Number("MB", 1e5, "runtime structures per layer held"),
                "weights": Section(
                    {
                        "conv": Number("", 1e3, "x convolutions' weights while running"),
                        "other": Number("", 1e3, "x other weights while running"),
                    },
                    "calibrated memory per weight class; empty: off",
                    default={},
                ),
                "loading": Section(
                    {
                        "conv": Number("", 1e3, "x convolutions' weights while loading"),
                        "other": Number("", 1e3, "x other weights while loading"),
                    },
                    "memory while loading, per weight class; empty: off",
                    default={},
                ),
                "per_segment_mb": Number("MB", 1e5, "per sub-model a device runs", default=0.0),
                "held": Number(
                    "", 1e3, "per MB of buffers kept for good; null: coefficient", default=None
                ),
                "empty_mb": Number(
                    "MB",
                    1e7,
                    "baseline of a rank running no sub-model; null: bias_mb",
                    default=None,
                ),  # fmt: skip
            },
            "memory model",
        ),
        "power_w": Section(
            {
                "conv_winograd": _watts("computing 3x3 stride-1 convolutions"),
                "conv": _watts("computing other convolutions"),
                "fc": _watts("computing fully connected layers"),
                "elementwise": _watts("computing other layers"),
                "overhead": _watts("during per-layer overhead"),
                "idle": _watts("idle"),
            },
            "power draw",
        ),
        "layer_s": Keyed(
            "layer key", Number("s", S_MAX, "profiled time of a layer"), "profiled layers"
        ),
        "regression": Keyed(
            "family",
            Row(
                (
                    ("1", Number("s", S_MAX, "fixed")),
                    ("macs", Number("s/MAC", PER_UNIT_MAX, "per MAC")),
                    ("activation_bytes", Number("s/B", PER_UNIT_MAX, "per activation byte")),
                    ("weight_bytes", Number("s/B", PER_UNIT_MAX, "per weight byte")),
                ),
                "a layer never profiled takes the dot product of these with its terms",
            ),
            "fitted layer times per family (or 'any')",
        ),
        "channel_block": Number(
            "channels",
            4096,
            "a conv part computes output channels in blocks of this many",
            low=1,
            integer=True,
            default=1,
        ),  # fmt: skip
        "transfer_fixed_s": Number(
            "s", S_MAX, "per tensor crossing devices (the cut on both ends)", default=0.0
        ),
        "transfer_per_byte_s": Number(
            "s/B", PER_UNIT_MAX, "per byte crossing devices (copies)", default=0.0
        ),
        "transfer_per_byte_same_host_s": Number(
            "s/B",
            PER_UNIT_MAX,
            "per byte crossing between devices of one host; null: as transfer_per_byte_s",
            default=None,
        ),
        "split_work_factor": Number(
            "", 100, "a split layer's parts each run this much slower", open_low=True, default=1.0
        ),
        "shared_host_factor": Number(
            "",
            100,
            "a layer's part runs this much slower beside a part of it on the same host",
            open_low=True,
            default=1.0,
        ),  # fmt: skip
        "part_fixed": Keyed(
            "layer key",
            Number("", 1.0, "share of a split layer's time every part pays", open_high=True),
            "fixed share per profiled layer",
        ),
        "part_fixed_channels": Keyed(
            "family",
            Number("channels", 1e6, "fixed share x output channels"),
            "fixed share per family, for layers never profiled",
        ),
        "row_fixed": Keyed(
            "family",
            Number("", 1.0, "share of a layer's time every band of it pays", open_high=True),
            "fixed share of a band (a layer split by rows) per family",
        ),
        "segment_run_s": Number("s", S_MAX, "per sub-model run", default=0.0),
        "segment_in_per_byte_s": Number(
            "s/B", PER_UNIT_MAX, "per byte a sub-model takes in", default=0.0
        ),
        "segment_out_per_byte_s": Number(
            "s/B", PER_UNIT_MAX, "per byte a sub-model gives out", default=0.0
        ),
        "receive_on_device": Flag("a transfer occupies the receiving device", default=False),
    },
    "one device type's coefficients",
)

TOP: dict[str, Spec] = {
    "calibrated": Flag("measured on the hardware by dse.calibrate", default=False),
    "links": Keyed(
        "link class",
        Curve(
            Number("B", 1e12, "message size"),
            Number("s", S_MAX, "one-way time"),
            "measured transfer time, piecewise linear in the size",
        ),
        "measured links",
    ),
    "speed_reference": Section(
        {
            "whole_ms": Keyed(
                "network",
                Number("ms", 1e7, "the whole network alone", low=1e-3),
                "speed probe per network",
                default=REQUIRED,
            ),
            "fingerprints": Keyed("network", Text("the network's fingerprint", 64), "per network"),
            "threads": Number("threads", 4096, "threads of the probe", low=1, integer=True),
            "what": Text("what the figures are", default=""),
        },
        "calibration's speed probe (dse.runtime.launch.probe)",
        default=None,
    ),
    "memory_reference": Section(
        {
            "start_mb": Number("MB", 1e7, "a rank's RSS before it loads", default=REQUIRED),
            "what": Text("what the figure is", default=""),
        },
        "the runtime's own memory at calibration (dse.fidelity compares)",
        default=None,
    ),
}


def check(doc: Any, source: str, type_keys: list[str]) -> None:
    """Refuse in one line a coefficients document ``doc`` (from ``source``) that breaks the
    schema; ``type_keys``: its device type sections."""
    if not isinstance(doc, Mapping):
        raise DseError(
            f"coefficients {source} must be a JSON object with a section per device type "
            "(such as 'cpu')"
        )
    _depth(doc, f"coefficients {source}")
    for key in type_keys:
        if not key or len(key) > MAX_KEY:
            named = f"has a device type named {key!r} (1 to {MAX_KEY} characters)"
            _fail(f"coefficients {source}", named)
        _value(TYPE_SECTION, doc[key], f"coefficients {source}, '{key}'")
    for key, spec in TOP.items():
        if key in doc:
            _value(spec, doc[key], f"coefficients {source}, {key}")


def _fail(where: str, what: str) -> None:
    raise DseError(f"{where} {what} (correct it, or calibrate again)")


def _value(spec: Spec, value: Any, where: str) -> None:
    if isinstance(spec, Number):
        _number(spec, value, where)
    elif isinstance(spec, Flag):
        if not isinstance(value, bool):
            _fail(where, f"must be true or false, not {value!r}")
    elif isinstance(spec, Text):
        if not isinstance(value, str) or len(value) > spec.longest:
            _fail(where, f"must be a string of at most {spec.longest} characters")
    elif isinstance(spec, Row):
        if not isinstance(value, list) or len(value) != len(spec.terms):
            names = ", ".join(n for n, _ in spec.terms)
            _fail(where, f"must be a list of {len(spec.terms)} numbers ({names}), not {value!r}")
        for (name, term), x in zip(spec.terms, value, strict=True):
            _number(term, x, f"{where} (term {name})")
    elif isinstance(spec, Curve):
        _curve(spec, value, where)
    elif isinstance(spec, Keyed):
        for k, v in _mapping(value, where).items():
            if not k or len(k) > MAX_KEY:
                _fail(where, f"has a {spec.key} of {len(k)} characters (1 to {MAX_KEY})")
            _value(spec.item, v, f"{where}.{k}")
    else:
        _section(spec, value, where)


def _section(spec: Section, value: Any, where: str) -> None:
    if value is None and spec.default is None:
        return
    m = _mapping(value, where)
    if not m and spec.default == {}:
        return  # an empty table: off
    for k, v in m.items():
        if k not in spec.keys:
            near = difflib.get_close_matches(k, list(spec.keys), n=1)
            hint = f"did you mean '{near[0]}'?" if near else f"known: {', '.join(spec.keys)}"
            _fail(where, f"has an unknown key '{k}' ({hint})")
        _value(spec.keys[k], v, f"{where}.{k}")
    for k, sub in spec.keys.items():
        if k not in m and getattr(sub, "default", REQUIRED) is REQUIRED:
            raise DseError(f"{where} is missing '{k}' ({sub.what}): add it, or calibrate again")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        _fail(where, f"must be a mapping (a JSON object), not {_short(value)}")
    return value


def _number(spec: Number, value: Any, where: str) -> None:
    if value is None and spec.default is None:
        return
    if value is None:
        _fail(where, "must be a number, not null")
    if isinstance(value, str):
        _fail(where, f"must be a number, not the string {_short(value)}")
    x = number(value, where, positive=spec.low > 0 or spec.open_low, integer=spec.integer)
    low_ok = x > spec.low if spec.open_low else x >= spec.low
    high_ok = x < spec.high if spec.open_high else x <= spec.high
    if not low_ok or not high_ok:
        _fail(where, f"must be in {_range(spec)}{' ' + spec.unit if spec.unit else ''}, not {x:g}")


def _curve(spec: Curve, value: Any, where: str) -> None:
    m = _mapping(value, where)
    if set(m) != {"bytes", "seconds"}:
        _fail(where, "needs 'bytes' and 'seconds' lists and nothing else")
    xs, ys = m["bytes"], m["seconds"]
    if not isinstance(xs, list) or not isinstance(ys, list) or not xs or len(xs) != len(ys):
        _fail(where, "needs 'bytes' and 'seconds' lists of one length")
    if len(xs) > spec.longest:
        _fail(where, f"has {len(xs)} points (at most {spec.longest})")
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        _number(spec.bytes, x, f"{where}.bytes[{i}]")
        _number(spec.seconds, y, f"{where}.seconds[{i}]")
    if any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
        _fail(where, "'bytes' must increase")


def _depth(doc: Any, where: str) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` (without recursing: a document built in
    memory may be deeper than Python's recursion limit)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            _fail(where, f"is nested more than {MAX_DEPTH} deep")
        children = value.values() if isinstance(value, Mapping) else value
        if isinstance(value, Mapping | list):
            stack.extend((v, depth + 1) for v in children if isinstance(v, Mapping | list))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- the manual's table ----------------------------------------------------------------------


def reference() -> tuple[str, str]:
    """The schema as two Markdown tables: a device type's section, and the other top-level
    keys."""
    head = ["| key | type | unit | range | default | meaning |", "|---|---|---|---|---|---|"]
    types = [row for key, spec in TYPE_SECTION.keys.items() for row in _rows(key, spec)]
    top = [row for key, spec in TOP.items() for row in _rows(key, spec)]
    return "\n".join([*head, *types]) + "\n", "\n".join([*head, *top]) + "\n"


def _rows(key: str, spec: Spec) -> list[str]:
    default = getattr(spec, "default", REQUIRED)
    shown = "required" if default is REQUIRED else f"`{json.dumps(default)}`"
    shown = "empty" if default == {} else shown
    if isinstance(spec, Section):
        rows = [f"| `{key}` | object | | | {shown} | {spec.what} |"]
        for k, sub in spec.keys.items():
            rows += _rows(f"{key}.{k}", sub)
        return rows
    if isinstance(spec, Keyed):
        shown = "required" if default is REQUIRED else "empty"
        rows = [f"| `{key}` | object: {spec.key} → value | | | {shown} | {spec.what} |"]
        return rows + _rows(f"{key}.<{spec.key}>", spec.item)
    if isinstance(spec, Row):
        terms = ", ".join(f"{n} ({t.unit}, {_range(t)})" for n, t in spec.terms)
        return [f"| `{key}` | list of {len(spec.terms)} numbers | | {terms} | required | "
                f"{spec.what} |"]  # fmt: skip
    if isinstance(spec, Curve):
        return [
            f"| `{key}.bytes` | list of numbers, increasing | {spec.bytes.unit} | "
            f"{_range(spec.bytes)}, at most {spec.longest} | required | {spec.bytes.what} |",
            f"| `{key}.seconds` | list of numbers, as many | {spec.seconds.unit} | "
            f"{_range(spec.seconds)} | required | {spec.seconds.what} ({spec.what}) |",
        ]
    if isinstance(spec, Number):
        kind = "integer" if spec.integer else "number" + (" or null" if default is None else "")
        return [f"| `{key}` | {kind} | {spec.unit} | {_range(spec)} | {shown} | {spec.what} |"]
    if isinstance(spec, Flag):
        return [f"| `{key}` | true or false | | | {shown} | {spec.what} |"]
    return [f"| `{key}` | string | | at most {spec.longest} characters | {shown} | {spec.what} |"]


def _range(spec: Number) -> str:
    """``[low, high]``, an end open when it is: ``(0, 1e+06]``, ``[0, 1)``."""
    low, high = "(["[not spec.open_low], ")]"[not spec.open_high]
    return f"{low}{spec.low:g}, {spec.high:g}{high}"
