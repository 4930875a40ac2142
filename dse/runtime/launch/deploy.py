"""Deploy one mapping, run it under MPI and put the model's prediction beside each figure: the
library calls ``dse.deploy``, phase two, calibration and the fidelity report share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort

from dse.config import ITERATIONS, TIMEOUT_S, WARMUP
from dse.errors import DseError
from dse.files import can_write
from dse.mapping import Mappings
from dse.net import Net, zoo
from dse.platform import Platform
from dse.runtime.comparison import Compared, with_prediction, write_comparison
from dse.runtime.equivalence import reference_outputs
from dse.runtime.launch import launch
from dse.runtime.measurements import (
    Measurement,
    disagree,
    failed,
    merge_runs,
)
from dse.runtime.mpirun import Launcher, check_directory, mpiexec_path
from dse.runtime.package import check_existing, write_deployment
from dse.runtime.partition import Deployment, partition
from dse.runtime.plan import Plan, Reference, RunSettings
from models_analytical.model import AnalyticalModel


def reference(net: Net, seed: int) -> Reference:
    """Where the whole model is (the equivalence check's reference, the speed probe's work)."""
    path = net.path if net.path is not None else zoo.materialize(net.name, seed)
    shape = net.input_shape
    if shape is not None and not isinstance(shape, list | dict | str | int | float):
        shape = list(shape) if not hasattr(shape, "items") else dict(shape)
    return Reference(str(path), shape)


def check_gpus(platform: Platform, mapping: Mappings) -> None:
    """A gpu device that mapping 0 uses needs CUDA here (one line otherwise)."""
    used = set(mapping.device[0][mapping.device[0] >= 0].tolist())
    used |= set(np.flatnonzero(mapping.sizes[0].sum(axis=0) > 0).tolist())
    gpus = [dev.name for d, dev in enumerate(platform.devices) if d in used and dev.kind == "gpu"]
    if gpus and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise DseError(
            f"device {gpus[0]} is a gpu but onnxruntime has no CUDA execution provider here: "
            "measure on the boards, or install onnxruntime-gpu"
        )


def deploy(
    net: Net,
    platform: Platform,
    mapping: Mappings,
    out: Path,
    seed: int = 0,
    warmup: int = WARMUP,
    iterations: int = ITERATIONS,
    stream: int = 0,
    launcher: Launcher | None = None,
) -> Plan:
    """Partition mapping 0 of ``mapping`` and write its deployment directory, with the whole
    model's outputs on the plan's input for the ranks to check theirs against; its plan."""
    check_directory(out)
    check_existing(out, net.fingerprint, mapping.ident(0))
    # before the work: a place that cannot be written, or a disk without room for the weights
    can_write(Path(out).expanduser(), "out", int(net.graph.weight_bytes.sum()) + 2**20)
    dep: Deployment = partition(net, mapping, platform, seed=seed)
    dep.plan.reference = reference(net, seed)
    names = [o.name for o in dep.plan.outputs]
    dep.expected = reference_outputs(dep.plan, Path(dep.plan.reference.path), names)
    settings = RunSettings(warmup, iterations, stream)
    write_deployment(dep, platform, out, settings, launcher)
    return dep.plan


def deploy_and_measure(
    net: Net,
    platform: Platform,
    model: AnalyticalModel | None,
    mapping: Mappings,
    out: Path,
    seed: int = 0,
    warmup: int = WARMUP,
    iterations: int = ITERATIONS,
    timeout_s: float = TIMEOUT_S,
    stream: int = 0,
    launcher: Launcher | None = None,
) -> Compared | Measurement:
    """Deploy, run under mpiexec (its rank 0 writes ``measurements.json``) and, with a
    ``model``, write ``comparison.json``: the measurement with the prediction beside each
    figure. A failed run comes back (and is compared) as ``{"status": "failed", "reason"}``."""
    check_gpus(platform, mapping)
    mpiexec_path()  # one line before anything is written when MPI is missing
    deploy(net, platform, mapping, out, seed, warmup, iterations, stream, launcher)
    result = launch(Path(out), timeout_s, warmup, iterations, launcher=launcher)
    if model is None:
        return result
    compared = with_prediction(result, model, mapping)
    write_comparison(out, compared)
    return compared


def measure_interleaved(
    directories: list[Path],
    rounds: int,
    warmup: int,
    iterations: int,
    timeout_s: float,
    rng: np.random.Generator,
    on_run: Callable[[int, int], None] | None = None,
    probe: Callable[[], float] | None = None,
    launcher: Launcher | None = None,
    again_above: float | None = None,
) -> tuple[list[Measurement], bool]:
    """Run every deployment ``rounds`` times, each round in a new random order; their merged
    measurements (:func:`merge_runs`) in the order given, and whether Ctrl-C cut the rounds
    short (then each merges the runs it had; one never run is failed, "interrupted"). A
    deployment that failed is not run again. ``on_run(round, index)`` follows each run.
    ``probe`` (:class:`dse.runtime.probe.SpeedProbe`) is timed before the first run and after
    each one: a run's ``probe_ms`` holds the probes on either side of it. ``launcher``: how
    the ranks start (default: on the platform's hosts by name). ``again_above``: each
    deployment whose rounds then disagree (:func:`disagree`) runs one round more, after all
    the others' (round number ``rounds``): a slow spell that hit one of two rounds is
    outvoted by the median of three."""
    runs: list[list[Measurement]] = [[] for _ in directories]
    interrupted = False
    last = None

    def run(rnd: int, i: int) -> None:
        nonlocal last
        try:
            result = launch(directories[i], timeout_s, warmup, iterations, launcher=launcher)
        except DseError as exc:  # a deployment that cannot run: failed, the others go on
            result = failed(str(exc))
        runs[i].append(result)  # kept even if Ctrl-C comes during the probe after it
        if probe is not None:
            now = probe()
            result["probe_ms"] = [round(last, 4), round(now, 4)]
            last = now
        if on_run is not None:
            on_run(rnd, i)

    try:
        last = probe() if probe is not None else None
        for rnd in range(rounds):
            for i in rng.permutation(len(directories)).tolist():
                if not runs[i] or runs[i][-1].get("status") == "ok":
                    run(rnd, i)
        if again_above is not None:
            for i in rng.permutation(len(directories)).tolist():
                if disagree(merge_runs(runs[i]), again_above):
                    run(rounds, i)
    except KeyboardInterrupt:
        interrupted = True
    merged = [merge_runs(r) if r else failed("interrupted before it ran") for r in runs]
    return merged, interrupted
