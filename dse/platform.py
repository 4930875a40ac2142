"""Hardware: devices (host, kind, type, threads, memory), links and how boards are joined.

No cost figure lives here: the runtime needs the hardware without any model, and calibration
writes coefficients (``models_analytical.coefficients``, keyed by device type) without
touching it.

How a platform's boards (hosts) are joined, its ``network`` (:data:`NETWORKS`), decides the
queues its transfers wait on (:meth:`Platform.link_arrays`):

* ``pairs`` (the default): every ordered device pair is a queue of its own;
* ``switched``: a star through one switch; each board has a port with an egress and an ingress
  queue, and a transfer between boards occupies the sender's egress and the receiver's ingress
  at the slower port's figures (the larger latency, the smaller bandwidth). A port's figures
  are ``ports: {board: {latency_s, bandwidth_Bps}}``, each defaulting to the ``network`` link
  class's;
* ``shared``: one medium (Wi-Fi): every transfer between boards, in either direction, queues
  on one channel (``shared_network: true`` says the same).

Transfers between devices of one board keep their per-pair queue whatever the network.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.values import number

KINDS = ("cpu", "gpu")
#: How boards are joined (see the module docstring).
NETWORKS = ("pairs", "switched", "shared")
#: What a port of a switched network may set (the rest comes from the ``network`` link class).
PORT_KEYS = ("latency_s", "bandwidth_Bps")
#: A device type's name: what a coefficients file's top-level keys are.
TYPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: Link classes, from cheapest to dearest; `same_device` is a tensor staying in one process.
LINK_CLASSES = ("same_device", "cpu_gpu", "same_host", "network")


@dataclass(frozen=True)
class Device:
    name: str  # "<host>_<resource>", the AutoDiCE resource key
    host: str
    kind: str  # cpu | gpu
    threads: int
    memory_mb: float
    #: what its coefficients are keyed by (devices of one type share them); "": its kind
    type: str = ""

    def __post_init__(self) -> None:
        if not self.type:
            object.__setattr__(self, "type", self.kind)


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
    network: str = "pairs"  # how boards are joined: NETWORKS
    pair_links: dict[tuple[int, int], Link] = field(default_factory=dict)
    #: switched: each board's port (host -> figures); a board absent has the network class's
    ports: dict[str, Link] = field(default_factory=dict)

    @property
    def keys(self) -> list[str]:
        return [d.name for d in self.devices]

    @property
    def hosts(self) -> list[str]:
        """The boards, in the order their first device comes."""
        return list(dict.fromkeys(d.host for d in self.devices))

    @property
    def types(self) -> list[str]:
        """The device types, in the order their first device comes."""
        return list(dict.fromkeys(d.type for d in self.devices))

    @property
    def shared_network(self) -> bool:
        """Every transfer between boards queues on one medium (``network: shared``)."""
        return self.network == "shared"

    def port(self, host: str) -> Link:
        """The figures of a board's port on a switched network."""
        return self.ports.get(host) or self.links["network"]

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
        """The figures of a transfer from device a to b: the pair's own (``pairs:``), else,
        between boards of a switched network, the slower port's (the larger latency, the
        smaller bandwidth; energy of the network class), else its link class's."""
        own = self.pair_links.get((a, b))
        if own is not None:
            return own
        cls = self.link_class(a, b)
        if cls == "network" and self.network == "switched":
            pa, pb = self.port(self.devices[a].host), self.port(self.devices[b].host)
            return Link(
                max(pa.latency_s, pb.latency_s),
                min(pa.bandwidth_Bps, pb.bandwidth_Bps),
                self.links["network"].energy_J_per_byte,
            )
        return self.links[cls]

    def queues(self, a: int, b: int) -> tuple[int, int]:
        """The two queues a transfer from device a to b occupies, on the sender's side and on
        the receiver's (one and the same but on a switched network): queue ``a * D + b`` of
        the pair, the medium ``D * D`` (shared), or a's egress port ``D * D + 2 h(a)`` and b's
        ingress port ``D * D + 2 h(b) + 1`` (switched; h: the board's index in :attr:`hosts`).
        """
        n = len(self.devices)
        if a == b or self.link_class(a, b) != "network" or self.network == "pairs":
            return a * n + b, a * n + b
        if self.network == "shared":
            return n * n, n * n  # one medium: every network transfer queues on it
        hosts = self.hosts
        ha, hb = hosts.index(self.devices[a].host), hosts.index(self.devices[b].host)
        return n * n + 2 * ha, n * n + 2 * hb + 1

    def link_arrays(self) -> dict[str, np.ndarray]:
        """Per device pair: latency, seconds per byte, energy per byte and the queues a
        transfer occupies on the sender's and on the receiver's side (:meth:`queues`)."""
        n = len(self.devices)
        lat, inv_bw, e_byte = (np.zeros((n, n)) for _ in range(3))
        send, recv = (np.zeros((n, n), dtype=np.int64) for _ in range(2))
        for a in range(n):
            for b in range(n):
                send[a, b], recv[a, b] = self.queues(a, b)
                if a == b:
                    continue
                link = self.link(a, b)
                lat[a, b], inv_bw[a, b] = link.latency_s, 1.0 / link.bandwidth_Bps
                e_byte[a, b] = link.energy_J_per_byte
        return {
            "latency": lat,
            "inv_bw": inv_bw,
            "energy": e_byte,
            "queue_send": send,
            "queue_recv": recv,
        }


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
        dtype = str(s.get("type") or kind)
        if not TYPE_NAME.fullmatch(dtype):
            raise DseError(
                f"{dw}: type {dtype!r} must be a name of letters, digits, '_', '.' and '-'"
            )
        devices.append(
            Device(
                name=str(s.get("name") or f"{host}_{s.get('resource', kind)}"),
                host=host,
                kind=kind,
                threads=int(
                    number(s.get("threads", 1), f"{dw}: threads", positive=True, integer=True)
                ),
                memory_mb=number(s["memory_mb"], f"{dw}: memory_mb", positive=True),
                type=dtype,
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
    network = _network(cfg, name)
    ports = _ports(cfg, name, network, [d.host for d in devices], links.get("network"))
    weights = str(cfg.get("weights", "resident"))
    if weights not in ("resident", "streamed"):
        raise DseError(f"platform '{name}': weights must be resident or streamed")
    return Platform(
        name=name,
        devices=tuple(devices),
        links=links,
        entry=index[entry_name],
        weights=weights,
        network=network,
        pair_links=pairs,
        ports=ports,
    )


def _network(cfg: Mapping[str, Any], name: str) -> str:
    """``network`` (NETWORKS), agreeing with the older ``shared_network`` where both are set."""
    shared = cfg.get("shared_network")
    if shared is not None and not isinstance(shared, bool):
        raise DseError(f"platform '{name}': shared_network must be true or false, not {shared!r}")
    given = cfg.get("network")
    if given is None:
        return "shared" if shared else "pairs"
    network = str(given)
    if network not in NETWORKS:
        raise DseError(
            f"platform '{name}': network {given!r} is not one of {', '.join(NETWORKS)} "
            "(pairs: a queue per device pair; switched: a port per board; shared: one medium)"
        )
    if shared is not None and shared != (network == "shared"):
        raise DseError(
            f"platform '{name}': network is {network} but shared_network is "
            f"{str(shared).lower()}: remove shared_network (network says it)"
        )
    return network


def _ports(
    cfg: Mapping[str, Any], name: str, network: str, hosts: list[str], default: Link | None
) -> dict[str, Link]:
    """The ports of a switched network's boards (``ports: {board: {latency_s, bandwidth_Bps}}``),
    each figure defaulting to the network link class's."""
    raw = cfg.get("ports")
    if raw is None:
        return {}
    where = f"platform '{name}': ports"
    if not isinstance(raw, Mapping):
        raise DseError(f"{where} must be a mapping of boards to {{latency_s, bandwidth_Bps}}")
    if network != "switched":
        raise DseError(f"{where} are a switched network's: set network: switched or remove them")
    ports = {}
    for board, spec in raw.items():
        pw = f"{where}.{board}"
        if board not in hosts:
            raise DseError(
                f"{pw}: '{board}' is not a board of the platform (its boards: "
                f"{', '.join(dict.fromkeys(hosts))})"
            )
        if not isinstance(spec, Mapping):
            raise DseError(f"{pw} must be a mapping such as {{bandwidth_Bps: 1.25e7}}")
        unknown = sorted(set(spec) - set(PORT_KEYS))
        if unknown:
            raise DseError(f"{pw}: unknown key '{unknown[0]}' (a port has {', '.join(PORT_KEYS)})")
        if default is None:  # one board: no network class to default to
            missing = [k for k in PORT_KEYS if spec.get(k) is None]
            if missing:
                raise DseError(f"{pw} has no {missing[0]}: set it or links.network")
        lat = spec.get("latency_s", default.latency_s if default else None)
        bw = spec.get("bandwidth_Bps", default.bandwidth_Bps if default else None)
        ports[str(board)] = Link(
            number(lat, f"{pw}.latency_s"),
            number(bw, f"{pw}.bandwidth_Bps", positive=True),
            default.energy_J_per_byte if default else 0.0,
        )
    return ports
