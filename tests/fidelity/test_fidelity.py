"""Fidelity: its statistics by hand, the mappings it draws, the calibration probe it reads,
and `python -m dse.fidelity` end to end."""

from __future__ import annotations

import csv
import json
import re
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.figure import Figure as Canvas
from onnx import helper

import tests.helpers.onnx_factory as onnx_factory
from dse.fidelity.choose import by_rows, random_kinds
from dse.fidelity.measure import MemoryBaseline, memory_baseline
from dse.fidelity.plot import plot, title
from dse.fidelity.report import FidelityDoc, baseline_line, figures, messages
from dse.fidelity.statistics import (
    Agreement,
    KindError,
    Repeatability,
    by_kind,
    points,
    repeatability,
    stats,
)
from dse.mapping import Mappings, check, from_device_lists, random_mappings
from dse.mapping.build import ROW_KINDS
from dse.measuring.comparison import Compared, Figure, Figures
from dse.measuring.rounds import start_rss_mb
from dse.measuring.speed import slowdown, speed_reference
from dse.net import load_net
from dse.net.build import build_graph
from dse.paths import CONF_DIR
from dse.runtime.deployment.measurements import Latency, Measurement
from models_analytical.model import AnalyticalModel
from tests.helpers.calibrate import platform_localhost
from tests.helpers.cli import run_module
from tests.helpers.figures import pixels, showing
from tests.helpers.graphs import boards, fork_join
from tests.helpers.platforms import coefficients


def fidelity_doc(**figures: object) -> FidelityDoc:
    """A report of one net whose figures are those given, the rest neutral."""
    one = stats([1.0], [1.0])
    doc = FidelityDoc(
        net="n", platform="p", coefficients="c", calibrated=True, calibration="calibrated",
        latency=one, latency_as_measured=one, drift=None, memory=one, memory_baseline=None,
        period=None, period_as_measured=None, stream=0, failed=[], warmup=0, iterations=1,
        rounds=1, seconds=1.0, energy="modelled", noise_floor_pct=None, round_spread_pct=None,
        repeatability=None, repeatability_adjusted=None, ran_again=[], interrupted=False,
    )  # fmt: skip
    return replace(doc, **figures)


def test_fidelity_statistics_by_hand() -> None:
    s = stats([110.0, 90.0, 100.0, 130.0], [100.0, 100.0, 100.0, 100.0 * 1.2])
    # errors 10, 10, 0, 8.333 % -> MAPE 7.083 %; all four within 10 %
    assert s.mape_pct == pytest.approx((10 + 10 + 0 + 100 * 10 / 120) / 4)
    assert s.within_10_pct == pytest.approx(100.0)
    s = stats([1.0, 2.0, 3.0, 5.0], [1.0, 3.0, 2.0, 4.0])
    # ranks (1,2,3,4) vs (1,3,2,4): d^2 = 0+1+1+0 -> rho = 1 - 6*2/(4*15) = 0.8
    assert s.spearman == pytest.approx(0.8)
    # concordant pairs 5, discordant 1 of 6 -> tau = 4/6
    assert s.kendall == pytest.approx(4 / 6)


def test_fidelity_error_by_kind_of_mapping() -> None:
    pts = [(11.0, 10.0, "single"), (9.0, 10.0, "single"), (12.0, 10.0, "split")]
    # single: errors +10 % and -10 % (bias 0, MAPE 10); split: +20 %
    assert by_kind(pts) == {"single": KindError(2, 0.0, 10.0), "split": KindError(1, 20.0, 20.0)}


def compared(latency: tuple[float, float], period: tuple[float, float] | None = None) -> Compared:
    """A measured mapping whose (predicted, measured) latency and period are given."""
    figures = Figures(Figure.of(*latency), period_ms=None if period is None else Figure.of(*period))
    med = latency[1]
    lat = Latency(med, med, med, all=[med])
    return Compared("ok", latency_ms=lat, comparison=figures)


