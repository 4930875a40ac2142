"""Measuring deployments for calibration and fidelity: rounds merged, interleaved with speed
probes, the machine's drift taken out, the probe timing the whole model."""

from __future__ import annotations

import dataclasses
import os
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml

import tests.helpers.onnx_factory as onnx_factory
from dse.calibrate import deployments
from dse.mapping import whole as whole_on
from dse.net import load_net, zoo
from dse.paths import CONF_DIR
from dse.platform import load_platform
from dse.runtime import measure
from dse.runtime import probe as probe_mod
from dse.runtime.measure import deploy
from dse.runtime.measurements import (
    measured_latency_ms,
    measured_period_ms,
    merge_runs,
    take_out_drift,
)
from dse.runtime.mpirun import Launcher
from dse.runtime.plan import input_arrays
from dse.runtime.reader import read_plan
from tests.helpers.calibrate import platform_localhost


def test_runs_of_one_deployment_merge_into_one_measurement() -> None:
    def run(med: float, every: list[float], tag: str) -> dict:
        return {"status": "ok", "latency_ms": {"median": med, "all": every}, "ranks": tag}

    merged = merge_runs([run(10, [9, 10, 11], "a"), run(30, [30], "b"), run(20, [19, 21], "c")])
    lat = merged["latency_ms"]
    assert lat["median"] == 20 and lat["rounds_ms"] == [10, 30, 20]
    assert lat["round_spread"] == pytest.approx((30 - 10) / 20)
    assert sorted(lat["all"]) == [9, 10, 11, 19, 21, 30]
    assert lat["p10"] == pytest.approx(np.percentile([9, 10, 11, 19, 21, 30], 10))
    assert merged["ranks"] == "c"  # the other figures: the median run's
    bad = {"status": "failed", "reason": "mpiexec exited with 1"}
    assert merge_runs([run(10, [10], "a"), bad]) == bad


def test_merged_runs_keep_the_median_of_their_periods() -> None:
    def run(med: float, period: float | None) -> dict:
        r = {"status": "ok", "latency_ms": {"median": med, "all": [med]}}
        return r if period is None else {**r, "stream": {"frames": 8, "period_ms": period}}

    # latencies 10, 30, 20 (the median run: 20, period 9); periods 4, 12, 9: median 9, and
    # the median of the periods even where the median latency's run has another one
    merged = merge_runs([run(10, 4.0), run(30, 12.0), run(20, 9.0)])
    assert merged["stream"] == {"frames": 8, "period_ms": 9.0, "rounds_ms": [4.0, 12.0, 9.0]}
    merged = merge_runs([run(10, 4.0), run(30, 12.0), run(20, 3.0)])
    assert merged["stream"]["period_ms"] == 4.0  # not the median run's 3.0
    # a round without a period (streamed in only some runs): the median run's figures as is
    assert merge_runs([run(10, 4.0), run(20, None), run(30, 12.0)]).get("stream") is None


def test_drift_is_taken_out_of_each_round_by_its_probe() -> None:
    def run(med: float, probes: list[float]) -> dict:
        return {"status": "ok", "latency_ms": {"median": med, "all": [med]}, "probe_ms": probes}

    # rounds of 10, 30 and 24 ms with the whole net alone taking (48+52)/2 = 50, 150 and 100 ms
    # beside them: at the reference's 100 ms, 20, 20 and 24 ms (median 20; as measured, 24)
    merged = merge_runs([run(10, [48, 52]), run(30, [150, 150]), run(24, [90, 110])])
    assert merged["latency_ms"]["rounds_probe_ms"] == [50, 150, 100]
    assert "probe_ms" not in merged
    drift = take_out_drift(merged, 100.0)["latency_ms"]["drift"]
    assert drift["rounds_adjusted_ms"] == [20, 20, 24] and drift["probe_ms"] == 100
    assert measured_latency_ms(merged) == 20 and merged["latency_ms"]["median"] == 24
    assert "stream" not in merged  # no period streamed: none to scale
    # the pipelined period likewise: periods 5, 12 and 7 ms at 50, 150 and 100 ms -> 10, 8, 7
    streamed = merge_runs(
        [{**run(m, q), "stream": {"frames": 8, "period_ms": p}}
         for m, q, p in ((10, [48, 52], 5.0), (30, [150, 150], 12.0), (24, [90, 110], 7.0))]
    )  # fmt: skip
    take_out_drift(streamed, 100.0)
    assert streamed["stream"]["drift"]["rounds_adjusted_ms"] == [10, 8, 7]
    assert measured_period_ms(streamed) == 8 and streamed["stream"]["period_ms"] == 7
    # a run half of whose latency follows the machine (its period wholly): 0.5, 1.5 and 1.0
    # times slower -> latency factors 0.75, 1.25 and 1 -> 13.33, 24 and 24 ms (median 24)
    half = take_out_drift(streamed, 100.0, lambda f: (1 + (f - 1) / 2, f))
    assert half["latency_ms"]["drift"]["rounds_adjusted_ms"] == pytest.approx([13.3333, 24, 24])
    assert measured_latency_ms(half) == 24 and measured_period_ms(half) == 8
    # a run without its probe after it (Ctrl-C came during that probe): nothing is scaled
    partial = merge_runs([run(10, [50, 50]), run(12, [50])])
    assert "rounds_probe_ms" not in partial["latency_ms"]
    assert measured_latency_ms(take_out_drift(partial, 100.0)) == 11


