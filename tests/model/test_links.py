"""How boards are joined: transfers on a device pair's queue, a switched star's ports or one
shared medium, against schedules worked out by hand; and the platform keys that say so."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from dse.calibrate.links import port_tables
from dse.errors import DseError
from dse.mapping import from_device_lists
from dse.paths import CONF_DIR
from dse.platform import Link, Platform, load_platform
from models_analytical.coefficients import port_key
from models_analytical.model import AnalyticalModel
from tests.helpers.graphs import MB, boards, fork_join, relus
from tests.helpers.platforms import coefficients


def two_pipes():
    """a feeds b and c; b feeds d, c feeds e; d and e joined by j."""
    edges = [("a", ["x"]), ("b", ["a"]), ("c", ["a"]), ("d", ["b"]), ("e", ["c"])]
    return relus([*edges, ("j", ["d", "e"])], ["j"])


def latency(graph, plat: Platform, devices: list[list[int]]) -> float:
    model = AnalyticalModel(graph, plat, coefficients())
    ev = model.evaluate(from_device_lists(graph, len(plat), [devices]))
    return float(ev.latency_s[0])


def test_the_graphs_run_in_the_order_the_schedules_below_assume():
    assert list(fork_join().names) == ["a", "b", "c", "j"]
    assert list(two_pipes().names) == ["a", "b", "c", "d", "e", "j"]


def test_a_board_sending_two_parts_at_once_sends_them_through_its_port_one_after_the_other():
    # a on h0 (0-1) sends its output to h1 for b and to h2 for c.
    # pairs: both sends 1-5; b, c 5-6; both back to h0 6-10; j 10-11.
    # switched: h0's egress port takes a->h1 1-5, then a->h2 5-9; b 5-6, c 9-10; b->h0 6-10
    # (h1's egress, h0's ingress); c->h0 10-14; j 14-15.
    g = fork_join()
    devices = [[0], [1], [2], [0]]
    assert latency(g, boards([1, 1, 1]), devices) == pytest.approx(11)
    assert latency(g, boards([1, 1, 1], "switched"), devices) == pytest.approx(15)
    model = AnalyticalModel(g, boards([1, 1, 1], "switched"), coefficients())
    ev = model.evaluate(from_device_lists(g, 3, [devices]))
    # every transfer 4 s, counted on both ends: h0 two out and two in, h1 and h2 one each way
    assert ev.comm_s[0].tolist() == pytest.approx([16, 8, 8])
    assert ev.bytes_sent[0].tolist() == pytest.approx([8e6, 4e6, 4e6])


def test_a_slower_machine_slows_the_devices_work_and_not_the_links():
    # every Relu 2 s instead of 1, every transfer still 4 s. One device: 4 s -> 8 s.
    # pairs: a 0-2; both sends 2-6; b, c 6-8; both back 8-12; j 12-14 (11 s as it was).
    # switched: a 0-2; h0's port a->h1 2-6, a->h2 6-10; b 6-8, c 10-12; b->h0 8-12,
    # c->h0 12-16; j 16-18 (15 s). Half as slow: 0.5 + 4 + 0.5 + 4 + 0.5 on pairs.
    g = fork_join()
    cases = [
        (boards([1]), [[0]] * 4, {1.0: 4, 2.0: 8}),
        (boards([1, 1, 1]), [[0], [1], [2], [0]], {1.0: 11, 2.0: 14, 0.5: 9.5}),
        (boards([1, 1, 1], "switched"), [[0], [1], [2], [0]], {1.0: 15, 2.0: 18}),
    ]
    for plat, devices, by_hand in cases:
        model = AnalyticalModel(g, plat, coefficients())
        mapping = from_device_lists(g, len(plat), [devices])
        for slower, seconds in by_hand.items():
            ev = model.with_compute_slower(slower).evaluate(mapping)
            assert float(ev.latency_s[0]) == pytest.approx(seconds)
        assert float(model.evaluate(mapping).latency_s[0]) == pytest.approx(by_hand[1.0])


def test_a_port_goes_both_ways_at_once():
    # a h0, b h1, c h0, d h2, e h1, j h1. a 0-1; a->h1 1-5; c 1-2 (h0); b 5-6; b->h2 6-10
    # (h1's egress); c->h1 (h0's egress, h1's ingress, both free at 5) 5-9, while h1 sends;
    # e 9-10; d 10-11; d->h1 11-15; j 15-16: as with a queue per pair. Were a port one queue
    # for both ways, c->h1 would wait until 10, e run 14-15, d->h1 14-18 and j 18-19, as on
    # one medium: a->h1 1-5, b->h2 6-10, c->h1 10-14, d->h1 14-18, j 18-19.
    g = two_pipes()
    devices = [[0], [1], [0], [2], [1], [1]]
    assert latency(g, boards([1, 1, 1]), devices) == pytest.approx(16)
    assert latency(g, boards([1, 1, 1], "switched"), devices) == pytest.approx(16)
    assert latency(g, boards([1, 1, 1], "shared"), devices) == pytest.approx(19)


def test_a_slow_port_sets_the_pair_rate_and_its_latency():
    # r0 on h0 (1 s), its 4 MB to h1 or h2, r1 there (1 s). The network class: 0.25 s, 1 MB/s;
    # h1's port: 0.5 s, 0.5 MB/s. h0 -> h1 goes at the slower port: 0.5 + 8 s; h0 -> h2 at the
    # class's figures (both ports default to them): 0.25 + 4 s.
    g = relus([("r0", ["x"]), ("r1", ["r0"])], ["r1"])
    links = {"network": Link(0.25, MB, 1e-9)}
    slow = {"h1": Link(0.5, MB / 2, 1e-9)}
    plat = boards([1, 1, 1], "switched", links=links, ports=slow)
    assert latency(g, plat, [[0], [1]]) == pytest.approx(1 + 0.5 + 8 + 1)
    assert latency(g, plat, [[0], [2]]) == pytest.approx(1 + 0.25 + 4 + 1)
    assert plat.link(1, 0) == Link(0.5, MB / 2, 1e-9)  # either direction
    # the same ports on pairs' network are not read: every pair has the class's figures
    pairs = boards([1, 1, 1], links=links)
    assert latency(g, pairs, [[0], [1]]) == pytest.approx(1 + 0.25 + 4 + 1)


def test_measured_ports_give_each_pair_its_slower_ports_times():
    # calibrated tables (one-way s by bytes): h0's port 1 MB/s, h1's 0.5 MB/s, h2's 0.25 MB/s
    # beyond 1 s of latency (h2: 2 s); the network class table says 10 MB/s and is not read
    # for pairs of measured ports. r0 on h0 (1 s), its 4 MB to another board, r1 there (1 s).
    g = relus([("r0", ["x"]), ("r1", ["r0"])], ["r1"])
    sizes = [1e3, 4e6, 8e6]

    def table(latency_s: float, bandwidth: float) -> dict[str, list[float]]:
        return {"bytes": sizes, "seconds": [latency_s + b / bandwidth for b in sizes]}

    links = {
        "network": table(0.0, 10 * MB),
        port_key("h0"): table(1.0, MB),
        port_key("h1"): table(1.0, MB / 2),
        port_key("h2"): table(2.0, MB / 4),
    }
    coeff = replace(coefficients(), links=links)
    plat = boards([1, 1, 1], "switched")

    def lat(devices):
        model = AnalyticalModel(g, plat, coeff)
        return float(model.evaluate(from_device_lists(g, 3, [devices])).latency_s[0])

    assert lat([[0], [1]]) == pytest.approx(1 + (1 + 8) + 1)  # h1's port, the slower
    assert lat([[0], [2]]) == pytest.approx(1 + (2 + 16) + 1)  # h2's
    # without the ports' tables, the class's: 0.4 s
    plain = replace(coeff, links={"network": links["network"]})
    model = AnalyticalModel(g, plat, plain)
    assert float(
        model.evaluate(from_device_lists(g, 3, [[[0], [1]]])).latency_s[0]
    ) == pytest.approx(1 + 0.4 + 1)


def test_each_port_is_the_fastest_pair_it_is_in():
    """Calibration's ports from board pairs (each pair at its slower port): h0 200, h1 100,
    h2 50 (MB/s-like units); h0's port shows as h1's, the fastest partner it has."""
    plat = boards([1, 1, 1], "switched")
    sizes = [64, 1 << 20, 1 << 22]

    def bench(rate: float) -> dict:
        return {"bytes": sizes, "one_way_s": [1e-5 + b / rate for b in sizes]}

    measured = {(0, 1): bench(100e6), (0, 2): bench(50e6), (1, 2): bench(50e6)}
    ports = port_tables(plat, measured)
    assert ports["h0"]["one_way_s"] == bench(100e6)["one_way_s"]
    assert ports["h1"]["one_way_s"] == bench(100e6)["one_way_s"]
    assert ports["h2"]["one_way_s"] == bench(50e6)["one_way_s"]
    assert ports["h2"]["fit"]["bandwidth_Bps"] == pytest.approx(50e6)
    assert ports["h2"]["fit"]["latency_s"] == pytest.approx(1e-5 + 64 / 50e6)


def test_a_shared_medium_serialises_transfers_between_disjoint_pairs():
    # a h0, b h1, c h2, d h3, e h0, j h0.
    # pairs: a 0-1; a->h1, a->h2 1-5; b, c 5-6; b->h3 and c->h0 (disjoint pairs) 6-10 side by
    # side; d, e 10-11; d->h0 11-15; j 15-16.
    # shared: a->h1 1-5, a->h2 5-9; b 5-6, c 9-10; b->h3 9-13; c->h0 13-17; d 13-14, e 17-18;
    # d->h0 17-21; j 21-22.
    # switched: a->h1 1-5, a->h2 5-9 (h0's egress); b 5-6, c 9-10; b->h3 6-10; c->h0 10-14;
    # d 10-11, e 14-15; d->h0 14-18 (h0's ingress); j 18-19.
    g = two_pipes()
    devices = [[0], [1], [2], [3], [0], [0]]
    assert latency(g, boards([1, 1, 1, 1]), devices) == pytest.approx(16)
    assert latency(g, boards([1, 1, 1, 1], "shared"), devices) == pytest.approx(22)
    assert latency(g, boards([1, 1, 1, 1], "switched"), devices) == pytest.approx(19)


def test_transfers_within_a_board_keep_their_own_queue_whatever_the_network():
    # boards h0 (cpu0, cpu1) and h1 (cpu0, cpu1) = devices 0, 1 | 2, 3; a on 0, b on 1, c on 2,
    # j on 3. a's output goes to 1 (same board) and to 2 (network) side by side, 1-5; b, c 5-6;
    # b 1 -> 3 (network) and c 2 -> 3 (same board) side by side 6-10; j 10-11. Were the
    # same-board transfers on the medium or a port, a's two sends would take 1-9.
    g = fork_join()
    for network in ("pairs", "switched", "shared"):
        assert latency(g, boards([2, 2], network), [[0], [1], [2], [3]]) == pytest.approx(11)


def test_the_queues_a_transfer_occupies():
    # devices 0, 1 on h0, 2 on h1, 3 on h2: D = 4, D * D = 16
    for network in ("pairs", "switched", "shared"):
        plat = boards([2, 1, 1], network)
        assert plat.queues(0, 1) == (1, 1)  # one board: the pair's own, whatever the network
        assert plat.queues(1, 0) == (4, 4)
    assert boards([2, 1, 1]).queues(0, 2) == (2, 2)
    assert boards([2, 1, 1], "shared").queues(0, 2) == (16, 16)
    assert boards([2, 1, 1], "shared").queues(3, 1) == (16, 16)
    switched = boards([2, 1, 1], "switched")
    assert switched.queues(0, 2) == (16 + 0, 16 + 2 + 1)  # h0's egress, h1's ingress
    assert switched.queues(1, 3) == (16 + 0, 16 + 4 + 1)  # h0's egress, h2's ingress
    assert switched.queues(3, 0) == (16 + 4, 16 + 0 + 1)  # h2's egress, h0's ingress


# --- the platform keys ----------------------------------------------------------------------


def config(**extra) -> dict:
    """Two boards, one device each, in a platform file's form."""
    return {
        "name": "p",
        "devices": [
            {"name": "a_cpu", "host": "a", "kind": "cpu", "memory_mb": 100},
            {"name": "b_cpu", "host": "b", "kind": "cpu", "memory_mb": 100},
        ],
        "links": {"network": {"latency_s": 1e-4, "bandwidth_Bps": 1e8, "energy_J_per_byte": 1e-9}},
        **extra,
    }


