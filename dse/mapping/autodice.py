"""Mappings as AutoDiCE's files: ``mapping.json`` and ``horizontal.json``.

* ``mapping.json``: ``{"<host>_<resource>": [node names]}``; a node on several devices is split.
* ``horizontal.json``: ``{node: ["lop", [split points], [resources]]}`` for each node split by
  output channels (AutoDiCE's Layer-Output-Partitioning), the split points being the
  output-channel boundaries between consecutive parts, the resources listed in part order;
  and ``{node: ["spatial", [split points], [resources]]}`` for a node split by output rows
  (dse's own kind: the split points are output-row boundaries between consecutive bands). A
  mapping without row splits writes only ``"lop"`` entries: files AutoDiCE can read. Every
  split node has its entry: a mapping is read from both files together, never with its parts
  guessed.

Parts are ordered by device index, so a mapping round-trips through the files.

A search writes them in ``RUN/best_<objective>/``, beside the run's ``RUN/summary.json``:
:func:`read_autodice` reads the files and, where a device or a node is unknown, names the
platform or network that summary says the mapping was found for, and the option to pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.files import read_json
from dse.mapping.build import from_devices
from dse.mapping.mappings import Mappings
from dse.net.graph import LayerGraph
from dse.net.zoo import NETS

#: horizontal.json's kind of each split axis.
KINDS = ("lop", "spatial")
#: The end of every refusal of a mapping.json and a horizontal.json that disagree.
NOT_ONE_MAPPING = (
    "the files are not of one mapping; pass the mapping.json and horizontal.json a search "
    "wrote together"
)


def to_autodice(
    graph: LayerGraph, keys: Sequence[str], m: Mappings, index: int = 0
) -> tuple[dict[str, list[str]], dict[str, list]]:
    """``mapping.json`` and ``horizontal.json`` contents of mapping ``index``."""
    mapping: dict[str, list[str]] = {}
    horizontal: dict[str, list] = {}
    for layer, devs in enumerate(m.devices(graph, index)):
        name = graph.names[layer]
        for d in devs:
            mapping.setdefault(keys[d], []).append(name)
        if len(devs) > 1:
            ends = [b for _, b in m.bounds(graph, layer, index)]
            kind = KINDS[m.split_axis(graph, layer, index)]
            horizontal[name] = [kind, ends[:-1], [keys[d] for d in devs]]
    return mapping, horizontal


@dataclass(frozen=True)
class Origin:
    """What a mapping was found for: the network and platform of the run (``summary``: its
    ``summary.json``) that wrote it."""

    net: str
    platform: str
    summary: Path


def origin_of(mapping_path: str | Path) -> Origin | None:
    """The :class:`Origin` of the mapping file at ``mapping_path``: the ``summary.json`` of its
    folder or of the folder above (a run's, beside its ``best_<objective>/``); None without a
    readable one."""
    folder = Path(str(mapping_path)).expanduser().absolute().parent
    for summary in (folder / "summary.json", folder.parent / "summary.json"):
        if not summary.is_file():
            continue
        try:
            doc = read_json(str(summary), "summary")
        except DseError:
            return None
        if not isinstance(doc, dict):
            return None
        net, platform = doc.get("net"), doc.get("platform")
        if isinstance(net, str) and isinstance(platform, str):
            return Origin(net, platform, summary)
        return None
    return None


def read_autodice(
    graph: LayerGraph,
    keys: Sequence[str],
    platform: str,
    mapping_path: str,
    horizontal_path: str | None = None,
) -> Mappings:
    """The mapping in the files ``mapping_path`` (and ``horizontal_path``) as a mapping of
    ``graph`` on the devices ``keys`` of ``platform`` (:func:`from_autodice`); an unknown device
    or node names the platform or network it was found for (:func:`origin_of`) and the
    option that deploys it there."""
    mapping = read_json(mapping_path, "mapping")
    horizontal = read_json(horizontal_path, "horizontal") if horizontal_path else None
    try:
        return from_autodice(graph, keys, mapping, horizontal)
    except DseError as exc:
        origin = origin_of(mapping_path) if isinstance(mapping, Mapping) else None
        line = elsewhere(exc, origin, graph.name, platform)
        if line is None:
            raise
        raise DseError(line) from None


def elsewhere(exc: DseError, origin: Origin | None, net: str, platform: str) -> str | None:
    """``exc``'s line about an unknown device or node with what the mapping was found for and
    the fix, where ``origin`` is another platform or network than ``platform``, ``net``."""
    text = str(exc)
    if origin is None:
        return None
    if text.startswith("mapping names unknown device") and origin.platform != platform:
        head = text.split(": the platform has")[0]
        return (
            f"{head}: the mapping was found on platform {origin.platform} "
            f"({origin.summary}), not {platform}: pass platform={origin.platform}"
        )
    node = ("mapping names unknown node", "horizontal.json names unknown node")
    if text.startswith(node) and origin.net != net:
        fix = f"+net={origin.net}" if origin.net in NETS else "that network's net.path="
        return (
            f"{text.split(': see python')[0]}: the mapping was found for network {origin.net} "
            f"({origin.summary}), not {net}: pass {fix}"
        )
    return None


def from_autodice(
    graph: LayerGraph, keys: Sequence[str], mapping: Any, horizontal: Any = None
) -> Mappings:
    """Read an AutoDiCE mapping, failing loudly in one line on wrong types (a string or a
    number where a list belongs), unknown devices and nodes, unmapped nodes, splits of layers
    that cannot be split (by rows: only convolutions), and split points that are not
    increasing whole channel (or row) indices. The two files must be of one mapping: every
    node ``mapping`` lists on several devices needs its ``horizontal`` entry (its parts are
    never guessed), and an entry must split its node over the devices ``mapping`` gives it."""
    mapping = _object(mapping, "mapping.json", '{"<host>_<resource>": [node names]}')
    key_index = {k: i for i, k in enumerate(keys)}
    on = np.zeros((1, len(graph), len(keys)), dtype=bool)
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
            on[0, graph.index[node], key_index[key]] = True
    missing = np.flatnonzero(~on[0].any(axis=1))
    if len(missing):
        raise DseError(
            f"node '{graph.names[missing[0]]}' is mapped to no device "
            f"({len(missing)} unmapped): every layer needs a device in mapping.json"
        )
    m = from_devices(graph, on)
    split = np.flatnonzero(on[0].sum(axis=1) > 1)
    if horizontal is None:
        if len(split):
            raise DseError(
                f"mapping.json splits node '{graph.names[split[0]]}' over "
                f"{int(on[0, split[0]].sum())} devices ({_count(len(split), 'split node')}), "
                "but no horizontal.json was given: pass the horizontal.json written beside it "
                "(horizontal=; a search writes both files)"
            )
        return m
    horizontal = _object(horizontal, "horizontal.json", '{layer: ["lop", [points], [devices]]}')
    sizes = m.sizes.copy()
    axis = m.axis.copy()
    s_of = {int(layer): s for s, layer in enumerate(graph.split_layers)}
    for name, spec in horizontal.items():
        if name not in graph.index:
            raise DseError(f"horizontal.json names unknown node '{name}'")
        layer = graph.index[name]
        form = (
            f'horizontal.json entry \'{name}\' must be ["lop" or "spatial", '
            "[split points], [devices]]"
        )
        if not isinstance(spec, list) or len(spec) != 3 or spec[0] not in KINDS:
            raise DseError(f"{form}, not {_short(spec)}")
        by_rows = spec[0] == "spatial"
        what = "row" if by_rows else "channel"
        if by_rows and graph.splittable[layer] and not graph.row_splittable[layer]:
            raise DseError(
                f"horizontal.json entry '{name}' ({graph.ops[layer]}) is \"spatial\", but this "
                "layer cannot be split by rows: only convolutions over NCHW images can; use "
                '"lop"'
            )
        if not isinstance(spec[1], list) or not isinstance(spec[2], list):
            raise DseError(f"{form}: the split points and the devices are lists")
        points = spec[1]
        if not all(isinstance(p, int) and not isinstance(p, bool) for p in points):
            raise DseError(
                f"horizontal.json entry '{name}': split points {_short(points)} must be whole "
                f"{what} indices"
            )
        devs = _names(spec[2], f"horizontal.json entry '{name}'", "devices")
        unknown = [d for d in devs if d not in key_index]
        if unknown:
            raise DseError(f"horizontal.json entry '{name}' names unknown device '{unknown[0]}'")
        if len(set(devs)) != len(devs):
            raise DseError(f"horizontal.json entry '{name}' lists a device twice: {devs}")
        placed = [keys[int(d)] for d in np.flatnonzero(on[0, layer])]
        if set(devs) != set(placed):
            raise DseError(
                f"horizontal.json entry '{name}' splits it over {', '.join(devs)}, but "
                f"mapping.json places it on {', '.join(placed)}: {NOT_ONE_MAPPING}"
            )
        if len(devs) != len(points) + 1:
            raise DseError(
                f"horizontal.json entry '{name}' has {_count(len(points), 'split point')} for "
                f"its {len(devs)} devices: {len(devs)} parts need "
                f"{_count(len(devs) - 1, 'split point')}"
            )
        units = int(graph.out_rows[layer] if by_rows else graph.out_channels[layer])
        bounds = np.array([0, *points, units], dtype=np.int64)
        if (np.diff(bounds) <= 0).any():
            raise DseError(
                f"horizontal.json entry '{name}': split points {points} must be "
                f"increasing inside (0, {units}), the layer's output {what}s"
            )
        if layer not in s_of:  # one device: the entry says nothing more than mapping.json
            continue
        s = s_of[layer]
        sizes[0, s] = 0
        sizes[0, s, [key_index[d] for d in devs]] = np.diff(bounds)
        axis[0, s] = 1 if by_rows and len(devs) > 1 else 0
    unmet = [int(layer) for layer in split if graph.names[layer] not in horizontal]
    if unmet:
        raise DseError(
            f"horizontal.json has no entry for node '{graph.names[unmet[0]]}', which "
            f"mapping.json splits over {int(on[0, unmet[0]].sum())} devices "
            f"({_count(len(unmet), 'split node')} without one): {NOT_ONE_MAPPING}"
        )
    return Mappings(m.device, sizes, axis)


def _object(value: Any, what: str, form: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DseError(f"{what} must be an object {form}, not {_short(value)}")
    return value


def _names(value: Any, where: str, what: str) -> list[str]:
    """A list of strings (a bare string is refused, not read letter by letter)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DseError(f"{where} must be a list of {what} in quotes, not {_short(value)}")
    return value


def _count(n: int, noun: str) -> str:
    """``1 split node``, ``3 split nodes``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
