"""How many threads the model's kernel runs large batches on, chosen by timing them.

On an idle machine of two cores two threads evaluate a large batch nearly twice as fast as
one; beside even one busy process they can be slower than one (the kernel splits a batch into
chunks, a few per thread, so the thread sharing a core holds the other back), and the load can
change during a run (scripts/bench_threads.py; ``docs/results/performance.md``, "The
model's threads"). A load average lags by a minute and counts the run's own recent work, so
:class:`ThreadTuner` measures instead: after a first, untimed batch (it starts the thread pool)
it tries every choice, then uses the fastest by the median of its last few timed batches (one
batch's rate varies widely on a shared machine), and times the others again, every few batches
at first, then every ``reprobe`` batches, so a machine that becomes busy or idle is noticed
within a few batches.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence

#: Timed batches per choice whose median rate counts.
WINDOW = 3
#: Until a losing choice has WINDOW timings, it is timed again every EARLY batches.
EARLY = 4


class ThreadTuner:
    """The threads for the next large batch: ``choose()`` before it, ``record()`` after."""

    def __init__(self, choices: Sequence[int], reprobe: int = 20) -> None:
        self.choices = sorted(set(choices))
        self.reprobe = reprobe
        self.rates: dict[int, deque[float]] = {t: deque(maxlen=WINDOW) for t in self.choices}
        self.batches = 0  # batches recorded, the untimed first one included

    def rate(self, threads: int) -> float:
        """Median mappings/s of the last timed batches on ``threads`` (0 if none)."""
        r = self.rates[threads]
        return statistics.median(r) if r else 0.0

    def choose(self) -> int:
        if self.batches == 0:
            return self.choices[-1]
        untried = [t for t in self.choices if not self.rates[t]]
        if untried:
            return untried[0]
        best = max(self.choices, key=self.rate)
        others = [t for t in self.choices if t != best]
        # the losers are timed again every `reprobe` batches, and every EARLY batches until
        # each has WINDOW timings (a run's first batches share the machine with its start-up)
        early = [t for t in others if len(self.rates[t]) < WINDOW]
        if early and self.batches % EARLY == 0:
            return early[0]
        if others and self.batches % self.reprobe == 0:
            return others[(self.batches // self.reprobe) % len(others)]
        return best

    def record(self, threads: int, mappings: int, seconds: float) -> None:
        if self.batches > 0:
            self.rates[threads].append(mappings / max(seconds, 1e-9))
        self.batches += 1
