"""The run context: one per command, made by dse.cli.run; what its jobs report into it decides
the command's last lines and exit status (2 for a failed job, 130 interrupted)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator

import pytest

from dse import cli
from dse.context import INTERRUPTED, STOP_SIGNALS, RunContext
from dse.errors import DseError


@pytest.fixture(autouse=True)
def _signals_back() -> Iterator[None]:
    """cli.run leaves the stop signals ignored (the process is ending): put them back."""
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    yield
    for s, handler in before.items():
        signal.signal(s, handler)


def command(monkeypatch: pytest.MonkeyPatch, main: Callable[[], object]) -> int:
    """``cli.run(main)`` as a command without arguments; its exit status."""
    monkeypatch.setattr(sys, "argv", ["dse"])
    try:
        cli.run(main)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def failing(*reasons: str) -> Callable[[], None]:
    """A main whose jobs each fail on a user error, one job per reason."""

    def main() -> None:
        for reason in reasons:

            @cli.guarded
            def job() -> None:
                raise DseError(reason)  # noqa: B023 - called at once

            job()

    return main


def test_a_failed_job_fails_the_command_and_the_next_command_starts_clean(monkeypatch, capsys):
    assert command(monkeypatch, failing("no such network")) == 2
    assert capsys.readouterr().err.splitlines() == ["error: no such network"]
    # a new command in the same process: its own context, without the last one's failure
    assert command(monkeypatch, lambda: None) == 0
    assert cli.run_context().failed_jobs == []

    assert command(monkeypatch, failing("first", "second")) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: first", "error: second", "error: 2 jobs failed (see above)"]
    assert cli.run_context().failed_jobs == ["first", "second"]


def test_failures_a_sweep_recorded_are_its_results(monkeypatch, capsys):
    def sweep() -> None:
        failing("trial 0 refused")()
        cli.run_context().failures_are_results()  # what the sweeper says at its end

    assert command(monkeypatch, sweep) == 0
    assert capsys.readouterr().err.splitlines() == ["error: trial 0 refused"]


@pytest.mark.parametrize("complete", [False, True])
def test_a_stop_says_whether_the_outputs_are_complete(monkeypatch, capsys, complete):
    def interrupted() -> None:
        context = cli.run_context()
        context.work_at_risk()
        if complete:
            context.outputs_complete("interrupted after the outputs were written: resume")
        raise KeyboardInterrupt

    assert command(monkeypatch, interrupted) == INTERRUPTED
    err = capsys.readouterr().err.splitlines()
    if complete:
        assert err == ["interrupted after the outputs were written: resume"]
    else:
        assert err == ["error: interrupted"]


def test_work_at_risk_hands_back_the_line_it_replaces():
    context = RunContext()
    context.outputs_complete("the search's outputs are complete")
    saved = context.work_at_risk()  # phase two starts: a stop would lose its measurements
    assert saved == "the search's outputs are complete" and context.saved_work is None
    context.outputs_complete(saved)
    assert context.saved_work == "the search's outputs are complete"
