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
