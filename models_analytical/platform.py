"""Platforms: devices, link classes and calibrated coefficients, loaded from config + JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import DseError

KINDS = ("cpu", "gpu")
#: Link classes, from cheapest to dearest; `same_device` is a tensor staying in one process.
LINK_CLASSES = ("same_device", "cpu_gpu", "same_host", "network")
#: Op classes of the compute model (Eq. 4.7 keeps one coefficient per class and device kind).
OP_CLASSES = ("conv_winograd", "conv", "fc", "elementwise")
#: What a device draws (W) while computing each op class, during per-layer overhead, and idle.
POWER_CLASSES = (*OP_CLASSES, "overhead", "idle")


@dataclass(frozen=True)
class Device:
    name: str  # "<host>_<resource>", the AutoDiCE resource key
    host: str
    kind: str  # cpu | gpu
    threads: int
    memory_mb: float


@dataclass(frozen=True)
class Link:
    latency_s: float
    bandwidth_Bps: float
    energy_J_per_byte: float = 0.0


@dataclass(frozen=True)
class KindCoefficients:
    """Calibrated values for one device kind (section 4.3, extended)."""

    frequency_hz: float
    layer: dict[str, float]  # Eq. 4.7: time = MACs / (frequency * layer[op class])
    layer_overhead_s: float  # fixed cost of running one layer (dispatch, sync)
    memory_coefficient: float  # Eq. 4.9: memory = expected * coefficient + bias
    memory_bias_mb: float
    memory_per_layer_mb: float  # runtime structures per layer held by the device
    power_w: dict[str, float]  # per op class, 'overhead' and 'idle'


@dataclass(frozen=True)
class Platform:
    name: str
    devices: tuple[Device, ...]
    links: dict[str, Link]
    coefficients: dict[str, KindCoefficients]
    entry: int  # device where the input image enters
    weights: str = "resident"  # resident | streamed (weights loaded layer by layer)
    shared_network: bool = False  # network transfers queue on one shared medium (Wi-Fi)
    pair_links: dict[tuple[int, int], Link] = field(default_factory=dict)

    @property
    def keys(self) -> list[str]:
        return [d.name for d in self.devices]

    def __len__(self) -> int:
        return len(self.devices)

    def link_class(self, a: int, b: int) -> str:
        if a == b:
            return "same_device"
        da, db = self.devices[a], self.devices[b]
        if da.host != db.host:
            return "network"
        return "cpu_gpu" if da.kind != db.kind else "same_host"

    def link(self, a: int, b: int) -> Link:
        return self.pair_links.get((a, b)) or self.links[self.link_class(a, b)]

    def link_arrays(self) -> dict[str, np.ndarray]:
        """Per device pair: latency, seconds per byte, energy per byte and queue (channel) id."""
        n = len(self.devices)
        lat, inv_bw, e_byte = (np.zeros((n, n)) for _ in range(3))
        channel = np.zeros((n, n), dtype=np.int64)
        for a in range(n):
            for b in range(n):
                channel[a, b] = a * n + b
                if a == b:
                    continue
                link = self.link(a, b)
                lat[a, b], inv_bw[a, b] = link.latency_s, 1.0 / link.bandwidth_Bps
                e_byte[a, b] = link.energy_J_per_byte
                if self.shared_network and self.link_class(a, b) == "network":
                    channel[a, b] = n * n  # one medium: every network transfer queues on it
        return {"latency": lat, "inv_bw": inv_bw, "energy": e_byte, "channel": channel}


# --- loading --------------------------------------------------------------------------------


def _need(cfg: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise DseError(f"{where} is missing '{key}'")
    return cfg[key]


def load_coefficients(path: str | Path) -> dict[str, KindCoefficients]:
    p = Path(path)
    if not p.is_file():
        raise DseError(f"coefficients file not found: {p} (set platform.coefficients)")
    try:
        raw = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise DseError(f"coefficients file {p} is not valid JSON: {exc}") from None
    out = {}
    for kind in KINDS:
        if kind not in raw:
            continue
        k = raw[kind]
        where = f"coefficients file {p.name}, '{kind}'"
        layer = _need(k, "layer", where)
        for cls in OP_CLASSES:
            if cls not in layer:
                raise DseError(f"{where}.layer is missing '{cls}'")
        mem = _need(k, "memory", where)
        power = _need(k, "power_w", where)
        for cls in POWER_CLASSES:
            if cls not in power:
                raise DseError(f"{where}.power_w is missing '{cls}'")
        out[kind] = KindCoefficients(
            frequency_hz=float(_need(k, "frequency_hz", where)),
            layer={c: float(layer[c]) for c in OP_CLASSES},
            layer_overhead_s=float(_need(k, "layer_overhead_s", where)),
            memory_coefficient=float(_need(mem, "coefficient", where + ".memory")),
            memory_bias_mb=float(_need(mem, "bias_mb", where + ".memory")),
            memory_per_layer_mb=float(_need(mem, "per_layer_mb", where + ".memory")),
            power_w={c: float(power[c]) for c in POWER_CLASSES},
        )
    if not out:
        raise DseError(f"coefficients file {p} has no 'cpu' or 'gpu' section")
    return out


def _devices(cfg: Mapping[str, Any], name: str) -> list[Device]:
    where = f"platform '{name}'"
    if cfg.get("devices"):
        specs = list(cfg["devices"])
    elif cfg.get("hosts"):
        resources = _need(cfg, "resources", where)
        specs = [
            {"host": h, "resource": r, **dict(spec)}
            for h in cfg["hosts"]
            for r, spec in resources.items()
        ]
    else:
        raise DseError(f"{where} lists no devices: give 'devices' or 'hosts' and 'resources'")
    devices = []
    for i, s in enumerate(specs):
        dw = f"{where}, device {i}"
        host = str(_need(s, "host", dw))
        kind = str(_need(s, "kind", dw))
        if kind not in KINDS:
            raise DseError(f"{dw}: kind '{kind}' must be one of {', '.join(KINDS)}")
        if s.get("memory_mb") is None:
            raise DseError(f"{dw} ({host}) has no memory capacity: set memory_mb")
        devices.append(
            Device(
                name=str(s.get("name") or f"{host}_{s.get('resource', kind)}"),
                host=host,
                kind=kind,
                threads=int(s.get("threads", 1)),
                memory_mb=float(s["memory_mb"]),
            )
        )
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        raise DseError(f"{where} has duplicate device names")
    return devices


def _link(spec: Mapping[str, Any], where: str) -> Link:
    bw = float(_need(spec, "bandwidth_Bps", where))
    if bw <= 0:
        raise DseError(f"{where}: bandwidth_Bps must be positive")
    return Link(
        float(_need(spec, "latency_s", where)), bw, float(spec.get("energy_J_per_byte", 0.0))
    )


def load_platform(cfg: Mapping[str, Any], base_dir: str | Path) -> Platform:
    """A platform from its config mapping; the coefficients path is relative to ``base_dir``."""
    name = str(cfg.get("name", "platform"))
    devices = _devices(cfg, name)
    links_cfg = cfg.get("links") or {}
    kinds_used = {d.kind for d in devices}
    hosts = {d.host for d in devices}
    needed = set()
    if len(hosts) > 1:
        needed.add("network")
    for h in hosts:
        on = [d for d in devices if d.host == h]
        if len({d.kind for d in on}) > 1:
            needed.add("cpu_gpu")
        if any(sum(d.kind == k for d in on) > 1 for k in KINDS):
            needed.add("same_host")
    links = {}
    for cls in LINK_CLASSES[1:]:
        if cls in links_cfg:
            links[cls] = _link(links_cfg[cls], f"platform '{name}', link '{cls}'")
        elif cls in needed:
            raise DseError(
                f"platform '{name}' has no link figures for '{cls}': "
                f"set links.{cls}.latency_s and links.{cls}.bandwidth_Bps"
            )
    coeff_path = Path(str(_need(cfg, "coefficients", f"platform '{name}'")))
    if not coeff_path.is_absolute():
        coeff_path = Path(base_dir) / coeff_path
    coefficients = load_coefficients(coeff_path)
    missing = kinds_used - set(coefficients)
    if missing:
        raise DseError(
            f"coefficients file {coeff_path.name} has no '{sorted(missing)[0]}' "
            f"section but platform '{name}' has such devices"
        )
    index = {d.name: i for i, d in enumerate(devices)}
    entry_name = str(cfg.get("entry") or devices[0].name)
    if entry_name not in index:
        raise DseError(f"platform '{name}': entry device '{entry_name}' is not one of its devices")
    pairs = {}
    for i, spec in enumerate(cfg.get("pairs") or []):
        a, b = str(_need(spec, "a", f"pair {i}")), str(_need(spec, "b", f"pair {i}"))
        if a not in index or b not in index:
            raise DseError(f"platform '{name}', pair {i}: unknown device '{a}' or '{b}'")
        link = _link(spec, f"platform '{name}', pair {a}-{b}")
        pairs[index[a], index[b]] = pairs[index[b], index[a]] = link
    weights = str(cfg.get("weights", "resident"))
    if weights not in ("resident", "streamed"):
        raise DseError(f"platform '{name}': weights must be resident or streamed")
    return Platform(
        name=name,
        devices=tuple(devices),
        links=links,
        coefficients=coefficients,
        entry=index[entry_name],
        weights=weights,
        shared_network=bool(cfg.get("shared_network", False)),
        pair_links=pairs,
    )
