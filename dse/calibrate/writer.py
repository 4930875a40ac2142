"""The calibrated coefficients file: the final coefficients and how they were obtained.

Layout (kept as it always was, so older files and ``conf/platform/*.json`` read alike):
``description``, ``calibrated``, ``energy``, ``provenance`` (each step's figures, then the
run's date, host, versions, networks, quick, seconds), then one section per device type,
``links``, ``memory_reference`` and, where probed, ``speed_reference``. What is written must
read back (:meth:`~models_analytical.coefficients.Coefficients.from_dict`) before it replaces a
file.
"""

from __future__ import annotations

import datetime
import json
import platform as pyplatform
from pathlib import Path
from typing import Any

import mpi4py
import numpy as np
import onnxruntime

from dse.calibrate.journal import journal_path
from dse.calibrate.settings import CalibrationSettings
from dse.calibrate.workflow import Calibration
from dse.files import write_text
from models_analytical.coefficients import Coefficients

ENERGY = "not calibrated: no energy counter was read; power_w are the platform file's assumptions"


def versions() -> dict[str, str]:
    return {
        "python": pyplatform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "numpy": np.__version__,
        "mpi4py": mpi4py.__version__,
    }


def document(calibration: Calibration, s: CalibrationSettings) -> dict[str, Any]:
    """The file's contents: the calibration's coefficients and provenance, and this run's."""
    c = calibration.coefficients
    prov = {
        **calibration.provenance,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": pyplatform.node(),
        "versions": versions(),
        "nets": list(s.nets),
        "quick": s.quick,
        "seconds": round(calibration.seconds, 1),
    }
    description = f"Calibrated by dse.calibrate on {prov['host']} for platform '{s.platform.name}'"
    if s.quick:
        description += " (quick: a smoke test, not for predictions)"
    return {
        "description": description,
        "calibrated": True,
        "energy": ENERGY,
        "provenance": prov,
        **{t: k.to_dict() for t, k in c.types.items()},
        "links": c.links,
        **c.notes,  # speed_reference where the deployments were probed; memory_reference
    }


def write(calibration: Calibration, s: CalibrationSettings) -> tuple[Path, dict[str, Any]]:
    """Write the file to ``s.out`` once it reads back; its path and contents. A write that
    fails is one line saying the journal keeps the measurements to refit."""
    doc = document(calibration, s)
    Coefficients.from_dict(doc, str(s.out))  # what is written must read back
    s.out.parent.mkdir(parents=True, exist_ok=True)
    refit = (
        f"free space there and refit=true writes it from the measurements in {journal_path(s.out)}"
    )
    write_text(s.out, json.dumps(doc, indent=1), fix=refit)
    return s.out, doc
