"""A calibration's steps in order, each a typed result; the coefficients built once.

Per device kind of the platform (at the thread count of its first device):

1. **compute** (:mod:`dse.calibrate.compute`): profiled layer times, a regression per layer
   family, the channel block and the parts' fixed shares;
2. **links** (:mod:`dse.calibrate.links`): ping-pong and two-way exchanges per link class;
3. **deployments** (:mod:`dse.calibrate.deployments`): per network a few mappings run under MPI
   in interleaved rounds with a speed probe beside them;
4. **sub-models** (:mod:`dse.calibrate.submodels`): the cut mappings' sub-models timed alone
   give what running work as sub-models costs beyond its layers, and how much slower split
   layers' parts are; a device then receives by copying the data in, as the runtime's ranks
   do. Then each network's layer times are anchored to its one-device run;
5. **shared host**: the cut mappings' ranks compute slower than the model says while another
   device of their host has work (shared caches and memory bandwidth, a waiting rank polling);
6. **memory**: the ranks' peak RSS while loading and running give the memory terms;
7. **cuts**: what the cut mappings' latencies still show is charged per tensor crossing
   devices (fixed and per byte);
8. **energy** is not measured (no counter on most machines): the power figures stay those of
   the platform's file, and the file says so (:mod:`dse.calibrate.writer`).

Steps 4 and 5 concern cpu devices (the deployments run on two of them). Each step's model is
built from the coefficients so far, changed with :func:`dataclasses.replace`: nothing is read
back from a dict. Each figure's spread and the machine's load are kept in the provenance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from tqdm import tqdm

from dse.calibrate.compute import KindCompute, anchor_to_runtime, calibrate_compute
from dse.calibrate.deployments import (
    cut_costs,
    measure_deployments,
    measured,
    runs_per_calibration,
    shared_host,
)
from dse.calibrate.links import measure_links
from dse.calibrate.settings import CalibrationSettings, check_types_are_kinds
from dse.calibrate.submodels import measure_submodels
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


def total_steps(s: CalibrationSettings, kinds: list[str]) -> int:
    """Ticks of the whole calibration: per kind each network's profile and parts and the
    channel block; the links; each deployment run and each network's sub-models."""
    n = len(s.nets)
    runs = 0
    if s.deployments:
        runs = runs_per_calibration(s.platform, n) + n * ("cpu" in kinds)
    return len(kinds) * (2 * n + 1) + 1 + runs


@dataclass(frozen=True)
class Calibration:
    """The calibrated coefficients, and what each step measured and fitted."""

    coefficients: Coefficients
    provenance: dict[str, Any]
    seconds: float


def with_kind(c: Coefficients, kind: str, k: TypeCoefficients) -> Coefficients:
    return replace(c, types={**c.types, kind: k})


def calibrate(s: CalibrationSettings) -> Calibration:
    """Every step for the platform of ``s``, with its progress bar."""
    started = time.perf_counter()
    check_types_are_kinds(s.platform)
    kinds = sorted({d.kind for d in s.platform.devices})
    progress = Progress(total_steps(s, kinds))
    computed = {kind: calibrate_compute(s, kind, progress.tick) for kind in kinds}
    links = measure_links(s.platform, s.link_few_repeats, progress.tick, s.launcher)
    coefficients = Coefficients(
        {kind: c.coefficients for kind, c in computed.items()}, SOURCE, links=links.tables
    )
    kinds_prov = {kind: c.provenance for kind, c in computed.items()}
    deployed = None
    if s.deployments:
        deployed = fit_deployments(s, coefficients, computed, progress)
        coefficients = deployed.coefficients
        if deployed.runtime_over_profile is not None:
            factors = deployed.runtime_over_profile
            kinds_prov["cpu"] = {**kinds_prov["cpu"], "runtime_over_profile": factors}
    progress.close()
    prov = {
        "kinds": kinds_prov,
        "links": links.provenance,
        **(deployed.provenance if deployed else {}),
    }
    return Calibration(coefficients, prov, time.perf_counter() - started)


@dataclass(frozen=True)
class DeploymentFits:
    """Steps 3 to 7: the coefficients with every deployment fit, the fits' provenance (in
    the file's order), and each network's runtime over profile (cpu kinds only)."""

    coefficients: Coefficients
    provenance: dict[str, Any]
    runtime_over_profile: dict[str, float] | None


def fit_deployments(
    s: CalibrationSettings,
    coefficients: Coefficients,
    computed: dict[str, KindCompute],
    progress: Progress,
) -> DeploymentFits:
    """Steps 3 to 7 on ``coefficients`` (compute and links calibrated)."""
    deployments = measure_deployments(s, coefficients, progress.tick)
    reference = deployments.speed_reference(s.platform)
    if reference is not None:
        coefficients = replace(coefficients, notes={"speed_reference": reference})
    runs = deployments.runs
    prov: dict[str, Any] = {}
    factors = None
    if "cpu" in coefficients:  # the deployments run on cpu devices
        sub = measure_submodels(s, runs, coefficients, progress.tick)
        prov["sub_models"] = sub.provenance
        cpu = replace(sub.apply(coefficients["cpu"]), receive_on_device=True)
        singles = measured(
            [r for r in runs if r.label == "single"],
            s.platform,
            with_kind(coefficients, "cpu", cpu),
        )
        cpu, factors = anchor_to_runtime(cpu, computed["cpu"], singles)
        # fitted against the model without the factor (the kernel scales busy time by it)
        cpu = replace(cpu, shared_host_factor=1.0)
        shared = shared_host(
            measured(runs, s.platform, with_kind(coefficients, "cpu", cpu)), s.platform
        )
        prov["shared_host"] = shared.provenance
        coefficients = with_kind(coefficients, "cpu", shared.apply(cpu))
    fits = measured(runs, s.platform, coefficients)
    memory = fit_memory(fits)
    cuts = cut_costs(runs, fits)
    prov["memory"], prov["cuts"] = memory.provenance, cuts.provenance
    kinds = {kind: cuts.apply(memory.apply(k)) for kind, k in coefficients.types.items()}
    return DeploymentFits(replace(coefficients, types=kinds), prov, factors)
