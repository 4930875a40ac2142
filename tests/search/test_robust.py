"""Plans that hold under several conditions: the robust objectives against each profile's
figures computed on its own hardware, and a case where the worst-case plan is not the nominal
one, against every mapping and the exact vertical optimum."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import numpy as np
import pytest

from dse import objectives
from dse.config import AlgorithmConfig
from dse.platform import Platform
from dse.search import nsga2
from dse.search.exact import vertical_optimum
from dse.search.problem import MappingProblem
from dse.search.regret import profile_bests
from dse.search.robust import Profiles, combine
from models_analytical.coefficients import Coefficients
from models_analytical.conditions import Conditions
from models_analytical.model import AnalyticalModel
from tests.helpers import cases
from tests.helpers.cli import run_module

#: two_boards: a_cpu0 and a_gpu1 on board a, b_gpu2 on b, c_cpu3 (a cpu_big) on c
PROFILES = [
    Conditions(),
    Conditions("slow_net", network=0.25),
    Conditions("hot", speed={"c_cpu3": 0.5}),
    Conditions("b_port", ports={"b": 0.5}),
]


def hardware(model: AnalyticalModel, c: Conditions) -> AnalyticalModel:
    """A model of the hardware ``c`` describes, built from scratch: the network link class at
    its bandwidth, b's links to other boards at half theirs (their own pair figures), c_cpu3 of
    a type at half cpu_big's rate and twice its per-layer overhead."""
    plat: Platform = model.platform
    coeff = cases.hetero_coefficients()
    net = plat.links["network"]
    links = {**plat.links, "network": replace(net, bandwidth_Bps=net.bandwidth_Bps * c.network)}
    pairs = {}
    if c.ports:
        ((board, f),) = c.ports.items()
        slow = replace(net, bandwidth_Bps=net.bandwidth_Bps * f)
        for a, da in enumerate(plat.devices):
            for b, db in enumerate(plat.devices):
                if da.host != db.host and board in (da.host, db.host):
                    pairs[a, b] = slow
    types = dict(coeff.types)
    types["cpu_big_half"] = cases._type(5e8, (4.0, 2.0, 1.0, 0.5), 2e-4, 30.0, 5.0, 0.5)
    devices = tuple(
        replace(d, type="cpu_big_half") if c.speed.get(d.name) == 0.5 else d for d in plat.devices
    )
    built = replace(plat, devices=devices, links=links, pair_links=pairs)
    return AnalyticalModel(model.graph, built, Coefficients(types), threads=1)


def test_the_hardware_the_conditions_describe_is_what_the_model_under_them_gives():
    p = cases.problem("two_boards", "advanced", 2)
    mappings = cases.every_mapping(p.chromosome)
    for c in PROFILES:
        built = hardware(p.model, c).evaluate(mappings)
        under = p.model.under(c).evaluate(mappings)
        assert np.allclose(under.latency_s, built.latency_s, rtol=1e-12, atol=0), c.name
        assert np.allclose(under.energy_j, built.energy_j, rtol=1e-12, atol=0), c.name
        assert np.array_equal(under.memory_mb, built.memory_mb), c.name


@pytest.mark.parametrize("rule", ["worst", "mean"])
def test_each_objective_is_the_rule_over_the_profiles_each_evaluated_on_its_own(rule):
    p = cases.problem("two_boards", "advanced", 2)
    mappings = cases.every_mapping(p.chromosome)
    robust = MappingProblem(p.chromosome, p.model, p.objectives, Profiles(p.model, rule, PROFILES))
    F, G = robust.evaluate_mappings(mappings)
    each = np.stack(
        [objectives.values(p.objectives, hardware(p.model, c).evaluate(mappings)) for c in PROFILES]
    )
    expected = each.max(axis=0) if rule == "worst" else each.mean(axis=0)
    assert np.allclose(F, expected, rtol=1e-12, atol=0)
    # the profiles differ somewhere: worst is above the nominal there, the memory the same
    assert (F[:, 0] > each[0][:, 0] * (1 + 1e-9)).mean() > 0.5
    assert np.array_equal(F[:, 1], each[0][:, 1])
    assert np.array_equal(G, p.evaluate_mappings(mappings)[1])


