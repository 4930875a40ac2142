"""How the hardware runs compared with the figures a model was built with: a device slower or
faster than calibrated, a network or a board's port at another bandwidth.

:class:`Conditions` holds factors only; :meth:`AnalyticalModel.under
<models_analytical.model.AnalyticalModel.under>` makes the model of a platform under them. A
factor is against the platform's and the coefficients' own figures (1: as they are):

* ``speed[device]``: the device's throughput. Its own work (its layers, its sub-model runs and
  their copies in and out) takes ``1 / speed`` times as long (0.5: twice as long); the
  runtime's cost of a tensor crossing devices (``transfer_*`` coefficients) and its power draw
  stay as calibrated, so energy follows the time.
* ``network``: the bandwidth of every transfer between boards (the ``network`` link class, the
  ports of a switched network, device pairs' own links between boards and the measured tables
  of those).
* ``ports[board]``: the bandwidth of one board's port, on top of ``network``. A pair of boards
  takes the slower of its two ports (on any network: a board's link to another board is no
  faster than its port).

Latencies stay as they are. A measured table of times by size keeps its time at 0 bytes and
scales the rest: ``t(b) = t(0) + (t(b) - t(0)) / factor``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from dse.errors import DseError
from dse.platform import NOMINAL, Platform, Profile

Table = tuple[list[float], list[float]]  # (bytes increasing, seconds)


def _check_factor(what: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise DseError(f"{what} is {value!r}: give a factor above 0 (1: as calibrated)")


@dataclass(frozen=True)
class Conditions:
    """How the hardware runs compared with the figures the model was built with."""

    name: str = NOMINAL
    #: device name -> speed factor (>0): 0.5 = half speed, its compute takes twice as long
    speed: Mapping[str, float] = field(default_factory=dict)
    #: factor on the bandwidth of every transfer between boards (ports, the medium, pairs of
    #: class network, and the measured link tables' per-byte part)
    network: float = 1.0
    #: board -> factor on its port's bandwidth (a pair of boards takes the slower port)
    ports: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"conditions '{self.name}'"
        _check_factor(f"{where}: network", self.network)
        for device, f in self.speed.items():
            _check_factor(f"{where}: speed of '{device}'", f)
        for board, f in self.ports.items():
            _check_factor(f"{where}: port of '{board}'", f)

    def __hash__(self) -> int:
        """By value (a key of a cache of models under conditions)."""
        return hash(
            (
                self.name,
                tuple(sorted(self.speed.items())),
                self.network,
                tuple(sorted(self.ports.items())),
            )
        )

    @property
    def nominal(self) -> bool:
        """Every factor 1: the hardware as the figures say."""
        return (
            self.network == 1.0
            and all(f == 1.0 for f in self.speed.values())
            and all(f == 1.0 for f in self.ports.values())
        )

    def times(self, other: Conditions, name: str | None = None) -> Conditions:
        """Both at once: each factor the product of the two (``name`` None: both names joined
        by ``+``)."""
        speed = dict(self.speed)
        for device, f in other.speed.items():
            speed[device] = speed.get(device, 1.0) * f
        ports = dict(self.ports)
        for board, f in other.ports.items():
            ports[board] = ports.get(board, 1.0) * f
        return Conditions(
            name if name is not None else f"{self.name}+{other.name}",
            speed,
            self.network * other.network,
            ports,
        )

    def check(self, platform: Platform) -> None:
        """Every device and board named is one of ``platform``'s (one line naming the first
        that is not)."""
        where = f"conditions '{self.name}'"
        for device in self.speed:
            if device not in platform.keys:
                raise DseError(
                    f"{where}: speed of '{device}': not a device of platform '{platform.name}' "
                    f"(its devices: {', '.join(platform.keys)})"
                )
        for board in self.ports:
            if board not in platform.hosts:
                raise DseError(
                    f"{where}: port of '{board}': not a board of platform '{platform.name}' "
                    f"(its boards: {', '.join(platform.hosts)})"
                )

    def device_speed(self, platform: Platform) -> np.ndarray:
        """[D] each device's speed factor."""
        return np.array([float(self.speed.get(d.name, 1.0)) for d in platform.devices])

    def port_factor(self, board: str) -> float:
        """The bandwidth factor of a board's port: ``network`` times its own."""
        return self.network * float(self.ports.get(board, 1.0))

    def pair_factors(self, platform: Platform) -> np.ndarray:
        """[D, D] the bandwidth factor of each device pair's link (1 within a board): between
        boards ``network`` times the slower port's factor; between boards of a switched network
        with their ports' own figures (no pair link of their own), the slower of the two ports
        once each is scaled, against the slower of the two as they are."""
        n = len(platform)
        out = np.ones((n, n))
        hosts = [d.host for d in platform.devices]
        for a in range(n):
            for b in range(n):
                ha, hb = hosts[a], hosts[b]
                if ha == hb:
                    continue
                fa, fb = self.port_factor(ha), self.port_factor(hb)
                if platform.network == "switched" and (a, b) not in platform.pair_links:
                    ba, bb = platform.port(ha).bandwidth_Bps, platform.port(hb).bandwidth_Bps
                    out[a, b] = min(ba * fa, bb * fb) / min(ba, bb)
                else:
                    out[a, b] = min(fa, fb)
        return out


def scaled_table(table: Table, factor: float) -> Table:
    """A measured link table at ``factor`` times its bandwidth: its time at 0 bytes (its first
    two points' line there, between 0 and its first time) kept and the rest over ``factor``;
    the table itself at factor 1."""
    if factor == 1.0:
        return table
    x, y = table
    t0 = y[0] if len(x) == 1 else y[0] - x[0] * (y[1] - y[0]) / (x[1] - x[0])
    t0 = min(max(t0, 0.0), y[0])
    return list(x), [t0 + (t - t0) / factor for t in y]


def profile_conditions(platform: Platform) -> list[Conditions]:
    """The conditions of each of the platform's profiles (``profiles:``), the nominal first."""
    return [Conditions()] + [of_profile(platform, n, p) for n, p in platform.profiles.items()]


def mbit_Bps(rate_mbit: float) -> float:
    """Bytes per second of a rate in Mbit/s."""
    return rate_mbit * 1e6 / 8


def of_profile(platform: Platform, name: str, profile: Profile) -> Conditions:
    """The conditions of a profile (:class:`dse.platform.Profile`), its rates made factors
    against the platform's own figures (``bandwidth_Bps``): ``network_mbit`` against the
    ``network`` link class's, each board's port on a switched network set to it too where the
    port has figures of its own (a device pair's own link between boards takes the network's
    factor); a port's ``rate_mbit`` against its port's figure (the network class's where it
    has none) under the profile's network."""
    network = 1.0 if profile.network is None else profile.network
    ports: dict[str, float] = {}
    if profile.network_mbit is not None:
        rate = mbit_Bps(profile.network_mbit)
        network = rate / platform.links["network"].bandwidth_Bps
        if platform.network == "switched":
            for board in platform.ports:
                ports[board] = rate / (platform.port(board).bandwidth_Bps * network)
    for board, port in profile.ports.items():
        if port.factor is not None:
            ports[board] = port.factor
        elif port.rate_mbit is not None:
            base = platform.port(board).bandwidth_Bps * network
            ports[board] = mbit_Bps(port.rate_mbit) / base
    return Conditions(name, dict(profile.speed), network, ports)
