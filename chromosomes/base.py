"""What every encoding offers: gene count, bounds, sampling, and a vectorized decoder."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from dse.errors import DseError
from dse.mapping import Mappings, rules, units
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
        layer's parts are sized to their devices (:func:`dse.mapping.rules.speed_sizes`), else
        equal (:func:`dse.mapping.rules.equal_sizes`)."""
        self.graph, self.n_devices = graph, n_devices
        self.speed = speed
        self.split_layers = graph.split_layers
        self._split_speed = (
            None if speed is None else np.ascontiguousarray(speed[self.split_layers], dtype=float)
        )
        self._units = units(graph)
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

    @property
    def gene_groups(self) -> np.ndarray:
        """int64 [n_genes]: genes with one group id name one set together (the naive encoding's
        devices of a splittable layer), so replacing a device in that set moves every gene of
        the group that names it (:func:`dse.search.local.move`); here each gene is its own
        group."""
        return np.arange(self.n_genes, dtype=np.int64)

    def search_space_log10(self) -> float:
        """log10 of the number of distinct gene vectors."""
        return float(sum(math.log10(u + 1) for u in self.upper.tolist()))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, self.upper + 1, size=(n, self.n_genes))

    @abstractmethod
    def single_device(self, device: int) -> np.ndarray:
        """Genes of the mapping that runs everything on ``device`` (to seed a population)."""

    @abstractmethod
    def _counts(self, genes: np.ndarray, device: np.ndarray, counts: np.ndarray) -> None:
        """Gene matrix (int64 [P, n_genes]) -> fills ``device[P, L]``, the device of each layer
        that cannot be split (-1 for splittable ones), and ``counts[P, S, D]`` (zeros on
        entry), how many parts of each splittable layer each device computes."""

    def decode(self, genes: np.ndarray) -> Mappings:
        """Gene matrix [P, n_genes] -> the mappings (:class:`dse.mapping.Mappings`)."""
        genes = np.ascontiguousarray(genes, dtype=np.int64)
        device = np.empty((len(genes), len(self.graph)), dtype=np.int64)
        counts = np.zeros((len(genes), len(self.split_layers), self.n_devices), dtype=np.int32)
        self._counts(genes, device, counts)
        sizes = np.empty_like(counts)
        if self.speed is None:
            rules.equal_sizes(counts, self._units, sizes)
        else:
            rules.speed_sizes(counts, self._units, self._split_speed, sizes)
        return Mappings(device, sizes)
