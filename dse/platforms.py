"""Resolve the `platform` config group to a Platform (coefficients beside the yaml files)."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from dse.cli import CONF_DIR
from dse.errors import DseError
from models_analytical.platform import Platform, load_platform


def platform_from_config(cfg: DictConfig | None) -> Platform:
    if cfg is None:
        raise DseError("no platform given: add platform=NAME (conf/platform/NAME.yaml)")
    raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    return load_platform(raw, CONF_DIR / "platform")  # type: ignore[arg-type]
