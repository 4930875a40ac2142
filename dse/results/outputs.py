"""Everything a run writes to its directory, from the search state: the one place that does."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dse.files import write_text
from dse.platform import Platform
from dse.results import plot_worker, plots, report, writers
from dse.search import nsga2, regret
from dse.search.problem import MappingProblem
from models_analytical.layer_costs import unprofiled_ops


def stop_reason(state: nsga2.SearchState, interrupted: bool) -> str | None:
    """Why the search ended before its planned generations, in a sentence (None: it ran them
    all); ``state.stop_reason`` is the word for it (summary.json's ``stopped``)."""
    s, done = state.settings, f"{state.generation} of {state.settings.n_gen} generations"
    why = "interrupted" if interrupted else state.stop_reason
    if why == "interrupted":
        return f"interrupted after {done}"
    if why == "evaluations":
        return f"max_evaluations reached: {state.evaluations} of {s.max_evaluations} after {done}"
    if why == "exhausted":
        return (
            f"no new mapping left to breed after {done} ({state.evaluations} distinct mappings "
            f"evaluated of {s.pop_size} x {s.n_gen} planned)"
        )
    return None if state.generation >= s.n_gen else f"stopped after {done}"


def write_outputs(
    out: Path,
    state: nsga2.SearchState,
    problem: MappingProblem,
    platform: Platform,
    cfg: DictConfig,
    started: float,
    interrupted: bool,
    phase2: list[dict[str, Any]] | None = None,
    phase2_seconds: float | None = None,
) -> dict[str, Any]:
    """Pareto CSV, best mappings, history, plots and ``summary.json``; returns the summary.
    With phase two: its rows and the seconds it took (``wall_seconds`` counts them too).

    Each file is replaced atomically, and ``summary.json`` is removed first and written last:
    where it exists, every output beside it is complete and from the same generation.
    """
    (out / "summary.json").unlink(missing_ok=True)
    genes, f, g = nsga2.front(state)
    feasible = g[:, 0] <= 0
    bests = None
    if problem.profiles is not None:  # each profile's best latency, for the front's regrets
        seeds = genes[feasible] if feasible.any() else genes
        bests = regret.profile_bests(problem, seeds, state.settings, int(cfg.seed))
    rows = writers.write_pareto(out / "pareto.csv", problem, genes, bests)
    best = writers.write_best(
        out,
        problem,
        platform,
        genes[feasible] if feasible.any() else genes,
        f[feasible] if feasible.any() else f,
    )
    writers.write_history(out / "history.csv", state.history)
    summary = {
        "net": problem.chromosome.graph.name,
        "platform": platform.name,
        "chromosome": cfg.chromosome.name,
        "genes": problem.chromosome.n_genes,
        "search_space_log10": round(problem.chromosome.search_space_log10(), 2),
        "objectives": problem.objectives,
        "generations": state.generation,
        "evaluations": state.evaluations,
        "stopped": state.stop_reason,  # why (dse.search.state.STOP_REASONS)
        "search_seconds": round(state.seconds, 3),
        "wall_seconds": round(time.perf_counter() - started, 3),
        "pareto_points": len(rows),
        "feasible_points": int(feasible.sum()),
        "feasible": bool(feasible.any()),
        "hypervolume": state.history[-1]["hypervolume"] if state.history else 0.0,
        "hypervolume_reference": state.reference.to_dict(),
        "coefficients": problem.model.coefficients.source,
        "calibrated": problem.model.coefficients.calibrated,
        "calibration": problem.model.coefficients.calibration,
        # op types calibration profiled no layer of (dse.app.unprofiled_warning)
        "unprofiled_ops": unprofiled_ops(problem.model.graph, problem.model.coefficients),
        "energy": "modelled, not measured",
        "best": {n: b["values"] for n, b in best.items()},
        "interrupted": interrupted,
        "stopped_early": stop_reason(state, interrupted),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    if problem.profiles is not None and bests is not None:
        summary["profiles"] = profiles_summary(problem, bests)
    if phase2 is not None:
        summary["phase2"] = phase2
        summary["phase2_seconds"] = round(phase2_seconds or 0.0, 3)
    title = plots.run_title(summary)
    figures: list[tuple[str, tuple[Any, ...]]] = [
        ("plot_pareto", (out / "pareto.png", f, feasible, problem.objectives, title))
    ]
    if state.history:
        runs = {cfg.chromosome.name: state.history}
        figures.insert(
            0, ("plot_convergence", (out / "convergence.png", runs, problem.objectives, title))
        )
    if "profiles" in summary and rows:
        names = list(summary["profiles"]["conditions"])
        latency = [[r[writers.profile_column("latency_ms", n)] for r in rows] for n in names]
        figures.append(("plot_profiles", (out / "profiles.png", latency, names, title)))
    plot_worker.draw(figures)  # in helper processes, side by side; back once both are written
    write_text(out / "report.html", report.render(summary, title, rows, best))
    write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    return summary


def profiles_summary(problem: MappingProblem, bests: Any) -> dict[str, Any]:
    """summary.json's ``profiles``: the rule, each profile's conditions and the best latency
    the short search under it alone found (:mod:`dse.search.regret`)."""
    assert problem.profiles is not None
    conditions = {
        c.name: {"speed": dict(c.speed), "network": c.network, "ports": dict(c.ports)}
        for c in problem.profiles.conditions
    }
    return {
        "robust": problem.profiles.rule,
        "conditions": conditions,
        "best_latency_ms": {n: round(float(b), 6) for n, b in zip(conditions, bests, strict=True)},
        "best_by": f"a search under the profile alone, {regret.POP_SIZE} x {regret.N_GEN} "
        "generations, seeded with the front",
    }
