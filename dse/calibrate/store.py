"""Where ``dse.calibrate`` keeps a platform's calibrated coefficients, so later commands with
that platform find them: ``$DSE_CALIBRATION_DIR/<platform>.json``, by default
``~/.config/dse/calibration/<platform>.json``. To go back to the platform's own (uncalibrated)
file, delete that file or pass ``coefficients=platform``.

Import-light on purpose (:mod:`dse.app` reads it at start-up): paths only, no workflow."""

from __future__ import annotations

import os
from pathlib import Path

ENV = "DSE_CALIBRATION_DIR"


def calibration_dir() -> Path:
    env = os.environ.get(ENV)
    return Path(env).expanduser() if env else Path.home() / ".config" / "dse" / "calibration"


def calibrated_path(platform_name: str) -> Path:
    return calibration_dir() / f"{platform_name}.json"
