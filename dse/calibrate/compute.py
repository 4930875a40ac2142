"""Calibration's compute step for one device type: layer times, channel block, the fixed shares
of parts and of bands.

Each calibration network runs whole under onnxruntime's profiler, on a device of the type
(:mod:`dse.calibrate.ondevice`: in this process, or as a rank inside the device's cgroups);
its kernels are mapped back to layers (:mod:`dse.calibrate.profile`) and scaled so they add
up to the whole run. A layer's time is kept under its
:func:`~models_analytical.layer_costs.layer_key` (any network with the same layer reuses it),
and a linear model per layer family is fitted for layers never profiled. One-Conv models give
the channel block; every splittable Conv and fully connected layer alone, whole and as parts,
gives the share of a layer every part pays (:mod:`dse.calibrate.channels`), and every
row-splittable Conv alone, whole and as bands of its output rows, the share of a layer every
band pays (per family: :mod:`dse.calibrate.bands`). A network whose units fail on the type's
device (its memory cap is too small for it, ...) is left out of that type's fits, with the
reason in the provenance. Once the deployments ran,
:func:`anchor_to_runtime` brings each network's layer times to its one-device run under the
runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnxruntime as ort

from dse.calibrate.ondevice import Unit, UnitFailed
from dse.calibrate.settings import CalibrationSettings, net_of, net_request
from dse.errors import DseError
from dse.net import load_net
from dse.net.fusion import cost_families
from dse.net.graph import LayerGraph
from models_analytical.calibration import MeasuredRun
from models_analytical.coefficients import Coefficients, TypeCoefficients
from models_analytical.layer_costs import layer_key, profile_ratio, regression_terms
from models_analytical.layer_fits import (
    fit_channel_block,
    fit_part_fixed,
    fit_regression,
    fit_row_fixed,
)


@dataclass(frozen=True)
class ProfileSamples:
    """Every profiled layer of every network (one entry per layer, networks in order), its
    time scaled to the whole run: what the regression is fitted on."""

    net: tuple[str, ...]
    family: tuple[str, ...]
    terms: np.ndarray  # [layers, REGRESSION_TERMS]
    seconds: np.ndarray  # [layers]


@dataclass(frozen=True)
class TypeCompute:
    """The compute step's result for one device type."""

    coefficients: TypeCoefficients  # the base with the profiled and fitted compute terms
    provenance: dict[str, Any]
    samples: ProfileSamples
    whole_ms: dict[str, float]  # each network's whole run on the type's device
    here: bool  # profiled in this process (not as a rank on the device)
    time_sliced: bool = False  # profiled on a CPU share of a core (see steady_regressions)


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


def type_device(s: CalibrationSettings, dtype: str) -> int:
    """The device a type is profiled on: the platform's first of that type."""
    return next(i for i, d in enumerate(s.platform.devices) if d.type == dtype)


def key_times(graph: Any, layer_s: Sequence[float]) -> dict[str, float]:
    """Per layer key, the mean time of the network's layers of that key (ResNet-50 has five
    of some). Where the device is a CPU share, a layer's time varies from run to run
    (:func:`dse.calibrate.profile.profile_model`): one layer standing for all of its key gave
    them all its error."""
    same: dict[str, list[float]] = {}
    for layer, t in zip(graph, layer_s, strict=True):
        same.setdefault(layer_key(layer), []).append(float(t))
    return {key: float(np.mean(times)) for key, times in same.items()}


