"""Pacing: onnxruntime runs held to an emulated device's speed.

An emulated cluster's device of share ``s`` (:mod:`dse.cluster.cpu`) gets ``s`` of a
CPU once the kernel divides the CPU by weights, from its next scheduler tick on; a burst of
work after a wait runs ahead at up to a whole CPU (``benchmarks/cluster_bursts.py``: a 1 ms
burst at 2.5 times the speed of share 0.4, a 4 ms burst at 1.2 times). A board of that speed
computes every burst at its speed, and a mapping of many short segments (rows split over a
device, DenseNet-121's small layers) is made of such bursts. So the cluster's rank script sets
:data:`PACE_ENV` to the device's speed in CPUs, and every run of a session of this process
then lasts at least its CPU time over that speed: once onnxruntime returns, the rank yields
its CPU (``sched_yield``) until then. The device's co-runners keep its cgroup busy all along,
so the yielding takes nothing from the devices beside it. Where :data:`PACE_ENV` is unset (a
real board, ``localhost``) sessions are onnxruntime's own.
"""

from __future__ import annotations

import os
import time
from functools import cache
from typing import Any

from dse.errors import DseError

#: The environment variable of a device's speed in CPUs (its share times its board's CPUs),
#: set by an emulated cluster for each rank on a device of a share below a whole CPU.
PACE_ENV = "DSE_PACE"


class Pace:
    """Makes runs last at least their CPU time over ``speed`` (CPUs); ``spent_s``: the CPU time
    this process has spent yielding to do so (a rank leaves it out of its own CPU time)."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.spent_s = 0.0

    def until(self, wall0: float, cpu0: float) -> None:
        """Yield the CPU until a run that started at ``wall0`` (perf_counter) and ``cpu0``
        (process_time) has lasted its CPU time over the speed."""
        now_cpu = time.process_time()
        due = wall0 + (now_cpu - cpu0) / self.speed
        while time.perf_counter() < due:
            os.sched_yield()
        self.spent_s += time.process_time() - now_cpu


@cache
def pace_from_env() -> Pace | None:
    """This process's :class:`Pace` from :data:`PACE_ENV`, or None where it is unset."""
    raw = os.environ.get(PACE_ENV, "").strip()
    if not raw:
        return None
    try:
        speed = float(raw)
    except ValueError:
        speed = 0.0
    if not 0.0 < speed < 1e3:
        why = "is not a device speed in CPUs: unset it, or give one (e.g. 0.4)"
        raise DseError(f"{PACE_ENV}={raw!r} {why}")
    return Pace(speed)


class PacedSession:
    """An InferenceSession whose runs :class:`Pace` holds to the device's speed; everything
    else is the session's own."""

    def __init__(self, inner: Any, pace: Pace) -> None:
        self._inner, self._pace = inner, pace

    def run(self, output_names: Any, input_feed: Any, run_options: Any = None) -> Any:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        out = self._inner.run(output_names, input_feed, run_options)
        self._pace.until(wall0, cpu0)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def paced(inner: Any) -> Any:
    """``inner`` paced where this process runs on an emulated device of a CPU share."""
    pace = pace_from_env()
    return inner if pace is None else PacedSession(inner, pace)
