"""Plots drawn by helper processes, started early so matplotlib's import overlaps the search.

A run's two figures cost about as much as a tenth of the search (matplotlib's import, then the
drawing). :func:`prestart` starts one helper per figure when a run begins; each imports
matplotlib on the machine's other core while the search runs, then waits for its one job on
stdin. :func:`draw` hands the jobs over and waits until every figure is written, so a run still
exits only once its plots are on disk. A helper that cannot be started, dies, or fails draws
nothing: its figure is drawn here instead, where an error is raised as usual. Helpers ignore
Ctrl-C (the run decides when to stop) and end when their stdin closes, so none outlives the run.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Figures a run draws (convergence, Pareto front): helpers started ahead of them.
FIGURES = 2
_DONE = b"plot written\n"
_ROOT = Path(__file__).resolve().parent.parent.parent  # the directory holding package dse
_idle: list[subprocess.Popen] = []


def _spawn() -> subprocess.Popen | None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH")) if p)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "dse.results.plot_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
    except OSError:
        return None


def prestart(n: int = FIGURES) -> None:
    """Have ``n`` helpers ready (importing matplotlib now, drawing later)."""
    while len(_idle) < n:
        proc = _spawn()
        if proc is None:
            return
        _idle.append(proc)


def _release() -> None:
    """Helpers never given a job: close their stdin (they exit) and reap them."""
    while _idle:
        proc = _idle.pop()
        try:
            proc.communicate(b"", timeout=10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


atexit.register(_release)


def draw(jobs: Sequence[tuple[str, tuple[Any, ...]]]) -> None:
    """Run each ``(function of dse.results.plots, args)`` in a helper, all at once; returns
    when every figure is written. A job whose helper did not write it runs here."""
    import threading

    procs = [_idle.pop(0) if _idle else _spawn() for _ in jobs]
    done = [False] * len(jobs)

    def hand_over(i: int) -> None:
        proc, payload = procs[i], pickle.dumps(jobs[i], protocol=pickle.HIGHEST_PROTOCOL)
        try:
            out, _ = proc.communicate(payload)
        except OSError:  # the helper has died: drawn here below
            proc.kill()
            proc.wait()
            return
        done[i] = proc.returncode == 0 and out == _DONE

    # every job handed over before any is waited on: the helpers draw side by side
    threads = [threading.Thread(target=hand_over, args=(i,)) for i, p in enumerate(procs) if p]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (name, args), ok in zip(jobs, done, strict=True):
        if not ok:
            from dse.results import plots

            getattr(plots, name)(*args)


def _serve() -> int:
    """The helper: import matplotlib, read one job, draw it, say so."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import matplotlib.figure  # noqa: F401 - the import this helper exists to do early

    from dse.results import plots

    data = sys.stdin.buffer.read()
    if not data:
        return 0
    name, args = pickle.loads(data)  # noqa: S301 - from the parent process, over a pipe
    getattr(plots, name)(*args)
    sys.stdout.buffer.write(_DONE)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_serve())
