"""Making mappings: from the devices of each layer, at random by kind, and checking them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dse.errors import DseError
from dse.mapping import rules
from dse.mapping.mappings import Mappings
from dse.net.graph import LayerGraph

#: Kinds of random mappings (:func:`random_mappings`).
RANDOM_KINDS = ("single", "vertical", "split", "mixed")


def units(graph: LayerGraph) -> np.ndarray:
    """int64 [S]: what the splittable layers split into (output channels, at least 1)."""
    return np.maximum(graph.out_channels[graph.split_layers], 1).astype(np.int64)


def from_devices(graph: LayerGraph, on: np.ndarray) -> Mappings:
    """Mappings from a boolean ``on[P, L, D]`` (which devices compute each layer): a layer on
    several devices is cut into equal parts (:func:`dse.mapping.rules.equal_sizes`). A layer
    that is not splittable must have one device, every layer at least one, and no layer more
    parts than output channels."""
    on = np.asarray(on, dtype=bool)
    if on.ndim == 2:
        on = on[None]
    count = on.sum(axis=2)
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
    device = np.where(graph.splittable[None, :], -1, on.argmax(axis=2)).astype(np.int64)
    counts = np.ascontiguousarray(on[:, graph.split_layers, :], dtype=np.int32)
    sizes = np.empty_like(counts)
    rules.equal_sizes(counts, units(graph), sizes)
    return Mappings(device, sizes)


def from_device_lists(
    graph: LayerGraph, n_devices: int, devices: Sequence[Sequence[Sequence[int]]]
) -> Mappings:
    """Mappings from per-mapping, per-layer device lists (repeats are ignored)."""
    on = np.zeros((len(devices), len(graph), n_devices), dtype=bool)
    for p, layers in enumerate(devices):
        for layer, devs in enumerate(layers):
            on[p, layer, list(devs)] = True
    return from_devices(graph, on)


def whole(graph: LayerGraph, n_devices: int, device: np.ndarray) -> Mappings:
    """Mappings that run every layer whole: ``device[P, L]``, the device of each layer."""
    device = np.atleast_2d(np.asarray(device, dtype=np.int64))
    on = np.zeros((len(device), len(graph), n_devices), dtype=bool)
    np.put_along_axis(on, device[:, :, None], True, axis=2)
    return from_devices(graph, on)


def remap(m: Mappings, devices: Sequence[int], n_devices: int) -> Mappings:
    """The same mappings on another platform of ``n_devices`` devices, device i of ``m``
    becoming device ``devices[i]`` (parts keep their sizes, in the new devices' order)."""
    devices = np.asarray(devices, dtype=np.int64)
    device = np.where(m.device >= 0, devices[np.maximum(m.device, 0)], -1)
    sizes = np.zeros((len(m), m.sizes.shape[1], n_devices), dtype=m.sizes.dtype)
    sizes[:, :, devices] = m.sizes
    return Mappings(device, sizes)


def check(graph: LayerGraph, n_devices: int, m: Mappings) -> None:
    """One clear line where ``m`` is not a set of mappings of ``graph`` onto ``n_devices``
    devices: a device out of range, a splittable layer's sizes not adding up to its units."""
    split = graph.splittable
    if m.device.shape[1:] != (len(graph),) or m.sizes.shape[1:] != (
        len(graph.split_layers),
        n_devices,
    ):
        raise DseError(
            f"mappings of shape {m.device.shape}/{m.sizes.shape} do not fit network "
            f"'{graph.name}' ({len(graph)} layers) on {n_devices} devices"
        )
    bad = ((m.device < 0) | (m.device >= n_devices)) & ~split[None, :]
    bad |= (m.device != -1) & split[None, :]
    if bad.any():
        p, layer = np.argwhere(bad)[0]
        raise DseError(f"mapping {p}: layer '{graph.names[layer]}' has no valid device")
    total = m.sizes.sum(axis=2)
    wrong = ((m.sizes < 0).any(axis=2)) | (total != units(graph)[None, :])
    if wrong.any():
        p, s = np.argwhere(wrong)[0]
        layer = graph.split_layers[s]
        raise DseError(
            f"mapping {p}: the parts of layer '{graph.names[layer]}' cover {total[p, s]} of "
            f"its {units(graph)[s]} output channels"
        )


def _random_sizes(rng: np.random.Generator, channels: int, parts: int) -> np.ndarray:
    """Random sizes of ``parts`` non-empty parts of ``channels`` channels."""
    cuts = np.sort(rng.choice(np.arange(1, channels), size=parts - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [channels]]))


def random_mappings(
    graph: LayerGraph, n_devices: int, kind: str, count: int, rng: np.random.Generator
) -> Mappings:
    """``count`` random mappings of one of :data:`RANDOM_KINDS`: ``single`` (mapping p whole on
    device p mod D), ``vertical`` (cut into runs of layers on 2..D devices), ``split`` (every
    splittable layer over 2..D devices, random whole-channel sizes; the rest on the first of
    them) and ``mixed`` (each splittable layer split with probability 0.3, every other layer
    on a random one of the devices)."""
    if kind not in RANDOM_KINDS:
        raise ValueError(f"kind must be one of {RANDOM_KINDS}, not {kind!r}")
    n = len(graph)
    ch = graph.out_channels
    splittable = graph.splittable & (ch >= 2)
    s_of = {int(layer): s for s, layer in enumerate(graph.split_layers)}
    device = np.full((count, n), -1, dtype=np.int64)
    sizes = np.zeros((count, len(s_of), n_devices), dtype=np.int32)

    def put(p: int, layer: int, d: int) -> None:
        if layer in s_of:
            sizes[p, s_of[layer], d] = max(int(ch[layer]), 1)
        else:
            device[p, layer] = d

    for p in range(count):
        if kind == "single":
            for layer in range(n):
                put(p, layer, p % n_devices)
            continue
        k = int(rng.integers(2, n_devices + 1))
        devs = rng.permutation(n_devices)[:k]
        if kind == "vertical":
            cuts = np.sort(rng.choice(np.arange(1, n), size=min(k, n) - 1, replace=False))
            seg = np.searchsorted(cuts, np.arange(n), side="right")
            for layer in range(n):
                put(p, layer, int(devs[seg[layer]]))
            continue
        for layer in range(n):
            if splittable[layer] and (kind == "split" or rng.random() < 0.3):
                parts = min(k, int(ch[layer]))
                sizes[p, s_of[layer], devs[:parts]] = _random_sizes(rng, int(ch[layer]), parts)
            else:
                put(p, layer, int(devs[0] if kind == "split" else devs[rng.integers(k)]))
    return Mappings(device, sizes)
