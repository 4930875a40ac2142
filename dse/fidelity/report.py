"""The fidelity report: ``fidelity.json`` (:class:`FidelityDoc`) and the lines printed at the
end."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dse.fidelity.measure import DEPLOYMENTS, MemoryBaseline
from dse.fidelity.statistics import (
    Agreement,
    Point,
    Points,
    Repeatability,
    by_kind,
    noise_floor,
    repeatability,
    round_spread,
    stats,
)
from dse.files import write_text
from dse.measuring.rounds import AGAIN_ABOVE
from dse.measuring.speed import Speed
from dse.records import to_json
from dse.runtime.deployment.measurements import Measurement


@dataclass(frozen=True)
class Figures:
    """The report's statistics (:func:`figures`)."""

    latency: Agreement
    latency_as_measured: Agreement
    memory: Agreement
    period: Agreement | None
    period_as_measured: Agreement | None
    noise_floor_pct: float | None
    round_spread_pct: float | None
    repeatability: Repeatability | None
    repeatability_adjusted: Repeatability | None


@dataclass(frozen=True)
class FidelityDoc:
    """``fidelity.json``: how well the model predicted the runs of one network on one platform
    (every figure that could not be computed is null)."""

    net: str
    platform: str
    coefficients: str
    calibrated: bool
    calibration: str  # models_analytical.coefficients.Coefficients.calibration
    latency: Agreement  # drift taken out where probed (``drift_taken_out``)
    latency_as_measured: Agreement
    drift: Speed | None
    memory: Agreement
    memory_baseline: MemoryBaseline | None
    period: Agreement | None
    period_as_measured: Agreement | None
    stream: int
    failed: list[str]
    warmup: int
    iterations: int
    rounds: int
    seconds: float
    energy: str
    noise_floor_pct: float | None
    round_spread_pct: float | None
    repeatability: Repeatability | None
    repeatability_adjusted: Repeatability | None
    ran_again: list[str]
    interrupted: bool


def write_doc(path: Path, doc: FidelityDoc) -> None:
    """``fidelity.json``, written atomically as strict JSON."""
    write_text(path, json.dumps(to_json(doc), indent=1, allow_nan=False))


def latency_figures(pts: list[Point]) -> Agreement:
    """:func:`stats` of latency points, with the error by kind of mapping."""
    return replace(stats([x[0] for x in pts], [x[1] for x in pts]), by_kind=by_kind(pts))


def drift_figures(pts: Points, name: str) -> Agreement:
    """:func:`latency_figures` of ``name``'s points (latency or period) with the machine's drift
    taken out where it was probed, else as measured, saying which."""
    adjusted = pts.of(name, adjusted=True)
    return replace(latency_figures(adjusted or pts.of(name)), drift_taken_out=bool(adjusted))


def figures(pts: Points, results: Sequence[Measurement]) -> Figures:
    """The report's statistics: latency and the pipelined period (None without ``stream``)
    judged with the machine's drift taken out where it was probed, and as measured; memory;
    and how well the measured ``results`` agree with themselves."""
    return Figures(
        latency=drift_figures(pts, "latency"),
        latency_as_measured=latency_figures(pts.latency),
        memory=stats([x[0] for x in pts.memory], [x[1] for x in pts.memory]),
        period=drift_figures(pts, "period") if pts.period else None,
        period_as_measured=latency_figures(pts.period) if pts.period else None,
        noise_floor_pct=noise_floor(results),
        round_spread_pct=round_spread(results),
        repeatability=repeatability(results),
        repeatability_adjusted=repeatability(results, adjusted=True),
    )


def drift_line(speed: Speed, raw: Agreement, raw_period: Agreement | None = None) -> str:
    """How the machine's speed compared with the reference, and the figures as measured."""
    pct = speed.slower_pct
    ran = f"{abs(pct):.1f} % {'slower' if pct >= 0 else 'faster'}"
    if speed.reference == "calibration":
        how = (
            f"the machine ran {ran} than at calibration "
            f"(the whole network alone: {speed.probe_ms:.1f} ms against "
            f"{speed.reference_ms:.1f} ms then)"
        )
    elif speed.reference == "calibrated networks":
        how = (
            "calibration did not probe this network: the networks it did "
            f"({', '.join(speed.networks)}), probed beside the runs, ran {ran} than then, "
            f"so runs are brought to {speed.reference_ms:.1f} ms of this network "
            f"alone (its median probe: {speed.probe_ms:.1f} ms)"
        )
    else:
        how = (
            "calibration did not probe this network: runs are brought to this run's median "
            f"speed (the whole network alone: {speed.probe_ms:.1f} ms)"
        )
    period = (
        f", period MAPE {_pct(raw_period.mape_pct, 1)} %, within 10 % "
        f"{_pct(raw_period.within_10_pct, 0)} %"
        if raw_period
        else ""
    )
    return (
        f"{how}; as measured, latency MAPE {_pct(raw.mape_pct, 1)} %, within 10 % "
        f"{_pct(raw.within_10_pct, 0)} %, spearman {_num(raw.spearman)}{period}; the figures "
        "below (by kind and the summary) take the drift out of every run, out of each "
        "device's own work (a transfer keeps its time)"
    )


