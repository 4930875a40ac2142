"""What every encoding offers: gene count, bounds, sampling, and a vectorized decoder."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from dse.graph import LayerGraph
from dse.mapping import MappingBatch, derive_owner


class Chromosome(ABC):
    """An integer encoding of mappings of ``graph`` onto ``n_devices`` devices.

    Every gene vector within the bounds decodes to a valid mapping (by construction or by a
    deterministic repair rule, never an error). It knows nothing about the cost model.
    """

    name: str = ""

    def __init__(self, graph: LayerGraph, n_devices: int) -> None:
        self.graph, self.n_devices = graph, n_devices
        self.split_layers = np.flatnonzero(graph.splittable)

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

    def _batch(self, share: np.ndarray) -> MappingBatch:
        return MappingBatch(share, derive_owner(self.graph, share))


def shares_from_counts(counts: np.ndarray, channels: np.ndarray) -> np.ndarray:
    """Channel fractions when a layer is cut into sum(counts) near-equal contiguous parts.

    ``counts[..., l, d]`` is how many parts of layer l device d computes; parts are ordered by
    device and the first ``channels % parts`` parts get one channel more.
    """
    parts = counts.sum(axis=-1, keepdims=True)
    safe = np.maximum(parts, 1)
    ch = channels.reshape((1,) * (counts.ndim - 2) + (-1, 1)).astype(np.int64)
    ch = np.maximum(ch, safe)  # a layer with fewer channels than parts: one per part at least
    base, extra = ch // safe, ch % safe
    before = np.cumsum(counts, axis=-1) - counts
    bonus = np.clip(extra - before, 0, counts)
    return (counts * base + bonus) / ch
