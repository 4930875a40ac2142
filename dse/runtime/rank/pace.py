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

**A speed that changes while the rank runs.** An emulated cluster's device may get a new
share while ranks run on it (``python -m dse.cluster set``, :mod:`dse.cluster.live`). So a
cluster whose ranks are paced (``cpu_share`` weight, corunner) also gives every rank, on a
whole CPU too, :data:`PACE_FILE_ENV`: the path of its device's pace file, one line, the
device's speed in CPUs or ``none`` (a whole CPU: no pacing), rewritten by a new name and a
rename (never seen half written). The file overrides :data:`PACE_ENV`: :class:`Pace` reads it
when the process starts and, at the end of each run, again if it changed (its inode or mtime),
looking at most every :data:`FOLLOW_S`; so a rank paces by a new speed from its first run that
ends :data:`FOLLOW_S` after the change (a run is paced as a whole, by the speed at its end),
and a run costs one clock read more. :func:`pace_from_env` is then a :class:`Pace` on a whole
CPU too, of speed None. A file that is gone (the cluster went down) leaves the speed as it
was. Where :data:`PACE_FILE_ENV` is unset, :data:`PACE_ENV` alone says the speed, for the
process's life; where both are unset (a real board, ``localhost``), nothing is paced.
"""

from __future__ import annotations

import math
import os
import time
from functools import cache
from pathlib import Path
from typing import Any

from dse.errors import DseError

#: The environment variable of a device's speed in CPUs (its share times its board's CPUs),
#: set by an emulated cluster for each rank on a device of a share below a whole CPU.
PACE_ENV = "DSE_PACE"
#: The environment variable of the path of a device's pace file (its speed, which may change
#: while the rank runs), set by an emulated cluster whose ranks are paced.
PACE_FILE_ENV = "DSE_PACE_FILE"
#: How often (s) at most a :class:`Pace` looks whether its pace file changed.
FOLLOW_S = 0.25
#: What a pace file holds for a device of a whole CPU: no pacing.
UNPACED = "none"


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


def read_speed(raw: str, unpaced: bool = False) -> float | None:
    """A device's speed in CPUs from its text (with ``unpaced``, :data:`UNPACED`: None); a
    ValueError if it is not one."""
    text = raw.strip()
    if unpaced and text == UNPACED:
        return None
    speed = float(text)
    if not 0.0 < speed < 1e3:
        raise ValueError(text)
    return speed


class Pace:
    """Makes runs last at least their CPU time over ``speed`` (CPUs; None: not paced), counted
    from the run's start less its credit (:meth:`start`); ``spent_s``: the CPU time this
    process has spent yielding to do so (a rank leaves it out of its own CPU time). With
    ``source``, a pace file: the speed it says, followed as it changes (module docstring)."""

    def __init__(self, speed: float | None, source: Path | None = None) -> None:
        self.speed = speed
        self.source = source
        self.spent_s = 0.0
        self.queued_s = RunQueue()
        self._since: float | None = None  # queued_s at the end of the last run
        self._idle = 0.0  # of it since, queued while it slept for a message not yet there
        self._seen: tuple[int, int] | None = None  # the pace file's (inode, mtime) last read
        self._looked = -math.inf  # when (monotonic) it last looked
        self.follow()

    def follow(self) -> None:
        """Take the pace file's speed if the file changed since it was last read (looking at
        most every :data:`FOLLOW_S`)."""
        if self.source is None:
            return
        now = time.monotonic()
        if now - self._looked < FOLLOW_S:
            return
        self._looked = now
        try:
            st = os.stat(self.source)
            seen = (st.st_ino, st.st_mtime_ns)
            if seen == self._seen:
                return
            raw = self.source.read_text()
        except OSError:
            return  # gone with its cluster: the speed stays
        try:
            self.speed = read_speed(raw, unpaced=True)
        except ValueError:
            raise DseError(
                f"{PACE_FILE_ENV}={self.source} holds {raw.strip()!r}, not a device speed in "
                f"CPUs or {UNPACED}: unset {PACE_FILE_ENV} to pace by {PACE_ENV} alone"
            ) from None
        self._seen = seen

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
        self.follow()
        if self.speed is not None:
            due = wall0 - credit + (now_cpu - cpu0) / self.speed
            while time.perf_counter() < due:
                os.sched_yield()
            self.spent_s += time.process_time() - now_cpu
        self._since, self._idle = self.queued_s(), 0.0


@cache
def pace_from_env() -> Pace | None:
    """This process's :class:`Pace` from :data:`PACE_ENV` and :data:`PACE_FILE_ENV`, or None
    where both are unset."""
    raw = os.environ.get(PACE_ENV, "").strip()
    source = os.environ.get(PACE_FILE_ENV, "").strip()
    try:
        speed = read_speed(raw) if raw else None
    except ValueError:
        why = "is not a device speed in CPUs: unset it, or give one (e.g. 0.4)"
        raise DseError(f"{PACE_ENV}={raw!r} {why}") from None
    if not source:
        return None if speed is None else Pace(speed)
    return Pace(speed, Path(source))


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
