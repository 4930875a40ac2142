"""Pacing (dse.runtime.pace): where an emulated device's speed is set, each onnxruntime run
lasts at least its CPU time over that speed, and computes what the session computes."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dse.calibrate.channels import conv_model
from dse.errors import DseError
from dse.runtime import pace
from dse.runtime.sessions import session


@pytest.fixture
def speed(monkeypatch: pytest.MonkeyPatch):
    """Set PACE_ENV for one test (pace_from_env reads it once per process: cleared around)."""

    def set_to(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(pace.PACE_ENV, raising=False)
        else:
            monkeypatch.setenv(pace.PACE_ENV, value)
        pace.pace_from_env.cache_clear()

    yield set_to
    pace.pace_from_env.cache_clear()


def test_unset_leaves_sessions_as_onnxruntime_makes_them(speed) -> None:
    speed(None)
    assert pace.pace_from_env() is None
    s = session(conv_model(8, 8, 16))
    assert type(s).__name__ == "InferenceSession"


def test_a_paced_run_lasts_its_cpu_time_over_the_speed_and_computes_the_same(speed) -> None:
    speed(None)
    model = conv_model(64, 64, 56)  # ~10 ms of CPU: the timers around it add ~10 us
    plain = session(model)
    speed("0.25")
    paced = session(model)
    assert isinstance(paced, pace.PacedSession)
    assert paced.get_inputs()[0].name == "x"  # the rest is the session's own
    x = np.random.default_rng(1).standard_normal((1, 64, 56, 56), dtype=np.float32)
    (want,) = plain.run(None, {"x": x})
    p = pace.pace_from_env()
    for _ in range(5):
        wall0, cpu0, spent0 = time.perf_counter(), time.process_time(), p.spent_s
        (got,) = paced.run(None, {"x": x})
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        np.testing.assert_array_equal(got, want)
        # the run's own CPU time is what is left of the whole once the yielding is taken out;
        # the pacer reads its own clocks, a little apart from these (a clean clone's CI once
        # measured 9.28 ms of wall against 9.39 = 2.35 / 0.25): 5 % slack, where an unpaced
        # run would last a quarter of it
        own = cpu - (p.spent_s - spent0)
        assert own > 0 and wall >= own / 0.25 * 0.95


def test_the_yielding_is_counted_apart(speed) -> None:
    speed("0.5")
    p = pace.pace_from_env()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.process_time() - cpu0 < 0.02:  # 20 ms of work
        pass
    before = p.spent_s
    p.until(wall0, cpu0)
    assert time.perf_counter() - wall0 >= 0.04  # 20 ms at half a CPU
    assert p.spent_s > before  # alone on its CPU, the rank spun while it yielded


@pytest.mark.parametrize("bad", ["fast", "0", "-0.4", "nan", "inf"])
def test_a_bad_speed_is_one_line(speed, bad: str) -> None:
    speed(bad)
    with pytest.raises(DseError) as err:
        pace.pace_from_env()
    assert str(err.value) == (
        f"DSE_PACE={bad!r} is not a device speed in CPUs: unset it, or give one (e.g. 0.4)"
    )
