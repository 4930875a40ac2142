"""Run outputs: Pareto CSV, best mappings (AutoDiCE + readable table), history, plots, summary."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

from dse.graph import LayerGraph
from dse.mapping import MappingBatch, to_autodice
from dse.problem import SCALE, UNITS, MappingProblem
from models_analytical.platform import Platform


def _columns(objectives: list[str]) -> list[str]:
    return [f"{n}_{UNITS[n]}" for n in objectives]


def write_pareto(path: Path, problem: MappingProblem, genes: np.ndarray) -> list[dict]:
    """One row per Pareto point: objectives, feasibility, devices used, splits, bytes sent."""
    batch = problem.chromosome.decode(genes)
    ev = problem.model.evaluate(batch)
    rows = []
    split = (batch.share > 0).sum(axis=2) > 1
    # gene vectors that decode to the same mapping are one point
    _, unique = np.unique(batch.share.reshape(len(genes), -1).round(9), axis=0, return_index=True)
    for i in sorted(unique.tolist()):
        row: dict[str, Any] = {"point": i}
        for n, col in zip(problem.objectives, _columns(problem.objectives), strict=True):
            row[col] = round(float(ev.objective(n)[i] * SCALE[n]), 6)
        row.update(
            {
                "feasible": bool(ev.feasible[i]),
                "devices_used": int(ev.used[i].sum()),
                "split_layers": int(split[i].sum()),
                "bytes_sent": int(ev.bytes_sent[i].sum()),
                "genes": " ".join(map(str, genes[i].tolist())),
            }
        )
        rows.append(row)
    rows.sort(key=lambda r: r[_columns(problem.objectives)[0]])
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return rows


def mapping_table(graph: LayerGraph, keys: list[str], batch: MappingBatch) -> str:
    """A readable table like the thesis's Table 4: layer, op, output sizes, devices."""
    share, owner = batch.share[0], batch.owner[0]
    lines = [
        "| layer | op | output | split outputs | devices | concat on |",
        "|---|---|---|---|---|---|",
    ]
    for i, layer in enumerate(graph):
        devs = np.flatnonzero(share[i] > 0)
        shape = "x".join(map(str, layer.output_shape))
        if len(devs) > 1:
            ch = np.rint(share[i, devs] * layer.out_channels).astype(int)
            parts = ", ".join(str(c) for c in ch)
            lines.append(
                f"| {layer.name} | {layer.op} | {shape} | {parts} channels | "
                f"{', '.join(keys[d] for d in devs)} | {keys[owner[i]]} |"
            )
        else:
            lines.append(f"| {layer.name} | {layer.op} | {shape} | | {keys[devs[0]]} | |")
    return "\n".join(lines) + "\n"


def write_best(
    directory: Path, problem: MappingProblem, platform: Platform, genes: np.ndarray, f: np.ndarray
) -> dict[str, dict]:
    """best_<objective>/ with mapping.json, horizontal.json and mapping.md for each objective."""
    best = {}
    graph = problem.chromosome.graph
    for i, name in enumerate(problem.objectives):
        k = int(np.argmin(f[:, i]))
        batch = problem.chromosome.decode(genes[k : k + 1])
        mapping, horizontal = to_autodice(graph, platform.keys, batch)
        out = directory / f"best_{name}"
        out.mkdir(parents=True, exist_ok=True)
        (out / "mapping.json").write_text(json.dumps(mapping, indent=1) + "\n")
        (out / "horizontal.json").write_text(json.dumps(horizontal, indent=1) + "\n")
        (out / "mapping.md").write_text(
            f"# Best {name} mapping of {graph.name} on {platform.name}\n\n"
            + ", ".join(f"{n}: {f[k, j]:.4g} {UNITS[n]}" for j, n in enumerate(problem.objectives))
            + "\n\n"
            + mapping_table(graph, platform.keys, batch)
        )
        best[name] = {n: float(f[k, j]) for j, n in enumerate(problem.objectives)}
    return best


def write_history(path: Path, history: list[dict]) -> None:
    if not history:
        return
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(history[0]))
        writer.writeheader()
        writer.writerows(history)


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend (runs have no screen)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, axes, path: Path) -> None:
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_convergence(path: Path, runs: dict[str, list[dict]], objectives: list[str]) -> None:
    """One panel per objective: best value per generation (the thesis's Figure 12)."""
    plt = _pyplot()
    fig, axes = plt.subplots(
        1, len(objectives), figsize=(4.5 * len(objectives), 3.6), squeeze=False
    )
    for ax, n in zip(axes[0], objectives, strict=True):
        for label, history in runs.items():
            gens = [h["generation"] for h in history]
            ax.plot(gens, [h.get(f"best_{n}", np.nan) for h in history], label=label)
        ax.set_xlabel("generation")
        ax.set_ylabel(f"best {n} ({UNITS[n]})")
        ax.grid(alpha=0.3)
    _save(plt, fig, axes, path)


def plot_pareto(path: Path, f: np.ndarray, feasible: np.ndarray, objectives: list[str]) -> None:
    """Pairwise scatter of the final front."""
    plt = _pyplot()
    pairs = [(i, j) for i in range(len(objectives)) for j in range(i + 1, len(objectives))]
    pairs = pairs or [(0, 0)]
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.5 * len(pairs), 3.8), squeeze=False)
    for ax, (i, j) in zip(axes[0], pairs, strict=True):
        ax.scatter(f[feasible, i], f[feasible, j], s=12, label="feasible")
        if (~feasible).any():
            ax.scatter(f[~feasible, i], f[~feasible, j], s=12, marker="x", label="over capacity")
        ax.set_xlabel(f"{objectives[i]} ({UNITS[objectives[i]]})")
        ax.set_ylabel(f"{objectives[j]} ({UNITS[objectives[j]]})")
        ax.grid(alpha=0.3)
    _save(plt, fig, axes, path)
