"""A calibration's steps in order, each a typed result; the coefficients built once.

Per device type of the platform (on its first device, at that device's thread count):

1. **compute** (:mod:`dse.calibrate.compute`): profiled layer times, a regression per layer
   family, the channel block and the fixed shares of parts and of bands (layers split by
   channels and by rows), measured on a device of the type
   (:mod:`dse.calibrate.ondevice`: in this process on ``localhost``, as a rank inside the
   device's cgroups on an emulated cluster, over ssh on real boards);
2. **links** (:mod:`dse.calibrate.links`): ping-pong and two-way exchanges per link class;
3. **deployments** (:mod:`dse.calibrate.deployments`): per network a few mappings run under MPI
   in interleaved rounds with a speed probe beside them, and the network alone on every
   other type's device;
4. **sub-models** (:mod:`dse.calibrate.submodels`): the cut mappings' sub-models timed alone
   on the deployments' first device give what running work as sub-models costs beyond its
   layers, and how much slower split layers' parts are; another type takes those times
   scaled by its speed against that device's type (their whole networks as profiled). A
   device then receives by copying the data in, as the runtime's ranks do. Then each
   type's layer times are anchored to its networks' one-device runs (a network not run
   alone on the type takes the deployments' first type's factor);
5. **shared host**: the cut mappings' ranks compute slower than the model says while another
   device of their host has work (shared caches and memory bandwidth, a waiting rank polling);
6. **memory**: the ranks' peak RSS while loading and running give the memory terms;
7. **cuts**: what the cut mappings' latencies still show is charged per tensor crossing
   devices (fixed and per byte);
8. **regressions** of types profiled on a CPU share (time-sliced) become a steady type's,
   scaled by how the two compare on the layers both profiled (:func:`steady_regressions`);
9. **energy** is not measured (no counter on most machines): the power figures stay those of
   the platform's file, and the file says so (:mod:`dse.calibrate.writer`).

Steps 4 and 5 concern cpu types (the deployments run on two cpu devices). Each step's model is
built from the coefficients so far, changed with :func:`dataclasses.replace`: nothing is read
back from a dict. Each figure's spread and the machine's load are kept in the provenance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from dse.calibrate.compute import (
    TypeCompute,
    anchor_to_runtime,
    calibrate_compute,
    steady_regressions,
    type_device,
)
from dse.calibrate.deployments import (
    SINGLE,
    cut_costs,
    cut_devices,
    measure_deployments,
    measured,
    runs_per_calibration,
    shared_host,
    single_label,
)
from dse.calibrate.journal import Journal, NoJournal
from dse.calibrate.links import link_runs, measure_links
from dse.calibrate.ondevice import unit_runner
from dse.calibrate.settings import CalibrationSettings, net_of
from dse.calibrate.submodels import measure_submodels
from dse.files import scratch
from dse.records import to_json
from models_analytical.calibration import fit_memory
from models_analytical.coefficients import Coefficients, TypeCoefficients

#: The source the intermediate coefficients carry (the final file names its own path).
SOURCE = "calibration"


class Progress:
    """A progress bar over the calibration's steps (stderr), one tick per unit of work."""

    def __init__(self, total: int) -> None:
        self.bar = tqdm(total=total, desc="calibrate", unit="step", leave=True)

    def tick(self, what: str) -> None:
        self.bar.set_postfix_str(what, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def cpu_types(s: CalibrationSettings) -> list[str]:
    """The device types of the platform's cpu devices, in platform order."""
    return list(dict.fromkeys(d.type for d in s.platform.devices if d.kind == "cpu"))


def total_steps(s: CalibrationSettings, types: list[str]) -> int:
    """Ticks of the whole calibration: per type each network's profile, parts and bands and
    the channel block; each link benchmark; each deployment run and each network's
    sub-models."""
    n = len(s.nets)
    runs = 0
    if s.deployments:
        runs = runs_per_calibration(s.platform, n) + n * bool(cpu_types(s))
    return len(types) * (3 * n + 1) + link_runs(s.platform) + runs


@dataclass(frozen=True)
class Calibration:
    """The calibrated coefficients, and what each step measured and fitted."""

    coefficients: Coefficients
    provenance: dict[str, Any]
    seconds: float


def with_type(c: Coefficients, dtype: str, k: TypeCoefficients) -> Coefficients:
    return replace(c, types={**c.types, dtype: k})


def calibrate(s: CalibrationSettings, journal: Journal | None = None) -> Calibration:
    """Every step for the platform of ``s``, with its progress bar; every measurement
    through ``journal`` (:mod:`dse.calibrate.journal`: kept as it is taken, or taken from
    it; default: none kept)."""
    started = time.perf_counter()
    journal = journal or NoJournal()
    types = s.platform.types
    progress = Progress(total_steps(s, types))
    try:  # the bar ends its line before an error's (a full disk, a device lost) is printed
        computed = {}
        for dtype in types:
            device = type_device(s, dtype)
            run, here = unit_runner(s.platform, device, s.launcher)
            run = journal.unit(f"compute on {s.platform.devices[device].name}", run)
            computed[dtype] = calibrate_compute(s, dtype, progress.tick, run, here)
        links = measure_links(
            s.platform, s.link_few_repeats, progress.tick, s.launcher, take=journal.take
        )
        coefficients = Coefficients(
            {dtype: c.coefficients for dtype, c in computed.items()}, SOURCE, links=links.tables
        )
        types_prov = {dtype: c.provenance for dtype, c in computed.items()}
        deployed = None
        if s.deployments:
            deployed = fit_deployments(s, coefficients, computed, progress, journal)
            coefficients = deployed.coefficients
            for dtype, extra in deployed.per_type.items():
                types_prov[dtype] = {**types_prov[dtype], **extra}
    finally:
        progress.close()
    sliced = [dtype for dtype, c in computed.items() if c.time_sliced]
    coefficients, steady = steady_regressions(coefficients, sliced)
    prov = {
        "types": types_prov,
        "links": links.provenance,
        **(deployed.provenance if deployed else {}),
        **({"regression_from_steady_type": steady} if steady else {}),
    }
    return Calibration(coefficients, prov, time.perf_counter() - started)


@dataclass(frozen=True)
class DeploymentFits:
    """Steps 3 to 7: the coefficients with every deployment fit, the fits' provenance (in
    the file's order), and per cpu type what its fits were (runtime over profile per network,
    the sub-model costs' scale)."""

    coefficients: Coefficients
    provenance: dict[str, Any]
    per_type: dict[str, dict[str, Any]]


def fit_deployments(
    s: CalibrationSettings,
    coefficients: Coefficients,
    computed: dict[str, TypeCompute],
    progress: Progress,
    journal: Journal,
) -> DeploymentFits:
    """Steps 3 to 7 on ``coefficients`` (compute and links calibrated); the deployments
    live in a temporary directory until the sub-models are timed."""
    with scratch("calibrate-") as tmp:  # removed even after a kill, at the next start
        return _fit_deployments(s, coefficients, computed, progress, journal, tmp)


def _fit_deployments(
    s: CalibrationSettings,
    coefficients: Coefficients,
    computed: dict[str, TypeCompute],
    progress: Progress,
    journal: Journal,
    root: Path,
) -> DeploymentFits:
    deployments = measure_deployments(s, coefficients, progress.tick, root, journal)
    references = {"speed_reference": deployments.speed_reference(s.platform),
                  "memory_reference": deployments.memory_reference()}  # fmt: skip
    notes = {k: to_json(v) for k, v in references.items() if v is not None}
    if notes:
        coefficients = replace(coefficients, notes=notes)
    runs = deployments.runs
    prov: dict[str, Any] = {}
    # the runs whose rounds disagreed and ran one round more (dse.measuring.rounds)
    again = {f"{r.net}/{r.label}": r.rounds_ms for r in runs if len(r.rounds_ms) > s.rounds}
    if again:
        prov["ran_again"] = again
    per_type: dict[str, dict[str, Any]] = {}
    cpus = cpu_types(s)
    if cpus:  # the deployments run on cpu devices
        sub, _ = measure_submodels(s, runs, coefficients, progress.tick, journal)
        prov["sub_models"] = sub.provenance
        if deployments.left_out:
            prov["left_out"] = deployments.left_out
        first = s.platform.devices[cut_devices(s.platform)[0]].type
        anchored: dict[str, TypeCoefficients] = {}
        factors: dict[str, dict[str, float]] = {}
        for dtype in [first, *(t for t in cpus if t != first)]:
            scale = sub_model_scale(computed[dtype], computed[first])
            k = replace(sub.scaled(scale).apply(coefficients[dtype]), receive_on_device=True)
            label = SINGLE if dtype == first else single_label(dtype)
            singles = measured(
                [r for r in runs if r.label == label], s.platform, with_type(coefficients, dtype, k)
            )
            k, factors[dtype] = anchor_to_runtime(
                k,
                computed[dtype],
                singles,
                coefficients.index(dtype),
                factors.get(first),
                lambda name: net_of(s, name).graph,
            )
            # fitted against the model without the factor (the kernel scales busy time by it)
            anchored[dtype] = replace(k, shared_host_factor=1.0)
            per_type[dtype] = {"runtime_over_profile": factors[dtype]}
            if dtype != first:
                per_type[dtype]["sub_model_scale"] = round(scale, 4)
        coefficients = replace(coefficients, types={**coefficients.types, **anchored})
        shared = shared_host(measured(runs, s.platform, coefficients), s.platform)
        prov["shared_host"] = shared.provenance
        coefficients = replace(
            coefficients,
            types={t: shared.apply(k) if t in cpus else k for t, k in coefficients.types.items()},
        )
    fits = measured(runs, s.platform, coefficients)
    memory = fit_memory(fits)
    cuts = cut_costs(runs, fits)
    prov["memory"], prov["cuts"] = memory.provenance, cuts.provenance
    types = {t: cuts.apply(memory.apply(k)) for t, k in coefficients.types.items()}
    return DeploymentFits(replace(coefficients, types=types), prov, per_type)


def sub_model_scale(compute: TypeCompute, first: TypeCompute) -> float:
    """How much slower a type runs than the deployments' first device's, which timed the
    sub-models: the median over networks of their whole runs as profiled (1 for that type)."""
    ratios = [
        compute.whole_ms[n] / first.whole_ms[n]
        for n in compute.whole_ms
        if n in first.whole_ms and first.whole_ms[n] > 0
    ]
    return float(np.median(ratios)) if ratios and compute is not first else 1.0