def test_the_period_is_judged_beside_the_latency(tmp_path) -> None:
    """Results with a pipelined period (stream=N) give period points and statistics; the summary
    line ends with the period's MAPE; results without it (or failed) give none."""
    results = [
        compared((10.0, 10.0), (4.2, 4.0)),
        compared((20.0, 25.0), (8.0, 10.0)),
        compared((30.0, 30.0)),
        Compared("failed", "no", comparison=Figures(Figure.of(1.0, None), period_ms=None)),
    ]
    pts = points(results, ["single", "split", "mixed", "mixed"])
    assert pts.period == [(4.2, 4.0, "single"), (8.0, 10.0, "split")]
    f = figures(pts, [])
    # errors +5 % and -20 %: MAPE 12.5, one of two within 10 %; by kind +5 and -20
    assert f.period.mape_pct == pytest.approx(12.5)
    assert f.period.within_10_pct == pytest.approx(50.0)
    assert f.period.by_kind["split"].bias_pct == pytest.approx(-20.0)
    doc = fidelity_doc(latency=f.latency, period=f.period)
    assert messages(doc, tmp_path)[-1].endswith("; period MAPE 12.5 %, within 10 % 50 %")
    assert figures(points(results[2:], ["mixed", "mixed"]), []).period is None
    assert "period" not in messages(replace(doc, period=None), tmp_path)[-1]


def test_repeatability_of_rounds_by_hand(tmp_path) -> None:
    def rounds(r: list[float]) -> Measurement:
        med = float(np.median(r))
        return Measurement("ok", latency_ms=Latency(med, med, med, all=r, rounds_ms=r))

    m1, m2, m3 = rounds([10, 10, 10]), rounds([20, 22, 30]), rounds([30, 25, 21])
    failed = Measurement.failed("no rounds")  # a mapping that failed: left out
    rep = repeatability([failed, m1, m2, m3])
    # rounds 0-1 rank the mappings alike (1.0); 0-2 and 1-2 swap m2 and m3: 1 - 6*2/(3*8)
    assert rep.spearman_round_vs_round == pytest.approx(0.5)
    # within 10 % of the other rounds' median: m1 all 3; m2 none (20/26, 22/25, 30/21);
    # m3 only round 1 (25/25.5): 4 of 9
    assert rep.round_within_10_pct == pytest.approx(44.4)
    # the report warns that rounds this far apart cannot judge a +-10 % prediction
    doc = fidelity_doc(rounds=3, repeatability=rep)
    (warn,) = [x for x in messages(doc, tmp_path) if x.startswith("warning:")]
    assert warn.startswith("warning: only 44 % of rounds lie within 10 % of their mapping's")
    steady = replace(doc, repeatability=Repeatability(rep.spearman_round_vs_round, 90.0))
    assert not [x for x in messages(steady, tmp_path) if "warn" in x]
    # the mappings whose rounds disagreed and ran one more are named
    again = [x for x in messages(replace(doc, ran_again=["m2", "m3"]), tmp_path) if "agreed" in x]
    assert again == [
        "2 mapping(s) whose rounds disagreed by more than 10 % ran one round more, the median "
        "of all kept: m2, m3"
    ]
    assert repeatability([failed, m1, m2]) is None  # two mappings with rounds: too few


@pytest.mark.parametrize("kind", ["single", "vertical", "split", "mixed"])
def test_random_mappings_are_valid_whole_channel_mappings(kind: str) -> None:
    graph = build_graph(onnx_factory.conv_relu_chain(), "chain")
    m = random_mappings(graph, 3, kind, 12, np.random.default_rng(1))
    check(graph, 3, m)  # every layer placed, whole channels covering each splittable layer
    share, _ = m.dense(graph)
    np.testing.assert_allclose(share.sum(axis=2), 1.0)
    split = (share > 0).sum(axis=2) > 1
    assert not (split & ~graph.splittable[None]).any()
    if kind in ("single", "vertical"):
        assert not split.any()
    if kind == "split":
        assert split[:, graph.splittable].all()


def fc_chain():
    """Gemm -> Relu -> Gemm over [1, 64]: splittable by channels, by rows never."""
    nodes = [
        helper.make_node("Gemm", ["x", "w0"], ["a"], name="fc0", transB=1),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Gemm", ["b", "w1"], ["y"], name="fc1", transB=1),
    ]
    weights = [onnx_factory.weight("w0", [32, 64]), onnx_factory.weight("w1", [16, 32], seed=1)]
    return build_graph(onnx_factory.model(nodes, {"x": [1, 64]}, ["y"], weights), "fc")


