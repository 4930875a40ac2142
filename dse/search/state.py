"""What a search carries from one generation to the next: its population and its state."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dse.config import AlgorithmConfig
from dse.search import operators
from dse.search.hypervolume import Reference
from dse.search.problem import MappingProblem

#: Why a search ended (``SearchState.stop_reason``; summary.json's ``stopped``).
STOP_REASONS = {
    "generations": "it ran algorithm.n_gen generations",
    "evaluations": "it evaluated algorithm.max_evaluations mappings",
    "exhausted": "no new mapping could be bred or found (the encoding's mappings may all be "
    "evaluated)",
    "interrupted": "it was interrupted (resume=<run dir> continues it)",
}


@dataclass
class Population:
    """Genes, objectives (display units), constraint, rank and crowding of N individuals."""

    X: np.ndarray  # int64 [N, n_var]
    F: np.ndarray  # float64 [N, n_obj]
    G: np.ndarray  # float64 [N, 1]: fullest device's memory / capacity - 1
    rank: np.ndarray  # int64 [N], -1 for infeasible individuals
    crowding: np.ndarray  # float64 [N]
    keys: list[int]  # [N] the mapping of each individual (:meth:`dse.mapping.Mappings.keys`)

    def __len__(self) -> int:
        return len(self.X)

    @property
    def cv(self) -> np.ndarray:
        return np.maximum(self.G[:, 0], 0.0)

    def take(self, idx: np.ndarray) -> Population:
        return Population(
            self.X[idx],
            self.F[idx],
            self.G[idx],
            self.rank[idx],
            self.crowding[idx],
            [self.keys[i] for i in idx.tolist()],
        )


@dataclass
class SearchState:
    """Everything a search carries from one generation to the next."""

    problem: MappingProblem
    settings: AlgorithmConfig
    seed: int
    rng: np.random.Generator
    reference: Reference  # fixed hypervolume normalisation of this problem
    pop: Population | None = None
    generation: int = 0  # generations completed; the initial population is generation 1
    evaluations: int = 0  # distinct mappings evaluated
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    seen: set[int] = field(default_factory=set)  # every mapping evaluated so far
    exhausted: bool = False  # no new mapping could be bred or found
    stop_reason: str = ""  # why the search ended (STOP_REASONS), once it has
    new: int = 0  # new mappings evaluated by the last generation
    refilled: int = 0  # ... of them supplied by the refill (dse.search.refill), not bred

    def __post_init__(self) -> None:
        self.crossover = self.settings.crossover.build()
        self.mutation = self.settings.mutation.build()
        # pymoo's SBX and PM are run by their compiled copies (same draws, same numbers)
        self.fast_crossover = operators.fast_path(self.crossover)
        self.fast_mutation = operators.fast_path(self.mutation)

    @property
    def done(self) -> bool:
        return bool(self.limit())

    def limit(self) -> str:
        """The limit the search has reached (a key of STOP_REASONS but 'interrupted'), or ''."""
        cap = self.settings.max_evaluations
        if self.exhausted:
            return "exhausted"
        if cap is not None and self.evaluations >= cap:
            return "evaluations"
        if self.generation >= self.settings.n_gen:
            return "generations"
        return ""


def concat(a: Population, b: Population) -> Population:
    return Population(
        np.concatenate([a.X, b.X]),
        np.concatenate([a.F, b.F]),
        np.concatenate([a.G, b.G]),
        np.concatenate([a.rank, b.rank]),
        np.concatenate([a.crowding, b.crowding]),
        a.keys + b.keys,
    )
