"""Tests for the zoo: architecture sizes, shapes, MACs, hollowness and weight materialization."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper, shape_inference

from dse.errors import DseError
from dse.net import load_net
from dse.net.zoo import NETS, NetBuilder, build, materialize
from dse.net.zoo.materialize import fill_weights
from tests.helpers.cli import run_module
from tests.helpers.hostile import assert_one_line

# Published learnable-parameter counts (torchvision / Caffe).
PARAMS = {
    "alexnet": 60_965_224,
    "vgg16": 138_357_544,
    "resnet50": 25_557_032,
    "mobilenetv2": 3_504_872,
    "densenet121": 7_978_856,
    "googlenet": 6_624_904,
}
# Published multiply-accumulates of Conv + Gemm at 224x224.
MACS = {
    "alexnet": 724e6,
    "vgg16": 15.47e9,
    "resnet50": 4.09e9,
    "mobilenetv2": 300.8e6,
    "densenet121": 2.87e9,
    "googlenet": 1.50e9,
}


def dims_of(v: onnx.ValueInfoProto) -> list[int]:
    return [d.dim_value for d in v.type.tensor_type.shape.dim]


def infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """Strict ONNX shape inference from scratch (the builder's own value_info removed)."""
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    del bare.graph.value_info[:]
    return shape_inference.infer_shapes(bare, strict_mode=True)


def conv_gemm_macs(model: onnx.ModelProto) -> int:
    """Conv: N*Cout*Hout*Wout*(Cin/groups)*kh*kw; Gemm: M*N*K, from ONNX-inferred shapes."""
    inferred = infer(model)
    shapes = {v.name: dims_of(v) for v in [*inferred.graph.value_info, *inferred.graph.output]}
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    macs = 0
    for node in inferred.graph.node:
        if node.op_type == "Conv":
            macs += math.prod(shapes[node.output[0]]) * math.prod(weights[node.input[1]][1:])
        elif node.op_type == "Gemm":
            macs += math.prod(shapes[node.output[0]]) * weights[node.input[1]][1]
    return macs


def param_count(model: onnx.ModelProto) -> int:
    """Elements of all non-scalar initializers except BatchNormalization running statistics.

    Published counts are torch parameters; BN running mean/var are buffers, not parameters.
    """
    stats = {i for n in model.graph.node if n.op_type == "BatchNormalization" for i in n.input[3:]}
    return sum(math.prod(t.dims) for t in model.graph.initializer if t.dims and t.name not in stats)


@pytest.fixture(scope="module", params=NETS)
def net(request: pytest.FixtureRequest) -> tuple[str, onnx.ModelProto]:
    return request.param, build(request.param)


def test_nets_listed() -> None:
    expected = ("alexnet", "densenet121", "googlenet", "mobilenetv2", "resnet50", "vgg16")
    assert expected == NETS == tuple(sorted(PARAMS))


def test_param_count(net: tuple[str, onnx.ModelProto]) -> None:
    name, model = net
    assert param_count(model) == PARAMS[name]


def test_output_shape_strict_inference(net: tuple[str, onnx.ModelProto]) -> None:
    _, model = net
    inferred = shape_inference.infer_shapes(model, strict_mode=True)  # also checks value_info
    assert [o.name for o in inferred.graph.output] == ["output"]
    assert dims_of(inferred.graph.output[0]) == [1, 1000]
    assert [i.name for i in model.graph.input] == ["input"]
    assert dims_of(model.graph.input[0]) == [1, 3, 224, 224]


def test_builder_shapes_match_onnx(net: tuple[str, onnx.ModelProto]) -> None:
    _, model = net
    ours = {v.name: dims_of(v) for v in model.graph.value_info}
    theirs = {v.name: dims_of(v) for v in infer(model).graph.value_info}
    assert ours == theirs


def test_macs_near_published(net: tuple[str, onnx.ModelProto]) -> None:
    name, model = net
    assert conv_gemm_macs(model) == pytest.approx(MACS[name], rel=0.03)


def test_hollow_and_well_formed(net: tuple[str, onnx.ModelProto]) -> None:
    _, model = net
    assert model.ir_version == 8
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    for t in model.graph.initializer:
        assert t.data_type == onnx.TensorProto.FLOAT
        assert not t.raw_data and not t.float_data and not t.HasField("data_location")
    names = [n.name for n in model.graph.node]
    assert all(names) and len(set(names)) == len(names)
    assert [n.name for n in build(net[0]).graph.node] == names  # deterministic


def test_alexnet_node_sequence() -> None:
    model = build("alexnet")
    ops = [n.op_type for n in model.graph.node]
    conv, pool, lrn = ["Conv", "Relu"], ["MaxPool"], ["LRN"]
    fc = ["Gemm", "Relu", "Dropout"]
    expected = [
        *conv, *lrn, *pool, *conv, *lrn, *pool, *conv, *conv, *conv, *pool,
        "Flatten", *fc, *fc, "Gemm", "Softmax",
    ]  # fmt: skip
    assert ops == expected and len(ops) == 24
    groups = [
        next((a.i for a in n.attribute if a.name == "group"), 1)
        for n in model.graph.node
        if n.op_type == "Conv"
    ]
    assert groups == [1, 2, 1, 2, 2]
    pads = [
        list(next(a.ints for a in n.attribute if a.name == "pads"))
        for n in model.graph.node
        if n.op_type == "MaxPool"
    ]
    assert pads == [[0, 0, 1, 1]] * 3
    fc6 = next(t for t in model.graph.initializer if t.name == "fc6.weight")
    assert list(fc6.dims) == [4096, 9216]


def test_unknown_net(tmp_path: Path) -> None:
    with pytest.raises(DseError) as err:
        build("nope")
    msg = str(err.value)
    assert "\n" not in msg and "'nope'" in msg
    assert ", ".join(NETS) in msg
    with pytest.raises(DseError, match="unknown network 'nope'"):
        materialize("nope", cache_dir=tmp_path)


def test_macs_agree_with_onnx_tool(tmp_path: Path) -> None:
    onnx_tool = pytest.importorskip("onnx_tool")
    path = materialize("mobilenetv2", cache_dir=tmp_path)
    graph = onnx_tool.Model(str(path)).graph
    graph.shape_infer({"input": np.zeros((1, 3, 224, 224), np.float32)})
    graph.profile()
    # onnx-tool also counts the Gemm bias add; its Conv count matches the formula exactly.
    tool = sum(
        float(np.sum(n.macs)) for n in graph.nodemap.values() if n.op_type in ("Conv", "Gemm")
    )
    assert tool == pytest.approx(conv_gemm_macs(build("mobilenetv2")), rel=0.01)


def run(path: Path) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224), dtype=np.float32)
    return sess.run(None, {"input": x})[0]


