"""Cutting a device's program into segments (sub-models) and the steps of its rank.

A segment ends before every step that waits for a remote tensor and after every step whose
output another device can use at once (:func:`send_deadlines`), so sends are posted as soon as
they are useful.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from dse.net.onnx_load import TensorType
from dse.runtime.actions import Action
from dse.runtime.plan import Gather, Part, Recv, Run, Send, Step, WireTensor
from dse.runtime.statics import Blob, Init
from dse.runtime.submodel import SubModelBuilder


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


def dtype_name(tt: TensorType) -> str:
    return np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).name


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
