"""Fitted model coefficients per device type: built in memory (calibration, tests) or read
from a JSON file. The hardware they describe is :mod:`dse.platform`; nothing here knows it.

A coefficients file is a JSON object whose top-level keys are device types (a platform's
device names its ``type``, by default its kind: ``cpu``, ``gpu``), each the
:class:`TypeCoefficients` of that type, beside notes (``description``, ``provenance``, ...),
``calibrated`` and the measured ``links`` (:class:`Measured`) and the references calibration
leaves for :mod:`dse.fidelity` (:class:`References`, kept as notes). A top-level object is a
type's when it has any of :data:`TYPE_MARKERS`; every other key is a note.

The classes below are the file's format, each key declared once with its type, range, unit
and meaning (:mod:`dse.records`): :meth:`Coefficients.from_dict` reads a file by them, a wrong
key in one line naming the file, the key, what it must be and how to fix it, and
:func:`reference` renders them as the manual's tables (``docs/reference/coefficients.md``; a
test keeps the two equal). The ranges are generous bounds on what any device could show, meant
to catch a value in the wrong unit, a typo and an overflow (a latency of 2.6e301 ms, or a clock
of 1e-300 Hz that makes every layer take forever), not to judge a calibration. Size, nesting
and duplicate keys of a file are bounded where it is read (:func:`dse.files.read_json`;
:data:`MAX_BYTES`, :data:`MAX_DEPTH`).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

from dse import record_tables, records
from dse.errors import DseError
from dse.files import read_json
from dse.platform import Platform
from dse.records import Doc, Items, Range, Text

#: The largest coefficients file read (a calibration of a few networks is ~10 kB).
MAX_BYTES = 16 * 2**20
#: The deepest nesting of a coefficients document (a calibration's provenance: 6).
MAX_DEPTH = 32
#: The longest name of a device type, layer, family, network or link class.
MAX_KEY = 64
#: What a wrong file's one line ends with.
FIX = "correct it, or calibrate again"

S_MAX = 3600.0  # a duration: at most an hour
PER_UNIT_MAX = 1e-3  # seconds per MAC or byte: a device of 1 kMAC/s or 1 kB/s at the slowest

TypeName = Annotated[str, Text(MAX_KEY), Doc("device type")]
LayerKey = Annotated[str, Text(MAX_KEY), Doc("layer key")]
Family = Annotated[str, Text(MAX_KEY), Doc("family")]
NetName = Annotated[str, Text(MAX_KEY), Doc("network")]
LinkName = Annotated[str, Text(MAX_KEY), Doc("link class")]
Seconds = Annotated[float, Range(0, S_MAX)]
PerUnit = Annotated[float, Range(0, PER_UNIT_MAX)]  # seconds per MAC or per byte
MacsPerCycle = Annotated[float, Range(1e-6, 1e6)]
Watts = Annotated[float, Range(0, 1e4)]
Times = Annotated[float, Range(0, 1e3)]  # a factor on memory
MB = Annotated[float, Range(0, 1e7)]
Share = Annotated[float, Range(0, 1, hi_open=True)]
Slowdown = Annotated[float, Range(0, 100, lo_open=True)]


class LayerRates(TypedDict):
    """MACs per clock cycle of each op class (Eq. 4.7 keeps one per class and device type)."""

    conv_winograd: Annotated[
        MacsPerCycle, Doc("3x3 stride-1 convolutions: MACs per clock cycle", "MAC/cycle")
    ]
    conv: Annotated[MacsPerCycle, Doc("other convolutions: MACs per clock cycle", "MAC/cycle")]
    fc: Annotated[MacsPerCycle, Doc("fully connected layers: MACs per clock cycle", "MAC/cycle")]
    elementwise: Annotated[
        MacsPerCycle, Doc("every other layer: MACs per clock cycle", "MAC/cycle")
    ]


class Power(TypedDict):
    """What a device draws while computing each op class, during per-layer overhead, idle."""

    conv_winograd: Annotated[Watts, Doc("drawn computing 3x3 stride-1 convolutions", "W")]
    conv: Annotated[Watts, Doc("drawn computing other convolutions", "W")]
    fc: Annotated[Watts, Doc("drawn computing fully connected layers", "W")]
    elementwise: Annotated[Watts, Doc("drawn computing other layers", "W")]
    overhead: Annotated[Watts, Doc("drawn during per-layer overhead", "W")]
    idle: Annotated[Watts, Doc("drawn idle", "W")]


class WeightFactors(TypedDict):
    """Memory per MB of weights, by how onnxruntime holds them: convolutions' (packed for its
    kernels) and the rest."""

    conv: Annotated[Times, Doc("x convolutions' weights")]
    other: Annotated[Times, Doc("x other weights")]


@dataclass(frozen=True)
class Memory:
    """A device's memory (MB): Eq. 4.9 and its calibrated terms. While running, ``bias_mb`` +
    ``coefficient`` x live activations + ``weights[class]`` x that class's weights; while
    loading, ``bias_mb`` + ``loading[class]`` x weights (onnxruntime holds some twice, packs
    conv weights)."""

    coefficient: Annotated[
        float, Range(0, 1e3, lo_open=True), Doc("Eq. 4.9: memory = expected x coefficient + bias")
    ]
    bias_mb: Annotated[MB, Doc("runtime libraries and state of a device", "MB")]
    per_layer_mb: Annotated[float, Range(0, 1e5), Doc("runtime structures per layer held", "MB")]
    weights: Annotated[WeightFactors, Doc("memory while running, per weight class; empty: off")] = (
        field(default_factory=dict)  # type: ignore[assignment]  # empty: off, which a TypedDict cannot say
    )
    loading: Annotated[WeightFactors, Doc("memory while loading, per weight class; empty: off")] = (
        field(default_factory=dict)  # type: ignore[assignment]  # empty: off, which a TypedDict cannot say
    )
    per_segment_mb: Annotated[float, Range(0, 1e5), Doc("per sub-model a device runs", "MB")] = 0.0
    #: per MB of the buffers the runtime keeps for good (what a device receives or gathers, the
    #: input image where it enters); None: ``coefficient``, as for other tensors
    held: Annotated[Times | None, Doc("per MB of buffers kept for good; null: coefficient")] = None
    #: a rank that runs no sub-model (it only holds or passes on tensors; no onnxruntime session
    #: is created there): its baseline instead of ``bias_mb``; None: ``bias_mb``
    empty_mb: Annotated[
        MB | None, Doc("baseline of a rank running no sub-model; null: bias_mb", "MB")
    ] = None


#: A regressed layer time is the dot product of these terms with its family's coefficients.
RegressionRow = tuple[
    Annotated[Seconds, Doc("1", "s")],
    Annotated[PerUnit, Doc("macs", "s/MAC")],
    Annotated[PerUnit, Doc("activation_bytes", "s/B")],
    Annotated[PerUnit, Doc("weight_bytes", "s/B")],
]


#: Op classes of the compute model (Eq. 4.7 keeps one coefficient per class and device type).
OP_CLASSES = tuple(f.key for f in records.fields_of(LayerRates))
#: What a device draws (W) while computing each op class, during per-layer overhead, and idle.
POWER_CLASSES = tuple(f.key for f in records.fields_of(Power))
#: The terms of a regressed layer time, in their order.
REGRESSION_TERMS = tuple(typing.get_args(t)[-1].what for t in typing.get_args(RegressionRow))
#: Weights by how onnxruntime holds them: convolutions' (packed for its kernels) and the rest.
WEIGHT_CLASSES = tuple(f.key for f in records.fields_of(WeightFactors))
#: Keys only a device type's section has: a top-level object with one of them is a type's.
TYPE_MARKERS = ("frequency_hz", "layer", "layer_overhead_s", "power_w")
#: ``links`` holds a table per link class and, measured on a switched network, one per board's
#: port under this prefix and the board's name (``port:edge1``): a pair of boards then takes,
#: for each size, the slower of its two ports' times.
PORT = "port:"


def port_key(board: str) -> str:
    """The ``links`` key of a board's port table."""
    return PORT + board


