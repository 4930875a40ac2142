"""The directory a run or a sweep writes (``hydra.run.dir``, ``hydra.sweep.dir``): checked
before Hydra makes it (a Hydra callback, ``hydra.callbacks`` in ``conf/config.yaml``), and the
run's log file in it (a handler that a full disk does not make print tracebacks).

Hydra makes the directory and writes its ``.hydra/`` files before any of dse's code runs, so a
directory under a file, in a read-only place, or on a full disk was a Hydra traceback with exit
status 1. Here it is one line and exit status 2, before anything is made. An entry point that
runs in the current directory (``hydra.run.dir: .``, writing nothing there) is not checked.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from dse.errors import DseError
from dse.files import can_write

#: Free space a run directory needs: its outputs (checkpoint, CSVs, plots, report) take a few
#: MB for the largest networks (VGG-16 with 1000 individuals: 3 MB).
RUN_MB = 16


class CheckOutputDirs(Callback):
    """Hydra calls ``on_run_start`` and ``on_multirun_start`` with the composed config before
    it makes the run's or the sweep's directory (exceptions in a callback only warn, so a bad
    directory ends the process here, as the sweeper does: one line, exit status 2)."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        self._check(config, "hydra.run.dir")

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        self._check(config, "hydra.sweep.dir")

    @staticmethod
    def _check(config: Any, key: str) -> None:
        from omegaconf import OmegaConf

        try:
            where = OmegaConf.select(config, key)
        except Exception:  # noqa: BLE001 - an interpolation Hydra resolves later: it reports it
            return
        if where is not None and not str(where).strip():
            print(
                f"error: {key} is empty: give a directory ({key}=runs/mine), or leave the key "
                "out for a new one under runs/",
                file=sys.stderr,
            )
            sys.exit(2)
        if where is None or Path(str(where)) == Path("."):
            return
        try:
            can_write(Path(str(where)).expanduser(), key, RUN_MB * 2**20)
        except DseError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)


class RunLog(logging.FileHandler):
    """The run's log file (``hydra/job_logging=dse``): what the run printed, so a write that
    fails (a full disk) is not reported a second time, with a traceback, for every line; the
    outputs' own writes say it in one line."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass
