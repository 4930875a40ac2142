"""Calibration's compute step: the profiler's kernels map back to every layer of the zoo, a
layer timed alone as parts is that layer sliced."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from dse.calibrate.channels import one_layer, part_channels
from dse.calibrate.profile import layer_for_kernel, profile_model
from dse.net import load_net, zoo


def test_kernel_names_map_to_layers() -> None:
    index = {"conv1": 0, "relu1": 1, "norm1": 2, "fc6": 3}
    assert layer_for_kernel("relu1_nchwc", index) == 1
    assert layer_for_kernel("fused fc6", index) == 3
    assert layer_for_kernel("norm1_bn_nchwc", index) == 2
    assert layer_for_kernel("relu1_nchwc_token_3", index) == 1
    assert layer_for_kernel("ReorderOutput_token_16", index) is None


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


def test_a_layer_timed_alone_as_parts_is_that_layer_sliced() -> None:
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
    grouped = next(
        layer for layer in net.graph if layer.op == "Conv" and layer.attrs.get("group", 1) > 1
    )
    assert one_layer(grouped, net.model.graph.node[grouped.node], 64) is None
