"""What a served deployment measures, frame by frame, kept over a sliding window.

Two streams of events come in: each rank's seconds of sub-model runs on each frame (its
``timing`` message, :mod:`dse.runtime.deployment.wire`), and each frame's completion on the
application's side (when its outputs are back, how long after it was handed over, and whether
the service was *pressed*: at least ``in_flight - 1`` other frames were still in it, so the
devices had the next frame waiting and the gap between completions is the deployment's
period, not the application's pace).

:meth:`Monitor.window` gives, once the last ``size`` frames have completed and every rank's
last ``size`` timings are in, the medians over them (:class:`Window`): each rank's compute,
the latency, and the period (the median gap between consecutive completions of pressed
frames; None when fewer than half the window's frames were pressed). Medians, so one frame
held up by the machine moves nothing. :meth:`Monitor.clear` starts over (a new plan, new
predictions).
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """Medians over the window's frames (seconds)."""

    compute_s: dict[int, float]  # by rank
    latency_s: float
    period_s: float | None  # None: the service was not pressed (the application's pace)
    frames: int  # frames completed since the monitor started (or was cleared)


class Monitor:
    """A sliding window over a deployment's last ``size`` frames (the module's docstring)."""

    def __init__(self, ranks: int, size: int) -> None:
        if size < 2:
            raise ValueError(f"a monitor's window is at least 2 frames, not {size}")
        self.ranks, self.size = ranks, size
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        """Forget every frame (a new plan's figures are not the old plan's)."""
        with self._lock:
            self._compute: dict[int, deque[float]] = {
                r: deque(maxlen=self.size) for r in range(self.ranks)
            }
            self._done: deque[tuple[float, float, bool]] = deque(maxlen=self.size + 1)
            self._frames = 0

    def timing(self, rank: int, compute_s: float) -> None:
        """Rank ``rank`` ran its sub-models for ``compute_s`` on a frame."""
        with self._lock:
            if rank in self._compute:
                self._compute[rank].append(compute_s)

    def done(self, at_s: float, latency_s: float, pressed: bool) -> None:
        """A frame's outputs came back at ``at_s`` (a monotonic clock), ``latency_s`` after it
        was handed over; ``pressed``: frames were waiting behind it (the module's docstring)."""
        with self._lock:
            self._done.append((at_s, latency_s, pressed))
            self._frames += 1

    def window(self, last: int | None = None) -> Window | None:
        """The window's medians, or None until it is full; ``last``: over its newest ``last``
        frames only (at least 2)."""
        n = self.size if last is None else max(2, min(last, self.size))
        with self._lock:
            done = list(self._done)
            if len(done) <= self.size or any(len(c) < self.size for c in self._compute.values()):
                return None
            compute = {r: statistics.median(list(c)[-n:]) for r, c in self._compute.items()}
            frames = self._frames
        done = done[-(n + 1) :]
        gaps = [b[0] - a[0] for a, b in zip(done, done[1:], strict=False) if b[2]]
        period = statistics.median(gaps) if len(gaps) * 2 >= n else None
        latency = statistics.median(d[1] for d in done[1:])
        return Window(compute, latency, period, frames)
