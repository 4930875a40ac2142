"""Breeding: binary tournaments, then the configured crossover and mutation on gene arrays."""

from __future__ import annotations

import math

import numpy as np

from dse.search import operators
from dse.search.state import Population, SearchState


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
