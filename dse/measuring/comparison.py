"""A measurement with the model's prediction beside each figure (``comparison.json``).

The launching process writes it (:func:`write_comparison`), after the run (or the rounds of
runs) it compares; the ranks never do. It holds the measurement it compares (a run's
``measurements.json``, or several runs merged and with the machine's drift taken out), so a
reader needs no other file: ``{**measurement, "predicted": {...}, "comparison": {...}}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

from dse.errors import DseError
from dse.files import write_text
from dse.mapping import Mappings
from dse.runtime.measurements import (
    Measurement,
    check_measurement,
    measured_latency_ms,
    measured_period_ms,
    peak_rss,
)
from models_analytical.model import AnalyticalModel

COMPARISON = "comparison.json"


class Figure(TypedDict):
    predicted: float | None
    measured: float | None
    error_pct: float | None  # (predicted - measured) / measured x 100


class DeviceFigures(TypedDict):
    compute_ms: Figure
    communication_ms: Figure
    bytes_sent: Figure
    memory_mb: Figure  # the rank's peak RSS over its life: loading or running
    energy_j: Figure


class _Figures(TypedDict):
    latency_ms: Figure
    devices: dict[str, DeviceFigures]


class Figures(_Figures, total=False):
    latency_adjusted_ms: Figure  # with the machine's drift taken out (measured with a probe)
    period_ms: Figure  # the pipelined period (measured with stream=N)


class Compared(Measurement, total=False):
    """A measurement, the model's prediction of it (``Evaluation.as_dict``) and each figure
    side by side."""

    predicted: dict[str, Any]
    comparison: Figures


def compare(predicted: float | None, measured: float | None) -> Figure:
    err = None
    if predicted is not None and measured:
        err = round((predicted - measured) / measured * 100.0, 2)
    return {"predicted": predicted, "measured": measured, "error_pct": err}


def with_prediction(result: Measurement, model: AnalyticalModel, mapping: Mappings) -> Compared:
    """``result`` with ``predicted`` (mapping 0 of ``mapping`` in ``model``) and a
    ``comparison`` per figure."""
    platform = model.platform
    pred = model.evaluate(mapping.take(0)).as_dict(platform)
    out: Compared = dict(result)  # type: ignore[assignment]
    out["predicted"] = pred
    cmp: Figures = {"latency_ms": compare(pred["latency_ms"], None), "devices": {}}
    if result.get("latency_ms"):
        cmp["latency_ms"] = compare(pred["latency_ms"], result["latency_ms"]["median"])
        if "drift" in result["latency_ms"]:  # and with the machine's drift taken out
            cmp["latency_adjusted_ms"] = compare(pred["latency_ms"], measured_latency_ms(result))
    for r in result.get("ranks", []):
        d = r["device"]
        cmp["devices"][d] = {
            "compute_ms": compare(pred["compute_ms"].get(d), r["compute_ms"]["median"]),
            "communication_ms": compare(
                pred["communication_ms"].get(d), r["communication_ms"]["median"]
            ),
            "bytes_sent": compare(pred["bytes_sent"].get(d), r["bytes_sent"]),
            "memory_mb": compare(pred["memory_mb"].get(d), peak_rss(r)),
            "energy_j": compare(pred["energy_j"].get(d), r["energy_j"]),
        }
    if result.get("stream"):
        cmp["period_ms"] = compare(pred["objectives"]["period_ms"], result["stream"]["period_ms"])
        if "drift" in result["stream"]:  # and with the machine's drift taken out
            cmp["period_adjusted_ms"] = compare(
                pred["objectives"]["period_ms"], measured_period_ms(result)
            )
    out["comparison"] = cmp
    return out


def write_comparison(directory: Path, compared: Compared | Measurement) -> None:
    """``directory/comparison.json``: written by the launching process, and by nothing else."""
    write_text(Path(directory) / COMPARISON, json.dumps(compared, indent=1))


def read_comparison(directory: Path) -> Compared:
    """The comparison in ``directory``; one line when missing or not of its shape."""
    path = Path(directory) / COMPARISON
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise DseError(f"{path} is missing: the deployment was not measured") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DseError(f"{path} is not readable JSON: {exc.__class__.__name__}") from None
    check_measurement(doc, str(path))
    if doc["status"] == "ok" and not isinstance(doc.get("comparison"), dict):
        raise DseError(f"{path}: comparison is missing")
    return doc
