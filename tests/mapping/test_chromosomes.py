"""Chromosome decoding: the thesis's worked examples, search-space sizes, validity."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper

import tests.helpers.onnx_factory as f
from chromosomes import (
    CHROMOSOMES,
    AdvancedChromosome,
    NaiveChromosome,
    VerticalChromosome,
    make_chromosome,
)
from dse.errors import DseError
from dse.mapping import check, rules
from dse.net import load_net
from dse.net.build import build_graph
from dse.net.zoo import NETS
from tests.helpers.reference import derive_owner, shares_by_speed, shares_from_counts


def figure8_net():
    """The 6-layer CNN of the thesis's Figure 8a: l1 Conv, l2-l4 not splittable, l5 FC, l6."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["l1"], name="l1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["l1"], ["l2"], name="l2"),
        helper.make_node("MaxPool", ["l2"], ["l3"], name="l3", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["l3"], ["l4"], name="l4"),
        helper.make_node("Gemm", ["l4", "g"], ["l5"], name="l5", transB=1),
        helper.make_node("Softmax", ["l5"], ["l6"], name="l6"),
    ]
    inits = [f.weight("w", [10, 3, 3, 3]), f.weight("g", [10, 10 * 4 * 4])]
    return build_graph(f.model(nodes, {"x": [1, 3, 8, 8]}, ["l6"], inits), "fig8")


def dense(chrom, genes):
    """(share, owner) of the mappings ``genes`` decode to."""
    return chrom.decode(genes).dense(chrom.graph)


def test_advanced_figure_11_decodes_to_figure_9():
    g = figure8_net()
    genes = np.array(
        [
            [0, 0, 1, 2, 0],  # split 1
            [1, 2, 0, 0, 0],  # split 2
            [0, 1, 0, 0, 2],  # split 3
            [2, 1, 0, 0, 0],  # split 4
            [2, 0, 0, 0, 0],
        ]
    )  # split 5
    share, owner = dense(AdvancedChromosome(g, 5, splits=5), genes.reshape(1, -1))
    share = share[0] * 10  # channels out of 10, five parts of 2
    # l1: parts 1..5 on devices 3, 1, 2, 2, 1; l5: on devices 4, 2, 5, 1, 1
    assert share[0].tolist() == [4, 4, 2, 0, 0]
    assert share[4].tolist() == [4, 2, 0, 2, 2]
    # l2-l4 follow l1's first part (device 3), l6 follows l5's first part (device 4)
    for layer in (1, 2, 3):
        assert share[layer].tolist() == [0, 0, 10, 0, 0]
    assert share[5].tolist() == [0, 0, 0, 10, 0]
    # parts are concatenated on the device of the next layer
    assert owner[0].tolist() == [2, 2, 2, 2, 3, 3]


def test_advanced_edge_cases():
    g = figure8_net()
    chrom = AdvancedChromosome(g, 5, splits=2)
    # Figure 10: devices 2 and 4 hold split points 1 and 2, the second row is empty
    fig10 = np.array([[0, 1, 0, 2, 0, 0, 0, 0, 0, 0]])
    share = dense(chrom, fig10)[0][0]
    assert share[:4, 1].tolist() == [1, 1, 1, 1] and share[4:, 3].tolist() == [1, 1]
    # device 2 with 0 as well: device 4 takes everything up to its split point
    only4 = np.array([[0, 0, 0, 2, 0, 0, 0, 0, 0, 0]])
    assert (dense(chrom, only4)[0][0, :, 3] == 1).all()
    # split point short of the end: the last device of row 1 takes the rest; all zeros: device 0
    short = np.array([[1, 0, 0, 0, 0, 0, 0, 0, 0, 0], [0] * 10])
    out = dense(chrom, short)[0]
    assert (out[0, :, 0] == 1).all() and (out[1, :, 0] == 1).all()


