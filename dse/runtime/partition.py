"""Partitioner: one mapping of a net -> per-device ONNX sub-models and a send/recv plan.

The plan follows the analytical model's schedule (``models_analytical/schedule/``) step for
step. Layers are visited in the graph's topological order; on every device that computes a
layer (or a part of it), each input tensor that lives elsewhere is received first, from the
device that holds it whole (its owner; the graph input lives on ``platform.entry``), and a
tensor crosses to a given device at most once. A split layer needs its whole input on every
part's device; part k computes the contiguous output-channel range
``[rint(cumsum(share)[k-1] * C), rint(cumsum(share)[k] * C))`` (devices in index order).

The parts are all-gathered: a device that computed a part and needs the whole output (it
computes a consumer of it, or a part of one) receives the other parts straight from the devices
that computed them, into its buffer of the whole (a ``gather`` step), without waiting for the
owner. The owner gathers likewise when it needs the whole (a consumer, a graph output) or must
forward it to a device that computed no part; then it sends the whole to those devices. No
other device receives parts, so every byte still crosses to a given device at most once.

A channel-local layer that follows a split layer (``LayerGraph.follows``: Relu, pooling,
BatchNormalization after a Conv) runs on the split layer's parts, each device on the part it
made (onnxruntime fuses Conv+Relu inside a part's sub-model), and its output is gathered in
place of the split layer's: a Conv -> Relu -> MaxPool over two devices sends pooled parts. Its
device in the mapping is where its output is gathered (its owner). :func:`part_rows` states the
rule; the model's kernel applies the same one.

A device's work is cut into segments (one ONNX sub-model each) before every step that waits for
a remote tensor and after every step whose output another device can use at once, so its sends
are posted as soon as they are useful (:func:`send_deadlines`: a tensor the receiver needs
together with one made later in the same run goes out with that one). Sends are non-blocking,
every send is posted before the device's next receive, receives block in program order, and
every receive waits for a tensor made at an earlier layer (or, for a gather, at the same
layer's parts, each sent before its device gathers): work going A -> B -> A cannot deadlock.

On a cpu, a sub-model input that two or more channel Concats read first passes an identity
depthwise 1x1 Conv (weights 1, exact). onnxruntime's CPU provider runs convolutions in a blocked
layout (NCHWc) and keeps a Concat, and the BatchNormalization and Relu after it, in that layout
only when every input of the Concat comes from a blocked node; a sub-model's inputs do not, so
without it DenseNet's dense layers after a cut ran unfused and slower (one-cut DenseNet-121: its
segments 1.03 of the whole network, 1.01 with it). A sub-model of one dense layer (one Concat)
is left alone: there the pass over every input cost more than it saved (10 % on mappings that
split every layer).
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dse.errors import DseError
from dse.mapping import Mappings, check
from dse.net import Net
from dse.net.graph import Layer
from dse.net.onnx_load import TensorType, graph_inputs, infer_types
from dse.platform import Platform
from dse.runtime.weights import MappedFiles, external_locations, inline_offsets

PLAN_VERSION = 2  # 2: split layers' parts all-gathered (``gather`` steps)
#: Split ops the runtime can slice: op -> (weight input, output-channel axis is 1 (else last)).
SLICEABLE = {"Conv": True, "ConvTranspose": True, "Gemm": False, "MatMul": False}


@dataclass
class Deployment:
    """Sub-models by file name and the JSON-able plan that says who runs, sends and receives
    what, in order."""

    plan: dict[str, Any]
    segments: dict[str, onnx.ModelProto] = field(repr=False)  # weights external, see blobs
    blobs: dict[str, list[tuple[int, Blob]]] = field(repr=False, default_factory=dict)

    def write_segments(self, directory: Path) -> None:
        """Every sub-model and its weight file into ``directory``."""
        for name, model in self.segments.items():
            write_segment(model, self.blobs.get(name, []), Path(directory) / name)


def weight_source(net: Net, seed: int) -> tuple[onnx.ModelProto, dict[str, tuple[Path, int, int]]]:
    """The model whose initializers describe the weights, and where their bytes lie on disk:
    a zoo net's seeded file (scanned, not parsed), or a file's external data; weights stored
    inline in a user's file are already in ``net.model``."""
    if net.path is not None:
        return net.model, external_locations(net.model, Path(net.path).parent)
    from dse.net import zoo

    path = zoo.materialize(net.name, seed)
    try:
        offsets = inline_offsets(path)
    except (ValueError, IndexError, OSError):
        return net.weighted_model(seed), {}
    return net.model, {name: (path, off, n) for name, (off, n) in offsets.items()}


def part_rows(graph, share: np.ndarray) -> np.ndarray:
    """int64 [L]: the layer whose shares each layer of one mapping (``share[L, D]``) runs with:
    its own, or, for a layer that follows a split layer (``graph.follows``), that layer's."""
    row = np.arange(len(graph), dtype=np.int64)
    for c in np.flatnonzero(graph.follows >= 0):
        r = row[graph.follows[c]]
        if np.count_nonzero(share[r] > 0) > 1:
            row[c] = r
    return row


