"""Phase two after a search: the best mapping of each objective and more spread along the front,
deployed and measured (:mod:`dse.measuring.measure`) into ``<run>/phase2/<label>/``;
``phase2.csv`` (one row per mapping: predicted and measured latency, period, and per device
memory, energy, compute and bytes sent, each with its error; ``dse.fidelity`` writes its CSV
with the same rows) and ``phase2.png`` (predicted against measured).

A mapping that fails (a crash, a hang past the time limit, outputs that differ from the whole
model) is a row marked failed with its reason, and the others go on. ``phase2.csv`` is
rewritten after every mapping, so Ctrl-C keeps the rows measured so far. Unless ``keep``, a
mapping's sub-models are removed once it is measured, or stopped, or, when the process was
killed outright, at the next start (:func:`dse.files.temporary_files`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dse.config import Phase2Config
from dse.files import write_text
from dse.mapping import Mappings
from dse.measuring.comparison import Compared, Figure
from dse.measuring.measure import Settings, measure_mappings
from dse.measuring.rounds import Rounds
from dse.net import Net
from dse.platform import Platform
from dse.results.plots import plot_predicted_vs_measured
from dse.results.report import FAR_OFF, far_off
from dse.runtime.launch.mpiexec import Launcher
from dse.search.problem import MappingProblem
from models_analytical.model import AnalyticalModel

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


def latency_lines(rows: Sequence[Row]) -> list[str]:
    """One line per mapping of ``rows`` (:func:`csv_row`'s): its label, predicted and measured
    latency and the error, flagged where it is more than
    :data:`dse.results.report.LARGE_ERROR_PCT` off; a failed mapping's line gives its reason."""
    lines = []
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"{r['mapping']}: failed ({r['reason']})")
            continue
        error = r["latency_error_pct"]
        lines.append(
            f"{r['mapping']}: predicted {r['latency_predicted_ms']:.4g} ms, measured "
            f"{r['latency_measured_ms']:.4g} ms, error "
            + ("unknown" if error is None else f"{error:+.1f} %")
            + (f" ({FAR_OFF})" if far_off(r) else "")
        )
    return lines


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


#: Where phase two deploys each mapping, under the run's directory.
DEPLOYMENTS = "phase2"


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


def settings_of(s: Phase2Config, seed: int) -> Settings:
    """Phase two's measuring settings: one round of each mapping, no speed probe."""
    rounds = Rounds(1, s.warmup, s.iterations, s.timeout_s)
    return Settings(rounds, s.stream, probe=False, seed=seed, keep=s.keep)


def phase2_after_search(
    out: Path,
    problem: MappingProblem,
    genes: np.ndarray,
    F: np.ndarray,
    net: Net,
    platform: Platform,
    settings: Phase2Config | None = None,
    seed: int = 0,
    launcher: Launcher | None = None,
) -> list[Row]:
    """After a search: measure the best mapping of each objective and ``top_k`` more spread
    along the front (``genes``, ``F`` from :func:`dse.search.nsga2.front`) with ``launcher``
    (:func:`measure_phase2`); returns the CSV's rows (the run's summary and report take
    them)."""
    s = settings or Phase2Config()
    picks = select(F, list(problem.objectives), s.top_k)
    chosen = problem.chromosome.decode(np.asarray(genes)[[i for i, _ in picks]])
    labels = [label for _, label in picks]
    return measure_phase2(out, net, platform, problem.model, chosen, labels, s, seed, launcher)


def measure_phase2(
    out: Path,
    net: Net,
    platform: Platform,
    model: AnalyticalModel,
    mappings: Mappings,
    labels: list[str],
    settings: Phase2Config,
    seed: int = 0,
    launcher: Launcher | None = None,
) -> list[Row]:
    """Deploy and measure every mapping (named by ``labels``) into ``out/phase2/<label>``;
    ``out/phase2.csv`` after each one measured and ``out/phase2.png``; the CSV's rows. Ctrl-C:
    the rows so far written, then KeyboardInterrupt."""
    out = Path(out)
    done: dict[int, Compared] = {}

    def rows() -> list[Row]:
        return [csv_row(labels[p], done[p]) for p in sorted(done)]

    def on_result(p: int, result: Compared) -> None:
        done[p] = result
        write_csv(out / "phase2.csv", rows())

    try:
        measured = measure_mappings(
            net, model, mappings, labels, [out / DEPLOYMENTS / lb for lb in labels],
            settings_of(settings, seed), launcher=launcher, on_result=on_result,
        )  # fmt: skip
        done.update(enumerate(measured.results))
        if measured.interrupted:  # Ctrl-C during the rounds: the rows so far, then stop
            raise KeyboardInterrupt
    finally:
        if done:
            write_csv(out / "phase2.csv", rows())
            title = f"{net.name} on {platform.name}: predicted vs measured"
            plot(out / "phase2.png", rows(), title)
    return rows()
