"""What every encoding offers: gene count, bounds, sampling, and a vectorized decoder."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from dse.errors import DseError
from dse.mapping import MappingBatch, derive_owner, shares_by_speed, shares_from_counts
from dse.net.graph import LayerGraph


class Chromosome(ABC):
    """An integer encoding of mappings of ``graph`` onto ``n_devices`` devices.

    Every gene vector within the bounds decodes to a valid mapping (by construction or by a
    deterministic repair rule, never an error). It knows nothing about the cost model.
    """

    name: str = ""

    def __init__(
        self,
        graph: LayerGraph,
        n_devices: int,
        splits: int | None = None,
        speed: np.ndarray | None = None,
    ) -> None:
        """``speed[L, D]``: relative throughput of each device on each layer; given, a split
        layer's parts are sized to their devices (:func:`dse.mapping.shares_by_speed`), else
        equal."""
        self.graph, self.n_devices = graph, n_devices
        self.speed = speed
        self.split_layers = np.flatnonzero(graph.splittable)
        if splits is not None and not 1 <= splits <= n_devices:
            raise DseError(
                f"chromosome.splits={splits} must be between 1 and the number of "
                f"devices ({n_devices})"
            )

    @property
    @abstractmethod
    def n_genes(self) -> int: ...

    @property
    @abstractmethod
    def upper(self) -> np.ndarray:
        """Inclusive upper bound of every gene (lower bounds are 0)."""

    @property
    def lower(self) -> np.ndarray:
        return np.zeros(self.n_genes, dtype=np.int64)

    def search_space_log10(self) -> float:
        """log10 of the number of distinct gene vectors."""
        return float(sum(math.log10(u + 1) for u in self.upper.tolist()))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, self.upper + 1, size=(n, self.n_genes))

    @abstractmethod
    def single_device(self, device: int) -> np.ndarray:
        """Genes of the mapping that runs everything on ``device`` (to seed a population)."""

    @abstractmethod
    def decode(self, genes: np.ndarray) -> MappingBatch:
        """Gene matrix [P, n_genes] -> mapping batch."""

    def _shares(self, counts: np.ndarray, layers: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Channel fractions of ``counts[P, len(layers), D]`` parts of ``layers``."""
        channels = self.graph.out_channels[layers]
        if self.speed is None:
            return shares_from_counts(counts, channels)
        return shares_by_speed(counts, channels, self.speed[layers])

    def _batch(self, share: np.ndarray) -> MappingBatch:
        return MappingBatch(share, derive_owner(self.graph, share))
