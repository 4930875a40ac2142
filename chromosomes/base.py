"""What every encoding offers: gene count, bounds, sampling, and a vectorized decoder."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np

from chromosomes import kernels
from dse.errors import DseError
from dse.mapping import MappingBatch, first_consumer, first_producer
from dse.net.graph import LayerGraph


class Parts(NamedTuple):
    """P mappings in whole numbers: far smaller than their shares and exact to compare."""

    device: np.ndarray  # int64 [P, L]: the device of each layer that is not splittable, else -1
    channels: np.ndarray  # int32 [P, S, D]: channels of each splittable layer on each device

    def __len__(self) -> int:
        return len(self.device)

    def take(self, idx: np.ndarray) -> Parts:
        return Parts(self.device[idx], self.channels[idx])

    @staticmethod
    def concat(parts: list[Parts]) -> Parts:
        return Parts(
            np.concatenate([p.device for p in parts]), np.concatenate([p.channels for p in parts])
        )


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
        self._split_speed = (
            None if speed is None else np.ascontiguousarray(speed[self.split_layers], dtype=float)
        )
        self._channels = np.asarray(graph.out_channels, dtype=np.int64)
        self._consumer, self._producer = first_consumer(graph), first_producer(graph)
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
    def _parts(self, genes: np.ndarray, device: np.ndarray, counts: np.ndarray) -> None:
        """Gene matrix (int64 [P, n_genes]) -> fills ``device[P, L]``, the device of each layer
        that cannot be split (-1 for splittable ones), and ``counts[P, S, D]`` (zeros on
        entry), how many parts of each splittable layer each device computes."""

    def parts(self, genes: np.ndarray) -> Parts:
        """Gene matrix [P, n_genes] -> the mappings in whole numbers (:class:`Parts`)."""
        genes = np.ascontiguousarray(genes, dtype=np.int64)
        device = np.empty((len(genes), len(self.graph)), dtype=np.int64)
        counts = np.zeros((len(genes), len(self.split_layers), self.n_devices), dtype=np.int32)
        self._parts(genes, device, counts)
        channels = self._channels[self.split_layers]
        if self.speed is None:
            out = np.empty_like(counts)
            kernels.equal_channels(counts, channels, out)
            return Parts(device, out)
        out = np.empty_like(counts)
        kernels.speed_channels(counts, channels, self._split_speed, out)
        return Parts(device, out)

    def batch_of(self, parts: Parts) -> MappingBatch:
        """The mapping batch of :meth:`parts`."""
        share = np.zeros((len(parts), len(self.graph), self.n_devices))
        owner = np.zeros((len(parts), len(self.graph)), dtype=np.int64)
        kernels.shares_and_owner(
            parts.device,
            parts.channels,
            self._channels,
            self._consumer,
            self._producer,
            share,
            owner,
        )
        return MappingBatch(share, owner)

    def decode(self, genes: np.ndarray) -> MappingBatch:
        """Gene matrix [P, n_genes] -> mapping batch."""
        return self.batch_of(self.parts(genes))