def test_a_mapping_a_profile_does_not_touch_keeps_its_nominal_figures_bit_for_bit():
    p = cases.problem("two_boards", "advanced", 2)
    mappings = cases.every_mapping(p.chromosome)
    prof = Profiles(p.model, "worst", PROFILES)
    per, ev = prof.evaluate(p.objectives, mappings)
    for s in range(1, len(PROFILES)):
        alone = objectives.values(p.objectives, prof.models[s].evaluate(mappings))
        assert np.array_equal(per[s], alone), PROFILES[s].name
        untouched = ~prof.changed(s, ev)
        assert untouched.any(), PROFILES[s].name  # some mappings were not scheduled again
        assert np.array_equal(per[s][untouched], per[0][untouched])


def test_a_profile_the_same_as_an_earlier_one_takes_its_figures():
    # every port at half on a network of device pairs: every link between boards at half,
    # as the network at half
    p = cases.problem("two_boards", "advanced", 2)
    mappings = cases.every_mapping(p.chromosome)
    ports = Conditions("ports", ports={"a": 0.5, "b": 0.5, "c": 0.5})
    prof = Profiles(p.model, "mean", [Conditions(), Conditions("net", network=0.5), ports])
    assert prof.same == [0, 1, 1]
    per, _ = prof.evaluate(p.objectives, mappings)
    half = hardware(p.model, Conditions(network=0.5))
    alone = objectives.values(p.objectives, half.evaluate(mappings))
    assert np.allclose(per[2], alone, rtol=1e-12, atol=0)
    assert not np.array_equal(per[2], per[0])


def test_combine():
    per = np.array([[[1.0, 5.0]], [[3.0, 5.0]], [[2.0, 8.0]]])
    assert combine("worst", per).tolist() == [[3.0, 8.0]]
    assert combine("mean", per).tolist() == [[2.0, 6.0]]
    assert combine("none", per).tolist() == [[1.0, 5.0]]


SLOW = Conditions("slow_net", network=0.1)


def boards_used(model: AnalyticalModel, mappings) -> np.ndarray:
    used = model.evaluate(mappings).used
    hosts = np.array([d.host for d in model.platform.devices])
    return np.array([len(set(hosts[u])) for u in used])


def test_a_slow_network_profile_moves_the_worst_case_plan_onto_one_board():
    # two_boards' vertical mappings, latency alone: every one of them scored. The nominal
    # optimum uses two boards (15.59 ms); under a network at a tenth of its bandwidth it would
    # take longer than the best plan on one board (35.35 ms), which the slow network does not
    # touch: the worst-case optimum. The exact vertical optima (dynamic programming) agree.
    p = cases.problem("two_boards", "vertical")
    mappings = cases.every_mapping(p.chromosome)
    nominal = MappingProblem(p.chromosome, p.model, ["latency"])
    robust = MappingProblem(
        p.chromosome, p.model, ["latency"], Profiles(p.model, "worst", [Conditions(), SLOW])
    )
    f0, g = nominal.evaluate_mappings(mappings)
    fw, _ = robust.evaluate_mappings(mappings)
    fits = np.flatnonzero(g[:, 0] <= 0)
    best0, bestw = fits[np.argmin(f0[fits, 0])], fits[np.argmin(fw[fits, 0])]
    boards = boards_used(p.model, mappings)
    assert (boards[best0], boards[bestw]) == (2, 1)
    assert f0[best0, 0] == pytest.approx(15.587552)
    assert fw[bestw, 0] == pytest.approx(35.351328)
    assert vertical_optimum(p.model).latency_s * 1e3 == pytest.approx(f0[best0, 0])
    assert vertical_optimum(p.model.under(SLOW)).latency_s * 1e3 == pytest.approx(fw[bestw, 0])
    # the search finds each
    settings = AlgorithmConfig(pop_size=30, n_gen=15)
    for problem, best in ((nominal, f0[best0, 0]), (robust, fw[bestw, 0])):
        state = nsga2.run(nsga2.new_search(problem, settings, 0))
        assert nsga2.front(state)[1][:, 0].min() == pytest.approx(best)


