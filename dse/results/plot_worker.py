"""Plots drawn by helper processes, started early so matplotlib's import overlaps the search.

A run's two figures cost about as much as a tenth of the search (matplotlib's import, then the
drawing). :func:`prestart` starts helpers when a run begins; each imports matplotlib while the
search runs, then waits for its jobs on stdin. With a core to spare beside the search (load
average at most the cores less one) there are two, one per figure, drawing side by side at the
end; on a busy machine one, drawing both (a second import would only take CPU from the search).
:func:`draw` hands the jobs over and waits until every figure is written, so a run still exits
only once its plots are on disk. Jobs whose helper cannot be started, dies, or fails are drawn
here instead, where an error is raised as usual; without prestarted helpers everything is drawn
here. Helpers ignore Ctrl-C (the run decides when to stop) and end when their stdin closes, so
none outlives the run.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dse import host

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


def helpers_wanted() -> int:
    """Two helpers (one per figure) with a core to spare beside the search, else one."""
    return FIGURES if host.spare_cores() >= 1 else 1


def prestart(n: int | None = None) -> None:
    """Have ``n`` helpers ready (default :func:`helpers_wanted`), importing matplotlib now."""
    n = helpers_wanted() if n is None else n
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
    """Run each ``(function of dse.results.plots, args)``, spread over the prestarted helpers
    (drawing side by side); returns when every figure is written."""
    procs = [_idle.pop(0) for _ in range(min(len(_idle), len(jobs)))]
    shares = [list(jobs[i :: len(procs)]) for i in range(len(procs))]
    done = [False] * len(procs)

    def hand_over(i: int) -> None:
        proc = procs[i]
        try:
            out, _ = proc.communicate(pickle.dumps(shares[i], protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:  # the helper has died: drawn here below
            proc.kill()
            proc.wait()
            return
        done[i] = proc.returncode == 0 and out == _DONE

    threads = [threading.Thread(target=hand_over, args=(i,)) for i in range(len(procs))]
    for t in threads:  # every share handed over before any is waited on
        t.start()
    for t in threads:
        t.join()
    left = [job for share, ok in zip(shares, done, strict=True) if not ok for job in share]
    if not procs:
        left = list(jobs)
    if left:
        from dse.results import plots

        for name, args in left:
            getattr(plots, name)(*args)


def _serve() -> int:
    """The helper: import matplotlib, read its jobs, draw them, say so."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import matplotlib.figure  # noqa: F401 - the import this helper exists to do early

    from dse.results import plots

    data = sys.stdin.buffer.read()
    if not data:
        return 0
    for name, args in pickle.loads(data):  # noqa: S301 - from the parent process, over a pipe
        getattr(plots, name)(*args)
    sys.stdout.buffer.write(_DONE)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_serve())
