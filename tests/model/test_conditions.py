"""The model under conditions (a device's speed, the network's and a port's bandwidth), against
schedules worked out by hand: every factor 1 is the model itself, bit for bit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dse.errors import DseError
from dse.mapping import from_device_lists
from dse.platform import load_platform
from models_analytical.coefficients import port_key
from models_analytical.conditions import Conditions, profile_conditions, scaled_table
from models_analytical.model import AnalyticalModel
from tests.helpers import cases
from tests.helpers.graphs import MB, boards, fork_join, relus
from tests.helpers.platforms import coefficients

FIELDS = ("latency_s", "busy_s", "comm_s", "idle_s", "memory_mb", "energy_j", "span_s")


def chain():
    """r0 -> r1: 1 s each, a 4 MB tensor between them."""
    return relus([("r0", ["x"]), ("r1", ["r0"])], ["r1"])


def evaluate(model: AnalyticalModel, devices: list[list[int]]):
    return model.evaluate(from_device_lists(model.graph, len(model.platform), [devices]))


def test_every_factor_one_is_the_model_itself_bit_for_bit():
    p = cases.problem("two_boards", "advanced", 2)
    mappings = cases.every_mapping(p.chromosome)
    plain = p.model.evaluate(mappings)
    ones = Conditions("ones", speed={"a_cpu0": 1.0, "c_cpu3": 1.0}, network=1.0, ports={"b": 1.0})
    for conditions in (Conditions(), ones):
        under = p.model.under(conditions).evaluate(mappings)
        for name in FIELDS:
            assert np.array_equal(getattr(under, name), getattr(plain, name)), name


def test_a_device_at_half_speed_takes_twice_as_long_on_its_own():
    # every Relu 1 s on h0: 4 s; at half speed 8 s, and 10 W x 8 s of energy
    g = fork_join()
    model = AnalyticalModel(g, boards([1, 1]), coefficients())
    hot = model.under(Conditions("hot", speed={"h0_cpu0": 0.5}))
    plain, slow = evaluate(model, [[0]] * 4), evaluate(hot, [[0]] * 4)
    assert plain.latency_s.tolist() == [4.0] and slow.latency_s.tolist() == [8.0]
    assert slow.busy_s.tolist() == [[8.0, 0.0]]
    assert slow.energy_j.tolist() == [[80.0, 0.0]]
    assert np.array_equal(slow.memory_mb, plain.memory_mb)
    # the other device keeps its speed: on h1 (the image sent there 4 s first) as it was
    assert evaluate(hot, [[1]] * 4).latency_s.tolist() == [8.0]
    assert evaluate(model, [[1]] * 4).latency_s.tolist() == [8.0]


def test_a_device_at_half_speed_doubles_every_cost_of_a_whole_network_on_it():
    # conv_chain whole on the entry (a slow CPU with per-layer overheads): no transfer, so
    # its busy time, the latency and its energy exactly double; the other devices stay unused
    p = cases.problem("two_boards", "vertical")
    devices = [[0]] * len(p.model.graph)
    plain = evaluate(p.model, devices)
    slow = evaluate(p.model.under(Conditions(speed={"a_cpu0": 0.5})), devices)
    assert plain.latency_s[0] > 0
    assert np.array_equal(slow.busy_s, 2 * plain.busy_s)
    assert np.array_equal(slow.latency_s, 2 * plain.latency_s)
    assert np.array_equal(slow.energy_j, 2 * plain.energy_j)
    assert np.array_equal(slow.memory_mb, plain.memory_mb)
    speed = p.model.under(Conditions(speed={"a_cpu0": 0.5})).device_speed()
    assert np.array_equal(speed[:, 0], p.model.device_speed()[:, 0] / 2)
    assert np.array_equal(speed[:, 1:], p.model.device_speed()[:, 1:])


def test_half_the_network_doubles_the_crossing_tensors_time_and_not_its_latency():
    # r0 on h0 (1 s), 4 MB at 1 MB/s after 0.25 s of latency, r1 on h1 (1 s): 6.25 s; the
    # network at half its bandwidth: 0.25 + 8 s, 10.25 s. Energy: 10 J of work, 4 MB x 1e-9
    # J/B of link, 1 W idle for the rest of the latency (h0: 5.25 s, then 9.25 s)
    links = {
        "network": replace(boards([1]).links["network"], latency_s=0.25, energy_J_per_byte=1e-9)
    }
    model = AnalyticalModel(chain(), boards([1, 1], links=links), coefficients())
    plain = evaluate(model, [[0], [1]])
    slow = evaluate(model.under(Conditions("wifi", network=0.5)), [[0], [1]])
    assert plain.latency_s[0] == pytest.approx(6.25)
    assert slow.latency_s[0] == pytest.approx(10.25)
    assert slow.comm_s[0].tolist() == pytest.approx([8.25, 8.25])
    assert slow.energy_j[0].tolist() == pytest.approx([10 + 4e-3 + 9.25, 10 + 4e-3 + 9.25])
    assert np.array_equal(slow.memory_mb, plain.memory_mb)


def test_half_the_network_doubles_a_measured_tables_per_byte_part_only():
    # the network class measured: 0.5 s + 1 us per byte; 4 MB: 4.5 s, at half the
    # bandwidth 0.5 + 8 s. Latency 1 + 4.5 + 1 s, then 1 + 8.5 + 1 s
    sizes = [1e3, 4e6, 8e6]
    table = {"bytes": sizes, "seconds": [0.5 + b / MB for b in sizes]}
    coeff = replace(coefficients(), links={"network": table})
    model = AnalyticalModel(chain(), boards([1, 1]), coeff)
    assert evaluate(model, [[0], [1]]).latency_s[0] == pytest.approx(6.5)
    slow = model.under(Conditions(network=0.5))
    assert evaluate(slow, [[0], [1]]).latency_s[0] == pytest.approx(10.5)
    # the table itself: 0.5 s kept at every size, the rest doubled
    x, y = scaled_table((sizes, table["seconds"]), 0.5)
    assert x == sizes and y == pytest.approx([0.5 + 2 * b / MB for b in sizes])


def test_the_network_leaves_links_within_a_board_as_they_are():
    model = AnalyticalModel(chain(), boards([2]), coefficients())
    slow = model.under(Conditions(network=0.1))
    assert evaluate(slow, [[0], [1]]).latency_s[0] == pytest.approx(1 + 4 + 1)


def test_a_slow_port_slows_only_the_pairs_of_its_board():
    # switched, every port 1 MB/s: h0 -> h1 4 s, h0 -> h2 4 s. h1's port at half: h0 -> h1
    # 8 s (the slower port), h0 -> h2 still 4 s. On pairs' network likewise (a board's link
    # is no faster than its port).
    for network in ("switched", "pairs"):
        model = AnalyticalModel(chain(), boards([1, 1, 1], network), coefficients())
        slow = model.under(Conditions("h1_slow", ports={"h1": 0.5}))
        assert evaluate(slow, [[0], [1]]).latency_s[0] == pytest.approx(1 + 8 + 1)
        assert evaluate(slow, [[0], [2]]).latency_s[0] == pytest.approx(1 + 4 + 1)
        assert evaluate(slow, [[1], [2]]).latency_s[0] == pytest.approx(8 + 1 + 8 + 1)


def test_a_pair_of_ports_takes_the_slower_once_each_is_scaled():
    # h1's own port: 0.5 s, 0.5 MB/s; h0's the network class's 1 MB/s. h0 -> h1: 0.5 + 8 s.
    # h0's port at a quarter (0.25 MB/s, now the slower): 0.5 + 16 s; h1's at double (1 MB/s,
    # as h0's): 0.5 + 4 s, the latency kept
    links = {"network": replace(boards([1]).links["network"], latency_s=0.25)}
    ports = {"h1": replace(links["network"], latency_s=0.5, bandwidth_Bps=MB / 2)}
    plat = boards([1, 1, 1], "switched", links=links, ports=ports)
    model = AnalyticalModel(chain(), plat, coefficients())
    assert evaluate(model, [[0], [1]]).latency_s[0] == pytest.approx(1 + 0.5 + 8 + 1)
    h0 = model.under(Conditions(ports={"h0": 0.25}))
    assert evaluate(h0, [[0], [1]]).latency_s[0] == pytest.approx(1 + 0.5 + 16 + 1)
    h1 = model.under(Conditions(ports={"h1": 2.0}))
    assert evaluate(h1, [[0], [1]]).latency_s[0] == pytest.approx(1 + 0.5 + 4 + 1)
    assert evaluate(h1, [[0], [2]]).latency_s[0] == pytest.approx(1 + 0.25 + 4 + 1)


def test_measured_ports_are_each_scaled_before_the_slower_is_taken():
    # tables: h0's port 1 s + 1 MB/s, h1's 1 s + 0.5 MB/s, h2's 2 s + 0.25 MB/s. h0 -> h1 at
    # h1's (1 + 8 s); h1's port at half: 1 + 16 s. h0 -> h2 as it was (2 + 16 s)
    sizes = [1e3, 4e6, 8e6]

    def table(latency_s: float, bandwidth: float) -> dict[str, list[float]]:
        return {"bytes": sizes, "seconds": [latency_s + b / bandwidth for b in sizes]}

    links = {
        port_key("h0"): table(1.0, MB),
        port_key("h1"): table(1.0, MB / 2),
        port_key("h2"): table(2.0, MB / 4),
    }
    model = AnalyticalModel(
        chain(), boards([1, 1, 1], "switched"), replace(coefficients(), links=links)
    )
    assert evaluate(model, [[0], [1]]).latency_s[0] == pytest.approx(1 + 9 + 1)
    slow = model.under(Conditions(ports={"h1": 0.5}))
    assert evaluate(slow, [[0], [1]]).latency_s[0] == pytest.approx(1 + 17 + 1)
    assert evaluate(slow, [[0], [2]]).latency_s[0] == pytest.approx(1 + 18 + 1)
    # h0's at a quarter: 1 + 16 s, now slower than h1's 1 + 8 s
    h0 = model.under(Conditions(ports={"h0": 0.25}))
    assert evaluate(h0, [[0], [1]]).latency_s[0] == pytest.approx(1 + 17 + 1)


def test_conditions_compose():
    p = cases.problem("two_boards", "advanced", 2)
    mappings = cases.every_mapping(p.chromosome)
    a = Conditions("a", speed={"a_cpu0": 0.5}, network=0.5, ports={"b": 0.5})
    b = Conditions("b", speed={"a_cpu0": 0.8, "c_cpu3": 2.0}, ports={"c": 0.25})
    both = a.times(b)
    assert both == Conditions(
        "a+b", speed={"a_cpu0": 0.4, "c_cpu3": 2.0}, network=0.5, ports={"b": 0.5, "c": 0.25}
    )
    assert {both: 1}[Conditions("a+b", {"c_cpu3": 2.0, "a_cpu0": 0.4}, 0.5, both.ports)] == 1
    assert Conditions().nominal and not a.nominal and Conditions("x", {"a_cpu0": 1.0}).nominal
    twice = p.model.under(a).under(b)
    assert twice.conditions.speed == both.speed
    once = p.model.under(both).evaluate(mappings)
    again = twice.evaluate(mappings)
    for name in FIELDS:
        assert np.allclose(getattr(again, name), getattr(once, name), rtol=1e-12), name


@pytest.mark.parametrize(
    ("conditions", "message"),
    [
        (
            lambda: Conditions("hot", speed={"h9_cpu0": 0.5}),
            "conditions 'hot': speed of 'h9_cpu0': not a device of platform 't' "
            "(its devices: h0_cpu0, h1_cpu0)",
        ),
        (
            lambda: Conditions("slow", ports={"h7": 0.5}),
            "conditions 'slow': port of 'h7': not a board of platform 't' (its boards: h0, h1)",
        ),
        (
            lambda: Conditions("off", network=0.0),
            "conditions 'off': network is 0.0: give a factor above 0 (1: as calibrated)",
        ),
        (
            lambda: Conditions("x", speed={"h0_cpu0": -1}),
            "conditions 'x': speed of 'h0_cpu0' is -1: give a factor above 0 (1: as calibrated)",
        ),
    ],
)
def test_bad_conditions_are_one_line_each(conditions, message):
    model = AnalyticalModel(chain(), boards([1, 1]), coefficients())
    with pytest.raises(DseError) as e:
        model.under(conditions())
    assert str(e.value) == message


# --- a platform's profiles -----------------------------------------------------------------------


def platform_file(**extra) -> dict:
    """Two boards a and b, one device each; the network 1e8 B/s (800 Mbit/s); b's port 5e7."""
    return {
        "name": "p",
        "devices": [
            {"name": "a_cpu", "host": "a", "kind": "cpu", "memory_mb": 100},
            {"name": "b_cpu", "host": "b", "kind": "cpu", "memory_mb": 100},
        ],
        "links": {"network": {"latency_s": 1e-4, "bandwidth_Bps": 1e8}},
        "network": "switched",
        "ports": {"b": {"bandwidth_Bps": 5e7}},
        **extra,
    }