def test_each_profiles_best_is_its_own_optimum_and_the_regret_is_measured_from_it():
    # seeded with the nominal optimum alone, the short search under each profile finds that
    # profile's exact vertical optimum
    p = cases.problem("two_boards", "vertical")
    profiles = Profiles(p.model, "none", [Conditions(), SLOW])
    problem = MappingProblem(p.chromosome, p.model, ["latency"], profiles)
    seed = vertical_optimum(p.model).genes[None, :]
    bests = profile_bests(problem, seed, AlgorithmConfig(), 0)
    exact = [vertical_optimum(m).latency_s * 1e3 for m in profiles.models]
    assert bests.tolist() == pytest.approx(exact)


# --- the run ---------------------------------------------------------------------------------

EDGE3_PROFILES = (
    "+platform.profiles={wifi_50:{network_mbit:50},"
    "edge1_slow_port:{ports:{edge1:{rate_mbit:50}}},edge0_hot:{speed:{edge0_cpu:0.5}}}"
)


def dse(*args: str):
    return run_module("dse", "progress=false", *args)


def test_a_robust_run_writes_each_front_points_latency_and_regret_under_each_profile(tmp_path):
    out = tmp_path / "run"
    r = dse(
        "+net=alexnet",
        "platform=edge3_ethernet",
        "robust=worst",
        EDGE3_PROFILES,
        "algorithm.pop_size=20",
        "algorithm.n_gen=3",
        f"hydra.run.dir={out}",
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    profiles = summary["profiles"]
    names = ["nominal", "wifi_50", "edge1_slow_port", "edge0_hot"]
    assert profiles["robust"] == "worst" and list(profiles["conditions"]) == names
    # 50 Mbit/s = 6.25e6 B/s against the network's 1.12e8
    assert profiles["conditions"]["wifi_50"]["network"] == pytest.approx(6.25e6 / 1.12e8)
    assert profiles["conditions"]["edge0_hot"]["speed"] == {"edge0_cpu": 0.5}
    best = profiles["best_latency_ms"]
    with open(out / "pareto.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert rows
    for row in rows:
        under = [float(row[f"latency_ms@{n}"]) for n in names]
        # the objective is the worst of the profiles' latencies (6 decimals in the file)
        assert float(row["latency_ms"]) == pytest.approx(max(under), abs=2e-6)
        for n, latency in zip(names, under, strict=True):
            regret = float(row[f"regret_ms@{n}"])
            assert regret == pytest.approx(latency - best[n], abs=2e-6) and regret >= -2e-6
    report = (out / "report.html").read_text()
    assert "Under each profile" in report and "robust=worst" in report
    assert (out / "profiles.png").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["robust=worst"],
            "error: robust=worst needs the platform's profiles, the conditions a plan must hold "
            "under, and platform 'edge3_ethernet' has none: add profiles: to its file "
            "(docs/reference/platforms.md), or drop robust",
        ),
        (["robust=best"], "error: robust=best must be one of none, worst, mean"),
        (
            ["+platform.profiles={hot:{speed:{edge9_cpu:0.5}}}"],
            "error: platform 'edge3_ethernet': profiles.hot.speed.edge9_cpu: 'edge9_cpu' is not "
            "a device of the platform (its devices: edge0_cpu, edge1_cpu0, edge1_cpu1)",
        ),
    ],
)
def test_a_wrong_robust_setting_is_one_line(args, message, tmp_path):
    r = dse("+net=alexnet", "platform=edge3_ethernet", *args, f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [message]
