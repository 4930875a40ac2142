"""Fitting model coefficients to measurements (the thesis's "tuning", section 4.3)."""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LinearRegression


def fit_nonnegative(features: np.ndarray, target: np.ndarray, relative: bool = True) -> np.ndarray:
    """Non-negative least squares ``features @ x ~ target``.

    With ``relative`` the residuals are divided by the target, so a 5 % miss on a small
    network weighs as much as on a large one.
    """
    a = np.asarray(features, dtype=np.float64)
    b = np.asarray(target, dtype=np.float64)
    if relative:
        a, b = a / b[:, None], np.ones_like(b)
    reg = LinearRegression(fit_intercept=False, positive=True).fit(a, b)
    return reg.coef_
