"""For the diagnostics in ``scripts/``: a zoo network and its model with a platform's
calibrated coefficients."""

from __future__ import annotations

from pathlib import Path

import yaml

from dse.net import Net, load_net
from dse.paths import CONF_DIR, calibrated_path
from dse.platform import load_platform
from models_analytical.coefficients import load_coefficients
from models_analytical.model import AnalyticalModel


def calibrated_model(net_name: str, platform_name: str) -> tuple[Net, AnalyticalModel, Path]:
    """The zoo network ``net_name`` and the analytical model of it on platform
    ``conf/platform/<platform_name>.yaml`` (one thread) with that platform's calibrated
    coefficients, and where they are; one clear error (SystemExit) when the platform was never
    calibrated."""
    conf = CONF_DIR / "platform" / f"{platform_name}.yaml"
    platform = load_platform(yaml.safe_load(conf.read_text()))
    path = calibrated_path(platform.name)
    if not path.exists():
        raise SystemExit(f"no calibration for {platform.name}: run python -m dse.calibrate first")
    net = load_net({"name": net_name})
    return net, AnalyticalModel(net.graph, platform, load_coefficients(path), threads=1), path
