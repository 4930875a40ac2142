"""How far a mapping is from the best under each profile: its regret.

A profile's best latency is the best a short search under that profile alone finds
(:func:`profile_bests`): NSGA-II with latency its one objective and the memory constraint,
:data:`POP_SIZE` x :data:`N_GEN` generations, its first population the given mappings (a run's
front) with the search's usual first population (every one-device mapping and random ones).
A mapping's regret under a profile is its latency there less that best (0 for the best; never
below 0: the seeds are among what the short search keeps). The figure is the best found, not
a proven optimum.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dse.config import AlgorithmConfig
from dse.search import nsga2
from dse.search.problem import MappingProblem
from dse.search.state import Population

#: The short search under each profile: population and generations.
POP_SIZE = 100
N_GEN = 30


def profile_bests(
    problem: MappingProblem, genes: np.ndarray, settings: AlgorithmConfig, seed: int
) -> np.ndarray:
    """[S] the best latency (ms) a short search under each of ``problem``'s profiles alone
    finds among mappings that fit in memory (NaN where none fits), seeded with ``genes``;
    ``settings``: the run's (its operators), at :data:`POP_SIZE` x :data:`N_GEN`."""
    assert problem.profiles is not None
    short = dataclasses.replace(
        settings, pop_size=POP_SIZE, n_gen=N_GEN, max_evaluations=None, checkpoint_every=N_GEN
    )
    bests = []
    for model in problem.profiles.models:
        alone = MappingProblem(problem.chromosome, model, ["latency"])
        state = nsga2.new_search(alone, short, seed)
        first = nsga2.initial_population(alone, short, seed)
        x = np.concatenate([np.asarray(genes, dtype=np.int64).reshape(-1, alone.n_var), first])
        mappings = alone.chromosome.decode(x)
        keys = mappings.keys()
        _, once = np.unique(keys, return_index=True)
        once.sort()
        x, mappings = x[once], mappings.take(once)
        f, g = alone.evaluate_mappings(mappings)
        zeros = np.zeros(len(x))
        pop = Population(x, f, g, zeros.astype(np.int64), zeros, keys[once].tolist())
        state.pop = nsga2.survive(pop, min(short.pop_size, len(pop)), state.rng, short.crowding)
        state.seen.update(pop.keys)
        state.evaluations, state.generation = len(x), 1
        nsga2.run(state)
        feasible = state.pop.cv <= 0
        best = state.pop.F[feasible, 0].min() if feasible.any() else np.nan
        seeded = g[:, 0] <= 0
        if seeded.any():  # survival keeps the best, but say so: never worse than a seed
            best = np.fmin(best, f[seeded, 0].min())
        bests.append(float(best))
    return np.array(bests)
