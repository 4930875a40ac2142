"""Calibration's compute step: the profiler's kernels map back to every layer of the zoo, a
layer timed alone as parts is that layer sliced, a key's time is its layers' mean, and a
profile on a CPU share takes the mean of its runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from dse.calibrate import ondevice
from dse.calibrate.channels import one_layer, part_channels, write_weights
from dse.calibrate.compute import key_times
from dse.calibrate.profile import Profile, layer_for_kernel, profile_model
from dse.net import load_net, zoo
from dse.runtime.rank.pace import PACE_ENV, pace_from_env
from models_analytical.layer_costs import layer_key


def test_kernel_names_map_to_layers() -> None:
    index = {"conv1": 0, "relu1": 1, "norm1": 2, "fc6": 3}
    assert layer_for_kernel("relu1_nchwc", index) == 1
    assert layer_for_kernel("fused fc6", index) == 3
    assert layer_for_kernel("norm1_bn_nchwc", index) == 2
    assert layer_for_kernel("relu1_nchwc_token_3", index) == 1
    assert layer_for_kernel("ReorderOutput_token_16", index) is None
    # as onnxruntime names nodes of a model exported by PyTorch (YOLOv8's): a layout-converted
    # Conv after its output tensor, a Sigmoid x Mul fused into QuickGelu after the Mul
    index = {"/m.0/conv/Conv": 0, "/m.0/act/Sigmoid": 1, "/m.0/act/Mul": 2}
    producer = {"/m.0/conv/Conv_output_0": 0, "/m.0/act/Sigmoid_output_0": 1}
    assert layer_for_kernel("/m.0/conv/Conv_output_0_nchwc", index, producer) == 0
    assert layer_for_kernel("/m.0/act/Mul/QuickGeluFusion/", index, producer) == 2
    assert layer_for_kernel("/m.0/conv/Conv_output_0_nchwc", index) is None  # by name only


def test_a_layout_conversion_is_paid_by_the_layer_that_needs_it() -> None:
    """relu0 runs in the plain layout between two blocked convolutions (as an Add of a scalar
    does in an exported model): converting conv0's output out of the blocked layout and its
    own back into it are relu0's time, not the convolutions'."""
    from dse.calibrate.profile import attribute
    from dse.net.build import build_graph
    from tests.helpers.onnx_factory import conv_relu_chain

    g = build_graph(conv_relu_chain(), "chain")  # conv0 relu0 conv1 relu1 conv2 relu2
    kernels = [
        ("ReorderInput", "ReorderInput", 0.5),  # the network's input: nothing before it
        ("conv0", "Conv", 1.0),
        ("ReorderOutput_token_1", "ReorderOutput", 0.2),
        ("relu0", "Relu", 0.1),
        ("ReorderInput_token_2", "ReorderInput", 0.3),
        ("conv1", "Conv", 2.0),
    ]
    t, unmapped = attribute(kernels, g)
    assert list(t[:3]) == pytest.approx([1.5, 0.6, 2.0])
    assert unmapped == ["ReorderInput", "ReorderOutput_token_1", "ReorderInput_token_2"]


@pytest.mark.parametrize("name", ["alexnet", "resnet50", "googlenet", "mobilenetv2", "densenet121"])
def test_profile_covers_every_layer_of_the_zoo(name: str) -> None:
    """Every layer gets a time, and the layers' times add up to the kernels' (nothing lost or
    counted twice when fused kernels are shared out)."""
    net = load_net({"name": name})
    g = net.graph
    prior = g.macs / 1e10 + g.output_bytes / 1e10
    prof = profile_model(zoo.materialize(name, 0), g, prior, warmup=0, runs=1)
    assert (prof.layer_s > 0).all(), [
        lay.name for lay, t in zip(g, prof.layer_s, strict=True) if t <= 0
    ]
    assert set(prof.unmapped) <= {n for n in prof.unmapped if n.startswith("Reorder")}
    assert prof.layer_s.sum() == pytest.approx(prof.kernel_s, rel=1e-9)


def test_a_layer_timed_alone_as_parts_is_that_layer_sliced(tmp_path: Path) -> None:
    """The one-layer models calibration times: AlexNet's conv1 with 48 of its 96 channels
    computes the first 48 channels of conv1 with 96 (same random weights, onnxruntime); a
    grouped convolution is left out; parts are whole blocks near 1/4, 1/2, 3/4."""
    assert part_channels(96, 16) == [32, 48, 80, 96]
    assert part_channels(32, 16) == [16, 32]
    assert part_channels(8, 16) == [8]
    net = load_net({"name": "alexnet"})
    conv1 = next(layer for layer in net.graph if layer.name == "conv1")
    node = net.model.graph.node[conv1.node]
    x = np.random.default_rng(0).random(conv1.inputs[0].shape, dtype=np.float32)
    out = {}
    for c in (48, 96):
        sess = ort.InferenceSession(one_layer(conv1, node, c).SerializeToString())
        out[c] = sess.run(None, {"x": x})[0]
    assert out[48].shape[1] == 48 and out[96].shape[1] == 96
    np.testing.assert_allclose(out[48], out[96][:, :48], rtol=1e-5, atol=1e-6)
    # as calibration makes them: the parts' rows read from one file of the whole layer's
    write_weights(conv1, tmp_path / "w.bin")
    for c in (48, 96):
        onnx.save(one_layer(conv1, node, c, weights=tmp_path / "w.bin"), tmp_path / f"{c}.onnx")
        sess = ort.InferenceSession(str(tmp_path / f"{c}.onnx"))
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], out[c])
    grouped = next(
        layer for layer in net.graph if layer.op == "Conv" and layer.attrs.get("group", 1) > 1
    )
    assert one_layer(grouped, net.model.graph.node[grouped.node], 64) is None


def test_weight_groups_by_hand() -> None:
    """Consecutive layers while their weights fit the budget; a heavier one alone."""
    from types import SimpleNamespace

    from dse.calibrate.channels import weight_groups

    def layer(n_floats: int):
        return (SimpleNamespace(weights=[SimpleNamespace(shape=(n_floats,))]), n_floats)

    sizes = [10, 20, 5, 100, 30, 30, 1]  # bytes: 4x these; budget 200 bytes = 50 floats
    groups = weight_groups([layer(n) for n in sizes], 200)
    assert [[n for _, n in g] for g in groups] == [[10, 20, 5], [100], [30], [30, 1]]


def test_alexnets_parts_are_timed_in_weight_groups(monkeypatch) -> None:
    """AlexNet's splittable layers, timed whole and as parts: its convs together (conv1 and
    conv3; the grouped conv2, conv4 and conv5 are not covered), fc6, fc7 and fc8 each alone
    (GROUP_WEIGHT_BYTES), every group's sessions gone before the next group's are made; each
    row carries its own case's median (a fake timer: a session's channel count and its
    group's number)."""
    import gc
    import weakref
    from types import SimpleNamespace

    from dse.calibrate import channels

    net = load_net({"name": "alexnet"})
    alive: list[weakref.ref] = []
    groups: list[list[int]] = []
    timed = [0]  # sessions made before the last group was timed

    class Fake:
        def __init__(self, model, channels_: int) -> None:
            self.channels = channels_

    def fake_one_layer(layer, node, c: int, weights=None):  # noqa: ANN001, ANN202 - none drawn
        group = [a.i for a in node.attribute if a.name == "group"]
        return None if group and group[0] != 1 else SimpleNamespace(channels=c)

    def fake_save(m, path: Path) -> None:  # noqa: ANN001
        path.write_text(str(m.channels))

    def fake_session(path: Path, kind: str, threads: int):  # noqa: ANN202
        gc.collect()
        assert all(r() is None for r in alive[: timed[0]]), "an earlier group's session lives"
        s = Fake(path, int(path.read_text()))
        alive.append(weakref.ref(s))
        return s

    def fake_timed(runs, repeats: int):  # noqa: ANN001, ANN202
        names = [[s.channels for s, _ in case] for case in runs]
        groups.append(names)
        timed[0] = len(alive)
        return [[1000.0 * len(groups) + c for c in case] for case in names]

    monkeypatch.setattr(channels, "one_layer", fake_one_layer)
    monkeypatch.setattr(channels, "write_weights", lambda layer, path: path.touch())
    monkeypatch.setattr(channels, "onnx", SimpleNamespace(save=fake_save))
    monkeypatch.setattr(channels, "session", fake_session)
    monkeypatch.setattr(channels, "time_interleaved", fake_timed)
    rows = channels.measure_part_costs(net, 16, 1, 3)
    by_layer = {}
    for r in rows:
        by_layer.setdefault(r["layer"].split("/")[1], []).append(r)
    convs = [n for n in by_layer if n.startswith("conv")]
    assert convs == ["conv1", "conv3"] and list(by_layer)[2:] == ["fc6", "fc7", "fc8"]
    # fc6 (151 MB) and fc7 (67 MB), heavier than a group, have each model timed alone
    assert [[len(case) for case in g] for g in groups] == [[4, 4]] + [[1]] * 8 + [[4]]
    for g, names in enumerate([convs, ["fc8"]]):
        for name in names:
            mine = by_layer[name]
            assert [r["channels"] for r in mine] == part_channels(mine[0]["full"], 16)
            assert [r["seconds"] for r in mine] == [
                1000.0 * (1 + 9 * g) + r["channels"] for r in mine
            ]
    for first, name in ((2, "fc6"), (6, "fc7")):
        mine = by_layer[name]
        assert [r["channels"] for r in mine] == part_channels(mine[0]["full"], 16)
        assert [r["seconds"] for r in mine] == [
            1000.0 * (first + k) + r["channels"] for k, r in enumerate(mine)
        ]


