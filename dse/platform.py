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
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np

from dse import records
from dse.errors import DseError
from dse.records import Range, Text

Kind = Literal["cpu", "gpu"]
#: How boards are joined (see the module docstring).
Network = Literal["pairs", "switched", "shared"]
#: The link classes a platform gives figures for, from cheapest to dearest.
LinkClass = Literal["cpu_gpu", "same_host", "network"]
KINDS: tuple[str, ...] = typing.get_args(Kind)
NETWORKS: tuple[str, ...] = typing.get_args(Network)
#: Link classes; `same_device` is a tensor staying in one process.
LINK_CLASSES: tuple[str, ...] = ("same_device", *typing.get_args(LinkClass))
#: A device type's name: what a coefficients file's top-level keys are.
TYPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
Name = Annotated[str, Text(255)]
Seconds = Annotated[float, Range(0)]
Rate = Annotated[float, Range(0, lo_open=True)]  # bytes per second
Mbit = Annotated[float, Range(0, lo_open=True)]  # Mbit/s
Share = Annotated[float, Range(0, 1, lo_open=True)]  # of a board's CPUs
Factor = Annotated[float, Range(0, lo_open=True)]  # against a calibrated figure: 1 as it is


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
    latency_s: Seconds
    bandwidth_Bps: Rate
    energy_J_per_byte: Annotated[float, Range(0)] = 0.0


@dataclass(frozen=True)
class PortProfile:
    """A board's port under a profile: its rate, or a factor on its bandwidth (one of them)."""

    rate_mbit: Mbit | None = None
    factor: Factor | None = None


@dataclass(frozen=True)
class Profile:
    """Conditions a plan must hold under (``profiles:``), besides the nominal: the network
    between boards at a rate (``network_mbit``: every port and link between boards at it) or
    a factor on its bandwidth (``network``), a board's port at its own rate or factor
    (``ports``, over the network's), a device at a factor of its calibrated speed (``speed``:
    0.5, its work takes twice as long). Made the model's conditions by
    :func:`models_analytical.conditions.profile_conditions`."""

    network_mbit: Mbit | None = None
    network: Factor | None = None
    ports: dict[Name, PortProfile] = field(default_factory=dict)
    speed: dict[Name, Factor] = field(default_factory=dict)


#: The name of the conditions the platform's figures describe: always one of its profiles.
NOMINAL = "nominal"


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
    #: conditions a plan must hold under besides the nominal, by name (their names checked)
    profiles: dict[str, Profile] = field(default_factory=dict)

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


# --- the platform's file -----------------------------------------------------------------------

#: What a wrong platform's one line ends with.
FIX = "correct the platform's YAML file"


@dataclass(frozen=True, kw_only=True)
class Resource:
    """A device as its board holds it (``resources:``, one of each on every host); ``type``
    null: its kind."""

    kind: Kind
    memory_mb: Annotated[float, Range(0, lo_open=True)]
    threads: Annotated[int, Range(1)] = 1
    type: Name | None = None


@dataclass(frozen=True, kw_only=True)
class DeviceEntry(Resource):
    """One device of ``devices:``, on board ``host``; ``name`` null: ``<host>_<resource>``,
    ``resource`` null: its kind."""

    host: Name
    name: Name | None = None
    resource: Name | None = None


@dataclass(frozen=True, kw_only=True)
class PairLink(Link):
    """A device pair's own link figures (``pairs:``), both ways."""

    a: Name
    b: Name


@dataclass(frozen=True)
class Port:
    """A board's port on a switched network; a figure left out is the ``network`` class's."""

    latency_s: Seconds | None = None
    bandwidth_Bps: Rate | None = None


@dataclass(frozen=True)
class BoardEmulation:
    """A board of an emulated cluster: the CPUs of this machine it gets, on a switched
    network only its port's own rate (null: ``emulation.rate_mbit``), and the size of its own
    disk (its home, ``/tmp`` and ``/var/tmp``: memory, used only as it fills)."""

    cpus: list[Annotated[int, Range(0)]]
    rate_mbit: Mbit | None = None
    disk_mb: Annotated[int, Range(16, 1 << 20)] = 4096


@dataclass(frozen=True)
class DeviceEmulation:
    """A device's share of its board's CPUs (null: an equal split of the board)."""

    share: Share | None = None


@dataclass(frozen=True)
class Emulation:
    """How a cluster emulates the platform on this machine (``emulation:``, made a cluster by
    :mod:`dse.cluster.spec`): a board per host, its network, rates and the devices' shares."""

    rate_mbit: Mbit  # switched: every port's rate; shared: the medium's
    boards: dict[Name, BoardEmulation]
    network: Literal["switched", "shared"] = "switched"
    devices: dict[Name, DeviceEmulation] = field(default_factory=dict)


