"""Hybrid mappings: which devices compute which share of every layer, independent of encoding.

A batch of P mappings over a graph of L layers and a platform of D devices is two arrays:

* ``share[P, L, D]``: the fraction of layer l's output channels that device d computes. A
  layer that is not split has a single 1. A split layer (Layer-Output-Partitioning) gives each
  participating device a contiguous channel range; :func:`shares_from_counts` spreads the remainder
  over the first parts, so 10 channels over 3 devices are 4, 3, 3.
* ``owner[P, L]``: the device that holds the layer's complete output: the device that runs it
  whole, or where its parts are concatenated. Following the thesis (section 4.2), the parts are
  concatenated on the device that runs the next layer; for a layer without successors, on the
  device of the previous layer. :func:`derive_owner` applies that rule.

Parts are ordered by device index, so a mapping round-trips through the AutoDiCE
specification: ``mapping.json`` ({"<host>_<resource>": [node names]}) and ``horizontal.json``
({layer: ["lop", split points, [resource keys]]}, where the split points are the channel
boundaries between consecutive parts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.net.graph import LayerGraph


@dataclass(frozen=True)
class MappingBatch:
    """P mappings of one graph onto one platform."""

    share: np.ndarray  # float64 [P, L, D]
    owner: np.ndarray  # int64 [P, L]

    @property
    def size(self) -> int:
        return int(self.share.shape[0])

    def __getitem__(self, idx: int | slice | np.ndarray) -> MappingBatch:
        share, owner = self.share[idx], self.owner[idx]
        if share.ndim == 2:
            share, owner = share[None], owner[None]
        return MappingBatch(share, owner)


def first_consumer(graph: LayerGraph) -> np.ndarray:
    """For every layer, the first layer (in topological order) that reads its output, or -1."""
    first = np.full(len(graph), -1, dtype=np.int64)
    for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True):
        if s >= 0 and (first[s] < 0 or d < first[s]):
            first[s] = d
    return first


def first_producer(graph: LayerGraph) -> np.ndarray:
    """For every layer, the producer of its first activation input, or -1 (graph input)."""
    prod = np.full(len(graph), -1, dtype=np.int64)
    seen = np.zeros(len(graph), dtype=bool)
    for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True):
        if not seen[d]:
            prod[d], seen[d] = s, True
    return prod


def derive_owner(graph: LayerGraph, share: np.ndarray) -> np.ndarray:
    """The owner (concat device) of every layer of every mapping in ``share[P, L, D]``."""
    anchor = np.argmax(share > 0, axis=2)  # the device of the first (or only) part
    owner = anchor.copy()
    split = (share > 0).sum(axis=2) > 1  # [P, L]
    if not split.any():
        return owner
    consumer, producer = first_consumer(graph), first_producer(graph)
    for layer in np.flatnonzero(split.any(axis=0)):
        rows = split[:, layer]
        if consumer[layer] >= 0:
            owner[rows, layer] = anchor[rows, consumer[layer]]
        elif producer[layer] >= 0:
            owner[rows, layer] = owner[rows, producer[layer]]
    return owner


def shares_from_counts(counts: np.ndarray, channels: np.ndarray) -> np.ndarray:
    """Channel fractions when a layer is cut into sum(counts) near-equal contiguous parts.

    ``counts[..., l, d]`` is how many parts of layer l device d computes; parts are ordered by
    device and the first ``channels % parts`` parts get one channel more, so 10 channels over
    three devices are 4, 3, 3. A layer never gets more parts than it has channels: with 2
    channels over 3 devices the third gets none (it does not take part).
    """
    parts = counts.sum(axis=-1, keepdims=True)
    safe = np.maximum(parts, 1)
    ch = channels.reshape((1,) * (counts.ndim - 2) + (-1, 1)).astype(np.int64)
    ch = np.maximum(ch, 1)  # fewer channels than parts: one channel each for the first parts
    base, extra = ch // safe, ch % safe
    before = np.cumsum(counts, axis=-1) - counts
    bonus = np.clip(extra - before, 0, counts)
    return (counts * base + bonus) / ch


def shares_by_speed(counts: np.ndarray, channels: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """Channel fractions sized to the devices: device d gets about
    ``counts[d] x speed[l, d] / sum(counts x speed[l])`` of layer l's channels.

    ``speed[L, D]`` is any relative throughput (e.g. 1 / modelled time of the layer on the
    device). Parts are whole channels (largest remainder, ties to the lower device); a part too
    small for one channel gets none, and its device does not take part.
    """
    w = counts * speed.reshape((1,) * (counts.ndim - 2) + speed.shape)
    total = w.sum(axis=-1, keepdims=True)
    ch = np.maximum(channels.reshape((1,) * (counts.ndim - 2) + (-1, 1)), 1).astype(np.float64)
    ideal = ch * w / np.where(total > 0, total, 1.0)
    base = np.floor(ideal + 1e-9)
    rem = (ch[..., 0] - base.sum(axis=-1)).astype(np.int64)  # channels left to hand out
    frac = np.where(counts > 0, ideal - base, -1.0)
    order = np.argsort(-frac, axis=-1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(order.shape[-1]), axis=-1)
    base += rank < rem[..., None]
    return base / ch


def from_parts(graph: LayerGraph, parts: np.ndarray) -> MappingBatch:
    """A batch from a boolean ``parts[P, L, D]`` (which devices compute each layer).

    Split layers get near-equal contiguous channel ranges in device order; a layer that is not
    splittable must have exactly one device, and every layer at least one.
    """
    parts = np.asarray(parts, dtype=bool)
    if parts.ndim == 2:
        parts = parts[None]
    count = parts.sum(axis=2)
    if (count == 0).any():
        p, layer = np.argwhere(count == 0)[0]
        raise DseError(f"layer '{graph.names[layer]}' is mapped to no device (mapping {p})")
    bad = (count > 1) & ~graph.splittable[None, :]
    if bad.any():
        p, layer = np.argwhere(bad)[0]
        raise DseError(
            f"layer '{graph.names[layer]}' ({graph.ops[layer]}) cannot be split "
            f"across devices: only Conv/Gemm/MatMul layers with constant weights can"
        )
    over = count > np.maximum(graph.out_channels, 1)[None, :]
    if over.any():
        p, layer = np.argwhere(over)[0]
        raise DseError(
            f"layer '{graph.names[layer]}' has {graph.out_channels[layer]} output channels: it "
            f"cannot be split into {count[p, layer]} parts"
        )
    share = shares_from_counts(parts.astype(np.int64), graph.out_channels)
    return MappingBatch(share, derive_owner(graph, share))


def from_device_lists(
    graph: LayerGraph, n_devices: int, devices: Sequence[Sequence[Sequence[int]]]
) -> MappingBatch:
    """A batch from per-mapping, per-layer device lists (repeats are ignored)."""
    parts = np.zeros((len(devices), len(graph), n_devices), dtype=bool)
    for p, layers in enumerate(devices):
        for layer, devs in enumerate(layers):
            parts[p, layer, list(devs)] = True
    return from_parts(graph, parts)


# --- AutoDiCE specification -----------------------------------------------------------------


def to_autodice(
    graph: LayerGraph, keys: Sequence[str], batch: MappingBatch, index: int = 0
) -> tuple[dict[str, list[str]], dict[str, list]]:
    """``mapping.json`` and ``horizontal.json`` contents of mapping ``index``."""
    share = batch.share[index]
    mapping: dict[str, list[str]] = {}
    horizontal: dict[str, list] = {}
    for layer, name in enumerate(graph.names):
        devs = np.flatnonzero(share[layer] > 0)
        for d in devs:
            mapping.setdefault(keys[d], []).append(name)
        if len(devs) > 1:
            channels = int(graph.out_channels[layer])
            ends = np.rint(np.cumsum(share[layer, devs]) * channels).astype(int)
            horizontal[name] = ["lop", ends[:-1].tolist(), [keys[d] for d in devs]]
    return mapping, horizontal


def from_autodice(
    graph: LayerGraph,
    keys: Sequence[str],
    mapping: Any,
    horizontal: Any = None,
) -> MappingBatch:
    """Read an AutoDiCE mapping, failing loudly in one line on wrong types (a string or a
    number where a list belongs), unknown devices and nodes, unmapped nodes, splits of layers
    that cannot be split, and split points that are not increasing whole channel indices."""
    mapping = _object(mapping, "mapping.json", '{"<host>_<resource>": [node names]}')
    key_index = {k: i for i, k in enumerate(keys)}
    parts = np.zeros((1, len(graph), len(keys)), dtype=bool)
    for key, nodes in mapping.items():
        if key not in key_index:
            raise DseError(
                f"mapping names unknown device '{key}': the platform has {', '.join(keys)}"
            )
        for node in _names(nodes, f"mapping.json entry '{key}'", "node names"):
            if node not in graph.index:
                raise DseError(
                    f"mapping names unknown node '{node}' (device '{key}'): "
                    f"see python -m dse.inspect for the layer names"
                )
            parts[0, graph.index[node], key_index[key]] = True
    missing = np.flatnonzero(~parts[0].any(axis=1))
    if len(missing):
        raise DseError(
            f"node '{graph.names[missing[0]]}' is mapped to no device "
            f"({len(missing)} unmapped): every layer needs a device in mapping.json"
        )
    batch = from_parts(graph, parts)
    if horizontal is None:
        return batch
    horizontal = _object(horizontal, "horizontal.json", '{layer: ["lop", [points], [devices]]}')
    for name, spec in horizontal.items():
        if name not in graph.index:
            raise DseError(f"horizontal.json names unknown node '{name}'")
        layer = graph.index[name]
        form = f"horizontal.json entry '{name}' must be [\"lop\", [split points], [devices]]"
        if not isinstance(spec, list) or len(spec) != 3 or spec[0] != "lop":
            raise DseError(f"{form}, not {_short(spec)}")
        if not isinstance(spec[1], list) or not isinstance(spec[2], list):
            raise DseError(f"{form}: the split points and the devices are lists")
        points = spec[1]
        if not all(isinstance(p, int) and not isinstance(p, bool) for p in points):
            raise DseError(
                f"horizontal.json entry '{name}': split points {_short(points)} must be whole "
                "channel indices"
            )
        devs = _names(spec[2], f"horizontal.json entry '{name}'", "devices")
        unknown = [d for d in devs if d not in key_index]
        if unknown:
            raise DseError(f"horizontal.json entry '{name}' names unknown device '{unknown[0]}'")
        if len(set(devs)) != len(devs):
            raise DseError(f"horizontal.json entry '{name}' lists a device twice: {devs}")
        on = {keys[d] for d in np.flatnonzero(parts[0, layer])}
        if set(devs) != on or len(devs) != len(points) + 1:
            raise DseError(
                f"horizontal.json entry '{name}' must list the {len(on)} devices "
                f"mapping.json gives it and {len(on) - 1} split points"
            )
        channels = int(graph.out_channels[layer])
        bounds = np.array([0, *points, channels], dtype=np.float64)
        if (np.diff(bounds) <= 0).any():
            raise DseError(
                f"horizontal.json entry '{name}': split points {points} must be "
                f"increasing inside (0, {channels})"
            )
        batch.share[0, layer] = 0
        batch.share[0, layer, [key_index[d] for d in devs]] = np.diff(bounds) / channels
    return MappingBatch(batch.share, derive_owner(graph, batch.share))


def _object(value: Any, what: str, form: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DseError(f"{what} must be an object {form}, not {_short(value)}")
    return value


def _names(value: Any, where: str, what: str) -> list[str]:
    """A list of strings (a bare string is refused, not read letter by letter)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DseError(f"{where} must be a list of {what} in quotes, not {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
