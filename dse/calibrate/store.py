"""Where ``dse.calibrate`` keeps a platform's calibrated coefficients, so later commands with
that platform find them: ``$DSE_CALIBRATION_DIR/<platform>.json``, by default
``~/.config/dse/calibration/<platform>.json``. To go back to the platform's own (uncalibrated)
file, delete that file or pass ``coefficients=platform``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ENV = "DSE_CALIBRATION_DIR"


def calibration_dir() -> Path:
    env = os.environ.get(ENV)
    return Path(env).expanduser() if env else Path.home() / ".config" / "dse" / "calibration"


def calibrated_path(platform_name: str) -> Path:
    return calibration_dir() / f"{platform_name}.json"


def calibrated_model(net_name: str, platform_name: str) -> tuple[Any, Any, Path]:
    """For the diagnostics in ``scripts/``: the zoo network ``net_name`` and the analytical
    model of it on platform ``conf/platform/<platform_name>.yaml`` (one thread) with that
    platform's calibrated coefficients, and where they are; one clear error (SystemExit) when
    the platform was never calibrated."""
    import yaml

    from dse.cli import CONF_DIR
    from dse.net import load_net
    from dse.platform import load_platform
    from models_analytical.coefficients import load_coefficients
    from models_analytical.model import AnalyticalModel

    conf = CONF_DIR / "platform" / f"{platform_name}.yaml"
    platform = load_platform(yaml.safe_load(conf.read_text()))
    path = calibrated_path(platform.name)
    if not path.exists():
        raise SystemExit(f"no calibration for {platform.name}: run python -m dse.calibrate first")
    net = load_net({"name": net_name})
    return net, AnalyticalModel(net.graph, platform, load_coefficients(path), threads=1), path
