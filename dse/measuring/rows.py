"""Measured mappings as rows: ``phase2.csv`` and ``fidelity.csv`` (one row per mapping:
predicted and measured latency, period, and per device memory, energy, compute and bytes sent,
each with its error), and their plot of predicted against measured (``phase2.png``)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from dse.files import write_text
from dse.measuring.comparison import Compared, Figure
from dse.results.plots import plot_predicted_vs_measured

#: A row of phase2.csv (and of dse.fidelity's CSV): column -> value.
Row = dict[str, Any]


def csv_row(label: str, result: Compared) -> Row:
    """One CSV row: predicted and measured latency, per-device memory and energy, error %."""
    row: Row = {"mapping": label, "status": result.status, "reason": result.reason or ""}
    cmp = result.comparison

    def put(prefix: str, f: Figure) -> None:
        row[f"{prefix}_predicted_ms"] = f.predicted
        row[f"{prefix}_measured_ms"] = f.measured
        row[f"{prefix}_error_pct"] = f.error_pct

    latency = cmp.latency_ms if cmp is not None else Figure(None, None, None)
    put("latency", latency)
    if cmp is not None and cmp.latency_adjusted_ms is not None:  # with a speed probe
        row["latency_adjusted_ms"] = cmp.latency_adjusted_ms.measured
        row["latency_adjusted_error_pct"] = cmp.latency_adjusted_ms.error_pct
    eq = result.equivalence
    row["max_rel_error"] = eq.max_rel_error if eq is not None else None
    if cmp is not None and cmp.period_ms is not None:
        put("period", cmp.period_ms)
    if cmp is not None and cmp.period_adjusted_ms is not None:  # with a probe, as the latency
        row["period_adjusted_ms"] = cmp.period_adjusted_ms.measured
        row["period_adjusted_error_pct"] = cmp.period_adjusted_ms.error_pct
    for device, figures in (cmp.devices if cmp is not None else {}).items():
        for key in ("memory_mb", "energy_j", "compute_ms", "bytes_sent"):
            f = getattr(figures, key)
            row[f"{device}_{key}_predicted"] = f.predicted
            row[f"{device}_{key}_measured"] = f.measured
            row[f"{device}_{key}_error_pct"] = f.error_pct
    return row


def write_csv(path: Path, rows: list[Row]) -> None:
    columns: list[str] = []
    for r in rows:
        columns.extend(k for k in r if k not in columns)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, restval="")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    write_text(path, buf.getvalue())


def plot(path: Path, rows: list[Row], title: str) -> None:
    """Predicted against measured: latency, the peak memory of every device and, where
    measured (``stream``), the pipelined period."""
    ok = [r for r in rows if r["status"] == "ok"]
    names = [r["mapping"] for r in ok]
    panels = {
        "latency (ms)": (
            [r["latency_measured_ms"] for r in ok],
            [r["latency_predicted_ms"] for r in ok],
            names,
        )
    }
    mem = [
        (r[k], r[k.replace("_measured", "_predicted")], r["mapping"])
        for r in ok
        for k in r
        if k.endswith("_memory_mb_measured")
    ]
    if mem:
        measured, predicted, labels = zip(*mem, strict=True)
        panels["peak memory per device (MB)"] = (list(measured), list(predicted), list(labels))
    streamed = [r for r in ok if r.get("period_measured_ms")]
    if streamed:
        panels["pipelined period (ms)"] = (
            [r["period_measured_ms"] for r in streamed],
            [r["period_predicted_ms"] for r in streamed],
            [r["mapping"] for r in streamed],
        )
    failed = len(rows) - len(ok)
    plot_predicted_vs_measured(
        path, panels, title + (f" ({failed} mapping(s) failed)" if failed else "")
    )
