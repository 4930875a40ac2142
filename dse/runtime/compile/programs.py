"""Each device's program: the layers (or parts) it computes, what it receives and gathers, and
what it sends after each, walked in the graph's order (the rules: :mod:`dse.runtime.partition`).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx

from dse.errors import DseError
from dse.mapping import Mappings, check
from dse.net import Net, ops
from dse.net.graph import Layer, LayerGraph
from dse.net.onnx_load import TensorType
from dse.platform import Platform
from dse.runtime.actions import Action, Programs, add_part, static_adder
from dse.runtime.bands import RowLayout, run_on_bands
from dse.runtime.statics import Statics

__all__ = ["Action", "Programs", "check_mapping", "device_programs", "part_rows"]


def part_rows(graph: LayerGraph, share: np.ndarray, root: np.ndarray | None = None) -> np.ndarray:
    """int64 [L]: the layer whose shares each layer of one mapping (``share[L, D]``) runs with:
    its own, or, for a layer that follows a split layer (``graph.follows``), that layer's.
    ``root[L]``: the mapping's row roots (:func:`dse.mapping.rows.layout_of`; None: no layer
    split by rows): after a layer split by rows only the layers on its bands (their root is
    it) run on its parts; the others run whole, on their own device."""
    row = np.arange(len(graph), dtype=np.int64)
    for c in np.flatnonzero(graph.follows >= 0):
        r = row[graph.follows[c]]
        if np.count_nonzero(share[r] > 0) > 1 and (root is None or root[r] != r or root[c] == r):
            row[c] = r
    return row


def check_mapping(net: Net, platform: Platform, mapping: Mappings) -> tuple[np.ndarray, ...]:
    """Mapping 0 of ``mapping`` as (share[L, D], owner[L]), checked against the net and
    platform."""
    graph = net.graph
    if mapping.device.shape[1] != len(graph):
        raise DseError(
            f"the mapping has {mapping.device.shape[1]} layers but net '{net.name}' has "
            f"{len(graph)}: it was made for another network"
        )
    if mapping.sizes.shape[2] > len(platform):
        raise DseError(
            f"the mapping uses {mapping.sizes.shape[2]} devices but platform '{platform.name}' "
            f"has {len(platform)}: choose a platform with enough devices"
        )
    one = mapping.take(0)
    check(graph, len(platform), one)
    share, owner = one.dense(graph)
    return share[0], owner[0]


def layer_nodes(
    layer: Layer,
    node: onnx.NodeProto,
    statics: Statics,
    static_names: set[str],
    part: tuple[int, int] | None,
    tag: str,
    types: dict[str, TensorType],
) -> Action:
    """The nodes that compute ``layer`` whole, or its output channels ``part`` = (c0, c1)
    (as :func:`dse.net.ops.channel_split` slices its op)."""
    act = Action("compute")
    inputs = list(node.input)
    out = node.output[0] if node.output else ""
    if part is None:
        n = onnx.NodeProto()
        n.CopyFrom(node)
        n.name = layer.name
        act.nodes.append(n)
        static = static_adder(act, statics)
        for t in inputs:
            if t and t in static_names:
                static(t)
        act.makes = [t for t in node.output if t]
    else:
        spec = ops.channel_split(node.op_type)
        if spec is None:
            raise DseError(
                f"layer '{layer.name}' ({node.op_type}) is split, but it cannot be split by "
                "output channels: map it to one device"
            )
        if len(inputs) <= spec.weight or inputs[spec.weight] not in static_names:
            raise DseError(f"layer '{layer.name}' is split but its weight is not constant")
        pout = f"{out}{tag}"
        act.makes = [pout]
        shapes = {t: tuple(statics.proto(t).dims) for t in inputs if t in static_names}
        c_in = types[inputs[0]].shape[1] if len(types[inputs[0]].shape) > 1 else 0
        add_part(act, spec.slice(node, layer.name, part, tag, pout, shapes, c_in), statics, True)
        shape = list(types[out].shape)
        shape[spec.axis] = part[1] - part[0]
        types[pout] = TensorType(tuple(shape), types[out].elem_type)
    act.reads = [t.name for t in layer.inputs]
    return act


def follower_part(
    layer: Layer,
    node: onnx.NodeProto,
    statics: Statics,
    part: tuple[int, int],
    tag: str,
    axis: int,
    types: dict[str, TensorType],
) -> Action:
    """Channels ``part`` of a channel-local layer, computed from the same channels of its
    input (the part of the split layer it follows, made on this device)."""
    act = Action("compute")
    x = f"{layer.inputs[0].name}{tag}"
    out = node.output[0]
    pout = f"{out}{tag}"
    add_part(act, ops.local_part(node, layer.name, part, tag, x, pout), statics, False)
    shape = list(types[out].shape)
    shape[axis] = part[1] - part[0]
    types[pout] = TensorType(tuple(shape), types[out].elem_type)
    act.reads, act.makes = [x], [pout]
    return act


class _Walk:
    """The layer walk: fills every device's program, layer after layer."""

    def __init__(
        self,
        net: Net,
        mapping: Mappings,
        share: np.ndarray,
        owner: np.ndarray,
        entry: int,
        statics: Statics,
        nodes: list[onnx.NodeProto],
        types: dict[str, TensorType],
    ) -> None:
        graph = net.graph
        self.graph, self.mapping, self.owner = graph, mapping, owner
        self.statics, self.nodes, self.types = statics, nodes, types
        layer_tensors = {t.name for layer in graph for t in layer.inputs} | {
            t for layer in graph for t in nodes[layer.node].output
        }
        self.static_names = {
            t for layer in graph for t in nodes[layer.node].input if t and t not in layer_tensors
        }
        self.programs: defaultdict[int, list[Action]] = defaultdict(list)
        self.where: dict[str, int] = {t.name: entry for t in graph.inputs}  # tensor -> owner
        self.has: dict[str, set[int]] = {t.name: {entry} for t in graph.inputs}
        # where the producer's sends go: (device, action index); -1: before any action
        self.made_at: dict[tuple[str, int], int] = {(t.name, entry): -1 for t in graph.inputs}
        self.start_sends: defaultdict[int, list[tuple[str, int]]] = defaultdict(list)
        self.share = share
        self.rows = RowLayout.of(graph, mapping)
        self.bands: dict[str, dict[int, tuple[int, int]]] = {}  # tensor -> device -> its rows
        self.opset = next(
            (o.version for o in net.model.opset_import if o.domain in ("", "ai.onnx")), 1
        )
        self.row = part_rows(graph, share, self.rows.root)
        # devices that read each tensor whole: they compute a layer (or a part, or a band:
        # one that made a part of the tensor gathers it, and cuts its rows itself) reading it
        self.readers: dict[str, set[int]] = defaultdict(set)
        for layer in graph:
            on = {int(d) for d in np.flatnonzero(share[self.row[layer.index]] > 0)}
            for t in layer.inputs:
                self.readers[t.name] |= on
        self.out_set = {t.name for t in graph.outputs}

    def post_send(self, t: str, src: int, dst: int) -> None:
        idx = self.made_at[(t, src)]
        (self.start_sends[src] if idx < 0 else self.programs[src][idx].sends).append((t, dst))

    def transfer(self, t: str, src: int, dst: int) -> None:
        self.post_send(t, src, dst)
        self.programs[dst].append(Action("recv", tensor=t, peer=src))

    def add(self, d: int, act: Action, layer: int) -> None:
        act.layer = layer
        self.programs[d].append(act)
        for t in act.makes:
            self.made_at[(t, d)] = len(self.programs[d]) - 1

    def insert(self, d: int, at: int, act: Action) -> None:
        """``act`` into ``d``'s program at index ``at`` (the actions after it move on)."""
        self.programs[d].insert(at, act)
        for key, idx in self.made_at.items():
            if key[1] == d and idx >= at:
                self.made_at[key] = idx + 1
        for t in act.makes:
            self.made_at[(t, d)] = at

    def layer(self, layer: Layer) -> None:
        """Every device's share of ``layer``, then where its output goes."""
        if self.rows.root[layer.index] >= 0:
            run_on_bands(self, layer)
            return
        graph, types = self.graph, self.types
        node = self.nodes[layer.node]
        r = int(self.row[layer.index])
        spec = ops.channel_split(self.nodes[graph.layers[r].node].op_type)
        axis = 1 if spec is None or spec.axis == 1 else len(types[node.output[0]].shape) - 1
        devs = [int(d) for d in np.flatnonzero(self.share[r] > 0)]
        split = len(devs) > 1
        bounds = self.mapping.bounds(graph, r) if split else []
        for k, d in enumerate(devs):
            if r != layer.index:  # a channel-local layer on the parts of the one it follows
                part = follower_part(layer, node, self.statics, bounds[k], f".part{d}", axis, types)
                self.add(d, part, layer.index)
                continue
            for t in layer.inputs:
                src = self.where[t.name]
                if src != d and d not in self.has[t.name]:
                    self.transfer(t.name, src, d)
                    self.has[t.name].add(d)
            bound = bounds[k] if split else None
            if bound is not None and bound[1] <= bound[0]:
                raise DseError(
                    f"layer '{layer.name}': device {d} gets no output channel of "
                    f"{layer.out_channels}: give it a larger share or none"
                )
            tag = f".part{d}" if split else ""
            act = layer_nodes(layer, node, self.statics, self.static_names, bound, tag, types)
            self.add(d, act, layer.index)
        nxt = int(graph.follower[layer.index])
        if split and nxt >= 0 and self.row[nxt] != nxt:
            return  # no gather: its parts go on to the follower's parts
        if split:
            self.gather(node.output[0], devs, bounds, axis, int(self.owner[layer.index]))
            return
        c = int(self.owner[layer.index])
        for t in node.output:
            if t:
                self.where[t], self.has[t] = c, {c}
                self.made_at[(t, c)] = self.made_at.get((t, c), len(self.programs[c]) - 1)

    def gather(
        self,
        out: str,
        devs: list[int],
        bounds: list[tuple[int, int]],
        axis: int,
        c: int,
        tag: str = ".part",
    ) -> None:
        """A split layer's parts (``{out}{tag}{d}``: channels, or bands of rows) to every
        device that needs the whole ``out`` (its owner ``c`` too when it needs it or forwards
        it), each concatenating them itself."""
        parts = [f"{out}{tag}{d}" for d in devs]
        need = self.readers[out] | ({c} if out in self.out_set else set())
        cat_owner = c in need or bool(need - set(devs))
        gatherers = sorted({e for e in devs if e in need} | ({c} if cat_owner else set()))
        for d, p in zip(devs, parts, strict=True):
            for e in gatherers:
                if e != d:
                    self.post_send(p, d, e)
        for e in gatherers:
            gather = Action(
                "gather",
                tensor=out,
                parts=[(p, d, b) for d, p, b in zip(devs, parts, bounds, strict=True)],
                axis=axis,
                reads=[f"{out}{tag}{e}"] if e in devs else [],
                makes=[out],
            )
            self.programs[e].append(gather)
            self.made_at[(out, e)] = len(self.programs[e]) - 1
        self.where[out], self.has[out] = c, set(gatherers)


def device_programs(
    net: Net,
    mapping: Mappings,
    share: np.ndarray,
    owner: np.ndarray,
    entry: int,
    statics: Statics,
    nodes: list[onnx.NodeProto],
    types: dict[str, TensorType],
) -> Programs:
    """Every device's program for mapping 0 of ``mapping`` (``share``, ``owner``: its dense
    form); the graph input starts on ``entry``. ``types`` gains the parts' tensors."""
    walk = _Walk(net, mapping, share, owner, entry, statics, nodes, types)
    for layer in net.graph:
        walk.layer(layer)
    for t in net.graph.outputs:
        if t.name not in walk.where:
            raise DseError(f"graph output '{t.name}' is not produced by any layer")
    return Programs(walk.programs, walk.start_sends, walk.where)
