"""MACs and params of single layers, against counts worked out by hand."""

from __future__ import annotations

import pytest
from onnx import helper

import tests.helpers.onnx_factory as f
from dse.net.build import build_graph


def one_layer(node, x_shape, inits):
    g = build_graph(f.model([node], {"x": x_shape}, [node.output[0]], inits), "t")
    assert len(g) == 1
    return g.layers[0]


def test_grouped_conv():
    # 8 input channels in 4 groups -> each of 12 filters sees 2 channels; 10x10 out (pad 1)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=4, pads=[1, 1, 1, 1])
    layer = one_layer(node, [1, 8, 10, 10], [f.weight("w", [12, 2, 3, 3]), f.weight("b", [12])])
    assert layer.output_shape == (1, 12, 10, 10)
    assert layer.macs == 12 * 10 * 10 * (2 * 3 * 3)  # 21,600
    assert layer.params == 12 * 2 * 9 + 12  # 228
    assert layer.weight_bytes == 228 * 4
    assert layer.splittable and layer.out_channels == 12 and not layer.estimated


def test_depthwise_conv():
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=6, pads=[1, 1, 1, 1])
    layer = one_layer(node, [1, 6, 8, 8], [f.weight("w", [6, 1, 3, 3])])
    assert layer.macs == 6 * 8 * 8 * 9  # 3,456
    assert layer.params == 54


def test_dilated_strided_conv():
    # dilation 2 makes the 3x3 kernel span 5; (17 - 5) // 2 + 1 = 7
    node = helper.make_node("Conv", ["x", "w"], ["y"], dilations=[2, 2], strides=[2, 2])
    layer = one_layer(node, [1, 3, 17, 17], [f.weight("w", [4, 3, 3, 3])])
    assert layer.output_shape == (1, 4, 7, 7)
    assert layer.macs == 4 * 7 * 7 * 27  # 5,292
    assert layer.params == 108


def test_conv_transpose():
    # every one of the 4*5*5 input elements is spread over 2 output channels x 3x3
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])
    layer = one_layer(node, [1, 4, 5, 5], [f.weight("w", [4, 2, 3, 3])])
    assert layer.output_shape == (1, 2, 11, 11)
    assert layer.macs == 100 * 18
    assert layer.splittable and layer.out_channels == 2


def test_gemm_trans_b():
    node = helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1)
    layer = one_layer(node, [2, 5], [f.weight("w", [3, 5]), f.weight("c", [3])])
    assert layer.output_shape == (2, 3)
    assert layer.macs == 2 * 3 * 5
    assert layer.params == 15 + 3
    assert layer.splittable and layer.out_channels == 3


def test_gemm_trans_a():
    node = helper.make_node("Gemm", ["x", "w"], ["y"], transA=1)
    layer = one_layer(node, [7, 2], [f.weight("w", [7, 4])])
    assert layer.output_shape == (2, 4)
    assert layer.macs == 2 * 4 * 7


def test_matmul_constant_weight_is_splittable():
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    layer = one_layer(node, [1, 16, 32], [f.weight("w", [32, 8])])
    assert layer.macs == 16 * 8 * 32
    assert layer.splittable and layer.out_channels == 8


def test_matmul_of_two_activations_is_not_splittable():
    node = helper.make_node("MatMul", ["x", "x"], ["y"])
    layer = one_layer(node, [4, 4], [])
    assert layer.macs == 4 * 4 * 4
    assert not layer.splittable


def test_maxpool_counts_window_per_output():
    # (9 + 2 - 3) // 2 + 1 = 5 -> 4*5*5 outputs, 9 taps each
    node = helper.make_node(
        "MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
    )
    layer = one_layer(node, [1, 4, 9, 9], [])
    assert layer.output_shape == (1, 4, 5, 5)
    assert layer.macs == 100 * 9
    assert layer.params == 0 and not layer.splittable


def test_global_pool_and_elementwise():
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    assert one_layer(node, [1, 6, 8, 8], []).macs == 384
    node = helper.make_node("Relu", ["x"], ["y"])
    assert one_layer(node, [1, 6, 8, 8], []).macs == 384


def test_batchnorm_and_lrn():
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
    inits = [f.weight(n, [6]) for n in "sbmv"]
    layer = one_layer(node, [1, 6, 4, 4], inits)
    assert layer.macs == 96
    assert layer.params == 12  # scale and bias; running mean and variance are not trained
    assert layer.weight_bytes == 24 * 4
    node = helper.make_node("LRN", ["x"], ["y"], size=5)
    assert one_layer(node, [1, 6, 4, 4], []).macs == 96 * 5


@pytest.mark.parametrize(("mode", "taps"), [("nearest", 1), ("linear", 4)])
def test_resize(mode, taps):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)
    scales = f.numpy_helper.from_array(f.np.array([1, 1, 2, 2], dtype=f.np.float32), "scales")
    layer = one_layer(node, [1, 3, 4, 4], [scales])
    assert layer.output_shape == (1, 3, 8, 8)
    assert layer.params == 0
    assert layer.macs == 192 * taps


def test_data_movement_is_free():
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])
    layer = one_layer(node, [1, 3, 4, 5], [])
    assert layer.macs == 0 and not layer.estimated


def test_op_without_rule_is_estimated_from_output_size():
    node = helper.make_node("CumSum", ["x", "axis"], ["y"])
    layer = one_layer(node, [2, 10], [f.const("axis", 1)])
    assert layer.estimated
    assert layer.macs == 20
