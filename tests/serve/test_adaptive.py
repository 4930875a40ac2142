"""An adaptive service on localhost: a trained classifier served while it is told that a device
slowed down; the plan swapped under a stream of real photos with no frame lost, run twice or
out of order, each frame's outputs the whole model's; advise-only and keep leave the plan."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from dse.serve.adaptive import Adaptive, Settings
from dse.serve.decisions import DECISIONS
from models_analytical.coefficients import load_coefficients
from models_analytical.conditions import Conditions
from models_analytical.model import AnalyticalModel
from tests.helpers.calibrate import platform_localhost
from tests.helpers.serving import Whole, assert_same, rank_pids
from tests.helpers.trained import mapping, model_path, trained_net

pytestmark = pytest.mark.mpi
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served_parts():
    net, plat = trained_net("orientation"), platform_localhost()
    coefficients = load_coefficients(ROOT / "conf" / "platform" / "localhost.json")
    return net, AnalyticalModel(net.graph, plat, coefficients), mapping(net, "channels", 2)


def start(served_parts, tmp_path: Path, **settings) -> Adaptive:
    net, model, m = served_parts
    # watch=False: only adapt() re-plans (what drift does is the cluster's test)
    settings = Settings(budget_s=1.0, watch=False, **settings)
    return Adaptive.start(net, model, m, tmp_path, "localhost", settings)


def test_a_plan_swapped_mid_stream_loses_no_frame(served_parts, tmp_path, frames) -> None:
    whole = Whole(model_path("orientation"))
    refs = [whole(f) for f in frames]
    slow = platform_localhost().keys[1]
    got: list[dict] = []
    streamed = threading.Event()

    def stream(service: Adaptive) -> None:
        for out in service.stream((frames[i % 4] for i in range(120)), in_flight=4):
            got.append(out)
            if len(got) == 20:
                streamed.set()

    with start(served_parts, tmp_path) as service:
        first = service.plan
        feeder = threading.Thread(target=stream, args=(service,))
        feeder.start()
        assert streamed.wait(120)
        decision = service.adapt(Conditions("slow", speed={slow: 0.02}))
        feeder.join(300)
        assert decision["event"] == "switch", service.decisions
        assert service.plan != first and service.plan.name == "plan-1"
        assert decision["new_period_ms"] <= 0.85 * decision["served_period_ms"]
        assert not rank_pids(first)  # the old plan's ranks are gone
        # frames after the switch run on the new plan too
        for f, r in zip(frames, refs, strict=True):
            assert_same(service.run(f), r)
        last = service.plan
    assert len(got) == 120
    for i, out in enumerate(got):
        assert_same(out, refs[i % 4])
    logged = [json.loads(line) for line in (tmp_path / DECISIONS).read_text().splitlines()]
    assert [e["event"] for e in logged] == ["start", "told", "switch"]
    assert not rank_pids(last)


@pytest.mark.parametrize(
    ("settings", "event"), [({"mode": "advise"}, "advise"), ({"margin": 0.99}, "keep")]
)
def test_advise_and_keep_leave_the_plan(served_parts, tmp_path, frames, settings, event) -> None:
    slow = platform_localhost().keys[1]
    with start(served_parts, tmp_path, **settings) as service:
        service.run(frames[0])
        decision = service.adapt(Conditions("slow", speed={slow: 0.02}))
        assert decision["event"] == event
        assert service.plan.name == "plan-0"
        assert service.run(frames[1])["fetch_name_0"].shape == (1, 4)
    assert not (tmp_path / "plan-1").exists()


def test_settings_refuse_what_they_cannot_do() -> None:
    from dse.errors import DseError

    with pytest.raises(DseError, match="mode='fix' is not one of replan, advise"):
        Settings(mode="fix")
    with pytest.raises(DseError, match="window=2 is too short: give at least 4 frames"):
        Settings(window=2)
    with pytest.raises(DseError, match="check_s=0 must be a number of seconds above 0"):
        Settings(check_s=0)
    with pytest.raises(DseError, match="pop_size=1: the search needs at least 2"):
        Settings(pop_size=1)
    with pytest.raises(DseError, match="probe_s=-1 must be 0 or more seconds"):
        Settings(probe_s=-1)
