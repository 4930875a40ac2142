"""This machine's load now: how many of its cores other processes leave free."""

from __future__ import annotations

import os
import time

PROC_LOADAVG = "/proc/loadavg"


def spare_cores(samples: int = 5) -> float:
    """Cores free beside this process: the cores less what else is running now.

    Linux counts the runnable tasks of the moment in /proc/loadavg ("2/345": this process and
    one more); the fewest over a few samples a millisecond apart is what runs all the time.
    Elsewhere the 1-minute load average (which lags, and counts this run's own past work)."""
    cores = os.cpu_count() or 1
    others: float
    try:
        running = []
        for _ in range(samples):
            with open(PROC_LOADAVG) as f:
                running.append(int(f.read().split()[3].split("/")[0]))
            time.sleep(0.001)
        others = min(running) - 1
    except (OSError, ValueError, IndexError):
        try:
            others = os.getloadavg()[0]
        except OSError:
            return 0.0
    return max(cores - 1 - others, 0.0)