def same(a: Mappings, b: Mappings) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("device", "sizes", "axis"))


def test_the_row_kinds_are_drawn_where_a_layer_splits_by_rows_on_two_devices_or_more() -> None:
    """14 random mappings of the conv chain (its convs split by rows) on 3 devices: six kinds,
    14 = 6 x 2 + 2: single and vertical 3, the others 2; on 2 devices single has 2, mixed the
    one left (3). Without a layer that splits by rows (fc layers) the four kinds share them as
    before: 4, 4, 3, 3 and on 3 devices single 3, mixed 4. Spatial splits every conv by rows,
    three is a valid mapping."""
    chain = build_graph(onnx_factory.conv_relu_chain(), "chain")
    assert by_rows(chain, 3) and not by_rows(chain, 1) and not by_rows(fc_chain(), 3)

    def counts(graph, n_dev: int, rest: int = 14) -> dict[str, int]:  # noqa: ANN001
        drawn = random_kinds(graph, n_dev, rest, np.random.default_rng(0))
        for m in drawn.values():
            check(graph, n_dev, m)
        return {k: len(m) for k, m in drawn.items()}

    assert counts(chain, 3) == {
        "single": 3, "vertical": 3, "split": 2, "mixed": 2, "spatial": 2, "three": 2
    }  # fmt: skip
    assert counts(chain, 2) == {
        "single": 2, "vertical": 3, "split": 2, "mixed": 3, "spatial": 2, "three": 2
    }  # fmt: skip
    assert counts(fc_chain(), 3) == {"single": 3, "vertical": 4, "split": 3, "mixed": 4}
    drawn = random_kinds(chain, 3, 30, np.random.default_rng(1))
    rows = np.isin(chain.split_layers, np.flatnonzero(chain.row_splittable))
    assert rows.all() and (drawn["spatial"].axis == 1).all()
    assert (drawn["split"].axis == 0).all() and (drawn["three"].axis == 1).any()


def test_the_kinds_drawn_before_keep_their_draws() -> None:
    """For a seed, each of the four kinds is its first mappings of the draws it had before the
    row kinds (the same generator, its count then: 14 over four kinds, single 3 on 3
    devices, mixed 4), and the row kinds come after them; without them every draw is as
    before."""
    chain = build_graph(onnx_factory.conv_relu_chain(), "chain")
    before = {"single": 3, "vertical": 4, "split": 3, "mixed": 4}
    now = {"single": 3, "vertical": 3, "split": 2, "mixed": 2, "spatial": 2, "three": 2}
    for graph in (chain, fc_chain()):
        rng = np.random.default_rng(7)
        by_hand = {k: random_mappings(graph, 3, k, c, rng) for k, c in before.items()}
        if graph is chain:
            by_hand = {k: m.take(np.arange(now[k])) for k, m in by_hand.items()}
            by_hand |= {k: random_mappings(graph, 3, k, now[k], rng) for k in ROW_KINDS}
        drawn = random_kinds(graph, 3, 14, np.random.default_rng(7))
        assert list(drawn) == list(by_hand)
        assert all(same(drawn[k], by_hand[k]) for k in by_hand)


def test_choose_labels_the_row_kinds_after_the_others(monkeypatch) -> None:
    """choose() without a front (the search stubbed out): alexnet's 14 random mappings on 3
    devices, labelled by kind in order (single_0..2, vertical_0..2, split_0, split_1, ...,
    three_1), every one distinct."""
    from dse.fidelity import choose as choose_mod

    graph = load_net({"name": "alexnet"}).graph
    none = random_mappings(graph, 3, "single", 0, np.random.default_rng(0))
    problem = SimpleNamespace(
        model=SimpleNamespace(graph=graph, platform=SimpleNamespace(devices=[0, 1, 2])),
        objectives=["latency"],
        chromosome=SimpleNamespace(decode=lambda genes: none),
    )
    search = SimpleNamespace(
        new_search=lambda *a: None, run=lambda state: None, front=lambda state: ([], [], None)
    )
    monkeypatch.setattr(choose_mod, "nsga2", search)
    monkeypatch.setattr(choose_mod, "select", lambda F, objectives, k: [])
    chosen = choose_mod.choose(problem, None, 14, seed=0)
    counts = {"single": 3, "vertical": 3, "split": 2, "mixed": 2, "spatial": 2, "three": 2}
    assert chosen.labels == [f"{k}_{i}" for k, c in counts.items() for i in range(c)]
    assert chosen.kinds == [k for k, c in counts.items() for _ in range(c)]
    assert len(np.unique(chosen.mappings.keys())) == 14
    assert (chosen.mappings.axis[chosen.kinds.index("spatial")] == 1).any()


