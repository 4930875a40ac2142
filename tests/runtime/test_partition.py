"""The partitioner and the in-process executor: partitioned outputs equal the whole model (to
the tolerance :data:`tests.helpers.partition.RTOL` explains)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from chromosomes import make_chromosome
from dse.errors import DseError
from dse.mapping import from_device_lists
from dse.net import load_net
from dse.runtime.compile.partition import partition
from dse.runtime.deployment.plan import Port, input_arrays, seeded_inputs
from dse.runtime.launch.local import time_segments, time_segments_beside
from dse.runtime.rank.inprocess import run_plan
from dse.runtime.rank.sessions import session
from tests.helpers.nets import channel_local_net, dense_block_net, zoo_like
from tests.helpers.partition import (
    RTOL,
    assert_equal_outputs,
    sent_by_device,
    steps_on,
    whole,
    with_sizes,
)
from tests.helpers.platforms import platform


def test_part_bounds_are_cumulative_sizes_in_device_order(tmp_path: Path) -> None:
    net = zoo_like(tmp_path)
    g = net.graph
    layer = int(g.split_layers[0])
    c = int(g.out_channels[layer])
    m = from_device_lists(g, 3, [[[0, 1, 2] if i == layer else [0] for i in range(len(g))]])
    base, extra = divmod(c, 3)  # the first parts one larger (the equal rule)
    sizes = [base + (k < extra) for k in range(3)]
    assert m.bounds(g, layer) == [(0, sizes[0]), (sizes[0], c - sizes[2]), (c - sizes[2], c)]
    uneven = with_sizes(g, 3, 0, {g.names[layer]: [0, 1, c - 1]}, {})
    assert uneven.bounds(g, layer) == [(0, 1), (1, c)]


def test_sub_model_files_pass_the_checker_and_hold_every_weight_once(tmp_path: Path) -> None:
    """Every splittable layer over devices 0-2, the rest on 3. The files written pass onnx's
    full check; between them they hold every float weight of the whole model exactly once
    (split layers' weights cut into parts), but gemm_t's broadcast bias c2 (one value), which
    each of its 3 parts adds; and, run from these files, they give the whole model's outputs
    in onnxruntime."""
    net = zoo_like(tmp_path)
    n = len(net.graph)
    batch = from_device_lists(
        net.graph, 4, [[[0, 1, 2] if net.graph.splittable[i] else [3] for i in range(n)]]
    )
    dep = partition(net, batch, platform(4))
    out = tmp_path / "dep"
    out.mkdir()
    dep.write_segments(out)
    held = []
    for name in dep.segments:
        onnx.checker.check_model(str(out / name), full_check=True)
        for t in onnx.load(str(out / name)).graph.initializer:  # weights read from name.data
            if t.data_type == onnx.TensorProto.FLOAT:
                held.append(numpy_helper.to_array(t).ravel())
    source = onnx.load(str(tmp_path / "zoo_like.onnx"))
    weights = {t.name: numpy_helper.to_array(t).ravel() for t in source.graph.initializer}
    (c1,) = [numpy_helper.to_array(m.attribute[0].t) for m in source.graph.node if m.name == "c1"]
    floats = [v for v in weights.values() if v.dtype == np.float32] + [c1]
    # wa 288 + ba 8 + wg 288 + bg 8 + wd 72 + wt 96 + bt 6 + wt2 192 + w1 60 + w2 120 + c2 1
    # + w3 60 + the Constant c1 10 = 1209 floats; c2 twice more
    assert sum(len(v) for v in held) == 1209 + 2
    np.testing.assert_array_equal(
        np.sort(np.concatenate(held)),
        np.sort(np.concatenate([*floats, weights["c2"], weights["c2"]])),
    )
    x = input_arrays(dep.plan, seed=0)
    got, ref = run_plan(dep.plan, out, x), whole(net, x)
    assert set(got) == set(ref) == {"m", "s"}
    for name, r in ref.items():
        assert np.abs(got[name] - r).max() <= RTOL * np.abs(r).max(), name


@pytest.mark.parametrize("encoding", ["naive", "advanced", "vertical"])
def test_random_mappings_equal_the_whole_model(tmp_path: Path, encoding: str) -> None:
    net = zoo_like(tmp_path)
    plat = platform(4)
    x = seeded_inputs([Port("x", (1, 4, 8, 8), "float32")])
    ref = whole(net, x)
    chrom = make_chromosome(encoding, net.graph, 4, None if encoding == "vertical" else 4)
    batch = chrom.decode(chrom.sample(12, np.random.default_rng(7)))
    split = 0
    for p in range(len(batch)):
        assert_equal_outputs(net, batch.take(p), plat, ref)
        split += int(((batch.sizes[p] > 0).sum(axis=1) > 1).any())
    assert encoding == "vertical" or split > 0  # the sample did exercise split layers


def test_every_layer_split_on_every_device(tmp_path: Path) -> None:
    net = zoo_like(tmp_path)
    n = len(net.graph)
    lists = [[list(range(4)) if net.graph.splittable[i] else [i % 4] for i in range(n)]]
    assert_equal_outputs(net, from_device_lists(net.graph, 4, lists), platform(4))


def test_a_b_a_vertical_mapping(tmp_path: Path) -> None:
    net = zoo_like(tmp_path)
    n = len(net.graph)
    # layers alternate between devices 0 and 1: every edge crosses, A -> B -> A -> ...
    lists = [[[i % 2] for i in range(n)]]
    segments = assert_equal_outputs(net, from_device_lists(net.graph, 2, lists), platform(2))
    assert segments == n  # one segment per layer: each waits for the other device


def test_time_segments_times_every_sub_model_once_on_its_device(tmp_path: Path) -> None:
    net = zoo_like(tmp_path)
    n = len(net.graph)
    # the first half on device 2, the rest on device 0 (the entry): ranks are 0 and 1, so a
    # sub-model's device must come from the plan's device, not its rank
    lists = [[[2] if i < n // 2 else [0] for i in range(n)]]
    dep = partition(net, from_device_lists(net.graph, 3, lists), platform(3))
    rounds = []
    timed = time_segments(dep, runs=2, warmup=1, each_round=lambda: rounds.append(1))
    want = {s: r.device_index for r in dep.plan.ranks for s in r.segments}
    assert {k: d for k, (d, _) in timed.items()} == want
    assert set(want.values()) == {0, 2}
    assert len(rounds) == 2  # called at the start of each timed round only
    assert all(s > 0.0 for _, s in timed.values())
    # beside the whole network: the same sub-models, and the whole network's own median
    calls = []

    class Whole:  # an onnxruntime session of the whole network, counting its runs
        def __init__(self) -> None:
            self.sess = session(net.weighted_model())

        def get_inputs(self):
            return self.sess.get_inputs()

        def run(self, names, feeds):
            calls.append(1)
            return self.sess.run(names, feeds)

    beside, whole_s = time_segments_beside(dep, Whole(), runs=3, warmup=1)
    assert {k: d for k, (d, _) in beside.items()} == want
    assert len(calls) == 3 and whole_s > 0.0


def test_alexnet_random_mappings() -> None:
    net = load_net({"name": "alexnet"})
    plat = platform(4)
    x = seeded_inputs([Port("input", (1, 3, 224, 224), "float32")])
    ref = whole(net, x)
    rng = np.random.default_rng(3)
    for encoding in ("naive", "advanced", "vertical"):
        chrom = make_chromosome(encoding, net.graph, 4, None if encoding == "vertical" else 4)
        batch = chrom.decode(chrom.sample(1, rng))
        for p in range(len(batch)):
            assert_equal_outputs(net, batch.take(p), plat, ref)


def test_mapping_of_another_net_is_refused(tmp_path: Path) -> None:
    net = zoo_like(tmp_path)
    other = load_net({"name": "alexnet"})
    batch = from_device_lists(other.graph, 2, [[[0]] * len(other.graph)])
    with pytest.raises(DseError, match="another network"):
        partition(net, batch, platform(2))
    batch = from_device_lists(net.graph, 4, [[[3]] * len(net.graph)])
    with pytest.raises(DseError, match="has 2"):
        partition(net, batch, platform(2))


@pytest.mark.parametrize("encoding", ["naive", "advanced", "vertical"])
def test_plan_sends_what_the_model_counts(tmp_path: Path, encoding: str) -> None:
    """Every byte the plan sends is a byte the analytical model counts, device by device."""
    from tests.helpers.platforms import model

    net = zoo_like(tmp_path)
    plat = platform(4)
    chrom = make_chromosome(encoding, net.graph, 4, None if encoding == "vertical" else 4)
    batch = chrom.decode(chrom.sample(20, np.random.default_rng(11)))
    predicted = model(net.graph, plat).evaluate(batch).bytes_sent
    for p in range(len(batch)):
        plan = partition(net, batch.take(p), plat).plan
        sent = np.zeros(4)
        for r in plan.ranks:
            for s in r.steps:
                if s.op == "send":
                    sent[r.device_index] += np.prod(plan.tensors[s.tensor].shape) * 4
        np.testing.assert_allclose(sent, predicted[p], rtol=1e-9)


def test_consecutive_split_layers_all_gather(tmp_path: Path) -> None:
    """A split layer feeding split layers: each part's device that reads the whole receives
    the other parts straight from their devices and concatenates them itself; the owner
    forwards the whole only to a device without a part. Bytes are the model's, device by
    device, and the outputs the whole model's."""
    from tests.helpers.platforms import model

    net = zoo_like(tmp_path)
    g = net.graph
    names = [layer.name for layer in g]

    def lists(on: dict[str, list[int]]) -> list[list[list[int]]]:
        return [[on.get(name, [0]) for name in names]]

    split = {name: [0, 1] for name, ok in zip(names, g.splittable, strict=True) if ok}
    # conv_g -> conv_dw -> convt_g and gemm_n -> gemm_t -> matmul: split layers in a row
    two = from_device_lists(g, 2, lists(split))
    plan = partition(net, two, platform(2)).plan
    for t in ("g", "d", "f1", "f2"):  # read by split layers on both devices
        for dev in (0, 1):
            (gather,) = steps_on(plan, dev, "gather", t)
            remote = [p for p in gather.parts if p.tag is not None]
            assert [p.source for p in remote] == [1 - dev]
            assert not steps_on(plan, dev, "send", t) and not steps_on(plan, dev, "recv", t)
    np.testing.assert_allclose(
        sent_by_device(plan, 2), model(g, platform(2)).evaluate(two).bytes_sent[0], rtol=1e-9
    )
    assert_equal_outputs(net, two, platform(2))

    # conv_g on h0, h1 feeds conv_dw on h1, h2: the owner h1 gathers (h0 does not: it does
    # not read g) and forwards the whole to h2; gemm_t on h0..h2 feeds matmul on h0, h3
    on = {**split, "conv_dw": [1, 2], "gemm_t": [0, 1, 2], "matmul": [0, 3]}
    four = from_device_lists(g, 4, lists(on))
    plan = partition(net, four, platform(4)).plan
    assert not steps_on(plan, 0, "gather", "g") and steps_on(plan, 1, "gather", "g")
    assert [s.to for s in steps_on(plan, 1, "send", "g")] == [2]  # ranks = devices here
    (gather,) = steps_on(plan, 0, "gather", "f2")  # h0 has a part of f2 and reads it
    assert sorted(p.source for p in gather.parts if p.tag is not None) == [1, 2]
    assert not steps_on(plan, 1, "gather", "f2") and not steps_on(plan, 2, "gather", "f2")
    np.testing.assert_allclose(
        sent_by_device(plan, 4), model(g, platform(4)).evaluate(four).bytes_sent[0], rtol=1e-9
    )
    assert_equal_outputs(net, four, platform(4))


def test_weights_as_external_data(tmp_path: Path) -> None:
    """A user's model whose weights are external data: cut from the mapped data file."""
    net = zoo_like(tmp_path)
    model = onnx.load(str(tmp_path / "zoo_like.onnx"))
    ext = tmp_path / "ext"
    ext.mkdir()
    onnx.save(
        model, str(ext / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0
    )
    ext_net = load_net({"name": "onnx", "path": str(ext / "m.onnx")})
    n = len(ext_net.graph)
    lists = [[[0, 1] if ext_net.graph.splittable[i] else [i % 2] for i in range(n)]]
    x = seeded_inputs([Port("x", (1, 4, 8, 8), "float32")])
    assert_equal_outputs(
        ext_net, from_device_lists(ext_net.graph, 2, lists), platform(2), whole(net, x)
    )


def test_a_static_tensor_that_does_not_fold_is_named_with_its_node(tmp_path: Path) -> None:
    """A fill as large as the input (ConstantOfShape of its Shape, 1.1 M elements) is beyond
    what the folder evaluates: compiling the sub-models names the node, in one line."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("ConstantOfShape", ["s"], ["ones"], name="ones_like_x",
                         value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("Add", ["x", "ones"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]  # fmt: skip
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 1100, 1000])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )
    onnx.save(model, str(tmp_path / "fill.onnx"))
    net = load_net({"name": "onnx", "path": str(tmp_path / "fill.onnx")})
    vertical = from_device_lists(net.graph, 2, [[[0]] * len(net.graph)])
    with pytest.raises(DseError) as err:
        partition(net, vertical, platform(2))
    assert str(err.value) == (
        "static tensor 'ones' of net 'fill' cannot be evaluated for the sub-models: node "
        "'ones_like_x' (ConstantOfShape) does not fold to a constant at this input shape; fold it "
        "with onnxruntime (python -m onnxruntime.tools.optimize_onnx_model --opt_level basic IN "
        "OUT) and load that"
    )


def test_zoo_weights_found_in_the_file() -> None:
    """The wire-format scan finds every initializer's bytes where protobuf parsing puts them."""
    from dse.net import zoo
    from dse.runtime.compile.statics import inline_offsets

    path = zoo.materialize("alexnet", 0)
    offsets = inline_offsets(path)
    data = path.read_bytes()
    model = onnx.load(str(path))
    assert set(offsets) == {t.name for t in model.graph.initializer}
    for t in model.graph.initializer:
        off, n = offsets[t.name]
        assert data[off : off + n] == t.raw_data


def test_which_layers_follow_a_split_layer(tmp_path: Path) -> None:
    g = channel_local_net(tmp_path).graph
    follows = {g.names[c]: g.names[p] for c, p in enumerate(g.follows.tolist()) if p >= 0}
    assert follows == {
        "bn": "conv1",
        "relu1": "bn",
        "pool": "relu1",
        "clip": "conv2",  # read twice after it: gap and side follow nobody
        "relu_fc": "fc",
    }


def test_channel_local_layers_run_on_the_parts(tmp_path: Path) -> None:
    """conv1 over three devices (12 channels: 4, 4, 4 by uneven shares 0.5/0.25/0.25 -> 6,
    3, 3): BN, Relu and MaxPool run on each part, only the pooled parts (a quarter of conv1's
    bytes) are gathered, by conv2's devices; outputs equal the whole model's, and bytes and
    segments are the model's."""
    from tests.helpers.platforms import model

    net = channel_local_net(tmp_path)
    g = net.graph
    plat = platform(3)
    batch = with_sizes(
        g,
        3,
        0,
        # conv2 on h1, h2: both gather p1; fc's 7 channels as 4 and 3
        {"conv1": [6, 3, 3], "conv2": [0, 5, 5], "fc": [0, 4, 3]},
        # their own device: h1 (gathers)
        dict.fromkeys(("bn", "relu1", "pool", "clip", "gap", "flat", "relu_fc"), 1),
    )
    plan = partition(net, batch, plat).plan
    for dev in (1, 2):
        (gather,) = steps_on(plan, dev, "gather", "p1")
        assert [(p.source, p.range) for p in gather.parts] == [
            (0, (0, 6)),
            (1, (6, 9)),
            (2, (9, 12)),
        ]
    for t in ("c1", "n1", "r1"):  # never whole, never sent
        assert not any(steps_on(plan, d, op, t) for d in range(3) for op in ("gather", "send"))
    # float32 bytes: x (3x8x8) to h1 and h2; a 4x4 channel of p1, c2/k2 or side is 64 bytes.
    # h0: x twice, its 6 pooled channels to h1 and h2. h1: 3 pooled channels to h2, side (10
    # channels) to conv3 on h0, f (10 floats) to h2. h2: 3 pooled channels to h1, its 5 Clip
    # channels to h1 (Clip's device), its 3 of fc's (Relu-ed) outputs to h1
    ch = 64
    expected = [2 * 3 * 64 * 4 + 2 * 6 * ch, 3 * ch + 10 * ch + 40, 3 * ch + 5 * ch + 3 * 4]
    sent = sent_by_device(plan, 3)
    assert sent.tolist() == expected
    ev = model(g, plat).evaluate(batch)
    np.testing.assert_allclose(sent, ev.bytes_sent[0], rtol=1e-9)
    segments = {r.device_index: len(r.segments) for r in plan.ranks}
    assert segments == {d: int(ev.segments[0, d]) for d in range(3) if ev.used[0, d]}
    assert_equal_outputs(net, batch, plat)


@pytest.mark.parametrize("early_reader", [False, True])
def test_sends_go_out_when_the_receiver_can_use_them(tmp_path: Path, early_reader: bool) -> None:
    """a, b, c on device 0, the rest on device 1. Device 1's Concat needs all three, so device 0
    runs them as one sub-model and sends them after it (it used to cut after each send); when
    device 1 first reads a alone (e = Relu(a)), a goes out after its own layer: two sub-models.
    Device 1's two Concats read a, b, c through identity Convs. Outputs equal the whole
    model's, and the model counts the same segments."""
    from tests.helpers.platforms import model

    net = dense_block_net(tmp_path, early_reader)
    g = net.graph
    lists = [[0] if name in ("a", "b", "c") else [1] for name in g.names]
    batch = from_device_lists(g, 2, [lists])
    dep = partition(net, batch, platform(2))
    plan = dep.plan
    *_, last = [dep.segments[s.segment] for s in plan.ranks[1].steps if s.op == "run"]
    blocked = {m.name for m in last.graph.node if m.name.endswith("/blocked")}
    assert blocked == {"a/blocked", "b/blocked", "c/blocked"}
    steps = [s.op for s in plan.ranks[0].steps]
    want = ["run", "send", "run", "send", "send"] if early_reader else ["run"] + ["send"] * 3
    assert steps == want
    segments = {r.device_index: len(r.segments) for r in plan.ranks}
    assert segments[0] == (2 if early_reader else 1)
    ev = model(g, platform(2)).evaluate(batch)
    assert segments == {d: int(ev.segments[0, d]) for d in range(2)}
    assert_equal_outputs(net, batch, platform(2))


def test_concat_inputs_of_a_cpu_sub_model_pass_an_identity_conv() -> None:
    """A sub-model input that two Concats read, of a multiple of 8 channels, passes a depthwise
    1x1 Conv with weights 1 (onnxruntime keeps the Concats in its blocked layout); an input one
    Concat reads, an input of 6 channels and other readers are left alone."""
    from dse.net.onnx_load import TensorType
    from dse.runtime.compile.segments import blocked_inputs

    n = helper.make_node
    nodes = [
        n("Concat", ["a", "b", "c", "d"], ["cat1"], axis=1, name="cat1"),
        n("Concat", ["a", "b", "cat1"], ["cat2"], axis=1, name="cat2"),
        n("Relu", ["a"], ["ra"], name="ra"),
    ]
    f = onnx.TensorProto.FLOAT
    types = {
        "a": TensorType((1, 16, 4, 4), f),  # two Concats read it
        "b": TensorType((1, 6, 4, 4), f),  # two, but not a multiple of 8: the layout can't
        "c": TensorType((1, 8, 4, 4), f),  # made inside the sub-model
        "d": TensorType((1, 8, 4, 4), f),  # one Concat reads it
    }
    identity, rewired, weights = blocked_inputs(nodes, ["a", "b", "d"], types)
    assert [(m.op_type, list(m.input), list(m.output)) for m in identity] == [
        ("Conv", ["a", "a/blocked.weight"], ["a/blocked"])
    ]
    assert helper.get_attribute_value(identity[0].attribute[0]) == 16  # group: depthwise
    np.testing.assert_array_equal(
        numpy_helper.to_array(weights["a/blocked.weight"]), np.ones((16, 1, 1, 1))
    )
    assert [list(m.input) for m in rewired] == [
        ["a/blocked", "b", "c", "d"],
        ["a/blocked", "b", "cat1"],
        ["a"],
    ]
    assert list(nodes[0].input) == ["a", "b", "c", "d"]  # the caller's nodes are not changed


@pytest.mark.parametrize("where", ["../outside.data", "/etc/passwd", "link.data"])
def test_external_weights_outside_the_models_folder_are_refused(tmp_path: Path, where: str):
    """A weight stored at ../, at an absolute path or through a symlink out of the model's
    folder is never read into a sub-model (the loader infers every shape of this model, so it
    never reads the weights itself)."""
    channel_local_net(tmp_path)
    model = onnx.load(str(tmp_path / "cl.onnx"))
    ext = tmp_path / "ext"
    ext.mkdir()
    onnx.save(
        model, str(ext / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0
    )
    (tmp_path / "outside.data").write_bytes((ext / "m.data").read_bytes())
    (ext / "link.data").symlink_to(tmp_path / "outside.data")
    m = onnx.load(str(ext / "m.onnx"), load_external_data=False)
    for e in m.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = where
    (ext / "m.onnx").write_bytes(m.SerializeToString())
    # refused where the file is read, before a mapping or a sub-model exists
    with pytest.raises(DseError, match=f"stored at '{where}', outside the model's folder"):
        load_net({"name": "onnx", "path": str(ext / "m.onnx")})
