"""Making mappings: from the devices of each layer, at random by kind, and checking them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dse.errors import DseError
from dse.mapping import rules
from dse.mapping.mappings import AXES, Mappings, layer_units
from dse.net.graph import LayerGraph

#: Kinds of random mappings (:func:`random_mappings`) by channels (and vertical).
RANDOM_KINDS = ("single", "vertical", "split", "mixed")
#: Kinds that split by rows too: every row-splittable layer by rows, and each splittable layer
#: split with probability 0.3 along either axis (a three-kind mapping: vertical, channels, rows).
ROW_KINDS = ("spatial", "three")


def units(graph: LayerGraph) -> np.ndarray:
    """int64 [2, S]: what the splittable layers split into along each axis: output channels
    (row 0) and output rows (row 1), at least 1 each."""
    return np.ascontiguousarray(layer_units(graph)[:, graph.split_layers])


def canonical_axis(axis: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``axis[P, S]`` with 0 wherever the layer has fewer than two parts (``counts[P, S, D]``
    or sizes): one form per mapping."""
    axis = np.asarray(axis, dtype=np.int8).copy()
    axis[np.count_nonzero(counts, axis=2) < 2] = 0
    return axis


def from_devices(graph: LayerGraph, on: np.ndarray, axis: np.ndarray | None = None) -> Mappings:
    """Mappings from a boolean ``on[P, L, D]`` (which devices compute each layer): a layer on
    several devices is cut into equal parts (:func:`dse.mapping.rules.equal_sizes`) along
    ``axis[P, S]`` (default: channels). A layer that is not splittable must have one device,
    every layer at least one, and no layer more parts than units along its axis."""
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
        raise DseError(unsplittable(graph, int(layer)))
    counts = np.ascontiguousarray(on[:, graph.split_layers, :], dtype=np.int32)
    if axis is None:
        axis = np.zeros(counts.shape[:2], dtype=np.int8)
    axis = canonical_axis(np.broadcast_to(axis, counts.shape[:2]), counts)
    _check_axis(graph, axis)
    table = units(graph)
    have = np.take_along_axis(table.T[None], axis[..., None].astype(np.int64), axis=2)[..., 0]
    over = count[:, graph.split_layers] > have
    if over.any():
        p, s = np.argwhere(over)[0]
        layer = graph.split_layers[s]
        raise DseError(
            f"layer '{graph.names[layer]}' has {have[p, s]} output {AXES[axis[p, s]]}: it "
            f"cannot be split into {count[p, layer]} parts"
        )
    device = np.where(graph.splittable[None, :], -1, on.argmax(axis=2)).astype(np.int64)
    sizes = np.empty_like(counts)
    rules.equal_sizes(counts, table, axis, sizes)
    return Mappings(device, sizes, axis)


def unsplittable(graph: LayerGraph, layer: int) -> str:
    """The line for ``layer``, not splittable, given several devices: a layer that follows a
    splittable one (a pooling or an activation after a Conv) runs on that layer's parts or
    bands already, and is told so."""
    root = layer
    while graph.follows[root] >= 0:
        root = int(graph.follows[root])
    what = f"layer '{graph.names[layer]}' ({graph.ops[layer]}) cannot be split across devices"
    if root == layer:
        return f"{what}: only Conv/Gemm/MatMul layers with constant weights can"
    return (
        f"{what}: it runs on the parts (or bands) of '{graph.names[root]}' "
        f"({graph.ops[root]}) wherever that layer is split; map it to one device, with no "
        "horizontal.json entry"
    )


def _check_axis(graph: LayerGraph, axis: np.ndarray) -> None:
    """One line where a layer that cannot split by rows is split by rows."""
    bad = (axis != 0) & ~graph.row_splittable[graph.split_layers][None, :]
    bad |= (axis < 0) | (axis > 1)
    if bad.any():
        p, s = np.argwhere(bad)[0]
        layer = graph.split_layers[s]
        raise DseError(
            f"layer '{graph.names[layer]}' ({graph.ops[layer]}) cannot be split by rows: "
            "only convolutions over NCHW images can; split it by channels"
        )


def from_device_lists(
    graph: LayerGraph,
    n_devices: int,
    devices: Sequence[Sequence[Sequence[int]]],
    rows: Sequence[int] = (),
) -> Mappings:
    """Mappings from per-mapping, per-layer device lists (repeats are ignored); the layers in
    ``rows`` are split by rows where they are split."""
    on = np.zeros((len(devices), len(graph), n_devices), dtype=bool)
    for p, layers in enumerate(devices):
        for layer, devs in enumerate(layers):
            on[p, layer, list(devs)] = True
    axis = np.zeros((len(devices), len(graph.split_layers)), dtype=np.int8)
    s_of = {int(layer): s for s, layer in enumerate(graph.split_layers)}
    for layer in rows:
        if int(layer) not in s_of:
            raise DseError(f"layer '{graph.names[layer]}' is not splittable")
        axis[:, s_of[int(layer)]] = 1
    return from_devices(graph, on, axis)


