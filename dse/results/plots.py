"""Plots of a run: convergence per generation and the Pareto front, titled so they read alone."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from dse.files import staged
from dse.objectives import OBJECTIVES

#: Marker and colour of each objective's best mapping, the same in every panel (the front's
#: other points are C0, matplotlib's first colour).
BEST_MARKERS = ("*", "D", "P", "X", "s", "^")
BEST_COLORS = ("C1", "C2", "C3", "C4", "C5", "C6")
#: Size of each best's marker in the scatter panels: decreasing, so bests that are one mapping
#: all show.
BEST_SIZES = (220, 150, 95, 60, 40, 25)


def axis_label(name: str) -> str:
    o = OBJECTIVES[name]
    return f"{o.label} ({o.unit})"


def run_title(summary: Mapping) -> str:
    """``vgg16 on jetson_xavier_nx_x8 | advanced, 2 splits | 1000 x 100 generations``."""
    cfg = summary.get("config", {})
    chrom = cfg.get("chromosome", {})
    alg = cfg.get("algorithm", {})
    enc = chrom.get("name", summary.get("chromosome", "?"))
    if chrom.get("splits") and enc != "vertical":
        enc += f", {chrom['splits']} splits"
    if chrom.get("shares") == "speed":
        enc += ", speed shares"
    budget = f"{alg.get('pop_size', '?')} x {summary.get('generations', '?')} generations"
    text = f"{summary.get('net', '?')} on {summary.get('platform', '?')} | {enc} | {budget}"
    return text if summary.get("feasible", True) else text + " | NOTHING FITS IN MEMORY"


def _grid(n: int, ncols: int, size: tuple[float, float] = (4.2, 3.4), bottom: float = 0.55):
    """A figure of ``n`` panels, ``ncols`` a row, with fixed margins in inches (room for tick
    labels, axis labels and the title; tight_layout's measuring costs a draw). matplotlib's
    Figure on the Agg canvas, without pyplot: runs have no screen, and pyplot's import and
    backend set-up cost more than the plot."""
    from matplotlib.figure import Figure

    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    width, height = size[0] * ncols, size[1] * nrows + 0.6
    fig = Figure(figsize=(width, height))
    left, right, top, wgap, hgap = 0.75, 0.15, 0.5, 0.85, bottom + 0.35
    panel_w = (width - left - right - wgap * (ncols - 1)) / ncols
    panel_h = (height - top - bottom - hgap * (nrows - 1)) / nrows
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        bottom=bottom / height,
        top=1 - top / height,
        wspace=wgap / panel_w,
        hspace=hgap / panel_h,
    )
    axes = fig.subplots(nrows, ncols, squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _save(fig, path: Path, title: str) -> None:
    fig.suptitle(title, fontsize=10)
    with staged(path) as tmp:
        # zlib level 1: the Pareto figure 15 % faster to write (0.51 -> 0.44 s), 5 % larger
        fig.savefig(tmp, dpi=110, format="png", pil_kwargs={"compress_level": 1})


def plot_convergence(
    path: Path, runs: Mapping[str, Sequence[dict]], objectives: Sequence[str], title: str
) -> None:
    """The front's hypervolume (fixed normalisation, comparable across runs of one problem) and
    the best feasible value of each objective, per generation (the thesis's Figure 12)."""
    fig, axes = _grid(1 + len(objectives), ncols=4)
    panels = [("hypervolume", "hypervolume of the front")] + [
        (f"best_{n}", f"best {axis_label(n)}") for n in objectives
    ]
    for ax, (key, ylabel) in zip(axes, panels, strict=True):
        for label, history in runs.items():
            gens = [h["generation"] for h in history]
            ys = np.array([float(h.get(key, np.nan)) for h in history])
            ax.plot(gens, ys, label=label, drawstyle="steps-post")
        if all(not np.isfinite(float(h.get(key, np.nan))) for hs in runs.values() for h in hs):
            ax.text(0.5, 0.5, "no feasible mapping", ha="center", transform=ax.transAxes)
        ax.set_xlabel("generation")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
    if len(runs) > 1:
        axes[0].legend(fontsize=7, loc="upper right")  # "best" is slow with many points
    _save(fig, path, title)


def _pareto_columns(n_pairs: int) -> int:
    """Scatter panels a row: a divisor of the pair count where one fits (1, 3, 6, 10 and 15
    pairs for 2 to 6 objectives), so no panel is left blank."""
    return next((c for c in (3, 5, 4, 2) if n_pairs % c == 0), 1) if n_pairs > 1 else 1


def pareto_figure(f: np.ndarray, feasible: np.ndarray, objectives: Sequence[str]):
    """The final front: pairwise scatter of the objectives with each objective's best marked,
    and, for 3 or more objectives, parallel coordinates below them across the figure (one
    line per mapping, each axis scaled from its best to its worst), where no point looks
    dominated that is not. Each best has one marker and one colour in every panel."""
    k = len(objectives)
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)] or [(0, 0)]
    ncols = _pareto_columns(len(pairs))
    rows = math.ceil(len(pairs) / ncols) + (1 if k >= 3 else 0)
    fig, axes = _grid(rows * ncols, ncols=ncols, bottom=0.75)
    ok = feasible if feasible.any() else np.ones(len(f), dtype=bool)
    bests = {n: int(np.flatnonzero(ok)[np.argmin(f[ok, i])]) for i, n in enumerate(objectives)}
    style = [
        {"marker": m, "color": c, "label": f"best {n}"}
        for m, c, n in zip(BEST_MARKERS, BEST_COLORS, bests, strict=False)
    ]
    for ax, (i, j) in zip(axes, pairs, strict=False):
        ax.scatter(
            f[feasible, i], f[feasible, j], s=10, alpha=0.6, color="C0", label="Pareto mapping"
        )
        if (~feasible).any():
            over = f[~feasible]
            ax.scatter(over[:, i], over[:, j], s=14, marker="x", color="C7", label="over capacity")
        for st, size, b in zip(style, BEST_SIZES, bests.values(), strict=False):
            ax.scatter(f[b, i], f[b, j], s=size, edgecolor="k", **st)
        ax.set_xlabel(axis_label(objectives[i]), fontsize=8)
        ax.set_ylabel(axis_label(objectives[j]), fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper right")  # "best" is slow with many points
    if k >= 3:
        # one panel across the last row
        row = axes[-ncols:]
        left, right = row[0].get_position(), row[-1].get_position()
        for a in row:
            a.set_visible(False)
        ax = fig.add_axes((left.x0, left.y0, right.x1 - left.x0, left.height))
        lo, hi = f.min(axis=0), f.max(axis=0)
        norm = (f - lo) / np.where(hi > lo, hi - lo, 1.0)
        xs = np.arange(k)
        from matplotlib.collections import LineCollection  # one artist for the whole front

        lines = np.stack([np.broadcast_to(xs, norm.shape), norm], axis=2)[feasible]
        ax.add_collection(LineCollection(lines, colors="C0", alpha=0.15, lw=0.8))
        for st, b in zip(style, bests.values(), strict=False):
            ax.plot(xs, norm[b], lw=2, ms=8, **st)
        ax.set_xticks(
            xs,
            [
                f"{n}\n{lo[i]:.3g}-{hi[i]:.3g} {OBJECTIVES[n].unit}"
                for i, n in enumerate(objectives)
            ],
            fontsize=7,
        )
        ax.set_xlim(-0.05 * (k - 1), 1.05 * (k - 1))
        ax.set_ylabel("best (0) to worst (1)\non the front", fontsize=8)
        ax.set_title("parallel coordinates", fontsize=8)
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(alpha=0.3)
    return fig


def plot_pareto(
    path: Path,
    f: np.ndarray,
    feasible: np.ndarray,
    objectives: Sequence[str],
    title: str,
) -> None:
    """:func:`pareto_figure`, titled, as a PNG."""
    _save(pareto_figure(f, feasible, objectives), path, title)


def plot_profiles(
    path: Path, latency: Sequence[Sequence[float]], names: Sequence[str], title: str
) -> None:
    """Each front point's latency (``latency[s][i]``, ms) under each profile ``names[s]``, the
    points in the front's order: how far each plan moves when the conditions change."""
    fig, (ax,) = _grid(1, ncols=1, size=(7.0, 3.6))
    for s, name in enumerate(names):
        ys = np.asarray(latency[s], dtype=float)
        ax.plot(np.arange(len(ys)), ys, marker=BEST_MARKERS[s % len(BEST_MARKERS)], label=name)
    ax.set_xlabel("front point (pareto.csv's point)")
    ax.set_ylabel(axis_label("latency") + " under each profile", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    _save(fig, path, title)


def plain_log_ticks(ax) -> None:  # noqa: ANN001 - a matplotlib Axes
    """Log axes labelled 20, 50, 100 (not 2x10^1): ticks at 1, 2 and 5 of each decade, more
    where the axis spans less than a decade, printed as plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for axis in (ax.xaxis, ax.yaxis):
        lo, hi = sorted(axis.get_view_interval())
        if hi > 10 * lo:
            subs: tuple[float, ...] = (1.0, 2.0, 5.0)
        elif hi > 3 * lo:
            subs = (1.0, 2.0, 3.0, 5.0)
        else:
            subs = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)
        axis.set_major_locator(LogLocator(base=10, subs=subs))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


def plot_predicted_vs_measured(
    path: Path,
    panels: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[str]]],
    title: str,
) -> None:
    """Predicted against measured, one panel per figure (``label -> (measured, predicted,
    point names)``), with y = x and the +-10 % band; points with no value are left out."""
    fig, axes = _grid(max(1, len(panels)), ncols=3, size=(4.4, 4.0))
    drawn = False  # some panel has points (and so labels for the legend)
    for ax, (label, (measured, predicted, names)) in zip(axes, panels.items(), strict=False):
        pts = [
            (float(m), float(p), n)
            for m, p, n in zip(measured, predicted, names, strict=True)
            if m is not None and p is not None and m == m and p == p and m > 0 and p > 0
        ]
        if not pts:
            ax.text(0.5, 0.5, "nothing measured", ha="center", transform=ax.transAxes)
            continue
        lo = min(min(m, p) for m, p, _ in pts) / 1.3
        hi = max(max(m, p) for m, p, _ in pts) * 1.3
        log = hi / lo > 20  # several decades: log axes; else linear from 0
        lo = lo if log else 0.0
        line = np.geomspace(lo, hi, 50) if log else np.linspace(0.0, hi, 50)
        ax.plot(line, line, "k--", lw=1, label="y = x")
        ax.fill_between(line, line * 0.9, line * 1.1, color="0.85", label="±10 %")
        names_seen: dict[str, int] = {}
        drawn = True
        for m, p, n in pts:
            new = n not in names_seen
            k = names_seen.setdefault(n, len(names_seen))
            ax.scatter(
                m,
                p,
                s=30,
                marker=BEST_MARKERS[k % len(BEST_MARKERS)],
                color=f"C{k % 10}",
                zorder=3,
                label=n if new and k < 12 else None,
            )
        if log:
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        if log:
            plain_log_ticks(ax)
        ax.set_xlabel(f"measured {label}", fontsize=8)
        ax.set_ylabel(f"predicted {label}", fontsize=8)
        ax.grid(alpha=0.3, which="both")
    if drawn:  # nothing measured: no legend (matplotlib would warn of an empty one)
        axes[0].legend(fontsize=6, loc="upper left")
    _save(fig, path, title)