def test_profiles_are_read_and_made_conditions_against_the_platforms_figures():
    # wifi: 80 Mbit/s = 1e7 B/s, a tenth of the network class's; b's own port (5e7) at it too:
    # 5e7 x 0.1 x 2. b_slow: b's port at 40 Mbit/s = 5e6 B/s, a tenth of its 5e7. hot: a_cpu
    # at half speed. half: every link at half, a's port at half of that.
    profiles = {
        "wifi": {"network_mbit": 80},
        "b_slow": {"ports": {"b": {"rate_mbit": 40}}},
        "hot": {"speed": {"a_cpu": 0.5}},
        "half": {"network": 0.5, "ports": {"a": {"factor": 0.5}}},
    }
    plat = load_platform(platform_file(profiles=profiles))
    got = profile_conditions(plat)
    assert [c.name for c in got] == ["nominal", "wifi", "b_slow", "hot", "half"]
    assert got[0] == Conditions()
    assert got[1].network == pytest.approx(0.1) and got[1].ports == {"b": pytest.approx(2.0)}
    assert got[2].network == 1.0 and got[2].ports == {"b": pytest.approx(0.1)}
    assert got[3] == Conditions("hot", speed={"a_cpu": 0.5})
    assert got[4] == Conditions("half", network=0.5, ports={"a": 0.5})
    # the pair a-b goes at its slower port: 5e7 as it is, 1e7 under wifi, 5e6 under b_slow,
    # under half min(1e8 x 0.25, 5e7 x 0.5)
    model = AnalyticalModel(chain(), plat, coefficients())
    rates = [1 / model.under(c).inputs.link_s_per_byte[0, 1] for c in got]
    assert rates == pytest.approx([5e7, 1e7, 5e6, 5e7, 2.5e7])