def whole(graph: LayerGraph, n_devices: int, device: np.ndarray) -> Mappings:
    """Mappings that run every layer whole: ``device[P, L]``, the device of each layer."""
    device = np.atleast_2d(np.asarray(device, dtype=np.int64))
    on = np.zeros((len(device), len(graph), n_devices), dtype=bool)
    np.put_along_axis(on, device[:, :, None], True, axis=2)
    return from_devices(graph, on)


def remap(m: Mappings, devices: Sequence[int], n_devices: int) -> Mappings:
    """The same mappings on another platform of ``n_devices`` devices, device i of ``m``
    becoming device ``devices[i]`` (parts keep their sizes, in the new devices' order)."""
    new = np.asarray(devices, dtype=np.int64)
    device = np.where(m.device >= 0, new[np.maximum(m.device, 0)], -1)
    sizes = np.zeros((len(m), m.sizes.shape[1], n_devices), dtype=m.sizes.dtype)
    sizes[:, :, new] = m.sizes
    return Mappings(device, sizes, m.axis.copy())


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
    if m.axis.shape != m.sizes.shape[:2]:
        raise DseError(f"mappings of axis shape {m.axis.shape} do not fit their sizes")
    _check_axis(graph, m.axis)
    if (m.axis != canonical_axis(m.axis, m.sizes)).any():
        p, s = np.argwhere(m.axis != canonical_axis(m.axis, m.sizes))[0]
        raise DseError(
            f"mapping {p}: layer '{graph.names[graph.split_layers[s]]}' has one part but an "
            "axis of rows (one part has axis 0)"
        )
    table = units(graph)
    want = np.where(m.axis == 1, table[1][None, :], table[0][None, :])
    total = m.sizes.sum(axis=2)
    wrong = ((m.sizes < 0).any(axis=2)) | (total != want)
    if wrong.any():
        p, s = np.argwhere(wrong)[0]
        layer = graph.split_layers[s]
        raise DseError(
            f"mapping {p}: the parts of layer '{graph.names[layer]}' cover {total[p, s]} of "
            f"its {want[p, s]} output {AXES[m.axis[p, s]]}"
        )


def _random_sizes(rng: np.random.Generator, channels: int, parts: int) -> np.ndarray:
    """Random sizes of ``parts`` non-empty parts of ``channels`` channels."""
    cuts = np.sort(rng.choice(np.arange(1, channels), size=parts - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [channels]]))


def random_mappings(
    graph: LayerGraph, n_devices: int, kind: str, count: int, rng: np.random.Generator
) -> Mappings:
    """``count`` random mappings of one of :data:`RANDOM_KINDS` or :data:`ROW_KINDS`:
    ``single`` (mapping p whole on device p mod D), ``vertical`` (cut into runs of layers on
    2..D devices), ``split`` (every splittable layer over 2..D devices, random whole-channel
    sizes; the rest on the first of them), ``mixed`` (each splittable layer split with
    probability 0.3, every other layer on a random one of the devices), ``spatial`` (as
    ``split``, the layers that can split by rows by rows) and ``three`` (as ``mixed``, a split
    layer that can split by rows by rows half of the time)."""
    if kind not in RANDOM_KINDS + ROW_KINDS:
        raise ValueError(f"kind must be one of {RANDOM_KINDS + ROW_KINDS}, not {kind!r}")
    n = len(graph)
    ch = graph.out_channels
    rows = graph.out_rows
    splittable = graph.splittable & (ch >= 2)
    by_rows = graph.row_splittable & (rows >= 2)
    s_of = {int(layer): s for s, layer in enumerate(graph.split_layers)}
    device = np.full((count, n), -1, dtype=np.int64)
    sizes = np.zeros((count, len(s_of), n_devices), dtype=np.int32)
    axis = np.zeros((count, len(s_of)), dtype=np.int8)

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
        whole_kind = kind in ("split", "spatial")
        for layer in range(n):
            if splittable[layer] and (whole_kind or rng.random() < 0.3):
                row = bool(by_rows[layer]) and (
                    kind == "spatial" or (kind == "three" and rng.random() < 0.5)
                )
                units_ = int(rows[layer] if row else ch[layer])
                parts = min(k, units_)
                sizes[p, s_of[layer], devs[:parts]] = _random_sizes(rng, units_, parts)
                axis[p, s_of[layer]] = 1 if row else 0
            else:
                put(p, layer, int(devs[0] if whole_kind else devs[rng.integers(k)]))
    return Mappings(device, sizes, canonical_axis(axis, sizes))