def test_materialize_cached_and_deterministic(tmp_path: Path) -> None:
    path = materialize("mobilenetv2", cache_dir=tmp_path)
    assert path == tmp_path / "mobilenetv2-seed0.onnx"
    onnx.checker.check_model(str(path))
    y = run(path)
    assert y.shape == (1, 1000) and np.isfinite(y).all()

    mtime = path.stat().st_mtime_ns
    assert materialize("mobilenetv2", cache_dir=tmp_path) == path
    assert path.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp files left

    again = materialize("mobilenetv2", cache_dir=tmp_path / "other")
    assert again.read_bytes() == path.read_bytes()
    other_seed = materialize("mobilenetv2", seed=1, cache_dir=tmp_path)
    assert other_seed.name == "mobilenetv2-seed1.onnx"
    assert other_seed.read_bytes() != path.read_bytes()


def test_materialize_with_external_weights_is_the_same_network(tmp_path: Path) -> None:
    """The weights in a data file beside the model (each tensor at a 4 KiB boundary): the
    same tensors, and the same outputs in onnxruntime, as the one-file model of the seed."""
    path = materialize("mobilenetv2", cache_dir=tmp_path, external=True)
    data = tmp_path / "mobilenetv2-seed0-external.data"
    assert path == tmp_path / "mobilenetv2-seed0-external.onnx" and data.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, data.name])
    assert path.stat().st_size < 100_000  # the graph only
    one_file = materialize("mobilenetv2", cache_dir=tmp_path)
    inline = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(one_file)).graph.initializer}
    outside = onnx.load(str(path), load_external_data=False).graph.initializer
    for t in outside:
        where = {e.key: e.value for e in t.external_data}
        assert where["location"] == data.name and int(where["offset"]) % 4096 == 0
    apart = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    assert apart.keys() == inline.keys()
    assert all(np.array_equal(apart[k], inline[k]) for k in inline)
    np.testing.assert_array_equal(run(path), run(one_file))
    assert materialize("mobilenetv2", cache_dir=tmp_path, external=True) == path


