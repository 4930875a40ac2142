"""Calibration's compute step for one device kind: layer times, channel block, parts' shares.

Each calibration network runs whole under onnxruntime's profiler; its kernels are mapped back
to layers (:mod:`dse.calibrate.profile`) and scaled so they add up to the whole run. A layer's
time is kept under its :func:`~models_analytical.layer_costs.layer_key` (any network with the
same layer reuses it), and a linear model per layer family is fitted for layers never
profiled. One-Conv models give the channel block; every splittable Conv and fully connected
layer alone, whole and as parts, gives the share of a layer every part pays
(:mod:`dse.calibrate.channels`). Once the deployments ran, :func:`anchor_to_runtime` brings
each network's layer times to its one-device run under the runtime.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnxruntime as ort

from dse.calibrate.channels import measure_channel_scaling, measure_part_costs
from dse.calibrate.profile import profile_model
from dse.calibrate.settings import CalibrationSettings
from dse.errors import DseError
from dse.net import load_net, zoo
from models_analytical.calibration import (
    MeasuredRun,
    fit_channel_block,
    fit_part_fixed,
    fit_regression,
)
from models_analytical.coefficients import TypeCoefficients
from models_analytical.layer_costs import family, layer_key, regression_terms

#: A network profiled with a larger whole-run spread than this is profiled once more.
CONTAMINATED = 0.15


@dataclass(frozen=True)
class ProfileSamples:
    """Every profiled layer of every network (one entry per layer, networks in order), its
    time scaled to the whole run: what the regression is fitted on."""

    net: tuple[str, ...]
    family: tuple[str, ...]
    terms: np.ndarray  # [layers, REGRESSION_TERMS]
    seconds: np.ndarray  # [layers]


@dataclass(frozen=True)
class KindCompute:
    """The compute step's result for one device kind."""

    coefficients: TypeCoefficients  # the base with the profiled and fitted compute terms
    provenance: dict[str, Any]
    samples: ProfileSamples
    whole_ms: dict[str, float]  # each network's whole run in the profiler's process


def machine_state() -> dict[str, Any]:
    """The machine's load and this process's CPU time now (kept beside each profile)."""
    return {
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cpu_s": round(time.process_time(), 2),
        "wall": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def check_kind(kind: str, platform_name: str) -> None:
    """Only cpu kinds are profiled: a gpu kind is one clear error."""
    if kind != "gpu":
        return
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise DseError(
            f"platform '{platform_name}' has gpu devices but onnxruntime has no CUDA here: "
            "run dse.calibrate on the board (with onnxruntime-gpu)"
        )
    raise DseError("profiling gpu devices is not supported yet: calibrate the cpu kinds")


def calibrate_compute(
    s: CalibrationSettings, kind: str, tick: Callable[[str], None]
) -> KindCompute:
    """Profiles, regression, channel block and parts' fixed shares for one device kind (at
    the thread count of its first device); ``tick`` after each network and step."""
    dev = next(d for d in s.platform.devices if d.kind == kind)
    check_kind(kind, s.platform.name)
    prior_model = s.base[kind]
    layer_s: dict[str, float] = {}
    fams, terms, secs, nets_of = [], [], [], []
    nets_prov = {}
    whole_ms = {}
    for name in s.nets:
        g = load_net({"name": name}).graph
        per_class = np.array([prior_model.layer[c] for c in ("conv", "fc", "elementwise")])
        prior = g.macs / (prior_model.frequency_hz * per_class.mean()) + g.output_bytes / 1e10
        path = zoo.materialize(name, s.seed)
        for attempt in range(2):
            before = machine_state()
            wall0, cpu0 = time.perf_counter(), time.process_time()
            prof = profile_model(path, g, prior, dev.threads, warmup=s.warmup, runs=s.profile_runs)
            # below 1 / threads, this process did not get its cores: other work ran beside it
            cpu_share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
            whole = np.median(prof.whole_s)
            spread = float(np.percentile(prof.whole_s, 90) - np.percentile(prof.whole_s, 10))
            spread /= whole
            if spread <= CONTAMINATED or attempt == 1:
                break
        scaled = prof.layer_s * (whole / max(prof.layer_s.sum(), 1e-12))
        for layer, t in zip(g, scaled, strict=True):
            layer_s.setdefault(layer_key(layer), float(t))
            nets_of.append(name)
            fams.append(family(layer))
            terms.append(regression_terms(layer))
            secs.append(float(t))
        whole_ms[name] = round(whole * 1e3, 3)
        nets_prov[name] = {
            "whole_ms": whole_ms[name],
            "whole_spread": round(spread, 4),
            "kernels_per_run": prof.kernels,
            "layout_kernels_attached": list(prof.unmapped),
            "profiled_again": attempt == 1,
            "cpu_over_wall": round(cpu_share, 3),
            "machine_before": before,
            "machine_after": machine_state(),
        }
        tick(f"profiled {name} ({whole * 1e3:.1f} ms)")
    samples = ProfileSamples(tuple(nets_of), tuple(fams), np.array(terms), np.array(secs))
    regression = fit_regression(samples.family, samples.terms, samples.seconds)
    rows = measure_channel_scaling(dev.threads, s.channel_repeats)
    block = fit_channel_block(
        np.array([r["channels"] for r in rows]),
        np.array([r["case"] for r in rows]),
        np.array([r["seconds"] for r in rows]),
    )
    tick(f"channel block {block.block}")
    part_rows: list[dict] = []
    seen: set[str] = set()
    for name in s.nets:
        net = load_net({"name": name})
        part_rows += measure_part_costs(net, block.block, dev.threads, s.part_repeats, seen)
        tick(f"parts of {name}")
    parts = fit_part_fixed(part_rows)
    k = replace(
        prior_model,
        layer_s=layer_s,
        regression=regression.per_family,
        channel_block=block.block,
        layer_overhead_s=0.0,
    )
    prov = {
        "threads": dev.threads,
        "profiled_networks": nets_prov,
        "channel_scaling": {**block.provenance, "rows": rows},
        "regression_families": regression.provenance["families"],
        "part_fixed": parts.provenance,
    }
    return KindCompute(parts.apply(k), prov, samples, whole_ms)


def anchor_to_runtime(
    k: TypeCoefficients, compute: KindCompute, singles: Sequence[MeasuredRun]
) -> tuple[TypeCoefficients, dict[str, float]]:
    """Scale each network's profiled layer times (``compute``) so they add up to its
    one-device run under the runtime (``singles``, their models with the sub-model costs),
    less what the model adds for running it as one sub-model: the profile runs in this
    process, the runtime adds its own costs (MPI, the rank's loop). ``k`` with those layer
    times and the regression refitted on them, and the factor per network."""
    factors = {}
    for r in singles:
        m = r.model
        overhead = m.evaluate(r.mapping).busy_s.max() * 1e3 - m.tables.t_work[0].sum() * 1e3
        overhead -= m.tables.t_fixed[0].sum() * 1e3
        factors[r.net] = (r.latency_ms - overhead) / compute.whole_ms[r.net]
    samples = compute.samples
    secs = samples.seconds * np.array([factors.get(n, 1.0) for n in samples.net])
    layer_s: dict[str, float] = {}
    for r in singles:
        for layer in r.model.graph:
            key = layer_key(layer)
            if key in k.layer_s and key not in layer_s:
                layer_s[key] = k.layer_s[key] * factors[r.net]
    anchored = replace(
        k,
        layer_s={**k.layer_s, **layer_s},
        regression=fit_regression(samples.family, samples.terms, secs).per_family,
    )
    return anchored, {n: round(f, 4) for n, f in factors.items()}
