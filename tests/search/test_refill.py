"""No stall: offspring slots breeding leaves without a new mapping are refilled, every
generation reports how many of its offspring were new, and a search says why it stopped."""

from __future__ import annotations

import numpy as np
import pytest

from dse.config import REFILLS, AlgorithmConfig
from dse.search import nsga2, refill
from dse.search.state import STOP_REASONS
from tests.helpers import cases


def test_reset_genes_changes_exactly_k_genes_within_bounds():
    rng = np.random.default_rng(0)
    xl = np.array([0, 0, 2, 0, 1, 0])
    xu = np.array([3, 1, 2, 5, 4, 7])  # gene 2 has one value: it never moves
    X = xl + np.floor(rng.random((4000, 6)) * (xu - xl + 1)).astype(np.int64)
    for k in (1, 2, 3, 6, 40):
        Y = refill.reset_genes(X, k, xl, xu, rng)
        moved = (Y != X).sum(axis=1)
        assert ((xl <= Y) & (xu >= Y)).all() and (Y[:, 2] == 2).all()
        # k genes drawn among 6: those that landed on gene 2 stay; the others all change
        assert moved.max() == min(k, 5) and moved.min() == (min(k, 6) - 1 if k < 6 else 5)
        if k == 1:
            assert 0.8 * 4000 * 5 / 6 < (moved == 1).sum() < 1.2 * 4000 * 5 / 6
    Y = refill.reset_genes(X, 1, xl, xu, rng)
    changed = Y[:, 5] != X[:, 5]
    assert set(Y[changed, 5].tolist()) == set(range(8))  # every other value reachable


@pytest.mark.parametrize("name", REFILLS)
def test_a_small_space_is_evaluated_whole_without_a_short_generation(name):
    """board_gpu_cpu with advanced-2 has 408 distinct mappings among 4,096 gene vectors:
    populations of 40 breed copies within a few generations. Every generation evaluates a
    full population of new mappings (or all that remain) until none is left (the last ones,
    too rare to sample, by walking the small encoding), and the run then stops, exhausted,
    with the whole space evaluated; so it holds the true front."""
    p = cases.problem("board_gpu_cpu", "advanced", 2)
    every = cases.every_mapping(p.chromosome)
    state = nsga2.run(nsga2.new_search(p, AlgorithmConfig(pop_size=40, n_gen=100, refill=name), 1))
    new = [h["new_offspring"] for h in state.history]
    assert sum(new) == state.evaluations == len(state.seen)
    assert [h["evaluations"] for h in state.history] == np.cumsum(new).tolist()
    assert all(h["refilled"] <= h["new_offspring"] for h in state.history)
    before = np.cumsum([0, *new[:-1]])
    assert new[1:] == np.minimum(40, len(every) - before[1:]).tolist()
    assert state.evaluations == len(every) and state.stop_reason == "exhausted"
    front, _, _ = cases.truth(p)
    _, f, g = nsga2.front(state)
    assert state.reference.hypervolume(f[g[:, 0] <= 0]) == state.reference.hypervolume(front)
    assert sum(h["refilled"] for h in state.history) > 0  # breeding alone fell short


def test_the_end_of_a_small_space_is_found_by_walking_it(monkeypatch):
    """Without the walk, sampling misses the last, rare mappings of the same space: the run
    stops exhausted with some never evaluated. (What the walk is for.)"""
    p = cases.problem("board_gpu_cpu", "advanced", 2)
    monkeypatch.setattr(nsga2, "ENUMERATE_MAX", 0)
    monkeypatch.setattr(nsga2, "MAX_REFILL_ROUNDS", 4)
    state = nsga2.run(nsga2.new_search(p, AlgorithmConfig(pop_size=40, n_gen=100), 1))
    assert state.stop_reason == "exhausted" and state.evaluations < 408


@pytest.mark.parametrize(
    ("case", "chromosome", "splits", "budget"),
    [("two_boards", "advanced", 2, 1400), ("board_gpu_cpu", "advanced", 3, 1500)],
)
def test_true_front_found_with_a_fraction_of_the_space(case, chromosome, splits, budget):
    """two_boards / advanced-2: 2,860 mappings, 35 front points; board_gpu_cpu / advanced-3:
    4,500 mappings, 6 points. Half the space or less holds the true front's
    hypervolume (to 1e-3) for every seed tried."""
    p = cases.problem(case, chromosome, splits)
    front, n_distinct, _ = cases.truth(p)
    assert budget < n_distinct / 2
    for seed in range(3):
        settings = AlgorithmConfig(pop_size=50, n_gen=10**6, max_evaluations=budget)
        state = nsga2.run(nsga2.new_search(p, settings, seed))
        _, f, g = nsga2.front(state)
        ref = state.reference
        assert ref.hypervolume(f[g[:, 0] <= 0]) >= 0.999 * ref.hypervolume(front), seed
        assert state.stop_reason == "evaluations" and state.evaluations == budget


def test_stop_reasons():
    p = cases.problem("board_gpu_cpu", "vertical")  # 171 mappings
    runs = {
        "generations": AlgorithmConfig(pop_size=20, n_gen=3),
        "evaluations": AlgorithmConfig(pop_size=20, n_gen=50, max_evaluations=70),
        "exhausted": AlgorithmConfig(pop_size=20, n_gen=50),
    }
    for reason, settings in runs.items():
        state = nsga2.run(nsga2.new_search(p, settings, 0))
        assert state.stop_reason == reason and reason in STOP_REASONS
    state = nsga2.run(nsga2.new_search(p, runs["exhausted"], 0), stop=lambda: True)
    assert state.stop_reason == "interrupted" and state.generation == 0
