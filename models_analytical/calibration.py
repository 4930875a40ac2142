"""Fitting model coefficients to measurements (the thesis's "tuning", section 4.3).

Every fit returns a frozen result with named fields and its ``provenance`` (plain figures for
the calibration file: errors, what it was fitted on); a result that becomes coefficients has
``apply(type_coefficients)``, the same coefficients with the fitted fields replaced. Design
matrices are built from named columns (a dict of column name -> values) and read back by name.

- layers, from profiled and micro-benchmarked times: in :mod:`models_analytical.layer_fits`;
- sub-models timed alone (:class:`SubModelTiming`): :func:`fit_submodel_costs`;
- mappings measured under the runtime beside the model that predicts them
  (:class:`MeasuredRun`): :func:`fit_memory`, :func:`fit_shared_host`, :func:`fit_cuts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
from scipy.optimize import minimize
from sklearn.linear_model import LinearRegression

from dse.mapping import Mappings
from models_analytical.coefficients import Memory, TypeCoefficients
from models_analytical.model import AnalyticalModel


def fit_nonnegative(features: np.ndarray, target: np.ndarray, relative: bool = True) -> np.ndarray:
    """Non-negative least squares ``features @ x ~ target`` (the solver under every fit).

    With ``relative`` the residuals are divided by the target, so a 5 % miss on a small
    network weighs as much as on a large one.
    """
    a = np.asarray(features, dtype=np.float64)
    b = np.asarray(target, dtype=np.float64)
    if relative:
        a, b = a / b[:, None], np.ones_like(b)
    reg = LinearRegression(fit_intercept=False, positive=True).fit(a, b)
    return reg.coef_


def fit_columns(
    columns: dict[str, np.ndarray], target: np.ndarray, relative: bool = True
) -> tuple[dict[str, float], np.ndarray]:
    """:func:`fit_nonnegative` on the matrix whose columns are ``columns`` (in their order):
    each column's coefficient by its name, and the fitted values (the matrix times them)."""
    a = np.column_stack(list(columns.values()))
    x = fit_nonnegative(a, target, relative)
    return dict(zip(columns, (float(c) for c in x), strict=True)), a @ x


# ---- sub-models timed alone --------------------------------------------------------------------


@dataclass(frozen=True)
class SubModelTiming:
    """One sub-model timed alone (:mod:`dse.calibrate.submodels`): the model's compute of its
    layers (``compute_s``) and of its split parts (``split_s``), the bytes it takes in and
    gives out, its median time alone, and the process's speed against the model's layers."""

    net: str
    mapping: int
    device: int
    compute_s: float
    split_s: float
    in_bytes: float
    out_bytes: float
    alone_s: float
    speed: float


@dataclass(frozen=True)
class SubModelCosts:
    """What running work as sub-models costs on a device beyond its layers."""

    segment_run_s: float
    segment_in_per_byte_s: float
    segment_out_per_byte_s: float
    split_work_factor: float
    provenance: dict[str, Any] = field(compare=False)

    def scaled(self, ratio: float) -> SubModelCosts:
        """These costs on a device ``ratio`` times slower (the times; the split factor, a
        ratio itself, stays)."""
        return replace(
            self,
            segment_run_s=self.segment_run_s * ratio,
            segment_in_per_byte_s=self.segment_in_per_byte_s * ratio,
            segment_out_per_byte_s=self.segment_out_per_byte_s * ratio,
        )

    def apply(self, k: TypeCoefficients) -> TypeCoefficients:
        return replace(
            k,
            segment_run_s=self.segment_run_s,
            segment_in_per_byte_s=self.segment_in_per_byte_s,
            segment_out_per_byte_s=self.segment_out_per_byte_s,
            split_work_factor=self.split_work_factor,
        )