def test_the_report_gives_the_latency_error_of_the_row_kinds(tmp_path, monkeypatch) -> None:
    """Points of the row kinds: by_kind has them after the others (errors +10 % and -20 %),
    the report's line by kind names them, and the figure's legend too."""
    pts = [(11.0, 10.0, "spatial"), (9.0, 10.0, "split"), (8.0, 10.0, "three")]
    kinds = by_kind(pts)
    assert list(kinds) == ["split", "spatial", "three"]
    assert kinds["spatial"] == KindError(1, 10.0, 10.0)
    assert kinds["three"] == KindError(1, -20.0, 20.0)
    results = [compared((p, m)) for p, m, _ in pts]
    f = figures(points(results, [k for *_, k in pts]), [])
    doc = fidelity_doc(latency=f.latency)
    line = next(x for x in messages(doc, tmp_path) if x.startswith("latency error by kind"))
    assert line.endswith("split -10.0 % (n=1), spatial +10.0 % (n=1), three -20.0 % (n=1)")
    legends: list[list[str]] = []

    def keep(fig, path, **kw) -> None:  # noqa: ANN001
        legends.extend(ax.get_legend_handles_labels()[1] for ax in fig.axes)

    monkeypatch.setattr(Canvas, "savefig", keep)
    plot(tmp_path / "f.png", points(results, [k for *_, k in pts]), "t")
    assert legends[0][-3:] == ["split", "spatial", "three"]


def test_fidelity_reads_the_calibration_probe_of_its_network() -> None:
    plat = platform_localhost()  # 1 thread per device
    net = load_net({"name": "alexnet"})
    ref = {"threads": 1, "whole_ms": {"alexnet": 48.5}, "fingerprints": {}}
    ref["fingerprints"]["alexnet"] = net.fingerprint
    model = SimpleNamespace(platform=plat, coefficients=SimpleNamespace(notes={}))
    model.coefficients.notes["speed_reference"] = ref
    assert speed_reference(model, net) == 48.5
    assert speed_reference(model, load_net({"name": "googlenet"})) is None  # held out
    ref["fingerprints"]["alexnet"] = "another alexnet"  # same name, another network
    assert speed_reference(model, net) is None
    ref["fingerprints"]["alexnet"] = net.fingerprint
    ref["threads"] = 4  # probed at another thread count: not comparable
    assert speed_reference(model, net) is None
    model.coefficients.notes = {}
    assert speed_reference(model, net) is None


def test_a_held_out_network_probes_the_calibrated_zoo_networks(monkeypatch, tmp_path) -> None:
    """Calibration probed AlexNet (this graph), VGG-16 (another graph under that name), a
    user's file and GoogLeNet itself: fidelity of GoogLeNet probes AlexNet only, its seeded
    model on the run's probe's cores at its thread count, beside its calibration probe."""
    from dse.measuring import speed

    plat = platform_localhost()
    ref = {"threads": 1, "whole_ms": {"alexnet": 48.5, "vgg16": 300.0, "mine": 5.0,
                                      "googlenet": 30.0},
           "fingerprints": {"alexnet": load_net({"name": "alexnet"}).fingerprint,
                            "vgg16": "another vgg16", "mine": "f", "googlenet": "g"}}  # fmt: skip
    model = SimpleNamespace(platform=plat, coefficients=SimpleNamespace(notes={}))
    model.coefficients.notes["speed_reference"] = ref
    made: list[tuple[str, int]] = []
    monkeypatch.setattr(
        speed.zoo, "materialize",
        lambda name, seed: made.append((name, seed)) or tmp_path / f"{name}.onnx",
    )  # fmt: skip
    own = SimpleNamespace(cores=[{0}, {1}], threads=1)
    googlenet = SimpleNamespace(name="googlenet", fingerprint="not g")
    level = speed.calibrated_speed(model, googlenet, own, seed=3)
    assert list(level.probes) == ["alexnet"] and made == [("alexnet", 3)]
    probe, then = level.probes["alexnet"]
    assert then == 48.5 and probe.source == tmp_path / "alexnet.onnx"
    assert probe.cores == [{0}, {1}] and probe.threads == 1
    model.coefficients.notes = {}  # nothing calibrated probed: no level
    assert speed.calibrated_speed(model, googlenet, own, seed=3) is None


