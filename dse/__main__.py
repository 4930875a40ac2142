"""`python -m dse +net=NAME chromosome=advanced`: explore hybrid mappings with NSGA-II."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from dse import app
from dse.cli import CONF_DIR, INTERRUPTED, guarded, run
from dse.errors import DseError
from dse.objectives import OBJECTIVES, fmt
from dse.results.outputs import write_outputs
from dse.search import nsga2
from dse.search.problem import MappingProblem


class Progress:
    """A progress bar with the generation and the current best of each objective."""

    def __init__(self, state: nsga2.SearchState, enabled: bool) -> None:
        from tqdm import tqdm

        self.names = state.algorithm.problem.objectives
        self.bar = tqdm(
            total=state.settings.n_gen,
            initial=nsga2.generations(state.algorithm),
            unit="gen",
            disable=not enabled,
            file=sys.stderr,
            dynamic_ncols=True,
        )

    def __call__(self, row: dict) -> None:
        self.bar.set_postfix_str(
            " ".join(f"{n}={row[f'best_{n}']:.4g}{OBJECTIVES[n].unit}" for n in self.names)
        )
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> dict[str, Any]:
    """One exploration; returns the run's result (bests, hypervolume, run directory) so a
    sweeper can optimise it."""
    started = time.perf_counter()
    net, platform, model = app.model_from(cfg)
    problem = MappingProblem(app.chromosome_from(cfg, net, platform), model, cfg.objectives)
    settings = OmegaConf.to_object(cfg.algorithm)
    if cfg.get("resume"):
        out = Path(str(cfg.resume)).expanduser()
        state = nsga2.load(out, problem)
        nsga2.extend(state, settings.n_gen)
    else:
        out = Path(HydraConfig.get().runtime.output_dir)
        state = nsga2.new_search(problem, settings, int(cfg.seed))
    progress = Progress(state, bool(cfg.get("progress", True)))
    interrupted = False
    try:
        nsga2.run(state, progress, checkpoint_dir=out)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
        if state.algorithm.opt is not None:
            nsga2.save(state, out)
            summary = write_outputs(out, state, problem, platform, cfg, started, interrupted)
    if state.algorithm.opt is None:
        raise DseError("interrupted before the first generation finished: nothing to save")
    if interrupted:
        print(
            f"interrupted after generation {nsga2.generations(state.algorithm)}: the front "
            f"and a checkpoint are in {out}; continue with resume={out}",
            file=sys.stderr,
        )
        sys.exit(INTERRUPTED)
    bests = "; ".join(
        f"best {n}: " + ", ".join(fmt(k, v) for k, v in b.items())
        for n, b in summary["best"].items()
    )
    print(
        f"{summary['net']} / {summary['chromosome']}: {summary['generations']} generations, "
        f"{summary['evaluations']} evaluations in {summary['wall_seconds']:.1f} s, "
        f"{summary['pareto_points']} Pareto points -> {out}\n{bests}"
    )
    return {
        "status": "ok",
        "run_dir": str(out),
        "best": summary["best"],
        "hypervolume": summary["hypervolume"],
        "evaluations": summary["evaluations"],
        "wall_seconds": summary["wall_seconds"],
    }


if __name__ == "__main__":
    run(main)
