"""The mappings a fidelity run measures: the front of a short search, then random ones."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.config import AlgorithmConfig
from dse.mapping import RANDOM_KINDS, Mappings, random_mappings
from dse.results.phase2 import select
from dse.search import nsga2
from dse.search.problem import MappingProblem

#: Kinds of mapping, as the report groups them: the search's front, then the random kinds.
KINDS = ("front", *RANDOM_KINDS)


@dataclass(frozen=True)
class Chosen:
    """The mappings to measure, each with a label (its directory) and its kind."""

    mappings: Mappings
    labels: list[str]
    kinds: list[str]


def choose(problem: MappingProblem, algorithm: AlgorithmConfig, n: int, seed: int) -> Chosen:
    """At most ``n`` distinct mappings: the per-objective bests of a search (``algorithm``)
    and points spread along its front (a third of ``n`` in all), then random mappings of every
    kind (one device, vertical cuts, every splittable layer split, mixed) in equal numbers; a
    copy of another is replaced by a mixed one."""
    graph, n_dev = problem.model.graph, len(problem.model.platform.devices)
    state = nsga2.run(nsga2.new_search(problem, algorithm, seed))
    genes, F, _ = nsga2.front(state)
    picks = select(F, list(problem.objectives), max(n // 3 - len(problem.objectives), 0))
    batches = [problem.chromosome.decode(np.asarray(genes)[[i for i, _ in picks]])]
    labels = [lab for _, lab in picks]
    kinds = ["front"] * len(picks)
    rng = np.random.default_rng(seed)
    rest = max(n - len(picks), 0)
    per_kind = {k: rest // 4 + (1 if i < rest % 4 else 0) for i, k in enumerate(KINDS[1:])}
    per_kind["single"] = min(per_kind["single"], n_dev)
    per_kind["mixed"] += rest - sum(per_kind.values())
    for kind, count in per_kind.items():
        batches.append(random_mappings(graph, n_dev, kind, count, rng))
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
