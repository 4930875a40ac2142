"""NSGA-II on arrays: pymoo's operators and sorting, without its per-individual objects.

The steps are pymoo's NSGA-II (Deb et al. 2002) as pymoo runs it: binary tournament on
constraint violation, then rank, then crowding distance; the configured crossover and mutation
(pymoo operators, called on gene arrays, then rounded: genes are integers); rank-and-crowding
survival with feasible individuals first and infeasible ones by violation. Two departures,
both for mapping search:

* duplicates are mappings, not gene vectors: offspring that decode to a mapping the run has
  already evaluated (or twice among themselves) are dropped and replaced, so every evaluation
  is a new mapping, and a run whose encoding has no new mapping left stops;
* the whole state is arrays and the generator's state (:class:`SearchState`), so checkpoints
  are plain data (:mod:`dse.search.checkpoint`) and a resumed run continues exactly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numba import njit
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting
from pymoo.util.randomized_argsort import randomized_argsort

from chromosomes.seeds import seed_population
from dse.config import AlgorithmConfig
from dse.errors import DseError
from dse.mapping import Mappings
from dse.search import operators
from dse.search.hypervolume import Reference
from dse.search.problem import MappingProblem

_NDS = NonDominatedSorting()
_ARRAY_FIELDS = ("X", "F", "G", "rank", "crowding")
#: Attempts to fill a generation with new mappings before it goes on with fewer offspring.
MAX_MATING_ROUNDS = 100


@dataclass
class Population:
    """Genes, objectives (display units), constraint, rank and crowding of N individuals."""

    X: np.ndarray  # int64 [N, n_var]
    F: np.ndarray  # float64 [N, n_obj]
    G: np.ndarray  # float64 [N, 1]: fullest device's memory / capacity - 1
    rank: np.ndarray  # int64 [N], -1 for infeasible individuals
    crowding: np.ndarray  # float64 [N]
    keys: list[int]  # [N] the mapping of each individual (:meth:`dse.mapping.Mappings.keys`)

    def __len__(self) -> int:
        return len(self.X)

    @property
    def cv(self) -> np.ndarray:
        return np.maximum(self.G[:, 0], 0.0)

    def take(self, idx: np.ndarray) -> Population:
        return Population(
            self.X[idx],
            self.F[idx],
            self.G[idx],
            self.rank[idx],
            self.crowding[idx],
            [self.keys[i] for i in idx.tolist()],
        )


@dataclass
class SearchState:
    """Everything a search carries from one generation to the next."""

    problem: MappingProblem
    settings: AlgorithmConfig
    seed: int
    rng: np.random.Generator
    reference: Reference  # fixed hypervolume normalisation of this problem
    pop: Population | None = None
    generation: int = 0  # generations completed; the initial population is generation 1
    evaluations: int = 0  # distinct mappings evaluated
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    seen: set[int] = field(default_factory=set)  # every mapping evaluated so far
    exhausted: bool = False  # no new mapping could be bred

    def __post_init__(self) -> None:
        self.crossover = self.settings.crossover.build()
        self.mutation = self.settings.mutation.build()
        # pymoo's SBX and PM are run by their compiled copies (same draws, same numbers)
        self.fast_crossover = operators.fast_path(self.crossover)
        self.fast_mutation = operators.fast_path(self.mutation)

    @property
    def done(self) -> bool:
        cap = self.settings.max_evaluations
        return (
            self.exhausted
            or self.generation >= self.settings.n_gen
            or (cap is not None and self.evaluations >= cap)
        )


# --- mappings as keys ------------------------------------------------------------------------


def evaluate(problem: MappingProblem, mappings: Mappings) -> tuple[np.ndarray, np.ndarray]:
    out: dict = {}
    problem.evaluate_mappings(mappings, out)
    return out["F"], out["G"]


# --- survival and selection --------------------------------------------------------------------


def crowding_distance(F: np.ndarray) -> np.ndarray:
    """pymoo 0.6's crowding distance ("cd": ``calc_crowding_distance`` behind
    ``FunctionalDiversity``, without duplicate filtering), number for number, compiled: pymoo's
    imports scipy.spatial (half a second of start-up) and its numpy passes cost more than the
    sorting on fronts of a few hundred points."""
    return _crowding(np.ascontiguousarray(F, dtype=np.float64))


@njit(cache=True, nogil=True)
def _crowding(F):
    n_points, n_obj = F.shape
    if n_points <= 2:
        return np.full(n_points, np.inf)
    total = np.zeros((n_points, n_obj))
    for j in range(n_obj):
        order = np.argsort(F[:, j], kind="mergesort")
        lo, hi = F[order[0], j], F[order[n_points - 1], j]
        norm = hi - lo
        for r in range(n_points):
            if norm == 0.0:  # pymoo: nan, then 0 (even at the ends)
                continue
            i = order[r]
            last = np.inf if r == 0 else (F[i, j] - F[order[r - 1], j]) / norm
            nxt = np.inf if r == n_points - 1 else (F[order[r + 1], j] - F[i, j]) / norm
            total[i, j] = last + nxt
    out = np.empty(n_points)
    for i in range(n_points):
        acc = 0.0
        for j in range(n_obj):
            acc += total[i, j]
        out[i] = acc / n_obj
    return out


def survive(pop: Population, n: int, rng: np.random.Generator) -> Population:
    """Rank-and-crowding survival of ``n`` individuals (pymoo's RankAndCrowding with
    infeasible individuals last, by violation); sets rank and crowding."""
    cv = pop.cv
    feas = np.flatnonzero(cv <= 0)
    infeas = np.flatnonzero(cv > 0)
    infeas = infeas[np.argsort(cv[infeas], kind="stable")]
    rank = np.full(len(pop), -1, dtype=np.int64)
    crowding = np.zeros(len(pop))
    chosen: list[np.ndarray] = []
    if len(feas):
        n_feas = min(len(feas), n)
        F = pop.F[feas]
        taken = 0
        for k, front in enumerate(_NDS.do(F, n_stop_if_ranked=n_feas)):
            if taken + len(front) > n_feas:
                n_remove = taken + len(front) - n_feas
                cd = crowding_distance(F[front])
                keep = randomized_argsort(cd, order="descending", random_state=rng)[:-n_remove]
            else:
                cd = crowding_distance(F[front])
                keep = np.arange(len(front))
            rank[feas[front]] = k
            crowding[feas[front]] = cd
            chosen.append(feas[front[keep]])
            taken += len(keep)
    remaining = n - sum(len(c) for c in chosen)
    if remaining > 0:
        chosen.append(infeas[:remaining])
    idx = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
    out = pop.take(idx)
    out.rank, out.crowding = rank[idx], crowding[idx]
    return out


def tournament(pop: Population, n_select: int, rng: np.random.Generator) -> np.ndarray:
    """Winners of ``n_select`` binary tournaments: lower violation, else lower rank, else
    larger crowding, else a coin flip (pymoo's comp_by_rank_and_crowding)."""
    n = len(pop)
    perms = [rng.permutation(n) for _ in range(math.ceil(2 * n_select / n))]
    pairs = np.concatenate(perms)[: 2 * n_select].reshape(n_select, 2)
    a, b = pairs[:, 0], pairs[:, 1]
    cv, rank, cd = pop.cv, pop.rank, pop.crowding
    coin = rng.random(n_select) < 0.5
    either_infeasible = (cv[a] > 0) | (cv[b] > 0)
    by_cv = np.where(cv[a] < cv[b], a, np.where(cv[b] < cv[a], b, np.where(coin, a, b)))
    by_rank = np.where(
        rank[a] < rank[b],
        a,
        np.where(
            rank[b] < rank[a],
            b,
            np.where(cd[a] > cd[b], a, np.where(cd[b] > cd[a], b, np.where(coin, a, b))),
        ),
    )
    return np.where(either_infeasible, by_cv, by_rank)


def offspring(state: SearchState, n_off: int) -> np.ndarray:
    """``n_off`` new gene vectors: tournament, crossover (with its probability), mutation
    (with its probability per individual), rounded to integer genes within the bounds."""
    problem, pop, rng = state.problem, state.pop, state.rng
    assert pop is not None
    cx, mut = state.crossover, state.mutation
    n_matings = math.ceil(n_off / cx.n_offsprings)
    parents = tournament(pop, n_matings * cx.n_parents, rng).reshape(n_matings, cx.n_parents)
    X = np.swapaxes(pop.X[parents], 0, 1).astype(np.float64)  # [n_parents, n_matings, n_var]
    Xp = X[: cx.n_offsprings].copy()
    cross = rng.random(n_matings) < cx.prob.value
    if cross.any():
        if state.fast_crossover:
            Q = operators.sbx(cx, X, problem.xl, problem.xu, rng)
        else:
            Q = cx._do(problem, X, random_state=rng)
        Xp[:, cross] = Q[:, cross]
    Xp = Xp.reshape(-1, problem.n_var)
    if state.fast_mutation:
        Xm = operators.pm(mut, Xp, problem.xl, problem.xu, problem.n_var, rng)
    else:
        Xm = mut._do(problem, Xp, random_state=rng)
    mutate = rng.random(len(Xp)) <= mut.prob.value
    Xp[mutate] = Xm[mutate]
    return np.clip(np.rint(Xp), problem.xl, problem.xu).astype(np.int64)


# --- the loop ------------------------------------------------------------------------------------


def initial_population(problem: MappingProblem, settings: AlgorithmConfig, seed: int) -> np.ndarray:
    chrom = problem.chromosome
    x = chrom.sample(settings.pop_size, np.random.default_rng(seed))
    if settings.seed_single_device:
        for d in range(min(chrom.n_devices, settings.pop_size)):
            x[d] = chrom.single_device(d)
        if settings.seed_structured:
            seed_population(x, chrom, problem.model)
    return x


def new_search(problem: MappingProblem, settings: AlgorithmConfig, seed: int) -> SearchState:
    return SearchState(problem, settings, seed, np.random.default_rng(seed), Reference.of(problem))


def _distinct(
    problem: MappingProblem, X: np.ndarray, limit: int, taken: set[int]
) -> tuple[np.ndarray, Mappings, list[int]]:
    """The first ``limit`` gene vectors of X whose mappings are not in ``taken`` (nor twice in
    X), with their mappings; their keys are added to ``taken``."""
    mappings = problem.chromosome.decode(X)
    arr = mappings.keys()
    _, first = np.unique(arr, return_index=True)  # each mapping's first gene vector in X
    first.sort()
    keep = [i for i, k in zip(first.tolist(), arr[first].tolist(), strict=True) if k not in taken]
    del keep[limit:]
    keys = arr[keep].tolist()
    taken.update(keys)
    if len(keep) == len(X):
        return X, mappings, keys
    idx = np.array(keep, dtype=np.int64)
    return X[idx], mappings.take(idx), keys


def step(state: SearchState) -> None:
    """One generation: the initial population, or offspring + survival."""
    problem, settings = state.problem, state.settings
    if state.pop is None:
        X0 = initial_population(problem, settings, state.seed)
        X, mappings, keys = _distinct(problem, X0, len(X0), state.seen)
        parents = None
    else:
        budget = settings.pop_size
        if settings.max_evaluations is not None:
            budget = min(budget, settings.max_evaluations - state.evaluations)
        found_x: list[np.ndarray] = []
        found_m: list[Mappings] = []
        keys: list[int] = []
        for attempt in range(MAX_MATING_ROUNDS):
            missing = budget - len(keys)
            if missing <= 0:
                break
            # after the first round most candidates are copies: ask for more at once
            n_try = missing if attempt == 0 else min(settings.pop_size, 2 * missing + 8)
            Xn, bn, kn = _distinct(problem, offspring(state, n_try), missing, state.seen)
            found_x.append(Xn)
            found_m.append(bn)
            keys.extend(kn)
        X = np.concatenate(found_x)
        state.exhausted = len(X) == 0
        mappings = found_m[0] if len(found_m) == 1 else Mappings.concat(found_m)
        parents = state.pop
    if len(X):
        F, G = evaluate(problem, mappings)
    else:
        F, G = np.zeros((0, problem.n_obj)), np.zeros((0, 1))
    state.evaluations += len(X)
    new = Population(X, F, G, np.zeros(len(X), np.int64), np.zeros(len(X)), keys)
    merged = new if parents is None else _concat(parents, new)
    state.pop = survive(merged, min(settings.pop_size, len(merged)), state.rng)
    state.generation += 1


def _concat(a: Population, b: Population) -> Population:
    arrays = (np.concatenate([getattr(a, f), getattr(b, f)]) for f in _ARRAY_FIELDS)
    return Population(*arrays, a.keys + b.keys)


def front(state: SearchState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Genes, objectives and constraint of the current best set: the feasible non-dominated
    individuals, or the least infeasible one when none is feasible."""
    pop = state.pop
    assert pop is not None
    feasible = pop.cv <= 0
    if feasible.any():
        idx = np.flatnonzero(feasible & (pop.rank == 0))
    else:
        idx = np.array([int(np.argmin(pop.cv))])
    return pop.X[idx], pop.F[idx], pop.G[idx]


def record(state: SearchState) -> dict:
    """This generation's row of the history: best of each objective, feasible count,
    hypervolume of the front in the problem's fixed normalisation."""
    pop = state.pop
    assert pop is not None
    feasible = pop.cv <= 0
    row = {
        "generation": state.generation,
        "evaluations": state.evaluations,
        "feasible": int(feasible.sum()),
    }
    for i, n in enumerate(state.problem.objectives):
        row[f"best_{n}"] = float(pop.F[feasible, i].min()) if feasible.any() else float("nan")
    _, f, g = front(state)
    row["hypervolume"] = state.reference.hypervolume(f[g[:, 0] <= 0])
    state.history.append(row)
    return row


def run(
    state: SearchState,
    on_generation: Callable[[dict], None] | None = None,
    on_checkpoint: Callable[[SearchState], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> SearchState:
    """Advance until done or until ``stop()`` says so (checked between generations only)."""
    while not state.done:
        if stop is not None and stop():
            break
        t0 = time.perf_counter()
        step(state)
        state.seconds += time.perf_counter() - t0
        row = record(state)
        if on_generation:
            on_generation(row)
        if on_checkpoint and state.generation % state.settings.checkpoint_every == 0:
            on_checkpoint(state)
    return state


def extend(state: SearchState, n_gen: int, max_evaluations: int | None) -> None:
    """Let a loaded search run until generation ``n_gen`` (and the evaluation cap)."""
    if n_gen < state.generation:
        raise DseError(
            f"algorithm.n_gen={n_gen} is before the checkpoint's generation {state.generation}"
        )
    state.settings.n_gen = n_gen
    state.settings.max_evaluations = max_evaluations
