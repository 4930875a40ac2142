"""A platform's ``emulation:`` section, checked and frozen: the boards, links and CPU shares.

The section (documented in ``conf/platform/edge3_ethernet.yaml``)::

    emulation:
      network: switched      # switched: a star through one switch, each board's port its rate
                             # shared: one medium (Wi-Fi), every board's traffic on one channel
      rate_mbit: 1000        # switched: every port's rate; shared: the medium's
      boards:                # one per host of the platform: the CPUs of this machine it gets
        edge0: {cpus: [0]}
        edge1: {cpus: [1], rate_mbit: 100}     # switched only: this port's own rate
        edge2: {cpus: [1], disk_mb: 512}       # its own disk (default 4096 MB)
      devices:               # a device's share of its board's CPUs (default: an equal split)
        edge1_cpu0: {share: 0.6}
        edge1_cpu1: {share: 0.4}

The section's keys and values are :class:`dse.platform.Emulation`'s, read with the platform;
here they become the cluster. A device's memory cap is its platform entry's ``memory_mb``. How
a device gets its share of
its board's CPUs is the cluster's ``cpu_share`` (:data:`dse.config.CPU_SHARES`, see
:mod:`dse.cluster.cpu`): ``weight`` (the default), a CPU weight of its share and its ranks paced
to ``s * c`` CPUs on a board of ``c``; ``corunner``, ``s`` of every CPU of its board while
anything runs on it; ``quota``, a CFS quota of ``s * c`` CPUs. A CPU's
devices (of every board holding it) may ask for at most all of it. Everything is checked
before anything is built: one clear line per problem.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dse import records
from dse.cluster.names import MAX_BOARDS, check_board_name, check_cluster_name
from dse.config import check_cpu_share
from dse.errors import DseError
from dse.platform import Device, Emulation, Mbit, Share, read_platform, resolve

#: The kernel refuses a CFS quota under 1 ms and a period over 1 s.
MIN_QUOTA_US = 1000
PERIOD_RANGE_US = (1000, 1_000_000)
#: Shares add up to at most a CPU, give or take rounding (0.6 + 0.3 + 0.1).
SHARE_SLACK = 1e-9


@dataclass(frozen=True)
class Board:
    name: str
    cpus: tuple[int, ...]  # CPUs of this machine
    rate_mbit: float  # its port's rate; on a shared medium, the medium's
    disk_mb: int = 4096  # its own disk (dse.cluster.hosts)


@dataclass(frozen=True)
class DeviceShare:
    name: str
    board: str
    share: float  # of its board's CPUs
    memory_mb: float  # the memory cap


@dataclass(frozen=True)
class ClusterSpec:
    name: str  # the cluster's (default: the platform's)
    platform: str
    network: str  # switched | shared
    rate_mbit: float  # switched: the default port rate; shared: the medium's
    boards: tuple[Board, ...]
    devices: tuple[DeviceShare, ...]
    cfs_period_us: int  # of the quotas (cpu_share quota)
    cpu_share: str = "weight"  # weight | corunner | quota (CPU_SHARES)

    def board(self, name: str) -> Board:
        for b in self.boards:
            if b.name == name:
                return b
        raise KeyError(name)

    def device(self, name: str) -> DeviceShare:
        for d in self.devices:
            if d.name == name:
                return d
        raise KeyError(name)

    def devices_of(self, board: str) -> list[DeviceShare]:
        return [d for d in self.devices if d.board == board]

    @property
    def weighted(self) -> bool:
        """Whether devices share a CPU by CPU weights, their ranks paced to their shares
        (``weight``, ``corunner``), rather than by CFS quotas (``quota``)."""
        return self.cpu_share in ("weight", "corunner")

    def thread_speed(self, device: DeviceShare) -> float:
        """What one thread on the device computes against a whole CPU: under co-runners its
        share of a CPU, under weights (its ranks' pace) and a quota its share of the board's
        CPUs (at most one)."""
        if self.cpu_share == "corunner":
            return device.share
        return min(1.0, device.share * len(self.board(device.board).cpus))

    def quota_us(self, device: DeviceShare) -> int:
        """The device's CFS quota per period, in microseconds."""
        return round(device.share * len(self.board(device.board).cpus) * self.cfs_period_us)

    def pair_rate_mbit(self, a: str, b: str) -> float:
        """What a transfer between two boards gets alone: the slower port, or the medium."""
        if self.network == "shared":
            return self.rate_mbit
        return min(self.board(a).rate_mbit, self.board(b).rate_mbit)

    def as_dict(self) -> dict[str, Any]:
        return records.to_json(self)

    @classmethod
    def from_dict(cls, d: Any, where: str = "the cluster's state") -> ClusterSpec:
        """The spec a cluster's state holds (:meth:`as_dict`; a state written before co-runners
        has no ``cpu_share``: quotas); one line naming ``where`` and the key that is wrong."""
        state = {"cpu_share": "quota", **d} if isinstance(d, dict) else d
        return records.read(cls, state, f"{where}: spec", "run `down` and `up` again")


def describe_shares(cpu_share: str, cfs_period_us: int) -> str:
    """How a cluster's devices get their CPU shares, in words (``up``'s and the check's)."""
    if cpu_share == "corunner":
        return "CPU shares by co-runners"
    if cpu_share == "weight":
        return "CPU shares by CPU weights and paced ranks"
    return f"CPU shares by CFS quotas of period {cfs_period_us / 1000:g} ms"


def machine_cpus() -> tuple[int, ...]:
    """The CPUs a cluster may use: those of the root cpuset (else every CPU this process may
    run on)."""
    try:
        text = Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text().strip()
        return tuple(parse_cpu_list(text))
    except (OSError, ValueError):
        return tuple(sorted(os.sched_getaffinity(0)))


def parse_cpu_list(text: str) -> list[int]:
    """'0-2,5' -> [0, 1, 2, 5] (the kernel's CPU list format)."""
    cpus: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        cpus += range(int(lo), int(hi or lo) + 1)
    return cpus


def cpu_list(cpus: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _cpus(cpus: list[int], where: str, available: Sequence[int]) -> tuple[int, ...]:
    for c in cpus:
        if c not in available:
            raise DseError(
                f"{where} names CPU {c}, which this machine lacks: it has CPUs "
                f"{cpu_list(available)}"
            )
    if not cpus or len(set(cpus)) != len(cpus):
        raise DseError(f"{where} must list at least one CPU, each once")
    return tuple(sorted(cpus))


def _boards(
    section: Emulation, hosts: list[str], where: str, available: Sequence[int]
) -> tuple[Board, ...]:
    for name in section.boards:
        if name not in hosts:
            raise DseError(
                f"{where}.boards.{name}: '{name}' is not a host of the platform "
                f"(its hosts: {', '.join(hosts)})"
            )
    boards = []
    for host in hosts:
        if host not in section.boards:
            raise DseError(
                f"{where}.boards has no board for host '{host}': add {host}: {{cpus: [...]}}"
            )
        bw = f"{where}.boards.{host}"
        check_board_name(host, bw)
        b = section.boards[host]
        if b.rate_mbit is not None and section.network == "shared":
            raise DseError(
                f"{bw}.rate_mbit: on a shared medium every board talks at the medium's rate "
                f"(emulation.rate_mbit): remove it"
            )
        rate = section.rate_mbit if b.rate_mbit is None else b.rate_mbit
        boards.append(Board(host, _cpus(b.cpus, f"{bw}.cpus", available), rate, b.disk_mb))
    if len(boards) > MAX_BOARDS:
        raise DseError(f"{where}: {len(boards)} boards, at most {MAX_BOARDS} can be emulated")
    return tuple(boards)


def _devices(
    section: Emulation, platform_devices: list[Device], boards: tuple[Board, ...], where: str
) -> tuple[DeviceShare, ...]:
    names = [d.name for d in platform_devices]
    for name in section.devices:
        if name not in names:
            raise DseError(
                f"{where}.devices.{name} is not a device of the platform (its devices: "
                f"{', '.join(names)})"
            )
    devices: list[DeviceShare] = []
    for dev in platform_devices:
        on_board = sum(x.host == dev.host for x in platform_devices)
        own = section.devices.get(dev.name)
        share = 1.0 / on_board if own is None or own.share is None else own.share
        devices.append(DeviceShare(dev.name, dev.host, share, dev.memory_mb))
    check_cpu_load(devices, boards, where)
    return tuple(devices)


def check_cpu_load(devices: Sequence[DeviceShare], boards: Sequence[Board], where: str) -> None:
    """A CPU's devices (of every board holding it) may ask for at most all of it."""
    load: dict[int, list[DeviceShare]] = {}
    for d in devices:
        for c in next(b for b in boards if b.name == d.board).cpus:
            load.setdefault(c, []).append(d)
    for c, on in sorted(load.items()):
        if sum(d.share for d in on) > 1.0 + SHARE_SLACK:
            asked = ", ".join(f"{d.name} {d.share:g}" for d in on)
            raise DseError(
                f"{where}: CPU {c} is oversubscribed: its devices ask for "
                f"{sum(d.share for d in on):g} of it ({asked}); lower their shares"
            )


def check_quotas(spec: ClusterSpec, prefix: str) -> None:
    """Under ``cpu_share`` quota, every device's CFS quota is at least the kernel's minimum (an
    error starts with ``prefix`` and the device's name)."""
    for d in spec.devices:
        if spec.cpu_share == "quota" and spec.quota_us(d) < MIN_QUOTA_US:
            raise DseError(
                f"{prefix}{d.name}: a share of {d.share:g} is a CFS quota of "
                f"{spec.quota_us(d)} us per {spec.cfs_period_us} us period, under the kernel's "
                "1 ms minimum: raise the share or cfs_period_us, or use cpu_share=weight"
            )


def parse_spec(
    platform_cfg: Mapping[str, Any],
    name: str | None = None,
    cfs_period_us: int = 10_000,
    available: Sequence[int] | None = None,
    cpu_share: str = "weight",
) -> ClusterSpec:
    """The cluster a platform config (``conf/platform/NAME.yaml`` as a mapping) describes."""
    file = read_platform(platform_cfg)
    platform = resolve(file)
    where = f"platform '{platform.name}': emulation"
    section = file.emulation
    if section is None:
        raise DseError(
            f"platform '{platform.name}' has no emulation: section, so it cannot be emulated "
            "(see conf/platform/edge3_ethernet.yaml)"
        )
    network = section.network
    if (network == "shared") != platform.shared_network:
        raise DseError(
            f"platform '{platform.name}': emulation.network is {network} but shared_network is "
            f"{str(platform.shared_network).lower()}: make them agree (the model and the "
            "emulation must see the same network)"
        )
    check_cpu_share(cpu_share)
    lo, hi = PERIOD_RANGE_US
    if not lo <= cfs_period_us <= hi:
        raise DseError(f"cfs_period_us={cfs_period_us} must be from {lo} to {hi} (1 ms to 1 s)")
    hosts = list(dict.fromkeys(d.host for d in platform.devices))
    cpus = tuple(available) if available is not None else machine_cpus()
    boards = _boards(section, hosts, where, cpus)
    devices = _devices(section, list(platform.devices), boards, where)
    spec = ClusterSpec(
        name=check_cluster_name(name or platform.name),
        platform=platform.name,
        network=network,
        rate_mbit=section.rate_mbit,
        boards=boards,
        devices=devices,
        cfs_period_us=int(cfs_period_us),
        cpu_share=cpu_share,
    )
    check_quotas(spec, f"{where}.devices.")
    return spec


def with_rate(spec: ClusterSpec, board: str | None, rate_mbit: float) -> ClusterSpec:
    """``spec`` with a new rate: on a switched network ``board``'s port's, on a shared one
    (``board`` None) the medium's (every board's); checked as :func:`parse_spec` checks it."""
    where = f"cluster {spec.name}"
    rate = records.read(Mbit, rate_mbit, f"{where}: rate_mbit")
    names = ", ".join(b.name for b in spec.boards)
    if spec.network == "shared":
        if board is not None:
            raise DseError(
                f"{where} is one shared medium: its boards talk at the medium's rate, not one of "
                "their own: leave out the board to set the medium's rate"
            )
        boards = tuple(replace(b, rate_mbit=rate) for b in spec.boards)
        return replace(spec, rate_mbit=rate, boards=boards)
    if board is None:
        raise DseError(
            f"{where} is switched: each port has its own rate: name its board (board=, one of "
            f"{names})"
        )
    if board not in [b.name for b in spec.boards]:
        raise DseError(f"{where} has no board '{board}' (its boards: {names})")
    boards = tuple(replace(b, rate_mbit=rate) if b.name == board else b for b in spec.boards)
    return replace(spec, boards=boards)


def with_share(spec: ClusterSpec, device: str, share: float) -> ClusterSpec:
    """``spec`` with ``device``'s new share of its board's CPUs, checked as :func:`parse_spec`
    checks the shares (a CPU's devices ask for at most all of it; quotas of at least 1 ms)."""
    where = f"cluster {spec.name}"
    if device not in [d.name for d in spec.devices]:
        names = ", ".join(d.name for d in spec.devices)
        raise DseError(f"{where} has no device '{device}' (its devices: {names})")
    value = records.read(Share, share, f"{where}: {device}.share")
    devices = tuple(replace(d, share=value) if d.name == device else d for d in spec.devices)
    changed = replace(spec, devices=devices)
    check_cpu_load(changed.devices, changed.boards, where)
    check_quotas(changed, f"{where}: ")
    return changed
