"""Fits of layer times from profiled and micro-benchmarked layers (the compute step of
calibration, :mod:`dse.calibrate.compute`): the regression for layers never profiled
(:func:`fit_regression`), the channel block a part's time follows (:func:`fit_channel_block`),
and the fixed share of its layer a channel part (:func:`fit_part_fixed`) or a band of rows
(:func:`fit_row_fixed`) pays. Conventions as :mod:`models_analytical.calibration`'s: each fit
returns a frozen result with its ``provenance``, and ``apply`` where it becomes coefficients.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dse.net.fusion import FUSED
from dse.net.ops import memory_bound
from models_analytical.calibration import fit_columns, fit_nonnegative
from models_analytical.coefficients import RegressionRow, TypeCoefficients
from models_analytical.layer_costs import MEMORY_ROW, PART_FIXED_MAX


@dataclass(frozen=True)
class RegressionFit:
    """Per layer family, the coefficients of ``REGRESSION_TERMS`` (``any``: every layer)."""

    per_family: dict[str, RegressionRow]

    @property
    def provenance(self) -> dict[str, Any]:
        return {"families": sorted(self.per_family)}


#: A family's constant (a time per layer whatever its work) is fitted only where its layers'
#: MACs span at least this factor. Otherwise the constant and the time per MAC cannot be told
#: apart, and a constant fitted anyway extrapolates badly to layers of other sizes (a fit on
#: ResNet-50's 3x3 convolutions, all of one size: ``docs/results/cluster.md``).
CONSTANT_MIN_MAC_SPAN = 4.0


def fit_regression(
    families: Sequence[str], terms: np.ndarray, seconds: np.ndarray, min_rows: int = 3
) -> RegressionFit:
    """Per layer family, non-negative coefficients of REGRESSION_TERMS that fit the profiled
    times (relative residuals); the constant is 0 where the family's MACs do not span
    :data:`CONSTANT_MIN_MAC_SPAN`. A family with fewer than ``min_rows`` layers is left out:
    the model then uses ``any``, fitted on every layer."""
    fam = np.asarray(families)
    terms = np.asarray(terms, dtype=np.float64)
    seconds = np.asarray(seconds, dtype=np.float64)
    keep = seconds > 0
    out: dict[str, RegressionRow] = {}
    scale = np.maximum(np.abs(terms[keep]).max(axis=0), 1.0)

    def fit(rows: np.ndarray) -> RegressionRow:
        a = terms[rows] / scale
        if constant_identified(terms[rows, 1]):
            coef = fit_nonnegative(a, seconds[rows])
        else:
            coef = np.concatenate([[0.0], fit_nonnegative(a[:, 1:], seconds[rows])])
        c0, c1, c2, c3 = (float(c) for c in coef / scale)  # one per REGRESSION_TERMS
        return c0, c1, c2, c3

    for f in sorted(set(fam[keep])):
        rows = keep & (fam == f)
        if rows.sum() >= min_rows:
            out[f] = fit(rows)
    # the families bound by the bytes they move together, for one without enough rows
    moving = keep & np.array([memory_bound(f) and f != FUSED for f in fam], dtype=bool)
    if moving.sum() >= min_rows:
        out[MEMORY_ROW] = fit(moving)
    if keep.sum() >= min_rows:
        out["any"] = fit(keep)
    return RegressionFit(out)


def constant_identified(macs: np.ndarray) -> bool:
    """Whether layers of these MACs tell a constant time from a time per MAC: some have none
    (their time is all constant or bytes), or they span :data:`CONSTANT_MIN_MAC_SPAN`."""
    macs = np.asarray(macs, dtype=np.float64)
    return bool((macs <= 0).any() or macs.max() >= CONSTANT_MIN_MAC_SPAN * macs.min())


@dataclass(frozen=True)
class ChannelBlockFit:
    """The channel block a part's time follows, and how well the lines fit (median relative
    error)."""

    block: int
    median_rel_error: float

    @property
    def provenance(self) -> dict[str, Any]:
        return {"block": self.block, "median_rel_error": round(self.median_rel_error, 4)}


def fit_channel_block(
    channels: np.ndarray, case: np.ndarray, seconds: np.ndarray
) -> ChannelBlockFit:
    """The channel block that best explains part times: per case ``t = a + b * ceil(c / B) *
    B`` (least squares), B from 1, 2, 4, ..., 64."""
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
    return ChannelBlockFit(*best)


def shares_provenance(per_layer: dict[str, float], median_rel_error: float) -> dict[str, Any]:
    """What a fit of fixed shares per layer writes to the coefficients' provenance: how many
    layers, the shares' p10, p50 and p90, and the layer lines' median relative error."""
    shares = list(per_layer.values())
    return {
        "layers": len(per_layer),
        "share_p10_p50_p90": [round(float(x), 4) for x in np.percentile(shares, [10, 50, 90])]
        if shares
        else None,
        "line_median_rel_error": round(median_rel_error, 4) if shares else None,
    }


@dataclass(frozen=True)
class PartFixedFit:
    """What every part of a layer pays whatever its channels: per layer key its share of the
    layer, per family ``beta`` (share x output channels), and the per-layer lines' median
    relative error."""

    per_layer: dict[str, float]
    per_family: dict[str, float]
    median_rel_error: float

    def apply(self, k: TypeCoefficients) -> TypeCoefficients:
        return replace(k, part_fixed=self.per_layer, part_fixed_channels=self.per_family)

    @property
    def provenance(self) -> dict[str, Any]:
        return {
            **shares_provenance(self.per_layer, self.median_rel_error),
            "per_family_share_x_channels": self.per_family,
        }


def fit_part_fixed(rows: list[dict], min_layers: int = 3) -> PartFixedFit:
    """What every part of a layer pays whatever its channels, from layers timed alone as
    parts (rows ``{key, family, channels, full, seconds}``, several channel counts per key).

    Per layer, ``t(c) = a + b c`` (non-negative least squares, relative residuals) and its
    fixed share ``f = a / t(full)``, at most ``PART_FIXED_MAX``. Per family of at least
    ``min_layers`` layers, ``f ~ beta / full`` weighted by the layers' whole times (least
    squares through 0): the share of a layer never timed."""
    by_key: dict[str, list[dict]] = {}
    for r in rows:
        by_key.setdefault(r["key"], []).append(r)
    per_layer: dict[str, float] = {}
    fam_rows: dict[str, list[tuple[float, float, float]]] = {}
    errors: list[float] = []
    for key, rs in by_key.items():
        c = np.array([r["channels"] for r in rs], dtype=np.float64)
        t = np.array([r["seconds"] for r in rs], dtype=np.float64)
        full = float(rs[0]["full"])
        if len(rs) < 2 or not (c == full).any() or (t <= 0).any():
            continue
        line, fitted = fit_columns({"fixed": np.ones_like(c), "per_channel": c}, t)
        errors.extend(np.abs(fitted - t) / t)
        whole = line["fixed"] + line["per_channel"] * full
        f = float(min(line["fixed"] / whole, PART_FIXED_MAX)) if whole > 0 else 0.0
        per_layer[key] = f
        fam_rows.setdefault(rs[0]["family"], []).append((full, f, float(t[c == full][0])))
    per_family = {}
    for fam, points in fam_rows.items():
        if len(points) < min_layers:
            continue
        x = 1.0 / np.array([p[0] for p in points])
        share = np.array([p[1] for p in points])
        w = np.array([p[2] for p in points])
        per_family[fam] = float(np.sum(w * x * share) / np.sum(w * x * x))
    return PartFixedFit(per_layer, per_family, float(np.median(errors)) if errors else float("nan"))


@dataclass(frozen=True)
class RowFixedFit:
    """What every band of a layer split by rows pays whatever its rows: per layer key its
    share of the layer, per family the median of its layers' shares (the model's
    ``row_fixed``) and how many layers that is, and the per-layer lines' median relative
    error."""

    per_layer: dict[str, float]
    per_family: dict[str, float]
    family_layers: dict[str, int]
    median_rel_error: float

    def apply(self, k: TypeCoefficients) -> TypeCoefficients:
        return replace(k, row_fixed=self.per_family)

    @property
    def provenance(self) -> dict[str, Any]:
        return {
            **shares_provenance(self.per_layer, self.median_rel_error),
            "layers_per_family": self.family_layers,
            "per_family_share": self.per_family,
        }


def fit_row_fixed(rows: list[dict], min_layers: int = 3) -> RowFixedFit:
    """What every band of a layer split by rows pays whatever its rows, from layers timed
    alone as bands (rows ``{key, family, rows, full, seconds}``, several row counts per key,
    the whole layer among them: :mod:`dse.calibrate.bands`).

    Per layer, ``t(rows) = a + b rows`` (least squares) and its fixed share ``f = a /
    t(full)`` clipped to ``[0, PART_FIXED_MAX]`` (0 where the line is not positive at
    ``full``). Per family of at least ``min_layers`` such layers, the median of their shares;
    a family of fewer has no entry (its bands then cost their share of the rows)."""
    by_key: dict[str, list[dict]] = {}
    for r in rows:
        by_key.setdefault(r["key"], []).append(r)
    per_layer: dict[str, float] = {}
    shares: dict[str, list[float]] = {}
    errors: list[float] = []
    for key, rs in by_key.items():
        n = np.array([r["rows"] for r in rs], dtype=np.float64)
        t = np.array([r["seconds"] for r in rs], dtype=np.float64)
        full = float(rs[0]["full"])
        if len(np.unique(n)) < 2 or not (n == full).any() or (t <= 0).any():
            continue
        columns = {"fixed": np.ones_like(n), "per_row": n}
        a = np.column_stack(list(columns.values()))
        x = np.linalg.lstsq(a, t, rcond=None)[0]
        line = dict(zip(columns, (float(c) for c in x), strict=True))
        errors.extend(np.abs(a @ x - t) / t)
        whole = line["fixed"] + line["per_row"] * full
        f = float(np.clip(line["fixed"] / whole, 0.0, PART_FIXED_MAX)) if whole > 0 else 0.0
        per_layer[key] = f
        shares.setdefault(rs[0]["family"], []).append(f)
    per_family = {
        fam: float(np.median(fs)) for fam, fs in sorted(shares.items()) if len(fs) >= min_layers
    }
    return RowFixedFit(
        per_layer,
        per_family,
        {fam: len(fs) for fam, fs in sorted(shares.items())},
        float(np.median(errors)) if errors else float("nan"),
    )
