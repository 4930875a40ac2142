"""Measurements: what a run of a deployment produced (``measurements.json``).

The types are records (:mod:`dse.records`): written to JSON only at the file, by rank 0 of the
run (:func:`write_measurements`), and read back by one reader (:func:`read_measurements`),
which checks every field. Runs merged into one measurement and the machine's drift taken out
are the launching side's (:mod:`dse.measuring.rounds`); what the model predicted of a run is
another file with another writer (:mod:`dse.measuring.comparison`).

A run that failed has ``status`` "failed" and its ``reason`` (with the figures it has, if any);
a run whose outputs differ from the whole model's, or could not be checked, is failed too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from dse.errors import DseError
from dse.files import write_text
from dse.records import read, to_json
from dse.runtime.deployment.layout import MEASUREMENTS

#: Largest measurements.json read (a million iterations' latencies are ~10 MB).
MAX_BYTES = 64 * 2**20


@dataclass
class Stats:
    """Milliseconds over the measured iterations."""

    median: float
    p10: float
    p90: float


@dataclass
class Drift:
    """Each round brought to the reference speed: the round over the run's slowdown at ``its
    probe / reference_ms`` (:data:`dse.measuring.rounds.Slowdown`)."""

    reference_ms: float
    probe_ms: float  # the rounds' median probe
    rounds_adjusted_ms: list[float]
    median_adjusted: float


@dataclass
class Latency(Stats):
    """The longest rank's time per iteration (ms); merged runs add their rounds."""

    all: list[float]  # every measured iteration
    rounds_ms: list[float] = field(default_factory=list)  # each run's median
    round_spread: float | None = None  # (max - min) / median of rounds_ms
    rounds_probe_ms: list[float] = field(default_factory=list)  # the speed probe beside each
    drift: Drift | None = None

    @property
    def measured_ms(self) -> float:
        """The latency: with the machine's drift taken out where it was."""
        return self.drift.median_adjusted if self.drift is not None else self.median


@dataclass
class Stream:
    """Frames pushed back to back: the steady-state time per frame; merged runs: the median of
    the runs' periods, each in ``rounds_ms``."""

    frames: int
    period_ms: float
    rounds_ms: list[float] = field(default_factory=list)
    drift: Drift | None = None

    @property
    def measured_ms(self) -> float:
        """The period: with the machine's drift taken out where it was."""
        return self.drift.median_adjusted if self.drift is not None else self.period_ms


@dataclass
class RankFigures:
    """One rank's figures (times: ms over the measured iterations)."""

    rank: int
    device: str
    host: str  # the platform's host of its device
    hostname: str  # where it ran, as that machine names itself (an emulated board: its name)
    kind: str
    threads: int
    segments: int
    load_s: float
    compute_ms: Stats
    communication_ms: Stats
    wait_ms: Stats
    # CPU time of the rank's process per iteration (every thread): against its wall time,
    # what waiting cost (a rank that spins while it waits burns its device's CPU share)
    cpu_ms: Stats
    # how long its main thread was ready to run but not running per iteration (its CPU taken
    # by other work, or its device's CPU quota spent; 0 where the kernel does not say)
    runnable_ms: Stats
    bytes_sent: int
    # its RSS before it loads any sub-model (the interpreter, onnxruntime, MPI): the baseline
    # its peaks sit on (None where the peak could not be reset)
    rss_start_mb: float | None
    # the part of it that maps files (libraries' pages; RssFile), None where /proc lacks it
    rss_start_file_mb: float | None
    peak_rss_loading_mb: float | None
    peak_rss_running_mb: float | None
    peak_rss_separate: bool  # whether the running peak was measured apart from loading
    # while frames streamed back to back (``stream=N``), apart from the running peak where
    # peak_rss_separate: several frames' tensors in flight at once; None without a stream
    peak_rss_stream_mb: float | None
    energy_j: float | None  # per iteration, of the whole host or board (energy_scope)
    energy_reason: str | None  # why there is no energy figure
    energy_scope: str | None  # the counter: rapl | ina3221

    @property
    def peak_rss_mb(self) -> float | None:
        """The rank's peak RSS (MB) over its life: the larger of loading and running."""
        vals = [v for v in (self.peak_rss_loading_mb, self.peak_rss_running_mb) if v is not None]
        return max(vals) if vals else None


@dataclass
class Equivalence:
    """The outputs against the whole model's (onnxruntime, the same input); ``passed`` None:
    not checked, with a ``reason``."""

    passed: bool | None
    reason: str | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    tolerance_rel: float | None = None
    definition: str | None = None


@dataclass
class Measurement:
    """One run of a deployment (or several merged), or a failure with its ``reason``."""

    status: Literal["ok", "failed"]
    reason: str | None = None
    net: str | None = None
    fingerprint: str | None = None
    mapping_hash: str | None = None
    ranks_count: int | None = None
    warmup: int | None = None
    iterations: int | None = None
    latency_ms: Latency | None = None
    ranks: list[RankFigures] = field(default_factory=list)
    equivalence: Equivalence | None = None
    stream: Stream | None = None
    probe_ms: list[float] = field(default_factory=list)  # the speed probes either side of it

    @staticmethod
    def failed(reason: str) -> Measurement:
        """A run that gave no figures, and why."""
        return Measurement("failed", reason)

    @property
    def ok(self) -> bool:
        """Measured, with its outputs equal to the whole model's."""
        return self.status == "ok" and self.latency_ms is not None

    @property
    def latency(self) -> Latency:
        """The latency figures of a measured run (a failed one has none: an error)."""
        if self.latency_ms is None:
            raise ValueError(f"a failed run has no latency: {self.reason}")
        return self.latency_ms


def stats(seconds: list[float]) -> Stats:
    """Median, p10 and p90 of ``seconds``, in ms."""
    a = np.asarray(seconds) * 1e3
    return Stats(
        round(float(np.median(a)), 4),
        round(float(np.percentile(a, 10)), 4),
        round(float(np.percentile(a, 90)), 4),
    )


# --- the file ----------------------------------------------------------------------------


def write_measurements(directory: Path, m: Measurement) -> None:
    """``directory/measurements.json``: written by rank 0 of a run, and by nothing else."""
    write_text(Path(directory) / MEASUREMENTS, json.dumps(to_json(m), indent=1, allow_nan=False))


def read_measurements(directory: Path) -> Measurement:
    """The measurement a run wrote in ``directory``; one line when the file is missing, too
    large, not JSON or not a :class:`Measurement`."""
    path = Path(directory) / MEASUREMENTS
    return read(Measurement, read_json_file(path, "the run wrote no measurements"), str(path))


def read_json_file(path: Path, missing: str) -> object:
    """A JSON file a run or the launching process wrote; one line (``missing`` when it is
    absent) when it cannot be read."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise DseError(f"{path} is larger than measurements can be")
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DseError(f"{path} is missing: {missing}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DseError(f"{path} is not readable JSON: {exc.__class__.__name__}") from None