def test_a_platform_without_profiles_has_the_nominal_only():
    assert profile_conditions(load_platform(platform_file())) == [Conditions()]


ONE_BOARD = {"devices": [{"name": "a_cpu", "host": "a", "kind": "cpu", "memory_mb": 100}]}

#: profiles -> the one line (after "platform 'p': ")
BAD_PROFILES = [
    (
        {"nominal": {"network": 0.5}},
        "profiles.nominal: the nominal conditions (the platform's figures) are always a "
        "profile: give this one another name",
    ),
    ({"x": {}}, "profiles.x sets nothing: give network_mbit, network, ports or speed"),
    (
        {"x": {"network": 0.5, "network_mbit": 10}},
        "profiles.x: give network_mbit or network, not both",
    ),
    (
        {"x": {"speed": {"c_cpu": 0.5}}},
        "profiles.x.speed.c_cpu: 'c_cpu' is not a device of the platform (its devices: a_cpu, "
        "b_cpu)",
    ),
    (
        {"x": {"ports": {"c": {"factor": 0.5}}}},
        "profiles.x.ports.c: 'c' is not a board of the platform (its boards: a, b)",
    ),
    ({"x": {"ports": {"a": {}}}}, "profiles.x.ports.a: give rate_mbit or factor, one of them"),
    (
        {"x": {"ports": {"a": {"factor": 0.5, "rate_mbit": 5}}}},
        "profiles.x.ports.a: give rate_mbit or factor, one of them",
    ),
]


