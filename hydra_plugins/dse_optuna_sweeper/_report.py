"""The end of a sweep: the best trial (or the Pareto trials), parameter importances, and a
small report (``sweep_report.json`` and ``sweep_report.md``) in the sweep directory."""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from dse.files import write_text
from hydra_plugins.dse_optuna_sweeper._space import SearchSpace
from hydra_plugins.dse_optuna_sweeper._storage import with_driver

#: Completed trials needed before importances are worth computing.
MIN_TRIALS_FOR_IMPORTANCE = 10
#: Pareto trials printed (the report files list them all).
SHOWN = 10


def trial_entry(trial: FrozenTrial, keys: list[str]) -> dict[str, Any]:
    return {
        "number": trial.number,
        "values": dict(zip(keys, trial.values, strict=True)),
        "params": trial.params,
        "run_dir": trial.user_attrs.get("run_dir"),
        "overrides": trial.user_attrs.get("overrides"),
    }


def _objective(i: int, trial: FrozenTrial) -> float:
    """Objective ``i`` of a completed ``trial`` (a multi-objective study's importance target)."""
    return trial.values[i]


def importances(
    study: optuna.Study, keys: list[str], names: list[str], minimum: int = MIN_TRIALS_FOR_IMPORTANCE
) -> tuple[dict[str, dict[str, float]] | None, str | None]:
    """fANOVA importances of the swept parameters for each objective, or why there are none."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(done) < minimum:
        return None, f"{len(done)} completed trials: importances need at least {minimum}"
    varied = [n for n in names if len({repr(t.params.get(n)) for t in done}) > 1]
    if not varied:
        return None, "no swept parameter took two values"
    out: dict[str, dict[str, float]] = {}
    for i, key in enumerate(keys):
        try:
            found = optuna.importance.get_param_importances(
                study,
                evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0),
                params=varied,
                target=partial(_objective, i),
            )
        except (ValueError, RuntimeError) as exc:
            return None, f"importances unavailable: {exc}"
        out[key] = {n: round(float(v), 4) for n, v in found.items()}
    return out, None


def summarize(
    study: optuna.Study, keys: list[str], space: SearchSpace, storage: str = "memory"
) -> dict[str, Any]:
    trials = study.get_trials(deepcopy=False)
    count = {s.name.lower(): sum(t.state == s for t in trials) for s in TrialState}
    if len(keys) == 1:
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        best = [study.best_trial] if done else []
    else:
        best = sorted(study.best_trials, key=lambda t: t.number)
    found, note = importances(study, keys, list(space.params))
    return {
        "study": study.study_name,
        "storage": storage,
        "objectives": keys,
        "directions": [d.name.lower() for d in study.directions],
        "trials": {"total": len(trials), **{k: v for k, v in count.items() if v}},
        "best": [trial_entry(t, keys) for t in best],
        "importances": found,
        "importances_note": note,
        "failures": {
            t.number: t.user_attrs.get("fail_reason", "") for t in trials if t.state.name == "FAIL"
        },
    }


def _value(v: float) -> str:
    return f"{v:.6g}" if math.isfinite(v) else str(v)


def _settings(entry: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in entry["params"].items())


def text(report: dict[str, Any]) -> str:
    """What the sweep prints at its end."""
    t = report["trials"]
    lines = [
        f"study '{report['study']}': {t['total']} trials ({t.get('complete', 0)} complete, "
        f"{t.get('fail', 0)} failed, {t.get('running', 0)} running)"
    ]
    best = report["best"]
    single = len(report["objectives"]) == 1
    if not single and best:
        lines.append(f"{len(best)} Pareto trials:")
    for entry in best[:SHOWN]:
        values = ", ".join(f"{k}={_value(v)}" for k, v in entry["values"].items())
        head = "best: trial" if single else "  trial"
        lines.append(f"{head} {entry['number']}: {values}: {_settings(entry)}")
        lines.append(f"{'  ' if single else '    '}run: {entry['run_dir']}")
    if len(best) > SHOWN:
        lines.append(f"  ... {len(best) - SHOWN} more in the report")
    if not best:
        lines.append("no trial completed")
    if report["importances"]:
        for key, found in report["importances"].items():
            shown = ", ".join(f"{n} {v:.2f}" for n, v in found.items())
            lines.append(f"parameter importances for {key}: {shown}")
    elif report["importances_note"]:
        lines.append(f"parameter importances: {report['importances_note']}")
    if report["storage"] != "memory":
        lines.append(f"all trials: optuna-dashboard {with_driver(report['storage'])}")
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    keys = report["objectives"]
    dirs = ", ".join(f"{d} {k}" for k, d in zip(keys, report["directions"], strict=True))
    t = report["trials"]
    out = [
        f"# Sweep report: study `{report['study']}`",
        "",
        f"Objectives: {dirs}. Trials: {t['total']} ({t.get('complete', 0)} complete, "
        f"{t.get('fail', 0)} failed, {t.get('running', 0)} running). Storage: "
        f"`{report['storage']}` (`optuna-dashboard {with_driver(report['storage'])}`).",
        "",
        "## " + ("Best trial" if len(keys) == 1 else "Pareto trials"),
        "",
    ]
    if report["best"]:
        out += [
            "| trial | " + " | ".join(keys) + " | settings | run directory |",
            "|---|" + "---|" * len(keys) + "---|---|",
        ]
        for e in report["best"]:
            values = " | ".join(_value(v) for v in e["values"].values())
            out.append(f"| {e['number']} | {values} | `{_settings(e)}` | `{e['run_dir']}` |")
    else:
        out.append("No trial completed.")
    out += ["", "## Parameter importances (fANOVA)", ""]
    if report["importances"]:
        # most important first (for the first objective: Optuna returns them in that order)
        names = list(dict.fromkeys(n for f in report["importances"].values() for n in f))
        out += ["| parameter | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
        for n in names:
            row = " | ".join(f"{report['importances'][k].get(n, 0.0):.3f}" for k in keys)
            out.append(f"| `{n}` | {row} |")
    else:
        out.append(str(report["importances_note"]))
    if report["failures"]:
        out += ["", "## Failed trials", "", "| trial | reason |", "|---|---|"]
        bar = "|"
        out += [f"| {n} | {r.replace(bar, '/')} |" for n, r in report["failures"].items()]
    return "\n".join(out) + "\n"


def write(report: dict[str, Any], directory: Path) -> None:
    """The report's JSON and Markdown, written whole or not at all (a full disk: one line)."""
    write_text(directory / "sweep_report.json", json.dumps(report, indent=2) + "\n")
    write_text(directory / "sweep_report.md", markdown(report))
    print(f"report: {directory / 'sweep_report.md'}")
