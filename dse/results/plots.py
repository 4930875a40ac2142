"""Plots of a run: convergence per generation and the Pareto front."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dse.objectives import OBJECTIVES
from dse.results.atomic import staged


def axis_label(name: str) -> str:
    o = OBJECTIVES[name]
    return f"{o.label} ({o.unit})"


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend (runs have no screen)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, axes, path: Path) -> None:
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    with staged(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
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
        ax.set_ylabel(f"best {axis_label(n)}")
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
        ax.set_xlabel(axis_label(objectives[i]))
        ax.set_ylabel(axis_label(objectives[j]))
        ax.grid(alpha=0.3)
    _save(plt, fig, axes, path)
