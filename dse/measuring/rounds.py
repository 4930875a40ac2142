"""Deployments run in interleaved rounds, with the one re-run rule: each round in a new random
order, so a slow spell of the machine hits one round of every deployment instead of every round
of one; a deployment whose rounds disagree runs one round more, and the median of all is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dse.config import ITERATIONS, TIMEOUT_S, WARMUP
from dse.errors import DseError
from dse.measuring.merge import disagree, merge_runs
from dse.runtime.deployment.measurements import Measurement
from dse.runtime.launch.mpirun import Launcher
from dse.runtime.launch.run import launch

#: A deployment whose rounds' medians span more than this share of their median runs one
#: round more, after every deployment's rounds: one slow spell is then outvoted by the median
#: of three.
AGAIN_ABOVE = 0.10


@dataclass(frozen=True)
class Rounds:
    """How the deployments run: ``rounds`` runs of each, of ``warmup`` and ``iterations``
    inferences, each at most ``timeout_s``; one round more where they disagree by more than
    ``again_above`` (None: never)."""

    rounds: int = 1
    warmup: int = WARMUP
    iterations: int = ITERATIONS
    timeout_s: float = TIMEOUT_S
    again_above: float | None = AGAIN_ABOVE


def measure_interleaved(
    directories: list[Path],
    settings: Rounds,
    rng: np.random.Generator,
    on_run: Callable[[int, int, Measurement], None] | None = None,
    probe: Callable[[], float] | None = None,
    launcher: Launcher | None = None,
) -> tuple[list[Measurement], bool]:
    """Run every deployment ``settings.rounds`` times, each round in a new random order, then
    one round more for each whose rounds disagree (:data:`AGAIN_ABOVE`; round number
    ``rounds``); their merged measurements (:func:`~dse.measuring.merge.merge_runs`) in the
    order given, and whether Ctrl-C cut the rounds short (then each merges the runs it had;
    one never run is failed, "interrupted"). A deployment that failed is not run again.
    ``on_run(round, index, its result)`` follows each run. ``probe``
    (:class:`dse.runtime.launch.probe.SpeedProbe`) is timed before the first run and after
    each one: a run's ``probe_ms`` holds the probes on either side of it. ``launcher``: how
    the ranks start (default: on the platform's hosts by name)."""
    runs: list[list[Measurement]] = [[] for _ in directories]
    interrupted = False
    last: float | None = None

    def run(rnd: int, i: int) -> None:
        nonlocal last
        s = settings
        try:
            result = launch(directories[i], s.timeout_s, s.warmup, s.iterations, launcher=launcher)
        except DseError as exc:  # a deployment that cannot run: failed, the others go on
            result = Measurement.failed(str(exc))
        runs[i].append(result)  # kept even if Ctrl-C comes during the probe after it
        if probe is not None and last is not None:
            now = probe()
            runs[i][-1] = replace(result, probe_ms=[round(last, 4), round(now, 4)])
            last = now
        if on_run is not None:
            on_run(rnd, i, runs[i][-1])

    try:
        last = probe() if probe is not None else None
        for rnd in range(settings.rounds):
            for i in rng.permutation(len(directories)).tolist():
                if not runs[i] or runs[i][-1].status == "ok":
                    run(rnd, i)
        if settings.again_above is not None:
            for i in rng.permutation(len(directories)).tolist():
                if disagree(merge_runs(runs[i]), settings.again_above):
                    run(settings.rounds, i)
    except KeyboardInterrupt:
        interrupted = True
    merged = [merge_runs(r) if r else Measurement.failed("interrupted before it ran") for r in runs]
    return merged, interrupted
