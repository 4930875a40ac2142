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

    The genes are the encoding's placement genes (:attr:`n_place`), then, with ``spatial``,
    one axis gene per splittable layer that can split by rows (0: by output channels, 1: by
    output rows; it counts only where the layer has several parts).
    """

    name: str = ""

    def __init__(
        self,
        graph: LayerGraph,
        n_devices: int,
        splits: int | None = None,
        speed: np.ndarray | None = None,
        spatial: bool = False,
    ) -> None:
        """``speed[L, D]``: relative throughput of each device on each layer; given, a split
        layer's parts are sized to their devices (:func:`dse.mapping.rules.speed_sizes`), else
        equal (:func:`dse.mapping.rules.equal_sizes`). ``spatial``: layers may split by rows
        too (an axis gene each)."""
        self.graph, self.n_devices = graph, n_devices
        self.speed = speed
        self.split_layers = graph.split_layers
        self._split_speed = (
            None if speed is None else np.ascontiguousarray(speed[self.split_layers], dtype=float)
        )
        self._units = units(graph)
        #: the splittable layers (indices into split_layers) with an axis gene, in order
        self.axis_layers = (
            np.flatnonzero(graph.row_splittable[self.split_layers]).astype(np.int64)
            if spatial and self.splits_layers
            else np.zeros(0, dtype=np.int64)
        )
        self.spatial = bool(len(self.axis_layers))
        if splits is not None and not 1 <= splits <= n_devices:
            raise DseError(
                f"chromosome.splits={splits} must be between 1 and the number of "
                f"devices ({n_devices})"
            )

    #: whether the encoding splits layers at all (the vertical one does not)
    splits_layers: bool = True

    @property
    @abstractmethod
    def n_place(self) -> int:
        """The placement genes (the encoding's own, before the axis genes)."""

    @property
    @abstractmethod
    def place_upper(self) -> np.ndarray:
        """Inclusive upper bound of every placement gene (lower bounds are 0)."""

    @property
    def n_genes(self) -> int:
        return self.n_place + len(self.axis_layers)

    @property
    def upper(self) -> np.ndarray:
        """Inclusive upper bound of every gene (lower bounds are 0)."""
        if not self.spatial:
            return self.place_upper
        return np.concatenate([self.place_upper, np.ones(len(self.axis_layers), np.int64)])

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

    def single_device(self, device: int) -> np.ndarray:
        """Genes of the mapping that runs everything on ``device`` (to seed a population)."""
        return self.with_axes(self._place_single(device))

    @abstractmethod
    def _place_single(self, device: int) -> np.ndarray:
        """Placement genes of the mapping that runs everything on ``device``."""

    def with_axes(self, place: np.ndarray, rows: bool = False) -> np.ndarray:
        """Placement genes ``place`` [n_place] with every axis gene 0 (channels) or 1 (rows)."""
        axes = np.full(len(self.axis_layers), int(rows), dtype=np.int64)
        return np.concatenate([np.asarray(place, dtype=np.int64), axes])

    @abstractmethod
    def _counts(self, genes: np.ndarray, device: np.ndarray, counts: np.ndarray) -> None:
        """Placement genes (int64 [P, n_place]) -> fills ``device[P, L]``, the device of each
        layer that cannot be split (-1 for splittable ones), and ``counts[P, S, D]`` (zeros on
        entry), how many parts of each splittable layer each device computes."""

    def decode(self, genes: np.ndarray) -> Mappings:
        """Gene matrix [P, n_genes] -> the mappings (:class:`dse.mapping.Mappings`)."""
        genes = np.ascontiguousarray(genes, dtype=np.int64)
        place = genes if not self.spatial else np.ascontiguousarray(genes[:, : self.n_place])
        device = np.empty((len(genes), len(self.graph)), dtype=np.int64)
        counts = np.zeros((len(genes), len(self.split_layers), self.n_devices), dtype=np.int32)
        self._counts(place, device, counts)
        axis = np.zeros(counts.shape[:2], dtype=np.int8)
        if self.spatial:
            axis[:, self.axis_layers] = genes[:, self.n_place :] > 0
            axis[np.count_nonzero(counts, axis=2) < 2] = 0  # one part: no axis
        sizes = np.empty_like(counts)
        if self.speed is None:
            rules.equal_sizes(counts, self._units, axis, sizes)
        else:
            rules.speed_sizes(counts, self._units, axis, self._split_speed, sizes)
        return Mappings(device, sizes, axis)
