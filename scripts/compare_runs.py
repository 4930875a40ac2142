"""Overlay the convergence of several runs, like the thesis's Figures 12-14.

    python scripts/compare_runs.py RUN_DIR [RUN_DIR ...] [-o comparison.png]
    python scripts/compare_runs.py runs/multirun/2026-11-21/12-00-00/*

Each run directory holds the history.csv and summary.json that `python -m dse` writes; runs
are labelled by chromosome and splits. Prints each run's final best values too.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from dse.results.writers import plot_convergence


def label(run: Path, summary: dict) -> str:
    chrom = summary["config"]["chromosome"]
    text = chrom["name"]
    if chrom.get("splits") and chrom["name"] == "advanced":
        text += f" - {chrom['splits']}"
    return f"{summary['net']} {text}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("-o", "--output", type=Path, default=Path("comparison.png"))
    args = ap.parse_args()
    runs, objectives = {}, None
    for run in args.runs:
        if not (run / "history.csv").is_file():
            continue
        summary = json.loads((run / "summary.json").read_text())
        with open(run / "history.csv") as fh:
            history = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(fh)]
        name = label(run, summary)
        while name in runs:
            name += "'"
        runs[name] = history
        objectives = objectives or summary["objectives"]
        last = history[-1]
        print(
            f"{name}: "
            + ", ".join(f"best {o} {last[f'best_{o}']:.4g}" for o in summary["objectives"])
            + f", hypervolume {last['hypervolume']:.4f}"
        )
    if not runs:
        raise SystemExit("error: no run directory with a history.csv among the arguments")
    plot_convergence(args.output, runs, objectives)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
