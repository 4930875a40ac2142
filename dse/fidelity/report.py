"""The fidelity report: ``fidelity.json``'s figures and the lines printed at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dse.fidelity.measure import AGAIN_ABOVE
from dse.fidelity.statistics import (
    Point,
    by_kind,
    noise_floor,
    repeatability,
    round_spread,
    stats,
)


def latency_figures(pts: list[Point]) -> dict[str, Any]:
    """:func:`stats` of latency points, with the error by kind of mapping."""
    figures: dict[str, Any] = stats([x[0] for x in pts], [x[1] for x in pts])
    figures["by_kind"] = by_kind(pts)
    return figures


def drift_figures(pts: dict[str, list[Point]], name: str) -> dict[str, Any]:
    """:func:`latency_figures` of ``name``'s points (latency or period) with the machine's drift
    taken out where it was probed (``<name>_adjusted``), else as measured, saying which."""
    adjusted = pts[f"{name}_adjusted"]
    out = latency_figures(adjusted or pts[name])
    out["drift_taken_out"] = bool(adjusted)
    return out


def figures(pts: dict[str, list[Point]], measured_dir: Path) -> dict[str, Any]:
    """The report's statistics: latency and the pipelined period (None without ``stream``)
    judged with the machine's drift taken out where it was probed, and as measured; memory;
    and how well the measurements in ``measured_dir`` (``<label>/comparison.json``) agree
    with themselves."""
    return {
        "latency": drift_figures(pts, "latency"),
        "latency_as_measured": latency_figures(pts["latency"]),
        "memory": stats([x[0] for x in pts["memory"]], [x[1] for x in pts["memory"]]),
        "period": drift_figures(pts, "period") if pts["period"] else None,
        "period_as_measured": latency_figures(pts["period"]) if pts["period"] else None,
        "noise_floor_pct": noise_floor(measured_dir),
        "round_spread_pct": round_spread(measured_dir),
        "repeatability": repeatability(measured_dir),
        "repeatability_adjusted": repeatability(measured_dir, adjusted=True),
    }


def drift_line(
    speed: dict[str, Any], raw: dict[str, Any], raw_period: dict[str, Any] | None = None
) -> str:
    """How the machine's speed compared with the reference, and the figures as measured."""
    pct = speed["slower_pct"]
    ran = f"{abs(pct):.1f} % {'slower' if pct >= 0 else 'faster'}"
    if speed["reference"] == "calibration":
        how = (
            f"the machine ran {ran} than at calibration "
            f"(the whole network alone: {speed['probe_ms']:.1f} ms against "
            f"{speed['reference_ms']:.1f} ms then)"
        )
    elif speed["reference"] == "calibrated networks":
        how = (
            "calibration did not probe this network: the networks it did "
            f"({', '.join(speed['networks'])}), probed beside the runs, ran {ran} than then, "
            f"so runs are brought to {speed['reference_ms']:.1f} ms of this network "
            f"alone (its median probe: {speed['probe_ms']:.1f} ms)"
        )
    else:
        how = (
            "calibration did not probe this network: runs are brought to this run's median "
            f"speed (the whole network alone: {speed['probe_ms']:.1f} ms)"
        )
    period = (
        f", period MAPE {raw_period['mape_pct']:.1f} %, within 10 % "
        f"{raw_period['within_10_pct']:.0f} %"
        if raw_period
        else ""
    )
    return (
        f"{how}; as measured, latency MAPE {raw['mape_pct']:.1f} %, within 10 % "
        f"{raw['within_10_pct']:.0f} %, spearman {raw['spearman']:.2f}{period}; the figures "
        "below (by kind and the summary) take the drift out of every run, out of each "
        "device's own work (a transfer keeps its time)"
    )


def baseline_line(base: dict[str, Any], platform: str) -> str:
    """The runtime's own memory now (a rank before it loads), against calibration's."""
    line = f"memory baseline: a rank starts at {base['start_mb']:.0f} MB before loading"
    if base["reference_mb"] is None:
        return line + " (the coefficients hold no calibration's to compare)"
    line += f", {base['reference_mb']:.0f} MB at calibration"
    if base["changed"]:
        line += (
            f"; every memory prediction carries the {base['start_mb'] - base['reference_mb']:+.0f}"
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


def messages(doc: dict[str, Any], out: Path) -> list[str]:
    """The lines printed once ``doc`` (``fidelity.json``) is written; the last is the
    summary."""
    lines = []
    failed, lat, mem = doc["failed"], doc["latency"], doc["memory"]
    if failed:
        lines.append(f"{len(failed)} mapping(s) failed: {', '.join(failed[:5])} (see {out}/phase2)")
    lines.append(f"wrote {out / 'fidelity.csv'}, {out / 'fidelity.png'} in {doc['seconds']:.0f} s")
    noise, spread, rounds = doc["noise_floor_pct"], doc["round_spread_pct"], doc["rounds"]
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
    again = doc.get("ran_again") or []
    if again:
        lines.append(
            f"{len(again)} mapping(s) whose rounds disagreed by more than "
            f"{AGAIN_ABOVE * 100:.0f} % ran one round more, the median of all kept: "
            + ", ".join(again[:5])
            + (", ..." if len(again) > 5 else "")
        )
    for name, key in (
        ("as measured", "repeatability"),
        ("drift taken out", "repeatability_adjusted"),
    ):
        rep = doc[key]
        if rep is not None:
            lines.append(
                f"repeatability {name} (the finest check these measurements allow): one round "
                f"against another, spearman {rep['spearman_round_vs_round']:.2f}; a round "
                f"within 10 % of the mapping's other rounds {rep['round_within_10_pct']:.0f} %"
            )
    judged = doc["repeatability_adjusted"] or doc["repeatability"]  # what the summary uses
    if judged is not None and judged["round_within_10_pct"] < REPEATS_ENOUGH_PCT:
        lines.append(noisy_line(judged["round_within_10_pct"]))
    if lat["drift_taken_out"]:
        period = doc.get("period") or {}
        as_measured = doc.get("period_as_measured") if period.get("drift_taken_out") else None
        lines.append(drift_line(doc["drift"], doc["latency_as_measured"], as_measured))
    if doc.get("memory_baseline"):
        lines.append(baseline_line(doc["memory_baseline"], doc["platform"]))
    lines.append(
        "latency error by kind of mapping"
        + (" (drift taken out)" if lat["drift_taken_out"] else "")
        + " (mean, +: predicted slower): "
        + ", ".join(f"{k} {v['bias_pct']:+.1f} % (n={v['n']})" for k, v in lat["by_kind"].items())
    )
    period = doc.get("period")
    of_period = (
        f"; period MAPE {period['mape_pct']:.1f} %, within 10 % {period['within_10_pct']:.0f} %"
        if period
        else ""
    )
    lines.append(
        f"fidelity {doc['net']}: latency MAPE {lat['mape_pct']:.1f} %, within 10 % "
        f"{lat['within_10_pct']:.0f} %, spearman {lat['spearman']:.2f}; memory MAPE "
        f"{mem['mape_pct']:.1f} %{of_period}"
    )
    return lines
