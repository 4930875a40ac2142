"""Fitted model coefficients per device type: built in memory (calibration, tests) or read
from a JSON file. The hardware they describe is :mod:`dse.platform`; nothing here knows it.

A coefficients file is a JSON object whose top-level keys are device types (a platform's
device names its ``type``, by default its kind: ``cpu``, ``gpu``), each the
:class:`TypeCoefficients` of that type, beside notes (``description``, ``provenance``, ...),
``calibrated`` and the measured ``links``. A top-level object is a type's when it has any of
:data:`TYPE_MARKERS`; every other key is a note.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dse.errors import DseError
from dse.files import read_json
from dse.platform import Platform
from dse.values import number
from models_analytical import coefficients_schema as schema

#: Op classes of the compute model (Eq. 4.7 keeps one coefficient per class and device type).
OP_CLASSES = ("conv_winograd", "conv", "fc", "elementwise")
#: What a device draws (W) while computing each op class, during per-layer overhead, and idle.
POWER_CLASSES = (*OP_CLASSES, "overhead", "idle")
#: A regressed layer time is the dot product of these terms with its family's coefficients.
REGRESSION_TERMS = ("1", "macs", "activation_bytes", "weight_bytes")
#: Weights by how onnxruntime holds them: convolutions' (packed for its kernels) and the rest.
WEIGHT_CLASSES = ("conv", "other")
#: Keys only a device type's section has: a top-level object with one of them is a type's.
TYPE_MARKERS = ("frequency_hz", "layer", "layer_overhead_s", "power_w")
#: Top-level keys of a coefficients file that are never a type.
RESERVED = ("calibrated", "links")
#: ``links`` holds a table per link class and, measured on a switched network, one per board's
#: port under this prefix and the board's name (``port:edge1``): a pair of boards then takes,
#: for each size, the slower of its two ports' times.
PORT = "port:"


def port_key(board: str) -> str:
    """The ``links`` key of a board's port table."""
    return PORT + board


def flag(value: Any, where: str) -> bool:
    """``value`` as a bool (JSON true/false), else one clear DseError."""
    if not isinstance(value, bool):
        raise DseError(f"{where} must be true or false, not {value!r}")
    return value


def fraction(value: Any, where: str) -> float:
    """``value`` as a number in [0, 1), else one clear DseError."""
    x = number(value, where)
    if not 0.0 <= x < 1.0:
        raise DseError(f"{where} must be a share in [0, 1), not {value!r}")
    return x


