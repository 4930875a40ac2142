"""A command's run context: what its jobs tell the command, and how its work stops on a signal.

One :class:`RunContext` per command: :func:`dse.cli.run` creates it before the first job and
reads it after the last; a Hydra job reaches it through :func:`dse.cli.run_context` (the search
workflow is handed it), and so does the Optuna sweeper. Nothing else keeps state across jobs.

Stop signals (Ctrl-C, SIGTERM, a closed terminal) end a command with :data:`INTERRUPTED`;
where work would be lost, :class:`DeferredSignals` notes them instead, and the work stops at
its next safe point.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

#: Exit status of a run stopped by Ctrl-C or SIGTERM (its outputs are complete).
INTERRUPTED = 130
#: The signals that stop a run cleanly: Ctrl-C, SIGTERM and a closed terminal (SIGHUP, unless
#: the process was started ignoring it, as ``nohup`` does).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM) + (
    () if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else (signal.SIGHUP,)
)


@dataclass
class RunContext:
    """What the Hydra jobs of one command tell it: their user errors, the multirun directories
    they ran in, whether a sweep recorded its failed trials, and what a stop signal would
    interrupt."""

    #: The user error of each job that failed, one line each.
    failed_jobs: list[str] = field(default_factory=list)
    #: Set by the sweeper (hydra/sweeper=dse_optuna) once every job of a sweep is recorded in
    #: its study: a failed trial is a result of the sweep, not a failure of the command.
    failures_recorded: bool = False
    #: The directory of each multirun (sweep) whose jobs ran, with their count.
    sweep_dirs: dict[str, int] = field(default_factory=dict)
    #: What to say when a stop signal ends the process instead of ``error: interrupted``: set
    #: by a run once its outputs are complete (they stay so, and the line says how to
    #: continue); None while work that a stop would lose is under way.
    saved_work: str | None = None

    def job_failed(self, reason: str) -> None:
        """A job ended on a user error (``reason``, its one line); the others still run."""
        self.failed_jobs.append(reason)

    def job_in_sweep(self, sweep_dir: str) -> None:
        """One more job ran in the multirun directory ``sweep_dir`` (an absolute path)."""
        self.sweep_dirs[sweep_dir] = self.sweep_dirs.get(sweep_dir, 0) + 1

    def failures_are_results(self) -> None:
        """The sweeper recorded every job in its study, the failed ones among them."""
        self.failures_recorded = True

    def failed(self) -> bool:
        """Whether the command failed: a job did, and no sweep recorded it as a result."""
        return bool(self.failed_jobs) and not self.failures_recorded

    def work_at_risk(self) -> str | None:
        """Work that a stop would lose starts: a stop now is ``error: interrupted``. Returns the
        line it replaces, for :meth:`outputs_complete` once that work is done."""
        saved, self.saved_work = self.saved_work, None
        return saved

    def outputs_complete(self, line: str | None) -> None:
        """The outputs are complete: a stop from now on prints ``line`` (how to continue)."""
        self.saved_work = line


def hung_up(signum: int) -> None:
    """After SIGHUP (the terminal is gone), output to the terminal goes to /dev/null: writing
    to a hung-up terminal fails, and the outputs still have to be written."""
    if signum != signal.SIGHUP:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            if os.isatty(stream.fileno()):
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


class DeferredSignals:
    """SIGINT and SIGTERM noted, not raised: the work asks :meth:`requested` where it is safe
    to stop (between generations), finishes its outputs, and exits 130. Outside the main
    thread (a threaded launcher) nothing is installed."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._old: dict[int, Any] = {}

    def _note(self, signum: int, frame: object) -> None:
        hung_up(signum)
        if self.signal is None:
            self.signal = signum
            print(
                "\nstopping after this generation (outputs and a checkpoint will be written)",
                file=sys.stderr,
            )

    def requested(self) -> bool:
        return self.signal is not None

    def __enter__(self) -> DeferredSignals:
        if threading.current_thread() is threading.main_thread():
            for s in STOP_SIGNALS:
                self._old[s] = signal.signal(s, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
