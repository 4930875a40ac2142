"""Row (spatial) splits in the runtime: a mapping that splits layers by output rows deploys as
bands whose run equals the whole model (in-process and under MPI), only the rows each band
reads cross, and a mapping without row splits deploys as before.

Outputs are compared as in :mod:`tests.runtime.test_partition` (max|a - b| <= 1e-4 max|b|):
a band runs the layer's own operator with its whole weights on the rows it reads, so only
onnxruntime's summation order may differ.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import helper

from dse.errors import DseError
from dse.mapping import Mappings, check, from_device_lists, random_mappings
from dse.mapping.rows import layout_of
from dse.net import Net, load_net
from dse.net.graph import LayerGraph
from dse.runtime.compile.partition import Deployment, partition
from dse.runtime.compile.programs import part_rows
from dse.runtime.deployment.plan import Plan, Run
from tests.helpers.nets import channel_local_net, dense_block_net
from tests.helpers.onnx_factory import model as onnx_model
from tests.helpers.onnx_factory import weight
from tests.helpers.partition import (
    RTOL,
    assert_equal_outputs,
    sent_by_device,
    steps_on,
    with_sizes,
)
from tests.helpers.platforms import platform

n = helper.make_node


def onnx_net(
    tmp_path: Path,
    name: str,
    nodes: list[onnx.NodeProto],
    x_shape: list[int],
    outs: list[str],
    inits: list[onnx.TensorProto],
    opset: int = 17,
) -> Net:
    path = tmp_path / f"{name}.onnx"
    onnx.save(onnx_model(nodes, {"x": x_shape}, outs, inits, opset), path)
    return load_net({"name": "onnx", "path": str(path), "order": "file"})


def sized(
    g: LayerGraph,
    n_dev: int,
    rows: dict[str, list[int]],
    channels: dict[str, list[int]] | None = None,
    devices: dict[str, int] | None = None,
) -> Mappings:
    """One mapping: every layer on device 0 but those named in ``devices`` (name -> device);
    the layers in ``rows`` split by rows and those in ``channels`` by channels (name -> units
    per device)."""
    m = with_sizes(g, n_dev, 0, {**rows, **(channels or {})}, devices or {})
    for name in rows:
        m.axis[0, int(np.searchsorted(g.split_layers, g.index[name]))] = 1
    check(g, n_dev, m)
    return m


def sends(plan: Plan, prefix: str) -> dict[tuple[int, str, int], int]:
    """(device, tensor, to device) -> bytes of every send of a tensor named ``prefix``..."""
    device = {r.rank: r.device_index for r in plan.ranks}
    out = {}
    for r in plan.ranks:
        for s in r.steps:
            if s.op == "send" and s.tensor.startswith(prefix):
                w = plan.tensors[s.tensor]
                out[(r.device_index, s.tensor, device[s.to])] = int(np.prod(w.shape)) * 4
    return out


def band_nodes(dep: Deployment, layer: str) -> dict[int, onnx.NodeProto]:
    """Device -> the node computing its band of ``layer``, from the sub-models."""
    out = {}
    for r in dep.plan.ranks:
        for s in r.steps:
            if isinstance(s, Run):
                for node in dep.segments[s.segment].graph.node:
                    if node.name == f"{layer}.band{r.device_index}":
                        out[r.device_index] = node
    return out


def pads(node: onnx.NodeProto) -> list[int]:
    return next(list(a.ints) for a in node.attribute if a.name == "pads")


def test_strided_dilated_conv_with_asymmetric_pads(tmp_path: Path) -> None:
    """A 3x3 Conv, stride 2, dilation 2, pads top 2 / bottom 0, 13 output rows in bands of 6,
    4 and 3: each device receives the input rows its band reads (entry's Slice, sent at the
    start), pads only at the image's borders, and the bands are gathered along the rows."""
    nodes = [n("Conv", ["x", "w", "b"], ["y"], strides=[2, 2], dilations=[2, 2], pads=[2, 1, 0, 1])]
    net = onnx_net(
        tmp_path, "strided", nodes, [1, 3, 27, 11], ["y"], [weight("w", [4, 3, 3, 3], 1),
        weight("b", [4], 2)],
    )  # fmt: skip
    g = net.graph
    assert int(g.out_rows[0]) == 13
    m = sized(g, 3, {g.names[0]: [6, 4, 3]})
    dep = partition(net, m, platform(3))
    # band [o0, o1) reads rows [2 o0 - 2, 2 (o1 - 1) - 2 + 5) of x, clipped to [0, 27)
    assert sorted(sends(dep.plan, "x")) == [(0, "x.rows10_21", 1), (0, "x.rows18_27", 2)]
    (gather,) = steps_on(dep.plan, 0, "gather", "y")
    assert gather.axis == 2
    assert [(p.source, p.range) for p in gather.parts] == [(0, (0, 6)), (1, (6, 10)), (2, (10, 13))]
    # the image's top padding on the first band only; no bottom padding is read by any band
    nodes_ = band_nodes(dep, g.names[0])
    assert {d: pads(nd) for d, nd in nodes_.items()} == {
        0: [2, 1, 0, 1], 1: [0, 1, 0, 1], 2: [0, 1, 0, 1]
    }  # fmt: skip
    assert_equal_outputs(net, m, platform(3))


