"""Measurements: what a run of a deployment produced (``measurements.json``), and runs merged.

The types are JSON-shaped (``TypedDict``): the figures travel as JSON between the ranks, the
launching process, calibration and the fidelity report, and are written as they are. A run's
``measurements.json`` has one writer, rank 0 of the run (:func:`write_measurements`), and one
reader, :func:`read_measurements`, which checks its shape. What the model predicted of it is
another file with another writer (:mod:`dse.runtime.comparison`).

A run that failed is ``{"status": "failed", "reason": ...}`` (with the figures it has, if any);
a run whose outputs differ from the whole model's, or could not be checked, is failed too.
Several runs of one deployment merge into one measurement (:func:`merge_runs`), and the
machine's speed drift can be taken out of it (:func:`take_out_drift`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypedDict

import numpy as np

from dse.errors import DseError
from dse.files import write_text

MEASUREMENTS = "measurements.json"
#: Largest measurements.json read (a million iterations' latencies are ~10 MB).
MAX_BYTES = 64 * 2**20


class Stats(TypedDict):
    """Milliseconds over the measured iterations."""

    median: float
    p10: float
    p90: float


#: How much longer a run takes with the machine ``f`` times slower than at the reference:
#: its (latency, pipelined period) over theirs at the reference (:func:`take_out_drift`).
Slowdown = Callable[[float], tuple[float, float]]


def whole(f: float) -> tuple[float, float]:
    """The slowdown of a run whose every part slows with the machine."""
    return f, f


class Drift(TypedDict):
    """Each round brought to the reference speed: the round over its slowdown at ``its probe
    / reference_ms`` (:data:`Slowdown`; its whole time: ``round x reference_ms / its probe``)."""

    reference_ms: float
    probe_ms: float
    rounds_adjusted_ms: list[float]
    median_adjusted: float


class _Latency(TypedDict):
    median: float
    p10: float
    p90: float
    all: list[float]  # every measured iteration (ms)


class Latency(_Latency, total=False):
    """The longest rank's time per iteration (ms); merged runs add their rounds."""

    rounds_ms: list[float]  # each run's median
    round_spread: float  # (max - min) / median of rounds_ms
    rounds_probe_ms: list[float]  # the speed probe beside each run
    drift: Drift


class RankFigures(TypedDict):
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


class Energy(TypedDict):
    joules: float | None
    reason: str | None


class Equivalence(TypedDict, total=False):
    """The outputs against the whole model's (onnxruntime, the same input); ``passed`` None:
    not checked, with a ``reason``."""

    passed: bool | None
    reason: str
    max_abs_error: float
    max_rel_error: float
    tolerance_rel: float
    definition: str


class _Stream(TypedDict):
    frames: int
    period_ms: float  # the steady-state time per frame, frames pushed back to back


class Stream(_Stream, total=False):
    """Merged runs: ``period_ms`` is the median of the runs' periods, each in ``rounds_ms``."""

    rounds_ms: list[float]


class _Status(TypedDict):
    status: Literal["ok", "failed"]


class Measurement(_Status, total=False):
    """One run of a deployment (or several merged), or a failure with its ``reason``."""

    reason: str
    net: str
    fingerprint: str
    mapping_hash: str
    ranks_count: int
    warmup: int
    iterations: int
    latency_ms: Latency
    ranks: list[RankFigures]
    energy: dict[str, Energy]  # by device
    equivalence: Equivalence
    stream: Stream
    probe_ms: list[float]  # the speed probes on either side of the run (interleaved runs)


def failed(reason: str) -> Measurement:
    return {"status": "failed", "reason": reason}


def stats(seconds: list[float]) -> Stats:
    """Median, p10 and p90 of ``seconds``, in ms."""
    a = np.asarray(seconds) * 1e3
    return {
        "median": round(float(np.median(a)), 4),
        "p10": round(float(np.percentile(a, 10)), 4),
        "p90": round(float(np.percentile(a, 90)), 4),
    }