@dataclass(frozen=True)
class TypeCoefficients:
    """Calibrated values for one device type (section 4.3, extended): every device of the type
    shares them. Those after ``power_w`` are measured by :mod:`dse.calibrate` (absent, the model
    falls back to Eq. 4.7 and its defaults turn each term off)."""

    frequency_hz: Annotated[float, Range(1e3, 1e11), Doc("clock frequency", "Hz")]
    #: Eq. 4.7: time = MACs / (frequency * layer[op class])
    layer: Annotated[
        LayerRates, Doc("Eq. 4.7: a layer takes MACs / (frequency_hz x layer[its class]) s")
    ]
    #: fixed cost of running one layer (dispatch, sync)
    layer_overhead_s: Annotated[Seconds, Doc("fixed cost of running one layer", "s")]
    memory: Annotated[Memory, Doc("memory model")]
    power_w: Annotated[Power, Doc("power draw")]
    layer_s: Annotated[
        dict[LayerKey, Annotated[Seconds, Doc("profiled time of a layer", "s")]],
        Doc("profiled layers"),
    ] = field(default_factory=dict)
    regression: Annotated[
        dict[
            Family,
            Annotated[
                RegressionRow,
                Doc("a layer never profiled takes the dot product of these with its terms"),
            ],
        ],
        Doc("fitted layer times per family (or 'any')"),
    ] = field(default_factory=dict)
    channel_block: Annotated[
        int,
        Range(1, 4096),
        Doc("a conv part computes output channels in blocks of this many", "channels"),
    ] = 1
    #: per tensor crossing devices: the segment cut on both ends; and per byte (layout
    #: conversions, copies)
    transfer_fixed_s: Annotated[
        Seconds, Doc("per tensor crossing devices (the cut on both ends)", "s")
    ] = 0.0
    transfer_per_byte_s: Annotated[PerUnit, Doc("per byte crossing devices (copies)", "s/B")] = 0.0
    #: per byte crossing between two devices of one host (shared memory, not a network's
    #: sockets); None: as transfer_per_byte_s
    transfer_per_byte_same_host_s: Annotated[
        PerUnit | None,
        Doc("per byte crossing between devices of one host; null: as transfer_per_byte_s", "s/B"),
    ] = None
    #: a split layer's parts run side by side: each this slower
    split_work_factor: Annotated[
        Slowdown, Doc("a split layer's parts each run this much slower")
    ] = 1.0
    #: a device's layers run this much slower while another device of its host has work in the
    #: same mapping (they share caches and memory bandwidth; a waiting rank polls for messages)
    shared_host_factor: Annotated[
        Slowdown, Doc("a layer's part runs this much slower beside a part of it on the same host")
    ] = 1.0
    #: what every part of a split layer pays whatever its channel share, as a share of the
    #: whole layer's time (its input's layout conversion, im2col or Winograd transform): per
    #: layer (timed alone) and, for layers never timed, per family (share x output channels:
    #: the fixed part shrinks as the layer has more channels)
    part_fixed: Annotated[
        dict[LayerKey, Annotated[Share, Doc("share of a split layer's time every part pays")]],
        Doc("fixed share per profiled layer"),
    ] = field(default_factory=dict)
    #: the op types of the layers profiled on the type: a network's layers of other ops are
    #: costed by a family's regression or a default (:func:`unprofiled_ops`)
    profiled_ops: Annotated[
        list[Annotated[str, Text(MAX_KEY), Doc("ONNX op type")]],
        Doc("op types of the layers profiled on this type"),
    ] = field(default_factory=list)
    part_fixed_channels: Annotated[
        dict[
            Family,
            Annotated[float, Range(0, 1e6), Doc("fixed share x output channels", "channels")],
        ],
        Doc("fixed share per family, for layers never profiled"),
    ] = field(default_factory=dict)
    #: what every band of a layer split by rows pays whatever its rows, as a share of the whole
    #: layer's time, per family (absent: a band costs its share of the rows)
    row_fixed: Annotated[
        dict[Family, Annotated[Share, Doc("share of a layer's time every band of it pays")]],
        Doc("fixed share of a band (a layer split by rows) per family"),
    ] = field(default_factory=dict)
    #: what running the work as sub-models costs on the device, beyond their layers (measured
    #: on sub-models timed alone): per sub-model run, per byte of each tensor one takes in and
    #: of each it gives out (layout conversions and copies at its edges)
    segment_run_s: Annotated[Seconds, Doc("per sub-model run", "s")] = 0.0
    segment_in_per_byte_s: Annotated[PerUnit, Doc("per byte a sub-model takes in", "s/B")] = 0.0
    segment_out_per_byte_s: Annotated[PerUnit, Doc("per byte a sub-model gives out", "s/B")] = 0.0
    #: a device receives by copying the data in once its earlier work is done (the runtime's
    #: blocking MPI Recv), so a transfer occupies it; False: transfers overlap its compute
    receive_on_device: Annotated[bool, Doc("a transfer occupies the receiving device")] = False

    @property
    def same_host_per_byte_s(self) -> float:
        """The cost per byte of a tensor crossing between two devices of one host: its own
        (``transfer_per_byte_same_host_s``) or, without one, as between hosts."""
        same = self.transfer_per_byte_same_host_s
        return self.transfer_per_byte_s if same is None else same

    @classmethod
    def from_dict(cls, k: Any, where: str) -> TypeCoefficients:
        """A device type's section (``where``: what a wrong key's line starts with)."""
        return records.read(cls, k, where, FIX, unknown="refuse")

    def to_dict(self) -> dict[str, Any]:
        """Its section of a coefficients file (a default left out where it is null or empty)."""
        return records.to_json(self)