@pytest.mark.parametrize(("auto", "columns"), [("SAME_UPPER", [1, 2]), ("SAME_LOWER", [2, 1])])
def test_auto_pad_same(tmp_path: Path, auto: str, columns: list[int]) -> None:
    """auto_pad SAME_*: a 4x4 kernel, stride 2, over 13 x 11: the rows pad 3 (top 1, bottom
    2 for UPPER; 2 and 1 for LOWER), the columns 3, resolved from the input's width, kernel
    columns and stride: the odd column on the right for UPPER, on the left for LOWER."""
    nodes = [n("Conv", ["x", "w"], ["y"], strides=[2, 2], auto_pad=auto, kernel_shape=[4, 4])]
    net = onnx_net(tmp_path, auto, nodes, [1, 2, 13, 11], ["y"], [weight("w", [3, 2, 4, 4], 3)])
    g = net.graph
    assert tuple(g.layers[0].output_shape) == (1, 3, 7, 6)
    m = sized(g, 2, {g.names[0]: [4, 3]})
    dep = partition(net, m, platform(2))
    top, bottom = (1, 2) if auto == "SAME_UPPER" else (2, 1)
    got = {d: pads(nd) for d, nd in band_nodes(dep, g.names[0]).items()}
    assert got == {0: [top, columns[0], 0, columns[1]], 1: [0, columns[0], bottom, columns[1]]}
    assert_equal_outputs(net, m, platform(2))


def pool_chain(tmp_path: Path, rows: int = 15, pool: tuple = (3, 2, 1)) -> Net:
    """conv1 (3x3, pads 1) -> Relu -> MaxPool (kernel, stride, pads ``pool``) -> AveragePool
    (3x3, stride 1, pads 1, padding not counted), on a 3 x ``rows`` x 9 image."""
    k, s, p = pool
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
          name="maxpool"),
        n("AveragePool", ["p1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="avgpool"),
    ]  # fmt: skip
    inits = [weight("w1", [6, 3, 3, 3], 1), weight("b1", [6], 2)]
    return onnx_net(tmp_path, f"pools{rows}", nodes, [1, 3, rows, 9], ["a"], inits)


def test_pool_followers_on_bands_receive_halos(tmp_path: Path) -> None:
    """conv1's 15 rows as 7 + 8: Relu runs on the same bands; MaxPool (3x3, stride 2, pad 1)
    on [0, 4) and [4, 8) (row 4's window starts at row 7, device 1's), so device 0's band
    reads row 7 of r1 from device 1; AveragePool (3x3, pad 1) on [0, 5) and [5, 8): device
    0 reads rows 4 and 5 of p1 from device 1. Nothing else of the chain crosses, nothing of
    it is gathered but its last output."""
    net = pool_chain(tmp_path)
    g = net.graph
    m = sized(g, 2, {"conv1": [7, 8]}, devices=dict.fromkeys(("relu1", "maxpool", "avgpool"), 1))
    dep = partition(net, m, platform(2))
    plan = dep.plan
    row = 6 * 9 * 4  # one row of r1 (6 channels x 9 columns, float32)
    assert sends(plan, "r1") == {(1, "r1.rows7_8", 0): row}
    assert sends(plan, "p1") == {(1, "p1.rows4_6", 0): 2 * 6 * 5 * 4}
    assert sends(plan, "c1") == {}
    for t in ("c1", "r1", "p1"):
        assert not any(steps_on(plan, d, "gather", t) for d in (0, 1))
    (gather,) = steps_on(plan, 1, "gather", "a")
    assert [(p.source, p.range) for p in gather.parts] == [(0, (0, 5)), (1, (5, 8))]
    assert_equal_outputs(net, m, platform(2))


def test_an_empty_band_computes_nothing_and_moves_nothing(tmp_path: Path) -> None:
    """conv1's 16 rows as 1, 1, 14 over three devices; a 4x4 MaxPool of stride 4 gives
    device 1 no row (output row 0 starts in device 0's band, row 1 in device 2's): device 1
    runs no band of it, receives nothing for it and sends its r1 band (all of it) to device
    0, whose pooled row reads r1's rows 0-3."""
    net = pool_chain(tmp_path, rows=16, pool=(4, 4, 0))
    g = net.graph
    m = sized(g, 3, {"conv1": [1, 1, 14]})
    dep = partition(net, m, platform(3))
    plan = dep.plan
    assert set(band_nodes(dep, "maxpool")) == {0, 2}
    assert set(band_nodes(dep, "avgpool")) == {0, 2}
    assert sends(plan, "r1") == {(1, "r1.band1", 0): 6 * 9 * 4, (2, "r1.rows2_4", 0): 2 * 6 * 9 * 4}
    dev1 = next(r for r in plan.ranks if r.device_index == 1)
    assert [s.op for s in dev1.steps] == ["recv", "run", "send"]  # x's rows, conv1+relu1, r1
    (gather,) = steps_on(plan, 0, "gather", "a")
    assert [(p.source, p.range) for p in gather.parts] == [(0, (0, 2)), (2, (2, 4))]
    assert_equal_outputs(net, m, platform(3))


def test_depthwise_conv_by_rows(tmp_path: Path) -> None:
    """Two depthwise Convs (group 8; stride 2 then 1) by rows over two devices: each band
    runs the node with its group and the whole [8, 1, 3, 3] weight."""
    nodes = [
        n("Conv", ["x", "w1"], ["d1"], group=8, strides=[2, 2], pads=[1, 1, 1, 1], name="dw1"),
        n("Conv", ["d1", "w2"], ["d2"], group=8, pads=[1, 1, 1, 1], name="dw2"),
    ]
    inits = [weight("w1", [8, 1, 3, 3], 4), weight("w2", [8, 1, 3, 3], 5)]
    net = onnx_net(tmp_path, "depthwise", nodes, [1, 8, 14, 10], ["d2"], inits)
    m = sized(net.graph, 2, {"dw1": [3, 4], "dw2": [4, 3]})
    dep = partition(net, m, platform(2))
    for node in band_nodes(dep, "dw1").values():
        assert {a.name: helper.get_attribute_value(a) for a in node.attribute}.get("group") == 8
    for model in dep.segments.values():
        for t in model.graph.initializer:
            if t.name in ("w1", "w2"):
                assert list(t.dims) == [8, 1, 3, 3]
    assert_equal_outputs(net, m, platform(2))


def conv_transpose_net(tmp_path: Path, name: str, attrs: dict, rows: int = 7) -> Net:
    """conv (3x3, pads 1) -> ConvTranspose (``attrs``) -> Relu, on a 3 x ``rows`` x 6 image:
    the ConvTranspose reads a row-split Conv's bands, and a Relu follows it on its bands."""
    k = attrs.pop("kernel", 3)
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        n("ConvTranspose", ["c", "wt", "bt"], ["t"], name="convt", **attrs),
        n("Relu", ["t"], ["y"], name="relu"),
    ]
    inits = [weight("w1", [4, 3, 3, 3], 1), weight("b1", [4], 2)]
    inits += [weight("wt", [4, 5, k, k], 3), weight("bt", [5], 4)]
    return onnx_net(tmp_path, name, nodes, [1, 3, rows, 6], ["y"], inits)


