"""Split-point encodings: the advanced hybrid chromosome (thesis 4.2.2) and the vertical one.

A row of n genes (one per device) holds split points: a device with value v takes the items
after the previous smaller value in its row up to and including item v; 0 means the device
takes nothing. Ties go to the lowest device index.
"""

from __future__ import annotations

import numpy as np

from chromosomes import kernels
from chromosomes.base import Chromosome
from dse.config import ADVANCED_SPLITS
from dse.errors import DseError


class AdvancedChromosome(Chromosome):
    """p x n split points over the re-indexed splittable layers (Eq. 4.6).

    Row r, column d: device d computes the r-th part of the splittable layers it covers in row
    r. A device covering a layer in several rows computes several parts. Non-splittable layers
    go to the device of the first part of the previous splittable layer (those before the first
    splittable layer: of the first one). Row 1 always covers every splittable layer (repair:
    extended to the end), so every layer is mapped.
    """

    name = "advanced"

    def __init__(
        self, graph, n_devices: int, splits: int | None = None, speed=None, spatial=False
    ) -> None:
        splits = min(ADVANCED_SPLITS, n_devices) if splits is None else splits
        super().__init__(graph, n_devices, splits, speed, spatial)
        if len(self.split_layers) == 0:
            raise DseError(
                f"network '{graph.name}' has no splittable layer: the hybrid "
                "encodings need one; use chromosome=vertical"
            )
        self.splits = splits
        # for every layer, the splittable index (0-based) whose first part decides its device
        prev = np.cumsum(graph.splittable) - 1
        self.anchor = np.maximum(prev, 0)

    @property
    def n_place(self) -> int:
        return self.splits * self.n_devices

    @property
    def place_upper(self) -> np.ndarray:
        return np.full(self.n_place, len(self.split_layers), dtype=np.int64)

    def _place_single(self, device: int) -> np.ndarray:
        genes = np.zeros((self.splits, self.n_devices), dtype=np.int64)
        genes[0, device] = len(self.split_layers)
        return genes.ravel()

    def _counts(self, genes: np.ndarray, device: np.ndarray, counts: np.ndarray) -> None:
        kernels.advanced_counts(
            genes, self.splits, self.anchor, self.graph.splittable, device, counts
        )


class VerticalChromosome(Chromosome):
    """The vertical split-point encoding of the thesis's reference [18]: n split points over
    all layers; no layer is split. The baseline of the thesis's Figures 14, 21 and 27.
    ``splits`` is accepted (so sweeps over it run) and ignored: no layer is split."""

    name = "vertical"
    splits_layers = False  # no axis genes, whatever ``spatial`` says

    @property
    def n_place(self) -> int:
        return self.n_devices

    @property
    def place_upper(self) -> np.ndarray:
        return np.full(self.n_place, len(self.graph), dtype=np.int64)

    def _place_single(self, device: int) -> np.ndarray:
        genes = np.zeros(self.n_devices, dtype=np.int64)
        genes[device] = len(self.graph)
        return genes

    def _counts(self, genes: np.ndarray, device: np.ndarray, counts: np.ndarray) -> None:
        kernels.vertical_counts(genes, self.graph.splittable, device, counts)