class _Statics:
    """Values of the static tensors (weights, Constant-node outputs, folded shape tensors)."""

    def __init__(
        self,
        net: Net,
        weighted: onnx.ModelProto,
        locations: dict[str, tuple[Path, int, int]] | None = None,
    ) -> None:
        self.net = net
        self.inits = {t.name: t for t in weighted.graph.initializer}
        self.locations = locations or {}  # weights read from files (memory-mapped)
        self.files = MappedFiles()
        self.constants = {
            n.output[0]: n for n in weighted.graph.node if n.op_type == "Constant" and n.output
        }
        self._folded: dict[str, TensorProto] | None = None
        self._arrays: dict[str, np.ndarray] = {}

    def proto(self, name: str) -> TensorProto:
        if name in self.inits:
            return self.inits[name]
        if name in self.constants:
            return _constant_value(self.constants[name], name)
        if self._folded is None:
            from dse.net.onnx_load import fold_constants

            folded = fold_constants(self._with_small_data(), _tensor_types(self.net))
            self._folded = {t.name: t for t in folded.graph.initializer}
        if name not in self._folded:
            raise DseError(
                f"static tensor '{name}' of net '{self.net.name}' cannot be evaluated for the "
                "sub-models: export the model with constant-folded shape computations"
            )
        return self._folded[name]

    def _with_small_data(self) -> onnx.ModelProto:
        """The net's model with its small mapped weights (shapes, axes) inline, to fold."""
        if not self.locations:
            return self.net.model
        model = onnx.ModelProto()
        model.CopyFrom(self.net.model)
        for t in model.graph.initializer:
            if t.name in self.locations and self.locations[t.name][2] <= 1 << 20:
                data = bytes(self.files.view(*self.locations[t.name]))
                del t.external_data[:]
                t.data_location = TensorProto.DEFAULT
                t.raw_data = data
        return model

    def array(self, name: str) -> np.ndarray:
        """The value, decoded once (a read-only view of the stored bytes where possible)."""
        if name not in self._arrays and name in self.locations:
            t = self.proto(name)
            dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
            view = self.files.view(*self.locations[name])
            self._arrays[name] = np.frombuffer(view, dtype=dtype).reshape(tuple(t.dims))
        if name not in self._arrays:
            t = self.proto(name)
            if t.data_location == TensorProto.EXTERNAL:
                raise DseError(f"weight '{name}' has no data loaded (its external data is missing)")
            raw = t.raw_data if t.HasField("raw_data") else b""
            if raw and sys.byteorder == "little":
                dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
                arr = np.frombuffer(raw, dtype=dtype).reshape(tuple(t.dims))
            else:
                arr = numpy_helper.to_array(t)
            self._arrays[name] = arr
        return self._arrays[name]


