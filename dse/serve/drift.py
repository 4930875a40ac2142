"""When a served plan's measurements have drifted from the model, and the conditions that explain
them.

The rule, on a window of frames (:class:`~dse.serve.monitor.Window`):

* each rank's compute over its predicted compute, and the period over the predicted period, are
  *ratios*; the first full window of a plan sets their *reference* (what the model is off by
  when nothing has changed: its calibration error on this plan, the machine's drift);
* a ratio drifted when it is more than ``threshold`` (relative) away from its reference: a
  device (its rank's compute) runs at another speed, or the period (with every device's new
  speed in the prediction) is not what the links gave before: the network's bandwidth changed;
* :func:`rescaled` explains a drift by new :class:`~models_analytical.conditions.Conditions`:
  each drifted device's speed factor scaled by how much slower or faster it computes, then, if
  the period still drifts, the network's bandwidth factor found by bisection so that the
  predicted period times its reference is the measured period. On a switched network every
  board's port is scaled alike: a period does not say which port slowed. A period no
  bandwidth within :data:`NETWORK_RANGE` gives (a plan on one board, whose period the network
  does not set; a period longer than the slowest network makes it) leaves the network as it
  was: its drift is not the network's, and the conditions come back unchanged (the caller's
  cue that the model cannot explain it: the application's pace, the machine's other work).

Ranks whose compute is under :data:`MIN_COMPUTE_S`, predicted or measured, are not judged
(their ratios are noise). The period is judged only from windows where the service was pressed
(:mod:`dse.serve.monitor`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dse.serve.monitor import Window
from models_analytical.conditions import Conditions

#: Relative change of a ratio that counts as drift, by default.
THRESHOLD = 0.25
#: A rank computing less than this (s) a frame is not judged.
MIN_COMPUTE_S = 2e-3
#: The network's bandwidth factor is looked for between these (of the calibrated bandwidth).
NETWORK_RANGE = (1e-4, 2.0)


@dataclass(frozen=True)
class Expected:
    """What the model predicts of the served plan under the current conditions (seconds)."""

    compute_s: Mapping[int, float]  # by rank
    period_s: float


@dataclass(frozen=True)
class Reference:
    """Measured over predicted on a plan's first full window: the ratios drift is judged by."""

    compute: Mapping[int, float]  # by rank (ranks not judged are absent)
    period: float | None  # None: that window was not pressed

    @classmethod
    def of(cls, window: Window, expected: Expected) -> Reference:
        return cls(_compute_ratios(window, expected), _period_ratio(window, expected))


@dataclass(frozen=True)
class Drift:
    """What drifted on a window, each as its ratio over its reference (2.0: twice as slow)."""

    devices: Mapping[int, float]  # by rank
    period: float | None

    def __bool__(self) -> bool:
        return bool(self.devices) or self.period is not None


def _compute_ratios(window: Window, expected: Expected) -> dict[int, float]:
    out = {}
    for rank, measured in window.compute_s.items():
        predicted = expected.compute_s.get(rank, 0.0)
        if predicted >= MIN_COMPUTE_S and measured >= MIN_COMPUTE_S:
            out[rank] = measured / predicted
    return out


def _period_ratio(window: Window, expected: Expected) -> float | None:
    if window.period_s is None or expected.period_s <= 0:
        return None
    return window.period_s / expected.period_s


def drift(
    window: Window, expected: Expected, reference: Reference, threshold: float = THRESHOLD
) -> Drift:
    """What drifted on ``window`` (the module's docstring); falsy when nothing did."""
    devices = {}
    for rank, ratio in _compute_ratios(window, expected).items():
        ref = reference.compute.get(rank)
        if ref and abs(ratio / ref - 1.0) > threshold:
            devices[rank] = ratio / ref
    period = None
    now = _period_ratio(window, expected)
    if now is not None and reference.period and abs(now / reference.period - 1) > threshold:
        period = now / reference.period
    return Drift(devices, period)


def rescaled(
    conditions: Conditions,
    found: Drift,
    devices: Mapping[int, str],
    window: Window,
    reference: Reference,
    period_under: Callable[[Conditions], float],
    threshold: float = THRESHOLD,
) -> Conditions:
    """The conditions that explain ``found`` (the module's docstring). ``devices``: each rank's
    device name; ``period_under``: the served plan's predicted period (s) under given
    conditions."""
    speed = dict(conditions.speed)
    for rank, slower in found.devices.items():
        name = devices[rank]
        speed[name] = speed.get(name, 1.0) / slower
    new = dataclasses.replace(conditions, speed=speed)
    measured, ref = window.period_s, reference.period
    if found.period is None or measured is None or not ref:
        return new  # the period did not drift: nothing to put on the network
    now = period_under(new)
    if abs(measured / (now * ref) - 1.0) <= threshold:
        return new  # the devices' new speeds explain the period
    return _fit_network(new, measured / ref, period_under)


def _fit_network(
    conditions: Conditions, target_s: float, period_under: Callable[[Conditions], float]
) -> Conditions:
    """``conditions`` with the network's bandwidth factor at which the predicted period is
    ``target_s`` (the predicted period falls as the bandwidth rises; bisection on its log
    within :data:`NETWORK_RANGE`); ``conditions`` as they are when no factor there gives
    it."""

    def at(log_f: float) -> Conditions:
        return dataclasses.replace(conditions, network=math.exp(log_f))

    lo, hi = math.log(NETWORK_RANGE[0]), math.log(NETWORK_RANGE[1])
    if not period_under(at(hi)) <= target_s <= period_under(at(lo)):
        return conditions  # not the network's
    for _ in range(40):  # the factor within 2e-10 of its log range
        mid = (lo + hi) / 2
        if period_under(at(mid)) > target_s:
            lo = mid
        else:
            hi = mid
    return at((lo + hi) / 2)