@dataclass(frozen=True)
class Reach:
    """How dse reaches the platform's hosts to run on them (real boards; an emulated cluster
    brings its own): ``ssh``, the command a host's name and a command follow (e.g.
    ``ssh -F ~/.ssh/boards``); ``area``, the folder (absolute) each host keeps deployments in,
    copied there before a run; ``shared_disk``, every host sees this machine's deployment
    folders at their own paths (a shared file system): nothing is copied."""

    ssh: Annotated[str, Text(1024)] = "ssh"
    area: Annotated[str, Text(1024)] = "/var/tmp/dse"
    shared_disk: bool = False


@dataclass(frozen=True)
class PlatformFile:
    """A platform's config (``conf/platform/NAME.yaml``), every key it may hold: its devices
    are ``devices``, or each of ``resources`` on every one of ``hosts``."""

    name: Name = "platform"
    coefficients: Name | None = None  # its coefficients file (read by dse.app)
    entry: Name | None = None  # the device where the input enters; null: the first
    weights: Literal["resident", "streamed"] = "resident"
    network: Network | None = None  # null: shared where shared_network says, else pairs
    shared_network: bool | None = None  # the older key for network: shared
    devices: list[DeviceEntry] = field(default_factory=list)
    hosts: list[Name] = field(default_factory=list)
    resources: dict[Name, Resource] = field(default_factory=dict)
    links: dict[LinkClass, Link] = field(default_factory=dict)
    pairs: list[PairLink] = field(default_factory=list)
    ports: dict[Name, Port] = field(default_factory=dict)
    emulation: Emulation | None = None
    reach: Reach = field(default_factory=Reach)
    profiles: dict[Name, Profile] = field(default_factory=dict)


def load_platform(cfg: Mapping[str, Any]) -> Platform:
    """The hardware from its config mapping (``conf/platform/NAME.yaml``): its keys read
    (:func:`read_platform`), then held to the rules between them (:func:`resolve`)."""
    return resolve(read_platform(cfg))


def read_platform(cfg: Mapping[str, Any]) -> PlatformFile:
    """A platform's config mapping as :class:`PlatformFile`: a key it does not declare refused,
    naming the closest; a number PyYAML left as text (``5.0e9``) read as YAML 1.2 and Hydra
    read it; one line naming the first key that is wrong."""
    named = isinstance(cfg, Mapping) and isinstance(cfg.get("name"), str)
    where = f"platform '{cfg['name']}'" if named else "platform"
    raw = dict(cfg) if isinstance(cfg, Mapping) else cfg
    return records.read(PlatformFile, raw, where, FIX, unknown="refuse", text_numbers=True)


def _fail(where: str, problem: str) -> DseError:
    return DseError(f"{where}: {problem}")


def resolve(f: PlatformFile) -> Platform:
    """The platform a file describes, once its keys agree (one line naming the first that does
    not): its devices, the link figures they need, entry, pairs, network and ports."""
    where = f"platform '{f.name}'"
    devices = _devices(f, where)
    index = {d.name: i for i, d in enumerate(devices)}
    _check_links(f, devices, where)
    entry = f.entry or devices[0].name
    if entry not in index:
        raise _fail(where, f"entry device '{entry}' is not one of its devices ({', '.join(index)})")
    pairs = {}
    for i, p in enumerate(f.pairs):
        if p.a not in index or p.b not in index:
            raise _fail(where, f"pairs[{i}]: unknown device '{p.a}' or '{p.b}'")
        link = Link(p.latency_s, p.bandwidth_Bps, p.energy_J_per_byte)
        pairs[index[p.a], index[p.b]] = pairs[index[p.b], index[p.a]] = link
    network = _network(f, where)
    return Platform(
        name=f.name,
        devices=tuple(devices),
        links={str(k): v for k, v in f.links.items()},
        entry=index[entry],
        weights=f.weights,
        network=network,
        pair_links=pairs,
        ports=_ports(f, where, network, [d.host for d in devices]),
        profiles=_profiles(f, where, devices),
    )


