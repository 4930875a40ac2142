"""Where dse's files live: its config tree, a platform's calibrated coefficients, and how a path
is shown to a user.

``dse.calibrate`` keeps a platform's calibration where later commands with that platform find
it: ``$DSE_CALIBRATION_DIR/<platform>.json``, by default
``~/.config/dse/calibration/<platform>.json``. To go back to the platform's own (uncalibrated)
file, delete that file or pass ``coefficients=platform``. Anything else at that path (a
directory, a broken link), or a variable naming a file rather than a folder, is refused, not
passed over.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The primary configs of the entry points and the platforms (Hydra's config tree).
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
#: The environment variable naming the directory of calibrated coefficients.
CALIBRATION_ENV = "DSE_CALIBRATION_DIR"


def calibration_dir() -> Path:
    """The folder of the platforms' calibrations (:data:`CALIBRATION_ENV`, else
    ``~/.config/dse/calibration``); :func:`dse.app.calibration_of` checks it is one."""
    env = os.environ.get(CALIBRATION_ENV)
    if not env:
        return Path.home() / ".config" / "dse" / "calibration"
    return Path(env).expanduser()


def calibrated_path(platform_name: str) -> Path:
    """The calibrated coefficients of platform ``platform_name``."""
    return calibration_dir() / f"{platform_name}.json"


def shown(path: str | Path) -> str:
    """``path`` as a user would type it here: relative to the current directory when inside it,
    else from ``~`` when under the home directory, else absolute."""
    p = Path(path).expanduser().absolute()
    for base, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
        try:
            rel = p.relative_to(base.absolute())
        except ValueError:
            continue
        text = f"{prefix}{rel}" if str(rel) != "." else (prefix.rstrip("/") or ".")
        return text
    return str(p)
