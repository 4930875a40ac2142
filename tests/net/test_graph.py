"""Layer graph construction: order, edges, folding, dynamic shapes, external data, names."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import tests.helpers.onnx_factory as f
from dse.errors import DseError
from dse.net import load_net
from dse.net.build import build_graph
from dse.net.onnx_load import fix_input_shapes, read_model


def fork_join():
    """conv -> (relu | sigmoid) -> add -> gemm, node names missing on purpose."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["a"]),
        helper.make_node("Sigmoid", ["c"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Flatten", ["s"], ["fl"]),
        helper.make_node("Gemm", ["fl", "g"], ["y"], transB=1),
    ]
    inits = [f.weight("w", [4, 3, 3, 3]), f.weight("g", [10, 4 * 6 * 6])]
    return f.model(nodes, {"x": [1, 3, 6, 6]}, ["y"], inits)


def test_edges_carry_tensor_bytes():
    g = build_graph(fork_join(), "fj")
    assert g.names == ("Conv_0", "Relu_0", "Sigmoid_0", "Add_0", "Flatten_0", "Gemm_0")
    act = 4 * 6 * 6 * 4  # 1x4x6x6 float32
    edges = sorted(
        zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_bytes.tolist(), strict=True)
    )
    assert edges == [
        (-1, 0, 3 * 36 * 4),
        (0, 1, act),
        (0, 2, act),
        (1, 3, act),
        (2, 3, act),
        (3, 4, act),
        (4, 5, act),
    ]
    assert g.output_bytes.tolist() == [act] * 5 + [40]
    assert g.totals() == {
        "macs": 4 * 36 * 27 + 3 * 144 + 10 * 144,
        "params": 108 + 1440,
        "weight_bytes": (108 + 1440) * 4,
        "layers": 6,
    }
    assert g.splittable.tolist() == [True, False, False, False, False, True]
    with pytest.raises(ValueError):
        g.macs[0] = 1  # immutable


def test_file_order_is_repaired_to_topological():
    m = fork_join()
    nodes = list(m.graph.node)
    m.graph.ClearField("node")
    m.graph.node.extend([nodes[3], nodes[0], nodes[2], nodes[1], nodes[5], nodes[4]])
    g = build_graph(m, "shuffled")
    pos = {name: i for i, name in enumerate(g.names)}
    assert pos["Conv_0"] < pos["Relu_0"] < pos["Add_0"] < pos["Flatten_0"] < pos["Gemm_0"]
    assert pos["Sigmoid_0"] < pos["Add_0"]


def test_names_are_kept_and_deduplicated():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="act"),
        helper.make_node("Relu", ["a"], ["b"], name="act"),
        helper.make_node("Relu", ["b"], ["c"]),
    ]
    g = build_graph(f.model(nodes, {"x": [2, 2]}, ["c"]), "n")
    assert g.names == ("act", "act_1", "Relu_0")