def test_the_speed_runs_are_brought_to() -> None:
    """The calibration's probe of the network where it has one; for a held-out network, this
    run's median probe over the median of the calibrated networks' slowdowns (55 ms / 1.1 =
    50 ms: 10 % slower); without those, this run's median probe."""
    from dse.fidelity.report import drift_line
    from dse.measuring.speed import Speed, drift

    level = SimpleNamespace(factors=[1.0, 1.1, 1.3], probes={"vgg16": 0, "alexnet": 0})
    speed = drift(55.0, None, level)
    assert speed == Speed(50.0, "calibrated networks", 55.0, 10.0, ["alexnet", "vgg16"])
    raw = Agreement(n=3, mape_pct=12.0, within_10_pct=50.0, spearman=0.9, kendall=None)
    assert drift_line(speed, raw).startswith(
        "calibration did not probe this network: the networks it did (alexnet, vgg16), probed "
        "beside the runs, ran 10.0 % slower than then, so runs are brought to 50.0 ms of this "
        "network alone (its median probe: 55.0 ms); as measured, latency MAPE 12.0 %"
    )
    assert drift(55.0, 44.0, level) == Speed(44.0, "calibration", 55.0, 25.0)
    for none in (None, SimpleNamespace(factors=[], probes={})):
        assert drift(55.0, None, none) == Speed(55.0, "this run's median probe", 55.0, 0.0)


def test_a_mapping_slows_with_the_machine_only_in_its_devices_work() -> None:
    """The model's slowdown of a mapping at a machine twice as slow: 2 for one device (every
    second is work); 14 / 11 for a fork across three boards, whose 8 s of transfers keep their
    time (the schedules: tests/model/test_links.py)."""
    g = fork_join()
    model = AnalyticalModel(g, boards([1, 1, 1]), coefficients())
    alone = slowdown(model, from_device_lists(g, 3, [[[0]] * 4]))
    assert alone(2.0) == pytest.approx((2.0, 2.0)) and alone(1.0) == pytest.approx((1.0, 1.0))
    fork = slowdown(model, from_device_lists(g, 3, [[[0], [1], [2], [0]]]))
    assert fork(2.0)[0] == pytest.approx(14 / 11) and fork(0.5)[0] == pytest.approx(9.5 / 11)
    assert 1.0 < fork(2.0)[1] < 2.0  # the period: the devices' work and the links in turn


def test_fidelity_compares_the_runtime_memory_baseline_with_calibration() -> None:
    """The median start RSS over every rank of the runs, beside calibration's; moved by more
    than 5 % it is reported as carried by every memory prediction, with the fix."""

    def ranks(*starts: float | None) -> Measurement:
        return Measurement("ok", ranks=[SimpleNamespace(rss_start_mb=s) for s in starts])

    runs = [ranks(140.0, 141.0), ranks(142.0, None), Measurement.failed("OOM")]
    start = start_rss_mb(runs)  # the median of 140, 141, 142
    assert start == 141.0 and start_rss_mb(runs[2:]) is None  # no rank read its RSS
    model = SimpleNamespace(coefficients=SimpleNamespace(notes={}))
    assert memory_baseline(model, start) == MemoryBaseline(141.0, None, False)
    model.coefficients.notes["memory_reference"] = {"start_mb": 218.0}
    base = memory_baseline(model, start)
    assert base == MemoryBaseline(141.0, 218.0, True)
    assert baseline_line(base, "edge3_ethernet") == (
        "memory baseline: a rank starts at 141 MB before loading, 218 MB at calibration; every "
        "memory prediction carries the -77 MB: calibrate again: python -m dse.calibrate "
        "platform=edge3_ethernet"
    )
    model.coefficients.notes["memory_reference"] = {"start_mb": 146.0}  # 3.4 % apart
    assert memory_baseline(model, start).changed is False
    assert baseline_line(memory_baseline(model, start), "p").endswith("146 MB at calibration")
    model.coefficients.notes["memory_reference"] = {"start_mb": True}  # damaged: not used
    assert memory_baseline(model, start).reference_mb is None
    assert memory_baseline(model, None) is None  # no rank read its RSS


