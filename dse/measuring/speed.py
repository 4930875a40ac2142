"""The speed every measured run is brought to: the calibration's speed probe of the network,
or, for a network calibration did not probe, how much slower the networks it did probe run now;
and how much a mapping slows with the machine (its devices' own work, not its transfers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import numpy as np

from dse.errors import DseError
from dse.mapping import Mappings
from dse.measuring.rounds import Slowdown
from dse.net import Net, zoo
from dse.net.load import load_net
from dse.objectives import OBJECTIVES
from dse.records import read
from dse.runtime.launch.probe import CalibratedSpeed, FileProbe, SpeedProbe, probe_threads
from models_analytical.coefficients import SpeedReference
from models_analytical.model import AnalyticalModel

T = TypeVar("T")

#: Where a run's reference speed comes from (:class:`Speed`).
SpeedFrom = Literal["calibration", "calibrated networks", "this run's median probe"]


@dataclass(frozen=True)
class Speed:
    """The speed runs are brought to: ``reference_ms`` of the network alone, taken from the
    calibration's probe of it, from the ``networks`` calibration did probe, or from this run's
    own median probe; ``probe_ms``: the runs' median probe, ``slower_pct`` than the reference."""

    reference_ms: float
    reference: SpeedFrom
    probe_ms: float
    slower_pct: float
    networks: list[str] = field(default_factory=list)


def note(model: AnalyticalModel, name: str, cls: type[T]) -> T | None:
    """The coefficients' note ``name`` (what calibration left for fidelity) as ``cls``; None
    where there is none, or it is not of that shape (an edited file)."""
    try:
        return read(cls, model.coefficients.notes.get(name), name)
    except DseError:
        return None


def calibration_probes(model: AnalyticalModel) -> dict[str, tuple[str, float]]:
    """The calibration's speed probes: network -> (its fingerprint, the whole network alone in
    ms), where probed at this platform's probe thread count; {} otherwise (none, or not of
    this shape: an edited file)."""
    ref = note(model, "speed_reference", SpeedReference)
    if ref is None or ref.threads != probe_threads(model.platform):
        return {}
    return {
        str(name): (fingerprint, ref.whole_ms[name])
        for name, fingerprint in ref.fingerprints.items()
        if name in ref.whole_ms
    }


def speed_reference(model: AnalyticalModel, net: Net) -> float | None:
    """The calibration's speed probe of this network (ms): only for the same network (its
    fingerprint) probed at the same thread count."""
    fingerprint, ms = calibration_probes(model).get(net.name, ("", 0.0))
    return ms if fingerprint == net.fingerprint else None


def calibrated_speed(
    model: AnalyticalModel, net: Net, probe: SpeedProbe, seed: int
) -> CalibratedSpeed | None:
    """For a network calibration did not probe: probes of the zoo networks it did (the same
    graphs as then: their fingerprints), on ``probe``'s cores, beside their calibration
    probes; None where there are none."""
    probes: dict[str, tuple[SpeedProbe, float]] = {}
    for name, (fingerprint, ms) in calibration_probes(model).items():
        if name == net.name or name not in zoo.NETS:
            continue  # a user's file calibration probed is not at hand
        if load_net({"name": name}).fingerprint == fingerprint:
            path = zoo.materialize(name, seed)
            probes[name] = (FileProbe(path, probe.cores, probe.threads), ms)
    return CalibratedSpeed(probes) if probes else None


def beside(probe: SpeedProbe, level: CalibratedSpeed) -> Callable[[], float]:
    """``probe`` with the calibrated networks' probes taken just before it, each time."""

    def both() -> float:
        level()
        return probe()

    return both


def drift(now: float, reference: float | None, level: CalibratedSpeed | None) -> Speed:
    """The speed every run is brought to from this run's median probe ``now`` (ms): the
    calibration's probe of this network; for a network it did not probe, ``now`` over how much
    slower the calibrated networks ran than then (the median of ``level``'s calls); without
    those, ``now`` itself (only the drift within the run comes out)."""
    now = round(now, 3)
    networks: list[str] = []
    how: SpeedFrom
    if reference is not None:
        ref, how = round(reference, 3), "calibration"
    elif level is not None and level.factors:
        slower = float(np.median(level.factors))
        ref, how, networks = round(now / slower, 3), "calibrated networks", sorted(level.probes)
    else:
        ref, how = now, "this run's median probe"
    return Speed(ref, how, now, round((now / ref - 1) * 100, 2), networks)


def slowdown(model: AnalyticalModel, mapping: Mappings) -> Slowdown:
    """How much longer ``mapping`` (one) takes in ``model`` with the machine ``f`` times
    slower than at calibration: its latency and period with every device's own work ``f``
    times as long and its transfers as they were, over those at calibration. The speed probe
    times a core, and a shaped link, a wire or a radio does not follow its core: a mapping
    whose time is half transfers slows by half as much."""
    at_calibration = model.evaluate(mapping)
    latency = float(at_calibration.latency_s[0])
    period = float(OBJECTIVES["period"].values(at_calibration)[0])

    def factors(f: float) -> tuple[float, float]:
        ev = model.with_compute_slower(f).evaluate(mapping)
        return (
            float(ev.latency_s[0]) / latency,
            float(OBJECTIVES["period"].values(ev)[0]) / period,
        )

    return factors
