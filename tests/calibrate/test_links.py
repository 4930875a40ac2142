"""The link table's fit and its small-message step check, on tables made by hand."""

from __future__ import annotations

import pytest

from dse.calibrate.__main__ import step_lines
from dse.calibrate.links import SIZES, fit_link, small_message_step

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
