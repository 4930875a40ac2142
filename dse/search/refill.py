"""What fills a generation's offspring when crossover and mutation breed too few new mappings.

Late in a run, or soon in a small space, most offspring decode to a mapping the run has
evaluated already (a converged population breeds copies of itself; pymoo's PM moves an
integer gene by less than half a step more often than not, so the copy comes back whole).
Those offspring are dropped; the strategies below supply candidates for their slots, round
after round (:data:`dse.search.nsga2.MAX_REFILL_ROUNDS`), until the slots hold new mappings.
Each takes the gene vectors that failed last round (``pool``) and returns ``n`` candidates:

* ``mutation`` (escalating mutation, the default): each candidate is a failed vector with k
  genes reset to other values, k = 1, 2, 4, ... doubling every round up to every gene (then a
  uniform sample: an immigrant): the nearest new mappings around the ones bred first;
* ``immigrants``: uniform samples of the encoding (random immigrants);
* ``restart``: uniform samples too, and they replace the weakest parents outside the first
  front (a partial restart of the population; :func:`dse.search.nsga2.step`);
* ``mating``: the whole mating again (tournament, crossover, mutation): dse's earlier rule.

scripts/search_quality.py measures them (``--refill``); the module docstring of
:mod:`dse.search.nsga2` says why ``mutation`` is the default.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dse.search.breeding import offspring

#: strategy name -> candidates(state, pool [m, n_var], n, attempt) -> gene vectors [n, n_var]
Refill = Callable[..., np.ndarray]


def reset_genes(
    X: np.ndarray, k: int, xl: np.ndarray, xu: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """A copy of X [n, n_var] with ``k`` distinct genes of each row (chosen uniformly) set to
    another value within the bounds (uniformly among the others); genes whose bounds are equal
    stay. Vectorised: no loop over rows."""
    n, n_var = X.shape
    Y = X.copy()
    k = min(k, n_var)
    if n == 0 or k == 0:
        return Y
    cols = np.argpartition(rng.random((n, n_var)), k - 1, axis=1)[:, :k]  # k distinct per row
    rows = np.repeat(np.arange(n), k)
    cols = cols.ravel()
    lo, span = xl[cols], xu[cols] - xl[cols]
    step = rng.integers(1, np.maximum(span, 1) + 1)  # 1 .. span: never the current value
    moved = lo + (Y[rows, cols] - lo + step) % np.maximum(span + 1, 1)
    Y[rows, cols] = np.where(span > 0, moved, Y[rows, cols])
    return Y


def _pick(pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    return pool[rng.integers(0, len(pool), n)]


def escalating_mutation(state, pool: np.ndarray, n: int, attempt: int) -> np.ndarray:  # noqa: ANN001
    p = state.problem
    return reset_genes(_pick(pool, n, state.rng), 1 << min(attempt, 30), p.xl, p.xu, state.rng)


def immigrants(state, pool: np.ndarray, n: int, attempt: int) -> np.ndarray:  # noqa: ANN001, ARG001
    return state.problem.chromosome.sample(n, state.rng)


def mating(state, pool: np.ndarray, n: int, attempt: int) -> np.ndarray:  # noqa: ANN001, ARG001
    return offspring(state, n)


REFILLS: dict[str, Refill] = {
    "mutation": escalating_mutation,
    "immigrants": immigrants,
    "restart": immigrants,
    "mating": mating,
}
