"""Layers split by rows in the analytical model: bands, halos, slices and gathers worked out by
hand (bytes, latency, weights)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import tests.helpers.onnx_factory as f
from dse.mapping import from_device_lists
from dse.mapping.rows import layout_of, needed
from dse.net.build import build_graph
from tests.helpers.platforms import RATE, model, platform

F32 = 4


def two_convs(h: int = 8, c_in: int = 2, c: int = 4, pool: bool = False):
    """x [1, c_in, h, 8] -> conv1 (3x3, pad 1) -> conv2 (3x3, pad 1) [-> MaxPool 2x2/2] -> y."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["a", "w2"], ["b" if pool else "y"], name="conv2", pads=[1] * 4),
    ]
    if pool:
        nodes.append(
            helper.make_node(
                "MaxPool", ["b"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2]
            )
        )
    weights = [f.weight("w1", [c, c_in, 3, 3]), f.weight("w2", [c, c, 3, 3], seed=1)]
    return build_graph(f.model(nodes, {"x": [1, c_in, h, 8]}, ["y"], weights), "two_convs")


def test_needed_rows_through_the_receptive_field_by_hand():
    # stride 2, 3 rows dilated by 2 (span 5), top pad 2, 15 input rows:
    # output row o reads rows 2o - 2 .. 2o + 2
    assert needed(0, 3, 2, 5, 2, 15) == (0, 7)  # rows -2..6, clipped at the top
    assert needed(3, 8, 2, 5, 2, 15) == (4, 15)  # rows 4..16, clipped at the bottom
    assert needed(2, 2, 2, 5, 2, 15) == (0, 0)  # an empty band reads nothing
    # asymmetric padding: only the top pad enters (1 here), a 2-row kernel, stride 1
    assert needed(0, 4, 1, 2, 1, 4) == (0, 4)


def test_needed_rows_of_a_transposed_convolution_by_hand():
    # ConvTranspose stride 2, 3 rows (span 3), top pad 1, 7 input rows: input row i reaches
    # output rows 2i - 1 .. 2i + 1, so output row o reads rows ceil((o - 1) / 2) .. (o + 1) // 2
    assert needed(0, 5, 2, 3, 1, 7, True) == (0, 3)  # rows 0..2
    assert needed(5, 14, 2, 3, 1, 7, True) == (2, 7)  # rows 2..7, clipped at the bottom
    assert needed(14, 15, 2, 3, 1, 7, True) == (6, 7)  # past every row's reach: the last row
    assert needed(3, 3, 2, 3, 1, 7, True) == (0, 0)  # an empty band reads nothing
    # stride 3, span 5 (3 rows dilated by 2), pad 2: row o reads ceil((o - 2) / 3) .. (o + 2) // 3
    assert needed(4, 9, 3, 5, 2, 10, True) == (1, 4)


def test_two_convs_by_rows_send_a_slice_halos_and_a_gather():
    """conv1 and conv2 split by rows 4/4 over h0 and h1, the image entering on h0:
    h1's band [4, 8) of conv1 reads image rows [3, 8) (5 rows x 2 ch x 8 x 4 B = 320 B from
    h0); conv1's bands stay (conv2 splits by rows over the same devices); conv2's bands read
    one halo row each way (1 x 4 ch x 8 x 4 B = 128 B); conv2 makes the graph output: h1's
    band (4 x 4 x 8 x 4 B = 512 B) is gathered on the owner, h0."""
    g = two_convs()
    m = from_device_lists(g, 4, [[[0, 1], [0, 1]]], rows=[0, 1])
    assert m.axis.tolist() == [[1, 1]]
    root, lo, hi, keep = layout_of(g, m.sizes[0], m.axis[0])
    assert root.tolist() == [0, 1] and keep.tolist() == [True, False]
    assert lo[:, :2].tolist() == [[0, 4], [0, 4]] and hi[:, :2].tolist() == [[4, 8], [4, 8]]
    ev = model(g, platform()).evaluate(m)
    assert ev.bytes_sent[0].tolist() == [320 + 128, 128 + 512, 0, 0]


def test_a_pool_after_odd_bands_fetches_a_halo_inside_the_chain():
    """conv2 split 3/5 by rows: bands [0, 3), [3, 8); the MaxPool (2x2, stride 2) after it
    runs on bands [0, 2), [2, 4) (output row o goes to the band holding input row 2o), so h0's
    pooled rows 0-1 read conv2's rows [0, 4): row 3 comes from h1 (1 x 4 ch x 8 x 4 B)."""
    g = two_convs(pool=True)
    m = from_device_lists(g, 2, [[[0], [0, 1], [0]]], rows=[1])
    m.sizes[0, 1] = [3, 5]  # conv2's bands: 3 and 5 rows
    root, lo, hi, keep = layout_of(g, m.sizes[0], m.axis[0])
    assert root.tolist() == [-1, 1, 1]
    assert lo[2].tolist() == [0, 2] and hi[2].tolist() == [2, 4]
    ev = model(g, platform(n=2)).evaluate(m)
    # h1's conv2 band [3, 8) reads conv1's rows [2, 8): 6 x 4 x 8 x 4 B from h0, the owner;
    # the pool's halo: 1 row from h1 to h0; h1's pooled band [2, 4): 2 x 4 x 4 x 4 B gathered
    assert ev.bytes_sent[0].tolist() == [6 * 128, 128 + 2 * 4 * 4 * F32]