def _constant_value(node: onnx.NodeProto, name: str) -> TensorProto:
    from onnx.reference import ReferenceEvaluator

    g = helper.make_graph([node], "c", [], [helper.make_empty_tensor_value_info(name)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    (value,) = ReferenceEvaluator(m).run(None, {})
    return numpy_helper.from_array(np.asarray(value), name)


#: Weights at least this large go to a sub-model's external data file, written straight from
#: the (sliced) source array: no protobuf copy of the bytes.
EXTERNAL_MIN_BYTES = 1024
#: Offsets in the data files are multiples of this (onnxruntime can map them).
ALIGN = 4096


@dataclass(frozen=True)
class Blob:
    """A weight of a sub-model: ``statics[src]`` cut by ``(axis, lo, hi)`` slices."""

    statics: _Statics = field(repr=False)
    src: str
    cuts: tuple[tuple[int, int, int], ...] = ()

    def dims(self) -> list[int]:
        dims = list(self.statics.proto(self.src).dims)
        for axis, lo, hi in self.cuts:
            dims[axis] = hi - lo
        return dims

    def value(self) -> np.ndarray:
        arr = self.statics.array(self.src)
        for axis, lo, hi in self.cuts:
            index = [slice(None)] * arr.ndim
            index[axis] = slice(lo, hi)
            arr = arr[tuple(index)]
        return np.ascontiguousarray(arr)


#: An initializer of a sub-model: small tensors inline, weights as blobs.
Init = TensorProto | Blob


def _sliced(statics: _Statics, src: str, *cuts: tuple[int, int, int]) -> Init:
    return Blob(statics, src, tuple(cuts))


class _Builder:
    """Builds one device's sub-models from its ordered actions."""

    def __init__(self, types: dict[str, TensorType], source: onnx.ModelProto) -> None:
        self.types = types
        self.opsets = list(source.opset_import)
        self.ir_version = source.ir_version or 8

    def model(
        self,
        nodes: list[onnx.NodeProto],
        inits: dict[str, Init],
        const_nodes: dict[str, onnx.NodeProto],
        inputs: list[str],
        outputs: list[str],
        name: str,
        cpu: bool = True,
    ) -> tuple[onnx.ModelProto, list[tuple[int, Blob]]]:
        """The sub-model, its weights left external (data written by :func:`write_segment`),
        and those weights by initializer position. On a ``cpu``, inputs a Concat reads pass an
        identity Conv first (:func:`blocked_inputs`)."""

        def vi(t: str) -> onnx.ValueInfoProto:
            tt = self.types[t]
            return helper.make_tensor_value_info(t, tt.elem_type, list(tt.shape))

        identity: list[onnx.NodeProto] = []
        if cpu:
            identity, nodes, extra = blocked_inputs(nodes, inputs, self.types)
            inits = {**inits, **extra}
        all_nodes = [*const_nodes.values(), *identity, *nodes]
        g = helper.make_graph(all_nodes, name, [vi(t) for t in inputs], [vi(t) for t in outputs])
        m = helper.make_model(g, opset_imports=self.opsets, producer_name="dse.runtime")
        m.ir_version = self.ir_version  # as the source: onnxruntime may not read newer ones
        blobs: list[tuple[int, Blob]] = []
        for iname, init in inits.items():
            t = m.graph.initializer.add()
            if isinstance(init, TensorProto):
                t.CopyFrom(init)
                t.name = iname
                continue
            t.name = iname
            t.data_type = init.statics.proto(init.src).data_type
            t.dims.extend(init.dims())
            t.data_location = TensorProto.EXTERNAL
            blobs.append((len(m.graph.initializer) - 1, init))
        return m, blobs


#: Channel counts onnxruntime's blocked layout takes (its block is 8 or 16 channels).
BLOCK = 8
#: An input passes the identity Conv when this many Concats read it: a sub-model of one
#: dense layer (one Concat of many inputs) would pay a pass over every input for one Concat.
MIN_CONCATS = 2


def blocked_inputs(
    nodes: list[onnx.NodeProto],
    inputs: list[str],
    types: dict[str, TensorType],
    min_readers: int = MIN_CONCATS,
) -> tuple[list[onnx.NodeProto], list[onnx.NodeProto], dict[str, TensorProto]]:
    """Identity depthwise Convs for the ``inputs`` that at least ``min_readers`` channel
    Concats of ``nodes`` read (float NCHW tensors of a multiple of :data:`BLOCK` channels): the
    new nodes, ``nodes`` with those Concats reading the Convs' outputs instead, and the Convs'
    weights (all ones)."""
    readers: dict[str, int] = defaultdict(int)
    for nd in nodes:
        if nd.op_type == "Concat" and _axis(nd) in (1, -3):
            for t in set(nd.input) & set(inputs):
                readers[t] += 1
    wanted = {t for t, n in readers.items() if n >= min_readers}
    renamed: dict[str, str] = {}
    identity: list[onnx.NodeProto] = []
    weights: dict[str, TensorProto] = {}
    for t in inputs:
        tt = types[t]
        if t not in wanted or tt.elem_type != TensorProto.FLOAT or len(tt.shape) != 4:
            continue
        c = tt.shape[1]
        if not isinstance(c, int) or c % BLOCK:
            continue
        out, w = f"{t}/blocked", f"{t}/blocked.weight"
        weights[w] = numpy_helper.from_array(np.ones((c, 1, 1, 1), np.float32), w)
        identity.append(
            helper.make_node(
                "Conv", [t, w], [out], name=f"{t}/blocked", group=c, kernel_shape=[1, 1]
            )
        )
        renamed[t] = out
    if not renamed:
        return [], nodes, {}
    rewired = []
    for nd in nodes:
        if nd.op_type == "Concat" and any(t in renamed for t in nd.input):
            nd = _copy(nd)
            nd.input[:] = [renamed.get(t, t) for t in nd.input]
        rewired.append(nd)
    return identity, rewired, weights


def _axis(node: onnx.NodeProto) -> int:
    return next((int(a.i) for a in node.attribute if a.name == "axis"), 0)


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    return out


def write_segment(model: onnx.ModelProto, blobs: list[tuple[int, Blob]], path: Path) -> None:
    """Write a sub-model to ``path`` and its weights to ``path.data`` (external data)."""
    location = path.name + ".data"
    if blobs:
        with open(path.parent / location, "wb") as f:
            offset = 0
            for idx, blob in blobs:
                arr = blob.value()
                pad = (-offset) % ALIGN
                f.write(b"\0" * pad)
                offset += pad
                f.write(memoryview(arr).cast("B"))
                t = model.graph.initializer[idx]
                del t.external_data[:]
                for k, v in (("location", location), ("offset", offset), ("length", arr.nbytes)):
                    entry = t.external_data.add()
                    entry.key, entry.value = k, str(v)
                offset += arr.nbytes
    path.write_bytes(model.SerializeToString())


@dataclass
class _Action:
    """One step of a device's program: compute nodes (producing tensors), receive a tensor, or
    gather a split layer's parts into its whole."""

    kind: str  # "compute" | "recv" | "gather"
    layer: int = -1  # compute: the graph layer (whole, or a part of it)
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: dict[str, Init] = field(default_factory=dict)
    consts: dict[str, onnx.NodeProto] = field(default_factory=dict)
    reads: list[str] = field(default_factory=list)  # activation tensors read
    makes: list[str] = field(default_factory=list)  # tensors produced
    tensor: str = ""  # recv: the tensor
    peer: int = -1  # recv: the sending device
    sends: list[tuple[str, int]] = field(default_factory=list)  # after this action
    # gather: (part tensor, device that computed it, channel range) in channel order; the axis
    parts: list[tuple[str, int, tuple[int, int]]] = field(default_factory=list)
    axis: int = 1


def _layer_nodes(
    layer: Layer,
    node: onnx.NodeProto,
    statics: _Statics,
    static_names: set[str],
    part: tuple[int, int] | None,
    tag: str,
    types: dict[str, TensorType],
) -> _Action:
    """The nodes that compute ``layer`` whole, or its output channels ``part`` = (c0, c1)."""
    act = _Action("compute")
    inputs = list(node.input)

    def static(name: str) -> None:
        if name in statics.constants and name not in statics.inits:
            act.consts[name] = statics.constants[name]
            return
        proto = statics.proto(name)
        big = math.prod(proto.dims) * 4 >= EXTERNAL_MIN_BYTES and name in statics.inits
        if big:
            act.inits[name] = Blob(statics, name)
        elif name in statics.locations:  # small, but its bytes are in a file
            act.inits[name] = numpy_helper.from_array(np.array(statics.array(name)), name)
        else:
            act.inits[name] = proto

    out = node.output[0] if node.output else ""
    if part is None:
        n = onnx.NodeProto()
        n.CopyFrom(node)
        n.name = layer.name
        act.nodes.append(n)
        for t in inputs:
            if t and t in static_names:
                static(t)
        act.makes = [t for t in node.output if t]
    else:
        c0, c1 = part
        op = node.op_type
        if op not in SLICEABLE:
            raise DseError(
                f"layer '{layer.name}' ({op}) is split, but the runtime slices only "
                f"{', '.join(SLICEABLE)}: map it to one device"
            )
        if len(inputs) < 2 or inputs[1] not in static_names:
            raise DseError(f"layer '{layer.name}' is split but its weight is not constant")
        pout = f"{out}{tag}"
        act.makes = [pout]
        if op in ("Conv", "ConvTranspose"):
            _conv_part(act, layer, node, statics, (c0, c1), tag, pout, types)
        else:
            w = statics.proto(inputs[1])
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            # Gemm: W[N, K] with transB, else W[K, N]; MatMul: W[..., K, N]
            axis = (0 if attrs.get("transB", 0) else 1) if op == "Gemm" else len(w.dims) - 1
            wname = f"{inputs[1]}@{layer.name}{tag}"
            act.inits[wname] = _sliced(statics, inputs[1], (axis, c0, c1))
            new_inputs = [inputs[0], wname]
            if op == "Gemm" and len(inputs) > 2 and inputs[2]:
                c = statics.proto(inputs[2])
                cdims = list(c.dims)
                if cdims and cdims[-1] == layer.out_channels and layer.out_channels > 1:
                    cname = f"{inputs[2]}@{layer.name}{tag}"
                    act.inits[cname] = _sliced(statics, inputs[2], (len(cdims) - 1, c0, c1))
                    new_inputs.append(cname)
                else:
                    static(inputs[2])
                    new_inputs.append(inputs[2])
            n = helper.make_node(op, new_inputs, [pout], name=f"{layer.name}{tag}")
            n.attribute.extend(node.attribute)
            act.nodes.append(n)
        shape = list(types[out].shape)
        shape[1 if SLICEABLE[node.op_type] else -1] = c1 - c0
        types[pout] = TensorType(tuple(shape), types[out].elem_type)
    act.reads = [t.name for t in layer.inputs]
    return act


def _follower_part(
    layer: Layer,
    node: onnx.NodeProto,
    statics: _Statics,
    static_names: set[str],
    part: tuple[int, int],
    tag: str,
    axis: int,
    types: dict[str, TensorType],
) -> _Action:
    """Channels ``part`` of a channel-local layer, computed from the same channels of its
    input (the part of the split layer it follows, made on this device)."""
    c0, c1 = part
    act = _Action("compute")
    x = layer.inputs[0].name
    inputs = [f"{x}{tag}" if t == x else t for t in node.input]
    per_channel = node.op_type == "BatchNormalization"  # scale, bias, mean, var: [C]
    for i, t in enumerate(node.input):
        if not t or t not in static_names:
            continue
        if per_channel and i >= 1:
            inputs[i] = f"{t}@{layer.name}{tag}"
            act.inits[inputs[i]] = numpy_helper.from_array(
                np.ascontiguousarray(statics.array(t)[c0:c1]), inputs[i]
            )
        elif t in statics.constants and t not in statics.inits:
            act.consts[t] = statics.constants[t]
        else:
            act.inits[t] = numpy_helper.from_array(np.array(statics.array(t)), t)
    out = node.output[0]
    pout = f"{out}{tag}"
    n = helper.make_node(node.op_type, inputs, [pout], name=f"{layer.name}{tag}")
    n.attribute.extend(node.attribute)
    if node.domain:
        n.domain = node.domain
    act.nodes.append(n)
    shape = list(types[out].shape)
    shape[axis] = c1 - c0
    types[pout] = TensorType(tuple(shape), types[out].elem_type)
    act.reads, act.makes = [f"{x}{tag}"], [pout]
    return act


def _conv_part(
    act: _Action,
    layer: Layer,
    node: onnx.NodeProto,
    statics: _Statics,
    part: tuple[int, int],
    tag: str,
    pout: str,
    types: dict[str, TensorType],
) -> None:
    """Output channels [c0, c1) of a Conv or ConvTranspose. With groups, each run of whole
    groups is one grouped convolution over its input channels and a partly covered group one
    convolution of its own; the pieces are concatenated."""
    c0, c1 = part
    op, inputs = node.op_type, list(node.input)
    x = inputs[0]
    attrs = {a.name: a for a in node.attribute if a.name != "group"}
    groups = int(
        next((helper.get_attribute_value(a) for a in node.attribute if a.name == "group"), 1)
    )
    has_bias = len(inputs) > 2 and bool(inputs[2])
    m = layer.out_channels
    c_in = types[x].shape[1]
    per_out, per_in = m // groups, c_in // groups
    # pieces: (first group, number of groups, out range inside those groups)
    pieces: list[tuple[int, int, int, int]] = []  # (g0, g1, o0, o1) with o in absolute channels
    if groups == 1:
        pieces.append((0, 1, c0, c1))
    else:
        g = c0 // per_out
        while g * per_out < c1:
            o0, o1 = max(c0, g * per_out), min(c1, (g + 1) * per_out)
            whole = o0 == g * per_out and o1 == (g + 1) * per_out
            if whole and pieces and pieces[-1][3] == o0 and _whole(pieces[-1], per_out):
                pg0, _, po0, _ = pieces[-1]
                pieces[-1] = (pg0, g + 1, po0, o1)
            else:
                pieces.append((g, g + 1, o0, o1))
            g += 1
    outs = []
    for i, (g0, g1, o0, o1) in enumerate(pieces):
        sub = f"{tag}.{i}" if len(pieces) > 1 else tag
        piece_out = f"{pout}.{i}" if len(pieces) > 1 else pout
        n_groups = g1 - g0 if _whole((g0, g1, o0, o1), per_out) else 1
        x_in = x
        if groups > 1:
            x_in = f"{x}@{layer.name}{sub}"
            names = [f"{x_in}.{k}" for k in ("starts", "ends", "axes")]
            for nm, v in zip(names, (g0 * per_in, g1 * per_in, 1), strict=True):
                act.inits[nm] = numpy_helper.from_array(np.array([v], dtype=np.int64), nm)
            act.nodes.append(
                helper.make_node("Slice", [x, *names], [x_in], name=f"{layer.name}{sub}.slice")
            )
        wname = f"{inputs[1]}@{layer.name}{sub}"
        if op == "Conv":
            act.inits[wname] = _sliced(statics, inputs[1], (0, o0, o1))
        else:  # ConvTranspose: W[C_in, M/group, ...]; this piece's input rows, its output columns
            rows = (0, g0 * per_in, g1 * per_in)
            if n_groups == g1 - g0 and (o1 - o0) == (g1 - g0) * per_out:
                act.inits[wname] = _sliced(statics, inputs[1], rows)
            else:
                lo = o0 - g0 * per_out
                act.inits[wname] = _sliced(statics, inputs[1], rows, (1, lo, lo + (o1 - o0)))
        new_inputs = [x_in, wname]
        if has_bias:
            bname = f"{inputs[2]}@{layer.name}{sub}"
            act.inits[bname] = _sliced(statics, inputs[2], (0, o0, o1))
            new_inputs.append(bname)
        n = helper.make_node(op, new_inputs, [piece_out], name=f"{layer.name}{sub}")
        n.attribute.extend(attrs.values())
        if n_groups > 1:
            n.attribute.append(helper.make_attribute("group", n_groups))
        act.nodes.append(n)
        outs.append(piece_out)
    if len(outs) > 1:
        act.nodes.append(
            helper.make_node("Concat", outs, [pout], axis=1, name=f"{layer.name}{tag}")
        )


def _whole(piece: tuple[int, int, int, int], per_out: int) -> bool:
    g0, g1, o0, o1 = piece
    return o0 == g0 * per_out and o1 == g1 * per_out


def _tensor_types(net: Net) -> dict[str, TensorType]:
    types = {k: v for k, v in infer_types(net.model).items() if v is not None}
    fallback = {
        4: TensorProto.FLOAT,
        8: TensorProto.INT64,
        2: TensorProto.FLOAT16,
        1: TensorProto.UINT8,
    }
    for layer in net.graph:
        for t in (*layer.inputs, *layer.outputs):
            if t.name not in types:
                types[t.name] = TensorType(t.shape, fallback.get(t.itemsize, TensorProto.FLOAT))
    return types


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


def partition(
    net: Net,
    mapping: Mappings,
    platform: Platform,
    weighted: onnx.ModelProto | None = None,
    seed: int = 0,
) -> Deployment:
    """Cut ``net`` by mapping 0 of ``mapping`` into per-device sub-models and a plan."""
    share, owner = check_mapping(net, platform, mapping)
    graph = net.graph
    if weighted is not None:
        model, locations = weighted, {}
    else:
        model, locations = weight_source(net, seed)
    nodes = list(model.graph.node)
    if len(nodes) != len(net.model.graph.node):
        raise DseError("the weighted model does not have the net's nodes")
    statics = _Statics(net, model, locations)
    layer_tensors = {t.name for layer in graph for t in layer.inputs} | {
        t for layer in graph for t in nodes[layer.node].output
    }
    static_names = {
        t for layer in graph for t in nodes[layer.node].input if t and t not in layer_tensors
    }
    types = _tensor_types(net)
    entry = int(platform.entry)

    programs: dict[int, list[_Action]] = defaultdict(list)
    where: dict[str, int] = {t.name: entry for t in graph.inputs}  # tensor -> its owner
    has: dict[str, set[int]] = {t.name: {entry} for t in graph.inputs}
    # where the producer's sends go: (device, action index) ; -1: before any action
    made_at: dict[tuple[str, int], int] = {(t.name, entry): -1 for t in graph.inputs}
    start_sends: dict[int, list[tuple[str, int]]] = defaultdict(list)
    # devices that read each tensor whole: they compute a layer (or a part) reading it
    readers: dict[str, set[int]] = defaultdict(set)
    row = part_rows(graph, share)
    for layer in graph:
        on = {int(d) for d in np.flatnonzero(share[row[layer.index]] > 0)}
        for t in layer.inputs:
            readers[t.name] |= on
    out_set = {t.name for t in graph.outputs}

    def post_send(t: str, src: int, dst: int) -> None:
        idx = made_at[(t, src)]
        (start_sends[src] if idx < 0 else programs[src][idx].sends).append((t, dst))

    def transfer(t: str, src: int, dst: int) -> None:
        post_send(t, src, dst)
        programs[dst].append(_Action("recv", tensor=t, peer=src))

    for layer in graph:
        node = nodes[layer.node]
        r = int(row[layer.index])
        root = nodes[graph.layers[r].node].op_type
        axis = 1 if SLICEABLE.get(root, True) else len(types[node.output[0]].shape) - 1
        absorbed = r != layer.index
        devs = [int(d) for d in np.flatnonzero(share[r] > 0)]
        split = len(devs) > 1
        bounds = mapping.bounds(graph, r) if split else []
        for k, d in enumerate(devs):
            if absorbed:
                act = _follower_part(
                    layer, node, statics, static_names, bounds[k], f".part{d}", axis, types
                )
                act.layer = layer.index
                programs[d].append(act)
                made_at[(act.makes[0], d)] = len(programs[d]) - 1
                continue
            for t in layer.inputs:
                src = where[t.name]
                if src != d and d not in has[t.name]:
                    transfer(t.name, src, d)
                    has[t.name].add(d)
            part = bounds[k] if split else None
            if part is not None and part[1] <= part[0]:
                raise DseError(
                    f"layer '{layer.name}': device {d} gets no output channel of "
                    f"{layer.out_channels}: give it a larger share or none"
                )
            act = _layer_nodes(
                layer, node, statics, static_names, part, f".part{d}" if split else "", types
            )
            act.layer = layer.index
            programs[d].append(act)
            for t in act.makes:
                made_at[(t, d)] = len(programs[d]) - 1
        c = int(owner[layer.index])
        nxt = int(graph.follower[layer.index])
        if split and nxt >= 0 and row[nxt] != nxt:
            continue  # no gather: its parts go on to the follower's parts
        if split:
            out = node.output[0]
            parts = [f"{out}.part{d}" for d in devs]
            need = readers[out] | ({c} if out in out_set else set())
            cat_owner = c in need or bool(need - set(devs))
            gatherers = sorted({e for e in devs if e in need} | ({c} if cat_owner else set()))
            for d, p in zip(devs, parts, strict=True):
                for e in gatherers:
                    if e != d:
                        post_send(p, d, e)
            for e in gatherers:
                gather = _Action(
                    "gather",
                    tensor=out,
                    parts=[(p, d, b) for d, p, b in zip(devs, parts, bounds, strict=True)],
                    axis=axis,
                    reads=[f"{out}.part{e}"] if e in devs else [],
                    makes=[out],
                )
                programs[e].append(gather)
                made_at[(out, e)] = len(programs[e]) - 1
            where[out], has[out] = c, set(gatherers)
            continue
        for t in node.output:
            if t:
                where[t], has[t] = c, {c}
                made_at[(t, c)] = made_at.get((t, c), len(programs[c]) - 1)

    out_names = [t.name for t in graph.outputs]
    for t in out_names:
        if t not in where:
            raise DseError(f"graph output '{t}' is not produced by any layer")
    used = sorted(set(programs) | {entry} | set(start_sends))
    consumers = first_readers(programs)
    rank_of = {d: r for r, d in enumerate(used)}
    builder = _Builder(types, model)
    tag_of: dict[str, int] = {}
    wire: dict[str, dict[str, Any]] = {}
    segments: dict[str, onnx.ModelProto] = {}
    blobs: dict[str, list[tuple[int, Blob]]] = {}
    ranks = []
    for d in used:
        steps, files = _device_steps(
            d,
            programs[d],
            start_sends[d],
            rank_of,
            tag_of,
            wire,
            types,
            out_names,
            where,
            builder,
            segments,
            blobs,
            {t.name for t in graph.inputs} if d == entry else set(),
            platform.devices[d].kind == "cpu",
            consumers,
        )
        dev = platform.devices[d]
        ranks.append(
            {
                "rank": rank_of[d],
                "device": dev.name,
                "device_index": d,
                "host": dev.host,
                "kind": dev.kind,
                "threads": dev.threads,
                "segments": files,
                "steps": steps,
            }
        )
    plan = {
        "version": PLAN_VERSION,
        "net": net.name,
        "fingerprint": net.fingerprint,
        "mapping_hash": mapping.ident(0),
        "platform": platform.name,
        "seed": seed,
        "inputs": [
            {"name": t.name, "shape": list(types[t.name].shape), "dtype": _dtype(types[t.name])}
            for t in graph.inputs
        ],
        "outputs": [
            {
                "name": t,
                "rank": rank_of[where[t]],
                "shape": list(types[t].shape),
                "dtype": _dtype(types[t]),
            }
            for t in out_names
        ],
        "entry_rank": rank_of[entry],
        "tensors": wire,
        "ranks": ranks,
    }
    return Deployment(plan, segments, blobs)


def first_readers(programs: dict[int, list[_Action]]) -> dict[tuple[str, int], set[str]]:
    """``(tensor, device) -> every tensor read by the device's first step that reads it`` (a
    computation, or a gather: its parts)."""
    out: dict[tuple[str, int], set[str]] = {}
    for e, actions in programs.items():
        for a in actions:
            if a.kind == "recv":
                continue
            reads = {p for p, _, _ in a.parts} if a.kind == "gather" else set(a.reads)
            for t in reads:
                out.setdefault((t, e), reads)
    return out


def send_deadlines(actions: list[_Action], consumers: dict[tuple[str, int], set[str]]) -> set[int]:
    """Indices of the compute actions after which a segment ends so its sends go out.

    A tensor sent to device e is needed there by e's first step that reads it; when that step
    also reads a tensor this device sends e later in the same run of computations (no receive
    or gather between), it cannot start before that one arrives, so both go out together after
    the later one (its deadline) and the work between stays one sub-model. A cut in a dense
    block of DenseNet-121 otherwise left a segment per layer (each layer's output is read by
    every later layer). Sends still precede every receive of this device: no deadlock."""
    ends: set[int] = set()
    start = 0
    while start < len(actions):
        stop = start
        while stop < len(actions) and actions[stop].kind == "compute":
            stop += 1
        sent_at = {(t, e): j for j in range(start, stop) for t, e in actions[j].sends}
        for k in range(start, stop):
            for t, e in actions[k].sends:
                later = (sent_at.get((u, e), -1) for u in consumers.get((t, e), ()))
                ends.add(max([k, *later]))
        start = stop + 1
    return ends


def _dtype(tt: TensorType) -> str:
    return np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).name


def _device_steps(
    d: int,
    actions: list[_Action],
    start_sends: list[tuple[str, int]],
    rank_of: dict[int, int],
    tag_of: dict[str, int],
    wire: dict[str, dict[str, Any]],
    types: dict[str, TensorType],
    out_names: list[str],
    where: dict[str, int],
    builder: _Builder,
    segments: dict[str, onnx.ModelProto],
    blobs: dict[str, list[tuple[int, Blob]]],
    initial: set[str],
    cpu: bool,
    consumers: dict[tuple[str, int], set[str]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """Cut one device's actions into segments; its steps (recv, run, send) in order."""
    r = rank_of[d]

    def tag(t: str) -> int:
        if t not in tag_of:
            tag_of[t] = len(tag_of)
            tt = types[t]
            wire[t] = {"shape": list(tt.shape), "dtype": _dtype(tt), "tag": tag_of[t]}
        return tag_of[t]

    def send_steps(sends: list[tuple[str, int]]) -> list[dict[str, Any]]:
        return [{"op": "send", "tensor": t, "to": rank_of[dst], "tag": tag(t)} for t, dst in sends]

    # group consecutive compute actions; cut before a recv and after every send deadline
    ends = send_deadlines(actions, consumers)
    groups: list[list[_Action] | _Action] = []
    current: list[_Action] = []
    for i, a in enumerate(actions):
        if a.kind in ("recv", "gather"):
            if current:
                groups.append(current)
                current = []
            groups.append(a)
            continue
        current.append(a)
        if i in ends:
            groups.append(current)
            current = []
    if current:
        groups.append(current)

    # which tensors each later step reads on this device, to know segment outputs
    reads_after: list[set[str]] = [set() for _ in groups]
    later: set[str] = {t for t in out_names if where[t] == d}
    for i in range(len(groups) - 1, -1, -1):
        reads_after[i] = set(later)
        g = groups[i]
        for a in g if isinstance(g, list) else [g]:
            later.update(a.reads)

    steps: list[dict[str, Any]] = send_steps(start_sends)
    files: list[str] = []
    for i, g in enumerate(groups):
        if isinstance(g, _Action) and g.kind == "gather":
            steps.append(
                {
                    "op": "gather",
                    "tensor": g.tensor,
                    "shape": list(types[g.tensor].shape),
                    "dtype": _dtype(types[g.tensor]),
                    "axis": g.axis,
                    "parts": [
                        {"tensor": p, "from": rank_of[src], "range": list(b)}
                        | ({} if src == d else {"tag": tag(p)})
                        for p, src, b in g.parts
                    ],
                }
            )
            steps.extend(send_steps(g.sends))  # the owner forwards the whole
            continue
        if isinstance(g, _Action):
            steps.append(
                {"op": "recv", "tensor": g.tensor, "from": rank_of[g.peer], "tag": tag(g.tensor)}
            )
            continue
        made: set[str] = set()
        inputs: list[str] = []
        nodes: list[onnx.NodeProto] = []
        inits: dict[str, Init] = {}
        consts: dict[str, onnx.NodeProto] = {}
        for a in g:
            for t in a.reads:
                if t not in made and t not in inputs:
                    inputs.append(t)
            nodes.extend(a.nodes)
            inits.update(a.inits)
            consts.update(a.consts)
            made.update(a.makes)
        sends = [s for a in g for s in a.sends]
        needed = reads_after[i] | {t for t, _ in sends}
        outputs = [t for a in g for t in a.makes if t in needed]
        if not outputs:
            outputs = [g[-1].makes[-1]]
        name = f"rank{r}_seg{len(files)}.onnx"
        segments[name], blobs[name] = builder.model(
            nodes, inits, consts, inputs, outputs, name[:-5], cpu
        )
        files.append(name)
        steps.append(
            {
                "op": "run",
                "segment": name,
                "inputs": inputs,
                "outputs": outputs,
                "layers": [a.layer for a in g],  # the graph layers (or parts) it computes
            }
        )
        steps.extend(send_steps(sends))
    _add_frees(steps, initial, {t for t in out_names if where[t] == d})
    return steps, files


def _add_frees(steps: list[dict[str, Any]], initial: set[str], keep: set[str]) -> None:
    """Mark on each step the local tensors last used there (``free``), graph outputs kept."""
    last: dict[str, int] = {}
    for i, s in enumerate(steps):
        for t in s.get("inputs", []) + ([s["tensor"]] if s["op"] == "send" else []):
            last[t] = i
        if s["op"] == "gather":  # reads its local part
            for part in s["parts"]:
                if "tag" not in part:
                    last[part["tensor"]] = i
        for t in s.get("outputs", []) + ([s["tensor"]] if s["op"] in ("recv", "gather") else []):
            last.setdefault(t, i)
    for t in initial:
        last.setdefault(t, -1)
    for t, i in last.items():
        if t in keep or i < 0:
            continue
        steps[i].setdefault("free", []).append(t)


def plan_json(plan: dict[str, Any]) -> str:
    return json.dumps(plan, indent=1)


def input_arrays(plan: dict[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    """The seeded input image(s): standard normal floats (integers: zeros)."""
    rng = np.random.default_rng(seed)
    out = {}
    for spec in plan["inputs"]:
        dtype = np.dtype(spec["dtype"])
        shape = tuple(spec["shape"])
        if dtype.kind == "f":
            out[spec["name"]] = rng.standard_normal(shape).astype(dtype)
        else:
            out[spec["name"]] = np.zeros(shape, dtype=dtype)
    return out


def whole_inputs(net: Net) -> list[str]:
    return [vi.name for vi in graph_inputs(net.model)]


def total_bytes(plan: dict[str, Any]) -> int:
    return sum(
        math.prod(plan["tensors"][s["tensor"]]["shape"])
        * np.dtype(plan["tensors"][s["tensor"]]["dtype"]).itemsize
        for r in plan["ranks"]
        for s in r["steps"]
        if s["op"] == "send"
    )
