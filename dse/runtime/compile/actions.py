"""What a device's program is made of (:class:`Action`) and how an op part's nodes and static
tensors go into one: the layer walk (:mod:`dse.runtime.programs`, :mod:`dse.runtime.bands`)
builds them, :mod:`dse.runtime.segments` cuts them into sub-models and plan steps."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from dse.net import ops
from dse.runtime.statics import EXTERNAL_MIN_BYTES, Blob, Init, Statics


@dataclass
class Action:
    """One step of a device's program: compute nodes (producing tensors), receive a tensor, or
    gather a split layer's parts into its whole."""

    kind: str  # "compute" | "recv" | "gather"
    layer: int = -1  # compute: the graph layer (whole, or a part of it); -1: rows cut to send
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


@dataclass
class Programs:
    """Every device's actions in order, the sends a device posts before its first action, and
    where each tensor lives whole (its owner)."""

    actions: defaultdict[int, list[Action]]
    start_sends: defaultdict[int, list[tuple[str, int]]]
    where: dict[str, int]


def static_adder(act: Action, statics: Statics) -> Callable[[str], None]:
    """Adds a static input, as it is, to ``act``: a Constant node's output as that node, a large
    initializer as a weight written to the sub-model's data file, a small one inline."""

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

    return static


def add_part(act: Action, part: ops.Part, statics: Statics, external: bool) -> None:
    """The nodes and tensors of one op part (:class:`dse.net.ops.Part`) into ``act``: its cut
    weights as weights of the sub-model's data file (``external``) or inline copies."""
    static = static_adder(act, statics)
    act.nodes.extend(part.nodes)
    for name, value in part.constants.items():
        act.inits[name] = numpy_helper.from_array(value, name)
    for name, (src, cuts) in part.weights.items():
        if external:
            act.inits[name] = Blob(statics, src, tuple(cuts))
        else:
            act.inits[name] = numpy_helper.from_array(Blob(statics, src, cuts).value(), name)
    for name in part.keep:
        static(name)