CONV_TRANSPOSE = {
    # upsampling as PyTorch writes it: 2 x rows (7 -> 14), the last row from output_padding
    "k3s2p1op1": {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
    # no bottom padding: the last output row lies past every input row's reach (bias only)
    "k3s2top1": {"strides": [2, 2], "pads": [1, 0, 0, 0], "output_padding": [1, 0]},
    "k4s2p1": {"strides": [2, 2], "pads": [1, 1, 1, 1], "kernel": 4},
    "k3s3d2": {"strides": [3, 3], "dilations": [2, 2], "pads": [2, 0, 1, 0]},
    "k3s1p1": {"pads": [1, 1, 1, 1]},
}


@pytest.mark.parametrize("case", sorted(CONV_TRANSPOSE))
def test_conv_transpose_by_rows(tmp_path: Path, case: str) -> None:
    """A ConvTranspose split by rows into three uneven bands, reading a Conv's bands (kept:
    halos cross) and followed by a Relu on its bands, equals the whole model: strides 1 to 3,
    dilation, asymmetric pads, output_padding (a band reaching into it gets its own)."""
    net = conv_transpose_net(tmp_path, case, dict(CONV_TRANSPOSE[case]))
    g = net.graph
    i = g.index["convt"]
    assert g.row_splittable[i] and g.row_transposed[i]
    out = int(g.out_rows[i])
    bands = [out // 3, out - out // 3 - 2, 2]
    m = sized(g, 3, {"conv": [3, 2, 2], "convt": bands})
    assert_equal_outputs(net, m, platform(3))
    last = sized(g, 3, {"conv": [2, 3, 2], "convt": [out - 2, 1, 1]})
    assert_equal_outputs(net, last, platform(3))


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [2, 2], "auto_pad": "SAME_UPPER"},  # padding resolved from the output
        {"strides": [2, 2], "output_shape": [14, 12]},  # an output size of its own
        {"strides": [2, 2], "kernel": 1},  # rows no input row reaches between the strides
    ],
)
def test_conv_transpose_that_does_not_fit_rows_splits_by_channels_only(
    tmp_path: Path, attrs: dict
) -> None:
    net = conv_transpose_net(tmp_path, "nofit", dict(attrs))
    i = net.graph.index["convt"]
    assert net.graph.splittable[i] and not net.graph.row_splittable[i]


