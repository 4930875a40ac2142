"""Cutting a device's program into segments and the steps of its rank, and each segment's
sub-model: its nodes, inputs and outputs as an ONNX model, weights external.

A segment ends before every step that waits for a remote tensor and after every step whose
output another device can use at once (:func:`send_deadlines`), so sends are posted as soon as
they are useful.

On a cpu, a sub-model input that two or more channel Concats read first passes an identity
depthwise 1x1 Conv (weights 1, exact). onnxruntime's CPU provider runs convolutions in a blocked
layout (NCHWc) and keeps a Concat, and the BatchNormalization and Relu after it, in that layout
only when every input of the Concat comes from a blocked node; a sub-model's inputs do not, so
without it DenseNet's dense layers after a cut run unfused and slower. A sub-model of one dense
layer (one Concat) is left alone: there the pass over every input costs more than it saves.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dse.net.onnx_load import TensorType, append_external
from dse.runtime.compile.actions import Action
from dse.runtime.compile.statics import Blob, Init
from dse.runtime.deployment.plan import (
    DType,
    Gather,
    Part,
    Recv,
    Run,
    Send,
    Step,
    WireTensor,
    dtype,
)

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


def first_readers(programs: dict[int, list[Action]]) -> dict[tuple[str, int], set[str]]:
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


def send_deadlines(actions: list[Action], consumers: dict[tuple[str, int], set[str]]) -> set[int]:
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


def dtype_name(tt: TensorType) -> DType:
    return dtype(np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).name)


@dataclass
class Cutter:
    """What cutting every device's program shares: ranks by device, tensor types, the graph
    outputs and their owners, the sub-model builder and the first readers (:func:`first_readers`);
    it collects the tensors that cross ranks (tagged in order of first use), the sub-models
    and their weights."""

    rank_of: dict[int, int]
    types: dict[str, TensorType]
    out_names: list[str]
    where: dict[str, int]
    builder: SubModelBuilder
    consumers: dict[tuple[str, int], set[str]]
    tensors: dict[str, WireTensor] = field(default_factory=dict)
    segments: dict[str, onnx.ModelProto] = field(default_factory=dict)
    blobs: dict[str, list[tuple[int, Blob]]] = field(default_factory=dict)

    def tag(self, t: str) -> int:
        if t not in self.tensors:
            tt = self.types[t]
            self.tensors[t] = WireTensor(tuple(tt.shape), dtype_name(tt), len(self.tensors))
        return self.tensors[t].tag

    def sends(self, sends: list[tuple[str, int]]) -> list[Step]:
        return [Send(t, self.rank_of[dst], self.tag(t)) for t, dst in sends]

    def steps(
        self,
        d: int,
        actions: list[Action],
        start_sends: list[tuple[str, int]],
        initial: set[str],
        cpu: bool,
    ) -> tuple[list[Step], list[str]]:
        """Cut device ``d``'s actions into segments; its steps (recv, run, send...) in order
        and its sub-models' file names. ``initial``: the tensors it holds at the start."""
        groups = _groups(actions, send_deadlines(actions, self.consumers))
        # which tensors each later step reads on this device, to know segment outputs
        reads_after: list[set[str]] = [set() for _ in groups]
        later: set[str] = {t for t in self.out_names if self.where[t] == d}
        for i in range(len(groups) - 1, -1, -1):
            reads_after[i] = set(later)
            g = groups[i]
            for a in g if isinstance(g, list) else [g]:
                later.update(a.reads)
        steps: list[Step] = self.sends(start_sends)
        files: list[str] = []
        for i, g in enumerate(groups):
            if isinstance(g, Action) and g.kind == "gather":
                steps.append(self._gather(d, g))
                steps.extend(self.sends(g.sends))  # the owner forwards the whole
            elif isinstance(g, Action):
                steps.append(Recv(g.tensor, self.rank_of[g.peer], self.tag(g.tensor)))
            else:
                name = f"rank{self.rank_of[d]}_seg{len(files)}.onnx"
                steps.append(self._segment(name, g, reads_after[i], cpu))
                files.append(name)
                steps.extend(self.sends([s for a in g for s in a.sends]))
        add_frees(steps, initial, {t for t in self.out_names if self.where[t] == d})
        return steps, files

    def _gather(self, d: int, g: Action) -> Gather:
        tt = self.types[g.tensor]
        parts = [
            Part(p, self.rank_of[src], b, None if src == d else self.tag(p))
            for p, src, b in g.parts
        ]
        return Gather(g.tensor, tuple(tt.shape), dtype_name(tt), g.axis, parts)

    def _segment(self, name: str, g: list[Action], reads_after: set[str], cpu: bool) -> Run:
        """One sub-model of the compute actions ``g``; its run step."""
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
        needed = reads_after | {t for a in g for t, _ in a.sends}
        outputs = [t for a in g for t in a.makes if t in needed]
        if not outputs:
            outputs = [g[-1].makes[-1]]
        self.segments[name], self.blobs[name] = self.builder.model(
            nodes, inits, consts, inputs, outputs, name[:-5], cpu
        )
        return Run(name, inputs, outputs, [a.layer for a in g if a.layer >= 0])


def _groups(actions: list[Action], ends: set[int]) -> list[list[Action] | Action]:
    """Consecutive compute actions grouped; a group ends before a receive or gather and after
    every send deadline (``ends``)."""
    groups: list[list[Action] | Action] = []
    current: list[Action] = []
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
    return groups


def add_frees(steps: list[Step], initial: set[str], keep: set[str]) -> None:
    """Mark on each step the local tensors last used there (``free``), graph outputs kept."""
    last: dict[str, int] = {}
    for i, s in enumerate(steps):
        reads = s.inputs if isinstance(s, Run) else [s.tensor] if isinstance(s, Send) else []
        for t in reads:
            last[t] = i
        if isinstance(s, Gather):  # reads its local part
            for part in s.parts:
                if part.tag is None:
                    last[part.tensor] = i
        makes = s.outputs if isinstance(s, Run) else [] if isinstance(s, Send) else [s.tensor]
        for t in makes:
            last.setdefault(t, i)
    for t in initial:
        last.setdefault(t, -1)
    for t, i in last.items():
        if t in keep or i < 0:
            continue
        steps[i].free.append(t)