def peak_rss(rank: RankFigures) -> float | None:
    """A rank's peak RSS (MB) over its life: the larger of loading and running."""
    vals = [rank.get("peak_rss_loading_mb"), rank.get("peak_rss_running_mb")]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


# --- the file ----------------------------------------------------------------------------


def write_measurements(directory: Path, m: Measurement) -> None:
    """``directory/measurements.json``: written by rank 0 of a run, and by nothing else."""
    write_text(Path(directory) / MEASUREMENTS, json.dumps(m, indent=1, allow_nan=False))


def read_measurements(directory: Path) -> Measurement:
    """The measurement a run wrote in ``directory``; one line when the file is missing, too
    large, not JSON or not of the shape :class:`Measurement` gives."""
    path = Path(directory) / MEASUREMENTS
    try:
        if path.stat().st_size > MAX_BYTES:
            raise DseError(f"{path} is larger than measurements can be")
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise DseError(f"{path} is missing: the run wrote no measurements") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DseError(f"{path} is not readable JSON: {exc.__class__.__name__}") from None
    check_measurement(doc, str(path))
    return doc


def check_measurement(doc: Any, where: str) -> None:
    """``doc`` has the shape of a :class:`Measurement` (the fields a reader uses)."""

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise DseError(f"{where}: {what}")

    need(isinstance(doc, dict), "not an object")
    need(doc.get("status") in ("ok", "failed"), "status is not ok or failed")
    if doc["status"] == "failed":
        need(isinstance(doc.get("reason"), str), "a failed run without its reason")
        return
    lat = doc.get("latency_ms")
    need(isinstance(lat, dict), "latency_ms is missing")
    for key in ("median", "p10", "p90"):
        need(_number(lat.get(key)), f"latency_ms.{key} is not a number")
    need(isinstance(lat.get("all"), list) and all(map(_number, lat["all"])), "latency_ms.all")
    need(isinstance(doc.get("ranks"), list), "ranks is missing")
    for i, r in enumerate(doc["ranks"]):
        need(isinstance(r, dict) and isinstance(r.get("device"), str), f"ranks[{i}].device")
        for key in ("compute_ms", "communication_ms", "wait_ms"):
            figures = r.get(key)
            need(isinstance(figures, dict) and _number(figures.get("median")), f"ranks[{i}].{key}")
        need(_number(r.get("bytes_sent")), f"ranks[{i}].bytes_sent")
    need(isinstance(doc.get("equivalence"), dict), "equivalence is missing")


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


# --- runs merged -------------------------------------------------------------------------


