"""The mappings a fidelity run measures: the front of a short search, then random ones."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.config import AlgorithmConfig
from dse.mapping import RANDOM_KINDS, Mappings, random_mappings
from dse.mapping.build import ROW_KINDS
from dse.measuring.phase2 import select
from dse.net.graph import LayerGraph
from dse.search import nsga2
from dse.search.problem import MappingProblem

#: Kinds of mapping, as the report groups them: the search's front, then the random kinds
#: (those that split by rows last).
KINDS = ("front", *RANDOM_KINDS, *ROW_KINDS)


@dataclass(frozen=True)
class Chosen:
    """The mappings to measure, each with a label (its directory) and its kind."""

    mappings: Mappings
    labels: list[str]
    kinds: list[str]


def by_rows(graph: LayerGraph, n_devices: int) -> bool:
    """Whether the kinds that split by rows (:data:`~dse.mapping.build.ROW_KINDS`) are drawn:
    the network has a layer that can split by rows into two bands or more, and the platform
    two devices or more."""
    return n_devices >= 2 and bool((graph.row_splittable & (graph.out_rows >= 2)).any())


def kind_counts(kinds: tuple[str, ...], rest: int, n_devices: int) -> dict[str, int]:
    """How many random mappings of each of ``kinds`` (``single`` and ``mixed`` among them) make
    ``rest``: equal numbers, the first kinds one more where they do not divide it, at most one
    ``single`` mapping per device, what that leaves to ``mixed``."""
    n = len(kinds)
    counts = {k: rest // n + (1 if i < rest % n else 0) for i, k in enumerate(kinds)}
    counts["single"] = min(counts["single"], n_devices)
    counts["mixed"] += rest - sum(counts.values())
    return counts


def random_kinds(
    graph: LayerGraph, n_devices: int, rest: int, rng: np.random.Generator
) -> dict[str, Mappings]:
    """``rest`` random mappings of every kind, by kind in :data:`KINDS`' order (how many of
    each: :func:`kind_counts`; the row kinds only where :func:`by_rows`).

    What the row kinds change, for a given seed: each kind of :data:`RANDOM_KINDS` is drawn
    from ``rng`` first, in the number it had before there were row kinds (``rest`` shared by
    four), and keeps its first mappings: all of those it had before, or the first of them
    where the row kinds take their share of ``rest``. The row kinds are drawn after them. So
    without row kinds every draw is as it was; with them the other kinds' mappings are the
    first of theirs before, and what ``rng`` draws after them (the row kinds, the mixed
    mappings that replace copies) is new."""
    old = kind_counts(RANDOM_KINDS, rest, n_devices)
    rows = by_rows(graph, n_devices)
    counts = kind_counts(RANDOM_KINDS + ROW_KINDS, rest, n_devices) if rows else old
    out = {}
    for kind in RANDOM_KINDS:
        drawn = random_mappings(graph, n_devices, kind, old[kind], rng)
        out[kind] = drawn.take(np.arange(min(counts[kind], old[kind])))
    for kind in ROW_KINDS if rows else ():
        out[kind] = random_mappings(graph, n_devices, kind, counts[kind], rng)
    return out


def choose(problem: MappingProblem, algorithm: AlgorithmConfig, n: int, seed: int) -> Chosen:
    """At most ``n`` distinct mappings: the per-objective bests of a search (``algorithm``)
    and points spread along its front (a third of ``n`` in all), then random mappings of every
    kind (one device, vertical cuts, every splittable layer split, mixed; where
    :func:`by_rows`, every layer that can split by rows split by rows, and mixed along either
    axis) in equal numbers (:func:`random_kinds`); a copy of another is replaced by a mixed
    one."""
    graph, n_dev = problem.model.graph, len(problem.model.platform.devices)
    state = nsga2.run(nsga2.new_search(problem, algorithm, seed))
    genes, F, _ = nsga2.front(state)
    picks = select(F, list(problem.objectives), max(n // 3 - len(problem.objectives), 0))
    batches = [problem.chromosome.decode(np.asarray(genes)[[i for i, _ in picks]])]
    labels = [lab for _, lab in picks]
    kinds = ["front"] * len(picks)
    rng = np.random.default_rng(seed)
    # the row kinds are drawn after the others, which keep their draws (random_kinds says
    # what changes for a seed)
    drawn = random_kinds(graph, n_dev, max(n - len(picks), 0), rng)
    per_kind = {kind: len(m) for kind, m in drawn.items()}
    batches += drawn.values()
    for kind, count in per_kind.items():
        labels += [f"{kind}_{i}" for i in range(count)]
        kinds += [kind] * count
    for _ in range(10):  # copies (a random mapping equal to another) are replaced by mixed ones
        mappings = Mappings.concat(batches)
        _, first = np.unique(mappings.keys(), return_index=True)
        keep = np.sort(first)
        if len(keep) >= n:
            break
        more = n - len(keep)
        batches.append(random_mappings(graph, n_dev, "mixed", more, rng))
        labels += [f"mixed_{per_kind['mixed'] + i}" for i in range(more)]
        kinds += ["mixed"] * more
        per_kind["mixed"] += more
    keep = keep[:n]
    return Chosen(mappings.take(keep), [labels[i] for i in keep], [kinds[i] for i in keep])