def test_the_figure_names_the_coefficients_and_how_they_were_obtained() -> None:
    c = coefficients()
    quick = replace(c, calibrated=True, notes={"provenance": {"quick": True}})
    assert [title("alexnet", "localhost", 5, k) for k in (c, quick)] == [
        "alexnet on localhost: predicted vs measured, 5 mappings (coefficients in memory: "
        "uncalibrated)",
        "alexnet on localhost: predicted vs measured, 5 mappings (coefficients in memory: "
        "calibrated (quick: a smoke test))",
    ]


@pytest.mark.slow
@pytest.mark.mpi
def test_fidelity_measures_mappings_and_ends_with_its_summary_line(tmp_path) -> None:
    """dse.fidelity end to end on 3 mappings (1 iteration each, uncalibrated coefficients
    with a speed probe of alexnet as calibration keeps it): the CSV has a row per mapping,
    the JSON the statistics, the last line the summary."""
    coeff = json.loads((CONF_DIR / "platform" / "localhost.json").read_text())
    fingerprint = load_net({"name": "alexnet"}).fingerprint
    coeff["speed_reference"] = {
        "threads": 1,
        "whole_ms": {"alexnet": 40.0},
        "fingerprints": {"alexnet": fingerprint},
    }
    coeff["memory_reference"] = {"start_mb": 1.0}  # no process starts this small
    (tmp_path / "c.json").write_text(json.dumps(coeff))
    out = tmp_path / "fid"
    res = run_module(
        "dse.fidelity",
        "+net=alexnet",
        "platform=localhost",
        "mappings=3",
        "warmup=0",
        "iterations=1",
        "rounds=2",
        "stream=3",
        f"coefficients={tmp_path / 'c.json'}",
        f"out={out}",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert re.search(
        rf"^coefficients: {re.escape(str(tmp_path / 'c.json'))} \(uncalibrated; file of ",
        res.stdout,
        re.M,
    ), res.stdout
    last = res.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"fidelity alexnet: latency MAPE [\d.]+ %, within 10 % \d+ %, spearman \S+; "
        r"memory MAPE [\d.]+ %; period MAPE [\d.]+ %, within 10 % \d+ %",
        last,
    ), last
    rows = list(csv.DictReader((out / "fidelity.csv").open()))
    assert len(rows) == 3 and all(r["status"] == "ok" for r in rows)
    doc = json.loads((out / "fidelity.json").read_text())
    assert doc["latency"]["n"] == 3 and not doc["calibrated"]
    assert doc["calibration"] == "uncalibrated"
    assert doc["stream"] == 3 and doc["period"]["n"] == 3  # every mapping's period judged
    base = doc["memory_baseline"]
    assert base["reference_mb"] == 1.0 and base["changed"] and base["start_mb"] > 10
    assert f"a rank starts at {base['start_mb']:.0f} MB before loading, 1 MB at" in res.stdout
    starts = []
    # each rank started below its loading peak; the median over them all. The ranks of each
    # mapping's median round, as comparison.json keeps them (measurements.json holds only the
    # last round's, and a rank's start moves by tenths of an MB between rounds)
    for row in rows:
        for rank in json.loads((out / "deployments" / row["mapping"] / "comparison.json")
                               .read_text())["ranks"]:  # fmt: skip
            assert 0 < rank["rss_start_mb"] <= rank["peak_rss_loading_mb"]
            assert 0 < rank["rss_start_file_mb"] < rank["rss_start_mb"]  # libraries' pages
            starts.append(rank["rss_start_mb"])
    assert base["start_mb"] == pytest.approx(np.median(starts), abs=0.05)
    assert all(float(r["period_measured_ms"]) > 0 for r in rows)
    assert "not calibrated" in res.stderr
    # three panels (latency, memory, period) of 5.5 x 5 in at 110 dpi: 1815 x 550 pixels; in
    # each, the points of the first kind of mapping drawn (C0)
    image = pixels(out / "fidelity.png")
    assert image.shape == (550, 1815, 3)
    first_kind = showing(image, "C0")
    assert [bool(first_kind[:, k * 605 : (k + 1) * 605].any()) for k in range(3)] == [True] * 3
    spreads = []  # each mapping's (max - min) / median of its rounds' medians, %
    for row in rows:  # two interleaved rounds of one iteration each, sub-models dropped
        compared = json.loads(
            (out / "deployments" / row["mapping"] / "comparison.json").read_text()
        )
        lat = compared["latency_ms"]
        # a third round where the first two's medians lay more than 10 % apart, only there
        first = np.array(lat["rounds_ms"][:2])
        again = row["mapping"] in doc["ran_again"]
        assert again == (np.ptp(first) / np.median(first) > 0.10)
        assert len(lat["rounds_ms"]) == len(lat["all"]) == 2 + again
        # the period: the median of the rounds' (the model's period objective beside it)
        assert compared["stream"]["period_ms"] == pytest.approx(
            np.median(compared["stream"]["rounds_ms"]), abs=1e-3
        )
        period = compared["comparison"]["period_ms"]
        assert period["predicted"] == compared["predicted"]["objectives"]["period_ms"]
        assert float(row["period_measured_ms"]) == period["measured"]
        assert lat["median"] == pytest.approx(np.median(lat["rounds_ms"]), abs=1e-3)
        spreads.append(np.ptp(lat["rounds_ms"]) / np.median(lat["rounds_ms"]) * 100)
        assert not list((out / "deployments" / row["mapping"]).glob("*.onnx"))
    assert doc["rounds"] == 2
    assert doc["round_spread_pct"] == pytest.approx(np.median(spreads), abs=0.02)
    assert set(doc["repeatability"]) == {"spearman_round_vs_round", "round_within_10_pct"}
    assert "repeatability" in res.stdout
    # every run is brought to the speed of the coefficients' probe of alexnet (40 ms)
    assert doc["drift"]["reference"] == "calibration" and doc["drift"]["reference_ms"] == 40.0
    # each round's devices' work is brought to that speed by the probe beside it, transfers
    # keep their time: each round between itself as measured and itself wholly scaled, and
    # wholly scaled where nothing crosses devices; the figure: the median of those rounds
    probes, crossing = [], 0
    for row in rows:
        compared = json.loads(
            (out / "deployments" / row["mapping"] / "comparison.json").read_text()
        )
        lat = compared["latency_ms"]
        probes += lat["rounds_probe_ms"]
        alone = not any(compared["predicted"]["bytes_sent"].values())
        crossing += not alone
        for figure, column in ((lat, "latency_adjusted_ms"),
                               (compared["stream"], "period_adjusted_ms")):  # fmt: skip
            rounds = np.array(figure["rounds_ms"])
            whole = rounds * 40.0 / np.array(lat["rounds_probe_ms"])
            adjusted = np.array(figure["drift"]["rounds_adjusted_ms"])
            if alone:
                assert adjusted == pytest.approx(whole, rel=1e-3)
            assert np.all(np.minimum(rounds, whole) * (1 - 1e-3) <= adjusted)
            assert np.all(adjusted <= np.maximum(rounds, whole) * (1 + 1e-3))
            assert float(row[column]) == pytest.approx(np.median(adjusted), rel=1e-3)
    assert crossing  # a mapping across both devices was drawn: its transfers kept their time
    slower = (np.median(probes) / 40.0 - 1) * 100
    assert doc["drift"]["slower_pct"] == pytest.approx(slower, abs=0.1)
    assert "than at calibration" in res.stdout
    predicted = np.array([float(r["latency_predicted_ms"]) for r in rows])
    adjusted = np.array([float(r["latency_adjusted_ms"]) for r in rows])
    measured = np.array([float(r["latency_measured_ms"]) for r in rows])
    assert doc["latency"]["drift_taken_out"]
    for key, against in (("latency", adjusted), ("latency_as_measured", measured)):
        mape = np.mean(np.abs(predicted - against) / against) * 100
        assert doc[key]["mape_pct"] == pytest.approx(mape, rel=1e-3)
    predicted = np.array([float(r["period_predicted_ms"]) for r in rows])
    assert doc["period"]["drift_taken_out"]
    for key, column in (
        ("period", "period_adjusted_ms"),
        ("period_as_measured", "period_measured_ms"),
    ):
        against = np.array([float(r[column]) for r in rows])
        mape = np.mean(np.abs(predicted - against) / against) * 100
        assert doc[key]["mape_pct"] == pytest.approx(mape, rel=1e-3)
    assert f"period MAPE {doc['period_as_measured']['mape_pct']:.1f} %" in res.stdout


