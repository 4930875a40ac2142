"""A measurement with the model's prediction beside each figure (``comparison.json``).

The launching process writes it (:func:`write_comparison`), after the run (or the rounds of
runs) it compares; the ranks never do. It holds the measurement it compares (a run's
``measurements.json``, or several runs merged and with the machine's drift taken out), so a
reader needs no other file: the measurement's fields, ``predicted`` and ``comparison``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from dse.errors import DseError
from dse.files import write_text
from dse.mapping import Mappings
from dse.records import read, to_json
from dse.runtime.deployment.layout import COMPARISON
from dse.runtime.deployment.measurements import Measurement, read_json_file
from models_analytical.model import AnalyticalModel, Prediction


@dataclass(frozen=True)
class Figure:
    """One figure predicted and measured; ``error_pct``: (predicted - measured) / measured x
    100 (None where either is unknown or the measured is 0)."""

    predicted: float | None
    measured: float | None
    error_pct: float | None

    @staticmethod
    def of(predicted: float | None, measured: float | None) -> Figure:
        err = None
        if predicted is not None and measured:
            err = round((predicted - measured) / measured * 100.0, 2)
        return Figure(predicted, measured, err)


@dataclass(frozen=True)
class DeviceFigures:
    """One device's figures predicted and measured."""

    compute_ms: Figure
    communication_ms: Figure
    bytes_sent: Figure
    memory_mb: Figure  # the rank's peak RSS over its life: loading or running
    energy_j: Figure


@dataclass(frozen=True)
class Figures:
    """Every figure of a run predicted and measured."""

    latency_ms: Figure
    devices: dict[str, DeviceFigures] = field(default_factory=dict)
    latency_adjusted_ms: Figure | None = None  # the machine's drift taken out (probed runs)
    period_ms: Figure | None = None  # the pipelined period (measured with stream=N)
    period_adjusted_ms: Figure | None = None  # and with the drift taken out


@dataclass
class Compared(Measurement):
    """A measurement, the model's prediction of it and each figure side by side (a failed run:
    its reason, and the prediction where there is a model)."""

    predicted: Prediction | None = None
    comparison: Figures | None = None


def compared(result: Measurement) -> Compared:
    """``result`` as a :class:`Compared` without a prediction (no model to compare with)."""
    return Compared(**{f.name: getattr(result, f.name) for f in fields(Measurement)})


def with_prediction(result: Measurement, model: AnalyticalModel, mapping: Mappings) -> Compared:
    """``result`` with ``predicted`` (mapping 0 of ``mapping`` in ``model``) and a
    ``comparison`` per figure."""
    pred = model.evaluate(mapping.take(0)).prediction(model.platform)
    out = compared(result)
    out.predicted = pred
    latency = Figure.of(pred.latency_ms, None)
    devices, adjusted, period, period_adjusted = {}, None, None, None
    if result.latency_ms is not None:
        latency = Figure.of(pred.latency_ms, result.latency_ms.median)
        if result.latency_ms.drift is not None:  # and with the machine's drift taken out
            adjusted = Figure.of(pred.latency_ms, result.latency_ms.measured_ms)
    for r in result.ranks:
        d = r.device
        devices[d] = DeviceFigures(
            compute_ms=Figure.of(pred.compute_ms.get(d), r.compute_ms.median),
            communication_ms=Figure.of(pred.communication_ms.get(d), r.communication_ms.median),
            bytes_sent=Figure.of(pred.bytes_sent.get(d), r.bytes_sent),
            memory_mb=Figure.of(pred.memory_mb.get(d), r.peak_rss_mb),
            energy_j=Figure.of(pred.energy_j.get(d), r.energy_j),
        )
    if result.stream is not None:
        predicted_period = pred.objectives["period_ms"]
        period = Figure.of(predicted_period, result.stream.period_ms)
        if result.stream.drift is not None:  # and with the machine's drift taken out
            period_adjusted = Figure.of(predicted_period, result.stream.measured_ms)
    out.comparison = Figures(latency, devices, adjusted, period, period_adjusted)
    return out


def write_comparison(directory: Path, result: Compared) -> None:
    """``directory/comparison.json``: written by the launching process, and by nothing else."""
    write_text(Path(directory) / COMPARISON, json.dumps(to_json(result), indent=1))


def read_comparison(directory: Path) -> Compared:
    """The comparison in ``directory``; one line when missing or not a :class:`Compared`."""
    path = Path(directory) / COMPARISON
    doc = read_json_file(path, "the deployment was not measured")
    result = read(Compared, doc, str(path))
    if result.status == "ok" and result.comparison is None:
        raise DseError(f"{path}: comparison is missing")
    return result