def _fake_launch(order: list, launchers: list | None = None) -> object:
    def launch(d, *args, launcher=None):  # noqa: ANN001, ANN002, ANN202
        order.append(d)
        if launchers is not None:
            launchers.append(launcher)
        return {"status": "ok", "latency_ms": {"median": 1.0, "all": [1.0]}}

    return launch


def test_interleaved_runs_have_a_probe_on_either_side(monkeypatch, tmp_path) -> None:
    """One probe before the first run and one after each: run k's probes are the k-th and
    (k+1)-th, whatever deployment it ran."""
    order: list = []
    launchers: list = []
    ticks = iter(range(100))
    monkeypatch.setattr(measure, "launch", _fake_launch(order, launchers))
    dirs = [tmp_path / "a", tmp_path / "b"]
    boards = Launcher(hosts={"localhost": "board-a"})
    merged, interrupted = measure.measure_interleaved(
        dirs, 2, 0, 1, 1.0, np.random.default_rng(0), probe=lambda: float(next(ticks)),
        launcher=boards,
    )  # fmt: skip
    assert not interrupted and len(order) == 4
    assert launchers == [boards] * 4  # every run started by the launcher given
    # probes 0 | run | 1 | run | 2 | run | 3 | run | 4: run k sits between probes k and k + 1
    for i, d in enumerate(dirs):
        ks = [k for k, x in enumerate(order) if x == d]
        assert merged[i]["latency_ms"]["rounds_probe_ms"] == [k + 0.5 for k in ks]


def test_a_deployment_whose_rounds_disagree_runs_one_round_more(monkeypatch, tmp_path) -> None:
    """again_above 0.10: a's rounds 10 and 10.5 ms agree (5 %); b's 10 and 20 disagree, so
    b runs a third time after both rounds of both, and keeps the median of 10, 20 and 11
    (11); c failed and runs no more."""
    times = {"a": iter([10.0, 10.5]), "b": iter([10.0, 20.0, 11.0])}
    order: list = []
    rounds: list = []

    def launch(d, *args, launcher=None):  # noqa: ANN001, ANN002, ANN202
        order.append(d.name)
        if d.name == "c":
            return {"status": "failed", "reason": "no"}
        ms = next(times[d.name])
        return {"status": "ok", "latency_ms": {"median": ms, "all": [ms]}}

    monkeypatch.setattr(measure, "launch", launch)
    merged, interrupted = measure.measure_interleaved(
        [tmp_path / x for x in "abc"], 2, 0, 1, 1.0, np.random.default_rng(0),
        on_run=lambda r, i: rounds.append((r, i)), again_above=0.10,
    )  # fmt: skip
    assert not interrupted and order.count("a") == 2 and order.count("c") == 1
    assert order[-1] == "b" and order.count("b") == 3 and rounds[-1] == (2, 1)
    assert merged[1]["latency_ms"]["rounds_ms"] == [10.0, 20.0, 11.0]
    assert merged[1]["latency_ms"]["median"] == 11.0
    assert merged[0]["latency_ms"]["rounds_ms"] == [10.0, 10.5]
    assert merged[2]["status"] == "failed"


def test_ctrl_c_during_a_probe_keeps_the_run_before_it(monkeypatch, tmp_path) -> None:
    order: list = []
    calls = iter(range(100))
    monkeypatch.setattr(measure, "launch", _fake_launch(order))

    def probe() -> float:
        k = next(calls)
        if k == 2:  # the probe after the second run
            raise KeyboardInterrupt
        return 100.0

    dirs = [tmp_path / "a", tmp_path / "b"]
    merged, interrupted = measure.measure_interleaved(
        dirs, 3, 0, 1, 1.0, np.random.default_rng(0), probe=probe
    )
    assert interrupted and len(order) == 2
    assert all(m["status"] == "ok" for m in merged)  # each ran once: both runs kept
    second = dirs.index(order[1])
    assert "rounds_probe_ms" not in merged[second]["latency_ms"]  # its probe after never came
    assert merged[1 - second]["latency_ms"]["rounds_probe_ms"] == [100.0]