def test_bands_halve_the_work_and_each_holds_the_whole_weights():
    """16 rows of a 3x3 conv over two devices by rows 8/8: each band is half the MACs (at 1
    MMAC/s), and each device holds the whole weight (memory terms)."""
    g = two_convs(h=16)
    split = from_device_lists(g, 2, [[[0, 1], [0]]], rows=[0])
    whole = from_device_lists(g, 2, [[[0], [0]]])
    mdl = model(g, platform(n=2, bw=1e12))
    ev = mdl.evaluate(split)
    half = g.layers[0].macs / 2 / RATE
    assert ev.busy_s[0, 1] == pytest.approx(half)  # h1 computes its band only
    assert ev.busy_s[0, 0] == pytest.approx(half + g.layers[1].macs / RATE)
    terms = mdl.memory_terms(split)
    w1 = g.layers[0].weight_bytes / 1e6
    assert terms["weights_mb"][0, 1].sum() == pytest.approx(w1)
    assert mdl.memory_terms(whole)["weights_mb"][0, 1].sum() == 0.0


def test_rows_send_fewer_bytes_than_channels_between_two_convs():
    """The same two devices, the same layers: by channels every part needs the whole input and
    every part is gathered by both; by rows only slices and halos cross."""
    g = two_convs(h=32, c_in=8, c=16)
    on = [[[0, 1], [0, 1]]]
    rows = model(g, platform(n=2)).evaluate(from_device_lists(g, 2, on, rows=[0, 1]))
    chans = model(g, platform(n=2)).evaluate(from_device_lists(g, 2, on))
    assert rows.bytes_sent[0].sum() < chans.bytes_sent[0].sum() / 2
    # by hand: the image slice (17 rows x 8 ch x 8 x 4 B), a halo row each way (16 ch), the
    # gather of h1's 16 rows of conv2
    row_in, row_mid = 8 * 8 * F32, 16 * 8 * F32
    assert rows.bytes_sent[0].sum() == pytest.approx(17 * row_in + 2 * row_mid + 16 * row_mid)


def test_a_channel_split_mapping_is_unchanged_by_the_rows():
    """axis 0 everywhere: the figures of the mapping before rows existed (a split conv over
    three devices, gathered)."""
    g = two_convs()
    m = from_device_lists(g, 3, [[[0, 1, 2], [2]]])
    ev = model(g, platform(n=3)).evaluate(m)
    in_b, out_b = 2 * 64 * F32, 4 * 64 * F32
    # the image (on h0) to h1 and h2; conv1's parts gathered on h2 (conv2's device)
    assert ev.bytes_sent[0].sum() == pytest.approx(2 * in_b + 2 * out_b / 4 + out_b / 4)
    assert np.all(m.axis == 0)


@pytest.mark.parametrize("net", ["resnet50", "densenet121"])
def test_a_batch_without_rows_is_scheduled_as_with_them(net):
    """The kernel has a specialisation for batches in which no layer splits by rows (the
    bands' stages left out): random channel and vertical mappings give every figure equal,
    to the bit, alone (that specialisation) and beside a mapping split by rows (the other)."""
    from dse.mapping import Mappings
    from dse.net import load_net

    g = load_net({"name": net}).graph
    rng = np.random.default_rng(7)
    n_dev, size = 4, 40
    lists = []
    for _ in range(size):
        lists.append(
            [
                sorted({int(rng.integers(n_dev)), *rng.integers(n_dev, size=rng.integers(0, 3))})
                if g.splittable[layer]
                else [int(rng.integers(n_dev))]
                for layer in range(len(g))
            ]
        )
    plain = from_device_lists(g, n_dev, lists)
    rows_layers = [i for i in range(len(g)) if g.row_splittable[i]][:6]
    split = [[0, 1] if i in rows_layers else [0] for i in range(len(g))]
    banded = from_device_lists(g, n_dev, [split], rows=rows_layers)
    assert (banded.axis == 1).any() and not (plain.axis == 1).any()
    m = model(g, platform(n=n_dev))
    alone = m.evaluate(plain)
    beside = m.evaluate(Mappings.concat([plain, banded]))
    for field in (
        "latency_s",
        "busy_s",
        "comm_s",
        "memory_mb",
        "energy_j",
        "bytes_sent",
        "segments",
        "span_s",
    ):
        a, b = getattr(alone, field), getattr(beside, field)[:size]
        assert np.array_equal(a, b), field