class Curve(TypedDict):
    """A link's measured transfer time, piecewise linear in the message size."""

    bytes: Annotated[
        list[Annotated[float, Range(0, 1e12)]], Items(1000), Doc("message sizes, increasing", "B")
    ]
    seconds: Annotated[list[Seconds], Items(1000), Doc("one-way time of each size", "s")]


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What calibration measured beside the device types: whether it did, and the links."""

    calibrated: Annotated[bool, Doc("measured on the hardware by dse.calibrate")] = False
    #: link class (or ``port:BOARD``) -> its measured transfer time
    links: Annotated[
        dict[LinkName, Annotated[Curve, Doc("measured transfer time")]], Doc("measured links")
    ] = field(default_factory=dict)


@dataclass(frozen=True)
class SpeedReference:
    """How fast calibration's deployment runs found the machine (``dse.runtime.launch.probe``)."""

    whole_ms: Annotated[
        dict[NetName, Annotated[float, Range(1e-3, 1e7), Doc("the whole network alone", "ms")]],
        Doc("speed probe per network"),
    ]
    threads: Annotated[int, Range(1, 4096), Doc("threads of the probe", "threads")]
    fingerprints: Annotated[
        dict[NetName, Annotated[str, Text(64), Doc("the network's fingerprint")]],
        Doc("per network"),
    ] = field(default_factory=dict)
    what: Annotated[str, Text(10_000, empty=True), Doc("what the figures are")] = ""


