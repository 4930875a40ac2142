"""The serving monitor's window: medians worked out by hand."""

from __future__ import annotations

import pytest

from dse.serve.monitor import Monitor


def filled(size: int = 4, pressed: bool = True) -> Monitor:
    m = Monitor(ranks=2, size=size)
    # completions at 0, 1, 3, 4, 7 s (gaps 1, 2, 1, 3); latencies 10..14 s
    for i, at in enumerate([0.0, 1.0, 3.0, 4.0, 7.0]):
        m.done(at, 10.0 + i, pressed)
    for s in (0.1, 0.3, 0.2, 0.9):
        m.timing(0, s)
    for s in (1.0, 1.0, 2.0, 2.0):
        m.timing(1, s)
    return m


def test_a_window_is_the_medians_of_its_frames() -> None:
    w = filled().window()
    assert w is not None
    assert w.compute_s == {0: pytest.approx(0.25), 1: pytest.approx(1.5)}
    assert w.period_s == pytest.approx(1.5)  # gaps 1, 2, 1, 3
    assert w.latency_s == pytest.approx(12.5)  # the last four: 11, 12, 13, 14
    assert w.frames == 5


def test_the_newest_frames_alone() -> None:
    w = filled().window(last=2)
    assert w is not None
    assert w.compute_s == {0: pytest.approx(0.55), 1: pytest.approx(2.0)}
    assert w.period_s == pytest.approx(2.0)  # gaps 1, 3
    assert w.latency_s == pytest.approx(13.5)


def test_no_window_until_every_rank_has_a_full_one() -> None:
    m = Monitor(ranks=2, size=4)
    for i in range(5):
        m.done(float(i), 1.0, True)
    for _ in range(4):
        m.timing(0, 0.1)
    assert m.window() is None  # rank 1 has said nothing
    for _ in range(4):
        m.timing(1, 0.1)
    assert m.window() is not None
    m.clear()
    assert m.window() is None


def test_no_period_from_a_service_that_is_not_pressed() -> None:
    w = filled(pressed=False).window()
    assert w is not None and w.period_s is None and w.compute_s[1] == pytest.approx(1.5)


def test_a_window_needs_two_frames() -> None:
    with pytest.raises(ValueError, match="at least 2 frames"):
        Monitor(ranks=1, size=1)
