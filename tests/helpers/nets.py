"""Small ONNX networks the runtime and cluster tests cut into sub-models, and their mappings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from dse.mapping import Mappings, from_device_lists
from dse.net import Net, load_net
from tests.helpers.onnx_factory import model as onnx_model
from tests.helpers.onnx_factory import weight


def zoo_like(tmp_path: Path) -> Net:
    """Every sliceable op and the awkward cases: a grouped Conv (8 channels, 2 groups), a
    depthwise Conv, ConvTranspose with and without groups, Gemm with and without transB and
    with a full and a broadcast bias, a Constant-node bias, MatMul with a constant weight, a
    reshape whose shape is folded from Shape, two branches joined, and two graph outputs."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "wa", "ba"], ["a"], pads=[1, 1, 1, 1], name="conv_a"),
        n("Relu", ["a"], ["ra"], name="relu_a"),
        n("Conv", ["ra", "wg", "bg"], ["g"], pads=[1, 1, 1, 1], group=2, name="conv_g"),
        n("Conv", ["g", "wd"], ["d"], pads=[1, 1, 1, 1], group=8, name="conv_dw"),
        n("ConvTranspose", ["d", "wt", "bt"], ["t"], strides=[2, 2], group=2, name="convt_g"),
        n("ConvTranspose", ["ra", "wt2"], ["t2"], strides=[2, 2], name="convt"),
        n("Add", ["t", "t2"], ["s"], name="add"),
        n("GlobalAveragePool", ["s"], ["pool"], name="pool"),
        n("Shape", ["pool"], ["shp"], name="shape"),
        n("Slice", ["shp", "zero", "one"], ["shp0"], name="shp0"),
        n("Concat", ["shp0", "minus1"], ["newshape"], axis=0, name="newshape"),
        n("Reshape", ["pool", "newshape"], ["r"], name="reshape"),
        n(
            "Constant",
            [],
            ["c1"],
            value=numpy_helper.from_array(np.linspace(-1, 1, 10).astype(np.float32), "c1"),
            name="c1",
        ),
        n("Gemm", ["r", "w1", "c1"], ["f1"], name="gemm_n"),
        n("Gemm", ["f1", "w2", "c2"], ["f2"], transB=1, alpha=0.5, name="gemm_t"),
        n("MatMul", ["f2", "w3"], ["m"], name="matmul"),
    ]
    inits = [
        weight("wa", [8, 4, 3, 3], 1),
        weight("ba", [8], 2),
        weight("wg", [8, 4, 3, 3], 3),
        weight("bg", [8], 4),
        weight("wd", [8, 1, 3, 3], 5),
        weight("wt", [8, 3, 2, 2], 6),
        weight("bt", [6], 7),
        weight("wt2", [8, 6, 2, 2], 8),
        weight("w1", [6, 10], 9),
        weight("w2", [12, 10], 10),
        weight("c2", [1], 11),
        weight("w3", [12, 5], 12),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "one"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1"),
    ]
    ins = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 8, 8])]
    outs = [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in ("m", "s")]
    g = helper.make_graph(nodes, "zoo_like", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "zoo_like.onnx"
    onnx.save(m, path)
    return load_net({"name": "onnx", "path": str(path)})


def channel_local_net(tmp_path: Path) -> Net:
    """conv1 (12 ch) -> BatchNormalization -> Relu -> MaxPool -> conv2 -> Clip, and conv2's
    Clip read twice (a GlobalAveragePool and a Relu beside it, so neither follows); LRN after
    conv3 (across channels: never follows); Gemm -> Relu (elementwise: follows a Gemm)."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        n("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"], name="bn"),
        n("Relu", ["n1"], ["r1"], name="relu1"),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        n("Conv", ["p1", "w2"], ["c2"], name="conv2"),
        n("Clip", ["c2", "lo", "hi"], ["k2"], name="clip"),
        n("GlobalAveragePool", ["k2"], ["g"], name="gap"),
        n("Relu", ["k2"], ["side"], name="side"),
        n("Conv", ["side", "w3"], ["c3"], name="conv3"),
        n("LRN", ["c3"], ["l3"], size=3, name="lrn"),
        n("Flatten", ["g"], ["f"], name="flat"),
        n("Gemm", ["f", "wf"], ["y0"], transB=1, name="fc"),
        n("Relu", ["y0"], ["y"], name="relu_fc"),
    ]
    rng = np.random.default_rng(5)
    bn = [
        numpy_helper.from_array(a.astype(np.float32), nm)
        for nm, a in (
            ("s", rng.uniform(0.5, 2, 12)),
            ("bb", rng.standard_normal(12)),
            ("m", rng.standard_normal(12)),
            ("v", rng.uniform(0.5, 2, 12)),
        )
    ]
    inits = [
        weight("w1", [12, 3, 3, 3], 1),
        weight("b1", [12], 2),
        *bn,
        weight("w2", [10, 12, 1, 1], 3),
        numpy_helper.from_array(np.array(-0.5, dtype=np.float32), "lo"),
        numpy_helper.from_array(np.array(0.7, dtype=np.float32), "hi"),
        weight("w3", [6, 10, 1, 1], 4),
        weight("wf", [7, 10], 6),
    ]
    ins = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])]
    outs = [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in ("y", "l3")]
    m = helper.make_model(
        helper.make_graph(nodes, "cl", ins, outs, inits),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    m.ir_version = 8
    onnx.save(m, tmp_path / "cl.onnx")
    return load_net({"name": "onnx", "path": str(tmp_path / "cl.onnx")})


def dense_block_net(tmp_path: Path, early_reader: bool) -> Net:
    """A dense block: a -> b -> c (8 channels each), Concat(a, b, c) -> conv d, Concat(a, b, c,
    d) -> conv f; with ``early_reader``, e = Relu(a) is read beside f (stored before the first
    Concat, kept in file order)."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1], name="a"),
        n("Conv", ["a", "wb"], ["b"], pads=[1, 1, 1, 1], name="b"),
        n("Conv", ["b", "wc"], ["c"], pads=[1, 1, 1, 1], name="c"),
    ]
    outs = ["f"]
    if early_reader:
        nodes.append(n("Relu", ["a"], ["e"], name="e"))
        outs.append("e")
    nodes += [
        n("Concat", ["a", "b", "c"], ["cat"], axis=1, name="cat"),
        n("Conv", ["cat", "wd"], ["d"], name="d"),
        n("Concat", ["a", "b", "c", "d"], ["cat2"], axis=1, name="cat2"),
        n("Conv", ["cat2", "wf"], ["f"], name="f"),
    ]
    inits = [
        weight("wa", [8, 8, 3, 3], 1),
        weight("wb", [8, 8, 3, 3], 2),
        weight("wc", [8, 8, 3, 3], 3),
        weight("wd", [8, 24, 1, 1], 4),
        weight("wf", [8, 32, 1, 1], 5),
    ]
    path = tmp_path / f"dense{int(early_reader)}.onnx"
    onnx.save(onnx_model(nodes, {"x": [1, 8, 6, 6]}, outs, inits), path)
    return load_net({"name": "onnx", "path": str(path), "order": "file"})