@dataclass(frozen=True)
class MemoryReference:
    """The RSS a rank of calibration's deployments had before it loaded any sub-model."""

    start_mb: Annotated[MB, Doc("a rank's RSS before it loads", "MB")]
    what: Annotated[str, Text(10_000, empty=True), Doc("what the figure is")] = ""


@dataclass(frozen=True)
class References:
    """Notes calibration leaves for :mod:`dse.fidelity` to compare with: checked as their
    types say, kept in :attr:`Coefficients.notes` as they are written."""

    speed_reference: Annotated[
        SpeedReference | None, Doc("calibration's speed probe (dse.runtime.launch.probe)")
    ] = None
    memory_reference: Annotated[
        MemoryReference | None,
        Doc("the runtime's own memory at calibration (dse.fidelity compares)"),
    ] = None


#: How coefficients were obtained, in the words every output uses
#: (:attr:`Coefficients.calibration`): measured on the hardware by ``dse.calibrate``, by its
#: ``quick=true`` smoke test, or not at all.
CALIBRATED = "calibrated"
QUICK = "calibrated (quick: a smoke test)"
UNCALIBRATED = "uncalibrated"

#: Top-level keys of a coefficients file that are never a type.
RESERVED = tuple(f.key for f in records.fields_of(Measured))


def is_type_section(key: str, value: Any) -> bool:
    """Whether a coefficients file's top-level ``key`` holds a device type's coefficients."""
    return (
        key not in RESERVED and isinstance(value, Mapping) and any(m in value for m in TYPE_MARKERS)
    )