def keyed(value: Any, where: str) -> Mapping:
    """``value`` as a mapping (a JSON object; absent: empty), else one clear DseError."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DseError(f"{where} must be a mapping (a JSON object), not {value!r}")
    return value


@dataclass(frozen=True)
class TypeCoefficients:
    """Calibrated values for one device type (section 4.3, extended): every device of the type
    shares them."""

    frequency_hz: float
    layer: dict[str, float]  # Eq. 4.7: time = MACs / (frequency * layer[op class])
    layer_overhead_s: float  # fixed cost of running one layer (dispatch, sync)
    memory_coefficient: float  # Eq. 4.9: memory = expected * coefficient + bias
    memory_bias_mb: float
    memory_per_layer_mb: float  # runtime structures per layer held by the device
    power_w: dict[str, float]  # per op class, 'overhead' and 'idle'
    # Measured by dse.calibrate (all optional; absent, the model falls back to Eq. 4.7):
    layer_s: dict[str, float] = field(default_factory=dict)  # layer_key -> profiled seconds
    regression: dict[str, list[float]] = field(default_factory=dict)  # family -> REGRESSION_TERMS
    channel_block: int = 1  # a conv part computes its output channels in blocks of this many
    transfer_fixed_s: float = 0.0  # per tensor crossing devices: the segment cut on both ends
    transfer_per_byte_s: float = 0.0  # ... and per byte (layout conversions, copies)
    # per byte crossing between two devices of one host (shared memory, not a network's
    # sockets); None: as transfer_per_byte_s
    transfer_per_byte_same_host_s: float | None = None
    split_work_factor: float = 1.0  # a split layer's parts run side by side: each this slower
    # a device's layers run this much slower while another device of its host has work in the
    # same mapping (they share caches and memory bandwidth; a waiting rank polls for messages)
    shared_host_factor: float = 1.0
    # what every part of a split layer pays whatever its channel share, as a share of the whole
    # layer's time (its input's layout conversion, im2col or Winograd transform): per layer
    # (layer_key -> share, timed alone) and, for layers never timed, per family (family ->
    # share x output channels: the fixed part shrinks as the layer has more channels)
    part_fixed: dict[str, float] = field(default_factory=dict)
    part_fixed_channels: dict[str, float] = field(default_factory=dict)
    # what every band of a layer split by rows pays whatever its rows, as a share of the whole
    # layer's time, per family (family -> share; absent: a band costs its share of the rows)
    row_fixed: dict[str, float] = field(default_factory=dict)
    # what running the work as sub-models costs on the device, beyond their layers (measured
    # on sub-models timed alone): per sub-model run, per byte of each tensor one takes in and
    # of each it gives out (layout conversions and copies at its edges)
    segment_run_s: float = 0.0
    segment_in_per_byte_s: float = 0.0
    segment_out_per_byte_s: float = 0.0
    # a device receives by copying the data in once its earlier work is done (the runtime's
    # blocking MPI Recv), so a transfer occupies it; False: transfers overlap its compute
    receive_on_device: bool = False
    # Calibrated memory, per weight class (WEIGHT_CLASSES; empty: off): while running, bias +
    # coefficient x live activations + weights[class] x that class's weights (MB); while loading,
    # bias + loading[class] x weights (onnxruntime holds some twice, packs conv weights)
    memory_weights: dict[str, float] = field(default_factory=dict)
    memory_loading: dict[str, float] = field(default_factory=dict)
    memory_per_segment_mb: float = 0.0  # per sub-model a device runs (session state)
    # per MB of the buffers the runtime keeps for good (what a device receives or gathers, the
    # input image where it enters); None: memory_coefficient, as for other tensors
    memory_held: float | None = None
    # a rank that runs no sub-model (it only holds or passes on tensors; no onnxruntime session
    # is created there): its baseline instead of memory_bias_mb; None: memory_bias_mb
    memory_empty_mb: float | None = None

    @property
    def same_host_per_byte_s(self) -> float:
        """The cost per byte of a tensor crossing between two devices of one host: its own
        (``transfer_per_byte_same_host_s``) or, without one, as between hosts."""
        same = self.transfer_per_byte_same_host_s
        return self.transfer_per_byte_s if same is None else same

    @classmethod
    def from_dict(cls, k: Mapping[str, Any], where: str) -> TypeCoefficients:
        def need(m: Any, key: str, at: str) -> Any:
            if not isinstance(m, Mapping):
                raise DseError(f"{at} must be a mapping, not {m!r}")
            if m.get(key) is None:
                raise DseError(f"{at} is missing '{key}'")
            return m[key]

        def table(key: str, names: tuple[str, ...], positive: bool) -> dict[str, float]:
            m = need(k, key, where)
            return {
                c: number(need(m, c, f"{where}.{key}"), f"{where}.{key}.{c}", positive=positive)
                for c in names
            }

        mem = need(k, "memory", where)
        return cls(
            frequency_hz=number(
                need(k, "frequency_hz", where), f"{where}.frequency_hz", positive=True
            ),
            layer=table("layer", OP_CLASSES, positive=True),
            layer_overhead_s=number(
                need(k, "layer_overhead_s", where), f"{where}.layer_overhead_s"
            ),
            memory_coefficient=number(
                need(mem, "coefficient", f"{where}.memory"),
                f"{where}.memory.coefficient",
                positive=True,
            ),
            memory_bias_mb=number(
                need(mem, "bias_mb", f"{where}.memory"), f"{where}.memory.bias_mb"
            ),
            memory_per_layer_mb=number(
                need(mem, "per_layer_mb", f"{where}.memory"), f"{where}.memory.per_layer_mb"
            ),
            power_w=table("power_w", POWER_CLASSES, positive=False),
            layer_s={
                str(key): number(v, f"{where}.layer_s.{key}")
                for key, v in dict(k.get("layer_s") or {}).items()
            },
            regression={
                str(fam): [number(x, f"{where}.regression.{fam}") for x in v]
                for fam, v in dict(k.get("regression") or {}).items()
                if isinstance(v, list) and len(v) == len(REGRESSION_TERMS)
            },
            channel_block=int(
                number(k.get("channel_block", 1), f"{where}.channel_block", positive=True)
            ),
            transfer_fixed_s=number(k.get("transfer_fixed_s", 0.0), f"{where}.transfer_fixed_s"),
            transfer_per_byte_s=number(
                k.get("transfer_per_byte_s", 0.0), f"{where}.transfer_per_byte_s"
            ),
            transfer_per_byte_same_host_s=None
            if k.get("transfer_per_byte_same_host_s") is None
            else number(
                k["transfer_per_byte_same_host_s"], f"{where}.transfer_per_byte_same_host_s"
            ),
            split_work_factor=number(
                k.get("split_work_factor", 1.0), f"{where}.split_work_factor", positive=True
            ),
            shared_host_factor=number(
                k.get("shared_host_factor", 1.0), f"{where}.shared_host_factor", positive=True
            ),
            part_fixed={
                str(key): fraction(v, f"{where}.part_fixed.{key}")
                for key, v in keyed(k.get("part_fixed"), f"{where}.part_fixed").items()
            },
            part_fixed_channels={
                str(fam): number(v, f"{where}.part_fixed_channels.{fam}")
                for fam, v in keyed(
                    k.get("part_fixed_channels"), f"{where}.part_fixed_channels"
                ).items()
            },
            row_fixed={
                str(fam): fraction(v, f"{where}.row_fixed.{fam}")
                for fam, v in keyed(k.get("row_fixed"), f"{where}.row_fixed").items()
            },
            segment_run_s=number(k.get("segment_run_s", 0.0), f"{where}.segment_run_s"),
            segment_in_per_byte_s=number(
                k.get("segment_in_per_byte_s", 0.0), f"{where}.segment_in_per_byte_s"
            ),
            segment_out_per_byte_s=number(
                k.get("segment_out_per_byte_s", 0.0), f"{where}.segment_out_per_byte_s"
            ),
            receive_on_device=flag(k.get("receive_on_device", False), f"{where}.receive_on_device"),
            memory_weights={
                c: number(v, f"{where}.memory.weights.{c}")
                for c, v in dict(mem.get("weights") or {}).items()
                if c in WEIGHT_CLASSES
            },
            memory_loading={
                c: number(v, f"{where}.memory.loading.{c}")
                for c, v in dict(mem.get("loading") or {}).items()
                if c in WEIGHT_CLASSES
            },
            memory_per_segment_mb=number(
                mem.get("per_segment_mb", 0.0), f"{where}.memory.per_segment_mb"
            ),
            memory_held=None
            if mem.get("held") is None
            else number(mem["held"], f"{where}.memory.held"),
            memory_empty_mb=None
            if mem.get("empty_mb") is None
            else number(mem["empty_mb"], f"{where}.memory.empty_mb"),
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["memory"] = {
            "coefficient": d.pop("memory_coefficient"),
            "bias_mb": d.pop("memory_bias_mb"),
            "per_layer_mb": d.pop("memory_per_layer_mb"),
            "weights": d.pop("memory_weights"),
            "loading": d.pop("memory_loading"),
            "per_segment_mb": d.pop("memory_per_segment_mb"),
            "held": d.pop("memory_held"),
            "empty_mb": d.pop("memory_empty_mb"),
        }
        return d


def is_type_section(key: str, value: Any) -> bool:
    """Whether a coefficients file's top-level ``key`` holds a device type's coefficients."""
    return (
        key not in RESERVED and isinstance(value, Mapping) and any(m in value for m in TYPE_MARKERS)
    )


@dataclass(frozen=True)
class Coefficients:
    """Coefficients per device type, and where they came from (file, calibration, ...)."""

    types: dict[str, TypeCoefficients]
    source: str = "in memory"
    calibrated: bool = False  # True when measured on the hardware by dse.calibrate
    notes: dict[str, Any] = field(default_factory=dict)  # description, provenance, spreads
    #: link class -> {"bytes": [...], "seconds": [...]}: measured transfer time, piecewise linear
    links: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def __getitem__(self, dtype: str) -> TypeCoefficients:
        return self.types[dtype]

    def __contains__(self, dtype: object) -> bool:
        return dtype in self.types

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
        if not isinstance(raw, Mapping):
            raise DseError(
                f"coefficients {source} must be a JSON object with a section per device type "
                "(such as 'cpu')"
            )
        schema.check(raw, source, [k for k, v in raw.items() if is_type_section(str(k), v)])
        types = {
            str(k): TypeCoefficients.from_dict(v, f"coefficients {source}, '{k}'")
            for k, v in raw.items()
            if is_type_section(str(k), v)
        }
        if not types:
            raise DseError(
                f"coefficients {source} have no device type section (such as 'cpu': "
                "{frequency_hz, layer, ...})"
            )
        notes = {k: v for k, v in raw.items() if k not in (*types, *RESERVED)}
        links = {}
        for cls_, tab in dict(raw.get("links") or {}).items():
            where = f"coefficients {source}, links.{cls_}"
            if not isinstance(tab, Mapping) or not tab.get("bytes") or not tab.get("seconds"):
                raise DseError(f"{where} needs 'bytes' and 'seconds' lists")
            xs = [number(x, f"{where}.bytes") for x in tab["bytes"]]
            ys = [number(y, f"{where}.seconds") for y in tab["seconds"]]
            if len(xs) != len(ys) or any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
                raise DseError(f"{where}: 'bytes' must increase and match 'seconds' in length")
            links[str(cls_)] = {"bytes": xs, "seconds": ys}
        return cls(types, source, bool(raw.get("calibrated", False)), notes, links)

    def to_dict(self) -> dict[str, Any]:
        types = {k: c.to_dict() for k, c in self.types.items()}
        extra = {"links": self.links} if self.links else {}
        return {**self.notes, "calibrated": self.calibrated, **extra, **types}


def load_coefficients(path: str | Path) -> Coefficients:
    """A coefficients file, read as a user's JSON (size, nesting, duplicate keys, NaN: one
    line, :func:`dse.files.read_json`) and checked against its schema
    (:mod:`models_analytical.coefficients_schema`)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DseError(f"coefficients file not found: {p} (set coefficients=PATH)")
    raw = read_json(str(p), "coefficients", max_bytes=schema.MAX_BYTES)
    return Coefficients.from_dict(raw, p.name)
