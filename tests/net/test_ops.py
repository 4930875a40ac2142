"""The op registry: every op that splits by channels is sliced so its parts make the whole."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import tests.helpers.onnx_factory as f
from dse.net import ops
from dse.net.build import build_graph
from dse.runtime.rank.sessions import session

#: One node per case, whose output channels are cut into parts and compared with the whole:
#: (node, input shape, weights, extra constant inputs).
CASES = {
    "Conv": [
        (helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1]), [1, 4, 6, 6],
         {"w": [10, 4, 3, 3], "b": [10]}),
        # 3 groups of 4 output channels: parts cut across groups are rebuilt per group
        (helper.make_node("Conv", ["x", "w"], ["y"], group=3), [1, 6, 5, 5], {"w": [12, 2, 1, 1]}),
    ],
    "ConvTranspose": [
        (helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2]), [1, 4, 3, 3],
         {"w": [4, 6, 2, 2], "b": [6]}),
        (helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=2), [1, 4, 3, 3],
         {"w": [4, 3, 2, 2]}),
    ],
    "Gemm": [
        (helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1), [2, 8], {"w": [10, 8],
         "b": [10]}),
        (helper.make_node("Gemm", ["x", "w", "b"], ["y"]), [2, 8], {"w": [8, 10], "b": [1]}),
    ],
    "MatMul": [
        (helper.make_node("MatMul", ["x", "w"], ["y"]), [2, 3, 8], {"w": [8, 10]}),
    ],
}  # fmt: skip


def test_every_channel_split_op_has_cases():
    split_ops = {op for op, entry in ops.REGISTRY.items() if entry.channels is not None}
    assert split_ops == set(CASES)


def test_quantized_products_are_never_split():
    """The runtime cannot slice their per-channel scales and zero points."""
    for op in ("ConvInteger", "QLinearConv", "MatMulInteger", "QLinearMatMul"):
        assert ops.channel_split(op) is None and ops.lookup(op) is not None


@pytest.mark.parametrize(
    "op, case", [(op, i) for op, cases in CASES.items() for i in range(len(cases))]
)
def test_parts_concatenated_equal_the_whole(op, case):
    node, x_shape, w_shapes = CASES[op][case]
    inits = [f.weight(name, shape, seed=k) for k, (name, shape) in enumerate(w_shapes.items())]
    whole = f.model([node], {"x": x_shape}, ["y"], inits)
    layer = build_graph(whole, op).layers[0]
    assert layer.splittable
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    want = session(whole).run(None, {"x": x})[0]
    spec = ops.channel_split(op)
    shapes = {k: tuple(v) for k, v in w_shapes.items()}
    c = layer.out_channels
    bounds = [(0, 1), (1, c // 2 + 1), (c // 2 + 1, c)]  # uneven, across groups
    got = []
    for k, (c0, c1) in enumerate(bounds):
        part = spec.slice(node, op, (c0, c1), f".p{k}", "y", shapes, x_shape[1])
        values = {t.name: numpy_helper.to_array(t) for t in inits}
        part_inits = [numpy_helper.from_array(v, n) for n, v in part.constants.items()]
        for name, (src, cuts) in part.weights.items():
            arr = values[src]
            for axis, lo, hi in cuts:
                arr = np.take(arr, range(lo, hi), axis=axis)
            part_inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        part_inits += [t for t in inits if t.name in part.keep]
        model = f.model(part.nodes, {"x": x_shape}, ["y"], part_inits)
        got.append(session(model).run(None, {"x": x})[0])
    np.testing.assert_allclose(np.concatenate(got, axis=spec.axis), want, rtol=1e-5, atol=1e-5)
