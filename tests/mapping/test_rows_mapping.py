"""Mappings that split layers by rows: the axis in the canonical form, the encodings' axis
genes, keys, AutoDiCE's files with "spatial" entries, random kinds and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from chromosomes import AdvancedChromosome, NaiveChromosome, VerticalChromosome
from dse.errors import DseError
from dse.mapping import (
    check,
    from_autodice,
    from_device_lists,
    random_mappings,
    to_autodice,
)
from dse.mapping.build import ROW_KINDS
from dse.net import load_net


@pytest.fixture(scope="module")
def alexnet():
    return load_net({"name": "alexnet"}).graph


KEYS = ["a_cpu", "a_gpu", "b_cpu"]


def test_axis_genes_one_per_layer_that_splits_both_ways(alexnet):
    g = alexnet
    n_rows = int(g.row_splittable[g.split_layers].sum())
    assert n_rows == 5  # conv1-conv5; fc6-fc8 split by channels only
    for cls in (NaiveChromosome, AdvancedChromosome):
        plain, spatial = cls(g, 3), cls(g, 3, spatial=True)
        assert spatial.n_genes == plain.n_genes + n_rows
        assert spatial.upper[-n_rows:].tolist() == [1] * n_rows
        assert spatial.upper[: plain.n_genes].tolist() == plain.upper.tolist()
    v = VerticalChromosome(g, 3, spatial=True)
    assert v.n_genes == VerticalChromosome(g, 3).n_genes  # the vertical baseline is unchanged


def test_decode_sets_the_axis_where_a_layer_has_parts_only(alexnet):
    g = alexnet
    chrom = NaiveChromosome(g, 3, spatial=True)
    genes = chrom.single_device(1)
    genes[chrom.n_place :] = 1  # every axis gene: rows
    one = chrom.decode(genes[None])
    assert (one.axis == 0).all()  # one device: no layer is split, so no axis
    # conv2 over devices 0 and 2 (its three genes 0, 2, 2), by rows (its axis gene)
    conv2 = g.index["conv2"]
    genes[chrom.start[conv2] : chrom.start[conv2] + 3] = [0, 2, 2]
    m = chrom.decode(genes[None])
    s = int(np.searchsorted(g.split_layers, conv2))
    assert m.axis[0].tolist() == [1 if k == s else 0 for k in range(len(g.split_layers))]
    assert m.sizes[0, s].tolist() == [14, 0, 13]  # 27 output rows, halves by the equal rule
    check(g, 3, m)
    genes[chrom.n_place + 1] = 0  # conv2's axis gene (the second): channels
    assert chrom.decode(genes[None]).sizes[0, s].tolist() == [128, 0, 128]


def test_rows_change_the_key_and_a_lone_part_does_not(alexnet):
    g = alexnet
    on = [[[0, 1]] + [[0]] * (len(g) - 1)]
    by_ch = from_device_lists(g, 2, on)
    by_rows = from_device_lists(g, 2, on, rows=[0])
    assert by_ch.keys()[0] != by_rows.keys()[0]
    alone = from_device_lists(g, 2, [[[0]] * len(g)], rows=[0])  # rows asked, one part
    assert alone.keys()[0] == from_device_lists(g, 2, [[[0]] * len(g)]).keys()[0]
    assert (alone.axis == 0).all()


def test_speed_shares_size_bands_as_they_size_channels(alexnet):
    g = alexnet
    speed = np.ones((len(g), 2))
    speed[:, 1] = 3.0  # device 1 three times as fast
    chrom = NaiveChromosome(g, 2, speed=speed, spatial=True)
    genes = chrom.single_device(0)
    genes[chrom.start[0] : chrom.start[0] + 2] = [0, 1]
    genes[chrom.n_place] = 1  # conv1 by rows: 54 rows, 1 : 3
    m = chrom.decode(genes[None])
    # 13.5 and 40.5: floors 13 and 40, the unit left to the larger remainder, a tie: the lower
    assert m.sizes[0, 0].tolist() == [14, 40]


def test_autodice_round_trip_with_spatial_entries(alexnet):
    g = alexnet
    on = [[[0, 2]] + [[0]] * 15 + [[0, 1]] + [[0]] * 7]  # conv1 by rows, fc6 by channels
    m = from_device_lists(g, 3, on, rows=[0])
    mapping, horizontal = to_autodice(g, KEYS, m)
    assert horizontal["conv1"] == ["spatial", [27], ["a_cpu", "b_cpu"]]
    assert horizontal["fc6"][0] == "lop"
    back = from_autodice(g, KEYS, mapping, horizontal)
    assert back.keys()[0] == m.keys()[0]
    assert (back.axis == m.axis).all() and (back.sizes == m.sizes).all()
    # uneven bands read back as written
    horizontal["conv1"] = ["spatial", [10], ["a_cpu", "b_cpu"]]
    s0 = from_autodice(g, KEYS, mapping, horizontal).sizes[0, 0]
    assert s0.tolist() == [10, 0, 44]


def test_autodice_channel_only_files_are_as_before(alexnet):
    g = alexnet
    on = [[[0, 1]] + [[0]] * (len(g) - 1)]
    _, horizontal = to_autodice(g, KEYS, from_device_lists(g, 3, on))
    assert horizontal == {"conv1": ["lop", [48], ["a_cpu", "a_gpu"]]}


@pytest.mark.parametrize(
    "entry, words",
    [
        (
            ["spatial", [100], ["a_cpu", "a_gpu"]],
            "increasing inside (0, 54), the layer's output rows",
        ),
        (["spatial", [0], ["a_cpu", "a_gpu"]], "increasing inside (0, 54)"),
        (["spatial", ["7"], ["a_cpu", "a_gpu"]], "whole row indices"),
        (["rows", [7], ["a_cpu", "a_gpu"]], '"lop" or "spatial"'),
    ],
)
def test_bad_spatial_entries_are_one_line(alexnet, entry, words):
    g = alexnet
    mapping = {"a_cpu": list(g.names), "a_gpu": ["conv1"]}
    with pytest.raises(DseError, match=None) as err:
        from_autodice(g, KEYS, mapping, {"conv1": entry})
    assert words in str(err.value) and "conv1" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_spatial_entry_on_a_gemm_names_the_node(alexnet):
    g = alexnet
    mapping = {"a_cpu": list(g.names), "a_gpu": ["fc6"]}
    with pytest.raises(DseError) as err:
        from_autodice(g, KEYS, mapping, {"fc6": ["spatial", [2], ["a_cpu", "a_gpu"]]})
    assert "'fc6' (Gemm)" in str(err.value) and "cannot be split by rows" in str(err.value)


def test_check_refuses_rows_where_a_layer_cannot_and_bands_that_miss_rows(alexnet):
    g = alexnet
    on = [[[0]] * 16 + [[0, 1]] + [[0]] * 7]
    m = from_device_lists(g, 2, on)
    s = int(np.searchsorted(g.split_layers, g.index["fc6"]))
    m.axis[0, s] = 1
    with pytest.raises(DseError, match="'fc6' \\(Gemm\\) cannot be split by rows"):
        check(g, 2, m)
    m = from_device_lists(g, 2, [[[0, 1]] + [[0]] * (len(g) - 1)], rows=[0])
    m.sizes[0, 0] = [20, 20]  # 40 of conv1's 54 rows
    with pytest.raises(DseError, match="cover 40 of its 54 output rows"):
        check(g, 2, m)


@pytest.mark.parametrize("kind", ROW_KINDS)
def test_random_row_kinds_are_valid_mappings(alexnet, kind):
    g = alexnet
    m = random_mappings(g, 3, kind, 40, np.random.default_rng(0))
    check(g, 3, m)
    split = (m.sizes > 0).sum(axis=2) > 1
    by_rows = split & (m.axis == 1)
    assert by_rows.any()
    if kind == "spatial":  # every layer that can split by rows does
        rows_ok = g.row_splittable[g.split_layers]
        assert (by_rows[:, rows_ok] == split[:, rows_ok]).all()
    else:
        assert (split & (m.axis == 0)).any()  # channels too
