"""NSGA-II on arrays: pymoo's operators and sorting, without its per-individual objects.

The steps are pymoo's NSGA-II (Deb et al. 2002) as pymoo runs it: binary tournament on
constraint violation, then rank, then crowding distance; the configured crossover and mutation
(pymoo operators, called on gene arrays, then rounded: genes are integers); rank-and-crowding
survival with feasible individuals first and infeasible ones by violation. Three departures,
all for mapping search, and an option:

* duplicates are mappings, not gene vectors: offspring that decode to a mapping the run has
  already evaluated (or twice among themselves) are dropped, so every evaluation is a new
  mapping;
* the slots they leave are refilled (:mod:`dse.search.refill`, ``algorithm.refill``), round
  after round, so a generation evaluates a full population of new mappings while the encoding
  has them (each generation's count is history.csv's ``new_offspring``, the refill's share
  ``refilled``); an encoding of at most :data:`ENUMERATE_MAX` gene vectors is walked for the
  last, rare ones; a run that finds no new mapping at all stops (``exhausted``);
* optionally (``algorithm.local_share``, off by default), part of each generation's offspring
  are one move from a member of the current front instead of bred (:mod:`dse.search.local`):
  a Pareto local step for small budgets;
* the whole state is arrays and the generator's state (:class:`SearchState`), so checkpoints
  are plain data (:mod:`dse.search.checkpoint`) and a resumed run continues exactly.

Why escalating mutation refills (the default): the rule before it mated again and again
(``mating``), and late in a run a converged population breeds only copies of itself: on the
enumerable cases of tests/helpers/cases.py at 20,000 evaluations it stalled (generations with
0 % new offspring, runs ending "exhausted" with most of the space unexplored). Random
immigrants and a partial restart never stall either, but spend the slots on random mappings,
far from the front: at 1,000-5,000 evaluations they reach less of the true front's
hypervolume than escalating mutation, which mutates the very copies (1, 2, 4, ... genes) and
so stays near the parents that bred them. scripts/search_quality.py prints the figures
(``--refill mutation immigrants restart mating``); the README has them. A refill round costs a
decode and a hash of its candidates (numpy and numba, no loop over the population).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
from numba import njit
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting
from pymoo.util.randomized_argsort import randomized_argsort

from chromosomes.seeds import seed_population
from dse.config import AlgorithmConfig
from dse.errors import DseError
from dse.mapping import Mappings
from dse.search import local
from dse.search.breeding import offspring
from dse.search.heap import keep_freed_memory
from dse.search.hypervolume import Reference
from dse.search.problem import MappingProblem
from dse.search.refill import REFILLS
from dse.search.state import STOP_REASONS, Population, SearchState, concat

_NDS = NonDominatedSorting()
#: Refill rounds (:mod:`dse.search.refill`) to fill a generation with new mappings before it
#: goes on with fewer offspring (none: the search stops, exhausted).
MAX_REFILL_ROUNDS = 64
#: Candidates a refill round tries: 2 per missing offspring plus 8, doubled every 8 rounds
#: without success, at most this many populations (rare new mappings, late in a small space).
REFILL_MAX_POPULATIONS = 16
#: An encoding with at most this many gene vectors is enumerated when the refill rounds fall
#: short: the last mappings of a small space can be too rare for sampling to meet, and
#: enumerating finds them all (or shows that none is left).
ENUMERATE_MAX = 1 << 20
_CHUNK = 1 << 16


# --- mappings as keys ------------------------------------------------------------------------


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


def nearest_neighbour_pruning(F: np.ndarray, n_remove: int) -> np.ndarray:
    """pymoo 0.6's "2nn" crowding (``RankAndCrowding(crowding_func="2nn")``; Kukkonen and Deb,
    "A fast and effective method for pruning of non-dominated solutions in many-objective
    problems", 2006), compiled: each point's product of squared distances to its two nearest
    neighbours (objectives scaled to [0, 1]), the extremes of each objective infinite, repeated
    points 0; the ``n_remove`` - 1 lowest are removed one at a time, their neighbours' values
    recomputed each time. Survival keeps the points of largest value, so removed points always
    rank below kept ones. Crowding distance, computed once, removes whole clusters of points
    from a front of three objectives; this keeps the front's spread when the population is far
    smaller than the front (scripts/search_quality.py --crowding)."""
    F = np.ascontiguousarray(F, dtype=np.float64)
    n = len(F)
    if n <= F.shape[1]:
        return np.full(n, np.inf)
    _, first = np.unique(F, axis=0, return_index=True)
    unique = np.zeros(n, dtype=np.bool_)
    unique[first] = True
    out = np.zeros(n)  # repeats: 0, the first to go
    out[unique] = _prune_2nn(F[unique], max(int(n_remove) - (n - len(first)), 0))
    return out


@njit(cache=True, nogil=True)
def _prune_2nn(F, n_remove):
    n, m = F.shape
    if n <= m:
        return np.full(n, np.inf)
    n_remove = min(n_remove, n - m)
    lo = np.empty(m)
    span = np.empty(m)
    extreme = np.zeros(n, dtype=np.bool_)
    for j in range(m):
        a, b = 0, 0
        for i in range(n):
            if F[i, j] < F[a, j]:
                a = i
            if F[i, j] > F[b, j]:
                b = i
        extreme[a] = True
        extreme[b] = True
        lo[j] = F[a, j]
        span[j] = F[b, j] - F[a, j]
        if span[j] == 0.0:
            span[j] = 1.0
    X = np.empty((n, m))
    for i in range(n):
        for j in range(m):
            X[i, j] = (F[i, j] - lo[j]) / span[j]
    alive = np.ones(n, dtype=np.bool_)
    nn = np.empty((n, 2), dtype=np.int64)
    d = np.empty(n)
    for i in range(n):
        _two_nearest(X, alive, i, nn, d)
    for i in range(n):
        if extreme[i]:
            d[i] = np.inf
    for _ in range(n_remove - 1):  # the last one goes by the survival's sort
        k = -1
        for i in range(n):
            if alive[i] and (k < 0 or d[i] < d[k]):
                k = i
        alive[k] = False
        for i in range(n):
            if alive[i] and (nn[i, 0] == k or nn[i, 1] == k):
                _two_nearest(X, alive, i, nn, d)
                if extreme[i]:
                    d[i] = np.inf
    return d


@njit(cache=True, nogil=True)
def _two_nearest(X, alive, i, nn, d):
    """nn[i] and d[i]: the two nearest living points to point i and the product of their
    squared distances."""
    b1, b2 = np.inf, np.inf
    i1, i2 = -1, -1
    n, m = X.shape
    for j in range(n):
        if j == i or not alive[j]:
            continue
        dist = 0.0
        for c in range(m):
            diff = X[i, c] - X[j, c]
            dist += diff * diff
        if dist < b1:
            b2, i2 = b1, i1
            b1, i1 = dist, j
        elif dist < b2:
            b2, i2 = dist, j
    nn[i, 0], nn[i, 1] = i1, i2
    d[i] = b1 * b2


def survive(pop: Population, n: int, rng: np.random.Generator, cut: str = "cd") -> Population:
    """Rank-and-crowding survival of ``n`` individuals (pymoo's RankAndCrowding with
    infeasible individuals last, by violation); sets rank and crowding. The front that does not
    fit whole is cut by crowding distance (``cut="cd"``, pymoo's default) or by
    :func:`nearest_neighbour_pruning` (``"2nn"``, ``algorithm.crowding``), whose values are
    then its crowding."""
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
                if cut == "2nn":
                    cd = nearest_neighbour_pruning(F[front], n_remove)
                else:
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
) -> tuple[np.ndarray, Mappings, list[int], np.ndarray]:
    """The first ``limit`` gene vectors of X whose mappings are not in ``taken`` (nor twice in
    X), with their mappings; their keys are added to ``taken``. Last, the gene vectors of X
    that were not new (a mapping seen before, or one earlier in X)."""
    mappings = problem.chromosome.decode(X)
    arr = mappings.keys()
    _, first = np.unique(arr, return_index=True)  # each mapping's first gene vector in X
    first.sort()
    fresh = first[[k not in taken for k in arr[first].tolist()]]
    keep = fresh[:limit]
    keys = arr[keep].tolist()
    taken.update(keys)
    if len(keep) == len(X):
        return X, mappings, keys, X[:0]
    old = np.ones(len(X), dtype=bool)
    old[fresh] = False
    return X[keep], mappings.take(keep), keys, X[old]


def _local(state: SearchState, n: int) -> tuple[list[np.ndarray], list[Mappings], list[int]]:
    """Up to ``n`` new mappings one move from the current front (:mod:`dse.search.local`):
    the first round draws a move per slot, the next ones 4 per slot still empty."""
    found_x, found_m, keys = [], [], []
    missing = n
    for attempt in range(local.ROUNDS):
        if missing <= 0:
            break
        n_try = missing if attempt == 0 else 4 * missing
        Xn, mn, kn, _ = _distinct(
            state.problem, local.candidates(state, n_try), missing, state.seen
        )
        found_x.append(Xn)
        found_m.append(mn)
        keys.extend(kn)
        missing -= len(kn)
    return found_x, found_m, keys


def _offspring(state: SearchState, budget: int) -> tuple[np.ndarray, Mappings, list[int], int]:
    """Up to ``budget`` offspring that are new mappings, their mappings and keys, and how many
    of them the refill supplied (:mod:`dse.search.refill`): the local step's share
    (``algorithm.local_share``), one mating for the rest, then refill rounds on the slots they
    could not fill."""
    problem, settings, pop = state.problem, state.settings, state.pop
    assert pop is not None  # offspring are bred from a population evaluated before
    n_local = min(budget, round(settings.local_share * budget))
    found_x, found_m, keys = _local(state, n_local) if n_local else ([], [], [])
    n_bred = budget - len(keys)
    pool = pop.X[:0]
    if n_bred:
        X, mappings, kb, pool = _distinct(problem, offspring(state, n_bred), n_bred, state.seen)
        found_x.append(X)
        found_m.append(mappings)
        keys.extend(kb)
    n_found = len(keys)
    refill = REFILLS[settings.refill]
    missing = budget - len(keys)
    if len(pool) == 0:
        pool = pop.X
    for attempt in range(MAX_REFILL_ROUNDS):
        if missing <= 0:
            break
        n_try = min((2 * missing + 8) << (attempt // 8), REFILL_MAX_POPULATIONS * settings.pop_size)
        Xn, mn, kn, rest = _distinct(
            problem, refill(state, pool, n_try, attempt), missing, state.seen
        )
        found_x.append(Xn)
        found_m.append(mn)
        keys.extend(kn)
        missing -= len(kn)
        if len(rest):
            pool = rest
    if missing > 0:
        Xn, mn, kn = _enumerate(state, missing)
        found_x.append(Xn)
        found_m.append(mn)
        keys.extend(kn)
    X = np.concatenate(found_x)
    mappings = found_m[0] if len(found_m) == 1 else Mappings.concat(found_m)
    return X, mappings, keys, len(keys) - n_found


def _enumerate(state: SearchState, missing: int) -> tuple[np.ndarray, Mappings, list[int]]:
    """Up to ``missing`` new mappings found by walking every gene vector of a small encoding
    (:data:`ENUMERATE_MAX`) in index order from a random one; none for a larger encoding."""
    problem = state.problem
    radix = (problem.chromosome.upper + 1).astype(np.int64)
    if float(np.prod(radix.astype(np.float64))) > ENUMERATE_MAX:
        return (
            np.zeros((0, problem.n_var), np.int64),
            problem.chromosome.decode(np.zeros((0, problem.n_var), np.int64)),
            [],
        )
    total = int(np.prod(radix))
    start = int(state.rng.integers(total))
    found_x, found_m, keys = [], [], []
    for lo in range(0, total, _CHUNK):
        if missing <= 0:
            break
        idx = (start + np.arange(lo, min(lo + _CHUNK, total), dtype=np.int64)) % total
        genes = np.empty((len(idx), problem.n_var), dtype=np.int64)
        for j in range(problem.n_var - 1, -1, -1):  # mixed radix, the last gene fastest
            genes[:, j] = idx % radix[j]
            idx //= radix[j]
        Xn, mn, kn, _ = _distinct(problem, genes, missing, state.seen)
        found_x.append(Xn)
        found_m.append(mn)
        keys.extend(kn)
        missing -= len(kn)
    if not found_x:
        empty = np.zeros((0, problem.n_var), np.int64)
        return empty, problem.chromosome.decode(empty), []
    return np.concatenate(found_x), Mappings.concat(found_m), keys


def step(state: SearchState) -> None:
    """One generation: the initial population, or offspring + survival."""
    problem, settings = state.problem, state.settings
    refilled = 0
    if state.pop is None:
        X0 = initial_population(problem, settings, state.seed)
        X, mappings, keys, _ = _distinct(problem, X0, len(X0), state.seen)
        parents = None
    else:
        budget = settings.pop_size
        if settings.max_evaluations is not None:
            budget = min(budget, settings.max_evaluations - state.evaluations)
        X, mappings, keys, refilled = _offspring(state, budget)
        state.exhausted = len(X) == 0
        parents = state.pop
    if len(X):
        F, G = problem.evaluate_mappings(mappings)
    else:
        F, G = np.zeros((0, problem.n_obj)), np.zeros((0, 1))
    state.evaluations += len(X)
    state.new, state.refilled = len(X), refilled
    new = Population(X, F, G, np.zeros(len(X), np.int64), np.zeros(len(X)), keys)
    if parents is None:
        state.pop = survive(new, min(settings.pop_size, len(new)), state.rng, settings.crowding)
    elif settings.refill == "restart" and refilled:
        state.pop = _restart(parents, new, refilled, settings, state.rng)
    else:
        merged = concat(parents, new)
        state.pop = survive(
            merged, min(settings.pop_size, len(merged)), state.rng, settings.crowding
        )
    state.generation += 1


def _restart(
    parents: Population,
    new: Population,
    n_immigrants: int,
    settings: AlgorithmConfig,
    rng: np.random.Generator,
) -> Population:
    """Survival with a partial restart: the last ``n_immigrants`` of ``new`` (the refill's
    uniform samples) join the population whatever their rank, in place of the weakest
    survivors of parents and bred offspring; their feasible first front stays whole."""
    size, crowding = settings.pop_size, settings.crowding
    n_bred = len(new) - n_immigrants
    merged = concat(parents, new.take(np.arange(n_bred)))
    ranked = survive(merged, min(size, len(merged)), rng, crowding)  # first front first
    n_first = int(((ranked.rank == 0) & (ranked.cv <= 0)).sum())
    n_in = min(n_immigrants, max(size - n_first, 0))
    kept = ranked.take(np.arange(min(len(ranked), size - n_in)))
    joined = concat(kept, new.take(np.arange(n_bred, n_bred + n_in)))
    return survive(joined, len(joined), rng, crowding)


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
    row: dict[str, float] = {
        "generation": state.generation,
        "evaluations": state.evaluations,
        "feasible": int(feasible.sum()),
    }
    for i, n in enumerate(state.problem.objectives):
        row[f"best_{n}"] = float(pop.F[feasible, i].min()) if feasible.any() else float("nan")
    _, f, g = front(state)
    row["hypervolume"] = state.reference.hypervolume(f[g[:, 0] <= 0])
    row["new_offspring"] = state.new  # new mappings evaluated (the whole first population)
    row["refilled"] = state.refilled  # ... of them supplied by the refill, not bred
    state.history.append(row)
    return row


def run(
    state: SearchState,
    on_generation: Callable[[dict], None] | None = None,
    on_checkpoint: Callable[[SearchState], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> SearchState:
    """Advance until done or until ``stop()`` says so (checked between generations only);
    ``state.stop_reason`` says which (:data:`~dse.search.state.STOP_REASONS`)."""
    keep_freed_memory()  # generations reuse their arrays' pages (dse.search.heap)
    state.stop_reason = ""
    while not state.done:
        if stop is not None and stop():
            state.stop_reason = "interrupted"
            break
        t0 = time.perf_counter()
        step(state)
        state.seconds += time.perf_counter() - t0
        row = record(state)
        if on_generation:
            on_generation(row)
        if on_checkpoint and state.generation % state.settings.checkpoint_every == 0:
            on_checkpoint(state)
    state.stop_reason = state.stop_reason or state.limit()
    if state.stop_reason == "exhausted":
        logging.getLogger("dse").warning(
            f"search stopped after generation {state.generation} of {state.settings.n_gen}: "
            f"{STOP_REASONS['exhausted']} ({state.evaluations} evaluated)"
        )
    return state


def extend(state: SearchState, n_gen: int, max_evaluations: int | None) -> None:
    """Let a loaded search run until generation ``n_gen`` (and the evaluation cap)."""
    if n_gen < state.generation:
        raise DseError(
            f"algorithm.n_gen={n_gen} is before the checkpoint's generation {state.generation}"
        )
    state.settings.n_gen = n_gen
    state.settings.max_evaluations = max_evaluations