def test_the_network_keys_load():
    assert load_platform(config()).network == "pairs"
    assert load_platform(config(shared_network=True)).network == "shared"
    assert load_platform(config(shared_network=False)).network == "pairs"
    shared = load_platform(config(network="shared", shared_network=True))
    assert shared.network == "shared" and shared.shared_network
    plat = load_platform(config(network="switched", ports={"b": {"bandwidth_Bps": 1e7}}))
    # b's port: its own bandwidth, the network class's latency; a's port: the class's
    assert plat.ports == {"b": Link(1e-4, 1e7, 1e-9)}
    assert plat.port("a") == Link(1e-4, 1e8, 1e-9)
    assert plat.link(0, 1) == Link(1e-4, 1e7, 1e-9)


def test_the_shipped_platforms_say_how_their_boards_are_joined():
    def load(name: str) -> Platform:
        return load_platform(yaml.safe_load((CONF_DIR / "platform" / f"{name}.yaml").read_text()))

    assert load("edge3_ethernet").network == "switched"
    assert load("edge3_wifi").network == "shared"
    for name in ("jetson_xavier_nx_x8", "xavier_cpu_only_x8", "localhost"):
        assert load(name).network == "pairs"


#: platform keys -> words of the one line
BAD = [
    ({"network": "mesh"}, 'network: expected one of pairs, switched, shared, not "mesh"'),
    ({"network": "pairs", "shared_network": True}, "remove shared_network"),
    ({"network": "switched", "shared_network": True}, "remove shared_network"),
    ({"network": "switched", "ports": {"c": {"bandwidth_Bps": 1e7}}}, "'c' is not a board"),
    ({"network": "switched", "ports": {"a": {"bandwidth_Bps": 0}}}, "a.bandwidth_Bps: 0 is out of"),
    ({"network": "switched", "ports": {"a": {"latency_s": -1}}}, "a.latency_s: -1 is out of rang"),
    ({"network": "switched", "ports": {"a": {"rate_mbit": 100}}}, "unknown key 'rate_mbit'"),
    ({"network": "switched", "ports": {"a": 5}}, "ports.a: expected an object"),
    ({"network": "switched", "ports": [1]}, "ports: expected an object, not a list"),
    ({"ports": {"a": {"bandwidth_Bps": 1e7}}}, "set network: switched or remove them"),
    ({"shared_network": "yes"}, "shared_network: expected true or false, not text"),
]


@pytest.mark.parametrize("keys, words", BAD, ids=lambda x: str(x)[:40])
def test_bad_network_keys_are_one_line_each(keys, words):
    with pytest.raises(DseError) as err:
        load_platform(config(**keys))
    text = str(err.value)
    assert words in text and "platform 'p'" in text and "\n" not in text, text