def _devices(f: PlatformFile, where: str) -> list[Device]:
    if f.devices and (f.hosts or f.resources):
        raise _fail(where, "give either devices or hosts and resources, not both")
    if f.hosts and not f.resources:
        raise _fail(where, "hosts are given without resources: add resources (the devices of each)")
    if not f.devices and not f.hosts:
        raise _fail(where, "lists no devices: give 'devices' or 'hosts' and 'resources'")
    entries: list[tuple[str, str, str, Resource]] = [
        (f"devices[{i}]", d.name or f"{d.host}_{d.resource or d.kind}", d.host, d)
        for i, d in enumerate(f.devices)
    ]
    entries += [
        (f"resources.{r}", f"{h}_{r}", h, spec) for h in f.hosts for r, spec in f.resources.items()
    ]
    devices = []
    for at, name, host, d in entries:
        if d.type is not None and not TYPE_NAME.fullmatch(d.type):
            raise _fail(
                where, f"{at}.type: '{d.type}' must be a name of letters, digits, '_', '.' and '-'"
            )
        devices.append(Device(name, host, d.kind, d.threads, d.memory_mb, d.type or d.kind))
    names = [d.name for d in devices]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise _fail(where, f"has duplicate device names ({', '.join(twice)}): name each once")
    return devices


def _check_links(f: PlatformFile, devices: list[Device], where: str) -> None:
    """Every link class between two of its devices has its figures."""
    hosts = {d.host for d in devices}
    needed = {"network"} if len(hosts) > 1 else set()
    for h in hosts:
        on = [d for d in devices if d.host == h]
        if len({d.kind for d in on}) > 1:
            needed.add("cpu_gpu")
        if any(sum(d.kind == k for d in on) > 1 for k in KINDS):
            needed.add("same_host")
    for cls in LINK_CLASSES:
        if cls in needed and cls not in f.links:
            raise _fail(
                where,
                f"has no link figures for '{cls}': set links.{cls}.latency_s and "
                f"links.{cls}.bandwidth_Bps",
            )


def _network(f: PlatformFile, where: str) -> str:
    """``network`` (NETWORKS), agreeing with the older ``shared_network`` where both are set."""
    if f.network is None:
        return "shared" if f.shared_network else "pairs"
    if f.shared_network is not None and f.shared_network != (f.network == "shared"):
        raise _fail(
            where,
            f"network is {f.network} but shared_network is {str(f.shared_network).lower()}: "
            "remove shared_network (network says it)",
        )
    return f.network


def _ports(f: PlatformFile, where: str, network: str, hosts: list[str]) -> dict[str, Link]:
    """The ports of a switched network's boards, each figure defaulting to the network link
    class's."""
    if not f.ports:
        return {}
    if network != "switched":
        raise _fail(where, "ports are a switched network's: set network: switched or remove them")
    default = f.links.get("network")
    ports = {}
    for board, port in f.ports.items():
        if board not in hosts:
            raise _fail(
                where,
                f"ports.{board}: '{board}' is not a board of the platform (its boards: "
                f"{', '.join(dict.fromkeys(hosts))})",
            )
        lat, bw = port.latency_s, port.bandwidth_Bps
        if default is not None:
            lat = default.latency_s if lat is None else lat
            bw = default.bandwidth_Bps if bw is None else bw
        if lat is None or bw is None:  # one board: no network class to default to
            missing = "latency_s" if lat is None else "bandwidth_Bps"
            raise _fail(where, f"ports.{board} has no {missing}: set it or links.network")
        ports[board] = Link(lat, bw, default.energy_J_per_byte if default else 0.0)
    return ports


def _profiles(f: PlatformFile, where: str, devices: list[Device]) -> dict[str, Profile]:
    """The profiles, each setting something, of the platform's devices and boards, the
    network's only where there is one."""
    names = [d.name for d in devices]
    boards = list(dict.fromkeys(d.host for d in devices))
    for name, p in f.profiles.items():
        at = f"profiles.{name}"
        if name == NOMINAL:
            raise _fail(
                where,
                f"{at}: the nominal conditions (the platform's figures) are always a profile: "
                "give this one another name",
            )
        if p.network is not None and p.network_mbit is not None:
            raise _fail(where, f"{at}: give network_mbit or network, not both")
        if not (p.ports or p.speed) and p.network is None and p.network_mbit is None:
            raise _fail(where, f"{at} sets nothing: give network_mbit, network, ports or speed")
        if (p.network is not None or p.network_mbit is not None or p.ports) and len(boards) < 2:
            raise _fail(where, f"{at}: the platform has one board, no network: set speed only")
        for device in p.speed:
            if device not in names:
                raise _fail(
                    where,
                    f"{at}.speed.{device}: '{device}' is not a device of the platform (its "
                    f"devices: {', '.join(names)})",
                )
        for board, port in p.ports.items():
            if board not in boards:
                raise _fail(
                    where,
                    f"{at}.ports.{board}: '{board}' is not a board of the platform (its "
                    f"boards: {', '.join(boards)})",
                )
            if (port.rate_mbit is None) == (port.factor is None):
                raise _fail(where, f"{at}.ports.{board}: give rate_mbit or factor, one of them")
    return dict(f.profiles)
