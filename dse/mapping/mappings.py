"""The canonical form of a batch of mappings: whole numbers, exact to compare and small to keep."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dse.mapping import rules
from dse.mapping.keys import hash_mappings
from dse.net.graph import LayerGraph


@dataclass(frozen=True)
class Mappings:
    """P mappings of one graph onto D devices.

    * ``device[P, L]`` (int64): the device of each layer that is not splittable; -1 for the
      splittable layers (the graph's ``split_layers``, in order), whose work is in ``sizes``;
    * ``sizes[P, S, D]`` (int32): how many output channels of splittable layer s device d
      computes; a layer on one device has all of them there, a split layer (Layer-Output-
      Partitioning) a contiguous range per device, in device order.

    Every other form is derived: shares and owners (:meth:`dense`, :mod:`dse.mapping.rules`),
    the AutoDiCE files (:mod:`dse.mapping.autodice`), the runtime's plan
    (:mod:`dse.runtime.partition`).
    """

    device: np.ndarray
    sizes: np.ndarray

    def __len__(self) -> int:
        return len(self.device)

    def take(self, idx: int | slice | np.ndarray | Sequence[int]) -> Mappings:
        """The mappings at ``idx`` (an int gives a batch of one)."""
        if isinstance(idx, int | np.integer):
            idx = [int(idx)]
        return Mappings(self.device[idx], self.sizes[idx])

    @staticmethod
    def concat(batches: Sequence[Mappings]) -> Mappings:
        return Mappings(
            np.concatenate([b.device for b in batches]), np.concatenate([b.sizes for b in batches])
        )

    def keys(self) -> np.ndarray:
        """uint64 [P]: each mapping's key (:mod:`dse.mapping.keys`)."""
        out = np.empty(len(self), dtype=np.uint64)
        hash_mappings(np.ascontiguousarray(self.device), np.ascontiguousarray(self.sizes), out)
        return out

    def ident(self, index: int = 0) -> str:
        """Mapping ``index``'s key as 16 hex digits: how a deployment names its mapping."""
        return f"{int(self.take(index).keys()[0]):016x}"

    def dense(self, graph: LayerGraph) -> tuple[np.ndarray, np.ndarray]:
        """``share[P, L, D]`` (the fraction of each layer's output channels on each device)
        and ``owner[P, L]`` (the device holding each layer's whole output)."""
        share = np.zeros((len(self), len(graph), self.sizes.shape[2]))
        owner = np.empty((len(self), len(graph)), dtype=np.int64)
        rules.dense(
            np.ascontiguousarray(self.device, dtype=np.int64),
            np.ascontiguousarray(self.sizes),
            np.asarray(graph.out_channels, dtype=np.int64),
            graph.first_consumer,
            graph.first_producer,
            share,
            owner,
        )
        return share, owner

    def devices(self, graph: LayerGraph, index: int = 0) -> list[list[int]]:
        """Mapping ``index``: for each layer, the devices computing it, in index order."""
        s_of = {int(layer): s for s, layer in enumerate(graph.split_layers)}
        out = []
        for layer in range(len(graph)):
            s = s_of.get(layer)
            if s is None:
                out.append([int(self.device[index, layer])])
            else:
                out.append(np.flatnonzero(self.sizes[index, s] > 0).tolist())
        return out

    def bounds(self, graph: LayerGraph, layer: int, index: int = 0) -> list[tuple[int, int]]:
        """Mapping ``index``: the [start, stop) output channels of each part of splittable
        ``layer``, in device order (one range when it is on one device)."""
        s = int(np.searchsorted(graph.split_layers, layer))
        if s >= len(graph.split_layers) or graph.split_layers[s] != layer:
            return [(0, int(graph.out_channels[layer]))]
        sizes = self.sizes[index, s]
        ends = np.cumsum(sizes[sizes > 0])
        starts = np.concatenate([[0], ends[:-1]])
        return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]
