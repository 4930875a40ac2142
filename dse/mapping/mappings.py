"""The canonical form of a batch of mappings: whole numbers, exact to compare and small to keep."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dse.mapping import rules
from dse.mapping.keys import hash_mappings
from dse.net.graph import LayerGraph


def layer_units(graph: LayerGraph) -> np.ndarray:
    """int64 [2, L]: what each layer splits into along each axis: its output channels and its
    output rows (at least 1 each)."""
    return np.ascontiguousarray(
        np.stack([np.maximum(graph.out_channels, 1), np.maximum(graph.out_rows, 1)]),
        dtype=np.int64,
    )


AXES = ("channels", "rows")  # a split layer's axis: 0 output channels (LOP), 1 output rows


@dataclass(frozen=True)
class Mappings:
    """P mappings of one graph onto D devices.

    * ``device[P, L]`` (int64): the device of each layer that is not splittable; -1 for the
      splittable layers (the graph's ``split_layers``, in order), whose work is in ``sizes``;
    * ``sizes[P, S, D]`` (int32): how many units of splittable layer s device d computes along
      its axis; a layer on one device has all of them there, a split layer a contiguous range
      per device, in device order;
    * ``axis[P, S]`` (int8): what splittable layer s is split along: 0 its output channels
      (Layer-Output-Partitioning), 1 its output rows (bands; :attr:`LayerGraph.row_splittable`
      layers only). Always 0 for a layer on one device, so equal mappings have equal numbers.
      Omitted: every layer by channels.

    Every other form is derived: shares and owners (:meth:`dense`, :mod:`dse.mapping.rules`),
    the AutoDiCE files (:mod:`dse.mapping.autodice`), the runtime's plan
    (:mod:`dse.runtime.compile.partition`).
    """

    device: np.ndarray
    sizes: np.ndarray
    axis: np.ndarray = None  # type: ignore[assignment]  # None: zeros (set in __post_init__)

    def __post_init__(self) -> None:
        if self.axis is None:
            zeros = np.zeros(self.sizes.shape[:2], dtype=np.int8)
            object.__setattr__(self, "axis", zeros)

    def __len__(self) -> int:
        return len(self.device)

    def take(self, idx: int | slice | np.ndarray | Sequence[int]) -> Mappings:
        """The mappings at ``idx`` (an int gives a batch of one)."""
        if isinstance(idx, int | np.integer):
            idx = [int(idx)]
        return Mappings(self.device[idx], self.sizes[idx], self.axis[idx])

    @staticmethod
    def concat(batches: Sequence[Mappings]) -> Mappings:
        return Mappings(
            np.concatenate([b.device for b in batches]),
            np.concatenate([b.sizes for b in batches]),
            np.concatenate([b.axis for b in batches]),
        )

    def keys(self) -> np.ndarray:
        """uint64 [P]: each mapping's key (:mod:`dse.mapping.keys`)."""
        out = np.empty(len(self), dtype=np.uint64)
        hash_mappings(
            np.ascontiguousarray(self.device),
            np.ascontiguousarray(self.sizes),
            np.ascontiguousarray(self.axis, dtype=np.int8),
            out,
        )
        return out

    def ident(self, index: int = 0) -> str:
        """Mapping ``index``'s key as 16 hex digits: how a deployment names its mapping."""
        return f"{int(self.take(index).keys()[0]):016x}"

    def dense(self, graph: LayerGraph) -> tuple[np.ndarray, np.ndarray]:
        """``share[P, L, D]`` (the fraction of each layer's output channels, or rows, on each
        device) and ``owner[P, L]`` (the device holding each layer's whole output)."""
        share = np.zeros((len(self), len(graph), self.sizes.shape[2]))
        owner = np.empty((len(self), len(graph)), dtype=np.int64)
        rules.dense(
            np.ascontiguousarray(self.device, dtype=np.int64),
            np.ascontiguousarray(self.sizes),
            np.ascontiguousarray(self.axis, dtype=np.int8),
            layer_units(graph),
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

    def split_axis(self, graph: LayerGraph, layer: int, index: int = 0) -> int:
        """Mapping ``index``: what ``layer`` is split along (0 channels, 1 rows; 0 when it is
        not splittable)."""
        s = int(np.searchsorted(graph.split_layers, layer))
        if s >= len(graph.split_layers) or graph.split_layers[s] != layer:
            return 0
        return int(self.axis[index, s])

    def bounds(self, graph: LayerGraph, layer: int, index: int = 0) -> list[tuple[int, int]]:
        """Mapping ``index``: the [start, stop) output channels (or rows: :meth:`split_axis`)
        of each part of splittable ``layer``, in device order (one range when it is on one
        device)."""
        s = int(np.searchsorted(graph.split_layers, layer))
        if s >= len(graph.split_layers) or graph.split_layers[s] != layer:
            return [(0, int(graph.out_channels[layer]))]
        sizes = self.sizes[index, s]
        ends = np.cumsum(sizes[sizes > 0])
        starts = np.concatenate([[0], ends[:-1]])
        return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]
