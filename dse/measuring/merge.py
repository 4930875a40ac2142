"""Runs of one deployment merged into one measurement, and the machine's speed drift taken out
of it: the rounds of :mod:`dse.measuring.rounds` become one figure per mapping."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from dse.runtime.deployment.measurements import Drift, Latency, Measurement, Stream

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
