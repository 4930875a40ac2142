"""The Hydra plugin class; the work is in ``_impl`` so that finding plugins stays cheap."""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.dse_optuna_sweeper.config import SamplerConf


class DseOptunaSweeper(Sweeper):
    """Asks an Optuna study for settings, runs them as Hydra jobs, tells it their results."""

    def __init__(self, sampler: SamplerConf, **settings: Any) -> None:
        from hydra_plugins.dse_optuna_sweeper._impl import SweeperImpl

        self.impl = SweeperImpl(sampler, **settings)

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.impl.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        return self.impl.sweep(arguments)
