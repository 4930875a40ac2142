"""NSGA-II over a chromosome with pymoo: setup, the generation loop, history and checkpoints."""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.core.duplicate import HashDuplicateElimination
from pymoo.core.population import Population
from pymoo.indicators.hv import HV
from pymoo.operators.repair.rounding import RoundingRepair
from pymoo.termination.max_gen import MaximumGenerationTermination

from dse.config import AlgorithmConfig
from dse.errors import DseError
from dse.search.problem import MappingProblem

CHECKPOINT = "checkpoint.pkl"


@dataclass
class SearchState:
    """What a run carries from generation to generation, checkpointed as one pickle."""

    algorithm: NSGA2
    settings: AlgorithmConfig
    seed: int
    history: list[dict] = field(default_factory=list)
    hv_ideal: np.ndarray | None = None
    hv_scale: np.ndarray | None = None
    seconds: float = 0.0


def initial_population(problem: MappingProblem, settings: AlgorithmConfig, seed: int) -> np.ndarray:
    chrom = problem.chromosome
    x = chrom.sample(settings.pop_size, np.random.default_rng(seed))
    if settings.seed_single_device:
        for d in range(min(chrom.n_devices, settings.pop_size)):
            x[d] = chrom.single_device(d)
    return x


def new_search(problem: MappingProblem, settings: AlgorithmConfig, seed: int) -> SearchState:
    """NSGA-II with the configured operators; genes are integers, rounded after each operator."""
    algorithm = NSGA2(
        pop_size=settings.pop_size,
        sampling=Population.new(X=initial_population(problem, settings, seed).astype(float)),
        crossover=settings.crossover.build(vtype=float, repair=RoundingRepair()),
        mutation=settings.mutation.build(vtype=float, repair=RoundingRepair()),
        eliminate_duplicates=HashDuplicateElimination(),
    )
    algorithm.setup(problem, termination=("n_gen", settings.n_gen), seed=seed, verbose=False)
    return SearchState(algorithm, settings, seed)


def generations(algorithm: NSGA2) -> int:
    """Generations completed (the initial population is generation 1)."""
    return (algorithm.n_iter or 1) - 1


def front(state: SearchState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Genes, objectives and constraint of the current non-dominated set."""
    opt = state.algorithm.opt
    return opt.get("X").astype(np.int64), opt.get("F"), opt.get("G")


def record(state: SearchState) -> dict:
    """Append this generation's best objectives and hypervolume to the history."""
    alg = state.algorithm
    pop = alg.pop
    f, g = pop.get("F"), pop.get("G")[:, 0]
    feasible = g <= 0
    names = alg.problem.objectives
    row = {
        "generation": generations(alg),
        "evaluations": alg.evaluator.n_eval,
        "feasible": int(feasible.sum()),
    }
    for i, n in enumerate(names):
        row[f"best_{n}"] = float(f[feasible, i].min()) if feasible.any() else float("nan")
    opt_f = alg.opt.get("F")
    opt_feasible = alg.opt.get("G")[:, 0] <= 0
    if state.hv_ideal is None and opt_feasible.any():
        # normalise by the first feasible front: hypervolumes of one run stay comparable
        base = f[feasible] if feasible.any() else f
        state.hv_ideal = base.min(axis=0)
        state.hv_scale = np.maximum(base.max(axis=0) - state.hv_ideal, 1e-12)
    if state.hv_ideal is not None and opt_feasible.any():
        norm = (opt_f[opt_feasible] - state.hv_ideal) / state.hv_scale
        row["hypervolume"] = float(HV(ref_point=np.full(len(names), 1.1))(norm))
    else:
        row["hypervolume"] = 0.0
    state.history.append(row)
    return row


def run(
    state: SearchState,
    on_generation: Callable[[dict], None] | None = None,
    checkpoint_dir: Path | None = None,
) -> SearchState:
    """Advance to the final generation; checkpoint every few generations."""
    alg = state.algorithm
    while alg.has_next():
        t0 = time.perf_counter()
        alg.next()
        state.seconds += time.perf_counter() - t0
        row = record(state)
        if on_generation:
            on_generation(row)
        if checkpoint_dir and generations(alg) % state.settings.checkpoint_every == 0:
            save(state, checkpoint_dir)
    return state


def extend(state: SearchState, n_gen: int) -> None:
    """Let a loaded search run until generation ``n_gen`` (a finished one remembers it ended)."""
    if n_gen < generations(state.algorithm):
        raise DseError(
            f"algorithm.n_gen={n_gen} is before the checkpoint's generation "
            f"{generations(state.algorithm)}"
        )
    state.settings.n_gen = n_gen
    state.algorithm.termination = MaximumGenerationTermination(n_gen)


def save(state: SearchState, directory: Path) -> Path:
    path = directory / CHECKPOINT
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(state, fh)
    tmp.replace(path)
    return path


def load(directory: Path, problem: MappingProblem) -> SearchState:
    path = Path(directory) / CHECKPOINT
    if not path.is_file():
        raise DseError(f"nothing to resume in {directory}: no {CHECKPOINT} there")
    with open(path, "rb") as fh:
        state: SearchState = pickle.load(fh)
    old = state.algorithm.problem
    if old.n_var != problem.n_var or old.objectives != problem.objectives:
        raise DseError(
            f"the checkpoint in {directory} was made with another network, "
            "chromosome or objectives: resume with the run's own config"
        )
    old.model = problem.model  # re-attach the compiled model
    return state