def test_conv_transpose_bands_by_hand(tmp_path: Path) -> None:
    """k3s2, pads top 1 only, output_padding 1, over 7 rows: 15 output rows, row o is u = o + 1
    of the rows the node makes unpadded, input row i reaches u in [2i, 2i + 3), and u = 15
    (o = 14) is output_padding's, reached by no input row. Bands [0, 5), [5, 14), [14, 15)
    read input rows [0, 3), [2, 7) and [6, 7) (the last one, past every row's reach, reads the
    last row). Their top pads u0 - 2 lo: 1, 2, 3; their bottom (hi - lo - 1) x 2 + 3 - top -
    rows: 1, 0 and -1, which the last band makes up with an output_padding of 1."""
    net = conv_transpose_net(tmp_path, "byhand", dict(CONV_TRANSPOSE["k3s2top1"]))
    g = net.graph
    assert int(g.out_rows[g.index["convt"]]) == 15
    m = sized(g, 3, {"convt": [5, 9, 1]})
    dep = partition(net, m, platform(3))
    got = {}
    for d, node in band_nodes(dep, "convt").items():
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        got[d] = (list(a["pads"]), list(a["output_padding"]))
    assert got == {
        0: ([1, 0, 1, 0], [0, 0]), 1: ([2, 0, 0, 0], [0, 0]), 2: ([3, 0, 0, 0], [1, 0])
    }  # fmt: skip
    # the input rows each band reads: cut from c on device 0, which computed it whole
    assert sorted(sends(dep.plan, "c")) == [(0, "c.rows2_7", 1), (0, "c.rows6_7", 2)]
    assert_equal_outputs(net, m, platform(3))


