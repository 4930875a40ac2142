"""Operators for integer device genes that pymoo does not ship."""

from __future__ import annotations

import numpy as np
from pymoo.core.mutation import Mutation


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
