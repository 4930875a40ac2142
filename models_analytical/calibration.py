"""Fitting model coefficients to measurements (the thesis's "tuning", section 4.3)."""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LinearRegression

from models_analytical.layer_costs import PART_FIXED_MAX


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


def fit_regression(
    families: list[str], terms: np.ndarray, seconds: np.ndarray, min_rows: int = 3
) -> dict[str, list[float]]:
    """Per layer family, non-negative coefficients of REGRESSION_TERMS that fit the profiled
    times (relative residuals); a family with fewer than ``min_rows`` layers is left out: the
    model then uses ``any``, fitted on every layer."""
    fam = np.asarray(families)
    terms = np.asarray(terms, dtype=np.float64)
    seconds = np.asarray(seconds, dtype=np.float64)
    keep = seconds > 0
    out: dict[str, list[float]] = {}
    scale = np.maximum(np.abs(terms[keep]).max(axis=0), 1.0)
    for f in sorted(set(fam[keep])):
        rows = keep & (fam == f)
        if rows.sum() >= min_rows:
            out[f] = [float(c) for c in fit_nonnegative(terms[rows] / scale, seconds[rows]) / scale]
    if keep.sum() >= min_rows:
        out["any"] = [float(c) for c in fit_nonnegative(terms[keep] / scale, seconds[keep]) / scale]
    return out


def fit_channel_block(
    channels: np.ndarray, case: np.ndarray, seconds: np.ndarray
) -> tuple[int, float]:
    """The channel block that best explains part times: per case ``t = a + b * ceil(c / B) *
    B`` (least squares), B from 1, 2, 4, ..., 64; returns (B, median relative error)."""
    channels, case = np.asarray(channels, dtype=np.float64), np.asarray(case)
    seconds = np.asarray(seconds, dtype=np.float64)
    best = (1, np.inf)
    for block in (1, 2, 4, 8, 16, 32, 64):
        errs = []
        for c in np.unique(case):
            m = case == c
            x = np.ceil(channels[m] / block) * block
            a = np.column_stack([np.ones(m.sum()), x])
            coef = fit_nonnegative(a, seconds[m])
            errs.extend(np.abs(a @ coef - seconds[m]) / seconds[m])
        err = float(np.median(errs))
        if err < best[1] - 1e-3:  # a larger block must explain the data clearly better
            best = (block, err)
    return best


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute percentage error (%)."""
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    return float(np.mean(np.abs(p - m) / m) * 100.0)


def fit_part_fixed(
    rows: list[dict], min_layers: int = 3
) -> tuple[dict[str, float], dict[str, float], float]:
    """What every part of a layer pays whatever its channels, from layers timed alone as
    parts (rows ``{key, family, channels, full, seconds}``, several channel counts per key).

    Per layer, ``t(c) = a + b c`` (non-negative least squares, relative residuals) and its
    fixed share ``f = a / t(full)``, at most ``PART_FIXED_MAX``. Per family of at least
    ``min_layers`` layers, ``f ~ beta / full`` weighted by the layers' whole times (least
    squares through 0): the share of a layer never timed. Returns (per layer, per family
    beta, median relative error of the per-layer lines)."""
    by_key: dict[str, list[dict]] = {}
    for r in rows:
        by_key.setdefault(r["key"], []).append(r)
    per_layer: dict[str, float] = {}
    fam_rows: dict[str, list[tuple[float, float, float]]] = {}
    errors = []
    for key, rs in by_key.items():
        c = np.array([r["channels"] for r in rs], dtype=np.float64)
        t = np.array([r["seconds"] for r in rs], dtype=np.float64)
        full = float(rs[0]["full"])
        if len(rs) < 2 or not (c == full).any() or (t <= 0).any():
            continue
        a = np.column_stack([np.ones_like(c), c])
        coef = fit_nonnegative(a, t)
        errors.extend(np.abs(a @ coef - t) / t)
        whole = coef[0] + coef[1] * full
        f = float(min(coef[0] / whole, PART_FIXED_MAX)) if whole > 0 else 0.0
        per_layer[key] = f
        fam_rows.setdefault(rs[0]["family"], []).append((full, f, float(t[c == full][0])))
    per_family = {}
    for fam, rs in fam_rows.items():
        if len(rs) < min_layers:
            continue
        x = 1.0 / np.array([r[0] for r in rs])
        f = np.array([r[1] for r in rs])
        w = np.array([r[2] for r in rs])
        per_family[fam] = float(np.sum(w * x * f) / np.sum(w * x * x))
    return per_layer, per_family, float(np.median(errors)) if errors else float("nan")