def merge_runs(results: list[Measurement]) -> Measurement:
    """One measurement from several runs of one deployment (rounds interleaved with other
    deployments, so a slow spell of the machine hits one round of each, not all of one).

    ``latency_ms.median`` is the median of the runs' medians; p10, p90 and ``all`` pool every
    iteration; ``rounds_ms`` lists each run's median and ``round_spread`` is (max - min) /
    median of them. The other figures (ranks, memory, equivalence) are those of the run whose
    median is the median run, but for the pipelined period (``stream``): the median of the
    runs' periods. A deployment with a failed run is failed, with that reason."""
    failures = [r for r in results if r.get("status") != "ok" or not r.get("latency_ms")]
    if failures or not results:
        return failures[0] if failures else failed("not run")
    medians = [float(r["latency_ms"]["median"]) for r in results]
    mid = results[int(np.argsort(medians)[(len(results) - 1) // 2])]
    every = np.concatenate([np.asarray(r["latency_ms"]["all"], dtype=float) for r in results])
    med = float(np.median(medians))
    merged: Measurement = dict(mid)  # type: ignore[assignment]
    merged["latency_ms"] = {
        "median": round(med, 4),
        "p10": round(float(np.percentile(every, 10)), 4),
        "p90": round(float(np.percentile(every, 90)), 4),
        "all": [round(float(x), 4) for x in every],
        "rounds_ms": [round(m, 4) for m in medians],
        "round_spread": round((max(medians) - min(medians)) / med, 4),
    }
    if all(len(r.get("probe_ms", ())) == 2 for r in results):  # probes on either side of each
        merged["latency_ms"]["rounds_probe_ms"] = [
            round(float(np.mean(r["probe_ms"])), 4) for r in results
        ]
    merged.pop("probe_ms", None)
    periods = [float(r["stream"]["period_ms"]) for r in results if r.get("stream")]
    if periods and len(periods) == len(results):
        merged["stream"] = {
            "frames": mid["stream"]["frames"],
            "period_ms": round(float(np.median(periods)), 4),
            "rounds_ms": [round(p, 4) for p in periods],
        }
    return merged


def disagree(merged: Measurement, above: float) -> bool:
    """A measured deployment (merged runs) whose rounds' medians span more than ``above`` of
    their median (``round_spread``)."""
    lat = merged.get("latency_ms") or {}
    return merged.get("status") == "ok" and lat.get("round_spread", 0.0) > above


def take_out_drift(
    merged: Measurement, reference_ms: float, slowdown: Slowdown = whole
) -> Measurement:
    """``merged`` with ``latency_ms.drift``: each round's median divided by how much longer
    the run takes with the machine ``its probe / reference_ms`` times slower (the speed probe
    beside it, :mod:`dse.runtime.probe`; ``slowdown``'s latency factor, by default that ratio
    itself), i.e. the latency the run would have had with the machine at the reference's
    speed, and the median of those; likewise ``stream.drift`` for each round's pipelined
    period (``slowdown``'s period factor). Without probes, ``merged`` unchanged."""
    lat = merged.get("latency_ms") or {}
    probes = lat.get("rounds_probe_ms")
    if not probes:
        return merged
    lat["drift"] = scaled_rounds(lat["rounds_ms"], probes, reference_ms, slowdown, 0)
    stream = merged.get("stream")
    if stream and len(stream.get("rounds_ms", ())) == len(probes):
        stream["drift"] = scaled_rounds(stream["rounds_ms"], probes, reference_ms, slowdown, 1)
    return merged


def scaled_rounds(
    rounds: list[float],
    probes: list[float],
    reference_ms: float,
    slowdown: Slowdown = whole,
    which: int = 0,
) -> dict[str, Any]:
    """Each round brought to the reference's speed (over ``slowdown``'s factor ``which``: 0
    latency, 1 period), and their median."""
    adjusted = [m / slowdown(p / reference_ms)[which] for m, p in zip(rounds, probes, strict=True)]
    return {
        "reference_ms": round(float(reference_ms), 4),
        "probe_ms": round(float(np.median(probes)), 4),
        "rounds_adjusted_ms": [round(float(a), 4) for a in adjusted],
        "median_adjusted": round(float(np.median(adjusted)), 4),
    }


def probe_times(merged: list[Measurement]) -> list[float]:
    """Every round's speed probe (ms) over merged measurements; [] where none was probed."""
    return [x for r in merged for x in (r.get("latency_ms") or {}).get("rounds_probe_ms", [])]


def start_rss_mb(merged: list[Measurement]) -> float | None:
    """The median RSS a rank had before loading any sub-model (``rss_start_mb``), over every
    rank of ``merged`` that read it: the runtime's own memory on this machine now, which every
    memory figure sits on; None where none did."""
    starts = [
        rank["rss_start_mb"]
        for r in merged
        for rank in r.get("ranks") or []
        if rank.get("rss_start_mb") is not None
    ]
    return round(float(np.median(starts)), 1) if starts else None


def measured_latency_ms(result: Measurement) -> float:
    """A measurement's latency: drift taken out where it was (:func:`take_out_drift`)."""
    lat = result["latency_ms"]
    return float(lat["drift"]["median_adjusted"] if "drift" in lat else lat["median"])


def measured_period_ms(result: Measurement) -> float:
    """A measurement's pipelined period: drift taken out where it was (:func:`take_out_drift`)."""
    stream = result["stream"]
    return float(stream["drift"]["median_adjusted"] if "drift" in stream else stream["period_ms"])
