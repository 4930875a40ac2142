"""One device's sub-model: its nodes, inputs and outputs as an ONNX model, weights external.

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

from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dse.net.onnx_load import TensorType, append_external
from dse.runtime.statics import Blob, Init

#: Channel counts onnxruntime's blocked layout takes (its block is 8 or 16 channels).
BLOCK = 8
#: An input passes the identity Conv when this many Concats read it: a sub-model of one
#: dense layer (one Concat of many inputs) would pay a pass over every input for one Concat.
MIN_CONCATS = 2


class SubModelBuilder:
    """Builds sub-models of one net (its tensor types, opsets and IR version)."""

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
            for idx, blob in blobs:
                append_external(f, model.graph.initializer[idx], blob.value())
    path.write_bytes(model.SerializeToString())