def baseline_line(base: MemoryBaseline, platform: str) -> str:
    """The runtime's own memory now (a rank before it loads), against calibration's."""
    line = f"memory baseline: a rank starts at {base.start_mb:.0f} MB before loading"
    if base.reference_mb is None:
        return line + " (the coefficients hold no calibration's to compare)"
    line += f", {base.reference_mb:.0f} MB at calibration"
    if base.changed:
        line += (
            f"; every memory prediction carries the {base.start_mb - base.reference_mb:+.0f}"
            f" MB: calibrate again: python -m dse.calibrate platform={platform}"
        )
    return line


#: The share of rounds (%) that must lie within 10 % of their mapping's other rounds for a
#: "within 10 %" figure to judge the model rather than the machine: the issue's own target.
REPEATS_ENOUGH_PCT = 90.0


def noisy_line(within_pct: float) -> str:
    """The warning when the rounds repeat too seldom to judge predictions to +-10 %."""
    return (
        f"warning: only {within_pct:.0f} % of rounds lie within 10 % of their mapping's other "
        f"rounds (under {REPEATS_ENOUGH_PCT:.0f} %): this machine's noise, not only the model, "
        "sets 'within 10 %' below; measure again with nothing else running, or with more "
        "rounds (rounds=N)"
    )


def _num(value: float | None, digits: int = 2) -> str:
    """A figure as printed; n/a where it could not be computed."""
    return "n/a" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None, digits: int) -> str:
    return _num(value, digits)


def messages(doc: FidelityDoc, out: Path) -> list[str]:
    """The lines printed once ``doc`` (``fidelity.json``) is written; the last is the
    summary."""
    lines = []
    lat, mem = doc.latency, doc.memory
    if doc.failed:
        lines.append(
            f"{len(doc.failed)} mapping(s) failed: {', '.join(doc.failed[:5])} "
            f"(see {out}/{DEPLOYMENTS})"
        )
    lines.append(f"wrote {out / 'fidelity.csv'}, {out / 'fidelity.png'} in {doc.seconds:.0f} s")
    noise, spread, rounds = doc.noise_floor_pct, doc.round_spread_pct, doc.rounds
    if noise is not None:
        lines.append(
            f"noise floor: half the p10-p90 spread of a mapping's iterations is {noise:.1f} % "
            "of its median"
            + (
                f"; its {rounds} rounds' medians differ by {spread:.1f} % (median over mappings)"
                if spread is not None and rounds > 1
                else ""
            )
        )
    again = doc.ran_again
    if again:
        lines.append(
            f"{len(again)} mapping(s) whose rounds disagreed by more than "
            f"{AGAIN_ABOVE * 100:.0f} % ran one round more, the median of all kept: "
            + ", ".join(again[:5])
            + (", ..." if len(again) > 5 else "")
        )
    for name, rep in (
        ("as measured", doc.repeatability),
        ("drift taken out", doc.repeatability_adjusted),
    ):
        if rep is not None:
            lines.append(
                f"repeatability {name} (the finest check these measurements allow): one round "
                f"against another, spearman {_num(rep.spearman_round_vs_round)}; a round "
                f"within 10 % of the mapping's other rounds {rep.round_within_10_pct:.0f} %"
            )
    judged = doc.repeatability_adjusted or doc.repeatability  # what the summary uses
    if judged is not None and judged.round_within_10_pct < REPEATS_ENOUGH_PCT:
        lines.append(noisy_line(judged.round_within_10_pct))
    if lat.drift_taken_out and doc.drift is not None:
        period = doc.period
        as_measured = doc.period_as_measured if period and period.drift_taken_out else None
        lines.append(drift_line(doc.drift, doc.latency_as_measured, as_measured))
    if doc.memory_baseline is not None:
        lines.append(baseline_line(doc.memory_baseline, doc.platform))
    lines.append(
        "latency error by kind of mapping"
        + (" (drift taken out)" if lat.drift_taken_out else "")
        + " (mean, +: predicted slower): "
        + ", ".join(f"{k} {v.bias_pct:+.1f} % (n={v.n})" for k, v in lat.by_kind.items())
    )
    period = doc.period
    of_period = (
        f"; period MAPE {_pct(period.mape_pct, 1)} %, within 10 % {_pct(period.within_10_pct, 0)} %"
        if period
        else ""
    )
    lines.append(
        f"fidelity {doc.net}: latency MAPE {_pct(lat.mape_pct, 1)} %, within 10 % "
        f"{_pct(lat.within_10_pct, 0)} %, spearman {_num(lat.spearman)}; memory MAPE "
        f"{_pct(mem.mape_pct, 1)} %{of_period}"
    )
    return lines
