"""When a served plan has drifted, and the conditions fitted to explain it, on a plan worked out
by hand: r0 on board h0 (1 s), its 4 MB output over a 1 MB/s network (4 s), r1 on h1 (1 s).
Its predicted period is the link's 4 s; at half the network's bandwidth, 8 s."""

from __future__ import annotations

import pytest

from dse.mapping import from_device_lists
from dse.objectives import OBJECTIVES
from dse.serve.drift import Expected, Reference, drift, rescaled
from dse.serve.monitor import Window
from models_analytical.conditions import Conditions
from models_analytical.model import AnalyticalModel
from tests.helpers.graphs import boards, relus
from tests.helpers.platforms import coefficients

DEVICES = {0: "h0_cpu0", 1: "h1_cpu0"}


@pytest.fixture(scope="module")
def served() -> tuple[AnalyticalModel, object]:
    graph = relus([("r0", ["x"]), ("r1", ["r0"])], ["r1"])
    model = AnalyticalModel(graph, boards([1, 1]), coefficients())
    return model, from_device_lists(graph, 2, [[[0], [1]]])


def period_under(model: AnalyticalModel, mapping: object):
    def period(c: Conditions) -> float:
        return float(OBJECTIVES["period"].values(model.under(c).evaluate(mapping))[0]) / 1e3

    return period


def window(compute: tuple[float, float], period: float | None) -> Window:
    return Window({0: compute[0], 1: compute[1]}, latency_s=10.0, period_s=period, frames=20)


# what the model predicts: 1 s on each rank, a period of 4 s; this deployment measured 10 %
# and 20 % slower compute and a 10 % longer period on its first window
EXPECTED = Expected({0: 1.0, 1: 1.0}, period_s=4.0)
FIRST = window((1.1, 1.2), 4.4)


def test_the_first_window_sets_the_reference() -> None:
    ref = Reference.of(FIRST, EXPECTED)
    assert ref.compute == {0: pytest.approx(1.1), 1: pytest.approx(1.2)}
    assert ref.period == pytest.approx(1.1)


def test_the_model_predicts_the_period_of_the_plan(served) -> None:
    period = period_under(*served)
    assert period(Conditions()) == pytest.approx(4.0)
    assert period(Conditions(network=0.5)) == pytest.approx(8.0)


def test_within_the_threshold_nothing_drifted() -> None:
    ref = Reference.of(FIRST, EXPECTED)
    # rank 1 20 % slower than its reference, the period 20 % longer: under 25 %
    assert not drift(window((1.1, 1.44), 5.28), EXPECTED, ref, threshold=0.25)


def test_a_device_twice_as_slow_gets_half_its_speed_and_the_network_stays(served) -> None:
    ref = Reference.of(FIRST, EXPECTED)
    slow = window((2.2, 1.2), 4.4)  # rank 0 computes twice as long; the link still sets 4 s
    found = drift(slow, EXPECTED, ref)
    assert dict(found.devices) == {0: pytest.approx(2.0)} and found.period is None
    c = rescaled(Conditions(), found, DEVICES, slow, ref, period_under(*served))
    assert dict(c.speed) == {"h0_cpu0": pytest.approx(0.5)} and c.network == 1.0


def test_a_period_twice_as_long_with_the_same_compute_is_half_the_bandwidth(served) -> None:
    ref = Reference.of(FIRST, EXPECTED)
    slow = window((1.1, 1.2), 8.8)  # 8 s predicted at half the bandwidth, times 1.1
    found = drift(slow, EXPECTED, ref)
    assert not found.devices and found.period == pytest.approx(2.0)
    c = rescaled(Conditions(), found, DEVICES, slow, ref, period_under(*served))
    assert c.network == pytest.approx(0.5, rel=1e-6) and not c.speed


def test_the_network_back_to_its_bandwidth_is_found_again(served) -> None:
    # served at half the network's bandwidth (predicted 8 s); the link recovers: 4.4 s measured
    ref = Reference.of(window((1.1, 1.2), 8.8), Expected({0: 1.0, 1: 1.0}, 8.0))
    back = window((1.1, 1.2), 4.4)
    found = drift(back, Expected({0: 1.0, 1: 1.0}, 8.0), ref)
    assert found.period == pytest.approx(0.5)
    slow = Conditions(network=0.5)
    c = rescaled(slow, found, DEVICES, back, ref, period_under(*served))
    assert c.network == pytest.approx(1.0, rel=1e-6)


def test_a_rank_that_computes_next_to_nothing_is_not_judged() -> None:
    expected = Expected({0: 1.0, 1: 0.001}, 4.0)
    ref = Reference.of(FIRST, expected)
    assert set(ref.compute) == {0}
    assert not drift(window((1.1, 1.2), 4.4), expected, ref)


def test_no_period_is_judged_from_a_window_that_was_not_pressed() -> None:
    ref = Reference.of(window((1.1, 1.2), None), EXPECTED)
    assert ref.period is None
    assert not drift(window((1.1, 1.2), 9.0), EXPECTED, ref)


def test_a_period_the_network_does_not_set_is_not_put_on_the_network(served) -> None:
    # both layers on h0: 2 s a frame whatever the network; a period twice as long is not the
    # network's, and the conditions come back as they were
    model, _ = served
    one_board = from_device_lists(model.graph, 2, [[[0], [0]]])
    period = period_under(model, one_board)
    assert period(Conditions()) == period(Conditions(network=0.01)) == pytest.approx(2.0)
    expected = Expected({0: 2.0}, 2.0)
    ref = Reference.of(Window({0: 2.0}, 5.0, 2.0, 20), expected)
    slow = Window({0: 2.0}, 5.0, 4.0, 40)
    found = drift(slow, expected, ref)
    assert found.period == pytest.approx(2.0) and not found.devices
    assert rescaled(Conditions(), found, {0: "h0_cpu0"}, slow, ref, period) == Conditions()