@pytest.mark.parametrize(
    "reference",
    [
        "fast",
        ["whole_ms"],
        {"threads": 1, "fingerprints": "f", "whole_ms": {"alexnet": 10.0}},
        {"threads": 1, "fingerprints": {"alexnet": "f"}, "whole_ms": {"alexnet": float("inf")}},
        {"threads": 1, "fingerprints": {"alexnet": "f"}, "whole_ms": {"alexnet": True}},
        {"threads": 1, "fingerprints": {"alexnet": "f"}, "whole_ms": "10"},
    ],
)
def test_a_damaged_speed_reference_is_not_used(reference, monkeypatch) -> None:
    """A calibration's speed probe of another shape (an edited file) is ignored: the run then
    drifts against its own probes, and nothing raises after the measurements."""
    from types import SimpleNamespace

    from dse.measuring import speed

    monkeypatch.setattr(speed, "probe_threads", lambda platform: 1)
    model = SimpleNamespace(coefficients=SimpleNamespace(notes={"speed_reference": reference}))
    model.platform = None
    net = SimpleNamespace(name="alexnet", fingerprint="f")
    assert speed.speed_reference(model, net) is None
    good = {"threads": 1, "fingerprints": {"alexnet": "f"}, "whole_ms": {"alexnet": 10.0}}
    model.coefficients.notes["speed_reference"] = good
    assert speed.speed_reference(model, net) == 10.0


