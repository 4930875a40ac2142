"""Run outputs: Pareto CSV, best mappings (AutoDiCE + readable table), history, plots, summary."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

from dse.files import staged, write_text
from dse.mapping import Mappings, to_autodice
from dse.mapping.mappings import AXES
from dse.net.graph import LayerGraph
from dse.objectives import OBJECTIVES, fmt
from dse.platform import Platform
from dse.search.problem import MappingProblem


def _columns(objectives: list[str]) -> list[str]:
    return [OBJECTIVES[n].column for n in objectives]


def profile_column(figure: str, profile: str) -> str:
    """The column of a figure under a profile: ``latency_ms@wifi_50``."""
    return f"{figure}@{profile}"


def write_pareto(
    path: Path, problem: MappingProblem, genes: np.ndarray, bests: np.ndarray | None = None
) -> list[dict]:
    """One row per Pareto point: objectives, feasibility, devices used, split layers (and,
    where the encoding splits by rows, how many of them by rows), data sent; where the
    platform has profiles, its latency under each (``latency_ms@PROFILE``) and, given each
    profile's best latency ``bests`` [S] (ms, :func:`dse.search.regret.profile_bests`), its
    regret there (``regret_ms@PROFILE``: its latency less that best).

    Distinct mappings with the same objectives (the same work on another, identical board) are
    one row; ``same_cost_mappings`` counts them.
    """
    mappings = problem.chromosome.decode(genes)
    f, ev = problem.scores(mappings)
    values = {n: f[:, k] for k, n in enumerate(problem.objectives)}
    under: dict[str, np.ndarray] = {}
    if problem.profiles is not None:
        latency = problem.profiles.evaluate(["latency"], mappings, every=True)[0][:, :, 0]
        for s, name in enumerate(problem.profiles.names):
            under[profile_column("latency_ms", name)] = latency[s]
            if bests is not None:
                under[profile_column("regret_ms", name)] = latency[s] - bests[s]
    split = (mappings.sizes > 0).sum(axis=2) > 1
    rows: dict[tuple, dict[str, Any]] = {}
    for i in range(len(genes)):
        key = tuple(round(float(values[n][i]), 6) for n in problem.objectives)
        if key in rows:
            rows[key]["same_cost_mappings"] += 1
            continue
        row: dict[str, Any] = {"point": len(rows)}
        row.update({OBJECTIVES[n].column: v for n, v in zip(problem.objectives, key, strict=True)})
        row.update(
            {
                "feasible": bool(ev.feasible[i]),
                "devices_used": int(ev.used[i].sum()),
                "split_layers": int(split[i].sum()),
                **(
                    {"by_rows": int((split[i] & (mappings.axis[i] == 1)).sum())}
                    if problem.chromosome.spatial
                    else {}
                ),
                "sent_MB": round(float(ev.bytes_sent[i].sum()) / 1e6, 6),
                **{column: round(float(v[i]), 6) for column, v in under.items()},
                "same_cost_mappings": 1,
                "genes": " ".join(map(str, genes[i].tolist())),
            }
        )
        rows[key] = row
    ordered = sorted(rows.values(), key=lambda r: r[_columns(problem.objectives)[0]])
    for k, row in enumerate(ordered):
        row["point"] = k
    write_csv(path, ordered)
    return ordered


def mapping_table(graph: LayerGraph, keys: list[str], mapping: Mappings) -> str:
    """A readable table of mapping 0, like the thesis's Table 4: layer, op, output sizes,
    devices (a split layer's parts in output channels or rows)."""
    _, owner = mapping.dense(graph)
    lines = [
        "| layer | op | output | split outputs | devices | concat on |",
        "|---|---|---|---|---|---|",
    ]
    for i, (layer, devs) in enumerate(zip(graph, mapping.devices(graph), strict=True)):
        shape = "x".join(map(str, layer.output_shape))
        if len(devs) > 1:
            parts = ", ".join(str(b - a) for a, b in mapping.bounds(graph, i))
            unit = AXES[mapping.split_axis(graph, i)]
            lines.append(
                f"| {layer.name} | {layer.op} | {shape} | {parts} {unit} | "
                f"{', '.join(keys[d] for d in devs)} | {keys[owner[0, i]]} |"
            )
        else:
            lines.append(f"| {layer.name} | {layer.op} | {shape} | | {keys[devs[0]]} | |")
    return "\n".join(lines) + "\n"


def overflow(problem: MappingProblem, platform: Platform, genes: np.ndarray) -> str | None:
    """Which devices a mapping overflows, e.g. ``xavier0_gpu needs 9120 MB of its 8192 MB``;
    None when it fits."""
    ev = problem.model.evaluate(problem.chromosome.decode(genes[None, :]))
    over = np.flatnonzero(ev.memory_mb[0] > ev.capacity_mb)
    if not len(over):
        return None
    return ", ".join(
        f"{platform.keys[d]} needs {ev.memory_mb[0, d]:.0f} MB of its {ev.capacity_mb[d]:.0f} MB"
        for d in over[np.argsort(-(ev.memory_mb[0, over] / ev.capacity_mb[over]))]
    )


def write_best(
    directory: Path, problem: MappingProblem, platform: Platform, genes: np.ndarray, f: np.ndarray
) -> dict[str, dict]:
    """best_<objective>/ with mapping.json, horizontal.json and mapping.md for each objective;
    returns, per objective, the mapping's objective values, its layer table (Markdown) and
    what it overflows (None when it fits)."""
    best = {}
    graph = problem.chromosome.graph
    for i, name in enumerate(problem.objectives):
        k = int(np.argmin(f[:, i]))
        chosen = problem.chromosome.decode(genes[k : k + 1])
        mapping, horizontal = to_autodice(graph, platform.keys, chosen)
        out = directory / f"best_{name}"
        out.mkdir(parents=True, exist_ok=True)
        over = overflow(problem, platform, genes[k])
        warning = f"**INFEASIBLE: over memory capacity ({over})**\n\n" if over else ""
        write_text(out / "mapping.json", json.dumps(mapping, indent=1) + "\n")
        write_text(out / "horizontal.json", json.dumps(horizontal, indent=1) + "\n")
        write_text(
            out / "mapping.md",
            f"# Best {name} mapping of {graph.name} on {platform.name}\n\n"
            + warning
            + ", ".join(
                f"{OBJECTIVES[n].label}: {fmt(n, f[k, j])}"
                for j, n in enumerate(problem.objectives)
            )
            + "\n\n"
            + mapping_table(graph, platform.keys, chosen),
        )
        best[name] = {
            "values": {n: float(f[k, j]) for j, n in enumerate(problem.objectives)},
            "table": mapping_table(graph, platform.keys, chosen),
            "overflow": over,
        }
    return best


def write_history(path: Path, history: list[dict]) -> None:
    if history:
        write_csv(path, history)


def write_csv(path: Path, rows: list[dict]) -> None:
    """Rows with the first row's keys as the header, written atomically."""
    with staged(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