def fit_submodel_costs(samples: Sequence[SubModelTiming]) -> SubModelCosts:
    """``alone = speed x compute + run + in x bytes in + out x bytes out + (split - 1) x speed
    x split`` over every sample: non-negative ``run`` (s), ``in``, ``out`` (s/B) and ``split``
    (>= 1), in seconds (a large sub-model weighs more); the provenance has, per network and
    mapping, each device's sub-models alone against the model's compute before and after them
    (ms)."""
    columns = {
        "run": np.ones(len(samples)),
        "in_bytes": np.array([r.in_bytes for r in samples]),
        "out_bytes": np.array([r.out_bytes for r in samples]),
        "split": np.array([r.speed * r.split_s for r in samples]),
    }
    y = np.array([r.alone_s - r.speed * r.compute_s for r in samples])
    # columns of one size for the solver
    scale = {k: max(float(np.abs(v).max()), 1e-30) for k, v in columns.items()}
    scaled, _ = fit_columns({k: v / scale[k] for k, v in columns.items()}, y, relative=False)
    coef = {k: scaled[k] / scale[k] for k in columns}
    extra = np.column_stack(list(columns.values())) @ np.array(list(coef.values()))
    totals: dict[str, list[float]] = {}
    for r, e in zip(samples, extra, strict=True):
        key = f"{r.net}/{r.mapping}/device{r.device}"
        t = totals.setdefault(key, [0.0, 0.0, 0.0])
        t[0] += r.alone_s
        t[1] += r.speed * r.compute_s
        t[2] += r.speed * r.compute_s + e
    err_before = [b / m - 1.0 for m, b, _ in totals.values()]
    err_after = [f / m - 1.0 for m, _, f in totals.values()]
    return SubModelCosts(
        segment_run_s=coef["run"],
        segment_in_per_byte_s=coef["in_bytes"],
        segment_out_per_byte_s=coef["out_bytes"],
        split_work_factor=1.0 + coef["split"],
        provenance={
            "sub_models": len(samples),
            "device_totals_alone_model_fitted_ms": {
                k: [round(x * 1e3, 3) for x in v] for k, v in totals.items()
            },
            "median_abs_error_before": round(float(np.median(np.abs(err_before))), 4),
            "median_abs_error_after": round(float(np.median(np.abs(err_after))), 4),
        },
    )


# ---- mappings measured under the runtime -------------------------------------------------------


@dataclass(frozen=True)
class RankMeasurement:
    """What one rank of a measured mapping reported."""

    device: int  # its device's index in the platform
    compute_s: float | None  # median compute per inference
    running_mb: float | None  # peak RSS while running (None: not read)
    loading_mb: float | None  # peak RSS while loading


@dataclass(frozen=True)
class MeasuredRun:
    """One mapping measured under the runtime, beside the model that predicts it."""

    net: str
    label: str  # which of the calibration's mappings
    model: AnalyticalModel
    mapping: Mappings
    latency_ms: float  # measured (the machine's drift taken out where it was probed)
    ranks: tuple[RankMeasurement, ...]

    @property
    def name(self) -> str:
        return f"{self.net}/{self.label}"


@dataclass(frozen=True)
class MemoryFit(Memory):
    """Peak RSS while running = bias + coefficient x live activations + held x the buffers the
    runtime keeps + weights[class] x the rank's weights of that class + per segment x
    sub-models + per layer x layers (or parts) it runs; while loading = bias + loading[class] x
    weights (MB). ``held`` and ``empty_mb`` are None where no rank measured them (the model's
    fallback then applies). Its figures are the coefficients' :class:`Memory`'s."""

    provenance: dict[str, Any] = field(default_factory=dict, compare=False)

    def apply(self, k: TypeCoefficients) -> TypeCoefficients:
        return replace(k, memory=Memory(**{f.name: getattr(self, f.name) for f in fields(Memory)}))


def memory_rows(runs: Sequence[MeasuredRun]) -> tuple[list[dict[str, float]], list[float], list]:
    """Two rows per rank that read its peak RSS (running, loading) as named terms of the
    model's memory (:meth:`AnalyticalModel.memory_terms`; a term a row lacks is 0), their
    measured MB, and their names. ``bias`` counts for a rank that runs sub-models, ``empty``
    for one that runs none (no onnxruntime session is ever created there)."""
    rows: list[dict[str, float]] = []
    target: list[float] = []
    names: list[str] = []
    for r in runs:
        terms = {k: v[0] for k, v in r.model.memory_terms(r.mapping).items()}
        w = terms["weights_mb"]  # [D, class]
        for rank in r.ranks:
            if rank.running_mb is None or rank.loading_mb is None:
                continue
            d = rank.device
            runs_any = float(terms["parts"][d] > 0)
            bias = {"bias": runs_any, "empty": 1.0 - runs_any}
            rows.append(
                {
                    **bias,
                    "activations": max(terms["peak_mb"][d] - w[d].sum(), 0.0),
                    "weights_conv": w[d, 0],
                    "weights_other": w[d, 1],
                    "segments": terms["segments"][d],
                    "layers": terms["parts"][d],
                    "held": terms["held_mb"][d],
                }
            )
            target.append(rank.running_mb)
            rows.append({**bias, "loading_conv": w[d, 0], "loading_other": w[d, 1]})
            target.append(rank.loading_mb)
            device = r.model.platform.devices[d].name
            names += [f"{r.name}/{device}/{x}" for x in ("run", "load")]
    return rows, target, names


