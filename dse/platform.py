"""Hardware: devices (host, kind, threads, memory), link classes and the entry device.

No cost figure lives here: the runtime needs the hardware without any model, and calibration
writes coefficients (``models_analytical.coefficients``) without touching it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.values import number

KINDS = ("cpu", "gpu")
#: Link classes, from cheapest to dearest; `same_device` is a tensor staying in one process.
LINK_CLASSES = ("same_device", "cpu_gpu", "same_host", "network")


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
class Platform:
    name: str
    devices: tuple[Device, ...]
    links: dict[str, Link]
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
    if not isinstance(cfg, Mapping):
        raise DseError(f"{where} must be a mapping of keys to values, not {cfg!r}")
    if key not in cfg or cfg[key] is None:
        raise DseError(f"{where} is missing '{key}'")
    return cfg[key]


def _devices(cfg: Mapping[str, Any], name: str) -> list[Device]:
    where = f"platform '{name}'"
    if cfg.get("devices"):
        specs = _list(cfg["devices"], f"{where}: devices")
    elif cfg.get("hosts"):
        resources = _need(cfg, "resources", where)
        if not isinstance(resources, Mapping) or isinstance(cfg["hosts"], str | Mapping):
            raise DseError(f"{where}: hosts must be a list and resources a mapping")
        for r, spec in resources.items():
            if not isinstance(spec, Mapping):
                raise DseError(f"{where}: resource '{r}' must be a mapping, not {spec!r}")
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
                threads=int(
                    number(s.get("threads", 1), f"{dw}: threads", positive=True, integer=True)
                ),
                memory_mb=number(s["memory_mb"], f"{dw}: memory_mb", positive=True),
            )
        )
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        raise DseError(f"{where} has duplicate device names")
    return devices


def _list(value: Any, where: str) -> list[Any]:
    """A list from the config (a string or a mapping is refused, not iterated)."""
    if isinstance(value, str | bytes | Mapping) or not hasattr(value, "__iter__"):
        raise DseError(f"{where} must be a list, not {value!r}")
    return list(value)


def _link(spec: Mapping[str, Any], where: str) -> Link:
    return Link(
        number(_need(spec, "latency_s", where), f"{where}: latency_s"),
        number(_need(spec, "bandwidth_Bps", where), f"{where}: bandwidth_Bps", positive=True),
        number(spec.get("energy_J_per_byte", 0.0), f"{where}: energy_J_per_byte"),
    )


def load_platform(cfg: Mapping[str, Any]) -> Platform:
    """The hardware from its config mapping (``conf/platform/NAME.yaml``)."""
    if not isinstance(cfg, Mapping):
        raise DseError("platform must be a mapping (conf/platform/NAME.yaml)")
    name = str(cfg.get("name", "platform"))
    devices = _devices(cfg, name)
    links_cfg = cfg.get("links") or {}
    if not isinstance(links_cfg, Mapping):
        raise DseError(f"platform '{name}': links must be a mapping of link classes")
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
    index = {d.name: i for i, d in enumerate(devices)}
    entry_name = str(cfg.get("entry") or devices[0].name)
    if entry_name not in index:
        raise DseError(f"platform '{name}': entry device '{entry_name}' is not one of its devices")
    pairs = {}
    for i, spec in enumerate(_list(cfg.get("pairs") or [], f"platform '{name}': pairs")):
        a, b = str(_need(spec, "a", f"pair {i}")), str(_need(spec, "b", f"pair {i}"))
        if a not in index or b not in index:
            raise DseError(f"platform '{name}', pair {i}: unknown device '{a}' or '{b}'")
        link = _link(spec, f"platform '{name}', pair {a}-{b}")
        pairs[index[a], index[b]] = pairs[index[b], index[a]] = link
    shared = cfg.get("shared_network", False)
    if not isinstance(shared, bool):
        raise DseError(f"platform '{name}': shared_network must be true or false, not {shared!r}")
    weights = str(cfg.get("weights", "resident"))
    if weights not in ("resident", "streamed"):
        raise DseError(f"platform '{name}': weights must be resident or streamed")
    return Platform(
        name=name,
        devices=tuple(devices),
        links=links,
        entry=index[entry_name],
        weights=weights,
        shared_network=shared,
        pair_links=pairs,
    )
