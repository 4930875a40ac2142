"""Overlay the convergence of several runs of one problem, like the thesis's Figures 12-14.

    python scripts/compare_runs.py RUN_DIR [RUN_DIR ...] [-o comparison.png]
    python scripts/compare_runs.py runs/multirun/2026-11-22/12-00-00-4242/*

Each run directory holds the history.csv and summary.json that `python -m dse` writes. Runs are
labelled by the settings that differ between them (encoding, splits, seed, ...). Runs of
different networks, platforms, coefficients or objectives measure different things and are
refused; the hypervolume of runs of one problem shares one normalisation, so they compare. A
directory without a complete summary (a run still going, or killed) is skipped with a warning.
The plot goes beside the runs (their common parent) unless -o says otherwise.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from dse.results.plots import plot_convergence

#: What makes two runs the same problem (their hypervolumes then compare).
PROBLEM = ("net", "platform", "coefficients", "objectives", "hypervolume_reference")


def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def read(run: Path) -> tuple[dict, list[dict]] | None:
    """A run's summary and history, or None (with a warning) when either is incomplete."""
    try:
        summary = json.loads((run / "summary.json").read_text())
        text = (run / "history.csv").read_text()
        if not text.endswith("\n"):  # a row cut short may still parse as numbers
            raise ValueError("history.csv ends in the middle of a row")
        history = [
            {k: float(v) for k, v in row.items()} for row in csv.DictReader(text.splitlines())
        ]
        if not isinstance(summary, dict) or not all(k in summary for k in (*PROBLEM, "config")):
            raise ValueError("summary.json is incomplete")
        objectives, config = summary["objectives"], summary["config"]
        if not isinstance(config, dict) or not isinstance(objectives, list):
            raise ValueError("summary.json is not a run's summary")
        needed = {"hypervolume", "evaluations", *(f"best_{o}" for o in objectives)}
        if not history or not all(needed <= row.keys() for row in history):
            raise ValueError("history.csv is incomplete")
        if not all(math.isfinite(row[k]) for row in history for k in needed):
            raise ValueError("history.csv holds a value that is not a finite number")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"warning: skipping {run}: no complete summary and history ({exc})", file=sys.stderr)
        return None
    return summary, history


def labels(summaries: list[dict]) -> list[str]:
    """Each run named by the settings that differ between the runs."""
    configs = [flat(s["config"]) for s in summaries]
    ignore = {"resume", "progress", "hydra"}
    keys = sorted(
        k
        for k in set().union(*configs)
        if k.split(".")[0] not in ignore and len({repr(c.get(k)) for c in configs}) > 1
    )
    keys = [k for k in keys if not k.endswith("._target_")]
    names = []
    for i, c in enumerate(configs):
        parts = [f"{k.split('.')[-1] if k != 'chromosome.name' else ''}={c.get(k)}" for k in keys]
        text = " ".join(p.lstrip("=") for p in parts) or summaries[i]["chromosome"]
        names.append(text)
    return [n if names.count(n) == 1 else f"{n} (run {i + 1})" for i, n in enumerate(names)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("-o", "--output", type=Path, default=None)
    args = ap.parse_args()
    found = [(run, r) for run in args.runs if (r := read(run)) is not None]
    if not found:
        raise SystemExit("error: no complete run directory among the arguments")
    first = found[0][1][0]
    for run, (summary, _) in found[1:]:
        for key in PROBLEM:
            if summary[key] != first[key]:
                raise SystemExit(
                    f"error: {run} is another problem than {found[0][0]} ({key}: "
                    f"{summary[key]} vs {first[key]}): compare runs of one network, platform, "
                    "coefficients and objectives"
                )
    names = labels([s for _, (s, _) in found])
    runs = {}
    for name, (run, (summary, history)) in zip(names, found, strict=True):
        runs[name] = history
        last = history[-1]
        print(
            f"{name}: "
            + ", ".join(f"best {o} {last[f'best_{o}']:.4g}" for o in summary["objectives"])
            + f", hypervolume {last['hypervolume']:.4f} after {int(last['evaluations'])} "
            f"evaluations ({run})"
        )
    parent = Path(os.path.commonpath([str(r.resolve()) for r, _ in found]))
    output = args.output or (parent if parent.is_dir() else parent.parent) / "comparison.png"
    title = f"{first['net']} on {first['platform']}: {len(runs)} runs"
    plot_convergence(output, runs, first["objectives"], title)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