def small_net(tmp: Path) -> Net:
    """conv(3->16) relu conv(16->32) relu conv(32->8) on 32x32: three splittable layers and
    tensors of 64 and 128 kB between them."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        n("Relu", ["c2"], ["r2"], name="relu2"),
        n("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], name="conv3"),
    ]
    inits = [weight("w1", [16, 3, 3, 3], 1), weight("b1", [16], 2), weight("w2", [32, 16, 3, 3], 3)]
    inits += [weight("b2", [32], 4), weight("w3", [8, 32, 3, 3], 5), weight("b3", [8], 6)]
    path = tmp / "small.onnx"
    onnx.save(onnx_model(nodes, {"x": [1, 3, 32, 32]}, ["c3"], inits), path)
    return load_net({"name": "onnx", "path": str(path)})


def aba_batch(net: Net) -> Mappings:
    """One mapping of ``net`` on two devices: its layers alternate, 0, 1, 0, ... (A -> B -> A)."""
    n = len(net.graph)
    return from_device_lists(net.graph, 2, [[[i % 2] for i in range(n)]])


def on_devices(net: Net, n_devices: int, *layer_devices: list[list[int]]) -> Mappings:
    """One mapping of ``net`` per argument: each layer's list of devices."""
    return from_device_lists(net.graph, n_devices, list(layer_devices))


def heavy_net(tmp: Path) -> Net:
    """conv(3->4) relu flatten, then a Gemm of 6000 x 4096 weights (94 MiB)."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Flatten", ["r1"], ["f"], name="flat"),
        n("Gemm", ["f", "wg", "bg"], ["g"], transB=1, name="gemm"),
    ]
    inits = [weight("w1", [4, 3, 3, 3], 1), weight("b1", [4], 2)]
    inits += [weight("wg", [6000, 4 * 32 * 32], 3), weight("bg", [6000], 4)]
    path = tmp / "heavy.onnx"
    onnx.save(onnx_model(nodes, {"x": [1, 3, 32, 32]}, ["g"], inits), path)
    return load_net({"name": "onnx", "path": str(path)})
