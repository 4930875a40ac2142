"""Runs of a deployment merged, the machine's drift taken out, and interleaved rounds with their
one re-run rule (:mod:`dse.measuring.rounds`, :mod:`dse.measuring.rounds`), on runs whose figures
are set by hand."""

from __future__ import annotations

import numpy as np
import pytest

from dse.measuring import rounds as measure
from dse.measuring.rounds import Rounds, merge_runs, take_out_drift
from dse.runtime.deployment.measurements import Latency, Measurement, Stream
from dse.runtime.launch.mpiexec import Launcher


def run(
    med: float,
    every: list[float] | None = None,
    tag: str | None = None,
    probes: list[float] | None = None,
    period: float | None = None,
) -> Measurement:
    """A measured run of median ``med`` over the iterations ``every`` (default: just it)."""
    every = [med] if every is None else every
    return Measurement(
        "ok",
        net=tag,
        latency_ms=Latency(med, med, med, all=every),
        probe_ms=probes or [],
        stream=None if period is None else Stream(8, period),
    )


def test_runs_of_one_deployment_merge_into_one_measurement() -> None:
    merged = merge_runs([run(10, [9, 10, 11], "a"), run(30, [30], "b"), run(20, [19, 21], "c")])
    lat = merged.latency
    assert lat.median == 20 and lat.rounds_ms == [10, 30, 20]
    assert lat.round_spread == pytest.approx((30 - 10) / 20)
    assert sorted(lat.all) == [9, 10, 11, 19, 21, 30]
    assert lat.p10 == pytest.approx(np.percentile([9, 10, 11, 19, 21, 30], 10))
    assert merged.net == "c"  # the other figures: the median run's
    bad = Measurement.failed("mpiexec exited with 1")
    assert merge_runs([run(10, [10], "a"), bad]) == bad


def test_merged_runs_keep_the_median_of_their_periods() -> None:
    # latencies 10, 30, 20 (the median run: 20, period 9); periods 4, 12, 9: median 9, and
    # the median of the periods even where the median latency's run has another one
    merged = merge_runs([run(10, period=4.0), run(30, period=12.0), run(20, period=9.0)])
    assert merged.stream == Stream(8, 9.0, [4.0, 12.0, 9.0])
    merged = merge_runs([run(10, period=4.0), run(30, period=12.0), run(20, period=3.0)])
    assert merged.stream.period_ms == 4.0  # not the median run's 3.0
    # a round without a period (streamed in only some runs): the median run's figures as is
    assert merge_runs([run(10, period=4.0), run(20), run(30, period=12.0)]).stream is None


def test_drift_is_taken_out_of_each_round_by_its_probe() -> None:
    # rounds of 10, 30 and 24 ms with the whole net alone taking (48+52)/2 = 50, 150 and 100 ms
    # beside them: at the reference's 100 ms, 20, 20 and 24 ms (median 20; as measured, 24)
    merged = merge_runs(
        [run(10, probes=[48, 52]), run(30, probes=[150, 150]), run(24, probes=[90, 110])]
    )
    assert merged.latency.rounds_probe_ms == [50, 150, 100]
    assert merged.probe_ms == []
    drift = take_out_drift(merged, 100.0).latency.drift
    assert drift.rounds_adjusted_ms == [20, 20, 24] and drift.probe_ms == 100
    assert take_out_drift(merged, 100.0).latency.measured_ms == 20
    assert merged.latency.median == 24 and merged.latency.measured_ms == 24  # merged unchanged
    assert merged.stream is None  # no period streamed: none to scale
    # the pipelined period likewise: periods 5, 12 and 7 ms at 50, 150 and 100 ms -> 10, 8, 7
    streamed = merge_runs(
        [run(m, probes=q, period=p)
         for m, q, p in ((10, [48, 52], 5.0), (30, [150, 150], 12.0), (24, [90, 110], 7.0))]
    )  # fmt: skip
    out = take_out_drift(streamed, 100.0)
    assert out.stream.drift.rounds_adjusted_ms == [10, 8, 7]
    assert out.stream.measured_ms == 8 and out.stream.period_ms == 7
    # a run half of whose latency follows the machine (its period wholly): 0.5, 1.5 and 1.0
    # times slower -> latency factors 0.75, 1.25 and 1 -> 13.33, 24 and 24 ms (median 24)
    half = take_out_drift(streamed, 100.0, lambda f: (1 + (f - 1) / 2, f))
    assert half.latency.drift.rounds_adjusted_ms == pytest.approx([13.3333, 24, 24])
    assert half.latency.measured_ms == 24 and half.stream.measured_ms == 8
    # a run without its probe after it (Ctrl-C came during that probe): nothing is scaled
    partial = merge_runs([run(10, probes=[50, 50]), run(12, probes=[50])])
    assert partial.latency.rounds_probe_ms == []
    assert take_out_drift(partial, 100.0).latency.measured_ms == 11


def _fake_launch(order: list, launchers: list | None = None) -> object:
    def launch(d, *args, launcher=None):  # noqa: ANN001, ANN002, ANN202
        order.append(d)
        if launchers is not None:
            launchers.append(launcher)
        return run(1.0)

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
        dirs, Rounds(2, 0, 1, 1.0), np.random.default_rng(0),
        probe=lambda: float(next(ticks)), launcher=boards,
    )  # fmt: skip
    assert not interrupted and len(order) == 4
    assert launchers == [boards] * 4  # every run started by the launcher given
    # probes 0 | run | 1 | run | 2 | run | 3 | run | 4: run k sits between probes k and k + 1
    for i, d in enumerate(dirs):
        ks = [k for k, x in enumerate(order) if x == d]
        assert merged[i].latency.rounds_probe_ms == [k + 0.5 for k in ks]


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
            return Measurement.failed("no")
        return run(next(times[d.name]))

    monkeypatch.setattr(measure, "launch", launch)
    merged, interrupted = measure.measure_interleaved(
        [tmp_path / x for x in "abc"], Rounds(2, 0, 1, 1.0, again_above=0.10),
        np.random.default_rng(0), on_run=lambda r, i, _m: rounds.append((r, i)),
    )  # fmt: skip
    assert not interrupted and order.count("a") == 2 and order.count("c") == 1
    assert order[-1] == "b" and order.count("b") == 3 and rounds[-1] == (2, 1)
    assert merged[1].latency.rounds_ms == [10.0, 20.0, 11.0]
    assert merged[1].latency.median == 11.0
    assert merged[0].latency.rounds_ms == [10.0, 10.5]
    assert merged[2].status == "failed"
    # without the rule, b keeps its two rounds: median 15
    times = {"a": iter([10.0, 10.5]), "b": iter([10.0, 20.0])}
    merged, _ = measure.measure_interleaved(
        [tmp_path / x for x in "abc"],
        Rounds(2, 0, 1, 1.0, again_above=None),
        np.random.default_rng(0),
    )
    assert merged[1].latency.rounds_ms == [10.0, 20.0] and merged[1].latency.median == 15.0


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
        dirs, Rounds(3, 0, 1, 1.0), np.random.default_rng(0), probe=probe
    )
    assert interrupted and len(order) == 2
    assert all(m.status == "ok" for m in merged)  # each ran once: both runs kept
    second = dirs.index(order[1])
    assert merged[second].latency.rounds_probe_ms == []  # its probe after never came
    assert merged[1 - second].latency.rounds_probe_ms == [100.0]
