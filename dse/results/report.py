"""``report.html``: the page a user opens first — warnings, settings, the front, the best
mappings as layer tables (the thesis's Table 4), the plots. A static file, no server."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from dse.objectives import OBJECTIVES, rounded
from models_analytical.coefficients import QUICK, UNCALIBRATED

#: How far (percent of the measured) a phase-two mapping's measured latency may be from the
#: predicted before the report, and the run as phase two ends, flag it.
LARGE_ERROR_PCT = 10.0
#: The flag of such a mapping.
FAR_OFF = f"more than {LARGE_ERROR_PCT:g} % off"

_STYLE = """
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
.warn { background: #fff3cd; border: 1px solid #e0c060; padding: 0.6em 1em; margin: 0.4em 0; }
.bad { background: #f8d7da; border-color: #d08080; }
img { max-width: 100%; } code { background: #f4f4f4; padding: 1px 4px; }
"""


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    esc = html.escape
    out = ["<table><tr>" + "".join(f"<th>{esc(str(h))}</th>" for h in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in r) + "</tr>" for r in rows]
    return "\n".join(out) + "</table>"


def _markdown_table(md: str) -> str:
    lines = [ln.strip().strip("|").split("|") for ln in md.strip().splitlines()]
    rows = [[c.strip() for c in ln] for ln in lines if not set("".join(ln)) <= set("-: ")]
    return _table(rows[0], rows[1:])


def far_off(row: Mapping[str, Any]) -> bool:
    """Whether a phase-two row (``phase2.csv``'s) was measured and its latency is more than
    :data:`LARGE_ERROR_PCT` off the prediction."""
    error = row.get("latency_error_pct")
    return row.get("status") == "ok" and error is not None and abs(error) > LARGE_ERROR_PCT


def warnings(summary: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(text, serious) for the top of the report."""
    out = []
    if not summary["feasible"]:
        out.append(("No mapping fits in memory: every mapping shown is over capacity.", True))
    if summary.get("interrupted"):
        out.append(
            (
                f"Interrupted after generation {summary['generations']}: continue with "
                f"python -m dse resume=&lt;this directory&gt;.",
                True,
            )
        )
    if summary.get("stopped_early") and not summary.get("interrupted"):
        out.append((f"Stopped early: {summary['stopped_early']}.", False))
    calibration = summary.get("calibration")
    if calibration == UNCALIBRATED:
        out.append(
            (
                "The coefficients were not calibrated on this hardware: figures are the model's "
                "estimates from documented assumptions.",
                False,
            )
        )
    elif calibration == QUICK:
        out.append(
            (
                "The coefficients are a quick calibration (dse.calibrate quick=true: a smoke "
                "test, few measurements of one network): figures are not for predictions; "
                "calibrate without quick=true.",
                False,
            )
        )
    unprofiled = summary.get("unprofiled_ops") or []
    if unprofiled:
        named = ", ".join(html.escape(str(op)) for op in unprofiled)
        out.append(
            (
                f"This network's {named} layers are costed by a default: calibration profiled "
                "none of them, so their times are fitted on other ops; calibrate with this "
                "network (python -m dse.calibrate nets=[...]).",
                False,
            )
        )
    failed = [r for r in summary.get("phase2") or [] if r.get("status") != "ok"]
    if failed:
        out.append((f"Phase two: {len(failed)} mapping(s) failed to run; see below.", True))
    measured = [r for r in summary.get("phase2") or [] if r.get("status") == "ok"]
    off = [r for r in measured if far_off(r)]
    if off:
        which = ", ".join(f"{r['mapping']} {r['latency_error_pct']:+.1f} %" for r in off)
        out.append(
            (
                f"Phase two: {len(off)} of {len(measured)} measured mappings are {FAR_OFF} "
                f"their predicted latency ({html.escape(which)}): the model does not hold for "
                "them on this hardware; see the table below.",
                True,
            )
        )
    if any(n in ("energy", "total_energy") for n in summary["objectives"]):
        out.append(("Energy is modelled (busy, idle and link power figures), not measured.", False))
    return out


def times(summary: Mapping[str, Any]) -> str:
    """The run's time: the search's, phase two's apart (when it ran), and the whole run's."""
    phase2 = summary.get("phase2_seconds")
    return (
        f"{summary['search_seconds']} s search"
        + (f", {phase2} s phase two" if phase2 is not None else "")
        + f", {summary['wall_seconds']} s in all"
    )


#: What each robust rule makes of an objective's values under the profiles, for the report.
RULE_WORDS = {
    "none": "each objective is the nominal's; the profiles are shown, not searched for",
    "worst": "each objective is the worst (largest) of its values under the profiles",
    "mean": "each objective is the mean of its values under the profiles",
}


def _conditions(c: Mapping[str, Any]) -> str:
    """``network x0.056; port edge1 x0.5; edge0_cpu at 0.5 of its speed`` (bandwidth factors
    against the platform's figures)."""
    words = [f"network x{c['network']:.3g}"] if c.get("network", 1.0) != 1.0 else []
    words += [f"port {b} x{f:.3g}" for b, f in c.get("ports", {}).items()]
    words += [f"{d} at {f:.3g} of its speed" for d, f in c.get("speed", {}).items()]
    return "; ".join(words) or "the platform's figures"


def profiles_section(profiles: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """The front under each profile: the rule, each profile's conditions and best latency, and
    each shown front point's latency and regret under each profile."""
    names = list(profiles["conditions"])
    head = ("profile", "conditions", "best latency (ms)")
    table = [
        (n, _conditions(profiles["conditions"][n]), f"{profiles['best_latency_ms'][n]:.2f}")
        for n in names
    ]
    per_point = [
        [r["point"]]
        + [f"{r[f'latency_ms@{n}']:.2f}" for n in names]
        + [f"{r[f'regret_ms@{n}']:.2f}" for n in names]
        for r in rows
    ]
    return (
        "<h2>Under each profile</h2>"
        f"<p>robust={html.escape(str(profiles['robust']))}: "
        f"{RULE_WORDS.get(str(profiles['robust']), '')}. A profile's best latency is the best "
        f"found by {html.escape(str(profiles['best_by']))}; a point's regret under a profile is "
        "its latency there less that best (columns <code>latency_ms@PROFILE</code> and "
        "<code>regret_ms@PROFILE</code> of <code>pareto.csv</code>).</p>"
        + _table(head, table)
        + _table(
            ["point", *(f"latency ms @{n}" for n in names), *(f"regret ms @{n}" for n in names)],
            per_point,
        )
        + '<img src="profiles.png" alt="latency under each profile">'
    )


def render(
    summary: Mapping[str, Any],
    title: str,
    pareto_rows: Sequence[Mapping[str, Any]],
    best: Mapping[str, Mapping[str, Any]],
    max_rows: int = 40,
) -> str:
    objectives = list(summary["objectives"])
    cols = [OBJECTIVES[n].column for n in objectives]
    parts = [f"<h1>{html.escape(title)}</h1>"]
    for text, serious in warnings(summary):
        parts.append(f'<div class="warn{" bad" if serious else ""}">{text}</div>')
    cfg = summary.get("config", {})
    alg, chrom = cfg.get("algorithm", {}), cfg.get("chromosome", {})
    settings = [
        ("network", summary["net"]),
        ("platform", summary["platform"]),
        ("coefficients", f"{summary.get('coefficients')} ({summary.get('calibration')})"),
        (
            "encoding",
            f"{chrom.get('name')} (splits {chrom.get('splits')}, "
            f"{chrom.get('shares', 'equal')} shares), {summary['genes']} genes, "
            f"10^{summary['search_space_log10']} gene vectors",
        ),
        (
            "search",
            f"NSGA-II, population {alg.get('pop_size')}, {summary['generations']} "
            f"generations, {summary['evaluations']} distinct mappings evaluated, "
            f"seed {cfg.get('seed')}",
        ),
        (
            "operators",
            f"{alg.get('crossover', {}).get('name')} crossover, "
            f"{alg.get('mutation', {}).get('name')} mutation",
        ),
        (
            "objectives",
            "; ".join(f"{n}: {OBJECTIVES[n].label} ({OBJECTIVES[n].unit})" for n in objectives),
        ),
        ("time", times(summary)),
        ("hypervolume", f"{summary['hypervolume']:.4f} (fixed normalisation of this problem)"),
    ]
    parts.append("<h2>Settings</h2>" + _table(("", "value"), settings))
    parts.append("<h2>Best mappings</h2>")
    head = ["best of", *cols]
    rows = [[n, *(rounded(m, b["values"][m]) for m in objectives)] for n, b in best.items()]
    parts.append(_table(head, rows))
    parts.append('<img src="pareto.png" alt="Pareto front">')
    parts.append("<h2>Pareto front</h2>")
    shown = list(pareto_rows)[:max_rows]
    keys = [
        "point",
        *cols,
        "feasible",
        "devices_used",
        "split_layers",
        "sent_MB",
        "same_cost_mappings",
    ]
    shown_as = {OBJECTIVES[n].column: n for n in objectives}

    def cell(key: str, value: Any) -> Any:  # objectives to their precision, data to 10 kB
        if key in shown_as:
            return rounded(shown_as[key], float(value))
        return f"{float(value):.2f}" if key == "sent_MB" else value

    parts.append(_table(keys, [[cell(k, r[k]) for k in keys] for r in shown]))
    if len(pareto_rows) > max_rows:
        parts.append(f"<p>{len(pareto_rows) - max_rows} more rows in <code>pareto.csv</code>.</p>")
    if summary.get("profiles"):
        parts.append(profiles_section(summary["profiles"], shown))
    if summary.get("phase2"):
        rows2 = summary["phase2"]
        parts.append("<h2>Measured (phase two)</h2>")
        parts.append('<img src="phase2.png" alt="predicted against measured">')
        keys2 = [
            "mapping",
            "status",
            "latency_predicted_ms",
            "latency_measured_ms",
            "latency_error_pct",
            "flag",
            "max_rel_error",
            "reason",
        ]
        flagged = [{**r, "flag": FAR_OFF if far_off(r) else ""} for r in rows2]
        parts.append(_table(keys2, [[r.get(k, "") for k in keys2] for r in flagged]))
        parts.append(
            "<p>Per-device memory, energy and compute: <code>phase2.csv</code>; each "
            "deployment's figures: <code>phase2/&lt;mapping&gt;/measurements.json</code>."
            "</p>"
        )
    parts.append("<h2>Convergence</h2>")
    parts.append('<img src="convergence.png" alt="convergence">')
    for n, b in best.items():
        parts.append(f"<h2>Best {html.escape(n)} mapping</h2>")
        if b.get("overflow"):
            parts.append(f'<div class="warn bad">Over capacity: {html.escape(b["overflow"])}</div>')
        parts.append(
            f"<p>Files: <code>best_{n}/mapping.json</code>, <code>best_{n}/horizontal.json"
            "</code> (AutoDiCE).</p>" + _markdown_table(b["table"])
        )
    body = "\n".join(parts)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>\n"
    )