def test_probe_times_the_whole_model_on_each_core_of_the_platform(monkeypatch, tmp_path) -> None:
    """The probe binds itself to each core set of the platform's local cpu devices in turn,
    runs the deployment's whole model there on the plan's inputs (its outputs are those of
    the whole network in a session of its own), times each run alone and returns their
    median in ms (a clock that advances a known time per run, so no real timing is judged)."""
    plat = platform_localhost()
    allowed = os.sched_getaffinity(0)
    assert probe_mod.probe_cores(plat) == [c for c in ({0}, {1}) if c <= allowed]
    remote = dataclasses.replace(
        plat, devices=[dataclasses.replace(d, host="board7") for d in plat.devices]
    )
    assert probe_mod.probe_cores(remote) == [] and probe_mod.speed_probe(tmp_path, remote) is None
    # an emulated cluster's board is this machine's cores: all of them, whatever the slot
    board = Launcher(local_cores={"board7": frozenset({0, 1})})
    assert probe_mod.probe_cores(remote, board) == [s for s in [{0, 1} & allowed] if s]
    net = load_net({"name": "mobilenetv2"})
    deploy(net, plat, whole_on(net.graph, 2, np.zeros(len(net.graph), int)), tmp_path / "d")
    probe = probe_mod.speed_probe(tmp_path / "d", plat)
    probe()  # loads its sessions
    assert 1 <= probe.repeats <= 8 and probe.threads == 1
    clock = [0.0]
    durations = iter([0.004, 0.009, 0.005, 0.007, 0.006, 0.008] * 4)  # s, one per run
    timed: list[float] = []
    seen: list[tuple[dict, list]] = []

    class Timed:  # the probe's session, on a clock that advances a known time per run
        def __init__(self, session) -> None:  # noqa: ANN001 - an onnxruntime session
            self.session = session

        def run(self, names, feeds):  # noqa: ANN001, ANN201
            out = self.session.run(names, feeds)
            seen.append((feeds, out))
            timed.append(next(durations))
            clock[0] += timed[-1]
            return out

    probe.sessions = [Timed(x) for x in probe.sessions]
    monkeypatch.setattr(probe_mod, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    bound: list[set[int]] = []
    real = os.sched_setaffinity
    monkeypatch.setattr(
        probe_mod.os, "sched_setaffinity", lambda p, c: bound.append(set(c)) or real(p, c)
    )
    ms = probe()
    # timed bound to each core set in turn, its cores given back each time
    assert bound == [x for c in probe.cores for x in (c, allowed)]
    assert os.sched_getaffinity(0) == allowed
    # every run timed alone: the median of the runs' times, in ms
    assert len(timed) == probe.repeats * len(probe.cores)
    assert ms == pytest.approx(np.median(timed) * 1e3)
    # each run is the whole network on the plan's inputs: a session of the whole ONNX file
    # of its own gives the same outputs
    plan = read_plan(tmp_path / "d")
    feeds = input_arrays(plan, 0)
    whole = ort.InferenceSession(str(zoo.materialize("mobilenetv2", 0)))
    expected = whole.run(None, feeds)
    assert [o.name for o in whole.get_outputs()] == [t.name for t in net.graph.outputs]
    for got_feeds, got in seen:
        assert got_feeds.keys() == feeds.keys()
        for name in feeds:
            np.testing.assert_array_equal(got_feeds[name], feeds[name])
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_file_probe_times_an_onnx_file_on_a_seeded_input(tmp_path) -> None:
    """A probe of an ONNX file (a calibrated network's, for a network held out of calibration):
    a symbolic dimension taken as 1, the input standard normal from seed 0, one one-thread
    session shared by the core sets, the outputs those of the file's own session."""
    path = tmp_path / "chain.onnx"
    chain = onnx_factory.conv_relu_chain()
    chain.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"  # a symbolic batch
    onnx.save(chain, path)
    cores = [c for c in ({0}, {1}) if c <= os.sched_getaffinity(0)]
    probe = probe_mod.FileProbe(path, cores, 1)
    assert probe() > 0 and 1 <= probe.repeats <= 8
    x = np.random.default_rng(0).standard_normal([1, 64, 16, 16]).astype(np.float32)
    assert probe.feeds.keys() == {"x"}
    np.testing.assert_array_equal(probe.feeds["x"], x)
    assert len(probe.sessions) == len(cores) and len({id(x) for x in probe.sessions}) == 1
    (got,) = probe.sessions[0].run(None, probe.feeds)
    (expected,) = ort.InferenceSession(str(path)).run(None, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_the_calibrated_speed_is_the_median_of_the_networks_slowdowns() -> None:
    """Each call: every calibrated network's probe now over its probe at calibration, and the
    median of those (66/60, 30/25, 9/10: 1.1, 1.2, 0.9 -> 1.1), kept in call order."""
    now = {"a": [66.0, 72.0], "b": [30.0, 30.0], "c": [9.0, 12.0]}

    def probe(name):  # noqa: ANN001, ANN202
        times = iter(now[name])
        return lambda: next(times)

    level = probe_mod.CalibratedSpeed(
        {"a": (probe("a"), 60.0), "b": (probe("b"), 25.0), "c": (probe("c"), 10.0)}
    )
    assert level() == pytest.approx(1.1)
    assert level() == pytest.approx(1.2)  # 1.2, 1.2, 1.2
    assert level.factors == pytest.approx([1.1, 1.2])


def test_a_deployment_whose_rounds_disagree_runs_them_again(monkeypatch, tmp_path) -> None:
    """Calibration runs a deployment's rounds once more where their medians span more than
    ``DISAGREE`` of their median, and keeps the set that agrees better: ``a`` agrees (three
    runs); ``b``'s first set (20, 15, 20: 25 %) is slower than its second (15, 15, 15.5);
    ``c``'s second set (10, 20, 10: 100 %) is worse than its first (10, 13, 10: 30 %)."""
    times = {"a": [10.0, 10.5, 10.0], "b": [20.0, 15.0, 20.0, 15.0, 15.0, 15.5],
             "c": [10.0, 13.0, 10.0, 10.0, 20.0, 10.0]}  # fmt: skip
    runs: dict[str, int] = {}

    def launch(d, *args, launcher=None):  # noqa: ANN001, ANN002, ANN202
        k = runs[d.name] = runs.get(d.name, 0) + 1
        ms = times[d.name][k - 1]
        return {"status": "ok", "latency_ms": {"median": ms, "all": [ms]}}

    monkeypatch.setattr(measure, "launch", launch)
    s = SimpleNamespace(platform=None, probe=False, rounds=3, warmup=0, iterations=1,
                        timeout_s=1.0, launcher=None)  # fmt: skip
    dirs = [tmp_path / n for n in "abc"]
    a, b, c = deployments.run_rounds(s, dirs, np.random.default_rng(0), dirs[0])
    assert runs == {"a": 3, "b": 6, "c": 6}
    assert a["latency_ms"]["median"] == 10.0 and "measured_again" not in a
    assert b["latency_ms"]["median"] == 15.0
    assert b["measured_again"] == {"rounds_ms": [[20, 15, 20], [15, 15, 15.5]], "kept": "second"}
    assert c["latency_ms"]["median"] == 10.0 and c["latency_ms"]["rounds_ms"] == [10, 13, 10]
    assert c["measured_again"]["kept"] == "first"
    # a second set that fails keeps the first
    failed = {"status": "failed", "reason": "killed"}
    assert deployments.steadier(b, failed)["latency_ms"]["median"] == 15.0


@pytest.mark.parametrize(
    ("name", "pair", "runs"),
    # per network: single, vertical, split, mixed, a single per other type (edge3: two), and
    # the mix and the split within edge1; the first network also its entry-only run
    [("edge3_ethernet", (1, 2), 2 * 8 + 1), ("edge3_wifi", (1, 2), 2 * 8 + 1),
     ("localhost", None, 2 * 4 + 1)],
)  # fmt: skip
def test_the_mix_and_split_also_run_within_a_board_where_the_cuts_cross_boards(
    name, pair, runs
) -> None:
    """edge3's deployments cut between edge0_cpu and edge1_cpu0 (two boards), so each network's
    mix runs again on edge1_cpu0 and edge1_cpu1 (one board): the same layers the same way; and
    so does its split (every splittable layer on both, the others on the first). localhost's
    two devices are on one host already: no such runs."""
    plat = load_platform(yaml.safe_load((CONF_DIR / "platform" / f"{name}.yaml").read_text()))
    assert deployments.same_host_pair(plat) == pair
    assert deployments.runs_per_calibration(plat, 2) == runs
    if pair is not None:
        graph = load_net({"name": "alexnet"}).graph
        a, b = deployments.cut_devices(plat)
        across = deployments.mixed_mapping(graph, (a, b), 3)
        within = deployments.mixed_mapping(graph, pair, 3)
        on = across.device[across.device >= 0]
        assert set(on.tolist()) == {a, b}  # a mix: layers on both
        np.testing.assert_array_equal(
            within.device, np.select([across.device == a, across.device == b], pair, -1)
        )
        np.testing.assert_array_equal(within.sizes[..., list(pair)], across.sizes[..., [a, b]])
        assert a not in pair and not within.sizes[..., a].any()
        on = deployments.split_on(graph, *pair, 3)
        splits = graph.splittable & (graph.out_channels >= 2)
        assert splits.any() and (on[:, pair[0]]).all() and not on[:, a].any()
        np.testing.assert_array_equal(on[:, pair[1]], splits)