def dynamic_model():
    """Conv on [N,3,H,W], then a Reshape whose shape is computed from Shape/Gather/Concat."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c"], ["p"]),
        helper.make_node("Shape", ["p"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shp"], axis=0),
        helper.make_node("Reshape", ["p", "shp"], ["r"]),
        helper.make_node("Gemm", ["r", "g"], ["y"], transB=1),
    ]
    inits = [
        f.weight("w", [8, 3, 3, 3]),
        f.weight("g", [5, 8]),
        f.const("zero", 0),
        f.const("axes", [0]),
        f.const("minus1", [-1]),
    ]
    return f.model(nodes, {"x": ["N", 3, "H", "W"]}, ["y"], inits)


def test_dynamic_input_needs_a_shape():
    with pytest.raises(DseError, match=r"input 'x' has dynamic shape \[N,3,H,W\].*input_shape"):
        fix_input_shapes(dynamic_model(), None)


def test_dynamic_input_fixed_and_shape_subgraph_folded():
    m = dynamic_model()
    fix_input_shapes(m, [2, 3, 32, 16])
    g = build_graph(m, "dyn")
    # Shape/Gather/Unsqueeze/Concat are folded away, leaving four compute layers
    assert g.ops == ("Conv", "GlobalAveragePool", "Reshape", "Gemm")
    assert g.layers[0].output_shape == (2, 8, 32, 16)
    assert g.layers[0].macs == 2 * 8 * 32 * 16 * 27
    assert g.layers[2].output_shape == (2, 8)
    assert g.layers[3].macs == 2 * 5 * 8


def test_input_shape_conflicts_are_reported():
    m = fork_join()
    with pytest.raises(DseError, match="conflicts"):
        fix_input_shapes(m, [1, 3, 7, 7])
    with pytest.raises(DseError, match="rank"):
        fix_input_shapes(fork_join(), [1, 3, 6])
    with pytest.raises(DseError, match="unknown input 'nope'"):
        fix_input_shapes(fork_join(), {"nope": [1]})


def test_constant_node_weights_count_as_weights():
    w = helper.make_node("Constant", [], ["w"], value=f.weight("wv", [6, 4]))
    mm = helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")
    g = build_graph(f.model([w, mm], {"x": [3, 6]}, ["y"]), "c")
    assert g.names == ("fc",)
    assert g.layers[0].params == 24 and g.layers[0].weight_bytes == 96
    assert g.layers[0].splittable and g.layers[0].out_channels == 4


def test_shapes_beyond_static_inference_are_measured_with_onnxruntime(tmp_path):
    # Resize whose sizes are computed from the runtime input values via NonZero/Shape: static
    # inference cannot know them, onnxruntime can.
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Shape", ["nz"], ["s"]),
        helper.make_node("Slice", ["s", "one", "two"], ["count"]),
        helper.make_node("Concat", ["base", "count", "count"], ["sizes"], axis=0),
        helper.make_node("Resize", ["r", "", "", "sizes"], ["y"], mode="nearest"),
    ]
    mask = f.numpy_helper.from_array(np.array([1, 0, 1, 1, 0], dtype=np.float32), "mask")
    inits = [mask, f.const("one", [1]), f.const("two", [2]), f.const("base", [1, 2])]
    m = f.model(nodes, {"x": [1, 2, 4, 4]}, ["y"], inits)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    g = load_net({"name": "onnx", "path": str(path)}).graph
    assert g.layers[-1].op == "Resize"
    assert g.layers[-1].output_shape == (1, 2, 3, 3)  # three non-zeros in the mask


def test_external_data_is_not_loaded(tmp_path):
    m = fork_join()
    path = tmp_path / "ext.onnx"
    onnx.save_model(
        m,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="ext.bin",
        size_threshold=0,
    )
    (tmp_path / "ext.bin").write_bytes(b"")  # weights gone: loading must not need them
    g = load_net({"name": "onnx", "path": str(path), "input_shape": None}).graph
    assert g.totals()["params"] == 108 + 1440


def test_model_over_2gb_with_external_data_loads(tmp_path):
    # a 2.4 GB weight in a sparse file: loading reads the graph, never the weights
    n_out, n_in = 4096, 150_000
    w = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[n_out, n_in])
    w.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(n_out * n_in * 4))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    node = helper.make_node("Gemm", ["x", "w"], ["y"], transB=1, name="fc")
    onnx.save(f.model([node], {"x": [1, n_in]}, ["y"], [w]), tmp_path / "big.onnx")
    with open(tmp_path / "w.bin", "wb") as fh:
        fh.truncate(n_out * n_in * 4)
    g = load_net({"name": "onnx", "path": str(tmp_path / "big.onnx")}).graph
    assert g.totals()["weight_bytes"] == n_out * n_in * 4 > 2**31
    assert g.layers[0].macs == n_out * n_in


def test_bad_files(tmp_path):
    with pytest.raises(DseError, match="not found"):
        read_model(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xfe this is not protobuf \x00\x01")
    with pytest.raises(DseError, match="not an ONNX model"):
        read_model(junk)
    empty = tmp_path / "empty.onnx"
    onnx.save(f.model([], {"x": [1]}, []), empty)
    with pytest.raises(DseError, match="no nodes"):
        read_model(empty)


def test_uninferable_shapes(tmp_path):
    # an op from an unknown domain: neither static inference nor onnxruntime knows its shape
    nodes = [
        helper.make_node("Mystery", ["x"], ["m"], domain="com.example"),
        helper.make_node("Relu", ["m"], ["y"]),
    ]
    m = f.model(nodes, {"x": [1, 3, 8, 8]}, ["y"])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    path = tmp_path / "bad.onnx"
    onnx.save(m, path)
    with pytest.raises(DseError, match="cannot be inferred"):
        load_net({"name": "onnx", "path": str(path)})


def test_inconsistent_conv_is_reported():
    # a Conv whose weight expects 5 input channels but receives 3
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv1")
    m = f.model([node], {"x": [1, 3, 8, 8]}, ["y"], [f.weight("w", [4, 5, 3, 3])])
    with pytest.raises(DseError, match="layer 'conv1'.*receives 3 input channels"):
        build_graph(m, "bad")


def test_load_net_runs_branches_in_a_memory_aware_order(tmp_path):
    from dse.net.order import peak_memory

    path = tmp_path / "branches.onnx"
    onnx.save(f.two_branches(), path)
    stored = load_net({"name": "onnx", "path": str(path), "order": "file"}).graph
    aware = load_net({"name": "onnx", "path": str(path)}).graph
    assert stored.names == ("A", "B", "C", "B2", "C2", "E")
    assert aware.names in (("A", "B", "B2", "C", "C2", "E"), ("A", "C", "C2", "B", "B2", "E"))
    assert peak_memory(stored, range(6)) == 21e6  # A, B and C live together
    assert peak_memory(aware, range(6)) == 12e6


def test_layers_name_their_onnx_nodes_across_reloads(tmp_path):
    from onnx import helper

    import tests.helpers.onnx_factory as fac
    from dse.net import load_net

    # unnamed nodes, stored out of topological order
    nodes = [
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["x", "w"], ["a"]),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    path = tmp_path / "m.onnx"
    onnx.save(fac.model(nodes, {"x": [1, 2, 4, 4]}, ["y"], [fac.weight("w", [3, 2, 1, 1])]), path)
    cfg = {"name": "onnx", "path": str(path)}
    first, again = load_net(cfg), load_net(cfg)
    assert [(ly.name, ly.node) for ly in first.graph] == [(ly.name, ly.node) for ly in again.graph]
    assert [ly.node for ly in first.graph] == [1, 0, 2]
    weighted = first.weighted_model()
    for layer in first.graph:
        node = weighted.graph.node[layer.node]
        assert node.op_type == layer.op and list(node.output) == [t.name for t in layer.outputs]
    zoo = load_net({"name": "alexnet"})
    for layer in zoo.graph:
        assert zoo.model.graph.node[layer.node].name == layer.name


def _external(name: str, dims: list[int], location: str, length: int | None = None):
    t = onnx.TensorProto(name=name, data_type=onnx.TensorProto.FLOAT, dims=dims)
    t.data_location = onnx.TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    if length is not None:
        t.external_data.add(key="length", value=str(length))
    return t


def test_external_weights_must_agree_with_their_shape_and_stay_in_the_folder(tmp_path):
    node = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    cases = {
        "short.onnx": (_external("w", [4], "w.bin", length=8), "declares 16 bytes"),
        "out.onnx": (_external("w", [4], "../w.bin"), "outside the model's folder"),
        "abs.onnx": (_external("w", [4], str(tmp_path / "w.bin")), "outside the model's folder"),
    }
    (tmp_path / "w.bin").write_bytes(bytes(16))
    for name, (w, words) in cases.items():
        onnx.save(f.model([node], {"x": [4]}, ["y"], [w]), tmp_path / name)
        with pytest.raises(DseError, match=words):
            read_model(tmp_path / name)


def test_an_unused_weight_does_not_lift_the_measuring_budget(tmp_path, monkeypatch):
    """Shapes measured by running: the child's memory limit is the budget plus 3x the weights
    nodes read; a weight nobody reads, declaring 4 TiB, adds nothing."""
    from dse.net import onnx_load

    seen = {}

    def fake_measure(path, base_dir, inputs, names, memory, seconds):
        seen["memory"] = memory
        return {n: ([4], onnx.TensorProto.FLOAT) for n in names}

    monkeypatch.setattr(onnx_load, "measure_shapes", fake_measure)
    used = onnx.numpy_helper.from_array(np.ones(4, np.float32), "w")
    huge = _external("unused", [2**20, 2**20], "huge.bin")
    node = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    model = f.model([node], {"x": [4]}, ["y"], [used, huge])
    onnx_load.run_for_types(model, tmp_path, ["y"], onnx_load.Budget(memory_mb=64))
    assert seen["memory"] == 64 * 2**20 + 3 * 16
