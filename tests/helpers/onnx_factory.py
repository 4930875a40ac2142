"""Tiny hand-made ONNX models for tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def weight(name: str, shape: Sequence[int], seed: int = 0) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def const(name: str, values: Sequence[int] | int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: dict[str, Sequence[int | str] | None],
    outputs: Sequence[str],
    inits: Sequence[onnx.TensorProto] = (),
    opset: int = 17,
) -> onnx.ModelProto:
    """A model with float inputs of the given (possibly symbolic) shapes."""
    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    graph = helper.make_graph(list(nodes), "test", ins, outs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def two_branches(order: Sequence[str] = ("A", "B", "C", "B2", "C2", "E")) -> onnx.ModelProto:
    """A (1 MB) feeds branches B (10 MB) -> B2 (1 MB) and C (10 MB) -> C2 (1 MB), joined by E.

    Stored in ``order``: run as stored, the default keeps both 10 MB tensors live (21 MB);
    finishing one branch first needs 12 MB.
    """
    mb = 250_000  # float32 elements in 1 MB
    nodes = {
        "A": helper.make_node("Relu", ["x"], ["A"], name="A"),
        "B": helper.make_node("Tile", ["A", "ten"], ["B"], name="B"),
        "C": helper.make_node("Tile", ["A", "ten"], ["C"], name="C"),
        "B2": helper.make_node("Slice", ["B", "s0", "s1"], ["B2"], name="B2"),
        "C2": helper.make_node("Slice", ["C", "s0", "s1"], ["C2"], name="C2"),
        "E": helper.make_node("Add", ["B2", "C2"], ["E"], name="E"),
    }
    inits = [const("ten", [10]), const("s0", [0]), const("s1", [mb])]
    return model([nodes[n] for n in order], {"x": [mb]}, ["E"], inits)


def conv_relu_chain() -> onnx.ModelProto:
    """conv -> relu x 3 with 256 channels at 16x16: 5.4 MB of weights, 151 M MACs per conv;
    on 3 devices 9,261 distinct naive mappings (7 device sets per conv, 3 per relu)."""
    nodes, inits, prev = [], [], "x"
    for i, (cin, cout) in enumerate([(64, 256), (256, 256), (256, 256)]):
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], name=f"conv{i}"))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        inits.append(weight(f"w{i}", [cout, cin, 3, 3], seed=i))
        prev = f"r{i}"
    return model(nodes, {"x": [1, 64, 16, 16]}, [prev], inits)