def test_leading_non_splittable_layers_follow_the_first_split():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="r"),
        helper.make_node("Conv", ["r", "w"], ["c"], name="c"),
        helper.make_node("Relu", ["c"], ["y"], name="y"),
    ]
    g = build_graph(
        f.model(nodes, {"x": [1, 3, 4, 4]}, ["y"], [f.weight("w", [4, 3, 1, 1])]), "lead"
    )
    share, _ = dense(AdvancedChromosome(g, 3, splits=2), np.array([[0, 1, 0, 1, 0, 1]]))
    assert share[0, 0].tolist() == [0, 1, 0]  # like the first part of the conv
    assert (share[0, 1] * 4).tolist() == [2, 2, 0]  # parts on devices 2 and 1
    assert share[0, 2].tolist() == [0, 1, 0]


def test_naive_decoding_by_hand():
    g = figure8_net()
    chrom = NaiveChromosome(g, 5)
    assert chrom.n_genes == 2 * 5 + 6 - 2  # Eq. 4.5
    #         l1 (5 genes)   l2 l3 l4  l5 (5 genes)  l6
    genes = [2, 0, 1, 1, 0, 4, 4, 3, 3, 3, 3, 3, 3, 1]
    share, owner = dense(chrom, np.array([genes]))
    share = share[0] * 10
    assert share[0].tolist() == [4, 3, 3, 0, 0]  # devices {0, 1, 2}: 10 channels as 4, 3, 3
    assert share[1].tolist() == [0, 0, 0, 0, 10] and share[3].tolist() == [0, 0, 0, 10, 0]
    assert share[4].tolist() == [0, 0, 0, 10, 0]  # repeated device: not split
    assert owner[0].tolist() == [4, 4, 4, 3, 3, 1]


def test_vertical_decoding():
    g = figure8_net()
    share, _ = dense(VerticalChromosome(g, 4), np.array([[0, 2, 6, 0], [3, 0, 0, 0]]))
    dev = share.argmax(axis=2)
    assert dev[0].tolist() == [1, 1, 2, 2, 2, 2]
    assert dev[1].tolist() == [0, 0, 0, 0, 0, 0]  # layers after the last point: extended
    assert (share.max(axis=2) == 1).all()


def test_search_space_sizes_of_the_thesis_alexnet_example():
    g = load_net({"name": "alexnet"}).graph
    assert NaiveChromosome(g, 5).search_space_log10() == pytest.approx(56 * math.log10(5))
    assert AdvancedChromosome(g, 5, splits=5).search_space_log10() == pytest.approx(
        25 * math.log10(9)
    )


@pytest.mark.parametrize("net", NETS)
@pytest.mark.parametrize("name", ["naive", "advanced", "vertical"])
def test_random_genes_decode_to_valid_mappings(net, name):
    g = load_net({"name": net}).graph
    chrom = make_chromosome(name, g, 16, splits=3)
    genes = chrom.sample(40, np.random.default_rng(1))
    genes[0] = chrom.upper  # extremes too
    genes[1] = 0
    mappings = chrom.decode(genes)
    check(g, 16, mappings)  # every layer placed, every splittable layer's channels covered
    share, owner = mappings.dense(g)
    assert share.shape == (40, len(g), 16)
    assert np.allclose(share.sum(axis=2), 1.0)
    parts = (share > 0).sum(axis=2)
    assert (parts[:, ~g.splittable] == 1).all()
    assert ((owner >= 0) & (owner < 16)).all()
    for d in (0, 7):
        single = dense(chrom, chrom.single_device(d)[None])[0]
        assert (single[0, :, d] == 1).all()


def test_bad_chromosome_settings():
    g = load_net({"name": "alexnet"}).graph
    with pytest.raises(DseError, match="unknown chromosome 'fancy'"):
        make_chromosome("fancy", g, 4)
    with pytest.raises(DseError, match="splits=5 must be between 1 and the number of devices"):
        make_chromosome("advanced", g, 4, splits=5)
    relu = build_graph(f.model([helper.make_node("Relu", ["x"], ["y"])], {"x": [4]}, ["y"]), "relu")
    with pytest.raises(DseError, match="no splittable layer"):
        make_chromosome("advanced", relu, 4)
    assert make_chromosome("vertical", relu, 4).n_genes == 4


