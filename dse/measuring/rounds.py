"""Deployments run in interleaved rounds, with the one re-run rule, and their runs merged: each
round in a new random order, so a slow spell of the machine hits one round of every deployment
instead of every round of one; a deployment whose rounds disagree runs one round more, and the
median of all is kept (:func:`merge_runs`); the machine's speed drift can then be taken out of
each round (:func:`take_out_drift`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dse.config import ITERATIONS, TIMEOUT_S, WARMUP
from dse.errors import DseError
from dse.runtime.deployment.measurements import Drift, Latency, Measurement, Stream
from dse.runtime.launch.mpiexec import Launcher, launch

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
    ``rounds``); their merged measurements (:func:`~dse.measuring.rounds.merge_runs`) in the
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


# --- runs merged, drift taken out --------------------------------------------------------


#: How much longer a run takes with the machine ``f`` times slower than at the reference:
#: its (latency, pipelined period) over theirs at the reference (:func:`take_out_drift`).
Slowdown = Callable[[float], tuple[float, float]]


def whole(f: float) -> tuple[float, float]:
    """The slowdown of a run whose every part slows with the machine."""
    return f, f


def merge_runs(results: list[Measurement]) -> Measurement:
    """One measurement from several runs of one deployment (rounds interleaved with other
    deployments, so a slow spell of the machine hits one round of each, not all of one).

    ``latency_ms.median`` is the median of the runs' medians; p10, p90 and ``all`` pool every
    iteration; ``rounds_ms`` lists each run's median and ``round_spread`` is (max - min) /
    median of them. The other figures (ranks, memory, equivalence) are those of the run whose
    median is the median run, but for the pipelined period (``stream``): the median of the
    runs' periods. A deployment with a failed run is failed, with that reason."""
    failures = [r for r in results if not r.ok]
    if failures or not results:
        return failures[0] if failures else Measurement.failed("not run")
    medians = [r.latency.median for r in results]
    mid = results[int(np.argsort(medians)[(len(results) - 1) // 2])]
    every = np.concatenate([np.asarray(r.latency.all, dtype=float) for r in results])
    med = float(np.median(medians))
    probed = all(len(r.probe_ms) == 2 for r in results)  # probes on either side of each
    latency = Latency(
        median=round(med, 4),
        p10=round(float(np.percentile(every, 10)), 4),
        p90=round(float(np.percentile(every, 90)), 4),
        all=[round(float(x), 4) for x in every],
        rounds_ms=[round(m, 4) for m in medians],
        round_spread=round((max(medians) - min(medians)) / med, 4),
        rounds_probe_ms=[round(float(np.mean(r.probe_ms)), 4) for r in results] if probed else [],
    )
    stream = mid.stream
    periods = [r.stream.period_ms for r in results if r.stream is not None]
    if stream is not None and len(periods) == len(results):
        median_period = round(float(np.median(periods)), 4)
        stream = Stream(stream.frames, median_period, [round(p, 4) for p in periods])
    return replace(mid, latency_ms=latency, stream=stream, probe_ms=[])


def disagree(merged: Measurement, above: float) -> bool:
    """A measured deployment (merged runs) whose rounds' medians span more than ``above`` of
    their median (``round_spread``)."""
    return merged.ok and (merged.latency.round_spread or 0.0) > above


def take_out_drift(
    merged: Measurement, reference_ms: float, slowdown: Slowdown = whole
) -> Measurement:
    """``merged`` with ``latency_ms.drift``: each round's median divided by how much longer
    the run takes with the machine ``its probe / reference_ms`` times slower (the speed probe
    beside it, :mod:`dse.runtime.launch.probe`; ``slowdown``'s latency factor, by default that
    ratio itself), i.e. the latency the run would have had with the machine at the reference's
    speed, and the median of those; likewise ``stream.drift`` for each round's pipelined
    period (``slowdown``'s period factor). Without probes, ``merged`` as it is."""
    if not merged.ok or not merged.latency.rounds_probe_ms:
        return merged
    lat = merged.latency
    probes = lat.rounds_probe_ms
    lat = replace(lat, drift=scaled_rounds(lat.rounds_ms, probes, reference_ms, slowdown, 0))
    stream = merged.stream
    if stream is not None and len(stream.rounds_ms) == len(probes):
        drift = scaled_rounds(stream.rounds_ms, probes, reference_ms, slowdown, 1)
        stream = replace(stream, drift=drift)
    return replace(merged, latency_ms=lat, stream=stream)


def scaled_rounds(
    rounds: list[float],
    probes: list[float],
    reference_ms: float,
    slowdown: Slowdown = whole,
    which: int = 0,
) -> Drift:
    """Each round brought to the reference's speed (over ``slowdown``'s factor ``which``: 0
    latency, 1 period), and their median."""
    adjusted = [m / slowdown(p / reference_ms)[which] for m, p in zip(rounds, probes, strict=True)]
    return Drift(
        reference_ms=round(float(reference_ms), 4),
        probe_ms=round(float(np.median(probes)), 4),
        rounds_adjusted_ms=[round(float(a), 4) for a in adjusted],
        median_adjusted=round(float(np.median(adjusted)), 4),
    )


def probe_times(merged: list[Measurement]) -> list[float]:
    """Every round's speed probe (ms) over merged measurements; [] where none was probed."""
    return [x for r in merged if r.latency_ms is not None for x in r.latency_ms.rounds_probe_ms]


def start_rss_mb(merged: list[Measurement]) -> float | None:
    """The median RSS a rank had before loading any sub-model (``rss_start_mb``), over every
    rank of ``merged`` that read it: the runtime's own memory on this machine now, which every
    memory figure sits on; None where none did."""
    starts = [
        rank.rss_start_mb for r in merged for rank in r.ranks if rank.rss_start_mb is not None
    ]
    return round(float(np.median(starts)), 1) if starts else None