def calibrate_compute(
    s: CalibrationSettings,
    dtype: str,
    tick: Callable[[str], None],
    run: Callable[[Unit], Unit],
    here: bool = True,
) -> TypeCompute:
    """Profiles, regression, channel block, parts' and bands' fixed shares for one device
    type (at the thread count of its first device), each unit done by ``run`` (on that
    device, or in this process: ``here``); ``tick`` after each network and step."""
    device = type_device(s, dtype)
    dev = s.platform.devices[device]
    check_kind(dev.kind, s.platform.name)
    prior_model = s.base[dtype]
    per_class = np.array([prior_model.layer[c] for c in ("conv", "fc", "elementwise")])
    prior_rate = prior_model.frequency_hz * per_class.mean()
    layer_s: dict[str, float] = {}
    ops: set[str] = set()  # of the networks profiled
    fams, terms, secs, nets_of = [], [], [], []
    nets_prov: dict[str, Any] = {}
    whole_ms: dict[str, float] = {}
    skipped: dict[str, str] = {}
    sliced = False
    for name in s.nets:
        g = net_of(s, name).graph
        request = {"step": "profile", **net_request(s, name), "seed": s.seed,
                   "threads": dev.threads,
                   "warmup": s.warmup, "runs": s.profile_runs,
                   "prior_rate": prior_rate}  # fmt: skip
        try:
            prof = run(request)
        except UnitFailed as exc:
            skipped[name] = str(exc)
            tick(f"{dtype}: {name} left out")
            continue
        sliced = sliced or bool(prof.get("time_sliced", False))
        ops.update(layer.op for layer in g)
        for key, t in key_times(g, prof["layer_s"]).items():
            layer_s.setdefault(key, t)  # the first network profiled with a key gives its time
        for layer, fam, t in zip(g, cost_families(g), prof["layer_s"], strict=True):
            nets_of.append(name)
            fams.append(fam)
            terms.append(regression_terms(layer, fam))
            secs.append(float(t))
        whole = float(np.median(prof["whole_s"]))
        whole_ms[name] = round(whole * 1e3, 3)
        nets_prov[name] = {
            "whole_ms": whole_ms[name],
            "whole_spread": round(prof["spread"], 4),
            "kernels_per_run": prof["kernels"],
            "layout_kernels_attached": prof["unmapped"],
            "profiled_again": prof["profiled_again"],
            "cpu_over_wall": round(prof["cpu_over_wall"], 3),
            "machine_before": prof["machine_before"],
            "machine_after": prof["machine_after"],
        }
        tick(f"{dtype}: profiled {name} ({whole * 1e3:.1f} ms)")
    if not whole_ms:
        first = next(iter(skipped.values()))
        raise DseError(f"type {dtype}: no network could be profiled on {dev.name}: {first}")
    samples = ProfileSamples(tuple(nets_of), tuple(fams), np.array(terms), np.array(secs))
    regression = fit_regression(samples.family, samples.terms, samples.seconds)
    rows = run({"step": "channels", "threads": dev.threads, "repeats": s.channel_repeats})["rows"]
    block = fit_channel_block(
        np.array([r["channels"] for r in rows]),
        np.array([r["case"] for r in rows]),
        np.array([r["seconds"] for r in rows]),
    )
    tick(f"{dtype}: channel block {block.block}")
    timed = {"threads": dev.threads, "repeats": s.part_repeats}
    parts_request = {"step": "parts", "block": block.block, **timed}
    parts = fit_part_fixed(timed_alone(s, dtype, parts_request, run, tick, skipped))
    bands = fit_row_fixed(timed_alone(s, dtype, {"step": "bands", **timed}, run, tick, skipped))
    k = replace(
        prior_model,
        layer_s=layer_s,
        profiled_ops=sorted(ops),
        regression=regression.per_family,
        channel_block=block.block,
        layer_overhead_s=0.0,
    )
    prov = {
        "device": dev.name,
        "where": "this process" if here else f"a rank on {dev.name} ({dev.host})",
        "threads": dev.threads,
        "time_sliced": sliced,
        "profiled_networks": nets_prov,
        **({"left_out": skipped} if skipped else {}),
        "channel_scaling": {**block.provenance, "rows": rows},
        "regression_families": regression.provenance["families"],
        "part_fixed": parts.provenance,
        "row_fixed": bands.provenance,
    }
    return TypeCompute(bands.apply(parts.apply(k)), prov, samples, whole_ms, here, sliced)


def timed_alone(
    s: CalibrationSettings,
    dtype: str,
    request: Unit,
    run: Callable[[Unit], Unit],
    tick: Callable[[str], None],
    skipped: dict[str, str],
) -> list[dict]:
    """The rows of a unit that times layers alone (``request``'s ``step``: ``parts`` or
    ``bands``) for every network, in order: each network's request is ``request`` with its
    name and the layer keys timed before it (``seen``), done by ``run``. A network left out
    of the profiles (in ``skipped``) is left out here; one whose unit fails is left out of
    these rows, with why (``skipped["NET (STEP)"]``). One ``tick`` per network."""
    step = request["step"]
    rows: list[dict] = []
    seen: list[str] = []
    for name in s.nets:
        if name in skipped:
            tick(f"{dtype}: {step} of {name} left out")
            continue
        try:
            got = run({**request, **net_request(s, name), "seen": list(seen)})["rows"]
        except UnitFailed as exc:
            skipped[f"{name} ({step})"] = str(exc)
            tick(f"{dtype}: {step} of {name} left out")
            continue
        rows += got
        seen += list(dict.fromkeys(r["key"] for r in got))
        tick(f"{dtype}: {step} of {name}")
    return rows


