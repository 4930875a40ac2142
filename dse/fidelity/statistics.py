"""The fidelity report's figures: errors and rank correlations of predicted against measured,
and how well the measurements agree with themselves (noise floor, rounds, repeatability)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
from scipy.stats import kendalltau, spearmanr

from dse.fidelity.choose import KINDS
from dse.measuring.comparison import Compared, Figure
from dse.runtime.deployment.measurements import Latency, Measurement

WITHIN = 10.0  # %
#: (predicted, measured, kind of mapping)
Point = tuple[float, float, str]


@dataclass(frozen=True)
class KindError:
    """The latency error of one kind of mapping: how many, mean signed error (bias), MAPE, %."""

    n: int
    bias_pct: float
    mape_pct: float


@dataclass(frozen=True)
class Agreement:
    """Predicted against measured: MAPE (%), share of points within +-10 % (%), Spearman and
    Kendall rank correlation (None where they cannot be computed), by kind of mapping where
    judged so, and whether the machine's drift was taken out of the measured figures."""

    n: int
    mape_pct: float | None
    within_10_pct: float | None
    spearman: float | None
    kendall: float | None
    by_kind: dict[str, KindError] = field(default_factory=dict)
    drift_taken_out: bool | None = None


@dataclass(frozen=True)
class Repeatability:
    """How well the measurements agree with themselves (:func:`repeatability`)."""

    spearman_round_vs_round: float | None
    round_within_10_pct: float


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def stats(predicted: Any, measured: Any) -> Agreement:
    """MAPE (%), share of points within +-10 % (%), Spearman and Kendall rank correlation."""
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    err = np.abs(p - m) / m * 100.0
    ok = len(p) > 2 and np.ptp(p) > 0 and np.ptp(m) > 0
    return Agreement(
        n=int(len(p)),
        mape_pct=_finite(err.mean()) if len(p) else None,
        within_10_pct=float((err <= WITHIN).mean() * 100.0) if len(p) else None,
        spearman=_finite(spearmanr(p, m).statistic) if ok else None,
        kendall=_finite(kendalltau(p, m).statistic) if ok else None,
    )


@dataclass(frozen=True)
class Points:
    """(predicted, measured, kind) per measured mapping: latency and the pipelined period (where
    streamed), each also with the machine's drift taken out where every one was probed (else
    empty), and memory per device used."""

    latency: list[Point]
    latency_adjusted: list[Point]
    memory: list[Point]
    period: list[Point]
    period_adjusted: list[Point]

    def of(self, name: str, adjusted: bool = False) -> list[Point]:
        """The points of ``name`` (latency, memory, period), drift taken out if ``adjusted``."""
        return getattr(self, f"{name}_adjusted" if adjusted else name)


def points(results: Sequence[Compared], kinds: list[str]) -> Points:
    """The :class:`Points` of measured results, each of its kind of mapping."""
    lat, adj, mem, period, period_adj = [], [], [], [], []
    for r, kind in zip(results, kinds, strict=True):
        cmp = r.comparison
        if not r.ok or cmp is None:
            continue
        lat.append(_point(cmp.latency_ms, kind))
        if cmp.latency_adjusted_ms is not None:
            adj.append(_point(cmp.latency_adjusted_ms, kind))
        if cmp.period_ms is not None and cmp.period_ms.measured and cmp.period_ms.predicted:
            period.append(_point(cmp.period_ms, kind))
            if cmp.period_adjusted_ms is not None:
                period_adj.append(_point(cmp.period_adjusted_ms, kind))
        for device in cmp.devices.values():
            if device.memory_mb.predicted and device.memory_mb.measured:
                mem.append(_point(device.memory_mb, kind))
    return Points(
        latency=lat,
        latency_adjusted=adj if len(adj) == len(lat) else [],
        memory=mem,
        period=period,
        period_adjusted=period_adj if len(period_adj) == len(period) else [],
    )


def _point(figure: Figure, kind: str) -> Point:
    assert figure.predicted is not None and figure.measured is not None
    return figure.predicted, figure.measured, kind


def by_kind(points: list[Point]) -> dict[str, KindError]:
    """Per kind of mapping: how many, the mean signed error (bias) and MAPE of latency, %."""
    out = {}
    for kind in KINDS:
        err = [(p - m) / m * 100.0 for p, m, k in points if k == kind]
        if err:
            bias, mape = float(np.mean(err)), float(np.mean(np.abs(err)))
            out[kind] = KindError(len(err), round(bias, 2), round(mape, 2))
    return out


def _latencies(results: Sequence[Measurement]) -> list[Latency]:
    """The latency figures of every measured result."""
    return [r.latency_ms for r in results if r.latency_ms is not None]


def noise_floor(results: Sequence[Measurement]) -> float | None:
    """Median over the measured runs of half their p10-p90 latency spread (% of the median)."""
    spreads = [
        (lat.p90 - lat.p10) / 2 / lat.median * 100.0 for lat in _latencies(results) if lat.median
    ]
    return round(float(np.median(spreads)), 2) if spreads else None


def round_spread(results: Sequence[Measurement]) -> float | None:
    """Median over the mappings of (max - min) / median of their rounds' medians, %."""
    spreads = [
        lat.round_spread * 100.0 for lat in _latencies(results) if lat.round_spread is not None
    ]
    return round(float(np.median(spreads)), 2) if spreads else None


def repeatability(results: Sequence[Measurement], adjusted: bool = False) -> Repeatability | None:
    """How well the measurements agree with themselves, the finest a model can be checked:
    the Spearman correlation of one round's latencies with another's over the mappings
    (median over pairs of rounds), and the share of (mapping, round) whose round median lies
    within ±10 % of the median of that mapping's other rounds, %. ``adjusted``: the rounds
    with the machine's drift taken out (``latency_ms.drift``). A mapping without rounds (it
    failed) is left out. None with fewer than 2 rounds or 3 mappings."""
    every = [
        (lat.drift.rounds_adjusted_ms if lat.drift is not None else [])
        if adjusted
        else lat.rounds_ms
        for lat in _latencies(results)
    ]
    rounds = [r for r in every if r]
    n = min((len(r) for r in rounds), default=0)
    if n < 2 or len(rounds) < 3:
        return None
    r = np.array([x[:n] for x in rounds], dtype=np.float64)  # [mappings, rounds]
    pairs = [spearmanr(r[:, i], r[:, j]).statistic for i, j in combinations(range(n), 2)]
    within = [
        np.abs(r[:, i] / np.median(np.delete(r, i, axis=1), axis=1) - 1.0) <= 0.10 for i in range(n)
    ]
    spearman = _finite(float(np.median(pairs)))
    return Repeatability(
        None if spearman is None else round(spearman, 3),
        round(float(np.mean(within)) * 100.0, 1),
    )
