"""The sweeper's structured configs, registered as ``hydra/sweeper=dse_optuna``.

The name is ``dse_optuna``, not ``optuna``, so it cannot clash with an installed
``hydra-optuna-sweeper`` (which registers ``hydra/sweeper=optuna`` and pins ``optuna<3``).
Importing this module is cheap (no Optuna): Hydra imports it on every start to find plugins.
No ``from __future__ import annotations`` here: Hydra's plugin scan runs the module without
registering it in ``sys.modules``, where ``dataclasses`` looks string annotations up.
"""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

#: Sampler names and the Optuna classes they stand for (``hydra/sweeper/sampler=NAME``).
SAMPLERS = {
    "tpe": "TPESampler",
    "nsga2": "NSGAIISampler",
    "nsgaii": "NSGAIISampler",  # hydra-optuna-sweeper's name
    "nsga3": "NSGAIIISampler",
    "random": "RandomSampler",
    "qmc": "QMCSampler",
    "bruteforce": "BruteForceSampler",
}


@dataclass
class SamplerConf:
    name: str = "tpe"  # one of SAMPLERS
    seed: int | None = None  # the same seed, study and results: the same suggestions
    # more keyword arguments of the Optuna class, e.g.
    # +hydra.sweeper.sampler.options.n_startup_trials=5
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class DseOptunaSweeperConf:
    _target_: str = "hydra_plugins.dse_optuna_sweeper.dse_optuna_sweeper.DseOptunaSweeper"
    defaults: list[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    sampler: SamplerConf = MISSING
    # key(s) of the job's return value to optimise; a dotted path reaches a nested key
    # (best.latency.latency); several keys make a multi-objective study
    objective: Any = "hypervolume"
    # maximize | minimize, one per objective (one value applies to every objective)
    direction: Any = "maximize"
    n_trials: int = 20  # trials this invocation runs (running the command again adds more)
    n_jobs: int = 1  # trials asked for and launched together (parallel with a parallel launcher)
    # stop once the study holds this many trials, counting every worker and invocation
    total_trials: int | None = None
    study_name: str | None = None  # None: <net>-<digest of the command's search space>
    # None: sqlite:///runs/sweeps/<study_name>.db; 'memory': nothing kept; or any RDB URL
    # that several hosts share, without its password (postgresql://user@host:port/db)
    storage: str | None = None
    # a file holding the server's password, when neither PGPASSWORD nor ~/.pgpass gives it
    password_file: str | None = None
    connect_timeout: int = 10  # seconds to wait for a database server to answer
    # seconds between a running trial's heartbeats (null: none); a trial whose worker stopped
    # beating (killed, its host down) is failed by the next worker that asks for a trial
    heartbeat_interval: int | None = 60
    grace_period: int | None = None  # seconds without a beat before that (null: 2 intervals)
    retry_failed: int = 0  # times another worker runs a dead worker's trial again
    # swept keys that mean something only for some choices of another swept key: not sampled
    # (nor given) otherwise; the encodings' own are there; add one (or lift one with '') with
    # '++hydra.sweeper.conditions={KEY: "OTHER=a,b"}'
    conditions: dict[str, str] = field(
        default_factory=lambda: {
            f"chromosome.{key}": "chromosome=naive,advanced"
            for key in ("splits", "shares", "spatial")
        }
    )
    # search space given in a config file, {key: "interval(5,40)"}; command-line keys win
    params: dict[str, str] | None = None


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(group="hydra/sweeper", name="dse_optuna", node=DseOptunaSweeperConf, provider="dse")
    for name in SAMPLERS:
        cs.store(
            group="hydra/sweeper/sampler", name=name, node=SamplerConf(name=name), provider="dse"
        )


register()
