"""The local step: part of each generation's offspring are one move from a member of the
current front (``algorithm.local_share``; 0, the default, is NSGA-II alone), the rest bred by
crossover and mutation.

At small budgets NSGA-II samples the neighbours of its good mappings poorly: the population is
small, crossover mostly recombines genes the parents share, and pymoo's PM, meant for real
genes, moves an integer gene by less than half a step (so not at all, once rounded) nearly
always (it is the refill that turns such copies into new mappings). The local step spends a
share of each generation on the front's neighbourhood, as a Pareto local search would, while
the bred share keeps the search global:

* parents: binary tournaments on crowding distance among the feasible first front (the
  extremes of each objective, of infinite crowding, and the sparse stretches first); with no
  feasible individual yet, NSGA-II's own tournament (by violation);
* the move (:func:`move`): one gene to another value, and with it every gene of its group
  (:attr:`chromosomes.base.Chromosome.gene_groups`) that held the same value. A splittable
  layer's naive genes name a set of devices, repeats meaning fewer parts: changing one gene
  adds a device to the set, and only the group move replaces one (the layer from the CPU to
  the GPU: every gene naming the CPU at once). Single-gene moves of front members did not help
  the naive encoding; group moves did (docs/results/search-quality.md);
* moves that give a mapping evaluated before are drawn again, 4 per missing slot, for
  :data:`ROUNDS` rounds (the neighbours not yet evaluated, near-systematically, at no cost in
  evaluations); slots still empty go to breeding.

Off by default because it is a small-budget tool: on the zoo's networks it raises the
hypervolume at small budgets, but on VGG-16's naive encoding at large ones (the thesis's
1000 x 100 among them) it lowers it (docs/results/search-quality.md): group moves merge or swap
a layer's devices, never add one, and the front the moves sharpen early loses the spread-out
mappings of least memory.

Everything is arrays, drawn from the search's generator: no state of its own (a checkpoint
holds rank and crowding), so a resumed search continues exactly.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dse.search.breeding import tournament
from dse.search.state import Population

#: Rounds of moves for the local slots (the first one move per slot, then 4 per slot still
#: without a new mapping).
ROUNDS = 4


def front_parents(pop: Population, n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``n`` parents in ``pop``: winners of binary tournaments on crowding distance
    (larger wins, ties by a coin) among the feasible first front; NSGA-II's tournament over the
    whole population when no individual is feasible."""
    members = np.flatnonzero((pop.cv <= 0) & (pop.rank == 0))
    if len(members) == 0:
        return tournament(pop, n, rng)
    a = members[rng.integers(0, len(members), n)]
    b = members[rng.integers(0, len(members), n)]
    cd = pop.crowding
    coin = rng.random(n) < 0.5
    return np.where(cd[a] > cd[b], a, np.where(cd[b] > cd[a], b, np.where(coin, a, b)))


def move(
    X: np.ndarray,
    groups: np.ndarray,
    xl: np.ndarray,
    xu: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """A copy of X [n, n_var] with one move per row: a gene drawn uniformly takes another value
    within its bounds (uniformly among the others), and so does every gene of its group
    (``groups[j]``) that held the value it had. A row whose drawn gene has equal bounds comes
    back unchanged. Two draws per row, then one compiled pass (no loop over rows in Python)."""
    X = np.ascontiguousarray(X, dtype=np.int64)
    n, n_var = X.shape
    cols = rng.integers(0, n_var, n)
    span = (xu - xl)[cols].astype(np.int64)
    step = rng.integers(1, np.maximum(span, 1) + 1)  # 1 .. span: never the current value
    return _move(X, np.asarray(groups, np.int64), np.asarray(xl, np.int64), cols, span, step)


@njit(cache=True, nogil=True)
def _move(X, groups, xl, cols, span, step):
    Y = X.copy()
    n, n_var = X.shape
    for i in range(n):
        j = cols[i]
        if span[i] <= 0:
            continue
        old = X[i, j]
        new = xl[j] + (old - xl[j] + step[i]) % (span[i] + 1)
        g = groups[j]
        for k in range(n_var):
            if groups[k] == g and X[i, k] == old:
                Y[i, k] = new
    return Y


def candidates(state, n: int) -> np.ndarray:  # noqa: ANN001
    """``n`` gene vectors, each one move (:func:`move`) from a parent of the current front."""
    p, pop, rng = state.problem, state.pop, state.rng
    parents = pop.X[front_parents(pop, n, rng)]
    return move(parents, p.chromosome.gene_groups, p.xl, p.xu, rng)
