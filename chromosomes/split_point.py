"""Split-point encodings: the advanced hybrid chromosome (thesis 4.2.2) and the vertical one.

A row of n genes (one per device) holds split points: a device with value v takes the items
after the previous smaller value in its row up to and including item v; 0 means the device
takes nothing. Ties go to the lowest device index.
"""

from __future__ import annotations

import numpy as np

from chromosomes.base import Chromosome
from dse.errors import DseError
from dse.mapping import MappingBatch


def cover(values: np.ndarray, n_items: int) -> np.ndarray:
    """For rows of split points ``values[..., n]``: the device covering items 1..n_items.

    Returns ``[..., n_items]`` with -1 where no device's split point reaches the item.
    """
    vals = values[..., None, :]  # [..., 1, n]
    items = np.arange(1, n_items + 1)[:, None]  # [items, 1]
    masked = np.where(vals >= items, vals, np.iinfo(np.int64).max)
    best = masked.argmin(axis=-1)
    return np.where(masked.min(axis=-1) == np.iinfo(np.int64).max, -1, best)


def extend_first_row(cov: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Repair: items after a row's last split point go to the device holding that point;
    a row of zeros gives everything to device 0."""
    last = values.argmax(axis=-1)  # first device with the largest value
    return np.where(cov < 0, last[..., None], cov)


class AdvancedChromosome(Chromosome):
    """p x n split points over the re-indexed splittable layers (Eq. 4.6).

    Row r, column d: device d computes the r-th part of the splittable layers it covers in row
    r. A device covering a layer in several rows computes several parts. Non-splittable layers
    go to the device of the first part of the previous splittable layer (those before the first
    splittable layer: of the first one). Row 1 always covers every splittable layer (repair:
    extended to the end), so every layer is mapped.
    """

    name = "advanced"

    def __init__(self, graph, n_devices: int, splits: int | None = None, speed=None) -> None:
        splits = min(2, n_devices) if splits is None else splits
        super().__init__(graph, n_devices, splits, speed)
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
    def n_genes(self) -> int:
        return self.splits * self.n_devices

    @property
    def upper(self) -> np.ndarray:
        return np.full(self.n_genes, len(self.split_layers), dtype=np.int64)

    def single_device(self, device: int) -> np.ndarray:
        genes = np.zeros((self.splits, self.n_devices), dtype=np.int64)
        genes[0, device] = len(self.split_layers)
        return genes.ravel()

    def decode(self, genes: np.ndarray) -> MappingBatch:
        genes = np.asarray(genes, dtype=np.int64)
        pop, n_sp = genes.shape[0], len(self.split_layers)
        rows = genes.reshape(pop, self.splits, self.n_devices)
        cov = cover(rows, n_sp)  # [P, p, sp]
        cov[:, 0] = extend_first_row(cov[:, 0], rows[:, 0])
        counts = np.zeros((pop, n_sp, self.n_devices), dtype=np.int64)
        p_idx = np.arange(pop)[:, None]
        s_idx = np.arange(n_sp)[None, :]
        for r in range(self.splits):
            ok = cov[:, r] >= 0
            np.add.at(
                counts,
                (
                    np.broadcast_to(p_idx, ok.shape)[ok],
                    np.broadcast_to(s_idx, ok.shape)[ok],
                    cov[:, r][ok],
                ),
                1,
            )
        share = np.zeros((pop, len(self.graph), self.n_devices))
        share[:, self.split_layers] = self._shares(counts, self.split_layers)
        others = np.flatnonzero(~self.graph.splittable)
        first = cov[:, 0][:, self.anchor[others]]  # [P, len(others)]
        share[np.arange(pop)[:, None], others[None, :], first] = 1.0
        return self._batch(share)


class VerticalChromosome(Chromosome):
    """The vertical split-point encoding of the thesis's reference [18]: n split points over
    all layers; no layer is split. The baseline of the thesis's Figures 14, 21 and 27.
    ``splits`` is accepted (so sweeps over it run) and ignored: no layer is split."""

    name = "vertical"

    @property
    def n_genes(self) -> int:
        return self.n_devices

    @property
    def upper(self) -> np.ndarray:
        return np.full(self.n_genes, len(self.graph), dtype=np.int64)

    def single_device(self, device: int) -> np.ndarray:
        genes = np.zeros(self.n_devices, dtype=np.int64)
        genes[device] = len(self.graph)
        return genes

    def decode(self, genes: np.ndarray) -> MappingBatch:
        genes = np.asarray(genes, dtype=np.int64)
        pop, n_layers = genes.shape[0], len(self.graph)
        dev = extend_first_row(cover(genes, n_layers), genes)  # [P, L]
        share = np.zeros((pop, n_layers, self.n_devices))
        share[np.arange(pop)[:, None], np.arange(n_layers)[None, :], dev] = 1.0
        return self._batch(share)
