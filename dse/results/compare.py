"""Comparing runs of one problem: reading their summaries and histories, naming them by the
settings that differ, checking that they measure the same thing."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

from dse.errors import DseError

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


def expand(paths: list[Path]) -> list[Path]:
    """The run directories among ``paths``: a run directory as it is; a directory holding no
    run of its own but run directories (a multirun or a sweep: numbered jobs) as those runs,
    in order; a file beside the runs (``multirun.yaml``, a plot, a report: what a shell's
    ``DIR/*`` also lists) left out without a word; anything else as it is (reading it then
    says why it is skipped)."""
    out: list[Path] = []
    for p in paths:
        if p.is_file():
            continue
        if p.is_dir() and not (p / "summary.json").exists():
            runs = [c for c in p.iterdir() if c.is_dir() and _run_like(c)]
            if runs:
                out += sorted(
                    runs,
                    key=lambda c: (
                        not c.name.isdigit(),
                        int(c.name) if c.name.isdigit() else 0,
                        c.name,
                    ),
                )
                continue
        out.append(p)
    return out


def _run_like(d: Path) -> bool:
    """A directory a run wrote (complete or not): its summary, Hydra's record of its config,
    or a job's number in a multirun."""
    return (d / "summary.json").exists() or (d / ".hydra").is_dir() or d.name.isdigit()


def same_problem(found: list[tuple[Path, tuple[dict, list[dict]]]]) -> None:
    """One line when the runs are not of one network, platform, coefficients and objectives
    (their hypervolumes then measure different things)."""
    first_run, (first, _) = found[0]
    for run, (summary, _) in found[1:]:
        for key in PROBLEM:
            if summary[key] != first[key]:
                raise DseError(
                    f"{run} is another problem than {first_run} ({key}: "
                    f"{summary[key]} vs {first[key]}): compare runs of one network, platform, "
                    "coefficients and objectives"
                )