@dataclass(frozen=True)
class Coefficients(Measured):
    """Coefficients per device type, and where they came from (file, calibration, ...);
    ``calibrated`` and ``links``: :class:`Measured`'s."""

    types: dict[str, TypeCoefficients]
    source: str = "in memory"
    notes: dict[str, Any] = field(default_factory=dict)  # description, provenance, spreads

    def __getitem__(self, dtype: str) -> TypeCoefficients:
        return self.types[dtype]

    def __contains__(self, dtype: object) -> bool:
        return dtype in self.types

    @property
    def quick(self) -> bool:
        """Calibrated by ``dse.calibrate quick=true`` (its provenance says so): a smoke test of
        every step, too few measurements for predictions."""
        prov = self.notes.get("provenance")
        return self.calibrated and isinstance(prov, Mapping) and prov.get("quick") is True

    @property
    def calibration(self) -> str:
        """:data:`CALIBRATED`, :data:`QUICK` or :data:`UNCALIBRATED`: what every output that
        names the coefficients says of them."""
        return QUICK if self.quick else CALIBRATED if self.calibrated else UNCALIBRATED

    def index(self, dtype: str) -> int:
        """The type's row in per-type tables (the order of :attr:`types`)."""
        return list(self.types).index(dtype)

    def check_covers(self, platform: Platform) -> None:
        """Fail in one line when a device type of ``platform`` has no coefficients."""
        missing = [t for t in platform.types if t not in self.types]
        if missing:
            devices = [d.name for d in platform.devices if d.type == missing[0]]
            raise DseError(
                f"coefficients {self.source} have no '{missing[0]}' section but platform "
                f"'{platform.name}' has devices of that type ({', '.join(devices)}): add a "
                f"'{missing[0]}' section (its types: {', '.join(self.types)}) or calibrate "
                f"the platform"
            )

    @classmethod
    def from_dict(cls, raw: Any, source: str = "in memory") -> Coefficients:
        """A coefficients document (from ``source``) read by its classes: one line naming the
        file and the first key that is wrong."""
        where = f"coefficients {source}"
        if not isinstance(raw, Mapping):
            raise DseError(
                f"{where} must be a JSON object with a section per device type (such as 'cpu')"
            )
        _depth(raw, where)
        sections = {k: v for k, v in raw.items() if is_type_section(str(k), v)}
        types = records.read(dict[TypeName, TypeCoefficients], sections, where, FIX, "refuse")
        if not types:
            raise DseError(
                f"{where} have no device type section (such as 'cpu': {{frequency_hz, layer, ...}})"
            )
        measured = _keys_of(Measured, raw, where)
        _keys_of(References, raw, where)
        for name, curve in measured.links.items():
            _check_curve(curve, f"{where}: links.{name}")
        notes = {k: v for k, v in raw.items() if k not in (*types, *RESERVED)}
        return cls(types, source, notes, **vars(measured))

    def to_dict(self) -> dict[str, Any]:
        types = {k: c.to_dict() for k, c in self.types.items()}
        extra = {"links": self.links} if self.links else {}
        return {**self.notes, "calibrated": self.calibrated, **extra, **types}


def _keys_of(cls: type[records.T], raw: Mapping[str, Any], where: str) -> records.T:
    """The top-level keys of ``raw`` that record ``cls`` declares, read as it."""
    keys = {f.key for f in records.fields_of(cls)}
    return records.read(cls, {k: v for k, v in raw.items() if k in keys}, where, FIX, "refuse")


def _check_curve(curve: Curve, where: str) -> None:
    """A curve's sizes increase and each has its time."""
    xs, ys = curve["bytes"], curve["seconds"]
    if not xs or len(xs) != len(ys):
        raise DseError(
            f"{where}: needs 'bytes' and 'seconds' lists of one length, not {len(xs)} and "
            f"{len(ys)} ({FIX})"
        )
    if any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
        raise DseError(f"{where}: 'bytes' must increase ({FIX})")


def _depth(doc: Any, where: str) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` (without recursing: a document built in
    memory may be deeper than Python's recursion limit)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise DseError(f"{where} is nested more than {MAX_DEPTH} deep ({FIX})")
        children = value.values() if isinstance(value, Mapping) else value
        if isinstance(value, Mapping | list):
            stack.extend((v, depth + 1) for v in children if isinstance(v, Mapping | list))


def reference() -> tuple[str, str]:
    """The file's format as two Markdown tables: a device type's section, and the other
    top-level keys."""
    rest = record_tables.reference(References).split("\n", 2)[2]  # its rows, without the header
    return record_tables.reference(TypeCoefficients), record_tables.reference(Measured) + rest


def load_coefficients(path: str | Path) -> Coefficients:
    """A coefficients file, read as a user's JSON (size, nesting, duplicate keys, NaN: one
    line, :func:`dse.files.read_json`) and by its classes (:meth:`Coefficients.from_dict`)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DseError(f"coefficients file not found: {p} (set coefficients=PATH)")
    raw = read_json(str(p), "coefficients", max_bytes=MAX_BYTES)
    return Coefficients.from_dict(raw, p.name)
