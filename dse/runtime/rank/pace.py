"""Pacing: onnxruntime runs held to an emulated device's speed.

An emulated cluster's device of share ``s`` (:mod:`dse.cluster.cpu`) gets ``s`` of a
CPU once the kernel divides the CPU by weights, from its next scheduler tick on; a burst of
work after a wait runs ahead at up to a whole CPU (``scripts/cluster_bursts.py`` measures
how far ahead, by the burst's length). A board of that speed
computes every burst at its speed, and a mapping of many short segments (rows split over a
device, DenseNet-121's small layers) is made of such bursts. So the cluster's rank script sets
:data:`PACE_ENV` to the device's speed in CPUs, and every run of a session of this process
then lasts at least its CPU time over that speed: once onnxruntime returns, the rank yields
its CPU (``sched_yield``) until then. Where :data:`PACE_ENV` is unset (a real board,
``localhost``) sessions are onnxruntime's own.

**Credit for a late wake.** Two devices of one CPU take turns on it, each for a scheduler
tick or until it waits: a rank woken by its message (a poll of
:func:`dse.runtime.rank.waits.until`) waits in the CPU's queue until the other device's burst ends,
where a device of a real board starts at once. Without a remedy, a layer split over the two
devices runs its parts one after the other, and the second, paced from the moment it got the
CPU, ends up to the first's CPU time late (``scripts/cluster_exchange.py`` measures an
exchange with and without the credit below). So a run's pacing counts from
earlier by the time the rank sat in the run queue since its last run (:class:`RunQueue`), but
for the queueing of its waits before their messages were there (all of a wait's sleeps but the
last): the rank computes at its device's speed from when it could have started. Pacing only
ever delays a run, so a credit cannot make a device faster than the CPU lets it.
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


class RunQueue:
    """How long this rank's main thread has been ready to run but not running (s, Linux
    ``/proc/self/schedstat``: its CPU taken by other work, or its device's CPU quota spent);
    0 where the file is not readable. The file stays open between reads."""

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open("/proc/self/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = None

    def __call__(self) -> float:
        if self.fd is None:
            return 0.0
        try:
            return int(os.pread(self.fd, 128, 0).split()[1]) * 1e-9
        except (OSError, IndexError, ValueError):
            return 0.0


class Pace:
    """Makes runs last at least their CPU time over ``speed`` (CPUs), counted from the run's
    start less its credit (:meth:`start`); ``spent_s``: the CPU time this process has spent
    yielding to do so (a rank leaves it out of its own CPU time)."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.spent_s = 0.0
        self.queued_s = RunQueue()
        self._since: float | None = None  # queued_s at the end of the last run
        self._idle = 0.0  # of it since, queued while it slept for a message not yet there

    def slept(self, idle_s: float) -> None:
        """A wait sat ``idle_s`` in the run queue before its message was there (its sleeps
        but the last, :func:`dse.runtime.rank.waits.until`): no credit for that."""
        self._idle += idle_s

    def start(self) -> float:
        """At a run's start: its credit, the seconds the rank sat in the run queue since its
        last run ended, but for the waits' idle queueing (:meth:`slept`); a device of a real
        board would have started the run that much earlier."""
        if self._since is None:
            return 0.0
        return max(self.queued_s() - self._since - self._idle, 0.0)

    def until(self, wall0: float, cpu0: float, credit: float = 0.0) -> None:
        """Yield the CPU until a run that started at ``wall0`` (perf_counter) and ``cpu0``
        (process_time) has lasted its CPU time over the speed, counted from ``credit``
        seconds before ``wall0``."""
        now_cpu = time.process_time()
        due = wall0 - credit + (now_cpu - cpu0) / self.speed
        while time.perf_counter() < due:
            os.sched_yield()
        self.spent_s += time.process_time() - now_cpu
        self._since, self._idle = self.queued_s(), 0.0


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
        credit = self._pace.start()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        out = self._inner.run(output_names, input_feed, run_options)
        self._pace.until(wall0, cpu0, credit)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def paced(inner: Any) -> Any:
    """``inner`` paced where this process runs on an emulated device of a CPU share."""
    pace = pace_from_env()
    return inner if pace is None else PacedSession(inner, pace)
