"""The fidelity report's figure: predicted against measured latency and memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from dse.fidelity.choose import KINDS
from dse.fidelity.statistics import Points, stats
from dse.results.plots import plain_log_ticks
from models_analytical.coefficients import Coefficients


def title(net: str, platform: str, n: int, coefficients: Coefficients) -> str:
    """The figure's title: what was measured, and the coefficients predicted with, named with
    how they were obtained (:attr:`~models_analytical.coefficients.Coefficients.calibration`)."""
    return (
        f"{net} on {platform}: predicted vs measured, {n} mappings (coefficients "
        f"{coefficients.source}: {coefficients.calibration})"
    )


def plot(path: Path, pts: Points, title: str) -> None:
    """Predicted against measured, log-log: latency, per-device peak memory and, where
    measured, the pipelined period, by kind of mapping (latency and period with the machine's
    drift taken out where probed, the raw measurements beside them)."""
    panels = [("latency", "ms"), ("memory", "MB")]
    if pts.period:
        panels.append(("period", "ms"))
    # on the Agg canvas, without pyplot (no screen here)
    fig = Figure(figsize=(5.5 * len(panels), 5))
    axes = fig.subplots(1, len(panels))
    for ax, (name, unit) in zip(axes, panels, strict=True):
        adjusted = name != "memory" and bool(pts.of(name, adjusted=True))  # where probed
        data = pts.of(name, adjusted)
        if not data:
            ax.set_title(f"{name}: nothing measured")
            continue
        p = np.array([d[0] for d in data], dtype=float)
        m = np.array([d[1] for d in data], dtype=float)
        # where each figure was before the machine's drift came out of it
        raw = np.array([d[1] for d in pts.of(name)]) if adjusted else m
        lo, hi = min(p.min(), m.min(), raw.min()) * 0.8, max(p.max(), m.max(), raw.max()) * 1.25
        x = np.geomspace(lo, hi, 50)
        ax.plot(x, x, "k-", lw=1, label="y = x")
        ax.fill_between(x, x / 1.1, x * 1.1, color="0.85", label="+-10 %")
        if raw is not m:
            ax.scatter(raw, p, s=14, marker="x", color="0.6", lw=0.8, label="as measured")
        for kind in KINDS:
            sel = [i for i, d in enumerate(data) if d[2] == kind]
            if sel:
                ax.scatter(m[sel], p[sel], s=22, label=kind)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        plain_log_ticks(ax)
        s = stats(p, m)
        spearman = "n/a" if s.spearman is None else f"{s.spearman:.2f}"
        ax.set_title(
            f"{name} ({unit}): MAPE {s.mape_pct or 0.0:.1f} %, {s.within_10_pct or 0.0:.0f} % "
            f"within 10 %, Spearman {spearman}",
            fontsize=9,
        )
        what = " (machine's drift taken out)" if adjusted else ""
        ax.set_xlabel(f"measured {name} ({unit}){what}")
        ax.set_ylabel(f"predicted {name} ({unit})")
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