@pytest.mark.parametrize(("profiles", "message"), BAD_PROFILES, ids=lambda x: str(x)[:40])
def test_bad_profiles_are_one_line_each(profiles, message):
    with pytest.raises(DseError) as e:
        load_platform(platform_file(profiles=profiles))
    assert str(e.value) == f"platform 'p': {message}"


@pytest.mark.parametrize(
    ("profiles", "words"),
    [
        ({"x": {"speed": {"a_cpu": 0}}}, "profiles.x.speed.a_cpu: 0 is out of range"),
        ({"x": {"network_mbit": -5}}, "profiles.x.network_mbit: -5 is out of range"),
        ({"x": {"bandwidth": 5}}, "profiles.x: unknown key 'bandwidth'"),
        ({"x": {"ports": {"a": {"rate": 5}}}}, "profiles.x.ports.a: unknown key 'rate'"),
        ({"x": {"speed": [1]}}, "profiles.x.speed: expected an object, not a list"),
    ],
)
def test_wrong_profile_values_are_one_line_naming_them(profiles, words):
    with pytest.raises(DseError) as e:
        load_platform(platform_file(profiles=profiles))
    text = str(e.value)
    assert words in text and "platform 'p'" in text and "\n" not in text, text


def test_a_profile_of_the_network_on_one_board_is_refused():
    with pytest.raises(DseError) as e:
        load_platform({"name": "p", **ONE_BOARD, "profiles": {"x": {"network_mbit": 10}}})
    assert str(e.value) == (
        "platform 'p': profiles.x: the platform has one board, no network: set speed only"
    )
    hot = load_platform({"name": "p", **ONE_BOARD, "profiles": {"x": {"speed": {"a_cpu": 2}}}})
    assert profile_conditions(hot)[1] == Conditions("x", speed={"a_cpu": 2.0})
