"""`python -m dse +net=NAME chromosome=advanced`: explore hybrid mappings with NSGA-II."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from chromosomes import make_chromosome
from dse import results, search
from dse.cli import CONF_DIR, guarded, run
from dse.errors import DseError
from dse.nets import load_net
from dse.platforms import platform_from_config
from dse.problem import UNITS, MappingProblem
from models_analytical.model import AnalyticalModel


def settings_from(cfg: DictConfig) -> search.SearchSettings:
    alg = cfg.algorithm
    return search.SearchSettings(
        pop_size=int(alg.pop_size),
        n_gen=int(alg.n_gen),
        seed=int(cfg.seed),
        crossover_prob=float(alg.crossover_prob),
        crossover_eta=float(alg.crossover_eta),
        mutation_eta=float(alg.mutation_eta),
        seed_single_device=bool(alg.seed_single_device),
        checkpoint_every=int(alg.checkpoint_every),
    )


class Progress:
    """A progress bar with the generation and the current best of each objective."""

    def __init__(self, state: search.SearchState, enabled: bool) -> None:
        from tqdm import tqdm

        self.names = state.algorithm.problem.objectives
        self.bar = tqdm(
            total=state.settings.n_gen,
            initial=search.generations(state.algorithm),
            unit="gen",
            disable=not enabled,
            file=sys.stderr,
            dynamic_ncols=True,
        )

    def __call__(self, row: dict) -> None:
        self.bar.set_postfix_str(
            " ".join(f"{n}={row[f'best_{n}']:.4g}{UNITS[n]}" for n in self.names)
        )
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def write_outputs(
    out: Path,
    state: search.SearchState,
    problem: MappingProblem,
    platform,
    cfg: DictConfig,
    started: float,
    interrupted: bool,
) -> dict:
    genes, f, g = search.front(state)
    feasible = g[:, 0] <= 0
    rows = results.write_pareto(out / "pareto.csv", problem, genes)
    best = results.write_best(
        out,
        problem,
        platform,
        genes[feasible] if feasible.any() else genes,
        f[feasible] if feasible.any() else f,
    )
    results.write_history(out / "history.csv", state.history)
    if state.history:
        results.plot_convergence(
            out / "convergence.png", {cfg.chromosome.name: state.history}, problem.objectives
        )
    results.plot_pareto(out / "pareto.png", f, feasible, problem.objectives)
    summary = {
        "net": problem.chromosome.graph.name,
        "platform": platform.name,
        "chromosome": cfg.chromosome.name,
        "genes": problem.chromosome.n_genes,
        "search_space_log10": round(problem.chromosome.search_space_log10(), 2),
        "objectives": problem.objectives,
        "generations": search.generations(state.algorithm),
        "evaluations": int(state.algorithm.evaluator.n_eval),
        "search_seconds": round(state.seconds, 3),
        "wall_seconds": round(time.perf_counter() - started, 3),
        "pareto_points": len(rows),
        "feasible_points": int(feasible.sum()),
        "best": best,
        "interrupted": interrupted,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> None:
    started = time.perf_counter()
    graph = load_net(cfg.get("net"))
    platform = platform_from_config(cfg.get("platform"))
    chrom = make_chromosome(
        str(cfg.chromosome.name),
        graph,
        len(platform),
        splits=int(cfg.chromosome.get("splits") or 2),
    )
    problem = MappingProblem(chrom, AnalyticalModel(graph, platform), list(cfg.objectives))
    if cfg.get("resume"):
        out = Path(str(cfg.resume)).expanduser()
        state = search.load(out, problem)
        search.extend(state, int(cfg.algorithm.n_gen))
    else:
        out = Path(HydraConfig.get().runtime.output_dir)
        state = search.new_search(problem, settings_from(cfg))
    progress = Progress(state, bool(cfg.get("progress", True)))
    interrupted = False
    try:
        search.run(state, progress, checkpoint_dir=out)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
        if state.algorithm.opt is not None:
            search.save(state, out)
            summary = write_outputs(out, state, problem, platform, cfg, started, interrupted)
    if state.algorithm.opt is None:
        raise DseError("interrupted before the first generation finished: nothing to save")
    if interrupted:
        print(
            f"interrupted after generation {search.generations(state.algorithm)}: the front "
            f"and a checkpoint "
            f"are in {out}; continue with resume={out}",
            file=sys.stderr,
        )
        sys.exit(130)
    bests = "; ".join(
        f"best {n}: " + ", ".join(f"{v:.4g}{UNITS[k]}" for k, v in b.items())
        for n, b in summary["best"].items()
    )
    print(
        f"{summary['net']} / {summary['chromosome']}: {summary['generations']} generations, "
        f"{summary['evaluations']} evaluations in {summary['wall_seconds']:.1f} s, "
        f"{summary['pareto_points']} Pareto points -> {out}\n{bests}"
    )


if __name__ == "__main__":
    run(main)
