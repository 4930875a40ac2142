"""The exact vertical baseline: the model's latency of chain placements is the sum the dynamic
programme minimises, and its optimum is the brute-force optimum of every vertical mapping."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import yaml

from chromosomes import NaiveChromosome, VerticalChromosome
from dse.errors import DseError
from dse.net import load_net
from dse.net.build import build_graph
from dse.paths import CONF_DIR
from dse.platform import load_platform
from dse.search import exact
from models_analytical.coefficients import Coefficients, load_coefficients
from models_analytical.model import AnalyticalModel
from tests.helpers import cases
from tests.helpers import onnx_factory as f


def with_cut_costs(coeff: Coefficients) -> Coefficients:
    """Every cost a cut can have: sub-model runs and bytes in and out, transfer costs, receives
    that occupy the device, and a measured (piecewise linear) table for the network; and a
    shared-host factor, which a vertical mapping never pays (no two parts of one layer)."""
    types = {
        k: dataclasses.replace(
            c,
            segment_run_s=2e-4,
            segment_in_per_byte_s=1e-9,
            segment_out_per_byte_s=2e-9,
            transfer_fixed_s=1e-4,
            transfer_per_byte_s=3e-10,
            receive_on_device=True,
            shared_host_factor=1.3,
        )
        for k, c in coeff.types.items()
    }
    table = {"bytes": [1e3, 1e5, 1e6], "seconds": [1e-3, 6e-3, 4e-2]}
    return dataclasses.replace(coeff, types=types, links={"network": table})


def case_model(case: str, cut_costs: bool) -> AnalyticalModel:
    model = cases.problem(case, "vertical").model
    if not cut_costs:
        return model
    return AnalyticalModel(model.graph, model.platform, with_cut_costs(model.coefficients), 1)


def every_placement(model: AnalyticalModel) -> np.ndarray:
    """int64 [D^L, L]: every device per layer (devices may come back)."""
    n, n_dev = len(model.graph), len(model.platform)
    return np.array(list(itertools.product(range(n_dev), repeat=n)), dtype=np.int64)


@pytest.mark.parametrize("cut_costs", [False, True])
@pytest.mark.parametrize("case", list(cases.CASES))
def test_latency_of_every_chain_placement_is_the_sum_of_its_steps(case, cut_costs):
    """Every placement of the case's chain (8 layers on 3 devices, 6 on 4; devices may come
    back): the model's latency equals :func:`exact.vertical_latency` to rounding."""
    model = case_model(case, cut_costs)
    costs = exact.chain_costs(model)
    place = every_placement(model)
    mappings = NaiveChromosome(model.graph, len(model.platform), splits=1).decode(place)
    latency = model.evaluate(mappings).latency_s
    summed = np.array([exact.vertical_latency(costs, p) for p in place])
    np.testing.assert_allclose(summed, latency, rtol=1e-12, atol=0)
    assert len(np.unique(np.round(latency, 12))) > len(place) // 10  # placements differ


@pytest.mark.parametrize("cut_costs", [False, True])
@pytest.mark.parametrize("case", list(cases.CASES))
def test_optimum_is_the_best_vertical_mapping_that_fits(case, cut_costs):
    """Brute force over every vertical mapping of the case: the least latency among those
    that fit is the programme's, whose mapping the model scores the same and finds fitting."""
    model = case_model(case, cut_costs)
    chrom = VerticalChromosome(model.graph, len(model.platform))
    every = cases.every_mapping(chrom)
    ev = model.evaluate(every)
    best = ev.latency_s[ev.feasible].min()
    opt = exact.vertical_optimum(model)
    assert opt.latency_s == pytest.approx(best, rel=1e-12)
    mine = model.evaluate(opt.mapping)
    assert mine.feasible[0] and mine.latency_s[0] == pytest.approx(opt.latency_s, rel=1e-12)
    assert opt.mapping.keys()[0] in set(every.keys().tolist())  # the encoding expresses it
    assert opt.relaxed_latency_s <= opt.latency_s * (1 + 1e-12)
    if case == "board_gpu_cpu":  # memory binds: the fastest vertical mapping does not fit
        assert ev.latency_s.min() < best * 0.999
        assert opt.relaxed_latency_s < opt.latency_s * 0.999  # the search over sets ran


def jetson(gpu_memory_mb: float) -> tuple:
    cfg = yaml.safe_load((CONF_DIR / "platform" / "jetson_xavier_nx_x8.yaml").read_text())
    cfg["resources"]["gpu"]["memory_mb"] = gpu_memory_mb
    return load_platform(cfg), load_coefficients(CONF_DIR / "platform" / cfg["coefficients"])


@pytest.mark.parametrize("gpu_memory_mb", [8192, 400])
@pytest.mark.parametrize("net", ["alexnet", "vgg16"])
def test_zoo_chains_optimum_is_additive_and_beats_samples(net, gpu_memory_mb):
    """AlexNet and VGG-16 on the thesis's cluster (and with GPUs of 400 MB, where the fully
    connected layers cannot run on a GPU): the model scores the optimum's mapping at the
    programme's latency, it fits, and no one-device or sampled vertical mapping that fits
    is faster."""
    plat, coeff = jetson(gpu_memory_mb)
    g = load_net({"name": net}).graph
    model = AnalyticalModel(g, plat, coeff)
    opt = exact.vertical_optimum(model)
    ev = model.evaluate(opt.mapping)
    assert ev.feasible[0] and ev.latency_s[0] == pytest.approx(opt.latency_s, rel=1e-12)
    chrom = VerticalChromosome(g, len(plat))
    genes = np.vstack(
        [chrom.sample(3000, np.random.default_rng(0)), [chrom.single_device(d) for d in range(16)]]
    )
    sampled = model.evaluate(chrom.decode(genes))
    assert sampled.feasible.sum() > 1000
    assert opt.latency_s <= sampled.latency_s[sampled.feasible].min() * (1 + 1e-12)
    runs = opt.device[np.r_[True, opt.device[1:] != opt.device[:-1]]]
    assert len(runs) == (1 if gpu_memory_mb == 8192 else 3)  # a GPU; or GPU, CPU, GPU


def test_refused_where_latency_is_no_sum():
    model = case_model("two_boards", False)
    g = build_graph(f.two_branches(), "branches")
    with pytest.raises(DseError, match="not a chain"):
        exact.vertical_optimum(AnalyticalModel(g, model.platform, model.coefficients))


def test_no_vertical_mapping_fits():
    model = case_model("two_boards", False)
    tiny = dataclasses.replace(
        model.platform,
        devices=tuple(dataclasses.replace(d, memory_mb=0.5) for d in model.platform.devices),
    )
    with pytest.raises(DseError, match="no vertical mapping fits"):
        exact.vertical_optimum(AnalyticalModel(model.graph, tiny, model.coefficients))