def test_a_keys_time_is_the_mean_of_the_networks_layers_of_that_key() -> None:
    """ResNet-50's 3x3 convolutions of layer3.1 to layer3.5 (layers 93, 103, ..., 133) are one
    key: each gets the mean of their five times, not the first one's."""
    g = load_net({"name": "resnet50"}).graph
    times = [float(i) for i in range(len(g))]
    by_key = key_times(g, times)
    layers = list(g)
    assert by_key[layer_key(layers[103])] == (93 + 103 + 113 + 123 + 133) / 5
    assert by_key[layer_key(layers[0])] == 0.0  # the stem's convolution: one of its key


@pytest.mark.parametrize(("pace", "by_mean"), [(None, False), ("0.4", True)])
def test_a_profile_on_a_cpu_share_takes_the_mean_of_its_runs(monkeypatch, pace, by_mean) -> None:
    """On an emulated device of a CPU share (DSE_PACE set by the cluster) a layer's time is the
    mean of its runs (dse.calibrate.profile.profile_model says why); elsewhere the median."""
    seen = {}

    def fake_profile(path, graph, prior, threads, *, warmup, runs, by_mean=False):
        seen["by_mean"] = by_mean
        n = len(graph)
        return Profile(graph.name, threads, np.ones(n), np.zeros(n), np.ones(3), n, n, ())

    monkeypatch.setattr(ondevice, "profile_model", fake_profile)
    if pace is None:
        monkeypatch.delenv(PACE_ENV, raising=False)
    else:
        monkeypatch.setenv(PACE_ENV, pace)
    pace_from_env.cache_clear()
    try:
        request = {"net": "mobilenetv2", "seed": 0, "threads": 1, "warmup": 0, "runs": 1}
        got = ondevice.profile_unit({**request, "prior_rate": 1e10})
    finally:
        pace_from_env.cache_clear()
    assert seen["by_mean"] is by_mean
    assert got["time_sliced"] is by_mean  # its type's regression is then a steady type's
