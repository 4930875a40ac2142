"""Operators for integer device genes that pymoo does not ship, and pymoo's SBX and PM compiled."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from pymoo.core.mutation import Mutation
from pymoo.operators.crossover.sbx import SBX, SimulatedBinaryCrossover
from pymoo.operators.mutation.pm import PM, PolynomialMutation


class RandomReset(Mutation):
    """Each gene, with probability ``prob_var`` (default 1/n_var, at least one gene per
    individual), is replaced by a different value drawn uniformly within its bounds."""

    def _do(self, problem, X, *args, random_state=None, **kwargs):  # noqa: ANN001
        X = np.asarray(X, dtype=np.float64).copy()
        n, n_var = X.shape
        xl, xu = np.asarray(problem.xl, np.int64), np.asarray(problem.xu, np.int64)
        p = self.get_prob_var(problem, size=n).reshape(-1, 1)
        flip = random_state.random((n, n_var)) < p
        flip[np.arange(n), random_state.integers(0, n_var, n)] = True
        span = xu - xl  # values other than the current one
        step = random_state.integers(1, np.maximum(span, 1) + 1, size=(n, n_var))
        moved = xl + (X.astype(np.int64) - xl + step) % np.maximum(span + 1, 1)
        X[flip & (span > 0)] = moved[flip & (span > 0)]
        return X


# --- pymoo's SBX and PM in one compiled pass ------------------------------------------------------
#
# pymoo's cross_sbx and mut_pm are vectorised numpy, but over boolean-masked copies of small
# arrays, a large share of a search at the thesis's settings. The functions below
# draw the same random numbers from the same generator in the same order and shapes as pymoo
# 0.6 (so a seed gives the same offspring) and compute each crossed or mutated gene in one
# compiled loop with pymoo's formulas; tests/test_search.py checks them against pymoo's.


def fast_path(op: Any) -> bool:
    """Whether ``op`` (a built pymoo operator) is pymoo's two-offspring SBX or its PM without
    ``at_least_once``, with plain numbers for parameters: the operators reproduced here."""

    def plain(*vs: Any) -> bool:
        return all(isinstance(getattr(v, "value", v), int | float) for v in vs)

    if type(op) in (SBX, SimulatedBinaryCrossover):
        return op.n_offsprings == 2 and plain(op.eta, op.prob_var, op.prob_exch, op.prob_bin)
    if type(op) in (PM, PolynomialMutation):
        rate = op.prob_var is None or plain(op.prob_var)
        return not op.at_least_once and plain(op.eta) and rate
    return False


def _value(v: Any) -> float:
    return float(getattr(v, "value", v))


def sbx(op: Any, X: np.ndarray, xl: np.ndarray, xu: np.ndarray, rng: np.random.Generator):
    """pymoo's ``SBX._do(problem, X)``: X [2, n_matings, n_var] parents, within the bounds ->
    [2, n_matings, n_var] children (pymoo also clamps the genes it did not cross, which
    parents within the bounds never need)."""
    _, n_matings, n_var = X.shape
    X = np.ascontiguousarray(X, dtype=np.float64)
    xl, xu = np.asarray(xl, np.float64), np.asarray(xu, np.float64)
    eta, prob_var = _value(op.eta), _value(op.prob_var)
    prob_exch, prob_bin = _value(op.prob_exch), _value(op.prob_bin)
    exch = rng.random((n_matings, 1))[:, 0] <= prob_exch  # pymoo: prob_bin = 0 where > prob_exch
    cross = rng.random((n_matings, n_var)) < prob_var
    cross &= ~(np.abs(X[0] - X[1]) <= 1.0e-14)
    cross[:, xl == xu] = False
    n = int(cross.sum())
    rand = rng.random(n)
    r_bin = rng.random(n)
    return _sbx_kernel(X, xl, xu, cross, exch, rand, r_bin, eta, prob_bin)


@njit(cache=True, nogil=True)
def _betaq(beta, eta, rand):
    alpha = 2.0 - beta ** (-(eta + 1.0))
    if rand <= 1.0 / alpha:
        return (rand * alpha) ** (1.0 / (eta + 1.0))
    return (1.0 / (2.0 - rand * alpha)) ** (1.0 / (eta + 1.0))


@njit(cache=True, nogil=True)
def _sbx_kernel(X, xl, xu, cross, exch, rand, r_bin, eta, prob_bin):
    Q = X.copy()
    n_matings, n_var = cross.shape
    k = 0
    for i in range(n_matings):
        pb = prob_bin if exch[i] else 0.0
        for j in range(n_var):
            if not cross[i, j]:
                continue
            p1, p2 = X[0, i, j], X[1, i, j]
            sm = p1 < p2
            y1, y2 = (p1, p2) if sm else (p2, p1)
            delta = y2 - y1
            r = rand[k]
            bq = _betaq(1.0 + (2.0 * (y1 - xl[j]) / delta), eta, r)
            c1 = 0.5 * ((y1 + y2) - bq * delta)
            bq = _betaq(1.0 + (2.0 * (xu[j] - y2) / delta), eta, r)
            c2 = 0.5 * ((y1 + y2) + bq * delta)
            ch1, ch2 = (c1, c2) if sm else (c2, c1)
            if (r_bin[k] < pb) != (p1 > p2):
                ch1, ch2 = ch2, ch1
            Q[0, i, j] = min(max(ch1, xl[j]), xu[j])
            Q[1, i, j] = min(max(ch2, xl[j]), xu[j])
            k += 1
    return Q


def pm(op: Any, X: np.ndarray, xl: np.ndarray, xu: np.ndarray, n_var: int, rng):
    """pymoo's ``PM._do(problem, X)``: X [n, n_var] within the bounds -> mutated copy."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    xl, xu = np.asarray(xl, np.float64), np.asarray(xu, np.float64)
    p = op.prob_var
    prob_var = min(0.5, 1 / n_var) if p is None else _value(p)
    mut = rng.random(X.shape) < prob_var
    mut[:, xl == xu] = False
    rand = rng.random(int(mut.sum()))
    return _pm_kernel(X, xl, xu, mut, rand, _value(op.eta))


@njit(cache=True, nogil=True)
def _pm_kernel(X, xl, xu, mut, rand, eta):
    Y = X.copy()
    n, n_var = X.shape
    mut_pow = 1.0 / (eta + 1.0)
    k = 0
    for i in range(n):
        for j in range(n_var):
            if not mut[i, j]:
                continue
            x, lo, hi = X[i, j], xl[j], xu[j]
            r = rand[k]
            k += 1
            if r <= 0.5:
                xy = 1.0 - (x - lo) / (hi - lo)
                val = 2.0 * r + (1.0 - 2.0 * r) * xy ** (eta + 1.0)
                dq = val**mut_pow - 1.0
            else:
                xy = 1.0 - (hi - x) / (hi - lo)
                val = 2.0 * (1.0 - r) + 2.0 * (r - 0.5) * xy ** (eta + 1.0)
                dq = 1.0 - val**mut_pow
            y = x + dq * (hi - lo)
            Y[i, j] = min(max(y, lo), hi)
    return Y