#: The memory fit's columns, in the solver's order.
MEMORY_COLUMNS = (
    "bias",
    "activations",
    "weights_conv",
    "weights_other",
    "segments",
    "loading_conv",
    "loading_other",
    "layers",
    "held",
    "empty",
)


def fit_memory(runs: Sequence[MeasuredRun]) -> MemoryFit:
    """:class:`MemoryFit` over every rank of ``runs`` that read its peak RSS (non-negative,
    relative residuals)."""
    rows, target, names = memory_rows(runs)
    columns = {c: np.array([row.get(c, 0.0) for row in rows]) for c in MEMORY_COLUMNS}
    y = np.array(target)
    coef, fitted = fit_columns(columns, y, relative=True)
    err = np.abs(fitted - y) / y
    return MemoryFit(
        bias_mb=coef["bias"],
        coefficient=max(coef["activations"], 1e-6),
        per_layer_mb=coef["layers"],
        weights={"conv": coef["weights_conv"], "other": coef["weights_other"]},
        per_segment_mb=coef["segments"],
        loading={"conv": coef["loading_conv"], "other": coef["loading_other"]},
        # a term no rank measured is left to the model's fallback (None), not fitted to 0:
        # held buffers then count like other tensors, an empty rank like any other
        held=coef["held"] if columns["held"].any() else None,
        empty_mb=coef["empty"] if columns["empty"].any() else None,
        provenance={
            "rows": len(y),
            "median_rel_error": round(float(np.median(err)), 4),
            "max_rel_error": round(float(err.max()), 4),
            "measured_fitted_mb": {
                n: [round(float(t), 1), round(float(f), 1)]
                for n, t, f in zip(names, y, fitted, strict=True)
            },
        },
    )


@dataclass(frozen=True)
class SharedHostFit:
    """How much slower a part runs beside a part of the same layer on another device of its
    host (the kernel's :func:`~models_analytical.schedule.parts.host_slowdown`)."""

    factor: float
    provenance: dict[str, Any] = field(compare=False)

    def apply(self, k: TypeCoefficients) -> TypeCoefficients:
        return replace(k, shared_host_factor=self.factor)


#: A rank with less work side by side than this (in the model, s) gives no estimate.
SHARED_HOST_MIN_WORK_S = 2e-3


def fit_shared_host(
    references: Sequence[MeasuredRun], runs: Sequence[MeasuredRun], types: Sequence[str]
) -> SharedHostFit:
    """The factor each rank of ``runs`` measured, the median, at least 1. A rank's work in the
    model is ``b + (factor - 1) x a``: ``b`` its work at factor 1, ``a`` the part of it that
    ran side by side with another device of its host (what the factor charges; ranks with
    ``a`` under :data:`SHARED_HOST_MIN_WORK_S` give none). Its measured compute, over the ratio
    of measured to modelled compute of its network's one-device run on a device of its type
    (``references``, measured in the same rounds; ``types``: each device's type), is its work
    at the one-device run's speed; the factor makes the model's equal to it. A rank whose
    network has no reference on its type gives none. The runs' models must have the factor
    at 1."""

    def work(r: MeasuredRun, factor: float) -> np.ndarray:
        return r.model.with_shared_host_factor(factor).evaluate(r.mapping).busy_s[0]

    base: dict[tuple[str, str], list[float]] = {}
    for r in references:
        busy = work(r, 1.0)
        for rank in r.ranks:
            if rank.compute_s is not None and busy[rank.device] > SHARED_HOST_MIN_WORK_S:
                t = types[rank.device]
                base.setdefault((r.net, t), []).append(rank.compute_s / busy[rank.device])
    found: dict[str, list[float]] = {}
    for r in runs:
        b = work(r, 1.0)
        a = work(r, 2.0) - b
        for rank in r.ranks:
            ref = base.get((r.net, types[rank.device]))
            if ref and rank.compute_s is not None and a[rank.device] > SHARED_HOST_MIN_WORK_S:
                alone = rank.compute_s / float(np.median(ref))
                est = 1.0 + (alone - b[rank.device]) / a[rank.device]
                found.setdefault(r.net, []).append(est)
    every = [x for v in found.values() for x in v]
    factor = max(float(np.median(every)), 1.0) if every else 1.0
    return SharedHostFit(
        factor,
        {
            "factor": round(factor, 4),
            "ranks": len(every),
            "median_per_network": {n: round(float(np.median(v)), 4) for n, v in found.items()},
            "p10_p90": [round(float(x), 4) for x in np.percentile(every, [10, 90])]
            if every
            else [],
        },
    )


