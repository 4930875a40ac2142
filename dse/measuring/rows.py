"""Phase two after a search: deploy and measure chosen mappings; phase2.csv and phase2.png.

Each mapping is deployed to ``<run>/phase2/<label>/`` and measured under mpiexec (its
``measurements.json``, and ``comparison.json`` with the prediction beside each figure). A
mapping that fails (a crash, a hang past the time limit, outputs that differ from the whole
model) is a row marked failed with its reason, and the others go on. ``phase2.csv`` is
rewritten after every mapping, so Ctrl-C keeps the rows measured so far. Unless ``keep``, a
mapping's sub-models are removed once it is measured, or stopped, or, when the process was
killed outright, at the next start (:func:`dse.files.temporary_files`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from dse.config import Phase2Config
from dse.errors import DseError
from dse.files import temporary_files, write_text
from dse.mapping import Mappings
from dse.net import Net
from dse.platform import Platform
from dse.results.plots import plot_predicted_vs_measured
from dse.runtime.comparison import Compared
from dse.runtime.measure import deploy_and_measure
from dse.runtime.measurements import Measurement, failed
from dse.runtime.mpirun import Launcher
from dse.runtime.package import SUBMODELS
from models_analytical.model import AnalyticalModel

#: A row of phase2.csv (and of dse.fidelity's CSV): column -> value.
Row = dict[str, Any]


def select(F: np.ndarray, names: Sequence[str], top_k: int) -> list[tuple[int, str]]:
    """Rows of a front ``F[P, M]`` to measure: the best of each objective (``best_<name>``,
    ``best_<a>_<b>`` for one mapping best at both),
    then up to ``top_k`` more spread along the front (``front_<i>``: each the farthest, in
    objectives normalised to [0, 1], from those already chosen)."""
    F = np.asarray(F, dtype=np.float64)
    chosen: list[tuple[int, str]] = []
    for j, name in enumerate(names):
        i = int(np.argmin(F[:, j]))
        same = [k for k, (c, _) in enumerate(chosen) if c == i]
        if same:  # one mapping best at several objectives: best_latency_memory
            chosen[same[0]] = (i, f"{chosen[same[0]][1]}_{name}")
        else:
            chosen.append((i, f"best_{name}"))
    span = np.ptp(F, axis=0)
    norm = (F - F.min(axis=0)) / np.where(span > 0, span, 1.0)
    for _ in range(top_k):
        taken = [c for c, _ in chosen]
        if len(taken) >= len(F):
            break
        dist = np.min(np.linalg.norm(norm[:, None, :] - norm[None, taken, :], axis=2), axis=1)
        dist[taken] = -1.0
        i = int(np.argmax(dist))
        chosen.append((i, f"front_{i}"))
    return chosen


def csv_row(label: str, result: Compared | Measurement) -> Row:
    """One CSV row: predicted and measured latency, per-device memory and energy, error %."""
    row: Row = {"mapping": label, "status": result.get("status", "failed")}
    row["reason"] = result.get("reason", "")
    cmp = result.get("comparison") or {}
    lat = cmp.get("latency_ms") or {}
    row["latency_predicted_ms"] = lat.get("predicted")
    row["latency_measured_ms"] = lat.get("measured")
    row["latency_error_pct"] = lat.get("error_pct")
    if "latency_adjusted_ms" in cmp:  # measured with a speed probe (dse.runtime.probe)
        row["latency_adjusted_ms"] = cmp["latency_adjusted_ms"]["measured"]
        row["latency_adjusted_error_pct"] = cmp["latency_adjusted_ms"]["error_pct"]
    eq = result.get("equivalence") or {}
    row["max_rel_error"] = eq.get("max_rel_error")
    if "period_ms" in cmp:
        row["period_predicted_ms"] = cmp["period_ms"]["predicted"]
        row["period_measured_ms"] = cmp["period_ms"]["measured"]
        row["period_error_pct"] = cmp["period_ms"]["error_pct"]
    if "period_adjusted_ms" in cmp:  # measured with a speed probe, as the latency
        row["period_adjusted_ms"] = cmp["period_adjusted_ms"]["measured"]
        row["period_adjusted_error_pct"] = cmp["period_adjusted_ms"]["error_pct"]
    for device, figures in cmp.get("devices", {}).items():
        for key in ("memory_mb", "energy_j", "compute_ms", "bytes_sent"):
            f = figures[key]
            row[f"{device}_{key}_predicted"] = f["predicted"]
            row[f"{device}_{key}_measured"] = f["measured"]
            row[f"{device}_{key}_error_pct"] = f["error_pct"]
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
        panels["peak memory per device (MB)"] = tuple(map(list, zip(*mem, strict=True)))
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


def measure_mappings(
    out: Path,
    net: Net,
    platform: Platform,
    model: AnalyticalModel,
    mappings: Mappings,
    labels: Sequence[str],
    settings: Phase2Config | None = None,
    seed: int = 0,
    on_row: Callable[[Row], None] | None = None,
    launcher: Launcher | None = None,
) -> list[Row]:
    """Deploy and measure every mapping of ``mappings`` (named by ``labels``) into ``out/phase2``
    (its ranks started by ``launcher``, default on the platform's hosts by name); writes
    ``out/phase2.csv`` after each (and calls ``on_row`` with its row) and ``out/phase2.png``;
    returns the rows."""
    s = settings or Phase2Config()
    out = Path(out)
    rows: list[Row] = []
    title = f"{net.name} on {platform.name}: predicted vs measured"
    try:
        for p, label in enumerate(labels):
            d = out / "phase2" / label
            # the sub-models go when measured, or stopped, or (at the next start) killed
            with nullcontext() if s.keep else temporary_files(d, SUBMODELS):
                try:
                    result = deploy_and_measure(
                        net, platform, model, mappings.take(p), d, seed, s.warmup,
                        s.iterations, s.timeout_s, s.stream, launcher,
                    )  # fmt: skip
                except DseError as exc:
                    result = failed(str(exc))
            rows.append(csv_row(label, result))
            write_csv(out / "phase2.csv", rows)
            if on_row is not None:
                on_row(rows[-1])
    finally:
        if rows:
            write_csv(out / "phase2.csv", rows)
            plot(out / "phase2.png", rows, title)
    return rows


def phase2_after_search(
    out: Path,
    problem: Any,
    genes: np.ndarray,
    F: np.ndarray,
    net: Net,
    platform: Platform,
    settings: Phase2Config | None = None,
    seed: int = 0,
    launcher: Launcher | None = None,
) -> list[Row]:
    """After a search: measure the best mapping of each objective and ``top_k`` more spread
    along the front (``genes``, ``F`` from :func:`dse.search.nsga2.front`) with ``launcher``;
    returns the rows (the run's summary and report take them)."""
    s = settings or Phase2Config()
    picks = select(F, list(problem.objectives), s.top_k)
    chosen = problem.chromosome.decode(np.asarray(genes)[[i for i, _ in picks]])
    labels = [label for _, label in picks]
    rows = measure_mappings(
        out, net, platform, problem.model, chosen, labels, s, seed, launcher=launcher
    )
    return rows