def anchor_to_runtime(
    k: TypeCoefficients,
    compute: TypeCompute,
    singles: Sequence[MeasuredRun],
    row: int = 0,
    fallback: dict[str, float] | None = None,
    graph_of: Callable[[str], LayerGraph] | None = None,
) -> tuple[TypeCoefficients, dict[str, float]]:
    """Scale each network's profiled layer times (``compute``) so they add up to its
    one-device run under the runtime (``singles``, their models with the sub-model costs; the
    type is row ``row`` of their tables), less what the model adds for running it as one
    sub-model, and less the image's transfer when the type's device is not the entry device:
    the profile runs alone, the runtime adds its own costs (MPI, the rank's loop). A network
    the type profiled but did not run alone takes its factor from ``fallback`` (another
    type's; its graph from ``graph_of``, default the zoo's). ``k`` with those layer times and
    the regression refitted on them, and the factor per network."""
    factors: dict[str, float] = {}
    for r in singles:
        if r.net not in compute.whole_ms:
            continue
        m = r.model
        # all the model puts in this run besides the layers: the sub-model's costs and the
        # image's transfer (counted as layer time, the image's crossing from the entry device
        # would inflate the type's factor)
        layers_ms = (m.tables.t_work[row].sum() + m.tables.t_fixed[row].sum()) * 1e3
        overhead = m.evaluate(r.mapping).latency_s[0] * 1e3 - layers_ms
        factors[r.net] = (r.latency_ms - overhead) / compute.whole_ms[r.net]
    graphs = {r.net: r.model.graph for r in singles if r.net in factors}
    for n, f in (fallback or {}).items():
        if n in compute.whole_ms and n not in factors:
            factors[n] = f
            graphs[n] = graph_of(n) if graph_of else load_net({"name": n}).graph
    samples = compute.samples
    secs = samples.seconds * np.array([factors.get(n, 1.0) for n in samples.net])
    layer_s: dict[str, float] = {}
    for net, graph in graphs.items():
        for layer in graph:
            key = layer_key(layer)
            if key in k.layer_s and key not in layer_s:
                layer_s[key] = k.layer_s[key] * factors[net]
    anchored = replace(
        k,
        layer_s={**k.layer_s, **layer_s},
        regression=fit_regression(samples.family, samples.terms, secs).per_family,
    )
    return anchored, {n: round(f, 4) for n, f in factors.items()}


def steady_regressions(
    c: Coefficients, sliced: Collection[str]
) -> tuple[Coefficients, dict[str, Any]]:
    """``c`` with each time-sliced type's regression (``sliced``: types profiled on a CPU
    share of a core) replaced by a steady type's, times the ratio of the two types' profiled
    times (:func:`~models_analytical.layer_costs.profile_ratio`, as a layer borrowed from
    another type's profile is scaled; the steady type with most layer keys in common). On a
    share, a short layer's profiled time is its full-speed time in most runs and a slice
    longer in a few: its mean is right but noisy, and a fit on relative residuals follows the
    many fast runs, so a share's own regression predicts networks held out of its fit far
    worse than a steady type's times the ratio (``docs/results/cluster.md``). The provenance
    names, per type, the steady type and the ratio; a sliced type
    with no steady type to compare keeps its own."""
    out, prov = dict(c.types), {}
    for name in sliced:
        found = [
            (compared, other)
            for other, k in c.types.items()
            if other not in sliced and (compared := profile_ratio(c[name], k)) is not None
        ]
        if not found:
            continue
        (_, ratio), other = min(found, key=lambda f: (-f[0][0], f[1]))  # as borrowed_profiles
        regression = {
            f: (a * ratio, b * ratio, m * ratio, w * ratio)
            for f, (a, b, m, w) in c[other].regression.items()
        }
        out[name] = replace(c[name], regression=regression)
        prov[name] = {"from": other, "ratio": round(ratio, 4)}
    return replace(c, types=out), prov
