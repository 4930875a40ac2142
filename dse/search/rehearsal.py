"""A rehearsal of the search: its kernels compiled while the model's compiles elsewhere.

On a first run (numba's cache cold) the model's kernel compiles in a child process
(:mod:`models_analytical.ahead`) and the search's own kernels (decoding, keys, survival,
crossover, mutation) compile where they are first called. The search's first step needs the
model, so without a rehearsal they would compile only after the child is done, one after the
other. :func:`rehearse` runs a few generations of a small population of the same problem and
settings, the model replaced by random figures of the right shapes (:class:`RandomFigures`),
so those kernels compile at once, on the other core, beside the child. Nothing of it is kept:
the real search starts afresh.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import numpy as np

from dse.mapping import Mappings
from dse.search import nsga2
from dse.search.problem import MappingProblem
from models_analytical.model import AnalyticalModel, Evaluation

#: The rehearsal's population and generations: enough for every step to run (the first
#: population, breeding, refill, survival of more than a population).
POP_SIZE = 16
N_GEN = 3


class RandomFigures:
    """The model, its figures replaced by random numbers of the right shapes and types (every
    other attribute is the model's own)."""

    def __init__(self, model: AnalyticalModel, seed: int = 0) -> None:
        self._model = model
        self._rng = np.random.default_rng(seed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def evaluate(self, mappings: Mappings) -> Evaluation:
        p, d = len(mappings.device), len(self._model.platform)
        rng = self._rng

        def figures() -> np.ndarray:
            return rng.random((p, d))

        return Evaluation(
            latency_s=rng.random(p),
            busy_s=figures(),
            comm_s=figures(),
            idle_s=figures(),
            memory_mb=figures(),
            energy_j=figures(),
            bytes_sent=figures(),
            used=np.ones((p, d), dtype=bool),
            capacity_mb=np.ones(d),
            segments=np.ones((p, d), dtype=np.int64),
            span_s=figures(),
        )


def rehearse(problem: MappingProblem, settings: Any, seed: int = 0) -> None:
    """Run :data:`N_GEN` generations of :data:`POP_SIZE` mappings of ``problem`` with
    ``settings`` (an ``AlgorithmConfig``), on random figures; returns nothing."""
    small = dataclasses.replace(
        settings, pop_size=POP_SIZE, n_gen=N_GEN, max_evaluations=None, checkpoint_every=N_GEN
    )
    # a stand-in for the model: its attributes by delegation, which no static type states
    figures = cast(AnalyticalModel, RandomFigures(problem.model))
    stand_in = MappingProblem(problem.chromosome, figures, problem.objectives)
    nsga2.run(nsga2.new_search(stand_in, small, seed))