@dataclass(frozen=True)
class CutCosts:
    """The cost of a tensor crossing devices beyond the link's time: fixed (s), per byte
    between hosts and per byte between two devices of one host (s/B)."""

    fixed_s: float
    per_byte_s: float
    per_byte_same_host_s: float
    provenance: dict[str, Any] = field(compare=False)

    def apply(self, k: TypeCoefficients) -> TypeCoefficients:
        return replace(
            k,
            transfer_fixed_s=self.fixed_s,
            transfer_per_byte_s=self.per_byte_s,
            transfer_per_byte_same_host_s=self.per_byte_same_host_s,
        )


#: The two costs per byte :func:`fit_cuts` tells apart: between hosts (a network's sockets) and
#: between devices of one host (shared memory). One cost fitted on deployments that all cross
#: a network is small beside the network's own time per byte, so ill-determined, and charged
#: to crossings within a host as well it can be far off there (``docs/results/cluster.md``,
#: "Two costs per byte: between boards and within one").
PER_BYTE_KINDS = ("between_hosts", "same_host")


def fit_cuts(runs: Sequence[MeasuredRun]) -> CutCosts:
    """The cut costs that make the predicted latencies of ``runs`` (mappings with cuts) best
    match the measured ones (relative squared error; Nelder-Mead from nine starts); the
    sub-models' own costs are already in the models. A cost per byte of a kind no run's
    prediction depends on (:data:`PER_BYTE_KINDS`: no run crosses that way) takes the other's
    value."""
    measured = np.array([r.latency_ms / 1e3 for r in runs])

    def predict_with(fixed: float, between: float, same: float) -> np.ndarray:
        return np.array(
            [
                r.model.with_transfer_costs(fixed, between, same).evaluate(r.mapping).latency_s[0]
                for r in runs
            ]
        )

    base = predict_with(0.0, 0.0, 0.0)
    crossed = {  # does a cost per byte of this kind move any prediction?
        kind: not np.allclose(predict_with(0.0, *one), base, rtol=0, atol=1e-12)
        for kind, one in zip(PER_BYTE_KINDS, [(1e-9, 0.0), (0.0, 1e-9)], strict=True)
    }

    def unpack(theta: np.ndarray) -> tuple[float, float, float]:
        fixed, between, same = abs(theta[0]) * 1e-4, abs(theta[1]) * 1e-9, abs(theta[2]) * 1e-9
        if not crossed["between_hosts"]:
            between = same
        if not crossed["same_host"]:
            same = between
        return fixed, between, same

    def predict(theta: np.ndarray) -> np.ndarray:
        return predict_with(*unpack(theta))

    def loss(theta: np.ndarray) -> float:
        return float(np.sum((predict(theta) / measured - 1.0) ** 2))

    starts = [np.array([f, b, b]) for f in (0.0, 1.0, 5.0) for b in (0.0, 1.0, 3.0)]
    best = min((minimize(loss, s, method="Nelder-Mead") for s in starts), key=lambda r: r.fun)
    fixed, between, same = unpack(best.x)
    return CutCosts(
        fixed,
        between,
        same,
        {
            "mappings": [r.name for r in runs],
            "measured_ms": [round(x * 1e3, 3) for x in measured],
            "predicted_without_cut_costs_ms": [round(x * 1e3, 3) for x in base],
            "predicted_ms": [round(x * 1e3, 3) for x in predict(best.x)],
            # which costs per byte the runs determine; one no run crosses takes the other's
            "per_byte_crossed": crossed,
        },
    )
