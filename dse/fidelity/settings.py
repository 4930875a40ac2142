"""A fidelity run's settings, resolved once from its config (defaults: FidelityConfig)."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from dse.errors import DseError


@dataclass(frozen=True)
class FidelitySettings:
    """Every number a fidelity run uses (defaults: :class:`dse.config.FidelityConfig`)."""

    mappings: int  # how many mappings are measured (at most; distinct)
    rounds: int  # interleaved rounds over them
    warmup: int  # iterations before measuring, per run
    iterations: int  # measured iterations per run
    timeout_s: float  # a run past this is stopped and marked failed
    stream: int  # frames pushed back to back after each run's iterations: the period (0: off)
    seed: int
    probe: bool  # a speed probe beside each run
    keep: bool  # keep the sub-models
    search_pop_size: int  # the short search whose front gives a third of the mappings
    search_generations: int


def settings_from(cfg: DictConfig) -> FidelitySettings:
    """The settings of ``cfg`` (a composed ``fidelity`` config), checked."""
    if int(cfg.mappings) < 1:
        raise DseError(f"mappings={cfg.mappings} must be at least 1")
    if int(cfg.rounds) < 1 or int(cfg.iterations) < 1 or int(cfg.warmup) < 0:
        raise DseError("rounds and iterations must be at least 1, warmup 0 or more")
    if int(cfg.stream) < 0:
        raise DseError(f"stream={cfg.stream} must be 0 (off) or more frames")
    if not 0 < float(cfg.timeout_s) < math.inf:
        raise DseError(f"timeout_s={cfg.timeout_s} must be a positive number of seconds")
    if int(cfg.search_pop_size) < 2 or int(cfg.search_generations) < 1:
        raise DseError("search_pop_size must be at least 2, search_generations at least 1")
    return FidelitySettings(
        mappings=int(cfg.mappings),
        rounds=int(cfg.rounds),
        warmup=int(cfg.warmup),
        iterations=int(cfg.iterations),
        timeout_s=float(cfg.timeout_s),
        stream=int(cfg.stream),
        seed=int(cfg.seed),
        probe=bool(cfg.probe),
        keep=bool(cfg.keep),
        search_pop_size=int(cfg.search_pop_size),
        search_generations=int(cfg.search_generations),
    )


def out_dir(cfg: DictConfig, net: str, platform: str) -> Path:
    """``out=`` if given, else ``runs/fidelity/<net>-<platform>-<time>`` (relative to here)."""
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    return Path(str(cfg.out or f"runs/fidelity/{net}-{platform}-{stamp}")).expanduser()