def test_an_output_that_cannot_be_written_is_one_line_before_measuring(tmp_path) -> None:
    a_file = tmp_path / "taken"
    a_file.write_text("")
    for out, words in ((a_file, "is a file"), (a_file / "sub", "cannot write to out=")):
        r = run_module("dse.fidelity", "+net=alexnet", "platform=localhost", f"out={out}")
        lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith("warning:")]
        assert r.returncode == 2 and len(lines) == 1 and words in lines[0], r.stderr[-2000:]


def test_stopped_before_the_first_result_is_an_interruption(tmp_path, monkeypatch) -> None:
    """Ctrl-C (or SIGTERM, SIGHUP) during the first run: the command is interrupted (130), not
    failed with "no mapping was measured" (2); the CSV of what was deployed is written."""
    from hydra import compose, initialize_config_dir

    from dse.config import register
    from dse.fidelity import workflow
    from dse.measuring.comparison import Compared
    from dse.measuring.measure import Measured

    def stopped(out, net, model, mappings, labels, s, tick, launcher=None):  # noqa: ANN001, ANN202
        never = Compared("failed", "interrupted before it ran")
        return Measured([never] * len(labels), True, None, [], None)

    monkeypatch.setattr(workflow, "measure", stopped)
    monkeypatch.setattr(workflow, "mpiexec_path", lambda: "mpiexec")
    register()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("fidelity", overrides=[
            "+net=alexnet", "platform=localhost", "mappings=2", "search_pop_size=4",
            "search_generations=1", f"out={tmp_path / 'fid'}",
        ])  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        workflow.run_fidelity(cfg, lambda *a, **k: None)
    rows = list(csv.DictReader((tmp_path / "fid" / "fidelity.csv").open()))
    assert [r["status"] for r in rows] == ["failed", "failed"]