def test_materialize_weights(tmp_path: Path) -> None:
    model = onnx.load(str(materialize("mobilenetv2", cache_dir=tmp_path)))
    arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert all(a.dtype == np.float32 for a in arrays.values())
    assert float(arrays["relu6.min"]) == 0.0 and float(arrays["relu6.max"]) == 6.0
    assert np.all(arrays["features.0.1.weight"] == 1) and np.all(arrays["features.0.1.bias"] == 0)
    assert np.all(arrays["features.0.1.running_var"] == 1)
    assert np.all(arrays["classifier.1.bias"] == 0)
    w = arrays["classifier.1.weight"]  # He normal, fan_in 1280
    assert w.std() == pytest.approx(math.sqrt(2 / 1280), rel=0.02)


def test_materialize_default_cache_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSE_CACHE", str(tmp_path / "env"))
    assert materialize("mobilenetv2") == tmp_path / "env" / "mobilenetv2-seed0.onnx"


def test_a_cache_that_cannot_be_written_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Weights not cached yet and DSE_CACHE where nothing can be written (under /proc, under a
    file): one line naming the variable and the fix, from materialize and from dse.deploy; nothing
    is made."""
    monkeypatch.setenv("DSE_CACHE", "/proc/dse")
    line = (
        "cannot write the zoo's weights to DSE_CACHE=/proc/dse (/proc: No such file or "
        "directory): set DSE_CACHE to a folder you can write"
    )
    with pytest.raises(DseError) as info:
        materialize("alexnet")
    assert str(info.value) == line
    (tmp_path / "a_file").write_text("")
    with pytest.raises(DseError) as info:
        materialize("alexnet", cache_dir=tmp_path / "a_file" / "zoo", external=True)
    assert str(info.value) == (
        f"cannot write the zoo's weights to the zoo's cache {tmp_path / 'a_file' / 'zoo'} "
        f"({tmp_path / 'a_file'} is a file, not a folder): set DSE_CACHE to a folder you can "
        "write"
    )
    net = load_net({"name": "alexnet"})
    (tmp_path / "mapping.json").write_text(json.dumps({"localhost_cpu0": list(net.graph.names)}))
    args = ["+net=alexnet", "platform=localhost", f"mapping={tmp_path / 'mapping.json'}",
            f"out={tmp_path / 'dep'}"]  # fmt: skip
    r = run_module("dse.deploy", *args, env={"DSE_CACHE": "/proc/dse"}, timeout=120)
    assert_one_line(r, line)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "mapping.json"]


@pytest.mark.parametrize("name", ["googlenet", "densenet121"])
def test_materialized_runs(name: str, tmp_path: Path) -> None:
    path = materialize(name, cache_dir=tmp_path)
    onnx.checker.check_model(str(path))
    y = run(path)
    assert y.shape == (1, 1000) and np.isfinite(y).all()


@pytest.mark.parametrize(
    ("size", "k", "stride", "pad", "ceil"),
    [
        (54, 3, 2, (0, 0, 1, 1), False),  # AlexNet pool1
        (112, 3, 2, 0, True),  # GoogLeNet maxpool1
        (14, 2, 2, 0, True),  # GoogLeNet maxpool4
        (3, 2, 2, 1, True),  # last ceil window would start in the end pad: dropped
    ],
)
def test_pool_shapes_match_onnxruntime(
    size: int, k: int, stride: int, pad: int | tuple[int, ...], ceil: bool
) -> None:
    b = NetBuilder("pool", (2, size, size))
    out = b.maxpool(b.input, k, stride=stride, pad=pad, ceil=ceil, name="pool")
    model = b.model(out)
    fill_weights(model, b.fills, seed=0)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"input": np.ones((1, 2, size, size), np.float32)})
    assert y.shape == (1, *b.shapes[out])


def test_opmix_has_the_families_exported_models_use_each_at_several_sizes() -> None:
    """Calibration's network beside the zoo: at least three layers of each family the zoo
    lacks run alone (not fused), of more than one size, and its seeded model runs."""
    import collections

    import onnxruntime as ort

    from dse.config import CalibrateConfig
    from dse.net.fusion import cost_families

    net = load_net({"name": "opmix"})
    sizes: dict[str, set[int]] = collections.defaultdict(set)
    for layer, fam in zip(net.graph, cost_families(net.graph), strict=True):
        sizes[fam].add(layer.output_bytes)
    for fam in ("arith", "activation", "resize", "softmax", "conv_depthwise", "conv_transpose"):
        assert len(sizes[fam]) >= 3, (fam, sizes[fam])
    assert "opmix" in CalibrateConfig().nets and "opmix" not in NETS
    sess = ort.InferenceSession(str(materialize("opmix", 0)), providers=["CPUExecutionProvider"])
    (out,) = sess.run(None, {"input": np.zeros((1, 3, 224, 224), np.float32)})
    assert out.shape == (1, 16, 112, 112) and np.isfinite(out).all()
