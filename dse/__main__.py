"""`python -m dse +net=NAME chromosome=advanced`: explore hybrid mappings with NSGA-II."""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports: a signal now ends the process cleanly
    import sys

    from dse.cli import PRINTS_AND_EXITS, stop_early_on_signals

    stop_early_on_signals()
    # a search (not a page: --help, --cfg ...): the model's kernel compiles ahead, in a child
    # process, while this one starts (a first run only: models_analytical.ahead)
    if not PRINTS_AND_EXITS.intersection(sys.argv[1:]):
        from models_analytical import ahead

        if ahead.start():
            print(ahead.NOTICE, file=sys.stderr, flush=True)

import sys
import time
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from dse.cli import fail, guarded, run, run_context, say
from dse.config import check
from dse.paths import CONF_DIR
from dse.search.workflow import Job, search


def resume_args(argv: list[str]) -> list[str]:
    """A resumed run writes into its own directory, not a new one: add hydra.run.dir."""
    given = [a.split("=", 1)[1] for a in argv if a.startswith("resume=")]
    if given and given[-1]:
        where = Path(given[-1]).expanduser()
        if where.exists() and not where.is_dir():
            fail(
                f"resume={given[-1]} is a file: give the run's directory (the one holding "
                "checkpoint.npz)"
            )
    if not given or any(a.startswith("hydra.run.dir=") for a in argv):
        return argv
    if "-m" in argv or "--multirun" in argv:
        return argv
    return [*argv, f"hydra.run.dir={given[-1]}", "hydra.output_subdir=null"]


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> dict[str, Any]:
    """One exploration (:func:`dse.search.workflow.search`); returns the run's result (bests,
    hypervolume, run directory) so a sweeper can optimise it."""
    started = time.perf_counter()
    check(cfg)
    hydra_cfg = HydraConfig.get()
    job = Job(
        out=Path(hydra_cfg.runtime.output_dir),
        multirun=hydra_cfg.mode == RunMode.MULTIRUN,
        overrides=list(hydra_cfg.overrides.task),
        started=started,
    )
    return search(cfg, job, run_context(), say)


if __name__ == "__main__":
    sys.argv = [sys.argv[0], *resume_args(sys.argv[1:])]
    run(main)
