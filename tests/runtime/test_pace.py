"""Pacing (dse.runtime.rank.pace): where an emulated device's speed is set, each onnxruntime run
lasts at least its CPU time over that speed, and computes what the session computes."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dse.calibrate.channels import conv_model
from dse.errors import DseError
from dse.runtime.rank import pace
from dse.runtime.rank.sessions import session


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
    queued = p.queued_s  # the pacer's own reader of the run queue
    before_last = queued()
    for _ in range(5):
        before_this = queued()
        wall0, cpu0, spent0 = time.perf_counter(), time.process_time(), p.spent_s
        (got,) = paced.run(None, {"x": x})
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        np.testing.assert_array_equal(got, want)
        # the run's own CPU time is what is left of the whole once the yielding is taken out;
        # the pacer reads its own clocks, a little apart from these (a clean clone's CI once
        # measured 9.28 ms of wall against 9.39 = 2.35 / 0.25, another 11.78 against 12.59
        # = 3.15 / 0.25 less 0.11 of credit): 10 % slack, where an unpaced run would last a
        # quarter of it. The pacer credits the time the process sat in the
        # run queue since its last run ended (other work had the CPU: another test worker);
        # at most what it sat there since before the last run started (0 on a quiet machine).
        own = cpu - (p.spent_s - spent0)
        credit_at_most = queued() - before_last
        assert own > 0 and wall >= own / 0.25 * 0.90 - credit_at_most
        before_last = before_this


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


class Queue:
    """A stand-in for a rank's run-queue clock (:class:`dse.runtime.rank.pace.RunQueue`): the
    seconds it has sat in the run queue, set by the test."""

    def __init__(self) -> None:
        self.s = 0.0

    def __call__(self) -> float:
        return self.s


def test_a_runs_credit_is_its_queueing_since_the_last_run_but_the_waits_idle_queueing() -> None:
    p, q = pace.Pace(0.4), Queue()
    p.queued_s = q
    q.s = 5.0
    assert p.start() == 0.0  # no run yet: nothing to count from
    wall0, cpu0 = time.perf_counter(), time.process_time()
    p.until(wall0 - 1.0, cpu0)  # a run long over: ends at once, queued 5.0 s at its end
    q.s = 5.0 + 0.003  # 3 ms queued since, of which 1.2 ms while nothing had come
    p.slept(0.0012)
    assert p.start() == pytest.approx(0.0018)
    p.slept(0.0030)  # more idle queueing than queueing: no credit, never a debt
    assert p.start() == 0.0
    p.until(wall0 - 1.0, cpu0)  # the next run starts the count again
    assert p.start() == 0.0
    q.s += 0.002
    assert p.start() == pytest.approx(0.002)


def test_a_credited_run_is_paced_from_that_much_earlier(monkeypatch: pytest.MonkeyPatch) -> None:
    yields = []
    monkeypatch.setattr(pace.os, "sched_yield", lambda: yields.append(1))
    p = pace.Pace(0.05)
    for credit, paced in ((0.0, True), (1.0, False)):
        yields.clear()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        while time.process_time() - cpu0 < 0.005:  # 5 ms of work: due 100 ms after wall0
            pass
        p.until(wall0, cpu0, credit)
        # uncredited, it yields until 100 ms are over; credited a second, its due time has
        # passed when its work ends
        assert bool(yields) is paced
        assert (time.perf_counter() - wall0 >= 0.1) is paced


def test_a_pace_file_is_followed_as_it_changes(
    speed, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the cluster gives a pace file, its speed overrides PACE_ENV and is read again once
    the file changes (looked at every FOLLOW_S at most); ``none``: not paced; a file gone
    leaves the speed as it was; anything else is one line."""
    file = tmp_path / "edge0_cpu"

    def write(text: str) -> None:  # as the cluster writes it: a new name, renamed
        (tmp_path / ".new").write_text(text)
        (tmp_path / ".new").replace(file)

    yields = []
    monkeypatch.setattr(pace.os, "sched_yield", lambda: yields.append(1))

    def run() -> bool:
        """5 ms of work, paced: whether the pacer yielded."""
        yields.clear()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        while time.process_time() - cpu0 < 0.005:
            pass
        p.until(wall0, cpu0)
        return bool(yields)

    write("none\n")
    monkeypatch.setenv(pace.PACE_FILE_ENV, str(file))
    speed(None)  # a whole CPU: no DSE_PACE, but a pace file
    p = pace.pace_from_env()
    assert p is not None and (p.speed, p.source) == (None, file)
    assert run() is False
    write("0.25\n")
    assert run() is False  # looked at less than FOLLOW_S ago
    time.sleep(pace.FOLLOW_S)
    assert run() is True and p.speed == 0.25
    monkeypatch.setattr(pace, "FOLLOW_S", 0.0)
    file.unlink()
    assert run() is True and p.speed == 0.25
    write("0.5\n")
    speed("0.4")  # the file, once read, says the speed
    p = pace.pace_from_env()
    assert p is not None and p.speed == 0.5
    write("fast\n")
    with pytest.raises(DseError) as err:
        p.follow()
    assert str(err.value) == (
        f"DSE_PACE_FILE={file} holds 'fast', not a device speed in CPUs or none: unset "
        "DSE_PACE_FILE to pace by DSE_PACE alone"
    )