def test_no_layer_gets_more_parts_than_channels_and_every_mapping_reimports():
    import itertools

    from onnx import helper

    import tests.helpers.onnx_factory as f
    from dse.mapping import from_autodice, to_autodice
    from dse.net.build import build_graph

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),  # 2 output channels
        helper.make_node("Relu", ["c1"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2"),  # 3 output channels
    ]
    inits = [f.weight("w1", [2, 4, 3, 3]), f.weight("w2", [3, 2, 3, 3])]
    g = build_graph(f.model(nodes, {"x": [1, 4, 8, 8]}, ["y"], inits), "tiny")
    chrom = NaiveChromosome(g, 3)
    genes = np.array(list(itertools.product(range(3), repeat=chrom.n_genes)))
    mappings = chrom.decode(genes)
    assert ((mappings.sizes > 0).sum(axis=2) <= g.out_channels[g.split_layers][None, :]).all()
    keys = [f"h{i}_cpu" for i in range(3)]
    for i in range(0, len(genes), 97):
        mapping, horizontal = to_autodice(g, keys, mappings, i)
        again = from_autodice(g, keys, mapping, horizontal)
        assert again.ident() == mappings.ident(i)
        assert np.array_equal(again.sizes[0], mappings.sizes[i])


def test_part_sizes_by_hand():
    def sizes(counts, units, speed=None):
        counts = np.array([[counts]], dtype=np.int32)
        out = np.empty_like(counts)
        if speed is None:
            rules.equal_sizes(counts, np.array([[units], [1]]), np.zeros((1, 1), np.int8), out)
        else:
            rules.speed_sizes(
                counts,
                np.array([[units], [1]]),
                np.zeros((1, 1), np.int8),
                np.array([speed], dtype=float),
                out,
            )
        return out[0, 0].tolist()

    # equal: 10 channels over three devices 4, 3, 3; a device with two parts of four: 6 of 10
    assert sizes([1, 1, 1, 0], 10) == [4, 3, 3, 0]
    assert sizes([2, 1, 0, 1], 10) == [6, 2, 0, 2]
    # 10 channels, device 0 three times as fast: 6, 2, 2; equal speeds: the equal rule 4, 3, 3
    assert sizes([1, 1, 1, 0], 10, [3.0, 1, 1, 1]) == [6, 2, 2, 0]
    assert sizes([1, 1, 1, 0], 10, [1.0, 1, 1, 1]) == [4, 3, 3, 0]
    # 64 channels at 10:1 -> 58.2 : 5.8 -> 58, 6 (largest remainder); a part under one channel
    assert sizes([1, 1, 0, 0], 64, [10.0, 1, 1, 1]) == [58, 6, 0, 0]
    assert sizes([1, 1, 0, 0], 3, [100.0, 1, 1, 1]) == [3, 0, 0, 0]


def test_speed_option_sizes_parts_of_every_hybrid_encoding():
    g = load_net({"name": "alexnet"}).graph
    speed = np.ones((len(g), 4))
    speed[:, 0] = 3.0  # device 0 three times as fast on every layer
    for name in ("naive", "advanced"):
        chrom = make_chromosome(name, g, 4, splits=2)
        fast = CHROMOSOMES[name](g, 4, splits=2, speed=speed)
        genes = chrom.sample(50, np.random.default_rng(0))
        equal, sized = dense(chrom, genes)[0], dense(fast, genes)[0]
        assert np.array_equal(equal > 0, sized > 0) or ((sized > 0) <= (equal > 0)).all()
        both = (equal[:, :, 0] > 0) & ((equal > 0).sum(axis=2) == 2)
        assert both.any()
        assert (sized[:, :, 0][both] > equal[:, :, 0][both]).all()


# --- the compiled decoders against the numpy decoders they replaced --------------------------


def _ref_cover(values, n_items):
    vals = values[..., None, :]
    items = np.arange(1, n_items + 1)[:, None]
    masked = np.where(vals >= items, vals, np.iinfo(np.int64).max)
    best = masked.argmin(axis=-1)
    return np.where(masked.min(axis=-1) == np.iinfo(np.int64).max, -1, best)


def _ref_extend_first_row(cov, values):
    return np.where(cov < 0, values.argmax(axis=-1)[..., None], cov)


def _ref_shares(chrom, counts, layers=slice(None)):
    channels = chrom.graph.out_channels[layers]
    if chrom.speed is None:
        return shares_from_counts(counts, channels)
    return shares_by_speed(counts, channels, chrom.speed[layers])


def reference_decode(chrom, genes):
    """The numpy decoders of every encoding as they were before compilation (slow, direct):
    (share, owner)."""
    g, n_dev = chrom.graph, chrom.n_devices
    genes = np.asarray(genes, dtype=np.int64)
    pop, n_layers = genes.shape[0], len(g)
    if isinstance(chrom, NaiveChromosome):
        present = np.zeros((pop, n_layers, n_dev), dtype=bool)
        layer_of_gene = np.repeat(np.arange(n_layers), chrom.width)
        present[np.arange(pop)[:, None], layer_of_gene[None, :], genes] = True
        share = _ref_shares(chrom, present.astype(np.int64))
    elif isinstance(chrom, VerticalChromosome):
        dev = _ref_extend_first_row(_ref_cover(genes, n_layers), genes)
        share = np.zeros((pop, n_layers, n_dev))
        share[np.arange(pop)[:, None], np.arange(n_layers)[None, :], dev] = 1.0
    else:
        n_sp = len(chrom.split_layers)
        rows = genes.reshape(pop, chrom.splits, n_dev)
        cov = _ref_cover(rows, n_sp)
        cov[:, 0] = _ref_extend_first_row(cov[:, 0], rows[:, 0])
        counts = np.zeros((pop, n_sp, n_dev), dtype=np.int64)
        for p in range(pop):
            for r in range(chrom.splits):
                for s in range(n_sp):
                    if cov[p, r, s] >= 0:
                        counts[p, s, cov[p, r, s]] += 1
        share = np.zeros((pop, n_layers, n_dev))
        share[:, chrom.split_layers] = _ref_shares(chrom, counts, chrom.split_layers)
        others = np.flatnonzero(~g.splittable)
        share[np.arange(pop)[:, None], others[None, :], cov[:, 0][:, chrom.anchor[others]]] = 1.0
    return share, derive_owner(g, share)


@pytest.mark.parametrize("net", ["alexnet", "googlenet"])
@pytest.mark.parametrize("shares", ["equal", "speed"])
@pytest.mark.parametrize(
    "name, splits",
    [("naive", None), ("naive", 2), ("advanced", 2), ("advanced", 5), ("vertical", None)],
)
def test_compiled_decoder_equals_the_numpy_reference(net, shares, name, splits):
    g = load_net({"name": net}).graph
    n_dev = 6
    rng = np.random.default_rng(7)
    speed = rng.uniform(0.2, 5.0, size=(len(g), n_dev)) if shares == "speed" else None
    chrom = CHROMOSOMES[name](g, n_dev, splits=splits, speed=speed)
    genes = chrom.sample(300, rng)
    genes[0], genes[1] = chrom.upper, 0
    genes[2:40] = rng.integers(0, 3, size=(38, chrom.n_genes))  # many ties and repeats
    share, owner = reference_decode(chrom, genes)
    got = chrom.decode(genes)
    got_share, got_owner = got.dense(g)
    assert np.array_equal(got_share, share)  # bit for bit
    assert np.array_equal(got_owner, owner)
    # the whole numbers the reference's shares stand for
    split = g.split_layers
    sizes = np.rint(share[:, split] * np.maximum(g.out_channels[split], 1)[None, :, None])
    assert np.array_equal(got.sizes, sizes.astype(np.int32))
    device = np.where(g.splittable[None], -1, share.argmax(axis=2))
    assert np.array_equal(got.device, device)


@pytest.mark.parametrize("n_dev", [2, 8, 16])
def test_compiled_speed_channels_equal_the_numpy_rule(n_dev):
    """The compiled speed split gives the numpy rule's channels exactly,
    with as many devices as the platforms have (numpy sums 8 or more in another order), equal
    speeds (tied remainders), repeated parts and layers of 1-3 channels."""
    rng = np.random.default_rng(n_dev)
    counts = rng.integers(0, 3, size=(400, 12, n_dev)).astype(np.int32)
    counts[:, :, 0] = np.maximum(counts[:, :, 0], 1)  # every layer has a part
    counts[:50] = np.where(rng.random((50, 12, n_dev)) < 0.7, 1, 0)  # many at one part each
    counts[:50, :, 0] = 1
    channels = np.array([1, 2, 3, 7, 16, 64, 96, 100, 255, 512, 1000, 4096])
    speed = rng.uniform(0.2, 5.0, size=(12, n_dev))
    speed[:4] = 1.0  # equal speeds: remainders tie
    speed[4, : n_dev // 2] = 3.0
    want = np.rint(shares_by_speed(counts, channels, speed) * channels[None, :, None])
    got = np.empty_like(counts)
    units = np.stack([channels, np.ones_like(channels)])
    rules.speed_sizes(counts, units, np.zeros(counts.shape[:2], np.int8), speed, got)
    assert np.array_equal(got, want.astype(np.int32))
    assert (got.sum(axis=2) == channels[None, :]).all()


# --- structured seeds of a first population ---------------------------------------------------


def test_device_order_is_by_total_time_with_the_fastest_devices_host_mates_first():
    from chromosomes.seeds import device_order

    # times per layer 1 / speed; totals: device 0: 4, 1: 1, 2: 2, 3: 1.5
    speed = 1.0 / np.array([[2.0, 0.5, 1.0, 0.75], [2.0, 0.5, 1.0, 0.75]])
    assert device_order(speed).tolist() == [1, 3, 2, 0]
    assert device_order(speed, ["a", "b", "b", "a"]).tolist() == [1, 2, 3, 0]  # 2 beside 1


@pytest.mark.parametrize("name", ["naive", "advanced"])
def test_spread_seeds_split_the_given_layers_over_the_given_devices(name):
    from chromosomes.seeds import spread
    from dse.mapping import from_device_lists

    g = figure8_net()  # l1 and l5 splittable (10 channels each)
    chrom = make_chromosome(name, g, 4, splits=2)
    got = chrom.decode(np.stack([spread(chrom, [2, 0]), spread(chrom, [2, 0], 1, 1)]))
    both, two = [0, 2], [2]
    want = from_device_lists(
        g,
        4,
        [
            [both, two, two, two, both, two],  # every splittable layer over devices 2 and 0
            [two, two, two, two, both, two],  # only the second one (l5)
        ],
    )
    assert got.sizes[0, 0].tolist() == [5, 0, 5, 0]
    assert got.ident(0) == want.ident(0) and got.ident(1) == want.ident(1)
    assert np.array_equal(got.dense(g)[1], want.dense(g)[1])
    if name == "advanced":  # two splits: at most two parts
        assert spread(chrom, [2, 0, 1]) is None


def test_structured_seeds_per_encoding_and_in_a_first_population():
    from types import SimpleNamespace

    from chromosomes.seeds import seed_population, structured_seeds

    g = figure8_net()
    speed = np.ones((len(g), 4))
    speed[:, 3] = 4.0  # device 3 fastest, then 0, 1, 2 (ties to the lower index)
    naive, advanced = make_chromosome("naive", g, 4), make_chromosome("advanced", g, 4)
    seeds = structured_seeds(naive, speed)
    assert len(seeds) == 3  # the fastest 2, 3 and 4 devices
    parts = naive.decode(seeds).sizes[:, 0] > 0  # l1's devices
    assert parts.tolist() == [
        [True, False, False, True],
        [True, True, False, True],
        [True, True, True, True],
    ]
    assert len(structured_seeds(advanced, speed)) == 1  # two splits: two parts at most
    assert len(structured_seeds(make_chromosome("vertical", g, 4), speed)) == 0

    model = SimpleNamespace(
        device_speed=lambda: speed,
        platform=SimpleNamespace(devices=[SimpleNamespace(host=h) for h in "abcd"]),
    )
    x = naive.sample(6, np.random.default_rng(0))
    before = x.copy()
    seed_population(x, naive, model)
    assert np.array_equal(x[:4], before[:4])  # the one-device rows are left alone
    assert np.array_equal(x[4:], seeds[:2])  # as many seeds as fit
