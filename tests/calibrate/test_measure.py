"""Measuring deployments for calibration: the probe timing the whole model, and the runs each
network gets."""

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
from dse.runtime.deployment.plan import input_arrays
from dse.runtime.deployment.reader import read_plan
from dse.runtime.launch import probe as probe_mod
from dse.runtime.launch.deploy import deploy
from dse.runtime.launch.mpiexec import Launcher
from tests.helpers.calibrate import platform_localhost


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
