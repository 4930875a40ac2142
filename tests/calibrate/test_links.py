"""The link table's fit and its small-message step check, on tables made by hand."""

from __future__ import annotations

import json

import pytest

from dse.calibrate.__main__ import step_lines
from dse.calibrate.links import SIZES, fit_link, measure_links, small_message_step
from dse.platform import load_platform

LATENCY, BANDWIDTH = 15e-6, 11.7e6  # a 100 Mbit/s medium's line


def line_table() -> dict[str, list[float]]:
    return {"bytes": list(SIZES), "one_way_s": [LATENCY + x / BANDWIDTH for x in SIZES]}


def test_fit_of_a_line_gives_back_its_latency_and_bandwidth() -> None:
    fit = fit_link(line_table())
    assert fit["latency_s"] == pytest.approx(LATENCY + 64 / BANDWIDTH)  # the smallest message's
    assert fit["bandwidth_Bps"] == pytest.approx(BANDWIDTH, rel=1e-9)


def test_a_line_has_no_small_message_step() -> None:
    assert small_message_step(line_table()) is None


def test_a_step_at_small_messages_is_found_with_its_line() -> None:
    # as measured on edge3_wifi with a busy loop on a core: 4 kB in 2.0 ms, 16 kB in 2.5 ms
    table = line_table()
    table["one_way_s"][SIZES.index(4096)] = 2.0e-3
    table["one_way_s"][SIZES.index(16384)] = 2.5e-3
    step = small_message_step(table)
    assert step is not None
    # the line: the 64 B message's time + bytes / bandwidth; the worst against it is 4 kB,
    # 2.0 / (15 us + (64 + 4096) / 11.7 MB/s) = 5.4x (16 kB: 2.5 / 1.42 = 1.8x)
    assert step["bytes"] == 4096
    assert step["seconds"] == 2.0e-3
    assert step["line_s"] == pytest.approx(15e-6 + (64 + 4096) / 11.7e6)
    (line,) = step_lines({"network": {"small_message_step": step}, "same_host": {}})
    assert line.startswith("link network: 4 kB one way took 2.00 ms, its line gives 0.37 ms")


def test_excess_under_a_millisecond_or_at_large_messages_is_no_step() -> None:
    table = line_table()
    table["one_way_s"][SIZES.index(1024)] = 0.9e-3  # 9x its line, but under 1 ms more
    table["one_way_s"][SIZES.index(1 << 20)] *= 1.6  # 1 MiB and up: the bandwidth's own sizes
    assert small_message_step(table) is None


def test_every_board_pair_of_the_port_benchmark_is_checked_for_a_step() -> None:
    """On three switched boards the ports take a benchmark per board pair beyond the class's
    first one; a step in such a pair's table is found and named (no MPI: each benchmark's
    table is handed in, as a calibration's journal would)."""
    platform = load_platform(
        {
            "name": "three",
            "coefficients": "localhost.json",
            "network": "switched",
            "devices": [
                {"name": f"b{i}_cpu", "host": f"b{i}", "kind": "cpu", "memory_mb": 512}
                for i in range(3)
            ],
            "links": {"network": {"latency_s": 15e-6, "bandwidth_Bps": BANDWIDTH}},
        }
    )
    stepped = line_table()
    stepped["one_way_s"][SIZES.index(4096)] = 2.0e-3
    asked = []

    def take(key: str, _measure) -> dict:
        devices = json.loads(key)["devices"]
        asked.append(devices)
        return stepped if devices == ["b1_cpu", "b2_cpu"] else line_table()

    got = measure_links(platform, few=True, take=take)
    assert asked == [["b0_cpu", "b1_cpu"], ["b0_cpu", "b2_cpu"], ["b1_cpu", "b2_cpu"]]
    pairs = got.provenance["ports"]["pairs"]
    assert "small_message_step" not in got.provenance["network"]  # the class's pair: a line
    assert "small_message_step" not in pairs["b0-b2"]
    assert pairs["b1-b2"]["small_message_step"]["bytes"] == 4096
    (line,) = step_lines(got.provenance)
    assert line.startswith("link b1-b2 (port benchmark): 4 kB one way took 2.00 ms")
    # a step in the class's own pair (b0-b1, the network's benchmark) is one line, the class's
    got = measure_links(platform, few=True, take=lambda key, _: stepped)
    assert [x.split(":")[0] for x in step_lines(got.provenance)] == [
        "link network", "link b0-b2 (port benchmark)", "link b1-b2 (port benchmark)",
    ]  # fmt: skip
