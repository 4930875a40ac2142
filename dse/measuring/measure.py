"""A set of mappings measured: each deployed, all run in interleaved rounds
(:mod:`dse.measuring.rounds`, its one re-run rule), optionally with the speed probe beside them
and the machine's drift taken out of each (:mod:`dse.measuring.speed`), and the model's
prediction beside every figure, written to each deployment's ``comparison.json``.

Phase two after a search, ``dse.deploy measure=true`` and the fidelity report measure through
:func:`measure_mappings`; calibration, whose fits need the runs before there is a model to
compare them with, runs :func:`~dse.measuring.rounds.measure_interleaved` on its own sets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dse.errors import DseError
from dse.files import temporary_files
from dse.mapping import Mappings
from dse.measuring.comparison import Compared, compared, with_prediction, write_comparison
from dse.measuring.rounds import Rounds, measure_interleaved, start_rss_mb, take_out_drift
from dse.measuring.speed import Speed, beside, calibrated_speed, drift, slowdown, speed_reference
from dse.net import Net
from dse.runtime.deployment.layout import SUBMODELS
from dse.runtime.deployment.measurements import Measurement
from dse.runtime.launch.deploy import check_gpus, deploy
from dse.runtime.launch.mpiexec import Launcher
from dse.runtime.launch.probe import speed_probe
from models_analytical.model import AnalyticalModel


@dataclass(frozen=True)
class Settings:
    """How a set of mappings is measured: its ``rounds``, ``stream`` frames pushed back to back
    after each run's iterations (0: none), the speed ``probe`` beside the runs, the input's
    ``seed``, and whether the deployments ``keep`` their sub-models once measured."""

    rounds: Rounds = field(default_factory=Rounds)
    stream: int = 0
    probe: bool = False
    seed: int = 0
    keep: bool = False


@dataclass(frozen=True)
class Measured:
    """Each mapping's result, in the order given (merged rounds, drift taken out where probed,
    the prediction beside; or a failure and why), whether Ctrl-C cut the rounds short, the
    speed the runs were brought to (None unprobed), the mappings whose rounds disagreed and
    ran one round more, and a rank's median RSS before loading (the runtime's own memory)."""

    results: list[Compared]
    interrupted: bool
    speed: Speed | None
    ran_again: list[str]
    start_rss_mb: float | None


def measure_mappings(
    net: Net,
    model: AnalyticalModel,
    mappings: Mappings,
    labels: Sequence[str],
    directories: Sequence[Path],
    settings: Settings,
    tick: Callable[[], None] = lambda: None,
    launcher: Launcher | None = None,
    on_result: Callable[[int, Compared], None] | None = None,
) -> Measured:
    """Deploy mapping ``i`` of ``mappings`` (named ``labels[i]``) into ``directories[i]``, run
    them all (:func:`~dse.measuring.rounds.measure_interleaved`) with ``launcher`` (default: on
    the platform's hosts by name), and write each one's ``comparison.json``. With
    ``settings.probe``, each run is brought to the machine's speed at calibration by the
    model's slowdown of its mapping. A mapping that cannot be deployed or run is a failure
    with its reason; the others go on. ``tick`` after each deployment and each run;
    ``on_result(i, result)`` once mapping ``i``'s result is final (at once after its run when
    there is one round and no probe, else after every round). Sub-models are removed at the
    end unless ``settings.keep``, or at the next start where this process is killed."""
    platform = model.platform
    results: dict[int, Compared] = {}
    deployed: list[int] = []
    with ExitStack() as temporary:
        for p, d in enumerate(directories):
            if not settings.keep:
                temporary.enter_context(temporary_files(d, SUBMODELS))
            try:
                check_gpus(platform, mappings.take(p))
                deploy(
                    net, platform, mappings.take(p), d, settings.seed, settings.rounds.warmup,
                    settings.rounds.iterations, settings.stream, launcher,
                )  # fmt: skip
                deployed.append(p)
            except DseError as exc:
                results[p] = compared(Measurement.failed(str(exc)))
                _final(results, p, on_result)
            tick()
        probe = None
        if settings.probe and deployed:
            probe = speed_probe(directories[deployed[0]], platform, launcher)
        reference = speed_reference(model, net) if probe is not None else None
        level = None
        if probe is not None and reference is None:  # held out of calibration
            level = calibrated_speed(model, net, probe, settings.seed)

        def finish(i: int, merged: Measurement, speed: Speed | None) -> None:
            p = deployed[i]
            if merged.ok and speed is not None:
                one = mappings.take(p)
                merged = take_out_drift(merged, speed.reference_ms, slowdown(model, one))
            result = with_prediction(merged, model, mappings.take(p))
            write_comparison(directories[p], result)
            results[p] = result
            _final(results, p, on_result)

        at_once = settings.rounds.rounds == 1 and probe is None

        def ran(_round: int, i: int, result: Measurement) -> None:
            tick()
            if at_once:  # its one run is its result (one round cannot disagree)
                finish(i, result, None)

        merged, interrupted = measure_interleaved(
            [directories[p] for p in deployed],
            settings.rounds,
            np.random.default_rng(settings.seed),
            ran,
            probe if level is None or probe is None else beside(probe, level),
            launcher,
        )
        probes = [x for r in merged if r.latency_ms for x in r.latency_ms.rounds_probe_ms]
        speed = None
        if probes:
            speed = drift(float(np.median(probes)), reference, level)
        for i, result in enumerate(merged):
            if deployed[i] not in results:
                finish(i, result, speed)
    ordered = [results[p] for p in range(len(directories))]
    again = [
        label
        for label, r in zip(labels, ordered, strict=True)
        if r.latency_ms is not None and len(r.latency_ms.rounds_ms) > settings.rounds.rounds
    ]
    return Measured(ordered, interrupted, speed, again, start_rss_mb(merged))


def _final(
    results: dict[int, Compared], p: int, on_result: Callable[[int, Compared], None] | None
) -> None:
    if on_result is not None:
        on_result(p, results[p])


def measure_one(
    net: Net,
    model: AnalyticalModel,
    mapping: Mappings,
    out: Path,
    settings: Settings,
    launcher: Launcher | None = None,
) -> Compared:
    """Mapping 0 of ``mapping`` deployed into ``out`` and measured (:func:`measure_mappings` of
    one, its sub-models kept); Ctrl-C during its rounds raises KeyboardInterrupt."""
    one = Settings(settings.rounds, settings.stream, settings.probe, settings.seed, keep=True)
    measured = measure_mappings(
        net, model, mapping.take([0]), ["deployment"], [Path(out)], one, launcher=launcher
    )
    if measured.interrupted:
        raise KeyboardInterrupt
    return measured.results[0]