def two_convs(tmp_path: Path, opset: int = 17) -> Net:
    nodes = [
        n("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        n("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
    ]
    inits = [weight("w1", [6, 4, 3, 3], 1), weight("w2", [5, 6, 3, 3], 2)]
    return onnx_net(tmp_path, f"two_convs{opset}", nodes, [1, 4, 12, 10], ["c2"], inits, opset)


@pytest.mark.parametrize("opset", [9, 17])
def test_consecutive_row_splits_keep_bands_and_send_only_halos(tmp_path: Path, opset: int) -> None:
    """conv1 and conv2 (3x3, pads 1) each as rows [0, 6) and [6, 12) on devices 0 and 1:
    conv1's output stays as bands; device 0 reads row 6 of it from device 1, device 1 row 5
    from device 0: two halo rows of 6 channels x 10 columns, 480 bytes. By hand, all bytes:
    device 0 sends x's rows 5-11 (7 x 4 x 10 floats, 1,120 bytes) and its halo row (240);
    device 1 its halo row (240) and its band of c2 (6 x 5 x 10 floats, 1,200) to the owner.
    Opset 9 cuts the rows with a Slice of attributes, 17 with one of inputs."""
    net = two_convs(tmp_path, opset)
    m = sized(net.graph, 2, {"conv1": [6, 6], "conv2": [6, 6]})
    plan = partition(net, m, platform(2)).plan
    halo = sends(plan, "c1")
    assert halo == {(0, "c1.rows5_6", 1): 240, (1, "c1.rows6_7", 0): 240}
    assert sum(halo.values()) == 2 * 6 * 10 * 4  # halo rows x bytes of a row
    assert not any(steps_on(plan, d, "gather", "c1") for d in (0, 1))
    assert sent_by_device(plan, 2).tolist() == [1120 + 240, 240 + 1200]
    assert_equal_outputs(net, m, platform(2))


def test_rows_of_a_gathered_input_are_cut_after_the_gather(tmp_path: Path) -> None:
    """conv1 by channels over devices 0, 1 (3 + 3), conv2 by rows over 1, 2 (5 + 5): device 1
    (conv1's owner: conv2's first device) gathers c1 and cuts its band's rows itself; device
    2, with no part of c1, receives only the rows its band reads, [4, 10), which device 1
    cuts right after its gather step, before conv2. By hand: device 0 sends x (3 x 10 x 8
    floats, 960 bytes) and its part of c1 (960), device 1 the rows (6 x 6 x 8 floats, 1,152),
    device 2 its band of c2 to the owner (5 x 4 x 8 floats, 640): the model's figures."""
    from tests.helpers.platforms import model

    nodes = [
        n("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        n("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
    ]
    inits = [weight("w1", [6, 3, 3, 3], 1), weight("w2", [4, 6, 3, 3], 2)]
    net = onnx_net(tmp_path, "gathered", nodes, [1, 3, 10, 8], ["c2"], inits)
    m = sized(net.graph, 3, {"conv2": [0, 5, 5]}, {"conv1": [3, 3, 0]})
    plan = partition(net, m, platform(3)).plan
    dev1 = next(r for r in plan.ranks if r.device_index == 1)
    ops_ = [(s.op, getattr(s, "tensor", None) or s.layers) for s in dev1.steps]
    at = ops_.index(("gather", "c1"))
    assert ops_[at + 1 : at + 3] == [("run", []), ("send", "c1.rows4_10")]
    assert sent_by_device(plan, 3).tolist() == [960 + 960, 1152, 640]
    predicted = model(net.graph, platform(3)).evaluate(m).bytes_sent[0]
    np.testing.assert_allclose(sent_by_device(plan, 3), predicted, rtol=1e-9)
    assert_equal_outputs(net, m, platform(3))


def three_kinds(tmp_path: Path) -> Net:
    """conv_a -> relu_a -> conv_b (stride 2) -> relu_b -> maxpool -> conv_c -> GAP -> flatten
    -> gemm, on a 3 x 16 x 16 image."""
    nodes = [
        n("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1], name="conv_a"),
        n("Relu", ["a"], ["ra"], name="relu_a"),
        n("Conv", ["ra", "wb"], ["b"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv_b"),
        n("Relu", ["b"], ["rb"], name="relu_b"),
        n("MaxPool", ["rb"], ["pb"], kernel_shape=[2, 2], strides=[2, 2], name="maxpool"),
        n("Conv", ["pb", "wc"], ["c"], name="conv_c"),
        n("GlobalAveragePool", ["c"], ["gap"], name="gap"),
        n("Flatten", ["gap"], ["f"], name="flatten"),
        n("Gemm", ["f", "wg"], ["y"], transB=1, name="gemm"),
    ]
    inits = [
        weight("wa", [8, 3, 3, 3], 1),
        weight("wb", [12, 8, 3, 3], 2),
        weight("wc", [6, 12, 1, 1], 3),
        weight("wg", [5, 6], 4),
    ]
    return onnx_net(tmp_path, "three", nodes, [1, 3, 16, 16], ["y"], inits)


def test_a_vertical_cut_a_channel_split_and_a_row_split(tmp_path: Path) -> None:
    """conv_a by rows over devices 0, 1 (9 + 7 rows), relu_a on its bands; conv_b by
    channels over 1, 2 (5 + 7): relu_a's bands are gathered along the rows by device 1 (its
    owner, a reader), which forwards the whole to device 2; the rest on device 2 but the
    Gemm, on device 0."""
    net = three_kinds(tmp_path)
    g = net.graph
    on = {"relu_a": 1, "relu_b": 2, "maxpool": 2, "conv_c": 2, "gap": 2, "flatten": 2}
    m = sized(g, 3, {"conv_a": [9, 7, 0]}, {"conv_b": [0, 5, 7]}, on)
    plan = partition(net, m, platform(3)).plan
    (gather,) = steps_on(plan, 1, "gather", "ra")
    assert gather.axis == 2 and [(p.source, p.range) for p in gather.parts] == [
        (0, (0, 9)), (1, (9, 16))
    ]  # fmt: skip
    assert [s.source for s in steps_on(plan, 2, "recv", "ra")] == [1]  # ranks = devices here
    (gather,) = steps_on(plan, 2, "gather", "pb")
    assert gather.axis == 1
    assert_equal_outputs(net, m, platform(3))


@pytest.mark.parametrize("kind", ["spatial", "three"])
def test_random_row_mappings(tmp_path: Path, kind: str) -> None:
    """Random mappings that split by rows (every row-splittable layer, or a third of the
    layers along either axis) of the three-kinds net and of conv1 -> BN -> Relu -> MaxPool,
    conv2 -> Clip read twice, an LRN and a Gemm -> Relu, over three devices."""
    rng = np.random.default_rng(4)
    for net in (three_kinds(tmp_path), channel_local_net(tmp_path)):
        batch = random_mappings(net.graph, 3, kind, 40, rng)
        with_rows = np.flatnonzero((batch.axis == 1).any(axis=1))[:8]
        assert len(with_rows) >= 4
        for p in with_rows.tolist():
            assert_equal_outputs(net, batch.take(p), platform(3))


@pytest.mark.parametrize("kind", ["spatial", "three"])
def test_plan_sends_what_the_model_counts(tmp_path: Path, kind: str) -> None:
    """Every byte the plan sends for random mappings that split by rows is a byte the
    analytical model counts, device by device: slices of whole tensors, halos, gathers."""
    from tests.helpers.platforms import model

    rng = np.random.default_rng(11)
    nets = (
        three_kinds(tmp_path),
        channel_local_net(tmp_path),
        pool_chain(tmp_path),
        conv_transpose_net(tmp_path, "convt", dict(CONV_TRANSPOSE["k3s2top1"])),
    )
    checked = 0
    for net in nets:
        batch = random_mappings(net.graph, 3, kind, 30, rng)
        predicted = model(net.graph, platform(3)).evaluate(batch).bytes_sent
        for p in np.flatnonzero((batch.axis == 1).any(axis=1)).tolist():
            plan = partition(net, batch.take(p), platform(3)).plan
            np.testing.assert_allclose(sent_by_device(plan, 3), predicted[p], rtol=1e-9)
            checked += 1
    assert checked >= 20


def test_rows_two_bands_read_cross_once(tmp_path: Path) -> None:
    """conv0 whole on device 0; two 1x1 Convs by rows over devices 0 and 1 both read its
    rows [5, 10): they cross to device 1 once (a tensor crosses to a device at most once)."""
    nodes = [
        n("Conv", ["x", "w0"], ["y0"], pads=[1, 1, 1, 1], name="conv0"),
        n("Conv", ["y0", "wa"], ["a"], name="conv_a"),
        n("Conv", ["y0", "wb"], ["b"], name="conv_b"),
    ]
    inits = [
        weight("w0", [4, 3, 3, 3], 1),
        weight("wa", [5, 4, 1, 1], 2),
        weight("wb", [3, 4, 1, 1], 3),
    ]
    net = onnx_net(tmp_path, "twice", nodes, [1, 3, 10, 6], ["a", "b"], inits)
    m = sized(net.graph, 2, {"conv_a": [5, 5], "conv_b": [5, 5]}, {"conv0": [4, 0]})
    plan = partition(net, m, platform(2)).plan
    assert sends(plan, "y0") == {(0, "y0.rows5_10", 1): 5 * 4 * 6 * 4}
    assert len(steps_on(plan, 1, "recv", "y0.rows5_10")) == 1
    assert_equal_outputs(net, m, platform(2))


def test_a_follower_that_cannot_run_on_bands_runs_whole(tmp_path: Path) -> None:
    """After a Conv split by rows, GlobalAveragePool (channel-local, not row-local) runs whole
    on its own device, on the Conv's bands gathered along the rows; after the same Conv split
    by channels it runs on the parts (as before)."""
    net = three_kinds(tmp_path)
    g = net.graph
    on = dict.fromkeys(("relu_a", "conv_b", "relu_b", "maxpool", "gap", "flatten", "gemm"), 1)
    rows = sized(g, 2, {"conv_c": [2, 2]}, devices=on)
    share = rows.dense(g)[0][0]
    root = layout_of(g, rows.sizes[0], rows.axis[0])[0]
    assert part_rows(g, share, root)[g.index["gap"]] == g.index["gap"]
    channels = sized(g, 2, {}, {"conv_c": [3, 3]}, on)
    assert part_rows(g, channels.dense(g)[0][0])[g.index["gap"]] == g.index["conv_c"]
    plan = partition(net, rows, platform(2)).plan
    (gather,) = steps_on(plan, 1, "gather", "c")
    assert gather.axis == 2 and [p.range for p in gather.parts] == [(0, 2), (2, 4)]
    assert_equal_outputs(net, rows, platform(2))
    assert_equal_outputs(net, channels, platform(2))


def residual_net(tmp_path: Path) -> Net:
    """conv1 -> relu1 -> conv2 -> Add(relu1, conv2) -> relu2, on 8 x 10 x 10."""
    nodes = [
        n("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        n("Add", ["r1", "c2"], ["s"], name="add"),
        n("Relu", ["s"], ["y"], name="relu2"),
    ]
    inits = [weight("w1", [8, 8, 3, 3], 1), weight("w2", [8, 8, 3, 3], 2)]
    return onnx_net(tmp_path, "residual", nodes, [1, 8, 10, 10], ["y"], inits)


def test_residual_add_runs_on_the_bands_of_row_split_convs(tmp_path: Path) -> None:
    """Both convs by rows over 0 and 1 (conv1 5/5, conv2 4/6): the Add and the Relu after it
    are joins, on the bands of the Add's first input (relu1's, [0, 5) and [5, 10)), so relu1
    stays as bands for conv2 and the Add alike and nothing is gathered before the output.
    What crosses, worked out by hand (a row is 8 channels x 10 x 4 B = 320 B): conv1's band
    [5, 10) on 1 reads the image's rows [4, 10) from the entry, 0 (1920 B); conv2's band
    [4, 10) on 1 reads relu1's rows [3, 10), [3, 5) from 0 (640 B); the Add's band [0, 5) on 0
    reads conv2's row 4 from 1 (320 B); relu2 makes the graph output, whose band [0, 5) on 0
    is gathered on its owner, 1 (1600 B). The model counts the same."""
    net = residual_net(tmp_path)
    g = net.graph
    m = sized(g, 2, {"conv1": [5, 5], "conv2": [4, 6]}, devices={"add": 1, "relu2": 1})
    root, lo, hi, keep = layout_of(g, m.sizes[0], m.axis[0])
    assert root.tolist() == [0, 0, 2, 3, 4]
    assert lo[3:, :2].tolist() == [[0, 5], [0, 5]] and hi[3:, :2].tolist() == [[5, 10]] * 2
    assert keep.tolist() == [False, True, True, True, False]
    plan = partition(net, m, platform(2)).plan
    assert not [s for r in plan.ranks for s in r.steps if s.op == "gather" and s.tensor != "y"]
    assert sends(plan, "") == {
        (0, "x.rows4_10", 1): 1920,
        (0, "r1.rows3_5", 1): 640,
        (1, "c2.rows4_5", 0): 320,
        (0, "y.band0", 1): 1600,
    }
    assert_equal_outputs(net, m, platform(2))
    from tests.helpers.platforms import model

    assert model(g, platform(2)).evaluate(m).bytes_sent[0].tolist() == [1920 + 640 + 1600, 320]


def test_a_join_whose_input_is_read_whole_elsewhere_runs_whole(tmp_path: Path) -> None:
    """conv2 by channels, not rows: relu1's bands are gathered (conv2's parts read it
    whole), so the Add, one of whose inputs is not on bands, runs whole on its device, and
    relu2 after it."""
    net = residual_net(tmp_path)
    g = net.graph
    m = sized(g, 2, {"conv1": [5, 5]}, {"conv2": [4, 4]}, devices={"add": 1, "relu2": 1})
    root, _, _, keep = layout_of(g, m.sizes[0], m.axis[0])
    assert root.tolist() == [0, 0, -1, -1, -1] and not keep.any()
    plan = partition(net, m, platform(2)).plan
    for dev in (0, 1):
        (gather,) = steps_on(plan, dev, "gather", "r1")
        assert gather.axis == 2
    assert_equal_outputs(net, m, platform(2))


@pytest.mark.parametrize("early_reader", [False, True])
def test_dense_block_concat_after_row_split_convs(tmp_path: Path, early_reader: bool) -> None:
    """A dense block's convs a, b, c by rows over devices 0 and 1 (each read by the next conv
    and by the Concats: gathered), the Concats and the 1x1 convs after them on device 1."""
    net = dense_block_net(tmp_path, early_reader)
    g = net.graph
    on = {name: 1 for name in g.names if name not in ("a", "b", "c")}
    m = sized(g, 2, {"a": [3, 3], "b": [2, 4], "c": [4, 2]}, devices=on)
    assert_equal_outputs(net, m, platform(2))


def test_dense_block_concats_run_on_the_bands(tmp_path: Path) -> None:
    """The dense block with every conv by rows over 0 and 1 (3 rows each): both Concats are
    joins on the bands (along the channels, each device its own rows of every input), so
    a, b and c stay as bands for the convs and the Concats alike; the 1x1 convs d and f
    read no halo, and only f, the output, is gathered. What crosses, by hand: the image's rows
    [2, 6) to device 1 (4 rows x 8 channels x 6 x 4 B = 768 B), one halo row each way of a
    and of b for the 3x3 convs b and c (192 B each), and f's band on device 1 to its owner,
    0 (3 x 8 x 6 x 4 B = 576 B)."""
    net = dense_block_net(tmp_path, False)
    g = net.graph
    m = sized(g, 2, {name: [3, 3] for name in ("a", "b", "c", "d", "f")})
    root = layout_of(g, m.sizes[0], m.axis[0])[0]
    assert root[g.index["cat"]] == g.index["cat"] and root[g.index["cat2"]] == g.index["cat2"]
    plan = partition(net, m, platform(2)).plan
    assert [s.tensor for r in plan.ranks for s in r.steps if s.op == "gather"] == ["f"]
    assert sent_by_device(plan, 2).tolist() == [768 + 192 * 2, 192 * 2 + 576]
    assert_equal_outputs(net, m, platform(2))


def every_row_layer_by_rows(net: Net) -> Mappings:
    """Every layer that can split by rows over devices 0 and 1, all else on device 0."""
    g = net.graph
    rows = [int(i) for i in np.flatnonzero(g.row_splittable)]
    lists = [[[0, 1] if g.row_splittable[i] else [0] for i in range(len(g))]]
    return from_device_lists(g, 2, lists, rows=rows)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vgg16", "mobilenetv2"])
def test_zoo_networks_by_rows(name: str) -> None:
    """VGG-16 (13 Convs, their Relus and MaxPools on the bands, kept from Conv to Conv: only
    halos cross until the last MaxPool's bands are gathered for the classifier) and
    MobileNetV2 (52 Convs, depthwise ones of stride 2 among them; BatchNormalization and
    Clip on the bands; the residual Adds joins on them) with every row-splittable layer by
    rows over two devices."""
    net = load_net({"name": name})
    m = every_row_layer_by_rows(net)
    assert int((m.axis == 1).sum()) == int(net.graph.row_splittable.sum()) > 10
    assert_equal_outputs(net, m, platform(2))
    if name == "vgg16":  # one gather, of the last MaxPool's bands
        plan = partition(net, m, platform(2)).plan
        gathers = [s for r in plan.ranks for s in r.steps if s.op == "gather"]
        pool5 = net.graph.layers[net.graph.index["pool5"]].outputs[0].name
        assert [(s.tensor, s.axis) for s in gathers] == [(pool5, 2)]
    if name == "mobilenetv2":  # one gather too: the last Clip's bands, for the global pool
        plan = partition(net, m, platform(2)).plan
        gathers = [s for r in plan.ranks for s in r.steps if s.op == "gather"]
        assert len(gathers) == 1 and gathers[0].axis == 2


def test_a_layer_that_cannot_split_by_rows_is_one_line(tmp_path: Path) -> None:
    """A Gemm split by rows (a hand-made mapping: the builders refuse it already) and a
    Conv's bands that do not cover its rows: one line naming the layer, before anything is
    cut."""
    net = three_kinds(tmp_path)
    g = net.graph
    m = sized(g, 2, {}, {"gemm": [2, 3]})
    m.axis[0, int(np.searchsorted(g.split_layers, g.index["gemm"]))] = 1
    with pytest.raises(DseError, match=r"'gemm' \(Gemm\) cannot be split by rows") as e:
        partition(net, Mappings(m.device, m.sizes, m.axis), platform(2))
    assert "\n" not in str(e.value)
    short = sized(g, 2, {"conv_a": [9, 7]})
    short.sizes[0, int(np.searchsorted(g.split_layers, g.index["conv_a"]))] = [9, 6]
    with pytest.raises(DseError, match="'conv_a' cover 15 of its 16 output rows") as e:
        partition(net, short, platform(2))
    assert "\n" not in str(e.value)


def test_deploy_cli_with_rows_in_horizontal_json(tmp_path: Path) -> None:
    """``python -m dse.deploy`` with AutoDiCE files whose horizontal.json splits conv1 by rows
    (a "spatial" entry): the deployment directory's plan gathers bands along the rows and,
    run in one process, gives the whole model's outputs it stored."""
    import json

    from dse.mapping import to_autodice
    from dse.runtime.deployment.layout import EXPECTED
    from dse.runtime.deployment.plan import input_arrays
    from dse.runtime.deployment.reader import read_plan
    from dse.runtime.rank.inprocess import run_plan
    from tests.helpers.cli import run_module

    net = pool_chain(tmp_path)
    on = dict.fromkeys(("relu1", "maxpool", "avgpool"), 1)
    m = sized(net.graph, 2, {"conv1": [7, 8]}, devices=on)
    keys = ["localhost_cpu0", "localhost_cpu1"]
    mapping, horizontal = to_autodice(net.graph, keys, m)
    assert horizontal == {"conv1": ["spatial", [7], keys]}
    (tmp_path / "mapping.json").write_text(json.dumps(mapping))
    (tmp_path / "horizontal.json").write_text(json.dumps(horizontal))
    out = tmp_path / "dep"
    r = run_module(
        "dse.deploy", "+net=onnx", f"net.path={tmp_path / 'pools15.onnx'}", "platform=localhost",
        f"mapping={tmp_path / 'mapping.json'}", f"horizontal={tmp_path / 'horizontal.json'}",
        f"out={out}",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    plan = read_plan(out)
    assert [(s.tensor, s.axis) for rk in plan.ranks for s in rk.steps if s.op == "gather"] == [
        ("a", 2)
    ]
    got = run_plan(plan, out, input_arrays(plan))
    with np.load(out / EXPECTED) as expected:
        want = expected["o0"]
    assert np.abs(got["a"] - want).max() <= RTOL * np.abs(want).max()


@pytest.fixture(scope="module")
def localhost():
    from dse.platform import load_platform
    from tests.helpers.cli import ROOT

    return load_platform(yaml.safe_load((ROOT / "conf/platform/localhost.yaml").read_text()))


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["spatial", "three", "joins"])
def test_two_ranks(tmp_path: Path, localhost, kind: str) -> None:
    """Under mpiexec with two ranks: the pooling chain by rows (halos inside it); the
    three-kinds net with conv_a by rows, conv_b by channels and a vertical cut; and the dense
    block by rows everywhere, b and c on other bands than a's, so that each Concat (a join,
    on a's bands) reads a row of each from the other rank. Rank 0 checks the outputs against
    the whole model's, after measured iterations and a stream of frames."""
    from dse.runtime.launch.deploy import deploy
    from dse.runtime.launch.mpiexec import launch

    if kind == "spatial":
        net = pool_chain(tmp_path)
        on = dict.fromkeys(("relu1", "maxpool", "avgpool"), 1)
        m = sized(net.graph, 2, {"conv1": [7, 8]}, devices=on)
    elif kind == "three":
        net = three_kinds(tmp_path)
        on = {"relu_a": 1, "relu_b": 1, "maxpool": 1, "conv_c": 1, "gap": 1, "flatten": 1}
        m = sized(net.graph, 2, {"conv_a": [9, 7]}, {"conv_b": [5, 7]}, on)
    else:
        net = dense_block_net(tmp_path, False)
        bands = {"a": [3, 3], "b": [2, 4], "c": [2, 4], "d": [3, 3], "f": [3, 3]}
        m = sized(net.graph, 2, bands)
        root = layout_of(net.graph, m.sizes[0], m.axis[0])[0]
        assert root[net.graph.index["cat"]] == net.graph.index["cat"]
    out = tmp_path / kind
    plan = deploy(net, localhost, m, out, warmup=1, iterations=2, stream=4)
    assert any(s.op == "gather" and s.axis == 2 for r in plan.ranks for s in r.steps)
    r = launch(out, timeout_s=120)
    assert r.status == "ok", r.reason
    # the outputs checked are the last of 4 frames streamed with several in flight
    assert r.equivalence.passed and r.equivalence.max_rel_error <= RTOL
    assert r.stream.frames == 4 and r.stream.period_ms > 0


def test_the_model_counts_the_plans_bytes_and_sub_models_on_the_zoo() -> None:
    """The model's bytes per device equal the partitioner's plan's (an independent count: the
    plan's send steps and wire tensors) on the zoo: every row-splittable layer by rows over two
    devices (ResNet-50 and GoogLeNet read some rows twice: a piece crosses once), and random
    three-kind and spatial mappings over three devices; and so do the sub-models of each
    device (the slicers of the image and of gathered tensors included)."""
    from tests.helpers.platforms import model

    rng = np.random.default_rng(5)
    for name in ("alexnet", "vgg16", "resnet50", "googlenet", "mobilenetv2", "densenet121"):
        net = load_net({"name": name})
        batches = [(every_row_layer_by_rows(net), 2)]
        batches += [(random_mappings(net.graph, 3, k, 2, rng), 3) for k in ("three", "spatial")]
        for batch, n_dev in batches:
            ev = model(net.graph, platform(n_dev)).evaluate(batch)
            for p in range(len(batch)):
                plan = partition(net, batch.take(p), platform(n_dev)).plan
                np.testing.assert_allclose(
                    sent_by_device(plan, n_dev), ev.bytes_sent[p], rtol=1e-9, err_msg=f"{name}"
                )
                segments = {r.device_index: len(r.segments) for r in plan.ranks}
                used = np.flatnonzero(ev.used[p]).tolist()
                assert segments == {d: int(ev.segments[p, d]) for d in used}, name
