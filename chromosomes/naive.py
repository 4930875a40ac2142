"""The naive chromosome (thesis section 4.2.1): a device id per layer, n per splittable layer.

Length sp*n + ol - sp (Eq. 4.5). A splittable layer's n genes name the devices computing its
parts; repeated devices mean fewer, larger parts (equal shares among the distinct devices).
With ``splits=p`` a splittable layer gets p genes instead of n (at most p parts).
"""

from __future__ import annotations

import numpy as np

from chromosomes import kernels
from chromosomes.base import Chromosome


class NaiveChromosome(Chromosome):
    name = "naive"

    def __init__(
        self, graph, n_devices: int, splits: int | None = None, speed=None, spatial=False
    ) -> None:
        super().__init__(graph, n_devices, splits, speed, spatial)
        width = np.where(graph.splittable, n_devices if splits is None else splits, 1)
        self.start = np.concatenate([[0], np.cumsum(width)[:-1]])  # first gene of each layer
        self.width = width
        self.layer_of_gene = np.repeat(np.arange(len(graph)), width)

    @property
    def n_place(self) -> int:
        return int(self.width.sum())

    @property
    def place_upper(self) -> np.ndarray:
        return np.full(self.n_place, self.n_devices - 1, dtype=np.int64)

    def _place_single(self, device: int) -> np.ndarray:
        return np.full(self.n_place, device, dtype=np.int64)

    @property
    def gene_groups(self) -> np.ndarray:
        """A splittable layer's genes name the set of devices computing its parts: one group
        per layer (its genes repeat a device to make fewer parts, so changing one gene cannot
        move the layer from one device to another); each axis gene a group of its own."""
        axes = np.arange(len(self.axis_layers), dtype=np.int64) + len(self.graph)
        return np.concatenate([self.layer_of_gene.astype(np.int64), axes])

    def _counts(self, genes: np.ndarray, device: np.ndarray, counts: np.ndarray) -> None:
        kernels.naive_counts(genes, self.layer_of_gene, self.graph.splittable, device, counts)
